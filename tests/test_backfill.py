"""Backfill: OpenMetrics from the journal, promtool blocks, read back by a live Prometheus."""

from __future__ import annotations

import dataclasses

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from exporter import backfill, metric_names
from exporter.collector import last_result_samples
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
               rtt_seconds=0.0125, reported={"bytes": 2.0**30, "seconds": 40.0, "retransmits": 40.0}),
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
    if "retransmits" in r.reported:  # iperf3's own count, beside the kernel's
        samples[(LAST + "retransmits_sender", (("source", "iperf3"),))] = r.reported["retransmits"]
    if r.reported:
        samples[(LAST + "reported_throughput_bytes_per_second", ())] = r.reported["bytes"] / r.reported["seconds"]
    if last_ok is not None:
        samples[("bigbinf_last_success_timestamp_seconds", ())] = last_ok
    if r.source == "import":  # imported 2015 results are labelled, so a report keeps them apart
        samples = {(name, tuple(sorted((*labels, ("origin", "import"))))): v for (name, labels), v in samples.items()}
    return samples


def imported_result(start: float) -> Result:
    """A 2015 dump as `import` stores it."""
    return Result("hpn-scp", "sanbi-vm.uwc.ac.za", "5MiB.dat", "download", start, "ok", duration_seconds=0.5,
                  file_bytes=5242880, files=1, wire_bytes_down=5243000, wire_bytes_up=52, round_id="b3f1c2",
                  remote_address="SANBI-VM.uwc.ac.za", client_address="137.158.0.9", source="import")


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
    assert backfill.write_openmetrics(results, om) == (6, 3, 0)
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


def test_imported_results_are_labelled_by_origin(tmp_path: Path) -> None:
    om = tmp_path / "x.om"
    results = make_results(1_700_000_000.0)
    backfill.write_openmetrics([*results, imported_result(1_700_010_000.0)], om)
    samples = [line for line in om.read_text().splitlines() if not line.startswith("#")]
    labelled = [line for line in samples if 'origin="import"' in line]
    assert labelled and all('protocol="hpn-scp"' in line for line in labelled)
    assert [line for line in samples if 'protocol="hpn-scp"' in line] == labelled
    # every gauge an imported result sets, with the label; and the label is the last one
    assert len(labelled) == sum(1 for _ in last_result_samples(imported_result(0.0))) + 1  # + last success
    assert all(line.split("}", 1)[0].endswith('origin="import"') for line in labelled)


def test_results_of_one_series_and_millisecond_are_counted_when_left_out(tmp_path: Path) -> None:
    # Two 2015 clients' dumps of the same transfer second: the importer keeps both, but a
    # series has one sample per time, so the backfill says it kept one.
    first = imported_result(1_700_010_000.0)
    second = dataclasses.replace(first, client_address="137.158.0.10", duration_seconds=0.6)
    om = tmp_path / "x.om"
    assert backfill.write_openmetrics([first, second], om) == (1, 1, 1)
    durations = [line for line in om.read_text().splitlines()
                 if line.startswith("bigbinf_last_transfer_duration_seconds{")]
    assert [line.split()[1] for line in durations] == ["0.6"]  # the later journal line


def test_last_success_is_per_origin(tmp_path: Path) -> None:
    # An exporter failure after an imported success of the same series names no last
    # success of its own: the import's does not stand in for it.
    imported = dataclasses.replace(imported_result(1_700_000_000.0), protocol="scp", remote="lab", dataset="f5m")
    failed = Result("scp", "lab", "f5m", "download", 1_700_000_100.0, "failed", error="x")
    om = tmp_path / "x.om"
    backfill.write_openmetrics([imported, failed], om)
    successes = [line for line in om.read_text().splitlines()
                 if line.startswith("bigbinf_last_success_timestamp_seconds{")]
    assert len(successes) == 1 and 'origin="import"' in successes[0], successes


