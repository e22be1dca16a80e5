"""`sweep-report`: the verdict of a tuning sweep (service/sweeps.py) from the journal.

    bigbinf-exporter sweep-report --journal J --sweep ID|NAME --out DIR

reads the sweep's runs (Result.source "sweep"; a NAME picks its latest run) and writes
into DIR:

    sweep.csv     per dataset, the settings ranked by mean throughput: n, mean and its
                  95% confidence interval (Student's t), SD, mean retransmission rate,
                  congestion control read back, Welch's t-test against the best, whether
                  the setting is in the top group, and the recommendation
    sweep.json    the same, plus the gain of the best over the baseline with its interval
    index.html    the tables and the figures
    sweep-<dataset>-streams.png   throughput (MB/s) against parallel streams, one line per
                  concurrency (the poster's figure), where the sweep varied `parallel`
    sweep-<dataset>-heatmap.png   mean throughput (MB/s) over parallel x concurrency

The top group: the best setting and every setting whose mean the Welch test cannot tell
from the best's (p >= 0.05).  The recommendation: the top group's cheapest setting (the
fewest streams and connections: the smallest product of its numeric options), since
more streams than needed cost the path's other users; ties go to the higher mean.  The
gain is the best's mean over the baseline's; its interval is the Welch interval of the
difference of the two means over the baseline's mean (the baseline's mean taken as
known: an approximation that is close when the baseline's runs agree).

Needs scipy and matplotlib (the optional extra `report`), like `report`.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bigbinf.journal.store import Journal, SkippedLine
from bigbinf.result import Result
from bigbinf.study import stats
from bigbinf.study.common import check_journal, journal_read_error, require_extras
from bigbinf.usage import UsageError

SOURCE = "sweep"
BASELINE_KEY = "baseline"
CONFIDENCE = 0.95
ALPHA = 0.05
MB = 1e6  # throughput in MB/s (decimal, as the poster's)
MiB = 1 << 20


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float | None, float | None]:
    """The mean's two-sided confidence interval from Student's t (None for n < 2)."""
    from scipy import stats as sps  # optional extra `report`

    if len(values) < 2:
        return None, None
    m, s = statistics.fmean(values), statistics.stdev(values)
    half = float(sps.t.ppf((1 + confidence) / 2, len(values) - 1)) * s / math.sqrt(len(values))
    return m - half, m + half


def welch_interval(
    a: Sequence[float], b: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float | None, float | None]:
    """The confidence interval of mean(a) - mean(b) with Welch's degrees of freedom."""
    from scipy import stats as sps  # optional extra `report`

    if len(a) < 2 or len(b) < 2:
        return None, None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(a) - statistics.fmean(b)
    if va + vb == 0:
        return diff, diff
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = float(sps.t.ppf((1 + confidence) / 2, df)) * math.sqrt(va + vb)
    return diff - half, diff + half


@dataclass
class Row:
    dataset: str
    rank: int
    setting: str
    values: dict[str, Any]
    n: int
    failed: int
    mean: float | None  # bytes/s
    ci_low: float | None
    ci_high: float | None
    sd: float | None
    retransmit_rate: float | None  # mean over the ok runs
    congestion_control: str  # what the kernel read back ("" unless read)
    welch_p_vs_best: float | None
    top_group: bool
    baseline: bool
    recommended: bool = False


@dataclass
class DatasetVerdict:
    dataset: str
    rows: list[Row]
    best: str
    recommended: str
    baseline: str
    gain: float | None
    gain_low: float | None
    gain_high: float | None
    welch_p_best_vs_baseline: float | None
    significant: bool | None
    note: str = ""


@dataclass
class SweepVerdict:
    sweep: str
    name: str
    protocol: str
    remote: str
    direction: str
    runs: int
    datasets: list[DatasetVerdict] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = _finite(asdict(self))
        return data


def retransmit_rate(r: Result) -> float | None:
    """Retransmitted segments per data segment (the sender's count where known, else the
    capture's), as service/sweeps.py publishes it."""
    segments = r.packets_down if r.direction == "download" else r.packets_up
    retransmits = r.retransmits_sender if r.retransmits_sender is not None else r.retransmits_wire
    return retransmits / segments if segments > 0 else None


def _cost(values: dict[str, Any]) -> float:
    cost = 1.0
    for key, value in values.items():
        if key != BASELINE_KEY and isinstance(value, int) and not isinstance(value, bool) and key != "tcp_buffer_max":
            cost *= value
    return cost


def select_runs(results: Iterable[Result], wanted: str) -> list[Result]:
    """The runs of sweep run `wanted`, or of the latest run of the sweep named `wanted`."""
    runs = [r for r in results if r.source == SOURCE and r.sweep]
    exact = [r for r in runs if r.sweep == wanted]
    if exact:
        return exact
    named = [r for r in runs if r.sweep_name == wanted]
    if not named:
        known = sorted({r.sweep for r in runs})
        raise UsageError(
            f"--sweep {wanted!r}: no such sweep run or sweep name in the journal; runs there: "
            f"{', '.join(known[-10:]) or 'none'}"
        )
    latest = max(named, key=lambda r: r.start_timestamp).sweep
    return [r for r in named if r.sweep == latest]


