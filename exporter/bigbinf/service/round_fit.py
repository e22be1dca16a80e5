"""Does a round fit its schedule on this host?  An estimate from the journal, for
`--config.check` (issue 36: on a loaded host a round took two minutes, one a minute was
scheduled, every other round was skipped and nothing said why).

Per configured test: the longest of its last RECENT runs (any outcome but `skipped`: a
timeout takes its whole `transfer.timeout`, and the round waits for it), plus the set-up
between two transfers as this host's rounds show it (the median gap from one result's
end to the next result's start in the same round: the path probe, starting the capture,
the ssh session and the tool, analysing the capture), or SETUP_SECONDS where the
journal has no round of two.  Times `schedule.rounds`.  The measured rounds (first
start to last end of each recent round id) are said beside it.  Compared with the
schedule's shortest gap between two starts (service/schedule.py).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bigbinf.config import Config
from bigbinf.result import Result, SeriesKey

RECENT = 5  # runs per test (as a mesh slot is sized from its test's last 5: mesh/plan.py TYPICAL_OF)
RECENT_ROUNDS = 20  # rounds whose gaps between transfers give the set-up
# Set-up per transfer where the journal has none measured (mesh/plan.py SETUP_SECONDS:
# lab measurements 0.5-1.5 s, without analysis).
SETUP_SECONDS = 2.0


@dataclass(frozen=True)
class RoundEstimate:
    seconds: float  # the estimated round (every repetition), measured tests only
    setup_seconds: float  # per transfer
    setup_measured: bool  # from the journal's rounds, else SETUP_SECONDS
    per_test: dict[SeriesKey, float]  # the longest recent duration of each measured test
    unmeasured: list[SeriesKey] = field(default_factory=list)  # configured, no run in the journal
    measured_rounds: list[float] = field(default_factory=list)  # recent rounds' lengths, oldest first


def estimate(config: Config, keys: Sequence[SeriesKey], results: Iterable[Result]) -> RoundEstimate:
    """The estimate for a round of the tests `keys` (the configuration's plan), from the
    journal's `results` (oldest first, as the journal reads)."""
    wanted = set(keys)
    recent: dict[SeriesKey, list[float]] = defaultdict(list)
    rounds: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in results:
        if r.source != "exporter" or r.outcome == "skipped":
            continue
        if r.key in wanted:
            recent[r.key] = [*recent[r.key][-(RECENT - 1) :], r.duration_seconds]
        if r.round_id:
            rounds[r.round_id].append((r.start_timestamp, r.start_timestamp + r.duration_seconds))
    latest = sorted(rounds.values(), key=lambda runs: min(runs))[-RECENT_ROUNDS:]
    gaps = []
    for runs in latest:
        ordered = sorted(runs)
        gaps += [max(0.0, nxt[0] - prev[1]) for prev, nxt in itertools.pairwise(ordered)]
    setup = statistics.median(gaps) if gaps else SETUP_SECONDS
    per_test = {key: max(recent[key]) for key in keys if recent.get(key)}
    seconds = config.schedule.rounds * sum(d + setup for d in per_test.values())
    measured = [max(end for _, end in runs) - min(start for start, _ in runs) for runs in latest[-RECENT:]]
    return RoundEstimate(
        seconds=seconds,
        setup_seconds=setup,
        setup_measured=bool(gaps),
        per_test=per_test,
        unmeasured=[key for key in keys if key not in per_test],
        measured_rounds=measured,
    )


def _s(seconds: float) -> str:
    return f"{seconds:.1f}" if seconds < 10 else f"{seconds:.0f}"


def fit_warning(estimate: RoundEstimate, gap: float, what: str) -> str | None:
    """The warning --config.check prints when the estimate (or a measured round) is longer
    than `gap`, the schedule's shortest gap between two starts; None if it fits."""
    longest_measured = max(estimate.measured_rounds, default=0.0)
    if max(estimate.seconds, longest_measured) <= gap:
        return None
    slowest = sorted(estimate.per_test.items(), key=lambda item: -item[1])[:3]
    tests = ", ".join(f"{k.protocol}/{k.remote}/{k.dataset}/{k.direction} {_s(d)} s" for k, d in slowest)
    setup = f"{estimate.setup_seconds:.1f} s set-up each ({'measured' if estimate.setup_measured else 'assumed'})"
    lengths = ", ".join(_s(s) for s in estimate.measured_rounds)
    measured = f"; the last {len(estimate.measured_rounds)} rounds took {lengths} s" if lengths else ""
    unmeasured = f"; {len(estimate.unmeasured)} test(s) not yet run, not counted" if estimate.unmeasured else ""
    return (
        f"a round takes about {_s(estimate.seconds)} s by the journal (the longest of each test's last {RECENT} "
        f"runs, slowest {tests}; {setup}){measured}{unmeasured}: longer than {what} ({_s(gap)} s), so every "
        'round meets the next start and that one is skipped (bigbinf_rounds_skipped_total{reason="round_running"}'
        f").  Lengthen the schedule to at least {_s(max(estimate.seconds, longest_measured) * 1.25)} s between "
        "starts, or drop tests or shorten datasets (docs/configuration.md, 'A round longer than its interval')"
    )


FIT_MARGIN = 1.25  # as fit_warning's advice: a round a quarter longer still fits


def fitted_interval(estimate: RoundEstimate, interval: float) -> float | None:
    """The schedule interval a round fits in on this host: the longer of the estimate and
    the longest measured round, with FIT_MARGIN, in whole minutes, never shorter than
    `interval` (what the configuration asks); None while nothing has been measured."""
    longest = max(estimate.seconds, max(estimate.measured_rounds, default=0.0))
    if longest <= 0:
        return None
    return max(interval, 60.0 * math.ceil(longest * FIT_MARGIN / 60.0))
