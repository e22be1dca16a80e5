"""A journal file the disk will not read, or a disk that takes no writes, never stops a
start (issue 44, the breaker's second round): an unreadable checkpoint is rebuilt, an
unreadable live journal is moved aside (counted as damaged) and a new one started, an
unreadable regressions' journal is read as missing; a first start on a read-only disk
holds the regression states in memory; `journal-compact` says what it could not do in one
line and exits non-zero.  Unreadable here: a directory where the file should be (open
fails with EISDIR, a real OSError as EIO and EBADMSG are; the lab runs give EBADMSG)."""

from __future__ import annotations

import errno
import gzip
import json
import logging
import os
import zlib
from pathlib import Path

import pytest

from bigbinf import lab
from bigbinf.config import load_config
from bigbinf.history.regression_state import RegressionJournal, regressions_path
from bigbinf.journal import checkpoint
from bigbinf.journal.store import DAMAGED, Journal, damaged, read
from bigbinf.result import Result
from bigbinf.service.collector import ExporterState
from bigbinf.service.restore import restore
from bigbinf.service.rounds import RoundRunner
from tests.support.mesh import write_mesh_config

T0 = 1_760_000_000.0


def result(i: int) -> Result:
    return Result("scp", "site00", "5MiB", "download", T0 + i * 3600.0, "ok", duration_seconds=2.0,
                  file_bytes=5 << 20, files=1)  # fmt: skip


def started(tmp_path: Path) -> tuple[Path, RoundRunner, ExporterState]:
    config_file = write_mesh_config(tmp_path, 1, 1, 1)
    config = load_config(config_file)
    journal = Journal(config.journal.path)
    for i in range(60):  # three days: sealed parts and a live file
        journal.append(result(i))
    checkpoint.of(journal)
    state = ExporterState()
    return config_file, RoundRunner(config, state, lab=lab.site), state


