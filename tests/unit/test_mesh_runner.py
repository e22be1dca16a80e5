"""A mesh site's exporter: its slots (service/mesh_runner.py), the `site` label, the
mesh metrics, reloading the mesh file, and the command line's mesh mode.

The round runner, journal, state, collector and rendering are the real ones; plans are
made here with bigbinf.mesh.plan's own types, a fraction of a second ahead, and the
transfer is a stub (an injected callable) where a test needs its timing to be exact.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from bigbinf import cli
from bigbinf.config import Config, ConfigError, ConfigIssue
from bigbinf.journal.store import Journal
from bigbinf.measure.plan import TransferSpec
from bigbinf.mesh import plan
from bigbinf.result import PathBaseline, Result, SeriesKey
from bigbinf.service.collector import BigbinfCollector, ExporterState
from bigbinf.service.exposition import build
from bigbinf.service.mesh_runner import MeshRunner, Transfer, handled_path, overrun_seconds, round_id
from bigbinf.service.rounds import RoundRunner, series_of
from bigbinf.service.server import JOB_ID, Exporter

from .test_collector import GOLDEN
from .test_collector import _registry as golden_registry
from .test_collector import _state as golden_state

SITES = ("a", "b", "c")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_mesh(tmp: Path, **changes: object) -> Path:
    """Three sites on this host, every ordered pair testing one small dataset with a
    command that makes the file (verified by size), capture and probes off."""
    raw: dict[str, object] = {
        "name": "unit",
        "sites": {
            site: {
                "address": f"127.0.0.{i + 1}",  # loopback, each site its own host
                "data_dir": str(tmp / "data"),
                "probe": {"enabled": False},
                "exporter": {"listen": f"127.0.0.1:{_free_port()}", "journal": str(tmp / f"{site}.jsonl")},
            }
            for i, site in enumerate(SITES)
        },
        "datasets": {"f1k": {"file": "f1k.bin", "size": "1KiB"}},
        "protocols": {"make": {"command": ["truncate", "-s", "{size}", "{local_path}"]}},
        "tests": [{"protocols": ["make"], "datasets": ["f1k"]}],
        "schedule": {"interval": "1h"},
        "transfer": {"workdir": str(tmp / "work"), "timeout": "30s"},
        "capture": {"enabled": False},
        **changes,
    }
    path = tmp / "mesh.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


class FakeMesh:
    """A MeshSite whose rounds are the given plans (made relative to now by the test)."""

    def __init__(self, view: cli.MeshSite, plans: list[plan.RoundPlan]) -> None:
        self.site = view.site
        self.config = view.config
        self.schedule_interval = view.schedule_interval
        self.listen = view.listen
        self.plans = plans

    def rounds(self, after: float) -> Iterator[plan.RoundPlan]:
        return iter([p for p in self.plans if p.end > after])

    def slot_counts(self, since: float, until: float) -> list[tuple[plan.TestKey, int]]:
        return []


def _slot(
    src: str, dst: str, start: float, length: float, probe: bool = False, typical: float = 0.0, repetition: int = 0
) -> plan.Slot:
    key = plan.TestKey(src, dst, "make", "f1k", "download")
    return plan.Slot(start, start + length, key, repetition, "budget", probe, typical)


def _plan(
    start: float,
    slots: list[plan.Slot],
    end: float | None = None,
    fingerprint: str = "f1ngerpr1nt0",
    guard: float = 0.0,
) -> plan.RoundPlan:
    return plan.RoundPlan(start, end if end is not None else start + 60, tuple(slots), fingerprint, guard)


class StubTransfer:
    """run_transfer's stand-in: an ok result after `seconds[remote]` (default 0), noting
    when each call started and ended and whether two ever ran at once."""

    def __init__(self, seconds: dict[str, float] | None = None) -> None:
        self.seconds = seconds or {}
        self.calls: list[tuple[str, float, float]] = []
        self.running = 0
        self.overlapped = False
        self._lock = threading.Lock()

    def __call__(self, spec: TransferSpec, config: Config, rid: str, baseline: PathBaseline | None) -> Result:
        with self._lock:
            self.running += 1
            self.overlapped |= self.running > 1
        start = time.time()
        time.sleep(self.seconds.get(spec.remote.name, 0.0))
        end = time.time()
        with self._lock:
            self.running -= 1
        self.calls.append((spec.remote.name, start, end))
        return Result(
            spec.protocol,
            spec.remote.name,
            spec.dataset,
            spec.direction,
            start,
            "ok",
            duration_seconds=end - start,
            file_bytes=1024,
            round_id=rid,
        )


def _runner(tmp: Path, site: str = "a", transfer: Transfer | None = None) -> tuple[MeshRunner, cli.MeshSite]:
    view = cli.load_mesh_site(write_mesh(tmp), site)
    state = ExporterState(site)
    state.prime(series_of(view.config), view.schedule_interval)  # as the exporter does
    rounds = RoundRunner(view.config, state)
    return MeshRunner(rounds, view, transfer=transfer or StubTransfer()), view


def _registry(state: ExporterState) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BigbinfCollector(state))
    return registry


def _series(site: str, remote: str) -> dict[str, str]:
    return {"protocol": "make", "remote": remote, "dataset": "f1k", "direction": "download", "site": site}


def missed_counts(state: ExporterState, remote: str | None = None) -> dict[tuple[str, str], int]:
    """(remote, reason) -> slots missed, those counted (not 0) only."""
    return {(k.remote, r): n for (k, r), n in state.slots_missed.items() if n and remote in (None, k.remote)}


# ---------------------------------------------------------------- the slots


def test_only_this_sites_slots_run_each_not_before_its_start(tmp_path: Path) -> None:
    transfer = StubTransfer()
    runner, view = _runner(tmp_path, "a", transfer)
    t = time.time() + 0.3
    slots = [
        _slot("a", "b", t, 0.4),
        _slot("b", "c", t, 0.4),  # another site's: never run here
        _slot("c", "a", t + 0.5, 0.4),  # a is its destination, not its source
        _slot("a", "c", t + 0.6, 0.4),
    ]
    results = runner.run_round(_plan(t, slots))
    assert results is not None
    assert [r.remote for r in results] == ["b", "c"]
    assert [c[0] for c in transfer.calls] == ["b", "c"]
    assert transfer.calls[0][1] >= t and transfer.calls[1][1] >= t + 0.6  # waited for each start
    journaled = list(Journal(view.config.journal.path).read())
    assert [(r.site, r.slot_start_timestamp, r.slot_end_timestamp) for r in journaled] == [
        ("a", t, t + 0.4),
        ("a", t + 0.6, t + 1.0),
    ]
    assert [r.slot_overrun_seconds for r in journaled] == [0.0, 0.0]
    assert {r.round_id for r in journaled} == {round_id(_plan(t, slots))}
    get = _registry(runner.runner.state).get_sample_value
    assert get("bigbinf_mesh_last_slot_overrun_seconds", _series("a", "b")) == 0.0
    assert get("bigbinf_mesh_slot_overruns_total", _series("a", "b")) == 0.0
    assert get("bigbinf_rounds_total", {"site": "a"}) == 1.0
    assert get("bigbinf_mesh_round_period_seconds", {"site": "a"}) == 60.0


def test_an_overrun_is_journaled_and_counted_and_the_next_slot_waits_for_it(tmp_path: Path) -> None:
    transfer = StubTransfer({"b": 0.8})
    runner, view = _runner(tmp_path, "a", transfer)
    t = time.time() + 0.3
    slots = [_slot("a", "b", t, 0.3), _slot("a", "c", t + 0.4, 1.5)]
    results = runner.run_round(_plan(t, slots))
    assert results is not None and [r.remote for r in results] == ["b", "c"]
    assert not transfer.overlapped
    (_, _, first_end), (_, second_start, _) = transfer.calls
    assert second_start >= first_end  # waited rather than overlapped (its start had passed)
    first, second = Journal(view.config.journal.path).read()
    assert first.slot_overrun_seconds is not None and 0.3 < first.slot_overrun_seconds < 1.0
    assert first.slot_overrun_seconds == pytest.approx(first.start_timestamp + first.duration_seconds - (t + 0.3))
    assert second.slot_overrun_seconds == 0.0
    get = _registry(runner.runner.state).get_sample_value
    assert get("bigbinf_mesh_slot_overruns_total", _series("a", "b")) == 1.0
    assert get("bigbinf_mesh_last_slot_overrun_seconds", _series("a", "b")) == first.slot_overrun_seconds
    assert get("bigbinf_mesh_slot_overruns_total", _series("a", "c")) == 0.0


def test_overrun_counts_the_last_packet_after_the_command() -> None:
    r = Result("make", "b", "f1k", "download", 100.0, "ok", duration_seconds=5.0, last_packet_timestamp=107.5)
    assert overrun_seconds(r, 106.0) == 1.5
    assert overrun_seconds(dataclasses.replace(r, last_packet_timestamp=None), 106.0) == 0.0


def test_a_slot_that_ends_before_the_previous_transfer_does_is_missed(tmp_path: Path) -> None:
    transfer = StubTransfer({"b": 1.0})
    runner, view = _runner(tmp_path, "a", transfer)
    t = time.time() + 0.3
    results = runner.run_round(_plan(t, [_slot("a", "b", t, 0.2), _slot("a", "c", t + 0.3, 0.4)]))
    assert results is not None and [r.remote for r in results] == ["b"]
    assert [c[0] for c in transfer.calls] == ["b"]  # c's slot had ended: not run
    assert [r.remote for r in Journal(view.config.journal.path).read()] == ["b"]
    get = _registry(runner.runner.state).get_sample_value
    assert get("bigbinf_mesh_slots_missed_total", {**_series("a", "c"), "reason": "late_start"}) == 1.0
    assert missed_counts(runner.runner.state, "b") == {}


def test_a_slot_waits_for_the_round_lock_only_until_its_end(tmp_path: Path) -> None:
    transfer = StubTransfer()
    runner, _ = _runner(tmp_path, "a", transfer)
    assert runner.runner.exclusive()  # a tuning sweep holds the lock
    try:
        t = time.time() + 0.1
        assert runner.run_round(_plan(t, [_slot("a", "b", t, 0.5)])) == []
    finally:
        runner.runner.release()
    assert transfer.calls == []
    get = _registry(runner.runner.state).get_sample_value
    assert get("bigbinf_mesh_slots_missed_total", {**_series("a", "b"), "reason": "lock_held"}) == 1.0


def test_run_plans_rounds_and_stops_when_told(tmp_path: Path) -> None:
    transfer = StubTransfer()
    runner, view = _runner(tmp_path, "b", transfer)
    t = time.time() + 0.2
    runner.mesh = FakeMesh(
        view,
        [
            _plan(t, [_slot("b", "a", t, 0.2), _slot("a", "c", t, 0.2)], end=t + 0.5),
            _plan(t + 0.5, [_slot("b", "c", t + 0.5, 0.2)], end=t + 60),
        ],
    )
    runner.run(rounds=2)
    assert [c[0] for c in transfer.calls] == ["a", "c"]
    assert runner.runner.state.rounds_total == 2
    # Waiting for a slot far ahead ends at once on stop.
    runner.mesh = FakeMesh(view, [_plan(t + 3600, [_slot("b", "a", t + 3600, 1)])])
    thread = threading.Thread(target=runner.run)
    thread.start()
    time.sleep(0.2)
    runner.stop()
    thread.join(5)
    assert not thread.is_alive()


def test_a_sites_rounds_are_the_current_one_then_the_next(tmp_path: Path) -> None:
    view = cli.load_mesh_site(write_mesh(tmp_path), "a")
    now = time.time()
    first, second = list(zip(range(2), view.rounds(now), strict=False))
    assert first[1].start <= now < first[1].end == second[1].start
    assert view.schedule_interval == 3600
    assert {s.test.src for s in first[1].slots} == set(SITES)


# ---------------------------------------------------------------- the site label


def test_every_series_of_a_mesh_site_carries_its_site_label(tmp_path: Path) -> None:
    transfer = StubTransfer()
    runner, _ = _runner(tmp_path, "a", transfer)
    state = runner.runner.state
    t = time.time() + 0.1
    runner.run_round(_plan(t, [_slot("a", "b", t, 0.3)]))
    registry = _registry(state)
    samples = [s for family in registry.collect() for s in family.samples]
    assert len(samples) > 20
    assert all(s.labels.get("site") == "a" for s in samples), [s for s in samples if "site" not in s.labels]
    names = {s.name for s in samples}
    assert {"bigbinf_build_info", "bigbinf_config_last_reload_successful", "bigbinf_mesh_plan_info"} <= names
    # The cached rendering: the same bytes as client_python's, in both formats.
    rendered = build(state.snapshot())
    assert b"".join(rendered.chunks("text")) == generate_latest(registry)
    assert b"".join(rendered.chunks("openmetrics")) == openmetrics_latest(registry)
    lines = [line for line in b"".join(rendered.chunks("text")).decode().splitlines() if not line.startswith("#")]
    assert lines and all('site="a"' in line for line in lines)


def test_a_single_site_exporters_exposition_is_unchanged() -> None:
    text = generate_latest(golden_registry(golden_state())).decode()
    assert text == GOLDEN.read_text()
    assert b"".join(build(golden_state().snapshot()).chunks("text")).decode() == GOLDEN.read_text()
    assert "site=" not in text and "bigbinf_mesh_" not in text


# ---------------------------------------------------------------- the exporter in mesh mode


def test_a_mesh_exporter_runs_slots_not_cron_rounds_and_reloads_only_a_valid_mesh(tmp_path: Path) -> None:
    path = write_mesh(tmp_path)
    view = cli.load_mesh_site(path, "a")
    exporter = Exporter(None, view.listen, mesh_file=path, site="a", mesh_loader=cli.load_mesh_site)
    try:
        exporter.start()
        assert exporter.scheduler.get_job(JOB_ID) is None
        assert exporter.mesh_runner is not None and exporter.mesh_runner._thread is not None
        assert exporter.mesh_runner._thread.is_alive()
        get = exporter.registry.get_sample_value
        assert get("bigbinf_config_last_reload_successful", {"site": "a"}) == 1.0
        assert get("bigbinf_transfers_total", {**_series("a", "b"), "outcome": "ok"}) == 0.0
        assert get("bigbinf_mesh_slots_missed_total", {**_series("a", "c"), "reason": "exporter_down"}) == 0.0
        assert get("bigbinf_schedule_interval_seconds", _series("a", "b")) == 3600.0
        before = exporter.config

        path.write_text(path.read_text().replace("interval: 1h", "interval: soon"))
        assert exporter.reload() is False
        assert get("bigbinf_config_last_reload_successful", {"site": "a"}) == 0.0
        assert exporter.config is before

        mesh = yaml.safe_load(path.read_text().replace("interval: soon", "interval: 2h"))
        mesh["datasets"]["f2k"] = {"file": "f2k.bin", "size": "2KiB"}
        mesh["tests"][0]["datasets"] = ["f1k", "f2k"]
        path.write_text(yaml.safe_dump(mesh, sort_keys=False))
        assert exporter.reload() is True
        assert get("bigbinf_config_last_reload_successful", {"site": "a"}) == 1.0
        assert set(exporter.config.datasets) == {"f1k", "f2k"}
        assert exporter.mesh_runner.mesh.config is exporter.config
        assert get("bigbinf_schedule_interval_seconds", {**_series("a", "b"), "dataset": "f2k"}) == 7200.0
        text = b"".join(exporter.metrics.refresh().chunks("text")).decode()
        assert all('site="a"' in line for line in text.splitlines() if not line.startswith("#"))
    finally:
        exporter.stop()


def test_once_runs_a_sites_outgoing_tests_and_journals_its_site(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_mesh(tmp_path)
    assert cli.main(["once", "--mesh.file", str(path), "--site", "b"]) == 0
    assert "outside the mesh's slot plan: they may overlap other sites' tests" in capsys.readouterr().err
    results = list(Journal(tmp_path / "b.jsonl").read())
    assert sorted(r.remote for r in results) == ["a", "c"]
    assert all(r.site == "b" and r.outcome == "ok" and r.slot_overrun_seconds is None for r in results)


# ---------------------------------------------------------------- the command line


def test_config_check_of_a_mesh(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_mesh(tmp_path, tests=[{"protocols": ["make"], "datasets": ["f1k"], "budget": "5m"}])
    assert cli.main(["--config.check", "--mesh.file", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: mesh is valid (3 sites, 6 tests; the next 192 rounds fit)\n"
    assert cli.main(["--mesh.file", str(path), "--site", "c", "--config.check"]) == 0
    assert "mesh is valid" in capsys.readouterr().out

    assert cli.main(["--config.check", "--mesh.file", str(path), "--site", "nowhere"]) == 2
    err = capsys.readouterr().err
    assert "--site nowhere: no such site" in err and "defined: a, b, c" in err

    bad = write_mesh(tmp_path, tests=[{"protocols": ["make", "nope"], "datasets": ["f1k"]}])
    assert cli.main(["--config.check", "--mesh.file", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "tests[0].protocols[1]: no protocol named 'nope'" in err


def test_config_check_of_a_mesh_whose_rounds_do_not_fit_fails_with_the_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 3 sites, 6 tests of 10 minutes (the default budget): any two share a site, so they run
    # one after another, 6 x 600 s + 5 guards of 5 s = 3625 s, past the hourly round.
    path = write_mesh(tmp_path)
    assert cli.main(["--config.check", "--mesh.file", str(path)]) == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 4  # the first three rounds that do not fit, then the count
    assert lines[0].startswith(f"{path}: round ") and (
        "does NOT fit: ends, with the 5 s guard, 30.000 s after the next round starts (period 3600.000 s, "
        "planned 3625.000 s; the busiest site, a, is busy 2415.000 s)" in lines[0]
    )
    assert lines[3] == (
        f"{path}: mesh is valid (3 sites, 6 tests), but 192 of the 192 rounds of the next 8 days do NOT fit: "
        "their last slots are not run (`mesh plan --date YYYY-MM-DD` lists them)"
    )


def test_serving_a_mesh_needs_a_known_site(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_mesh(tmp_path)
    assert cli.main(["--mesh.file", str(path)]) == 2
    assert "give --site NAME, one of: a, b, c" in capsys.readouterr().err
    assert cli.main(["--mesh.file", str(path), "--site", "d"]) == 2
    assert "no such site" in capsys.readouterr().err
    assert cli.main(["--mesh.file", str(path), "--config.file", "x.yaml"]) == 2
    assert "not both" in capsys.readouterr().err


# ---------------------------------------------------------------- review fixes: rounds, reloads, late slots


def _in_thread(runner: MeshRunner, rounds: int) -> threading.Thread:
    thread = threading.Thread(target=runner.run, kwargs={"rounds": rounds}, daemon=True)
    thread.start()
    return thread


def _wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_reload_mid_round_keeps_the_rounds_plan_and_applies_from_the_next_round(tmp_path: Path) -> None:
    transfer = StubTransfer({"b": 0.5})
    runner, view = _runner(tmp_path, "a", transfer)
    t = time.time() + 1.0
    runner.mesh = FakeMesh(
        view, [_plan(t, [_slot("a", "b", t, 1.0), _slot("a", "c", t + 2.0, 1.5)], end=t + 5.0, fingerprint="old")]
    )
    thread = _in_thread(runner, rounds=2)
    _wait_for(lambda: len(transfer.calls) == 1)  # b's slot has run
    # The reload: the same round planned otherwise (b's slot later, c's too), and the next round.
    runner.mesh = FakeMesh(
        view,
        [
            _plan(t, [_slot("a", "b", t + 1.5, 1.0), _slot("a", "c", t + 3.5, 1.0)], end=t + 5.0, fingerprint="new"),
            _plan(t + 5.0, [_slot("a", "b", t + 5.0, 1.0)], end=t + 65.0, fingerprint="new"),
        ],
    )
    thread.join(60)
    assert not thread.is_alive()
    # b once in the first round (not again in its reloaded place), c at its old start, then
    # the next round from the new plan.
    assert [c[0] for c in transfer.calls] == ["b", "c", "b"]
    assert t + 2.0 <= transfer.calls[1][1] < t + 3.5
    assert transfer.calls[2][1] >= t + 5.0
    assert runner.runner.state.slots_missed == dict.fromkeys(runner.runner.state.slots_missed, 0)
    # A round handled is not run again, whatever its plan says.
    assert runner.run_round(runner.mesh.plans[1]) == []
    assert len(transfer.calls) == 3


def test_a_late_slot_starts_only_while_its_typical_length_is_left(tmp_path: Path) -> None:
    transfer = StubTransfer({"b": 2.0})
    runner, _ = _runner(tmp_path, "a", transfer)
    t = time.time() + 0.5
    slots = [
        _slot("a", "b", t, 0.5),
        # b's transfer ends ~t + 2: 1 s of this slot is left, its typical transfer needs 2 s.
        _slot("a", "c", t + 0.6, 2.4, typical=2.0),
        # Late too, but 4 s of it left at ~t + 2: enough for its typical 2 s.
        _slot("a", "c", t + 1.0, 5.0, typical=2.0, repetition=1),
    ]
    results = runner.run_round(_plan(t, slots))
    assert results is not None and [(r.remote, r.slot_start_timestamp) for r in results] == [("b", t), ("c", t + 1.0)]
    get = _registry(runner.runner.state).get_sample_value
    assert get("bigbinf_mesh_slots_missed_total", {**_series("a", "c"), "reason": "late_start"}) == 1.0


def test_a_missed_slot_is_noted_before_it_is_counted(tmp_path: Path) -> None:
    """A kill between counting a missed slot and noting it handled had the next start count
    it again (exporter_down: a CI run counted 8 slots of 7): every count a scrape can see
    has its slot noted already."""
    runner, view = _runner(tmp_path, "a", StubTransfer({"b": 2.0}))
    noted = handled_path(view.config.journal.path)
    seen: list[tuple[str, float]] = []
    record = runner.runner.state.record_slot_missed

    def checked(key: SeriesKey, reason: str) -> None:
        seen.append((reason, json.loads(noted.read_text())["handled_through"]))
        record(key, reason)

    runner.runner.state.record_slot_missed = checked  # type: ignore[method-assign]
    t = time.time() + 0.5
    # b's transfer overruns c's first slot (late_start); its second would run past the round.
    slots = [_slot("a", "b", t, 0.5), _slot("a", "c", t + 0.6, 0.5), _slot("a", "c", t + 1.0, 0.5, repetition=1)]
    runner.run_round(_plan(t, slots, end=t + 1.2))
    assert seen == [("late_start", t + 0.6), ("round_does_not_fit", t + 1.0)]


def test_slots_that_start_at_or_after_the_next_round_are_not_run_but_counted(tmp_path: Path) -> None:
    transfer = StubTransfer()
    runner, _ = _runner(tmp_path, "a", transfer)
    t = time.time() + 0.5
    # A round that does not fit: c's slot starts when the next round has begun.
    results = runner.run_round(_plan(t, [_slot("a", "b", t, 0.5), _slot("a", "c", t + 1.0, 0.5)], end=t + 1.0))
    assert results is not None and [r.remote for r in results] == ["b"]
    assert [c[0] for c in transfer.calls] == ["b"]
    get = _registry(runner.runner.state).get_sample_value
    assert get("bigbinf_mesh_slots_missed_total", {**_series("a", "c"), "reason": "round_does_not_fit"}) == 1.0


def test_an_error_in_a_slot_is_logged_counted_and_the_slots_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stub = StubTransfer()

    def failing(spec: TransferSpec, config: Config, rid: str, baseline: PathBaseline | None) -> Result:
        if spec.remote.name == "b":
            raise RuntimeError("a bug")
        return stub(spec, config, rid, baseline)

    runner, view = _runner(tmp_path, "a", failing)
    t = time.time() + 0.5
    runner.mesh = FakeMesh(
        view,
        [
            _plan(t, [_slot("a", "b", t, 0.5), _slot("a", "c", t + 0.5, 0.5)], end=t + 1.5),
            _plan(t + 1.5, [_slot("a", "b", t + 1.5, 0.5)], end=t + 61.5),
        ],
    )
    with caplog.at_level(logging.ERROR):
        runner.run(rounds=2)  # both rounds are entered: the error did not end the runner
    assert [c[0] for c in stub.calls] == ["c"]
    get = _registry(runner.runner.state).get_sample_value
    assert get("bigbinf_mesh_slots_missed_total", {**_series("a", "b"), "reason": "error"}) == 2.0
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 2 and all(r.exc_info for r in failures)  # a bug: with its traceback
    assert runner.runner.exclusive(timeout=0)  # the round lock was released each time
    runner.runner.release()


def test_the_plan_published_is_the_round_in_progress(tmp_path: Path) -> None:
    transfer = StubTransfer()
    runner, view = _runner(tmp_path, "a", transfer)
    t = time.time() + 0.5
    runner.mesh = FakeMesh(
        view,
        [
            _plan(t, [_slot("a", "b", t, 0.5)], end=t + 3.0, fingerprint="first"),
            _plan(t + 3.0, [_slot("a", "b", t + 3.0, 0.5)], end=t + 63.0, fingerprint="second"),
        ],
    )
    thread = _in_thread(runner, rounds=2)

    def fingerprint() -> str | None:
        state = runner.runner.state
        return state.mesh_round.fingerprint if state.mesh_round else None

    _wait_for(lambda: len(transfer.calls) == 1)
    time.sleep(0.5)  # a's slots of the first round are done; its round goes on until t + 3
    assert time.time() < t + 3.0 and fingerprint() == "first"
    thread.join(60)
    assert fingerprint() == "second" and transfer.calls[1][1] >= t + 3.0


def test_a_plan_that_cannot_be_made_is_logged_without_a_traceback_and_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner, view = _runner(tmp_path, "a")
    runner.runner.state.record_config(True)
    broken = ConfigError("durations.json", [ConfigIssue("tests[0].durations", "no")])

    class Broken(FakeMesh):
        def rounds(self, after: float) -> Iterator[plan.RoundPlan]:
            raise broken

    runner.mesh = Broken(view, [])
    runner.IDLE_SECONDS = 60.0
    thread = threading.Thread(target=runner.run, daemon=True)
    with caplog.at_level(logging.ERROR):
        thread.start()
        get = _registry(runner.runner.state).get_sample_value
        _wait_for(lambda: get("bigbinf_config_last_reload_successful", {"site": "a"}) == 0.0)
    (record,) = [r for r in caplog.records if "cannot plan" in r.getMessage()]
    assert "durations.json: tests[0].durations: no" in record.getMessage() and record.exc_info is None
    t = time.time() + 0.5
    runner.mesh = FakeMesh(view, [_plan(t, [_slot("a", "b", t, 0.5)])])  # a reload: planned again at once
    _wait_for(lambda: get("bigbinf_config_last_reload_successful", {"site": "a"}) == 1.0)
    runner.stop()
    thread.join(30)
    assert not thread.is_alive()


def test_the_durations_are_read_once_with_the_mesh_and_a_bad_one_fails_the_reload(tmp_path: Path) -> None:
    durations = tmp_path / "durations.json"
    durations.write_text('{"tests": []}\n')
    path = write_mesh(tmp_path, schedule={"interval": "1h", "durations": str(durations)})
    view = cli.load_mesh_site(path, "a")
    durations.unlink()  # read with the mesh file: planning no longer reads it
    assert next(iter(view.rounds(time.time()))).slots
    exporter = Exporter(None, view.listen, mesh_file=path, site="a", mesh_loader=cli.load_mesh_site, mesh=view)
    try:
        before = exporter.mesh_runner.mesh if exporter.mesh_runner else None
        assert exporter.reload() is False  # the durations file is gone: mesh and durations both kept
        assert exporter.registry.get_sample_value("bigbinf_config_last_reload_successful", {"site": "a"}) == 0.0
        assert exporter.mesh_runner is not None and exporter.mesh_runner.mesh is before
    finally:
        exporter.runner.stopping.set()  # never started: nothing else to stop


def test_a_reload_that_drops_the_site_fails_and_keeps_the_configuration(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_mesh(tmp_path)
    exporter = Exporter(None, "127.0.0.1:0", mesh_file=path, site="a", mesh_loader=cli.load_mesh_site)
    try:
        before = exporter.config
        mesh = yaml.safe_load(path.read_text())
        del mesh["sites"]["a"]
        path.write_text(yaml.safe_dump(mesh, sort_keys=False))
        with caplog.at_level(logging.ERROR):
            assert exporter.reload() is False
        assert exporter.registry.get_sample_value("bigbinf_config_last_reload_successful", {"site": "a"}) == 0.0
        assert exporter.config is before
        assert any("--site a: no such site" in r.getMessage() for r in caplog.records)
    finally:
        exporter.runner.stopping.set()  # never started: nothing else to stop


def test_a_changed_listen_address_on_reload_needs_a_restart(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_mesh(tmp_path)
    exporter = Exporter(None, "127.0.0.1:0", mesh_file=path, site="a", mesh_loader=cli.load_mesh_site)
    try:
        mesh = yaml.safe_load(path.read_text())
        mesh["sites"]["a"]["exporter"]["listen"] = f"127.0.0.1:{_free_port()}"
        path.write_text(yaml.safe_dump(mesh, sort_keys=False))
        with caplog.at_level(logging.WARNING):
            assert exporter.reload() is True
        assert any("needs a restart" in r.getMessage() for r in caplog.records)
    finally:
        exporter.runner.stopping.set()  # never started: nothing else to stop


def test_site_without_a_mesh_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--site", "a", "--config.check"]) == 2
    assert "--site NAME goes with --mesh.file" in capsys.readouterr().err
    assert cli.main(["once", "--site", "a"]) == 2


def test_no_metric_has_a_site_label_of_its_own() -> None:
    from bigbinf import metrics as M

    # The mesh exporter adds site to every sample: a metric's own site label would clash.
    assert [spec.name for spec in M.ALL_WITH_MESH if M.SITE_LABEL in spec.labels] == []


# ---------------------------------------------------------------- never past the round, never silent


def test_a_slot_that_would_run_past_the_next_rounds_start_is_not_run(tmp_path: Path) -> None:
    """The issue's overlap: a slot that starts before the next round but would end after
    it (with the guard after it) ran into the next round's first test.  It is not run,
    and counted, and the round is published as not fitting."""
    transfer = StubTransfer()
    runner, _ = _runner(tmp_path, "a", transfer)
    t = time.time() + 1.0
    slots = [
        _slot("a", "b", t, 1.0),
        _slot("a", "c", t + 1.5, 1.0),  # ends 0.5 s before the next round, but the guard is 1 s
        _slot("a", "b", t + 3.0, 1.5, repetition=1),  # straddles the next round's start
    ]
    round_ = _plan(t, slots, end=t + 3.0, guard=1.0)
    results = runner.run_round(round_)
    assert results is not None and [r.remote for r in results] == ["b"]
    assert [c[0] for c in transfer.calls] == ["b"]
    assert missed_counts(runner.runner.state) == {("c", "round_does_not_fit"): 1, ("b", "round_does_not_fit"): 1}
    get = _registry(runner.runner.state).get_sample_value
    assert get("bigbinf_mesh_round_fits", {"site": "a"}) == 0.0
    assert get("bigbinf_mesh_guard_seconds", {"site": "a"}) == 1.0
    fitting = _plan(t + 60, [_slot("a", "b", t + 60, 1.0)], end=t + 62.0, guard=1.0)
    runner.runner.state.record_mesh_round(runner_round(fitting))
    assert _registry(runner.runner.state).get_sample_value("bigbinf_mesh_round_fits", {"site": "a"}) == 1.0


def runner_round(p: plan.RoundPlan) -> Any:
    from bigbinf.service.collector import MeshRound

    return MeshRound(p.planned_end - p.start, p.end - p.start, p.fingerprint, p.fits, p.guard)


def test_entering_a_round_that_does_not_fit_says_so_with_the_numbers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runner, _ = _runner(tmp_path, "a", StubTransfer())
    t = time.time() + 0.5
    with caplog.at_level(logging.WARNING):
        runner.run_round(_plan(t, [_slot("a", "b", t, 0.2), _slot("a", "c", t + 0.5, 1.0)], end=t + 1.0, guard=0.5))
    (said,) = [r.getMessage() for r in caplog.records if "does NOT fit" in r.getMessage()]
    assert "with the 0.5 s guard, 1.000 s after the next round starts (period 1.000 s, planned 1.500 s)" in said
    assert "1 of a's slots would run past it and are not run" in said


def _expected_down(view: cli.MeshSite, since: float, until: float) -> dict[tuple[str, str], int]:
    """From whole round plans, slot by slot: a's slots that start in (since, until)."""
    counts: dict[tuple[str, str], int] = {}
    for round_ in view.rounds(since):
        if round_.start >= until:
            break
        for slot in round_.slots:
            if slot.test.src == view.site and since < slot.start < until:
                counts[(slot.test.dst, "exporter_down")] = counts.get((slot.test.dst, "exporter_down"), 0) + 1
    return counts


