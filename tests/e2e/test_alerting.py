"""The demo's Prometheus loads the rules and delivers to the demo's Alertmanager, which
notifies the webhook logger compose runs (prometheus/webhook_logger.py).

Prometheus runs with the repository's prometheus.yml, with the ports substituted as
scripts/demo.sh does; Alertmanager runs with the repository's alertmanager.yml, the
webhook's port moved to the test's logger.  Only the test's copies are faster: 1 s
scrape and evaluation intervals, rules generated with `--exporter-down-for 1s` (the
shipped rules say 5m), and a 1 s group_wait.  Stopping the exporter must make
BigbinfExporterDown arrive in Alertmanager and at the webhook; the inhibitions must hold
back what alertmanager.yml says they hold back.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml

from bigbinf import DOCS_URL
from bigbinf.mixin import rules
from bigbinf.mixin.settings import Settings

from ..conftest import lab_config
from ..support.exporter import ExporterProcess
from ..support.prometheus import (
    LoopbackServer,
    PrometheusServer,
    committed_rule_groups,
    free_port,
    loaded_rule_groups,
)

pytestmark = [pytest.mark.prometheus]
ROOT = Path(__file__).resolve().parents[2]
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
        return [
            ALERTMANAGER,
            f"--config.file={self.config}",
            f"--storage.path={self.workdir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--cluster.listen-address=",
        ]

    def alerts(self, alertname: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"filter": f'alertname="{alertname}"'})
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts?{query}", timeout=10) as r:
            return json.load(r)

    def alerts_all(self) -> list[dict[str, Any]]:
        """Every alert, inhibited and silenced ones included."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10) as r:
            return json.load(r)

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        req = urllib.request.Request(
            f"{self.url}/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(req, timeout=10).close()


class WebhookLogger(LoopbackServer):
    """prometheus/webhook_logger.py on a free port, its stdout (one line per alert) kept."""

    name = "webhook"

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-u",
            str(ROOT / "prometheus" / "webhook_logger.py"),
            "--listen",
            f"127.0.0.1:{self.port}",
        ]

    def __enter__(self) -> WebhookLogger:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.out = self.workdir / "webhook.jsonl"
        with open(self.out, "wb") as out, open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=out, stderr=log)
        try:
            self.wait_for(self._ready, timeout=30, what="the webhook logger")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def received(self, alertname: str | None = None) -> list[dict[str, Any]]:
        # Whole lines only: the logger may be writing the last one as we read.
        text = self.out.read_text()
        lines = [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]
        return [x for x in lines if alertname is None or x["labels"].get("alertname") == alertname]


def alertmanager_config(webhook: WebhookLogger, workdir: Path) -> Path:
    """prometheus/alertmanager.yml with the webhook on the test's logger and no 30 s wait."""
    raw = yaml.safe_load((ROOT / "prometheus" / "alertmanager.yml").read_text())
    urls = [w for r in raw["receivers"] for w in r.get("webhook_configs", [])]
    assert [urllib.parse.urlsplit(w["url"]).netloc for w in urls] == ["127.0.0.1:5001"]
    for w in urls:
        w["url"] = w["url"].replace("127.0.0.1:5001", f"127.0.0.1:{webhook.port}")
    raw["route"]["group_wait"] = "1s"
    path = workdir / "alertmanager.yml"
    path.write_text(yaml.safe_dump(raw))
    return path


def demo_prometheus_config(ports: dict[str, int]) -> str:
    """prometheus/prometheus.yml as scripts/demo.sh serves it, with test-speed intervals."""
    text = (ROOT / "prometheus" / "prometheus.yml").read_text()
    for default, port in ports.items():
        text = text.replace(f"127.0.0.1:{default}", f"127.0.0.1:{port}")
    raw = yaml.safe_load(text)
    raw["global"].update({"scrape_interval": "1s", "evaluation_interval": "1s"})
    return yaml.safe_dump(raw)


def fast_rules(directory: Path) -> None:
    directory.mkdir(parents=True)
    for name, text in rules.render(Settings(exporter_down_for="1s", baseline_interval="1s")).items():
        (directory / name).write_text(text)


