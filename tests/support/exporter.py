"""The exporter as a separate process, the way users run it."""

from __future__ import annotations

import base64
import signal
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from .prometheus import PrometheusServer, free_port

ROOT = Path(__file__).resolve().parents[2]


class ExporterProcess:
    def __init__(
        self,
        config: Path,
        log: Path,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        ssl_context: ssl.SSLContext | None = None,
        auth: tuple[str, str] | None = None,
        prefix: Sequence[str] = (),
        env: dict[str, str] | None = None,
        start_timeout: float = 30,
    ) -> None:
        """extra_args: e.g. --web.config.file; ssl_context and auth: how the test itself
        reaches /metrics then (https, Basic); prefix: argv before the interpreter (ip netns
        exec, setpriv); start_timeout: how long /metrics may take to answer (a start that
        reads a journal on a loaded host)."""
        self.start_timeout = start_timeout
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.ssl_context = ssl_context
        self.auth = auth
        self.env = env
        self.scheme = "https" if ssl_context else "http"
        self.argv = [
            *prefix,
            sys.executable,
            "-m",
            "bigbinf",
            "--config.file",
            str(config),
            "--web.listen-address",
            self.address,
            *extra_args,
        ]
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ExporterProcess:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log, env=self.env)
        try:
            PrometheusServer.wait_for(self._up, timeout=self.start_timeout, what="the exporter to serve /metrics")
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
        request = urllib.request.Request(f"{self.scheme}://{self.address}/metrics")
        if self.auth:
            token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=5, context=self.ssl_context) as r:
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


def start_lab_serve(ns: str, serve_file: Path, state_dir: Path, timeout: float = 90.0) -> subprocess.Popen[bytes]:
    """`lab serve` (the remote side's servers in place) inside namespace `ns`, once it
    has written `<state_dir>/ready`; the caller stops it (SIGTERM) when done."""
    import time

    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "bigbinf", "--config.file", str(serve_file), "lab", "serve"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + timeout
    while not (state_dir / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            output = proc.communicate()[0].decode(errors="replace")
            raise AssertionError(f"lab serve did not become ready in {ns}: {output}")
        time.sleep(0.2)
    return proc
