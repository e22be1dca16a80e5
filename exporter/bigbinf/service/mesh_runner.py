"""A mesh site's exporter: its outgoing tests, each in its own slot of the mesh's plan.

Every site's exporter computes the same slot plan from the mesh file, the durations file
and the round's start (bigbinf.mesh.plan), so two tests that share a site never run at
once without the sites talking to each other.  In mesh mode this replaces the cron
rounds: one thread that enters each round at its start, publishes its plan, and waits
for each of this site's slots by the wall clock to run its test under the round lock (so
a tuning sweep, or a `once` or `sweep` command on the same journal, is excluded as from
a round), journaled then published as a round's results are.

A round keeps the plan it started with: a reload (a new mesh or durations file) applies
from the next round's start, so every site switches at the same moment.  Each of this
site's slots of a round is handled once: run, or counted in bigbinf_mesh_slots_missed_total
with its reason (metrics.MISSED_REASONS: late start, lock held, round does not fit, not
configured, error), also logged.

A slot never runs into another slot of its sites or past the next round's start:

* a slot that, with the guard after it, would end after the next round's start (a round
  that does not fit: `mesh plan` says so, and the exporter says so when it enters the
  round) is not started: missed, round_does_not_fit;
* a transfer whose traffic goes on past its slot's end is recorded as an overrun (the
  result's slot_overrun_seconds, then the overrun metrics).  The site's next test waits
  for it rather than overlap it (the slots run one after another in this one thread),
  and starts only while its typical length (the slot's length / schedule.headroom) is
  left of its slot, so a late start never pushes a test into another site's slot: else
  missed, late_start.

Slots that started while the exporter was not running are counted when it starts (missed,
exporter_down): from the plan, every slot of this site after the last one it handled
(noted beside the journal, handled_path, after each slot; or journaled, if later: a crash
between the two) and before its start.  At the first start with a journal (no note yet)
the slots of the round in progress that began before it are counted so (issue 36: they
were neither run nor counted); earlier rounds were never this exporter's.

The mesh is handed in from outside (`SiteView`, cli.py's MeshSite made from the mesh
file), as the lab is to the round runner: bigbinf.mesh reaches the lab's layout, which
the live path never imports.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from bigbinf import metrics as M
from bigbinf.config import Config, ConfigError
from bigbinf.measure.plan import TransferSpec, plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.result import PathBaseline, Result, SeriesKey
from bigbinf.service.collector import MeshRound
from bigbinf.service.rounds import RoundRunner, run_id

log = logging.getLogger(__name__)


# What the runner needs of bigbinf.mesh.plan's TestKey, Slot and RoundPlan (read-only
# properties, so its frozen dataclasses satisfy them).


class SlotTest(Protocol):
    @property
    def src(self) -> str: ...
    @property
    def dst(self) -> str: ...
    @property
    def protocol(self) -> str: ...
    @property
    def dataset(self) -> str: ...
    @property
    def direction(self) -> str: ...


class PlannedSlot(Protocol):
    """One test's slot: [start, end) in UTC epoch seconds (the guard gap comes after end)."""

    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def test(self) -> SlotTest: ...
    @property
    def probe(self) -> bool: ...
    @property
    def repetition(self) -> int: ...
    @property
    def typical(self) -> float:
        """The latest start that still runs the slot is its end minus this (0: its end)."""
        ...


class PlannedRound(Protocol):
    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def slots(self) -> Sequence[PlannedSlot]: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def planned_end(self) -> float: ...
    @property
    def fits(self) -> bool: ...
    @property
    def overflow_seconds(self) -> float: ...
    @property
    def guard(self) -> float:
        """After every slot, the last one of the round included, before the next slot of its sites."""
        ...


class SiteView(Protocol):
    """One site's view of a valid mesh file and its durations file, loaded together
    (cli.py's MeshSite)."""

    @property
    def site(self) -> str: ...

    @property
    def config(self) -> Config:
        """The site's exporter configuration (bigbinf.mesh.config.site_config)."""
        ...

    @property
    def schedule_interval(self) -> float:
        """The longest round (the longest time between two rounds' starts): what "stale" means for a series."""
        ...

    @property
    def listen(self) -> str:
        """Where the site's exporter listens (read at start only: a change needs a restart)."""
        ...

    def rounds(self, after: float) -> Iterator[PlannedRound]:
        """The round in progress at `after` (UTC epoch seconds), if any, then the later
        ones, planned from the durations loaded with the mesh file."""
        ...

    def slot_counts(self, since: float, until: float) -> Iterable[tuple[SlotTest, int]]:
        """(test, how many of its slots) for this site's slots that start after `since`
        and before `until`, from the plan."""
        ...


