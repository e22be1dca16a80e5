"""History.verdicts() builds again only the series whose test or track changed and those
whose q-value moved (issue 45: rebuilt for every series on every result, a round cost
O(series^2)).  The published verdicts must be those of the full rebuild it replaced, bit
for bit: `full_verdicts` below is that code, run on the same History after every run, accept,
accept taken from another process, forgetting of series and restore, and the vectorised
Benjamini-Hochberg step is checked against `bh_qvalues` itself."""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import pytest

from bigbinf.history.regression import (
    ACCEPTED,
    DAY,
    OPENED,
    Event,
    History,
    RegressionSettings,
    Track,
    Verdict,
    bh_qvalues,
    bh_qvalues_array,
    judge,
)

START = 1_760_000_000.0 - 1_760_000_000.0 % DAY  # a UTC midnight
HOURS = (3.0, 9.0, 13.0, 19.0)


def full_verdicts(history: History) -> dict[Any, Verdict]:
    """History.verdicts() as it was before the cache: every series rebuilt, judge()'s q-values."""
    judged = judge(history.tests, history.settings)
    out: dict[Any, Verdict] = {}
    for key in set(history.tests) | set(history.tracks):
        track = history.tracks.get(key, Track())
        test = history.tests.get(key)
        q = judged[key].q_value if key in judged else math.nan
        episode = track.episode
        if episode is None and test is None and track.accepted_at is None and track.suspect is None:
            continue
        out[key] = Verdict(
            test,
            q,
            episode is not None,
            since=episode.since if episode else None,
            level_before=episode.level_before if episode else None,
            accepted_at=track.accepted_at,
            suspected=bool(
                episode is None
                and (
                    track.suspect is not None
                    or (test is not None and test.ratio <= 1.0 - history.settings.material_drop)
                )
            ),
        )
    return out


def bits(x: float | None) -> bytes | None:
    return None if x is None else struct.pack("<d", x)


def assert_same(got: dict[Any, Verdict], want: dict[Any, Verdict]) -> None:
    """Equal bit for bit: the same series, the same test objects, the same floats' bits."""
    assert set(got) == set(want)
    for key, w in want.items():
        g = got[key]
        assert g.test is w.test, key
        assert bits(g.q_value) == bits(w.q_value), (key, g.q_value, w.q_value)
        assert (g.regressed, g.suspected, g.change) == (w.regressed, w.suspected, w.change), key
        for name in ("since", "level_before", "accepted_at"):
            assert bits(getattr(g, name)) == bits(getattr(w, name)), (key, name)


def schedule(rng: np.random.Generator, days: int) -> list[tuple[float, str, float]]:
    """Runs of 10 series in time order: quiet and noisy unchanged ones, a 30% drop that opens
    at once and recovers, a 15% one that is suspected for a while, a 40% drop that stays (to
    be accepted), one with too few runs to test, and two that drop together on day 36."""
    level = 25e6
    out = []
    for day in range(days):
        for hour in HOURS:
            t = START + day * DAY + hour * 3600
            for key, noise, factor in (
                ("quiet", 0.03, 1.0),
                ("noisy", 0.12, 1.0),
                ("noisy2", 0.12, 1.0),
                ("drop30", 0.03, 0.7 if 33 <= day < 38 else 1.0),
                ("drop15", 0.05, 0.85 if day >= 34 else 1.0),
                ("stays", 0.03, 0.6 if day >= 32 else 1.0),
                ("cut-a", 0.03, 0.75 if day >= 36 else 1.0),
                ("cut-b", 0.03, 0.75 if day >= 36 else 1.0),
                ("late", 0.03, 1.0),
            ):
                if key == "late" and day < days - 2:
                    continue  # too few runs to test: never in the Benjamini-Hochberg family
                out.append((t + rng.uniform(0, 60), key, level * factor * math.exp(rng.normal(0, noise))))
    out.sort()
    return out


