"""The schedule and the round runner: when rounds fire, that they never overlap, that
transfers inside a round run one at a time, and that a result is journaled before it is
published.

Transfers here are real processes on this host (capture off, so no root is needed): the
round runner, the journal and the state are the real ones.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import yaml

from bigbinf import guardian
from bigbinf.config import Config, parse_config
from bigbinf.journal.store import Journal
from bigbinf.result import Result
from bigbinf.service.collector import ExporterState
from bigbinf.service.rounds import RoundRunner
from bigbinf.service.schedule import longest_gap_seconds, make_trigger
from bigbinf.service.server import Exporter

from ..support.prometheus import free_port

UTC = dt.UTC


def _config(tmp: Path, protocols: dict, **schedule) -> Config:
    raw = {
        "remotes": {"here": {"address": "127.0.0.1", "data_dir": str(tmp / "data")}},
        "datasets": {"f1k": {"file": "f1k.bin", "size": "1KiB"}},
        "protocols": protocols,
        "schedule": schedule or {"interval": "1h"},
        "transfer": {"workdir": str(tmp / "work"), "timeout": "30s"},
        "capture": {"enabled": False},
        "journal": {"path": str(tmp / "journal.jsonl")},
    }
    return parse_config(yaml.safe_dump(raw, sort_keys=False), str(tmp / "config.yaml"))


# Creates the dataset's file at its size: verified by size (no checksums on this remote).
MAKE_FILE = {"command": ["truncate", "-s", "{size}", "{local_path}"]}
# Takes a while, then makes the file.
SLOW_FILE = {
    "command": [
        "python3",
        "-c",
        "import sys, time; time.sleep(0.4); open(sys.argv[1], 'wb').truncate(1024)",
        "{local_path}",
    ]
}


def _fire_times(schedule_raw: dict, start: dt.datetime, n: int) -> list[dt.datetime]:
    schedule = parse_config(
        yaml.safe_dump(
            {
                "remotes": {"r": {"address": "198.18.1.2", "data_dir": "/d"}},
                "datasets": {"d": {"file": "d", "size": 1}},
                "protocols": {"p": {"command": ["true"]}},
                "schedule": schedule_raw,
            }
        ),
        "s.yaml",
    ).schedule
    trigger, times, previous, now = make_trigger(schedule), [], None, start
    for _ in range(n):
        previous = trigger.get_next_fire_time(previous, now)
        times.append(previous)
        now = previous + dt.timedelta(seconds=1)
    return times


def test_the_study_schedule_fires_at_13h_and_03h_utc_with_jitter_after_the_hour() -> None:
    times = _fire_times({"jitter": "5m"}, dt.datetime(2026, 3, 1, tzinfo=UTC), 40)
    assert {(t.astimezone(UTC).hour, t.minute < 5) for t in times} == {(13, True), (3, True)}
    assert [t.astimezone(UTC).hour for t in times[:4]] in ([3, 13, 3, 13], [13, 3, 13, 3])
    # The jitter is random and only ever delays: not every start is on the hour.
    assert len({(t.minute, t.second) for t in times}) > 1


def test_cron_follows_the_configured_time_zone() -> None:
    # 13:00 in Johannesburg (UTC+2, no daylight saving) is 11:00 UTC.
    times = _fire_times(
        {"cron": ["0 13 * * *"], "timezone": "Africa/Johannesburg"}, dt.datetime(2026, 6, 1, tzinfo=UTC), 3
    )
    assert [t.astimezone(UTC).hour for t in times] == [11, 11, 11]


def test_longest_gap_is_the_schedules_widest_spacing_plus_jitter(tmp_path: Path) -> None:
    config = _config(tmp_path, {"p": MAKE_FILE}, cron=["0 13 * * *", "0 3 * * *"], jitter="5m")
    assert longest_gap_seconds(config.schedule) == 14 * 3600 + 300  # 13:00 -> 03:00 next day


def _gated_file(started: Path, gate: Path) -> dict:
    """A transfer that says it has started (touches `started`), waits until the test opens
    `gate`, then makes the file: the test decides when it ends, whatever the host's load."""
    code = (
        "import os, sys, time\n"
        "open(sys.argv[2], 'a').close()\n"
        "while not os.path.exists(sys.argv[3]): time.sleep(0.01)\n"
        "open(sys.argv[1], 'wb').truncate(1024)\n"
    )
    return {"command": ["python3", "-c", code, "{local_path}", str(started), str(gate)]}


