"""Import of the 2015 testbed's `.dump` files into the journal.

A dump is one JSON object per transfer, named `<protocol>_<file>_<YYYY-mm-dd_HH:MM:SS>.dump`,
with batch_id, protocol, file_size, utc_start_time, host_from, host_to, bytes_down,
bytes_up, bytes_total, time, stored_packets and optionally `packets`, a list of
{direction: "down"|"up", time: "HH:MM:SS.ffffff", length: int}.  The testbed summed the
tcpdump `length` of each packet (the payload length) into bytes_down/up/total, and `time`
is the last minus the first packet time.

Each dump becomes one Result(source="import") appended to the journal.  Its packets, if
any, go to a sidecar JSON-lines file next to the journal,
`<journal>.packets/<dump name>.jsonl`, one {"way", "time", "length"} object per packet,
`time` in seconds since the transfer's first packet (tcpdump printed only the time of
day, in the capture host's zone, so only differences are trustworthy).  The Result's
packets_path points at it; Figure 5 of the report reads it.

Importing is idempotent: a dump whose series, client (host_to) and start time are already
in the journal is named, counted as such and not written again; if its content differs
from the journal's copy, the output says which fields differ.  A malformed dump is
reported by name and reason and skipped; the others are imported regardless.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import datetime as dt
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from bigbinf.journal import Journal, SkippedLine
from bigbinf.result import PAYLOAD_BUCKETS, WAYS, Result, empty_histogram
from bigbinf.study.common import Progress, UsageError, check_journal, journal_read_error

NAME_RE = re.compile(r"^(?P<stem>.+)_(?P<when>\d{4}-\d{2}-\d{2}_\d{2}:\d{2}:\d{2})\.dump$")
LABEL_MAX = 64  # label values stay short and bounded: they end up in every series name
REQUIRED = ("protocol", "file_size", "host_from", "host_to", "bytes_down", "bytes_up", "time")
PACKETS_SUFFIX = ".packets"


class MalformedDump(ValueError):
    """A dump that cannot be imported; the message says why."""


@dataclass(frozen=True)
class Packet:
    way: str  # "down" (remote -> client) or "up"
    time: float  # seconds since the first packet of the transfer
    length: int  # payload bytes, as tcpdump printed them


@dataclass(frozen=True)
class Dump:
    path: Path
    result: Result  # packets_path not yet set
    packets: list[Packet] | None


@dataclass
class ImportSummary:
    imported: int = 0
    duplicates: int = 0  # already in the journal (conflicts included)
    malformed: list[tuple[Path, str]] = field(default_factory=list)
    conflicts: list[tuple[Path, list[str]]] = field(default_factory=list)  # duplicates whose content differs

    def line(self) -> str:
        differ = f" ({len(self.conflicts)} with different content, not imported)" if self.conflicts else ""
        return (
            f"import: {self.imported} imported, {self.duplicates} already in the journal{differ}, "
            f"{len(self.malformed)} malformed (skipped)"
        )


# ---------------------------------------------------------------------------------------
# Parsing


def sanitise_label(text: str, fallback: str, lower: bool = False) -> str:
    """A bounded label value: letters, digits, '.', '_', '-' only, at most LABEL_MAX chars."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip()).strip("_")
    value = value.lower() if lower else value
    return value[:LABEL_MAX] or fallback