@pytest.mark.parametrize("repetitions", [1, 2])
def test_the_cached_verdicts_are_the_full_rebuilds_bit_for_bit_after_every_change(repetitions: int) -> None:
    rng = np.random.default_rng(45 + repetitions)
    settings = RegressionSettings(repetitions=repetitions, rounds_per_day=4.0)
    history = History(settings)
    mirror = History(settings)  # fed the same runs, takes history's accept as `regression accept` journaled it
    untouched = History(settings)  # fed the same runs, never asked for its verdicts
    runs = schedule(rng, 42)
    if repetitions > 1:  # each run twice, back to back (a round's repetitions)
        runs = sorted([*runs, *((t + 30.0, k, x * 1.01) for t, k, x in runs)])
    kinds: set[str] = set()
    checks = 0
    accepted = False
    for n, (t, key, x) in enumerate(runs):
        for h in (history, mirror, untouched):
            h.add(key, t, x)
        kinds |= {e.kind for e in history.events}
        history.events.clear()
        mirror.events.clear()
        if n % 3 == 0 or key in ("drop30", "stays"):  # also several changes between two calls
            assert_same(history.verdicts(), full_verdicts(history))
            assert_same(mirror.verdicts(), full_verdicts(mirror))
            checks += 1
        track = history.tracks.get("stays")
        if not accepted and track is not None and track.episode is not None and t > START + 35 * DAY:
            event = history.accept("stays", t + 1.0)
            assert event is not None and event.kind == ACCEPTED
            assert_same(history.verdicts(), full_verdicts(history))
            assert "stays" not in mirror.verdicts() or mirror.verdicts()["stays"].regressed
            assert mirror.take(event) and untouched.take(event)
            assert_same(mirror.verdicts(), full_verdicts(mirror))
            assert mirror.verdicts()["stays"].accepted_at == t + 1.0
            accepted = True
    assert accepted and OPENED in kinds, kinds  # the paths the cache must follow were taken
    assert checks > 500
    assert {k for k, v in history.verdicts().items() if v.test is not None and not math.isnan(v.q_value)} >= {
        "quiet",
        "cut-a",
    }

    # The same states and events whether verdicts() was asked for or not.
    for key in untouched.tracks:
        a, b = untouched.tracks[key], mirror.tracks.get(key, Track())
        assert (a.episode, a.suspect, a.excluded) == (b.episode, b.suspect, b.excluded), key
    assert set(untouched.tests) == set(mirror.tests)
    for key, test in untouched.tests.items():
        assert bits(test.p_value) == bits(mirror.tests[key].p_value)
        assert bits(test.ratio) == bits(mirror.tests[key].ratio)

    # A reload that removes series, then runs again.
    history.keep(["quiet", "drop30", "late"])
    assert_same(history.verdicts(), full_verdicts(history))
    assert set(history.verdicts()) <= {"quiet", "drop30", "late"}
    t = runs[-1][0]
    for i in range(8):
        history.add("quiet", t + (i + 1) * DAY / 4, 25e6 * (0.6 if i >= 4 else 1.0))
        assert_same(history.verdicts(), full_verdicts(history))


def test_a_restored_history_and_a_series_whose_test_went_away_are_rebuilt() -> None:
    rng = np.random.default_rng(451)
    settings = RegressionSettings(rounds_per_day=4.0)
    history = History(settings)
    for t, key, x in schedule(rng, 36):
        history.add(key, t, x)
        history.events.clear()
    first = history.verdicts()
    assert_same(first, full_verdicts(history))
    # Events restored onto a History after its first verdicts (a track with no test: the
    # series' runs are gone), and a series whose test is dropped (no run left).
    history.restore([Event(OPENED, "gone", START + 30 * DAY, START + 29 * DAY, 2e7)])
    assert_same(history.verdicts(), full_verdicts(history))
    assert history.verdicts()["gone"].regressed and history.verdicts()["gone"].test is None
    del history.runs["quiet"]
    history.retest("quiet")
    assert "quiet" not in history.tests
    assert_same(history.verdicts(), full_verdicts(history))
    # A series changed from outside History's methods says so (history/judged.py restore_carried).
    history.tracks.setdefault("noisy", Track()).suspect = START + 35 * DAY
    history.touched("noisy")
    assert history.verdicts()["noisy"].suspected
    assert_same(history.verdicts(), full_verdicts(history))


def test_a_stale_cache_is_caught_by_the_comparison() -> None:
    """The comparison can fail: a track changed without `touched` is published stale."""
    rng = np.random.default_rng(452)
    history = History(RegressionSettings(rounds_per_day=4.0))
    for t, key, x in schedule(rng, 30):
        history.add(key, t, x)
    history.verdicts()
    history.tracks.setdefault("quiet", Track()).suspect = START + 29 * DAY
    with pytest.raises(AssertionError):
        assert_same(history.verdicts(), full_verdicts(history))


@pytest.mark.parametrize("size", [0, 1, 2, 3, 7, 40, 1000])
def test_the_vectorised_benjamini_hochberg_step_is_bh_qvalues_bit_for_bit(size: int) -> None:
    rng = np.random.default_rng(size)
    for trial in range(30):
        ps = rng.uniform(0, 1, size) ** rng.uniform(0.2, 8)
        if size and trial % 3 == 0:  # ties, exact zeros and ones
            ps = np.round(ps, 2)
            ps[rng.integers(0, size, max(1, size // 5))] = 0.0
            ps[rng.integers(0, size, max(1, size // 5))] = 1.0
        want = bh_qvalues(ps.tolist())
        got = bh_qvalues_array(ps).tolist()
        assert [bits(q) for q in got] == [bits(q) for q in want]
    if size:
        ps = rng.uniform(0, 1, size)
        ps[0] = math.nan  # a nan: bh_qvalues' own answer
        assert [bits(q) for q in bh_qvalues_array(ps).tolist()] == [bits(q) for q in bh_qvalues(ps.tolist())]
