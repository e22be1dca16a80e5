"""What an exporter knows from its journals before it measures anything, restored the same
way by the server, `once` and `sweep`: the last result of every configured series (the
last ok iperf3 test among them gives the path's bandwidth, rounds.RoundRunner), the last
path baseline of every remote, each configured sweep's last verdict, and the regression
test's history of every configured series (its verdicts), and the predicted moves.  A `once` that
started from nothing judged its transfers against no bandwidth at all, where the running
exporter judged the same transfers against the last iperf3 test (issue 23).

All of it from the journals' checkpoints (bigbinf/journal/checkpoint.py: a few megabytes beside
the journal, brought up to date from the journal's tail), not from the whole journal: a
start with a year of results journaled answers /metrics in seconds (issue 37).  The
journal is rotated first (an old single-file journal is split into day segments then)."""

from __future__ import annotations

import logging
import math
import time

from bigbinf.config import Config
from bigbinf.fserrors import describe_os_error
from bigbinf.history.judged import JudgedMark
from bigbinf.history.regression import BAD_DAY_BASELINES, SUSPECT_RUNS, WEEK, History, settings_of
from bigbinf.history.regression_state import RegressionJournal
from bigbinf.journal import checkpoint
from bigbinf.result import Result, SeriesKey
from bigbinf.runs import RecentRuns
from bigbinf.service import sweeps
from bigbinf.service.collector import ExporterState
from bigbinf.service.rounds import LabFor, RoundRunner, series_of

log = logging.getLogger(__name__)

# What a start may read before /metrics is up: about two seconds of folding on a quiet
# 2-core host (some 5,000 lines).  More (the first start after the upgrade to a
# single-file journal of a year; a checkpoint lost or of an older version) is read after,
# with bigbinf_journal_loading 1 meanwhile (server.py).
LOAD_INLINE_BYTES = 8 << 20
# Runs a first start (no regressions' journal yet) may replay through the regression
# state before /metrics is up (RoundRunner.load_history: 0.72 CPU-ms each, measured at
# 1 M results of 120 hourly series; issue 44 saw 4.3 on 40 series x 240 runs): a second or so.
REPLAY_INLINE = 1000


def rejudge_deferred(runner: RoundRunner, config: Config, lab: LabFor) -> str | None:
    """Why this restart's re-judge (RoundRunner.load_history: the runs a suspicion may
    span, SUSPECT_RUNS and the recent ones of each series without an open regression, and
    those journaled since the last judged) is better done after /metrics is up: more than
    REPLAY_INLINE runs (33 of each of 1,000 series: 36 CPU-s before /metrics on main,
    docs/benchmarks.md).  None: a first start (`deferred` weighs its replay), the test disabled,
    or few runs.  Counted from the checkpoint's series, an upper bound: no run is read."""
    if not config.regression.enabled or not RegressionJournal(config.journal.path).path.exists():
        return None
    configured = set(series_of(config, lab))
    kept = checkpoint.of(runner.journal)  # loaded for the restore anyway
    # With a judged mark every series is in, only the runs journaled after it are judged
    # (its series-by-series checks, in RoundRunner.load_history, may still send it all
    # back to the re-judge: restore's before_metrics then leaves that for after /metrics).
    marks, _ = JudgedMark(config.journal.path).read(max(1, config.schedule.rounds))
    if marks is not None and not kept.runs_after(dict.fromkeys(configured - marks.keys(), -math.inf)):
        runs = kept.runs_after({k: marks[k].through for k in configured & marks.keys()})
        if runs > REPLAY_INLINE:
            return f"{runs} runs of {len(configured)} series journaled after the judged mark to judge"
        return None
    runs = min(kept.runs_kept(configured), (SUSPECT_RUNS + config.regression.recent_runs) * len(configured))
    if runs > REPLAY_INLINE:
        return f"up to {runs} runs of {len(configured)} series to judge again through the regression state"
    return None


def deferred(runner: RoundRunner, config: Config, lab: LabFor) -> str | None:
    """Why this start's restore is better done after /metrics is up, in the background
    (None: it is cheap, done before): an old single file to split, a checkpoint far behind
    its journal, a long first replay.  Loads the checkpoint (kept for the restore)."""
    journal = runner.journal
    try:
        size = journal.path.stat().st_size if journal.path.exists() else 0  # gone: a split killed midway
        if size > LOAD_INLINE_BYTES and journal.split_due():
            return f"{journal.path}: {size / 2**20:.0f} MB of several days to split into day segments"
        behind = checkpoint.unfolded(journal)
    except OSError as exc:
        log.debug("%s: sized as cheap (%s)", journal.path, exc)  # restore() says what is wrong
        return None
    if behind > LOAD_INLINE_BYTES:
        return f"{checkpoint.checkpoint_path(journal.path)}: about {behind / 2**20:.0f} MB of journal to fold into it"
    if config.regression.enabled and not RegressionJournal(config.journal.path).present():
        runs = journal.fold.runs_kept(set(series_of(config, lab))) if journal.fold is not None else 0
        if runs > REPLAY_INLINE:
            return f"{runs} runs to replay through the regression state (no regressions' journal yet)"
    return None


