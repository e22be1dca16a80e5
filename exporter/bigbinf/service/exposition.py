"""/metrics as cached bytes: rendered when the state changes, served as is per scrape.

The data change only when a transfer, a probe or a round ends, or the configuration is
(re)loaded — minutes apart — while Prometheus scrapes every 15 s.  client_python renders
every sample on every scrape (issue 12 measured 5 s and 258 MB for a 2,000-series
mesh), so the exposition is rendered once per state change instead, off the scrape
path, by a renderer thread that coalesces bursts; a scrape is served the last complete
rendering, never a half-updated one (it is swapped in with one reference assignment),
and the previous bytes while the next are being made.

The bytes are the same content as client_python's generate_latest (text 0.0.4) and
openmetrics.generate_latest (OpenMetrics 1.0.0) over BigbinfCollector for the same state
(tests/unit/test_exposition.py compares them): the same family order, HELP/TYPE lines,
sorted labels, escaping and Go-style floats.  Every value is state: nothing the exporter
publishes is measured at scrape time, so nothing needs rendering per scrape.  Both
formats share their sample lines (they are identical for what bigbinf publishes: no
timestamps, exemplars, units or _created samples) and differ only in the family headers
and OpenMetrics' `# EOF`, so each family's sample lines are kept once.  Content
negotiation is client_python's own (choose_encoder, gzip_accepted); a variant this module
does not render (an escaping scheme other than underscores or allow-utf-8, a future
format) is rendered by client_python per request, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import math
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, generate_latest, gzip_accepted
from prometheus_client.openmetrics import exposition as om_exposition
from prometheus_client.utils import floatToGoString

from bigbinf import __version__
from bigbinf import metrics as M
from bigbinf.metrics import (
    last_result_samples,
    move_samples,
    path_samples,
    regression_change_samples,
    regression_samples,
)
from bigbinf.passive.watcher import RATE_BUCKETS
from bigbinf.result import WAYS, SeriesKey
from bigbinf.service.collector import ExporterState, Histogram

log = logging.getLogger(__name__)

Format = Literal["text", "openmetrics"]
OM_EOF = b"# EOF\n"
# zlib level 6 (gzip's default): a 2,000-series mesh's 27.6 MB compress to 1.16 MB in
# 0.11 s here; client_python's level 9 took 0.27 s for 8% less.
GZIP_LEVEL = 6


@dataclass(frozen=True)
class Family:
    text_header: bytes  # HELP and TYPE as the text format 0.0.4 writes them
    openmetrics_header: bytes  # as OpenMetrics writes them (a counter's name without _total)
    samples: tuple[bytes, ...]  # the sample lines in blocks, the same in both formats


@dataclass(frozen=True)
class Exposition:
    """One complete rendering of one state (its `generation`), in both formats, plain
    (as chunks that share the sample lines) and gzipped."""

    generation: int
    families: tuple[Family, ...]
    text_gzip: bytes
    openmetrics_gzip: bytes

    def chunks(self, fmt: Format) -> list[bytes]:
        if fmt == "text":
            return [part for f in self.families for part in (f.text_header, *f.samples)]
        return [*(part for f in self.families for part in (f.openmetrics_header, *f.samples)), OM_EOF]

    def body(self, fmt: Format, gzipped: bool) -> list[bytes]:
        if gzipped:
            return [self.text_gzip if fmt == "text" else self.openmetrics_gzip]
        return self.chunks(fmt)


def _libc_malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


_malloc_trim = _libc_malloc_trim()


def release_freed_memory() -> None:
    """Hand the heap a replaced rendering occupied back to the OS.  glibc keeps freed
    blocks of this size (~100 KB each) in the process' heap, so without this RSS kept
    the last two renderings and their scratch (~125 MB for a 2,000-series mesh, against
    ~90 MB with it)."""
    if _malloc_trim is not None:
        _malloc_trim(0)


def _gzip(chunks: Iterable[bytes]) -> bytes:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # wbits 31: a gzip member
    out = [compressor.compress(chunk) for chunk in chunks]
    out.append(compressor.flush())
    return b"".join(out)


# ---------------------------------------------------------------- rendering


def _escape_label_value(value: str) -> str:
    # As client_python escapes label values in both formats.
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_text(pairs: Iterable[tuple[str, str]]) -> str:
    """The label set as both formats write it: sorted by name, values escaped."""
    return ",".join(f'{name}="{_escape_label_value(value)}"' for name, value in sorted(pairs))


def _series_values(key: SeriesKey) -> tuple[str, ...]:
    return (key.protocol, key.remote, key.dataset, key.direction)


def _series_order(key: SeriesKey) -> list[str]:
    return [key.protocol, key.remote, key.dataset, key.direction]  # the collector's order


class _Lines:
    """A family's sample lines, encoded to bytes a block at a time as they come: a
    rendering never holds more than one block's str objects (a 2,000-series mesh has
    200k lines; holding them all until the end grew the heap by ~40 MB a rendering)."""

    BLOCK = 2048

    def __init__(self) -> None:
        self.blocks: list[bytes] = []
        self._pending: list[str] = []

    def append(self, line: str) -> None:
        self._pending.append(line)
        if len(self._pending) >= self.BLOCK:
            self.flush()

    def flush(self) -> tuple[bytes, ...]:
        if self._pending:
            self.blocks.append("".join(self._pending).encode())
            self._pending.clear()
        return tuple(self.blocks)


class _Renderer:
    MEMO_SIZE = 4096

    def __init__(self, extra: tuple[tuple[str, str], ...] = ()) -> None:
        self.families: list[Family] = []
        # Labels on every sample (a mesh site's `site`), added here, where every sample
        # line is made, so no family can be left without them.
        self.extra = extra
        # Most values repeat (0, 1, small bucket counts) and come first; the rest (times,
        # byte totals) are mostly unique and would only grow the memo by ~10 MB.
        self._values: dict[float, str] = {}

    def value(self, v: float) -> str:
        if v == 0 and math.copysign(1.0, v) < 0:
            # -0.0 equals 0.0 as a key but client_python writes it "-0.0": not memoised.
            return floatToGoString(v)  # type: ignore[no-untyped-call,no-any-return]
        text = self._values.get(v)
        if text is None:
            # client_python's own (untyped) float formatting: its exact bytes.
            text = floatToGoString(v)  # type: ignore[no-untyped-call]
            if len(self._values) < self.MEMO_SIZE:
                self._values[v] = text
        return text

    def sample(self, lines: _Lines, name: str, labels: Iterable[tuple[str, str]], value: float) -> None:
        label_text = _label_text([*labels, *self.extra] if self.extra else labels)
        if label_text:
            lines.append(f"{name}{{{label_text}}} {self.value(value)}\n")
        else:
            lines.append(f"{name} {self.value(value)}\n")

    def histogram(self, lines: _Lines, name: str, labels: Sequence[tuple[str, str]], hist: Histogram) -> None:
        """_bucket per bound (cumulative), then _count and _sum, as HistogramMetricFamily
        adds them; `le` takes its sorted place among the labels."""
        ordered = sorted([*labels, *self.extra])
        before = "".join(f'{k}="{_escape_label_value(v)}",' for k, v in ordered if k < "le")
        after = "".join(f',{k}="{_escape_label_value(v)}"' for k, v in ordered if k > "le")
        buckets = hist.buckets()
        for le, count in buckets:
            lines.append(f'{name}_bucket{{{before}le="{le}"{after}}} {self.value(count)}\n')
        self.sample(lines, name + "_count", labels, buckets[-1][1])  # sample() adds the extra labels
        self.sample(lines, name + "_sum", labels, hist.total)

    def family(self, spec: M.Spec, mtype: str, lines: _Lines) -> None:
        """HELP and TYPE as each format writes them, then the lines.  For a counter,
        client_python's family is named without _total: the text format adds it to HELP
        and TYPE, OpenMetrics does not; the samples carry it in both."""
        name = spec.name.removesuffix("_total") if mtype == "counter" else spec.name
        text_name = name + "_total" if mtype == "counter" else name
        text_help = spec.help.replace("\\", r"\\").replace("\n", r"\n")
        om_help = text_help.replace('"', r"\"")
        self.families.append(
            Family(
                f"# HELP {text_name} {text_help}\n# TYPE {text_name} {mtype}\n".encode(),
                f"# HELP {name} {om_help}\n# TYPE {name} {mtype}\n".encode(),
                lines.flush(),
            )
        )


def render(s: ExporterState) -> tuple[Family, ...]:
    """The families of one state (a snapshot), in BigbinfCollector's order."""
    r = _Renderer(((M.SITE_LABEL, s.site),) if s.site else ())

    # Last results, then the last success, per series in the collector's order.
    specs = {spec.name: spec for spec in M.LAST_RESULT}
    lines: dict[str, _Lines] = {name: _Lines() for name in specs}
    for key in sorted(s.latest, key=_series_order):
        values = _series_values(key)
        for name, extra, value in last_result_samples(s.latest[key]):
            r.sample(lines[name], name, zip(specs[name].labels, (*values, *(v for _, v in extra)), strict=True), value)
    for key in sorted(s.last_success, key=_series_order):
        name = M.LAST_SUCCESS.name
        r.sample(lines[name], name, zip(M.LAST_SUCCESS.labels, _series_values(key), strict=True), s.last_success[key])
    for spec in M.LAST_RESULT:
        r.family(spec, "gauge", lines[spec.name])

    # Paths.
    specs = {spec.name: spec for spec in M.PATH}
    lines = {name: _Lines() for name in specs}
    for remote in sorted(s.paths):
        for name, extra, value in path_samples(s.paths[remote]):
            r.sample(lines[name], name, zip(specs[name].labels, (remote, *(v for _, v in extra)), strict=True), value)
    for spec in M.PATH:
        r.family(spec, "gauge", lines[spec.name])

    # Counters and histograms per series.
    transfers, duration, throughput, files, wire, retransmits, payload = (_Lines() for _ in range(7))
    for key in sorted(s.series, key=_series_order):
        c = s.series[key]
        series = list(zip(M.SERIES_LABELS, _series_values(key), strict=True))
        for outcome, n in c.outcomes.items():
            r.sample(transfers, M.TRANSFERS_TOTAL.name, [*series, ("outcome", outcome)], n)
        r.histogram(duration, M.DURATION_HIST.name, series, c.duration)
        r.histogram(throughput, M.THROUGHPUT_HIST.name, series, c.throughput)
        r.sample(files, M.FILE_BYTES_TOTAL.name, series, c.file_bytes)
        r.sample(retransmits, M.RETRANSMITS_TOTAL.name, series, c.retransmits)
        for way in WAYS:
            r.sample(wire, M.WIRE_BYTES_TOTAL.name, [*series, ("way", way)], c.wire_bytes[way])
            if s.payload_histograms:
                r.histogram(payload, M.PAYLOAD_SIZE_HIST.name, [*series, ("way", way)], c.payload_sizes[way])
    r.family(M.TRANSFERS_TOTAL, "counter", transfers)
    r.family(M.DURATION_HIST, "histogram", duration)
    r.family(M.THROUGHPUT_HIST, "histogram", throughput)
    r.family(M.FILE_BYTES_TOTAL, "counter", files)
    r.family(M.WIRE_BYTES_TOTAL, "counter", wire)
    r.family(M.RETRANSMITS_TOTAL, "counter", retransmits)
    if s.payload_histograms:
        r.family(M.PAYLOAD_SIZE_HIST, "histogram", payload)

    # The exporter itself.
    interval = _Lines()
    for key in sorted(s.schedule_interval, key=_series_order):
        labels = zip(M.SERIES_LABELS, _series_values(key), strict=True)
        r.sample(interval, M.SCHEDULE_INTERVAL.name, labels, s.schedule_interval[key])
    r.family(M.SCHEDULE_INTERVAL, "gauge", interval)

    def single(spec: M.Spec, mtype: str, value: float | None, labels: Sequence[tuple[str, str]] = ()) -> None:
        one = _Lines()
        if value is not None:
            r.sample(one, spec.name, labels, value)
        r.family(spec, mtype, one)

    single(M.ROUNDS_TOTAL, "counter", s.rounds_total)
    skipped = _Lines()
    for reason, n in sorted(s.rounds_skipped.items()):
        r.sample(skipped, M.ROUNDS_SKIPPED_TOTAL.name, [("reason", reason)], n)
    r.family(M.ROUNDS_SKIPPED_TOTAL, "counter", skipped)
    single(M.ROUND_OVERRUN, "gauge", s.round_overrun)
    rounds = _Lines()
    r.histogram(rounds, M.ROUND_DURATION_HIST.name, [], s.round_duration)
    r.family(M.ROUND_DURATION_HIST, "histogram", rounds)
    single(M.LAST_ROUND_END, "gauge", s.last_round_end)
    single(M.CONFIG_RELOAD_OK, "gauge", 1.0 if s.config_ok else 0.0)
    single(M.CONFIG_RELOAD_TS, "gauge", s.config_ok_timestamp)
    single(M.WEB_CONFIG_RELOAD_OK, "gauge", 1.0 if s.web_config_ok else 0.0)
    single(M.WEB_CONFIG_RELOAD_TS, "gauge", s.web_config_ok_timestamp)
    single(M.WEB_CONFIG_REFUSED_TOTAL, "counter", s.web_config_refused)
    door = s.front_door
    for spec, i in ((M.WEB_TLS_ENABLED, 0), (M.WEB_BASIC_AUTH_ENABLED, 1), (M.WEB_CLIENT_CERT_REQUIRED, 2)):
        single(spec, "gauge", None if door is None else float(door[i]))
    single(M.JOURNAL_FAILURES_TOTAL, "counter", s.journal_failures)
    single(M.JOURNAL_DROPPED_TOTAL, "counter", s.journal_dropped)
    single(M.JOURNAL_UNWRITTEN, "gauge", s.journal_unwritten)
    single(M.JOURNAL_UNWRITTEN_BASELINES, "gauge", s.journal_unwritten_baselines)
    single(M.JOURNAL_DAMAGED, "gauge", s.journal_damaged)
    single(M.JOURNAL_LOADING, "gauge", 1.0 if s.journal_loading else 0.0)
    pending = _Lines()
    for kind in sorted(s.undo_pending):
        r.sample(pending, M.UNDO_PENDING.name, [("kind", kind)], s.undo_pending[kind])
    r.family(M.UNDO_PENDING, "gauge", pending)
    rejected = _Lines()
    for reason, n in sorted(s.http_rejected.items()):
        r.sample(rejected, M.HTTP_REJECTED_TOTAL.name, [("reason", reason)], n)
    r.family(M.HTTP_REJECTED_TOTAL, "counter", rejected)
    single(M.BUILD_INFO, "gauge", 1.0, [("version", __version__)])

    # Tuning sweeps: the best setting and its gain per sweep and dataset.
    best, gain = _Lines(), _Lines()
    for name in sorted(s.sweeps):
        for b in s.sweeps[name]:
            pairs = list(zip(M.SWEEP_LABELS, (name, b.dataset, b.setting), strict=True))
            r.sample(best, M.SWEEP_BEST.name, pairs, b.throughput_bytes_per_second)
            if b.gain_ratio is not None:
                r.sample(gain, M.SWEEP_GAIN.name, pairs, b.gain_ratio)
    r.family(M.SWEEP_BEST, "gauge", best)
    r.family(M.SWEEP_GAIN, "gauge", gain)

    # The regression test: its gauges per tested series.
    lines = {spec.name: _Lines() for spec in M.REGRESSION}
    for key in sorted(s.regressions, key=_series_order):
        pairs = list(zip(M.SERIES_LABELS, _series_values(key), strict=True))
        for name, value in regression_samples(s.regressions[key]):
            r.sample(lines[name], name, pairs, value)
    for spec in M.REGRESSION:
        r.family(spec, "gauge", lines[spec.name])
    # What changed when each open regression began.
    lines = {spec.name: _Lines() for spec in M.REGRESSION_CHANGE}
    specs = {spec.name: spec for spec in M.REGRESSION_CHANGE}
    for key in sorted(s.regressions, key=_series_order):
        for name, extra_values, value in regression_change_samples(s.regressions[key]):
            labelled = (*_series_values(key), *extra_values)
            r.sample(lines[name], name, zip(specs[name].labels, labelled, strict=True), value)
    for spec in M.REGRESSION_CHANGE:
        r.family(spec, "gauge", lines[spec.name])

    # plan-move's predictions per remote and configured size.
    specs = {spec.name: spec for spec in M.MOVES}
    lines = {spec.name: _Lines() for spec in M.MOVES}
    for remote, size in sorted(s.moves):
        for name, extra, value in move_samples(s.moves[(remote, size)]):
            values = (remote, size, *(v for _, v in extra))
            r.sample(lines[name], name, zip(specs[name].labels, values, strict=True), value)
    for spec in M.MOVES:
        r.family(spec, "gauge", lines[spec.name])

    _passive(r, s)

    # A mesh site's slots and round plan (only a mesh exporter publishes them).
    if s.site:
        slot_values: tuple[tuple[M.Spec, str, dict[SeriesKey, int] | dict[SeriesKey, float]], ...] = (
            (M.SLOT_OVERRUNS_TOTAL, "counter", s.slot_overruns),
            (M.LAST_SLOT_OVERRUN, "gauge", s.slot_last_overrun),
        )
        for spec, mtype, per_key in slot_values:
            per_series = _Lines()
            for series_key in sorted(per_key, key=_series_order):
                labels = zip(M.SERIES_LABELS, _series_values(series_key), strict=True)
                r.sample(per_series, spec.name, labels, per_key[series_key])
            r.family(spec, mtype, per_series)
        missed = _Lines()
        for series_key, reason in sorted(s.slots_missed, key=lambda m: (_series_order(m[0]), m[1])):
            labels = zip(M.SLOTS_MISSED_TOTAL.labels, (*_series_values(series_key), reason), strict=True)
            r.sample(missed, M.SLOTS_MISSED_TOTAL.name, labels, s.slots_missed[(series_key, reason)])
        r.family(M.SLOTS_MISSED_TOTAL, "counter", missed)
        plan = s.mesh_round
        single(M.ROUND_PLANNED, "gauge", plan.planned_seconds if plan else None)
        single(M.ROUND_PERIOD, "gauge", plan.period_seconds if plan else None)
        single(M.ROUND_FITS, "gauge", (1.0 if plan.fits else 0.0) if plan else None)
        single(M.GUARD, "gauge", plan.guard_seconds if plan else None)
        single(M.PLAN_INFO, "gauge", 1.0 if plan else None, [("fingerprint", plan.fingerprint)] if plan else [])
    return tuple(r.families)


