"""The study's Figures 4-8 as PNG files, drawn with matplotlib's Agg renderer.

Figures are built on `matplotlib.figure.Figure` with an explicit Agg canvas rather than
pyplot: no global figure state and no GUI backend, so a report can run on a headless
server or next to the exporter's threads.  Each figure function writes its PNG and
returns the Figure with it (FigureFile.figure), so callers and tests can inspect what
was drawn (axes, labels, lines, legends); the PNG also carries a `Panels` text chunk
(the number of axes) for tools that only see the file.

Imported 2015 results measure other things than new ones (payload bytes and packet-span
time, not frame bytes and wall clock), so they are their own series, labelled
"(2015 import)", never pooled with new results (common.measured_by).

Figure 5 needs per-packet data.  It comes from a kept capture (Result.pcap_path, read
with bigbinf.measure.wire.pcap.iter_packets) or from the packets sidecar of an imported 2015
dump (Result.packets_path, see bigbinf/study/importer.py).

matplotlib is the optional extra `report`: this module imports it at the top, so the
`report` command imports this module only when figures are wanted.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, Locator, MaxNLocator, NullLocator

from bigbinf.measure.wire import pcap
from bigbinf.result import Result
from bigbinf.study.common import IMPORT_NOTE, IMPORTED, Progress, format_p, group_order, measured_by, series_label
from bigbinf.study.importer import read_packets
from bigbinf.study.tables import Report

DPI = 100
MAX_POINTS_PER_PANEL = 200_000  # Fig 5: beyond this every k-th packet is drawn (stated in the caption)
COLORS = {"down": "tab:blue", "up": "tab:orange"}


@dataclass(frozen=True)
class FigureFile:
    name: str  # fig4 .. fig8
    file: Path
    title: str
    caption: str
    panels: int
    figure: Figure | None = field(default=None, compare=False, repr=False)  # what was drawn

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "file": self.file.name,
            "title": self.title,
            "caption": self.caption,
            "panels": self.panels,
        }


def human_bytes(n: float) -> str:
    """5242880 -> '5 MiB', 2540610608 -> '2.37 GiB' (the study labelled sizes in binary units)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} TiB"


# Axes in human units (the data stay in bytes and bytes/s: what the tables hold): speeds
# in MB/s (10^6 bytes/s, as the poster's), sizes in binary units (as the study labelled
# them), never matplotlib's raw numbers with a 1e7 offset.
MB_PER_S = "MB/s"


def _speed_axis(axis: Any) -> None:
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v / 1e6:g}"))


class _BinaryLocator(Locator):
    """Round ticks in the binary unit of the axis' range (5.0, 5.1, 5.2 MiB rather than
    matplotlib's round numbers of bytes, which read 4.96, 5.05 MiB)."""

    def __call__(self) -> Any:
        vmin, vmax = self.axis.get_view_interval() if self.axis is not None else (0.0, 1.0)
        return self.tick_values(vmin, vmax)

    def tick_values(self, vmin: float, vmax: float) -> Any:
        unit = 1024.0 ** max(0, min(4, int(math.log(max(abs(vmin), abs(vmax), 1.0), 1024))))
        ticks = MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]).tick_values(vmin / unit, vmax / unit)
        return [t * unit for t in ticks]


def _bytes_axis(axis: Any, ticks: Sequence[float] = ()) -> None:
    """Tick labels such as '64 MiB'; on a log axis, ticks at `ticks` (the file sizes) only."""
    if ticks:
        axis.set_ticks(sorted(set(ticks)))
        axis.set_minor_locator(NullLocator())
    else:
        axis.set_major_locator(_BinaryLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: human_bytes(v) if v > 0 else "0"))


def _save(name: str, fig: Figure, path: Path, title: str, caption: str) -> FigureFile:
    FigureCanvasAgg(fig)  # attaches the Agg canvas: PNG rendering without pyplot or a display
    panels = len(fig.axes)
    fig.savefig(
        path, format="png", dpi=DPI, metadata={"Title": title, "Software": "bigbinf report", "Panels": str(panels)}
    )
    return FigureFile(name, path, title, caption, panels, fig)


def _imports_note(report: Report) -> str:
    """Said in a caption when imported 2015 results are drawn, since they are not comparable."""
    return " " + IMPORT_NOTE if any(measured_by(r) == IMPORTED for r in report.used) else ""


