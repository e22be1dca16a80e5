"""The regression test end to end (issues 28, 35): a lab link shaped down 30% mid-run, the
exporter's significance test, and BigbinfThroughputRegressed firing in a real
Prometheus with the generated rules; the cut kept for 10 more rounds keeps it firing
without a break (the regression is a state), and restoring the link resolves it.  Lean:
8 MiB over http every 2 s; the baseline is the same run's first transfers (all at this
time of day, within the test's window).  The rules' `for` is scaled to the 2 s rounds
(2s, from 5m)."""

from __future__ import annotations

import itertools
import json
import subprocess
import time
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
    for name, text in rules.render(Settings(baseline_interval="1s", regressed_for="2s")).items():
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
        cut = time.time()
        fired = prom.wait_for(lambda: prom.query(regressed), timeout=120, interval=1, what="the alert firing")
        first_firing = time.time()
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
        # The regression's start is one of the cut's transfers, its level before the full rate's.
        since = float(prom.query("bigbinf_throughput_regression_since_timestamp_seconds")[0]["value"][1])
        assert cut - 5 <= since <= first_firing
        level = float(prom.query("bigbinf_throughput_regression_level_before_bytes_per_second")[0]["value"][1])
        # What changed at its start, as the exporter read it from its journals: the path's
        # RTT stayed (a rate cut, not a longer path); the throughput is what fell.
        rtt = {
            s["metric"]["when"]: float(s["value"][1])
            for s in prom.query("bigbinf_throughput_regression_path_rtt_seconds")
        }
        assert set(rtt) == {"before", "after"} and 0.5 < rtt["after"] / rtt["before"] < 2, rtt
        (info,) = prom.query("bigbinf_throughput_regression_change_info")

        # 10 more slow rounds: the alert fires at every evaluation, without a break.
        done = ok_transfers(prom) + 10
        prom.wait_for(lambda: ok_transfers(prom) >= done, timeout=240, interval=1, what="10 more slow rounds")
        kept_until = time.time()
        ratio_late = float(prom.query("bigbinf_throughput_regression_ratio")[0]["value"][1])
        assert 0.5 < ratio_late <= 0.9  # still against the level before (not a baseline filled with slow runs)
        firing = prom.query_range(regressed, first_firing + 2, kept_until, 1)
        assert len(firing) == 1, firing  # one alert, never resolved and fired again (a new series)
        steps = [float(t) for t, _ in firing[0]["values"]]
        assert len(steps) >= int(kept_until - first_firing - 2), (steps[0], steps[-1], len(steps))
        assert max(b - a for a, b in itertools.pairwise(steps)) == 1.0  # no gap
        assert prom.query('ALERTS{detector="fixed_ratio"}') == []

        # The link restored: the series recovers and the alert resolves.
        reshape(layout, "100mbit")
        restored = ok_transfers(prom)
        prom.wait_for(lambda: not prom.query(regressed), timeout=120, interval=1, what="the alert resolving")
        rounds_to_clear = ok_transfers(prom) - restored
        assert [s["value"][1] for s in prom.query("bigbinf_throughput_regressed")] == ["0"]
        print(
            f"\nlab regression: level before {level / 1e6:.2f} MB/s; fired {first_firing - cut:.0f} s after the cut; "
            f"ratio {ratio:.3f}, after 10 more rounds {ratio_late:.3f}; firing without a break for "
            f"{kept_until - first_firing:.0f} s; resolved {rounds_to_clear} transfers after the link was restored; "
            f"path RTT {rtt['before'] * 1e3:.2f} -> {rtt['after'] * 1e3:.2f} ms; verdict "
            f"{info['metric'].get('limited_by_before', '-')} -> {info['metric'].get('limited_by_after', '-')}"
        )


def ok_transfers(prom: PrometheusServer) -> int:
    """The series' ok transfers so far, as Prometheus scraped them."""
    found = prom.query(
        'bigbinf_transfer_throughput_bytes_per_second_count{protocol="http", dataset="f8m", direction="download"}'
    )
    return int(float(found[0]["value"][1])) if found else 0
