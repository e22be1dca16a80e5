"""The report: Table 1 and 2 numbers, figures, outputs and the command's handler."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import io
import json
import math
import statistics
import struct
import types
import zlib
from pathlib import Path

import pytest

pytest.importorskip("scipy")
pytest.importorskip("matplotlib")

import bigbinf.measure.wire.pcap
from bigbinf.journal.store import Journal, segments
from bigbinf.result import Result
from bigbinf.study import common, report, stats, tables
from bigbinf.study.common import parse_tz_offset
from bigbinf.study.html import render_html
from bigbinf.study.importer import Packet, write_packets
from bigbinf.study.report import parse_peak
from bigbinf.study.tables import Table2Row, build_report, is_peak
from bigbinf.usage import UsageError, parse_when

UTC = dt.UTC
MIB = 2**20


MAC_CLIENT, MAC_REMOTE = "02:00:00:00:00:01", "02:00:00:00:00:02"


def at(day: int, hour: int, minute: int = 0) -> float:
    """UTC epoch of 2024-03-<day> hour:minute."""
    return dt.datetime(2024, 3, day, hour, minute, tzinfo=UTC).timestamp()


def ok(
    protocol: str,
    start: float,
    duration: float,
    file_bytes: int,
    down: int = 0,
    up: int = 0,
    dataset: str = "d",
    **kw: object,
) -> Result:
    return Result(
        protocol,
        "uwc",
        dataset,
        "download",
        start,
        "ok",
        duration_seconds=duration,
        file_bytes=file_bytes,
        wire_bytes_down=down,
        wire_bytes_up=up,
        **kw,
    )


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


# Independent Shapiro-Wilk: Royston's (1992, 1995) approximations written out from the
# published formulas (coefficients from normal order statistics, and the normalising
# transforms of W for n <= 11 and n >= 12), so the report's p is checked against a
# computation that does not go through scipy.


def _poly(coefficients: list[float], x: float) -> float:
    return sum(c * x**i for i, c in enumerate(coefficients))


def shapiro_by_hand(values: list[float]) -> tuple[float, float]:
    """(W, p) for 4 <= n <= 5000 (J. P. Royston, Statistics and Computing 2 (1992) 117-119;
    Applied Statistics 44 (1995) 547-551, algorithm AS R94)."""
    x, n = sorted(values), len(values)
    normal = statistics.NormalDist()
    m = [normal.inv_cdf((i - 0.375) / (n + 0.25)) for i in range(1, n + 1)]
    mm = sum(v * v for v in m)
    u = 1 / math.sqrt(n)
    a_n = m[-1] / math.sqrt(mm) + _poly([0, 0.221157, -0.147981, -2.071190, 4.434685, -2.706056], u)
    if n > 5:
        a_n1 = m[-2] / math.sqrt(mm) + _poly([0, 0.042981, -0.293762, -1.752461, 5.682633, -3.582633], u)
        phi = (mm - 2 * m[-1] ** 2 - 2 * m[-2] ** 2) / (1 - 2 * a_n**2 - 2 * a_n1**2)
        a = [-a_n, -a_n1, *(v / math.sqrt(phi) for v in m[2:-2]), a_n1, a_n]
    else:
        phi = (mm - 2 * m[-1] ** 2) / (1 - 2 * a_n**2)
        a = [-a_n, *(v / math.sqrt(phi) for v in m[1:-1]), a_n]
    mean = sum(x) / n
    w = sum(ai * xi for ai, xi in zip(a, x, strict=True)) ** 2 / sum((xi - mean) ** 2 for xi in x)
    if n <= 11:
        gamma = 0.459 * n - 2.273
        mu = _poly([0.5440, -0.39978, 0.025054, -0.0006714], n)
        sigma = math.exp(_poly([1.3822, -0.77857, 0.062767, -0.0020322], n))
        z = (-math.log(gamma - math.log(1 - w)) - mu) / sigma
    else:
        ln = math.log(n)
        mu = _poly([-1.5861, -0.31082, -0.083751, 0.0038915], ln)
        sigma = math.exp(_poly([-0.4803, -0.082676, 0.0030302], ln))
        z = (math.log(1 - w) - mu) / sigma
    return w, 1 - normal.cdf(z)


# Shapiro & Wilk (1965), "An analysis of variance test for normality (complete samples)",
# Biometrika 52(3/4), 591-611, section 4's worked example: weights of 11 men in pounds.
# Published: W = 0.79, below the 1% point of W for n = 11 (0.792, their Table 6): p < 0.01.
SHAPIRO_WILK_1965_WEIGHTS = [148.0, 154.0, 158.0, 160.0, 161.0, 162.0, 166.0, 170.0, 182.0, 195.0, 236.0]


def test_independent_shapiro_wilk_reproduces_the_published_example() -> None:
    w, p = shapiro_by_hand(SHAPIRO_WILK_1965_WEIGHTS)
    assert w == pytest.approx(0.79, abs=0.005) and w < 0.792
    assert p < 0.01


def test_shapiro_wilk_p_of_the_published_example() -> None:
    _, p = shapiro_by_hand(SHAPIRO_WILK_1965_WEIGHTS)
    assert stats.shapiro_p(SHAPIRO_WILK_1965_WEIGHTS) == pytest.approx(p, rel=1e-6)
    assert stats.shapiro_p(SHAPIRO_WILK_1965_WEIGHTS) < 0.01  # non-normal, as the paper concludes
    # Through Table 1: the weights as peak speeds, the (normal-looking) off-peak speeds as the rest.
    size = MIB
    results = [ok("scp", at(1 + i, 12), size / speed, size) for i, speed in enumerate(SHAPIRO_WILK_1965_WEIGHTS)]
    results += [ok("scp", at(1 + i, 3), size / speed, size) for i, speed in enumerate(OFFPEAK_SPEEDS)]
    (row,) = build_report(results).table1
    assert row.shapiro_p_peak == pytest.approx(p, rel=1e-6)
    assert row.shapiro_p_offpeak == pytest.approx(shapiro_by_hand(OFFPEAK_SPEEDS)[1], rel=1e-6)
    assert row.normal == "no"  # one group fails at alpha 0.05


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
    assert row.shapiro_p_peak == pytest.approx(shapiro_by_hand(PEAK_SPEEDS)[1], rel=1e-6)
    assert row.shapiro_p_offpeak == pytest.approx(shapiro_by_hand(OFFPEAK_SPEEDS)[1], rel=1e-6)
    assert row.normal == "yes"  # both p well above 0.05 (0.94 and 0.95)


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
        with pytest.raises(UsageError, match="--peak"):
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
        Table2Row(1024, "ftp", "download", "exporter", 1, 1000.0, 24.0, 1024.0, 1.0, 100.0, 0.5, 2048.0, None),
        Table2Row(1024, "scp", "download", "exporter", 2, 1350.0, 58.0, 1408.0, 1.375, 137.5, 3.0, 384.0, None),
        Table2Row(4096, "scp", "download", "exporter", 2, 4048.0, 560.0, 4608.0, 1.125, 112.5, 8.0, 512.0, None),
    ]
    assert len(rep.used) == 5
    assert rep.skipped_counts() == {tables.OUT_OF_RANGE: 1, tables.NOT_OK: 1}
    assert "outcome failed: connection refused" in [s.reason for s in rep.skipped]


def test_table2_says_what_limited_each_row_most_often() -> None:
    def judged(day: int, limit: str) -> Result:
        return dataclasses.replace(ok("scp", at(day, 3), 2.0, 1024, down=1200, up=80), limited_by=limit)

    results = [judged(1, "receive_window"), judged(2, "congestion"), judged(3, "receive_window"), judged(4, "")]
    rep = build_report(results, start=at(1, 0), end=at(10, 0))
    assert [r.limited_by for r in rep.table2] == ["receive_window (2/3)"]
    # A tie goes to the reason named first (result.LIMITS), so the column does not flicker.
    tie = build_report(results[:2], start=at(1, 0), end=at(10, 0))
    assert tie.table2[0].limited_by == "receive_window (1/2)"
    assert "<td>receive_window (2/3)</td>" in render_html(rep)
    # Never judged (imports, UDP, older journals): empty, not "unknown".
    assert build_report(results[3:], start=at(1, 0), end=at(10, 0)).table2[0].limited_by == ""


def test_uploads_are_separate_rows() -> None:
    up = Result(
        "scp",
        "uwc",
        "d",
        "upload",
        at(1, 3),
        "ok",
        duration_seconds=1.0,
        file_bytes=1024,
        wire_bytes_down=10,
        wire_bytes_up=1100,
    )
    rep = build_report([ok("scp", at(1, 3), 1.0, 1024, down=1100, up=10), up])
    assert [(r.protocol, r.direction) for r in rep.table2] == [("scp", "download"), ("scp", "upload")]
    assert [r.label for r in rep.table1] == ["scp", "scp (upload)"]
    only = build_report([ok("scp", at(1, 3), 1.0, 1024), up], directions=["upload"])
    assert [r.direction for r in only.table2] == ["upload"] and only.skipped[0].category == tables.FILTERED


# ---------------------------------------------------------------------------------------
# Figures: valid PNGs with the right number of panels


def png_chunks(path: Path) -> list[tuple[bytes, bytes]]:
    """Parse a PNG by the specification, checking every CRC; returns (type, data) chunks."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name}: not a PNG signature"
    chunks, pos = [], 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
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
    rows = [pixels[r * (1 + width * channels) + 1 : (r + 1) * (1 + width * channels)] for r in (0, height // 2)]
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
                if i == 0 and (
                    (size == 5 * MIB and protocol != "gridftp") or (size == 512 * MIB and protocol == "scp")
                ):
                    sidecar = tmp_path / "packets" / f"{protocol}-{s}.jsonl"
                    write_packets(
                        sidecar, [Packet("down" if k % 5 else "up", k * 0.01, 1448 if k % 5 else 0) for k in range(300)]
                    )
                    packets_path = str(sidecar)
                results.append(
                    ok(
                        protocol,
                        at(1 + i, hour),
                        duration,
                        size,
                        down=int(size * 1.02),
                        up=int(size * 0.01),
                        packets_path=packets_path,
                    )
                )
    return results


def legend_texts(ax: object) -> list[str]:
    legend = ax.get_legend()  # type: ignore[attr-defined]
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def tick_texts(ax: object) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels()]  # type: ignore[attr-defined]


def line_labelled(ax: object, label: str) -> object:
    (line,) = [ln for ln in ax.get_lines() if ln.get_label() == label]  # type: ignore[attr-defined]
    return line


def bar_heights(ax: object, container: int = 0) -> list[float]:
    from matplotlib.container import BarContainer

    bars = [c for c in ax.containers if isinstance(c, BarContainer)]  # type: ignore[attr-defined]
    return [bar.get_height() for bar in bars[container]]


def figures_by_name(rep: tables.Report) -> dict[str, object]:
    return {f.name: f.figure for f in rep.figures}


def test_every_figure_is_a_valid_png_and_draws_what_the_study_drew(tmp_path: Path) -> None:
    rep = build_report(figure_results(tmp_path))
    out = tmp_path / "out"
    report.write_report(rep, out, progress_stream=io.StringIO())
    assert {f.file.name for f in rep.figures} == {"fig4.png", "fig5.png", "fig6.png", "fig7.png", "fig8.png"}
    figs = figures_by_name(rep)
    # The PNG on disk is the figure drawn: same panel count.
    assert {f.name: check_png(f.file) for f in rep.figures} == {n: len(fig.axes) for n, fig in figs.items()}
    protocols = ["ftp", "gridftp", "scp"]
    (ax4,) = figs["fig4"].axes  # its numbers: test_fig4_bars_are_the_peak_and_offpeak_means
    assert legend_texts(ax4) == ["peak", "off-peak"] and ax4.get_ylabel() == "Mean speed (MB/s)"
    assert [t.split("\n")[0] for t in tick_texts(ax4)] == protocols

    # Fig 5: 5 MiB has packet lists for two protocols (ftp, scp), 512 MiB for one.
    fig5 = figs["fig5"]
    assert [ax.get_title().split(":")[0] for ax in fig5.axes] == ["ftp", "scp"]
    assert fig5.axes[-1].get_xlabel() == "Time since first packet (s)"
    assert legend_texts(fig5.axes[0]) == ["down", "up", "final packet"]
    for ax in fig5.axes:
        assert ax.get_ylabel() == "Payload (bytes)"
        assert len(line_labelled(ax, "down").get_xdata()) == 240 and len(line_labelled(ax, "up").get_xdata()) == 60
        assert list(line_labelled(ax, "final packet").get_xdata()) == pytest.approx([2.99, 2.99])
    assert "5 MiB" in next(f for f in rep.figures if f.name == "fig5").caption

    (ax6,) = figs["fig6"].axes
    assert tick_texts(ax6) == protocols and ax6.get_ylabel() == "Mean time (s)"
    big = 512 * MIB
    assert bar_heights(ax6) == pytest.approx(
        [statistics.fmean(big / (20e6 + 1e6 * p + 1e5 * i) for i in range(4)) for p in range(3)], rel=1e-12
    )

    fig7 = figs["fig7"]
    assert [ax.get_title() for ax in fig7.axes] == ["5 MiB file", "512 MiB file"]
    for ax, size in zip(fig7.axes, (5 * MIB, 512 * MIB), strict=True):
        reference = line_labelled(ax, "file size")  # the study's file-size mark
        assert list(reference.get_xdata()) == [size, size]
        assert reference.get_color() == "red" and reference.get_linestyle() == "--"
        assert legend_texts(ax) == [*protocols, "file size"]
        assert ax.get_xlabel() == "Total bytes transferred (down + up)" and ax.get_ylabel() == "Speed (MB/s)"

    speed_ax, ratio_ax = figs["fig8"].axes
    for ax in (speed_ax, ratio_ax):
        assert ax.get_xscale() == "log" and ax.get_xlabel() == "File size"
    assert legend_texts(speed_ax) == protocols
    assert legend_texts(ratio_ax) == [*protocols, "100% = file size"]
    assert list(line_labelled(ratio_ax, "100% = file size").get_ydata()) == [100.0, 100.0]
    # ratio per protocol: (1.02 + 0.01) x the file size, rounded down to whole bytes
    assert list(line_labelled(ratio_ax, "scp").get_ydata()) == pytest.approx([103.0, 103.0], rel=1e-6)

    # Human units (issue 11): speeds in MB/s and sizes in binary units, never a raw 1e7 offset.
    for ax in (ax4, *fig7.axes, speed_ax):
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert ax.yaxis.get_offset_text().get_text() == "" and labels
        assert all(0 <= float(t) <= 100 for t in labels), labels  # ~20 MB/s, not 2e7
    for ax in fig7.axes:
        assert all(t.get_text().endswith("iB") or t.get_text() == "0" for t in ax.get_xticklabels() if t.get_text())
    assert [t.get_text() for t in speed_ax.get_xticklabels()] == ["5 MiB", "512 MiB"]

    page = (out / "index.html").read_text()
    for name in ("fig4.png", "fig5.png", "fig6.png", "fig7.png", "fig8.png", "Table 1", "Table 2"):
        assert name in page


def test_fig4_bars_are_the_peak_and_offpeak_means(tmp_path: Path) -> None:
    from bigbinf.study import figures

    rep = build_report([*table1_results(0.0), ok("ftp", at(1, 12), 1.0, MIB), ok("ftp", at(1, 3), 2.0, MIB)])
    (ax,) = figures.figure4(rep, tmp_path / "fig4.png").figure.axes
    _, _, p = welch_by_hand(PEAK_SPEEDS, OFFPEAK_SPEEDS)
    assert tick_texts(ax) == ["ftp\np=n/a", f"scp\np={p:.2g}"]
    assert bar_heights(ax, 0) == pytest.approx([MIB / 1.0, _mean(PEAK_SPEEDS)], rel=1e-12)
    assert bar_heights(ax, 1) == pytest.approx([MIB / 2.0, _mean(OFFPEAK_SPEEDS)], rel=1e-12)
    assert check_png(tmp_path / "fig4.png") == 1


def test_figures_without_data_are_still_written(tmp_path: Path) -> None:
    rep = build_report([Result("scp", "uwc", "d", "download", at(1, 3), "timeout")])
    report.write_report(rep, tmp_path, progress_stream=io.StringIO())
    figs = figures_by_name(rep)
    assert {name: len(fig.axes) for name, fig in figs.items()} == {
        "fig4": 1,
        "fig5": 1,
        "fig6": 1,
        "fig7": 1,
        "fig8": 2,
    }
    assert {f.name: check_png(f.file) for f in rep.figures} == {n: len(fig.axes) for n, fig in figs.items()}
    for name, fig in figs.items():
        for ax in fig.axes:
            assert ax.texts[0].get_text().startswith("no "), name  # says why it is empty
            assert ax.get_lines() == [] and not ax.containers


def test_fig5_reads_kept_captures_through_analyse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stands in for bigbinf.measure.wire.pcap.iter_packets (same interface), so this test does not
    # depend on a capture parser; the real one is tested with its module.
    pcap = tmp_path / "t.pcap"
    pcap.write_bytes(b"not parsed by the fake")
    calls = []

    def iter_packets(path: str, client: str, remote: str):
        calls.append((path, client, remote))
        for k in range(50):
            yield types.SimpleNamespace(
                timestamp=1e9 + k * 0.1,
                way="down" if k % 2 else "up",
                frame_bytes=1514,
                payload_bytes=1448 if k % 2 else 0,
            )

    monkeypatch.setattr(bigbinf.measure.wire.pcap, "iter_packets", iter_packets)
    results = [
        ok(p, at(1, 3), 1.0, MIB, pcap_path=str(pcap), client_address="198.18.0.1", remote_address="198.18.0.2")
        for p in ("http", "scp", "rsync")
    ]
    rep = build_report(results)
    report.write_report(rep, tmp_path / "out", progress_stream=io.StringIO())
    fig5 = figures_by_name(rep)["fig5"]
    assert [ax.get_title().split(":")[0] for ax in fig5.axes] == ["http", "rsync", "scp"]
    assert all(len(line_labelled(ax, "down").get_xdata()) == 25 for ax in fig5.axes)
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
            pkt = (
                Ether(src=MAC_REMOTE, dst=MAC_CLIENT)
                / IP(src=remote, dst=client)
                / TCP(sport=22, dport=50000, flags="A")
                / (b"x" * 1448)
            )
        else:
            pkt = (
                Ether(src=MAC_CLIENT, dst=MAC_REMOTE)
                / IP(src=client, dst=remote)
                / TCP(sport=50000, dport=22, flags="A")
            )
        pkt.time = 1_700_000_000 + k * 0.01
        frames.append(pkt)
    pcap = tmp_path / "scp.pcap"
    wrpcap(str(pcap), frames)
    from bigbinf.study import figures

    result = ok("scp", at(1, 3), 0.4, MIB, pcap_path=str(pcap), client_address=client, remote_address=remote)
    packets = figures.load_packets(result)
    assert len(packets) == 40 and packets[0] == (0.0, "up", 0) and packets[1][1:] == ("down", 1448)
    assert packets[-1][0] == pytest.approx(0.39)
    rep = build_report([result, ok("ftp", at(1, 3), 0.4, MIB)])  # ftp kept no capture
    report.write_report(rep, tmp_path / "out", progress_stream=io.StringIO())
    (ax,) = figures_by_name(rep)["fig5"].axes
    assert ax.get_title().startswith("scp:")
    assert list(line_labelled(ax, "down").get_ydata()) == [1448] * 30
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
    code = run(
        [
            "report",
            "--journal",
            str(journal_path),
            "--from",
            "2024-03-01",
            "--to",
            "2024-03-20",
            "--tz-offset",
            "+2",
            "--peak",
            "11-15",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    # The result after --to is not even read: the journal reads only --from/--to (issue 37).
    assert "used 12 results, skipped 2" in err
    data = json.loads((out / "report.json").read_text())
    assert data["used_count"] == 12 and data["skipped_count"] == 2
    assert data["skipped_by_category"] == {tables.NOT_OK: 1, tables.UNREADABLE: 1}
    assert data["parameters"]["tz_offset_hours"] == 2.0
    _, _, p = welch_by_hand(PEAK_SPEEDS, OFFPEAK_SPEEDS)
    assert data["table1"][0]["p_value"] == pytest.approx(p, abs=1e-9)
    with open(out / "table1.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["Protocol"] == "scp" and float(rows[0]["p-value"]) == pytest.approx(p, abs=1e-9)
    with open(out / "table2.csv") as f:
        (row2,) = list(csv.DictReader(f))
    assert int(row2["n"]) == 12 and float(row2["Bytes up"]) == 1000.0
    with open(out / "skipped.csv") as f:
        reasons = {r["Category"]: r["Reason"] for r in csv.DictReader(f)}
    assert reasons[tables.NOT_OK] == "outcome failed: exit 1" and reasons[tables.UNREADABLE]
    page = (out / "index.html").read_text()
    assert "Used 12 results; skipped 2" in page and "outcome failed: exit 1" in page


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["--from", "2024-13-01"], 2, "--from '2024-13-01': not a date"),
        (["--from", "2024-03-05", "--to", "2024-03-01"], 2, "is not before --to"),
        (["--peak", "noon"], 2, "--peak 'noon'"),
        (["--tz-offset", "+25"], 2, "--tz-offset"),
        (["--source", "elsewhere"], 2, "--source 'elsewhere'"),
        (["--source", "prometheus", "http://127.0.0.1:1"], 2, "needs --from"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], code: int, message: str
) -> None:
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
    assert (
        run(
            [
                "report",
                "--source",
                "prometheus",
                url,
                "--from",
                "2024-03-01",
                "--to",
                "2024-03-02",
                "--out",
                str(tmp_path / "o"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "cannot query" in err and err.count("\n") == 1


def test_progress_is_rate_limited() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = common.Progress("imported", "dumps", 500, stream=out, interval=1.0, clock=lambda: now[0])
    for done in range(1, 501):
        now[0] = done * 0.01  # 100 items per second
        progress.update(done)
    lines = out.getvalue().splitlines()
    assert lines == [
        "imported 100/500 dumps",
        "imported 200/500 dumps",
        "imported 300/500 dumps",
        "imported 400/500 dumps",
        "imported 500/500 dumps",
    ]


# ---------------------------------------------------------------------------------------
# Imported 2015 results are kept apart from new ones


def imported(start: float, duration: float, file_bytes: int, down: int, up: int, **kw: object) -> Result:
    return ok("scp", start, duration, file_bytes, down=down, up=up, source="import", **kw)


def mixed_results(tmp_path: Path) -> list[Result]:
    """scp at 1 KiB measured twice by the exporter and twice imported from 2015 dumps; one
    of each kind has a packet list, so Fig 5 has a panel for each."""
    sidecar = tmp_path / "packets" / "p.jsonl"
    write_packets(sidecar, [Packet("down", k * 0.1, 1000) for k in range(5)])
    return [
        ok("scp", at(1, 3), 2.0, 1024, down=1200, up=80, packets_path=str(sidecar)),
        ok("scp", at(2, 3), 4.0, 1024, down=1500, up=36),
        imported(at(1, 4), 1.0, 1024, down=1000, up=20, packets_path=str(sidecar)),
        imported(at(2, 4), 0.5, 1024, down=1000, up=4),
    ]


def test_imports_and_new_results_are_never_pooled(tmp_path: Path) -> None:
    rep = build_report(mixed_results(tmp_path))
    # Pooled, scp would be one row of n = 4; apart, each row's means are its own.
    assert rep.table2 == [
        Table2Row(1024, "scp", "download", "exporter", 2, 1350.0, 58.0, 1408.0, 1.375, 137.5, 3.0, 384.0, None),
        # ratio (1020 + 1004) / 2 / 1024; speed (1024 + 2048) / 2; study speed (1000/1 + 1000/0.5) / 2
        Table2Row(
            1024, "scp", "download", "import", 2, 1000.0, 12.0, 1012.0, 0.98828125, 98.828125, 0.75, 1536.0, 1500.0
        ),
    ]
    assert [(r.label, r.n_offpeak) for r in rep.table1] == [("scp", 2), ("scp (2015 import)", 2)]
    assert [r.label for r in rep.table2] == ["scp", "scp (2015 import)"]

    out = tmp_path / "out"
    report.write_report(rep, out, progress_stream=io.StringIO())
    with open(out / "table2.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(r["Protocol"], r["Source"], r["n"], r["Speed (bytes/s)"]) for r in rows] == [
        ("scp", "exporter", "2", "384.0"),
        ("scp", "import", "2", "1536.0"),
    ]
    with open(out / "table1.csv") as f:
        assert [r["Source"] for r in csv.DictReader(f)] == ["exporter", "import"]
    data = json.loads((out / "report.json").read_text())
    assert [(r["source"], r["n"]) for r in data["table2"]] == [("exporter", 2), ("import", 2)]
    assert [r["source"] for r in data["table1"]] == ["exporter", "import"]
    page = (out / "index.html").read_text()
    assert "<td>scp (2015 import)</td>" in page and common.IMPORT_NOTE in page.replace("&#x27;", "'")
    assert "Bytes are link-layer frame bytes" not in page  # no longer said of every row

    figs = figures_by_name(rep)
    labels = ["scp", "scp (2015 import)"]
    assert [t.split("\n")[0] for t in tick_texts(figs["fig4"].axes[0])] == labels
    assert [ax.get_title().split(":")[0] for ax in figs["fig5"].axes] == labels
    assert tick_texts(figs["fig6"].axes[0]) == labels and bar_heights(figs["fig6"].axes[0]) == [3.0, 0.75]
    (ax7,) = figs["fig7"].axes
    assert legend_texts(ax7) == [*labels, "file size"]
    assert [list(c.get_offsets()[:, 0]) for c in ax7.collections] == [
        [1280, 1536],
        [1408.0],
        [1020, 1004],
        [1012.0],
    ]  # each kind's own transfers and mean
    speed_ax, _ = figs["fig8"].axes
    assert [list(line_labelled(speed_ax, label).get_ydata()) for label in labels] == [[384.0], [1536.0]]
    for f in rep.figures:
        assert common.IMPORT_NOTE in f.caption, f.name


def test_without_imports_nothing_mentions_them(tmp_path: Path) -> None:
    rep = build_report([r for r in mixed_results(tmp_path) if r.source != "import"])
    report.write_report(rep, tmp_path / "out", progress_stream=io.StringIO())
    assert [r.label for r in rep.table2] == ["scp"]
    page = (tmp_path / "out" / "index.html").read_text()
    assert "2015 import" not in page and all(common.IMPORT_NOTE not in f.caption for f in rep.figures)


def test_study_speed_column_is_bytes_down_over_capture_time(tmp_path: Path) -> None:
    def captured(start: float, first: float, last: float, payload_down: int) -> Result:
        return ok(
            "scp",
            start,
            9.0,
            1024,
            down=5000,
            up=50,
            payload_bytes_down=payload_down,
            first_packet_timestamp=start + first,
            last_packet_timestamp=start + last,
        )

    results = [
        captured(at(1, 3), 0.5, 2.5, 1000),  # 1000 payload bytes down in a 2 s packet span: 500 B/s
        captured(at(2, 3), 0.25, 4.25, 1000),  # 250 B/s
        ok("scp", at(3, 3), 9.0, 1024, down=5000, up=50),  # no capture: no study speed, not averaged in
        ok("ftp", at(1, 3), 9.0, 1024, down=5000, up=50),  # no capture in the whole group
        imported(at(1, 4), 1.5, 1024, down=3000, up=10),  # the dump's bytes_down / time: 2000 B/s
    ]
    rep = build_report(results)
    assert [(r.label, r.n, r.study_speed_bytes_per_second) for r in rep.table2] == [
        ("ftp", 1, None),
        ("scp", 3, 375.0),
        ("scp (2015 import)", 1, 2000.0),
    ]
    assert [tables.study_speed(r) for r in results] == [500.0, 250.0, None, None, 2000.0]
    report.write_tables(rep, tmp_path)
    with open(tmp_path / "table2.csv") as f:
        rows = list(csv.DictReader(f))
    heading = "Speed as the study computed it (bytes down / capture time)"
    assert [r[heading] for r in rows] == ["", "375.0", "2000.0"]
    assert [
        r["study_speed_bytes_per_second"] for r in json.loads((tmp_path / "report.json").read_text())["table2"]
    ] == [None, 375.0, 2000.0]
    page = render_html(rep)
    assert "Speed as the study computed it (bytes down / capture time, B/s)" in page
    assert "<td>375.0</td>" in page and "<td>n/a</td>" in page


# ---------------------------------------------------------------------------------------
# Wrong-typed journal lines, and the shared flags after the subcommand


def test_report_skips_wrong_typed_journal_lines_and_uses_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal_path = tmp_path / "journal.jsonl"
    good = [ok("scp", at(1, 3), 2.0, 1024, down=1200, up=80), ok("scp", at(2, 3), 4.0, 1024, down=1500, up=36)]
    Journal(journal_path).append(good[0])
    with open(journal_path, "a") as f:
        f.write(json.dumps({**good[0].to_json(), "start_timestamp": "2024-03-01"}) + "\n")  # line 2
        f.write(json.dumps({**good[0].to_json(), "file_bytes": "1024"}) + "\n")  # line 3
    Journal(journal_path).append(good[1])  # a later day's: the day before is rotated into its segment
    (segment,) = [s.path for s in segments(journal_path)]
    out = tmp_path / "out"
    assert run(["report", "--journal", str(journal_path), "--no-figures", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    line2 = f"{segment}:2: skipped: field start_timestamp: expected a finite number, got str '2024-03-01'"
    line3 = f"{segment}:3: skipped: field file_bytes: expected a whole number, got str '1024'"
    assert err.count(line2) == 1 and err.count(line3) == 1 and "Traceback" not in err
    assert "used 2 results, skipped 2 (2 unreadable journal line)" in err
    data = json.loads((out / "report.json").read_text())
    assert [(s["what"], s["reason"].split(":")[0]) for s in data["skipped"]] == [
        (f"{segment}:2", "field start_timestamp"),
        (f"{segment}:3", "field file_bytes"),
    ]
    assert [(r["n"], r["speed_bytes_per_second"]) for r in data["table2"]] == [(2, 384.0)]


def test_shared_flags_work_after_the_subcommand(tmp_path: Path) -> None:
    from bigbinf import cli

    journal_path = tmp_path / "journal.jsonl"
    Journal(journal_path).append(ok("scp", at(1, 3), 2.0, 1024, down=1200, up=80))
    argv = ["--journal", str(journal_path), "--no-figures", "--out", str(tmp_path / "out")]
    args = cli.build_parser().parse_args(["report", "--log.level", "error", *argv])
    assert args.log_level == "error" and args.func is report.run
    assert cli.main(["report", *argv, "--log.level", "warn", "--config.file", str(tmp_path / "unused.yaml")]) == 0
    assert json.loads((tmp_path / "out" / "report.json").read_text())["used_count"] == 1
    assert cli.build_parser().parse_args(["--log.level", "debug", "report", *argv]).log_level == "debug"
