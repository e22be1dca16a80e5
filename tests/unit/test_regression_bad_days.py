"""Whole bad days (issue 45 B1): a steady series with a bad day now and then (all its
rounds at 0.6x, a day in about 9) is unchanged, and a bad day like those its baseline
holds must not page, on a one-series exporter as on a large one; a drop of the whole
series must still open, and the first bad day of a series that never had one is news
that fires while it lasts and is silent after (bigbinf/history/regression.py,
`bad_days_p`)."""

from __future__ import annotations

import math
import zoneinfo

import numpy as np

from bigbinf.history.regression import (
    BAD_DAY_ALPHA,
    DAY,
    History,
    RegressionSettings,
    bad_days_p,
    day_keys,
    times_of_day,
)

START = 1_760_000_000.0 - 1_760_000_000.0 % DAY  # a UTC midnight
HOURS = (3.0, 9.0, 15.0, 21.0)
# A day in about 9 bad, in the warm-up too, so that every baseline holds some.
BAD = {5, 14, 22, 31, 36, 45, 53, 60, 71, 79, 88}


def _series(
    days: int, seed: int, bad: set[int], drop_at: float = math.inf, drop: float = 1.0
) -> list[tuple[float, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for d in range(days):
        for h in HOURS:
            t = START + d * DAY + h * 3600
            x = 25e6 * (0.6 if d in bad else 1.0) * (drop if t >= drop_at else 1.0)
            out.append((t, x * math.exp(rng.normal(0, 0.03))))
    return out


def _walk(series: list[list[tuple[float, float]]]) -> tuple[History, list[list[bool]]]:
    """The exporter's series adding their runs round by round; each one's alert after each."""
    history = History(RegressionSettings(rounds_per_day=len(HOURS)))
    fired: list[list[bool]] = [[] for _ in series]
    for i in range(len(series[0])):
        for j, runs in enumerate(series):
            history.add(j, *runs[i])
            track = history.tracks.get(j)
            fired[j].append(bool(track and track.episode is not None))
    return history, fired


def _openings(fired: list[bool], from_round: int = 0) -> list[int]:
    return [i for i in range(max(1, from_round), len(fired)) if fired[i] and not fired[i - 1]]


def test_bad_days_like_the_baselines_page_on_no_exporter() -> None:
    """Bad days like those the baseline holds open nothing after the warm-up, with one
    series per exporter and with 6 (each its own noise).  Before the gate, three runs of
    such a day lay below all but the bad days' runs of the baseline and about half of the
    bad days paged (86 of 132 in bench_regression --breaks bad-days)."""
    warm = 35 * len(HOURS)
    for seed in range(3):
        _, fired = _walk([_series(91, seed, BAD)])
        assert not _openings(fired[0], warm), seed
    _, fired = _walk([_series(91, 10 + j, BAD) for j in range(6)])
    assert not [j for j, f in enumerate(fired) if _openings(f, warm)]


def test_a_drop_of_the_whole_series_still_opens_beside_bad_days() -> None:
    """A 30% drop of such a series (shallower than its bad days: by depth alone a bad
    day) opens once it has lasted longer than bad days do, within 5 days; a 50% drop,
    materially deeper than every bad day, is news and opens on its 3rd slow run."""
    drop_at = START + 56 * DAY + 9 * 3600
    first = int(np.searchsorted([t for t, _ in _series(70, 0, BAD)], drop_at))
    for seed in range(3):
        _, fired = _walk([_series(70, seed, BAD, drop_at, 0.7)])
        opened = _openings(fired[0], first)
        assert opened and opened[0] - first + 1 <= 5 * len(HOURS), (seed, opened)
        assert all(fired[0][opened[0] :]), seed  # firing while it lasts
        _, fired = _walk([_series(70, seed, BAD, drop_at, 0.5)])
        assert _openings(fired[0], first)[:1] == [first + 2], seed


def test_the_first_bad_day_is_news_that_fires_while_it_lasts() -> None:
    """A series that never had a bad day: its first one opens within the day and closes
    within 2 runs of the day's end; a bad day 10 days later, like the one that paged
    (whose regression recovered within BAD_DAY_SPAN: a bad day of the baseline's), opens
    nothing.  Left out of the baseline as a recovered regression, the paged day left the
    next one looking new, and it paged too (these seeds: the first recovered, not
    dismissed, whose runs go back to the baseline anyway)."""
    first, second = 40, 50
    day_start = first * len(HOURS)
    for seed in (0, 2, 5, 7):
        history, fired = _walk([_series(56, seed, {first, second})])
        assert [e.kind for e in history.events] == ["opened", "recovered"], seed
        opened = _openings(fired[0], 35 * len(HOURS))
        assert len(opened) == 1 and day_start < opened[0] < day_start + len(HOURS), (seed, opened)
        assert not any(fired[0][day_start + len(HOURS) + 2 :]), seed


def test_bad_days_p_counts_the_baselines_days_as_low() -> None:
    """m baseline days of n at or below the drop's highest day (within the margin), d
    days of the drop: C(m + d, d) / C(n + d, d); 0 where the baseline holds no bad day
    or the drop is materially deeper than all it holds."""
    settings = RegressionSettings(rounds_per_day=len(HOURS))
    rng = np.random.default_rng(5)

    def arrays(bad: set[int], drop: float, days: int = 30) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        runs = _series(days, 0, bad, START + 28 * DAY, drop)
        ts = np.array([t for t, _ in runs])
        logs = np.log([x for _, x in runs]) + rng.normal(0, 0.001, len(runs))
        return ts, times_of_day(ts, zoneinfo.ZoneInfo("UTC")), logs

    since = START + 28 * DAY
    ts, tod, logs = arrays({3, 11, 19}, 0.7)
    keep = ts < since
    n = len(np.unique(day_keys(ts[keep], tod[keep])))
    assert n == 28
    # Two days of a 30% drop (8 runs) against 3 bad days in 28.
    assert math.isclose(bad_days_p(ts, tod, logs, keep, since, settings), math.comb(5, 2) / math.comb(30, 2))
    assert bad_days_p(ts, tod, logs, keep, since, settings) > BAD_DAY_ALPHA
    ts, tod, logs = arrays(set(), 0.7)
    assert bad_days_p(ts, tod, logs, keep, since, settings) == 0.0  # no bad day: not gated
    ts, tod, logs = arrays({3, 11, 19}, 0.4)
    assert bad_days_p(ts, tod, logs, keep, since, settings) == 0.0  # deeper than every bad day
