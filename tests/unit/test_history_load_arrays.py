"""History.load and future_dated as arrays (a later start loads some 4,000 runs a series:
issue 44's later start at 1 M results) give what the tuples' way gave, bit for bit: the
old code kept here as the reference, on runs with ties, zeros, NaN, inf, future dates
and repetitions."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from bigbinf.history.regression import (
    FUTURE_SLACK,
    History,
    RegressionSettings,
    future_dated,
    observations,
    times_of_day,
)


def future_dated_reference(starts: list[float], now: float) -> list[bool]:
    out = [False] * len(starts)
    later = math.inf
    for i in range(len(starts) - 1, -1, -1):
        out[i] = starts[i] > min(later, now) + FUTURE_SLACK
        later = min(later, starts[i])
    return out


def load_reference(history: History, key: str, runs: list[tuple[float, float]]) -> None:
    kept = sorted((t, math.log(x)) for t, x in runs if x > 0 and math.isfinite(x))
    if kept:
        history.latest[key] = max(history.latest.get(key, -math.inf), kept[-1][0])
    kept = observations(kept, history.settings.repetitions, history.round_gap)
    if not kept:
        return
    ts = np.array([t for t, _ in kept])
    tod = times_of_day(ts, history.zone)
    logs = np.array([v for _, v in kept])
    history.runs[key] = history._trimmed(key, ts, tod, logs)


def runs_of(rng: random.Random, n: int) -> list[tuple[float, float]]:
    t0 = 1_760_000_000.0
    out = []
    for _ in range(n):
        t = t0 + rng.choice([rng.uniform(0, 90 * 86400), float(rng.randrange(0, 90)) * 86400])  # ties too
        x = rng.choice([rng.lognormvariate(18, 0.3), 2.0e8, 0.0, -1.0, math.nan, math.inf])
        out.append((t, x))
    return out


@pytest.mark.parametrize("repetitions", [1, 3])
@pytest.mark.parametrize("seed", range(6))
def test_load_as_arrays_is_the_tuples_load(seed: int, repetitions: int) -> None:
    rng = random.Random(seed)
    settings = RegressionSettings(repetitions=repetitions, timezone=rng.choice(["UTC", "Europe/Berlin"]))
    new, old = History(settings), History(settings)
    for key in ("a", "b"):
        for part in range(2):  # a second load of a series: latest kept as the larger
            runs = runs_of(rng, rng.choice([0, 1, 5, 400, 3000]))
            new.load(key, runs if part else np.array(runs).reshape(-1, 2))
            load_reference(old, key, runs)
    assert new.latest == old.latest
    assert new.runs.keys() == old.runs.keys()
    for key, arrays in old.runs.items():
        for got, want in zip(new.runs[key], arrays, strict=True):
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


def test_future_dated_as_arrays_is_the_loop() -> None:
    rng = random.Random(7)
    now = 1_760_000_000.0
    for _ in range(500):
        starts = [now + rng.choice([-1e5, 0.0, FUTURE_SLACK, FUTURE_SLACK + 1, 2e5]) * rng.random() for _ in
                  range(rng.randrange(0, 40))]  # fmt: skip
        assert future_dated(starts, now) == future_dated_reference(starts, now)
    assert any(future_dated([now + 2 * FUTURE_SLACK, now], now))  # the test sees a future-dated run