# Loads a mesh file for a site; raises ConfigError (bigbinf.mesh.config.MeshError) if the
# mesh or durations file is invalid or the site is not in it.
MeshLoader = Callable[[Path, str], SiteView]
Transfer = Callable[[TransferSpec, Config, str, PathBaseline | None], Result]

# Why a slot of this site was not run: the reason label of bigbinf_mesh_slots_missed_total.
LATE, LOCKED, NO_FIT, GONE, ERROR, DOWN = (
    M.MISSED_LATE,
    M.MISSED_LOCKED,
    M.MISSED_NO_FIT,
    M.MISSED_GONE,
    M.MISSED_ERROR,
    M.MISSED_DOWN,
)
# How far back a restarted exporter counts the slots it missed (a week; longer downtimes
# are said in the log, and BigbinfExporterDown has paged meanwhile).
DOWNTIME_LOOKBACK_SECONDS = 7 * 86400.0


def handled_path(journal: Path) -> Path:
    """Where a mesh site's exporter notes the start of the last slot it handled: beside its
    journal (journal.jsonl -> journal.slots.json), so a restart counts the slots it missed
    while down exactly once, whatever the journal holds (a missed slot journals nothing)."""
    return journal.with_name(f"{journal.stem}.slots.json")


def series_key(slot: PlannedSlot) -> SeriesKey:
    t = slot.test
    return SeriesKey(t.protocol, t.dst, t.dataset, t.direction)


def round_id(plan: PlannedRound) -> str:
    """rounds.py's format (start time, 6 hex digits); the digits come from the plan's
    fingerprint rather than at random, so every site that agrees on the plan journals
    the round under the same id and the sites' journals can be joined on it."""
    return run_id(plan.start, plan.fingerprint)


def overrun_seconds(result: Result, slot_end: float) -> float:
    """How far the transfer's traffic went past the slot's end: the later of the command's
    end and the last captured packet (a capture's linger can see the connection close
    after the command returned); 0.0 within the slot."""
    traffic_end = max(result.start_timestamp + result.duration_seconds, result.last_packet_timestamp or 0.0)
    return max(0.0, traffic_end - slot_end)


def _utc(when: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(when))


def _ms(seconds: float) -> int:
    return round(seconds * 1000)  # the plan's times are whole milliseconds


def runs_past_the_round(slot: PlannedSlot, plan: PlannedRound) -> bool:
    """Whether the slot, with the guard after it, ends after the next round's start (where
    the next round's first slots, which may share its sites, begin)."""
    return _ms(slot.end) + _ms(plan.guard) > _ms(plan.end)


