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
import errno
import fcntl
import functools
import glob
import gzip
import hashlib
import itertools
import json
import logging
import math
import os
import re
import stat
import tempfile
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Generic, TypeVar

from bigbinf.fserrors import describe_os_error
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


@functools.lru_cache(maxsize=4096)  # each listing of a year's segments parses the same names again
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


def open_regular(path: Path | str) -> BinaryIO:
    """open(path, "rb") of a regular file only: anything else in a journal file's place
    (a FIFO, whose open blocks until a writer comes; a device such as /dev/zero, read for
    ever; a socket) is an OSError (EINVAL) as a directory is one (EISDIR), so it is set
    aside as unreadable, never waited on.  Opened without blocking, which a regular file
    ignores."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "not a file"
            )
            raise OSError(errno.EINVAL, f"not a regular file ({what})", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _open(segment: Path) -> BinaryIO:
    raw = open_regular(segment)
    if segment.name.endswith(".gz"):
        z = gzip.GzipFile(fileobj=raw, mode="rb")
        z.myfileobj = raw  # type: ignore[assignment]  # closed with it, as gzip.open's own
        return z  # type: ignore[return-value]  # a binary file all the same
    return raw


# ---------------------------------------------------------------------------------------
# Damaged segments

# What reading a damaged gzip part raises: a bad CRC or a part that is not gzip
# (gzip.BadGzipFile, an OSError), a truncated one (EOFError), a damaged deflate stream
# (zlib.error); an unreadable sector (EIO) is an OSError too.
DAMAGE = (OSError, EOFError, zlib.error, ValueError)
# What opening a part can raise that says nothing of the part: this process's own want.
TRANSIENT = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EINTR, errno.EAGAIN})


MEMBER_BYTES = 1 << 16  # a sealed part's lines per gzip member: the grain at which a CRC proves them


class Lines:
    """The lines of a segment that can be proved intact, as far as they can be read:
    iterating stops, instead of raising, where the file is damaged (`damage` then says how).

    A gzip part is inflated here (raw deflate, each member's CRC checked by us), and a
    member's lines are given only once its CRC and length match: flipped bytes can
    inflate to altered lines that still parse as results, and only the CRC at the
    member's end says so.  The lines of a member that fails are never given (`unverified`:
    how many of them parsed, a lower bound on the results they held); reading goes on at
    the next gzip member found after it, itself proved by its own CRC.  A sealing writes a
    member per MEMBER_BYTES of lines, so damage costs about that much; a part sealed
    before (one member) loses all of it.  `unread`: the compressed bytes that are not in
    a member that checked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.damage: str | None = None
        self.unread = 0
        self.unverified = 0
        self._gz = path.name.endswith(".gz")
        self._offset = 0  # plain files: where the next line starts (tell)
        self._raw: BinaryIO | None = None
        try:
            self._raw = open_regular(path)
        except FileNotFoundError:
            raise
        except OSError as exc:
            if exc.errno in TRANSIENT:
                raise  # this process's own want (of descriptors, memory), not the part's damage
            # A directory or a symlink loop where a part stood (a bad restore, a stray
            # mkdir -p), a part we may not read: nothing of it is readable.
            self.damage = f"cannot be opened: {_reason(exc)}"

    @property
    def inode(self) -> int | None:
        """The inode of the file read (None: it could not be opened)."""
        return os.fstat(self._raw.fileno()).st_ino if self._raw is not None else None

    def _damaged(self, exc: BaseException) -> None:
        if self.damage is None:  # the first: what a resynchronised read meets after it is its echo
            self.damage = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def __iter__(self) -> Iterator[bytes]:
        if self._raw is None:
            return
        if not self._gz:
            try:
                for raw in self._raw:
                    self._offset += len(raw)
                    yield raw
            except OSError as exc:  # an unreadable sector
                self._damaged(exc)
                with contextlib.suppress(OSError, ValueError):
                    self.unread = max(0, os.fstat(self._raw.fileno()).st_size - self._offset)
            return
        yield from self._proved()

    def _proved(self) -> Iterator[bytes]:
        assert self._raw is not None
        size = os.fstat(self._raw.fileno()).st_size
        proved = 0  # compressed bytes in members that checked
        pending: list[bytes] = []  # the lines of the member being inflated: given once it checks
        rest = b""
        position, resynced = 0, False
        while True:
            member = [0, 0]  # where the member being read starts, where the last one that checked ends
            try:
                for chunk in _inflate(self._raw, position, member):
                    if chunk is None:  # its CRC and length match: its lines are proved
                        proved += member[1] - member[0]
                        resynced = False
                        yield from pending
                        pending = []
                        continue
                    lines = (rest + chunk).split(b"\n")
                    rest = lines.pop()
                    pending.extend(line + b"\n" for line in lines)
                break
            except DAMAGE as exc:
                self._damaged(exc)
                if not resynced:  # a member found by searching may be no member: its lines are not counted
                    self.unverified += sum(1 for line in pending if _readable(line))
                pending, rest = [], b""
                found = _next_member(self._raw, member[0] + 1)
                if found is None:
                    break
                position, resynced = found, True
        if rest:
            yield rest  # a torn last line (no newline), in a member that checked
        self.unread = max(0, size - proved)

    def seek(self, offset: int) -> None:
        assert not self._gz, "a gzip part is read from its start"
        if self._raw is not None:
            self._raw.seek(offset)
        self._offset = offset

    def tell(self) -> int:
        return self._offset if not self._gz else 0

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _reason(exc: OSError) -> str:
    code = errno.errorcode.get(exc.errno or 0, "")
    text = os.strerror(exc.errno) if exc.errno else str(exc)
    return f"{text} ({code})" if code else text


class BadGzip(ValueError):
    """A gzip part that is not gzip, or whose CRC or length does not match its data."""


GZIP_MAGIC = b"\x1f\x8b\x08"


