"""What the exporter serves: the table of routes service/httpd.py dispatches, and what
each page reads (service/pages.py renders it).

A page is a function from an httpd.Request to an httpd.Response, registered with one
line in `routes()`; every route is behind the web config's authentication (httpd.py
checks it before any route is looked up).  Handlers marked `blocking` run in a worker
thread (a reload reads files); the others run in the server's event loop and must only
read what is ready (the cached exposition).  The HTML pages run in worker threads too:
rendering one costs milliseconds of the GIL, never a stall of the loop that serves
/metrics, and they carry a Content-Security-Policy that forbids every fetch.
"""

from __future__ import annotations

import re
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from bigbinf.config import Config, kept_pcap_directory
from bigbinf.credentials import taken_passwords
from bigbinf.history.advice import Paths, path_advice
from bigbinf.measure.plan import LabSite
from bigbinf.result import Result, SeriesKey
from bigbinf.service import pages
from bigbinf.service.exposition import MetricsCache
from bigbinf.service.httpd import Request, Response, Route
from bigbinf.service.recent import RecentTransfers, valid_id

MAX_RELOAD_BODY = 64 * 1024  # POST /-/reload takes no body; a little is read and dropped
TRANSFER = "/transfer/"
# A kept pcap is served whole from memory (the server writes bodies it holds): larger
# ones are for a shell on the host.
MAX_PCAP_BYTES = 256 << 20
PAGE_HEADERS = (
    ("Content-Security-Policy", pages.CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
)


class Site(Protocol):
    """What the pages read of the exporter (service/server.py's Exporter)."""

    enable_lifecycle: bool
    metrics: MetricsCache

    def reload_outcome(self) -> tuple[bool, str]: ...

    def next_round(self) -> str: ...

    def mark_scraped(self) -> None: ...

    # What the pages show.
    @property
    def config(self) -> Config: ...

    @property
    def config_source(self) -> str: ...

    @property
    def recent(self) -> RecentTransfers: ...

    def config_loaded(self) -> float | None: ...

    def lab_site(self) -> LabSite | None: ...

    def site_name(self) -> str: ...

    def web_summary(self) -> str: ...

    def regressions(self) -> Mapping[SeriesKey, object]: ...

    def log_lines(self) -> list[tuple[str, str]]: ...

    def passive_results(self) -> list[Result]: ...


class PerConfig:
    """What the pages derive from the configuration alone, made once per configuration
    (a reload swaps the object): the resolved paths, the rendered /config page."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._config: Config | None = None
        self._loaded: float | None = None
        self._paths: Paths | None = None
        self._page: bytes | None = None

    def _current(self, site: Site) -> Config:
        config, loaded = site.config, site.config_loaded()
        if config is not self._config or loaded != self._loaded:
            self._config, self._loaded, self._paths, self._page = config, loaded, None, None
        return config

    def paths(self, site: Site) -> Paths:
        with self._lock:
            config = self._current(site)
            if self._paths is None:
                self._paths = Paths.of(config, site.lab_site())
            return self._paths

    def config_page(self, site: Site) -> bytes:
        with self._lock:
            config = self._current(site)
            if self._page is None:
                data = config.model_dump(mode="json")
                self._page = pages.config_page(
                    data, site.config_source, self._loaded, site.web_summary(), taken_passwords()
                )
            return self._page


def routes(site: Site) -> list[Route]:
    cache = PerConfig()
    return [
        page("/", lambda request: front_page(site, request)),
        page("/config", lambda request: pages_response(cache.config_page(site))),
        page("/sweeps", lambda request: sweeps_page(site)),
        page(
            "/passive",
            lambda request: pages_response(pages.passive_page(site.passive_results(), site.config.passive.enabled)),
        ),
        page("/log", lambda request: pages_response(pages.log_page(site.log_lines(), taken_passwords()))),
        page(TRANSFER, lambda request: transfer(site, cache, request), prefix=True),
        Route("/metrics", ("GET",), lambda request: metrics(site, request)),
        Route(
            "/-/reload",
            ("POST",),
            lambda request: reload(site),
            blocking=True,
            max_body=MAX_RELOAD_BODY,
            precheck=lambda: lifecycle_disabled(site),
        ),
    ]


def metrics(site: Site, request: Request) -> Response:
    """The exposition rendered at the last change of the state, never per scrape."""
    chunks, content_type, gzipped = site.metrics.response(
        request.headers.get("accept", ""), request.headers.get("accept-encoding", "")
    )
    if request.method == "GET":
        site.mark_scraped()  # what waited for a first scrape is published now
    return Response(200, chunks, content_type, (("Content-Encoding", "gzip"),) if gzipped else ())


def lifecycle_disabled(site: Site) -> Response | None:
    if site.enable_lifecycle:
        return None
    return Response(403, b"Lifecycle API is not enabled (--web.enable-lifecycle)\n", close=True)


def reload(site: Site) -> Response:
    """200 "reloaded", or 500 with every error (as in the log: file, place, what is wrong;
    never a secret's value), the previous configuration kept."""
    ok, message = site.reload_outcome()
    if ok:
        return Response(200, b"reloaded\n")
    return Response(500, f"reload failed, keeping the previous configuration:\n{message}\n".encode())


def page(path: str, handler: Callable[[Request], Response], prefix: bool = False) -> Route:
    return Route(path, ("GET",), handler, blocking=True, prefix=prefix)


def pages_response(body: bytes, status: int = 200) -> Response:
    return Response(status, body, pages.HTML, PAGE_HEADERS)


def not_found(what: str) -> Response:
    body = pages.document("Not found", f"<p>{pages.esc(what)}</p>", up="../")
    return Response(404, body, pages.HTML, PAGE_HEADERS)


def sweeps_page(site: Site) -> Response:
    return pages_response(pages.sweeps_page(site.recent.sweeps(), list(site.config.sweeps)))


def front_page(site: Site, request: Request) -> Response:
    """The front page, its series in the order ?sort= asks (pages.SORTS; the default for
    anything else: the query is never echoed)."""
    sort = urllib.parse.parse_qs(request.query).get("sort", [""])[-1]
    now = site.recent.now()
    transfers = site.recent.transfers()
    regressions = {f"{k.protocol} {k.remote}/{k.dataset} {k.direction}": v for k, v in site.regressions().items()}
    return pages_response(
        pages.front_page(
            pages.Front(
                site=site.site_name(),
                running=f"{now.what} (since {pages.utc(now.since)})" if now else "",
                next_round=site.next_round(),
                config_loaded=site.config_loaded(),
                transfers=transfers,
                capacity=site.recent.size,
                bandwidths=site.recent.bandwidths(transfers),
                regressions=regressions,
                secrets=taken_passwords(),
                sort=sort,
            )
        )
    )


def transfer(site: Site, cache: PerConfig, request: Request) -> Response:
    """/transfer/ID (its page) and /transfer/ID/pcap (its kept capture): ID strictly as
    recent.TRANSFER_ID, and only one of the last transfers; the pcap only from inside the
    directory captures are kept in."""
    key, _, rest = request.path[len(TRANSFER) :].partition("/")
    if not valid_id(key) or rest not in ("", "pcap"):
        return not_found("No such page.")
    r = site.recent.get(key)
    if r is None:
        return not_found(f"Transfer {key} is not among the last {site.recent.size} transfers held.")
    config = site.config
    pcap = pages.inside(r.pcap_path, kept_pcap_directory(config))
    if rest == "pcap":
        if pcap is None:
            return not_found("This transfer's capture is not kept here.")
        size = pcap.stat().st_size
        if size > MAX_PCAP_BYTES:
            return not_found(f"{pcap.name} is {size} bytes, too large to serve here: copy it from {pcap.parent}.")
        return Response(
            200,
            pcap.read_bytes(),
            "application/vnd.tcpdump.pcap",
            (*PAGE_HEADERS, ("Content-Disposition", f'attachment; filename="{_filename(pcap)}"')),
        )
    recent = [result for _, result in site.recent.transfers()]
    baseline = site.recent.baseline_for(r)
    try:
        advice = path_advice(cache.paths(site), r.remote, baseline, recent)
    except Exception as exc:  # a config that no longer plans (a lab gone): the page still shows
        advice = f"no advice: {exc}"
    view = pages.TransferView(key, r, baseline, advice, pcap, taken_passwords())
    return pages_response(pages.transfer_page(view))


def _filename(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", path.name)


def utc(timestamp: float) -> str:
    """The pages' one time format (pages.utc), for what the exporter says of its schedule."""
    return pages.utc(timestamp)
