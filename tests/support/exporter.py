"""The exporter as a separate process, the way users run it."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from .prometheus import PrometheusServer, free_port

ROOT = Path(__file__).resolve().parents[2]


class ExporterProcess:
    def __init__(self, config: Path, log: Path, port: int | None = None) -> None:
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.argv = [
            sys.executable,
            "-m",
            "bigbinf",
            "--config.file",
            str(config),
            "--web.listen-address",
            self.address,
        ]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ExporterProcess:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)
        try:
            PrometheusServer.wait_for(self._up, timeout=30, what="the exporter to serve /metrics")
        except BaseException:
            self.stop()  # never leave an exporter behind a failed start
            raise
        return self

    def _up(self) -> bool:
        if self.proc and self.proc.poll() is not None:
            raise RuntimeError(f"exporter exited {self.proc.returncode}: {self.log.read_text()[-3000:]}")
        try:
            return bool(self.metrics())
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=5) as r:
            return r.read().decode()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
