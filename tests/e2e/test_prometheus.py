"""A real Prometheus scrapes the exporter while it runs scheduled rounds in the lab."""

from __future__ import annotations

import itertools
import json
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bigbinf.journal.store import Journal

from ..support.exporter import ExporterProcess
from ..support.prometheus import PrometheusServer

pytestmark = [pytest.mark.lab, pytest.mark.prometheus]
ROUNDS = 3
SERIES = '{protocol="scp",remote="lab",dataset="f1m",direction="download"}'


def _config_file(config, tmp: Path, schedule: dict) -> Path:
    raw = json.loads(config.model_dump_json())
    raw["schedule"] = schedule
    path = tmp / "exporter.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _prometheus_config(target: str) -> str:
    return yaml.safe_dump(
        {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [{"job_name": "bigbinf", "static_configs": [{"targets": [target]}]}],
        }
    )


def test_prometheus_counts_every_round_and_restart_republishes(make_lab, tmp_path: Path) -> None:
    config = make_lab()
    journal = Journal(config.journal.path)
    fast = _config_file(config, tmp_path, {"interval": "4s", "jitter": 0})
    exporter = ExporterProcess(fast, tmp_path / "exporter.log")
    with ExitStack() as stack:
        prom = stack.enter_context(PrometheusServer(_prometheus_config(exporter.address), tmp_path / "prom"))
        # Prometheus hands static targets to its scrapers on a 5 s discovery tick: start the
        # exporter only once the target is active, so the primed zero is scraped before
        # the first round (4 s after start).
        prom.wait_for(lambda: prom.api("targets")["activeTargets"], timeout=30, what="the scrape target")
        stack.enter_context(exporter)  # stopped by the stack even if an assertion fails

        def settled() -> float | None:
            # Prometheus has scraped the count of everything journaled so far, and >= ROUNDS.
            before = len(list(journal.read()))
            seen = prom.query(f"sum(bigbinf_transfers_total{SERIES})")
            after = len(list(journal.read()))
            if before == after >= ROUNDS and seen and float(seen[0]["value"][1]) == after:
                return float(after)
            return None

        n = prom.wait_for(settled, timeout=120, what=f"{ROUNDS} rounds scraped")
        exporter.stop()
        window = "10m"
        raw = prom.query(f'bigbinf_transfers_total{{outcome="ok",{SERIES[1:-1]}}}[{window}]')
        samples = raw[0]["values"]
        # The series was primed at 0 before the first transfer, so increase() sees all of them.
        assert float(samples[0][1]) == 0.0, samples[:6]
        last_ts = max(float(s[0]) for s in samples)
        increase = prom.query(f"sum(increase(bigbinf_transfers_total{SERIES}[{window}]))", time=last_ts)
        assert float(increase[0]["value"][1]) == n
        assert (
            float(
                prom.query(f"sum(increase(bigbinf_transfer_duration_seconds_count{SERIES}[{window}]))", time=last_ts)[
                    0
                ]["value"][1]
            )
            == n
        )
        results = list(journal.read())
        assert len(results) == n and all(r.outcome == "ok" for r in results), [r.error for r in results]
        # N is also what the scheduler did, counted independently of the journal: one
        # transfer per round here, each round with its own id, none overlapping another.
        assert len({r.round_id for r in results}) == n
        assert float(prom.query(f"increase(bigbinf_rounds_total[{window}])", time=last_ts)[0]["value"][1]) == n
        for before, after in itertools.pairwise(results):
            assert before.start_timestamp + before.duration_seconds <= after.start_timestamp
        gauge = prom.query(f"bigbinf_last_transfer_throughput_bytes_per_second{SERIES}", time=last_ts)
        assert float(gauge[0]["value"][1]) == results[-1].throughput_bytes_per_second

        # Restart (a schedule that will not fire during the test): the journal republishes.
        slow = _config_file(config, tmp_path, {"interval": "1h"})
        with ExporterProcess(slow, tmp_path / "exporter2.log", port=exporter.port) as restarted:
            text = restarted.metrics()
            start_ts = time.time()
            # timestamp() is the sample's scrape time: only a scrape of the restarted
            # exporter can satisfy it, not the sample left from before the restart.
            fresh = (
                f"bigbinf_last_transfer_throughput_bytes_per_second{SERIES} and timestamp("
                f"bigbinf_last_transfer_throughput_bytes_per_second{SERIES}) >= {start_ts}"
            )
            again = prom.wait_for(
                lambda: prom.query(fresh, time=time.time()),
                timeout=30,
                what="Prometheus to scrape the restarted exporter",
            )
            assert float(again[0]["value"][1]) == results[-1].throughput_bytes_per_second
        scraped = {
            (f.name, tuple(sorted(smp.labels.items()))): smp.value
            for f in text_string_to_metric_families(text)
            for smp in f.samples
        }
        labels = (("dataset", "f1m"), ("direction", "download"), ("protocol", "scp"), ("remote", "lab"))
        assert scraped[("bigbinf_last_transfer_start_timestamp_seconds", labels)] == results[-1].start_timestamp
