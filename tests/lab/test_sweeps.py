"""Tuning sweeps in the lab (issue 11): the physics a sweep must find, through the real path.

Each test runs a whole sweep (service/sweeps.py) against its own lab with GridFTP, reads
the journal back independently, checks every run against what the kernel and the capture
say, and the verdict (study/sweep_report.py) against scipy.  Numbers are in
docs/benchmarks.md, "Tuning sweeps".

- streams: 200 Mbit/s, 40 ms RTT (20 ms each way through the delay line), buffers capped
  at 256 KiB (BDP 1 MB): one stream is window-bound, so throughput rises with -p until
  the link is full;
- congestion: 1% loss each way: cubic against bbr, each run's algorithm read back from
  the sender's tcp_info (measure/tcp/tuning.py), with the retransmission rates;
- small files: 64 files of 128 KiB over 40 ms RTT: -cc 4 beats -cc 1 (the per-file
  round trips overlap), as the poster found.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from scipy import stats as sps

from bigbinf import lab
from bigbinf.config import Config
from bigbinf.journal.store import Journal
from bigbinf.measure import datasets
from bigbinf.result import Result
from bigbinf.service.collector import ExporterState
from bigbinf.service.rounds import RoundRunner
from bigbinf.service.sweeps import SweepRunner
from bigbinf.study import sweep_report

pytestmark = pytest.mark.lab
MB = 1e6
LINK_BYTES_PER_SECOND = 200e6 / 8
CAP = 256 * 1024


def _sweep(config: Config, name: str) -> tuple[list[Result], ExporterState]:
    state = ExporterState()
    runner = RoundRunner(config, state, lab=lab.site)
    run = SweepRunner(runner, progress=sys.stderr).run(name, wait=0)
    assert run is not None
    # The journal, read back on its own, holds exactly the sweep's runs, as sweep runs.
    journaled = [r for r in Journal(config.journal.path).read() if r.sweep == run.sweep_id]
    assert [r.to_json() for r in journaled] == [r.to_json() for r in run.results]
    return _checked(config, name, journaled), state


def _sweep_command(config: Config, name: str, tmp_path: Path) -> list[Result]:
    """The same through `bigbinf-exporter sweep`, as an operator runs it."""
    path = tmp_path / "config.yaml"
    raw = json.loads(config.model_dump_json())
    raw["schedule"] = {"interval": "1h"}  # the dump holds both cron's default and the interval
    path.write_text(yaml.safe_dump(raw))
    before = {r.sweep for r in Journal(config.journal.path).read()}
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(path), "sweep", "--sweep", name],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    print(proc.stderr, file=sys.stderr)
    n = len(config.sweeps[name].datasets) * config.sweeps[name].repetitions * 2
    assert f"[{n}/{n}] setting " in proc.stderr and "; ETA 0m00s" in proc.stderr
    (run_id,) = {r.sweep for r in Journal(config.journal.path).read()} - before
    assert f"{n} runs journaled as {run_id}" in proc.stdout
    return _checked(config, name, [r for r in Journal(config.journal.path).read() if r.sweep == run_id])


def _checked(config: Config, name: str, journaled: list[Result]) -> list[Result]:
    assert all(r.source == "sweep" and r.sweep_name == name for r in journaled)
    sweep = config.sweeps[name]
    settings = {r.sweep_label for r in journaled}
    assert len(journaled) == len(settings) * len(sweep.datasets) * sweep.repetitions
    # Interleaved: repetition k of every setting before repetition k + 1 of any.
    reps = [r.sweep_repetition for r in journaled]
    assert reps == sorted(reps)
    return journaled


def _by_setting(runs: list[Result], key: str) -> dict[object, list[float]]:
    out: dict[object, list[float]] = defaultdict(list)
    for r in runs:
        assert r.outcome == "ok", r.error
        out[r.sweep_setting[key]].append(r.throughput_bytes_per_second)
    return out


def _verified(r: Result, config: Config) -> None:
    assert r.verified, r.error
    ds = config.datasets[r.dataset]
    assert r.file_bytes == datasets.total_bytes(ds) and r.files == ds.count
    assert r.payload_bytes_down >= r.file_bytes  # the capture saw the whole dataset cross the link


@pytest.fixture(scope="module")
def streams_lab(make_module_lab) -> Config:
    return make_module_lab(
        link={"rate": "200mbit", "delay": "20ms"},
        # 16 MiB: one capped stream still runs ~5 s, and 8 and 16 streams still level off at
        # GridFTP's per-transfer cost (3.4x one stream, 2026-12-03); 32 MiB doubled the
        # sweep's time.
        datasets={"f16m": {"file": "f16m.bin", "size": "16MiB"}},
        protocols={"gridftp": {}},
        servers=["gridftp"],
        sweeps={
            "streams": {
                "protocol": "gridftp",
                "remote": "lab",
                "datasets": ["f16m"],
                "options": {"parallel": [1, 2, 4, 8, 16]},
                "tcp_buffer_max": ["256KiB"],
                "repetitions": 3,
            }
        },
    )


def test_streams_fill_a_window_bound_path(streams_lab: Config) -> None:
    runs, state = _sweep(streams_lab, "streams")
    assert state.latest == {}  # never a scheduled series
    for r in runs:
        _verified(r, streams_lab)
        assert r.tcp_buffer_max_bytes == CAP
        assert r.data_flows >= r.sweep_setting["parallel"]  # the capture shows the streams
    speeds = _by_setting(runs, "parallel")
    mean = {p: statistics.fmean(v) for p, v in speeds.items()}
    print({p: round(m / MB, 2) for p, m in mean.items()}, file=sys.stderr)
    # One capped stream cannot fill 1 MB of BDP; more streams multiply the window.
    assert mean[2] > 1.3 * mean[1]
    assert mean[8] > 1.5 * mean[1]
    assert mean[4] > 1.5 * mean[1]
    # One stream is bound by the capped window (the sender's tcp_info, bigbinf/judge/rules.py);
    # the gain flattens once the streams' windows together exceed the BDP, never above
    # the shaped rate.
    # The cap binds both buffers; the receiver's reached it (skmem rb), and that cap, not
    # the host's larger sysctl, is the ceiling the verdict judges by.
    single = [(r.limited_by, r.limited_evidence) for r in runs if r.sweep_setting["parallel"] == 1]
    assert all(limit == "receive_window" and "tcp_buffer_max cap 262.14 kB" in why for limit, why in single), single
    assert mean[16] < 1.25 * mean[8]
    assert max(mean.values()) < 1.02 * LINK_BYTES_PER_SECOND
    # The verdict: the recommendation is in the measured top group (scipy's own Welch test).
    v = sweep_report.verdict(runs)
    (d,) = v.datasets
    best = max(mean, key=lambda p: mean[p])
    assert d.best == f"parallel={best},tcp_buffer_max=256KiB"
    recommended = next(r for r in d.rows if r.recommended)
    rp = recommended.values["parallel"]
    if rp != best:
        assert sps.ttest_ind(speeds[rp], speeds[best], equal_var=False).pvalue >= 0.05
    assert rp != 1
    assert d.baseline == "parallel=1,tcp_buffer_max=256KiB"
    assert d.gain == pytest.approx(mean[best] / mean[1])
    assert d.gain_low is not None and d.gain_low > 1.0 and d.significant
    print(sweep_report.gain_sentence(d), file=sys.stderr)
    (published,) = state.sweeps["streams"]
    assert published.setting == d.best and published.gain_ratio == pytest.approx(d.gain)


@pytest.fixture(scope="module")
def lossy_lab(make_module_lab) -> Config:
    return make_module_lab(
        link={"rate": "200mbit", "delay": "5ms", "loss": 1},
        datasets={"f8m": {"file": "f8m.bin", "size": "8MiB"}},
        protocols={"gridftp": {}},
        servers=["gridftp"],
        sweeps={
            "cc": {
                "protocol": "gridftp",
                "remote": "lab",
                "datasets": ["f8m"],
                "congestion": ["cubic", "bbr"],
                "repetitions": 3,
            }
        },
    )


def test_cubic_and_bbr_on_a_lossy_link(lossy_lab: Config) -> None:
    runs, _state = _sweep(lossy_lab, "cc")
    confirmed: dict[str, int] = {"cubic": 0, "bbr": 0}
    for r in runs:
        _verified(r, lossy_lab)
        asked = r.sweep_setting["congestion"]
        assert r.congestion_requested == asked
        # 1% loss each way: the sender retransmitted, and its kernel said how often.
        assert r.retransmits_sender is not None and r.retransmits_sender > 0
        if r.outcome == "ok":
            # The sender's kernel confirms the algorithm asked for (measure/tcp/tuning.py's read-back).
            assert r.congestion_control == asked
            confirmed[asked] += 1
        else:
            # Only the close events saw the remote sender's socket (they carry no algorithm's
            # name): through ssh each listing is a session, and beside busy CPUs a 0.9 s bbr
            # transfer ended between two.  The run is then failed, saying so - never passed
            # unconfirmed, never judged by another algorithm's name.
            assert r.error.startswith(f"congestion: asked for {asked} on the sender") and r.error.endswith(
                "nothing confirms it"
            ), r.error
    assert min(confirmed.values()) >= 2, confirmed
    v = sweep_report.verdict(runs)
    (d,) = v.datasets
    rows = {row.values["congestion"]: row for row in d.rows}
    assert set(rows) == {"cubic", "bbr"}
    for algorithm, row in rows.items():
        assert row.congestion_control == algorithm
        assert row.retransmit_rate is not None and row.retransmit_rate > 0.001
        assert row.n == confirmed[algorithm] and row.failed == 3 - confirmed[algorithm] and row.mean is not None
        print(
            f"{algorithm}: {row.mean / MB:.2f} MB/s [{(row.ci_low or 0) / MB:.2f}, {(row.ci_high or 0) / MB:.2f}], "
            f"retransmission rate {row.retransmit_rate:.2%}",
            file=sys.stderr,
        )


@pytest.fixture(scope="module")
def small_files_lab(make_module_lab) -> Config:
    return make_module_lab(
        link={"rate": "200mbit", "delay": "20ms"},
        datasets={"many": {"file": "many", "size": "128KiB", "count": 64}},
        protocols={"gridftp": {}},
        servers=["gridftp"],
        sweeps={
            "files": {
                "protocol": "gridftp",
                "remote": "lab",
                "datasets": ["many"],
                "options": {"concurrency": [1, 4]},
                "repetitions": 3,
            }
        },
    )


def test_concurrency_beats_one_on_many_small_files(small_files_lab: Config, tmp_path: Path) -> None:
    runs = _sweep_command(small_files_lab, "files", tmp_path)
    for r in runs:
        _verified(r, small_files_lab)
        assert r.data_flows >= r.sweep_setting["concurrency"]  # -cc N: N sessions carried data
    speeds = _by_setting(runs, "concurrency")
    mean = {c: statistics.fmean(v) for c, v in speeds.items()}
    print({c: round(m / MB, 2) for c, m in mean.items()}, file=sys.stderr)
    assert mean[4] > 1.5 * mean[1]
    (d,) = sweep_report.verdict(runs).datasets
    assert d.best == "concurrency=4"
    p = sps.ttest_ind(speeds[4], speeds[1], equal_var=False).pvalue
    assert p == pytest.approx(d.welch_p_best_vs_baseline)
    # The recommendation is the top group's cheapest setting: -cc 4 once scipy's Welch test
    # sets it apart from -cc 1, else -cc 1 (three runs on a busy machine may not: seen
    # 3.5, 3.5, 2.1 against 1.8, 1.6, 1.2 MB/s).
    assert d.recommended == ("concurrency=4" if p < 0.05 else "concurrency=1"), p
