"""The demo's Prometheus loads the rules and delivers to the demo's Alertmanager.

Prometheus runs with the repository's prometheus.yml, with the ports substituted as
scripts/demo.sh does; Alertmanager runs with the repository's alertmanager.yml.  Only the
test's copy is faster: 1 s scrape and evaluation intervals, and rules generated with
`--exporter-down-for 1s` (the shipped rules say 5m).  Stopping the exporter must make
BigbinfExporterDown arrive in Alertmanager.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import lab_config
from .support.exporter import ExporterProcess
from .support.prometheus import LoopbackServer, PrometheusServer, free_port

pytestmark = [pytest.mark.prometheus]
ROOT = Path(__file__).resolve().parents[1]
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


class AlertmanagerServer(LoopbackServer):
    """Debian's Alertmanager on loopback, clustering off, stopped on exit."""

    name = "alertmanager"

    def __init__(self, config: Path, workdir: Path) -> None:
        if ALERTMANAGER is None:
            pytest.fail("prometheus-alertmanager is not installed: run scripts/setup.sh")
        super().__init__(workdir)
        self.config = config

    def argv(self) -> list[str]:
        return [ALERTMANAGER, f"--config.file={self.config}", f"--storage.path={self.workdir / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="]

    def alerts(self, alertname: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"filter": f'alertname="{alertname}"'})
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts?{query}", timeout=10) as r:
            return json.load(r)


def demo_prometheus_config(ports: dict[str, int]) -> str:
    """prometheus/prometheus.yml as scripts/demo.sh serves it, with test-speed intervals."""
    text = (ROOT / "prometheus" / "prometheus.yml").read_text()
    for default, port in ports.items():
        text = text.replace(f"127.0.0.1:{default}", f"127.0.0.1:{port}")
    raw = yaml.safe_load(text)
    raw["global"].update({"scrape_interval": "1s", "evaluation_interval": "1s"})
    return yaml.safe_dump(raw)


def fast_rules(directory: Path) -> None:
    spec = importlib.util.spec_from_file_location("bigbinf_generate_rules", ROOT / "prometheus" / "generate_rules.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gen  # dataclasses look their module up there
    spec.loader.exec_module(gen)
    directory.mkdir(parents=True)
    for name, text in gen.render(gen.Settings(exporter_down_for="1s", baseline_interval="1s")).items():
        (directory / name).write_text(text)


@pytest.fixture
def stack(tmp_path: Path, unique_name: str) -> Iterator[tuple[ExporterProcess, PrometheusServer, AlertmanagerServer]]:
    # The exporter only has to serve /metrics: a schedule that will not fire in the test.
    config = lab_config(tmp_path, unique_name)
    raw = json.loads(config.model_dump_json())
    raw["schedule"] = {"interval": "1h"}
    (tmp_path / "exporter.yaml").write_text(yaml.safe_dump(raw))
    exporter = ExporterProcess(tmp_path / "exporter.yaml", tmp_path / "exporter.log")
    prom_dir = tmp_path / "prom"
    fast_rules(prom_dir / "rules")
    with ExitStack() as stack:
        am = stack.enter_context(AlertmanagerServer(ROOT / "prometheus" / "alertmanager.yml", tmp_path))
        prom = PrometheusServer("", prom_dir)
        prom.config_text = demo_prometheus_config(
            {9753: exporter.port, 9093: am.port, 9090: prom.port, 9100: free_port()})
        stack.enter_context(prom)
        stack.callback(exporter.stop)  # also if it never comes up
        stack.enter_context(exporter)
        yield exporter, prom, am


def test_exporter_down_reaches_alertmanager(stack: tuple[ExporterProcess, PrometheusServer, AlertmanagerServer]) -> None:
    exporter, prom, am = stack
    # Prometheus loaded every rule and found the demo's Alertmanager.
    groups = prom.api("rules")["groups"]
    assert {g["name"] for g in groups} == {"bigbinf.series", "bigbinf.baselines", "bigbinf.alerts"}
    assert sum(len(g["rules"]) for g in groups) == 20
    active = prom.wait_for(lambda: prom.api("alertmanagers")["activeAlertmanagers"], timeout=30,
                           what="Prometheus to discover Alertmanager")
    assert active[0]["url"].startswith(am.url)
    prom.wait_for(lambda: prom.query('up{job="bigbinf"} == 1'), timeout=30, what="a scrape of the exporter")
    assert am.alerts("BigbinfExporterDown") == []

    exporter.stop()
    alerts = prom.wait_for(lambda: am.alerts("BigbinfExporterDown"), timeout=60, interval=0.5,
                           what="BigbinfExporterDown in Alertmanager")
    alert = alerts[0]
    assert alert["labels"]["job"] == "bigbinf"
    assert alert["labels"]["instance"] == exporter.address
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["runbook_url"] == "docs/runbook.md#bigbinfexporterdown"
    assert alert["status"]["state"] == "active"
    assert alert["receivers"][0]["name"] == "default-webhook"