def test_rounds_never_overlap_and_transfers_run_one_at_a_time(tmp_path: Path) -> None:
    started, gate = tmp_path / "started", tmp_path / "gate"
    slow = _gated_file(started, gate)
    config = _config(tmp_path, {"slow": slow, "quick": MAKE_FILE}, interval="1h", rounds=2)
    state = ExporterState()
    runner = RoundRunner(config, state)
    first = threading.Thread(target=runner.run_round)
    first.start()
    try:
        # Until the first round's first transfer is under way (it waits for the gate: the
        # round holds its lock however slowly this host runs), then try a second round.
        deadline = time.monotonic() + 120
        while not started.exists() and first.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert started.exists(), "the first round's transfer never started"
        assert runner.run_round() is None  # refused, not queued
    finally:
        gate.touch()
        first.join(120)
    assert not first.is_alive()
    assert state.rounds_skipped == {"round_running": 1, "lock_held": 0}  # a round held the lock
    assert state.rounds_total == 2  # rounds: 2 repetitions of the one scheduled run
    assert state.round_overrun == 0  # four short transfers within the hour

    results = list(Journal(config.journal.path).read())
    assert [r.protocol for r in results] == ["slow", "quick", "slow", "quick"]
    assert all(r.outcome == "ok" for r in results), [r.error for r in results]
    assert len({r.round_id for r in results}) == 2
    # Strictly one after another: each transfer started after the previous one ended.
    for before, after in itertools.pairwise(results):
        assert before.start_timestamp + before.duration_seconds <= after.start_timestamp + 1e-3


class _CheckingState(ExporterState):
    """Publishing is `record`: at that moment the result must already be in the journal."""

    def __init__(self, journal: Path) -> None:
        super().__init__()
        self.journal = journal
        self.checked = 0

    def record(self, r: Result) -> None:
        on_disk = [j.to_json() for j in Journal(self.journal).read()]
        assert r.to_json() in on_disk, "published before it was journaled"
        self.checked += 1
        super().record(r)


def test_each_result_is_journaled_before_it_is_published(tmp_path: Path) -> None:
    config = _config(tmp_path, {"quick": MAKE_FILE, "fails": {"command": ["false"]}})
    state = _CheckingState(config.journal.path)
    results = RoundRunner(config, state).run_round()
    assert [r.outcome for r in results] == ["ok", "failed"]
    assert state.checked == 2
    assert state.series[results[0].key].outcomes["ok"] == 1


def test_start_restores_only_this_configs_own_series(tmp_path: Path) -> None:
    config = _config(tmp_path, {"quick": MAKE_FILE})
    (tmp_path / "config.yaml").write_text(
        yaml.safe_dump({**yaml.safe_load(config.model_dump_json()), "schedule": {"interval": "1h"}})
    )
    journal = Journal(config.journal.path)
    base = {
        "remote": "here",
        "dataset": "f1k",
        "direction": "download",
        "outcome": "ok",
        "duration_seconds": 1.0,
        "file_bytes": 1024,
    }
    journal.append(Result(protocol="quick", start_timestamp=1000.0, **base))
    journal.append(Result(protocol="quick", start_timestamp=2000.0, **base))
    journal.append(Result(protocol="quick", start_timestamp=3000.0, source="import", **base))  # a 2015 dump
    journal.append(Result(protocol="removed", start_timestamp=4000.0, **base))  # no longer configured
    exporter = Exporter(tmp_path / "config.yaml")
    assert {k.protocol: r.start_timestamp for k, r in exporter.state.latest.items()} == {"quick": 2000.0}


# ---------------------------------------------------------------- a round cut short


def _results(journal: Path) -> list[Result]:
    return list(Journal(journal).read())