def verdict(runs: Sequence[Result]) -> SweepVerdict:
    first = runs[0]
    out = SweepVerdict(first.sweep, first.sweep_name, first.protocol, first.remote, first.direction, len(runs))
    base_label = next((r.sweep_setting.get(BASELINE_KEY) for r in runs if r.sweep_setting.get(BASELINE_KEY)), "")
    for dataset in sorted({r.dataset for r in runs}):
        out.datasets.append(_dataset_verdict(dataset, [r for r in runs if r.dataset == dataset], str(base_label)))
    return out


def _dataset_verdict(dataset: str, runs: Sequence[Result], base_label: str) -> DatasetVerdict:
    by_setting: dict[str, list[Result]] = defaultdict(list)
    for r in runs:
        by_setting[r.sweep_label].append(r)
    speeds = {
        label: [r.throughput_bytes_per_second for r in rs if r.outcome == "ok"] for label, rs in by_setting.items()
    }
    ranked = sorted(by_setting, key=lambda label: (-(statistics.fmean(speeds[label]) if speeds[label] else -1), label))
    best = ranked[0]
    rows = []
    for rank, label in enumerate(ranked, start=1):
        rs, v = by_setting[label], speeds[label]
        low, high = t_interval(v)
        _t, _df, p, _note = stats.welch(v, speeds[best]) if label != best else (None, None, None, "")
        rates = [x for x in (retransmit_rate(r) for r in rs if r.outcome == "ok") if x is not None]
        read_back = sorted({r.congestion_control for r in rs if r.congestion_control})
        values = {k: val for k, val in rs[0].sweep_setting.items() if k != BASELINE_KEY}
        rows.append(
            Row(
                dataset=dataset,
                rank=rank,
                setting=label,
                values=values,
                n=len(v),
                failed=len(rs) - len(v),
                mean=statistics.fmean(v) if v else None,
                ci_low=low,
                ci_high=high,
                sd=stats.sd(v),
                retransmit_rate=statistics.fmean(rates) if rates else None,
                congestion_control=",".join(read_back),
                welch_p_vs_best=p,
                top_group=bool(v) and (label == best or (p is not None and p >= ALPHA)),
                baseline=label == base_label,
            )
        )
    top = [row for row in rows if row.top_group]
    recommended = min(top, key=lambda row: (_cost(row.values), -(row.mean or 0.0))) if top else rows[0]
    recommended.recommended = True
    base_speeds = speeds.get(base_label, [])
    gain = gain_low = gain_high = p_base = None
    significant = None
    note = ""
    if not base_speeds:
        note = f"the baseline setting {base_label or '(unknown)'} has no ok run: no gain"
    elif best == base_label:
        gain, note = 1.0, "the baseline is the best setting"
    else:
        base_mean = statistics.fmean(base_speeds)
        gain = statistics.fmean(speeds[best]) / base_mean
        low, high = welch_interval(speeds[best], base_speeds)
        if low is not None and high is not None:
            gain_low, gain_high = 1 + low / base_mean, 1 + high / base_mean
        _t, _df, p_base, welch_note = stats.welch(speeds[best], base_speeds, "of the best and of the baseline")
        significant = None if p_base is None else p_base < ALPHA
        note = welch_note
    return DatasetVerdict(
        dataset,
        rows,
        best,
        recommended.setting,
        base_label,
        gain,
        gain_low,
        gain_high,
        p_base,
        significant,
        note,
    )


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


# ---------------------------------------------------------------- writing

CSV_HEADINGS = (
    "Dataset",
    "Rank",
    "Setting",
    "n",
    "Failed",
    "Mean (MB/s)",
    "95% CI low (MB/s)",
    "95% CI high (MB/s)",
    "SD (MB/s)",
    "Retransmission rate (%)",
    "Congestion control (read back)",
    "Welch p vs best",
    "Top group",
    "Baseline",
    "Recommended",
)


def _mb(value: float | None) -> float | None:
    return None if value is None else round(value / MB, 3)


