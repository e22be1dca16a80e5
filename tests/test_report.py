"""The report: Table 1 and 2 numbers, figures, outputs and the command's handler."""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import io
import json
import math
import struct
import sys
import types
import zlib
from pathlib import Path

import pytest

pytest.importorskip("scipy")
pytest.importorskip("matplotlib")

from exporter import report  # noqa: E402
from exporter.importer import Packet, write_packets  # noqa: E402
from exporter.journal import Journal  # noqa: E402
from exporter.report import Table2Row, build_report, is_peak, parse_peak, parse_tz_offset, parse_when  # noqa: E402
from exporter.result import Result  # noqa: E402

UTC = dt.timezone.utc
MIB = 2**20


MAC_CLIENT, MAC_REMOTE = "02:00:00:00:00:01", "02:00:00:00:00:02"


def at(day: int, hour: int, minute: int = 0) -> float:
    """UTC epoch of 2024-03-<day> hour:minute."""
    return dt.datetime(2024, 3, day, hour, minute, tzinfo=UTC).timestamp()


def ok(protocol: str, start: float, duration: float, file_bytes: int, down: int = 0, up: int = 0,
       dataset: str = "d", **kw: object) -> Result:
    return Result(protocol, "uwc", dataset, "download", start, "ok", duration_seconds=duration,
                  file_bytes=file_bytes, wire_bytes_down=down, wire_bytes_up=up, **kw)


