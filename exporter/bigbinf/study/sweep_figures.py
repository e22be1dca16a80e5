"""The figures of `sweep-report` (study/sweep_report.py), in MB/s, drawn with Agg.

Per dataset: throughput against parallel streams with one line per concurrency (and per
value of any other swept dimension), as the poster drew GridFTP's; a heatmap of the mean
over parallel x concurrency where the sweep varied both; otherwise a bar per setting.
Error bars are the 95% confidence intervals of the means.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 100
MB = 1e6  # as sweep_report.MB (this module does not import it: sweep_report imports this one)
# The verdict's types (sweep_report.SweepVerdict, DatasetVerdict, Row), read by attribute.
SweepVerdict = Any
DatasetVerdict = Any
Row = Any


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=DPI)
    return path


def _err(row: Row) -> tuple[float, float]:
    if row.mean is None or row.ci_low is None or row.ci_high is None:
        return 0.0, 0.0
    return (row.mean - row.ci_low) / MB, (row.ci_high - row.mean) / MB


def _human(key: str, value: Any) -> str:
    if key == "tcp_buffer_max" and isinstance(value, int):
        for unit, factor in (("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= factor and value % factor == 0:
                return f"{value // factor} {unit}"
    return str(value)


def streams_figure(d: DatasetVerdict, path: Path) -> Path | None:
    rows = [r for r in d.rows if "parallel" in r.values and r.mean is not None]
    if not rows:
        return None
    lines: dict[tuple[tuple[str, Any], ...], list[Row]] = defaultdict(list)
    for r in rows:
        lines[tuple((k, v) for k, v in r.values.items() if k != "parallel")].append(r)
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    for key, members in sorted(lines.items(), key=lambda kv: str(kv[0])):
        members.sort(key=lambda r: r.values["parallel"])
        errs = [_err(r) for r in members]
        ax.errorbar(
            [r.values["parallel"] for r in members],
            [(r.mean or 0.0) / MB for r in members],
            yerr=[[e[0] for e in errs], [e[1] for e in errs]],
            marker="o",
            capsize=3,
            label=", ".join(f"{k}={_human(k, v)}" for k, v in key) or "throughput",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r.values["parallel"] for r in rows}))
    ax.get_xaxis().set_major_formatter("{x:g}")
    ax.set_xlabel("Parallel streams (-p)")
    ax.set_ylabel("Mean throughput (MB/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{d.dataset}: throughput vs parallel streams (95% CI)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return _save(fig, path)


def heatmap_figure(d: DatasetVerdict, path: Path) -> Path | None:
    rows = [r for r in d.rows if {"parallel", "concurrency"} <= set(r.values) and r.mean is not None]
    ps = sorted({r.values["parallel"] for r in rows})
    cs = sorted({r.values["concurrency"] for r in rows})
    if len(ps) < 2 or len(cs) < 2:
        return None
    grid: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in rows:  # other swept dimensions: their best value per cell
        grid[(r.values["concurrency"], r.values["parallel"])].append((r.mean or 0.0) / MB)
    data = [[max(grid.get((c, p), [float("nan")])) for p in ps] for c in cs]
    fig = Figure(figsize=(6, 4.5))
    ax = fig.add_subplot()
    image = ax.imshow(data, origin="lower", cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(ps)), [str(p) for p in ps])
    ax.set_yticks(range(len(cs)), [str(c) for c in cs])
    ax.set_xlabel("Parallel streams (-p)")
    ax.set_ylabel("Concurrency (-cc)")
    for i, row in enumerate(data):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.1f}", ha="center", va="center", color="w", fontsize="small")
    fig.colorbar(image, ax=ax, label="Mean throughput (MB/s)")
    ax.set_title(f"{d.dataset}: mean throughput, parallel x concurrency")
    fig.tight_layout()
    return _save(fig, path)


def bars_figure(d: DatasetVerdict, path: Path) -> Path:
    rows = [r for r in d.rows if r.mean is not None]
    fig = Figure(figsize=(max(5.0, 1.2 * len(rows) + 2), 4.5))
    ax = fig.add_subplot()
    errs = [_err(r) for r in rows]
    ax.bar(
        range(len(rows)),
        [(r.mean or 0.0) / MB for r in rows],
        yerr=[[e[0] for e in errs], [e[1] for e in errs]],
        capsize=3,
    )
    ax.set_xticks(range(len(rows)), [r.setting.replace(",", "\n") for r in rows], fontsize="small")
    ax.set_ylabel("Mean throughput (MB/s)")
    ax.set_title(f"{d.dataset}: settings by mean throughput (95% CI)")
    fig.tight_layout()
    return _save(fig, path)


def write_all(v: SweepVerdict, out: Path) -> list[Path]:
    written: list[Path] = []
    for d in v.datasets:
        streams = streams_figure(d, out / f"sweep-{d.dataset}-streams.png")
        heat = heatmap_figure(d, out / f"sweep-{d.dataset}-heatmap.png")
        written += [p for p in (streams, heat) if p is not None]
        if streams is None and heat is None:
            written.append(bars_figure(d, out / f"sweep-{d.dataset}-settings.png"))
    return written
