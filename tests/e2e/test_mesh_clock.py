"""BigbinfMeshClockOffset against this host's real clock state: a real node_exporter (its
timex collector reads the kernel's NTP state with adjtimex) and a mesh exporter's
published guard, scraped by a real Prometheus that evaluates the shipped alert (its
`for:` generated at 0s, so the test need not wait ten minutes).

The truth is the kernel's own answer to adjtimex(2), read here with ctypes: the alert
must fire exactly when the offset or the maximum error is above half the guard.  With a
guard below twice the kernel's bound it fires; with a guard well above, it does not.  On
a host without NTP (as these test machines are) the kernel reports STA_UNSYNC and a
maximum error of 16 s: the case the alert exists for.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from bigbinf.mixin import rules
from bigbinf.mixin.settings import Settings
from bigbinf.result import SeriesKey
from bigbinf.service.collector import BigbinfCollector, ExporterState, MeshRound

from ..support.prometheus import PROMETHEUS, LoopbackServer, PrometheusServer, free_port

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.skipif(
        not (NODE_EXPORTER and Path(PROMETHEUS).exists()), reason="needs prometheus and prometheus-node-exporter"
    ),
]


class _Timex(ctypes.Structure):
    # struct timex (linux/timex.h), as glibc's adjtimex takes it (x86_64: longs are 64 bits).
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time_sec", ctypes.c_long),
        ("time_usec", ctypes.c_long),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("padding", ctypes.c_int * 11),
    ]


STA_NANO = 0x2000


def kernel_clock_bound() -> float:
    """The kernel's own bound on this clock's error (seconds): the larger of its NTP
    offset and its maximum error, read with adjtimex(2) (modes 0: read only)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    t = _Timex()
    if libc.adjtimex(ctypes.byref(t)) < 0:
        pytest.fail(f"adjtimex: errno {ctypes.get_errno()}")
    offset = t.offset / (1e9 if t.status & STA_NANO else 1e6)
    return max(abs(offset), t.maxerror / 1e6)


class NodeExporter(LoopbackServer):
    name = "node_exporter"

    def argv(self) -> list[str]:
        assert NODE_EXPORTER is not None
        return [
            NODE_EXPORTER,
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--collector.disable-defaults",
            "--collector.timex",
        ]

    def _ready(self) -> bool:
        if self.proc and self.proc.poll() is not None:
            raise RuntimeError(f"node_exporter exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=2) as r:
                return b"node_timex_maxerror_seconds" in r.read()
        except OSError:
            return False


@contextmanager
def mesh_exporter(state: ExporterState, port: int) -> Iterator[None]:
    """A mesh site's exposition (the real collector) over HTTP."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BigbinfCollector(state))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def _round(guard: float) -> MeshRound:
    return MeshRound(planned_seconds=600.0, period_seconds=3600.0, fingerprint="0123456789ab", guard_seconds=guard)


def test_the_clock_alert_follows_the_kernels_own_bound(tmp_path: Path) -> None:
    bound = kernel_clock_bound()
    if bound < 0.002:
        pytest.skip(f"this host's clock is bounded to {bound:.6f} s: no guard to fire on")  # pragma: no cover
    state = ExporterState("alpha")
    state.prime([SeriesKey("http", "beta", "f8m", "download")], 3600.0)
    firing_guard = bound  # half of it is below the bound: fires
    state.record_mesh_round(_round(firing_guard))
    (tmp_path / "rules").mkdir()
    alerts = rules.render(Settings(mesh_clock_for="0s"))[rules.ALERTING_FILE]
    (tmp_path / "rules" / rules.ALERTING_FILE).write_text(alerts)
    port = free_port()
    with NodeExporter(tmp_path / "node") as node, mesh_exporter(state, port):
        config = f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: ["{tmp_path / "rules"}/*.yml"]
scrape_configs:
  - {{job_name: bigbinf, static_configs: [{{targets: ["127.0.0.1:{port}"]}}]}}
  - {{job_name: node, static_configs: [{{targets: ["127.0.0.1:{node.port}"]}}]}}
"""
        with PrometheusServer(config, tmp_path / "prometheus") as prom:

            def firing() -> list[dict[str, object]]:
                return [
                    a
                    for a in prom.api("alerts")["alerts"]
                    if a["labels"]["alertname"] == "BigbinfMeshClockOffset" and a["state"] == "firing"
                ]

            (alert,) = prom.wait_for(firing, timeout=60, what="the clock alert to fire")
            assert alert["labels"]["instance"] == f"127.0.0.1:{node.port}"  # type: ignore[index]
            # Its value is the kernel's bound, as node_exporter read it (within the time between reads:
            # maxerror grows by at most 500 us a second, and chrony may update it meanwhile).
            assert float(alert["value"]) == pytest.approx(bound, abs=0.05 + 0.0005 * 120)  # type: ignore[arg-type]
            # A guard of more than twice the bound: the clock is good enough, the alert resolves.
            state.record_mesh_round(_round(2 * bound + 2))
            prom.wait_for(lambda: not firing(), timeout=60, what="the clock alert to resolve")
            assert prom.query("ALERTS{alertname='BigbinfMeshClockOffset'}") == []