# ---------------------------------------------------------------------------------------
# Independent Welch's t-test (no scipy): textbook formulas and a numerically integrated
# t-distribution, so the report's p-value is checked against something it does not use.


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _var(xs: list[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def t_pdf(x: float, df: float) -> float:
    c = math.gamma((df + 1) / 2) / (math.sqrt(df * math.pi) * math.gamma(df / 2))
    return c * (1 + x * x / df) ** (-(df + 1) / 2)


def two_sided_p(t: float, df: float, intervals: int = 20_000) -> float:
    """1 - 2 * integral_0^|t| of the t density (Simpson's rule)."""
    a, b = 0.0, abs(t)
    h = (b - a) / intervals
    total = t_pdf(a, df) + t_pdf(b, df)
    total += sum((4 if i % 2 else 2) * t_pdf(a + i * h, df) for i in range(1, intervals))
    return 1.0 - 2.0 * total * h / 3.0


def welch_by_hand(a: list[float], b: list[float]) -> tuple[float, float, float]:
    va, vb = _var(a) / len(a), _var(b) / len(b)
    t = (_mean(a) - _mean(b)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return t, df, two_sided_p(t, df)


def test_independent_p_value_matches_textbook_tables() -> None:
    # Student's t tables: two-sided 5% critical values t(10) = 2.228, t(30) = 2.042, 1% t(5) = 4.032.
    assert two_sided_p(2.228138852, 10) == pytest.approx(0.05, abs=1e-8)
    assert two_sided_p(2.042272456, 30) == pytest.approx(0.05, abs=1e-8)
    assert two_sided_p(4.032142984, 5) == pytest.approx(0.01, abs=1e-8)


# ---------------------------------------------------------------------------------------
# Table 1


PEAK_SPEEDS = [18.0e6, 19.5e6, 17.2e6, 20.1e6, 18.8e6]
OFFPEAK_SPEEDS = [21.0e6, 22.4e6, 20.6e6, 23.9e6, 21.7e6, 22.2e6, 19.9e6]


def table1_results(tz_offset: float) -> list[Result]:
    """scp transfers of 100 MiB at the given speeds: peak ones at 11:30-14:59 local time,
    off-peak ones at 03:00 and 15:00 local (15:00 is already off-peak: the end is exclusive)."""
    size = 100 * MIB
    results = []
    for i, speed in enumerate(PEAK_SPEEDS):
        local = [(11, 30), (12, 0), (13, 15), (14, 0), (14, 59)][i]
        start = at(10 + i, *local) - tz_offset * 3600
        results.append(ok("scp", start, size / speed, size, down=size, up=1000))
    for i, speed in enumerate(OFFPEAK_SPEEDS):
        local = (15, 0) if i == 0 else (3, 0)
        start = at(10 + i, *local) - tz_offset * 3600
        results.append(ok("scp", start, size / speed, size, down=size, up=1000))
    return results


@pytest.mark.parametrize("tz_offset", [0.0, 2.0, -5.5])
def test_table1_welch_p_value_equals_independent_computation(tz_offset: float) -> None:
    rep = build_report(table1_results(tz_offset), peak_hours=(11, 15), tz_offset_hours=tz_offset)
    (row,) = rep.table1
    assert (row.protocol, row.n_peak, row.n_offpeak) == ("scp", len(PEAK_SPEEDS), len(OFFPEAK_SPEEDS))
    assert row.mean_peak == pytest.approx(_mean(PEAK_SPEEDS), rel=1e-12)
    assert row.mean_offpeak == pytest.approx(_mean(OFFPEAK_SPEEDS), rel=1e-12)
    t, df, p = welch_by_hand(PEAK_SPEEDS, OFFPEAK_SPEEDS)
    assert row.t_statistic == pytest.approx(t, rel=1e-9)
    assert row.df == pytest.approx(df, rel=1e-9)
    assert row.p_value == pytest.approx(p, abs=1e-9)
    assert 0.0 < row.p_value < 0.01  # peak really is slower in this data
    assert row.shapiro_p_peak is not None and 0.0 < row.shapiro_p_peak <= 1.0
    assert row.shapiro_p_offpeak is not None and 0.0 < row.shapiro_p_offpeak <= 1.0
    assert row.normal in ("yes", "no")


def test_table1_small_groups_are_not_tested() -> None:
    size = 10 * MIB
    results = [ok("ftp", at(1, 12), 1.0, size), ok("ftp", at(1, 3), 2.0, size), ok("ftp", at(2, 3), 3.0, size)]
    (row,) = build_report(results).table1
    assert (row.n_peak, row.n_offpeak) == (1, 2)
    assert row.p_value is None and row.t_statistic is None and "at least 2" in row.note
    assert row.shapiro_p_peak is None and row.normal == "n/a"


def test_peak_hours_and_offsets() -> None:
    assert is_peak(at(1, 11), (11, 15), 0) and not is_peak(at(1, 15), (11, 15), 0)
    assert is_peak(at(1, 9), (11, 15), 2)  # 11:00 in South Africa
    assert is_peak(at(1, 23), (22, 6), 0) and is_peak(at(1, 5), (22, 6), 0) and not is_peak(at(1, 12), (22, 6), 0)
    assert parse_peak("11-15") == (11, 15)
    assert parse_tz_offset("+2") == 2 and parse_tz_offset("-5:30") == -5.5 and parse_tz_offset("5.5") == 5.5
    assert parse_when("2024-03-10", 2, "--from") == at(9, 22)
    assert parse_when("2024-03-10", 0, "--to", end_of_day=True) == at(11, 0)
    assert parse_when("2024-03-10T12:00:00Z", 2, "--from") == at(10, 12)
    for bad in ("11", "15-11-3", "25-3", "5-5"):
        with pytest.raises(report.UsageError, match="--peak"):
            parse_peak(bad)


# ---------------------------------------------------------------------------------------
# Table 2


def test_table2_exact_means_per_size_and_protocol() -> None:
    results = [
        # scp, 1 KiB: two transfers; every mean is exact in binary floating point.
        ok("scp", at(1, 3), 2.0, 1024, down=1200, up=80),  # total 1280: ratio 1.25, speed 512
        ok("scp", at(2, 3), 4.0, 1024, down=1500, up=36),  # total 1536: ratio 1.5, speed 256
        # ftp, 1 KiB: one transfer.
        ok("ftp", at(1, 4), 0.5, 1024, down=1000, up=24),  # total 1024: ratio 1.0, speed 2048
        # scp, 4 KiB
        ok("scp", at(1, 5), 8.0, 4096, down=4000, up=96),  # total 4096: ratio 1.0, speed 512
        ok("scp", at(2, 5), 8.0, 4096, down=4096, up=1024),  # total 5120: ratio 1.25, speed 512
        # Not used: a failure, and an ok one outside the range.
        Result("scp", "uwc", "d", "download", at(1, 6), "failed", error="connection refused"),
        ok("scp", at(20, 3), 1.0, 1024, down=1, up=1),
    ]
    rep = build_report(results, start=at(1, 0), end=at(10, 0))
    assert rep.table2 == [
        Table2Row(1024, "ftp", "download", 1, 1000.0, 24.0, 1024.0, 1.0, 100.0, 0.5, 2048.0),
        Table2Row(1024, "scp", "download", 2, 1350.0, 58.0, 1408.0, 1.375, 137.5, 3.0, 384.0),
        Table2Row(4096, "scp", "download", 2, 4048.0, 560.0, 4608.0, 1.125, 112.5, 8.0, 512.0),
    ]
    assert len(rep.used) == 5
    assert rep.skipped_counts() == {report.OUT_OF_RANGE: 1, report.NOT_OK: 1}
    assert "outcome failed: connection refused" in [s.reason for s in rep.skipped]


def test_uploads_are_separate_rows() -> None:
    up = Result("scp", "uwc", "d", "upload", at(1, 3), "ok", duration_seconds=1.0, file_bytes=1024,
                wire_bytes_down=10, wire_bytes_up=1100)
    rep = build_report([ok("scp", at(1, 3), 1.0, 1024, down=1100, up=10), up])
    assert [(r.protocol, r.direction) for r in rep.table2] == [("scp", "download"), ("scp", "upload")]
    assert [r.label for r in rep.table1] == ["scp", "scp (upload)"]
    only = build_report([ok("scp", at(1, 3), 1.0, 1024), up], directions=["upload"])
    assert [r.direction for r in only.table2] == ["upload"] and only.skipped[0].category == report.FILTERED


# ---------------------------------------------------------------------------------------
# Figures: valid PNGs with the right number of panels


def png_chunks(path: Path) -> list[tuple[bytes, bytes]]:
    """Parse a PNG by the specification, checking every CRC; returns (type, data) chunks."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name}: not a PNG signature"
    chunks, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"{path.name}: bad CRC in {kind!r}"
        chunks.append((kind, body))
        pos += 12 + length
    return chunks


def check_png(path: Path) -> int:
    """Validate structure and pixel data; return the figure's panel count (tEXt 'Panels')."""
    chunks = png_chunks(path)
    assert chunks[0][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    width, height, depth, colour = struct.unpack(">IIBB", chunks[0][1][:10])
    assert width > 100 and height > 100 and depth == 8
    channels = {2: 3, 6: 4}[colour]
    pixels = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    assert len(pixels) == height * (1 + width * channels)  # every row present, nothing extra
    rows = [pixels[r * (1 + width * channels) + 1:(r + 1) * (1 + width * channels)] for r in (0, height // 2)]
    assert len(set(pixels)) > 2 and any(rows)  # something was drawn, not one flat colour
    text = dict(body.split(b"\0", 1) for kind, body in chunks if kind == b"tEXt")
    return int(text[b"Panels"])


def figure_results(tmp_path: Path) -> list[Result]:
    """3 protocols x 2 sizes, peak and off-peak; per-packet data for ftp and scp at 5 MiB
    and for scp at 512 MiB, so Fig 5 shows the 5 MiB transfers of 2 protocols."""
    results = []
    for p, protocol in enumerate(("ftp", "gridftp", "scp")):
        for s, size in enumerate((5 * MIB, 512 * MIB)):
            for i, hour in enumerate((3, 12, 13, 2)):
                duration = size / (20e6 + 1e6 * p + 1e5 * i)
                packets_path = ""
                if i == 0 and (size == 5 * MIB and protocol != "gridftp" or size == 512 * MIB and protocol == "scp"):
                    sidecar = tmp_path / "packets" / f"{protocol}-{s}.jsonl"
                    write_packets(sidecar, [Packet("down" if k % 5 else "up", k * 0.01, 1448 if k % 5 else 0)
                                            for k in range(300)])
                    packets_path = str(sidecar)
                results.append(ok(protocol, at(1 + i, hour), duration, size, down=int(size * 1.02),
                                  up=int(size * 0.01), packets_path=packets_path))
    return results


def test_every_figure_is_a_valid_png_with_its_panels(tmp_path: Path) -> None:
    rep = build_report(figure_results(tmp_path))
    out = tmp_path / "out"
    report.write_report(rep, out, progress_stream=io.StringIO())
    panels = {f.name: check_png(f.file) for f in rep.figures}
    assert panels == {"fig4": 1, "fig5": 2, "fig6": 1, "fig7": 2, "fig8": 2}
    assert {f.file.name for f in rep.figures} == {"fig4.png", "fig5.png", "fig6.png", "fig7.png", "fig8.png"}
    assert "5 MiB" in next(f for f in rep.figures if f.name == "fig5").caption
    page = (out / "index.html").read_text()
    for name in ("fig4.png", "fig5.png", "fig6.png", "fig7.png", "fig8.png", "Table 1", "Table 2"):
        assert name in page


def test_figures_without_data_are_still_written(tmp_path: Path) -> None:
    rep = build_report([Result("scp", "uwc", "d", "download", at(1, 3), "timeout")])
    report.write_report(rep, tmp_path, progress_stream=io.StringIO())
    assert {f.name: check_png(f.file) for f in rep.figures} == {"fig4": 1, "fig5": 1, "fig6": 1, "fig7": 1, "fig8": 2}


def test_fig5_reads_kept_captures_through_analyse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stands in for exporter.analyse.iter_packets (same interface), so this test does not
    # depend on a capture parser; the real one is tested with its module.
    pcap = tmp_path / "t.pcap"
    pcap.write_bytes(b"not parsed by the fake")
    calls = []

    def iter_packets(path: str, client: str, remote: str):
        calls.append((path, client, remote))
        for k in range(50):
            yield types.SimpleNamespace(timestamp=1e9 + k * 0.1, way="down" if k % 2 else "up",
                                        frame_bytes=1514, payload_bytes=1448 if k % 2 else 0)

    monkeypatch.setitem(sys.modules, "exporter.analyse", types.SimpleNamespace(iter_packets=iter_packets))
    import exporter

    monkeypatch.setattr(exporter, "analyse", sys.modules["exporter.analyse"], raising=False)
    results = [ok(p, at(1, 3), 1.0, MIB, pcap_path=str(pcap), client_address="198.18.0.1",
                  remote_address="198.18.0.2") for p in ("http", "scp", "rsync")]
    rep = build_report(results)
    report.write_report(rep, tmp_path / "out", progress_stream=io.StringIO())
    assert check_png(tmp_path / "out" / "fig5.png") == 3
    assert (str(pcap), "198.18.0.1", "198.18.0.2") in calls


def test_fig5_from_a_real_capture(tmp_path: Path) -> None:
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    client, remote = "198.18.0.1", "198.18.0.2"
    frames = []
    for k in range(40):
        if k % 4:
            # Explicit MACs: a bare Ether() makes scapy resolve them with ARP on the host's network.
            pkt = Ether(src=MAC_REMOTE, dst=MAC_CLIENT) / IP(src=remote, dst=client) / TCP(sport=22, dport=50000, flags="A") / (b"x" * 1448)
        else:
            pkt = Ether(src=MAC_CLIENT, dst=MAC_REMOTE) / IP(src=client, dst=remote) / TCP(sport=50000, dport=22, flags="A")
        pkt.time = 1_700_000_000 + k * 0.01
        frames.append(pkt)
    pcap = tmp_path / "scp.pcap"
    wrpcap(str(pcap), frames)
    from exporter import figures

    result = ok("scp", at(1, 3), 0.4, MIB, pcap_path=str(pcap), client_address=client, remote_address=remote)
    packets = figures.load_packets(result)
    assert len(packets) == 40 and packets[0] == (0.0, "up", 0) and packets[1][1:] == ("down", 1448)
    assert packets[-1][0] == pytest.approx(0.39)
    rep = build_report([result, ok("ftp", at(1, 3), 0.4, MIB)])  # ftp kept no capture
    report.write_report(rep, tmp_path / "out", progress_stream=io.StringIO())
    assert check_png(tmp_path / "out" / "fig5.png") == 1


# ---------------------------------------------------------------------------------------
# Outputs and the command


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bigbinf-exporter")
    report.register(p.add_subparsers())
    return p


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


def test_report_command_writes_tables_and_lists_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal_path = tmp_path / "journal.jsonl"
    journal = Journal(journal_path)
    for result in table1_results(2.0):
        journal.append(result)
    journal.append(Result("scp", "uwc", "d", "download", at(12, 3), "failed", error="exit 1"))
    journal.append(ok("scp", at(28, 3), 1.0, MIB))  # after --to
    with open(journal_path, "a") as f:
        f.write('{"torn line\n')
    out = tmp_path / "report"
    code = run(["report", "--journal", str(journal_path), "--from", "2024-03-01", "--to", "2024-03-20",
                "--tz-offset", "+2", "--peak", "11-15", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "used 12 results, skipped 3" in err
    data = json.loads((out / "report.json").read_text())
    assert data["used_count"] == 12 and data["skipped_count"] == 3
    assert data["skipped_by_category"] == {report.OUT_OF_RANGE: 1, report.NOT_OK: 1, report.UNREADABLE: 1}
    assert data["parameters"]["tz_offset_hours"] == 2.0
    t, df, p = welch_by_hand(PEAK_SPEEDS, OFFPEAK_SPEEDS)
    assert data["table1"][0]["p_value"] == pytest.approx(p, abs=1e-9)
    with open(out / "table1.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["Protocol"] == "scp" and float(rows[0]["p-value"]) == pytest.approx(p, abs=1e-9)
    with open(out / "table2.csv") as f:
        (row2,) = list(csv.DictReader(f))
    assert int(row2["n"]) == 12 and float(row2["Bytes up"]) == 1000.0
    with open(out / "skipped.csv") as f:
        reasons = {r["Category"]: r["Reason"] for r in csv.DictReader(f)}
    assert reasons[report.NOT_OK] == "outcome failed: exit 1" and reasons[report.UNREADABLE]
    page = (out / "index.html").read_text()
    assert "Used 12 results; skipped 3" in page and "outcome failed: exit 1" in page


@pytest.mark.parametrize("argv, code, message", [
    (["--from", "2024-13-01"], 2, "--from '2024-13-01': not a date"),
    (["--from", "2024-03-05", "--to", "2024-03-01"], 2, "is not before --to"),
    (["--peak", "noon"], 2, "--peak 'noon'"),
    (["--tz-offset", "+25"], 2, "--tz-offset"),
    (["--source", "elsewhere"], 2, "--source 'elsewhere'"),
    (["--source", "prometheus", "http://127.0.0.1:1"], 2, "needs --from"),
])
def test_bad_arguments_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           argv: list[str], code: int, message: str) -> None:
    journal = tmp_path / "j.jsonl"
    Journal(journal).append(ok("scp", at(1, 3), 1.0, MIB))
    assert run(["report", "--journal", str(journal), "--out", str(tmp_path / "o"), *argv]) == code
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_journal_and_unreachable_prometheus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["report", "--journal", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")]) == 1
    assert "--journal" in capsys.readouterr().err
    assert run(["report", "--out", str(tmp_path / "o")]) == 2
    assert "--journal PATH is required" in capsys.readouterr().err
    from tests.support.prometheus import free_port

    url = f"http://127.0.0.1:{free_port()}"
    assert run(["report", "--source", "prometheus", url, "--from", "2024-03-01", "--to", "2024-03-02",
                "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert "cannot query" in err and err.count("\n") == 1


def test_progress_is_rate_limited() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = report.Progress("imported", "dumps", 500, stream=out, interval=1.0, clock=lambda: now[0])
    for done in range(1, 501):
        now[0] = done * 0.01  # 100 items per second
        progress.update(done)
    lines = out.getvalue().splitlines()
    assert lines == ["imported 100/500 dumps", "imported 200/500 dumps", "imported 300/500 dumps",
                     "imported 400/500 dumps", "imported 500/500 dumps"]
