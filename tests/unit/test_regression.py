"""The live regression test (bigbinf/history/regression.py): its statistics against scipy's, its
interval's coverage, the time-of-day adjustment, and the exporter publishing verdicts."""

from __future__ import annotations

import itertools
import math
import zoneinfo
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from bigbinf import metrics as M
from bigbinf.config import parse_config
from bigbinf.history.regression import (
    DAY,
    EXACT_TIED_BELOW,
    MEDIAN_OWN_BELOW,
    History,
    RegressionSettings,
    Tested,
    Untested,
    _exact_tied_p,
    bh_qvalues,
    examine,
    hodges_lehmann,
    judge,
    mann_whitney_less,
    median,
    point,
)
from bigbinf.result import Result, SeriesKey
from bigbinf.service.collector import BigbinfCollector, ExporterState
from bigbinf.service.rounds import RoundRunner

stats = pytest.importorskip("scipy.stats")

UTC = zoneinfo.ZoneInfo("UTC")
START = 1_760_000_000.0 - 1_760_000_000.0 % DAY  # a UTC midnight


@pytest.mark.parametrize(("m", "n"), [(1, 5), (2, 9), (3, 10), (3, 56), (5, 40), (3, 400), (8, 8), (20, 300)])
def test_exact_p_values_equal_scipys(m: int, n: int) -> None:
    rng = np.random.default_rng(m * 1000 + n)
    for _ in range(20):
        x, y = rng.normal(-0.7, 1, m), rng.normal(0, 1, n)
        ours = mann_whitney_less(x, y)
        theirs = stats.mannwhitneyu(x, y, alternative="less", method="exact").pvalue
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-300)


def test_median_is_numpys_to_the_bit() -> None:
    """The replay's median (one np.partition) against np.median: odd and even sizes,
    ties, infinities, a NaN anywhere, float32 and an int array (np.median's own path)."""
    rng = np.random.default_rng(44)
    cases: list[np.ndarray] = [np.array([2.5]), np.array([1.0, 3.0]), np.zeros(0) + 7.0]
    for n in (2, 3, 4, 5, 24, 25, 96, 97, 1000, 1001, MEDIAN_OWN_BELOW - 2, MEDIAN_OWN_BELOW - 1):
        cases.append(rng.normal(15.0, 0.3, n))
        cases.append(np.round(rng.normal(0, 2, n)))  # many ties
        cases.append(rng.normal(0, 1, n).astype(np.float32))
        with_inf = rng.normal(0, 1, n)
        with_inf[rng.integers(n)] = -math.inf
        cases.append(with_inf)
        with_nan = rng.normal(0, 1, n)
        with_nan[rng.integers(n)] = math.nan
        cases.append(with_nan)
    cases.append(np.arange(10))
    for values in cases:
        ours, theirs = median(values.copy()), float(np.median(values))
        assert (math.isnan(ours) and math.isnan(theirs)) or ours == theirs, (values.size, values.dtype, ours, theirs)


def _brute_force_p(x: np.ndarray, y: np.ndarray) -> float:
    """P(x's midrank sum <= observed) over every choice of len(x) of the pooled values."""
    pooled = np.concatenate([x, y])
    ranks = stats.rankdata(pooled)
    observed = ranks[: len(x)].sum()
    sums = [ranks[list(chosen)].sum() for chosen in itertools.combinations(range(len(pooled)), len(x))]
    return float(np.mean(np.array(sums) <= observed + 1e-9))


def test_tied_p_values_are_exact_against_every_permutation() -> None:
    rng = np.random.default_rng(7)
    checked = 0
    for m, n in ((1, 6), (2, 9), (3, 8), (4, 10), (5, 7), (3, 12)):
        for _ in range(25):
            x = np.round(rng.normal(-0.5, 1, m) * 2) / 2
            y = np.round(rng.normal(0, 1, n) * 2) / 2
            if len(np.unique(np.concatenate([x, y]))) == m + n:
                continue  # no tie: the exact test, compared above
            exact = _brute_force_p(x, y)
            normal = stats.mannwhitneyu(x, y, alternative="less", method="asymptotic").pvalue
            expected = exact if normal <= EXACT_TIED_BELOW else normal  # above it, no decision: the approximation
            assert mann_whitney_less(x, y) == pytest.approx(expected, rel=1e-9, abs=1e-12), (x, y)
            checked += normal <= EXACT_TIED_BELOW
    assert checked > 50
    # The count itself, wherever p is.
    for _ in range(200):
        m, n = int(rng.integers(1, 6)), int(rng.integers(1, 10))
        x, y = rng.integers(0, 4, m).astype(float), rng.integers(0, 5, n).astype(float)
        assert _exact_tied_p(x, y) == pytest.approx(_brute_force_p(x, y), rel=1e-9, abs=1e-12), (x, y)