def _group(result: Result) -> tuple[str, str, str]:
    """A figure series: protocol, direction and kind of measurement (see common.measured_by)."""
    return (result.protocol, result.direction, measured_by(result))


def _group_order(key: tuple[str, str, str]) -> Any:
    return group_order(*key)


def _grid(
    count: int, max_cols: int = 3, panel_size: tuple[float, float] = (5.0, 3.6), sharex: bool = False
) -> tuple[Figure, list[Axes]]:
    """A figure with exactly `count` panels (unused grid slots removed)."""
    cols = min(max_cols, count)
    rows = math.ceil(count / cols)
    fig = Figure(figsize=(panel_size[0] * cols, panel_size[1] * rows + 0.6), layout="constrained")
    grid = fig.subplots(rows, cols, squeeze=False, sharex=sharex)
    axes = [ax for row in grid for ax in row]
    for ax in axes[count:]:
        fig.delaxes(ax)
    return fig, axes[:count]


def _no_data(ax: Axes, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


# ---------------------------------------------------------------------------------------
# Figure 4: peak vs off-peak speed per protocol


def figure4(report: Report, path: Path) -> FigureFile:
    title = "Figure 4: speed in peak and off-peak hours"
    fig, (ax,) = _grid(1, panel_size=(9.0, 4.5))
    rows = report.table1
    if not rows:
        _no_data(ax, "no ok transfers in range")
    else:
        width = 0.38
        xs = range(len(rows))
        for offset, which, color in ((-width / 2, "peak", "tab:red"), (width / 2, "offpeak", "tab:green")):
            means = [getattr(r, f"mean_{which}") or 0.0 for r in rows]
            sds = [getattr(r, f"sd_{which}") or 0.0 for r in rows]
            label = "peak" if which == "peak" else "off-peak"
            ax.bar([x + offset for x in xs], means, width, yerr=sds, capsize=3, color=color, alpha=0.75, label=label)
        ax.set_xticks(list(xs), [f"{r.label}\np={format_p(r.p_value, digits=2, plain_from=0.0)}" for r in rows])
        ax.set_ylabel(f"Mean speed ({MB_PER_S})")
        _speed_axis(ax.yaxis)
        ax.legend()
    ax.set_title(title)
    opts = report.options
    caption = (
        f"Mean speed (file bytes / duration) of transfers started in the peak hours "
        f"({opts.peak_hours[0]:g}h-{opts.peak_hours[1]:g}h at UTC{opts.tz_offset_hours:+g}) and outside them, "
        "per protocol; error bars are one standard deviation; p is Welch's t-test from Table 1." + _imports_note(report)
    )
    return _save("fig4", fig, path, title, caption)


# ---------------------------------------------------------------------------------------
# Figure 5: per-packet payload size over time, one panel per protocol


def has_packets(result: Result) -> bool:
    if result.packets_path and Path(result.packets_path).is_file():
        return True
    return bool(result.pcap_path and Path(result.pcap_path).is_file())


def load_packets(result: Result) -> list[tuple[float, str, int]]:
    """(seconds since the first packet, way, payload bytes) of one transfer."""
    rows: list[tuple[float, str, int]] = []
    if result.packets_path and Path(result.packets_path).is_file():
        rows = [(p.time, p.way, p.length) for p in read_packets(Path(result.packets_path))]
    elif result.pcap_path:
        rows = [
            (float(p.timestamp), p.way, int(p.payload_bytes))
            for p in pcap.iter_packets(result.pcap_path, result.client_address, result.remote_address)
        ]
    if rows:
        t0 = min(t for t, _, _ in rows)
        rows = [(t - t0, way, length) for t, way, length in rows]
    return rows


def select_fingerprints(used: Sequence[Result]) -> tuple[int | None, list[Result]]:
    """Like the study: one transfer per protocol, all of one file size.  The size is the
    one with per-packet data for the most protocols (the larger on a tie); per protocol
    the latest such transfer."""
    candidates = [r for r in used if has_packets(r)]
    if not candidates:
        return None, []
    per_size: Counter[int] = Counter()
    for size in {r.file_bytes for r in candidates}:
        per_size[size] = len({_group(r) for r in candidates if r.file_bytes == size})
    size = max(per_size, key=lambda s: (per_size[s], s))
    latest: dict[tuple[str, str, str], Result] = {}
    for r in candidates:
        if r.file_bytes == size:
            key = _group(r)
            if key not in latest or r.start_timestamp > latest[key].start_timestamp:
                latest[key] = r
    return size, [latest[k] for k in sorted(latest, key=_group_order)]


def figure5(report: Report, path: Path) -> FigureFile:
    title = "Figure 5: per-packet payload size over time"
    size, chosen = select_fingerprints(report.used)
    if not chosen:
        fig, (ax,) = _grid(1, panel_size=(9.0, 3.0))
        _no_data(ax, "no per-packet data: keep captures or import 2015 dumps with packets")
        ax.set_title(title)
        caption = "No transfer in range has a kept capture or imported packet list."
        return _save("fig5", fig, path, title, caption)
    fig, axes = _grid(len(chosen), max_cols=1, panel_size=(10.0, 2.4), sharex=True)
    thinned = False
    for ax, result in zip(axes, chosen, strict=True):
        packets = load_packets(result)
        stride = max(1, math.ceil(len(packets) / MAX_POINTS_PER_PANEL))
        thinned = thinned or stride > 1
        for way in ("down", "up"):
            xs = [t for t, w, _ in packets[::stride] if w == way]
            ys = [n for _, w, n in packets[::stride] if w == way]
            ax.plot(xs, ys, ".", markersize=2, color=COLORS[way], label=way, rasterized=True)
        if packets:
            end = max(t for t, _, _ in packets)
            ax.axvline(end, color="green", linestyle="--", linewidth=1, label="final packet")
        else:
            _no_data(ax, "capture holds no packets between the two hosts")
        ax.set_title(
            f"{series_label(*_group(result))}: {result.start_utc}, {result.duration_seconds:.1f} s", fontsize=10
        )
        ax.set_ylabel("Payload (bytes)")
    axes[-1].set_xlabel("Time since first packet (s)")
    axes[0].legend(loc="upper right", fontsize=8, markerscale=4)
    fig.suptitle(f"{title} ({human_bytes(size or 0)} transfers)")
    caption = (
        f"One {human_bytes(size or 0)} transfer per protocol; each point is a packet, its height the payload "
        "length; down = remote to client. The dashed line marks the final packet."
        + (f" More than {MAX_POINTS_PER_PANEL:,} packets: every k-th drawn." if thinned else "")
        + _imports_note(report)
    )
    return _save("fig5", fig, path, title, caption)


# ---------------------------------------------------------------------------------------
# Figure 6: time to transfer the largest file


def figure6(report: Report, path: Path) -> FigureFile:
    title = "Figure 6: time to transfer the largest file"
    fig, (ax,) = _grid(1, panel_size=(9.0, 4.5))
    if not report.used:
        _no_data(ax, "no ok transfers in range")
        largest = 0
    else:
        largest = max(r.file_bytes for r in report.used)
        times: dict[tuple[str, str, str], list[float]] = defaultdict(list)
        for r in report.used:
            if r.file_bytes == largest:
                times[_group(r)].append(r.duration_seconds)
        keys = sorted(times, key=_group_order)
        means = [statistics.fmean(times[k]) for k in keys]
        sds = [statistics.stdev(times[k]) if len(times[k]) > 1 else 0.0 for k in keys]
        bars = ax.bar(range(len(keys)), means, yerr=sds, capsize=3, color="tab:blue", alpha=0.8)
        ax.bar_label(bars, labels=[f"{m:.1f} s" for m in means], padding=2, fontsize=8)
        ax.set_xticks(range(len(keys)), [series_label(*k) for k in keys])
        ax.set_ylabel("Mean time (s)")
    ax.set_title(f"{title} ({human_bytes(largest)})" if largest else title)
    caption = (
        f"Mean duration of the {human_bytes(largest)} transfers per protocol; error bars are one standard "
        "deviation. Smaller is better." + _imports_note(report)
        if largest
        else "No ok transfers in range."
    )
    return _save("fig6", fig, path, title, caption)


# ---------------------------------------------------------------------------------------
# Figure 7: speed vs total bytes per protocol, file size marked; one panel per file size


def figure7(report: Report, path: Path) -> FigureFile:
    title = "Figure 7: speed vs total bytes on the wire"
    sizes = sorted({row.file_bytes for row in report.table2})
    if not sizes:
        fig, (ax,) = _grid(1)
        _no_data(ax, "no ok transfers in range")
        ax.set_title(title)
        return _save("fig7", fig, path, title, "No ok transfers in range.")
    fig, axes = _grid(len(sizes))
    markers = "os^Dv<>pP*X"
    labels = [row.label for row in report.table2]
    order = list(dict.fromkeys(sorted(labels)))
    style = {label: markers[i % len(markers)] for i, label in enumerate(order)}
    color = {label: f"C{i % 10}" for i, label in enumerate(order)}  # same colour in every panel
    for ax, size in zip(axes, sizes, strict=True):
        for row in (r for r in report.table2 if r.file_bytes == size):
            members = [
                r
                for r in report.used
                if r.file_bytes == size and _group(r) == (row.protocol, row.direction, row.source)
            ]
            ax.scatter(
                [r.wire_bytes_total for r in members],
                [r.throughput_bytes_per_second for r in members],
                s=8,
                alpha=0.3,
                marker=style[row.label],
                color=color[row.label],
            )
            ax.scatter(
                [row.bytes_total],
                [row.speed_bytes_per_second],
                s=90,
                marker=style[row.label],
                color=color[row.label],
                label=row.label,
                edgecolors="black",
            )
        ax.axvline(size, color="red", linestyle="--", linewidth=2, label="file size")
        ax.set_title(f"{human_bytes(size)} file", fontsize=10)
        ax.set_xlabel("Total bytes transferred (down + up)")
        ax.set_ylabel(f"Speed ({MB_PER_S})")
        _bytes_axis(ax.xaxis)
        _speed_axis(ax.yaxis)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    caption = (
        "Per file size, each protocol's mean speed against its mean total wire bytes (large markers; small "
        "ones are single transfers). The dashed red line is the file size: points right of it carried "
        "overhead, points left of it were compressed." + _imports_note(report)
    )
    return _save("fig7", fig, path, title, caption)


# ---------------------------------------------------------------------------------------
# Figure 8: speed (a) and byte ratio (b) vs file size


def figure8(report: Report, path: Path) -> FigureFile:
    title = "Figure 8: speed and byte ratio per file size"
    fig, (speed_ax, ratio_ax) = _grid(2, max_cols=2, panel_size=(6.0, 4.2))
    if not report.table2:
        for ax in (speed_ax, ratio_ax):
            _no_data(ax, "no ok transfers in range")
    else:
        by_label: dict[str, list[Any]] = defaultdict(list)
        for row in report.table2:
            by_label[row.label].append(row)
        for label in sorted(by_label):
            rows = sorted(by_label[label], key=lambda r: r.file_bytes)
            xs = [r.file_bytes for r in rows]
            speed_ax.plot(xs, [r.speed_bytes_per_second for r in rows], "o-", label=label)
            ratio_ax.plot(xs, [r.ratio_percent for r in rows], "o-", label=label)
        ratio_ax.axhline(100.0, color="red", linestyle="--", linewidth=1, label="100% = file size")
        sizes = [r.file_bytes for r in report.table2]
        for ax in (speed_ax, ratio_ax):
            ax.set_xscale("log")
            ax.set_xlabel("File size")
            _bytes_axis(ax.xaxis, sizes)
            ax.legend(fontsize=7)
        speed_ax.set_ylabel(f"Mean speed ({MB_PER_S})")
        _speed_axis(speed_ax.yaxis)
        ratio_ax.set_ylabel("Bytes total / file size (%)")
    speed_ax.set_title("(a) speed", fontsize=10)
    ratio_ax.set_title("(b) byte ratio", fontsize=10)
    fig.suptitle(title)
    caption = (
        "(a) Mean speed per file size and protocol. (b) Mean wire bytes (down + up) as a percentage of the "
        "file size: above 100% is overhead, below is compression." + _imports_note(report)
    )
    return _save("fig8", fig, path, title, caption)


FIGURES = (("fig4", figure4), ("fig5", figure5), ("fig6", figure6), ("fig7", figure7), ("fig8", figure8))


def write_all(report: Report, out_dir: Path, progress_stream: TextIO | None = None) -> list[FigureFile]:
    progress = Progress("drew", "figures", len(FIGURES), stream=progress_stream or sys.stderr)
    written = []
    for number, (name, draw) in enumerate(FIGURES, start=1):
        written.append(draw(report, out_dir / f"{name}.png"))
        progress.update(number)
    return written
