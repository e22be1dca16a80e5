"""Import of the 2015 testbed's `.dump` files into the journal.

A dump is one JSON object per transfer, named `<protocol>_<file>_<YYYY-mm-dd_HH:MM:SS>.dump`,
with batch_id, protocol, file_size, utc_start_time, host_from, host_to, bytes_down,
bytes_up, bytes_total, time, stored_packets and optionally `packets`, a list of
{direction: "down"|"up", time: "HH:MM:SS.ffffff", length: int}.  The testbed summed the
tcpdump `length` of each packet (the payload length) into bytes_down/up/total, and `time`
is the last minus the first packet time.

The 2015 tool (wraithy/bigbinf, protocol_testbed/test.py) has habits the importer undoes:
it lists packets newest first (it pops tcpdump's output lines off the end), its `time`
subtracts wall-clock strings without dates (a transfer across midnight says 86,399.99 s),
its "ftp" is OpenSSH's sftp, and a dump without utc_start_time has only the testbed host's
local time in its file name.  See PROTOCOLS_2015, parse_packets and checked_duration.

Each dump becomes one Result(source="import") appended to the journal.  Its packets, if
any, go to a sidecar JSON-lines file next to the journal,
`<journal>.packets/<dump name>.jsonl`, one {"way", "time", "length"} object per packet,
`time` in seconds since the transfer's first packet, oldest first (tcpdump printed only
the time of day, in the capture host's zone, so only differences are trustworthy).  The Result's
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
import itertools
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bigbinf.journal import checkpoint  # noqa: F401  (registers its fold on the journal's rotations)
from bigbinf.journal.store import Journal, SkippedLine
from bigbinf.result import PAYLOAD_BUCKETS, WAYS, Result, empty_histogram
from bigbinf.study.common import Progress, check_journal, journal_read_error, parse_tz_offset
from bigbinf.usage import UsageError

NAME_RE = re.compile(r"^(?P<stem>.+)_(?P<when>\d{4}-\d{2}-\d{2}_\d{2}:\d{2}:\d{2})\.dump$")
LABEL_MAX = 64  # label values stay short and bounded: they end up in every series name
REQUIRED = ("protocol", "file_size", "host_from", "host_to", "bytes_down", "bytes_up", "time")
PACKETS_SUFFIX = ".packets"

# The 2015 testbed's protocol names -> the protocol names this product's shipped schedules
# use for the same tool, so that imported rows meet live ones in the report and dashboards.
# Its args.json ran `"ftp": "sftp %s:%s %s"`: the study's "ftp" is OpenSSH's sftp, not this
# product's ftp (curl against an FTP server); its "hpn-scp" is the hpnscp module, which the
# schedules name "hpn-scp".  --protocol-map overrides or extends this.
PROTOCOLS_2015 = {
    "scp": "scp",
    "ftp": "sftp",
    "hpn-scp": "hpn-scp",
    "gridftp": "gridftp",
    "gridftp-udt": "gridftp-udt",
}
# The 2015 tool's `time` and its packet span may differ by tcpdump's start-up and the copy's
# tail; beyond this the `time` is wrong (its date-less clock arithmetic), not imprecise.
DURATION_TOLERANCE_SECONDS = 1.0
# Capture order: tcpdump's timestamps can step back a little (packets from two CPUs); a list
# that steps this far both ways in total is not in either order.
ORDER_TOLERANCE_SECONDS = 1.0
DAY = 86400.0
STUDY_ZONE = "Africa/Johannesburg"  # where the 2015 testbed ran (UTC+2, no DST)


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
    notes: list[str] = field(default_factory=list)  # what the import corrected or assumed


@dataclass(frozen=True)
class ImportOptions:
    """What the command line says about the dumps: protocol names beyond (or instead of) the
    2015 ones, and the zone of the testbed host's clock for start times from file names."""

    protocol_map: dict[str, str] = field(default_factory=dict)
    timezone: str | None = None

    def protocol(self, name: str) -> str:
        """This product's protocol for a 2015 name; MalformedDump if neither map knows it."""
        mapped = self.protocol_map.get(name, PROTOCOLS_2015.get(name))
        if mapped is None:
            known = ", ".join(sorted({*PROTOCOLS_2015, *self.protocol_map}))
            raise MalformedDump(
                f"protocol {name!r} is not one the 2015 testbed had ({known}); say which protocol it is with "
                f"--protocol-map {name}=PROTOCOL (e.g. --protocol-map {name}=scp)"
            )
        return mapped


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