def test_slots_missed_while_the_exporter_was_down_are_counted_at_its_start(tmp_path: Path) -> None:
    runner, view = _runner(tmp_path, "a", StubTransfer())
    state = runner.runner.state
    noted = handled_path(view.config.journal.path)
    assert noted.name == "a.slots.json" and not noted.exists()
    runner.run(rounds=0)  # the first start with this journal: only the round in progress was planned for it
    assert json.loads(noted.read_text()) == {"site": "a", "handled_through": runner.started}
    state.mark_scraped()
    current = next(iter(view.rounds(runner.started)))
    assert current.start <= runner.started
    # Its slots that began before this first start: neither run nor (before issue 36) counted.
    assert missed_counts(state) == _expected_down(view, current.start - 0.001, runner.started)

    # Down for 5 hours and a bit (hourly rounds; 3 sites, a in 2 of the 6 tests of each).
    since = runner.started - 5.3 * 3600
    noted.write_text(json.dumps({"site": "a", "handled_through": since}))
    later, _ = _runner(tmp_path, "a", StubTransfer())
    later.runner.state.prime(series_of(view.config), view.schedule_interval)
    later.run(rounds=0)
    expected = _expected_down(view, since, later.started)
    assert sum(expected.values()) >= 2 * 5  # at least one slot per test per whole round down
    # Held until the first scrape: Prometheus must see this process's counter at 0 first.
    assert missed_counts(later.runner.state) == {}
    text = b"".join(build(later.runner.state.snapshot()).chunks("text")).decode()
    assert 'reason="exporter_down",remote="b",site="a"} 0.0' in text
    later.runner.state.mark_scraped()
    assert missed_counts(later.runner.state) == expected
    get = _registry(later.runner.state).get_sample_value
    assert (
        get("bigbinf_mesh_slots_missed_total", {**_series("a", "b"), "reason": "exporter_down"})
        == expected[("b", "exporter_down")]
    )
    # Each slot counted once: the next start counts only what came after this one.
    again, _ = _runner(tmp_path, "a", StubTransfer())
    again.run(rounds=0)
    again.runner.state.mark_scraped()
    assert missed_counts(again.runner.state) == _expected_down(view, later.started, again.started)


