"""Rounds: the planned transfers run strictly one after another, never two rounds at once;
each result is journaled, then published.

The round lock turns an overlapping start (a slow round meeting the next scheduled one)
into a counted skip.  The lab, where the config has one, is handed in from outside
(`lab`, e.g. bigbinf.lab.site): the live path does not import it.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from bigbinf.config import Config
from bigbinf.journal import Journal
from bigbinf.measure.plan import LabSite, TransferSpec, plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.result import Result, SeriesKey
from bigbinf.service.collector import ExporterState

log = logging.getLogger(__name__)

# The lab a config's `lab: true` remotes stand for, worked out again for each config.
LabFor = Callable[[Config], LabSite | None]


def no_lab(config: Config) -> LabSite | None:
    return None


def series_of(config: Config, lab: LabFor = no_lab) -> list[SeriesKey]:
    return [SeriesKey(s.protocol, s.remote.name, s.dataset, s.direction) for s in plan_round(config, lab(config))]


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
        self.journal = Journal(config.journal.path)
        self.on_result = on_result
        self._lock = threading.Lock()
        self.stopping = threading.Event()

    def run_round(self, specs: list[TransferSpec] | None = None) -> list[Result] | None:
        """One scheduled run (config.schedule.rounds repetitions); None if one is running."""
        if not self._lock.acquire(blocking=False):
            log.warning("round skipped: the previous round is still running")
            self.state.record_round_skipped()
            return None
        try:
            return self._run(specs)
        finally:
            self._lock.release()

    def _run(self, specs: list[TransferSpec] | None) -> list[Result]:
        config = self.config
        specs = plan_round(config, self.lab(config)) if specs is None else specs
        results: list[Result] = []
        for _repetition in range(config.schedule.rounds):
            start = time.monotonic()
            round_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:6]}"
            for spec in specs:
                if self.stopping.is_set():
                    return results
                log.info("round %s: %s", round_id, spec.label)
                result = run_transfer(spec, config, round_id)
                if self.stopping.is_set():
                    # Killed by our own shutdown: not a measurement of the remote.
                    log.info("%s interrupted by shutdown: not recorded", spec.label)
                    return results
                self.publish(result)
                results.append(result)
            self.state.record_round(time.monotonic() - start, time.time())
        return results

    def publish(self, result: Result) -> None:
        _log_result(result)
        try:
            self.journal.append(result)  # durable first: a scrape never shows an unjournaled result
        except OSError as exc:
            log.error(
                "journal %s: cannot write (%s); the result is published but will not survive a restart",
                self.journal.path,
                exc,
            )
            self.state.record_journal_failure()
        self.state.record(result)
        if self.on_result:
            self.on_result(result)


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
