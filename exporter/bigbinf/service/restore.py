"""What an exporter knows from its journals before it measures anything, restored the same
way by the server, `once` and `sweep`: the last result of every configured series (the
last ok iperf3 test among them gives the path's bandwidth, rounds.RoundRunner), the last
path baseline of every remote, each configured sweep's last verdict, and the regression
test's history of every configured series (its verdicts), and the predicted moves.  A `once` that
started from nothing judged its transfers against no bandwidth at all, where the running
exporter judged the same transfers against the last iperf3 test (issue 23)."""

from __future__ import annotations

import logging

from bigbinf.config import Config
from bigbinf.service import sweeps
from bigbinf.service.collector import ExporterState
from bigbinf.service.rounds import LabFor, RoundRunner, series_of

log = logging.getLogger(__name__)


def restore(state: ExporterState, runner: RoundRunner, config: Config, lab: LabFor) -> int:
    """Restore `state` from `runner`'s journals; returns how many results it restored.
    Only series this configuration measures: imported 2015 dumps and series removed from
    the config would otherwise come back as unbounded, stale label values."""
    configured = set(series_of(config, lab))
    restored = state.restore(r for r in runner.journal.read() if r.source == "exporter" and r.key in configured)
    log.info("restored %d results from %s", restored, config.journal.path)
    remotes = set(config.remotes)
    baselines = [b for b in runner.baselines.read() if b.remote in remotes]
    state.restore_paths(baselines)
    # The pages' last transfers (a round's, a slot's, a sweep's run) and baselines.
    runner.recent.restore(
        (r for r in runner.journal.read() if r.source == "sweep" or (r.source == "exporter" and r.key in configured)),
        baselines,
        config.sweeps,
    )
    # Each configured sweep's last verdict (its runs are source "sweep": not restored above).
    sweeps.restore(state, runner.journal.read(), config)
    # The regression test's history and verdicts (bigbinf/regression.py).
    runner.restore_history(runner.journal.read(), configured)
    # The predicted moves (moves.sizes), after the paths: their bandwidth caps the rates.
    runner.note_moves(runner.journal.read(), restore=True)
    return restored