def _passive(r: _Renderer, s: ExporterState) -> None:
    """The passive watcher's families, as BigbinfCollector._passive yields them (empty
    while no watcher runs)."""
    p = s.passive
    flows, moved, rates = _Lines(), _Lines(), _Lines()
    if p is not None:
        for labels, n in sorted(p.flows.items()):
            r.sample(flows, M.PASSIVE_FLOWS_TOTAL.name, zip(M.PASSIVE_FLOWS_TOTAL.labels, labels, strict=True), n)
        for labels3, n in sorted(p.bytes.items()):
            r.sample(moved, M.PASSIVE_BYTES_TOTAL.name, zip(M.PASSIVE_BYTES_TOTAL.labels, labels3, strict=True), n)
        for labels2, counts in sorted(p.rates.items()):
            hist = Histogram(RATE_BUCKETS, [float(c) for c in counts], p.rate_sums.get(labels2, 0.0))
            r.histogram(
                rates, M.PASSIVE_RATE_HIST.name, list(zip(M.PASSIVE_RATE_HIST.labels, labels2, strict=True)), hist
            )
    r.family(M.PASSIVE_FLOWS_TOTAL, "counter", flows)
    r.family(M.PASSIVE_BYTES_TOTAL, "counter", moved)
    r.family(M.PASSIVE_RATE_HIST, "histogram", rates)
    for spec, mtype, value in (
        (M.PASSIVE_SKIPPED_TOTAL, "counter", p.skipped if p else None),
        (M.PASSIVE_MISSED_TOTAL, "counter", p.missed if p else None),
        (M.PASSIVE_STRETCHED_TOTAL, "counter", p.stretched if p else None),
        (M.PASSIVE_OPEN, "gauge", p.open_flows if p else None),
        (M.PASSIVE_LISTING_CPU, "gauge", p.listing_seconds if p else None),
        (M.PASSIVE_INTERVAL, "gauge", p.interval_seconds if p else None),
    ):
        one = _Lines()
        if value is not None:
            r.sample(one, spec.name, (), value)
        r.family(spec, mtype, one)


