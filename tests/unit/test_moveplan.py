"""plan-move's model (bigbinf/history/moveplan.py), its command and its gauge: the line, the hour
of day, the interval's coverage, the refusals, and the prediction published by the
exporter for the configured sizes."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
import zoneinfo
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from bigbinf import metrics as M
from bigbinf.config import parse_config
from bigbinf.history import planmove
from bigbinf.history.moveplan import Fit, duration_text, fit, fit_all, plan, predict
from bigbinf.judge.verdict import NO_TCP_STATE
from bigbinf.result import Result
from bigbinf.runs import Run, runs_to
from bigbinf.service.collector import BigbinfCollector, ExporterState
from bigbinf.service.rounds import RoundRunner

UTC = zoneinfo.ZoneInfo("UTC")
DAY = 86400.0
T0 = 1_760_000_000.0 - 1_760_000_000.0 % DAY
MIB = 2**20


def synthetic(
    protocol: str = "http",
    setup: float = 2.0,
    rate: float = 25e6,
    peak: float = 1.0,
    noise: float = 0.03,
    days: int = 10,
    sizes: tuple[int, ...] = (32 * MIB, 64 * MIB, 128 * MIB, 256 * MIB),
    seed: int = 1,
) -> list[Run]:
    """Runs at 03h and 13h each day; at 13h the rate is `peak` times the off-peak rate."""
    rng = np.random.default_rng(seed)
    runs = []
    for d in range(days):
        for hour in (3, 13):
            for size in sizes:
                r = rate * (peak if hour == 13 else 1.0) * math.exp(rng.normal(0, noise))
                runs.append(Run(protocol, "", size, 1, setup + size / r, T0 + d * DAY + hour * 3600, "exporter"))
    return runs


def test_the_line_recovers_setup_and_rate() -> None:
    f = fit(synthetic(), UTC)
    assert isinstance(f, Fit)
    assert f.setup_seconds == pytest.approx(2.0, abs=0.3)
    assert f.rate == pytest.approx(25e6, rel=0.03)
    assert f.sizes == (32 * MIB, 64 * MIB, 128 * MIB, 256 * MIB) and f.hours == (3, 13)


def test_the_hour_of_day_effect_and_long_moves_running_through_the_hours() -> None:
    f = fit(synthetic(peak=0.6), UTC)
    assert isinstance(f, Fit)
    assert f.rate_at(13) / f.rate_at(3) == pytest.approx(0.6, rel=0.05)
    assert f.hour_effect[8] is None  # no runs within 90 minutes of 08h: the all-day rate
    one_gib = 2**30
    assert predict(f, one_gib, 1, 13).seconds > predict(f, one_gib, 1, 3).seconds * 1.5
    # A move of a day and more passes through every hour: the start hour hardly matters.
    big = 4 * 2**40
    spread = [predict(f, big, 1, h).seconds for h in range(24)]
    assert max(spread) / min(spread) < 1.05


def test_the_interval_covers_new_runs_as_often_as_it_says() -> None:
    f = fit(synthetic(noise=0.05, days=20, seed=3), UTC)
    assert isinstance(f, Fit)
    fresh = synthetic(noise=0.05, days=20, seed=4, sizes=(2**30,))
    inside = 0
    for run in fresh:
        p = predict(f, run.bytes, 1, int((run.timestamp % DAY) // 3600), 0.9)
        inside += p.lower <= run.seconds <= p.upper
    assert inside / len(fresh) >= 0.85


def test_refusals_say_why() -> None:
    one_size = [r for r in synthetic() if r.bytes == 64 * MIB]
    why = fit(one_size, UTC)
    assert isinstance(why, str) and "one size only (64MiB)" in why
    # A sweep's setting measured at one size borrows its protocol's set-up.
    setting = [Run("http", "parallel=4", 64 * MIB, 1, 2.0 + 64 * MIB / 40e6, T0 + i * 600, "sweep") for i in range(6)]
    result = plan(synthetic() + setting, "lab", 2**40)
    options = {f.option: f for f, _ in result.ranked}
    assert options["http (parallel=4)"].setup_from.startswith("http's runs at 4 sizes")
    assert result.best is not None and result.best[0].option == "http (parallel=4)"
    assert not plan([], "lab", 2**40).ranked


def test_the_path_caps_the_rate() -> None:
    result = plan(synthetic(rate=25e6), "lab", 2**34, bandwidth=10e6)
    assert result.best is not None and result.best[1].capped
    assert result.best[1].seconds >= 2**34 / 10e6


CONFIG = """
remotes: {lab: {address: 127.0.0.1, data_dir: /d, key: /k/id}}
datasets: {f32m: {file: a.bin, size: 32MiB}, f256m: {file: b.bin, size: 256MiB}}
protocols: {http: {}, gridftp: {}, scp: {}}
journal: {path: JOURNAL}
moves: {sizes: [40TiB, 1GiB]}
"""


def _result(run: Run) -> Result:
    return Result(
        run.protocol,
        "lab",
        f"f{run.bytes // MIB}m",
        "download",
        run.timestamp,
        "ok",
        duration_seconds=run.seconds,
        file_bytes=run.bytes,
        files=1,
    )


def test_the_exporter_publishes_the_predicted_moves(tmp_path: Path) -> None:
    config = parse_config(CONFIG.replace("JOURNAL", str(tmp_path / "j.jsonl")), "test")
    state = ExporterState()
    runner = RoundRunner(config, state)
    for run in synthetic(sizes=(32 * MIB, 256 * MIB)):
        runner.publish(_result(run))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BigbinfCollector(state))
    seconds = registry.get_sample_value(M.MOVE_PREDICTED.name, {"remote": "lab", "size": "40TiB"})
    assert seconds == pytest.approx(2.0 + 2**40 * 40 / 25e6, rel=0.05)
    lower = registry.get_sample_value(M.MOVE_PREDICTED_LOWER.name, {"remote": "lab", "size": "40TiB"})
    upper = registry.get_sample_value(M.MOVE_PREDICTED_UPPER.name, {"remote": "lab", "size": "40TiB"})
    assert lower < seconds < upper
    assert registry.get_sample_value(M.MOVE_PREDICTED.name, {"remote": "lab", "size": "1GiB"}) < 60
    info = [
        sample.labels
        for family in registry.collect()
        if family.name == M.MOVE_RECOMMENDATION.name
        for sample in family.samples
        if sample.labels["size"] == "40TiB"
    ]
    assert len(info) == 1 and info[0]["option"] == "http" and info[0]["start_hour"] in {f"{h:02d}" for h in range(24)}
    # A new exporter on the same journal publishes the same prediction at start.
    fresh = ExporterState()
    RoundRunner(config, fresh).note_moves(runner.journal.read(), restore=True)
    assert fresh.moves == state.moves


def _args(tmp_path: Path, *extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    planmove.register(p.add_subparsers())
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG.replace("JOURNAL", str(tmp_path / "j.jsonl")))
    args = p.parse_args(["plan-move", *extra])
    args.config_file = str(config)
    return args


def test_the_command_ranks_recommends_and_says_what_it_extrapolates_from(tmp_path: Path) -> None:
    from bigbinf.journal.store import Journal

    journal = Journal(tmp_path / "j.jsonl")
    for run in synthetic(sizes=(32 * MIB, 256 * MIB)) + synthetic("gridftp", rate=30e6, sizes=(32 * MIB, 256 * MIB)):
        journal.append(_result(run))
    out = io.StringIO()
    assert planmove.run(_args(tmp_path, "--remote", "lab", "--size", "40TiB"), out) == 0
    text = out.getvalue()
    assert "sizes 32MiB-256MiB" in text and "hours 03, 13" in text
    assert "163,840x the largest transfer measured" in text
    assert text.index("gridftp") < text.index("  http")  # ranked: the faster first
    assert "recommendation: gridftp" in text
    out = io.StringIO()
    assert planmove.run(_args(tmp_path, "--remote", "lab", "--size", "1GiB", "--json"), out) == 0
    data = json.loads(out.getvalue())
    assert [o["option"] for o in data["ranked"]] == ["gridftp", "http"]
    assert len(data["ranked"][0]["start_hours"]) == 24


def test_the_command_refuses_without_measurements(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert planmove.run(_args(tmp_path, "--remote", "lab", "--size", "1TiB"), io.StringIO()) == 1
    assert "refused: nothing measured to lab" in capsys.readouterr().err
    assert planmove.run(_args(tmp_path, "--remote", "nope", "--size", "1TiB"), io.StringIO()) == 2
    assert planmove.run(_args(tmp_path, "--remote", "lab", "--size", "lots"), io.StringIO()) == 2


def test_runs_to_keeps_the_remotes_ok_scheduled_and_sweep_runs() -> None:
    ok = Result("http", "lab", "d", "download", T0, "ok", duration_seconds=2.0, file_bytes=100)
    results = [
        ok,
        Result("http", "lab", "d", "download", T0, "failed", duration_seconds=2.0, file_bytes=100),
        Result("http", "other", "d", "download", T0, "ok", duration_seconds=2.0, file_bytes=100),
        Result("http", "lab", "d", "download", T0, "ok", duration_seconds=2.0, file_bytes=100, source="import"),
        Result("http", "lab", "d", "upload", T0, "ok", duration_seconds=2.0, file_bytes=100),
    ]
    assert [r.source for r in runs_to(results, "lab")] == ["exporter"]


# ---------------------------------------------------------------- little history (issue 38)


def few(n: int, protocol: str = "http", rate: float = 25e6, noise: float = 0.05, seed: int = 7) -> list[Run]:
    """`n` runs at alternating sizes (32 and 256 MiB), all at 03h: a line of two
    parameters, so n - 2 residual degrees of freedom."""
    rng = np.random.default_rng(seed)
    sizes = (32 * MIB, 256 * MIB)
    return [
        Run(
            protocol,
            "",
            sizes[i % 2],
            1,
            2.0 + sizes[i % 2] / (rate * math.exp(rng.normal(0, noise))),
            T0 + i * DAY + 3 * 3600,
            "exporter",
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [2, 3])
def test_too_few_runs_give_an_unknown_interval_not_a_narrow_one(n: int) -> None:
    f = fit(few(n), UTC)
    assert isinstance(f, Fit) and f.dof == n - 2 and not f.interval_known
    p = predict(f, 2**40, 1, 3)
    assert math.isfinite(p.seconds) and not p.interval_known and math.isnan(p.lower) and math.isnan(p.upper)
    assert duration_text(p.lower) == "unknown"


def test_the_interval_narrows_as_runs_come_and_never_below_the_spread() -> None:
    """5 runs: Student's t on 3 degrees of freedom (2.35 SDs at 90%); 30 runs: empirical
    percentiles, near 1.645 SDs of the 5% noise.  The 5-run interval is the wider."""
    widths = {}
    for n in (5, 30):
        f = fit(few(n), UTC)
        assert isinstance(f, Fit) and f.interval_known and f.dof == n - 2
        p = predict(f, 2**40, 1, 3)
        assert p.lower < p.seconds < p.upper
        widths[n] = math.log(p.upper / p.lower) / 2  # half-width in log rate
    assert widths[5] > widths[30]
    assert 0.05 * 1.0 < widths[30] < 0.05 * 3.0  # about 1.645 SDs, widened by the rate's SE
    # The metric publishes no bound while the interval is unknown.
    state = ExporterState()
    state.record_moves("lab", {"1TiB": predict(fit(few(2), UTC), 2**40, 1, 3)})  # type: ignore[arg-type]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BigbinfCollector(state))
    assert registry.get_sample_value(M.MOVE_PREDICTED.name, {"remote": "lab", "size": "1TiB"}) is not None
    assert registry.get_sample_value(M.MOVE_PREDICTED_LOWER.name, {"remote": "lab", "size": "1TiB"}) is None
    assert registry.get_sample_value(M.MOVE_PREDICTED_UPPER.name, {"remote": "lab", "size": "1TiB"}) is None


def test_an_option_is_never_preferred_for_having_fewer_runs() -> None:
    """Two runs of a faster option (no interval) rank after 30 runs of a slower one."""
    result = plan(few(30) + few(2, protocol="gridftp", rate=40e6), "lab", 2**40)
    assert [f.option for f, _ in result.ranked] == ["http", "gridftp"]
    assert result.best is not None and result.best[0].option == "http"


def test_a_flat_day_recommends_starting_now() -> None:
    """Runs at one hour only: every start hour predicts the same, and the tie goes to now."""
    for now_hour in (0, 17):
        result = plan(few(30), "lab", 2**30, now_hour=now_hour)
        assert result.best is not None and result.best[1].start_hour == now_hour
    # A measured slow hour is no tie: the fast hour wins even when it is hours away.
    slow_at_13 = synthetic(peak=0.5)
    result = plan(slow_at_13, "lab", 2**30, now_hour=13)
    assert result.best is not None and result.best[1].start_hour not in range(11, 16)


def test_a_setting_that_runs_the_protocols_own_command_is_merged() -> None:
    argv = ["globus-url-copy", "-p", "1", "ftp://lab/a", "file:///w/a"]
    own = [_result(r) for r in few(10, protocol="gridftp")]
    sweep = [
        dataclasses.replace(r, source="sweep", sweep_label="parallel=1", start_timestamp=r.start_timestamp + 600)
        for r in own
    ]
    other = [dataclasses.replace(r, sweep_label="parallel=4", argv=["globus-url-copy", "-p", "4"]) for r in sweep]
    # Each run in its own private directory (measure/leftovers.py), as the exporter runs them.
    results = [
        dataclasses.replace(r, argv=[*argv[:-1], f"file:///w/bigbinf-1.2.{i}-{i:08d}/a"])
        for i, r in enumerate(own + sweep)
    ] + other
    fits, _ = fit_all(runs_to(results, "lab"), UTC)
    options = {f.option: f for f in fits}
    assert set(options) == {"gridftp", "gridftp (parallel=4)"}
    assert options["gridftp"].runs == 20 and options["gridftp"].merged == ("gridftp (parallel=1)",)


def test_the_command_says_unknown_collapses_equal_hours_and_refuses_a_past_deadline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bigbinf.journal.store import Journal

    journal = Journal(tmp_path / "j.jsonl")
    for run in few(2):
        journal.append(_result(run))
    out = io.StringIO()
    assert planmove.run(_args(tmp_path, "--remote", "lab", "--size", "1TiB"), out) == 0
    text = out.getvalue()
    assert "unknown" in text and "fewer than the 2 an interval needs" in text
    assert "any hour" in text and "by start hour" not in text  # one line, not 24 equal ones
    assert "started now" in text
    assert planmove.run(_args(tmp_path, "--remote", "lab", "--size", "1TiB", "--by", "2020-01-01"), out) == 2
    assert "has passed" in capsys.readouterr().err
    p = argparse.ArgumentParser()
    planmove.register(p.add_subparsers())
    assert "%%" not in p.format_help() + p._subparsers._group_actions[0].choices["plan-move"].format_help()  # type: ignore[union-attr]


def test_a_start_is_never_in_the_past() -> None:
    """The current hour starts now (not at its top, minutes ago); any other hour at its
    next beginning."""
    now = T0 + 13 * 3600 + 25 * 60 + 7.5  # 13:25:07.5
    start = planmove._next_start(13, UTC, now)
    assert now - 1 < start.timestamp() <= now + 1
    for hour in (0, 12, 14, 23):
        later = planmove._next_start(hour, UTC, now)
        assert now < later.timestamp() < now + DAY and later.hour == hour and later.minute == 0


# ---------------------------------------------------------------- what it stands on (issue 45)

BUSY_CONFIG = """
remotes: {lab: {address: 127.0.0.1, data_dir: /d, key: /k/id}}
datasets: {f5m: {file: a.bin, size: 5MiB}, f32m: {file: b.bin, size: 32MiB}}
protocols: {ftp: {}, scp: {}, rsync: {}, sftp: {}, gridftp-udt: {module: gridftp, options: {udt: true}}}
journal: {path: JOURNAL}
"""


def _busy_demo() -> list[Result]:
    """A demo journal from a busy host: each protocol at 5 MiB and 32 MiB on six days.
    ftp's 32 MiB runs busy_host (verdict); scp's every run busy_host; gridftp-udt's never
    judged (UDP), its lines recording the delay line waiting 36-48%; rsync quiet; sftp
    never measured."""
    out = []
    rates = {"ftp": 20e6, "scp": 30e6, "rsync": 15e6, "gridftp-udt": 60e6}
    for day in range(6):
        for size in (5 * MIB, 32 * MIB):
            for protocol, rate in rates.items():
                busy = protocol == "scp" or (protocol == "ftp" and size == 32 * MIB)
                r = Result(
                    protocol,
                    "lab",
                    f"f{size // MIB}m",
                    "download",
                    T0 + day * DAY + 3 * 3600 + (size == 32 * MIB) * 600,
                    "ok",
                    duration_seconds=1.0 + size / (rate * (1 + 0.02 * day)),
                    file_bytes=size,
                    files=1,
                    transport="udp" if protocol == "gridftp-udt" else "tcp",
                    limited_by="busy_host" if busy else ("" if protocol == "gridftp-udt" else "link_capacity"),
                    limited_evidence=NO_TCP_STATE if protocol == "gridftp-udt" else "the evidence",
                    host_busy={"delay_line": 0.36 + 0.02 * day} if protocol == "gridftp-udt" else {},
                )
                out.append(r)
    out.append(dataclasses.replace(out[-2], outcome="failed", start_timestamp=T0 + 7 * DAY))  # rsync, failed
    out.append(dataclasses.replace(out[-3], unproven="no data bytes seen", start_timestamp=T0 + 7 * DAY + 60))
    return out


def test_plan_move_says_what_it_stands_on_and_the_true_reasons(tmp_path: Path) -> None:
    from bigbinf.journal.store import Journal

    journal = Journal(tmp_path / "j.jsonl")
    for r in _busy_demo():
        journal.append(r)
    config = tmp_path / "c.yaml"
    config.write_text(BUSY_CONFIG.replace("JOURNAL", str(tmp_path / "j.jsonl")))
    p = argparse.ArgumentParser()
    planmove.register(p.add_subparsers())
    args = p.parse_args(["plan-move", "--remote", "lab", "--size", "40TiB"])
    args.config_file = str(config)
    out = io.StringIO()
    assert planmove.run(args, out) == 0
    text = out.getvalue()
    # 50 transfers: 18 used (ftp 6, rsync 12), 32 left out: scp 12, ftp 6, udt 12 busy; rsync 1 failed,
    # 1 unproven.
    assert (
        "from 18 ok transfers (18 scheduled, 0 sweep runs); left out 32 of 50 (busy host 30, failed 1, unproven 1)"
        in text
    )
    assert "thin basis: 32 of its 50 runs were left out" in text
    # ftp: one size, because its 32 MiB runs were left out, said so.
    assert (
        "no prediction for ftp: measured at one size only (5MiB)" in text
        and "its runs at other sizes were left out (6 at 32MiB: busy host 6)" in text
    )
    assert "no prediction for scp: all 12 of its runs left out (busy host 12)" in text
    assert "no prediction for gridftp-udt: all 12 of its runs left out (busy host 12)" in text
    assert "no prediction for sftp: never measured to lab (download)" in text
    assert "recommendation: rsync" in text
    rows = [line.split() for line in text.splitlines() if line.startswith("1 ")]
    assert rows and rows[0][1] == "rsync" and rows[0][-4:] == ["failed", "1,", "unproven", "1"]
    # The JSON says it too, per option.
    args.json = True
    out = io.StringIO()
    planmove.run(args, out)
    data = json.loads(out.getvalue())
    assert data["basis"]["runs"] == 18 and data["basis"]["left_out"] == 32
    assert data["basis"]["options"]["scp"] == {
        "runs": 0,
        "scheduled": 0,
        "sweep": 0,
        "sizes_bytes": [],
        "left_out": {"busy host": 12},
        "left_out_sizes_bytes": {str(5 * MIB): 6, str(32 * MIB): 6},
    }
    assert set(data["refused"]) == {"ftp", "scp", "gridftp-udt", "sftp"}


def test_options_are_ranked_only_against_comparable_evidence() -> None:
    """Five runs of a faster option with an interval rank after 30 of a slower one, in a
    class of their own, and the plan says its basis is thin when only they are left."""
    fast = few(5, protocol="gridftp", rate=40e6)
    result = plan(few(30) + fast, "lab", 2**40)
    assert [(f.option, f.evidence) for f, _ in result.ranked] == [("http", 0), ("gridftp", 1)]
    assert result.thin() == []
    alone = plan(fast, "lab", 2**40)
    assert alone.thin() == ["no option has a known interval from 6 runs or more (the first, gridftp, has 5 runs)"]
    # Left-out runs are counted, never fitted.
    busy = [dataclasses.replace(r, left_out="busy host", seconds=r.seconds * 9) for r in few(30)]
    counted = plan(fast + busy, "lab", 2**40, configured=["http", "gridftp"])
    assert [f.option for f, _ in counted.ranked] == ["gridftp"]
    assert counted.refused == {"http": "all 30 of its runs left out (busy host 30): none to predict from"}
    assert counted.used == 5 and counted.left_out == 30


def test_plan_move_says_old_skipped_and_per_size_reasons_and_flags_the_first_options_thin_basis(
    tmp_path: Path,
) -> None:
    """The busy demo, and: http measured only 60 days before the rest (older than
    moves.history's 28 days); sftp's rounds skipped, its tool not installed; one ftp 5 MiB
    run failed (the 32 MiB runs' reasons are theirs alone); rsync's 12 runs beside 14
    busy ones (the first option stands on a minority of its own runs)."""
    from bigbinf.journal.store import Journal

    journal = Journal(tmp_path / "j.jsonl")
    demo = _busy_demo()
    rsync = [r for r in demo if r.protocol == "rsync" and r.outcome == "ok" and not r.unproven]
    extra = [dataclasses.replace(rsync[0], protocol="http", start_timestamp=T0 - 60 * DAY + i * 3600) for i in range(6)]
    extra += [
        Result("sftp", "lab", "f5m", "download", T0 + d * DAY, "skipped", error="sftp is not installed on this host")
        for d in range(6)
    ]
    ftp5 = next(r for r in demo if r.protocol == "ftp" and r.file_bytes == 5 * MIB)
    extra.append(dataclasses.replace(ftp5, outcome="failed", start_timestamp=T0 + 7 * DAY + 120))
    extra += [
        dataclasses.replace(r, limited_by="busy_host", start_timestamp=r.start_timestamp + 1800)
        for r in rsync + rsync[:2]
    ]
    for r in sorted(extra + demo, key=lambda r: r.start_timestamp):
        journal.append(r)
    config = tmp_path / "c.yaml"
    config.write_text(
        BUSY_CONFIG.replace("JOURNAL", str(tmp_path / "j.jsonl")).replace("sftp: {}", "sftp: {}, http: {}")
    )
    p = argparse.ArgumentParser()
    planmove.register(p.add_subparsers())
    args = p.parse_args(["plan-move", "--remote", "lab", "--size", "40TiB"])
    args.config_file = str(config)
    out = io.StringIO()
    assert planmove.run(args, out) == 0
    text = out.getvalue()
    day = datetime.fromtimestamp(T0 - 60 * DAY + 5 * 3600, zoneinfo.ZoneInfo("UTC")).strftime("%Y-%m-%d")
    assert f"no prediction for http: measured only before {day}, older than moves.history" in text
    assert "no prediction for sftp: not installed here: its 6 scheduled runs were skipped" in text
    assert "its runs at other sizes were left out (6 at 32MiB: busy host 6)" in text
    assert "recommendation: rsync" in text
    assert (
        "thin basis: the first, rsync, stands on 12 of its 28 runs (busy host 14, failed 1, unproven 1 left out)"
        in text
    )
    assert "never measured" not in text


def test_a_protocol_with_an_open_regression_is_predicted_from_its_runs_since(tmp_path: Path) -> None:
    """Issue 45 B6: scp at 45% of its level for its last 3 days, its regression open in the
    regressions journal: predicted from those runs (the old level would rank it first)."""
    from bigbinf.history.regression import OPENED, Event
    from bigbinf.history.regression_state import RegressionJournal
    from bigbinf.journal.store import Journal
    from bigbinf.result import SeriesKey

    journal = Journal(tmp_path / "j.jsonl")
    since = T0 + 7 * DAY
    scp = [
        dataclasses.replace(r, seconds=2.0 + (r.seconds - 2.0) / 0.45) if r.timestamp >= since else r
        for r in synthetic("scp", rate=30e6, sizes=(32 * MIB, 256 * MIB))
    ]
    for run in scp + synthetic("gridftp", rate=20e6, sizes=(32 * MIB, 256 * MIB)):
        journal.append(_result(run))
    args = _args(tmp_path, "--remote", "lab", "--size", "40TiB", "--json")
    out = io.StringIO()
    assert planmove.run(args, out) == 0
    assert json.loads(out.getvalue())["ranked"][0]["option"] == "scp"  # no regression known
    key = SeriesKey("scp", "lab", "f256m", "download")
    RegressionJournal(tmp_path / "j.jsonl").append([Event(OPENED, key, since + DAY, since, level_before=30e6)])
    out = io.StringIO()
    assert planmove.run(args, out) == 0
    data = json.loads(out.getvalue())
    assert [o["option"] for o in data["ranked"]] == ["gridftp", "scp"]
    scp_fit = data["ranked"][1]
    assert scp_fit["rate_bytes_per_second"] == pytest.approx(0.45 * 30e6, rel=0.05)
    assert scp_fit["runs"] == sum(1 for r in scp if r.timestamp >= since)
    assert data["basis"]["options"]["scp"]["left_out"] == {"before its open regression": 28}
    assert data["open_regressions"] == {"scp": {"since": since}}
    out = io.StringIO()
    planmove.run(_args(tmp_path, "--remote", "lab", "--size", "40TiB"), out)
    assert "open regression: scp has an open regression since" in out.getvalue()
    assert "recommendation: gridftp" in out.getvalue()


def test_a_run_from_the_future_is_left_out_and_never_anchors_the_window(tmp_path: Path) -> None:
    """Issue 45 B7: one run journaled with the clock 30 days ahead: counted as dated in the
    future, and the window still ends at the latest real run."""
    from bigbinf.journal.store import Journal

    journal = Journal(tmp_path / "j.jsonl")
    runs = synthetic(sizes=(32 * MIB, 256 * MIB), days=28)
    now = runs[-1].timestamp + 3600
    runs[-20] = dataclasses.replace(runs[-20], timestamp=runs[-20].timestamp + 30 * DAY)
    for run in runs:
        journal.append(_result(run))
    got, _ = planmove.journal_runs(journal, "lab", "download", 28 * DAY, now)
    future = [r for r in got if r.left_out == planmove.FUTURE]
    assert len(future) == 1 and future[0].timestamp > now
    assert len(got) == len(runs)  # none dropped as too old by the future run's date
    # Read later (the host's clock past the future date): the lone run far after every
    # other still is left out, and the window still ends at the latest real run.
    later, _ = planmove.journal_runs(journal, "lab", "download", 28 * DAY, now + 365 * DAY)
    assert [r.timestamp for r in later if r.left_out == planmove.FUTURE] == [future[0].timestamp]
    assert len(later) == len(runs)


def test_the_exporter_predicts_a_protocol_with_an_open_regression_from_its_runs_since(tmp_path: Path) -> None:
    """Issue 45 B6 on /metrics: the published prediction stands on the level since the
    regression's start, as plan-move's does."""
    from bigbinf.history.regression import Episode, Track
    from bigbinf.result import SeriesKey

    config = parse_config(CONFIG.replace("JOURNAL", str(tmp_path / "j.jsonl")), "test")
    state = ExporterState()
    runner = RoundRunner(config, state)
    since = T0 + 7 * DAY
    key = SeriesKey("http", "lab", "f256m", "download")
    runner.history.tracks[key] = Track(episode=Episode(since, since + DAY, 25e6))
    for run in synthetic(sizes=(32 * MIB, 256 * MIB)):
        if run.timestamp >= since:
            run = dataclasses.replace(run, seconds=2.0 + (run.seconds - 2.0) / 0.5)
        runner.publish(_result(run))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BigbinfCollector(state))
    seconds = registry.get_sample_value(M.MOVE_PREDICTED.name, {"remote": "lab", "size": "40TiB"})
    assert seconds == pytest.approx(2.0 + 2**40 * 40 / 12.5e6, rel=0.05)


def test_an_accepted_regressions_level_is_the_one_predicted(tmp_path: Path) -> None:
    """Issue 45 b1: after `regression accept` the accepted level is the series' level from
    its start on: predicted from the runs since, as while it was open (pooled, the old
    level's runs would promise 1/0.45 of the speed)."""
    from bigbinf.history.regression import ACCEPTED, OPENED, Event
    from bigbinf.history.regression_state import RegressionJournal
    from bigbinf.journal.store import Journal
    from bigbinf.result import SeriesKey

    journal = Journal(tmp_path / "j.jsonl")
    since = T0 + 7 * DAY
    scp = [
        dataclasses.replace(r, seconds=2.0 + (r.seconds - 2.0) / 0.45) if r.timestamp >= since else r
        for r in synthetic("scp", rate=30e6, sizes=(32 * MIB, 256 * MIB))
    ]
    for run in scp + synthetic("gridftp", rate=20e6, sizes=(32 * MIB, 256 * MIB)):
        journal.append(_result(run))
    keys = [SeriesKey("scp", "lab", d, "download") for d in ("f32m", "f256m")]
    regressions = RegressionJournal(tmp_path / "j.jsonl")
    regressions.append([Event(OPENED, k, since + DAY, since, level_before=30e6) for k in keys])
    regressions.append([Event(ACCEPTED, k, since + 2 * DAY, since) for k in keys])
    out = io.StringIO()
    assert planmove.run(_args(tmp_path, "--remote", "lab", "--size", "40TiB", "--json"), out) == 0
    data = json.loads(out.getvalue())
    assert [o["option"] for o in data["ranked"]] == ["gridftp", "scp"]
    assert data["ranked"][1]["rate_bytes_per_second"] == pytest.approx(0.45 * 30e6, rel=0.05)
    assert data["basis"]["options"]["scp"]["left_out"] == {"before its accepted regression": 28}
    assert data["accepted_regressions"] == {"scp": {"since": since}} and data["open_regressions"] == {}
    out = io.StringIO()
    planmove.run(_args(tmp_path, "--remote", "lab", "--size", "40TiB"), out)
    text = out.getvalue()
    assert "accepted regression: scp's level since" in text and "predicted from its 12 runs since (28 before" in text
    assert "recommendation: gridftp" in text


def test_a_protocol_no_longer_configured_is_set_apart_never_ranked(tmp_path: Path) -> None:
    """Issue 45 b2: bbftp (fastest) removed from `protocols:`: not ranked nor recommended,
    listed with its last run; every configured protocol still has its line."""
    from bigbinf.journal.store import Journal

    journal = Journal(tmp_path / "j.jsonl")
    sizes = (32 * MIB, 256 * MIB)
    bbftp = synthetic("bbftp", rate=60e6, sizes=sizes, days=5)
    for run in synthetic(sizes=sizes) + bbftp:
        journal.append(_result(run))
    out = io.StringIO()
    assert planmove.run(_args(tmp_path, "--remote", "lab", "--size", "40TiB", "--json"), out) == 0
    data = json.loads(out.getvalue())
    assert [o["option"] for o in data["ranked"]] == ["http"]
    assert data["unconfigured"] == {"bbftp": {"latest_run_timestamp": bbftp[-1].timestamp, "runs": len(bbftp)}}
    assert set(data["refused"]) == {"gridftp", "scp"}  # configured, never measured
    out = io.StringIO()
    planmove.run(_args(tmp_path, "--remote", "lab", "--size", "40TiB"), out)
    text = out.getvalue()
    assert "not configured now: bbftp: last run" in text and "recommendation: http" in text
    assert "  bbftp " not in text.split("not configured now")[0]


def test_the_exporter_predicts_from_an_accepted_level_and_configured_protocols_only(tmp_path: Path) -> None:
    """Issue 45 b1, b2 on /metrics: the published prediction stands on an accepted
    regression's level, and never on a protocol the configuration no longer has."""
    from bigbinf.history.regression import Track
    from bigbinf.result import SeriesKey

    config = parse_config(CONFIG.replace("JOURNAL", str(tmp_path / "j.jsonl")), "test")
    state = ExporterState()
    runner = RoundRunner(config, state)
    since = T0 + 7 * DAY
    key = SeriesKey("http", "lab", "f256m", "download")
    runner.history.tracks[key] = Track(accepts=[(since, since + 2 * DAY, None)])
    for run in synthetic(sizes=(32 * MIB, 256 * MIB)) + synthetic("bbftp", rate=60e6, sizes=(32 * MIB, 256 * MIB)):
        if run.protocol == "http" and run.timestamp >= since:
            run = dataclasses.replace(run, seconds=2.0 + (run.seconds - 2.0) / 0.5)
        runner.publish(_result(run))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BigbinfCollector(state))
    seconds = registry.get_sample_value(M.MOVE_PREDICTED.name, {"remote": "lab", "size": "40TiB"})
    assert seconds == pytest.approx(2.0 + 2**40 * 40 / 12.5e6, rel=0.05)
