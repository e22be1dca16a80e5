"""bigbinf-exporter mesh plan|durations|config|prometheus: the mesh file's tools.

Exit codes: 0 done (plan: every round fits), 1 the mesh or durations file cannot be used
(each issue printed as FILE: path: message), 2 a usage error, 3 plan: a round does not
fit its period.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
import tempfile
import zoneinfo
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bigbinf.mesh import UsageError
from bigbinf.mesh.config import LabOf, MeshConfig, MeshError, load_mesh, site_config
from bigbinf.mesh.plan import (
    KEEP,
    Durations,
    RoundPlan,
    Slot,
    day_rounds,
    dump_durations,
    load_durations,
    mesh_tests,
    round_starts,
    site_busy_seconds,
    write_durations,
)

EXIT_DOES_NOT_FIT = 3


def register(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = (), lab: LabOf | None = None) -> None:
    """The `mesh` command; `lab` lays out a lab mesh's sites (cli.py hands it the lab's)."""
    p = subparsers.add_parser(
        "mesh",
        parents=list(parents),
        help="the mesh file: the day's slot plan, the durations file, a site's configuration",
        description="Tools for a mesh file (docs/mesh.md). Exit codes: 0 done (plan: every round fits), "
        "1 unusable mesh or durations file, 2 usage error, 3 plan: a round does not fit its period.",
    )
    p.add_argument("action", choices=["plan", "durations", "config", "prometheus"])
    shared = (
        ("--mesh.file", "mesh_file", "the mesh file"),
        ("--site", "site", "plan: list only this site's slots; config: the site"),
    )
    for flag, dest, text in shared:
        # cli.py's shared flags may define these already (then they serve here too);
        # argparse refuses a second definition, and "resolve" would strip the shared one.
        with contextlib.suppress(argparse.ArgumentError):
            p.add_argument(flag, dest=dest, default=argparse.SUPPRESS, help=text)
    p.add_argument("--date", metavar="YYYY-MM-DD", help="plan: the day, in the schedule's time zone (default today)")
    p.add_argument("--format", choices=["text", "json"], default="text", help="plan: output format (default text)")
    p.add_argument(
        "--journal",
        action="append",
        default=[],
        metavar="[SITE=]PATH",
        help="durations: an exporter's journal (repeatable); SITE= for results that do not name their site",
    )
    p.add_argument("--keep", type=int, default=KEEP, help=f"durations: recent durations kept per test (default {KEEP})")
    p.add_argument("--out", metavar="PATH", help="durations: the file to write; prometheus: the directory")
    p.add_argument(
        "--rules-dir",
        metavar="DIR",
        help="prometheus: the rule files every site evaluates (default: bigbinf's, for the default settings; "
        "give the directory `python -m bigbinf.mixin.rules` wrote for your peak hours and time zone)",
    )
    p.set_defaults(func=run, mesh_lab=lab)


def run(args: argparse.Namespace) -> int:
    actions = {"plan": _plan, "durations": _durations, "config": _config, "prometheus": _prometheus}
    try:
        path = getattr(args, "mesh_file", None)
        if not path:
            raise UsageError("give --mesh.file FILE")
        return actions[args.action](load_mesh(path, lab=getattr(args, "mesh_lab", None)), args)
    except MeshError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"bigbinf-exporter mesh {args.action}: error: {exc}", file=sys.stderr)
        return 2


def _site(mesh: MeshConfig, args: argparse.Namespace, required: bool) -> str | None:
    site = getattr(args, "site", None)
    if site is None and required:
        raise UsageError(f"give --site NAME, one of: {', '.join(mesh.sites)}")
    if site is not None and site not in mesh.sites:
        raise UsageError(f"--site {site}: no such site in the mesh; defined: {', '.join(mesh.sites)}")
    return site


# ---------------------------------------------------------------- plan


def _day(mesh: MeshConfig, text: str | None) -> dt.date:
    if text is None:
        return dt.datetime.now(zoneinfo.ZoneInfo(mesh.schedule.timezone)).date()
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--date {text!r}: write the day as YYYY-MM-DD") from None


def _plan(mesh: MeshConfig, args: argparse.Namespace) -> int:
    site = _site(mesh, args, required=False)
    day = _day(mesh, args.date)
    durations = load_durations(mesh)
    tally = DayTally()
    # Written round by round as each is planned (a day's rounds are never all held at once).
    if args.format == "json":
        chunks = plan_json(mesh, day, day_rounds(mesh, day, durations), site, tally)
    else:
        if mesh.schedule.durations is not None:
            print(durations_line(mesh, durations))
        chunks = (line + "\n" for line in plan_text(mesh, day, day_rounds(mesh, day, durations), site, tally))
    write = sys.stdout.write
    for chunk in chunks:
        write(chunk)
    return 0 if tally.fits else EXIT_DOES_NOT_FIT


@dataclass
class DayTally:
    """What a day's rounds came to, counted as they are written."""

    rounds: int = 0
    late: int = 0  # rounds that do not fit
    worst: float = 0.0  # the largest overflow (s)

    def add(self, plan: RoundPlan) -> None:
        self.rounds += 1
        if not plan.fits:
            self.late += 1
            self.worst = max(self.worst, plan.overflow_seconds)

    @property
    def fits(self) -> bool:
        return self.late == 0