def test_ties_have_no_p_value_floor() -> None:
    """Three recent runs below 84 baseline runs, some of them tied (residuals of exactly 0:
    the median run of each bin): p = 1 / C(87, 3) = 9.4e-6 as without ties, where the
    normal approximation gave 0.0017, above the 0.002 / 12 a series of 12 needs."""
    rng = np.random.default_rng(45)
    y = rng.normal(0, 0.03, 84)
    y[:6] = 0.0
    x = np.array([-0.3, -0.3, -0.31])
    assert mann_whitney_less(x, y) == pytest.approx(1 / math.comb(87, 3), rel=1e-9)
    assert stats.mannwhitneyu(x, y, alternative="less", method="asymptotic").pvalue > 1e-3
    # Beyond the exact table's size: the normal approximation, as scipy's.
    big_x, big_y = np.round(rng.normal(-0.1, 0.1, 30), 2), np.round(rng.normal(0, 0.1, 300), 2)
    theirs = stats.mannwhitneyu(big_x, big_y, alternative="less", method="asymptotic").pvalue
    assert mann_whitney_less(big_x, big_y) == pytest.approx(theirs, rel=1e-9)


def test_q_values_equal_scipys_benjamini_hochberg() -> None:
    p = np.random.default_rng(3).uniform(size=40) ** 3
    assert bh_qvalues(list(p)) == pytest.approx(list(stats.false_discovery_control(p, method="bh")), rel=1e-12)
    assert bh_qvalues([]) == []


def test_interval_covers_the_true_shift_as_often_as_it_says() -> None:
    """Heavy-tailed samples (t, 3 df), three recent values: the exact interval's coverage
    is at least its level (it is conservative, as discrete intervals are)."""
    rng = np.random.default_rng(11)
    trials, covered = 2000, 0
    for _ in range(trials):
        x, y = rng.standard_t(3, 3) + 0.3, rng.standard_t(3, 30)
        _, lower, upper = hodges_lehmann(x, y, 0.90)
        covered += lower <= 0.3 <= upper
    assert covered / trials >= 0.88  # 0.90 less three binomial standard errors


def _series(days: int, per_day: tuple[float, ...], level: float, noise: float, seed: int, peak_dip: float = 0.0):
    """Runs at the given hours each day: `level` B/s, times (1 - peak_dip) at 13h, and
    multiplicative log-normal noise."""
    rng = np.random.default_rng(seed)
    runs = []
    for day in range(days):
        for hour in per_day:
            factor = 1 - peak_dip if hour == 13 else 1.0
            runs.append((START + day * DAY + hour * 3600, level * factor * math.exp(rng.normal(0, noise))))
    return runs


def _points(runs):
    return [point(t, x, UTC) for t, x in runs]


def test_a_real_drop_is_regressed_and_noise_is_not() -> None:
    settings = RegressionSettings()
    runs = _series(30, (3, 13), 25e6, 0.03, seed=1)
    steady = examine(_points(runs), settings)
    assert isinstance(steady, Tested)
    assert 0.95 < steady.ratio < 1.05 and steady.ratio_lower <= 1 <= steady.ratio_upper
    dropped = runs[:-3] + [(t, x * 0.8) for t, x in runs[-3:]]
    test = examine(_points(dropped), settings)
    assert isinstance(test, Tested)
    assert test.ratio == pytest.approx(0.8, abs=0.05)
    assert test.ratio_lower < test.ratio < test.ratio_upper < 0.9
    assert test.p_value < 1e-3
    verdict = judge({"a": test, "b": steady}, settings)
    assert verdict["a"].regressed and not verdict["b"].regressed


def test_the_time_of_day_is_taken_out() -> None:
    """Peak runs are 30% slower every day: recent runs that happen to be two peak runs
    and one night run are compared with the baseline at those hours, not with the day's
    mix (where they would look 20% low)."""
    settings = RegressionSettings()
    runs = _series(30, (3, 13), 25e6, 0.02, seed=2, peak_dip=0.3)
    runs = [r for r in runs if not (r[0] > START + 28 * DAY and (r[0] - START) % DAY == 3 * 3600)][:-1]
    test = examine(_points(runs), settings)
    assert isinstance(test, Tested)
    assert 0.95 < test.ratio < 1.05
    assert test.p_value > 0.01


def test_a_young_series_is_not_tested_and_says_why() -> None:
    settings = RegressionSettings()
    few = examine(_points(_series(1, (3,), 25e6, 0.03, seed=3)), settings)
    assert isinstance(few, Untested) and "recent runs" in few.reason
    week = examine(_points(_series(5, (3, 13), 25e6, 0.03, seed=3)), settings)
    assert isinstance(week, Untested) and "baseline runs within 2 h" in week.reason
    # A new hour of day: the run at 20h has no baseline at its time of day.
    runs = [*_series(20, (3,), 25e6, 0.03, seed=4), (START + 20 * DAY + 20 * 3600, 25e6)]
    new_hour = examine(_points(runs), settings)
    assert isinstance(new_hour, Untested) and "20:00" in new_hour.reason


