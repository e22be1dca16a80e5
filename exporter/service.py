"""The long-running exporter: scheduled rounds, the journal, /metrics, reload.

Rounds run on APScheduler 3.x (cron or interval triggers, random jitter), one at a time:
the job has max_instances=1 and coalesces misfires, and a lock in RoundRunner turns any
overlapping start into a counted skip.  Transfers inside a round run strictly one after another.
"""

from __future__ import annotations

import logging
import threading
import time
import datetime as dt
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from .collector import BigbinfCollector, ExporterState
from .config import Config, ConfigError, ScheduleConfig, load_config
from .journal import Journal
from .plan import TransferSpec, plan_round
from .process import kill_all_active
from .result import Result, SeriesKey
from .transfer import run_transfer

log = logging.getLogger(__name__)
DEFAULT_LISTEN = "127.0.0.1:9753"


class ListenError(RuntimeError):
    pass
JOB_ID = "round"


def make_trigger(schedule: ScheduleConfig) -> BaseTrigger:
    jitter = int(schedule.jitter) or None
    if schedule.interval:
        return IntervalTrigger(seconds=schedule.interval, timezone=schedule.timezone, jitter=jitter)
    crons = [CronTrigger.from_crontab(expr, timezone=schedule.timezone) for expr in schedule.cron]
    return OrTrigger(crons, jitter=jitter) if len(crons) > 1 or jitter else crons[0]


def longest_gap_seconds(schedule: ScheduleConfig) -> float:
    """The longest time between two scheduled starts, plus the jitter (what "stale"
    means for a series).  For cron schedules: the largest gap between consecutive fire
    times over a year from a fixed date, so the value does not depend on today."""
    if schedule.interval:
        return schedule.interval + schedule.jitter
    trigger = OrTrigger([CronTrigger.from_crontab(expr, timezone=schedule.timezone) for expr in schedule.cron])
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    previous, gap = None, 0.0
    when = trigger.get_next_fire_time(None, start)
    for _ in range(2000):
        if when is None or when > start + dt.timedelta(days=400):
            break
        if previous is not None:
            gap = max(gap, (when - previous).total_seconds())
        previous = when
        when = trigger.get_next_fire_time(when, when + dt.timedelta(microseconds=1))
    return gap + schedule.jitter


def series_of(config: Config) -> list[SeriesKey]:
    return [SeriesKey(s.protocol, s.remote.name, s.dataset, s.direction) for s in plan_round(config)]


class RoundRunner:
    """Runs rounds against the current config; journals then publishes each result."""

    def __init__(self, config: Config, state: ExporterState,
                 on_result: Callable[[Result], None] | None = None) -> None:
        self.config = config
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
        specs = plan_round(config) if specs is None else specs
        results: list[Result] = []
        for repetition in range(config.schedule.rounds):
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
            log.error("journal %s: cannot write (%s); the result is published but will not survive a restart",
                      self.journal.path, exc)
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
    log.log(level, "%s %s/%s/%s: %s %.3fs %.0f B/s ratio %.4f retrans %d%s", r.protocol, r.remote, r.dataset,
            r.direction, r.outcome, r.duration_seconds, r.throughput_bytes_per_second, r.byte_ratio,
            r.retransmits_wire, f" ({r.error})" if r.error else "")


