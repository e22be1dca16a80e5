"""What /metrics costs at scale: per-scrape rendering (the old way) against cached bytes.

Usage:
    .venv/bin/python benchmarks/bench_metrics.py                  # 48, 400 and 2,000 series
    .venv/bin/python benchmarks/bench_metrics.py --sizes 2000 --scrapes 30

Each size is a mesh state (tests/support/mesh.py: remotes x protocols x datasets x both
directions, every series primed and with two results, a path per remote), ~100 samples
a series.  Each way runs in a fresh subprocess (so the two never share a heap) that
serves the state over HTTP on loopback and is scraped with Prometheus' own request
headers (OpenMetrics, Accept-Encoding: gzip):

* old: client_python's choose_encoder + encoder(registry) per scrape over BigbinfCollector
  (what service/server.py did): every scrape deep-copies the state (as snapshot() did)
  and formats every sample;
* new: the exporter's HttpServer (service/httpd.py) and /metrics route (service/routes.py)
  over service/exposition.py's MetricsCache: the bytes
  rendered at the last state change, gzipped.

Per way: the median scrape (request to last byte), the RSS after the scrapes (VmRSS) and
its peak (VmHWM); for the new way also the median scrape as curl asks (text, no gzip:
the whole uncompressed exposition crosses loopback), the rendering on a state change (a result
recorded, then snapshot + render of both formats + gzip of both, median of 3) and the
median scrape while the background thread renders a change (served the previous bytes,
but sharing the GIL with the renderer).  Then, for
the mesh configuration (10 x 20 x 5 x 2), `--config.check` and the time from starting
the exporter to its first /metrics with every series primed, median of 3 each.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support.mesh: the same mesh the tests use

from prometheus_client import CollectorRegistry  # noqa: E402
from prometheus_client.exposition import choose_encoder  # noqa: E402
from tests.support.mesh import mesh_keys, mesh_result, mesh_state, write_mesh_config  # noqa: E402

from bigbinf.service.collector import BigbinfCollector, ExporterState  # noqa: E402
from bigbinf.service.exposition import MetricsCache  # noqa: E402
from bigbinf.service.httpd import HttpServer  # noqa: E402
from bigbinf.service.routes import routes  # noqa: E402
from bigbinf.service.webconfig import load_web_config  # noqa: E402

# remotes x protocols x datasets (x 2 directions)
SIZES = {48: (2, 3, 4), 400: (4, 10, 5), 2000: (10, 20, 5)}
PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "Accept-Encoding": "gzip",
}


def _memory() -> dict[str, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return {"rss_mb": fields["VmRSS"], "peak_mb": fields["VmHWM"]}


def _old_handler(registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
    """/metrics as service/server.py served it before the cache: rendered per scrape."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(registry)
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


def _deepcopy_snapshot(state: ExporterState) -> ExporterState:
    """ExporterState.snapshot as it was before the cache: copy.deepcopy under the lock."""
    with state._lock:
        clone = ExporterState.__new__(ExporterState)
        for name, value in state.__dict__.items():
            if name not in ("_lock", "_subscribers"):
                setattr(clone, name, copy.deepcopy(value))
    return clone


def _scrape(url: str, headers: dict[str, str] = PROMETHEUS_HEADERS) -> tuple[float, int]:
    start = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as r:
        body = r.read()
    return time.perf_counter() - start, len(body)


def worker(way: str, series: int, scrapes: int, payload_histograms: bool) -> dict[str, Any]:
    """One way at one size, in this (fresh) process."""
    remotes, protocols, datasets = SIZES[series]
    state = mesh_state(remotes, protocols, datasets, payload_histograms=payload_histograms)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BigbinfCollector(state))
    out: dict[str, Any] = {}
    cache: MetricsCache | None = None
    if way == "old":
        state.snapshot = lambda: _deepcopy_snapshot(state)  # type: ignore[method-assign]
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _old_handler(registry))
    else:
        cache = MetricsCache(state, registry)
        cache.start()
        # The exporter's own server and handler (no web config: plain HTTP, no auth), over
        # what they read of an Exporter.
        exporter: Any = SimpleNamespace(metrics=cache, enable_lifecycle=False, mark_scraped=lambda: None)
        web = load_web_config(None)
        server = HttpServer("127.0.0.1", 0, routes(exporter), lambda: web)
        server.start()
    if way == "old":
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        port = httpd.server_address[1]
    else:
        port = server.port
    url = f"http://127.0.0.1:{port}/metrics"
    times = []
    for _ in range(scrapes):
        seconds, size = _scrape(url)
        times.append(seconds)
    out["scrape_ms"] = statistics.median(times) * 1000
    out["body_bytes"] = size
    if cache is not None:
        # As curl asks: the text format, not compressed (27.6 MB at 2,000 series).
        out["plain_scrape_ms"] = statistics.median(_scrape(url, {})[0] for _ in range(min(scrapes, 20))) * 1000
        # A state change: one more result, rendered as the background thread renders it.
        rng = random.Random(5)
        keys = mesh_keys(remotes, protocols, datasets)
        renders = []
        for i in range(3):
            state.record(mesh_result(keys[i], 1_800_000_000.0 + i, rng))
            start = time.perf_counter()
            cache.refresh()
            renders.append(time.perf_counter() - start)
        out["render_ms"] = statistics.median(renders) * 1000
        # Scrapes while the background thread renders a change: they get the previous
        # bytes, but share the GIL with the renderer.
        generation = cache.current.generation
        state.record(mesh_result(keys[3], 1_800_000_100.0, rng))
        during = []
        while cache.current.generation == generation:
            during.append(_scrape(url)[0])
        out["scrape_during_render_ms"] = statistics.median(during) * 1000 if during else 0.0
    out.update(_memory())  # before the counting below, which holds a copy of the text
    if cache is not None:
        cache.stop()
        text = b"".join(cache.current.chunks("text"))
        out["text_bytes"] = len(text)
        out["samples"] = sum(1 for line in text.splitlines() if not line.startswith(b"#"))
    if way == "old":
        httpd.shutdown()
    else:
        server.stop()
    return out


