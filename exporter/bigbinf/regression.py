"""The live regression test of a series' throughput (issue 28): is the series' recent
throughput significantly and materially below what it was at the same time of day?

One place for the rule and for assembling its inputs: the exporter (service/regressions.py)
runs it after every result, `backfill` runs it over the journal's history, and the
benchmark (benchmarks/bench_regression.py) runs it over generated series; all three call
`examine` and `judge` below, so they cannot disagree.

The test, per series (docs/runbook.md, BigbinfThroughputRegressed, says why each choice):

* **Recent**: the series' last `recent_runs` ok runs.  **Baseline**: its ok runs of the
  `baseline_weeks` before the first recent one, at the same time of day: within
  `time_of_day_window` (circular, local time in `schedule.timezone`) of a recent run.
* **Time of day** is taken out first: every run's log throughput minus the median log
  throughput of the baseline runs around its own time of day (15-minute bins).  A
  recent window of two peak runs and one night run is then compared with the baseline at
  those hours, not with the whole day's mix.
* **Mann-Whitney U**, one-sided (recent lower), on those residuals: throughput is skewed
  and has heavy tails (a congested afternoon), which a rank test shrugs off, and its
  exact null distribution holds for three recent runs, where Welch's t on three values
  would lean on a normality nobody can check.  Exact p (no ties: the Gaussian-binomial
  generating function, lower tail), else the normal approximation with tie and
  continuity corrections (as scipy.stats.mannwhitneyu, which the tests compare with).
* **Effect size**: the Hodges-Lehmann shift of the residuals (the median of every
  recent-minus-baseline difference) as a ratio, exp(shift): under the shift model it is
  the recent median over the baseline median at the same time of day.  Its confidence
  interval is the exact distribution-free one that inverts the same U test (the
  differences' order statistics at U's critical values), so the CI and the p-value
  never contradict each other.
* **False discovery rate** across the exporter's series: Benjamini-Hochberg q-values
  over every tested series' current p-value (`judge`).  A series is **regressed** when
  its q <= `fdr` and its ratio <= 1 - `material_drop`: significant and large enough to
  matter.

Pure: numpy only (a core dependency already), no scipy on the live path.
"""

from __future__ import annotations

import math
import statistics
import zoneinfo
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    from bigbinf.config import Config

