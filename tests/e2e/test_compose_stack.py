"""compose.yaml brought up for real, with podman-compose, and checked end to end.

The images are built locally from Debian's packages (tests/e2e/podman_images.py: no image
registry can be reached here); tests/e2e/compose_podman/compose.override.yaml points the
stack at them, compose.yaml stays what users run with `docker compose`.  Grafana is not
run (no Grafana can be had here): every other service is.  Then, through the stack's own
paths:

- the exporter's first round runs against the `remote` service with captures: the journal
  on the exporter's volume, read from the host, holds verified results whose wire bytes
  come from the capture;
- Prometheus scrapes the exporter (and node-exporter, Alertmanager, itself) and loads the
  rules: /api/v1/rules lists every alert of the generated files, all healthy;
- stopping the exporter fires BigbinfExporterDown, which reaches the webhook logger through
  Alertmanager (`podman logs` of alert-webhook, as the docs say `docker compose logs`);
- the restarted exporter keeps its journal on the volume (the results of before are still
  there and still published);
- `down -v` leaves no container, network or volume of the project behind.

Everything runs under a unique project name and is taken down in a finalizer, even when
a check fails; only the images kept as a cache stay (podman_images.py says which).
The containers' traffic stays on podman's own networks on this machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import session

from . import podman_images
from .podman_images import IP_FORWARD, ROOT, leftovers, podman, remove_leftovers, restore_host_networking

OVERRIDE = podman_images.HERE / "compose.override.yaml"
# Every service of compose.yaml but Grafana (docs/deployment.md, "Run for real, with podman").
SERVICES = ("remote", "exporter", "prometheus", "alertmanager", "alert-webhook", "node-exporter")
ROUND_TIMEOUT = 900  # s: a loaded 2-core machine; the round is 9 protocols x 2 datasets


def podman_compose() -> str | None:
    beside = Path(sys.executable).parent / "podman-compose"
    return str(beside) if beside.exists() else shutil.which("podman-compose")


def missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (rootful podman, debootstrap)"
    tools = [t for t in ("podman", "runc", "debootstrap") if not shutil.which(t) and not Path("/usr/sbin", t).exists()]
    if podman_compose() is None:
        tools.append("podman-compose (pip install -e '.[test]')")
    return f"missing: {', '.join(tools)} (run scripts/setup.sh --test)" if tools else None


@dataclass
class Stack:
    project: str
    env: dict[str, str]
    exporter_volume_dir: Path
    timings: dict[str, float]
    logs: Path
    volumes: set[str] = field(default_factory=set)  # every volume the containers mounted

    def container(self, service: str) -> str:
        return f"{self.project}_{service}_1"

    def compose(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        argv = [str(podman_compose()), "--project-name", self.project, "-f", str(ROOT / "compose.yaml")]
        argv += ["-f", str(OVERRIDE), *args]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=ROOT, timeout=timeout)

    def up(self, *services: str) -> None:
        proc = self.compose("up", "-d", "--no-build", "--no-deps", *services)
        assert proc.returncode == 0, f"podman-compose up failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        with open(self.logs, "a") as sink:
            sink.write(f"===== up {' '.join(services)}\n{proc.stdout}{proc.stderr}\n")

    def address(self, service: str, network: str = "monitoring") -> str:
        out = podman("inspect", self.container(service), "--format", "{{json .NetworkSettings.Networks}}").stdout
        networks = json.loads(out)
        return str(networks[f"{self.project}_{network}"]["IPAddress"])


def get(url: str, timeout: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return bytes(resp.read())


def get_json(url: str) -> Any:
    return json.loads(get(url))


def wait_for(what: str, check: Any, timeout: float, interval: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except (OSError, urllib.error.URLError, ValueError, KeyError, RuntimeError) as exc:
            last, value = exc, None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last error: {last})")


def metric_value(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


LAST_START = re.compile(r"^bigbinf_last_transfer_start_timestamp_seconds\{(?P<labels>[^}]*)\} (?P<value>\S+)$", re.M)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def journal(stack: Stack) -> list[dict[str, Any]]:
    path = stack.exporter_volume_dir / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def mounted_volumes(stack: Stack) -> set[str]:
    """The volumes the project's containers mounted, named or anonymous (an image's VOLUME
    that no compose volume covers gets an anonymous one, which carries no project name)."""
    names: set[str] = set()
    for service in SERVICES:
        out = podman("inspect", stack.container(service), "--format", "{{json .Mounts}}").stdout
        names |= {m["Name"] for m in json.loads(out) if m.get("Type") == "volume"}
    return names


@pytest.fixture(scope="module")
def rules_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rules")
    subprocess.run(
        [sys.executable, "-m", "bigbinf.mixin.rules", "--exporter-down-for", "1s", "--out-dir", str(out)],
        check=True,
        timeout=120,
    )
    out.chmod(0o755)  # Prometheus runs as nobody
    for f in out.iterdir():
        f.chmod(0o644)
    return out


@pytest.fixture(scope="module")
def stack(rules_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    reason = missing()
    if reason:
        pytest.skip(reason)
    project = session.unique_name("bbt", 8)
    ip_forward = IP_FORWARD.read_text()
    # Registered before anything is made: a session killed meanwhile removes it all.
    session.register("podman", project=project, images=[f"{podman_images.EXPORTER}:{project}"], ip_forward=ip_forward)
    start = time.monotonic()
    images = podman_images.build(project)
    timings = {**images.timings, "build_total": time.monotonic() - start}
    env = {
        **podman_images.podman_env(),
        "BIGBINF_E2E_BASE_IMAGE": images.base,
        "BIGBINF_E2E_EXPORTER_IMAGE": images.exporter,
        "BIGBINF_E2E_MONITORING_IMAGE": images.monitoring,
        "BIGBINF_E2E_RULES_DIR": str(rules_dir),
        "GRAFANA_ADMIN_PASSWORD": "not-used-grafana-is-not-started",
    }
    # The containers' logs, for a failure's diagnosis.
    logs = tmp_path_factory.mktemp("compose-logs") / f"{project}-logs.txt"
    stack = Stack(project, env, exporter_volume_dir=Path("/nonexistent"), timings=timings, logs=logs)
    try:
        start = time.monotonic()
        # compose.yaml starts the exporter once `remote` is healthy.  podman-compose 1.2
        # does not wait on depends_on conditions, and podman runs healthchecks from systemd
        # timers, which do not run where systemd is not PID 1: so `remote` comes up first,
        # the test runs its healthcheck (compose.yaml's, through podman) until it passes,
        # then the rest comes up, as `docker compose up` orders it.
        stack.up("remote")
        wait_for(
            "the remote's healthcheck (its servers listening, /shared/lab/ready)",
            lambda: podman("healthcheck", "run", stack.container("remote"), check=False).returncode == 0,
            600,
        )
        stack.up(*(s for s in SERVICES if s != "remote"))
        timings["up"] = time.monotonic() - start
        stack.volumes = mounted_volumes(stack)
        session.register("podman", project=project, volumes=sorted(stack.volumes))  # anonymous ones too
        mountpoint = podman("volume", "inspect", f"{project}_exporter-state", "--format", "{{.Mountpoint}}").stdout
        stack.exporter_volume_dir = Path(mountpoint.strip())
        yield stack
    finally:
        try:
            with open(logs, "a") as sink:
                for service in SERVICES:
                    proc = podman("logs", "--tail", "200", stack.container(service), check=False)
                    sink.write(f"===== {service}\n{proc.stdout}{proc.stderr}\n")
            stack.compose("down", "-v", "--timeout", "5", timeout=300)
        finally:
            remove_leftovers(project, stack.volumes)
            podman("rmi", images.exporter, check=False)  # the run's tag; `:cache` stays
            restore_host_networking(ip_forward)
        print(f"\ncompose stack timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}; logs: {logs}")


def test_first_round_measured_against_remote_with_captures(stack: Stack) -> None:
    start = time.monotonic()

    def rounds() -> float | None:
        value = metric_value(get("http://127.0.0.1:9753/metrics").decode(), "bigbinf_rounds_total")
        return value if value and value >= 1 else None

    wait_for("the exporter's first round (bigbinf_rounds_total >= 1 on the published port)", rounds, ROUND_TIMEOUT, 5)
    stack.timings["first_round"] = time.monotonic() - start
    results = journal(stack)
    config = yaml.safe_load((ROOT / "schedules" / "compose.yaml").read_text())
    expected = {(p, d) for p in config["protocols"] for d in config["datasets"]}
    seen = {(r["protocol"], r["dataset"]) for r in results}
    assert expected <= seen, f"protocols x datasets missing from the journal: {sorted(expected - seen)}"
    failed = [(r["protocol"], r["dataset"], r["direction"], r["error"]) for r in results if r["outcome"] != "ok"]
    assert not failed, f"transfers that did not succeed in the compose stack: {failed}"
    for r in results:
        assert r["remote"] == "demo" and r["remote_address"] == "198.18.0.2", r
        # iperf3 is the memory-to-memory baseline: no file to verify.
        assert r["verified"] or r["protocol"] == "iperf3", f"{r['protocol']} {r['dataset']}: not verified"
        # The capture saw the transfer: at least the dataset's bytes crossed the transfer network.
        wire = r["captured_wire_bytes_down"] + r["captured_wire_bytes_up"]
        assert r["wire_measured"] and wire >= r["file_bytes"] > 0, (r["protocol"], r["dataset"], wire)


def test_prometheus_scrapes_and_loads_rules(stack: Stack, rules_dir: Path) -> None:
    prom = f"http://{stack.address('prometheus')}:9090"

    def targets_up() -> dict[str, str] | None:
        active = get_json(f"{prom}/api/v1/targets")["data"]["activeTargets"]
        health = {t["labels"]["job"]: t["health"] for t in active}
        return health if health and all(h == "up" for h in health.values()) else None

    # The ports compose.yaml publishes on the host's loopback, as docs/deployment.md lists them.
    wait_for(
        "Prometheus ready on 127.0.0.1:9090", lambda: get("http://127.0.0.1:9090/-/ready").startswith(b"Prometheus"), 60
    )
    wait_for("Alertmanager ready on 127.0.0.1:9093", lambda: b"OK" in get("http://127.0.0.1:9093/-/ready"), 60)
    health = wait_for("every scrape target up", targets_up, 120)
    assert set(health) == {"bigbinf", "node", "prometheus", "alertmanager"}, health

    def round_scraped() -> bool:
        # The first round, scraped from the exporter (15 s scrape interval).
        result = get_json(f"{prom}/api/v1/query?query=bigbinf_rounds_total")["data"]["result"]
        return bool(result) and float(result[0]["value"][1]) >= 1

    wait_for("Prometheus holding the exporter's first round", round_scraped, 120)

    groups = get_json(f"{prom}/api/v1/rules")["data"]["groups"]
    loaded = {r["name"]: r for g in groups for r in g["rules"]}
    generated: set[str] = set()
    for path in rules_dir.glob("*.yml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            generated |= {r.get("alert") or r["record"] for r in group["rules"]}
    assert generated and generated <= set(loaded), sorted(generated - set(loaded))
    unhealthy = {name: r.get("lastError") for name, r in loaded.items() if r["health"] not in ("ok", "unknown")}
    assert not unhealthy, unhealthy

    def evaluated() -> bool:
        # Groups on the global 15 s interval; bigbinf.throughput runs every 5 m, and its
        # first evaluation may come that late (not in error is what can be asked of it).
        groups = get_json(f"{prom}/api/v1/rules")["data"]["groups"]
        return all(r["health"] == "ok" for g in groups if g["interval"] <= 60 for r in g["rules"])

    wait_for("every rule of the 15 s groups evaluated without error (health ok)", evaluated, 120)


def test_alert_reaches_webhook_and_restart_keeps_journal(stack: Stack) -> None:
    before = journal(stack)
    assert before, "no results in the journal on the exporter's volume"
    start = time.monotonic()
    stopped = podman("stop", "--time", "10", stack.container("exporter"))
    assert stopped.returncode == 0
    stack.timings["exporter_stop"] = time.monotonic() - start

    def notified() -> list[dict[str, Any]] | None:
        out = podman("logs", stack.container("alert-webhook")).stdout
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        down = [a for a in lines if a["labels"].get("alertname") == "BigbinfExporterDown" and a["status"] == "firing"]
        return down or None

    # scrape 15 s + evaluation 15 s + Alertmanager's group_wait 30 s, with room for a busy host
    down = wait_for("BigbinfExporterDown at the webhook logger, through Alertmanager", notified, 240, 5)
    stack.timings["alert_at_webhook"] = time.monotonic() - start - stack.timings["exporter_stop"]
    assert down[0]["labels"]["job"] == "bigbinf" and down[0]["path"] == "/bigbinf", down[0]
    assert down[0]["runbook_url"].endswith("#bigbinfexporterdown"), down[0]

    start = time.monotonic()
    started = podman("start", stack.container("exporter"))
    assert started.returncode == 0
    after = journal(stack)
    assert after[: len(before)] == before, "the restarted exporter's journal lost or changed results"

    # The journal is read back at start: each series' last result of before is published
    # again, though the restarted exporter's counters start at 0.
    last_before: dict[tuple[str, ...], float] = {}
    for r in before:
        key = (r["protocol"], r["remote"], r["dataset"], r["direction"])
        last_before[key] = max(last_before.get(key, 0.0), r["start_timestamp"])

    def republished() -> dict[tuple[str, ...], float] | None:
        text = get("http://127.0.0.1:9753/metrics").decode()
        published = {}
        for m in LAST_START.finditer(text):
            labels = dict(LABEL.findall(m["labels"]))
            key = (labels["protocol"], labels["remote"], labels["dataset"], labels["direction"])
            published[key] = float(m["value"])
        return published or None

    published = wait_for("the restarted exporter publishing the journal's results", republished, 180)
    stack.timings["restart_republished"] = time.monotonic() - start
    # A series may already have run again (the first round starts 20 s after the start):
    # it may be newer, never older, and the others are exactly the journal's.
    assert set(published) == set(last_before), (sorted(published), sorted(last_before))
    assert all(published[k] >= last_before[k] for k in last_before), (published, last_before)
    assert any(published[k] == last_before[k] for k in last_before), "nothing came from the journal"


def test_down_leaves_nothing(stack: Stack) -> None:
    down = stack.compose("down", "-v", "--timeout", "5", timeout=300)
    assert down.returncode == 0, down.stderr[-3000:]
    assert stack.volumes, "no volumes recorded at up"
    left = leftovers(stack.project, stack.volumes)
    # podman-compose 1.2's `down` does not remove the project's networks (`docker compose
    # down` and podman-compose 1.3 do): the networks compose.yaml declares, and only
    # those, are left, and `podman network rm` removes them (docs/deployment.md).
    networks = left.pop("networks", [])
    assert left == {}, f"`down -v` left {left}"
    assert set(networks) <= {f"{stack.project}_transfer", f"{stack.project}_monitoring"}, networks
    for network in networks:
        podman("network", "rm", network)
    assert leftovers(stack.project, stack.volumes) == {}