def restore(
    state: ExporterState,
    runner: RoundRunner,
    config: Config,
    lab: LabFor,
    rejudge: bool = True,
    before_metrics: bool = False,
) -> int:
    """Restore `state` from `runner`'s journals; returns how many results it restored.
    Only series this configuration measures: imported 2015 dumps and series removed from
    the config would otherwise come back as unbounded, stale label values.  `rejudge`
    False: the regression test's history is left for `restore_history` after /metrics is
    up (`rejudge_deferred`); meanwhile only its journaled states are published
    (`restore_journaled_states`).  `before_metrics` (the server's start): the same where
    the judged mark turns out untrusted series by series (`rejudge_deferred` cannot tell
    without loading each series) and its re-judge would judge more than REPLAY_INLINE
    runs (runner.rejudge_later then says why, and the server defers it)."""
    configured = set(series_of(config, lab))
    for journal in (runner.journal, runner.baselines):
        journal.set_aside_unreadable()
        try:
            journal.rotate_now()
        except OSError as exc:  # e.g. a read-only or full journal directory: read as it is
            # (The rename may have been done and the sealing refused: its own line says so.)
            log.warning(
                "%s: its days not rotated and sealed now; read as they are, and sealed by a later rotation",
                describe_os_error(exc, journal.path, "journal"),
            )
        # What the last stop could not journal (its disk full or read-only), journaled now.
        try:
            journal.take_back()
        except OSError as exc:
            log.warning("%s: what the last stop left unwritten is not taken back yet", describe_os_error(exc))
    results = checkpoint.of(runner.journal)
    restored = state.restore(r for r in results.latest_results() if r.source == "exporter" and r.key in configured)
    log.info("restored %d results from %s", restored, config.journal.path)
    remotes = set(config.remotes)
    baselines = [b for b in checkpoint.baselines_of(runner.baselines).baselines() if b.remote in remotes]
    state.restore_paths(baselines)

    # The pages' last transfers (a round's, a slot's, a sweep's run) and baselines.
    def shown(r: Result) -> bool:
        return r.source == "sweep" or (r.source == "exporter" and r.key in configured)

    # More than the checkpoint keeps (pages.recent_transfers > RECENT_KEEP): from the journal itself.
    kept = runner.recent.size <= checkpoint.RECENT_KEEP
    recent = results.recent_results(runner.recent.size, shown) if kept else list(runner.journal.read())
    runner.recent.restore((r for r in recent if shown(r)), baselines, config.sweeps)
    # Each configured sweep's last verdict (its runs are source "sweep": not restored above).
    sweeps.restore(state, results.sweep_results(), config)
    # The regression test's history and verdicts (bigbinf/history/regression.py).
    if rejudge:
        restore_history(runner, configured, REPLAY_INLINE if before_metrics else None)
    if not rejudge or runner.rejudge_later is not None:
        restore_journaled_states(runner, configured)
    # The predicted moves (moves.sizes), after the paths: their bandwidth caps the rates.
    restore_moves(runner)
    runner.journal_health()  # the damaged segments moved aside, counted from their files
    return restored


def restore_history(runner: RoundRunner, configured: set[SeriesKey], inline: int | None = None) -> None:
    """The regression test's history of the `configured` series from the checkpoint (at
    start, and after a reload changed the test's settings); `inline`: RoundRunner.load_history's."""
    settings = runner.config.regression
    # An open regression's baseline is the weeks before its start, however long ago that
    # was (issue 35): the runs read reach that far back (as far as the checkpoint keeps).
    regressions = RegressionJournal(runner.config.journal.path)
    opened = regressions.open_regressions()
    since = min((e.since for k, e in opened.items() if k in configured), default=time.time())
    # The bad days' baseline (regression.BAD_DAY_BASELINES) reaches back further than the test's.
    weeks = settings.baseline_weeks * BAD_DAY_BASELINES + max(0.0, time.time() - since) / WEEK
    if not regressions.present():
        # The first start: each series' whole kept history (checkpoint.HISTORY_SPAN), so
        # the replay (RoundRunner.load_history) reaches back to the start of any
        # regression it holds, not only the last baseline_weeks.
        weeks = max(weeks, checkpoint.HISTORY_SPAN / WEEK)
    runs = checkpoint.of(runner.journal).history_runs(settings.recent_runs, weeks)
    runner.load_history({key: series for key, series in runs.items() if key in configured}, configured, inline)


def restore_journaled_states(runner: RoundRunner, configured: set[SeriesKey]) -> None:
    """The regression states the regressions' journal holds (open, accepted), published
    without a test while the re-judge waits for the background (bigbinf_journal_loading
    1 meanwhile: an open regression's page stays up, a series' test and q-value come with
    the re-judge).  The runner's history is left as it is: restore_history replaces it,
    and nothing adds to it before (the rounds start after)."""
    if not runner.config.regression.enabled:
        return
    history = History(settings_of(runner.config))
    history.restore(e for e in RegressionJournal(runner.config.journal.path).read_events() if e.key in configured)
    runner.state.record_regressions(history.verdicts())


def restore_moves(runner: RoundRunner) -> None:
    """The move model's runs from the checkpoint (at start and after a reload, which
    calls this again: a reload that configures moves.sizes gets them then)."""
    if not runner.config.moves.sizes:  # nothing predicted: the runs are not even built
        runner.restore_moves(RecentRuns())
        return
    runner.restore_moves(checkpoint.of(runner.journal).move_runs(runner.config.moves.direction))
