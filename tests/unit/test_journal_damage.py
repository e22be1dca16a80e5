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
import json
import logging
import os
import shutil
import signal
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


def readable_lines(part: Path) -> set[int]:
    """The results of `part` that can be read: independent of store.Lines (zlib's raw
    inflate of what follows the 10-byte header our parts have, as far as it goes)."""
    data = part.read_bytes()
    found: set[int] = set()
    if data[:3] != b"\x1f\x8b\x08":
        return found
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    out = b""
    for at in range(10, len(data), 256):
        try:
            out += inflater.decompress(data[at : at + 256])
        except zlib.error:
            break
    for raw in out.split(b"\n")[:-1]:
        with contextlib.suppress(ValueError, TypeError):
            found.add(index(Result.from_json(json.loads(raw))))
    return found


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
    held = readable_lines(victim)
    damage(victim, how)
    kept = readable_lines(victim)  # what is readable of it now
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
    damage(victim, "truncated")
    done = subprocess.run(
        [sys.executable, "-m", "bigbinf", "report", "--journal", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    said = [line for line in done.stderr.splitlines() if f"journal {victim}: damaged (EOFError" in line]
    assert len(said) == 1 and "results kept in it" in said[0] and "cannot be known" in said[0]
    assert len(damaged(path)) == 1 and (tmp_path / "out" / "index.html").is_file()


@pytest.mark.parametrize("with_checkpoint", [True, False])
@pytest.mark.parametrize("how", ["directory", "loop"])
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
    held = {index(r) for r in read(path)} - readable_lines(victim)
    victim.unlink()
    if how == "directory":
        victim.mkdir()
    else:
        victim.symlink_to(victim.name)
    with caplog.at_level(logging.ERROR, logger="bigbinf.journal.store"):
        fold = checkpoint.of(Journal(path))  # rebuilt when lost: it reads the part
        first = Counter(index(r) for r in read(path))
    assert set(first) == held and max(first.values()) == 1
    aside = damaged(path)
    assert len(aside) == 1 and aside[0].name.startswith(victim.name + DAMAGED) and not os.path.lexists(victim)
    assert aside[0].is_dir() if how == "directory" else aside[0].is_symlink()
    lines = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(lines) == 1 and str(victim) in lines[0] and "cannot be opened" in lines[0], lines
    assert "0 results kept" in lines[0] and "all its results lost" in lines[0]
    assert fold.seq == (4 * PER_DAY if with_checkpoint else len(held))
    done = subprocess.run(
        [sys.executable, "-m", "bigbinf", "report", "--journal", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("how", ["directory", "loop", "zeros"])
def test_journal_compact_moves_aside_a_part_it_cannot_read(tmp_path: Path, how: str) -> None:
    path = journal_of(tmp_path, days=3)
    victim = [s for s in segments(path) if s.sealed][1].path
    if how == "zeros":
        damage(victim, how)
    else:
        victim.unlink()
        victim.mkdir() if how == "directory" else victim.symlink_to(victim.name)
    moved = store.check(path)
    assert [p.name.split(DAMAGED)[0] for p in moved] == [victim.name] and damaged(path) == moved
    assert len({index(r) for r in read(path)}) == 2 * PER_DAY
