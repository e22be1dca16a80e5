"""`bigbinf-exporter plan-move --remote R --size 40TiB [--files N] [--by TIME]`: advice for
the person who has to move the data (issue 28).  The model is bigbinf/history/moveplan.py's;
this module reads the journals, prints the ranking, the recommendation and what it
extrapolates from, or refuses with the reason."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import zoneinfo
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from bigbinf.config import Config, ConfigError, load_config, parse_size
from bigbinf.history.moveplan import (
    BEFORE_ACCEPTED,
    BEFORE_REGRESSION,
    EVIDENCE,
    MIN_INTERVAL_DOF,
    Fit,
    Plan,
    Prediction,
    best_start,
    configured_only,
    duration_text,
    levels,
    local_hour,
    plan,
    runnable_protocols,
    since_regressions,
    size_label,
)
from bigbinf.history.regression import Track, apply_event
from bigbinf.history.regression_state import RegressionJournal
from bigbinf.journal import checkpoint
from bigbinf.journal.store import BaselineJournal, Journal, baseline_path
from bigbinf.runs import Run
from bigbinf.usage import UsageError, parse_when

LEVEL = 0.9
# A run journaled this far ahead of the host's clock is from a clock that was wrong (NTP
# stepped it back): left out as FUTURE, never the anchor of the window (a round's own
# runs start within minutes of each other; an hour covers a slow round's last transfer).
FUTURE_SLACK = 3600.0
FUTURE = "dated in the future"
FUTURE_ALONE = 2 * 86400.0  # a latest run this long after every other is alone


def register(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    p = subparsers.add_parser(
        "plan-move",
        parents=list(parents),
        help="how long moving SIZE to or from a remote would take, per protocol, setting and start hour",
        description="Predict a move's duration from everything measured to the remote (scheduled rounds, "
        "tuning sweeps, the path's bandwidth): the protocols and settings ranked, a 90% prediction interval "
        "for each start hour, a recommendation, and what it extrapolates from (docs/report.md, plan-move).",
    )
    p.add_argument("--remote", required=True, help="the remote (config remotes.NAME)")
    p.add_argument("--size", required=True, help="bytes to move: 40TiB, 500GB, 1073741824")
    p.add_argument("--files", type=int, default=1, help="how many files they are (default 1)")
    p.add_argument("--by", metavar="WHEN", help="deadline (YYYY-MM-DD[THH:MM], local time of schedule.timezone)")
    p.add_argument("--direction", choices=["download", "upload"], default="download")
    p.add_argument("--journal", help="journal to read (default: the configuration's journal.path)")
    p.add_argument("--json", action="store_true", help="the whole plan as JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    try:
        return _run(args, out)
    except (UsageError, ConfigError) as exc:
        text = exc.render() if isinstance(exc, ConfigError) else str(exc)
        print(f"plan-move: {text}", file=sys.stderr)
        return getattr(exc, "code", 2) if isinstance(exc, UsageError) else 1


def _run(args: argparse.Namespace, out: TextIO) -> int:
    config = load_config(args.config_file)
    if args.remote not in config.remotes:
        raise UsageError(
            f"--remote {args.remote}: not a remote of {args.config_file}; configured: {', '.join(config.remotes)}"
        )
    try:
        size = parse_size(args.size)
    except ValueError as exc:
        raise UsageError(f"--size: {exc}") from None
    if size <= 0 or args.files < 1:
        raise UsageError("--size must be more than 0 bytes and --files at least 1")
    zone = zoneinfo.ZoneInfo(config.schedule.timezone)
    journal = Journal(args.journal or config.journal.path)
    now = time.time()
    runs, older = journal_runs(journal, args.remote, args.direction, config.moves.history, now)
    runnable = runnable_protocols(config.protocols, args.direction)
    runs, unconfigured = configured_only(runs, runnable)
    for option, latest in older.items():
        if option.split(" (")[0] not in runnable:
            unconfigured.setdefault(option, (latest, 0))
    older = {o: t for o, t in older.items() if o not in unconfigured}
    if not any(not r.left_out for r in runs):
        why = _left_out_words(runs)
        print(
            f"plan-move: refused: nothing measured to {args.remote} ({args.direction}) in {journal.path} that the "
            f"model can use{why}: no ok transfer to predict from; let the scheduled rounds run (or run a sweep) first",
            file=sys.stderr,
        )
        return 1
    bandwidth = _bandwidth(args.journal or config.journal.path, args.remote)
    regressed, accepted = regression_levels(journal.path, args.remote, args.direction)
    regressed = {p: since for p, since in regressed.items() if p in runnable}  # the others are set apart
    runs = since_regressions(runs, regressed, accepted)  # the header counts them as the options do
    configured = configured_protocols(config, args.remote, args.direction)
    result = plan(
        runs,
        args.remote,
        size,
        args.files,
        zone,
        bandwidth,
        LEVEL,
        local_hour(now, zone),
        configured,
        args.direction,
        older,
        regressed,
        accepted,
        unconfigured,
    )
    deadline = parse_when(args.by, _offset_hours(zone), "--by") if args.by else None
    if deadline is not None and deadline <= now:
        when = datetime.fromtimestamp(deadline, zone).strftime("%Y-%m-%d %H:%M")
        raise UsageError(f"--by {args.by}: {when} ({zone.key}) has passed; give a deadline in the future")
    if args.json:
        json.dump(as_json(result, runs, zone), out, indent=2)
        out.write("\n")
    else:
        out.write(render(result, runs, zone, deadline, args.direction))
    return 0 if result.ranked else 1


def journal_runs(
    journal: Journal, remote: str, direction: str, history: float, now: float | None = None
) -> tuple[list[Run], dict[str, float]]:
    """The runs the exporter's own predictions stand on (its journal's checkpoint, not the
    whole journal: a year of results is read in a second), those the model leaves out
    with them: the last `history` seconds before the remote's latest run that is not from
    the future (more than FUTURE_SLACK after `now`: left out as FUTURE, counted, never the
    window's anchor); and each option measured only before them, with its latest run
    (said so, not "never measured")."""
    every = checkpoint.of(journal).move_basis(direction, remote, math.inf)
    if not every:
        return [], {}
    ahead = (time.time() if now is None else now) + FUTURE_SLACK
    present = sorted(r.timestamp for r in every if r.timestamp <= ahead)
    # The latest run with another within FUTURE_ALONE before it: a lone run far after
    # every other is one a clock ahead journaled (the host's clock is right again by now,
    # or it is still ahead and says nothing); the window ends at the latest real one.
    anchor = next(
        (t for i, t in reversed(list(enumerate(present))) if i and t - present[i - 1] <= FUTURE_ALONE),
        present[-1] if present else None,
    )
    if anchor is None:
        return [replace(r, left_out=FUTURE) for r in every], {}
    every = [replace(r, left_out=FUTURE) if r.timestamp > anchor + FUTURE_SLACK else r for r in every]
    since = anchor - history
    runs = [r for r in every if r.timestamp >= since]
    recent = {r.option for r in runs}
    older: dict[str, float] = {}
    for r in every:
        if r.timestamp < since and r.option not in recent:
            older[r.option] = max(older.get(r.option, r.timestamp), r.timestamp)
    return runs, older


def regression_levels(journal: Any, remote: str, direction: str) -> tuple[dict[str, float], set[str]]:
    """moveplan.levels of the series' states as the regressions journal beside `journal`
    has them (each event applied as the exporter applies it): protocol -> the start of
    its open or accepted regression, and the accepted ones."""
    tracks: dict[Any, Track] = {}
    for event in RegressionJournal(Path(journal)).read_events():
        apply_event(tracks.setdefault(event.key, Track()), event)
    return levels(tracks.items(), remote, direction)


def configured_protocols(config: Config, remote: str, direction: str) -> list[str]:
    """The protocols the configuration runs to `remote` in `direction` (the schedule's
    list, or every protocol that moves that way): each has a line in the plan."""
    if config.schedule.transfers is not None:
        named = [t.protocol for t in config.schedule.transfers if t.remote == remote and t.direction == direction]
    else:
        named = [name for name, p in config.protocols.items() if direction in p.directions]
    return list(dict.fromkeys(named))


def _left_out_words(runs: Sequence[Run]) -> str:
    reasons: dict[str, int] = {}
    for r in runs:
        if r.left_out:
            reasons[r.left_out] = reasons.get(r.left_out, 0) + 1
    if not reasons:
        return ""
    return f" ({len(runs)} runs, all left out: {', '.join(f'{why} {n}' for why, n in sorted(reasons.items()))})"


def _offset_hours(zone: zoneinfo.ZoneInfo) -> float:
    offset = datetime.now(zone).utcoffset()
    return offset.total_seconds() / 3600 if offset else 0.0


def _bandwidth(journal: Any, remote: str) -> float | None:
    latest = None
    for b in BaselineJournal(baseline_path(journal)).read():
        if b.remote == remote and b.bandwidth_bytes_per_second and (latest is None or b.start_timestamp > latest[0]):
            latest = (b.start_timestamp, b.bandwidth_bytes_per_second)
    return latest[1] if latest else None


def _mb(rate: float) -> str:
    return f"{rate / 1e6:.2f} MB/s"


def render(result: Plan, runs: Sequence[Any], zone: zoneinfo.ZoneInfo, deadline: float | None, direction: str) -> str:
    lines = []
    used = [r for r in runs if not r.left_out]
    sizes = sorted({r.bytes for r in used})
    hours = sorted({datetime.fromtimestamp(r.timestamp, zone).hour for r in used})
    sources = {s: sum(1 for r in used if r.source == s) for s in ("exporter", "sweep")}
    first, last = min(r.timestamp for r in used), max(r.timestamp for r in used)
    lines.append(
        f"plan-move: {size_label(result.size)} in {result.files} file{'s' if result.files > 1 else ''} "
        f"({direction}) with {result.remote}"
    )
    left_out = len(runs) - len(used)
    reasons: dict[str, int] = {}
    for r in runs:
        if r.left_out:
            reasons[r.left_out] = reasons.get(r.left_out, 0) + 1
    out_text = (
        f"; left out {left_out} of {len(runs)} ({', '.join(f'{w} {n}' for w, n in sorted(reasons.items()))})"
        if left_out
        else ""
    )
    lines.append(
        f"from {len(used)} ok transfers ({sources['exporter']} scheduled, {sources['sweep']} sweep runs){out_text}, "
        f"{_day(first, zone)} to {_day(last, zone)}, sizes {size_label(sizes[0])}-{size_label(sizes[-1])}, "
        f"started at hours {', '.join(f'{h:02d}' for h in hours)} ({zone.key})"
    )
    for protocol, since in sorted(result.regressed.items()):
        kept = sum(b.used for b in result.basis.values() if b.protocol == protocol)
        accepted = protocol in result.accepted
        why = BEFORE_ACCEPTED if accepted else BEFORE_REGRESSION
        dropped = sum(dict(b.left_out).get(why, 0) for b in result.basis.values() if b.protocol == protocol)
        if accepted and not dropped:
            continue  # accepted before the runs read began: every run read is its level
        lines.append(
            f"accepted regression: {protocol}'s level since {_day(since, zone)} is its own (accepted); predicted "
            f"from its {kept} runs since ({dropped} before it left out)"
            if accepted
            else f"open regression: {protocol} has an open regression since {_day(since, zone)}; predicted from "
            f"its {kept} runs since ({dropped} before it left out: `regression list`)"
        )
    for why in result.thin():
        lines.append(f"thin basis: {why}")
    ratio = result.size / sizes[-1]
    if ratio > 1:
        lines.append(
            f"extrapolates: the move is {ratio:,.0f}x the largest transfer measured; hours without runs within "
            "90 minutes use the all-day rate"
        )
    if result.files > 1 and all(len(f.files) < 2 for f, _ in result.ranked):
        lines.append("extrapolates: no dataset of many files was measured: no per-file cost is included")
    if result.bandwidth:
        lines.append(f"path bandwidth estimate: {_mb(result.bandwidth)} (caps every rate)")
    lines.append("")
    header = (
        "rank",
        "option",
        "setup",
        "rate (all day)",
        "best start",
        "predicted",
        f"{LEVEL:.0%} interval",
        "runs",
        "left out",
    )
    rows: list[tuple[str, ...]] = [header]
    breaks: dict[int, str] = {}  # row index -> the evidence class that starts there
    for rank, (f, preds) in enumerate(result.ranked, start=1):
        if rank > 1 and f.evidence != result.ranked[rank - 2][0].evidence:
            breaks[len(rows)] = EVIDENCE[f.evidence]
        best = best_start(preds, result.now_hour)
        setup = f"{f.setup_seconds:.1f}s" + (" (*)" if f.setup_from else "")
        basis = result.basis.get(f.option)
        rows.append(
            (
                str(rank),
                f.option,
                setup,
                _mb(f.rate),
                f"{best.start_hour:02d}:00" + (" (now)" if best.start_hour == result.now_hour else ""),
                duration_text(best.seconds),
                _interval(best),
                str(f.runs),
                _left_out_of(f, result) or ("0" if basis is not None else ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for i, row in enumerate(rows):
        if i in breaks:
            lines.append(f"  -- ranked only among themselves, thinner evidence ({breaks[i]}):")
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    for f, _ in result.ranked:
        if f.setup_from:
            lines.append(f"(*) {f.option}: measured at one size; its set-up is {f.setup_from}")
        for option in f.merged:
            lines.append(f"{option} runs {f.protocol}'s own command: its runs are counted as {f.protocol}'s")
        if not f.interval_known:
            lines.append(f"{f.option}: {_too_few(f)}")
    for option, why in sorted(result.refused.items()):
        lines.append(f"no prediction for {option}: {why}")
    for option, (latest, n) in sorted(result.unconfigured.items()):
        counted = f", {n} runs in the plan's window" if n else ", older than moves.history"
        lines.append(
            f"not configured now: {option}: last run {_day(latest, zone)}{counted}; "
            "not ranked (the configuration cannot run it)"
        )
    if not result.ranked:
        lines.append(f"plan-move: refused: no option to {result.remote} can be predicted (reasons above)")
        return "\n".join(lines) + "\n"
    top, preds = result.ranked[0]
    lines.append("")
    lines += by_hour(top, preds, zone)
    lines.append("")
    lines.append(_recommendation(result, zone, deadline))
    return "\n".join(lines) + "\n"


def _left_out_of(f: Fit, result: Plan) -> str:
    """The runs of `f` (and of the settings merged into it) left out, and why."""
    reasons: dict[str, int] = {}
    for option in (f.option, *f.merged):
        basis = result.basis.get(option)
        for why, n in basis.left_out if basis else ():
            reasons[why] = reasons.get(why, 0) + n
    return ", ".join(f"{why} {n}" for why, n in sorted(reasons.items(), key=lambda item: -item[1]))


def _interval(p: Prediction) -> str:
    return f"{duration_text(p.lower)} - {duration_text(p.upper)}" if p.interval_known else "unknown"


def _too_few(f: Fit) -> str:
    return (
        f"{f.runs} run{'s' if f.runs != 1 else ''} leave {f.dof} degree{'s' if f.dof != 1 else ''} of freedom "
        f"after its line, fewer than the {MIN_INTERVAL_DOF} an interval needs: its {LEVEL:.0%} interval is "
        "unknown, and its prediction is a guess until more runs are measured"
    )


def by_hour(top: Fit, preds: Sequence[Prediction], zone: zoneinfo.ZoneInfo) -> list[str]:
    """The best option's prediction per start hour, hours that predict the same in one
    line (a day measured at one hour is one line, not 24 equal ones)."""

    def text(p: Prediction, measured: bool = True) -> str:
        capped = "  (capped by the path)" if p.capped else ""
        unmeasured = "  (no runs near this hour: all-day rate)"
        return f"{duration_text(p.seconds):>9}  ({_interval(p)}){'' if measured else unmeasured}{capped}"

    if len({text(p) for p in preds}) == 1:
        return [f"{top.option}: the same at every start hour ({zone.key}):", f"  any hour  {text(preds[0])}"]
    texts = [text(p, top.hour_effect[p.start_hour] is not None) for p in preds]
    groups: list[tuple[int, int, str]] = []  # first hour, last hour, text
    for hour, t in enumerate(texts):
        if groups and groups[-1][2] == t:
            groups[-1] = (groups[-1][0], hour, t)
        else:
            groups.append((hour, hour, t))
    lines = [f"{top.option}, by start hour ({zone.key}):"]
    for first, last, t in groups:
        hours = f"{first:02d}:00" if first == last else f"{first:02d}-{last:02d}h"
        lines.append(f"  {hours:<9} {t}")
    return lines


def _day(ts: float, zone: zoneinfo.ZoneInfo) -> str:
    return datetime.fromtimestamp(ts, zone).strftime("%Y-%m-%d %H:%M")


def _next_start(hour: int, zone: zoneinfo.ZoneInfo, now: float) -> datetime:
    """When a move starting in `hour` can start: now, in the current hour (never at its
    top, already past); else the hour's next beginning."""
    current = datetime.fromtimestamp(now, zone).replace(microsecond=0)
    if current.hour == hour:
        return current
    start = current.replace(minute=0, second=0, hour=hour)
    return start if start.timestamp() > now else start + timedelta(days=1)


def _recommendation(result: Plan, zone: zoneinfo.ZoneInfo, deadline: float | None) -> str:
    now = time.time()
    if deadline is None:
        best = result.best
        assert best is not None
        f, p = best
        start = _next_start(p.start_hour, zone, now)
        line = f"recommendation: {f.option}, started now: {duration_text(p.seconds)} ({LEVEL:.0%}: {_interval(p)})"
        thin = f" (thin basis: {'; '.join(result.thin())})" if result.thin() else ""
        if p.start_hour != result.now_hour:
            at_once = next(q for q in result.ranked[0][1] if q.start_hour == result.now_hour)
            line = (
                f"recommendation: {f.option}, started at {start:%Y-%m-%d %H:%M} {zone.key}: "
                f"{duration_text(p.seconds)} ({LEVEL:.0%}: {_interval(p)}); "
                f"started now: {duration_text(at_once.seconds)}"
            )
        return line + thin
    # With a deadline: the option and start (within the next day) that meets it with the
    # most room at the interval's upper end; starting as late as that still allows.  Only
    # options with an interval: an unknown one cannot be said to meet anything.
    known = [(f, preds) for f, preds in result.ranked if f.interval_known]
    if not known:
        return (
            f"recommendation: none for --by: no option has runs enough for a {LEVEL:.0%} interval "
            f"(at least {MIN_INTERVAL_DOF} degrees of freedom after its line); measure more before trusting a deadline"
        )
    choices: list[tuple[float, Prediction, datetime]] = []
    for _f, preds in known:
        for p in preds:
            start = _next_start(p.start_hour, zone, now)
            room = deadline - (start.timestamp() + p.upper)
            choices.append((room, p, start))
    room, p, start = max(choices, key=lambda c: c[0])
    when = datetime.fromtimestamp(deadline, zone).strftime("%Y-%m-%d %H:%M")
    if room < 0:
        end = datetime.fromtimestamp(start.timestamp() + p.upper, zone)
        return (
            f"recommendation: none meets --by {when} at the {LEVEL:.0%} upper bound; fastest: {p.option} "
            f"from {start:%Y-%m-%d %H:%M}, ends by {end:%Y-%m-%d %H:%M}"
        )
    latest = [c for c in choices if c[1].option == p.option and c[0] >= 0]
    last_start = max(latest, key=lambda c: c[2])[2]
    return (
        f"recommendation: {p.option}, start at {start:%Y-%m-%d %H:%M} ({zone.key}): "
        f"{duration_text(p.seconds)} ({LEVEL:.0%}: up to {duration_text(p.upper)}), done by {when} with "
        f"{duration_text(room)} to spare; the latest start within the next day that still makes it at the "
        f"upper bound is {last_start:%Y-%m-%d %H:%M}"
    )


def as_json(result: Plan, runs: Sequence[Any], zone: zoneinfo.ZoneInfo) -> dict[str, Any]:
    def num(v: float) -> float | None:
        return v if math.isfinite(v) else None

    return {
        "remote": result.remote,
        "size_bytes": result.size,
        "files": result.files,
        "timezone": zone.key,
        "level": LEVEL,
        "bandwidth_bytes_per_second": result.bandwidth,
        "basis": {
            "runs": sum(1 for r in runs if not r.left_out),
            "left_out": sum(1 for r in runs if r.left_out),
            "sizes_bytes": sorted({r.bytes for r in runs if not r.left_out}),
            "hours": sorted({datetime.fromtimestamp(r.timestamp, zone).hour for r in runs if not r.left_out}),
            "thin": result.thin(),
            "options": {
                option: {
                    "runs": b.used,
                    "scheduled": b.scheduled,
                    "sweep": b.sweep,
                    "sizes_bytes": list(b.sizes),
                    "left_out": dict(b.left_out),
                    "left_out_sizes_bytes": {str(size): n for size, n in b.left_out_sizes},
                }
                for option, b in sorted(result.basis.items())
            },
        },
        "ranked": [
            {
                "option": f.option,
                "protocol": f.protocol,
                "setting": f.setting,
                "setup_seconds": f.setup_seconds,
                "setup_from": f.setup_from,
                "per_file_seconds": f.per_file_seconds,
                "rate_bytes_per_second": f.rate,
                "runs": f.runs,
                "evidence": EVIDENCE[f.evidence],
                "start_hours": [
                    {
                        "hour": p.start_hour,
                        "seconds": num(p.seconds),
                        "lower": num(p.lower),
                        "upper": num(p.upper),
                        "capped": p.capped,
                        "hour_measured": f.hour_effect[p.start_hour] is not None,
                    }
                    for p in preds
                ],
            }
            for f, preds in result.ranked
        ],
        "refused": result.refused,
        "open_regressions": {
            protocol: {"since": since}
            for protocol, since in sorted(result.regressed.items())
            if protocol not in result.accepted
        },
        "accepted_regressions": {
            protocol: {"since": since}
            for protocol, since in sorted(result.regressed.items())
            if protocol in result.accepted
        },
        "unconfigured": {
            option: {"latest_run_timestamp": latest, "runs": n}
            for option, (latest, n) in sorted(result.unconfigured.items())
        },
    }
