"""The long-running exporter: scheduled rounds, /metrics, reload.

Rounds run on APScheduler 3.x (cron or interval triggers, random jitter), one at a time:
the job has max_instances=1 and coalesces misfires, and RoundRunner's lock turns any
overlapping start into a counted skip.  A reload (SIGHUP, or POST /-/reload with
--web.enable-lifecycle) swaps the configuration and the web configuration only if both
are valid, and says so in the metrics.  /metrics serves the bytes service/exposition.py
rendered at the last change of the state, never renders per scrape.

HTTP as exporter-toolkit serves it (service/webconfig.py: TLS, mTLS, basic auth,
headers): service/httpd.py is the server (one event loop for every connection, with
deadlines and bounds per connection), service/routes.py the table of what it serves
(/, /metrics, POST /-/reload), every route behind the same authentication.

For a mesh site (`mesh_file` and `site`) the configuration is the site's view of the
mesh file, and service/mesh_runner.py runs the site's tests in the mesh plan's slots
instead of the cron rounds; a reload reads the mesh file (and its durations file) again,
and its plan applies from the next round's start.  Every series then
carries the `site` label (service/collector.py, service/exposition.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import ssl
import threading
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path

from apscheduler.events import EVENT_JOB_MAX_INSTANCES, JobSubmissionEvent
from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry

from bigbinf import process
from bigbinf.config import Config, ConfigError, ConfigIssue, load_config
from bigbinf.credentials import check_secret_files, take_passwords
from bigbinf.history.moveplan import size_label
from bigbinf.history.regression import settings_of
from bigbinf.history.regression_state import RegressionJournal
from bigbinf.journal.store import BaselineJournal, Journal, baseline_path
from bigbinf.judge.words import human_bytes
from bigbinf.measure.plan import LabSite
from bigbinf.measure.undo import UndoJournal
from bigbinf.measure.wire import analyser_worker
from bigbinf.passive.watcher import PassiveWatcher
from bigbinf.process import kill_all_active
from bigbinf.result import Result, SeriesKey
from bigbinf.service import logtail, scrub, sweeps
from bigbinf.service.collector import BigbinfCollector, ExporterState
from bigbinf.service.exposition import MetricsCache
from bigbinf.service.httpd import HttpServer
from bigbinf.service.mesh_runner import MeshLoader, MeshRunner, SiteView
from bigbinf.service.recent import RecentTransfers
from bigbinf.service.restore import deferred, rejudge_deferred, restore, restore_history, restore_moves
from bigbinf.service.rounds import JOURNAL_RETRY_EVERY, LabFor, RoundRunner, no_lab, series_of
from bigbinf.service.routes import routes, utc
from bigbinf.service.schedule import longest_gap_seconds, make_trigger
from bigbinf.service.webconfig import WebConfig, load_web_config, refuse_weakening

log = logging.getLogger(__name__)
DEFAULT_LISTEN = "127.0.0.1:9753"
JOB_ID = "round"
SCRUB_JOB_ID = "journal-scrub"
ACCEPTS_EVERY = 5.0  # seconds between looks for a journaled `regression accept`


class ListenError(RuntimeError):
    pass


class Exporter:
    def __init__(
        self,
        config_path: str | Path | None,
        listen: str = DEFAULT_LISTEN,
        lab: LabFor = no_lab,
        web_config_path: str | Path | None = None,
        enable_lifecycle: bool = False,
        mesh_file: str | Path | None = None,
        site: str | None = None,
        mesh_loader: MeshLoader | None = None,
        mesh: SiteView | None = None,
    ) -> None:
        """A single-site exporter from `config_path`, or, with `mesh_file`, the exporter of
        mesh site `site`: `mesh_loader` (cli.py's, which may import bigbinf.mesh) reads
        the mesh file as that site's view of it (`mesh`: already read, e.g. for the
        listen address, so the exporter starts from that same load)."""
        self.mesh_file = Path(mesh_file) if mesh_file is not None else None
        self.site = site
        self.mesh_loader = mesh_loader
        if self.mesh_file is not None:
            if not site or mesh_loader is None:
                raise ValueError("a mesh exporter needs its site and a mesh loader")
            self.config_path = self.mesh_file  # what messages name as the configuration
        elif config_path is None:
            raise ValueError("give config_path or mesh_file")
        else:
            self.config_path = Path(config_path)
        self.listen = listen
        self.web_config_path = web_config_path
        self.enable_lifecycle = enable_lifecycle
        self.web = load_web_config(web_config_path)  # invalid: fatal at start, as the config is
        if web_config_path is not None and self.web.ssl_context is None and not self.web.auth.enabled:
            log.warning("%s gives neither TLS nor basic auth: serving plain HTTP without a password", web_config_path)
        self.log_tail = logtail.install()  # the /log page: this process's last log lines
        self.state = ExporterState(site or "")
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BigbinfCollector(self.state))
        self.metrics = MetricsCache(self.state, self.registry)
        # A bad config (or mesh file) at start is fatal (--config.check says why).
        mesh = mesh if mesh is not None and self.mesh_file is not None else self._load_mesh()
        config = mesh.config if mesh is not None else load_config(self.config_path)
        check_secret_files(config, str(self.config_path))  # a world-readable key is fatal, as for ssh
        take_passwords(config)  # out of the environment before anything runs
        self.state.record_config(True)
        self.state.record_web_config(True)
        self._record_front_door()
        self.state.set_payload_histograms(config.metrics.payload_histograms)
        self.runner = RoundRunner(config, self.state, lab=lab)
        # A journal that takes long to read (an old single file to split, a checkpoint to
        # rebuild, a long first replay) is read after /metrics is up (start), with
        # bigbinf_journal_loading 1 meanwhile; the rounds start once it is read.
        self.loading = deferred(self.runner, config, lab)
        # A restart's re-judge of many series (restore.rejudge_deferred) alone is done after
        # /metrics is up too: the rest is restored now, the journaled regression states
        # published, the re-judge in the background before the rounds start.
        self.rejudging = rejudge_deferred(self.runner, config, lab) if self.loading is None else None
        self.loaded = threading.Event()
        if self.loading is None:
            restore(self.state, self.runner, config, lab, rejudge=self.rejudging is None, before_metrics=True)
            # The judged mark turned out untrusted series by series (restore's before_metrics).
            self.rejudging = self.rejudging or self.runner.rejudge_later
        if self.loading is None and self.rejudging is None:
            self.loaded.set()
        else:
            self.loading = self.loading or self.rejudging
            self.state.record_journal_loading(True)
            # No round runs meanwhile (_load_journal): nothing else writes the journal while
            # it is split, folded and replayed in order, so each result is restored once.
            log.info(
                "the journal is read after /metrics is up: %s; no round runs until it is read (each result "
                "is then folded once); /metrics answers meanwhile with bigbinf_journal_loading 1",
                self.loading,
            )
        self.runner.record_undo_pending()  # published from the first scrape; settled at start
        self.sweeper = sweeps.SweepRunner(self.runner)
        self.state.prime(set(series_of(config, lab)), self._stale_after(config, mesh))
        self.scheduler = BackgroundScheduler(timezone=config.schedule.timezone)
        self.scheduler.add_listener(self._round_still_running, EVENT_JOB_MAX_INSTANCES)
        # A mesh site's slots replace the cron rounds.
        self.mesh_runner = MeshRunner(self.runner, mesh) if mesh is not None else None
        self.httpd: HttpServer | None = None
        self._reload_lock = threading.Lock()
        self.passive: PassiveWatcher | None = None  # started with the exporter where passive.enabled
        # The last passive results, for the pages (newest last; bounded by passive.recent).
        self.passive_recent: deque[Result] = deque(maxlen=config.passive.recent)

    @property
    def config(self) -> Config:
        return self.runner.config

    # ------------------------------------------------------------ what the pages read

    @property
    def config_source(self) -> str:
        return str(self.config_path) + (f" (site {self.site})" if self.site else "")

    @property
    def recent(self) -> RecentTransfers:
        return self.runner.recent

    def config_loaded(self) -> float | None:
        return self.state.config_ok_timestamp

    def lab_site(self) -> LabSite | None:
        return self.runner.lab(self.config)

    def site_name(self) -> str:
        return self.site or ""

    def regressions(self) -> Mapping[SeriesKey, object]:
        """Each series' regression verdict now (replaced whole on each change: no lock)."""
        return self.state.regressions

    def log_lines(self) -> list[tuple[str, str]]:
        return self.log_tail.lines()

    def web_summary(self) -> str:
        """The web config as the pages may show it: never its users' hashes."""
        web = self.web
        users = len(web.auth.users)
        return (
            f"{web.source or 'none'}: {web.scheme}"
            + (
                ", client certificates required"
                if web.ssl_context and web.ssl_context.verify_mode == ssl.CERT_REQUIRED
                else ""
            )
            + (f", basic auth ({users} user{'s' if users != 1 else ''})" if web.auth.enabled else ", no basic auth")
        )

    def _load_mesh(self) -> SiteView | None:
        """The site's view of the mesh file (None for a single-site exporter); ConfigError if invalid."""
        if self.mesh_file is None:
            return None
        assert self.mesh_loader is not None and self.site
        return self.mesh_loader(self.mesh_file, self.site)

    @staticmethod
    def _stale_after(config: Config, mesh: SiteView | None) -> float:
        # A mesh site's tests run once per mesh round, not on its config's (default) schedule.
        return mesh.schedule_interval if mesh is not None else longest_gap_seconds(config.schedule)

    def _web(self) -> WebConfig:
        return self.web

    def next_round(self) -> str:
        """When the next round (or this mesh site's next slot) starts, for the landing page."""
        if self.mesh_runner is not None:
            when = self.mesh_runner.next_slot_start
            return f"{utc(when)} (this site's next slot)" if when is not None else "not planned yet"
        first = self._next_run()
        return utc(first.timestamp()) if first is not None else "not scheduled"

    def _next_run(self) -> dt.datetime | None:
        """The next round's start: the one-off first round (schedule.start_delay) while it
        is still to come, else the schedule's next."""
        times = [job.next_run_time for job in map(self.scheduler.get_job, (JOB_ID, "first-round")) if job]
        times = [t for t in times if t is not None]
        return min(times, default=None)

    def mark_scraped(self) -> None:
        self.state.mark_scraped()

    def _round_still_running(self, event: JobSubmissionEvent) -> None:
        """APScheduler did not start the round job: its last run is still going (max_instances
        1).  The skip that says the schedule does not fit this host, counted as RoundRunner
        counts one that meets the lock."""
        if event.job_id == JOB_ID:
            log.warning("round skipped: the previous round is still running (rounds take longer than the interval)")
            self.state.record_round_skipped("round_running")

    def _scheduled_round(self, wait: bool = False) -> None:
        try:
            self.runner.run_round(wait=wait)
        except Exception:  # a bug must not kill the scheduler thread silently
            log.exception("round failed")

    def _recover(self) -> None:
        """At start: undo what an ended run left changed and remove its files (settle), and
        finish the round it left unfinished (a single site; a mesh site's slots have
        passed, and its next ones are run as planned)."""
        try:
            if self.mesh_runner is None:
                self.runner.resume()
            else:
                self.runner.settle_now()
        except Exception:
            log.exception("finishing what the last run left failed")

    def bind(self) -> None:
        """Parse and bind --web.listen-address first: a bad value or a busy port is a clear
        error before any round is scheduled."""
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ListenError(f"--web.listen-address {self.listen!r}: expected host:port, e.g. {DEFAULT_LISTEN}")
        try:
            self.httpd = HttpServer(
                host.strip("[]") or "0.0.0.0", int(port), routes(self), self._web, self.state.record_http_rejections
            )
        except OSError as exc:
            raise ListenError(
                f"--web.listen-address {self.listen}: {exc.strerror}; choose another port or stop what uses it"
            ) from None

    def start(self) -> None:
        # A stop of an earlier exporter in this process (tests start several) left the
        # stop's flag set: every command this one tracks would be ended at once.
        process.stopping.clear()
        if self.httpd is None:
            self.bind()
        if self.config.capture.enabled:
            analyser_worker.start()  # compiled (or loaded) now, outside any capture's deadline
        now = dt.datetime.now(dt.UTC)
        delay = self.config.schedule.start_delay
        first = now + dt.timedelta(seconds=delay) if delay is not None and self.mesh_runner is None else None
        if self.mesh_runner is None:
            self.scheduler.add_job(
                self._scheduled_round,
                make_trigger(self.config.schedule, after=first),
                id=JOB_ID,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=3600,
            )
        # What an ended run left: undone, removed, its round finished, before anything else.
        self.scheduler.add_job(self._recover, "date", run_date=now, id="recover", misfire_grace_time=None)
        if first is not None:
            # A one-off first round (demos: data within seconds, after Prometheus has
            # scraped the primed zero counters).  It shares the round lock, and waits for
            # the start's recovery rather than be skipped by it; and runs however late a
            # busy host starts the scheduler (apscheduler's default grace is 1 s: a start
            # at load 30 dropped it, and the next round came an interval later).
            self.scheduler.add_job(
                self._scheduled_round,
                "date",
                run_date=first,
                id="first-round",
                args=(True,),
                misfire_grace_time=None,
            )
        sweeps.schedule_all(self.scheduler, self.sweeper, self.config)  # under the round lock too
        # `regression accept` (another process) journals an accept; taken up within seconds.
        self.scheduler.add_job(
            self.runner.sync_accepts, "interval", seconds=ACCEPTS_EVERY, id="regression-accepts", coalesce=True
        )
        # What the journal could not take, tried again (the disk may take writes again).
        self.scheduler.add_job(
            self.runner.retry_journal, "interval", seconds=JOURNAL_RETRY_EVERY, id="journal-retry", coalesce=True
        )
        self._schedule_scrub(self.config.journal.scrub_interval)
        if self.loaded.is_set():
            self._start_jobs()
        assert self.httpd is not None
        self.metrics.start()  # rendered before the first scrape can arrive
        self.httpd.start()
        log.info("listening on %s://%s/metrics", self.web.scheme, self.listen)
        if not self.loaded.is_set():
            threading.Thread(target=self._load_journal, name="journal-load", daemon=True).start()

    def _schedule_scrub(self, interval: float, previous: float | None = None) -> None:
        """The journal's scrub (service/scrub.py) every `interval` seconds (0: none), the
        first min(interval, FIRST_AFTER_SECONDS) from now; unchanged where `interval` is
        `previous` (a reload that left it)."""
        if interval == previous:
            return
        if self.scheduler.get_job(SCRUB_JOB_ID) is not None:
            self.scheduler.remove_job(SCRUB_JOB_ID)
        if interval <= 0:
            return
        first = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=min(interval, scrub.FIRST_AFTER_SECONDS))
        self.scheduler.add_job(
            self._scrub, "interval", seconds=interval, id=SCRUB_JOB_ID, next_run_time=first, coalesce=True
        )

    def _scrub(self) -> None:
        runner = self.runner
        try:
            if self.loaded.is_set():  # not while the start still reads the journal
                scrub.scrub_and_say([runner.journal.path, runner.baselines.path], self._idle, runner.stopping)
                runner.journal_health()
        except Exception:  # a bug: the next scrub tries again
            log.exception("journal scrub failed")

    def _idle(self, timeout: float) -> bool:
        """For the scrub: True if no round holds the round lock now, else False after
        `timeout` seconds (or a stop)."""
        if not self.runner.busy():
            return True
        self.runner.stopping.wait(timeout)
        return False

    def _start_jobs(self) -> None:
        """The rounds, sweeps and the rest of the schedule, and a mesh site's slots."""
        self.scheduler.start()
        if self.mesh_runner is not None:
            self.mesh_runner.start()
            log.info("mesh site %s: running its tests in the slots of %s", self.site, self.mesh_file)
        else:
            first = self._next_run()
            log.info("next round at %s", utc(first.timestamp()) if first is not None else "never")
        # The passive watcher journals what it sees: only once the start's read of the
        # journal is done (nothing else writes it meanwhile).
        self._start_passive(self.config)

    def _load_journal(self) -> None:
        """The start's restore after /metrics is up (self.loading says why), then the jobs.
        Nothing else reads or writes the journal meanwhile (no round runs; a reload waits
        for it), so each result is restored once; a kill midway leaves the journal as a
        kill during a start's restore does (every step of a split and of a checkpoint's
        save is atomic), and the next start reads it again."""
        started = time.monotonic()
        with self._reload_lock:
            try:
                if self.rejudging is not None:  # the rest was restored before /metrics came up
                    restore_history(self.runner, set(series_of(self.config, self.runner.lab)))
                else:
                    restore(self.state, self.runner, self.config, self.runner.lab)
            except Exception:  # a bug: the rounds still run (their results are journaled and folded)
                log.exception("reading the journal after /metrics came up failed")
            finally:
                self.state.record_journal_loading(False)
                self.loaded.set()
            if self.runner.stopping.is_set():
                return
            log.info("the journal is read (%.1f s after /metrics came up): rounds start", time.monotonic() - started)
            self._start_jobs()
            self.metrics.refresh()

    def passive_results(self) -> list[Result]:
        """The last passive results (oldest first), for the pages."""
        return list(self.passive_recent)

    def _start_passive(self, config: Config) -> None:
        if not config.passive.enabled:
            return
        self.passive = PassiveWatcher(
            config.passive,
            self._publish_passive,
            baseline_of=lambda remote: self.state.snapshot_paths().get(remote),
            on_change=lambda: self.state.record_passive(self.passive.snapshot()[0] if self.passive else None),
        )
        self.passive.start()
        self.state.record_passive(self.passive.snapshot()[0])

    def _stop_passive(self) -> None:
        watcher, self.passive = self.passive, None
        if watcher is not None:
            watcher.stop()
            self.state.record_passive(None)

    def _publish_passive(self, result: Result) -> None:
        """A passive result: journaled (source passive), logged; never a scheduled series'
        (its counters are the watcher's: bigbinf_passive_*)."""
        log.info(
            "passive %s %s %s: %s in %.1f s, %d stream(s), %s: %s",
            result.protocol,
            result.remote,
            result.direction,
            human_bytes(result.file_bytes),
            result.duration_seconds,
            result.data_flows,
            result.program or "program unknown",
            result.limited_by or "not judged",
        )
        self.passive_recent.append(result)
        try:
            self.runner.journal.append(result)
        except OSError as exc:
            self.runner.not_journaled(self.runner.journal, exc, "passive result")
        self.runner.journal_health()

    def reload(self) -> bool:
        """Load the config file (or the mesh file) again; swap only if valid. Reported as metrics."""
        return self.reload_outcome()[0]

    def _reload_web(self) -> WebConfig:
        """--web.config.file again: ConfigError if it is invalid, unreadable or gone, or if it
        would remove TLS, basic auth or client certificate checks the running one has
        (webconfig.weakenings: a reload never opens the front door; a restart may).
        A refusal is recorded (gauge 0, counted); a success only once it is applied."""
        try:
            web = load_web_config(self.web_config_path)
            refuse_weakening(self.web, web)
        except ConfigError as exc:
            self.state.record_web_config(False)
            exc.issues.append(ConfigIssue("", f"the running web configuration stays: {self.web_summary()}"))
            raise
        return web

    def _record_front_door(self) -> None:
        web = self.web
        required = web.ssl_context is not None and web.ssl_context.verify_mode == ssl.CERT_REQUIRED
        self.state.record_front_door(web.ssl_context is not None, web.auth.enabled, required)

    def reload_outcome(self) -> tuple[bool, str]:
        """reload(), and what it says: every error of both files when it failed.  Whatever
        goes wrong, a reload ends as a failed reload (the gauge 0, one log line, the
        previous configuration kept as far as it was not yet swapped), never as an
        exception that would kill SIGHUP's thread or leave POST /-/reload without an answer."""
        with self._reload_lock:
            try:
                outcome = self._reload()
                # Rendered now, not SETTLE_SECONDS later: a scrape after the reload's answer
                # reads its outcome (the gauges, the refusal counted).
                self.metrics.refresh()
                return outcome
            except Exception as exc:  # belt and braces: the loaders turn every bad file into ConfigError
                self.state.record_config(False)
                message = f"{self.config_path}: reload failed: {type(exc).__name__}: {exc}"
                log.error("reload failed, keeping the previous configuration: %s", message)
                log.debug("the reload's exception", exc_info=True)
                return False, message

    def _reload(self) -> tuple[bool, str]:
        errors: list[ConfigError] = []
        try:
            mesh = self._load_mesh()
            config = mesh.config if mesh is not None else load_config(self.config_path)
            check_secret_files(config, str(self.config_path))
            take_passwords(config)  # out of the environment before anything runs
        except ConfigError as exc:
            errors.append(exc)
        try:  # read whatever the config gave: its own metric says which file failed
            web = self._reload_web()
        except ConfigError as exc:
            errors.append(exc)
        if errors:
            # A valid web file is not applied either (the reload swaps both or neither): its
            # gauge keeps what it said (issue 43's breaker: it read 1, fresh, for a file not served).
            self.state.record_config(False)
            message = "\n".join(exc.render() for exc in errors)
            log.error("reload failed, keeping the previous configuration:\n%s", message)
            return False, message
        regression_changed = settings_of(config) != settings_of(self.runner.config) or (
            config.regression.enabled != self.runner.config.regression.enabled
        )
        previous = self.runner.config
        self.runner.config = config
        # New connections use it, and every request's basic auth (a user removed loses
        # access on a kept-alive connection too); a TLS connection keeps what it negotiated.
        self.web = web
        self.state.record_web_config(True)
        self._record_front_door()
        journals = (self.runner.journal, self.runner.baselines)
        self.runner.journal = Journal(config.journal.path, config.journal.retention)
        self.runner.baselines = BaselineJournal(baseline_path(config.journal.path), config.journal.retention)
        # What the journal could not take yet goes to the journal now configured.
        self.runner.journal.take_over(journals[0])
        self.runner.baselines.take_over(journals[1])
        self.runner.undo = UndoJournal.beside(config.journal.path)
        if RegressionJournal(config.journal.path).path != self.runner.regression_journal.path:
            self.runner.regression_journal = RegressionJournal(config.journal.path)
        self.state.forget_paths(config.remotes)
        self.state.set_payload_histograms(config.metrics.payload_histograms)
        configured = series_of(config, self.runner.lab)
        self.state.prime(configured, self._stale_after(config, mesh))
        if regression_changed:  # the test's settings or time zone changed: tested again from the journal
            restore_history(self.runner, set(configured))
        else:
            self.runner.forget_history(configured)
        if self.mesh_runner is not None and mesh is not None:
            if mesh.listen != self.mesh_runner.mesh.listen:
                log.warning(
                    "sites.%s.exporter.listen changed to %s: needs a restart (still listening on %s)",
                    mesh.site,
                    mesh.listen,
                    self.listen,
                )
            self.mesh_runner.mesh = mesh  # its plan applies from the next round's start
        else:
            self.scheduler.reschedule_job(JOB_ID, trigger=make_trigger(config.schedule))
        self._schedule_scrub(config.journal.scrub_interval, previous.journal.scrub_interval)
        self.state.forget_sweeps(config.sweeps)
        self.runner.recent.resize(config.pages.recent_transfers)
        self.runner.recent.forget_sweeps(config.sweeps)
        self.state.forget_moves(config.remotes, (size_label(size) for size in config.moves.sizes))
        restore_moves(self.runner)
        sweeps.schedule_all(self.scheduler, self.sweeper, config)
        if self.passive is None or config.passive != self.passive.config:
            # A changed watcher: the old one publishes what it saw (its open flows as they
            # stand), the new one follows from now.
            self._stop_passive()
            self.passive_recent = deque(self.passive_recent, maxlen=config.passive.recent)
            self._start_passive(config)
        self.state.record_config(True)
        log.info("configuration reloaded from %s", self.config_path)
        return True, "reloaded"

    def stop(self, exiting: bool = False) -> None:
        """Stop serving and running rounds; `exiting`: the process ends after this (cli's
        serve), so nothing is analysed any more in it (analyser_worker.stop)."""
        self.runner.stopping.set()
        self._stop_passive()  # before the processes are stopped: its open flows are published
        if self.mesh_runner is not None:
            self.mesh_runner.stop()
        if self.httpd:
            self.httpd.stop()
        if self.scheduler.running:  # not yet while the journal is read after /metrics came up
            self.scheduler.shutdown(wait=False)
        self.metrics.stop()
        killed = kill_all_active()
        if killed:
            log.info("stopped %d running transfer/capture process group(s)", killed)
        analyser_worker.stop(exiting)  # the pcap analyser's worker: an analysis past 1 s is finished at the next start
