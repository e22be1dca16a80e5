"""Backfill: OpenMetrics from the journal, promtool blocks, read back by a live Prometheus."""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from exporter import backfill, metric_names
from exporter.journal import Journal
from exporter.result import Result
from tests.support.prometheus import PROMETHEUS, PrometheusServer

HOUR = 3600.0
LAST = "bigbinf_last_transfer_"


def make_results(base: float) -> list[Result]:
    """Two series, an ok/failed/ok history and odd sub-millisecond start times.  Results
    are 20 min apart, more than the 5 min lookback, so an instant query at a result's
    start time sees only that result's samples."""
    def scp(i: int, **kw: Any) -> Result:
        return Result("scp", "uwc", "5MiB", "download", base + i * 1200 + 0.1234567, kw.pop("outcome", "ok"), **kw)

    return [
        scp(0, duration_seconds=2.5, file_bytes=5242880, files=1, verified=True, wire_bytes_down=5500000,
            wire_bytes_up=120000, payload_bytes_down=5243000, payload_bytes_up=300, packets_down=3700,
            packets_up=1850, retransmits_wire=4, capture_dropped=0, transport="tcp", data_flows=1),
        scp(1, outcome="failed", error="exit 1", duration_seconds=0.75, file_bytes=5242880, wire_bytes_down=900,
            wire_bytes_up=400, packets_down=3, packets_up=4),
        scp(2, duration_seconds=2.0, file_bytes=5242880, verified=True, wire_bytes_down=5400000, wire_bytes_up=110000,
            payload_bytes_down=5242880, payload_bytes_up=0, packets_down=3650, packets_up=1800, retransmits_wire=0,
            capture_dropped=7),
        Result("http", "uct", "1GiB", "upload", base + 3 * 1200 + 0.5, "ok", duration_seconds=47.125,
               file_bytes=2**30, verified=False, wire_bytes_down=2_000_000, wire_bytes_up=1_100_000_000,
               payload_bytes_down=10, payload_bytes_up=2**30, packets_down=300_000, packets_up=700_000,
               transport="udp", data_flows=2, retransmits_sender=42, retransmits_sender_source="kernel",
               rtt_seconds=0.0125),
        Result("http", "uct", "1GiB", "upload", base + 4 * 1200, "timeout", error="killed after 600 s",
               duration_seconds=600.0, file_bytes=2**30),
    ]