def _run_worker(way: str, series: int, scrapes: int, payload_histograms: bool) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--worker", way, "--sizes", str(series), "--scrapes", str(scrapes)]
    if not payload_histograms:
        argv.append("--no-payload-histograms")
    proc = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(proc.stdout)


def _mesh_timings(runs: int) -> dict[str, float]:
    exe = Path(sys.executable).with_name("bigbinf-exporter")
    checks, starts = [], []
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        config = write_mesh_config(Path(tmp))
        for _ in range(runs):
            start = time.perf_counter()
            subprocess.run([exe, "--config.file", config, "--config.check"], check=True, capture_output=True)
            checks.append(time.perf_counter() - start)
        for port in range(19861, 19861 + runs):
            start = time.perf_counter()
            proc = subprocess.Popen(
                [exe, "--config.file", config, "--web.listen-address", f"127.0.0.1:{port}"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                while True:
                    try:
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
                            body = r.read()
                        break
                    except OSError:
                        if proc.poll() is not None:
                            raise RuntimeError("the exporter exited") from None
                        time.sleep(0.01)
                starts.append(time.perf_counter() - start)
                primed = body.count(b"bigbinf_transfers_total{") // 4  # 4 outcomes a series
                assert primed == 2000, primed
            finally:
                proc.terminate()
                proc.wait(30)
    return {"check_s": statistics.median(checks), "start_s": statistics.median(starts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="48,400,2000", help="series counts, of " + ", ".join(map(str, SIZES)))
    parser.add_argument("--scrapes", type=int, default=0, help="scrapes per way (default: by size)")
    parser.add_argument("--runs", type=int, default=3, help="config.check and start-up runs")
    parser.add_argument("--worker", choices=["old", "new"], help=argparse.SUPPRESS)
    parser.add_argument("--no-payload-histograms", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker:
        print(json.dumps(worker(args.worker, sizes[0], args.scrapes, not args.no_payload_histograms)))
        return

    rows = []
    for series, payload in [(n, True) for n in sizes] + ([(2000, False)] if 2000 in sizes else []):
        old_scrapes = args.scrapes or {48: 30, 400: 10}.get(series, 5)
        new_scrapes = args.scrapes or 50
        old = _run_worker("old", series, old_scrapes, payload)
        new = _run_worker("new", series, new_scrapes, payload)
        rows.append((series, payload, old, new))
        print(f"measured {series} series (payload histograms {payload})", file=sys.stderr)

    print(
        "| series | samples | text MB | old scrape ms | new scrape ms | old / new | new scrape, text without gzip ms "
        "| new scrape during a render ms | new render on change ms | old RSS MB (peak) | new RSS MB (peak) "
        "| old / new peak RSS |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for series, payload, old, new in rows:
        label = f"{series:,}" + ("" if payload else " (no payload histograms)")
        print(
            f"| {label} | {new['samples']:,} | {new['text_bytes'] / 1e6:.1f} | {old['scrape_ms']:,.1f} "
            f"| {new['scrape_ms']:.2f} | {old['scrape_ms'] / new['scrape_ms']:,.0f}x | {new['plain_scrape_ms']:.1f} "
            f"| {new['scrape_during_render_ms']:.1f} | {new['render_ms']:,.0f} "
            f"| {old['rss_mb']:.0f} ({old['peak_mb']:.0f}) | {new['rss_mb']:.0f} ({new['peak_mb']:.0f}) "
            f"| {old['peak_mb'] / new['peak_mb']:.1f}x |"
        )
    if 2000 in sizes:
        mesh = _mesh_timings(args.runs)
        print()
        print("| mesh config (10 x 20 x 5 x 2 = 2,000 series) | seconds |")
        print("| --- | ---: |")
        print(f"| `--config.check` | {mesh['check_s']:.2f} |")
        print(f"| start to first /metrics, every series primed | {mesh['start_s']:.2f} |")


if __name__ == "__main__":
    main()