def durations_line(mesh: MeshConfig, durations: Durations) -> str:
    """Which durations file sized the slots, and how much of the mesh it covers."""
    tests = mesh_tests(mesh)
    known = sum(1 for key in durations.tests if key in tests)
    stale = len(durations) - known
    return (
        f"durations: {mesh.schedule.durations} (written {durations.written_utc or 'at an unknown time'}): "
        f"{known} of {len(tests)} tests measured"
        + (f", {stale} entries for tests the mesh no longer has (ignored)" if stale else "")
    )


def _clock(when: float, zone: zoneinfo.ZoneInfo) -> str:
    return dt.datetime.fromtimestamp(when, zone).strftime("%H:%M:%S.%f")[:-3]


def _slot_line(slot: Slot, zone: zoneinfo.ZoneInfo, repetitions: int) -> str:
    t = slot.test
    notes = slot.source + (", probe" if slot.probe else "")
    notes += f", repetition {slot.repetition + 1}" if repetitions > 1 else ""
    return (
        f"  {_clock(slot.start, zone)}-{_clock(slot.end, zone)}  {t.src} -> {t.dst}  "
        f"{t.protocol}/{t.dataset}/{t.direction}  ({notes})"
    )


def verdict(mesh: MeshConfig, plan: RoundPlan) -> str:
    """Whether the round fits its period, by how much, and what to change if not."""
    zone = zoneinfo.ZoneInfo(mesh.schedule.timezone)
    period, planned = plan.end - plan.start, plan.planned_end - plan.start
    # A round's last slot is followed by the guard gap too (the next round's first slot may
    # share a site): it fits when planned_end + guard <= the next round's start.
    if plan.fits:
        return (
            f"fits: {len(plan.slots)} slots end at {_clock(plan.planned_end, zone)}, "
            f"{plan.slack_seconds:.3f} s before the next round after the {plan.guard:g} s guard"
        )
    busiest, busy = max(site_busy_seconds(mesh, plan).items(), key=lambda item: item[1])
    bound = (
        f"; {busiest} alone is busy {busy:.3f} s + the {plan.guard:g} s guard, so no order fits"
        if busy + plan.guard > period
        else f"; the busiest site, {busiest}, is busy {busy:.3f} s"
    )
    return (
        f"does NOT fit: ends, with the {plan.guard:g} s guard, {plan.overflow_seconds:.3f} s after the next round "
        f"starts (period {period:.3f} s, planned {planned:.3f} s{bound}); lower schedule.repetitions or the "
        "tests' budgets, lower schedule.headroom, drop tests or pairs, or give the rounds more time "
        "(fewer cron starts, a longer interval)"
    )


def plan_text(
    mesh: MeshConfig, day: dt.date, plans: Iterable[RoundPlan], site: str | None = None, tally: DayTally | None = None
) -> Iterator[str]:
    """The day's plan as lines, each round's as it is planned (`tally` counts them)."""
    zone = zoneinfo.ZoneInfo(mesh.schedule.timezone)
    tally = DayTally() if tally is None else tally
    yield (
        f"mesh {mesh.name}: {day.isoformat()} ({mesh.schedule.timezone}), {len(round_starts(mesh, day))} rounds, "
        f"{len(mesh.sites)} sites, guard {mesh.schedule.guard:g} s" + (f", slots of {site} only" if site else "")
    )
    reps = mesh.schedule.repetitions
    for plan in plans:
        tally.add(plan)
        yield f"round {_clock(plan.start, zone)} (next round {_clock(plan.end, zone)}), fingerprint {plan.fingerprint}"
        yield from (_slot_line(s, zone, reps) for s in plan.slots if site is None or s.involves(site))
        yield f"  {verdict(mesh, plan)}"
    if not tally.rounds:
        yield "no round starts on this day"
    elif tally.late:
        yield f"the day does NOT fit: {tally.late} of {tally.rounds} rounds overrun, by up to {tally.worst:.3f} s"
    else:
        yield f"the day fits: all {tally.rounds} rounds end before the next one starts"