def build(s: ExporterState) -> Exposition:
    families = render(s)
    partial = Exposition(s.generation, families, b"", b"")
    return Exposition(s.generation, families, _gzip(partial.chunks("text")), _gzip(partial.chunks("openmetrics")))


def cached_format(encoder: Callable[..., bytes]) -> Format | None:
    """Which cached rendering serves what choose_encoder chose, or None when it is a
    variant this module does not render.  Escaping only matters for names outside the
    legacy character set, and every bigbinf metric and label name is inside it."""
    if encoder is generate_latest:
        return "text"
    if not isinstance(encoder, functools.partial) or encoder.args:
        return None
    if encoder.keywords.get("escaping", om_exposition.UNDERSCORES) not in (
        om_exposition.UNDERSCORES,
        om_exposition.ALLOWUTF8,
    ):
        return None
    if encoder.func is generate_latest and set(encoder.keywords) <= {"escaping"}:
        return "text"
    # OpenMetrics from 2.0.0 differs only in native histograms, which bigbinf has none
    # of; still, only the 1.x rendering is what this module was checked against.
    if (
        encoder.func is om_exposition.generate_latest
        and set(encoder.keywords) <= {"escaping", "version"}
        and str(encoder.keywords.get("version", "1.0.0")).split(".")[0] == "1"
    ):
        return "openmetrics"
    return None