DAY = 86400.0
WEEK = 7 * DAY
BIN_SECONDS = 900.0  # time-of-day medians in 15-minute bins
BINS = int(DAY // BIN_SECONDS)


@dataclass(frozen=True)
class RegressionSettings:
    """The test's parameters (config `regression:`, docs/configuration.md)."""

    recent_runs: int = 3
    baseline_weeks: float = 4.0
    time_of_day_window_seconds: float = 2 * 3600.0
    min_baseline_runs: int = 8  # per recent run, within its time-of-day window
    fdr: float = 0.002
    material_drop: float = 0.10
    confidence: float = 0.95
    timezone: str = "UTC"


# ---------------------------------------------------------------- statistics


def _lower_tail_counts(m: int, n: int, top: int) -> np.ndarray:
    """Number of arrangements with U = u for u = 0..top (no ties): the coefficients of
    the Gaussian binomial [m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i),
    truncated at degree `top`.  Floats: the lower tail is a sum of positive terms, and
    the subtractions only start past degree n, where the terms are of like size."""
    poly = np.zeros(top + 1)
    poly[0] = 1.0
    for i in range(1, m + 1):
        shift = n + i
        if shift <= top:
            poly[shift:] -= poly[: top + 1 - shift].copy()
        for r in range(min(i, top + 1)):  # divide by (1 - q^i): a cumulative sum with stride i
            poly[r::i] = np.cumsum(poly[r::i])
    return poly


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _exact_cdf(m: int, n: int, top: int) -> np.ndarray:
    """P(U <= u) for u = 0..top under H0, exactly (no ties)."""
    counts = _lower_tail_counts(m, n, top)
    return np.cumsum(counts) / math.exp(_log_comb(m + n, m))


def _normal_sd(x: np.ndarray, y: np.ndarray) -> float:
    m, n = len(x), len(y)
    combined = np.concatenate([x, y])
    _, tie_counts = np.unique(combined, return_counts=True)
    total = m + n
    tie_term = float(np.sum(tie_counts**3 - tie_counts)) / (total * (total - 1))
    return math.sqrt(m * n / 12.0 * ((total + 1) - tie_term))


def _norm_cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _u_statistic(x: np.ndarray, y: np.ndarray) -> float:
    """#{(i, j): x_i > y_j} + half the ties (scipy's U1 of x)."""
    ys = np.sort(y)
    below = np.searchsorted(ys, x, side="left")
    not_above = np.searchsorted(ys, x, side="right")
    return float(np.sum(below) + 0.5 * np.sum(not_above - below))


def mann_whitney_less(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """One-sided p-value of the Mann-Whitney U test that x is stochastically smaller than
    y: exact without ties, else the normal approximation with tie and continuity
    corrections (scipy.stats.mannwhitneyu(x, y, alternative="less") with method "exact",
    resp. "asymptotic")."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    m, n = len(xa), len(ya)
    if m == 0 or n == 0:
        raise ValueError("both samples need at least one value")
    u = _u_statistic(xa, ya)
    if len(np.unique(np.concatenate([xa, ya]))) == m + n:
        ui = round(u)
        half = (m * n) // 2
        if ui <= half:
            return float(min(1.0, _exact_cdf(m, n, ui)[ui]))
        # Symmetry: P(U <= u) = 1 - P(U <= mn - u - 1).
        rest = m * n - ui - 1
        return float(max(0.0, 1.0 - _exact_cdf(m, n, rest)[rest])) if rest >= 0 else 1.0
    sd = _normal_sd(xa, ya)
    if sd == 0:
        return 1.0
    z = (u - m * n / 2.0 + 0.5) / sd  # continuity correction towards the mean
    return _norm_cdf(z)


def _critical_count(m: int, n: int, alpha_half: float, exact: bool, sd: float) -> int:
    """The largest c with P(U <= c - 1) <= alpha_half (at least 1): the rank of the
    lower confidence bound among the sorted differences."""
    if exact:
        cdf = _exact_cdf(m, n, (m * n) // 2)
        below = int(np.searchsorted(cdf, alpha_half, side="right"))  # P(U <= c-1) <= a for c <= below
        return max(1, below)
    z = statistics.NormalDist().inv_cdf(1 - alpha_half)
    return max(1, math.floor(m * n / 2.0 - z * sd))


def hodges_lehmann(
    x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(shift, lower, upper): the median of every x_i - y_j and the distribution-free
    confidence interval that inverts the two-sided U test at `confidence` (Bauer 1972):
    the differences' order statistics at U's critical values."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    m, n = len(xa), len(ya)
    diffs = np.sort((xa[:, None] - ya[None, :]).ravel())
    shift = float(np.median(diffs))
    exact = len(np.unique(np.concatenate([xa, ya]))) == m + n
    c = _critical_count(m, n, (1 - confidence) / 2, exact, 0.0 if exact else _normal_sd(xa, ya))
    c = min(c, (m * n + 1) // 2)
    return shift, float(diffs[c - 1]), float(diffs[m * n - c])


def bh_qvalues(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the order given
    (scipy.stats.false_discovery_control(p, method="bh"))."""
    k = len(pvalues)
    if k == 0:
        return []
    order = sorted(range(k), key=lambda i: pvalues[i])
    q = [0.0] * k
    running = 1.0
    for rank in range(k, 0, -1):
        i = order[rank - 1]
        running = min(running, pvalues[i] * k / rank)
        q[i] = running
    return q


# ---------------------------------------------------------------- one series


@dataclass(frozen=True)
class Point:
    """One ok run of a series: when it started, its time of day (local seconds since
    midnight) and its log throughput."""

    timestamp: float
    time_of_day: float
    log_throughput: float


def time_of_day(timestamp: float, zone: zoneinfo.ZoneInfo) -> float:
    local = datetime.fromtimestamp(timestamp, zone)
    return local.hour * 3600.0 + local.minute * 60.0 + local.second + local.microsecond / 1e6


def point(timestamp: float, throughput: float, zone: zoneinfo.ZoneInfo) -> Point:
    return Point(timestamp, time_of_day(timestamp, zone), math.log(throughput))


@dataclass(frozen=True)
class Tested:
    """A tested series: the effect size with its interval, the p-value, and what it used."""

    __test__ = False  # not a pytest class, whatever its name

    ratio: float  # recent median / baseline median at the same time of day (Hodges-Lehmann)
    ratio_lower: float
    ratio_upper: float
    p_value: float
    recent_runs: int
    baseline_runs: int
    at: float  # start time of the latest recent run


@dataclass(frozen=True)
class Untested:
    """Why a series has no test yet (too young, or too few runs at some time of day)."""

    reason: str


def _circular_distance(a: np.ndarray, b: float) -> np.ndarray:
    d = np.abs(a - b) % DAY
    return np.minimum(d, DAY - d)


def examine(points: Sequence[Point], settings: RegressionSettings) -> Tested | Untested:
    """The test of one series from its ok runs (any order; only the last
    baseline_weeks + the recent ones matter)."""
    k = settings.recent_runs
    ordered = sorted(points, key=lambda p: p.timestamp)
    if len(ordered) < k + 1:
        return Untested(f"{len(ordered)} ok runs; the test needs {k} recent runs and a baseline")
    recent = ordered[-k:]
    first = recent[0].timestamp
    since = first - settings.baseline_weeks * WEEK
    base = [p for p in ordered[:-k] if since <= p.timestamp < first]
    if not base:
        return Untested(f"no ok run in the {settings.baseline_weeks:g} weeks before the recent {k}")
    base_tod = np.array([p.time_of_day for p in base])
    base_log = np.array([p.log_throughput for p in base])
    window = settings.time_of_day_window_seconds
    # The baseline median of each 15-minute bin's window: every run's expected level.
    centres = (np.arange(BINS) + 0.5) * BIN_SECONDS
    medians = np.full(BINS, np.nan)
    in_window = np.zeros(len(base), dtype=bool)
    for p in recent:
        near = _circular_distance(base_tod, p.time_of_day) <= window
        if int(near.sum()) < settings.min_baseline_runs:
            clock = f"{int(p.time_of_day // 3600):02d}:{int(p.time_of_day % 3600 // 60):02d}"
            return Untested(
                f"{int(near.sum())} baseline runs within {window / 3600:g} h of {clock} (the time of day of a "
                f"recent run); the test needs {settings.min_baseline_runs}"
            )
        in_window |= near
    needed = {int(t // BIN_SECONDS) % BINS for t in [*base_tod[in_window], *(p.time_of_day for p in recent)]}
    for b in needed:
        near = _circular_distance(base_tod, float(centres[b])) <= window
        if near.any():
            medians[b] = np.median(base_log[near])

    def residuals(tods: np.ndarray, logs: np.ndarray) -> np.ndarray:
        expected: np.ndarray = medians[(tods // BIN_SECONDS).astype(int) % BINS]
        out: np.ndarray = logs - expected
        return out

    recent_res = residuals(np.array([p.time_of_day for p in recent]), np.array([p.log_throughput for p in recent]))
    base_res = residuals(base_tod[in_window], base_log[in_window])
    keep = ~np.isnan(base_res)
    base_res = base_res[keep]
    if np.isnan(recent_res).any() or len(base_res) < settings.min_baseline_runs:
        return Untested("too few baseline runs at the recent runs' times of day")
    p_value = mann_whitney_less(recent_res, base_res)
    shift, lower, upper = hodges_lehmann(recent_res, base_res, settings.confidence)
    return Tested(
        ratio=math.exp(shift),
        ratio_lower=math.exp(lower),
        ratio_upper=math.exp(upper),
        p_value=p_value,
        recent_runs=len(recent),
        baseline_runs=len(base_res),
        at=recent[-1].timestamp,
    )


# ---------------------------------------------------------------- across series

K = TypeVar("K")


@dataclass(frozen=True)
class Verdict:
    """A tested series' test with its q-value and the decision."""

    test: Tested
    q_value: float
    regressed: bool


def judge(tests: Mapping[K, Tested], settings: RegressionSettings) -> dict[K, Verdict]:
    """Benjamini-Hochberg across every tested series, then the decision per series."""
    keys = list(tests)
    qs = bh_qvalues([tests[key].p_value for key in keys])
    return {
        key: Verdict(
            tests[key],
            q,
            q <= settings.fdr and tests[key].ratio <= 1.0 - settings.material_drop,
        )
        for key, q in zip(keys, qs, strict=True)
    }


def trim(points: Iterable[Point], settings: RegressionSettings, latest: float) -> list[Point]:
    """The points a later test can still use: the last recent_runs, and the baseline
    weeks before them (kept with a day's margin)."""
    ordered = sorted(points, key=lambda p: p.timestamp)
    if len(ordered) <= settings.recent_runs:
        return ordered
    first_recent = ordered[-settings.recent_runs].timestamp
    since = min(first_recent, latest) - settings.baseline_weeks * WEEK - DAY
    return [p for p in ordered if p.timestamp >= since]


def settings_of(config: Config) -> RegressionSettings:
    """The test's parameters from a configuration (its regression section and the
    schedule's time zone, in which times of day are local)."""
    r = config.regression
    return RegressionSettings(
        recent_runs=r.recent_runs,
        baseline_weeks=r.baseline_weeks,
        time_of_day_window_seconds=r.time_of_day_window,
        min_baseline_runs=r.min_baseline_runs,
        fdr=r.fdr,
        material_drop=r.material_drop,
        confidence=r.confidence,
        timezone=config.schedule.timezone,
    )


class History:
    """The ok runs of many series that later tests can still use, and each series' last
    test: what the exporter keeps (service/regressions.py) and what `backfill` walks
    through the journal with.  Not thread-safe: its owner locks."""

    def __init__(self, settings: RegressionSettings) -> None:
        self.settings = settings
        self.zone = zoneinfo.ZoneInfo(settings.timezone)
        self.points: dict[Any, list[Point]] = {}
        self.tests: dict[Any, Tested] = {}
        self.untested: dict[Any, str] = {}

    def add(self, key: Any, timestamp: float, throughput: float) -> bool:
        """An ok run of series `key`; True when it changed the series' test (a run that
        predates the series' latest changes its baseline, so it is tested again too)."""
        if not (throughput > 0 and math.isfinite(throughput)):
            return False
        points = self.points.setdefault(key, [])
        points.append(point(timestamp, throughput, self.zone))
        if len(points) > 1 and points[-2].timestamp > timestamp:
            points.sort(key=lambda p: p.timestamp)
        self.points[key] = trim(points, self.settings, points[-1].timestamp)
        self.retest(key)
        return True

    def retest(self, key: Any) -> None:
        outcome = examine(self.points.get(key, []), self.settings)
        if isinstance(outcome, Tested):
            self.tests[key] = outcome
            self.untested.pop(key, None)
        else:
            self.tests.pop(key, None)
            self.untested[key] = outcome.reason

    def keep(self, keys: Iterable[Any]) -> None:
        """Forget every series but these (a reload that removed some)."""
        wanted = set(keys)
        for table in (self.points, self.tests, self.untested):
            for key in [k for k in table if k not in wanted]:
                del table[key]

    def verdicts(self) -> dict[Any, Verdict]:
        return judge(self.tests, self.settings)