def test_another_sites_note_or_a_damaged_one_counts_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    runner, view = _runner(tmp_path, "a", StubTransfer())
    noted = handled_path(view.config.journal.path)
    noted.write_text(json.dumps({"site": "b", "handled_through": runner.started - 7200}))
    runner.run(rounds=0)
    runner.runner.state.mark_scraped()
    assert missed_counts(runner.runner.state) == {}
    noted.write_text("{not json")
    damaged, _ = _runner(tmp_path, "a", StubTransfer())
    with caplog.at_level(logging.WARNING):
        damaged.run(rounds=0)
    damaged.runner.state.mark_scraped()
    assert missed_counts(damaged.runner.state) == {}
    assert any("cannot read" in r.getMessage() and "not counted" in r.getMessage() for r in caplog.records)


def test_a_restarted_exporter_publishes_its_downtime_after_its_first_scrape(tmp_path: Path) -> None:
    """Over HTTP, the real exporter: the first scrape sees exporter_down at 0 (so
    Prometheus takes what follows as an increase from a reset), the next one the count."""
    path = write_mesh(tmp_path)
    view = cli.load_mesh_site(path, "a")
    since = time.time() - 3 * 3600
    handled_path(view.config.journal.path).write_text(json.dumps({"site": "a", "handled_through": since}))
    exporter = Exporter(None, view.listen, mesh_file=path, site="a", mesh_loader=cli.load_mesh_site, mesh=view)
    series = 'bigbinf_mesh_slots_missed_total{dataset="f1k",direction="download",protocol="make",reason="exporter_down"'
    try:
        exporter.bind()
        exporter.start()
        assert exporter.mesh_runner is not None

        def scrape() -> float:
            with urllib.request.urlopen(f"http://{view.listen}/metrics", timeout=10) as response:
                text = response.read().decode()
            return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(series))

        _wait_for(lambda: exporter.mesh_runner is not None and exporter.mesh_runner._downtime_counted)
        assert scrape() == 0.0
        expected = sum(_expected_down(view, since, exporter.mesh_runner.started).values())
        assert expected >= 2 * 3  # a in 2 tests a round, 3 hours down
        _wait_for(lambda: scrape() > 0)
        assert scrape() == expected
    finally:
        exporter.stop()


