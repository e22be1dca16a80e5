"""The demo banner's Prometheus graph (scripts/demo.sh) on a live Prometheus scraping a
live exporter: a protocol skipped for want of its binary (bbftp, hpn-scp on most hosts)
publishes a throughput of 0, which the bare gauge draws as a line at 0 B/s; the banner's
query has no sample for it and keeps the series that ran."""

from __future__ import annotations

import re
import shutil
import urllib.parse
from pathlib import Path

import pytest
import yaml

from bigbinf.journal.store import Journal
from bigbinf.result import Result

from ..support.exporter import ROOT, ExporterProcess
from ..support.pages import seed
from ..support.prometheus import PROMETHEUS, PrometheusServer

pytestmark = pytest.mark.skipif(not shutil.which(PROMETHEUS), reason="prometheus is not installed")


def banner_query() -> str:
    """The expression of the banner's graph link, as a browser sends it to Prometheus."""
    link = re.search(r"/graph\?(\S+)", (ROOT / "scripts" / "demo.sh").read_text())
    assert link is not None, "the banner's Prometheus graph link"
    return urllib.parse.parse_qs(link.group(1))["g0.expr"][0]


def test_the_banners_graph_draws_no_skipped_protocol(tmp_path: Path) -> None:
    s = seed(tmp_path)
    last = s.udp.start_timestamp + 100
    skipped = Result("bbftp", "site", "a", "download", last, "skipped", error="bbftp is not installed")
    Journal(s.journal).append(skipped)
    exporter = ExporterProcess(s.config, tmp_path / "exporter.log")
    prom_config = yaml.safe_dump(
        {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [{"job_name": "bigbinf", "static_configs": [{"targets": [exporter.address]}]}],
        }
    )
    raw = "bigbinf_last_transfer_throughput_bytes_per_second"
    with exporter, PrometheusServer(prom_config, tmp_path / "prom") as prom:
        drawn = prom.wait_for(lambda: prom.query(raw) or None, timeout=60, what="a scrape of the throughput gauges")

        def by_protocol(samples: list[dict]) -> dict[str, float]:
            return {x["metric"]["protocol"]: float(x["value"][1]) for x in samples}

        bare = by_protocol(drawn)
        assert bare["bbftp"] == 0.0  # the skipped run, drawn at 0 B/s by the bare gauge
        shown = by_protocol(prom.query(banner_query()))
        assert "bbftp" not in shown
        assert shown == {p: v for p, v in bare.items() if p != "bbftp"}  # every series that ran, its value
        assert shown["gridftp-udt"] == pytest.approx(s.udp.throughput_bytes_per_second)
        assert shown["http"] == 0.0  # a failed transfer is not skipped: it still shows, at 0