def unreadable(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.mkdir()
    (path / "x").touch()  # not empty: no rename over it, no rmdir of it


def test_an_unreadable_checkpoint_is_rebuilt_at_a_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config_file, runner, state = started(tmp_path)
    config = load_config(config_file)
    unreadable(checkpoint.checkpoint_path(config.journal.path))
    with caplog.at_level(logging.WARNING):
        restore(state, runner, config, lab.site)
    assert len(checkpoint.of(runner.journal).latest_results()) == 1  # rebuilt from the journal
    assert any("checkpoint" in r.getMessage() and "rebuilt" in r.getMessage() for r in caplog.records)


def test_an_unreadable_live_journal_is_moved_aside_and_a_new_one_started(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config_file, runner, state = started(tmp_path)
    config = load_config(config_file)
    path = config.journal.path
    sealed = len(list(read(path))) - sum(1 for line in path.read_text().splitlines() if line.strip())
    unreadable(path)
    with caplog.at_level(logging.ERROR):
        restore(state, runner, config, lab.site)
    (aside,) = damaged(path)
    assert aside.name.startswith(path.name + DAMAGED) and aside.is_dir()
    assert any(str(path) in r.getMessage() and "moved aside" in r.getMessage() for r in caplog.records)
    assert len(list(read(path))) == sealed  # the sealed days are read all the same
    runner.journal.append(result(100))  # and a new live file takes writes
    assert path.is_file() and len(list(read(path))) == sealed + 1


def test_an_unreadable_regressions_journal_is_read_as_missing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config_file, runner, state = started(tmp_path)
    config = load_config(config_file)
    regressions = regressions_path(config.journal.path)
    unreadable(regressions)
    with caplog.at_level(logging.ERROR):
        restore(state, runner, config, lab.site)
    lines = [r.getMessage() for r in caplog.records if str(regressions) in r.getMessage()]
    assert len(lines) == 1 and "read as missing" in lines[0] and "rebuilt" in lines[0]
    assert RegressionJournal(config.journal.path).present()  # a new one, written by the replay


def test_a_first_start_on_a_read_only_disk_holds_the_regression_states_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    config_file, runner, state = started(tmp_path)
    config = load_config(config_file)
    regressions = regressions_path(config.journal.path)
    real_touch = Path.touch

    def read_only(self: Path, *args: object, **kwargs: object) -> None:
        if self == regressions:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        real_touch(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "touch", read_only)
    with caplog.at_level(logging.WARNING):
        restore(state, runner, config, lab.site)
    assert runner.judging and not regressions.exists()
    (line,) = [r.getMessage() for r in caplog.records if str(regressions) in r.getMessage()]
    assert "EROFS" in line and "held in memory" in line


def test_journal_compact_on_a_journal_it_cannot_write_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bigbinf import cli
    from bigbinf.journal import store

    config_file, runner, _ = started(tmp_path)
    path = runner.journal.path
    path.write_text(path.read_text() + json.dumps(result(200).to_json()) + "\n")  # a day to rotate
    real_open = open

    def read_only(file: object, mode: str = "r", *args: object, **kwargs: object) -> object:
        if "+" in mode or "a" in mode or "w" in mode:
            raise OSError(errno.EROFS, "Read-only file system", str(file))
        return real_open(file, mode, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(store, "open", read_only, raising=False)
    monkeypatch.setattr(store.tempfile, "mkstemp", lambda **_: (_ for _ in ()).throw(OSError(errno.EROFS, "ro")))
    checkpoint.checkpoint_path(path).unlink()  # to be rebuilt: it cannot be written
    assert cli.main(["journal-compact", "--config.file", str(config_file)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err and all(line.startswith("journal-compact: ") for line in err)
    assert any(str(path) in line and "EROFS" in line and "remount" in line for line in err)
    assert any("checkpoint" in line and "not written" in line for line in err)
    assert os.path.getsize(path) > 0  # nothing lost: the live file is as it was


def test_a_damaged_part_that_cannot_be_moved_aside_is_counted_and_compact_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bigbinf import cli
    from bigbinf.journal import store

    config_file, runner, state = started(tmp_path)
    path = runner.journal.path
    part = next(s for s in store.segments(path) if s.sealed).path
    data = bytearray(part.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 16] = bytes(b ^ 0xFF for b in data[mid : mid + 16])
    part.write_bytes(bytes(data))

    def full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.os, "link", full)  # the quarantine's hard link: a full disk
    assert cli.main(["journal-compact", "--config.file", str(config_file)]) == 1
    err = capsys.readouterr().err
    assert f"{part}: damaged, not moved aside" in err
    assert part.exists() and damaged(path) == []
    runner.journal_health()
    assert state.journal_damaged == 1  # the gauge (and its alert) see it
    monkeypatch.undo()  # the disk takes writes again: moved aside, counted once, not twice
    (aside,) = store.check(path)
    runner.journal_health()
    assert state.journal_damaged == 1
    aside.unlink()  # removed by hand: it falls off
    runner.journal_health()
    assert state.journal_damaged == 0


def test_a_damaged_part_that_cannot_be_moved_aside_stays_counted_and_its_loss_said_at_each_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Through restore, as the server starts: the first start rebuilds the checkpoint, which
    reads the damaged part, cannot move it aside (the rename refused: EBUSY) and saves the
    part as folded.  A later start (a new process: nothing in memory) must count it still
    and say its loss again, not take the checkpoint's word that it was read; once the move
    is allowed it is moved aside, its readable rest kept, every result read once."""
    from bigbinf.journal import store

    config_file = write_mesh_config(tmp_path, 1, 1, 1)
    config = load_config(config_file)
    path = config.journal.path
    every = 120.0  # 720 results a day: a part of several gzip members, so damage costs one
    path.write_bytes(b"".join(store._line(Result("scp", "site00", "5MiB", "download", T0 + i * every, "ok",
                     duration_seconds=2.0, file_bytes=5 << 20, files=1)) for i in range(3 * 720)))  # fmt: skip
    Journal(path).rotate_now()  # the split into day parts, each one's count recorded
    part = [s for s in store.segments(path) if s.sealed][1].path
    sealed = store.sealed_counts(path)[part.name]
    everything = [r.start_timestamp for r in read(path)]
    before = part.read_bytes()
    data = bytearray(before)
    mid = len(data) // 2
    data[mid : mid + 16] = bytes(b ^ 0xFF for b in data[mid : mid + 16])
    part.write_bytes(bytes(data))
    # The truth, from zlib's own gzip reader: the results of the members whose bytes stand unchanged.
    found, at = [], 0
    while at < len(before):
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = inflater.decompress(before[at:])
        end = len(before) - len(inflater.unused_data)
        if data[at:end] == before[at:end]:
            found += [json.loads(raw)["start_timestamp"] for raw in out.splitlines()]
        at = end
    kept = len(found)
    lost = {json.loads(raw)["start_timestamp"] for raw in gzip.decompress(before).splitlines()} - set(found)
    truth = [t for t in everything if t not in lost]
    assert 0 < kept < sealed and len(lost) == sealed - kept

    def refused(*_: object, **__: object) -> None:
        raise OSError(errno.EBUSY, "Device or resource busy")

    said = f"journal {part}: damaged ("
    loss = f"{sealed - kept} of the {sealed} results it was sealed with lost"

    def start() -> tuple[ExporterState, list[str]]:
        store._UNMOVED.clear()  # a new process
        state = ExporterState()
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            restore(state, RoundRunner(load_config(config_file), state, lab=lab.site), load_config(config_file),
                    lab.site)  # fmt: skip
        return state, [r.getMessage() for r in caplog.records if r.getMessage().startswith(said)]

    monkeypatch.setattr(store.os, "link", refused)  # the quarantine's link: what a bind-mounted part gives
    for _ in range(2):  # the first rebuilds the checkpoint (reading the part), the second loads it
        state, lines = start()
        assert state.journal_damaged == 1
        assert len(lines) == 1 and "not moved aside" in lines[0] and f"{kept} results read of it, {loss}" in lines[0]
        assert part.exists() and damaged(path) == []
        assert json.loads(checkpoint.checkpoint_path(path).read_text())["unmoved"] == [part.name]
    monkeypatch.undo()  # the rename allowed again: the next start moves it aside
    state, lines = start()
    assert state.journal_damaged == 1
    (aside,) = damaged(path)
    assert aside.name.startswith(part.name + DAMAGED)
    assert len(lines) == 1 and f"moved aside to {aside.name}; {kept} results kept in it, {loss}" in lines[0], lines
    assert [r.start_timestamp for r in read(path)] == truth  # each readable result once, in order
    assert json.loads(checkpoint.checkpoint_path(path).read_text())["unmoved"] == []
