"""The long-running exporter: scheduled rounds, /metrics, reload.

Rounds run on APScheduler 3.x (cron or interval triggers, random jitter), one at a time:
the job has max_instances=1 and coalesces misfires, and RoundRunner's lock turns any
overlapping start into a counted skip.  A reload (SIGHUP, or POST /-/reload with
--web.enable-lifecycle) swaps the configuration and the web configuration only if both
are valid, and says so in the metrics.  /metrics serves the bytes service/exposition.py
rendered at the last change of the state, never renders per scrape.

HTTP as exporter-toolkit serves it (service/webconfig.py: TLS, mTLS, basic auth,
headers): the routes are /, /metrics and POST /-/reload; every one is behind the same
authentication.  A connection is handled in its own thread from accept on: the TLS
handshake happens there, never in the accept loop, so a client that never finishes one
holds only its own thread.  Reading a request (handshake, request line, headers, body)
has one deadline, enforced by a reaper thread that shuts overdue sockets down; a body
is bounded; and the number of connections is bounded, beyond which new ones are closed
at once.

For a mesh site (`mesh_file` and `site`) the configuration is the site's view of the
mesh file, and service/mesh_runner.py runs the site's tests in the mesh plan's slots
instead of the cron rounds; a reload reads the mesh file (and its durations file) again,
and its plan applies from the next round's start.  Every series then
carries the `site` label (service/collector.py, service/exposition.py).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import datetime as dt
import html
import logging
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CollectorRegistry

from bigbinf import DOCS_URL, __version__
from bigbinf.config import Config, ConfigError, load_config
from bigbinf.credentials import check_secret_files
from bigbinf.journal import BaselineJournal, Journal, baseline_path
from bigbinf.measure.wire import analyser_worker
from bigbinf.moveplan import size_label
from bigbinf.process import kill_all_active
from bigbinf.regression import settings_of
from bigbinf.service import sweeps
from bigbinf.service.collector import BigbinfCollector, ExporterState
from bigbinf.service.exposition import MetricsCache
from bigbinf.service.mesh_runner import MeshLoader, MeshRunner, SiteView
from bigbinf.service.restore import restore
from bigbinf.service.rounds import LabFor, RoundRunner, no_lab, series_of
from bigbinf.service.schedule import longest_gap_seconds, make_trigger
from bigbinf.service.webconfig import WebConfig, load_web_config, peer_sans

log = logging.getLogger(__name__)
DEFAULT_LISTEN = "127.0.0.1:9753"
JOB_ID = "round"


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
        self.state = ExporterState(site or "")
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BigbinfCollector(self.state))
        self.metrics = MetricsCache(self.state, self.registry)
        # A bad config (or mesh file) at start is fatal (--config.check says why).
        mesh = mesh if mesh is not None and self.mesh_file is not None else self._load_mesh()
        config = mesh.config if mesh is not None else load_config(self.config_path)
        check_secret_files(config, str(self.config_path))  # a world-readable key is fatal, as for ssh
        self.state.record_config(True)
        self.state.set_payload_histograms(config.metrics.payload_histograms)
        self.runner = RoundRunner(config, self.state, lab=lab)
        restore(self.state, self.runner, config, lab)
        self.sweeper = sweeps.SweepRunner(self.runner)
        self.state.prime(set(series_of(config, lab)), self._stale_after(config, mesh))
        self.scheduler = BackgroundScheduler(timezone=config.schedule.timezone)
        # A mesh site's slots replace the cron rounds.
        self.mesh_runner = MeshRunner(self.runner, mesh) if mesh is not None else None
        self.httpd: ThreadingHTTPServer | None = None
        self._reload_lock = threading.Lock()

    @property
    def config(self) -> Config:
        return self.runner.config

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
            self.httpd = HTTPServer((host.strip("[]") or "0.0.0.0", int(port)), _handler(self), self)
        except OSError as exc:
            raise ListenError(
                f"--web.listen-address {self.listen}: {exc.strerror}; choose another port or stop what uses it"
            ) from None

    def start(self) -> None:
        if self.httpd is None:
            self.bind()
        if self.mesh_runner is None:
            self.scheduler.add_job(
                self._scheduled_round,
                make_trigger(self.config.schedule),
                id=JOB_ID,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=3600,
            )
        delay = self.config.schedule.start_delay
        if delay is not None and self.mesh_runner is None:
            # A one-off first round (demos: data within seconds, after Prometheus has
            # scraped the primed zero counters).  It shares the round lock.
            when = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=delay)
            self.scheduler.add_job(self._scheduled_round, "date", run_date=when, id="first-round")
        sweeps.schedule_all(self.scheduler, self.sweeper, self.config)  # under the round lock too
        self.scheduler.start()
        if self.mesh_runner is not None:
            self.mesh_runner.start()
            log.info("mesh site %s: running its tests in the slots of %s", self.site, self.mesh_file)
        else:
            job = self.scheduler.get_job(JOB_ID)
            log.info("next round at %s", job.next_run_time if job else "never")
        assert self.httpd is not None
        self.metrics.start()  # rendered before the first scrape can arrive
        threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True).start()
        log.info("listening on %s://%s/metrics", self.web.scheme, self.listen)

    def reload(self) -> bool:
        """Load the config file (or the mesh file) again; swap only if valid. Reported as metrics."""
        with self._reload_lock:
            try:
                mesh = self._load_mesh()
                config = mesh.config if mesh is not None else load_config(self.config_path)
                check_secret_files(config, str(self.config_path))
                web = load_web_config(self.web_config_path)
            except ConfigError as exc:
                self.state.record_config(False)
                log.error("reload failed, keeping the previous configuration:\n%s", exc.render())
                return False
            regression_changed = settings_of(config) != settings_of(self.runner.config) or (
                config.regression.enabled != self.runner.config.regression.enabled
            )
            self.runner.config = config
            self.web = web  # new connections use it; a connection in progress keeps its own
            self.runner.journal = Journal(config.journal.path)
            self.runner.baselines = BaselineJournal(baseline_path(config.journal.path))
            self.state.forget_paths(config.remotes)
            self.state.set_payload_histograms(config.metrics.payload_histograms)
            configured = series_of(config, self.runner.lab)
            self.state.prime(configured, self._stale_after(config, mesh))
            if regression_changed:  # the test's settings or time zone changed: tested again from the journal
                self.runner.restore_history(self.runner.journal.read(), configured)
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
            self.state.forget_sweeps(config.sweeps)
            self.state.forget_moves(config.remotes, (size_label(size) for size in config.moves.sizes))
            self.runner.note_moves(self.runner.journal.read(), restore=True)
            sweeps.schedule_all(self.scheduler, self.sweeper, config)
            self.state.record_config(True)
            log.info("configuration reloaded from %s", self.config_path)
            return True

    def stop(self) -> None:
        self.runner.stopping.set()
        if self.mesh_runner is not None:
            self.mesh_runner.stop()
        if self.httpd:
            self.httpd.shutdown()
            self.httpd.server_close()
        self.scheduler.shutdown(wait=False)
        self.metrics.stop()
        killed = kill_all_active()
        if killed:
            log.info("stopped %d running transfer/capture process group(s)", killed)
        analyser_worker.shutdown()  # the pcap analyser's worker process, if one was started


# Reading one request (TLS handshake, request line, headers, body) must end within this;
# one recv or send without progress for SOCKET_TIMEOUT ends the connection too.
REQUEST_DEADLINE_SECONDS = 10.0
SOCKET_TIMEOUT_SECONDS = 10.0
MAX_CONNECTIONS = 256  # beyond this, a new connection is closed at once
MAX_BODY_BYTES = 64 * 1024  # POST /-/reload takes no body; a little is read and dropped
HTTP_TO_HTTPS = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
_HTTP_STARTS = (b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO", b"DELET", b"PATCH")


class _Reaper:
    """One thread that shuts down the sockets of connections still reading a request past
    their deadline (a slowloris, a client that never finishes its TLS handshake)."""

    def __init__(self) -> None:
        self._deadlines: dict[socket.socket, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="http-reaper", daemon=True)
        self._thread.start()

    def watch(self, sock: socket.socket, seconds: float) -> None:
        with self._lock:
            self._deadlines[sock] = time.monotonic() + seconds

    def release(self, sock: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(sock, None)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            now = time.monotonic()
            with self._lock:
                overdue = [s for s, deadline in self._deadlines.items() if deadline < now]
                for s in overdue:
                    del self._deadlines[s]
            for s in overdue:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)  # the reading thread's recv returns; it closes

    def stop(self) -> None:
        self._stop.set()


class HTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with TLS per connection (in the connection's thread), bounded
    connections and a deadline on reading requests."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], exporter: Exporter) -> None:
        self.exporter = exporter
        self.reaper = _Reaper()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            log.warning("more than %d connections open: closing a new one from %s", MAX_CONNECTIONS, client_address)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        sock: socket.socket = request
        sock.settimeout(SOCKET_TIMEOUT_SECONDS)
        self.reaper.watch(sock, REQUEST_DEADLINE_SECONDS)
        web = self.exporter.web  # the one in force when the connection came
        conn: socket.socket = sock
        try:
            if web.ssl_context is not None:
                if _looks_like_http(sock):
                    sock.sendall(HTTP_TO_HTTPS)  # as Go's net/http answers; nothing else is served
                    return
                tls = web.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                conn = tls
                self.reaper.release(sock)  # detached: its descriptor is the TLS socket's now
                self.reaper.watch(tls, REQUEST_DEADLINE_SECONDS)
                tls.do_handshake()  # in this connection's thread, under the same deadline
                if web.allowed_sans and not set(web.allowed_sans) & set(peer_sans(tls.getpeercert())):
                    log.debug("http: client certificate from %s has none of client_allowed_sans", client_address)
                    return
            handler_class: Any = self.RequestHandlerClass
            handler_class(conn, client_address, self)
        except (ssl.SSLError, OSError) as exc:
            log.debug("http: connection from %s ended: %s", client_address, exc)
        finally:
            self.reaper.release(sock)
            self.reaper.release(conn)
            if conn is not sock:
                with contextlib.suppress(OSError):
                    conn.close()

    def server_close(self) -> None:
        self.reaper.stop()
        super().server_close()


def _looks_like_http(sock: socket.socket) -> bool:
    """Whether a connection to the TLS port opened with a plain HTTP request line."""
    try:
        start = sock.recv(5, socket.MSG_PEEK)
    except OSError:
        return False
    return any(start.startswith(h[: len(start)]) for h in _HTTP_STARTS) and len(start) >= 4


def _handler(exporter: Exporter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # /metrics is written as several chunks: without TCP_NODELAY a small last chunk
        # can wait for a delayed ACK (40 ms).
        disable_nagle_algorithm = True
        server_version = f"bigbinf/{__version__}"
        sys_version = ""
        timeout = SOCKET_TIMEOUT_SECONDS
        web: WebConfig

        def handle_one_request(self) -> None:
            self.web = exporter.web
            super().handle_one_request()

        def _authorised(self) -> bool:
            """Basic auth when basic_auth_users is set: 401 with WWW-Authenticate otherwise."""
            if not self.web.auth.enabled:
                return True
            header = self.headers.get("Authorization", "")
            scheme, _, encoded = header.partition(" ")
            if scheme.lower() == "basic":
                try:
                    user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
                except (binascii.Error, UnicodeDecodeError):
                    sep = ""
                if sep and self.web.auth.check(user, password):
                    return True
            self._refuse(401, b"Unauthorized\n", [("WWW-Authenticate", "Basic")])
            return False

        def _refuse(self, code: int, body: bytes, extra: list[tuple[str, str]] | None = None) -> None:
            """An answer that reads no request body (a client that drips one would hold
            the connection): the connection is closed after it."""
            self._send(code, body, extra=[*(extra or []), ("Connection", "close")])

        def _drain_body(self) -> bool:
            """Read and drop a bounded request body; 413 (and False) when it is larger."""
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY_BYTES or self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                return False
            if length:
                self.rfile.read(length)
            return True

        def _route(self, method: str) -> None:
            # The request's deadline (the reaper) holds until its body, if any, is read:
            # only then is the connection released, before the answer is made.
            if not self._authorised():
                return
            path = self.path.split("?", 1)[0]
            if path == "/-/reload":
                if method != "POST":
                    self._refuse(405, b"Only POST requests allowed\n", [("Allow", "POST")])
                elif not exporter.enable_lifecycle:
                    self._refuse(403, b"Lifecycle API is not enabled (--web.enable-lifecycle)\n")
                elif not self._drain_body():
                    self._refuse(413, b"request body too large\n")
                else:
                    self.server.reaper.release(self.connection)  # type: ignore[attr-defined]
                    ok = exporter.reload()
                    self._send(200 if ok else 500, b"reloaded\n" if ok else b"reload failed: see the log\n")
                return
            if path not in ("/", "/metrics"):
                self._refuse(404, b"not found\n")
                return
            if method not in ("GET", "HEAD"):
                self._refuse(405, b"method not allowed\n", [("Allow", "GET, HEAD")])
                return
            self.server.reaper.release(self.connection)  # type: ignore[attr-defined]  # the request is read
            if path == "/metrics":
                chunks, content_type, gzipped = exporter.metrics.response(
                    self.headers.get("Accept", ""), self.headers.get("Accept-Encoding", "")
                )
                self._send(200, chunks, content_type, gzipped, head=method == "HEAD")
            else:
                self._send(200, _landing_page(exporter).encode(), "text/html; charset=utf-8", head=method == "HEAD")

        def do_GET(self) -> None:
            self._route("GET")

        def do_HEAD(self) -> None:
            self._route("HEAD")

        def do_POST(self) -> None:
            self._route("POST")

        def do_PUT(self) -> None:
            self._route("PUT")

        def do_DELETE(self) -> None:
            self._route("DELETE")

        def do_PATCH(self) -> None:
            self._route("PATCH")

        def do_OPTIONS(self) -> None:
            self._route("OPTIONS")

        def _send(
            self,
            code: int,
            body: bytes | list[bytes],
            content_type: str = "text/plain; charset=utf-8",
            gzipped: bool = False,
            *,
            head: bool = False,
            extra: list[tuple[str, str]] | None = None,
        ) -> None:
            chunks = [body] if isinstance(body, bytes) else body  # /metrics: families' shared chunks
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            if gzipped:
                self.send_header("Content-Encoding", "gzip")
            for name, value in (*self.web.headers, *(extra or [])):
                self.send_header(name, value)
            self.send_header("Content-Length", str(sum(len(chunk) for chunk in chunks)))
            self.end_headers()
            if not head:
                for chunk in chunks:
                    self.wfile.write(chunk)

        def log_message(self, format: str, *args: object) -> None:  # scrapes are not news
            log.debug("http: " + format, *args)

    return Handler


def _landing_page(exporter: Exporter) -> str:
    """Links and version, like exporter-toolkit's landing page; nothing from the config."""
    if exporter.mesh_runner is not None:
        when = exporter.mesh_runner.next_slot_start
        next_round = (
            dt.datetime.fromtimestamp(when, dt.UTC).isoformat(timespec="seconds") + " (this site's next slot)"
            if when is not None
            else "not planned yet"
        )
    else:
        job = exporter.scheduler.get_job(JOB_ID)
        next_round = str(job.next_run_time) if job else "not scheduled"
    next_round = html.escape(next_round)
    return (
        "<!DOCTYPE html><html><head><title>bigbinf exporter</title></head><body>"
        "<h1>bigbinf exporter</h1><p>Scheduled, packet-captured bulk-transfer measurements.</p>"
        f"<p>Version: {html.escape(__version__)}</p><p>Next round: {next_round}</p>"
        "<ul><li><a href='metrics'>Metrics</a></li>"
        f"<li><a href='{DOCS_URL}/metrics.md'>Documentation</a></li></ul>"
        "</body></html>"
    )
