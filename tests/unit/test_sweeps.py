"""Tuning sweeps without a lab: config refusals, the grid, the interleaved order, the
verdict (against scipy), and what the exporter publishes (against client_python)."""

from __future__ import annotations

import datetime as dt
import json
import math
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from scipy import stats as sps

from bigbinf import cli
from bigbinf.config import ConfigError, parse_config
from bigbinf.journal.store import Journal
from bigbinf.result import Result
from bigbinf.service import sweeps
from bigbinf.service.collector import ExporterState, SweepBest
from bigbinf.service.exposition import build
from bigbinf.study import sweep_report

from .test_collector import _registry, _state

SRC = "schedules/t.yaml"
BASE = """
remotes:
  lab: {lab: true}
datasets:
  big: {file: big.bin, size: 16MiB}
  small: {file: small, size: 256KiB, count: 64}
protocols:
  gridftp: {}
  http: {}
  iperf3: {}
lab: {name: t1}
sweeps:
"""


def _issues(text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        parse_config(text, SRC)
    return exc.value.lines()


def _ok(text: str):
    return parse_config(text, SRC)


GOOD = (
    BASE
    + """  streams:
    protocol: gridftp
    remote: lab
    datasets: [big, small]
    options: {parallel: [1, 2, 4, 8], concurrency: [1, 4]}
    congestion: [cubic, bbr]
    tcp_buffer_max: [256KiB]
    repetitions: 3
"""
)


def test_a_good_sweep_is_accepted_and_its_grid_is_the_product() -> None:
    config = _ok(GOOD)
    grid = sweeps.settings(config, "streams")
    assert len(grid) == 4 * 2 * 2 * 1
    assert len({s.label for s in grid}) == len(grid)
    assert grid[0].label == "parallel=1,concurrency=1,congestion=cubic,tcp_buffer_max=256KiB"
    # The baseline: the protocol's own values (module defaults p=1 cc=1); no congestion of
    # its own, so the first listed.
    assert sweeps.baseline(config, "streams").label == "parallel=1,concurrency=1,congestion=cubic,tcp_buffer_max=256KiB"


def test_a_configured_baseline_and_the_protocols_own_options() -> None:
    text = GOOD.replace("gridftp: {}", "gridftp: {options: {parallel: 4}, congestion: bbr}")
    assert sweeps.baseline(_ok(text), "streams").label.startswith("parallel=4,concurrency=1,congestion=bbr")
    text = GOOD + "    baseline: {parallel: 8, concurrency: 4}\n"
    assert sweeps.baseline(_ok(text), "streams").label.startswith("parallel=8,concurrency=4,")


def test_the_planned_transfer_carries_the_setting() -> None:
    config = _ok(GOOD)

    class Lab:
        def remote(self, name, password_env):
            from bigbinf.measure.plan import Remote

            d, root = Path("/d"), Path("/")
            return Remote(name, "198.18.0.2", 22, "root", None, None, d, None, root, None, None, "any", None)

        def unavailable(self, servers):
            return ""

    setting = next(s for s in sweeps.settings(config, "streams") if s.label.startswith("parallel=8,concurrency=4,"))
    spec = sweeps.spec_for(config, "streams", setting, "big", Lab())
    assert (spec.options.parallel, spec.options.concurrency) == (8, 4)
    assert spec.template[:5] == ("{binary}", "-p", "8", "-cc", "4")
    assert spec.congestion == "cubic" and spec.tcp_buffer_max == 256 * 1024
    assert spec.expectation.min_data_flows == 8
    tree = sweeps.spec_for(config, "streams", setting, "small", Lab())
    assert "-r" in tree.template and tree.expectation.min_data_flows == 4


@pytest.mark.parametrize(("n", "datasets", "reps"), [(4, ["a"], 3), (8, ["a", "b"], 2), (1, ["a"], 2), (3, ["a"], 5)])
def test_runs_are_interleaved_and_rotated(n: int, datasets: list[str], reps: int) -> None:
    order = sweeps.run_order(n, datasets, reps)
    # Every (setting, dataset) exactly `reps` times, one per repetition.
    assert Counter((i, d) for _, i, d in order) == {(i, d): reps for i in range(n) for d in datasets}
    per_rep = [[i for r, i, _ in order if r == rep] for rep in range(reps)]
    for rep, indices in enumerate(per_rep):
        # Round-robin: a repetition visits every setting before the next repetition starts.
        assert sorted(set(indices)) == list(range(n))
        assert [r for r, _, _ in order] == sorted(r for r, _, _ in order)
        if n > 1:
            assert indices[0] == rep % n  # rotated: a different setting leads each repetition
    if n > 1 and reps > 1:
        assert per_rep[0][0] != per_rep[1][0]


# ---------------------------------------------------------------- refusals at --config.check


def test_unknown_option_for_the_module_is_refused() -> None:
    text = BASE + "  s: {protocol: http, remote: lab, datasets: [big], options: {parallel: [1, 2]}}\n"
    assert (
        f"{SRC}: sweeps.s.options.parallel: module 'http' has no option 'parallel'; allowed: none (sweep its "
        "congestion or tcp_buffer_max instead)" in _issues(text)
    )
    text = BASE + "  s: {protocol: gridftp, remote: lab, datasets: [big], options: {streams: [1, 2]}}\n"
    assert any(
        line.startswith(f"{SRC}: sweeps.s.options.streams: module 'gridftp' has no option 'streams'; allowed: ")
        and "parallel, concurrency" in line
        for line in _issues(text)
    )
    text = BASE + "  s: {protocol: gridftp, remote: lab, datasets: [big], options: {parallel: [1, two]}}\n"
    assert any(line.startswith(f"{SRC}: sweeps.s.options.parallel[1]: expected int") for line in _issues(text))


def test_unknown_protocol_remote_and_dataset_are_refused_together() -> None:
    text = BASE + "  s: {protocol: gridftpx, remote: site, datasets: [big, huge]}\n"
    lines = _issues(text)
    assert f"{SRC}: sweeps.s.protocol: no protocol named 'gridftpx'; defined: gridftp, http, iperf3" in lines
    assert f"{SRC}: sweeps.s.remote: no remote named 'site'; defined: lab" in lines
    assert f"{SRC}: sweeps.s.datasets[1]: no dataset named 'huge'; defined: big, small" in lines


def test_an_algorithm_the_kernel_lacks_is_refused_with_the_fix() -> None:
    text = BASE + "  s: {protocol: http, remote: lab, datasets: [big], congestion: [cubic, nosuchcc]}\n"
    lines = [line for line in _issues(text) if "sweeps.s.congestion[1]" in line]
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    assert len(lines) == 1 and "'nosuchcc' is not available in this kernel" in lines[0]
    assert f"(available: {', '.join(available)};" in lines[0] and "pick one of those" in lines[0]


def test_a_grid_above_max_runs_is_refused_naming_the_count_and_the_fix() -> None:
    text = GOOD + "    max_runs: 50\n"
    assert (
        f"{SRC}: sweeps.streams: the grid is 16 settings x 2 datasets x 3 repetitions = 96 runs, more than max_runs "
        "50; drop values, datasets or repetitions, or raise max_runs to 96 if the sweep should really take that long"
    ) in _issues(text)
    # The default maximum (200) holds too.
    grid = "{parallel: [1,2,3,4,5,6,7,8,9,10,11], concurrency: [1,2,3,4,5,6,7,8,9,10]}"
    text = BASE + f"  s: {{protocol: gridftp, remote: lab, datasets: [big], options: {grid}, repetitions: 2}}\n"
    assert any("= 220 runs, more than max_runs 200" in line for line in _issues(text))


def test_a_baseline_outside_the_grid_and_a_module_that_cannot_do_trees_are_refused() -> None:
    text = GOOD + "    baseline: {parallel: 3, pipelining: true}\n"
    lines = _issues(text)
    assert (
        f"{SRC}: sweeps.streams.baseline.parallel: 3 is not one of the sweep's values [1, 2, 4, 8]: the baseline "
        "must be a setting the sweep runs" in lines
    )
    assert any(line.startswith(f"{SRC}: sweeps.streams.baseline.pipelining: not a dimension") for line in lines)
    text = BASE + "  s: {protocol: http, remote: lab, datasets: [big, small]}\n"
    assert (
        f"{SRC}: sweeps.s.datasets[1]: module 'http' cannot download a directory of files; pick another dataset "
        "or protocol" in _issues(text)
    )


def test_check_command_exits_1_on_a_refused_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(GOOD + "    max_runs: 10\n")
    assert cli.main(["--config.file", str(path), "--config.check"]) == 1
    assert "raise max_runs to 96" in capsys.readouterr().err
    path.write_text(GOOD)
    assert cli.main(["--config.file", str(path), "--config.check"]) == 0


# ---------------------------------------------------------------- the verdict


def _run(label: str, speed: float, dataset: str = "big", rep: int = 1, ok: bool = True, **values) -> Result:
    size = 16 << 20
    return Result(
        protocol="gridftp",
        remote="lab",
        dataset=dataset,
        direction="download",
        start_timestamp=1_763_000_000.0 + rep,
        outcome="ok" if ok else "failed",
        duration_seconds=size / speed,
        file_bytes=size,
        files=1,
        packets_down=12_000,
        retransmits_sender=int(values.pop("retrans", 0)),
        source="sweep",
        sweep_name="streams",
        sweep="streams-1",
        sweep_setting={**values, "baseline": "parallel=1"},
        sweep_label=label,
        sweep_repetition=rep,
    )


SPEEDS = {1: [4.1e6, 4.3e6, 3.9e6], 2: [8.0e6, 8.5e6, 7.9e6], 4: [15.9e6, 16.8e6, 16.1e6], 8: [16.5e6, 16.0e6, 17.2e6]}


def _runs() -> list[Result]:
    return [
        _run(f"parallel={p}", v, rep=i + 1, parallel=p, retrans=p * 10)
        for p, values in SPEEDS.items()
        for i, v in enumerate(values)
    ]


def test_the_verdict_against_scipy() -> None:
    v = sweep_report.verdict(_runs())
    (d,) = v.datasets
    means = {p: statistics.fmean(s) for p, s in SPEEDS.items()}
    ranked = sorted(means, key=lambda p: -means[p])
    assert [r.setting for r in d.rows] == [f"parallel={p}" for p in ranked]
    for row in d.rows:
        p = row.values["parallel"]
        values = SPEEDS[p]
        low, high = sps.t.interval(0.95, len(values) - 1, loc=statistics.fmean(values), scale=sps.sem(values))
        assert row.ci_low == pytest.approx(low) and row.ci_high == pytest.approx(high)
        assert row.retransmit_rate == pytest.approx(p * 10 / 12_000)
        if row.rank > 1:
            expected = sps.ttest_ind(values, SPEEDS[ranked[0]], equal_var=False).pvalue
            assert row.welch_p_vs_best == pytest.approx(expected)
            assert row.top_group == (expected >= 0.05)
    # p=4 and p=8 cannot be told apart: the cheaper one (4 streams) is recommended.
    assert d.best == "parallel=8" and d.recommended == "parallel=4"
    assert d.gain == pytest.approx(means[8] / means[1])
    welch = sps.ttest_ind(SPEEDS[8], SPEEDS[1], equal_var=False)
    ci = welch.confidence_interval(0.95)
    assert d.gain_low == pytest.approx(1 + ci.low / means[1]) and d.gain_high == pytest.approx(1 + ci.high / means[1])
    assert d.welch_p_best_vs_baseline == pytest.approx(welch.pvalue) and d.significant is True


def test_sweep_report_command_writes_csv_json_html_and_figures(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    for r in _runs():
        journal.append(r)
    journal.append(Result("scp", "lab", "big", "download", 1.0, "ok", duration_seconds=1, file_bytes=10))
    out = tmp_path / "out"
    assert cli.main(["sweep-report", "--journal", str(journal.path), "--sweep", "streams", "--out", str(out)]) == 0
    data = json.loads((out / "sweep.json").read_text())
    assert data["datasets"][0]["recommended"] == "parallel=4"
    rows = (out / "sweep.csv").read_text().splitlines()
    assert rows[0].startswith("Dataset,Rank,Setting,n,Failed,Mean (MB/s)")
    assert rows[1].startswith("big,1,parallel=8,3,0,16.567,")
    assert (out / "sweep-big-streams.png").stat().st_size > 10_000
    assert "Recommended: parallel=4" in (out / "index.html").read_text()
    assert cli.main(["sweep-report", "--journal", str(journal.path), "--sweep", "nope", "--out", str(out)]) == 2


def test_heatmap_for_parallel_x_concurrency(tmp_path: Path) -> None:
    runs = [
        _run(f"parallel={p},concurrency={c}", 1e6 * p * c + 1e5 * i, rep=i + 1, parallel=p, concurrency=c)
        for p in (1, 2)
        for c in (1, 2)
        for i in range(2)
    ]
    v = sweep_report.verdict(runs)
    from bigbinf.study import sweep_figures

    written = sweep_figures.write_all(v, tmp_path)
    assert {p.name for p in written} == {"sweep-big-streams.png", "sweep-big-heatmap.png"}
    fig_lines = sweep_figures.streams_figure(v.datasets[0], tmp_path / "x.png")
    assert fig_lines is not None


def test_bests_and_the_published_metrics() -> None:
    found = sweeps.bests(_runs())
    (b,) = found
    assert b.setting == "parallel=8" and b.dataset == "big"
    assert b.throughput_bytes_per_second == pytest.approx(statistics.fmean(SPEEDS[8]))
    assert b.gain_ratio == pytest.approx(statistics.fmean(SPEEDS[8]) / statistics.fmean(SPEEDS[1]))
    # The last run of a sweep wins at restore; a newer run replaces it.
    older = [r.__class__(**{**r.__dict__, "sweep": "streams-0", "start_timestamp": 1.0}) for r in _runs()]
    assert [x.sweep_id for x in sweeps.latest_bests([*older, *_runs()], ["streams"])["streams"]] == ["streams-1"]
    assert sweeps.latest_bests(_runs(), ["other"]) == {}
    state = _state()
    state.record_sweep("streams", found)
    state.record_sweep("cc", [SweepBest("cc", "cc-1", "big", 'congestion="bbr"', 2e7, None, 5.0)])
    registry = _registry(state)
    rendered = build(state.snapshot())
    text = b"".join(rendered.chunks("text"))
    assert text == generate_latest(registry)
    assert b"".join(rendered.chunks("openmetrics")) == openmetrics_latest(registry)
    labels = {"sweep": "streams", "dataset": "big", "setting": "parallel=8"}
    assert registry.get_sample_value("bigbinf_sweep_best_throughput_bytes_per_second", labels) == pytest.approx(
        b.throughput_bytes_per_second
    )
    assert registry.get_sample_value("bigbinf_sweep_gain_ratio", labels) == pytest.approx(b.gain_ratio)
    assert registry.get_sample_value("bigbinf_sweep_gain_ratio", {**labels, "sweep": "cc"}) is None
    # Not a scheduled series: nothing of the sweep appears under the series' families.
    assert b'protocol="gridftp"' not in text
    state.record_sweep("streams", [])
    assert registry.get_sample_value("bigbinf_sweep_best_throughput_bytes_per_second", labels) is None


def test_retransmit_rates_agree_between_service_and_report() -> None:
    for r in _runs():
        assert sweeps.retransmit_rate(r) == sweep_report.retransmit_rate(r)
    assert math.isclose(sweeps.retransmit_rate(_runs()[0]) or 0, 10 / 12_000)


SITE = """
remotes:
  site: {address: 192.0.2.10, data_dir: /data, key: KEY}
datasets:
  big: {file: big.bin, size: 16MiB}
protocols:
  gridftp: {}
journal: {path: JOURNAL}
schedule: {interval: 1h}
sweeps:
  streams:
    protocol: gridftp
    remote: site
    datasets: [big]
    options: {parallel: [1, 2, 4, 8]}
    schedule: ["0 3 * * sun"]
"""


def test_the_exporter_restores_the_verdict_not_the_runs_and_schedules_sweeps(tmp_path: Path) -> None:
    from bigbinf.service.server import Exporter

    journal = Journal(tmp_path / "j.jsonl")
    for r in _runs():  # gridftp/site/big/download would be a configured series
        journal.append(r.__class__(**{**r.__dict__, "remote": "site"}))
    key = tmp_path / "key"
    key.write_text("k")
    key.chmod(0o600)
    site = SITE.replace("JOURNAL", str(journal.path)).replace("KEY", str(key))
    path = tmp_path / "c.yaml"
    path.write_text(site)
    exporter = Exporter(path)
    text = b"".join(exporter.metrics.current.chunks("text")).decode()
    assert "bigbinf_last_transfer_throughput_bytes_per_second{" not in text  # no run restored as a series
    best = statistics.fmean(SPEEDS[8])
    labels = {"sweep": "streams", "dataset": "big", "setting": "parallel=8"}
    assert exporter.registry.get_sample_value("bigbinf_sweep_best_throughput_bytes_per_second", labels) == (
        pytest.approx(best)
    )
    sweeps.schedule_all(exporter.scheduler, exporter.sweeper, exporter.config)
    job = exporter.scheduler.get_job("sweep:streams")
    assert job is not None
    wednesday = dt.datetime(2026, 11, 25, 12, tzinfo=dt.UTC)
    assert job.trigger.get_next_fire_time(None, wednesday) == dt.datetime(2026, 11, 29, 3, tzinfo=dt.UTC)
    # A reload without the sweep drops its job and its verdict.
    path.write_text(site.split("sweeps:")[0])
    exporter.scheduler.add_job(lambda: None, "interval", hours=1, id="round")  # as start() adds it
    exporter.scheduler.start(paused=True)
    try:
        assert exporter.reload()
        assert exporter.scheduler.get_job("sweep:streams") is None
        assert exporter.registry.get_sample_value("bigbinf_sweep_best_throughput_bytes_per_second", labels) is None
    finally:
        exporter.scheduler.shutdown(wait=False)


def test_a_sweep_never_overlaps_a_round_or_another_sweep(tmp_path: Path) -> None:
    from bigbinf.service.rounds import RoundRunner

    config = parse_config(SITE.replace("JOURNAL", str(tmp_path / "j.jsonl")).replace("KEY", "/k"), SRC)
    state = ExporterState()
    runner = RoundRunner(config, state)
    sweeper = sweeps.SweepRunner(runner)
    assert runner.exclusive(0.1)  # a sweep (or a round) holds the lock
    try:
        assert runner.run_round([]) is None  # a round meeting it is skipped and counted
        assert state.rounds_skipped == {"round_running": 0, "lock_held": 1}
        assert sweeper.run("streams", wait=0.2) is None  # another sweep does not start
    finally:
        runner.release()
    assert runner.run_round([]) == []  # free again
    with pytest.raises(sweeps.SweepError, match="no sweep named 'nope'; configured: streams"):
        sweeper.run("nope")


def test_another_process_holding_the_journal_lock_keeps_rounds_and_sweeps_out(tmp_path: Path) -> None:
    import subprocess
    import sys

    from bigbinf.service.rounds import RoundRunner

    journal = tmp_path / "j.jsonl"
    config = parse_config(SITE.replace("JOURNAL", str(journal)).replace("KEY", "/k"), SRC)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time\n"
            f"f = open({str(journal) + '.lock'!r}, 'a+b'); fcntl.flock(f, fcntl.LOCK_EX)\n"
            "print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        state = ExporterState()
        runner = RoundRunner(config, state)
        assert runner.run_round([]) is None and state.rounds_skipped["lock_held"] == 1
        assert sweeps.SweepRunner(runner).run("streams", wait=0.3) is None
        # The `sweep` command, another process again, refuses at once, saying why.
        key = tmp_path / "key"
        key.write_text("k")
        key.chmod(0o600)
        path = tmp_path / "c.yaml"
        path.write_text(SITE.replace("JOURNAL", str(journal)).replace("KEY", str(key)))
        sweep_cli = subprocess.run(
            [sys.executable, "-m", "bigbinf", "--config.file", str(path), "sweep", "--sweep", "streams"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert sweep_cli.returncode == 1
        assert f"sweep: not started: a round or another sweep is running against {journal}" in sweep_cli.stderr
        assert not journal.exists()  # nothing ran
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    assert runner.run_round([]) == []  # the other process is gone: the lock is free


def test_iperf3_streams_is_an_option_to_sweep() -> None:
    text = BASE + "  s: {protocol: iperf3, remote: lab, datasets: [big], options: {streams: [1, 4]}}\n"
    config = _ok(text)
    from bigbinf.protocols import REGISTRY

    profile = REGISTRY["iperf3"]
    four = profile.option_values({"streams": 4})
    assert "-P" in profile.commands(four)[("download", "file")] and profile.expect(four).min_data_flows == 4
    assert "-P" not in profile.commands(profile.option_values({}))[("download", "file")]
    assert [s.label for s in sweeps.settings(config, "s")] == ["streams=1", "streams=4"]


def test_iperf3s_own_congestion_and_a_congestion_sweep_exclude_each_other() -> None:
    text = BASE + "  s: {protocol: iperf3, remote: lab, datasets: [big], congestion: [cubic, bbr]}\n"
    _ok(text)
    assert (
        f"{SRC}: sweeps.s.congestion: iperf3's own congestion option (-C) is set too: a locked route refuses its "
        "setsockopt; sweep one of the two, not both"
    ) in _issues(text.replace("iperf3: {}", "iperf3: {options: {congestion: reno}}"))


def test_report_leaves_sweep_runs_out_naming_them() -> None:
    from bigbinf.study.tables import SWEEP_RUN, build_report

    scheduled = Result("gridftp", "lab", "big", "download", 5.0, "ok", duration_seconds=2.0, file_bytes=16 << 20)
    rep = build_report([*_runs(), scheduled])
    assert rep.used == [scheduled]
    assert len(rep.skipped) == len(_runs()) and {s.category for s in rep.skipped} == {SWEEP_RUN}


def test_backfill_leaves_sweep_runs_out_of_the_series_history(tmp_path: Path) -> None:
    import io

    from bigbinf.study import backfill

    journal = Journal(tmp_path / "j.jsonl")
    scheduled = Result("gridftp", "lab", "big", "download", 5.0, "ok", duration_seconds=2.0, file_bytes=16 << 20)
    for r in [*_runs(), scheduled]:
        journal.append(r)
    results, _unreadable = backfill._read(journal.path, None, None, io.StringIO())
    assert results == [scheduled]


def test_a_value_listed_twice_in_the_grid_is_refused() -> None:
    # Each would run the same setting twice as often and be pooled into one row.
    text = BASE + (
        "  s: {protocol: iperf3, remote: lab, datasets: [big, big], options: {streams: [1, 2, 1]},"
        " congestion: [cubic, cubic], tcp_buffer_max: [256KiB, 262144]}\n"
    )
    twice = "is listed twice (also [0]): its runs would be pooled into one row; list each value once"
    lines = _issues(text)
    assert f"{SRC}: sweeps.s.datasets[1]: 'big' {twice}" in lines
    assert f"{SRC}: sweeps.s.options.streams[2]: 1 {twice}" in lines
    assert f"{SRC}: sweeps.s.congestion[1]: 'cubic' {twice}" in lines
    assert f"{SRC}: sweeps.s.tcp_buffer_max[1]: 262144 {twice}" in lines  # 256KiB, as bytes
    assert len([line for line in lines if "listed twice" in line]) == 4
    # Each value once: accepted.
    once = "datasets: [big], options: {streams: [1, 2]}, congestion: [cubic, bbr]"
    _ok(BASE + f"  s: {{protocol: iperf3, remote: lab, {once}}}\n")


# Hides the optional extra `report` from the CLI as an install without it: an import of
# scipy or matplotlib then fails, and find_spec finds neither.
WITHOUT_EXTRAS = (
    "import sys; sys.modules.update(scipy=None, matplotlib=None); "
    "from bigbinf.cli import main; sys.exit(main(sys.argv[1:]))"
)


@pytest.mark.parametrize("figures", [True, False])
def test_sweep_report_without_scipy_says_which_extra_to_install(tmp_path: Path, figures: bool) -> None:
    journal = Journal(tmp_path / "j.jsonl")
    for r in _runs():
        journal.append(r)
    out = tmp_path / "out"
    argv = ["sweep-report", "--journal", str(journal.path), "--sweep", "streams", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS, *argv, *([] if figures else ["--no-figures"])],
        capture_output=True,
        text=True,
        timeout=120,
    )
    wanted = "scipy and matplotlib" if figures else "scipy"
    assert (done.returncode, done.stderr) == (
        2,
        f"bigbinf-exporter sweep-report: error: sweep-report needs {wanted}: pip install 'bigbinf[report]'\n",
    )
    assert not out.exists()  # said before any work
    # `report`, the same way (its own words).
    report = ["report", "--journal", str(journal.path), "--out", str(out)]
    done = subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *report], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.endswith("report needs scipy and matplotlib: pip install 'bigbinf[report]'\n")
