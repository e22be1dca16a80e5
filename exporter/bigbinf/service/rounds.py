"""Rounds: the planned transfers run strictly one after another, never two rounds at once;
each result is journaled, then published.

The round lock turns an overlapping start (a slow round meeting the next scheduled one)
into a counted skip.  The lab, where the config has one, is handed in from outside
(`lab`, e.g. bigbinf.lab.site): the live path does not import it.

Whoever takes the round lock (a round, a mesh slot, a sweep, `once`, `lab down`) first
undoes what an ended run left changed (the undo journal, measure/undo.py): under the
lock no transfer of a live exporter has changes in flight on this journal.

A round writes down which transfers it is made of before its first and strikes that
off when its last is journaled (service/round_note.py): an exporter killed mid-round
leaves the note, and its next start (or round) first finishes that round: the transfers
not yet journaled under its id, each once (`resume`).

A stop (SIGTERM) mid-round loses no measurement (issue 36): a transfer whose command had
ended ok is journaled; one whose capture's analysis the stop cut (or that timed out)
waits in the pending store (journal/pending.py) and is finished under the round lock
(`settle`: at the next start, before every round); one the stop killed is not a
measurement of the remote and is run again by the round's note.
"""

from __future__ import annotations

import bisect
import dataclasses
import fcntl
import hashlib
import itertools
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np

from bigbinf import process
from bigbinf.config import Config, kept_pcap_directory
from bigbinf.fserrors import describe_os_error
from bigbinf.history import judged
from bigbinf.history.change import Change, describe, what_changed
from bigbinf.history.judged import JudgedMark, LastEvent, carried
from bigbinf.history.moveplan import (
    Prediction,
    configured_only,
    fit_all,
    levels,
    local_hour,
    rank,
    runnable_protocols,
    since_regressions,
    size_label,
)
from bigbinf.history.regression import (
    ACCEPTED,
    FUTURE_SLACK,
    OPENED,
    SUSPECT_RUNS,
    WEEK,
    Event,
    History,
    Verdict,
    first_testable,
    future_dated,
    replay_from,
    settings_of,
)
from bigbinf.history.regression_state import RegressionJournal
from bigbinf.journal import checkpoint  # noqa: F401  (registers its fold on the journal's rotations)
from bigbinf.journal.pending import MAX_ATTEMPTS, PendingAnalysis, PendingStore
from bigbinf.journal.store import (
    DAY,
    BaselineJournal,
    Journal,
    NotJournaled,
    baseline_path,
    damaged,
    temporaries,
    unmoved,
)
from bigbinf.measure import leftovers
from bigbinf.measure.path.baseline import measure_path
from bigbinf.measure.plan import LabSite, PlanError, Remote, TransferSpec, plan_round, plan_series, series_key
from bigbinf.measure.transfer import analyse_pending, complete, run_transfer
from bigbinf.measure.undo import Replay, UndoError, UndoJournal
from bigbinf.measure.wire.analyser_worker import AnalysisStopped, AnalysisTimeout
from bigbinf.result import PathBaseline, Result, SeriesKey
from bigbinf.runs import RecentRuns, counts_in_baseline, move_runs
from bigbinf.service.collector import ExporterState
from bigbinf.service.recent import RecentTransfers
from bigbinf.service.round_note import Note, RoundNote
from bigbinf.service.schedule import gap_after, longest_gap_seconds

log = logging.getLogger(__name__)

# The first start without a regressions' journal replays each series' runs after its first
# baseline (at most REPLAY_TOTAL in all) through the regression state (load_history).
REPLAY_TOTAL = 40_000

# The lab a config's `lab: true` remotes stand for, worked out again for each config.
LabFor = Callable[[Config], LabSite | None]


JOURNAL_RETRY_EVERY = 10.0  # seconds between tries at writing what the journal could not take

# The judged mark (history/judged.py) is written at each round's end, at once after a
# judgement journaled a regression's event (the mark must have seen it: else a restart
# distrusts it), and otherwise once MARK_EVERY_RESULTS results or MARK_EVERY_SECONDS
# have gone unmarked (a mesh site's slots, a long round; the journal's retry job looks
# every JOURNAL_RETRY_EVERY), and at a stop; not after every result: at 1,000 series that
# was 0.21 MB written and fsynced per result (benchmarks/bench_judged_mark.py).  A kill
# between writes leaves each series' mark where it was written: a restart replays that
# series' runs journaled after it, at most MARK_EVERY_RESULTS, well within what a start
# judges before /metrics (restore.REPLAY_INLINE).
MARK_EVERY_RESULTS = 500
MARK_EVERY_SECONDS = 300.0


def run_id(when: float | None = None, tag: str = "") -> str:
    """The id a round (or sweep) journals its results under: its UTC start and 6 hex
    digits, from `tag` where runs elsewhere must get the same id (a mesh round: the
    plan's fingerprint), else random."""
    digits = hashlib.sha256(tag.encode()).hexdigest()[:6] if tag else uuid.uuid4().hex[:6]
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(when))}-{digits}"


def no_lab(config: Config) -> LabSite | None:
    return None


def series_of(config: Config, lab: LabFor = no_lab) -> list[SeriesKey]:
    return plan_series(config, lab(config))