def parse_start(value: Any, name_when: str | None, timezone: str | None = None) -> float:
    """utc_start_time as UTC epoch seconds: ISO 8601 ('2015-08-21 13:00:01.123456', with or
    without 'T'/offset; naive is UTC, as the field name says) or epoch seconds.  Missing:
    the time in the file name, which test.py wrote in the testbed host's local time, so it
    is read in `timezone` and refused without one."""
    if value is None:
        if name_when is None:
            raise MalformedDump("utc_start_time is missing and the file name has no time")
        if timezone is None:
            raise MalformedDump(
                "utc_start_time is missing, and the time in the file name is the testbed host's local time: "
                f"give its zone with --timezone (the 2015 study ran in {STUDY_ZONE})"
            )
        local = dt.datetime.strptime(name_when, "%Y-%m-%d_%H:%M:%S")
        return local.replace(tzinfo=zone(timezone)).timestamp()
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


def zone(text: str) -> dt.tzinfo:
    """--timezone: a zone name (Africa/Johannesburg, UTC) or hours east of UTC (+2, +5:30)."""
    if re.fullmatch(r"\s*[+-]?\d[\d:.]*\s*", text):
        return dt.timezone(dt.timedelta(hours=parse_tz_offset(text, "--timezone")))
    try:
        return ZoneInfo(text.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(
            f"--timezone {text!r}: not a time zone; give a name like {STUDY_ZONE} or UTC, or hours east of UTC like +2"
        ) from None


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


def _step(earlier: float, later: float) -> float:
    """later - earlier for two times of day, taking the short way round midnight."""
    return (later - earlier + DAY / 2) % DAY - DAY / 2


def parse_packets(raw: Any) -> list[Packet]:
    """The dump's packet list, oldest first, times in seconds since the first packet.

    The order is read from the data: test.py pops tcpdump's lines off the end, so its lists
    are newest first, but a list from elsewhere may be oldest first.  Times of day wrap at
    midnight; steps are taken the short way round, so a capture across midnight stays
    seconds long."""
    if not isinstance(raw, list):
        raise MalformedDump(f"packets is {type(raw).__name__}, expected a list")
    entries: list[tuple[str, float, int]] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise MalformedDump(f"packets[{index}] is {type(item).__name__}, expected an object")
        way = item.get("direction")
        if way not in WAYS:
            raise MalformedDump(f"packets[{index}].direction is {way!r}, expected 'down' or 'up'")
        length = item.get("length")
        if isinstance(length, bool) or not isinstance(length, int) or length < 0:
            raise MalformedDump(f"packets[{index}].length is {length!r}, expected a whole number >= 0")
        entries.append((way, _time_of_day(item.get("time"), index), length))
    steps = [_step(a[1], b[1]) for a, b in itertools.pairwise(entries)]
    forward = sum(s for s in steps if s > 0)
    backward = -sum(s for s in steps if s < 0)
    if min(forward, backward) > ORDER_TOLERANCE_SECONDS:
        raise MalformedDump(
            f"packet times go {forward:.3f} s forwards and {backward:.3f} s backwards: "
            "expected capture order, oldest or newest first"
        )
    if backward > forward:  # newest first, as test.py wrote them
        entries.reverse()
        steps = [-s for s in reversed(steps)]
    elapsed = [0.0, *itertools.accumulate(steps)]
    return [Packet(way, round(t, 6), length) for (way, _, length), t in zip(entries, elapsed, strict=True)]


def checked_duration(time: float, packets: Sequence[Packet] | None) -> tuple[float, str]:
    """The dump's `time`, or its packet span where the two disagree by more than a second
    (the 2015 tool subtracts wall-clock strings without dates: across midnight a 5.85 s
    transfer says 86,399.99 s).  The second value says what was done, or is empty."""
    if not packets or len(packets) < 2:
        return time, ""
    span = packets[-1].time - packets[0].time
    if span <= 0 or abs(time - span) <= DURATION_TOLERANCE_SECONDS:
        return time, ""
    return span, f"time {time} s disagrees with the packet span {span:.6f} s; took the span"


def _names(path: Path, protocol: str) -> tuple[str | None, str | None]:
    """(file part, time part) of `<protocol>_<file>_<YYYY-mm-dd_HH:MM:SS>.dump`."""
    match = NAME_RE.match(path.name)
    if not match:
        return None, None
    stem = match.group("stem")
    # The name starts with the protocol; if it was renamed since, take everything after the first '_'.
    file_part = stem[len(protocol) + 1 :] if stem.startswith(protocol + "_") else stem.partition("_")[2]
    return (file_part or None), match.group("when")


def _json_error(exc: json.JSONDecodeError, text: str) -> str:
    # json's messages may end in "at" ("Unterminated string starting at"): say the place once.
    place = f"at line {exc.lineno} column {exc.colno}"
    truncated = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated")
    ends = "; the file ends early (truncated?)" if truncated else ""
    return f"not JSON ({exc.msg.removesuffix(' at')} {place}{ends})"


def parse_dump(path: Path, options: ImportOptions | None = None) -> Dump:
    """One dump file as a Result (and its packets); MalformedDump says why not."""
    options = options if options is not None else ImportOptions()
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MalformedDump("not UTF-8 text") from None
    except OSError as exc:
        raise MalformedDump(f"cannot read ({exc.strerror or exc})") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedDump(_json_error(exc, text)) from None
    if not isinstance(record, dict):
        raise MalformedDump(f"top level is {type(record).__name__}, expected an object")
    missing = [name for name in REQUIRED if name not in record]
    if missing:
        raise MalformedDump(f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    protocol_raw = _text(record, "protocol")
    protocol_2015 = sanitise_label(protocol_raw, "unknown", lower=True)
    protocol = options.protocol(protocol_2015)
    file_size, down, up = _count(record, "file_size"), _count(record, "bytes_down"), _count(record, "bytes_up")
    if "bytes_total" in record and _count(record, "bytes_total") != down + up:
        raise MalformedDump(f"bytes_total {record['bytes_total']} is not bytes_down + bytes_up ({down + up})")
    duration = _seconds(record, "time")
    host_from, host_to = _text(record, "host_from"), _text(record, "host_to")
    file_part, name_when = _names(path, protocol_raw)
    start = parse_start(record.get("utc_start_time"), name_when, options.timezone)
    notes: list[str] = []
    if record.get("utc_start_time") is None:
        notes.append(f"start time from the file name, read as {options.timezone} local time")
    packets = parse_packets(record["packets"]) if record.get("packets") is not None else None
    duration, duration_note = checked_duration(duration, packets)
    notes += [duration_note] if duration_note else []
    batch = record.get("batch_id", "")
    try:
        result = Result(
            protocol=protocol,
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
            imported_protocol=protocol_2015,
            import_note="; ".join(notes),
            **_packet_fields(packets),
        )
    except ValueError as exc:  # Result's own checks: whatever slipped past the ones above
        raise MalformedDump(str(exc)) from None
    return Dump(path, result, packets or None, notes)


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


Identity = tuple[str, str, str, str, float, str]


def identity(result: Result) -> Identity:
    """What makes a transfer the same one: series, start time and client.  The client
    (host_to) counts because two clients pulling the same file in the same second are two
    transfers.  The protocol is the 2015 name, so that a dump imported before names were
    mapped (its journal line says "ftp", not "sftp") is still found, and its difference said."""
    protocol = result.imported_protocol or result.protocol
    return (protocol, result.remote, result.dataset, result.direction, result.start_timestamp, result.client_address)


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
    "imported_protocol": "protocol",
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


def import_dumps(
    paths: Sequence[Path],
    journal_path: Path,
    stream: TextIO | None = None,
    options: ImportOptions | None = None,
) -> ImportSummary:
    """Import the dumps; UsageError if the journal cannot be read, OSError if it cannot be written."""
    stream = stream if stream is not None else sys.stderr
    options = options if options is not None else ImportOptions()
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
            dump = parse_dump(path, options)
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
                for note in dump.notes:
                    print(f"import: {path}: {note}", file=stream)
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
    p.add_argument(
        "--protocol-map",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="import dumps of protocol OLD as this product's protocol NEW (repeatable); the 2015 names "
        + ", ".join(f"{old}={new}" for old, new in PROTOCOLS_2015.items())
        + " are known",
    )
    p.add_argument(
        "--timezone",
        metavar="ZONE",
        help="zone of the testbed host's clock (e.g. Africa/Johannesburg), needed for dumps without "
        "utc_start_time: their file name has its local time",
    )
    p.set_defaults(func=run)


def parse_options(protocol_map: Sequence[str], timezone: str | None) -> ImportOptions:
    """The command line's --protocol-map and --timezone, or UsageError naming the bad one."""
    mapping: dict[str, str] = {}
    for item in protocol_map:
        old, sep, new = item.partition("=")
        old, new = old.strip().lower(), new.strip()
        if not sep or not old or not new:
            raise UsageError(f"--protocol-map {item!r}: expected OLD=NEW, e.g. --protocol-map ftp=sftp")
        if sanitise_label(new, "") != new:
            raise UsageError(
                f"--protocol-map {item!r}: {new!r} is not a protocol name (letters, digits, '.', '_', '-'; "
                f"at most {LABEL_MAX})"
            )
        mapping[sanitise_label(old, old, lower=True)] = new
    if timezone is not None:
        zone(timezone)  # a bad one is a UsageError now, not a skip per dump later
    return ImportOptions(mapping, timezone)


def run(args: argparse.Namespace) -> int:
    journal_path = Path(args.journal)
    paths = expand(args.dumps)
    if not paths:
        print(f"bigbinf-exporter import: error: no .dump files in {' '.join(args.dumps)}", file=sys.stderr)
        return 2
    try:
        options = parse_options(args.protocol_map, args.timezone)
        check_journal(journal_path, must_exist=False)  # created if missing
        summary = import_dumps(paths, journal_path, options=options)
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
