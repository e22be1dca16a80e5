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

import datetime as dt
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from bigbinf.advice import path_advice
from bigbinf.config import Config, kept_pcap_directory
from bigbinf.credentials import taken_passwords
from bigbinf.measure.plan import LabSite
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

    def reload(self) -> bool: ...

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


def routes(site: Site) -> list[Route]:
    return [
        page("/", lambda request: front_page(site)),
        page("/config", lambda request: config_page(site)),
        page("/sweeps", lambda request: pages_response(pages.sweeps_page(site.recent.sweeps()))),
        page(TRANSFER, lambda request: transfer(site, request), prefix=True),
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
    ok = site.reload()
    return Response(200 if ok else 500, b"reloaded\n" if ok else b"reload failed: see the log\n")


def page(path: str, handler: Callable[[Request], Response], prefix: bool = False) -> Route:
    return Route(path, ("GET",), handler, blocking=True, prefix=prefix)


def pages_response(body: bytes, status: int = 200) -> Response:
    return Response(status, body, pages.HTML, PAGE_HEADERS)


def not_found(what: str) -> Response:
    body = pages.document("Not found", f"<p>{pages.esc(what)}</p>", up="../")
    return Response(404, body, pages.HTML, PAGE_HEADERS)


def front_page(site: Site) -> Response:
    now = site.recent.now()
    return pages_response(
        pages.front_page(
            pages.Front(
                site=site.site_name(),
                running=f"{now.what} (since {pages.utc(now.since)})" if now else "",
                next_round=site.next_round(),
                config_loaded=site.config_loaded(),
                transfers=site.recent.transfers(),
                capacity=site.recent.size,
            )
        )
    )


def config_page(site: Site) -> Response:
    data = site.config.model_dump(mode="json")
    body = pages.config_page(data, site.config_source, site.config_loaded(), site.web_summary(), taken_passwords())
    return pages_response(body)


def transfer(site: Site, request: Request) -> Response:
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
        advice = path_advice(config, site.lab_site(), r.remote, baseline, recent)
    except Exception as exc:  # a config that no longer plans (a lab gone): the page still shows
        advice = f"no advice: {exc}"
    view = pages.TransferView(key, r, baseline, advice, pcap, taken_passwords())
    return pages_response(pages.transfer_page(view))


def _filename(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", path.name)


def utc(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat(timespec="seconds")
