"""The regression test end to end (issue 28): a lab link shaped down 30% mid-run, the
exporter's significance test, and BigbinfThroughputRegressed firing in a real
Prometheus with the generated rules.  Lean: 8 MiB over http every 2 s; the baseline is
the same run's first transfers (all at this time of day, within the test's window)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from bigbinf.config import rate_bytes_per_second
from bigbinf.lab import network
from bigbinf.lab.layout import LabLayout
from bigbinf.mixin import rules
from bigbinf.mixin.settings import Settings
from tests.support.exporter import ExporterProcess
from tests.support.prometheus import PrometheusServer

pytestmark = [pytest.mark.lab, pytest.mark.prometheus]

SERIES = {"protocol": "http", "remote": "lab", "dataset": "f8m", "direction": "download"}


def tbf_rate(ns: str, ifname: str) -> float:
    """The rate of the tbf on `ifname` in `ns`, in bytes per second, as the kernel has it."""
    out = subprocess.run(
        ["tc", "-n", ns, "-j", "qdisc", "show", "dev", ifname], capture_output=True, text=True, check=True
    ).stdout
    (tbf,) = [q for q in json.loads(out) if q["kind"] == "tbf"]
    return float(tbf["options"]["rate"])


def reshape(layout: LabLayout, rate: str) -> None:
    link = layout.config.link.model_copy(update={"rate": rate})
    network.shape(LabLayout(layout.config.model_copy(update={"link": link})))
    for ns, ifname in ((layout.client_ns, layout.client_if), (layout.remote_ns, layout.remote_if)):
        assert tbf_rate(ns, ifname) == rate_bytes_per_second(rate), (ns, ifname)  # the kernel's, read back


def test_a_link_shaped_down_30_percent_fires_the_significance_alert(make_lab, tmp_path: Path) -> None:
    config = make_lab(
        link={"rate": "100mbit", "burst": "64KiB"},
        datasets={"f8m": {"file": "f8m.bin", "size": "8MiB"}},
        protocols={"http": {}},
        servers=["nginx"],
    )
    assert config.lab is not None
    layout = LabLayout(config.lab)
    raw = json.loads(config.model_dump_json())
    raw["schedule"] = {"interval": "2s", "jitter": 0}
    raw["capture"] = {"enabled": False}  # the wall clock is what the test needs; less load
    (tmp_path / "exporter.yaml").write_text(yaml.safe_dump(raw))
    (tmp_path / "prom" / "rules").mkdir(parents=True)
    for name, text in rules.render(Settings(baseline_interval="1s")).items():
        (tmp_path / "prom" / "rules" / name).write_text(text)
    exporter = ExporterProcess(tmp_path / "exporter.yaml", tmp_path / "exporter.log")
    prom_config = yaml.safe_dump(
        {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["rules/*.yml"],
            "scrape_configs": [{"job_name": "bigbinf", "static_configs": [{"targets": [exporter.address]}]}],
        }
    )
    regressed = 'ALERTS{alertname="BigbinfThroughputRegressed", alertstate="firing"}'
    with PrometheusServer(prom_config, tmp_path / "prom") as prom, exporter:
        # Tested at full rate first: 30 baseline transfers, not regressed, no alert.  With
        # 30, three slower transfers are significant at the default fdr (0.002) even if a
        # busy machine made two of the baseline's slower still: P(U <= 2) = 4/C(33, 3).
        prom.wait_for(
            lambda: prom.query("bigbinf_throughput_regression_baseline_runs >= 30"),
            timeout=240,
            interval=1,
            what="30 baseline transfers tested",
        )
        assert [s["value"][1] for s in prom.query("bigbinf_throughput_regressed")] == ["0"]
        assert prom.query(regressed) == []
        reshape(layout, "70mbit")
        fired = prom.wait_for(lambda: prom.query(regressed), timeout=120, interval=1, what="the alert firing")
        labels = fired[0]["metric"]
        assert {k: labels[k] for k in SERIES} == SERIES
        assert labels["detector"] == "significance"
        # What fired it: the exporter's own verdict, a drop of about 30% (a shaped rate is
        # an upper bound; connection set-up makes a transfer's drop a little smaller).
        ratio = float(prom.query("bigbinf_throughput_regression_ratio")[0]["value"][1])
        upper = float(prom.query("bigbinf_throughput_regression_ratio_upper")[0]["value"][1])
        assert 0.5 < ratio <= 0.9 and upper < 1.0
        # The series is tested: the fixed-ratio fallback stays out of it.
        assert prom.query('ALERTS{detector="fixed_ratio"}') == []
