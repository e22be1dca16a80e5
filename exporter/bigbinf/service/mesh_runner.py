"""A mesh site's exporter: its outgoing tests, each in its own slot of the mesh's plan.

Every site's exporter computes the same slot plan from the mesh file, the durations and
the date (bigbinf.mesh.plan), so two tests that share a site never run at once without
the sites talking to each other.  In mesh mode this replaces the cron rounds: one thread
that, round after round, waits for each of this site's slots by the wall clock and runs
its test under the round lock (so a tuning sweep, or a `once` or `sweep` command on the
same journal, is excluded as from a round), journaled then published as a round's
results are.

A transfer whose traffic goes on past its slot's end is recorded as an overrun (the
result's slot_overrun_seconds, then the overrun metrics).  The site's next test waits
for it rather than overlap it: the slots run one after another in this one thread, so a
late transfer delays the next, and a slot that has ended by the time it could start is
not run at all but counted as missed.

The mesh is handed in from outside (`MeshSite`, made by cli.py from the mesh file), as
the lab is to the round runner: bigbinf.mesh reaches the lab's layout, which the live
path never imports.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from bigbinf.config import Config
from bigbinf.measure.plan import TransferSpec, plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.result import PathBaseline, Result, SeriesKey
from bigbinf.service.collector import MeshRound
from bigbinf.service.rounds import RoundRunner

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


class MeshSite(Protocol):
    """One site's view of a valid mesh file."""

    @property
    def site(self) -> str: ...

    @property
    def config(self) -> Config:
        """The site's exporter configuration (bigbinf.mesh.config.site_config)."""
        ...

    @property
    def schedule_interval(self) -> float:
        """The longest time between two rounds' starts (what "stale" means for a series)."""
        ...

    def rounds(self, after: float) -> Iterator[PlannedRound]:
        """The round in progress at `after` (UTC epoch seconds), if any, then the later
        ones; the durations the slots are sized from are read again on every call."""
        ...


# Loads a mesh file for a site; raises ConfigError (bigbinf.mesh.config.MeshError) if invalid.
MeshLoader = Callable[[Path, str], MeshSite]
Transfer = Callable[[TransferSpec, Config, str, PathBaseline | None], Result]


def series_key(slot: PlannedSlot) -> SeriesKey:
    t = slot.test
    return SeriesKey(t.protocol, t.dst, t.dataset, t.direction)


def round_id(plan: PlannedRound) -> str:
    """rounds.py's format (start time, 6 hex digits); the digits come from the plan's
    fingerprint rather than at random, so every site that agrees on the plan journals
    the round under the same id and the sites' journals can be joined on it."""
    start = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(plan.start))
    return f"{start}-{hashlib.sha256(plan.fingerprint.encode()).hexdigest()[:6]}"


def overrun_seconds(result: Result, slot_end: float) -> float:
    """How far the transfer's traffic went past the slot's end: the later of the command's
    end and the last captured packet (a capture's linger can see the connection close
    after the command returned); 0.0 within the slot."""
    traffic_end = max(result.start_timestamp + result.duration_seconds, result.last_packet_timestamp or 0.0)
    return max(0.0, traffic_end - slot_end)


def _utc(when: float) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(when))