def test_the_first_note_is_written_before_the_journals_first_result(tmp_path: Path) -> None:
    """A new exporter's journal directory does not exist until its first result: the note
    of its start must be written all the same (else a crash before that result goes uncounted)."""
    path = write_mesh(tmp_path)
    mesh = yaml.safe_load(path.read_text())
    mesh["sites"]["a"]["exporter"]["journal"] = str(tmp_path / "new" / "dir" / "journal.jsonl")
    path.write_text(yaml.safe_dump(mesh, sort_keys=False))
    view = cli.load_mesh_site(path, "a")
    runner = MeshRunner(RoundRunner(view.config, ExporterState("a")), view, transfer=StubTransfer())
    runner.run(rounds=0)
    noted = tmp_path / "new" / "dir" / "journal.slots.json"
    assert json.loads(noted.read_text()) == {"site": "a", "handled_through": runner.started}


def test_a_slot_journaled_but_not_yet_noted_is_not_counted_missed(tmp_path: Path) -> None:
    """Killed between journaling a slot's result and noting it handled: the journal says it ran."""
    runner, view = _runner(tmp_path, "a", StubTransfer())
    noted = handled_path(view.config.journal.path)
    since = runner.started - 3 * 3600
    noted.write_text(json.dumps({"site": "a", "handled_through": since}))
    ran = next(s for r in view.rounds(since + 3600) for s in r.slots if s.test.src == "a" and s.start > since + 3600)
    result = Result("make", ran.test.dst, "f1k", "download", ran.start, "ok", site="a", slot_start_timestamp=ran.start)
    Journal(view.config.journal.path).append(result)
    later, _ = _runner(tmp_path, "a", StubTransfer())
    later.runner.state.restore(Journal(view.config.journal.path).read())  # as the exporter does at start
    later.run(rounds=0)
    later.runner.state.mark_scraped()
    assert missed_counts(later.runner.state) == _expected_down(view, ran.start, later.started)
    assert sum(missed_counts(later.runner.state).values()) < sum(_expected_down(view, since, later.started).values())


def test_slots_that_began_before_the_first_start_are_counted_missed(tmp_path: Path) -> None:
    """A first start (no note beside the journal) in the middle of a round: this site's
    slots of that round that had begun are counted missed (exporter_down), each once; the
    ones still to come are run, none of the round before is counted."""
    runner, view = _runner(tmp_path, "a", StubTransfer())
    current = next(iter(view.rounds(runner.started)))
    mine = sorted(s.start for s in current.slots if s.test.src == "a")
    # Pretend the exporter first started just after the round's last slot of a began.
    runner.started = mine[-1] + 0.5
    runner.run(rounds=0)
    runner.runner.state.mark_scraped()
    counted = missed_counts(runner.runner.state)
    assert sum(counted.values()) == len(mine) >= 2 and {reason for _, reason in counted} == {"exporter_down"}
    assert counted == _expected_down(view, current.start - 0.001, runner.started)
    again, _ = _runner(tmp_path, "a", StubTransfer())  # the next start: counted from the note, not again
    again.started = runner.started + 1
    again.run(rounds=0)
    again.runner.state.mark_scraped()
    assert missed_counts(again.runner.state) == {}
