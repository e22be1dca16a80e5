"""How long will moving this much data take, with which protocol and setting, started
when?  The model behind `bigbinf-exporter plan-move` and bigbinf_move_predicted_seconds
(issue 28; docs/report.md, "plan-move").

From everything measured to one remote (scheduled rounds and tuning sweeps, ok runs in
one direction), per option (a protocol as configured, or a protocol with a sweep's
setting):

* **Duration = setup + per-file cost x (files - 1) + bytes / steady-phase rate**: a
  least-squares line through the runs' (bytes, files, seconds).  Two or more sizes
  measured separate the setup (connection, authentication, slow start) from the rate;
  an option measured at one size only (a sweep's setting) borrows the setup of its
  protocol's own line, or is refused with that reason.  With one file count measured the
  per-file cost is 0 and a move of many files is said to be extrapolated without it.
* **Hour of day**: each run's rate relative to the line (log), and per start hour the
  median of the runs started within 90 minutes of it (local time, schedule.timezone);
  hours with fewer than 3 runs there use the all-day rate and say so.  A move longer than
  an hour runs through the hours' rates one after another.
* **Prediction interval** (90% by default): the 5th and 95th percentiles of the runs'
  rate residuals after the hour effect (Student's t on their SD below 20 runs), widened
  by the rate's own standard error; applied to the whole move's rate (a slow day slows
  all of it: no averaging is assumed).  The residuals' degrees of freedom are the runs
  less the parameters the line took from them (two runs at two sizes fit a line
  exactly: a spread of zero that says nothing); below MIN_INTERVAL_DOF the interval is
  **unknown** (NaN bounds, said so, no bound published), never a narrow one.
* **What it stands on** (`Basis`, per option): the runs it used and those it left out
  and why (runs.left_out_of_moves: failed, a busy host by its verdict or by the host
  state a run never judged recorded, whatever its transport), the sizes of each; every
  configured protocol is in the plan, fitted or refused with the true reason (measured
  at one size because its runs at the other were left out; every run left out; never
  measured).
* **The level it has now**: a protocol with an open regression (the regression test's,
  history/regression_state.py) is predicted from its runs since the regression's start
  (the earliest of its series'); its runs from before are left out as BEFORE_REGRESSION,
  and the plan says so (`Plan.regressed`).  Pooled, they would predict the old level.
  An accepted regression's level is the series' level from its start on (the regression
  test's baseline from then): the same rule, its runs from before left out as
  BEFORE_ACCEPTED (`Plan.accepted`; `levels` reads both from the series' states).
* **Only what can be run**: a protocol the configuration no longer has (removed, or
  renamed) is neither fitted nor ranked nor recommended: its runs are set apart
  (`configured_only`) and the plan lists it with its latest run (`Plan.unconfigured`).
* **Which option, which hour**: options are ranked only against options with comparable
  evidence (`Fit.evidence`: a known interval from at least SOLID_RUNS runs, then a known
  interval from fewer, then none), never preferred for having fewer runs; within a class
  by point prediction; start hours whose
  prediction is within TIE of the best are ties, broken toward the earliest start from
  now.  A sweep's setting whose command is the protocol's own (the same argv at the same
  sizes) is the same option: its runs are merged into the protocol's.
* **Capped by the path**: never faster than the path's bandwidth estimate (the last
  probe's, bigbinf_path_bandwidth_bytes_per_second), and said when capped.

Pure: numpy only.  Everything it extrapolates from is in the Plan (`basis`), so the
command can say it.
"""

from __future__ import annotations

import math
import statistics
import zoneinfo
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np

from bigbinf.history.regression import Track
from bigbinf.runs import NOT_INSTALLED, Run

HOUR = 3600.0
DAY = 86400.0
HOUR_WINDOW = 1.5  # hours either way: the runs that make a start hour's effect
MIN_HOUR_RUNS = 3
MIN_EMPIRICAL = 20  # residuals for empirical percentiles; fewer: Student's t on their SD
# Residual degrees of freedom (runs less the line's parameters) below which no interval
# is given: with one, Student's t at 90% is 6.3 SDs of a single difference, and with
# none there is no spread at all.
MIN_INTERVAL_DOF = 2
TIE = 0.01  # start hours predicted within 1% of the best are ties: the earliest start wins
# The runs below which an option's evidence is thin (ranked after those with more, said
# so): below six, Student's t at 90% is over 2.1 SDs and one more run moves the line and
# its interval by a fifth; a sweep's setting run three times on two days has six.
SOLID_RUNS = 6
# The share of the runs left out from which the plan's whole basis is said to be thin.
THIN_LEFT_OUT = 0.5
# Why a run of a protocol with an open regression is left out: it measured the level
# before the regression, not the one a move would meet now.
BEFORE_REGRESSION = "before its open regression"
# ... and of one whose regression an operator accepted: its level since is the series' own.
BEFORE_ACCEPTED = "before its accepted regression"
EVIDENCE = (
    f"a known interval from {SOLID_RUNS} runs or more",
    f"a known interval from fewer than {SOLID_RUNS} runs",
    "no interval",
)


