"""A damaged day segment (a bad CRC, truncated, not gzip) never stops a read or a start
(issue 44): the reader reads as far as it can, the part is moved aside as
`<part>.damaged-<stamp>` (never read again) and its readable results stay in the journal
under the part's own name, each exactly once, with or without a checkpoint; a kill at any
step of that quarantine loses nothing and duplicates nothing.  And a result the journal
cannot take is kept in memory, in order, written when it takes writes again, and spilled
to a second place at a stop for the next start to take back."""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import pytest

from bigbinf.journal import checkpoint, store
from bigbinf.journal.store import DAMAGED, Journal, NotJournaled, damaged, leftovers, read, segments
from bigbinf.result import Result

T0 = 1_760_000_000.0
PER_DAY = 96  # a result every 15 minutes


def result(i: int) -> Result:
    t = T0 + i * 900.0
    return Result("scp", "uwc", "5MiB", "download", t, "ok", duration_seconds=2.0, file_bytes=5 << 20, files=1,
                  error=f"{i:06d}" + "x" * 200)  # fmt: skip


def index(r: Result) -> int:
    return round((r.start_timestamp - T0) / 900.0)


def journal_of(directory: Path, days: int = 4) -> Path:
    path = directory / "journal.jsonl"
    journal = Journal(path)
    for i in range(days * PER_DAY):
        journal.append(result(i))
    journal.rotate_now()
    return path


