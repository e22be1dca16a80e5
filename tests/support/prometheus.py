"""A real Prometheus (Debian's binary) started on loopback for a test, and removed after.

Usage:
    with PrometheusServer(config_text, tmp_path) as prom:
        prom.wait_for(lambda: prom.query("up") ...)
        prom.query("increase(x[5m])", time=ts)
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
RULES = Path(__file__).resolve().parents[2] / "prometheus" / "rules"


def committed_rule_groups() -> dict[str, int]:
    """Each group of the committed rule files (prometheus/rules/*.yml, what the tests'
    Prometheus servers load) and its number of rules."""
    import yaml

    return {
        group["name"]: len(group["rules"])
        for path in sorted(RULES.glob("*.yml"))
        for group in yaml.safe_load(path.read_text())["groups"]
    }


def loaded_rule_groups(prom: PrometheusServer) -> dict[str, int]:
    """The same, as a live Prometheus loaded them."""
    return {group["name"]: len(group["rules"]) for group in prom.api("rules")["groups"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackServer:
    """A server binary on a free loopback port for the length of a `with`; its readiness
    is its /-/ready endpoint.  Subclasses give the argv."""

    name = "server"

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.workdir / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        raise NotImplementedError

    def __enter__(self):
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = self.argv()
        with open(self.log, "wb") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        try:
            self.wait_for(self._ready, timeout=30, what=f"{self.name} to become ready")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _ready(self) -> bool:
        if self.proc and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    @staticmethod
    def wait_for(
        predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.5, what: str = "condition"
    ) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(interval)


class PrometheusServer(LoopbackServer):
    name = "prometheus"

    def __init__(
        self,
        config_text: str,
        workdir: Path,
        extra_files: dict[str, str] | None = None,
        storage: Path | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        super().__init__(workdir)
        self.config = self.workdir / "prometheus.yml"
        self.storage = storage or self.workdir / "tsdb"
        self.config_text = config_text
        self.extra_files = extra_files or {}
        self.extra_args = extra_args or []

    def argv(self) -> list[str]:
        for name, text in self.extra_files.items():
            (self.workdir / name).write_text(text)
        self.config.write_text(self.config_text)
        return [
            PROMETHEUS,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.storage}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            *self.extra_args,
        ]

    def api(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, time: float | None = None) -> list[dict[str, Any]]:
        data = self.api("query", query=expr, time=time)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def reload(self) -> None:
        req = urllib.request.Request(self.url + "/-/reload", method="POST")
        urllib.request.urlopen(req, timeout=10).close()