@dataclass(frozen=True)
class Fit:
    """One option's line, hour effects and residuals."""

    protocol: str
    setting: str
    setup_seconds: float
    per_file_seconds: float
    rate: float  # bytes/s, all-day steady phase
    rate_log_se: float  # standard error of log(rate)
    hour_effect: tuple[float | None, ...]  # 24 log multipliers of the rate, None: no runs near
    residuals: tuple[float, ...]  # log rate residuals after the hour effect
    runs: int
    sizes: tuple[int, ...]  # distinct byte sizes measured
    files: tuple[int, ...]  # distinct file counts measured
    hours: tuple[int, ...]  # start hours measured (local)
    first: float
    last: float
    setup_from: str = ""  # where the setup came from when not from this option's sizes
    dof: int = 0  # residual degrees of freedom: residuals less the parameters fitted
    merged: tuple[str, ...] = ()  # sweep settings whose command is this option's own

    @property
    def option(self) -> str:
        return f"{self.protocol} ({self.setting})" if self.setting else self.protocol

    @property
    def interval_known(self) -> bool:
        return self.dof >= MIN_INTERVAL_DOF

    @property
    def evidence(self) -> int:
        """Its evidence class (EVIDENCE): options are ranked only within one, the lower first."""
        if not self.interval_known:
            return 2
        return 0 if self.runs >= SOLID_RUNS else 1

    def rate_at(self, hour: int) -> float:
        effect = self.hour_effect[hour % 24]
        return self.rate * math.exp(effect or 0.0)

    def residual_bounds(self, level: float) -> tuple[float, float]:
        """Log-rate residual quantiles (lower, upper) for a `level` interval, widened by
        the rate's standard error; (nan, nan) when the runs leave too few degrees of
        freedom to say (interval_known)."""
        if not self.interval_known:
            return math.nan, math.nan
        tail = (1 - level) / 2
        res = np.array(self.residuals)
        z = statistics.NormalDist().inv_cdf(1 - tail)
        if len(res) >= MIN_EMPIRICAL:
            lo, hi = float(np.quantile(res, tail)), float(np.quantile(res, 1 - tail))
        else:
            n = len(res)
            # The SD on the residual degrees of freedom, not n - 1: the line's parameters
            # were taken from these same runs.
            sd = math.sqrt(float(np.sum((res - res.mean()) ** 2)) / self.dof)
            spread = _t_quantile(1 - tail, self.dof) * sd * math.sqrt(1 + 1 / n)
            lo, hi = -spread, spread
        widen = z * self.rate_log_se
        return lo - widen, hi + widen


def _t_quantile(p: float, df: int) -> float:
    """Student's t quantile (Cornish-Fisher from the normal: good to ~1% for df >= 3)."""
    z = statistics.NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def local_hour(timestamp: float, zone: zoneinfo.ZoneInfo) -> int:
    return datetime.fromtimestamp(timestamp, zone).hour