# ---------------------------------------------------------------- the cache


class MetricsCache:
    """The last complete Exposition of `state`, re-rendered by a background thread after
    every change.  `registry` (with BigbinfCollector on it) renders the rare negotiated
    variant that is not cached."""

    # After a change, wait this long before rendering so that a burst (a reload: prime,
    # forget_paths, config status) becomes one rendering.
    SETTLE_SECONDS = 0.05

    def __init__(self, state: ExporterState, registry: CollectorRegistry) -> None:
        self.state = state
        self.registry = registry
        self._current: Exposition | None = None
        self._render_lock = threading.Lock()
        self._dirty = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        state.subscribe(self._dirty.set)

    @property
    def current(self) -> Exposition:
        exposition = self._current
        if exposition is None:  # before start(): render now rather than serve nothing
            exposition = self.refresh()
        return exposition

    def refresh(self) -> Exposition:
        """Render the state as it is now and make it current (unless a newer one already is)."""
        with self._render_lock:
            current = self._current
            if current is not None and current.generation == self.state.generation:
                return current
            exposition = build(self.state.snapshot())
            if current is None or exposition.generation > current.generation:
                self._current = exposition  # one reference swap: a scrape sees old or new, whole
            del current  # the replaced rendering, freed here unless a scrape still sends it
            release_freed_memory()
            return self._current or exposition

    def start(self) -> None:
        """Render the state synchronously (the first scrape finds every primed series),
        then keep rendering on change in the background."""
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="metrics-render", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._dirty.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._dirty.wait()
            if self._stopping.wait(self.SETTLE_SECONDS):
                return
            # Cleared before the snapshot: a change during the rendering sets it again,
            # and is rendered next round.
            self._dirty.clear()
            try:
                self.refresh()
            except Exception:  # a bug must not stop /metrics: the previous bytes stay served
                log.exception("rendering /metrics failed; serving the previous rendering")

    def response(self, accept: str, accept_encoding: str) -> tuple[list[bytes], str, bool]:
        """(body chunks, Content-Type, gzipped?) for a scrape with these request headers."""
        encoder, content_type = choose_encoder(accept)
        gzipped = gzip_accepted(accept_encoding)
        fmt = cached_format(encoder)
        if fmt is None:
            body = encoder(self.registry)
            return [_gzip([body]) if gzipped else body], content_type, gzipped
        return self.current.body(fmt, gzipped), content_type, gzipped