def _next_member(raw: BinaryIO, offset: int, size: int = 1 << 16) -> int | None:
    """Where the next gzip member header (1f 8b 08) at or after `offset` starts (None: none)."""
    raw.seek(offset)
    carry = b""
    while True:
        chunk = raw.read(size)
        if not chunk:
            return None
        data = carry + chunk
        found = data.find(GZIP_MAGIC)
        if found >= 0:
            return offset - len(carry) + found
        offset += len(chunk)
        carry = data[-2:]


def _inflate(raw: BinaryIO, position: int, member: list[int], size: int = 1 << 16) -> Iterator[bytes | None]:
    """The inflated bytes of a gzip file's members from `position`, in order, and None after
    each member whose CRC and length match; raises (DAMAGE) where it is damaged.
    `member`: [where the member being read starts, where the last one that checked ends]."""
    raw.seek(position)
    buffer = raw.read(size)
    members = 0
    while True:
        if not buffer:
            if not members and not position:  # a sealed part always holds a member (its header, if no lines)
                raise BadGzip("empty: not gzip (0 bytes)")
            return
        member[0] = raw.tell() - len(buffer)
        while len(buffer) < 10:
            more = raw.read(size)
            if not more:
                raise EOFError("truncated in a member's header")
            buffer += more
        if buffer[:3] != GZIP_MAGIC:
            if members and not buffer.strip(b"\0"):
                return  # zero padding after the last member (as gzip tolerates)
            if not members and not position:  # zeros (unwritten extents after a crash), or other bytes
                raise BadGzip(f"not gzip: it starts {buffer[:2].hex(' ')}, not 1f 8b")
            raise BadGzip("not a gzip member at this point")
        members += 1
        buffer = _skip_header_fields(raw, buffer, buffer[3], 10, size)
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        crc, length = 0, 0
        while not inflater.eof:
            if not buffer:
                buffer = raw.read(size)
                if not buffer:
                    raise EOFError("compressed file ended before the end-of-stream marker was reached")
            out = inflater.decompress(buffer)
            buffer = inflater.unused_data
            if out:
                crc, length = zlib.crc32(out, crc), length + len(out)
                yield out
        while len(buffer) < 8:
            more = raw.read(size)
            if not more:
                raise EOFError("truncated in a member's trailer")
            buffer += more
        stored_crc, stored_length = int.from_bytes(buffer[:4], "little"), int.from_bytes(buffer[4:8], "little")
        buffer = buffer[8:] or raw.read(size)
        if stored_crc != crc or stored_length != length & 0xFFFFFFFF:
            raise BadGzip(f"CRC check failed {stored_crc:#x} != {crc:#x}")
        member[1] = raw.tell() - len(buffer)
        yield None


def _skip_header_fields(raw: BinaryIO, buffer: bytes, flags: int, at: int, size: int) -> bytes:
    """`buffer` past a gzip member's optional header fields (FEXTRA, FNAME, FCOMMENT, FHCRC)."""

    def need(n: int) -> None:
        nonlocal buffer
        while len(buffer) < at + n:
            more = raw.read(size)
            if not more:
                raise EOFError("truncated in a member's header")
            buffer += more

    if flags & 4:
        need(2)
        at += 2 + int.from_bytes(buffer[at : at + 2], "little")
    for flag in (8, 16):
        if flags & flag:
            while True:
                need(1)
                end = buffer.find(b"\0", at)
                if end >= 0:
                    at = end + 1
                    break
                at = len(buffer)
    if flags & 2:
        at += 2
    need(0)
    return buffer[at:]


# ---------------------------------------------------------------------------------------
# How many results each sealed part holds


def counts_path(journal: Path) -> Path:
    """Where the sealed parts' counts are kept: journal.jsonl -> journal.counts.json
    (journal.paths.jsonl -> journal.paths.counts.json), beside the parts, not in them."""
    return journal.with_name(f"{journal.stem}.counts.json")


def sealed_counts(journal: Path) -> dict[str, int]:
    """Part name -> how many lines it was sealed with ({}: none recorded, or unreadable)."""
    return {name: lines for name, (lines, _) in _sealed(journal).items()}


def sealed_bytes(journal: Path) -> dict[str, int]:
    """Part name -> how many bytes of lines it was sealed with (what reading it inflates:
    its last member's trailer says only that member's)."""
    return {name: size for name, (_, size) in _sealed(journal).items()}


def _sealed(journal: Path) -> dict[str, tuple[int, int]]:
    try:
        data = json.loads(counts_path(journal).read_bytes())
        parts = data["parts"]
        return {str(name): (int(n), int(size)) for name, (n, size) in parts.items()} if isinstance(parts, dict) else {}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("%s: unreadable (%s): losses in damaged parts are given as lower bounds", counts_path(journal), exc)
        return {}


def _journal_of(part: Path) -> Path:
    """The live file of the journal a sealed part belongs to (journal.FIRST-LAST.ID.jsonl.gz -> journal.jsonl)."""
    m = _SEGMENT.search(part.name)
    stem = part.name[: m.start() - 1] if m is not None else part.stem
    return part.with_name(f"{stem}.jsonl")


