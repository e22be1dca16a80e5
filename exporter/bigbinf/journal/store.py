"""Append-only JSON-lines journal of results: the durable record behind /metrics.

A result is written and fsync'ed before it is published, so anything a scrape has seen
survives a crash.  Reading is tolerant: a torn last line (power loss mid-write) or a
line damaged by hand is reported with its line number and skipped, never fatal, so one
bad line never costs the rest of the history.

In time segments, so a year of history is read only where it is needed (issue 37).
`journal.path` (e.g. journal.jsonl) is the live segment: appends go there, as always.
When a record of a later UTC day than its first line's is appended, it is rotated first:

1. rename journal.jsonl -> journal.FIRST-LAST.jsonl (FIRST/LAST: its results' earliest
   and latest start, UTC, to the second): one atomic rename, under an flock every
   appender takes, so no appender writes into the renamed file;
2. seal it: one gzip part per UTC day of its results' starts (a part of only imported
   2015 dumps is tagged .import), journal.FIRST-LAST.ID.jsonl.gz, ID naming the plain
   segment it came from; each written whole (temporary file, fsync, rename);
3. the commit: unlink the plain segment.  Until then its parts are not read (a reader
   that sees a plain segment ignores the parts with its ID), so a kill anywhere leaves
   every result readable exactly once; the next rotation seals it again.

An existing single-file journal is the live segment with old lines: its first append
(or `bigbinf-exporter journal-compact`) splits it into day parts the same way.  `retention`
removes whole parts whose newest result is that much older than the journal's newest
(never .import parts: dumps imported on purpose).  `read(path, since, until)` is the one way to read it: it opens
only the segments whose time range meets [since, until), then the live one.
"""

from __future__ import annotations

import calendar
import contextlib
import datetime as dt
import fcntl
import glob
import gzip
import hashlib
import json
import logging
import math
import os
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

from bigbinf.result import PathBaseline, Result

RecordT = TypeVar("RecordT", Result, PathBaseline)


def baseline_path(journal: Path) -> Path:
    """Where the path baselines are journaled: beside the results' journal
    (journal.jsonl -> journal.paths.jsonl), so tools reading results see only results."""
    return journal.with_name(f"{journal.stem}.paths{journal.suffix or '.jsonl'}")


log = logging.getLogger(__name__)


def replace_durably(path: Path, text: str) -> None:
    """`path` replaced by `text` whole or not at all, durably: written to a temporary file
    beside it (`.NAME.XXXX`, mode 0600), fsynced, renamed over it, and the directory
    fsynced.  A kill leaves the old file whole, and at most a temporary file, which
    `temporaries` finds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_directory(path.parent)


def temporaries(path: Path) -> list[Path]:
    """The temporary files replace_durably left beside `path` when killed mid-write."""
    try:
        return [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]
    except OSError:
        return []


def sync_directory(directory: Path) -> None:
    """fsync a directory: a file created, renamed or removed in it survives a crash."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class SkippedLine:
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: skipped: {self.reason}"


# ---------------------------------------------------------------------------------------
# Segments

_STAMP = "%Y%m%dT%H%M%SZ"
_SEGMENT = re.compile(
    r"(?P<first>\d{8}T\d{6}Z)-(?P<last>\d{8}T\d{6}Z)(?:\.(?P<id>[0-9a-f]{8}))?(?P<imported>\.import)?"
    r"\.jsonl(?P<gz>\.gz)?"
)
# A line's start, found without parsing the line (journal lines are written with sorted
# keys and no spaces; a line written otherwise is parsed instead).
_START = re.compile(rb'"start_timestamp":\s*(-?[0-9][0-9.eE+-]*)[,}]')
DAY = 86400.0


def _stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime(_STAMP)


def _unstamp(text: str) -> float:
    """YYYYMMDDTHHMMSSZ (UTC) -> epoch seconds (strptime is slow for a year of segment names)."""
    t = text
    return float(calendar.timegm((int(t[0:4]), int(t[4:6]), int(t[6:8]), int(t[9:11]), int(t[11:13]), int(t[13:15]))))