@pytest.fixture
def stack(
    tmp_path: Path, unique_name: str
) -> Iterator[tuple[ExporterProcess, PrometheusServer, AlertmanagerServer, WebhookLogger]]:
    # The exporter only has to serve /metrics: a schedule that will not fire in the test.
    config = lab_config(tmp_path, unique_name)
    raw = json.loads(config.model_dump_json())
    raw["schedule"] = {"interval": "1h"}
    (tmp_path / "exporter.yaml").write_text(yaml.safe_dump(raw))
    exporter = ExporterProcess(tmp_path / "exporter.yaml", tmp_path / "exporter.log")
    prom_dir = tmp_path / "prom"
    fast_rules(prom_dir / "rules")
    with ExitStack() as stack:
        webhook = stack.enter_context(WebhookLogger(tmp_path))
        am = stack.enter_context(AlertmanagerServer(alertmanager_config(webhook, tmp_path), tmp_path))
        prom = PrometheusServer("", prom_dir)
        prom.config_text = demo_prometheus_config(
            {9753: exporter.port, 9093: am.port, 9090: prom.port, 9100: free_port()}
        )
        stack.enter_context(prom)
        stack.callback(exporter.stop)  # also if it never comes up
        stack.enter_context(exporter)
        yield exporter, prom, am, webhook


def test_exporter_down_reaches_alertmanager(
    stack: tuple[ExporterProcess, PrometheusServer, AlertmanagerServer, WebhookLogger],
) -> None:
    exporter, prom, am, webhook = stack
    # Prometheus loaded every rule and found the demo's Alertmanager.
    assert loaded_rule_groups(prom) == committed_rule_groups()
    active = prom.wait_for(
        lambda: prom.api("alertmanagers")["activeAlertmanagers"], timeout=30, what="Prometheus to discover Alertmanager"
    )
    assert active[0]["url"].startswith(am.url)
    prom.wait_for(lambda: prom.query('up{job="bigbinf"} == 1'), timeout=30, what="a scrape of the exporter")
    assert am.alerts("BigbinfExporterDown") == []

    exporter.stop()
    alerts = prom.wait_for(
        lambda: am.alerts("BigbinfExporterDown"), timeout=60, interval=0.5, what="BigbinfExporterDown in Alertmanager"
    )
    alert = alerts[0]
    assert alert["labels"]["job"] == "bigbinf"
    assert alert["labels"]["instance"] == exporter.address
    assert alert["labels"]["severity"] == "critical"
    assert alert["annotations"]["runbook_url"] == f"{DOCS_URL}/runbook.md#bigbinfexporterdown"
    assert alert["status"]["state"] == "active"
    assert alert["receivers"][0]["name"] == "default-webhook"
    # ... and Alertmanager notified the webhook receiver.
    sent = prom.wait_for(
        lambda: webhook.received("BigbinfExporterDown"),
        timeout=30,
        interval=0.5,
        what="BigbinfExporterDown at the webhook",
    )
    assert sent[0]["status"] == "firing" and sent[0]["receiver"] == "default-webhook"
    assert sent[0]["labels"]["instance"] == exporter.address
    assert sent[0]["path"] == "/bigbinf"


SERIES = {"job": "bigbinf", "instance": "e:9753", "protocol": "scp", "remote": "lab", "direction": "download"}


def regression(name: str, dataset: str, **extra: str) -> dict[str, Any]:
    return {
        "labels": {"alertname": name, "severity": "warning", "dataset": dataset, **SERIES, **extra},
        "annotations": {"summary": f"{name} {dataset}"},
    }


def test_time_of_day_regression_holds_back_the_whole_day_one(tmp_path: Path) -> None:
    """The inhibitions of alertmanager.yml, in a real Alertmanager: the time-of-day
    regression is primary and holds back the whole-day one of the same series only."""
    with WebhookLogger(tmp_path) as webhook, AlertmanagerServer(alertmanager_config(webhook, tmp_path), tmp_path) as am:
        am.post_alerts(
            [
                regression("BigbinfThroughputRegressionTimeOfDay", "f64m", period="peak"),
                regression("BigbinfThroughputRegression", "f64m"),
                regression("BigbinfThroughputRegression", "f5m"),  # no time-of-day alert for f5m
            ]
        )
        webhook.wait_for(lambda: len(webhook.received()) >= 2, timeout=30, what="two notifications")
        by_key = {(a["labels"]["alertname"], a["labels"]["dataset"]): a for a in am.alerts_all()}
        whole = by_key[("BigbinfThroughputRegression", "f64m")]["status"]
        assert whole["state"] == "suppressed" and whole["inhibitedBy"]
        assert by_key[("BigbinfThroughputRegressionTimeOfDay", "f64m")]["status"]["state"] == "active"
        assert by_key[("BigbinfThroughputRegression", "f5m")]["status"]["state"] == "active"
        time.sleep(3)  # past group_wait again: a suppressed alert would have been sent by now
        sent = {(x["labels"]["alertname"], x["labels"]["dataset"]) for x in webhook.received()}
        assert sent == {("BigbinfThroughputRegressionTimeOfDay", "f64m"), ("BigbinfThroughputRegression", "f5m")}
