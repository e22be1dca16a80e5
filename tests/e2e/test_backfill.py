"""Backfill end to end: promtool blocks from a journal, loaded by a live Prometheus, which
returns the journal's values at the journal's times; the report reads them back."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from bigbinf.journal.store import Journal
from bigbinf.result import Result
from bigbinf.study import backfill
from tests.support.prometheus import PROMETHEUS, PrometheusServer
from tests.support.results import HOUR, expected_samples, imported_result, make_results


def run(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bigbinf-exporter")
    backfill.register(p.add_subparsers())
    args = p.parse_args(argv)
    return args.func(args)


needs_prometheus = pytest.mark.skipif(
    not (shutil.which("promtool") and Path(PROMETHEUS).exists()), reason="needs prometheus and promtool"
)


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("backfill")
    # A few hours back: inside the default 15 d retention, and older than the head block
    # Prometheus will start (blocks are loaded at startup: out-of-order ingestion is off).
    base = float(int(time.time() - 6 * HOUR))
    results = [*make_results(base), imported_result(base + 5 * 1200)]
    journal = tmp / "journal.jsonl"
    for result in results:
        Journal(journal).append(result)
    storage = tmp / "tsdb"
    om = tmp / "kept.om"
    assert run(["backfill", "--journal", str(journal), "--out", str(storage), "--openmetrics", str(om)]) == 0
    assert om.read_text().endswith("# EOF\n")
    assert backfill.block_dirs(storage)
    with PrometheusServer("global:\n  scrape_interval: 15s\n", tmp / "prom", storage=storage) as prom:
        yield prom, results, journal, tmp


@pytest.mark.prometheus
@needs_prometheus
def test_prometheus_returns_the_journal_values_at_the_journal_times(backfilled: Any) -> None:
    prom, results, _, _ = backfilled
    last_ok: dict[Any, float] = {}
    for r in results:
        if r.outcome == "ok":
            last_ok[r.key] = r.start_timestamp
        answer = prom.query('{__name__=~"bigbinf_.+"}', time=r.start_timestamp)
        got = {}
        for sample in answer:
            labels = dict(sample["metric"])
            name = labels.pop("__name__")
            assert {k: labels.pop(k) for k in ("protocol", "remote", "dataset", "direction")} == {
                "protocol": r.protocol,
                "remote": r.remote,
                "dataset": r.dataset,
                "direction": r.direction,
            }
            got[(name, tuple(sorted(labels.items())))] = float(sample["value"][1])
        assert got == expected_samples(r, last_ok.get(r.key)), r.start_utc
    # Just before the first result there is nothing.
    assert prom.query('{__name__=~"bigbinf_.+"}', time=results[0].start_timestamp - 1) == []


@pytest.mark.prometheus
@needs_prometheus
def test_report_reads_the_results_back_from_prometheus(backfilled: Any, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("scipy")
    from bigbinf.study import report, tables
    from bigbinf.study.readback import read_prometheus

    prom, results, _, tmp = backfilled
    start, end = results[0].start_timestamp - HOUR, results[-1].start_timestamp + 1
    back = read_prometheus(prom.url, start, end, step=60)
    fields = (
        "protocol",
        "remote",
        "dataset",
        "direction",
        "start_timestamp",
        "outcome",
        "duration_seconds",
        "file_bytes",
        "verified",
        "wire_bytes_down",
        "wire_bytes_up",
        "payload_bytes_down",
        "payload_bytes_up",
        "packets_down",
        "packets_up",
        "retransmits_wire",
        "capture_dropped",
    )
    assert [[getattr(r, f) for f in fields] for r in back] == [[getattr(r, f) for f in fields] for r in results]
    # New results come back as read from Prometheus; the imported one is still known as imported.
    assert [r.source for r in back] == ["prometheus"] * 5 + ["import"]

    # The command, end to end: --from/--to with offsets, tables only.
    p = argparse.ArgumentParser()
    report.register(p.add_subparsers())
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(t))  # noqa: E731
    args = p.parse_args(
        [
            "report",
            "--source",
            "prometheus",
            prom.url,
            "--from",
            iso(start),
            "--to",
            iso(end + 1),
            "--no-figures",
            "--out",
            str(tmp / "report"),
        ]
    )
    assert args.func(args) == 0, capsys.readouterr().err
    data = json.loads((tmp / "report" / "report.json").read_text())
    assert data["used_count"] == 4 and data["skipped_by_category"] == {tables.NOT_OK: 2}
    assert data["source"] == f"prometheus {prom.url}"
    assert [(row["protocol"], row["direction"], row["source"], row["n"]) for row in data["table2"]] == [
        ("hpn-scp", "download", "import", 1),
        ("scp", "download", "exporter", 2),
        ("http", "upload", "exporter", 1),
    ]


@pytest.mark.prometheus
@needs_prometheus
def test_backfilled_history_carries_the_regression_verdicts(tmp_path: Path) -> None:
    """Backfilled history carries the regression test's verdicts, the same as the live
    exporter published after each result: six days of a run every 2 hours, then three
    runs at 70% of the rate.  Prometheus, loaded with the blocks, says regressed 0
    before the drop and 1 at its third run, with the live exporter's numbers."""
    from bigbinf.config import parse_config
    from bigbinf.history.regression import settings_of
    from bigbinf.service.collector import ExporterState
    from bigbinf.service.rounds import RoundRunner

    journal = tmp_path / "journal.jsonl"
    config = parse_config(
        "remotes: {lab: {address: 127.0.0.1, data_dir: /d, key: /k/id}}\n"
        "datasets: {f32m: {file: f.bin, size: 32MiB}}\nprotocols: {http: {}}\n"
        f"journal: {{path: {journal}}}\n",
        "test",
    )
    state = ExporterState()
    live = RoundRunner(config, state)
    start = float(int(time.time() - 7 * 86400) // 7200 * 7200)
    size = 32 * 2**20
    published = []
    for i in range(6 * 12 + 3):
        rate = 25e6 * (1.0 + 0.02 * math.sin(i * 1.7)) * (0.7 if i >= 72 else 1.0)  # no two alike
        r = Result(
            "http", "lab", "f32m", "download", start + i * 7200, "ok", duration_seconds=size / rate, file_bytes=size
        )
        live.publish(r)  # journals it, then tests it as the exporter does
        published.append((r.start_timestamp, state.regressions.get(r.key)))
    assert published[-1][1] is not None and published[-1][1].regressed
    storage = tmp_path / "tsdb"
    assert backfill.write_openmetrics(Journal(journal).read(), tmp_path / "h.om", regression=settings_of(config))
    backfill.create_blocks(tmp_path / "h.om", storage, backfill.find_promtool(None), "24h")
    with PrometheusServer("global:\n  scrape_interval: 15s\n", tmp_path / "prom", storage=storage) as prom:
        checked = 0
        for when, verdict in published:
            answer = {
                s["metric"]["__name__"]: float(s["value"][1])
                for s in prom.query('{__name__=~"bigbinf_throughput_regress.+"}', time=when)
            }
            if verdict is None:  # too young: the exporter published nothing, nor does the history
                assert answer == {}
                continue
            assert answer["bigbinf_throughput_regressed"] == (1.0 if verdict.regressed else 0.0)
            assert answer["bigbinf_throughput_regression_ratio"] == pytest.approx(verdict.test.ratio)
            assert answer["bigbinf_throughput_regression_q_value"] == pytest.approx(verdict.q_value)
            checked += 1
        assert checked >= 30  # tested from the fourth day on