def damage(part: Path, how: str) -> None:
    data = bytearray(part.read_bytes())
    if how == "crc":  # 16 bytes flipped in the middle
        mid = len(data) // 2
        data[mid : mid + 16] = bytes(b ^ 0xFF for b in data[mid : mid + 16])
    elif how == "truncated":
        data = data[: len(data) // 2]
    elif how == "not_gzip":
        data = bytearray(b"this is no gzip file\n" * 10)
    elif how == "zeros":  # what a crash leaves on unwritten extents: gzip reads zeros as a clean end
        data = bytearray(len(data))
    part.write_bytes(bytes(data))


def members(data: bytes) -> list[tuple[int, int, set[int]]]:
    """The gzip members of an undamaged part: (start, end, its results), independent of
    store.Lines (zlib's own gzip reader, which checks each member's CRC)."""
    found, at = [], 0
    while at < len(data):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = inflater.decompress(data[at:])
        end = len(data) - len(inflater.unused_data)
        found.append((at, end, {index(Result.from_json(json.loads(raw))) for raw in out.splitlines()}))
        at = end
    return found


def intact(before: bytes, part: Path) -> set[int]:
    """The results of the members of `before` whose bytes stand unchanged in `part` now:
    the only ones a reader may give back as measured."""
    after = part.read_bytes()
    return {i for start, end, held in members(before) if after[start:end] == before[start:end] for i in held}


@pytest.mark.parametrize("with_checkpoint", [True, False])
@pytest.mark.parametrize("how", ["crc", "truncated", "not_gzip", "zeros"])
def test_a_damaged_part_is_moved_aside_and_its_readable_results_kept_once(
    tmp_path: Path, how: str, with_checkpoint: bool, caplog: pytest.LogCaptureFixture
) -> None:
    path = journal_of(tmp_path)
    if with_checkpoint:
        checkpoint.of(Journal(path))  # a good checkpoint, saved: it covers the part before it is damaged
    else:
        checkpoint.checkpoint_path(path).unlink(missing_ok=True)
    parts = [s for s in segments(path) if s.sealed]
    victim = parts[1].path
    whole = {index(r) for r in read(path)}
    assert len(whole) == 4 * PER_DAY
    before = victim.read_bytes()
    held = {i for _, _, results in members(before) for i in results}
    assert len(members(before)) > 1  # a member per store.MEMBER_BYTES: a CRC proves a batch of lines
    assert store.sealed_bytes(path)[victim.name] == len(gzip.decompress(before))  # what a start would read
    damage(victim, how)
    kept = intact(before, victim)  # what is provably intact of it now
    assert len(kept) < len(held)
    expected = (whole - held) | kept

    with caplog.at_level(logging.ERROR, logger="bigbinf.journal.store"):
        # A start: the checkpoint loaded (or rebuilt: it reads the damaged part), then the journal read.
        fold = checkpoint.of(Journal(path))
        first = Counter(index(r) for r in read(path))
    assert set(first) == expected and max(first.values()) == 1
    aside = damaged(path)
    assert len(aside) == 1 and aside[0].name.startswith(victim.name + DAMAGED)
    assert aside[0].read_bytes() != b"" and not [s for s in segments(path) if DAMAGED in s.path.name]
    lines = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(lines) == 1, lines  # one line: the file, what, how much is lost
    assert str(victim) in lines[0] and f"{len(kept)} results kept" in lines[0]
    assert "lost" in lines[0] or "unreadable" in lines[0]
    # Read again: the same, nothing more moved aside, no warning per line.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bigbinf.journal.store"):
        assert Counter(index(r) for r in read(path)) == first
    assert caplog.records == [] and len(damaged(path)) == 1
    assert victim.exists() == bool(kept)  # the salvage under its name, or nothing left of it
    # The checkpoint holds each result once: a good one what it folded before the damage
    # (the lost results' runs too: they were measured), a rebuilt one what is readable now.
    fold = checkpoint.of(Journal(path))
    if with_checkpoint:
        assert fold.seq == 4 * PER_DAY
    else:
        rebuilt = checkpoint.ResultsFold(Journal(path))
        rebuilt.catch_up()
        assert fold.seq == rebuilt.seq == len(expected) and fold.latest == rebuilt.latest
        runs = [fold.series(k).tolist() for k in fold.packed.keys() | fold.history.keys()]
        assert sorted(map(len, runs)) == [len(expected)]


@pytest.mark.parametrize("old_part", [True, False])
def test_a_crc_failure_restores_no_altered_result_and_says_the_true_loss(
    tmp_path: Path, old_part: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Bytes flipped inside a gzip member can inflate to altered results that still parse
    (here a stored block: one digit of a duration changed); only the member's CRC says so.
    None of that member's results is restored as measured.  A part sealed now (a member
    per batch of lines, its count recorded at sealing) loses that member only, said
    exactly; one sealed before (one member, no count) loses all of it, said as "at least"."""
    path = journal_of(tmp_path, days=3)
    victim = [s for s in segments(path) if s.sealed][1].path
    lines = gzip.decompress(victim.read_bytes()).splitlines(keepends=True)
    batches = [lines] if old_part else [lines[: len(lines) // 2], lines[len(lines) // 2 :]]
    data = bytearray(b"".join(gzip.compress(b"".join(batch), compresslevel=0, mtime=0) for batch in batches))
    at = data.index(b'"duration_seconds":2.0') + len(b'"duration_seconds":')
    data[at] = ord("9")  # 2.0 s -> 9.0 s: still a result, its throughput changed
    victim.write_bytes(bytes(data))
    if old_part:
        store.record_counts(path, {victim.name: None})  # sealed before counts were recorded
    lost = {index(Result.from_json(json.loads(raw))) for raw in batches[0]}
    whole = {index(result(i)) for i in range(3 * PER_DAY)}
    with caplog.at_level(logging.ERROR, logger="bigbinf.journal.store"):
        got = list(read(path))
    assert all(r.duration_seconds == 2.0 for r in got)  # the altered one is not a measurement
    assert Counter(index(r) for r in got) == Counter(whole - lost)
    (said,) = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert str(victim) in said and "CRC check failed" in said
    assert f"{len(lost)} lines that inflate to results but fail their CRC, not restored" in said
    if old_part:
        assert f"0 results kept in it, at least {len(lost)} results lost" in said and "cannot be known" in said
    else:
        assert f"{len(lines) - len(lost)} results kept in it, {len(lost)} of the {len(lines)} results" in said
    # The altered bytes stay for a human, in the file moved aside.
    (aside,) = damaged(path)
    assert aside.read_bytes() == bytes(data)


# A quarantine SIGKILLed at its Nth file-system step (the temporary file's write and fsync,
# the link, the rename or unlink, the directory fsyncs).
QUARANTINE = r"""
import os, signal, sys
from pathlib import Path
from bigbinf.journal import store

part, kill_at = Path(sys.argv[1]), int(sys.argv[2])
steps = 0
def step(real):
    def wrapped(*args, **kwargs):
        global steps
        steps += 1
        if steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return wrapped
for name in ("link", "replace", "unlink", "fsync", "rename"):
    setattr(store.os, name, step(getattr(os, name)))
store.quarantine(part)
print(steps)
"""


@pytest.mark.parametrize("how", ["crc", "not_gzip"])
def test_a_kill_at_each_step_of_the_quarantine_loses_nothing_and_reads_nothing_twice(tmp_path: Path, how: str) -> None:
    original = tmp_path / "original"
    original.mkdir()
    path = journal_of(original, days=3)
    victim = [s for s in segments(path) if s.sealed][1]
    damage(victim.path, how)
    probe = tmp_path / "probe"
    shutil.copytree(original, probe)
    expected = Counter(index(r) for r in read(probe / "journal.jsonl"))  # as a reader reads it, quarantining
    assert len(damaged(probe / "journal.jsonl")) == 1
    uncut = tmp_path / "uncut"
    shutil.copytree(original, uncut)
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    part = uncut / victim.path.name
    done = subprocess.run([sys.executable, "-c", QUARANTINE, str(part), "0"], env=env, capture_output=True, check=True)
    total = int(done.stdout)  # its steps, uncut
    assert total >= 3
    kills = 0
    for kill_at in range(1, total + 1):
        run = tmp_path / f"kill{kill_at}"
        shutil.copytree(original, run, copy_function=shutil.copy2)
        part = run / victim.path.name
        ended = subprocess.run([sys.executable, "-c", QUARANTINE, str(part), str(kill_at)], env=env)
        assert ended.returncode == -signal.SIGKILL
        kills += 1
        journal = run / "journal.jsonl"
        # Whatever the kill left: each result read exactly once, the same as before it...
        assert Counter(index(r) for r in read(journal)) == expected, kill_at
        # ...and after the next reader finished the quarantine: the same still, one file aside.
        assert Counter(index(r) for r in read(journal)) == expected, kill_at
        assert len(damaged(journal)) == 1, (kill_at, damaged(journal))
        Journal(journal).rotate_now()  # a start: the temporary files a kill left are removed
        assert not leftovers(journal) and not [p for p in run.iterdir() if p.name.startswith(".")], kill_at
    assert kills == total


# ---------------------------------------------------------------- not journaled


class FullDisk:
    """os.fsync that fails for the files under `directory` as a full disk does while
    `full` (a pure unit: the lab test fills a real tmpfs)."""

    def __init__(self, directory: Path) -> None:
        self.directory = str(directory)
        self.full = False
        self.real = os.fsync

    def __call__(self, fd: int) -> None:
        if self.full and os.readlink(f"/proc/self/fd/{fd}").startswith(self.directory):
            raise OSError(errno.ENOSPC, "No space left on device")
        self.real(fd)


def test_results_the_journal_cannot_take_are_kept_in_order_and_written_when_it_can(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    disk = FullDisk(tmp_path)
    monkeypatch.setattr(store.os, "fsync", disk)
    for i in range(5):
        journal.append(result(i))
    disk.full = True
    for i in range(5, 300):  # past a day boundary: the rotation waits too
        with pytest.raises(NotJournaled) as raised:
            journal.append(result(i))
        assert raised.value.unwritten == i - 4
    assert "journal" in str(raised.value) and "ENOSPC" in str(raised.value) and "free space" in str(raised.value)
    assert journal.unwritten_count == 295
    assert [index(r) for r in read(path)] == list(range(5))  # no torn line left behind
    assert journal.retry() == 0
    disk.full = False
    assert journal.retry() == 295 and journal.unwritten_count == 0
    assert [index(r) for r in read(path)] == list(range(300))  # in order, once each, rotated by day
    assert len([s for s in segments(path) if s.sealed]) >= 3


def test_a_stop_spills_what_is_unwritten_and_the_next_start_takes_it_back_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    disk = FullDisk(tmp_path)
    monkeypatch.setattr(store.os, "fsync", disk)
    journal.append(result(0))
    disk.full = True
    for i in range(1, 4):
        with pytest.raises(NotJournaled):
            journal.append(result(i))
    place = journal.spill()  # the disk full: the spill's own fsync fails beside it too, so /dev/shm
    assert place is not None and place == store.spill_places(path)[1] and place.is_file()
    try:
        assert (place.parent.stat().st_mode & 0o777) == 0o700
        assert [index(Result.from_json(json.loads(line))) for line in place.read_text().splitlines()] == [1, 2, 3]
        disk.full = False
        # A start killed after journaling one of them (the spill file still there): none twice.
        Journal(path).append(result(1))
        assert Journal(path).take_back() == 2
        assert not place.exists()
        assert [index(r) for r in read(path)] == [0, 1, 2, 3]
        assert Journal(path).take_back() == 0
    finally:
        place.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            place.parent.rmdir()


def test_a_spill_file_others_may_write_is_not_taken_back(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    beside = store.spill_places(path)[0]
    beside.write_text(json.dumps(result(1).to_json()) + "\n")
    beside.chmod(0o666)
    assert Journal(path).take_back() == 0 and list(read(path)) == []
    beside.chmod(0o600)
    assert Journal(path).take_back() == 1 and [index(r) for r in read(path)] == [1]


def test_the_damaged_parts_of_each_journal_are_its_own(tmp_path: Path) -> None:
    results = journal_of(tmp_path, days=2)
    paths = tmp_path / "journal.paths.jsonl"
    for name in (results, paths):
        (tmp_path / f"{name.stem}.20251009T000000Z-20251009T235959Z.0123abcd.jsonl.gz{DAMAGED}20261201T000000Z").touch()
    assert [p.name.split(".")[1] for p in damaged(results)] == ["20251009T000000Z-20251009T235959Z"]
    assert [p.name.split(".")[1] for p in damaged(paths)] == ["paths"]


def test_report_reads_past_a_damaged_part_and_moves_it_aside(tmp_path: Path) -> None:
    path = journal_of(tmp_path, days=3)
    victim = [s for s in segments(path) if s.sealed][1].path
    before = victim.read_bytes()
    held = {i for _, _, results in members(before) for i in results}
    damage(victim, "truncated")
    lost = len(held - intact(before, victim))
    done = subprocess.run(
        [sys.executable, "-m", "bigbinf", "report", "--journal", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    said = [line for line in done.stderr.splitlines() if f"journal {victim}: damaged (EOFError" in line]
    # The true loss, not what the reader saw: the count its sealing recorded, less what reads whole.
    assert len(said) == 1 and f"{len(held) - lost} results kept in it, {lost} of the {len(held)} results" in said[0]
    assert len(damaged(path)) == 1 and (tmp_path / "out" / "index.html").is_file()


def _unopenable(victim: Path, how: str) -> None:
    """What can stand where a part stood that open() cannot read as a file: a directory, a
    symlink loop, a FIFO (its open waits for a writer), a link to a device that reads for
    ever (/dev/zero)."""
    victim.unlink()
    if how == "directory":
        victim.mkdir()
    elif how == "loop":
        victim.symlink_to(victim.name)
    elif how == "fifo":
        os.mkfifo(victim)
    else:
        victim.symlink_to("/dev/zero")


UNOPENABLE = ["directory", "loop", "fifo", "devzero"]


@pytest.mark.parametrize("with_checkpoint", [True, False])
@pytest.mark.parametrize("how", UNOPENABLE)
def test_a_part_that_cannot_be_opened_is_moved_aside_and_the_rest_read(
    tmp_path: Path, how: str, with_checkpoint: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A directory or a symlink loop where a sealed part stood (a bad restore, a stray
    mkdir -p) is an unreadable part like a bad CRC: one line naming it, renamed aside,
    counted, and every other part read; not an IsADirectoryError or ELOOP out of a start."""
    path = journal_of(tmp_path)
    if with_checkpoint:
        checkpoint.of(Journal(path))
    else:
        checkpoint.checkpoint_path(path).unlink(missing_ok=True)
    victim = [s for s in segments(path) if s.sealed][1].path
    in_victim = {i for _, _, results in members(victim.read_bytes()) for i in results}
    held = {index(r) for r in read(path)} - in_victim
    _unopenable(victim, how)
    with caplog.at_level(logging.ERROR, logger="bigbinf.journal.store"):
        fold = checkpoint.of(Journal(path))  # rebuilt when lost: it reads the part
        first = Counter(index(r) for r in read(path))
    assert set(first) == held and max(first.values()) == 1
    aside = damaged(path)
    assert len(aside) == 1 and aside[0].name.startswith(victim.name + DAMAGED) and not os.path.lexists(victim)
    kinds = {"directory": stat.S_ISDIR, "loop": stat.S_ISLNK, "fifo": stat.S_ISFIFO, "devzero": stat.S_ISLNK}
    assert kinds[how](aside[0].lstat().st_mode)
    lines = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(lines) == 1 and str(victim) in lines[0] and "cannot be opened" in lines[0], lines
    # How many: the count its sealing recorded beside the parts (the part itself is gone).
    assert "0 results kept" in lines[0] and f"all its {len(in_victim)} results lost" in lines[0]
    assert fold.seq == (4 * PER_DAY if with_checkpoint else len(held))
    done = subprocess.run(
        [sys.executable, "-m", "bigbinf", "report", "--journal", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("how", [*UNOPENABLE, "zeros"])
def test_journal_compact_moves_aside_a_part_it_cannot_read(tmp_path: Path, how: str) -> None:
    path = journal_of(tmp_path, days=3)
    victim = [s for s in segments(path) if s.sealed][1].path
    if how == "zeros":
        damage(victim, how)
    else:
        _unopenable(victim, how)
    moved = store.check(path)
    assert [p.name.split(DAMAGED)[0] for p in moved] == [victim.name] and damaged(path) == moved
    assert len({index(r) for r in read(path)}) == 2 * PER_DAY


@pytest.mark.parametrize("how", ["fifo", "devzero"])
def test_a_live_file_that_is_no_file_is_set_aside_not_waited_on(tmp_path: Path, how: str) -> None:
    # A FIFO's open waits for a writer, /dev/zero reads for ever: a start set either aside
    # and began a new live file (breaker44: both hung a start, with nothing logged).
    path = tmp_path / "journal.jsonl"
    if how == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    aside = Journal(path).set_aside_unreadable()
    assert aside is not None and aside.name.startswith(path.name + DAMAGED) and not os.path.lexists(path)
    assert store.check(path) == [] and list(read(path)) == []