class Exporter:
    def __init__(self, config_path: str | Path, listen: str = DEFAULT_LISTEN) -> None:
        self.config_path = Path(config_path)
        self.listen = listen
        self.state = ExporterState()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BigbinfCollector(self.state))
        config = load_config(self.config_path)  # a bad config at start is fatal (--config.check says why)
        self.state.record_config(True)
        self.runner = RoundRunner(config, self.state)
        # Only series this configuration measures: imported 2015 dumps and series removed
        # from the config would otherwise come back as unbounded, stale label values.
        configured = set(series_of(config))
        restored = self.state.restore(r for r in self.runner.journal.read()
                                      if r.source == "exporter" and r.key in configured)
        log.info("restored %d results from %s", restored, config.journal.path)
        self.state.prime(series_of(config), longest_gap_seconds(config.schedule))
        self.scheduler = BackgroundScheduler(timezone=config.schedule.timezone)
        self.httpd: ThreadingHTTPServer | None = None
        self._reload_lock = threading.Lock()

    @property
    def config(self) -> Config:
        return self.runner.config

    def _scheduled_round(self) -> None:
        try:
            self.runner.run_round()
        except Exception:  # a bug must not kill the scheduler thread silently
            log.exception("round failed")

    def bind(self) -> None:
        """Parse and bind --web.listen-address first: a bad value or a busy port is a clear
        error before any round is scheduled."""
        host, sep, port = self.listen.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ListenError(f"--web.listen-address {self.listen!r}: expected host:port, e.g. 127.0.0.1:9753")
        try:
            self.httpd = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), _handler(self))
        except OSError as exc:
            raise ListenError(f"--web.listen-address {self.listen}: {exc.strerror}; choose another port "
                              "or stop what uses it") from None

    def start(self) -> None:
        if self.httpd is None:
            self.bind()
        self.scheduler.add_job(self._scheduled_round, make_trigger(self.config.schedule), id=JOB_ID,
                               max_instances=1, coalesce=True, misfire_grace_time=3600)
        delay = self.config.schedule.start_delay
        if delay is not None:
            # A one-off first round (demos: data within seconds, after Prometheus has
            # scraped the primed zero counters).  It shares the round lock.
            when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=delay)
            self.scheduler.add_job(self._scheduled_round, "date", run_date=when, id="first-round")
        self.scheduler.start()
        job = self.scheduler.get_job(JOB_ID)
        log.info("next round at %s", job.next_run_time if job else "never")
        assert self.httpd is not None
        threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True).start()
        log.info("listening on http://%s/metrics", self.listen)

    def reload(self) -> bool:
        """Load the config file again; swap only if valid. Reported as metrics."""
        with self._reload_lock:
            try:
                config = load_config(self.config_path)
            except ConfigError as exc:
                self.state.record_config(False)
                log.error("reload failed, keeping the previous configuration:\n%s", exc.render())
                return False
            self.runner.config = config
            self.runner.journal = Journal(config.journal.path)
            self.state.prime(series_of(config), longest_gap_seconds(config.schedule))
            self.scheduler.reschedule_job(JOB_ID, trigger=make_trigger(config.schedule))
            self.state.record_config(True)
            log.info("configuration reloaded from %s", self.config_path)
            return True

    def stop(self) -> None:
        self.runner.stopping.set()
        if self.httpd:
            self.httpd.shutdown()
        self.scheduler.shutdown(wait=False)
        killed = kill_all_active()
        if killed:
            log.info("stopped %d running transfer/capture process group(s)", killed)


def _handler(exporter: Exporter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server API)
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept"))
                self._send(200, encoder(exporter.registry), content_type)
            elif path in ("/-/healthy", "/-/ready"):
                self._send(200, b"OK\n")
            elif path == "/":
                job = exporter.scheduler.get_job(JOB_ID)
                body = (f"<html><head><title>bigbinf exporter</title></head><body><h1>bigbinf exporter</h1>"
                        f"<p><a href='/metrics'>Metrics</a></p><p>Config: {exporter.config_path}</p>"
                        f"<p>Next round: {job.next_run_time if job else 'not scheduled'}</p></body></html>")
                self._send(200, body.encode(), "text/html; charset=utf-8")
            else:
                self._send(404, b"not found\n")

        def do_POST(self) -> None:  # noqa: N802
            if self.path == "/-/reload":
                ok = exporter.reload()
                self._send(200 if ok else 500, b"reloaded\n" if ok else b"reload failed: see the log\n")
            else:
                self._send(404, b"not found\n")

        def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # scrapes are not news
            log.debug("http: " + format, *args)

    return Handler