def expected_samples(r: Result, last_ok: float | None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What the live exporter would publish for result r, written out by hand."""
    ok = r.outcome == "ok"
    plain: dict[str, float] = {
        "start_timestamp_seconds": r.start_timestamp, "success": 1.0 if ok else 0.0,
        "duration_seconds": r.duration_seconds,
        "throughput_bytes_per_second": r.file_bytes / r.duration_seconds if ok else 0.0,
        "file_bytes": r.file_bytes, "byte_ratio": (r.wire_bytes_down + r.wire_bytes_up) / r.file_bytes,
        "retransmits_wire": r.retransmits_wire, "verified": 1.0 if r.verified else 0.0,
        "capture_dropped_packets": r.capture_dropped, "data_flows": r.data_flows,
    }
    if r.rtt_seconds is not None:
        plain["rtt_seconds"] = r.rtt_seconds
    samples = {(LAST + name, ()): float(v) for name, v in plain.items()}
    for outcome in ("ok", "failed", "timeout", "skipped"):
        samples[(LAST + "outcome", (("outcome", outcome),))] = 1.0 if r.outcome == outcome else 0.0
    for name, down, up in (("wire_bytes", r.wire_bytes_down, r.wire_bytes_up),
                           ("payload_bytes", r.payload_bytes_down, r.payload_bytes_up),
                           ("packets", r.packets_down, r.packets_up)):
        samples[(LAST + name, (("way", "down"),))] = float(down)
        samples[(LAST + name, (("way", "up"),))] = float(up)
    if r.transport:
        samples[(LAST + "transport", (("transport", r.transport),))] = 1.0
    if r.retransmits_sender is not None:
        samples[(LAST + "retransmits_sender", (("source", r.retransmits_sender_source),))] = float(r.retransmits_sender)
    if last_ok is not None:
        samples[("bigbinf_last_success_timestamp_seconds", ())] = last_ok
    return samples


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bigbinf-exporter")
    backfill.register(p.add_subparsers())
    return p


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


# ---------------------------------------------------------------------------------------
# OpenMetrics text


def test_every_last_result_gauge_is_backfilled(tmp_path: Path) -> None:
    om = tmp_path / "x.om"
    backfill.write_openmetrics(make_results(1_700_000_000.0), om)
    sampled = {line.split("{", 1)[0] for line in om.read_text().splitlines() if not line.startswith("#")}
    assert sampled == {spec.name for spec in metric_names.LAST_RESULT}


def test_openmetrics_text(tmp_path: Path) -> None:
    results = make_results(1_700_000_000.0)
    results.append(Result('sc"p', "uwc\\x", "5MiB", "download", 1_700_000_000.9999, "ok", duration_seconds=1.0,
                          file_bytes=10))
    om = tmp_path / "x.om"
    assert backfill.write_openmetrics(results, om) == (6, 3)
    lines = om.read_text().splitlines()
    assert lines[-1] == "# EOF" and lines.count("# EOF") == 1
    types = [line.split()[2:] for line in lines if line.startswith("# TYPE")]
    assert types == [[spec.name, "gauge"] for spec in sorted(
        metric_names.LAST_RESULT, key=lambda s: s.name == backfill.LAST_SUCCESS)]
    assert ('bigbinf_last_transfer_duration_seconds{protocol="scp",remote="uwc",dataset="5MiB",'
            'direction="download"} 2.5 1700000000.123') in lines
    assert ('bigbinf_last_transfer_file_bytes{protocol="sc\\"p",remote="uwc\\\\x",dataset="5MiB",'
            'direction="download"} 10 1700000000.999') in lines  # escaped; time rounded down to the ms
    # Each series' samples are contiguous and in time order.
    seen: list[str] = []
    for line in lines:
        if not line.startswith("#"):
            series = line.rsplit(" ", 2)[0]  # name{labels} without value and timestamp
            if not seen or seen[-1] != series:
                assert series not in seen, f"{series} is interleaved"
                seen.append(series)
    starts = [float(line.rsplit(" ", 1)[1]) for line in lines
              if line.startswith(LAST + 'start_timestamp_seconds{protocol="scp"')]
    assert starts == sorted(starts) and len(starts) == 3


def test_target_labels_make_history_one_series_with_live_data(tmp_path: Path) -> None:
    om = tmp_path / "x.om"
    backfill.write_openmetrics(make_results(1_700_000_000.0), om, [("job", "bigbinf"), ("instance", "127.0.0.1:9753")])
    samples = [line for line in om.read_text().splitlines() if not line.startswith("#")]
    assert samples and all(line.split("{", 1)[1].startswith('job="bigbinf",instance="127.0.0.1:9753",protocol=')
                           for line in samples)


def test_last_success_carries_over_failures(tmp_path: Path) -> None:
    om = tmp_path / "x.om"
    backfill.write_openmetrics(make_results(1_700_000_000.0), om)
    values = [line.split()[-2] for line in om.read_text().splitlines()
              if line.startswith('bigbinf_last_success_timestamp_seconds{protocol="scp"')]
    assert values == ["1700000000.1234567"] * 2 + ["1700002400.1234567"]
    # the http series failed last but succeeded before; before its first success it has none
    assert sum(1 for line in om.read_text().splitlines()
               if line.startswith('bigbinf_last_success_timestamp_seconds{protocol="http"')) == 2


# ---------------------------------------------------------------------------------------
# The command's errors


def test_missing_promtool_and_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.jsonl"
    Journal(journal).append(make_results(1_700_000_000.0)[0])
    assert run(["backfill", "--journal", str(journal), "--out", str(tmp_path / "b"),
                "--promtool", str(tmp_path / "no-promtool")]) == 1
    err = capsys.readouterr().err
    assert "no-promtool not found" in err and "--promtool PATH" in err and err.count("\n") == 1
    assert run(["backfill", "--journal", str(tmp_path / "none.jsonl"), "--out", str(tmp_path / "b")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert run(["backfill", "--journal", str(journal), "--out", str(tmp_path / "b"), "--from", "2099-01-01"]) == 1
    assert "no results to backfill in --from/--to" in capsys.readouterr().err
    assert run(["backfill", "--journal", str(journal), "--out", str(tmp_path / "b"), "--to", "01/02/2024"]) == 2
    assert "--to '01/02/2024': not a date" in capsys.readouterr().err


def test_promtool_failure_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "promtool"
    fake.write_text("#!/bin/sh\necho 'parse error: bad sample' >&2\nexit 3\n")
    fake.chmod(0o755)
    journal = tmp_path / "j.jsonl"
    Journal(journal).append(make_results(1_700_000_000.0)[0])
    assert run(["backfill", "--journal", str(journal), "--out", str(tmp_path / "b"), "--promtool", str(fake)]) == 1
    err = capsys.readouterr().err
    assert "promtool failed (exit 3)" in err and "parse error: bad sample" in err and err.count("\n") == 1


# ---------------------------------------------------------------------------------------
# A live Prometheus loads the blocks


needs_prometheus = pytest.mark.skipif(not (shutil.which("promtool") and Path(PROMETHEUS).exists()),
                                      reason="needs prometheus and promtool")


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("backfill")
    # A few hours back: inside the default 15 d retention, and older than the head block
    # Prometheus will start (blocks are loaded at startup: out-of-order ingestion is off).
    base = float(int(time.time() - 6 * HOUR))
    results = make_results(base)
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
                "protocol": r.protocol, "remote": r.remote, "dataset": r.dataset, "direction": r.direction}
            got[(name, tuple(sorted(labels.items())))] = float(sample["value"][1])
        assert got == expected_samples(r, last_ok.get(r.key)), r.start_utc
    # Just before the first result there is nothing.
    assert prom.query('{__name__=~"bigbinf_.+"}', time=results[0].start_timestamp - 1) == []


@pytest.mark.prometheus
@needs_prometheus
def test_report_reads_the_results_back_from_prometheus(backfilled: Any, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("scipy")
    from exporter import report

    prom, results, _, tmp = backfilled
    start, end = results[0].start_timestamp - HOUR, results[-1].start_timestamp + 1
    back = report.read_prometheus(prom.url, start, end, step=60)
    fields = ("protocol", "remote", "dataset", "direction", "start_timestamp", "outcome", "duration_seconds",
              "file_bytes", "verified", "wire_bytes_down", "wire_bytes_up", "payload_bytes_down", "payload_bytes_up",
              "packets_down", "packets_up", "retransmits_wire", "capture_dropped")
    assert [[getattr(r, f) for f in fields] for r in back] == [[getattr(r, f) for f in fields] for r in results]
    assert {r.source for r in back} == {"prometheus"}

    # The command, end to end: --from/--to with offsets, tables only.
    p = argparse.ArgumentParser()
    report.register(p.add_subparsers())
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(t))  # noqa: E731
    args = p.parse_args(["report", "--source", "prometheus", prom.url, "--from", iso(start), "--to", iso(end + 1),
                         "--no-figures", "--out", str(tmp / "report")])
    assert args.func(args) == 0, capsys.readouterr().err
    data = json.loads((tmp / "report" / "report.json").read_text())
    assert data["used_count"] == 3 and data["skipped_by_category"] == {report.NOT_OK: 2}
    assert data["source"] == f"prometheus {prom.url}"
    assert [(row["protocol"], row["direction"], row["n"]) for row in data["table2"]] == [
        ("scp", "download", 2), ("http", "upload", 1)]
