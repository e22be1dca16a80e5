"""What changed when a regression began (issue 35, "say what changed"): from the journal,
the series' runs before its start (the baseline weeks) against its runs since, and the
path baselines of the remote over the same two spans.  One function (`what_changed`)
computes it; `describe` says it in a line, for `advise`, the log and the alert (through
the gauges metrics.regression_change_samples publishes)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bigbinf.result import PathBaseline, Result, SeriesKey


@dataclass(frozen=True)
class Side:
    """One span's runs (before the start, or since it) and path probes, summarised."""

    runs: int = 0
    throughput: float | None = None  # median bytes/s of the ok runs
    verdicts: dict[str, int] = field(default_factory=dict)  # limited_by -> runs ("" left out)
    retransmit_ratio: float | None = None  # retransmitted segments / packets, over the span's captured runs
    congestion_control: str = ""  # the most common of the runs'
    rtt_min_seconds: float | None = None  # median of the probes'
    loss_ratio: float | None = None
    mtu_bytes: int | None = None
    bandwidth_bytes_per_second: float | None = None
    buffer_max_bytes: dict[str, float] = field(default_factory=dict)  # side.sysctl -> the last probe's

    @property
    def verdict(self) -> str:
        """The most common verdict ("" if none)."""
        return max(sorted(self.verdicts), key=lambda v: self.verdicts[v]) if self.verdicts else ""


@dataclass(frozen=True)
class Change:
    before: Side
    after: Side


def _median(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def _side(runs: Sequence[Result], probes: Sequence[PathBaseline]) -> Side:
    ok = [r for r in runs if r.outcome == "ok"]
    captured = [r for r in ok if r.wire_measured and r.packets_down + r.packets_up > 0]
    packets = sum(r.packets_down + r.packets_up for r in captured)
    answered = [p for p in probes if p.probes_sent]
    last = max(probes, key=lambda p: p.start_timestamp) if probes else None
    buffers = {
        f"{side}.{name}": value
        for side, values in (last.buffers.items() if last else ())
        for name, value in values.items()
        if name in ("tcp_rmem", "tcp_wmem", "rmem_max", "wmem_max")
    }
    return Side(
        runs=len(ok),
        throughput=_median(r.throughput_bytes_per_second for r in ok),
        verdicts=dict(Counter(r.limited_by for r in ok if r.limited_by)),
        retransmit_ratio=sum(r.retransmits_wire for r in captured) / packets if packets else None,
        congestion_control=Counter(r.congestion_control for r in ok if r.congestion_control).most_common(1)[0][0]
        if any(r.congestion_control for r in ok)
        else "",
        rtt_min_seconds=_median(p.rtt_min_seconds for p in probes),
        loss_ratio=_median(p.loss_ratio for p in answered),
        mtu_bytes=int(m) if (m := _median(p.mtu_bytes for p in probes)) is not None else None,
        bandwidth_bytes_per_second=_median(p.bandwidth_bytes_per_second for p in probes),
        buffer_max_bytes=buffers,
    )


def what_changed(
    key: SeriesKey,
    since: float,
    baseline_seconds: float,
    results: Iterable[Result],
    baselines: Iterable[PathBaseline],
) -> Change:
    """The series' exporter runs and its remote's path probes of the `baseline_seconds`
    before `since` against those from `since` on."""
    before_runs: list[Result] = []
    after_runs: list[Result] = []
    before_probes: list[PathBaseline] = []
    after_probes: list[PathBaseline] = []
    start = since - baseline_seconds
    for r in results:
        if r.source == "exporter" and r.key == key and r.start_timestamp >= start:
            (after_runs if r.start_timestamp >= since else before_runs).append(r)
    for b in baselines:
        if b.remote == key.remote and b.start_timestamp >= start:
            (after_probes if b.start_timestamp >= since else before_probes).append(b)
    return Change(_side(before_runs, before_probes), _side(after_runs, after_probes))


def _mix(side: Side) -> str:
    total = sum(side.verdicts.values())
    return ", ".join(f"{v} {n} of {total}" for v, n in sorted(side.verdicts.items(), key=lambda x: -x[1])) or "none"


def _pair(label: str, a: float | None, b: float | None, scale: float, fmt: str) -> str:
    def show(v: float | None) -> str:
        return format(v * scale, fmt) if v is not None else "-"

    return f"{label} {show(a)} -> {show(b)}"


def describe(change: Change) -> str:
    """One paragraph: before -> since the start."""
    a, b = change.before, change.after
    parts = [
        f"runs {a.runs} -> {b.runs}",
        _pair("median throughput MB/s", a.throughput, b.throughput, 1e-6, ".3g"),
        f"verdicts {_mix(a)} -> {_mix(b)}",
        _pair("path RTT min ms", a.rtt_min_seconds, b.rtt_min_seconds, 1e3, ".3g"),
        _pair("loss %", a.loss_ratio, b.loss_ratio, 100, ".2g"),
        _pair("MTU", a.mtu_bytes, b.mtu_bytes, 1, ".0f"),
        _pair("bandwidth estimate MB/s", a.bandwidth_bytes_per_second, b.bandwidth_bytes_per_second, 1e-6, ".3g"),
        _pair("retransmits %", a.retransmit_ratio, b.retransmit_ratio, 100, ".2g"),
        f"congestion control {a.congestion_control or '-'} -> {b.congestion_control or '-'}",
    ]
    keys = sorted(set(a.buffer_max_bytes) | set(b.buffer_max_bytes))
    changed = [k for k in keys if a.buffer_max_bytes.get(k) != b.buffer_max_bytes.get(k)]
    moved = ", ".join(f"{k} {a.buffer_max_bytes.get(k, '-')} -> {b.buffer_max_bytes.get(k, '-')}" for k in changed)
    parts.append(f"buffer maxima {moved or 'unchanged'}")
    return "; ".join(parts)
