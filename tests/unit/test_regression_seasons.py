"""The day gate and the week (issue 45, breaker's breaks of the day gate): a level that
changes for good is no day-to-day noise, and a weekday that runs slower every week is
the series' weekly pattern, learnt, not paged on; real drops still open
(bigbinf/history/regression.py: day_spread's level change and weekday terms, and
`weekly_ratio`)."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np

from bigbinf.history.regression import History, RegressionSettings

DAY = 86400.0
START = 1_760_000_000.0 - 1_760_000_000.0 % DAY  # a UTC midnight (a Thursday)
HOURS = (3.0, 9.0, 15.0, 21.0)


def _weekday(t: float) -> int:
    return dt.datetime.fromtimestamp(t, dt.UTC).weekday()  # Monday 0


def _series(days: int, rng: np.random.Generator, level, noise: float = 0.03) -> list[tuple[float, float]]:
    """Runs at HOURS each day, `level(t)` B/s with log-normal noise `noise`."""
    out = []
    for d in range(days):
        for h in HOURS:
            t = START + d * DAY + h * 3600
            out.append((t, level(t) * math.exp(rng.normal(0, noise))))
    return out


def _opened_on(history: History, key: str, series: list[tuple[float, float]], after: float) -> list[int]:
    """The runs (1 = the first at or after `after`) on which a regression of `key` opened."""
    opened, was, n = [], False, 0
    for t, x in series:
        history.add(key, t, x)
        track = history.tracks.get(key)
        now = bool(track and track.episode is not None)
        if t >= after:
            n += 1
            if now and not was:
                opened.append(n)
        was = now
    return opened


def test_a_drop_after_a_step_up_opens() -> None:
    """A quiet series (3% a run) steps up 1.2x at day 21 (a faster path: good news), then
    drops 30% at day 35: the baseline's days span two levels, and the day gate must not
    count the step as day-to-day noise; it opens by its 4th slow run, as the run-level
    test did before the gate, on every seed."""
    drop_at = START + 35 * DAY
    for seed in range(6):
        rng = np.random.default_rng(seed)

        def level(t: float) -> float:
            x = 25e6 * (1.2 if t >= START + 21 * DAY else 1.0)
            return x * (0.7 if t >= drop_at else 1.0)

        history = History(RegressionSettings(rounds_per_day=len(HOURS)))
        opened = _opened_on(history, "s", _series(39, rng, level), drop_at)
        assert opened and opened[0] <= 4, (seed, opened)
        assert not [e for e in history.events if e.since < drop_at], seed  # the step up opened nothing


def _mondays(factor: float = 0.8, monday_after: float = math.inf, monday_then: float = 0.8):
    def level(t: float) -> float:
        if _weekday(t) == 0:
            return 25e6 * (monday_then if t >= monday_after else factor)
        return 25e6

    return level


def test_a_weekly_cycle_is_learnt_not_paged_on() -> None:
    """A quiet series whose Mondays run at 0.8x every week: once its baseline holds the
    weeks that show it, no Monday opens (before: one in seven series opened every week)."""
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        history = History(RegressionSettings(rounds_per_day=len(HOURS)))
        after = START + 35 * DAY
        assert _opened_on(history, "s", _series(91, rng, _mondays()), after) == [], seed


def test_a_weekly_cycle_series_still_opens_on_a_drop_of_the_whole_series_or_of_its_monday() -> None:
    """The same series: a 30% drop of the whole series on a Wednesday opens by its 3rd slow
    run; its Mondays dropping from 0.8x to 0.5x open on that Monday by its 3rd run."""
    wednesday = START + 55 * DAY  # 2025-12-03, a Wednesday
    assert _weekday(wednesday) == 2
    for seed in range(4):
        rng = np.random.default_rng(200 + seed)

        def whole(t: float) -> float:
            return _mondays()(t) * (0.7 if t >= wednesday else 1.0)

        history = History(RegressionSettings(rounds_per_day=len(HOURS)))
        opened = _opened_on(history, "s", _series(60, rng, whole), wednesday)
        assert opened and opened[0] <= 3, (seed, opened)
        monday = START + 53 * DAY  # 2025-12-01, a Monday
        assert _weekday(monday) == 0
        history = History(RegressionSettings(rounds_per_day=len(HOURS)))
        opened = _opened_on(history, "s", _series(56, rng, _mondays(monday_after=monday, monday_then=0.5)), monday)
        assert opened and opened[0] <= 3, (seed, opened)