def test_history_keeps_only_what_later_tests_use() -> None:
    settings = RegressionSettings(baseline_weeks=1)
    history = History(settings)
    for t, x in _series(30, (3, 13), 25e6, 0.03, seed=5):
        history.add("s", t, x)
    kept = history.runs["s"][0]
    # The baseline week before the recent runs, twice over (the bad days' baseline,
    # BAD_DAY_BASELINES), a day's margin, and the recent runs.
    assert 15 * DAY <= kept[-1] - kept[0] <= 15 * DAY + 1.5 * DAY
    assert not history.add("s", START, 0.0)  # a failed run (no throughput) changes nothing


def _result(t: float, throughput: float, dataset: str = "f32m", source: str = "exporter") -> Result:
    return Result(
        "scp",
        "lab",
        dataset,
        "download",
        t,
        "ok",
        duration_seconds=32 * 2**20 / throughput,
        file_bytes=32 * 2**20,
        source=source,
    )


CONFIG = """
remotes: {lab: {address: 127.0.0.1, data_dir: /d, key: /k/id}}
datasets: {f32m: {file: f.bin, size: 32MiB}, f5m: {file: g.bin, size: 5MiB}}
protocols: {scp: {}}
journal: {path: JOURNAL}
"""


def test_the_round_runner_publishes_verdicts_and_restores_them(tmp_path: Path) -> None:
    """Through the real path: results published by the round runner are journaled and
    tested; a new runner restores the same verdicts from the journal."""
    config = parse_config(CONFIG.replace("JOURNAL", str(tmp_path / "j.jsonl")), "test")
    state = ExporterState()
    runner = RoundRunner(config, state)
    runs = _series(30, (3, 13), 25e6, 0.03, seed=6)
    for t, x in runs[:-3]:
        runner.publish(_result(t, x))
        runner.publish(_result(t + 60, x, dataset="f5m"))
    assert state.regressions[SeriesKey("scp", "lab", "f32m", "download")].regressed is False
    for t, x in runs[-3:]:
        runner.publish(_result(t, x * 0.75))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BigbinfCollector(state))
    labels = {"protocol": "scp", "remote": "lab", "dataset": "f32m", "direction": "download"}
    assert registry.get_sample_value(M.REGRESSED.name, labels) == 1.0
    assert registry.get_sample_value(M.REGRESSION_RATIO.name, labels) == pytest.approx(0.75, abs=0.05)
    assert registry.get_sample_value(M.REGRESSED.name, {**labels, "dataset": "f5m"}) == 0.0
    # An import of old results (source import) is history, not the live series.
    runner.publish(_result(runs[-1][0] + 10, 1e3, source="import"))
    assert state.regressions[SeriesKey("scp", "lab", "f32m", "download")].test.ratio == pytest.approx(0.75, abs=0.05)
    fresh = ExporterState()
    again = RoundRunner(config, fresh)
    keys = [SeriesKey("scp", "lab", dataset, "download") for dataset in ("f32m", "f5m")]
    again.restore_history(again.journal.read(), keys)
    assert fresh.regressions == state.regressions


def test_the_regression_and_moves_sections_are_validated_like_the_rest() -> None:
    from bigbinf.config import ConfigError

    bad = CONFIG.replace("JOURNAL", "/tmp/j.jsonl") + (
        "regression: {recent_runs: 1, fdr: 2, time_of_day_window: 1d, bogus: 1}\nmoves: {sizes: [lots, 0], files: 0}\n"
    )
    with pytest.raises(ConfigError) as raised:
        parse_config(bad, "t.yaml")
    text = raised.value.render()
    for where in (
        "regression.recent_runs",
        "regression.fdr",
        "regression.time_of_day_window",
        "regression.bogus: unknown key",
        "moves.sizes[0]",
        "moves.sizes[1]",
        "moves.files",
    ):
        assert f"t.yaml: {where}" in text, where
    good = parse_config(CONFIG.replace("JOURNAL", "/tmp/j.jsonl"), "t.yaml")
    assert good.regression.fdr == RegressionSettings().fdr and good.moves.sizes == []


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"])
def test_times_of_day_at_once_are_each_runs_time_of_day_exactly(zone: str) -> None:
    """A start's thousands of runs at once (History.load) fall in the same time-of-day bins
    as one run at a time (History.add): equal to the microsecond datetime rounds to, across
    the days the zone changes its offset, and at half a microsecond."""
    from bigbinf.history.regression import time_of_day, times_of_day

    tz = zoneinfo.ZoneInfo(zone)
    rng = np.random.default_rng(44)
    some = np.sort(rng.uniform(1.6e9, 1.8e9, 5000))
    around_a_change = np.arange(1711846800 - 7200, 1711846800 + 7200, 1.5)  # 2024-03-31, Europe's
    edges = np.concatenate([np.round(some[:500]), some[:500] + 5e-7, np.floor(some[:500]) + 0.9999996])
    ts = np.concatenate([some, around_a_change, edges])
    assert times_of_day(ts, tz).tolist() == [time_of_day(float(t), tz) for t in ts]