def _wait(condition, seconds: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_round_cut_short_by_a_kill_is_finished_by_the_next_start_each_transfer_once(tmp_path: Path) -> None:
    """The exporter as users run it, SIGKILLed while the second of three transfers runs (a
    command that, while BLOCK exists, says so and sleeps): its command ends with it, and
    the next start runs the two transfers not journaled, under the round's id, and
    removes the directory the killed one left."""
    block, running = tmp_path / "BLOCK", tmp_path / "RUNNING"
    second = f"if [ -e {block} ]; then touch {running}; sleep 60; fi; truncate -s {{size}} {{local_path}}"
    config = _config(
        tmp_path,
        {"a": MAKE_FILE, "b": {"command": ["sh", "-c", second]}, "c": MAKE_FILE},
        interval="1h",
        start_delay="0s",
    )
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**yaml.safe_load(config.model_dump_json(exclude_unset=True))}))
    block.touch()
    listen = f"127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "bigbinf", "--config.file", str(path), "--web.listen-address", listen]
    env = {k: v for k, v in os.environ.items() if k != guardian.MARKER}
    with open(tmp_path / "log", "ab") as log:
        first = subprocess.Popen(argv, stderr=log, env=env)
    try:
        _wait(running.exists, 60, "the second transfer did not start")
        sleeper = next(pid for pid, owner in guardian.marked() if "sleep 60" in guardian.describe(pid))
        first.kill()
        first.wait()
        _wait(lambda: not Path(f"/proc/{sleeper}").exists(), guardian.GRACE_SECONDS + 5, "sleep 60 outlived it")
        (cut,) = {r.round_id for r in _results(config.journal.path)}
        assert [r.protocol for r in _results(config.journal.path)] == ["a"]
        left = list((tmp_path / "work").glob("bigbinf-*"))
        assert len(left) == 1  # the killed transfer's directory
        block.unlink()
        with open(tmp_path / "log", "ab") as log:
            again = subprocess.Popen(argv, stderr=log, env=env)
        try:
            marker = tmp_path / "journal.round.json"
            _wait(lambda: len({r.round_id for r in _results(config.journal.path)}) == 2, 60, "no round after")
            _wait(lambda: not marker.exists(), 60, "the new round did not end")
        finally:
            again.terminate()
            again.wait(30)
    finally:
        first.kill()
        first.wait()
    finished = sorted(r.protocol for r in _results(config.journal.path) if r.round_id == cut)
    assert finished == ["a", "b", "c"]  # each once: a was not run again
    assert all(r.outcome == "ok" for r in _results(config.journal.path))
    assert not any(p.exists() for p in left)
    log_text = (tmp_path / "log").read_text()
    assert f"round {cut} was cut short (the exporter ended mid-round): running its 2 transfer(s)" in log_text
    assert "removed what a transfer of an ended run left" in log_text