def _csv_rows(v: SweepVerdict) -> Iterable[list[Any]]:
    for d in v.datasets:
        for r in d.rows:
            yield [
                r.dataset,
                r.rank,
                r.setting,
                r.n,
                r.failed,
                _mb(r.mean),
                _mb(r.ci_low),
                _mb(r.ci_high),
                _mb(r.sd),
                None if r.retransmit_rate is None else round(r.retransmit_rate * 100, 4),
                r.congestion_control,
                r.welch_p_vs_best,
                "yes" if r.top_group else "no",
                "yes" if r.baseline else "no",
                "yes" if r.recommended else "no",
            ]


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def gain_sentence(d: DatasetVerdict) -> str:
    if d.gain is None:
        return d.note
    if d.best == d.baseline:
        return f"the baseline {d.baseline} is the best setting"
    known = d.gain_low is not None and d.gain_high is not None
    interval = f" (95% CI {_fmt(d.gain_low)}-{_fmt(d.gain_high)}x)" if known else ""
    sig = (
        "n/a"
        if d.welch_p_best_vs_baseline is None
        else f"Welch p = {stats_format_p(d.welch_p_best_vs_baseline)}, "
        + ("significant" if d.significant else "not significant")
    )
    return f"best {d.best} is {_fmt(d.gain)}x the baseline {d.baseline}{interval}; {sig}"


def stats_format_p(p: float) -> str:
    from bigbinf.study.common import format_p

    return format_p(p)


def render_html(v: SweepVerdict) -> str:
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Sweep {e(v.sweep)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #bbb;padding:2px 6px;text-align:right}</style></head><body>",
        f"<h1>Tuning sweep {e(v.name)}</h1>",
        f"<p>Run {e(v.sweep)}: protocol {e(v.protocol)}, remote {e(v.remote)}, {e(v.direction)}, {v.runs} runs. "
        "Settings ranked by mean throughput (MB/s = 10<sup>6</sup> bytes/s) with the 95% confidence interval of "
        "the mean (Student's t); the top group is the best and every setting Welch's t-test cannot tell from it "
        "(p &ge; 0.05); the recommendation is the top group's setting with the fewest streams and connections. "
        "Retransmission rate: retransmitted segments per data segment (the sender's count where known).</p>",
    ]
    for d in v.datasets:
        parts.append(f"<h2>Dataset {e(d.dataset)}</h2>")
        parts.append(f"<p><b>Recommended: {e(d.recommended)}</b>. {e(gain_sentence(d))}.</p>")
        head = "".join(f"<th>{e(h)}</th>" for h in CSV_HEADINGS[1:])
        body = []
        for row in _csv_rows(SweepVerdict(v.sweep, v.name, v.protocol, v.remote, v.direction, v.runs, [d])):
            body.append("<tr>" + "".join(f"<td>{e('' if c is None else str(c))}</td>" for c in row[1:]) + "</tr>")
        parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
        for name in v.figures:
            if name.startswith(f"sweep-{d.dataset}-"):
                parts.append(f"<p><img src='{e(name)}' alt='{e(name)}'></p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write(v: SweepVerdict, out: Path, with_figures: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    if with_figures:
        from bigbinf.study import sweep_figures

        for path in sweep_figures.write_all(v, out):
            v.figures.append(path.name)
            written.append(path)
    csv_path = out / "sweep.csv"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_HEADINGS)
        for row in _csv_rows(v):
            writer.writerow(["" if c is None else c for c in row])
    json_path = out / "sweep.json"
    json_path.write_text(json.dumps(v.to_json(), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    index = out / "index.html"
    index.write_text(render_html(v), encoding="utf-8")
    return [*written, csv_path, json_path, index]


# ---------------------------------------------------------------- CLI


def register(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    p = subparsers.add_parser(
        "sweep-report",
        parents=list(parents),
        help="the verdict of a tuning sweep: ranking, confidence intervals, gain, figures",
        description="Rank a sweep's settings per dataset by mean throughput with 95%% confidence intervals, "
        "test the best against the baseline (Welch), and draw throughput against streams and concurrency.",
    )
    p.add_argument("--journal", required=True, metavar="PATH", help="journal the sweep's runs were written to")
    p.add_argument(
        "--sweep", required=True, metavar="ID|NAME", help="a sweep run id, or a sweep's name (its latest run)"
    )
    p.add_argument("--no-figures", action="store_true", help="tables only (no matplotlib needed)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for index.html, sweep.csv, sweep.json, PNGs")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        require_extras("sweep-report", figures=not args.no_figures)
        path = Path(args.journal)
        check_journal(path)
        unreadable: list[SkippedLine] = []
        try:
            runs = select_runs(Journal(path).read(unreadable), args.sweep)
        except OSError as exc:
            raise journal_read_error(path, exc) from None
        for line in unreadable:
            print(f"sweep-report: {line}", file=sys.stderr)
        v = verdict(runs)
        out = Path(args.out)
        try:
            write(v, out, with_figures=not args.no_figures)
        except OSError as exc:
            raise UsageError(
                f"--out {out}: cannot write ({exc.strerror or exc}); choose a writable directory", 1
            ) from None
    except UsageError as exc:
        print(f"bigbinf-exporter sweep-report: error: {exc}", file=sys.stderr)
        return exc.code
    for d in v.datasets:
        print(f"sweep {v.sweep}, {d.dataset}: recommended {d.recommended}; {gain_sentence(d)}", file=sys.stderr)
    print(f"sweep-report: wrote {out / 'index.html'}", file=sys.stderr)
    return 0
