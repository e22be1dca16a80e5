"""Regression detection: the significance test (bigbinf/history/regression.py, alert
BigbinfThroughputRegressed) against the fixed 0.7 rule (BigbinfThroughputRegression and
...TimeOfDay), side by side on the same generated series (issue 28).

The series are generated from real runs: each draws its noise from a *profile* fitted to
one real series of a journal (its log-throughput residuals around its time-of-day
median, resampled, and their lag-1 autocorrelation), and its time-of-day shape from a
journal that spans days (hour-of-day medians) or from a named shape.  Into many series a
drop of 10, 20 or 40% is injected at a random round after the warm-up; the same series
without a drop measure the false alarms.

    .venv/bin/python benchmarks/bench_regression.py --journal lab.jsonl [--journal imported-2015.jsonl]
    .venv/bin/python benchmarks/bench_regression.py --journal lab.jsonl --series 240 --days 60 --schedule hourly
    .venv/bin/python benchmarks/bench_regression.py --cost     # what it costs a round and /metrics
    .venv/bin/python benchmarks/bench_regression.py --family-sizes 1,2,12,60,1000   # issue 45
    .venv/bin/python benchmarks/bench_regression.py --ties     # the exact p with ties, and its cost
    .venv/bin/python benchmarks/bench_regression.py --breaks step,weekly   # the day gate's breaks
    .venv/bin/python benchmarks/bench_regression.py --breaks noisy-weekly   # B2: noisy, Mondays 0.5-0.7x
    .venv/bin/python benchmarks/bench_regression.py --breaks bad-days --series 40   # B1: a day in 10 at 0.6x

Per detector: the share of drops detected within 3 rounds (the first dropped run is
round 1), the median delay, and false alarms (alert episodes that start while nothing
dropped) per 1,000 series-days.  The significance test runs exactly as the exporter
runs it: `History.add` after each round's results, Benjamini-Hochberg across the
exporter's series (`--per-exporter` series share one exporter).  The fixed rule is the
generated Prometheus rules' arithmetic in Python: per-transfer means of the last 24h per
period (peak 11-15h local) against the 7-day means of the same period (and the whole-day
one against the recent mix), `for: 1h`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bigbinf.history.regression import DAY, History, RegressionSettings, judge
from bigbinf.journal.store import Journal

HOUR = 3600.0
SCHEDULES = {"study": (3.0, 13.0), "hourly": tuple(float(h) for h in range(24))}


@dataclass(frozen=True)
class Profile:
    name: str
    residuals: np.ndarray  # centred log-throughput residuals
    phi: float  # lag-1 autocorrelation of the residuals in time order
    shape: np.ndarray | None  # 24 hour-of-day log offsets, when the series spans days


def fit_profiles(paths: list[Path], min_runs: int = 20) -> list[Profile]:
    """One profile per real series (ok, exporter or imported results) with enough runs."""
    series: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
    for path in paths:
        for r in Journal(path).read():
            if r.outcome == "ok" and r.throughput_bytes_per_second > 0 and r.source != "sweep":
                key = (path.name, r.source, r.protocol, r.remote, r.dataset, r.direction)
                series[key].append((r.start_timestamp, math.log(r.throughput_bytes_per_second)))
    profiles = []
    for key, runs in sorted(series.items()):
        if len(runs) < min_runs:
            continue
        runs.sort()
        t = np.array([x for x, _ in runs])
        y = np.array([v for _, v in runs])
        hours = ((t % DAY) // HOUR).astype(int)
        shape = None
        if t[-1] - t[0] >= 2 * DAY and len(set(hours.tolist())) >= 2:
            med = np.array([np.median(y[hours == h]) if (hours == h).any() else np.nan for h in range(24)])
            fill = np.nanmedian(med)
            med = np.where(np.isnan(med), fill, med)
            shape = med - np.median(med)
            y = y - med[hours]
        res = y - np.median(y)
        phi = float(np.corrcoef(res[:-1], res[1:])[0, 1]) if len(res) > 3 and res.std() > 0 else 0.0
        profiles.append(Profile("/".join(key), res, max(0.0, min(phi, 0.95)), shape))
    return profiles


def named_shape(name: str) -> np.ndarray:
    """flat: the 2015 study found no significant peak effect (Table 1: p 0.4-0.9);
    peak15: a site whose peak hours (11-15h) run 15% slower."""
    shape = np.zeros(24)
    if name == "peak15":
        shape[11:15] = math.log(0.85)
    return shape


@dataclass
class Series:
    times: np.ndarray
    log_x: np.ndarray
    drop_round: int | None  # index of the first dropped run


def generate(
    profile: Profile, shape: np.ndarray, scale: float, hours: tuple[float, ...], days: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    start = 1_700_006_400.0 - 1_700_006_400.0 % DAY
    times = np.array([start + d * DAY + h * HOUR for d in range(days) for h in hours])
    # AR(1) around the time-of-day level, innovations resampled from the real residuals.
    innovations = rng.choice(profile.residuals, size=len(times)) * scale * math.sqrt(1 - profile.phi**2)
    e = np.empty(len(times))
    e[0] = rng.choice(profile.residuals) * scale
    for i in range(1, len(times)):
        e[i] = profile.phi * e[i - 1] + innovations[i]
    level = math.log(25e6)
    return times, level + shape[((times % DAY) // HOUR).astype(int)] + e


# ---------------------------------------------------------------- the fixed 0.7 rule


def fixed_rule_alerts(times: np.ndarray, x: np.ndarray, fraction: float = 0.7, peak=(11, 15)) -> np.ndarray:
    """Whether either fixed-ratio alert fires right after each round (with its `for: 1h`)."""
    hours = (times % DAY) // HOUR
    period = ((hours >= peak[0]) & (hours < peak[1])).astype(int)
    cond = np.zeros(len(times), dtype=bool)
    for i in range(len(times)):
        now = times[i]
        recent = (times > now - DAY) & (times <= now)
        week = (times > now - 7 * DAY) & (times <= now)
        bad = False
        mix_num = mix_den = 0.0
        for p in (0, 1):
            rp, wp = recent & (period == p), week & (period == p)
            if not wp.any():
                continue
            base = x[wp].mean()
            older = wp & ~recent
            if rp.any():
                mean_recent = x[rp].mean()
                base_mix = base if older.any() else x[week].mean()
                mix_num += rp.sum() * base_mix
                mix_den += rp.sum()
                if mean_recent < fraction * base:
                    bad = True
        if mix_den > 0 and x[recent].mean() < fraction * (mix_num / mix_den):
            bad = True
        cond[i] = bad
    # for: 1h: the condition must still hold an hour after it began (until the next round
    # it holds as it was).
    fired = np.zeros(len(times), dtype=bool)
    began = None
    for i in range(len(times)):
        if not cond[i]:
            began = None
            continue
        began = times[i] if began is None else began
        held_until = times[i + 1] if i + 1 < len(times) else times[i] + DAY
        fired[i] = held_until - began >= HOUR or (times[i] - began >= HOUR)
    return fired


# ---------------------------------------------------------------- the significance test


def significance_alerts(group: list[Series], settings: RegressionSettings) -> list[np.ndarray]:
    """regressed per series after each round, as the exporter computes it: every series
    of the exporter adds its run, then the verdicts (q across the exporter's series)."""
    history = History(settings)
    out = [np.zeros(len(s.times), dtype=bool) for s in group]
    for i in range(len(group[0].times)):
        for j, s in enumerate(group):
            history.add(j, float(s.times[i]), float(math.exp(s.log_x[i])))
        verdicts = history.verdicts()
        for j in range(len(group)):
            v = verdicts.get(j)
            out[j][i] = bool(v and v.regressed)
    return out


# ---------------------------------------------------------------- scoring


@dataclass
class Score:
    detected_within_3: int = 0
    drops: int = 0
    delays: list[int] = dataclasses.field(default_factory=list)
    false_alarms: int = 0
    clean_series_days: float = 0.0

    def add(self, s: Series, fired: np.ndarray, rounds_per_day: int) -> None:
        end = s.drop_round if s.drop_round is not None else len(fired)
        starts = int(np.sum(fired[1:end] & ~fired[: end - 1])) + int(bool(end and fired[0]))
        self.false_alarms += starts
        self.clean_series_days += end / rounds_per_day
        if s.drop_round is not None:
            self.drops += 1
            after = np.nonzero(fired[s.drop_round :])[0]
            if len(after):
                delay = int(after[0]) + 1
                self.delays.append(delay)
                self.detected_within_3 += delay <= 3

    def row(self) -> tuple[str, str, str]:
        share = f"{self.detected_within_3 / self.drops:.1%}" if self.drops else "-"
        median = f"{statistics.median(self.delays):g}" if self.delays else "never"
        rate = f"{1000 * self.false_alarms / self.clean_series_days:.2f}" if self.clean_series_days else "-"
        return share, median, rate


def cost() -> int:
    """What the test costs the live path: per result on the round's thread (History.add
    and the verdicts of the exporter's series), and the /metrics rendering of a
    2,000-series mesh state with and without every series' verdict (rendered on change,
    never per scrape)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.support.mesh import mesh_state

    from bigbinf.history.regression import Tested, Verdict
    from bigbinf.service.exposition import build

    rng = np.random.default_rng(1)
    print("| schedule | ok runs kept per series | series per exporter | per result (median of 50) |")
    print("| --- | ---: | ---: | ---: |")
    for label, per_day, series in (
        ("2 a day (the study)", 2, 12),
        ("hourly", 24, 12),
        ("every 5 minutes", 288, 12),
        ("every minute", 1440, 12),
        ("2 a day, a large exporter", 2, 2000),
    ):
        settings = RegressionSettings()
        history = History(settings)
        start = 1_700_006_400.0
        times = start + np.arange(per_day * 29) * (DAY / per_day)
        for j in range(series):
            history.load(j, [(float(t), float(25e6 * math.exp(rng.normal(0, 0.05)))) for t in times])
            history.retest(j)
        spent = []
        t = float(times[-1])
        for _ in range(50):
            t += DAY / per_day
            began = time.perf_counter()
            history.add(0, t, 25e6)
            history.verdicts()
            spent.append(time.perf_counter() - began)
        kept = len(history.runs[0][0])
        print(f"| {label} | {kept:,} | {series:,} | {statistics.median(spent) * 1000:.2f} ms |")
    state = mesh_state(10, 20, 5)
    keys = sorted(state.series, key=lambda k: (k.protocol, k.remote, k.dataset, k.direction))
    renders = {}
    for with_verdicts in (False, True):
        if with_verdicts:
            state.record_regressions({k: Verdict(Tested(0.97, 0.9, 1.04, 0.2, 3, 56, 1.7e9), 0.4, False) for k in keys})
        spent = []
        for _ in range(3):
            began = time.perf_counter()
            build(state.snapshot())
            spent.append(time.perf_counter() - began)
        renders[with_verdicts] = min(spent)  # the least disturbed by the machine's other work
    print(
        f"\n/metrics rendering of {len(keys):,} series (on change, off the scrape path): "
        f"{renders[False]:.2f} s without verdicts, {renders[True]:.2f} s with every series' verdict "
        f"(+{(renders[True] / renders[False] - 1):.0%})"
    )
    return 0


# ---------------------------------------------------------------- regressions that last (issue 35)

PERSIST_HOURS = (3.0, 9.0, 15.0, 21.0)  # a round every 6 hours


@dataclass
class Lasting:
    """One scenario's tally: step drops that persist, then recover."""

    delays: list[int] = dataclasses.field(default_factory=list)  # rounds to the first firing
    missed: int = 0  # drops never detected while they lasted
    slow_rounds: int = 0
    firing_slow: int = 0  # slow rounds with the alert firing
    after_first: int = 0  # slow rounds from the first firing on
    firing_after_first: int = 0
    clears: list[int] = dataclasses.field(default_factory=list)  # rounds after recovery until it is off
    not_cleared: int = 0
    flaps: int = 0  # episodes beyond the first, from the drop on
    false_alarms: int = 0  # episodes starting on unchanged series
    clean_days: float = 0.0

    def drop(self, fired: np.ndarray, start: int, end: int) -> None:
        slow = fired[start:end]
        self.slow_rounds += len(slow)
        self.firing_slow += int(slow.sum())
        hits = np.nonzero(slow)[0]
        if len(hits):
            self.delays.append(int(hits[0]) + 1)
            self.after_first += len(slow) - int(hits[0])
            self.firing_after_first += int(slow[hits[0] :].sum())
        else:
            self.missed += 1
        after = fired[end:]
        off = np.nonzero(~after)[0]
        if len(hits) or fired[end - 1]:
            if len(off):
                self.clears.append(int(off[0]) + 1 if fired[end - 1] else 0)
            else:
                self.not_cleared += 1
        tail = fired[start:]
        starts = int(np.sum(tail[1:] & ~tail[:-1])) + int(bool(tail[0]))
        self.flaps += max(0, starts - 1)

    def unchanged(self, fired: np.ndarray, rounds_per_day: int, warmup: int) -> None:
        f = fired[warmup:]
        self.false_alarms += int(np.sum(f[1:] & ~f[:-1])) + int(bool(f[0]))
        self.clean_days += len(f) / rounds_per_day

    def row(self) -> list[str]:
        def pct(a: int, b: int) -> str:
            return f"{a / b:.1%}" if b else "-"

        delay = f"{statistics.median(self.delays):g} ({max(self.delays)})" if self.delays else "never"
        clear = f"{statistics.median(self.clears):g} ({max(self.clears)})" if self.clears else "-"
        rate = f"{1000 * self.false_alarms / self.clean_days:.2f}" if self.clean_days else "-"
        return [
            delay + (f", {self.missed} missed" if self.missed else ""),
            pct(self.firing_slow, self.slow_rounds),
            pct(self.firing_after_first, self.after_first),
            clear + (f", {self.not_cleared} not cleared" if self.not_cleared else ""),
            rate,
            str(self.flaps),
        ]


class Stateless(History):
    """The test before issue 35: no state; regressed = q <= fdr and material, now."""

    def step(self, key: object) -> None:
        return None


def lasting_fired(
    group: list[np.ndarray], times: np.ndarray, settings: RegressionSettings, stateless: bool
) -> list[np.ndarray]:
    """The alert per series after each round (every series of the exporter adds its run)."""
    history = (Stateless if stateless else History)(settings)
    out = [np.zeros(len(times), dtype=bool) for _ in group]
    for i, t in enumerate(times):
        for j, log_x in enumerate(group):
            history.add(j, float(t), float(math.exp(log_x[i])))
        verdicts = judge(history.tests, settings) if stateless else history.verdicts()
        for j in range(len(group)):
            v = verdicts.get(j)
            out[j][i] = bool(v and v.regressed)
    return out


def lasting(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="step drops that persist for days, then recover (issue 35)")
    ap.add_argument("--lasting", action="store_true")
    ap.add_argument(
        "--exporters", type=int, default=2, help="exporters per scenario (each: --dropped + --unchanged series)"
    )
    ap.add_argument("--dropped", type=int, default=6)
    ap.add_argument("--unchanged", type=int, default=6)
    ap.add_argument("--warmup-days", type=int, default=35)
    ap.add_argument("--after-days", type=int, default=5, help="days after the recovery")
    ap.add_argument("--durations", default="1,7,30", help="days each drop lasts")
    ap.add_argument("--drops", default="0.1,0.2,0.3,0.5")
    ap.add_argument("--noise", default="0.03,0.12", help="per-run SD (log) of the quiet and noisy series")
    ap.add_argument("--stateless", action="store_true", help="also the test before issue 35, for comparison")
    ap.add_argument("--seed", type=int, default=35)
    args = ap.parse_args(argv)
    rounds_per_day = len(PERSIST_HOURS)
    settings = RegressionSettings(rounds_per_day=rounds_per_day)  # series_alpha for a round every 6 h
    rng = np.random.default_rng(args.seed)
    print(
        f"settings: {settings}; rounds at {', '.join(f'{h:02.0f}h' for h in PERSIST_HOURS)}; per scenario "
        f"{args.exporters} exporters of {args.dropped} dropped + {args.unchanged} unchanged series; "
        f"{args.warmup_days} days before the drop, {args.after_days} after the recovery"
    )
    print()
    print(
        "| noise (SD/run) | drop | lasts | detector | detection delay, rounds: median (max) | slow rounds firing "
        "| slow rounds firing from the first firing on | rounds to clear after recovery: median (max) "
        "| false alarms / 1,000 series-days (unchanged) | flaps |"
    )
    print("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    began = time.perf_counter()
    for noise in (float(x) for x in args.noise.split(",")):
        for drop in (float(x) for x in args.drops.split(",")):
            for days in (int(x) for x in args.durations.split(",")):
                total_days = args.warmup_days + days + args.after_days
                start_day = 1_700_006_400.0 - 1_700_006_400.0 % DAY
                times = np.array([start_day + d * DAY + h * HOUR for d in range(total_days) for h in PERSIST_HOURS])
                start, end = args.warmup_days * rounds_per_day, (args.warmup_days + days) * rounds_per_day
                modes = [False, True] if args.stateless else [False]
                tallies = {mode: Lasting() for mode in modes}
                for _ in range(args.exporters):
                    group = []
                    for j in range(args.dropped + args.unchanged):
                        log_x = math.log(25e6) + rng.normal(0, noise, len(times))
                        if j < args.dropped:
                            log_x[start:end] += math.log(1 - drop)
                        group.append(log_x)
                    for mode in modes:
                        fired = lasting_fired(group, times, settings, mode)
                        for j, f in enumerate(fired):
                            if j < args.dropped:
                                tallies[mode].drop(f, start, end)
                            else:
                                tallies[mode].unchanged(f, rounds_per_day, 28 * rounds_per_day)
                for mode in modes:
                    name = "stateless (before)" if mode else "state"
                    cells = [f"{noise:.0%}", f"{drop:.0%}", f"{days} d", name, *tallies[mode].row()]
                    print("| " + " | ".join(cells) + " |", flush=True)
    print(f"\n{time.perf_counter() - began:.0f} s", file=sys.stderr)
    return 0


def recovery_tradeoff(argv: list[str]) -> int:
    """`recovered` alone (issue 35's clearing vs flapping): per odds, a regression 20%
    down on a series with 12% noise per run for 30 days (120 runs), then back: the share
    of series it closes mid-drop (a flap) and the runs it takes to close once back."""
    from bigbinf.history import regression

    ap = argparse.ArgumentParser(description=recovery_tradeoff.__doc__)
    ap.add_argument("--recovery-tradeoff", action="store_true")
    ap.add_argument("--series", type=int, default=400)
    ap.add_argument("--drop", type=float, default=0.2)
    ap.add_argument("--noise", type=float, default=0.12)
    ap.add_argument("--odds", default="200,1000,3000")
    ap.add_argument("--seed", type=int, default=36)
    args = ap.parse_args(argv)
    level, slow_runs, back_runs = math.log(1 - args.drop), 120, 20
    print(
        f"{args.series} series {args.drop:.0%} down for {slow_runs} runs, SD {args.noise:.0%} per run (log), then back"
    )
    print("| odds | closed mid-drop (a flap) | runs to close once back: median (90th percentile) |")
    print("| ---: | ---: | ---: |")
    saved = regression.RECOVERY_ODDS
    try:
        for odds in (float(x) for x in args.odds.split(",")):
            regression.RECOVERY_ODDS = odds
            rng = np.random.default_rng(args.seed)
            flapped, clears = 0, []
            for _ in range(args.series):
                noise = float(np.std(rng.normal(0, args.noise, 84), ddof=1))  # the baseline's estimate
                runs = list(level + rng.normal(0, args.noise, slow_runs))
                if any(regression.recovered(runs[:n], noise, 0.1, 84) for n in range(6, slow_runs + 1)):
                    flapped += 1
                    continue
                back = list(rng.normal(0, args.noise, back_runs))
                done = [n for n in range(1, back_runs + 1) if regression.recovered(runs + back[:n], noise, 0.1, 84)]
                clears.append(done[0] if done else back_runs + 1)
            q90 = float(np.percentile(clears, 90)) if clears else math.nan
            median = statistics.median(clears) if clears else math.nan
            print(f"| {odds:g} | {flapped / args.series:.1%} | {median:g} ({q90:g}) |", flush=True)
    finally:
        regression.RECOVERY_ODDS = saved
    return 0


def family_sizes(argv: list[str]) -> int:
    """False openings and detection against the exporter's number of series (issue 45):
    per family size (series per exporter, the Benjamini-Hochberg family), unchanged
    series with 12% noise per run (false openings per 1,000 series-days after the
    warm-up), and series that drop (30% on a quiet 3% series, 20% on a noisy 12% one:
    the round of the first opening, the first slow run being round 1), a round every 6
    hours (PERSIST_HOURS), the test as the exporter runs it (History.add each round)."""
    ap = argparse.ArgumentParser(description=family_sizes.__doc__)
    ap.add_argument("--family-sizes", default="1,2,12,60,1000")
    ap.add_argument("--series-days", type=float, default=4000.0, help="unchanged series-days per family size")
    ap.add_argument("--drops", type=int, default=6, help="dropped series of each kind per family size")
    ap.add_argument("--warmup-days", type=int, default=28)
    ap.add_argument("--drop-days", type=int, default=4, help="days a drop lasts (the detection window)")
    ap.add_argument("--seed", type=int, default=45)
    args = ap.parse_args(argv)
    rounds_per_day = len(PERSIST_HOURS)
    settings = RegressionSettings(rounds_per_day=rounds_per_day)
    kinds = {"quiet 30%": (0.03, 0.3), "noisy 20%": (0.12, 0.2)}
    print(f"settings: {settings}; series_alpha {settings.series_alpha:.3g}; rounds every 6 h")
    print()
    print(
        "| series per exporter | unchanged series-days | false openings | per 1,000 series-days "
        "| quiet 30% drop: opened on slow run, median (max) | noisy 20% drop: median (max) | missed |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rng = np.random.default_rng(args.seed)
    began = time.perf_counter()
    for family in (int(x) for x in args.family_sizes.split(",")):
        # Each exporter: `family` series; the dropped ones among them (one per exporter
        # while there are drops to place, more in a large family), the rest unchanged
        # until the series-days are reached.
        dropped_per = max(1, min(2 * args.drops, family // 20)) if family > 1 else 1
        clean_days = args.drop_days
        false_openings, series_days = 0, 0.0
        delays: dict[str, list[int]] = {kind: [] for kind in kinds}
        missed = 0
        drops_left = dict.fromkeys(kinds, args.drops)
        while series_days < args.series_days or any(drops_left.values()):
            unchanged = family if not any(drops_left.values()) else family - dropped_per
            need = args.series_days - series_days
            clean_days = max(args.drop_days, math.ceil(need / max(unchanged, 1))) if unchanged else args.drop_days
            days = args.warmup_days + clean_days
            start_day = 1_700_006_400.0 - 1_700_006_400.0 % DAY
            times = np.array([start_day + d * DAY + h * HOUR for d in range(days) for h in PERSIST_HOURS])
            drop_at = len(times) - args.drop_days * rounds_per_day
            plan: list[tuple[str | None, np.ndarray]] = []
            for j in range(family):
                kind = None
                if j >= family - unchanged:
                    pass
                else:
                    kind = next((k for k, left in drops_left.items() if left > 0), None)
                    if kind is not None:
                        drops_left[kind] -= 1
                noise, drop = kinds[kind] if kind else (0.12, 0.0)
                log_x = math.log(25e6) + rng.normal(0, noise, len(times))
                if kind:
                    log_x[drop_at:] += math.log(1 - drop)
                plan.append((kind, log_x))
            history = History(settings)
            opened = [np.zeros(len(times), dtype=bool) for _ in plan]
            for i, t in enumerate(times):
                for j, (_, log_x) in enumerate(plan):
                    history.add(j, float(t), float(math.exp(log_x[i])))
                    track = history.tracks.get(j)
                    opened[j][i] = bool(track and track.episode is not None)
            warm = args.warmup_days * rounds_per_day
            for (kind, _), fired in zip(plan, opened, strict=True):
                if kind is None:
                    f = fired[warm:]
                    false_openings += int(np.sum(f[1:] & ~f[:-1])) + int(bool(f[0]))
                    series_days += len(f) / rounds_per_day
                else:
                    hits = np.nonzero(fired[drop_at:])[0]
                    if len(hits):
                        delays[kind].append(int(hits[0]) + 1)
                    else:
                        missed += 1

        def cell(values: list[int]) -> str:
            return f"{statistics.median(values):g} ({max(values)})" if values else "never"

        rate = 1000 * false_openings / series_days if series_days else math.nan
        print(
            f"| {family} | {series_days:,.0f} | {false_openings} | {rate:.2f} | {cell(delays['quiet 30%'])} "
            f"| {cell(delays['noisy 20%'])} | {missed} |",
            flush=True,
        )
    print(f"\n{time.perf_counter() - began:.0f} s", file=sys.stderr)
    return 0


def ties(argv: list[str]) -> int:
    """The exact p-value with ties against the normal approximation the test used before:
    three recent runs below a baseline with tied residuals, and the cost of a test."""
    from bigbinf.history import regression

    ap = argparse.ArgumentParser(description=ties.__doc__)
    ap.add_argument("--ties", action="store_true")
    ap.add_argument("--seed", type=int, default=45)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print("| baseline runs | tied (zeros) | exact p | normal approximation | exact: µs a test | normal: µs a test |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, tied in ((28, 3), (56, 4), (84, 6), (300, 20)):
        y = rng.normal(0, 0.03, n)
        y[:tied] = 0.0
        x = np.array([-0.3, -0.3, -0.31])
        exact = regression.mann_whitney_less(x, y)
        approx = regression.mann_whitney_less_normal(x, y)
        reps = 300
        t = time.perf_counter()
        for _ in range(reps):
            regression.mann_whitney_less(rng.normal(0, 0.03, 3), y)
        exact_us = (time.perf_counter() - t) / reps * 1e6
        t = time.perf_counter()
        for _ in range(reps):
            regression.mann_whitney_less_normal(rng.normal(0, 0.03, 3), y)
        normal_us = (time.perf_counter() - t) / reps * 1e6
        print(f"| {n} | {tied} | {exact:.3g} | {approx:.3g} | {exact_us:.0f} | {normal_us:.0f} |", flush=True)
    return 0


def conditions(argv: list[str]) -> int:
    """False openings on unchanged series under a moment's shared conditions (issue 45):
    Student-t noise (heavy tails, --df) with dips of a round or more (--dip-rate a round,
    --dip-depth, --dip-rounds), or a round of --repetitions back-to-back runs sharing an
    offset (--round-offset SD) beside --rep-noise each; a round every 6 hours, one
    exporter of --family series (the BH family); false openings per 1,000 series-days
    after the warm-up, and the slow round a quiet (3%) 30% drop opens on (the first slow
    round is 1); --day-offset gives each day a level of its own (runs correlated within
    a day, issue 45 B5), --day-persistence its correlation with the day before.  Runs on
    any tree whose bigbinf.history.regression is importable (PYTHONPATH=/work/main/exporter
    for the code before): without
    RegressionSettings.repetitions a round's runs are tested one by one (as before)."""
    ap = argparse.ArgumentParser(description=conditions.__doc__)
    ap.add_argument("--conditions", action="store_true")
    ap.add_argument("--family", type=int, default=1)
    ap.add_argument("--series-days", type=float, default=4000.0)
    ap.add_argument("--warmup-days", type=int, default=28)
    ap.add_argument("--df", type=float, default=0.0, help="Student-t degrees of freedom (0: Gaussian)")
    ap.add_argument("--noise", type=float, default=0.12, help="per-run SD (log) of the unchanged series")
    ap.add_argument("--dip-rate", type=float, default=0.0)
    ap.add_argument("--dip-depth", default="0.1,0.3", help="a dip's drop, uniform between these")
    ap.add_argument("--dip-rounds", type=int, default=1, help="a dip lasts 1 to this many rounds")
    ap.add_argument("--repetitions", type=int, default=1)
    ap.add_argument("--round-offset", type=float, default=0.0, help="SD (log) of each round's shared offset")
    ap.add_argument("--rep-noise", type=float, default=0.03, help="SD (log) of each repetition, with repetitions")
    ap.add_argument("--one-by-one", action="store_true", help="a round's repetitions as runs (the code before)")
    ap.add_argument(
        "--day-offset", type=float, default=0.0, help="SD (log) of each day's level, shared by its rounds (B5)"
    )
    ap.add_argument(
        "--day-persistence", type=float, default=0.0, help="a day's level's correlation with the day before"
    )
    ap.add_argument("--drops", type=int, default=6, help="quiet series dropping --drop-size (detection)")
    ap.add_argument("--drop-size", type=float, default=0.3, help="the dropped series' drop")
    ap.add_argument(
        "--dropped-in-conditions",
        action="store_true",
        help="the dropped series under the conditions too (its own noise, dips and day levels), not quiet",
    )
    ap.add_argument("--seed", type=int, default=45)
    args = ap.parse_args(argv)
    rounds_per_day = len(PERSIST_HOURS)
    reps = max(1, args.repetitions)
    grouped = reps > 1 and not args.one_by_one and "repetitions" in RegressionSettings.__dataclass_fields__
    settings = (
        RegressionSettings(rounds_per_day=rounds_per_day, repetitions=reps)  # type: ignore[call-arg]
        if grouped
        else RegressionSettings(rounds_per_day=rounds_per_day * reps)  # each run a look, as before
    )
    lo, hi = (float(x) for x in args.dip_depth.split(","))
    rng = np.random.default_rng(args.seed)
    start_day = 1_700_006_400.0 - 1_700_006_400.0 % DAY

    def noise(n: int, sd: float) -> np.ndarray:
        if args.df:
            out: np.ndarray = sd / math.sqrt(args.df / (args.df - 2)) * rng.standard_t(args.df, n)
            return out
        return rng.normal(0, sd, n)

    def day_levels(days: int) -> np.ndarray:
        """Each day's level: AR(1) from day to day (--day-persistence), SD --day-offset."""
        phi = args.day_persistence
        shocks = rng.normal(0, args.day_offset * math.sqrt(1 - phi**2), days)
        out = np.empty(days)
        level = rng.normal(0, args.day_offset)
        for d in range(days):
            level = phi * level + shocks[d] if d else level
            out[d] = level
        return out

    def walk(days: int, family: int, drop: bool) -> tuple[int, list[int | None]]:
        """One exporter: its false openings after the warm-up, and each dropped series' round."""
        n = days * rounds_per_day
        times = np.array([start_day + d * DAY + h * HOUR for d in range(days) for h in PERSIST_HOURS])
        dips = np.zeros(n)
        i = 0
        while i < n:
            if rng.random() < args.dip_rate:
                length = int(rng.integers(1, args.dip_rounds + 1))
                dips[i : i + length] += math.log(1 - rng.uniform(lo, hi))
                i += length
            else:
                i += 1
        rounds = []
        for _ in range(family):
            # A day's level (--day-offset), the same for each of its rounds: runs correlated
            # within a day, with no change (issue 45 B5).
            days_level = np.repeat(day_levels(days), rounds_per_day) if args.day_offset else 0.0
            offset = noise(n, args.round_offset if reps > 1 else args.noise) + dips + days_level
            rounds.append((offset, args.rep_noise if reps > 1 else 0.0, None))
        if drop:
            # The dropped series: quiet (3%), or the first series' own conditions.
            offset = rounds[0][0].copy() if args.dropped_in_conditions else rng.normal(0, 0.03, n)
            offset[n - 4 * rounds_per_day :] += math.log(1 - args.drop_size)
            rep_sd = rounds[0][1] if args.dropped_in_conditions else 0.03 if reps > 1 else 0.0
            rounds[0] = (offset, rep_sd, n - 4 * rounds_per_day)
        history = History(settings)
        state = [False] * family
        false_openings, opened_on = 0, [None] * family  # type: list[int | None]
        warm = args.warmup_days * rounds_per_day
        for i, t in enumerate(times):
            for j, (offset, rep_sd, drop_at) in enumerate(rounds):
                for r in range(reps):
                    x = offset[i] + (rng.normal(0, rep_sd) if rep_sd else 0.0)
                    history.add(j, float(t) + r * 120.0, 25e6 * math.exp(x))
                track = history.tracks.get(j)
                now = bool(track and track.episode is not None)
                if now and not state[j] and i >= warm:
                    if drop_at is None:
                        false_openings += 1
                    elif opened_on[j] is None and i >= drop_at:
                        opened_on[j] = i - drop_at + 1
                state[j] = now
        return false_openings, [opened_on[j] for j, (_, _, d) in enumerate(rounds) if d is not None]

    began = time.perf_counter()
    false_total, series_days, delays = 0, 0.0, []
    drops_left = args.drops
    while series_days < args.series_days or drops_left:
        drop = drops_left > 0  # the dropped series' exporters first, each 4 days past the warm-up
        left = args.series_days - series_days
        extra = 4 if drop or left <= 0 else min(365, max(4, math.ceil(left / args.family)))
        count, opened = walk(args.warmup_days + extra, args.family, drop)
        false_total += count
        series_days += (args.family - (1 if drop else 0)) * extra
        delays += opened
        drops_left -= 1 if drop else 0
    found = [d for d in delays if d is not None]
    how = "one observation (their median)" if grouped else "one by one"
    print(
        f"family {args.family}, df {args.df or 'Gaussian'}, noise {args.noise}, dips {args.dip_rate}/round "
        f"({args.dip_depth}, up to {args.dip_rounds} rounds), repetitions {reps} ({how}, round offset "
        f"{args.round_offset}, each {args.rep_noise}), day offset {args.day_offset} (persistence "
        f"{args.day_persistence}); settings {settings}"
    )
    print(
        f"false openings: {false_total} in {series_days:,.0f} series-days = "
        f"{1000 * false_total / series_days:.2f} per 1,000; "
        f"{'in the conditions' if args.dropped_in_conditions else 'quiet'} {args.drop_size:.0%} drop "
        "opened on slow round: "
        f"{statistics.median(found) if found else 'never'} (max {max(found) if found else '-'}), "
        f"{len(delays) - len(found)} missed"
    )
    print(f"{time.perf_counter() - began:.0f} s", file=sys.stderr)
    return 0


def breaks(argv: list[str]) -> int:
    """The day gate's two breaks (issue 45, its breaker): quiet series (3% a run), a round
    every 6 hours, one series per exporter.  step: the series steps up 1.2x at day 21 (a
    faster path) and drops 30% at day 35 (the slow run it opens on, missed within 4
    days, and openings before the drop).  weekly: its Mondays (UTC) run at 0.8x every week
    for --weeks weeks (openings from day 35 on, per 1,000 series-days); then the same
    series with its whole level 30% down from a random round after day 49, and with its
    Mondays 0.5x instead of 0.8x from the first Monday after day 49 (the slow run each
    opens on, missed within 4 days).  noisy-weekly (breaker B2, not in the default): 12%
    noise a run, Mondays at 0.5-0.7x every week, unchanged (openings from day 35 on) and
    with the whole series 30% or 40% down after day 42, beside the same drops without
    the weekly pattern."""
    import datetime as dt

    ap = argparse.ArgumentParser(description=breaks.__doc__)
    ap.add_argument("--breaks", default="step,weekly")
    ap.add_argument("--series", type=int, default=40)
    ap.add_argument("--weeks", type=int, default=13)
    ap.add_argument("--seed", type=int, default=45)
    ap.add_argument("--bad-every", type=float, default=10.0, help="bad-days: a day in this many is bad")
    ap.add_argument("--bad-level", type=float, default=0.6, help="bad-days: a bad day's level")
    ap.add_argument("--bad-family", type=int, default=12, help="bad-days: the larger exporter's series")
    args = ap.parse_args(argv)
    rounds_per_day = len(PERSIST_HOURS)
    settings = RegressionSettings(rounds_per_day=rounds_per_day)
    rng = np.random.default_rng(args.seed)
    start_day = 1_700_006_400.0 - 1_700_006_400.0 % DAY

    def times_of(days: int) -> np.ndarray:
        return np.array([start_day + d * DAY + h * HOUR for d in range(days) for h in PERSIST_HOURS])

    def openings(times: np.ndarray, log_x: np.ndarray) -> list[int]:
        history = History(settings)
        out, was = [], False
        for i, t in enumerate(times):
            history.add(0, float(t), float(math.exp(log_x[i])))
            track = history.tracks.get(0)
            now = bool(track and track.episode is not None)
            if now and not was:
                out.append(i)
            was = now
        return out

    def detection(name: str, cases: list[tuple[np.ndarray, np.ndarray, int]]) -> None:
        found, missed, before = [], 0, 0
        for times, log_x, at in cases:
            opened = openings(times, log_x)
            before += sum(1 for i in opened if i < at)
            after = [i - at + 1 for i in opened if i >= at]
            if after and after[0] <= 4 * rounds_per_day:
                found.append(after[0])
            else:
                missed += 1
        cell = f"{statistics.median(found):g} (max {max(found)})" if found else "never"
        print(f"| {name} | {len(cases)} | {cell} | {missed} | {before} |", flush=True)

    def unchanged(name: str, times: np.ndarray, log_xs: list[np.ndarray]) -> None:
        """The openings of unchanged series from day 35 on, per 1,000 series-days."""
        warm = int(np.searchsorted(times, start_day + 35 * DAY))
        false_openings = sum(sum(1 for i in openings(times, log_x) if i >= warm) for log_x in log_xs)
        series_days = len(log_xs) * (len(times) - warm) / rounds_per_day
        print(
            f"| {name} | {len(log_xs)} | - | - | {false_openings} openings in {series_days:,.0f} series-days "
            f"({1000 * false_openings / series_days:.2f} per 1,000) |",
            flush=True,
        )

    def mondays(times: np.ndarray) -> np.ndarray:
        return np.array([dt.datetime.fromtimestamp(float(t), dt.UTC).weekday() == 0 for t in times])

    began = time.perf_counter()
    print(f"settings: {settings}; quiet series (3% a run) but where named, rounds every 6 h, seed {args.seed}")
    print("| scenario | series | opened on slow run, median (max) | missed within 4 days | opened before the drop |")
    print("| --- | ---: | ---: | ---: | ---: |")
    kinds = args.breaks.split(",")
    if "step" in kinds:
        times = times_of(39)
        cases = []
        for _ in range(args.series):
            log_x = math.log(25e6) + rng.normal(0, 0.03, len(times))
            log_x[times >= start_day + 21 * DAY] += math.log(1.2)
            at = int(np.searchsorted(times, start_day + 35 * DAY))
            log_x[at:] += math.log(0.7)
            cases.append((times, log_x, at))
        detection("step up 1.2x at day 21, 30% drop at day 35", cases)
    if "weekly" in kinds:
        times = times_of(7 * args.weeks)
        monday = mondays(times)
        unchanged(
            f"Mondays 0.8x, no change, days 35-{7 * args.weeks}",
            times,
            [
                math.log(25e6) + rng.normal(0, 0.03, len(times)) + np.where(monday, math.log(0.8), 0.0)
                for _ in range(args.series)
            ],
        )
        times = times_of(63)
        monday = mondays(times)
        whole, only = [], []
        first_monday = int(np.nonzero(monday & (times >= start_day + 49 * DAY))[0][0])
        for _ in range(args.series):
            base = math.log(25e6) + rng.normal(0, 0.03, len(times)) + np.where(monday, math.log(0.8), 0.0)
            at = int(rng.integers(49 * rounds_per_day, 59 * rounds_per_day))
            log_x = base.copy()
            log_x[at:] += math.log(0.7)
            whole.append((times, log_x, at))
            log_x = base.copy()
            log_x[first_monday:] += np.where(monday[first_monday:], math.log(0.5 / 0.8), 0.0)
            only.append((times, log_x, first_monday))
        detection("Mondays 0.8x, the whole series 30% down after day 49", whole)
        detection("Mondays 0.8x, then Mondays 0.5x after day 49", only)
    if "noisy-weekly" in kinds:
        # Breaker B2: a noisy series (12% a run) whose Mondays run at 0.5-0.7x (one factor
        # a series) every week; the whole series 30% or 40% down from a random round of
        # days 42-49 (the slow run it opens on); unchanged, openings from day 35 on, with
        # the factor the same every week and drawn afresh each week.
        times = times_of(7 * args.weeks)
        monday = mondays(times)
        weeks = ((times - start_day) // (7 * DAY)).astype(int)
        for label, afresh in (("the same", False), ("drawn afresh", True)):
            log_xs = []
            for _ in range(args.series):
                factor = rng.uniform(0.5, 0.7, args.weeks + 1)[weeks] if afresh else rng.uniform(0.5, 0.7)
                log_xs.append(math.log(25e6) + rng.normal(0, 0.12, len(times)) + np.where(monday, np.log(factor), 0.0))
            unchanged(
                f"12% noise, Mondays 0.5-0.7x ({label} every week), no change, days 35-{7 * args.weeks}", times, log_xs
            )
        times = times_of(56)
        monday = mondays(times)
        for name, pattern in (("Mondays 0.5-0.7x", True), ("no weekly pattern", False)):
            for drop in (0.3, 0.4):
                cases = []
                for _ in range(args.series):
                    factor = math.log(rng.uniform(0.5, 0.7)) if pattern else 0.0
                    log_x = math.log(25e6) + rng.normal(0, 0.12, len(times)) + np.where(monday, factor, 0.0)
                    at = int(rng.integers(42 * rounds_per_day, 49 * rounds_per_day))
                    log_x[at:] += math.log(1 - drop)
                    cases.append((times, log_x, at))
                detection(f"12% noise, {name}, the whole series {drop:.0%} down after day 42", cases)
    if "bad-days" in kinds:
        bad_days(args, settings, times_of, mondays, rng)
    print(f"\n{time.perf_counter() - began:.0f} s", file=sys.stderr)
    return 0


def bad_days(args: argparse.Namespace, settings: RegressionSettings, times_of, mondays, rng) -> None:  # type: ignore[no-untyped-def]
    """Breaker B1 (issue 45): whole bad days on an otherwise steady series (3% a run), a
    day in --bad-every at --bad-level (each day drawn on its own, all its rounds), one
    series per exporter and --bad-family per exporter (each series its own bad days):
    the openings from day 35 on per 1,000 series-days (as the alert fires: `for: 5m` is
    less than a round, so every opening pages), the share of bad days that paged, the
    rounds an alert stayed on after its bad day ended; then the same series with a 30% or
    50% drop of the whole series from a random round of days 42-49 (the slow run from
    which the alert fires, missed within 4 and 7 days), beside the same drops without
    bad days."""
    rounds_per_day = len(PERSIST_HOURS)
    start_day = 1_700_006_400.0 - 1_700_006_400.0 % DAY

    def walk(times: np.ndarray, log_xs: list[np.ndarray]) -> list[np.ndarray]:
        """Each series' alert (an open regression) after each round, the exporter's series
        adding their runs round by round."""
        history = History(settings)
        out = [np.zeros(len(times), dtype=bool) for _ in log_xs]
        for i, t in enumerate(times):
            for j, log_x in enumerate(log_xs):
                history.add(j, float(t), float(math.exp(log_x[i])))
                track = history.tracks.get(j)
                out[j][i] = bool(track and track.episode is not None)
        return out

    def series(times: np.ndarray, level: float, every: float) -> tuple[np.ndarray, np.ndarray]:
        days = ((times - start_day) // DAY).astype(int)
        bad = rng.random(int(days.max()) + 1) < (1.0 / every if every else 0.0)
        return math.log(25e6) + rng.normal(0, 0.03, len(times)) + np.where(bad[days], math.log(level), 0.0), bad

    print()
    print(
        "| bad days | series per exporter | series-days (from day 35) | alerts (openings) | per 1,000 series-days "
        "| bad days that paged | rounds firing after the bad day, median (max) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    times = times_of(7 * args.weeks)
    days = ((times - start_day) // DAY).astype(int)
    warm = int(np.searchsorted(times, start_day + 35 * DAY))
    for family in (1, args.bad_family):
        alerts, series_days, bad_total, bad_paged, after = 0, 0.0, 0, 0, []
        for _ in range(max(1, args.series // family)):
            drawn = [series(times, args.bad_level, args.bad_every) for _ in range(family)]
            for fired, (_, bad) in zip(walk(times, [x for x, _ in drawn]), drawn, strict=True):
                f = fired[warm:]
                alerts += int(np.sum(f[1:] & ~f[:-1])) + int(bool(f[0]))
                series_days += len(f) / rounds_per_day
                bad_round = bad[days]
                for d in np.nonzero(bad)[0].tolist():
                    if d < 35 or (d + 1) * rounds_per_day > len(times):
                        continue
                    bad_total += 1
                    rounds = slice(d * rounds_per_day, (d + 1) * rounds_per_day)
                    if fired[rounds].any() and not fired[d * rounds_per_day - 1]:
                        bad_paged += 1
                        tail = fired[(d + 1) * rounds_per_day :]
                        normal = ~bad_round[(d + 1) * rounds_per_day :]
                        off = np.nonzero(~tail | ~normal)[0]
                        after.append(int(off[0]) if len(off) else len(tail))
        cell = f"{statistics.median(after):g} ({max(after)})" if after else "-"
        print(
            f"| 1 in {args.bad_every:g} at {args.bad_level:g}x | {family} | {series_days:,.0f} | {alerts} "
            f"| {1000 * alerts / series_days:.2f} | {bad_paged} of {bad_total} | {cell} |",
            flush=True,
        )
    print()
    print("| scenario | series | firing from slow run, median (max) | missed within 4 days | within 7 days |")
    print("| --- | ---: | ---: | ---: | ---: |")
    times = times_of(60)
    for every, label in ((args.bad_every, f"bad days 1 in {args.bad_every:g} at {args.bad_level:g}x"), (0.0, "none")):
        for drop in (0.3, 0.5):
            found, missed4, missed7 = [], 0, 0
            for _ in range(args.series):
                log_x, _ = series(times, args.bad_level, every)
                at = int(rng.integers(42 * rounds_per_day, 49 * rounds_per_day))
                log_x[at:] += math.log(1 - drop)
                fired = walk(times, [log_x])[0]
                hits = np.nonzero(fired[at:])[0]  # firing from that slow run (a bad day's page may run on)
                first = int(hits[0]) + 1 if len(hits) else None
                if first is not None and first <= 7 * rounds_per_day:
                    found.append(first)
                missed4 += first is None or first > 4 * rounds_per_day
                missed7 += first is None or first > 7 * rounds_per_day
            cell = f"{statistics.median(found):g} ({max(found)})" if found else "never"
            print(
                f"| {label}, the whole series {drop:.0%} down after day 42 | {args.series} | {cell} | {missed4} "
                f"| {missed7} |",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:] == ["--cost"]:
        return cost()
    if argv is None and "--recovery-tradeoff" in sys.argv[1:]:
        return recovery_tradeoff(sys.argv[1:])
    if argv is None and "--lasting" in sys.argv[1:]:
        return lasting(sys.argv[1:])
    if argv is None and any(a.startswith("--family-sizes") for a in sys.argv[1:]):
        return family_sizes(sys.argv[1:])
    if argv is None and "--ties" in sys.argv[1:]:
        return ties(sys.argv[1:])
    if argv is None and "--conditions" in sys.argv[1:]:
        return conditions(sys.argv[1:])
    if argv is None and any(a.startswith("--breaks") for a in sys.argv[1:]):
        return breaks(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--journal", action="append", type=Path, required=True, help="real runs to fit noise from")
    ap.add_argument("--series", type=int, default=144, help="series per (drop, shape, noise) case")
    ap.add_argument("--days", type=int, default=50)
    ap.add_argument("--warmup-days", type=int, default=35, help="no drop before this (the baseline fills)")
    ap.add_argument("--schedule", choices=sorted(SCHEDULES), default="study")
    ap.add_argument("--per-exporter", type=int, default=12, help="series per exporter (the BH family)")
    ap.add_argument("--noise-scale", type=float, action="append", help="multiply the real residuals (default 1)")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--fdr", type=float, default=RegressionSettings.fdr)
    ap.add_argument("--material-drop", type=float, default=RegressionSettings.material_drop)
    ap.add_argument("--recent-runs", type=int, default=RegressionSettings.recent_runs)
    ap.add_argument("--shape", action="append", help="only these shapes (flat, peak15, from ...)")
    args = ap.parse_args(argv)
    profiles = fit_profiles(args.journal)
    if not profiles:
        print("no series with 20 ok runs in the journals", file=sys.stderr)
        return 1
    shapes = {"flat": named_shape("flat"), "peak15": named_shape("peak15")}
    for p in profiles:
        if p.shape is not None:
            shapes[f"from {p.name}"] = p.shape
    hours = SCHEDULES[args.schedule]
    rounds_per_day = len(hours)
    settings = RegressionSettings(fdr=args.fdr, material_drop=args.material_drop, recent_runs=args.recent_runs)
    if args.shape:
        shapes = {name: shape for name, shape in shapes.items() if name in args.shape}
    rng = np.random.default_rng(args.seed)
    print(f"profiles: {len(profiles)} real series; schedule {args.schedule} ({rounds_per_day} rounds a day)")
    for p in profiles:
        sd = float(np.std(p.residuals))
        print(f"  {p.name}: {len(p.residuals)} runs, residual SD {sd:.3f} (log), lag-1 {p.phi:.2f}")
    print(f"settings: {settings}")
    print()
    print(
        "| shape | noise x | drop | detector | detected within 3 rounds | median delay (rounds) "
        "| false alarms / 1,000 series-days |"
    )
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
    began = time.perf_counter()
    tests = 0
    for scale in args.noise_scale or [1.0]:
        for shape_name, shape in shapes.items():
            for drop in (0.0, 0.1, 0.2, 0.4):
                scores = {"significance": Score(), "fixed 0.7": Score()}
                all_series = []
                for k in range(args.series):
                    profile = profiles[k % len(profiles)]
                    times, log_x = generate(profile, shape, scale, hours, args.days, rng)
                    drop_round = None
                    if drop:
                        drop_round = int(rng.integers(args.warmup_days * rounds_per_day, len(times) - 3))
                        log_x[drop_round:] += math.log(1 - drop)
                    all_series.append(Series(times, log_x, drop_round))
                for g in range(0, len(all_series), args.per_exporter):
                    group = all_series[g : g + args.per_exporter]
                    for s, fired in zip(group, significance_alerts(group, settings), strict=True):
                        scores["significance"].add(s, fired, rounds_per_day)
                        tests += len(s.times)
                    for s in group:
                        scores["fixed 0.7"].add(s, fixed_rule_alerts(s.times, np.exp(s.log_x)), rounds_per_day)
                for name, score in scores.items():
                    share, median, rate = score.row()
                    what = f"{drop:.0%}" if drop else "none"
                    print(f"| {shape_name} | {scale:g} | {what} | {name} | {share} | {median} | {rate} |", flush=True)
    elapsed = time.perf_counter() - began
    print(f"\n{tests} significance tests in {elapsed:.1f} s (with the fixed rule's emulation)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