def _ident(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Segment:
    """A closed piece of a journal: a plain one (just rotated, not yet sealed) or a sealed
    gzip part of one.  `source`: the ID of the plain segment it is (or came from)."""

    path: Path
    first: float  # earliest start in it, floored to the second
    last: float  # latest start in it, ceiled to the second
    source: str
    imported: bool
    sealed: bool


def segments(path: str | os.PathLike[str]) -> list[Segment]:
    """The closed segments of the journal at `path` that a reader reads, oldest first: a
    plain segment's parts are left out while it exists (its sealing is not committed)."""
    path = Path(path)
    pattern = re.compile(re.escape(path.stem) + r"\." + _SEGMENT.pattern)
    found: list[Segment] = []
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    for name in names:
        m = pattern.fullmatch(name)
        if m is None or bool(m["gz"]) != bool(m["id"]):
            continue
        token = f"{m['first']}-{m['last']}"
        found.append(
            Segment(
                path.parent / name,
                _unstamp(m["first"]),
                _unstamp(m["last"]),
                m["id"] or _ident(token),
                bool(m["imported"]),
                bool(m["gz"]),
            )
        )
    plain = {s.source for s in found if not s.sealed}
    kept = [s for s in found if not (s.sealed and s.source in plain)]
    return sorted(kept, key=lambda s: (s.first, s.last, s.path.name))


def _start_of(line: bytes) -> float | None:
    m = _START.search(line)
    if m is not None:
        with contextlib.suppress(ValueError):
            return float(m[1])
    try:
        record = json.loads(line)
        value = record.get("start_timestamp") if isinstance(record, dict) else None
        return float(value) if isinstance(value, int | float) and math.isfinite(value) else None
    except ValueError:
        return None


def _open(segment: Path) -> BinaryIO:
    if segment.name.endswith(".gz"):
        return gzip.open(segment, "rb")  # type: ignore[return-value]  # a binary file all the same
    return open(segment, "rb")


def read(
    path: str | os.PathLike[str],
    since: float | None = None,
    until: float | None = None,
    *,
    record: type[RecordT] = Result,  # type: ignore[assignment]
    skipped: list[SkippedLine] | None = None,
) -> Iterator[RecordT]:
    """The journal's readable records whose start is in [since, until) (None: unbounded),
    oldest segment first, the live one last, each in file order: the one way every
    reader reads a journal.  Only segments whose range meets [since, until) are opened.

    Unreadable lines go to `skipped` if given (the caller reports them, so each is said
    once); otherwise each is logged as a warning."""
    path = Path(path)
    while True:
        try:
            live: BinaryIO | None = open(path, "rb")  # noqa: SIM115 - first: a rotation now renames what we hold
        except FileNotFoundError:
            live = None
        listed = segments(path)
        if live is None or _same_file(live, path):
            break
        live.close()  # rotated between the two: its segment may be listed as well; again
    try:
        live_inode = os.fstat(live.fileno()).st_ino if live is not None else None
        for segment in listed:
            if (since is not None and segment.last < since) or (until is not None and segment.first >= until):
                continue
            try:
                f = _open(segment.path)
            except FileNotFoundError:
                if not segment.sealed:  # sealed since listed: its parts instead
                    listed += [s for s in segments(path) if s.sealed and s.source == segment.source]
                continue  # a part: removed past retention since listed
            with f:
                if not segment.sealed and os.fstat(f.fileno()).st_ino == live_inode:
                    continue  # the live file, renamed since we opened it: read below
                yield from _records(f, segment.path, record, since, until, skipped)
        if live is not None:
            yield from _records(live, path, record, since, until, skipped)
    finally:
        if live is not None:
            live.close()


def _records(
    f: BinaryIO,
    where: Path,
    record: type[RecordT],
    since: float | None,
    until: float | None,
    skipped: list[SkippedLine] | None,
) -> Iterator[RecordT]:
    ranged = since is not None or until is not None
    for number, raw in enumerate(f, start=1):
        if not raw.strip():
            continue
        if ranged:
            start = _START.search(raw)
            if start is not None:
                with contextlib.suppress(ValueError):
                    t = float(start[1])
                    if (since is not None and t < since) or (until is not None and t >= until):
                        continue
        try:
            text = raw.decode("utf-8", errors="replace")
            parsed = json.loads(text)
            if not isinstance(parsed, dict):
                raise ValueError(f"expected a JSON object, got {type(parsed).__name__}")
            item = record.from_json(parsed)
        except (ValueError, TypeError) as exc:
            problem = SkippedLine(where, number, str(exc) or type(exc).__name__)
            if skipped is not None:
                skipped.append(problem)
            else:
                log.warning("%s", problem)
            continue
        if ranged and start is None:  # a line written otherwise: its start known only now
            t = item.start_timestamp
            if (since is not None and t < since) or (until is not None and t >= until):
                continue
        yield item


def _gzip_durably(target: Path, lines: list[bytes], mode: int) -> None:
    """`target` written whole or not at all: a temporary file beside it, fsynced, renamed;
    with the `mode` of the file it comes from (whoever could read the journal still can)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=raw, mtime=0) as z:
                for line in lines:
                    z.write(line)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def seal(plain: Segment, journal: _Records[Any]) -> list[Path]:
    """Seal a plain segment into gzip parts, one per UTC day of its results' starts (the
    ones holding only imported dumps tagged .import); the commit is the plain segment's
    unlink (see the module's doc).  Lines without a readable start go with the line
    before them.  Returns the parts ([]: another process sealed it first)."""
    try:
        f = open(plain.path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return []
    with f:
        # Two processes settling at once: one seals, the other finds it gone.
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        if not _same_file(f, plain.path):
            return []
        return _seal_locked(plain, journal, f)


def _seal_locked(plain: Segment, records: _Records[Any], f: BinaryIO) -> list[Path]:
    journal = records.path
    groups: dict[tuple[int, bool], list[bytes]] = {}
    ranges: dict[tuple[int, bool], list[float]] = {}
    order: list[tuple[int, bool]] = []
    current: tuple[int, bool] | None = None
    for raw in f:
        if not raw.strip():
            continue
        if not raw.endswith(b"\n"):
            raw += b"\n"  # a torn last line stays a line of its own
        start = _start_of(raw)
        if start is not None:
            current = (math.floor(start / DAY), b'"source":"import"' in raw)
            span = ranges.setdefault(current, [start, start])
            span[0], span[1] = min(span[0], start), max(span[1], start)
        key = current if current is not None else (math.floor(plain.first / DAY), False)
        if key not in groups:
            groups[key] = []
            order.append(key)
            ranges.setdefault(key, [plain.first, plain.first])
        groups[key].append(raw)
    # A crashed sealing of this segment may have left parts: written again (whole) below.
    for old in journal.parent.glob(f"{glob.escape(journal.stem)}.*.{plain.source}.*jsonl.gz"):
        old.unlink()
    parts = []
    for key in sorted(order):
        first, last = ranges[key]
        token = f"{_stamp(math.floor(first))}-{_stamp(math.ceil(last))}"
        tag = ".import" if key[1] else ""
        part = journal.with_name(f"{journal.stem}.{token}.{plain.source}{tag}.jsonl.gz")
        _gzip_durably(part, groups[key], os.fstat(f.fileno()).st_mode & 0o777)
        parts.append(part)
    sync_directory(journal.parent)
    records._checkpoint(plain)  # the checkpoint folds the plain segment whole: its parts are not read again
    plain.path.unlink()  # the commit: from now on its parts are what readers read
    sync_directory(journal.parent)
    return parts


def leftovers(journal: Path) -> list[Path]:
    """Temporary files a kill during sealing left (never read; removed at the next rotation)."""
    prefix = f".{journal.stem}."
    try:
        return [
            p
            for p in journal.parent.iterdir()
            if p.name.startswith(prefix) and ".jsonl.gz." in p.name and _SEGMENT.match(p.name[len(prefix) :])
        ]
    except OSError:
        return []


# What runs after a rotation renamed the live file to a plain segment: checkpoint.py
# registers its fold here when imported (every process that appends imports it: the
# round runner, the importer), so that this module, which checkpoint.py reads journals
# through, does not import it back.  Without it a checkpoint is only rebuilt later.
ROTATED: list[Callable[[_Records[Any], Segment], None]] = []


class _Records(Generic[RecordT]):
    """A journal of one kind of record (`record`: its class, with to_json/from_json).
    `retention` (seconds, None: forever): sealed parts older than it are removed at each
    rotation."""

    record: type[RecordT]

    def __init__(self, path: str | os.PathLike[str], retention: float | None = None) -> None:
        self.path = Path(path)
        self.retention = retention
        self._lock = threading.Lock()
        self.fold: Any = None  # its checkpoint (checkpoint.py) once something restored from it

    def append(self, result: RecordT) -> None:
        """Write one result durably (flush + fsync) before anyone publishes it."""
        line = (json.dumps(result.to_json(), sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")
        rotated: Segment | None = None
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            while True:
                with open(self.path, "a+b") as f:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # released by the close
                    if not _same_file(f, self.path):
                        continue  # rotated while we waited for the lock: append to the new one
                    if rotated is None and self._due(f, result.start_timestamp):
                        rotated = self._rotate(f)
                        continue
                    # A torn last line (power loss mid-write) has no newline: appending onto it
                    # would glue this result to it and lose both.  End it first; read() then
                    # reports the torn line alone and keeps this one.
                    end = f.seek(0, os.SEEK_END)
                    if end:
                        f.seek(end - 1)
                        if f.read(1) != b"\n":
                            line = b"\n" + line
                    f.write(line)  # "a" mode: always at the end, whatever was read
                    f.flush()
                    os.fsync(f.fileno())
                    break
            if self.fold is not None:
                self.fold.after_append()
        if rotated is not None:
            self.settle()

    def read(
        self, skipped: list[SkippedLine] | None = None, since: float | None = None, until: float | None = None
    ) -> Iterator[RecordT]:
        """read(self.path, since, until): see the module's read."""
        return read(self.path, since, until, record=self.record, skipped=skipped)

    # ----------------------------------------------------------- rotation

    def _due(self, f: BinaryIO, newest: float | None) -> bool:
        """Time to rotate the live file: `newest` (the start of the record about to be
        appended; None: of its own last line) is of a later UTC day than its first line.
        By the records, not the clock: a stopped exporter, a test's old timestamps or a
        clock that jumped rotate nothing until a new day's record comes."""
        f.seek(0)
        first = f.readline()
        start = _start_of(first) if first.strip() else None
        if start is None:
            return False
        if newest is None:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(0, end - 65536))
            lines = [raw for raw in f.read().split(b"\n") if raw.strip()]
            newest = _start_of(lines[-1]) if lines else None
        return newest is not None and math.floor(newest / DAY) > math.floor(start / DAY)

    def _rotate(self, f: BinaryIO) -> Segment:
        """Rename the live file (held, locked, as `f`) to a plain segment named by its range."""
        f.seek(0)
        starts = [t for t in (_start_of(raw) for raw in f if raw.strip()) if t is not None]
        first, last = math.floor(min(starts)), math.ceil(max(starts))
        taken = {s.path.name.split(".jsonl")[0] for s in segments(self.path)}
        while f"{self.path.stem}.{_stamp(first)}-{_stamp(last)}" in taken:
            last += 1  # the same range twice (rare): a second later still holds all of it
        token = f"{_stamp(first)}-{_stamp(last)}"
        named = self.path.with_name(f"{self.path.stem}.{token}.jsonl")
        plain = Segment(named, first, last, _ident(token), False, False)
        os.rename(self.path, plain.path)
        sync_directory(self.path.parent)
        self._checkpoint(plain)
        log.info("journal %s: rotated to %s", self.path, plain.path.name)
        return plain

    def _checkpoint(self, plain: Segment) -> None:
        for hook in ROTATED:
            hook(self, plain)

    def settle(self) -> None:
        """Seal every plain segment (one a kill left unsealed too), then drop what is
        past retention and the temporary files a kill left."""
        for leftover in leftovers(self.path):
            with contextlib.suppress(OSError):
                leftover.unlink()
        for segment in segments(self.path):
            if not segment.sealed:
                seal(segment, self)
        if self.retention is not None:
            # Past retention before the newest result, not before now: a clock that jumped
            # or an exporter stopped for a year removes nothing it still needs.
            closed = segments(self.path)
            cutoff = max((s.last for s in closed if not s.imported), default=-math.inf) - self.retention
            for segment in closed:
                if segment.sealed and not segment.imported and segment.last < cutoff:
                    with contextlib.suppress(FileNotFoundError):
                        segment.path.unlink()
                    log.info("journal %s: removed %s (past journal.retention)", self.path, segment.path.name)
            sync_directory(self.path.parent)

    def rotate_now(self) -> bool:
        """Rotate now if due (at start; `journal-compact`), and settle; True if it rotated."""
        if not self.path.exists():
            self.settle()
            return False
        rotated = False
        with self._lock, open(self.path, "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            if _same_file(f, self.path) and self._due(f, None):
                self._rotate(f)
                open(self.path, "ab").close()  # a journal file is always there for the tools that check it
                rotated = True
        self.settle()
        return rotated


def _same_file(f: BinaryIO, path: Path) -> bool:
    try:
        return os.fstat(f.fileno()).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


class Journal(_Records[Result]):
    """The results of transfers."""

    record = Result


class BaselineJournal(_Records[PathBaseline]):
    """The path baselines, one per remote per round (baseline_path)."""

    record = PathBaseline
