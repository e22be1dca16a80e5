"""What a stop spilled is taken back by one start, and its file removed only once its
results are journaled (issue 44, the breaker's second round): a start on a journal that
still takes no writes keeps the spill file (and the results, in memory), a `once` beside a
`serve` journals none of it twice, and a result past the in-memory bound is said lost once
and counted."""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from bigbinf.journal import store
from bigbinf.journal.store import Journal, NotJournaled, read
from bigbinf.result import Result

T0 = 1_760_000_000.0


def result(i: int) -> Result:
    return Result("scp", "uwc", "5MiB", "download", T0 + i * 60.0, "ok", duration_seconds=2.0, file_bytes=5 << 20,
                  files=1, round_id=f"spill-{i}")  # fmt: skip


def spilled(path: Path, indices: range) -> Path:
    """A spill file beside the journal, as a stop that could not journal writes it."""
    place = store.spill_places(path)[0]
    place.write_text("".join(json.dumps(result(i).to_json(), sort_keys=True) + "\n" for i in indices))
    place.chmod(0o600)
    return place


class ReadOnly:
    """os.fsync that fails for the journal as a read-only file system does while `on`
    (the spill file beside it is only read: what the breaker's EPERM/EROFS runs did)."""

    def __init__(self, journal: Path) -> None:
        self.journal = str(journal)
        self.on = False
        self.real = os.fsync

    def __call__(self, fd: int) -> None:
        if self.on and os.readlink(f"/proc/self/fd/{fd}") == self.journal:
            raise OSError(errno.EROFS, "Read-only file system")
        self.real(fd)


def starts(path: Path) -> list[float]:
    return [r.start_timestamp for r in read(path)]


def test_a_take_back_the_journal_refuses_keeps_the_spill_until_its_results_are_journaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(path).append(result(0))
    place = spilled(path, range(1, 6))
    disk = ReadOnly(path)
    monkeypatch.setattr(store.os, "fsync", disk)
    disk.on = True
    first = Journal(path)
    assert first.take_back() == 0
    assert first.unwritten_count == 5 and place.is_file()  # kept: a kill now loses none of the 5
    # Another start meanwhile (a `once`) takes none of them: the first holds the file.
    assert Journal(path).take_back() == 0 and place.is_file()
    # The disk takes writes again: retried, journaled once each, and only then removed.
    disk.on = False
    assert first.retry() == 5
    assert not place.exists()
    assert starts(path) == [result(i).start_timestamp for i in range(6)]


def test_a_start_killed_while_holding_a_spill_leaves_it_whole_for_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.jsonl"
    place = spilled(path, range(1, 4))
    disk = ReadOnly(path)
    monkeypatch.setattr(store.os, "fsync", disk)
    disk.on = True
    held = Journal(path)
    assert held.take_back() == 0 and held.unwritten_count == 3
    for claim in held._claims:  # what a kill -9 does to its descriptors: the flock goes
        claim.f.close()
    disk.on = False
    assert place.is_file()
    assert Journal(path).take_back() == 3 and not place.exists()
    assert starts(path) == [result(i).start_timestamp for i in range(1, 4)]


def test_a_stop_holding_a_spill_spills_its_results_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "journal.jsonl"
    place = spilled(path, range(1, 4))
    disk = ReadOnly(path)
    monkeypatch.setattr(store.os, "fsync", disk)
    disk.on = True
    held = Journal(path)
    held.take_back()
    with pytest.raises(NotJournaled):
        held.append(result(4))
    assert held.spill() == place
    lines = [json.loads(line)["round_id"] for line in place.read_text().splitlines()]
    assert lines == ["spill-1", "spill-2", "spill-3", "spill-4"]
    disk.on = False
    assert Journal(path).take_back() == 4
    assert starts(path) == [result(i).start_timestamp for i in range(1, 5)]


TAKE_BACK = """
import sys
from bigbinf.journal.store import Journal
sys.stdin.readline()  # both started: take back at once
print(Journal(sys.argv[1]).take_back())
"""


def test_two_processes_taking_back_one_spill_journal_each_result_once(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(path).append(result(0))
    spilled(path, range(1, 2001))
    env = {**os.environ, "PYTHONPATH": str(Path(store.__file__).parents[2])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TAKE_BACK, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    try:
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        taken = sorted(int(p.communicate(timeout=120)[0].strip()) for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    counts = Counter(starts(path))
    assert len(counts) == 2001 and max(counts.values()) == 1  # each result journaled once
    assert taken == [0, 2000]


def test_a_result_past_the_unwritten_bound_is_said_lost_once_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from bigbinf.service.collector import ExporterState
    from bigbinf.service.rounds import RoundRunner

    path = tmp_path / "journal.jsonl"
    disk = ReadOnly(path)
    monkeypatch.setattr(store.os, "fsync", disk)
    monkeypatch.setattr(store, "UNWRITTEN_MAX", 3)
    disk.on = True
    journal = Journal(path)
    for i in range(3):
        with pytest.raises(NotJournaled) as kept:
            journal.append(result(i))
        assert not kept.value.dropped
    with pytest.raises(NotJournaled) as dropped:
        journal.append(result(3))
    assert dropped.value.dropped and journal.unwritten_dropped == 1 and journal.unwritten_count == 3
    # The round runner's one line for it says lost, and the count reaches the metrics.
    state = ExporterState()
    runner = RoundRunner.__new__(RoundRunner)
    runner.state, runner.journal, runner.baselines = state, journal, Journal(tmp_path / "journal.paths.jsonl")
    with caplog.at_level(logging.ERROR):
        runner.not_journaled(journal, dropped.value, "result")
    (line,) = [r.getMessage() for r in caplog.records]
    assert "lost" in line and "kept in memory" not in line and str(path) in line
    assert state.journal_dropped == 1


def test_a_reload_takes_over_the_kept_results_and_the_spill_they_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.jsonl"
    place = spilled(path, range(1, 4))
    disk = ReadOnly(path)
    monkeypatch.setattr(store.os, "fsync", disk)
    disk.on = True
    before = Journal(path)
    before.take_back()
    after = Journal(path)  # what a reload builds (service/server.py)
    after.take_over(before)
    assert after.unwritten_count == 3 and before.unwritten_count == 0
    assert Journal(path).take_back() == 0  # still held: no other start takes it
    disk.on = False
    assert after.retry() == 3 and not place.exists()
    assert starts(path) == [result(i).start_timestamp for i in range(1, 4)]