def fake_promtool(tmp_path: Path, script: str = "exit 0") -> Path:
    fake = tmp_path / "promtool"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    return fake


def test_unreadable_lines_are_reported_once_and_the_rest_is_backfilled(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    journal = tmp_path / "j.jsonl"
    first, second = make_results(1_700_000_000.0)[:2]
    Journal(journal).append(first)
    with open(journal, "a") as f:
        f.write(json.dumps({**first.to_json(), "start_timestamp": "2024-03-01"}) + "\n")  # line 2
        f.write("{not json\n")  # line 3
    Journal(journal).append(second)
    om = tmp_path / "kept.om"
    assert run(["backfill", "--journal", str(journal), "--out", str(tmp_path / "b"), "--openmetrics", str(om),
                "--promtool", str(fake_promtool(tmp_path))]) == 0
    err = capsys.readouterr().err
    line2 = f"{journal}:2: skipped: field start_timestamp: expected a finite number, got str '2024-03-01'"
    assert err.count(line2) == 1 and err.count(f"{journal}:3: skipped: ") == 1
    assert [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()] == []  # not logged as well
    assert "2 results of 1 series, 2 unreadable journal lines skipped" in err
    starts = [line.rsplit(" ", 2)[1] for line in om.read_text().splitlines()
              if line.startswith(LAST + "start_timestamp_seconds{")]
    assert starts == [repr(first.start_timestamp), repr(second.start_timestamp)]


def test_output_errors_name_the_option_to_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.jsonl"
    Journal(journal).append(make_results(1_700_000_000.0)[0])
    promtool = str(fake_promtool(tmp_path))
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert run(["backfill", "--journal", str(journal), "--out", str(a_file / "blocks"), "--promtool", promtool]) == 1
    assert capsys.readouterr().err == (f"bigbinf-exporter backfill: error: --out {a_file / 'blocks'}: cannot create "
                                       "(Not a directory); choose a directory you can write\n")
    assert run(["backfill", "--journal", str(journal), "--out", str(tmp_path / "b"), "--openmetrics", str(tmp_path),
                "--promtool", promtool]) == 1
    assert capsys.readouterr().err == (f"bigbinf-exporter backfill: error: --openmetrics {tmp_path}: cannot write "
                                       "(Is a directory); choose a writable path\n")


def test_shared_flags_work_after_backfill(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from exporter import cli

    journal = tmp_path / "j.jsonl"
    Journal(journal).append(make_results(1_700_000_000.0)[0])
    argv = ["backfill", "--journal", str(journal), "--out", str(tmp_path / "b"),
            "--promtool", str(fake_promtool(tmp_path)), "--log.level", "error"]
    assert cli.build_parser().parse_args(argv).log_level == "error"
    assert cli.main(argv) == 0
    assert "backfill: 1 results of 1 series" in capsys.readouterr().err


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
    results = make_results(base) + [imported_result(base + 5 * 1200)]
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
    # New results come back as read from Prometheus; the imported one is still known as imported.
    assert [r.source for r in back] == ["prometheus"] * 5 + ["import"]

    # The command, end to end: --from/--to with offsets, tables only.
    p = argparse.ArgumentParser()
    report.register(p.add_subparsers())
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(t))  # noqa: E731
    args = p.parse_args(["report", "--source", "prometheus", prom.url, "--from", iso(start), "--to", iso(end + 1),
                         "--no-figures", "--out", str(tmp / "report")])
    assert args.func(args) == 0, capsys.readouterr().err
    data = json.loads((tmp / "report" / "report.json").read_text())
    assert data["used_count"] == 4 and data["skipped_by_category"] == {report.NOT_OK: 2}
    assert data["source"] == f"prometheus {prom.url}"
    assert [(row["protocol"], row["direction"], row["source"], row["n"]) for row in data["table2"]] == [
        ("hpn-scp", "download", "import", 1), ("scp", "download", "exporter", 2), ("http", "upload", "exporter", 1)]