def local_hours(timestamps: Sequence[float], zone: zoneinfo.ZoneInfo) -> np.ndarray:
    """The local hour of each timestamp, asking the zone once per UTC hour (a month of
    minute-schedule runs is 40,000 runs and 700 hours)."""
    offsets: dict[int, float] = {}
    out = np.empty(len(timestamps), dtype=int)
    for i, t in enumerate(timestamps):
        h = int(t // HOUR)
        if h not in offsets:
            offset = datetime.fromtimestamp(h * HOUR, zone).utcoffset()
            offsets[h] = offset.total_seconds() if offset else 0.0
        out[i] = int((t + offsets[h]) // HOUR) % 24
    return out


def _circular_hours(a: int, b: int) -> int:
    d = abs(a - b) % 24
    return min(d, 24 - d)


def fit(runs: Sequence[Run], zone: zoneinfo.ZoneInfo, setup_hint: tuple[float, str] | None = None) -> Fit | str:
    """One option's model from its runs, or why there is none."""
    x = np.array([r.bytes for r in runs], dtype=float)
    f = np.array([r.files - 1 for r in runs], dtype=float)
    y = np.array([r.seconds for r in runs], dtype=float)
    sizes = tuple(sorted({r.bytes for r in runs}))
    files = tuple(sorted({r.files for r in runs}))
    setup_from = ""
    per_file = 0.0
    if len(sizes) >= 2:
        columns = [np.ones_like(x), x] + ([f] if len(files) >= 2 else [])
        coef, *_ = np.linalg.lstsq(np.column_stack(columns), y, rcond=None)
        setup, slope = float(coef[0]), float(coef[1])
        per_file = float(coef[2]) if len(files) >= 2 else 0.0
        if setup < 0:  # no negative set-up: the line through the origin
            setup = 0.0
            rest = y - per_file * f
            slope = float(np.dot(x, rest) / np.dot(x, x))
    elif setup_hint is not None:
        setup, setup_from = setup_hint
        slope = float(np.median((y - setup) / x))
    else:
        return (
            f"measured at one size only ({_size(sizes[0])}): its set-up and its rate cannot be told apart, "
            f"and {runs[0].protocol} has no runs at two sizes to lend it a set-up time"
        )
    if not slope > 0:
        return f"its durations do not grow with size ({len(runs)} runs, {', '.join(map(_size, sizes))})"
    rate = 1.0 / slope
    steady = y - setup - per_file * f
    usable = steady > 0.1 * y  # runs whose time is mostly the steady phase
    log_ratio = np.log(x[usable] * slope / steady[usable]) if usable.any() else np.zeros(0)
    hours_all = local_hours([r.timestamp for r in runs], zone)
    hours = hours_all[usable]
    effect: list[float | None] = []
    for h in range(24):
        distance = np.abs(hours - h) % 24
        near = np.minimum(distance, 24 - distance) <= HOUR_WINDOW
        effect.append(float(np.median(log_ratio[near])) if near.sum() >= MIN_HOUR_RUNS else None)
    centre = [e for e in effect if e is not None]
    if centre:  # the line's rate is the all-day rate: effects relative to their median
        mid = float(np.median(centre))
        rate *= math.exp(mid)
        effect = [None if e is None else e - mid for e in effect]
        log_ratio = log_ratio - mid
    shift = np.array([e or 0.0 for e in effect])
    residuals = [float(v) for v in log_ratio - shift[hours]] if len(hours) else []
    n = len(runs)
    parameters = (2 + (len(files) >= 2)) if len(sizes) >= 2 else 1
    if len(sizes) >= 2 and n > 2:
        fitted = setup + per_file * f + x * slope
        sigma2 = float(np.sum((y - fitted) ** 2)) / max(n - 2 - (len(files) >= 2), 1)
        sxx = float(np.sum((x - x.mean()) ** 2))
        slope_se = math.sqrt(sigma2 / sxx) if sxx > 0 else 0.0
        rate_log_se = slope_se / slope
    else:
        rate_log_se = float(np.std(log_ratio, ddof=1) / math.sqrt(len(log_ratio))) if len(log_ratio) > 1 else 0.0
    return Fit(
        runs[0].protocol,
        runs[0].setting,
        setup,
        per_file,
        rate,
        rate_log_se,
        tuple(effect),
        tuple(residuals),
        n,
        sizes,
        files,
        tuple(sorted({int(h) for h in hours_all})),
        min(r.timestamp for r in runs),
        max(r.timestamp for r in runs),
        setup_from,
        max(len(residuals) - parameters, 0),
    )


@dataclass(frozen=True)
class Prediction:
    option: str
    start_hour: int
    seconds: float
    lower: float
    upper: float
    capped: bool  # the path's bandwidth capped the rate at some hour

    @property
    def interval_known(self) -> bool:
        return not (math.isnan(self.lower) or math.isnan(self.upper))


def best_start(predictions: Sequence[Prediction], now_hour: int) -> Prediction:
    """The start hour to recommend: the fastest, and among hours within TIE of it (a
    flat day: every hour the same) the earliest from `now_hour` on, never one hours
    away for no gain."""
    fastest = min(p.seconds for p in predictions)
    ties = [p for p in predictions if p.seconds <= fastest * (1 + TIE)]
    return min(ties, key=lambda p: (p.start_hour - now_hour) % 24)


def _steady_seconds(fit_: Fit, size: float, start_hour: int, factor: float, cap: float | None) -> tuple[float, bool]:
    """Seconds to move `size` bytes from `start_hour` on, hour by hour at each hour's
    rate times `factor` (capped by the path); whole days at once (a day moves the same
    bytes whichever hour it starts at)."""
    rates = []
    capped = False
    for h in range(24):
        rate = fit_.rate_at(h) * factor
        if cap is not None and rate > cap:
            rate, capped = cap, True
        rates.append(rate)
    per_day = sum(rates) * HOUR
    left, seconds, hour = float(size), 0.0, start_hour
    for step in range(48):
        if step == 24:  # a whole day gone by: skip the whole days still to come
            days = math.floor(left / per_day)
            seconds += days * DAY
            left -= days * per_day
        rate = rates[hour]
        if left <= rate * HOUR:
            return seconds + left / rate, capped
        left -= rate * HOUR
        seconds += HOUR
        hour = (hour + 1) % 24
    return seconds + left / rates[hour], capped


def predict(
    fit_: Fit,
    size: int,
    files: int,
    start_hour: int,
    level: float = 0.9,
    cap: float | None = None,
    bounds: tuple[float, float] | None = None,
) -> Prediction:
    """The duration of a move of `size` bytes in `files` files started at `start_hour`;
    `bounds`: fit_.residual_bounds(level), when the caller predicts many hours."""
    fixed = fit_.setup_seconds + fit_.per_file_seconds * (files - 1)
    lo, hi = bounds if bounds is not None else fit_.residual_bounds(level)
    point, capped = _steady_seconds(fit_, size, start_hour, 1.0, cap)
    if math.isnan(lo) or math.isnan(hi):
        return Prediction(fit_.option, start_hour, fixed + point, math.nan, math.nan, capped)
    slow, _ = _steady_seconds(fit_, size, start_hour, math.exp(lo), cap)
    fast, _ = _steady_seconds(fit_, size, start_hour, math.exp(hi), cap)
    return Prediction(fit_.option, start_hour, fixed + point, fixed + fast, fixed + slow, capped)


@dataclass(frozen=True)
class Basis:
    """What one option stands on: the runs it used and those it left out, and why."""

    option: str
    protocol: str
    used: int = 0
    scheduled: int = 0  # of the used: the exporter's rounds'
    sweep: int = 0  # of the used: tuning sweeps'
    sizes: tuple[int, ...] = ()  # sizes of the used runs
    left_out: tuple[tuple[str, int], ...] = ()  # (why, runs), most first
    left_out_sizes: tuple[tuple[int, int], ...] = ()  # (size, runs left out) at sizes it did not use
    # (size, ((why, runs), ...)) at those sizes: each size's own reasons, never mixed
    left_out_size_reasons: tuple[tuple[int, tuple[tuple[str, int], ...]], ...] = ()
    older: float | None = None  # its latest run older than moves.history, if it has none since

    @property
    def left_out_runs(self) -> int:
        return sum(n for _, n in self.left_out)

    @property
    def transfers_left_out(self) -> int:
        """Runs left out that ran (not a skipped round's: NOT_INSTALLED never moved a byte)."""
        return sum(n for why, n in self.left_out if why != NOT_INSTALLED)

    def left_out_text(self) -> str:
        """ "busy host 12, failed 1" ("" if none)."""
        return ", ".join(f"{why} {n}" for why, n in self.left_out)


def bases(
    runs: Sequence[Run], configured: Sequence[str] = (), older: Mapping[str, float] | None = None
) -> dict[str, Basis]:
    """Each option's basis from every run the model could stand on (runs.move_runs, those
    left out with their reason), and an empty one for each `configured` protocol never
    measured (`older`: option -> its latest run before moves.history, for one measured
    only before it)."""
    by_option: dict[str, list[Run]] = defaultdict(list)
    for r in runs:
        by_option[r.option].append(r)
    out = {}
    for option, its in by_option.items():
        used = [r for r in its if not r.left_out]
        why: dict[str, int] = defaultdict(int)
        for r in its:
            if r.left_out:
                why[r.left_out] += 1
        sizes = {r.bytes for r in used}
        other: dict[int, int] = defaultdict(int)
        other_why: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for r in its:
            if r.left_out and r.bytes not in sizes and r.bytes > 0:
                other[r.bytes] += 1
                other_why[r.bytes][r.left_out] += 1
        out[option] = Basis(
            option,
            its[0].protocol,
            len(used),
            sum(1 for r in used if r.source == "exporter"),
            sum(1 for r in used if r.source == "sweep"),
            tuple(sorted(sizes)),
            tuple(sorted(why.items(), key=lambda item: (-item[1], item[0]))),
            tuple(sorted(other.items())),
            tuple(
                (size, tuple(sorted(reasons.items(), key=lambda item: (-item[1], item[0]))))
                for size, reasons in sorted(other_why.items())
            ),
        )
    for option, latest in (older or {}).items():
        if option not in out:
            out[option] = Basis(option, option.split(" (")[0], older=latest)
    for protocol in configured:
        out.setdefault(protocol, Basis(protocol, protocol))
    return out


def refusal(b: Basis, remote: str, direction: str, zone: zoneinfo.ZoneInfo | None = None) -> str:
    """Why an option with no run to use has no prediction: the true reason."""
    if b.left_out_runs and not b.transfers_left_out:
        n = b.left_out_runs
        return f"not installed here: its {n} scheduled run{'s were' if n != 1 else ' was'} skipped"
    if not b.left_out_runs:
        if b.older is not None:
            day = datetime.fromtimestamp(b.older, zone or zoneinfo.ZoneInfo("UTC")).strftime("%Y-%m-%d")
            return f"measured only before {day}, older than moves.history"
        return f"never measured to {remote} ({direction}) in the runs plan-move reads"
    return f"all {b.left_out_runs} of its runs left out ({b.left_out_text()}): none to predict from"


def why_refused(why: str, b: Basis | None) -> str:
    """A fit's refusal, with what was left out where that is why (one size measured
    because the runs at the other sizes were left out)."""
    if b is None or not b.left_out_sizes:
        return why
    other = "; ".join(
        f"{sum(n for _, n in reasons)} at {_size(size)}: {', '.join(f'{w} {n}' for w, n in reasons)}"
        for size, reasons in b.left_out_size_reasons
    )
    return f"{why}; its runs at other sizes were left out ({other})"


@dataclass(frozen=True)
class Plan:
    remote: str
    size: int
    files: int
    ranked: tuple[tuple[Fit, tuple[Prediction, ...]], ...]  # best first; 24 start hours each
    refused: dict[str, str] = field(default_factory=dict)  # option -> why no prediction
    bandwidth: float | None = None
    now_hour: int = 0  # the local hour the plan was made at: ties start then
    basis: dict[str, Basis] = field(default_factory=dict)  # option -> what it stands on
    # protocol -> the start of its series' open regression (the earliest): its options
    # are predicted from their runs since, the others left out as BEFORE_REGRESSION
    regressed: dict[str, float] = field(default_factory=dict)
    accepted: frozenset[str] = frozenset()  # of `regressed`: those whose level is an accepted regression's
    # option -> (its latest run, its runs) of a protocol the configuration no longer has
    unconfigured: dict[str, tuple[float, int]] = field(default_factory=dict)

    @property
    def used(self) -> int:
        return sum(b.used for b in self.basis.values())

    @property
    def left_out(self) -> int:
        """Transfers left out (a skipped round's run never moved a byte: not counted)."""
        return sum(b.transfers_left_out for b in self.basis.values())

    def thin(self) -> list[str]:
        """Why the plan's basis is thin, in words (none: it is not): most of all its runs
        left out; the first option's own runs mostly left out, as any option's would be
        (it is the one a move would use); or no option with solid evidence."""
        why = []
        total = self.used + self.left_out
        if total and self.left_out >= THIN_LEFT_OUT * total:
            reasons: dict[str, int] = defaultdict(int)
            for b in self.basis.values():
                for reason, n in b.left_out:
                    if reason != NOT_INSTALLED:
                        reasons[reason] += n
            text = ", ".join(f"{r} {n}" for r, n in sorted(reasons.items(), key=lambda item: -item[1]))
            why.append(f"{self.left_out} of its {total} runs were left out ({text})")
        if self.ranked:
            top = self.ranked[0][0]
            own = [self.basis[o] for o in (top.option, *top.merged) if o in self.basis]
            out = sum(b.transfers_left_out for b in own)
            used = sum(b.used for b in own)
            if out and out >= THIN_LEFT_OUT * (out + used):
                reasons_top: dict[str, int] = defaultdict(int)
                for b in own:
                    for reason, n in b.left_out:
                        if reason != NOT_INSTALLED:
                            reasons_top[reason] += n
                text = ", ".join(f"{r} {n}" for r, n in sorted(reasons_top.items(), key=lambda item: -item[1]))
                why.append(f"the first, {top.option}, stands on {used} of its {out + used} runs ({text} left out)")
            if top.evidence > 0:
                why.append(f"no option has {EVIDENCE[0]} (the first, {top.option}, has {top.runs} runs)")
        return why

    @property
    def best(self) -> tuple[Fit, Prediction] | None:
        if not self.ranked:
            return None
        fit_, hours = self.ranked[0]
        return fit_, best_start(hours, self.now_hour)


def levels(tracks: Iterable[tuple[Any, Track]], remote: str, direction: str) -> tuple[dict[str, float], set[str]]:
    """protocol -> the start of the level its series to `remote` in `direction` have now,
    where that is not their whole history: an open regression's start, else the last
    accepted one's (the series' level from then on); the earliest of its series'.  And
    which of them are accepted levels.  `tracks`: (series key, its regression state)."""
    starts: dict[str, tuple[float, bool]] = {}
    for key, track in tracks:
        if key.remote != remote or key.direction != direction:
            continue
        if track.episode is not None:
            level = (track.episode.since, False)
        elif track.accepts:
            level = (track.accepts[-1][0], True)
        else:
            continue
        if key.protocol not in starts or level[0] < starts[key.protocol][0]:
            starts[key.protocol] = level
    return {p: since for p, (since, _) in starts.items()}, {p for p, (_, acc) in starts.items() if acc}


def since_regressions(runs: Sequence[Run], regressed: Mapping[str, float], accepted: Collection[str] = ()) -> list[Run]:
    """The runs with those of a protocol with an open regression (`regressed`: protocol ->
    its start) from before that start left out (BEFORE_REGRESSION; BEFORE_ACCEPTED for
    the `accepted` ones): a prediction stands on the level the protocol has now, not on
    the one it had (every option of the protocol, a sweep's setting too: the same tool,
    the same remote end)."""
    return [
        replace(r, left_out=BEFORE_ACCEPTED if r.protocol in accepted else BEFORE_REGRESSION)
        if not r.left_out and r.protocol in regressed and r.timestamp < regressed[r.protocol]
        else r
        for r in runs
    ]


def runnable_protocols(protocols: Mapping[str, Any], direction: str) -> set[str]:
    """The protocols a configuration (its `protocols:`) can run in `direction`: the only
    ones a plan ranks or the exporter predicts with."""
    return {name for name, p in protocols.items() if direction in p.directions}


def configured_only(runs: Iterable[Run], protocols: Collection[str]) -> tuple[list[Run], dict[str, tuple[float, int]]]:
    """The runs of the configured `protocols`, and each option of another (removed from
    the configuration, or renamed) with its latest run and how many it has: it cannot be
    run from this configuration, so it is never ranked nor recommended."""
    kept: list[Run] = []
    gone: dict[str, tuple[float, int]] = {}
    for r in runs:
        if r.protocol in protocols:
            kept.append(r)
        else:
            latest, n = gone.get(r.option, (r.timestamp, 0))
            gone[r.option] = (max(latest, r.timestamp), n + 1)
    return kept, gone


def fit_all(runs: Sequence[Run], zone: zoneinfo.ZoneInfo) -> tuple[list[Fit], dict[str, str]]:
    """Every option's fit (plain protocols first: a sweep's setting measured at one size
    borrows their set-up), and why the others have none."""
    by_option: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for r in runs:
        by_option[(r.protocol, r.setting)].append(r)
    merged: dict[str, list[str]] = defaultdict(list)
    for key in [k for k in by_option if k[1] and (k[0], "") in by_option]:
        if same_command(by_option[key], by_option[(key[0], "")]):
            merged[key[0]].append(by_option[key][0].option)
            by_option[(key[0], "")].extend(by_option.pop(key))
    fits: dict[tuple[str, str], Fit] = {}
    refused: dict[str, str] = {}
    for key in sorted(by_option, key=lambda k: (k[1] != "", k)):
        hint = None
        own = fits.get((key[0], ""))
        if own is not None and len({r.bytes for r in by_option[key]}) < 2:
            hint = (own.setup_seconds, f"{key[0]}'s runs at {len(own.sizes)} sizes")
        result = fit(by_option[key], zone, hint)
        if isinstance(result, str):
            refused[by_option[key][0].option] = result
        else:
            fits[key] = replace(result, merged=tuple(sorted(merged.get(key[0], ())))) if not key[1] else result
    return list(fits.values()), refused


def same_command(setting: Sequence[Run], own: Sequence[Run]) -> bool:
    """A sweep's setting runs the protocol's own command: at every size and file count
    both measured, the setting's commands are among the protocol's (and at least one
    such size, and every command journaled)."""
    commands: dict[tuple[int, int], set[str]] = defaultdict(set)
    for r in own:
        commands[(r.bytes, r.files)].add(r.command)
    shared = [r for r in setting if (r.bytes, r.files) in commands]
    return (
        bool(shared)
        and all(r.command for r in setting)
        and all(r.command in commands[(r.bytes, r.files)] for r in shared)
    )


def rank(
    fits: Sequence[Fit],
    refused: dict[str, str],
    remote: str,
    size: int,
    files: int = 1,
    bandwidth: float | None = None,
    level: float = 0.9,
    now_hour: int = 0,
) -> Plan:
    """The fitted options ranked for one move: those with a known interval first (an
    option is never preferred for having too few runs to have one), then by their best
    start hour's point prediction."""
    ranked = []
    for f in fits:
        bounds = f.residual_bounds(level)
        hours = tuple(predict(f, size, files, h, level, bandwidth, bounds) for h in range(24))
        ranked.append((f, hours))
    # Ranked only against options with comparable evidence (Fit.evidence), then by speed.
    ranked.sort(key=lambda item: (item[0].evidence, min(p.seconds for p in item[1]), item[0].option))
    return Plan(remote, size, files, tuple(ranked), dict(refused), bandwidth, now_hour)


def plan(
    runs: Sequence[Run],
    remote: str,
    size: int,
    files: int = 1,
    zone: zoneinfo.ZoneInfo | None = None,
    bandwidth: float | None = None,
    level: float = 0.9,
    now_hour: int = 0,
    configured: Sequence[str] = (),
    direction: str = "download",
    older: Mapping[str, float] | None = None,
    regressed: Mapping[str, float] | None = None,
    accepted: Collection[str] = (),
    unconfigured: Mapping[str, tuple[float, int]] | None = None,
) -> Plan:
    """Every option to `remote` fitted and ranked by its best start hour's prediction.
    `runs` may hold those the model leaves out (Run.left_out, runs.move_runs): they are
    counted in each option's basis, never fitted; every `configured` protocol without a
    fit is refused with the reason (`older`: option -> its latest run before
    moves.history, where it has none since; `regressed`: protocol -> the start of its
    open regression or, of the `accepted`, its accepted one, whose options are predicted
    from their runs since; `unconfigured`: configured_only's, said in the plan)."""
    regressed = dict(regressed or {})
    runs = since_regressions(runs, regressed, accepted)
    basis = bases(runs, configured, older)
    fits, refused = fit_all([r for r in runs if not r.left_out], zone or zoneinfo.ZoneInfo("UTC"))
    refused = {option: why_refused(why, basis.get(option)) for option, why in refused.items()}
    fitted = {f.option for f in fits} | {m for f in fits for m in f.merged}
    for option, b in basis.items():
        if option not in fitted and option not in refused:
            refused[option] = refusal(b, remote, direction, zone)
    ranked = rank(fits, refused, remote, size, files, bandwidth, level, now_hour)
    return replace(
        ranked,
        basis=basis,
        regressed=regressed,
        accepted=frozenset(p for p in accepted if p in regressed),
        unconfigured=dict(unconfigured or {}),
    )


_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _size(n: float) -> str:
    for unit, factor in _UNITS:
        if n >= factor:
            value = n / factor
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.3g}{unit}"
    return f"{n:.0f}B"


size_label = _size  # the `size` label of bigbinf_move_predicted_seconds: "40TiB"


def duration_text(seconds: float) -> str:
    if math.isnan(seconds):
        return "unknown"
    if not math.isfinite(seconds):
        return "never"
    s = round(seconds)
    if s >= DAY:
        return f"{s // 86400}d {s % 86400 // 3600}h"
    if s >= HOUR:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{seconds:.1f}s"
