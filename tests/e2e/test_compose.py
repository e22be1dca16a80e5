"""compose.yaml, validated the way `docker compose` v2 reads it.

No Docker engine runs here, so the file is loaded with the compose-go v2 loader (the
library docker compose v2 is built on) by a tiny Go program, tests/e2e/compose_check, built
on the fly (Go's build cache makes rebuilds take well under a second).  The test then
checks what the stack needs: pinned images, capture capabilities, the transfer network,
Grafana's secret from the environment, and files that exist.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from bigbinf.config import load_config
from bigbinf.lab import LabLayout

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tests" / "e2e" / "compose_check"
PASSWORD = "not-a-real-password"
SERVICES = {"remote", "exporter", "prometheus", "alertmanager", "alert-webhook", "grafana", "node-exporter"}
UPSTREAM = {  # image repository -> the release line it must be pinned within
    "prometheus": r"prom/prometheus:v2\.\d+\.\d+",
    "alertmanager": r"prom/alertmanager:v0\.\d+\.\d+",
    "grafana": r"grafana/grafana:11\.6\.\d+",
    "node-exporter": r"prom/node-exporter:v1\.\d+\.\d+",
    "alert-webhook": r"python:3\.\d+\.\d+-alpine3\.\d+",
}


def go_binary() -> str | None:
    return shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if Path(p).exists()), None)


@pytest.fixture(scope="module")
def compose_check(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = go_binary()
    if go is None:
        pytest.skip(
            "Go is not installed (scripts/setup.sh installs it): compose.yaml cannot be loaded "
            "with the compose-go v2 loader"
        )
    out = tmp_path_factory.mktemp("compose_check") / "compose_check"
    # The module needs Go >= 1.23 (compose-go v2.9); an older go fetches that toolchain itself.
    proc = subprocess.run(
        [go, "build", "-o", str(out), "."],
        cwd=CHECKER,
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=readonly -buildvcs=false"},
        timeout=600,
    )
    assert proc.returncode == 0, f"go build of tests/e2e/compose_check failed:\n{proc.stderr}"
    return out


def load(checker: Path, *env: str) -> subprocess.CompletedProcess[str]:
    argv = [str(checker)]
    for item in env:
        argv += ["-env", item]
    return subprocess.run([*argv, str(ROOT / "compose.yaml")], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def project(compose_check: Path) -> dict[str, Any]:
    proc = load(compose_check, f"GRAFANA_ADMIN_PASSWORD={PASSWORD}")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_compose_loads_with_every_service(project: dict[str, Any]) -> None:
    assert project["name"] == "bigbinf"
    assert set(project["services"]) == SERVICES


def test_images_are_pinned(project: dict[str, Any]) -> None:
    for name, service in project["services"].items():
        image = service["image"]
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and "/" not in tag, f"{name}: {image} is not pinned"
        if name in UPSTREAM:
            assert re.fullmatch(UPSTREAM[name], image), f"{name}: {image}"
    assert project["services"]["exporter"]["build"]["context"] == str(ROOT)
    # The demo remote is the same image running `lab serve`.
    assert project["services"]["remote"]["build"]["context"] == str(ROOT)
    assert project["services"]["remote"]["image"] == project["services"]["exporter"]["image"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    # A FROM may name a build argument (BASE_IMAGE): its default is what docker compose builds on.
    defaults = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", dockerfile, re.M))
    froms = [
        re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m[1], m[0]), f)
        for f in re.findall(r"^FROM\s+(\S+)", dockerfile, re.M)
    ]
    assert froms and all(re.fullmatch(r"[\w./-]+:[\w.-]+", f) and not f.endswith(":latest") for f in froms)


def test_exporter_can_capture_the_transfers(project: dict[str, Any]) -> None:
    services = project["services"]
    exporter, remote = services["exporter"], services["remote"]
    assert {"NET_ADMIN", "NET_RAW"} <= set(exporter["cap_add"])
    assert exporter["networks"]["transfer"]["ipv4_address"] == "198.18.0.1"
    assert "monitoring" in exporter["networks"]  # Prometheus scrapes it there
    assert remote["networks"]["transfer"]["ipv4_address"] == "198.18.0.2"
    assert exporter["depends_on"]["remote"]["condition"] == "service_healthy"
    subnet = project["networks"]["transfer"]["ipam"]["config"][0]["subnet"]
    assert subnet.startswith("198.18.")  # the benchmarking range, as in the lab
    shared = {(v["source"], v["target"], bool(v.get("read_only"))) for v in exporter["volumes"]}
    assert ("remote-shared", "/shared", True) in shared


def test_exporter_config_matches_the_remote_service(project: dict[str, Any]) -> None:
    config = load_config(ROOT / "schedules" / "compose.yaml")
    served = load_config(ROOT / "schedules" / "compose-remote.yaml")
    layout = LabLayout(served.lab)
    remote = config.remotes["demo"]
    # The exporter finds what `lab serve` writes, where it writes it.
    assert remote.address == served.lab.remote_address == "198.18.0.2"
    assert (remote.key, remote.ssh_config, remote.data_dir, remote.serve_root, remote.checksums) == (
        layout.client_key,
        layout.ssh_config,
        layout.data_dir,
        layout.serve_root,
        layout.checksums,
    )
    assert {ds.file: ds.size for ds in config.datasets.values()} == {
        ds.file: ds.size for ds in served.datasets.values()
    }
    command = project["services"]["remote"]["command"]
    assert command == ["--config.file", "/opt/bigbinf/schedules/compose-remote.yaml", "lab", "serve"]
    assert project["services"]["remote"]["healthcheck"]["test"] == [
        "CMD",
        "test",
        "-f",
        str(layout.state_dir / "ready"),
    ]
    assert "schedules/compose.yaml" in (ROOT / "Dockerfile").read_text()
    # Every server the remote runs has its package in the image.
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in (
        "openssh-server",
        "vsftpd",
        "nginx-light",
        "xrootd-server",
        "globus-gridftp-server-progs",
        "iperf3",
        "rsync",
    ):
        assert package in dockerfile


def test_grafana_secret_comes_from_the_environment(project: dict[str, Any], compose_check: Path) -> None:
    env = project["services"]["grafana"]["environment"]
    assert env["GF_SECURITY_ADMIN_PASSWORD"] == PASSWORD
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert env["PROMETHEUS_URL"] == "http://prometheus:9090"
    missing = load(compose_check)
    assert missing.returncode == 1 and "GRAFANA_ADMIN_PASSWORD" in missing.stderr
    # The password is never written into the repository's files.
    assert PASSWORD not in (ROOT / "compose.yaml").read_text()


def test_bind_mounts_exist_and_configs_are_valid(project: dict[str, Any]) -> None:
    for name, service in project["services"].items():
        for v in service.get("volumes", []):
            if v["type"] == "bind" and v["source"].startswith(str(ROOT)):
                assert Path(v["source"]).exists(), f"{name}: {v['source']}"
    prom = ROOT / "prometheus" / "prometheus-compose.yml"
    subprocess.run(["promtool", "check", "config", str(prom)], check=True, capture_output=True)
    native = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())
    composed = yaml.safe_load(prom.read_text())
    jobs = {j["job_name"] for j in composed["scrape_configs"]}
    assert {j["job_name"] for j in native["scrape_configs"]} <= jobs  # same rules work in both
    assert composed["rule_files"] == native["rule_files"]


def test_alertmanager_webhook_reaches_the_logger_service(project: dict[str, Any]) -> None:
    """alertmanager.yml's webhook address is where compose's alert-webhook listens."""
    services = project["services"]
    webhook = services["alert-webhook"]
    raw = yaml.safe_load((ROOT / "prometheus" / "alertmanager.yml").read_text())
    urls = [w["url"] for r in raw["receivers"] for w in r.get("webhook_configs", [])]
    assert urls, "no webhook receiver"
    # The logger shares Alertmanager's network namespace: its loopback is Alertmanager's.
    assert webhook["network_mode"] == "service:alertmanager"
    assert webhook["depends_on"]["alertmanager"]["restart"] is True  # a new namespace needs a new logger
    command = webhook["command"]
    listen = command[command.index("--listen") + 1]
    for url in urls:
        parsed = urllib.parse.urlsplit(url)
        assert f"{parsed.hostname}:{parsed.port}" == listen, url
    script = next(v for v in webhook["volumes"] if v["target"] == command[2])
    assert script["source"] == str(ROOT / "prometheus" / "webhook_logger.py") and script["read_only"]


def test_node_exporter_sees_the_host_not_its_network() -> None:
    """node-exporter reads the host's filesystems and processes; docs/deployment.md says
    its network counters are the container's, which is true only off the host network."""
    service = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["node-exporter"]
    assert service["pid"] == "host" and "--path.rootfs=/host" in service["command"]
    assert "network_mode" not in service and service["networks"] == ["monitoring"]
    docs = " ".join((ROOT / "docs" / "deployment.md").read_text().split())
    assert "network counters are the container's" in docs


def test_dockerfile_installs_dependencies_before_copying_the_code(tmp_path: Path) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    steps = re.findall(r"^(RUN|COPY)\s+(.+?)(?<!\\)$", dockerfile, re.M | re.S)
    order = [f"{kind} {args.split()[0]}" for kind, args in steps]
    deps = next(i for i, (kind, args) in enumerate(steps) if kind == "RUN" and "-r /tmp/requirements.txt" in args)
    code = order.index("COPY exporter")
    assert order.index("COPY pyproject.toml") < deps < code
    package = next(i for i, (kind, args) in enumerate(steps) if kind == "RUN" and "--no-deps ." in args)
    assert package > code
    # The extraction the dependency layer runs works on the repository's pyproject.toml.
    snippet = re.search(r"python3 -c '([^']+)'", steps[deps][1]).group(1)
    out = subprocess.run([sys.executable, "-c", snippet], cwd=ROOT, capture_output=True, text=True, check=True)
    expected = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert out.stdout.split("\n")[:-1] == expected and expected
