"""The schedule and the round runner: when rounds fire, that they never overlap, that
transfers inside a round run one at a time, and that a result is journaled before it is
published.

Transfers here are real processes on this host (capture off, so no root is needed): the
round runner, the journal and the state are the real ones.
"""

from __future__ import annotations

import datetime as dt
import itertools
import threading
import time
from pathlib import Path

import yaml

from bigbinf.config import Config, parse_config
from bigbinf.journal import Journal
from bigbinf.result import Result
from bigbinf.service.collector import ExporterState
from bigbinf.service.rounds import RoundRunner
from bigbinf.service.schedule import longest_gap_seconds, make_trigger
from bigbinf.service.server import Exporter

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


def test_rounds_never_overlap_and_transfers_run_one_at_a_time(tmp_path: Path) -> None:
    config = _config(tmp_path, {"slow": SLOW_FILE, "quick": MAKE_FILE}, interval="1h", rounds=2)
    state = ExporterState()
    runner = RoundRunner(config, state)
    first = threading.Thread(target=runner.run_round)
    first.start()
    # Wait until the first round's first transfer is under way, then try a second round.
    deadline = time.monotonic() + 10
    while not list((tmp_path / "work").glob("bigbinf-*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert runner.run_round() is None  # refused, not queued
    first.join(30)
    assert not first.is_alive()
    assert state.rounds_skipped == 1
    assert state.rounds_total == 2  # rounds: 2 repetitions of the one scheduled run

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