class MeshRunner:
    """Runs this site's slots of each round of the mesh plan, one after another.

    A round is run with the plan it started with: a reloaded mesh or durations file
    (`mesh = ...`) applies from the next round's start, so a reload never moves, repeats
    or drops a slot of the round in progress.  Each of this site's slots is handled once
    per round (run, or counted missed with its reason), whatever goes wrong in it."""

    # When no round can be planned (the schedule never fires again, or planning failed):
    # look again after this, or at a reload.
    IDLE_SECONDS = 60.0

    def __init__(self, runner: RoundRunner, mesh: SiteView, transfer: Transfer = run_transfer) -> None:
        self.runner = runner
        self._mesh = mesh
        self.transfer = transfer
        self._replan = threading.Event()
        self._thread: threading.Thread | None = None
        # Slots that started before the exporter did are not run, nor counted as missed.
        self.started = time.time()
        self.next_slot_start: float | None = None  # for the landing page
        self.current: PlannedRound | None = None  # the round in progress, as it was planned at its start
        self._specs: tuple[Config, list[TransferSpec]] | None = None
        self._overflow_logged: set[str] = set()
        # (test, repetition) of this site's slots handled (run or counted missed), per round start.
        self._handled: dict[float, set[tuple[SlotTest, int]]] = {}
        self._downtime_counted = False
        self._note_failed = False

    @property
    def mesh(self) -> SiteView:
        return self._mesh

    @mesh.setter
    def mesh(self, mesh: SiteView) -> None:
        """A reloaded mesh: it plans the rounds from the next round's start on (the round
        in progress keeps its plan)."""
        self._mesh = mesh
        self._replan.set()

    @property
    def stopping(self) -> threading.Event:
        return self.runner.stopping  # the exporter's stop ends waits, lock waits and rounds alike

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run_forever, name="mesh-slots", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 0.0) -> None:
        self.stopping.set()
        self._replan.set()
        if self._thread is not None and timeout > 0:
            self._thread.join(timeout)

    def _run_forever(self) -> None:
        try:
            self.run()
        except Exception:  # run() catches per round and per slot: this is a last resort
            log.exception("mesh slots stopped")

    def run(self, rounds: int | None = None) -> None:
        """Enter each round at its start and run this site's slots of it, until stopped or
        until `rounds` rounds have been entered (tests)."""
        done = 0
        boundary = self.started  # the next round to enter is the one in progress at this time
        if not self._downtime_counted:
            self._downtime_counted = True
            self._count_downtime()
        while not self.stopping.is_set() and (rounds is None or done < rounds):
            self._replan.clear()
            mesh = self.mesh
            try:
                plan = next(iter(mesh.rounds(boundary)), None)
            except Exception as exc:
                self._plan_failed(exc)
                self._replan.wait(self.IDLE_SECONDS)
                boundary = max(boundary, time.time())  # rounds that could not be planned: counted as errors
                continue
            self.runner.state.record_mesh_plan(True)
            if plan is None:
                log.warning("mesh: the schedule starts no further round; looking again in %.0f s", self.IDLE_SECONDS)
                self.next_slot_start = None
                self._replan.wait(self.IDLE_SECONDS)
                continue
            if plan.start > time.time():
                # Planned again at its start, from the mesh then in force (a reload meanwhile applies to it).
                self.next_slot_start = min((s.start for s in plan.slots if s.test.src == mesh.site), default=None)
                self._wait_until(plan.start, replan=True)
                continue
            try:
                self.run_round(plan, entry=max(plan.start, boundary))
            except Exception:  # run_round handles each slot's errors: a bug between slots
                log.exception("mesh round at %s", _utc(plan.start))
            boundary = max(boundary, plan.end)
            done += 1

    # -- the slots missed while the exporter was down

    def _count_downtime(self) -> None:
        """At start: every slot of this site that started after the last one handled (as
        noted beside the journal, or journaled, whichever is later) and before now counts as
        missed, exporter_down; published after the first scrape (record_slots_missed)."""
        site, path = self.mesh.site, handled_path(self.runner.config.journal.path)
        since, until = self._last_handled(path, site), self.started
        first = since is None and not path.exists()
        if first:
            since = self._round_in_progress_start(until)
        if since is not None:
            # A slot journaled after its note was written (killed in between) is not missed:
            # the journal's results (restored into the state) say so.
            journaled = [r.slot_start_timestamp for r in self.runner.state.latest_results() if r.site == site]
            since = max([since, *(t for t in journaled if t is not None)])
        per_series: dict[SeriesKey, int] = {}
        if since is not None and since < until:
            earliest = until - DOWNTIME_LOOKBACK_SECONDS
            if since < earliest:
                log.warning(
                    "mesh: the exporter of %s last handled a slot at %s, more than %.0f days ago: counting the slots "
                    "missed since %s only",
                    site,
                    time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(since)),
                    DOWNTIME_LOOKBACK_SECONDS / 86400,
                    time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(earliest)),
                )
                since = earliest
            try:
                counts = list(self.mesh.slot_counts(since, until))
            except Exception:  # a bug: the exporter runs on without the count
                log.exception("mesh: cannot count the slots missed while the exporter was down")
                counts = []
            for test, n in counts:
                key = SeriesKey(test.protocol, test.dst, test.dataset, test.direction)
                per_series[key] = per_series.get(key, 0) + n
            if per_series:
                log.warning(
                    "mesh: %d of %s's slots started %s (from %s to %s): counted missed (reason exporter_down)",
                    sum(per_series.values()),
                    site,
                    "in this round before its exporter first started" if first else "while its exporter was down",
                    _utc(since),
                    _utc(until),
                )
        self._note_handled(until)  # before the count, as _missed does
        if per_series:
            self.runner.state.record_slots_missed(per_series, DOWN, after_scrape=True)

    def _round_in_progress_start(self, when: float) -> float | None:
        """Just before the start of the round in progress at `when` (its first slot starts
        after it: slot_counts counts slots strictly after `since`); None between rounds."""
        try:
            plan = next(iter(self.mesh.rounds(when)), None)
        except Exception:  # cannot plan: run() says so; nothing to count
            return None
        return plan.start - 0.001 if plan is not None and plan.start <= when else None

    @staticmethod
    def _last_handled(path: Path, site: str) -> float | None:
        try:
            noted = json.loads(path.read_text(encoding="utf-8"))
            when = noted["handled_through"] if noted.get("site") == site else None
            return float(when) if isinstance(when, int | float) else None
        except FileNotFoundError:
            return None  # the first start with this journal: nothing was planned for it before
        except (OSError, ValueError, TypeError, AttributeError, KeyError) as exc:
            log.warning(
                "mesh: cannot read %s (%s): the slots missed while the exporter was down are not counted", path, exc
            )
            return None

    def _note_handled(self, when: float) -> None:
        """Note (atomically) that this site's slots up to `when` are handled."""
        path = handled_path(self.runner.config.journal.path)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # before the journal's first result, as it would be
            tmp.write_text(json.dumps({"site": self.mesh.site, "handled_through": when}) + "\n", encoding="utf-8")
            os.replace(tmp, path)
            self._note_failed = False
        except OSError as exc:
            if not self._note_failed:  # said once, not once per slot
                self._note_failed = True
                log.warning(
                    "mesh: cannot write %s (%s): a restart will not count the slots missed meanwhile", path, exc
                )

    def _plan_failed(self, exc: Exception) -> None:
        if isinstance(exc, ConfigError):  # the user's data: said as such, no traceback
            log.error("mesh: cannot plan the next round (trying again in %.0f s):\n%s", self.IDLE_SECONDS, exc.render())
        else:  # a bug
            log.exception("mesh: cannot plan the next round; trying again in %.0f s", self.IDLE_SECONDS)
        self.runner.state.record_mesh_plan(False)  # bigbinf_config_last_reload_successful 0 until it can

    def _enter(self, plan: PlannedRound) -> None:
        """A round starts: it is the current round, its plan published (every site switches
        at the same moment, so they agree on the fingerprint between rounds too)."""
        self.current = plan
        self.runner.state.record_mesh_round(
            MeshRound(plan.planned_end - plan.start, plan.end - plan.start, plan.fingerprint, plan.fits, plan.guard)
        )
        if not plan.fits and plan.fingerprint not in self._overflow_logged:
            self._overflow_logged.add(plan.fingerprint)
            site = self.mesh.site
            cut = sum(1 for s in plan.slots if s.test.src == site and runs_past_the_round(s, plan))
            log.warning(
                "mesh round at %s does NOT fit: its slots end, with the %g s guard, %.3f s after the next round "
                "starts (period %.3f s, planned %.3f s); %d of %s's slots would run past it and are not run "
                "(counted missed, reason round_does_not_fit); `mesh plan` shows the slots and what to change",
                _utc(plan.start),
                plan.guard,
                plan.overflow_seconds,
                plan.end - plan.start,
                plan.planned_end - plan.start,
                cut,
                site,
            )

    def run_round(self, plan: PlannedRound, entry: float | None = None) -> list[Result] | None:
        """The round `plan` from its start: published, then this site's slots of it not yet
        handled, each run or counted missed; their results, or None if stopped.  Slots
        that start before `entry` (default: the round's start, or the exporter's if
        later) are not this exporter's to run, nor counted."""
        self._enter(plan)
        entry = max(plan.start, self.started) if entry is None else entry
        for old in [start for start in self._handled if start < plan.start]:
            del self._handled[old]
        handled = self._handled.setdefault(plan.start, set())
        rid = round_id(plan)
        site = self.mesh.site  # the same in every load (the loader refuses another site)
        slots = sorted((s for s in plan.slots if s.test.src == site), key=lambda s: (s.start, s.repetition))
        results: list[Result] = []
        began: float | None = None
        for slot in slots:
            done = (slot.test, slot.repetition)
            if done in handled:
                continue
            if slot.start < entry:
                handled.add(done)
                continue
            if runs_past_the_round(slot, plan):
                handled.add(done)
                self._missed(
                    slot,
                    NO_FIT,
                    f"it would end, with the {plan.guard:g} s guard, after the next round's start ({_utc(plan.end)})",
                )
                continue
            self.next_slot_start = slot.start
            if not self._wait_until(slot.start):
                return None
            began = time.monotonic() if began is None else began
            try:
                result = self.run_slot(slot, rid)
            except Exception as exc:  # a bug in a transfer, its planning or its publishing: this slot only
                log.exception("slot %s-%s of %s: failed", _utc(slot.start), _utc(slot.end), _label(slot))
                self._missed(slot, ERROR, f"{type(exc).__name__}: {exc}", logged=True)
                result = None
            handled.add(done)
            if self.stopping.is_set():
                return None
            self._note_handled(slot.start)
            if result is not None:
                results.append(result)
        self.next_slot_start = None
        if began is not None:
            self.runner.state.record_round(time.monotonic() - began, time.time())
        return results

    def _wait_until(self, when: float, replan: bool = False) -> bool:
        """Until `when` by the wall clock (the plan is in UTC epoch seconds: every site's
        clock agrees, monotonic clocks do not); False on a stop (or, with `replan`, a reload)."""
        while not (self.stopping.is_set() or (replan and self._replan.is_set())):
            remaining = when - time.time()
            if remaining <= 0:
                return True
            (self._replan if replan else self.stopping).wait(min(remaining, 0.5))
        return False

    def run_slot(self, slot: PlannedSlot, rid: str) -> Result | None:
        """One slot's test: journaled and published with its slot; None if not run (counted
        missed, or stopped).  A slot whose start is late (this site's previous transfer
        overran) starts only while at least its typical length is left of it, so a late
        start never pushes a test into another site's slot."""
        runner, key = self.runner, series_key(slot)
        latest = slot.end - slot.typical  # the latest start that leaves the test its typical length
        if _too_late(slot):
            self._missed(slot, LATE, self._late(slot))
            return None
        # The round lock: a tuning sweep, or a `once` or `sweep` command on this journal, may
        # hold it; waited for, but only until the latest start.
        if not runner.exclusive(timeout=max(0.0, latest - time.time())):
            if not self.stopping.is_set():
                self._missed(
                    slot,
                    LOCKED,
                    "the round lock was held (a tuning sweep, or a `once` or `sweep` command "
                    "on this journal) until too little of the slot was left",
                )
            return None
        try:
            if _too_late(slot):
                self._missed(slot, LATE, self._late(slot))
                return None
            config = runner.config
            spec = self._spec(config, key)
            if spec is None:
                self._missed(slot, GONE, "its test is not in this site's configuration (changed by a reload?)")
                return None
            # The slot that opens the path's tests in the round probes it first (its time is
            # in the slot); the others are judged against that probe.
            probed = runner.probe_paths([spec]) if slot.probe else runner.state.paths
            baseline = probed.get(key.remote)
            if self.stopping.is_set():
                return None
            log.info("round %s: slot %s-%s: %s", rid, _utc(slot.start), _utc(slot.end), spec.label)
            runner.recent.running(f"round {rid}: slot {_utc(slot.start)}-{_utc(slot.end)}: {spec.label}")
            try:
                result = self.transfer(spec, config, rid, baseline)
            finally:
                runner.recent.running(None)
            if self.stopping.is_set():
                log.info("%s interrupted by shutdown: not recorded", spec.label)
                return None
            overrun = overrun_seconds(result, slot.end)
            result = dataclasses.replace(
                result,
                site=self.mesh.site,
                slot_start_timestamp=slot.start,
                slot_end_timestamp=slot.end,
                slot_overrun_seconds=overrun,
            )
            if overrun > 0:
                log.warning(
                    "%s overran its slot (%s-%s) by %.1f s: this site's next test waits for it",
                    spec.label,
                    _utc(slot.start),
                    _utc(slot.end),
                    overrun,
                )
            runner.publish(result)  # journal, then state (the overrun metrics come from the result)
            return result
        finally:
            runner.release()

    @staticmethod
    def _late(slot: PlannedSlot) -> str:
        left = max(0.0, slot.end - time.time())
        return (
            f"only {left:.1f} s of it left, less than its test's typical {slot.typical:.1f} s "
            "(this site's previous transfer overran)"
        )

    def _spec(self, config: Config, key: SeriesKey) -> TransferSpec | None:
        """The configured transfer of a slot's test, from the current configuration (planned
        once per configuration: a reload swaps it)."""
        if self._specs is None or self._specs[0] is not config:
            self._specs = (config, plan_round(config, self.runner.lab(config)))
        for spec in self._specs[1]:
            if (spec.protocol, spec.remote.name, spec.dataset, spec.direction) == (
                key.protocol,
                key.remote,
                key.dataset,
                key.direction,
            ):
                return spec
        return None

    def _missed(self, slot: PlannedSlot, reason: str, why: str, logged: bool = False) -> None:
        if not logged:
            log.warning(
                "slot %s-%s of %s: not run (%s): %s", _utc(slot.start), _utc(slot.end), _label(slot), reason, why
            )
        # Noted before it is counted: a scrape that saw the count finds the slot noted, so a
        # kill between the two never has the next start count it again (exporter_down).
        self._note_handled(slot.start)
        self.runner.state.record_slot_missed(series_key(slot), reason)


def _too_late(slot: PlannedSlot) -> bool:
    """Whether the slot may no longer start: it has ended, or less than its typical length is left."""
    now = time.time()
    return now >= slot.end or now > slot.end - slot.typical


def _label(slot: PlannedSlot) -> str:
    t = slot.test
    return f"{t.protocol}/{t.dst}/{t.dataset}/{t.direction}"