def _slot_json(slot: Slot) -> dict[str, Any]:
    return {
        "start": slot.start,
        "end": slot.end,
        "src": slot.test.src,
        "dst": slot.test.dst,
        "protocol": slot.test.protocol,
        "dataset": slot.test.dataset,
        "direction": slot.test.direction,
        "repetition": slot.repetition,
        "source": slot.source,
        "probe": slot.probe,
    }


def plan_json(
    mesh: MeshConfig, day: dt.date, plans: Iterable[RoundPlan], site: str | None = None, tally: DayTally | None = None
) -> Iterator[str]:
    """The day's plan as one JSON object, in pieces: each round's as it is planned, one slot
    a line; whether the day fits (`fits`) comes last, when every round has been seen."""
    tally = DayTally() if tally is None else tally
    head: dict[str, Any] = {"mesh": mesh.name, "date": day.isoformat(), "timezone": mesh.schedule.timezone}
    head["guard_seconds"] = mesh.schedule.guard
    yield json.dumps(head)[:-1] + ', "rounds": ['
    for plan in plans:
        tally.add(plan)
        summary = {
            "start": plan.start,
            "end": plan.end,
            "planned_end": plan.planned_end,
            "fits": plan.fits,
            "overflow_seconds": plan.overflow_seconds,
            "fingerprint": plan.fingerprint,
            "slot_count": len(plan.slots),
        }
        slots = ",\n".join(json.dumps(_slot_json(s)) for s in plan.slots if site is None or s.involves(site))
        yield ("," if tally.rounds > 1 else "") + "\n" + json.dumps(summary)[:-1] + ', "slots": [\n'
        yield slots + "\n]}" if slots else "]}"
    yield f'\n], "fits": {json.dumps(tally.fits)}}}\n'


# ---------------------------------------------------------------- durations, config, prometheus


def _journal_arg(mesh: MeshConfig, text: str) -> tuple[str | None, Path]:
    site, sep, path = text.partition("=")
    if sep and site in mesh.sites and not Path(text).exists():
        return site, Path(path)
    if sep and "/" not in site:
        raise UsageError(f"--journal {text}: no site named {site!r}; defined: {', '.join(mesh.sites)}")
    return None, Path(text)  # a path with "=" in it


def _durations(mesh: MeshConfig, args: argparse.Namespace) -> int:
    if not args.journal or not args.out:
        raise UsageError("give --journal [SITE=]PATH (once per exporter's journal) and --out FILE")
    if args.keep < 1:
        raise UsageError(f"--keep {args.keep}: keep at least 1 duration per test")
    data = write_durations(mesh, [_journal_arg(mesh, j) for j in args.journal], keep=args.keep)
    out = Path(args.out)
    try:
        write_atomically(out, dump_durations(data))
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write ({exc.strerror}); choose a writable path") from None
    print(f"{out}: durations of {len(data['tests'])} tests from {len(args.journal)} journals")
    return 0


def write_atomically(path: Path, text: str) -> None:
    """Write `path` whole or not at all: a temporary file beside it, synced, then renamed
    over it (an exporter reloading meanwhile reads the old file or the new, never half)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from an exporter running as another user
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _config(mesh: MeshConfig, args: argparse.Namespace) -> int:
    site = _site(mesh, args, required=True)
    assert site is not None
    config = site_config(mesh, site, args.mesh_file, lab=getattr(args, "mesh_lab", None))
    print(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, width=200), end="")
    return 0


def _prometheus(mesh: MeshConfig, args: argparse.Namespace) -> int:
    if not args.out:
        raise UsageError("give --out DIR for the generated Prometheus files")
    from bigbinf.mesh import prometheus  # imported only for this action

    rules_dir = Path(args.rules_dir) if args.rules_dir else None
    for path in prometheus.render(mesh, Path(args.out), rules_dir):
        print(path)
    return 0