def test_a_round_longer_than_its_interval_says_by_how_much(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Two 0.4 s transfers with a 0.2 s interval: the round ends at least 0.6 s past the
    next start (bigbinf_round_overrun_seconds), and the log says what to do."""
    config = _config(tmp_path, {"slow": SLOW_FILE, "slow2": SLOW_FILE}, interval="0.2s")
    state = ExporterState()
    runner = RoundRunner(config, state)
    with caplog.at_level(logging.WARNING):
        results = runner.run_round()
    assert results is not None and [r.outcome for r in results] == ["ok", "ok"]
    durations = sum(r.duration_seconds for r in results)
    assert state.round_overrun is not None and state.round_overrun >= durations - 0.2
    assert any("past the next scheduled start" in m and "schedule.interval" in m for m in caplog.messages)


def test_a_round_job_still_running_at_its_next_start_is_counted(tmp_path: Path) -> None:
    """APScheduler does not start a job whose last run is still going (max_instances=1, as
    the exporter schedules its rounds): the exporter counts that skip as round_running
    (before issue 36 only a round meeting a sweep's lock was counted)."""
    from apscheduler.events import EVENT_JOB_MAX_INSTANCES
    from apscheduler.schedulers.background import BackgroundScheduler

    from bigbinf.service.server import JOB_ID

    state = ExporterState()
    exporter = types.SimpleNamespace(state=state)
    scheduler = BackgroundScheduler()
    scheduler.add_listener(functools.partial(Exporter._round_still_running, exporter), EVENT_JOB_MAX_INSTANCES)
    done = threading.Event()
    scheduler.add_job(lambda: done.wait(30), "interval", seconds=0.5, id=JOB_ID, max_instances=1, coalesce=True)
    scheduler.start()
    try:
        deadline = time.monotonic() + 30
        while state.rounds_skipped["round_running"] < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        done.set()
        scheduler.shutdown(wait=True)
    assert state.rounds_skipped["round_running"] >= 2 and state.rounds_skipped["lock_held"] == 0


def _write_config(tmp: Path, protocols: dict, interval: str) -> Path:
    raw = {
        "remotes": {"here": {"address": "127.0.0.1", "data_dir": str(tmp / "data")}},
        "datasets": {"f1k": {"file": "f1k.bin", "size": "1KiB"}},
        "protocols": protocols,
        "schedule": {"interval": interval},
        "transfer": {"workdir": str(tmp / "work"), "timeout": "30s"},
        "capture": {"enabled": False},
        "journal": {"path": str(tmp / "journal.jsonl")},
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _config_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(path), "--config.check"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_config_check_estimates_a_round_from_the_journal_and_warns_when_it_overruns(tmp_path: Path) -> None:
    """Three rounds of two 0.4 s transfers run for real and journaled; --config.check with
    the same tests every 0.5 s says the round takes about as long as the rounds did (by
    the journal's own start and end times: bounds a busy host cannot break) and that it
    does not fit; every hour, silent."""
    protocols = {"slow": SLOW_FILE, "slow2": SLOW_FILE}
    path = _write_config(tmp_path, protocols, "1h")
    from bigbinf.config import load_config

    runner = RoundRunner(load_config(path), ExporterState())
    for _ in range(3):
        assert runner.run_round() is not None
    fits = _config_check(path)
    assert fits.returncode == 0 and "warning" not in fits.stderr, fits.stderr

    results = list(Journal(tmp_path / "journal.jsonl").read())
    rounds: dict[str, list[Result]] = {}
    for r in results:
        rounds.setdefault(r.round_id, []).append(r)
    lengths = [
        max(r.start_timestamp + r.duration_seconds for r in rs) - min(r.start_timestamp for r in rs)
        for rs in rounds.values()
    ]
    gaps = []
    for rs in rounds.values():
        first, second = sorted(rs, key=lambda r: r.start_timestamp)
        gaps.append(max(0.0, second.start_timestamp - first.start_timestamp - first.duration_seconds))
    assert len(lengths) == 3
    _write_config(tmp_path, protocols, "0.5s")
    tight = _config_check(path)
    assert tight.returncode == 0, tight.stderr  # a warning, not an invalid configuration
    warning = [line for line in tight.stderr.splitlines() if "a round takes about" in line]
    assert len(warning) == 1, tight.stderr
    print(warning[0])
    said = float(warning[0].split("a round takes about ")[1].split(" s")[0])
    setup = float(warning[0].split("; ")[1].split(" s set-up each (measured)")[0])
    # The set-up: the median gap in a round from one transfer's end to the next's start.
    assert setup == pytest.approx(statistics.median(gaps), abs=0.051), (setup, gaps)
    # The estimate: each test's longest duration plus a set-up each.  Whatever this host
    # did to one round (a test or a gap slowed by load), it is at least a round the
    # journal measured (the round whose gap is the median is no longer than it), and at
    # most the longest round once per test, plus the set-ups.
    shown = 0.051 if said < 10 else 0.51  # as it is printed: tenths below 10 s, whole seconds above
    assert min(lengths) - shown <= said <= 2 * max(lengths) + 2 * setup + shown, (said, lengths, setup)
    assert "longer than schedule.interval (0.5 s)" in warning[0]
    assert "the last 3 rounds took" in warning[0] and "Lengthen the schedule" in warning[0]


def test_the_stop_waits_for_the_round_it_cut_only_as_long_as_it_is_told(tmp_path: Path) -> None:
    # cli's stop waits (wait_idle) for a round to journal what it measured, then exits
    # regardless (issue 36): the lock a round holds is what it waits on.
    runner = RoundRunner(_config(tmp_path, {"cmd": MAKE_FILE}), ExporterState())
    assert runner.wait_idle(0.0)
    assert runner._take(blocking=False)
    try:
        assert not runner.wait_idle(0.1)
    finally:
        runner.release()
    assert runner.wait_idle(0.0)