@contextlib.contextmanager
def _counts_locked(journal: Path) -> Iterator[None]:
    """Held while counts_path is read, changed and written: an flock on the directory (two
    processes sealing different segments at once; the file itself is replaced, not locked)."""
    fd = os.open(journal.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def drop_count_temporaries(journal: Path) -> None:
    """The temporary files a kill during record_counts left (under its lock: none is being written)."""
    with contextlib.suppress(OSError), _counts_locked(journal):
        for leftover in temporaries(counts_path(journal)):
            leftover.unlink()


def record_counts(journal: Path, changed: dict[str, tuple[int, int] | None]) -> None:
    """Set (None: drop) parts' counts (lines, bytes of lines) in counts_path, whole or not at all, under an flock on
    the directory (two processes sealing different segments at once); the entries of
    parts no longer there (past retention) are dropped.  A count that cannot be written
    costs only its exactness: a damaged part's loss is then said as "at least"."""
    try:
        with _counts_locked(journal):
            _record_counts_locked(journal, changed)
    except OSError as exc:
        log.warning("%s: not written (%s)", counts_path(journal), describe_os_error(exc))


def _record_counts_locked(journal: Path, changed: dict[str, tuple[int, int] | None]) -> None:
    counts = _sealed(journal)
    for name, n in changed.items():
        if n is None:
            counts.pop(name, None)
        else:
            counts[name] = n
    present = set(os.listdir(journal.parent))
    counts = {name: n for name, n in counts.items() if name in present or name in changed}
    replace_durably(counts_path(journal), json.dumps({"version": 1, "parts": counts}, sort_keys=True))


DAMAGED = ".damaged-"  # <part>.damaged-<UTC stamp>: not a segment name, never read


def damaged(journal: str | os.PathLike[str]) -> list[Path]:
    """The parts of the journal at `journal` quarantined as damaged (quarantine), oldest first."""
    journal = Path(journal)
    pattern = re.compile(re.escape(journal.stem) + r"\." + _SEGMENT.pattern)  # this journal's, not journal.paths'
    try:
        names = os.listdir(journal.parent)
    except OSError:
        return []
    return sorted(
        journal.parent / n
        for n in names
        if DAMAGED in n and (pattern.fullmatch(n.split(DAMAGED)[0]) or n.split(DAMAGED)[0] == journal.name)
    )


# Damaged parts (and a live file) found but not moved aside (a read-only or full disk, a
# part that cannot be renamed): counted with the moved ones while they are still there,
# so the damaged-segments gauge and its alert see them (unmoved).  A checkpoint that folds
# such a part keeps its name (checkpoint._Fold.save), so a later start, which reads it no
# more, tries the move again and counts it again (retry_unmoved).
_UNMOVED: set[Path] = set()


def unmoved(journal: str | os.PathLike[str]) -> list[Path]:
    """The damaged parts of the journal at `journal` this process could not move aside, still there."""
    journal = Path(journal)
    pattern = re.compile(re.escape(journal.stem) + r"\." + _SEGMENT.pattern)
    found = []
    for part in sorted(_UNMOVED):
        if part.parent != journal.parent or not (pattern.fullmatch(part.name) or part.name == journal.name):
            continue
        if os.path.lexists(part) and (part.name != journal.name or not _reads(part)):
            found.append(part)
        else:
            _UNMOVED.discard(part)  # removed or moved by hand (a live file: one that reads again)
    return found


def retry_unmoved(journal: str | os.PathLike[str], names: Iterable[str]) -> None:
    """Quarantine again the damaged parts named (ones a checkpoint folded but that were not
    moved aside then): moved now if the disk takes the writes, else counted (unmoved) and
    said again in one line with what each held and lost; a part gone, or that reads whole
    now, is dropped."""
    journal = Path(journal)
    # A name read from a file: this journal's parts only.
    pattern = re.compile(re.escape(journal.stem) + r"\." + _SEGMENT.pattern)
    for name in names:
        part = journal.parent / name
        if pattern.fullmatch(name) and os.path.lexists(part):
            quarantine(part)


def _reads(path: Path) -> bool:
    try:
        with open_regular(path) as f:
            f.read(1)
    except OSError:
        return False
    return True


def quarantine(part: Path) -> Path | None:
    """Move a damaged sealed part aside as `<part>.damaged-<stamp>` and keep what can be read
    of it: its readable, whole results are written to a fresh part under the same name (the
    same ID: a checkpoint that folded it folded just those).  Returns the quarantined file
    (None: the part reads whole after all, is gone, or this directory takes no writes).

    The order makes every state readable exactly once, wherever a kill lands:
    1. the readable lines to a temporary file (never read), fsynced;
    2. the damaged part hard-linked to its quarantine name (not a segment name: never read;
       a kill here leaves the part read as before, and the next quarantine reuses the link);
    3. the commit: the temporary file renamed over the part (readers now read the salvage,
       the same results the damaged part gave up to its damage); or, nothing readable,
       the part unlinked."""
    try:
        f = open_regular(part)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in TRANSIENT:
            return None
        return _quarantine_unopenable(part, exc)
    with f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # two readers finding it at once: one quarantines
        if not _same_file(f, part):
            return None
        kept: list[bytes] = []
        dropped, dropped_bytes = 0, 0
        with Lines(part) as lines:
            for raw in lines:
                if raw.endswith(b"\n") and _readable(raw):
                    kept.append(raw)
                elif raw.strip():
                    dropped, dropped_bytes = dropped + 1, dropped_bytes + len(raw)
            damage, unread, unverified = lines.damage, lines.unread, lines.unverified
        if damage is None:
            if not dropped:
                return None
            # Torn lines inside a sealed part (a line cut short in the plain segment it was
            # sealed from, by a crash mid-append): damage too, or each read skips them again.
            damage = f"{dropped} torn line{'s' if dropped > 1 else ''}"
        journal = _journal_of(part)
        sealed = sealed_counts(journal).get(part.name)
        loss = _loss(part, sealed, kept, dropped, dropped_bytes, unverified, unread, damage)
        inode = os.fstat(f.fileno()).st_ino
        tmp = None
        prefix = part.name + DAMAGED
        aside = next((p for p in sorted(part.parent.glob(glob.escape(prefix) + "*")) if _inode(p) == inode), None)
        try:
            tmp = _gzip_temporary(part, kept, os.fstat(f.fileno()).st_mode & 0o777) if kept else None
            if aside is None:  # (a kill after the link: that link, not a second one)
                aside = part.with_name(prefix + _stamp(time.time()))
                if aside.exists():
                    aside = part.with_name(f"{prefix}{_stamp(time.time())}-{os.getpid()}")
                os.link(part, aside)
                sync_directory(part.parent)
            if tmp is not None:
                os.replace(tmp, part)
            else:
                part.unlink()
            sync_directory(part.parent)
        except OSError as exc:
            if tmp is not None and tmp.exists():  # the salvage not committed: never read, removed
                with contextlib.suppress(OSError):
                    tmp.unlink()
            # Said once a process: each checkpoint save tries the move again (retry_unmoved).
            said = log.debug if part in _UNMOVED else log.error
            _UNMOVED.add(part)
            said(
                "journal %s: damaged (%s); not moved aside (%s): read as far as it can be, each time; "
                "%d results read of it, %s",
                part,
                damage,
                describe_os_error(exc),
                len(kept),
                loss,
            )
            return None
    _UNMOVED.discard(part)  # moved aside after all (the disk took writes again)
    # The salvage is what the part holds now (a kill before this: the old count, a loss
    # said too high at a later damage of the salvage, never too low).
    if sealed is not None:
        record_counts(journal, {part.name: (len(kept), sum(map(len, kept))) if kept else None})
    log.error(
        "journal %s: damaged (%s): moved aside to %s; %d results kept in it, %s; the rest of the journal is intact",
        part,
        damage,
        aside.name,
        len(kept),
        loss,
    )
    return aside


def _loss(
    part: Path,
    sealed: int | None,
    kept: list[bytes],
    dropped: int,
    dropped_bytes: int,
    unverified: int,
    unread: int,
    damage: str,
) -> str:
    """What a damaged part lost, for the one line its quarantine logs: exact where its
    sealing recorded its count, else a lower bound said as one."""
    said = []
    kept_size = sum(map(len, kept)) / len(kept) if kept else 0
    if sealed is not None:
        said.append(f"{max(0, sealed - len(kept))} of the {sealed} results it was sealed with lost")
    elif not kept and not dropped and not unverified:  # nothing of it read: all it held is lost
        said.append(_all_lost(part, sealed) + (f" ({unread} bytes unreadable)" if unread else ""))
    else:
        least = dropped + unverified
        more = ""
        if unread:
            more = f" and those in {unread} compressed bytes that do not check"
        elif damage.startswith("EOFError"):
            more = " and those after where it ends"
        said.append(
            f"at least {least} results lost{more} (how many in all cannot be known: its sealing recorded no count)"
        )
    if dropped:  # damage inflates to garbage that runs lines together: a count from the bytes
        about = f", about {max(1, round(dropped_bytes / kept_size))} results at the kept ones' size"
        about = about if kept_size else ""
        said.append(f"{dropped} unreadable lines of {dropped_bytes} bytes{about}")
    if unverified:
        said.append(
            f"{unverified} lines that inflate to results but fail their CRC, not restored: not provably what was "
            "measured (left in the file moved aside)"
        )
    return "; ".join(said)


def _quarantine_unopenable(part: Path, exc: OSError) -> Path | None:
    """A part that cannot be opened (a directory, a symlink loop, one we may not read):
    nothing of it is readable, so the whole of it is renamed aside (a directory or a
    symlink renames as a file does); one rename, so a kill leaves it either place."""
    damage = f"cannot be opened: {_reason(exc)}"
    journal = _journal_of(part)
    sealed = sealed_counts(journal).get(part.name)
    aside = part.with_name(part.name + DAMAGED + _stamp(time.time()))
    if os.path.lexists(aside):
        aside = part.with_name(f"{aside.name}-{os.getpid()}")
    try:
        os.rename(part, aside)
        sync_directory(part.parent)
    except FileNotFoundError:
        return None  # moved aside by another reader meanwhile
    except OSError as err:
        said = log.debug if part in _UNMOVED else log.error  # once a process, as quarantine's
        _UNMOVED.add(part)
        said(
            "journal %s: damaged (%s); not moved aside (%s): skipped, each time; %s",
            part,
            damage,
            describe_os_error(err),
            _all_lost(part, sealed),
        )
        return None
    _UNMOVED.discard(part)
    log.error(
        "journal %s: damaged (%s): moved aside to %s; 0 results kept in it, %s; the rest of the journal is intact",
        part,
        damage,
        aside.name,
        _all_lost(part, sealed),
    )
    if sealed is not None:
        record_counts(journal, {part.name: None})
    return aside


def _all_lost(part: Path, sealed: int | None = None) -> str:
    """What is lost with the whole of a part: its results (as many as its sealing recorded),
    from the range its name gives."""
    what = f"all its {sealed} results lost" if sealed is not None else "all its results lost"
    m = _SEGMENT.search(part.name)
    if m is None:
        return what
    return f"{what} (those started {m['first']} to {m['last']})"


def check(journal: str | os.PathLike[str]) -> list[Path]:
    """Read every sealed part of the journal at `journal` through (`journal-compact`) and
    quarantine the damaged ones (a torn line in one too); returns where they were moved aside."""
    moved = [check_part(segment.path) for segment in segments(journal) if segment.sealed]
    return [aside for aside in moved if aside is not None]


def check_part(part: Path) -> Path | None:
    """Read one sealed part through (its gzip CRCs, each line's own) and quarantine it if
    damaged (a torn line in it too): where it was moved aside, None if it reads whole (or
    is gone: removed past retention since it was listed)."""
    torn = False
    try:
        with Lines(part) as lines:
            for raw in lines:
                torn = torn or (bool(raw.strip()) and not (raw.endswith(b"\n") and _readable(raw)))
    except FileNotFoundError:
        return None
    return quarantine(part) if lines.damage is not None or torn else None


def _readable(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw), dict)
    except ValueError:
        return False


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


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
            live: BinaryIO | None = open_regular(path)  # first: a rotation now renames what we hold
        except FileNotFoundError:
            live = None
        except OSError as exc:
            if exc.errno in TRANSIENT:
                raise
            # A failing disk (EIO, EBADMSG): the closed segments are read all the same
            # (set_aside_unreadable, at a start, says what is lost and starts a new one).
            log.debug("%s: unreadable (%s): read without it", path, _reason(exc))
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
                f = Lines(segment.path)
            except FileNotFoundError:
                if not segment.sealed:  # sealed since listed: its parts instead
                    listed += [s for s in segments(path) if s.sealed and s.source == segment.source]
                continue  # a part: removed past retention since listed
            with f:
                if not segment.sealed and f.inode == live_inode:
                    continue  # the live file, renamed since we opened it: read below
                problems: list[SkippedLine] = []
                yield from _records(f, segment.path, record, since, until, problems)
            if f.damage is not None:  # read as far as it could be; moved aside, its readable rest kept
                quarantine(segment.path)  # its unreadable lines are counted in the one line it logs
            elif problems and segment.sealed and quarantine(segment.path) is not None:
                pass  # torn lines in a sealed part: damage too (said once, by quarantine)
            elif skipped is not None:
                skipped += problems
            else:
                for problem in problems:
                    log.warning("%s", problem)
        if live is not None:
            yield from _records(live, path, record, since, until, skipped)
    finally:
        if live is not None:
            live.close()


