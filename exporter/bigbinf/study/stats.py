"""The statistics of Table 1: means, standard deviations, Shapiro-Wilk and Welch's t-test.

scipy is the optional extra `report`: it is imported inside the functions that need it,
only when a report is built, so the exporter itself runs without it.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Sequence

NORMALITY_ALPHA = 0.05  # Shapiro-Wilk p below this: "not normal" (the t-test is then a rougher guide)
SHAPIRO_MIN_N = 3  # scipy.stats.shapiro needs at least 3 values


def mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def sd(values: Sequence[float]) -> float | None:
    return statistics.stdev(values) if len(values) >= 2 else None


def shapiro_p(values: Sequence[float]) -> float | None:
    """Shapiro-Wilk p-value, or None where the test does not apply (n < 3, all equal)."""
    from scipy import stats  # optional extra `report`

    if len(values) < SHAPIRO_MIN_N or max(values) == min(values):
        return None
    with warnings.catch_warnings():
        # scipy warns that p may be inaccurate for n > 5000; the report still shows it.
        warnings.simplefilter("ignore")
        return float(stats.shapiro(values).pvalue)


def welch(
    a: Sequence[float], b: Sequence[float], groups: str = "both in and outside the peak"
) -> tuple[float | None, float | None, float | None, str]:
    """Welch's t-test (unequal variances): (t, df, two-sided p, note); `groups` names the
    two groups in the note on too few values."""
    from scipy import stats  # optional extra `report`

    if len(a) < 2 or len(b) < 2:
        return None, None, None, f"t-test needs at least 2 transfers {groups}"
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return None, None, None, "t-test undefined: every speed in both groups is identical"
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    test = stats.ttest_ind(a, b, equal_var=False)
    return float(test.statistic), df, float(test.pvalue), ""


def normal_verdict(*ps: float | None) -> str:
    if any(p is None for p in ps):
        return "n/a"
    return "yes" if all(p >= NORMALITY_ALPHA for p in ps if p is not None) else "no"
