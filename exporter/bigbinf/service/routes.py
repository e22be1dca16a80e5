"""What the exporter serves: the table of routes service/httpd.py dispatches, and each
page's rendering.

A page is a function from an httpd.Request to an httpd.Response, registered with one
line in `routes()`; every route is behind the web config's authentication (httpd.py
checks it before any route is looked up).  Handlers marked `blocking` run in a worker
thread (a reload reads files); the others run in the server's event loop and must only
read what is ready (the cached exposition, the scheduler's next run time).
"""

from __future__ import annotations

import datetime as dt
import html
from typing import Protocol

from bigbinf import DOCS_URL, __version__
from bigbinf.service.exposition import MetricsCache
from bigbinf.service.httpd import Request, Response, Route

MAX_RELOAD_BODY = 64 * 1024  # POST /-/reload takes no body; a little is read and dropped


class Site(Protocol):
    """What the pages read of the exporter (service/server.py's Exporter)."""

    enable_lifecycle: bool
    metrics: MetricsCache

    def reload(self) -> bool: ...

    def next_round(self) -> str: ...

    def mark_scraped(self) -> None: ...


def routes(site: Site) -> list[Route]:
    return [
        Route("/", ("GET",), lambda request: landing_page(site)),
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


def landing_page(site: Site) -> Response:
    """Links and version, like exporter-toolkit's landing page; nothing from the config."""
    page = (
        "<!DOCTYPE html><html><head><title>bigbinf exporter</title></head><body>"
        "<h1>bigbinf exporter</h1><p>Scheduled, packet-captured bulk-transfer measurements.</p>"
        f"<p>Version: {html.escape(__version__)}</p><p>Next round: {html.escape(site.next_round())}</p>"
        "<ul><li><a href='metrics'>Metrics</a></li>"
        f"<li><a href='{DOCS_URL}/metrics.md'>Documentation</a></li></ul>"
        "</body></html>"
    )
    return Response(200, page.encode(), "text/html; charset=utf-8")


def utc(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat(timespec="seconds")
