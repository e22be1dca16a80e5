"""Backfill: OpenMetrics from the journal, promtool blocks, read back by a live Prometheus."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import pytest

from bigbinf import metrics
from bigbinf.journal.store import Journal
from bigbinf.metrics import last_result_samples
from bigbinf.result import Result
from bigbinf.study import backfill
from tests.support.results import LAST, imported_result, make_results


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
    assert sampled == {spec.name for spec in metrics.LAST_RESULT}


def test_openmetrics_text(tmp_path: Path) -> None:
    results = make_results(1_700_000_000.0)
    results.append(
        Result('sc"p', "uwc\\x", "5MiB", "download", 1_700_000_000.9999, "ok", duration_seconds=1.0, file_bytes=10)
    )
    om = tmp_path / "x.om"
    assert backfill.write_openmetrics(results, om) == (6, 3, 0)
    lines = om.read_text().splitlines()
    assert lines[-1] == "# EOF" and lines.count("# EOF") == 1
    types = [line.split()[2:] for line in lines if line.startswith("# TYPE")]
    assert types == [
        [spec.name, "gauge"] for spec in sorted(metrics.LAST_RESULT, key=lambda s: s.name == backfill.LAST_SUCCESS)
    ] + [[spec.name, "gauge"] for spec in metrics.REGRESSION]
    assert (
        'bigbinf_last_transfer_duration_seconds{protocol="scp",remote="uwc",dataset="5MiB",'
        'direction="download"} 2.5 1700000000.123'
    ) in lines
    assert (
        'bigbinf_last_transfer_file_bytes{protocol="sc\\"p",remote="uwc\\\\x",dataset="5MiB",'
        'direction="download"} 10 1700000000.999'
    ) in lines  # escaped; time rounded down to the ms
    # Each series' samples are contiguous and in time order.
    seen: list[str] = []
    for line in lines:
        if not line.startswith("#"):
            series = line.rsplit(" ", 2)[0]  # name{labels} without value and timestamp
            if not seen or seen[-1] != series:
                assert series not in seen, f"{series} is interleaved"
                seen.append(series)
    starts = [
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith(LAST + 'start_timestamp_seconds{protocol="scp"')
    ]
    assert starts == sorted(starts) and len(starts) == 3


def test_target_labels_make_history_one_series_with_live_data(tmp_path: Path) -> None:
    om = tmp_path / "x.om"
    backfill.write_openmetrics(make_results(1_700_000_000.0), om, [("job", "bigbinf"), ("instance", "127.0.0.1:9753")])
    samples = [line for line in om.read_text().splitlines() if not line.startswith("#")]
    assert samples and all(
        line.split("{", 1)[1].startswith('job="bigbinf",instance="127.0.0.1:9753",protocol=') for line in samples
    )


def test_last_success_carries_over_failures(tmp_path: Path) -> None:
    om = tmp_path / "x.om"
    backfill.write_openmetrics(make_results(1_700_000_000.0), om)
    values = [
        line.split()[-2]
        for line in om.read_text().splitlines()
        if line.startswith('bigbinf_last_success_timestamp_seconds{protocol="scp"')
    ]
    assert values == ["1700000000.1234567"] * 2 + ["1700002400.1234567"]
    # the http series failed last but succeeded before; before its first success it has none
    assert (
        sum(
            1
            for line in om.read_text().splitlines()
            if line.startswith('bigbinf_last_success_timestamp_seconds{protocol="http"')
        )
        == 2
    )


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
    durations = [
        line for line in om.read_text().splitlines() if line.startswith("bigbinf_last_transfer_duration_seconds{")
    ]
    assert [line.split()[1] for line in durations] == ["0.6"]  # the later journal line


def test_last_success_is_per_origin(tmp_path: Path) -> None:
    # An exporter failure after an imported success of the same series names no last
    # success of its own: the import's does not stand in for it.
    imported = dataclasses.replace(imported_result(1_700_000_000.0), protocol="scp", remote="lab", dataset="f5m")
    failed = Result("scp", "lab", "f5m", "download", 1_700_000_100.0, "failed", error="x")
    om = tmp_path / "x.om"
    backfill.write_openmetrics([imported, failed], om)
    successes = [
        line for line in om.read_text().splitlines() if line.startswith("bigbinf_last_success_timestamp_seconds{")
    ]
    assert len(successes) == 1 and 'origin="import"' in successes[0], successes


def fake_promtool(tmp_path: Path, script: str = "exit 0") -> Path:
    fake = tmp_path / "promtool"
    fake.write_text(f"#!/bin/sh\n{script}\n")
    fake.chmod(0o755)
    return fake


def test_unreadable_lines_are_reported_once_and_the_rest_is_backfilled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    journal = tmp_path / "j.jsonl"
    first, second = make_results(1_700_000_000.0)[:2]
    Journal(journal).append(first)
    with open(journal, "a") as f:
        f.write(json.dumps({**first.to_json(), "start_timestamp": "2024-03-01"}) + "\n")  # line 2
        f.write("{not json\n")  # line 3
    Journal(journal).append(second)
    om = tmp_path / "kept.om"
    assert (
        run(
            [
                "backfill",
                "--journal",
                str(journal),
                "--out",
                str(tmp_path / "b"),
                "--openmetrics",
                str(om),
                "--promtool",
                str(fake_promtool(tmp_path)),
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    line2 = f"{journal}:2: skipped: field start_timestamp: expected a finite number, got str '2024-03-01'"
    assert err.count(line2) == 1 and err.count(f"{journal}:3: skipped: ") == 1
    assert [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()] == []  # not logged as well
    assert "2 results of 1 series, 2 unreadable journal lines skipped" in err
    starts = [
        line.rsplit(" ", 2)[1]
        for line in om.read_text().splitlines()
        if line.startswith(LAST + "start_timestamp_seconds{")
    ]
    assert starts == [repr(first.start_timestamp), repr(second.start_timestamp)]


def test_output_errors_name_the_option_to_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.jsonl"
    Journal(journal).append(make_results(1_700_000_000.0)[0])
    promtool = str(fake_promtool(tmp_path))
    a_file = tmp_path / "file"
    a_file.write_text("")
    assert run(["backfill", "--journal", str(journal), "--out", str(a_file / "blocks"), "--promtool", promtool]) == 1
    assert capsys.readouterr().err == (
        f"bigbinf-exporter backfill: error: --out {a_file / 'blocks'}: cannot create "
        "(Not a directory); choose a directory you can write\n"
    )
    assert (
        run(
            [
                "backfill",
                "--journal",
                str(journal),
                "--out",
                str(tmp_path / "b"),
                "--openmetrics",
                str(tmp_path),
                "--promtool",
                promtool,
            ]
        )
        == 1
    )
    assert capsys.readouterr().err == (
        f"bigbinf-exporter backfill: error: --openmetrics {tmp_path}: cannot write "
        "(Is a directory); choose a writable path\n"
    )


def test_shared_flags_work_after_backfill(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bigbinf import cli

    journal = tmp_path / "j.jsonl"
    Journal(journal).append(make_results(1_700_000_000.0)[0])
    argv = [
        "backfill",
        "--journal",
        str(journal),
        "--out",
        str(tmp_path / "b"),
        "--promtool",
        str(fake_promtool(tmp_path)),
        "--log.level",
        "error",
    ]
    assert cli.build_parser().parse_args(argv).log_level == "error"
    assert cli.main(argv) == 0
    assert "backfill: 1 results of 1 series" in capsys.readouterr().err


def test_missing_promtool_and_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.jsonl"
    Journal(journal).append(make_results(1_700_000_000.0)[0])
    assert (
        run(
            [
                "backfill",
                "--journal",
                str(journal),
                "--out",
                str(tmp_path / "b"),
                "--promtool",
                str(tmp_path / "no-promtool"),
            ]
        )
        == 1
    )
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