class MeshRunner:
    """Runs this site's slots of each round of the mesh plan, one after another."""

    # When the plan has no slot for this site (or could not be made): look again after this.
    IDLE_SECONDS = 60.0
    # Rounds looked through for one with a slot of this site before idling.
    LOOKAHEAD_ROUNDS = 10

    def __init__(self, runner: RoundRunner, mesh: MeshSite, transfer: Transfer = run_transfer) -> None:
        self.runner = runner
        self._mesh = mesh
        self.transfer = transfer
        self._replan = threading.Event()
        self._thread: threading.Thread | None = None
        # Slots that start before this are not run: past when the exporter started, or handled.
        self.after = time.time()
        self.next_slot_start: float | None = None  # for the landing page
        self._specs: tuple[Config, list[TransferSpec]] | None = None
        self._overflow_logged: set[str] = set()

    @property
    def mesh(self) -> MeshSite:
        return self._mesh

    @mesh.setter
    def mesh(self, mesh: MeshSite) -> None:
        """A reloaded mesh: the plan is made again before the next slot (a slot in progress runs on)."""
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
        except Exception:  # a bug must not end the slots silently
            log.exception("mesh slots stopped")

    def run(self, rounds: int | None = None) -> None:
        """Plan and run rounds until stopped, or until `rounds` rounds have run (tests)."""
        done = 0
        while not self.stopping.is_set() and (rounds is None or done < rounds):
            self._replan.clear()
            try:
                plan = self._next_plan()
            except Exception:  # a planner bug or an unreadable durations file: retried, not fatal
                log.exception("mesh: cannot plan the next round; trying again in %.0f s", self.IDLE_SECONDS)
                plan = None
            if plan is None:
                self.next_slot_start = None
                self._replan.wait(self.IDLE_SECONDS)
                continue
            if self.run_round(plan) is not None:
                done += 1

    def _next_plan(self) -> PlannedRound | None:
        site = self.mesh.site
        for i, plan in enumerate(self.mesh.rounds(self.after)):
            if any(s.test.src == site and s.start >= self.after for s in plan.slots):
                return plan
            if i + 1 >= self.LOOKAHEAD_ROUNDS:
                break
        log.warning("mesh: no slot for site %s in the next %d rounds", site, self.LOOKAHEAD_ROUNDS)
        return None

    def run_round(self, plan: PlannedRound) -> list[Result] | None:
        """This site's slots of `plan` not yet handled; their results, or None if a stop
        or a reload came first (a reload's plan is made again, from the next slot)."""
        state = self.runner.state
        state.record_mesh_round(MeshRound(plan.planned_end - plan.start, plan.end - plan.start, plan.fingerprint))
        if not plan.fits and plan.fingerprint not in self._overflow_logged:
            self._overflow_logged.add(plan.fingerprint)
            log.warning(
                "mesh round at %s needs %.0f s, %.0f s more than the %.0f s until the next round: "
                "its last slots run into it (mesh plan shows the slots)",
                _utc(plan.start),
                plan.planned_end - plan.start,
                plan.overflow_seconds,
                plan.end - plan.start,
            )
        rid = round_id(plan)
        site = self.mesh.site
        slots = sorted((s for s in plan.slots if s.test.src == site and s.start >= self.after), key=lambda s: s.start)
        results: list[Result] = []
        began: float | None = None
        for slot in slots:
            self.next_slot_start = slot.start
            if not self._wait_until(slot.start):
                return None
            began = time.monotonic() if began is None else began
            result = self.run_slot(slot, rid)
            if self.stopping.is_set():
                return None
            self.after = math.nextafter(slot.start, math.inf)  # handled: never run again after a replan
            if result is not None:
                results.append(result)
        if began is not None:
            state.record_round(time.monotonic() - began, time.time())
        return results

    def _wait_until(self, when: float) -> bool:
        """Until `when` by the wall clock (the plan is in UTC epoch seconds: every site's
        clock agrees, monotonic clocks do not); False on a stop or a reload."""
        while not (self.stopping.is_set() or self._replan.is_set()):
            remaining = when - time.time()
            if remaining <= 0:
                return True
            self.stopping.wait(min(remaining, 0.5))  # short steps: a reload is seen within 0.5 s
        return False

    def run_slot(self, slot: PlannedSlot, rid: str) -> Result | None:
        """One slot's test: journaled and published with its slot; None if not run (missed,
        stopped, or no longer in the configuration)."""
        runner, key = self.runner, series_key(slot)
        # The round lock: a tuning sweep or a command on this journal may hold it; waited
        # for, but only until the slot ends.
        remaining = slot.end - time.time()
        if remaining <= 0 or not runner.exclusive(timeout=remaining):
            if not self.stopping.is_set():
                self._missed(slot, key)
            return None
        try:
            if time.time() >= slot.end:
                self._missed(slot, key)
                return None
            config = runner.config
            spec = self._spec(config, key)
            if spec is None:
                log.warning(
                    "slot %s-%s: %s/%s/%s/%s is not in this site's configuration (the mesh file changed "
                    "without a reload?): not run",
                    _utc(slot.start),
                    _utc(slot.end),
                    *(key.protocol, key.remote, key.dataset, key.direction),
                )
                return None
            # The slot that opens the path's tests in the round probes it first (its time is
            # in the slot); the others are judged against that probe.
            probed = runner.probe_paths([spec]) if slot.probe else runner.state.paths
            baseline = probed.get(key.remote)
            if self.stopping.is_set():
                return None
            log.info("round %s: slot %s-%s: %s", rid, _utc(slot.start), _utc(slot.end), spec.label)
            result = self.transfer(spec, config, rid, baseline)
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

    def _missed(self, slot: PlannedSlot, key: SeriesKey) -> None:
        log.warning(
            "slot %s-%s of %s/%s/%s/%s ended before the previous transfer of this site (or a tuning sweep) "
            "did: not run",
            _utc(slot.start),
            _utc(slot.end),
            *(key.protocol, key.remote, key.dataset, key.direction),
        )
        self.runner.state.record_slot_missed(key)
