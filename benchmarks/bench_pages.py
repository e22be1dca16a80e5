"""Benchmark the exporter's pages (service/pages.py, issue 29): the render time of each
page with about 2,000 configured series, and /metrics latency with and without browsers
loading pages at the same time, side by side in one run.

Usage:
    .venv/bin/python benchmarks/bench_pages.py                       # ~2,000 series, rings of 100 and 1,000
    .venv/bin/python benchmarks/bench_pages.py --series 2000 --recent 100 --scrapes 300

The exporter is built from a seeded journal (tests/support/pages.py: the tests' own),
with one http, bbftp and custom-command series per dataset and one journaled result per
series; its real HttpServer serves on loopback.  Rendering: the median and 95th
percentile of calling each page's handler (what the worker thread runs).  /metrics:
sequential GETs over one kept-alive connection, first alone, then while two threads load
the front page and a transfer's page as fast as they can (the worst a couple of browser
tabs can do); the exposition is cached, so its latency is the event loop's and the GIL's.
The machine is shared and timings are noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support.pages: the journal the tests use

from tests.support.pages import seed  # noqa: E402
from tests.support.prometheus import free_port  # noqa: E402

from bigbinf.service.httpd import Request  # noqa: E402
from bigbinf.service.recent import transfer_id  # noqa: E402
from bigbinf.service.routes import routes  # noqa: E402
from bigbinf.service.server import Exporter  # noqa: E402


def _quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


def _time(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    return _quantiles(samples)


def _scrapes(port: int, n: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    samples = []
    try:
        for _ in range(n):
            start = time.perf_counter()
            conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            conn.getresponse().read()
            samples.append((time.perf_counter() - start) * 1000)
    finally:
        conn.close()
    return samples


def _load_pages(port: int, paths: list[str], stop: threading.Event, counter: list[int]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        while not stop.is_set():
            for path in paths:
                conn.request("GET", path)
                conn.getresponse().read()
                counter[0] += 1
    finally:
        conn.close()


def run(series: int, recent: int, scrapes: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        datasets = max(1, series // 3 - 1)  # 3 protocols x (datasets + 1)
        seeded = seed(Path(tmp), series=datasets, per_series=1)
        raw = yaml.safe_load(seeded.config.read_text())
        raw["pages"] = {"recent_transfers": recent}
        seeded.config.write_text(yaml.safe_dump(raw))
        exporter = Exporter(seeded.config, listen=f"127.0.0.1:{free_port()}")
        configured = len(exporter.state.series)
        table = {r.path: r for r in routes(exporter)}
        held = exporter.recent.transfers()
        ok = transfer_id(seeded.ok) if exporter.recent.get(transfer_id(seeded.ok)) else held[0][0]
        pages = {
            "/": "/",
            "/transfer/ID": f"/transfer/{ok}",
            "/config": "/config",
            "/sweeps": "/sweeps",
        }
        print(f"\n{configured} configured series, {len(held)} transfers held (pages.recent_transfers {recent})")
        print(f"{'page':<14} {'first ms':>9} {'median ms':>10} {'p95 ms':>8} {'bytes':>9}")
        for name, path in pages.items():
            route = table.get(path) or table["/transfer/"]
            start = time.perf_counter()
            body = route.handler(Request("GET", path, "", {})).body
            first = (time.perf_counter() - start) * 1000
            median, p95 = _time(lambda route=route, path=path: route.handler(Request("GET", path, "", {})), repeat)
            print(f"{name:<14} {first:>9.2f} {median:>10.2f} {p95:>8.2f} {len(body):>9}")

        exporter.bind()
        assert exporter.httpd is not None
        exporter.metrics.start()
        exporter.httpd.start()
        try:
            port = exporter.httpd.port
            _scrapes(port, 20)  # warm
            alone = _scrapes(port, scrapes)
            stop, counter = threading.Event(), [0]
            loaders = [
                threading.Thread(target=_load_pages, args=(port, ["/", pages["/transfer/ID"]], stop, counter))
                for _ in range(2)
            ]
            for t in loaders:
                t.start()
            time.sleep(0.5)
            started = time.perf_counter()
            busy = _scrapes(port, scrapes)
            elapsed = time.perf_counter() - started
            stop.set()
            for t in loaders:
                t.join()
        finally:
            exporter.httpd.stop()
            exporter.metrics.stop()
        a, b = _quantiles(alone), _quantiles(busy)
        size = sum(len(chunk) for chunk in exporter.metrics.response("", "gzip")[0])
        print(f"/metrics ({size} bytes gzipped), {scrapes} scrapes:")
        print(f"{'':<24} {'median ms':>10} {'p95 ms':>8}")
        print(f"{'alone':<24} {a[0]:>10.2f} {a[1]:>8.2f}")
        rate = f"({counter[0]} pages, {counter[0] / elapsed:.0f}/s)"
        print(f"{'with pages loading':<24} {b[0]:>10.2f} {b[1]:>8.2f}   {rate}")
        print(f"{'ratio':<24} {b[0] / a[0]:>10.2f} {b[1] / a[1]:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=int, default=2000)
    parser.add_argument("--recent", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--scrapes", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    for recent in args.recent:
        run(args.series, recent, args.scrapes, args.repeat)


if __name__ == "__main__":
    main()
