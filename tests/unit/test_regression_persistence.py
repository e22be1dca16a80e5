"""Run-to-run persistence (issue 45, breaker45 B1): runs that share a congested spell are
fewer observations than runs, and the regression judgement counts them so
(bigbinf/history/regression.py `run_persistence`, `Persistence.inflation`,
`persistent_p`)."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from bigbinf.history.regression import (
    DAY,
    OPENED,
    History,
    RegressionSettings,
    correlation_sum,
    persistent_p,
    recovered,
    run_persistence,
)

HOUR = 3600.0
START = 1_767_225_600.0  # 2026-01-01 00:00 UTC
LEVEL = 25e6


def ar1(n: int, sd: float, phi: float, rng: np.random.Generator) -> np.ndarray:
    """Stationary AR(1) noise (log) with marginal SD `sd`."""
    innovations = rng.normal(0.0, sd * math.sqrt(1.0 - phi**2), n)
    out = np.empty(n)
    out[0] = rng.normal(0.0, sd)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + innovations[i]
    return out


def diurnal(ts: np.ndarray) -> np.ndarray:
    """A research network's day: 30% slower at 14:00 UTC (log)."""
    hours = (ts % DAY) / HOUR
    return math.log(0.7) * 0.5 * (1.0 + np.cos(2.0 * math.pi * (hours - 14.0) / 24.0))


def openings(ts: np.ndarray, logs: np.ndarray, settings: RegressionSettings) -> list[float]:
    """The run starts at which a regression of the series opened, fed run by run as the
    exporter does (History.add, service/rounds.py)."""
    history = History(settings)
    out = []
    for t, x in zip(ts.tolist(), logs.tolist(), strict=True):
        history.add("s", t, math.exp(x))
        out += [e.at for e in history.events if e.kind == OPENED]
        history.events.clear()
    return out


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.85])
def test_the_persistence_is_the_noise_s_own(phi: float) -> None:
    """The lag-1 autocorrelation of runs one gap apart within a day is the AR(1)
    coefficient that made them (SE about 1 / sqrt(n): 0.03 on 1,000 runs), across a gap
    in the schedule too, and whatever each day's own level (the day gate's)."""
    rng = np.random.default_rng(11)
    ts = START + np.arange(1000) * HOUR
    ts[500:] += 5 * HOUR  # an outage: the pair across it is not one gap apart
    days = np.floor((ts - START) / DAY).astype(int)
    day_levels = rng.normal(0.0, 0.3, days.max() + 1)[days]
    estimate, gap = run_persistence(ts, ts % DAY, ar1(len(ts), 0.1, phi, rng) + day_levels)
    assert gap == HOUR
    assert estimate == pytest.approx(phi, abs=0.08)


def test_a_few_rounds_a_day_have_no_run_persistence() -> None:
    """Four rounds a day: the runs are hours apart, a day's level is the day gate's, and
    the runs' persistence is not estimated (0)."""
    rng = np.random.default_rng(12)
    ts = START + np.arange(400) * 6 * HOUR
    assert run_persistence(ts, ts % DAY, ar1(len(ts), 0.1, 0.9, rng))[0] == 0.0


def test_the_correlation_sum_is_every_pair_s() -> None:
    """Against the double sum written out, runs in clusters (a time-of-day window each
    day) and one apart."""
    ts = np.sort(
        np.concatenate([START + d * DAY + np.arange(5) * HOUR for d in range(6)] + [np.array([START + 9.5 * DAY])])
    )
    phi, gap = 0.7, HOUR
    brute = sum(phi ** (abs(a - b) / gap) for a in ts.tolist() for b in ts.tolist())
    assert correlation_sum(ts, phi, gap) == pytest.approx(brute, rel=1e-4)
    assert correlation_sum(ts, 0.0, gap) == len(ts)


def test_a_p_value_is_shrunk_as_its_normal_deviate() -> None:
    """persistent_p: the one-sided p's normal deviate over sqrt(inflation); p itself with
    no persistence, and never smaller."""
    normal = statistics.NormalDist()
    assert persistent_p(2.1e-6, 1.0) == 2.1e-6
    assert persistent_p(2.1e-6, 4.0) == pytest.approx(normal.cdf(normal.inv_cdf(2.1e-6) / 2.0))
    assert persistent_p(2.1e-6, 4.0) > 1e-3
    assert persistent_p(0.7, 4.0) == 0.7
    assert persistent_p(0.0, 4.0) == 0.0


@pytest.mark.parametrize("seed", [2, 4])
def test_congestion_that_lasts_hours_opens_nothing(seed: int) -> None:
    """An unchanged hourly series whose noise is congestion with a 3 h correlation time
    (AR(1), lag-1 0.72, 10% SD): the runs of one congested spell are one observation, not
    three.  Before the persistence was counted these series opened a regression on day
    2.8 (seed 2) and 3.8 (seed 4) of their first 4 days."""
    rng = np.random.default_rng(seed)
    ts = START + np.arange(0.0, 4 * DAY, HOUR)
    logs = math.log(LEVEL) + diurnal(ts) + ar1(len(ts), 0.10, math.exp(-1.0 / 3.0), rng)
    assert openings(ts, logs, RegressionSettings(rounds_per_day=24)) == []


def test_a_quiet_step_still_opens_by_its_third_slow_run() -> None:
    """Independent noise (3% a run, hourly): a 15% step down opens on its 2nd-3rd slow
    run, as before; the persistence estimated from the baseline is about 0 and changes
    nothing."""
    rng = np.random.default_rng(5)
    ts = START + np.arange(0.0, 30 * DAY, HOUR)
    logs = math.log(LEVEL) + diurnal(ts) + rng.normal(0.0, 0.03, len(ts))
    step = len(ts) - 24
    logs[step:] += math.log(0.85)
    opened = openings(ts, logs, RegressionSettings(rounds_per_day=24))
    assert len(opened) == 1
    assert opened[0] in ts[step : step + 3].tolist()


def test_a_deep_step_on_persistent_noise_still_opens_at_once() -> None:
    """Congestion with a 3 h correlation time (10% SD): three runs of a 40% step are
    about 1.3 observations, whose rank test alone, shrunk, cannot open; their depth
    (5 SDs, beyond what a spell's mean reaches at the at-once level: `beyond_spell`)
    opens it within its first slow runs, as on a quiet series."""
    rng = np.random.default_rng(8)
    ts = START + np.arange(0.0, 33 * DAY, HOUR)
    logs = math.log(LEVEL) + diurnal(ts) + ar1(len(ts), 0.10, math.exp(-1.0 / 3.0), rng)
    step = len(ts) - 3 * 24
    logs[step:] += math.log(0.6)
    opened = openings(ts, logs, RegressionSettings(rounds_per_day=24))
    assert len(opened) == 1
    assert opened[0] in ts[step : step + 6].tolist()


def test_runs_of_one_spell_carry_a_fraction_of_the_evidence_of_a_recovery() -> None:
    """`recovered`: six runs back at the level after a 20% drop of a 12% series are
    decisive when independent; when five runs weigh as one (a spell of good luck that
    lasts), neither are 20, and 30 are."""
    fifth = [math.log(0.8)] * 20
    assert recovered([*fifth, *[0.0] * 6], 0.12, 0.1)
    assert not recovered([*fifth, *[0.0] * 20], 0.12, 0.1, runs_per_observation=5.0)
    assert recovered([*fifth, *[0.0] * 30], 0.12, 0.1, runs_per_observation=5.0)