def _records(
    f: Iterable[bytes],
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


class _Members:
    """A gzip part being written: a new member every MEMBER_BYTES of lines (each line
    whole in one member), so that a CRC proves each batch of lines on its own (Lines)."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.lines = 0
        self._z: gzip.GzipFile | None = None
        self._bytes = 0

    def write(self, line: bytes) -> None:
        if self._z is not None and self._bytes >= MEMBER_BYTES:
            self.end_member()
        if self._z is None:
            self._z = gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=self.out, mtime=0)
        self._z.write(line)
        self._bytes += len(line)
        self.lines += 1

    def end_member(self) -> None:
        if self._z is None:
            self._z = gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=self.out, mtime=0)
        self._z.close()  # its trailer: the CRC and length of its lines
        self._z, self._bytes = None, 0


def _gzip_temporary(target: Path, lines: Iterable[bytes], mode: int) -> Path:
    """`lines` gzipped (a member per MEMBER_BYTES) into a temporary file beside `target`
    (`.NAME.XXXX`: never read), fsynced; removed again if that fails."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as raw:
            members = _Members(raw)
            for line in lines:
                members.write(line)
            members.end_member()
            raw.flush()
            os.fsync(raw.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return Path(tmp)


def seal(plain: Segment, journal: _Records[Any]) -> list[Path]:
    """Seal a plain segment into gzip parts, one per UTC day of its results' starts (the
    ones holding only imported dumps tagged .import); the commit is the plain segment's
    unlink (see the module's doc).  Lines without a readable start go with the line
    before them.  Returns the parts ([]: another process sealed it first)."""
    try:
        f = open_regular(plain.path)
    except FileNotFoundError:
        return []
    with f:
        # Two processes settling at once: one seals, the other finds it gone.
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        if not _same_file(f, plain.path):
            return []
        return _seal_locked(plain, journal, f)


OPEN_PARTS = 4  # gzip parts a sealing writes to at once (a day's out-of-order lines reopen theirs)


def _seal_keys(plain: Segment, f: BinaryIO) -> Iterator[tuple[tuple[int, bool], bytes, float | None]]:
    """Each line of the plain segment (from its start) with its part's key (UTC day, only
    imported dumps) and its start: a line without a readable start goes with the line
    before it.  The same keys on every pass."""
    f.seek(0)
    current: tuple[int, bool] | None = None
    for raw in f:
        if not raw.strip(b" \t\r\n\0"):
            # Blank, or only NUL bytes: a crash's tail whose size reached the disk before its
            # data (a file system that extends first), never a result.
            continue
        if not raw.endswith(b"\n"):
            raw += b"\n"  # a torn last line stays a line of its own
        start = _start_of(raw)
        if start is not None:
            current = (math.floor(start / DAY), b'"source":"import"' in raw)
        yield (current if current is not None else (math.floor(plain.first / DAY), False)), raw, start


def _seal_locked(plain: Segment, records: _Records[Any], f: BinaryIO) -> list[Path]:
    """Two passes over the plain segment, never more of it in memory than a line (an old
    single-file journal of a million results is split in the memory of a few parts'
    compressors): the first finds each day's range (the parts' names), the second writes
    each line into its part's temporary file (OPEN_PARTS at once; one closed and met again
    gets another gzip member)."""
    journal = records.path
    ranges: dict[tuple[int, bool], list[float]] = {}
    counts: dict[tuple[int, bool], tuple[int, int]] = {}
    for key, raw, start in _seal_keys(plain, f):
        span = ranges.setdefault(key, [plain.first, plain.first] if start is None else [start, start])
        if start is not None:
            span[0], span[1] = min(span[0], start), max(span[1], start)
        lines, size = counts.get(key, (0, 0))
        counts[key] = (lines + 1, size + len(raw))
    # A crashed sealing of this segment may have left parts: written again (whole) below.
    for old in journal.parent.glob(f"{glob.escape(journal.stem)}.*.{plain.source}.*jsonl.gz"):
        old.unlink()
    mode = os.fstat(f.fileno()).st_mode & 0o777
    names: dict[tuple[int, bool], Path] = {}
    for key, (first, last) in ranges.items():
        token = f"{_stamp(math.floor(first))}-{_stamp(math.ceil(last))}"
        tag = ".import" if key[1] else ""
        names[key] = journal.with_name(f"{journal.stem}.{token}.{plain.source}{tag}.jsonl.gz")
    # Each part's count, recorded before the parts exist (a kill between: the next sealing
    # writes the same parts with the same counts), where a part's damage cannot reach it.
    record_counts(journal, {names[key].name: counts[key] for key in names})
    temporary: dict[tuple[int, bool], Path] = {}
    open_parts: dict[tuple[int, bool], _Members] = {}  # oldest used first

    def close(key: tuple[int, bool], sync: bool = False) -> None:
        part = open_parts.pop(key)
        part.end_member()
        raw = part.out
        raw.flush()
        if sync:
            os.fsync(raw.fileno())
        raw.close()

    try:
        for key, raw_line, _ in _seal_keys(plain, f):
            if key not in open_parts:
                if len(open_parts) >= OPEN_PARTS:
                    close(next(iter(open_parts)))
                if key not in temporary:
                    fd, name = tempfile.mkstemp(prefix=f".{names[key].name}.", dir=journal.parent)
                    os.fchmod(fd, mode)
                    temporary[key] = Path(name)
                    out: BinaryIO = os.fdopen(fd, "wb")
                else:
                    out = open(temporary[key], "ab")  # noqa: SIM115 - closed by close()
                open_parts[key] = _Members(out)
            else:
                open_parts[key] = open_parts.pop(key)  # the most recently used last
            open_parts[key].write(raw_line)
        for key in list(open_parts):
            close(key)
        for tmp in temporary.values():
            with open(tmp, "rb+") as synced:
                os.fsync(synced.fileno())
        parts = []
        for key in sorted(names):
            os.replace(temporary.pop(key), names[key])
            parts.append(names[key])
    finally:
        for key in list(open_parts):
            with contextlib.suppress(OSError):
                close(key)
        for tmp in temporary.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
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


# ---------------------------------------------------------------------------------------
# Results not yet written

UNWRITTEN_MAX = 20_000  # results kept in memory while the journal cannot be written (~2 KB each)
WRITE_RUN = 500  # kept results written with one fsync (_write_unwritten): ~1 MB


class NotJournaled(OSError):
    """A result could not be written: it is kept in memory (unless at UNWRITTEN_MAX) and
    written with the next append or retry.  `unwritten`: how many are kept now."""

    def __init__(self, code: int, text: str, unwritten: int, dropped: bool = False) -> None:
        super().__init__(code, text)
        self.text = text
        self.unwritten = unwritten
        self.dropped = dropped  # at UNWRITTEN_MAX: this one is not kept

    def __str__(self) -> str:
        return self.text


@dataclass
class _Claim:
    """A spill file taken back whose results are not all journaled yet, held under its flock."""

    place: Path
    f: BinaryIO
    dropped: int  # the journal's unwritten_dropped when taken: one dropped since may be in it


def _line(record: Any) -> bytes:
    """A record's journal line (as append writes it): the same result, the same bytes."""
    return (json.dumps(record.to_json(), sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")


def spill_places(journal: Path) -> list[Path]:
    """Where a stop puts the results it could not journal, in the order tried: beside the
    journal (journal.unwritten.jsonl: on its disk, it survives a reboot), else in
    /dev/shm (memory: a full or read-only journal disk does not stop it; it survives the
    exporter's restart, not the machine's), in a directory only this user can read."""
    beside = journal.with_name(f"{journal.stem}.unwritten.jsonl")
    token = hashlib.sha256(str(journal.absolute()).encode()).hexdigest()[:12]
    return [beside, Path("/dev/shm") / f"bigbinf-{os.geteuid()}" / f"{journal.stem}-{token}.unwritten.jsonl"]


def _private_directory(directory: Path) -> None:
    """`directory` made (0700) or checked: ours and not a symlink (it is in a shared /dev/shm)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise PermissionError(errno.EACCES, "not a private directory of this user", str(directory))


def _trusted(place: Path) -> bool:
    """A spill file to take back: a regular file of this user, in the journal's directory
    or a private one (nobody else could have written results into it)."""
    try:
        st = os.lstat(place)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        log.warning("%s: not taken back (not a regular file of this user)", place)
        return False
    if st.st_mode & 0o022:
        log.warning("%s: not taken back (others may write it)", place)
        return False
    return True


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
        # Results that could not be written yet (start, line), oldest first (append).
        self.unwritten: deque[tuple[float, bytes]] = deque()
        self.unwritten_dropped = 0
        self._rotated = False  # an append under the lock rotated: settled after it
        # Spill files this process took back but could not journal yet, each held open
        # under its flock (no other start takes them back meanwhile): removed once every
        # result kept unwritten is journaled, left for the next start otherwise.
        self._claims: list[_Claim] = []

    def append(self, result: RecordT) -> None:
        """Write one result durably (flush + fsync) before anyone publishes it.

        If it cannot be written (a full, read-only or failing disk), it is kept in memory
        (`unwritten`, at most UNWRITTEN_MAX) and NotJournaled is raised; each later append
        (and `retry`) writes the kept ones first, in order."""
        line = _line(result)
        with self._lock:
            if len(self.unwritten) >= UNWRITTEN_MAX:
                self.unwritten_dropped += 1  # bounded: memory is what keeps the exporter up
                raise NotJournaled(
                    0,
                    f"journal {self.path}: {len(self.unwritten)} results kept unwritten, at their bound "
                    f"({UNWRITTEN_MAX}): this one is not kept ({self.unwritten_dropped} so far)",
                    len(self.unwritten),
                    dropped=True,
                )
            self.unwritten.append((result.start_timestamp, line))
            try:
                self._write_unwritten()
            finally:
                rotated, self._rotated = self._rotated, False
        if rotated:
            self.settle()  # outside the lock: appends go on while a day is sealed

    def take_over(self, old: _Records[RecordT]) -> None:
        """What `old` (this journal before a reload) could not write yet: its kept results,
        the spill files it holds for them, and its count of dropped ones (a counter)."""
        with old._lock:
            self.unwritten, self.unwritten_dropped = old.unwritten, old.unwritten_dropped
            self._claims, old._claims = old._claims, []
            old.unwritten = deque()

    @property
    def unwritten_count(self) -> int:
        return len(self.unwritten)

    def retry(self) -> int:
        """Write the results kept unwritten (the disk may take writes again); returns how
        many it wrote.  Never raises: what still cannot be written stays kept."""
        if not self.unwritten:  # not even the lock: a start's split may hold it for minutes
            return 0
        with self._lock:
            if not self.unwritten:
                return 0
            before = len(self.unwritten)
            with contextlib.suppress(NotJournaled):
                self._write_unwritten(fresh=False)
            written = before - len(self.unwritten)
            rotated, self._rotated = self._rotated, False
        if rotated:
            with contextlib.suppress(OSError):
                self.settle()
        return written

    def _write_unwritten(self, fresh: bool = True, said: bool = True) -> None:
        """Write the kept lines oldest first (with self._lock held), in runs of up to
        WRITE_RUN lines with one fsync each; NotJournaled at the first run that fails (it
        and those after it stay kept, in order).  `said`: log the backlog written."""
        written, backlog = 0, len(self.unwritten) - (1 if fresh else 0)  # fresh: the one just appended
        backlog = backlog if said else 0
        try:
            while self.unwritten:
                run = list(itertools.islice(self.unwritten, WRITE_RUN))
                try:
                    count, rotated = self._write_lines(run)
                except OSError:
                    if len(run) == 1:
                        raise
                    # A disk with room for a line or two, not the run: one at a time.
                    count, rotated = self._write_lines(run[:1])
                self._rotated = rotated or self._rotated
                for _ in range(count):
                    self.unwritten.popleft()
                written += count
        except OSError as exc:
            raise NotJournaled(
                exc.errno or 0, describe_os_error(exc, self.path, "journal"), len(self.unwritten)
            ) from exc
        finally:
            if written and self.fold is not None:
                with contextlib.suppress(OSError):  # a checkpoint is only ever behind
                    self.fold.after_append()
            if written and not self.unwritten:
                self._release_claims(journaled=True)
            if written and backlog > 0:
                log.info(
                    "journal %s: %d results kept while it could not be written are journaled now%s",
                    self.path,
                    min(written, backlog),
                    f" ({len(self.unwritten)} still unwritten)" if self.unwritten else "",
                )

    def _write_lines(self, run: Sequence[tuple[float, bytes]]) -> tuple[int, bool]:
        """Append the first lines of `run` ((start, line), oldest first) that belong in
        the live file, durably, with one fsync: up to the first of a later UTC day than the
        live file's first line (the next call rotates for it).  (How many, whether it
        rotated the live file first.)  All or none: a failed write is cut back."""
        rotated = False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            with open(self.path, "a+b") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # released by the close
                if not _same_file(f, self.path):
                    continue  # rotated while we waited for the lock: append to the new one
                f.seek(0)
                head = f.readline()
                first = _start_of(head) if head.strip() else None
                day = math.floor((first if first is not None else run[0][0]) / DAY)
                if not rotated and math.floor(run[0][0] / DAY) > day:  # as _due, its first line read once
                    self._rotate(f)
                    rotated = True
                    continue
                lines = [run[0][1]]
                for start, line in run[1:]:
                    if math.floor(start / DAY) > day:
                        break
                    lines.append(line)
                # A torn last line (power loss mid-write) has no newline: appending onto it
                # would glue this result to it and lose both.  End it first; read() then
                # reports the torn line alone and keeps this one.
                end = f.seek(0, os.SEEK_END)
                data = b"".join(lines)
                if end:
                    f.seek(end - 1)
                    if f.read(1) != b"\n":
                        data = b"\n" + data
                try:
                    # Unbuffered ("a" mode: always at the end, whatever was read): a buffer
                    # would keep a part that failed and write it at the close, torn.
                    view = memoryview(data)
                    while view:
                        view = view[os.write(f.fileno(), view) :]
                    os.fsync(f.fileno())
                except OSError:
                    # A part written (a disk filling up): cut back, so that the whole lines
                    # written later are the only copy and no torn one is left before them.
                    with contextlib.suppress(OSError):
                        os.ftruncate(f.fileno(), end)
                    raise
                return len(lines), rotated

    # ----------------------------------------------------------- kept elsewhere at a stop

    def spill(self) -> Path | None:
        """At a stop: the results still unwritten written to the first place that takes
        them (spill_places: beside the journal, else /dev/shm), after one more try at the
        journal; returns where (None: nothing was unwritten, or nowhere took them)."""
        if not self.unwritten:
            return None
        self.retry()
        with self._lock:
            if not self.unwritten:
                return None
            text = b"".join(line for _, line in self.unwritten).decode("utf-8")
            problems = []
            for place in spill_places(self.path):
                try:
                    if place.parent != self.path.parent:
                        _private_directory(place.parent)
                    previous = place.read_text(encoding="utf-8") if place.exists() else ""
                    # A spill this process took back holds lines kept here: written once.
                    kept = {line for _, line in self.unwritten}
                    previous = "".join(p for p in previous.splitlines(keepends=True) if self._normal(p) not in kept)
                    if previous and not previous.endswith("\n"):
                        previous += "\n"
                    replace_durably(place, previous + text)
                except OSError as exc:
                    problems.append(describe_os_error(exc, place))
                    continue
                log.warning(
                    "journal %s: %d results could not be journaled before this stop: written to %s; the next start "
                    "journals them",
                    self.path,
                    len(self.unwritten),
                    place,
                )
                self.unwritten.clear()
                self._release_claims(journaled=False)  # their lines are in `place` now (or journaled)
                return place
            log.error(
                "journal %s: %d results could not be journaled before this stop and are lost: %s",
                self.path,
                len(self.unwritten),
                "; ".join(problems),
            )
            return None

    def _normal(self, text: str) -> bytes:
        """A spilled line as append writes it (a line that does not parse: as it is)."""
        try:
            return _line(self.record.from_json(json.loads(text)))
        except (ValueError, TypeError, KeyError):
            return text.encode("utf-8")

    def take_back(self) -> int:
        """At a start: journal the results a stop spilled (spill), in order, each once.

        Each spill file is taken back under its own flock (LOCK_NB: a `once` starting beside
        a `serve` leaves it to the one that holds it), and a result already journaled (by a
        start killed midway) or already kept here is not taken again.  The file is removed
        only once all its results are journaled (fsynced); while the journal still takes no
        writes they are kept in memory, retried, and the file stays, held, so a kill loses
        none of them.  Returns how many it journaled."""
        taken = 0
        for place in spill_places(self.path):
            if any(c.place == place for c in self._claims) or not _trusted(place):
                continue
            try:
                f = open_regular(place)  # held as a claim, or closed below
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                f.close()
                log.info("journal %s: %s is being taken back by another process on this journal", self.path, place)
                continue
            if not _same_file(f, place):  # taken back (removed) or spilled again meanwhile
                f.close()
                continue
            try:
                written, kept, dropped = self._take_back_locked(place, f)
            except BaseException:
                f.close()
                raise
            taken += written
            if dropped and not kept:
                f.close()  # the file keeps what the bound dropped: the next start takes it back
                log.error(
                    "journal %s: took back %d results a stop left in %s; %d more are not kept (unwritten results at "
                    "their bound): %s is kept for the next start",
                    self.path,
                    written,
                    place,
                    dropped,
                    place,
                )
                continue
            if kept:
                self._claims.append(_Claim(place, f, self.unwritten_dropped - dropped))
                log.warning(
                    "journal %s: took back %d results a stop left in %s; %d of them cannot be journaled yet: kept in "
                    "memory and retried, and %s is kept until they are",
                    self.path,
                    written + kept,
                    place,
                    kept,
                    place,
                )
                continue
            with f:
                if _same_file(f, place):
                    with contextlib.suppress(OSError):
                        place.unlink()
                        sync_directory(place.parent)
            log.info("journal %s: took back %d results a stop left in %s", self.path, written, place)
        return taken

    def _take_back_locked(self, place: Path, f: BinaryIO) -> tuple[int, int, int]:
        """The results of one spill file (held, flocked, as `f`) appended; how many were
        (journaled, kept unwritten, dropped at the bound)."""
        records = []
        for raw in f.read().splitlines():
            if not raw.strip():
                continue
            try:
                records.append(self.record.from_json(json.loads(raw)))
            except (ValueError, TypeError) as exc:
                log.warning("%s: skipped a line (%s)", place, exc)
        if not records:
            return 0, 0, 0
        since = min(r.start_timestamp for r in records)
        there = {_line(r) for r in self.read(since=since)}
        with self._lock:
            there |= {line for _, line in self.unwritten}
            added, dropped = 0, 0
            for r in records:
                line = _line(r)
                if line in there:
                    continue
                there.add(line)
                if len(self.unwritten) >= UNWRITTEN_MAX:  # bounded as append's
                    self.unwritten_dropped += 1
                    dropped += 1
                    continue
                self.unwritten.append((r.start_timestamp, line))
                added += 1
            # Written as append writes them, in order after what was kept, but in runs
            # with one fsync each (_write_lines): 20,000 taken back one fsync each kept
            # /metrics down 94 s.
            with contextlib.suppress(NotJournaled):
                self._write_unwritten(fresh=False, said=False)
            kept = min(added, len(self.unwritten))
            rotated, self._rotated = self._rotated, False
        if rotated:
            with contextlib.suppress(OSError):
                self.settle()
        return added - kept, kept, dropped

    def _release_claims(self, journaled: bool) -> None:
        """The spill files taken back and held: removed if `journaled` (all their results
        are, none dropped at the bound since), and released."""
        claims, self._claims = self._claims, []
        for claim in claims:
            with claim.f:
                if journaled and claim.dropped == self.unwritten_dropped and _same_file(claim.f, claim.place):
                    with contextlib.suppress(OSError):
                        claim.place.unlink()
                        sync_directory(claim.place.parent)
                    log.info(
                        "journal %s: the results taken back from %s are journaled: it is removed",
                        self.path,
                        claim.place,
                    )

    def set_aside_unreadable(self) -> Path | None:
        """At a start (and `journal-compact`): a live file the disk cannot read (EIO, EBADMSG)
        is renamed aside as `<journal>.damaged-<stamp>` (counted with the damaged segments)
        and a new one started, said in one line; one that cannot be renamed is left, and
        the results measured meanwhile are kept unwritten.  Returns where it went."""
        try:
            with open_regular(self.path) as f:
                f.read(1)
            return None
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in TRANSIENT:
                return None
            damage = _reason(exc)
        aside = self.path.with_name(self.path.name + DAMAGED + _stamp(time.time()))
        try:
            os.rename(self.path, aside)
            sync_directory(self.path.parent)
        except OSError as err:
            _UNMOVED.add(self.path)
            log.error(
                "journal %s: unreadable (%s); not moved aside (%s): the segments before it are read, and results "
                "are kept in memory until it is moved or removed (mv %s %s)",
                self.path,
                damage,
                describe_os_error(err),
                self.path,
                aside,
            )
            return None
        _UNMOVED.discard(self.path)
        log.error(
            "journal %s: unreadable (%s): moved aside to %s and a new one started; the results in it since its last "
            "rotation (how many cannot be known: it cannot be read) are lost unless the disk gives them back",
            self.path,
            damage,
            aside.name,
        )
        return aside

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
        low, high = math.inf, -math.inf  # streamed: a single-file journal may hold a million lines
        for raw in f:
            t = _start_of(raw) if raw.strip() else None
            if t is not None:
                low, high = min(low, t), max(high, t)
        first, last = math.floor(low), math.ceil(high)
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
        drop_count_temporaries(self.path)
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

    def split_due(self) -> bool:
        """The live file holds results of more than one UTC day (rotate_now would split it)."""
        try:
            with open_regular(self.path) as f:
                return self._due(f, None)
        except FileNotFoundError:
            return False

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