def _removed(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True


def _judged_in_order(history: History, runs: list[tuple[float, float, SeriesKey]]) -> History:
    """The runs (start, throughput, series) judged one by one in time order, across series."""
    for t, x, key in sorted(runs, key=lambda run: run[0]):
        history.add(key, t, x)
    return history


class RoundRunner:
    """Runs rounds against the current config; journals then publishes each result."""

    def __init__(
        self,
        config: Config,
        state: ExporterState,
        on_result: Callable[[Result], None] | None = None,
        lab: LabFor = no_lab,
    ) -> None:
        self.config = config
        self.lab = lab
        self.state = state
        self.journal = Journal(config.journal.path, config.journal.retention)
        self.baselines = BaselineJournal(baseline_path(config.journal.path), config.journal.retention)
        self.undo = UndoJournal.beside(config.journal.path)
        self.note = RoundNote(config.journal.path)
        self.on_result = on_result
        # The last transfers, baselines and sweep runs, for the exporter's pages.
        self.recent = RecentTransfers(config.pages.recent_transfers)
        self._lock = threading.Lock()
        self._file_lock: BinaryIO | None = None  # the journal's lock file while held (_take)
        self.stopping = threading.Event()
        self._round_running = False  # a round (not a sweep or a command) holds the lock: a skip's reason
        self._iperf3_rates: dict[tuple[str, SeriesKey], float] = {}  # last ok iperf3 rate per series
        # The mesh site whose tests these are (`once --mesh.file M --site S`): set on its
        # results, as the mesh runner sets it on its slots' results.
        self.site = ""
        # Each series' recent ok runs for the regression test (bigbinf/history/regression.py),
        # tested again after each of its results; the lock: a reload swaps it.
        self._history_lock = threading.Lock()
        self.history = History(settings_of(config))
        # Its regression states' changes, journaled beside the journal (a restart keeps them),
        # and how far each series is judged (a restart judges only what came after).
        self.regression_journal = RegressionJournal(config.journal.path)
        self.judged_mark = JudgedMark(config.journal.path)
        self._last_event: dict[SeriesKey, LastEvent] = {}  # each series' last event in the regressions' journal
        self._marks: dict[SeriesKey, judged.SeriesMark] = {}  # each series' mark as last written
        self._marks_stale: set[SeriesKey] = set()  # series whose events were read since
        # Judged since the mark was last written: the series, the latest run's start, how
        # many results, since when (monotonic).
        self._unmarked: set[SeriesKey] = set()
        self._unmarked_through = -math.inf
        self._unmarked_results = 0
        self._unmarked_since: float | None = None
        # Why the last load_history left its re-judge for later (its `inline` bound: the
        # judged mark not trusted at a start, a re-judge too long for before /metrics),
        # None if it did not; the next load_history then judges again at once.
        self.rejudge_later: str | None = None
        # Whether the history was restored from the journal (load_history): only then are
        # its results judged on the series' whole history, and marked judged (`once`
        # runs on an empty one: its runs are the next start's to judge).
        self.judging = False
        # What changed when each open regression began (history/change.py), by series.
        self.changes: dict[SeriesKey, Change] = {}
        # Each remote's ok runs of the last moves.history, for plan-move's predictions of
        # the configured moves.sizes (bigbinf/history/moveplan.py); under the same lock.
        self.move_runs = RecentRuns()

    @property
    def pending(self) -> PendingStore:
        """Transfers whose capture's analysis is still to be done (journal/pending.py)."""
        return PendingStore(self.journal.path)

    def restore_history(self, results: Iterable[Result], keys: Iterable[SeriesKey]) -> None:
        """The regression test's history from the journal (at start, or after a reload
        changed the test's settings): the exporter's own ok runs of the series `keys`,
        and their regression states from the regressions' journal; every series not in
        an open regression takes a step (it may open one, journaled); then every verdict
        is published."""
        wanted = set(keys)
        runs: dict[SeriesKey, list[tuple[float, float]]] = {}
        for r in results:
            if r.source == "exporter" and counts_in_baseline(r) and r.key in wanted:
                runs.setdefault(r.key, []).append((r.start_timestamp, r.throughput_bytes_per_second))
        self.load_history(runs, wanted)

    def load_history(
        self,
        runs: Mapping[SeriesKey, Iterable[tuple[float, float]]],
        keys: Iterable[SeriesKey] | None = None,
        inline: int | None = None,
    ) -> None:
        """The regression test's history: each series' ok runs (start, throughput), from
        restore_history or the journal's checkpoint (service/restore.py); then every
        verdict is published.  `keys`: the series whose regression states are restored
        (default: those with runs).  `inline`: a start before /metrics is up; where the
        judged mark is not trusted and the re-judge would judge more runs than this,
        nothing is changed and `rejudge_later` says why (the caller publishes the
        journaled states and calls this again after /metrics is up)."""
        journal = RegressionJournal(self.config.journal.path)
        mark = JudgedMark(self.config.journal.path)
        first_start = not journal.present()
        wanted = set(runs) if keys is None else set(keys)
        events = [e for e in journal.read_events() if e.key in wanted]
        enabled = self.config.regression.enabled
        series, ahead = self._judgeable(runs)
        refused, self.rejudge_later = self.rejudge_later, None  # refused before /metrics: not read again
        history = self._from_mark(series, events, mark) if enabled and not first_start and not refused else None
        if history is None:
            # A mark that does not read says nothing of how far the runs are judged: every
            # series' last runs a suspicion may span are judged again.
            through = None if first_start else mark.through() or math.inf
            if inline is not None and not first_start and enabled:
                again = self._rejudged_runs(series, through)
                if again > inline:
                    self.rejudge_later = f"up to {again} runs of {len(series)} series to judge again (the judged mark)"
                    return
            history = self._rejudge(series, events, first_start, through)
        history.future_dated.update(ahead)
        if enabled:
            # Every series takes a step on the runs journaled before this start, an open
            # one too: a regression whose recovery runs were journaled while no exporter
            # judged them (a stop, `once`) closes now, not on the next run after it (where
            # no exporter marked what it had judged, the runs were loaded, not replayed).
            for key in list(history.tests):
                history.step(key)
        try:
            journal.append(history.events)
            if first_start and enabled:
                journal.path.parent.mkdir(parents=True, exist_ok=True)
                journal.path.touch()  # replayed once: the next start restores from it
        except OSError as exc:  # a read-only or failing disk: the states are in memory, rebuilt at the next start
            log.warning(
                "%s: the regression states are held in memory and rebuilt from the results' journal at the next start",
                describe_os_error(exc, journal.path, "regressions' journal"),
            )
        self._last_event = {e.key: (e.kind, e.at, e.since) for e in [*events, *history.events]}
        history.events.clear()
        latest = max((s[-1][0] for s in series.values() if s), default=-math.inf)
        if enabled and math.isfinite(latest):
            self._mark_judged(mark, history, latest)
        opened = {k: t.episode.since for k, t in history.tracks.items() if t.episode is not None}
        self.changes = self._what_changed(opened) if enabled else {}
        with self._history_lock:
            self.history = history
            self.regression_journal = journal
            self.judged_mark = mark
            self.judging = True
            verdicts = history.verdicts() if enabled else {}
        self.state.record_regressions(self._with_changes(verdicts))

    @staticmethod
    def _judgeable(
        runs: Mapping[SeriesKey, Iterable[tuple[float, float]]],
    ) -> tuple[dict[SeriesKey, list[tuple[float, float]]], dict[SeriesKey, int]]:
        """Each series' runs in time order, those dated in the future (a clock that was
        ahead; journal order tells, and the host's clock) left out, never recent, never
        the judged mark (issue 45 B3); and how many were, by series."""
        now = time.time()
        series: dict[SeriesKey, list[tuple[float, float]]] = {}
        ahead_of: dict[SeriesKey, int] = {}
        for key, unsorted_runs in runs.items():
            listed = list(unsorted_runs)
            # The starts as an array (some 4,000 runs a series at a start: one pass in C).
            starts = np.fromiter(itertools.chain.from_iterable(listed), dtype=float, count=2 * len(listed))[::2]
            ahead = future_dated(starts, now)
            if not any(ahead):
                if listed:
                    series[key] = sorted(listed)  # in time order already, mostly: a linear sort
                continue
            ahead_of[key] = sum(ahead)
            log.warning(
                "%s: %d run(s) dated in the future (a clock ahead when journaled, latest %s UTC): left out "
                "of the regression test",
                key,
                sum(ahead),
                time.strftime("%F %T", time.gmtime(max(t for (t, _), a in zip(listed, ahead, strict=True) if a))),
            )
            kept = sorted(run for run, a in zip(listed, ahead, strict=True) if not a)
            if kept:
                series[key] = kept
        return series, ahead_of

    def _from_mark(
        self, series: Mapping[SeriesKey, list[tuple[float, float]]], events: list[Event], mark: JudgedMark
    ) -> History | None:
        """The history as the judged mark left it (history/judged.py): each series' runs up
        to its mark loaded with what its test carried then, tested once, and only the runs
        journaled after it judged, in order; None (said in one line) where the mark cannot
        be trusted: the whole re-judge then (`_rejudge`), as its answer must be the same."""
        history = History(settings_of(self.config))
        marks, why = mark.read(history.settings.repetitions)
        if marks is None:
            (log.info if why == "missing" else log.warning)(
                "%s: %s: the regression states are judged again from the results' journal (the runs a suspicion "
                "may span)",
                mark.path,
                why,
            )
            return None
        history.restore(events)
        last_event: dict[SeriesKey, LastEvent] = {e.key: (e.kind, e.at, e.since) for e in events}
        replayed: list[tuple[float, float, SeriesKey]] = []
        for key, series_runs in series.items():
            cut, why = judged.resume_series(history, key, marks.get(key), series_runs, last_event.get(key))
            if why:
                log.warning(
                    "%s: %s: the regression states are judged again from the results' journal (the runs a "
                    "suspicion may span)",
                    mark.path,
                    why,
                )
                return None
            history.retest(key)
            replayed.extend((t, x, key) for t, x in series_runs[cut:])
        return _judged_in_order(history, replayed)

    def _rejudged_runs(self, series: Mapping[SeriesKey, list[tuple[float, float]]], judged: float | None) -> int:
        """How many runs `_rejudge` judges again at a restart, at most: each series' runs
        journaled after `judged` and the runs a suspicion may span before them."""
        span = SUSPECT_RUNS + self.history.settings.recent_runs
        after = math.inf if judged is None else judged
        return sum(min(len(s), span + len(s) - bisect.bisect_right(s, (after, math.inf))) for s in series.values())

    def _rejudge(
        self,
        series: Mapping[SeriesKey, list[tuple[float, float]]],
        events: list[Event],
        first_start: bool,
        judged: float | None,
    ) -> History:
        """The history judged again from the runs: each series' runs replayed through the
        state from where a suspicion may have begun (or, at a first start, from its
        first baseline), in time order across series."""
        history = History(settings_of(self.config))
        history.restore(events)
        last_event: dict[SeriesKey, float] = {}
        for e in events:
            last_event[e.key] = max(last_event.get(e.key, e.at), e.at)
        enabled = self.config.regression.enabled
        # The first start with a regressions' journal (none yet beside this journal): each
        # series' runs after its first baseline are replayed through the state, in time
        # order across series, so that a regression that began before it is found open
        # against the level before it, not half-way into its baseline (issue 35's 35 days
        # at one rate, then 10 days at 70%), and one the history has recovered is closed
        # (issue 45: the last 240 runs alone measured an older one against an already
        # degraded level).  Bounded: a one-off cost of 0.72 CPU-ms per replayed run
        # (measured: 39,960 runs of 120 hourly series, default settings, 28.7 CPU-s; it
        # grows with the runs in a baseline), at most REPLAY_TOTAL of them.  More than
        # restore.REPLAY_INLINE are replayed after /metrics is up (server.py).
        budget = REPLAY_TOTAL // max(1, len(series)) if first_start and enabled else 0
        # A restart judges the runs journaled since the last one judged (a stop, `once`
        # rounds while none ran), each in order, as if it had run throughout: one step on
        # them all opened a regression present at the restart only at its 9th-16th run.
        if not enabled:
            judged = None
        replayed: list[tuple[float, float, SeriesKey]] = []
        for key, series_runs in series.items():
            first_baseline = first_testable([t for t, _ in series_runs], history.settings)
            if budget:
                # The last runs within the budget, and back to the start of any regression
                # the series may hold (`replay_from`): the budget alone, 40 runs a series
                # at 1,000 series, took an older regression into the baseline.
                cut = max(first_baseline, len(series_runs) - budget)
                ts = np.array([t for t, _ in series_runs])
                logs = np.log(np.maximum(np.array([x for _, x in series_runs]), 1e-300))
                since = replay_from(ts, logs, history.settings)
                if since is not None:
                    cut = max(first_baseline, min(cut, bisect.bisect_left(series_runs, (since,))))
            elif judged is not None:
                cut = bisect.bisect_right(series_runs, (judged, math.inf))
                track = history.tracks.get(key)
                if track is None or track.episode is None:
                    # A suspicion is not journaled: the runs it may span (SUSPECT_RUNS and the
                    # recent ones) are judged again, from after the series' last journaled
                    # event (nothing journaled is decided twice), so that a restart during a
                    # suspicion does not load its slow runs as baseline (issue 45 B2: with
                    # daily restarts 3 of 6 noisy 20% drops became the baseline unseen).
                    again = max(first_baseline, cut - SUSPECT_RUNS - history.settings.recent_runs)
                    if key in last_event:
                        again = max(again, bisect.bisect_right(series_runs, (last_event[key], math.inf)))
                    cut = min(cut, again)
            else:
                cut = len(series_runs)
            history.load(key, series_runs[:cut])
            history.retest(key)
            replayed.extend((t, x, key) for t, x in series_runs[cut:])
        return _judged_in_order(history, replayed)

    def _mark_judged(
        self, mark: JudgedMark, history: History, through: float, back: bool = False, keys: Iterable[SeriesKey] = ()
    ) -> None:
        """Every series' judged state written down (history/judged.py): a restart judges
        only what comes after.  Only `keys` (and those whose events were taken since) are
        worked out again (a run changes its own series' state alone); none: all."""
        if not keys:
            self._marks.clear()
        else:
            keys = {*keys, *self._unmarked}  # judged since the last write
            if not back:
                through = max(through, self._unmarked_through)
        for key in list(keys or history.runs) + sorted(self._marks_stale, key=str):
            carried_mark = carried(history, key, self._last_event.get(key))
            if carried_mark is None:
                self._marks.pop(key, None)
            else:
                self._marks[key] = carried_mark
        self._marks_stale.clear()
        self._unmarked.clear()
        self._unmarked_through, self._unmarked_results, self._unmarked_since = -math.inf, 0, None
        mark.write(through, {k: m for k, m in self._marks.items() if k in history.runs}, back=back)

    def write_mark(self, due_only: bool = False) -> None:
        """The judged mark written for what was judged since its last write (at a round's
        end, a stop; `due_only`: only if MARK_EVERY_RESULTS or MARK_EVERY_SECONDS have
        gone unmarked, the journal's retry job's look)."""
        with self._history_lock:
            if self.judging and self._unmarked and (not due_only or self._mark_due()):
                self._mark_judged(self.judged_mark, self.history, self._unmarked_through, keys=set(self._unmarked))

    def round_judged(self) -> None:
        """A round's results are all journaled and judged: the mark says so (a restart
        after a kill in the next round replays only that round's runs)."""
        self.write_mark()

    def _mark_due(self) -> bool:
        since = self._unmarked_since
        return self._unmarked_results >= MARK_EVERY_RESULTS or (
            since is not None and time.monotonic() - since >= MARK_EVERY_SECONDS
        )

    def _what_changed(self, opened: dict[SeriesKey, float]) -> dict[SeriesKey, Change]:
        """What changed when these regressions began (series -> start), from the journals."""
        if not opened:
            return {}
        span = self.config.regression.baseline_weeks * WEEK
        since = min(opened.values()) - span  # the baseline's weeks before the first start: no more is read
        results = [r for r in self.journal.read(since=since) if r.key in opened]
        baselines = list(self.baselines.read(since=since))
        changes = {key: what_changed(key, since, span, results, baselines) for key, since in opened.items()}
        for key, change in changes.items():
            log.warning("regression of %s: what changed: %s", key, describe(change))
        return changes

    def _with_changes(self, verdicts: dict[SeriesKey, Verdict]) -> dict[SeriesKey, Verdict]:
        # Only the series with a change are replaced (a few), not every series' verdict looked at.
        for k, change in self.changes.items():
            v = verdicts.get(k)
            if v is not None and v.regressed:
                verdicts[k] = dataclasses.replace(v, change=change)
        return verdicts

    def forget_history(self, keys: Iterable[SeriesKey]) -> None:
        """Keep only these series' history and verdicts (a reload removed the others);
        accepts journaled meanwhile are taken up."""
        with self._history_lock:
            self.history.keep(keys)
            self._take_accepts()
            verdicts = self.history.verdicts() if self.config.regression.enabled else {}
        self.state.record_regressions(self._with_changes(verdicts))

    def sync_accepts(self) -> None:
        """Take up `regression accept`s journaled by another process since the last look
        (the exporter looks every few seconds): the verdicts are published again if one
        closed an open regression."""
        with self._history_lock:
            changed = self._take_accepts()
            verdicts = self.history.verdicts() if changed and self.config.regression.enabled else None
            if self._marks_stale and self.judging:
                # An accept (or an event of its own) read: the mark says it has seen it, or a
                # restart before the next run would find an event after the mark and re-judge.
                self._mark_judged(self.judged_mark, self.history, -math.inf, keys=set(self._marks_stale))
        if verdicts is not None:
            self.state.record_regressions(self._with_changes(verdicts))

    def _take_accepts(self) -> bool:
        """Under the history lock."""
        taken = False
        for event in self.regression_journal.new_events():
            self._last_event[event.key] = (event.kind, event.at, event.since)
            self._marks_stale.add(event.key)
            if event.kind == ACCEPTED and self.history.take(event):
                log.info("regression of %s accepted: its level since %s is the baseline now", event.key, event.since)
                taken = True
        return taken

    def note_moves(self, results: Iterable[Result], restore: bool = False) -> None:
        """Ok runs (scheduled or a sweep's) for the move predictions; each remote that got
        one is predicted again and published.  `restore`: the runs so far are replaced
        (at start, from the journal)."""
        moves = self.config.moves
        with self._history_lock:
            if restore:
                self.move_runs = RecentRuns()
            changed: set[str] = set()
            for r in results:
                for run in move_runs([r], r.remote, moves.direction):
                    self.move_runs.add(r.remote, run)
                    changed.add(r.remote)
        self._predict_moves(changed)

    def restore_moves(self, runs: RecentRuns) -> None:
        """The move model's runs as the journal's checkpoint kept them (service/restore.py),
        in place of those so far; every remote predicted again and published."""
        with self._history_lock:
            self.move_runs = runs
        self._predict_moves(set(runs.remotes()))

    def _predict_moves(self, changed: set[str]) -> None:
        moves = self.config.moves
        zone = self.history.zone
        with self._history_lock:
            if not moves.sizes:
                return
            published: dict[str, dict[str, Prediction]] = {}
            paths = self.state.snapshot_paths()
            for remote in changed:
                if remote not in self.config.remotes:
                    continue
                # Only the protocols configured now; one with an open or accepted
                # regression from its runs since: plan-move's rules (history/moveplan.py).
                runnable = runnable_protocols(self.config.protocols, moves.direction)
                runs, _ = configured_only(self.move_runs.runs(remote, moves.history), runnable)
                regressed, accepted = levels(self.history.tracks.items(), remote, moves.direction)
                runs = [r for r in since_regressions(runs, regressed, accepted) if not r.left_out]
                bandwidth = paths[remote].bandwidth_bytes_per_second if remote in paths else None
                predictions = {}
                fits, refused = fit_all(runs, zone)  # once for every size
                now_hour = local_hour(time.time(), zone)  # a tie of start hours: now
                for size in moves.sizes:
                    best = rank(fits, refused, remote, size, moves.files, bandwidth, now_hour=now_hour).best
                    if best is not None:
                        predictions[size_label(size)] = best[1]
                published[remote] = predictions
        for remote, predictions in published.items():
            self.state.record_moves(remote, predictions)

    def _test_regression(self, r: Result) -> None:
        if r.source != "exporter" or not counts_in_baseline(r) or not self.config.regression.enabled:
            return
        if r.start_timestamp > time.time() + FUTURE_SLACK:
            log.warning(
                "%s: run started %s UTC, in the future by the host's clock: left out of the regression test",
                r.key,
                time.strftime("%F %T", time.gmtime(r.start_timestamp)),
            )
            with self._history_lock:
                self.history.future_dated[r.key] = self.history.future_dated.get(r.key, 0) + 1
            return
        with self._history_lock:
            taken = self._take_accepts()
            changed = self.history.add(r.key, r.start_timestamp, r.throughput_bytes_per_second)
            future = self.history.dropped_future[:]
            self.history.dropped_future.clear()
            for key, start in future:
                log.warning(
                    "%s: run started %s UTC was dated in the future (a later run started %s UTC): left out of the "
                    "regression test",
                    key,
                    time.strftime("%F %T", time.gmtime(start)),
                    time.strftime("%F %T", time.gmtime(r.start_timestamp)),
                )
            for event in self.history.events:
                since = time.strftime("%F %T", time.gmtime(event.since))
                log.warning("regression of %s %s (since %s UTC)", event.key, event.kind, since)
            try:
                self.regression_journal.append(self.history.events)  # before it is published
            except OSError as exc:
                log.warning(
                    "%s: these changes are held in memory; a restart judges their runs again from the results' journal",
                    describe_os_error(exc, self.regression_journal.path, "regressions' journal"),
                )
            self._last_event.update((e.key, (e.kind, e.at, e.since)) for e in self.history.events)
            if self.judging:
                keys = {r.key, *(key for key, _ in future)}
                self._unmarked |= keys
                self._unmarked_through = max(self._unmarked_through, r.start_timestamp)
                self._unmarked_results += 1
                if self._unmarked_since is None:
                    self._unmarked_since = time.monotonic()
                # Written now where this judgement journaled an event or one was read (the
                # mark must have seen it), or a future-dated run's mark is taken back (a
                # restart replays what came after); else at the round's end (MARK_EVERY_RESULTS).
                if self.history.events or future or self._marks_stale or self._mark_due():
                    self._mark_judged(self.judged_mark, self.history, r.start_timestamp, back=bool(future), keys=keys)
            opened = {e.key: e.since for e in self.history.events if e.kind == OPENED}
            self.history.events.clear()
            verdicts = self.history.verdicts() if changed or taken else None
        if opened:
            self.changes.update(self._what_changed(opened))
        if verdicts is not None:
            self.state.record_regressions(self._with_changes(verdicts))

    def run_round(self, specs: list[TransferSpec] | None = None, wait: bool = False) -> list[Result] | None:
        """One scheduled run (config.schedule.rounds repetitions); None if one is running
        (with `wait`: once it has ended; None only when stopping meanwhile)."""
        if wait:
            if not self.exclusive():
                return None
        elif not self._take(blocking=False):
            reason = "round_running" if self._round_running else "lock_held"
            log.warning(
                "round skipped: %s",
                "the previous round is still running (rounds take longer than the schedule's interval here: "
                "bigbinf_round_overrun_seconds, --config.check estimates a round)"
                if reason == "round_running"
                else "a tuning sweep or a once/sweep command holds the round lock",
            )
            self.state.record_round_skipped(reason)
            return None
        else:
            self.settle()
        try:
            self._round_running = True
            # A round an ended run left unfinished comes first: a new round would take its note's place.
            resumed = self._resume() or []
            return resumed + self._run(specs) if not self.stopping.is_set() else resumed
        finally:
            self._round_running = False
            self.release()

    def wait_idle(self, timeout: float) -> bool:
        """Whether no round (sweep, mesh slot, recovery) holds the round lock within
        `timeout` seconds: the exporter's stop waits for the round it cut to journal what
        it measured (issue 36)."""
        if not self._lock.acquire(timeout=max(0.0, timeout)):
            return False
        self._lock.release()
        return True

    def busy(self) -> bool:
        """Whether a round, slot, sweep or recovery of this process holds the round lock now
        (looked at, not taken: a round due this instant is never skipped for the look)."""
        return self._lock.locked()

    def exclusive(self, timeout: float | None = None) -> bool:
        """Take the round lock for something else that must not overlap a round (a tuning
        sweep, service/sweeps.py): True once held (release with `release`), False if not
        within `timeout` seconds (None: wait until it is free, or until stopping).  What
        an ended run left changed is undone first (settle)."""
        if self._take(blocking=False):
            self.settle()
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.stopping.is_set():
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                return False
            if self._take(blocking=True, timeout=wait):
                self.settle()
                return True
        return False

    def settle(self) -> Replay:
        """Undo what ended runs left changed (the undo journal's pending entries) and
        remove the files their transfers left (measure/leftovers.py); publish what stays
        pending.  Call with the round lock held."""
        process.ensure_guardian()  # one killed on its own is started again
        self._note_ssh_commands()
        try:
            replay = self.undo.replay()
        except UndoError as exc:
            log.error("%s", exc)
            replay = Replay([], [str(exc)])
        self.record_undo_pending()
        # The undo journal and the round's note are rewritten through temporary files: one
        # a kill interrupted is stale (only the holder of this lock writes them).
        stale = [p for p in (*temporaries(self.undo.path), *temporaries(self.note.path)) if _removed(p)]
        for path in [*map(str, stale), *leftovers.reap(self.config)]:
            log.warning("removed what a transfer of an ended run left: %s", path)
            replay.undone.append(f"removed {path}")
        self.finish_pending()
        return replay

    def finish_pending(self) -> list[Result]:
        """Analyse, journal and publish the transfers whose capture's analysis was cut by
        a stop or timed out (journal/pending.py); their results.  Call with the round
        lock held.  One that times out again stays for the next try, MAX_ATTEMPTS in all."""
        finished: list[Result] = []
        entries = list(self.pending.entries())
        if not entries:
            return finished
        journaled = {(r.round_id, r.key, r.start_timestamp) for r in self.journal.read()}
        for record, entry in entries:
            if self.stopping.is_set():
                break
            measured = entry.result
            if (measured.round_id, measured.key, measured.start_timestamp) in journaled:
                self.pending.remove(record)  # journaled, then killed before the entry went
                continue
            try:
                result = analyse_pending(entry)
            except AnalysisStopped:
                break
            except AnalysisTimeout as exc:
                if entry.attempts < MAX_ATTEMPTS:
                    log.warning("%s (attempt %d of %d): analysed again later", exc, entry.attempts + 1, MAX_ATTEMPTS)
                    self.pending.retry(record, entry, str(exc))
                    continue
                # Failed, saying what timed out; its capture kept, to be analysed by hand.
                kept = dataclasses.replace(entry, keep_directory=str(kept_pcap_directory(self.config)))
                result = complete(kept, None, f"analysis: {exc} ({MAX_ATTEMPTS} attempts)")
            except Exception as exc:  # a bug never keeps the measurement from the journal
                log.exception("%s: finishing its analysis failed", entry.pcap)
                result = complete(entry, None, f"analysis: internal error: {type(exc).__name__}: {exc}")
            log.info("round %s: %s analysed late (%s)", measured.round_id, record.stem, entry.reason)
            if self.site and not result.site:
                result = dataclasses.replace(result, site=self.site)
            self.publish(result)
            self.pending.remove(record)
            finished.append(result)
        return finished

    def _note_ssh_commands(self) -> None:
        """The remotes' stats and tcp commands, named to the guardian: their ssh
        ControlMasters end with this exporter (bigbinf/guardian.py)."""
        try:
            remotes = {spec.remote.name: spec.remote for spec in plan_round(self.config, self.lab(self.config))}
        except PlanError:  # a lab remote without the lab (`lab down`): nothing of it runs here
            return
        for remote in remotes.values():
            if remote.stats_command:
                process.note_ssh(remote.stats_argv([]))
            if remote.tcp_command:
                process.note_ssh(remote.tcp_argv([]))

    def settle_now(self) -> Replay | None:
        """settle() under the round lock, taken and released here; None if it is held
        (by a live round or sweep, which settles itself).  Where no round ever took the
        lock (no journal directory) there is nothing to settle, and nothing is created."""
        if not self.journal.path.parent.is_dir():
            return Replay([], [])
        if not self._take(blocking=False):
            return None
        try:
            return self.settle()
        finally:
            self.release()

    def record_undo_pending(self) -> None:
        self.state.record_undo_pending(self.undo.counts())

    def release(self) -> None:
        if self._file_lock is not None:
            self._file_lock.close()  # closing the descriptor drops the flock
            self._file_lock = None
        self._lock.release()

    def _take(self, blocking: bool, timeout: float = -1) -> bool:
        """The thread lock, then the journal's lock file (`<journal>.lock`, flock): a
        `sweep` command in another process and the exporter's rounds exclude each other
        too.  A lock file that cannot be opened (permissions) is logged and not used."""
        if not self._lock.acquire(blocking, timeout):
            return False
        path = self.journal.path.with_name(self.journal.path.name + ".lock")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Read-only: flock needs no write access, so a lock file another user made (a
            # `sudo bigbinf-exporter sweep` beside the service's user) still locks.
            f = os.fdopen(os.open(path, os.O_RDONLY | os.O_CREAT, 0o644), "rb")
        except OSError as exc:
            log.warning("lock file %s: cannot open (%s); excluding only within this process", path, exc)
            return True
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            self._lock.release()
            if blocking and timeout > 0:
                self.stopping.wait(min(timeout, 1.0))
            return False
        self._file_lock = f
        return True

    def _run(self, specs: list[TransferSpec] | None) -> list[Result]:
        config = self.config
        specs = plan_round(config, self.lab(config)) if specs is None else specs
        results: list[Result] = []
        started, began = time.time(), time.monotonic()
        for _repetition in range(config.schedule.rounds):
            done = self._round(specs, run_id(), time.time())
            results += done or []
            if done is None:
                return results
        # By how much the round (all its repetitions) met the next scheduled start.
        overrun = time.monotonic() - began - gap_after(config.schedule, started)
        self.state.record_round_overrun(max(0.0, overrun))
        if overrun > 0:
            log.warning(
                "this round took %.0f s, %.0f s past the next scheduled start: that start is skipped; "
                "lengthen schedule.interval or shorten the round (docs/configuration.md, 'A round longer than "
                "its interval')",
                overrun + gap_after(config.schedule, started),
                overrun,
            )
        return results

    def _round(self, specs: list[TransferSpec], round_id: str, started: float) -> list[Result] | None:
        """The transfers of one round (written down first, struck off once all are
        journaled: service/round_note.py); their results, or None if stopped before the end."""
        start = time.monotonic()
        self.note.write(Note(round_id, started, tuple(series_key(s) for s in specs)))
        paths = self.probe_paths(specs)
        results: list[Result] = []
        for spec in specs:
            if self.stopping.is_set():
                return None
            log.info("round %s: %s", round_id, spec.label)
            self.recent.running(f"round {round_id}: {spec.label}")
            try:
                result = run_transfer(spec, self.config, round_id, paths.get(spec.remote.name), self.pending)
                kept = self._keep(spec, result)
            finally:
                self.recent.running(None)
                process.measured.clear()  # journaled, kept or dropped: a stop need not wait for it
            if kept is None:
                return None
            if isinstance(kept, Result):
                results.append(kept)
            if self.stopping.is_set():
                return None
        self.note.strike(round_id)
        self.round_judged()
        self.state.record_round(time.monotonic() - start, time.time())
        return results

    def _keep(self, spec: TransferSpec, result: Result | PendingAnalysis) -> Result | PendingAnalysis | None:
        """A transfer's result, journaled; or pending its analysis, kept; or None: stopped
        (a transfer the stop cut is dropped: the round's note runs it again)."""
        if isinstance(result, PendingAnalysis):  # journaled once analysed (settle)
            if not self.stopping.is_set():
                return result
            if result.result.outcome != "ok":  # the stop killed it: run again by the note
                self.pending.remove(Path(result.pcap).with_suffix(".json"))
                log.info("%s interrupted by shutdown: not recorded", spec.label)
            return None
        if self.stopping.is_set() and result.outcome != "ok":
            # Killed by our own shutdown: not a measurement of the remote (the round's
            # note runs it again).  One that ended ok had ended before: journaled.
            log.info("%s interrupted by shutdown: not recorded", spec.label)
            return None
        if self.site:
            result = dataclasses.replace(result, site=self.site)
        self.publish(result)
        return result

    def unfinished(self) -> tuple[Note, list[TransferSpec]] | None:
        """The round an ended run left unfinished and the transfers of it not yet journaled
        under its id (as the configuration has them now), or None: none, or one older
        than the schedule's longest gap (dropped: the next round has taken its place)."""
        note = self.note.read()
        if note is None:
            return None
        age = time.time() - note.started
        if age > longest_gap_seconds(self.config.schedule):
            log.warning(
                "round %s was cut short %.0f s ago, longer than the schedule's gap: not finished", note.round_id, age
            )
            self.note.drop()
            return None
        journaled = {r.key for r in self.journal.read(since=note.started - DAY) if r.round_id == note.round_id}
        wanted = set(note.series) - journaled - self.pending.series_of(note.round_id)
        return note, [s for s in plan_round(self.config, self.lab(self.config)) if series_key(s) in wanted]

    def resume(self) -> list[Result] | None:
        """Finish the round an ended run left unfinished (see `unfinished`), under the
        round lock; its results, or None if there was none (or the lock was held: the
        round that holds it finishes it first)."""
        if not self._take(blocking=False):
            return None
        try:
            self.settle()
            return self._resume()
        finally:
            self.release()

    def _resume(self) -> list[Result] | None:
        left = self.unfinished()
        if left is None:
            return None
        note, specs = left
        log.warning(
            "round %s was cut short (the exporter ended mid-round): running its %d transfer(s) not yet journaled",
            note.round_id,
            len(specs),
        )
        if not specs:
            self.note.strike(note.round_id)
            return []
        return self._round(specs, note.round_id, note.started)

    def probe_paths(self, specs: list[TransferSpec]) -> dict[str, PathBaseline]:
        """The path to each remote of the round, probed before its transfers (outside
        their captures); journaled, then published, like results."""
        remotes: dict[str, Remote] = {}
        for spec in specs:
            remotes.setdefault(spec.remote.name, spec.remote)
        paths = {}
        for name, remote in remotes.items():
            if self.stopping.is_set():
                break
            try:
                baseline = measure_path(remote, self._measured_bandwidth(name))
            except Exception as exc:  # a probe's bug never takes the round's transfers down
                log.exception("path %s: probe failed", name)
                baseline = PathBaseline(name, time.time(), error=f"internal error: {type(exc).__name__}: {exc}")
            self.publish_path(baseline)
            paths[name] = baseline
        return paths

    def _measured_bandwidth(self, remote: str) -> float | None:
        """The bottleneck as the last ok iperf3 tests to `remote` measured it (its own
        report: memory to memory, the path's capacity rather than a disk's); kept per
        series past a later failed test, and from the journal's last results at start."""
        for r in self.state.latest_results():
            self._note_iperf3(r)
        rates = [rate for (name, _series), rate in self._iperf3_rates.items() if name == remote]
        return max(rates, default=None)

    def _note_iperf3(self, r: Result) -> None:
        if r.outcome == "ok" and r.reported.get("bytes", 0) > 0 and r.reported.get("seconds", 0) > 0:
            self._iperf3_rates[(r.remote, r.key)] = r.reported["bytes"] / r.reported["seconds"]

    def publish_path(self, baseline: PathBaseline) -> None:
        if baseline.remote not in self.config.remotes:
            return  # removed by a reload while this round ran: its gauges must not come back
        _log_path(baseline)
        try:
            self.baselines.append(baseline)
        except OSError as exc:
            self.not_journaled(self.baselines, exc, "path baseline")
        self.journal_health()
        self.state.record_path(baseline)
        self.recent.add_baseline(baseline)

    def publish(self, result: Result) -> None:
        _log_result(result)
        try:
            self.journal.append(result)  # durable first: a scrape never shows an unjournaled result
        except OSError as exc:
            self.not_journaled(self.journal, exc, "result")
        self.journal_health()
        self.state.record(result)
        self.recent.add(result)
        self.record_undo_pending()  # a transfer's undo may have failed (its error says so)
        self._test_regression(result)
        if result.source == "exporter":
            self.note_moves([result])
        self._note_iperf3(result)
        if self.on_result:
            self.on_result(result)

    def not_journaled(self, journal: Journal | BaselineJournal, exc: OSError, what: str) -> None:
        """One line: why the journal took no write, and where the record is now."""
        self.state.record_journal_failure()
        text = describe_os_error(exc, journal.path, "journal") if not isinstance(exc, NotJournaled) else str(exc)
        if isinstance(exc, NotJournaled) and exc.dropped:
            self.state.record_journal_dropped(self.journal.unwritten_dropped + self.baselines.unwritten_dropped)
            log.error("%s; the %s is published but not journaled: lost at a restart", text, what)
        elif isinstance(exc, NotJournaled) and exc.unwritten:
            log.error(
                "%s; the %s is published and kept in memory (%d unwritten), written once the journal takes writes "
                "again (retried every %.0f s)",
                text,
                what,
                exc.unwritten,
                JOURNAL_RETRY_EVERY,
            )
        else:
            log.error("%s; the %s is published but will not survive a restart", text, what)

    def journal_health(self) -> None:
        """The records not yet journaled and the damaged segments moved aside, to the metrics."""
        found = sum(len(damaged(j.path)) + len(unmoved(j.path)) for j in (self.journal, self.baselines))
        self.state.record_journal_health(self.journal.unwritten_count, self.baselines.unwritten_count, found)

    def retry_journal(self) -> None:
        """Every JOURNAL_RETRY_EVERY: write what the journals could not take (their disk may
        take writes again), count the damaged segments (one removed by hand falls off), and
        write the judged mark if it is due."""
        for journal in (self.journal, self.baselines):
            journal.retry()
        self.journal_health()
        self.write_mark(due_only=True)  # the mark's bounded delay (MARK_EVERY_SECONDS)

    def spill_unwritten(self) -> None:
        """At a stop: what is still unwritten goes to a second place (store.spill), said how many and where."""
        for journal in (self.journal, self.baselines):
            journal.spill()
        self.journal_health()


_path_problems_logged: set[tuple[str, str]] = set()


def _log_path(b: PathBaseline) -> None:
    if b.probes_answered:
        log.info(
            "path %s: rtt min/avg/max/mdev %.3f/%.3f/%.3f/%.3f ms, loss %.1f%%, mtu %s, bdp %s",
            b.remote,
            *((v or 0.0) * 1000 for v in (b.rtt_min_seconds, b.rtt_avg_seconds, b.rtt_max_seconds, b.rtt_mdev_seconds)),
            b.loss_ratio * 100,
            b.mtu_bytes or "unknown",
            f"{b.bdp_bytes:.0f} B ({b.bandwidth_source})" if b.bdp_bytes else "unknown",
        )
    # A filtered probe or a remote without stats access is a fact of the site: said once.
    for problem in filter(None, (b.error, b.remote_note)):
        if (b.remote, problem) not in _path_problems_logged:
            _path_problems_logged.add((b.remote, problem))
            log.warning("path %s: %s", b.remote, problem)


_skip_logged: set[tuple[str, str]] = set()


def _log_result(r: Result) -> None:
    if r.outcome == "skipped":
        # A missing binary is a fact of this host, not news every round: log it once.
        if (r.protocol, r.error) not in _skip_logged:
            _skip_logged.add((r.protocol, r.error))
            log.warning("%s skipped: %s", r.protocol, r.error)
        return
    level = logging.INFO if r.outcome == "ok" else logging.ERROR
    log.log(
        level,
        "%s %s/%s/%s: %s %.3fs %.0f B/s ratio %.4f retrans %d%s",
        r.protocol,
        r.remote,
        r.dataset,
        r.direction,
        r.outcome,
        r.duration_seconds,
        r.throughput_bytes_per_second,
        r.byte_ratio,
        r.retransmits_wire,
        f" ({r.error})" if r.error else "",
    )
