"""The long-running exporter: scheduled rounds, /metrics, reload.

Rounds run on APScheduler 3.x (cron or interval triggers, random jitter), one at a time:
the job has max_instances=1 and coalesces misfires, and RoundRunner's lock turns any
overlapping start into a counted skip.  A reload (SIGHUP or POST /-/reload) swaps the
configuration only if it is valid, and says so in the metrics.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from bigbinf.config import Config, ConfigError, load_config
from bigbinf.journal import BaselineJournal, Journal, baseline_path
from bigbinf.measure.process import kill_all_active
from bigbinf.service.collector import BigbinfCollector, ExporterState
from bigbinf.service.rounds import LabFor, RoundRunner, no_lab, series_of
from bigbinf.service.schedule import longest_gap_seconds, make_trigger

log = logging.getLogger(__name__)
DEFAULT_LISTEN = "127.0.0.1:9753"
JOB_ID = "round"


class ListenError(RuntimeError):
    pass


class Exporter:
    def __init__(self, config_path: str | Path, listen: str = DEFAULT_LISTEN, lab: LabFor = no_lab) -> None:
        self.config_path = Path(config_path)
        self.listen = listen
        self.state = ExporterState()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BigbinfCollector(self.state))
        config = load_config(self.config_path)  # a bad config at start is fatal (--config.check says why)
        self.state.record_config(True)
        self.runner = RoundRunner(config, self.state, lab=lab)
        # Only series this configuration measures: imported 2015 dumps and series removed
        # from the config would otherwise come back as unbounded, stale label values.
        configured = set(series_of(config, lab))
        restored = self.state.restore(
            r for r in self.runner.journal.read() if r.source == "exporter" and r.key in configured
        )
        log.info("restored %d results from %s", restored, config.journal.path)
        remotes = set(config.remotes)
        self.state.restore_paths(b for b in self.runner.baselines.read() if b.remote in remotes)
        self.state.prime(configured, longest_gap_seconds(config.schedule))
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
            raise ListenError(f"--web.listen-address {self.listen!r}: expected host:port, e.g. {DEFAULT_LISTEN}")
        try:
            self.httpd = ThreadingHTTPServer((host.strip("[]") or "0.0.0.0", int(port)), _handler(self))
        except OSError as exc:
            raise ListenError(
                f"--web.listen-address {self.listen}: {exc.strerror}; choose another port or stop what uses it"
            ) from None

    def start(self) -> None:
        if self.httpd is None:
            self.bind()
        self.scheduler.add_job(
            self._scheduled_round,
            make_trigger(self.config.schedule),
            id=JOB_ID,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=3600,
        )
        delay = self.config.schedule.start_delay
        if delay is not None:
            # A one-off first round (demos: data within seconds, after Prometheus has
            # scraped the primed zero counters).  It shares the round lock.
            when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=delay)
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
            self.runner.baselines = BaselineJournal(baseline_path(config.journal.path))
            self.state.forget_paths(config.remotes)
            self.state.prime(series_of(config, self.runner.lab), longest_gap_seconds(config.schedule))
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
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._send(200, encoder(exporter.registry), content_type)
            elif path in ("/-/healthy", "/-/ready"):
                self._send(200, b"OK\n")
            elif path == "/":
                job = exporter.scheduler.get_job(JOB_ID)
                body = (
                    f"<html><head><title>bigbinf exporter</title></head><body><h1>bigbinf exporter</h1>"
                    f"<p><a href='/metrics'>Metrics</a></p><p>Config: {exporter.config_path}</p>"
                    f"<p>Next round: {job.next_run_time if job else 'not scheduled'}</p></body></html>"
                )
                self._send(200, body.encode(), "text/html; charset=utf-8")
            else:
                self._send(404, b"not found\n")

        def do_POST(self) -> None:
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