def size_label(size: int) -> str:
    """5242880 -> '5MiB', 2540610608 -> '2.37GiB': a dataset label when the name has none."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.3g}{unit}"
        value /= 1024
    return f"{value:.3g}TiB"


def _count(record: dict[str, Any], name: str) -> int:
    """A non-negative whole number; 5242880.0 is accepted (JSON writers differ)."""
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MalformedDump(f"{name} is {value!r}, expected a number")
    if value < 0 or value != int(value):
        raise MalformedDump(f"{name} is {value!r}, expected a whole number >= 0")
    return int(value)


def _seconds(record: dict[str, Any], name: str) -> float:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise MalformedDump(f"{name} is {value!r}, expected seconds >= 0")
    return float(value)


def _text(record: dict[str, Any], name: str) -> str:
    value = record.get(name)
    if not isinstance(value, str) or not value.strip():
        raise MalformedDump(f"{name} is {value!r}, expected a non-empty string")
    return value.strip()


def parse_start(value: Any, name_when: str | None) -> float:
    """utc_start_time as UTC epoch seconds: ISO 8601 ('2015-08-21 13:00:01.123456', with or
    without 'T'/offset; naive is UTC, as the field name says) or epoch seconds.  Missing:
    the time in the file name, read as UTC too."""
    if value is None:
        if name_when is None:
            raise MalformedDump("utc_start_time is missing and the file name has no time")
        value = name_when
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if not isinstance(value, str):
        raise MalformedDump(f"utc_start_time is {value!r}, expected a date and time")
    text = value.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}_\d{2}:\d{2}:\d{2}", text):
        text = text.replace("_", " ")
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise MalformedDump(f"utc_start_time {value!r} is not a date and time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def _time_of_day(value: Any, index: int) -> float:
    if not isinstance(value, str):
        raise MalformedDump(f"packets[{index}].time is {value!r}, expected 'HH:MM:SS.ffffff'")
    match = re.fullmatch(r"(\d{1,2}):(\d{2}):(\d{2}(?:\.\d+)?)", value.strip())
    if not match:
        raise MalformedDump(f"packets[{index}].time {value!r} is not 'HH:MM:SS.ffffff'")
    hours, minutes, seconds = int(match.group(1)), int(match.group(2)), float(match.group(3))
    if hours > 23 or minutes > 59 or seconds >= 61:
        raise MalformedDump(f"packets[{index}].time {value!r} is not a time of day")
    return hours * 3600 + minutes * 60 + seconds


def parse_packets(raw: Any) -> list[Packet]:
    """The dump's packet list, times made relative to the first packet.  A capture that
    runs past midnight wraps its time of day; such jumps back are undone."""
    if not isinstance(raw, list):
        raise MalformedDump(f"packets is {type(raw).__name__}, expected a list")
    packets: list[Packet] = []
    first: float | None = None
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise MalformedDump(f"packets[{index}] is {type(item).__name__}, expected an object")
        way = item.get("direction")
        if way not in WAYS:
            raise MalformedDump(f"packets[{index}].direction is {way!r}, expected 'down' or 'up'")
        length = item.get("length")
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise MalformedDump(f"packets[{index}].length is {length!r}, expected a whole number >= 0")
        seconds = _time_of_day(item.get("time"), index)
        first = seconds if first is None else first
        relative = seconds - first
        if relative < -43200:  # past midnight
            relative += 86400
        packets.append(Packet(way, round(relative, 6), length))
    return packets


def _names(path: Path, protocol: str) -> tuple[str | None, str | None]:
    """(file part, time part) of `<protocol>_<file>_<YYYY-mm-dd_HH:MM:SS>.dump`."""
    match = NAME_RE.match(path.name)
    if not match:
        return None, None
    stem = match.group("stem")
    # The name starts with the protocol; if it was renamed since, take everything after the first '_'.
    file_part = stem[len(protocol) + 1 :] if stem.startswith(protocol + "_") else stem.partition("_")[2]
    return (file_part or None), match.group("when")


def parse_dump(path: Path) -> Dump:
    """One dump file as a Result (and its packets); MalformedDump says why not."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MalformedDump("not UTF-8 text") from None
    except OSError as exc:
        raise MalformedDump(f"cannot read ({exc.strerror or exc})") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedDump(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    if not isinstance(record, dict):
        raise MalformedDump(f"top level is {type(record).__name__}, expected an object")
    missing = [name for name in REQUIRED if name not in record]
    if missing:
        raise MalformedDump(f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    protocol_raw = _text(record, "protocol")
    file_size, down, up = _count(record, "file_size"), _count(record, "bytes_down"), _count(record, "bytes_up")
    if "bytes_total" in record and _count(record, "bytes_total") != down + up:
        raise MalformedDump(f"bytes_total {record['bytes_total']} is not bytes_down + bytes_up ({down + up})")
    duration = _seconds(record, "time")
    host_from, host_to = _text(record, "host_from"), _text(record, "host_to")
    file_part, name_when = _names(path, protocol_raw)
    start = parse_start(record.get("utc_start_time"), name_when)
    packets = parse_packets(record["packets"]) if record.get("packets") is not None else None
    batch = record.get("batch_id", "")
    try:
        result = Result(
            protocol=sanitise_label(protocol_raw, "unknown", lower=True),
            remote=sanitise_label(host_from, "unknown", lower=True),
            dataset=sanitise_label(file_part, size_label(file_size)) if file_part else size_label(file_size),
            direction="download",  # the testbed always copied from host_from to host_to
            start_timestamp=start,
            outcome="ok",
            duration_seconds=duration,
            file_bytes=file_size,
            files=1,
            verified=False,
            wire_bytes_down=down,
            wire_bytes_up=up,
            round_id="" if batch is None else str(batch),
            remote_address=host_from,
            client_address=host_to,
            source="import",
            **_packet_fields(packets),
        )
    except ValueError as exc:  # Result's own checks: whatever slipped past the ones above
        raise MalformedDump(str(exc)) from None
    return Dump(path, result, packets or None)


def _packet_fields(packets: list[Packet] | None) -> dict[str, Any]:
    """Counts, payload totals and payload-size histogram from the packet list, if kept."""
    if not packets:
        return {}
    histogram = empty_histogram()
    fields: dict[str, Any] = {"payload_histogram": histogram}
    for way in WAYS:
        mine = [p.length for p in packets if p.way == way]
        fields[f"packets_{way}"] = len(mine)
        fields[f"payload_bytes_{way}"] = sum(mine)
        for length in mine:
            # bucket i counts payloads <= PAYLOAD_BUCKETS[i] (and above the one before)
            histogram[way][bisect.bisect_left(PAYLOAD_BUCKETS, length)] += 1
    return fields


# ---------------------------------------------------------------------------------------
# Packets sidecar


def packets_dir(journal_path: Path) -> Path:
    return journal_path.with_name(journal_path.name + PACKETS_SUFFIX)


def write_packets(path: Path, packets: Sequence[Packet]) -> None:
    """Write atomically, so a journal line never points at half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for p in packets:
            f.write(json.dumps({"way": p.way, "time": p.time, "length": p.length}, separators=(",", ":")) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_packets(path: Path) -> Iterator[Packet]:
    """The sidecar's packets.  `time` may be relative or absolute: readers subtract the first."""
    with open(path, encoding="utf-8") as f:
        for text in f:
            if text.strip():
                record = json.loads(text)
                yield Packet(str(record["way"]), float(record["time"]), int(record["length"]))


def _sidecar_path(directory: Path, dump: Path) -> Path:
    """<dump name>.jsonl, with -2, -3 ... if another dump of that name was imported."""
    base = dump.name[: -len(".dump")] if dump.name.endswith(".dump") else dump.name
    candidate, n = directory / f"{base}.jsonl", 1
    while candidate.exists():
        n += 1
        candidate = directory / f"{base}-{n}.jsonl"
    return candidate


# ---------------------------------------------------------------------------------------
# Import


def expand(paths: Iterable[str]) -> list[Path]:
    """Files as given; directories contribute their *.dump files, sorted."""
    found: list[Path] = []
    for name in paths:
        path = Path(name)
        found += sorted(path.glob("*.dump")) if path.is_dir() else [path]
    return found


Identity = tuple[Any, float, str]


def identity(result: Result) -> Identity:
    """What makes a transfer the same one: series, start time and client.  The client
    (host_to) counts because two clients pulling the same file in the same second are two
    transfers."""
    return (result.key, result.start_timestamp, result.client_address)


# Result fields -> the dump field they come from, so a difference is named as the user wrote it.
DUMP_FIELDS = {
    "file_bytes": "file_size",
    "duration_seconds": "time",
    "wire_bytes_down": "bytes_down",
    "wire_bytes_up": "bytes_up",
    "round_id": "batch_id",
    "remote_address": "host_from",
    "start_timestamp": "utc_start_time",
    "packets_down": "packets",
    "packets_up": "packets",
    "payload_bytes_down": "packets",
    "payload_bytes_up": "packets",
    "payload_histogram": "packets",
}


def differences(new: Result, old: Result) -> list[str]:
    """Dump fields in which a dump differs from the journal's copy of it.  packets_path is
    where the sidecar was written, not content."""
    names = [
        DUMP_FIELDS.get(f.name, f.name)
        for f in dataclasses.fields(Result)
        if f.name != "packets_path" and getattr(new, f.name) != getattr(old, f.name)
    ]
    return list(dict.fromkeys(names))


def import_dumps(paths: Sequence[Path], journal_path: Path, stream: TextIO | None = None) -> ImportSummary:
    """Import the dumps; UsageError if the journal cannot be read, OSError if it cannot be written."""
    stream = stream if stream is not None else sys.stderr
    journal = Journal(journal_path)
    unreadable: list[SkippedLine] = []
    try:
        known = {identity(r): r for r in journal.read(unreadable)}
    except OSError as exc:
        raise journal_read_error(journal_path, exc) from None
    for line in unreadable:  # e.g. a torn last line; it stays, the import appends after it
        print(f"import: {line}", file=stream)
    summary = ImportSummary()
    progress = Progress("imported", "dumps", len(paths), stream=stream)
    for number, path in enumerate(paths, start=1):
        try:
            dump = parse_dump(path)
        except MalformedDump as exc:
            summary.malformed.append((path, str(exc)))
            print(f"import: skipped {path}: {exc}", file=stream)
        else:
            old = known.get(identity(dump.result))
            if old is not None:
                summary.duplicates += 1
                differ = differences(dump.result, old)
                if differ:
                    summary.conflicts.append((path, differ))
                    print(
                        f"import: {path}: already in the journal (same series, client and start time) with "
                        f"different {', '.join(differ)}; kept the journal's copy. To replace it, remove that "
                        "line from the journal and import again",
                        file=stream,
                    )
                else:
                    print(f"import: {path}: already in the journal; not imported again", file=stream)
            else:
                known[identity(dump.result)] = _store(dump, journal, journal_path)
                summary.imported += 1
        progress.update(number)
    return summary


def _store(dump: Dump, journal: Journal, journal_path: Path) -> Result:
    result = dump.result
    if dump.packets:
        sidecar = _sidecar_path(packets_dir(journal_path), dump.path)
        write_packets(sidecar, dump.packets)
        result = dataclasses.replace(result, packets_path=str(sidecar.resolve()))
    journal.append(result)
    return result


# ---------------------------------------------------------------------------------------
# CLI


def register(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    # parents: the CLI's shared flags (--log.level ...), so they also work after `import`.
    p = subparsers.add_parser(
        "import",
        parents=list(parents),
        help="import the 2015 testbed's .dump files into the journal",
        description="Read .dump JSON files of the 2015 testbed (files or directories of them) into the journal. "
        "Malformed files are reported and skipped; importing a dump twice adds nothing.",
    )
    p.add_argument("dumps", nargs="+", metavar="DUMP", help=".dump file, or a directory of them")
    p.add_argument("--journal", required=True, metavar="PATH", help="journal to append to (created if missing)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    journal_path = Path(args.journal)
    paths = expand(args.dumps)
    if not paths:
        print(f"bigbinf-exporter import: error: no .dump files in {' '.join(args.dumps)}", file=sys.stderr)
        return 2
    try:
        check_journal(journal_path, must_exist=False)  # created if missing
        summary = import_dumps(paths, journal_path)
    except UsageError as exc:
        print(f"bigbinf-exporter import: error: {exc}", file=sys.stderr)
        return exc.code
    except OSError as exc:  # reads of the journal are UsageErrors above: this is a write
        print(
            f"bigbinf-exporter import: error: cannot write {exc.filename or journal_path} "
            f"({exc.strerror or exc}); check that --journal and its directory are writable",
            file=sys.stderr,
        )
        return 1
    print(f"{summary.line()} -> {journal_path}", file=sys.stderr)
    # Not imported and worth a look: malformed dumps, and dumps that contradict the journal.
    return 1 if summary.malformed or summary.conflicts else 0
