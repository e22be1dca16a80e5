"""What /metrics shows: state fed by results, and the collector over it.

As node_exporter does, the metric descriptors are defined once (bigbinf/metrics.py) and
every collect() builds new metric families from a snapshot of the state, so a reader never
sees a half-updated series and never measures anything itself.  The exporter does not
call it per scrape: service/exposition.py renders the same content to bytes when the
state changes (every mutation below bumps `generation` and tells the subscribers) and
serves those; the collector stays on the app's registry as the reference rendering and
for tests (`get_sample_value`).

Counters and histograms start at 0 for every configured series (`prime`), so Prometheus
sees the series before its first transfer and `increase()` counts that first transfer.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from bigbinf import __version__
from bigbinf import metrics as M
from bigbinf.history.moveplan import Prediction
from bigbinf.history.regression import Verdict
from bigbinf.metrics import (
    last_result_samples,
    move_samples,
    path_samples,
    regression_change_samples,
    regression_samples,
)
from bigbinf.passive.watcher import RATE_BUCKETS, PassiveCounts
from bigbinf.result import OUTCOMES, PAYLOAD_BUCKETS, WAYS, PathBaseline, Result, SeriesKey


@dataclass
class Histogram:
    bounds: Sequence[float]
    counts: list[float] = field(default_factory=list)  # per bucket, not cumulative; last = +Inf
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += n
        self.total += value * n

    def add_counts(self, counts: Sequence[int], sums: float) -> None:
        for i, c in enumerate(counts):
            self.counts[i] += c
        self.total += sums

    def copy(self) -> Histogram:
        return Histogram(self.bounds, list(self.counts), self.total)

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0.0
        for bound, count in zip([*self.bounds, float("inf")], self.counts, strict=True):
            running += count
            out.append(("+Inf" if bound == float("inf") else _fmt(bound), running))
        return out


def _fmt(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else repr(bound)


@dataclass
class SeriesCounters:
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    duration: Histogram = field(default_factory=lambda: Histogram(M.DURATION_BUCKETS))
    throughput: Histogram = field(default_factory=lambda: Histogram(M.THROUGHPUT_BUCKETS))
    file_bytes: int = 0
    wire_bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WAYS, 0))
    retransmits: int = 0
    payload_sizes: dict[str, Histogram] = field(default_factory=lambda: {w: Histogram(PAYLOAD_BUCKETS) for w in WAYS})

    def copy(self) -> SeriesCounters:
        return SeriesCounters(
            outcomes=dict(self.outcomes),
            duration=self.duration.copy(),
            throughput=self.throughput.copy(),
            file_bytes=self.file_bytes,
            wire_bytes=dict(self.wire_bytes),
            retransmits=self.retransmits,
            payload_sizes={way: h.copy() for way, h in self.payload_sizes.items()},
        )


@dataclass(frozen=True)
class SweepBest:
    """A sweep's verdict on one dataset, as published (service/sweeps.py): its best setting,
    that setting's mean throughput, and the gain over the baseline setting."""

    sweep: str  # the sweep's name in the config
    sweep_id: str  # the run it comes from
    dataset: str
    setting: str  # the best setting's label
    throughput_bytes_per_second: float
    gain_ratio: float | None  # best mean / baseline mean; None when the baseline has no ok run
    timestamp: float  # when the run ended (its last result's start)


@dataclass(frozen=True)
class MeshRound:
    """The mesh round a mesh exporter is in or waiting for, as published
    (service/mesh_runner.py): how long its slots need, how long it is, its plan's
    fingerprint, whether it fits (its last slot and the guard end by the next round's
    start) and the guard."""

    planned_seconds: float
    period_seconds: float
    fingerprint: str
    fits: bool = True
    guard_seconds: float = 0.0


MissedKey = tuple[SeriesKey, str]  # a series and why its slots were missed (metrics.MISSED_REASONS)


class ExporterState:
    """Everything /metrics shows, updated by the round runner (and reloads), read by the
    collector and the exposition cache.

    Every mutation happens under the lock and bumps `generation`; after the lock is
    released the subscribers are told (the exposition cache re-renders), so what a scrape
    is served only ever moves from one complete state to a later one."""

    def __init__(self, site: str = "") -> None:
        self._lock = threading.Lock()
        # The mesh site this exporter runs for ("" for a single-site exporter): every
        # series gets a `site` label and the mesh families are published.  Set once.
        self.site = site
        self.generation = 0
        self._subscribers: list[Callable[[], None]] = []
        # False drops bigbinf_transfer_payload_size_bytes (config metrics.payload_histograms):
        # 2 ways x 18 samples per series, the largest family by far.
        self.payload_histograms = True
        self.latest: dict[SeriesKey, Result] = {}
        self.last_success: dict[SeriesKey, float] = {}
        self.series: dict[SeriesKey, SeriesCounters] = defaultdict(SeriesCounters)
        self.schedule_interval: dict[SeriesKey, float] = {}
        self.rounds_total = 0
        self.rounds_skipped: dict[str, int] = dict.fromkeys(M.ROUND_SKIP_REASONS, 0)
        self.round_overrun: float | None = None  # the last round's (service/rounds.py), single site only
        # The HTTP server's refused connections by reason (service/httpd.py REASONS).
        # Every reason from the start, at 0: a counter's series exists before its first increase.
        self.http_rejected: dict[str, int] = dict.fromkeys(M.HTTP_REJECT_REASONS, 0)
        self.round_duration = Histogram(M.DURATION_BUCKETS)
        self.last_round_end: float | None = None
        self.config_ok = False
        self.config_ok_timestamp: float | None = None
        self.web_config_ok = False
        self.web_config_ok_timestamp: float | None = None
        self.web_config_refused = 0
        # The front door in force (TLS, basic auth, client certificates required): None
        # until the exporter has loaded its web configuration.
        self.front_door: tuple[bool, bool, bool] | None = None
        self.journal_failures = 0
        self.journal_dropped = 0  # results not kept for the journal at its unwritten bound
        self.journal_unwritten = 0
        self.journal_unwritten_baselines = 0
        self.journal_damaged = 0
        self.journal_loading = False  # the journal still being read after /metrics came up (server.py)
        # Pending entries of the undo journal per kind (measure/undo.py): what a host keeps
        # changed (or an upload left on a remote) until a replay succeeds.
        self.undo_pending: dict[str, int] = {}
        self.paths: dict[str, PathBaseline] = {}  # the last baseline of each remote
        self.sweeps: dict[str, tuple[SweepBest, ...]] = {}  # the last run of each sweep, per dataset
        # A mesh site's slots: overruns and missed slots per series, the last slot's overrun.
        self.slot_overruns: dict[SeriesKey, int] = {}
        self.slot_last_overrun: dict[SeriesKey, float] = {}
        self.slots_missed: dict[MissedKey, int] = {}
        # Missed slots counted before the first scrape that are published only after it
        # (exporter_down, counted at start): a restarted exporter's counter must be seen
        # at 0 first, or Prometheus takes the jump from the old process's value for an
        # increase of the difference, not a reset (record_slots_missed).
        self._held_missed: dict[MissedKey, int] = {}
        self._scraped = False
        self.mesh_round: MeshRound | None = None
        # The regression test's verdict of each tested series (bigbinf/history/regression.py).
        self.regressions: dict[SeriesKey, Verdict] = {}
        # plan-move's prediction per remote and configured size label (bigbinf/history/moveplan.py).
        self.moves: dict[tuple[str, str], Prediction] = {}
        # A mesh site: False while no round can be planned from the loaded mesh (shown as
        # bigbinf_config_last_reload_successful 0, with the load's own result).
        self._load_ok = False
        self._plan_ok = True
        self.passive: PassiveCounts | None = None  # the passive watcher's (bigbinf/passive/)

    def record_passive(self, counts: PassiveCounts | None) -> None:
        """The passive watcher's counts as they stand (None: no watcher runs)."""
        with self._changing():
            self.passive = counts

    def subscribe(self, callback: Callable[[], None]) -> None:
        """Call `callback` (without the lock held) after every change of the state."""
        self._subscribers.append(callback)

    @contextmanager
    def _changing(self) -> Iterator[None]:
        try:
            with self._lock:
                try:
                    yield
                finally:
                    self.generation += 1
        finally:
            for callback in self._subscribers:
                callback()

    def set_payload_histograms(self, enabled: bool) -> None:
        with self._changing():
            self.payload_histograms = enabled

    def prime(self, keys: Iterable[SeriesKey], schedule_interval: float | None = None) -> None:
        """Export every configured series from now on (counters at 0), with the longest
        gap its schedule allows; series no longer configured lose their interval."""
        keys = list(keys)
        with self._changing():
            for key in keys:
                self.series[key]  # defaultdict creates the zeroed counters
                if self.site:  # a mesh site's slot counters start at 0 too, for increase()
                    self.slot_overruns.setdefault(key, 0)
                    for reason in M.MISSED_REASONS:
                        self.slots_missed.setdefault((key, reason), 0)
            if schedule_interval is not None:
                self.schedule_interval = dict.fromkeys(keys, schedule_interval)

    def restore(self, results: Iterable[Result]) -> int:
        """Last-result gauges from the journal (counters restart at 0, as counters do)."""
        n = 0
        with self._changing():
            for r in results:
                n += 1
                current = self.latest.get(r.key)
                if current is None or r.start_timestamp >= current.start_timestamp:
                    self.latest[r.key] = r
                    if r.slot_overrun_seconds is not None:
                        self.slot_last_overrun[r.key] = r.slot_overrun_seconds
                    else:  # a newer result from outside a slot: no slot's overrun is current
                        self.slot_last_overrun.pop(r.key, None)
                if r.outcome == "ok":
                    self.last_success[r.key] = max(self.last_success.get(r.key, 0.0), r.start_timestamp)
        return n

    def record(self, r: Result) -> None:
        with self._changing():
            self.latest[r.key] = r
            c = self.series[r.key]
            c.outcomes[r.outcome] += 1
            if r.slot_overrun_seconds is not None:  # run in a mesh slot, whatever its outcome
                self.slot_last_overrun[r.key] = r.slot_overrun_seconds
                overran = 1 if r.slot_overrun_seconds > 0 else 0
                self.slot_overruns[r.key] = self.slot_overruns.get(r.key, 0) + overran
            if r.outcome != "ok":
                return
            self.last_success[r.key] = r.start_timestamp
            c.duration.observe(r.duration_seconds)
            c.throughput.observe(r.throughput_bytes_per_second)
            c.file_bytes += r.file_bytes
            c.wire_bytes["down"] += r.wire_bytes_down
            c.wire_bytes["up"] += r.wire_bytes_up
            c.retransmits += r.retransmits_wire
            # The histogram's _sum is exact: the payload bytes the analyser totalled.
            c.payload_sizes["down"].add_counts(r.payload_histogram.get("down", []), r.payload_bytes_down)
            c.payload_sizes["up"].add_counts(r.payload_histogram.get("up", []), r.payload_bytes_up)

    def latest_results(self) -> list[Result]:
        with self._lock:
            return list(self.latest.values())

    def record_path(self, b: PathBaseline) -> None:
        with self._changing():
            current = self.paths.get(b.remote)
            if current is None or b.start_timestamp >= current.start_timestamp:
                self.paths[b.remote] = b

    def restore_paths(self, baselines: Iterable[PathBaseline]) -> int:
        """Path gauges from the baselines' journal, as restore() does for results."""
        n = 0
        for b in baselines:
            n += 1
            self.record_path(b)
        return n

    def snapshot_paths(self) -> dict[str, PathBaseline]:
        with self._lock:
            return dict(self.paths)

    def forget_paths(self, remotes: Iterable[str]) -> None:
        """Keep only the paths of configured remotes (after a reload)."""
        keep = set(remotes)
        with self._changing():
            self.paths = {name: b for name, b in self.paths.items() if name in keep}

    def record_sweep(self, sweep: str, bests: Iterable[SweepBest]) -> None:
        """A sweep's last run replaces its previous one (one series per sweep and dataset)."""
        with self._changing():
            self.sweeps[sweep] = tuple(sorted(bests, key=lambda b: b.dataset))

    def forget_sweeps(self, sweeps: Iterable[str]) -> None:
        """Keep only configured sweeps (after a reload)."""
        keep = set(sweeps)
        with self._changing():
            self.sweeps = {name: b for name, b in self.sweeps.items() if name in keep}

    def record_regressions(self, verdicts: dict[SeriesKey, Verdict]) -> None:
        """Every tested series' verdict, replacing the previous ones (q-values change for all)."""
        with self._changing():
            self.regressions = dict(verdicts)

    def record_moves(self, remote: str, predictions: dict[str, Prediction]) -> None:
        """The remote's predicted moves (size label -> prediction), replacing its previous ones."""
        with self._changing():
            self.moves = {k: v for k, v in self.moves.items() if k[0] != remote}
            self.moves.update({(remote, size): p for size, p in predictions.items()})

    def forget_moves(self, remotes: Iterable[str], sizes: Iterable[str]) -> None:
        """Keep only configured remotes and sizes (after a reload)."""
        keep_r, keep_s = set(remotes), set(sizes)
        with self._changing():
            self.moves = {k: v for k, v in self.moves.items() if k[0] in keep_r and k[1] in keep_s}

    def record_round(self, duration: float, end: float) -> None:
        with self._changing():
            self.rounds_total += 1
            self.round_duration.observe(duration)
            self.last_round_end = end

    def record_round_skipped(self, reason: str) -> None:
        with self._changing():
            self.rounds_skipped[reason] += 1

    def record_round_overrun(self, seconds: float) -> None:
        with self._changing():
            self.round_overrun = seconds

    def record_slot_missed(self, key: SeriesKey, reason: str) -> None:
        self.record_slots_missed({key: 1}, reason)

    def record_slots_missed(self, counts: Mapping[SeriesKey, int], reason: str, after_scrape: bool = False) -> None:
        """Count missed slots per series with their reason; `after_scrape`: not published
        until /metrics has been served once (mark_scraped), so that Prometheus sees this
        process's counter at its start value before the jump."""
        assert reason in M.MISSED_REASONS, reason  # a bounded label
        with self._changing():
            into = self._held_missed if after_scrape and not self._scraped else self.slots_missed
            for key, n in counts.items():
                into[(key, reason)] = into.get((key, reason), 0) + n

    def mark_scraped(self) -> None:
        """/metrics was served: publish what was held until then (record_slots_missed)."""
        if self._scraped:
            return  # every later scrape: nothing to do, no lock taken
        with self._changing():
            self._scraped = True
            for missed, n in self._held_missed.items():
                self.slots_missed[missed] = self.slots_missed.get(missed, 0) + n
            self._held_missed.clear()

    def record_mesh_plan(self, ok: bool) -> None:
        """Whether the loaded mesh could plan the next round: bigbinf_config_last_reload_successful
        is 1 only while the last load succeeded and its rounds can be planned."""
        if ok == self._plan_ok:
            return
        with self._changing():
            self._plan_ok = ok
            self.config_ok = self._load_ok and ok

    def record_mesh_round(self, mesh_round: MeshRound) -> None:
        with self._changing():
            self.mesh_round = mesh_round

    def record_config(self, ok: bool, when: float | None = None) -> None:
        with self._changing():
            self._load_ok = ok
            self.config_ok = ok and self._plan_ok
            if ok:
                self.config_ok_timestamp = when if when is not None else time.time()

    def record_web_config(self, ok: bool, when: float | None = None) -> None:
        """The last load of --web.config.file (or its absence: plain HTTP) was applied or was
        refused (counted)."""
        with self._changing():
            self.web_config_ok = ok
            if ok:
                self.web_config_ok_timestamp = when if when is not None else time.time()
            else:
                self.web_config_refused += 1

    def record_front_door(self, tls: bool, basic_auth: bool, client_cert: bool) -> None:
        """What the web configuration in force serves with (at start and at each applied reload)."""
        with self._changing():
            self.front_door = (tls, basic_auth, client_cert)

    def record_http_rejections(self, counts: Mapping[str, int]) -> None:
        """The HTTP server's running totals (it calls this every few seconds when they change)."""
        with self._changing():
            self.http_rejected = dict(counts)

    def record_journal_failure(self) -> None:
        with self._changing():
            self.journal_failures += 1

    def record_journal_dropped(self, dropped: int) -> None:
        """The results not kept for the journal at its unwritten bound (a running total)."""
        if dropped != self.journal_dropped:
            with self._changing():
                self.journal_dropped = dropped

    def record_journal_health(self, unwritten: int, unwritten_baselines: int, damaged: int) -> None:
        """The results and the path baselines not yet journaled, and the damaged segments moved aside, now."""
        now = (unwritten, unwritten_baselines, damaged)
        if now == (self.journal_unwritten, self.journal_unwritten_baselines, self.journal_damaged):
            return
        with self._changing():
            self.journal_unwritten, self.journal_unwritten_baselines, self.journal_damaged = now

    def record_journal_loading(self, loading: bool) -> None:
        with self._changing():
            self.journal_loading = loading

    def record_undo_pending(self, counts: dict[str, int]) -> None:
        if counts == self.undo_pending:
            return
        with self._changing():
            self.undo_pending = dict(counts)

    def snapshot(self) -> ExporterState:
        """A copy for one rendering, taken under the lock.  Results and baselines are
        immutable, so only the counters are copied (copy.deepcopy of 2,000 series cost
        a tenth of a second a scrape)."""
        clone = ExporterState(self.site)
        with self._lock:
            clone.generation = self.generation
            clone.payload_histograms = self.payload_histograms
            clone.latest = dict(self.latest)
            clone.last_success = dict(self.last_success)
            clone.series = defaultdict(SeriesCounters, {key: c.copy() for key, c in self.series.items()})
            clone.schedule_interval = dict(self.schedule_interval)
            clone.rounds_total = self.rounds_total
            clone.rounds_skipped = dict(self.rounds_skipped)
            clone.round_overrun = self.round_overrun
            clone.round_duration = self.round_duration.copy()
            clone.last_round_end = self.last_round_end
            clone.config_ok = self.config_ok
            clone.config_ok_timestamp = self.config_ok_timestamp
            clone.web_config_ok = self.web_config_ok
            clone.web_config_ok_timestamp = self.web_config_ok_timestamp
            clone.web_config_refused = self.web_config_refused
            clone.front_door = self.front_door
            clone.journal_failures = self.journal_failures
            clone.journal_dropped = self.journal_dropped
            clone.journal_unwritten = self.journal_unwritten
            clone.journal_unwritten_baselines = self.journal_unwritten_baselines
            clone.journal_damaged = self.journal_damaged
            clone.journal_loading = self.journal_loading
            clone.undo_pending = dict(self.undo_pending)
            clone.http_rejected = dict(self.http_rejected)
            clone.paths = dict(self.paths)
            clone.sweeps = dict(self.sweeps)
            clone.slot_overruns = dict(self.slot_overruns)
            clone.slot_last_overrun = dict(self.slot_last_overrun)
            clone.slots_missed = dict(self.slots_missed)
            clone.mesh_round = self.mesh_round
            clone.regressions = self.regressions
            clone.moves = self.moves
            clone.passive = self.passive  # a copy already (PassiveWatcher.snapshot): never changed after
        return clone


def with_label(family: Metric, name: str, value: str) -> Metric:
    """`family` with the label name=value added to every sample (a family built for one
    collect, so changed in place)."""
    family.samples = [sample._replace(labels={**sample.labels, name: value}) for sample in family.samples]
    return family


def _labels(key: SeriesKey) -> list[str]:
    return [key.protocol, key.remote, key.dataset, key.direction]


class BigbinfCollector(Collector):
    def __init__(self, state: ExporterState) -> None:
        self.state = state

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families vary with configuration

    def collect(self) -> Iterator[Metric]:
        s = self.state.snapshot()
        families = itertools.chain(
            self._last_results(s),
            self._paths(s),
            self._series_counters(s),
            self._self_metrics(s),
            self._sweeps(s),
            self._regressions(s),
            self._moves(s),
            self._passive(s),
        )
        if not s.site:
            yield from families
            return
        # A mesh site's exporter: its own families, then the site label on every sample
        # of every family (one place, so no family can be left without it).
        for family in itertools.chain(families, self._mesh(s)):
            yield with_label(family, M.SITE_LABEL, s.site)

    # -- the passive watcher: this host's own transfers (bigbinf/passive/)

    @staticmethod
    def _passive(s: ExporterState) -> Iterator[Metric]:
        """Its families (empty while no watcher runs: their HELP says what they are)."""
        p = s.passive

        def counter(spec: M.Spec) -> CounterMetricFamily:
            return CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)

        def gauge(spec: M.Spec, value: float | None) -> GaugeMetricFamily:
            g = GaugeMetricFamily(spec.name, spec.help)
            if value is not None:
                g.add_metric([], value)
            return g

        flows, moved = counter(M.PASSIVE_FLOWS_TOTAL), counter(M.PASSIVE_BYTES_TOTAL)
        rates = HistogramMetricFamily(
            M.PASSIVE_RATE_HIST.name, M.PASSIVE_RATE_HIST.help, labels=M.PASSIVE_RATE_HIST.labels
        )
        skipped = CounterMetricFamily(M.PASSIVE_SKIPPED_TOTAL.name.removesuffix("_total"), M.PASSIVE_SKIPPED_TOTAL.help)
        missed = CounterMetricFamily(M.PASSIVE_MISSED_TOTAL.name.removesuffix("_total"), M.PASSIVE_MISSED_TOTAL.help)
        stretched = CounterMetricFamily(
            M.PASSIVE_STRETCHED_TOTAL.name.removesuffix("_total"), M.PASSIVE_STRETCHED_TOTAL.help
        )
        if p is not None:
            for labels, n in sorted(p.flows.items()):
                flows.add_metric(list(labels), n)
            for labels3, n in sorted(p.bytes.items()):
                moved.add_metric(list(labels3), n)
            for labels2, counts in sorted(p.rates.items()):
                running, buckets = 0, []
                for bound, n in zip((*RATE_BUCKETS, float("inf")), counts, strict=True):
                    running += n
                    buckets.append(("+Inf" if bound == float("inf") else _fmt(bound), float(running)))
                rates.add_metric(list(labels2), buckets, p.rate_sums[labels2])
            skipped.add_metric([], p.skipped)
            missed.add_metric([], p.missed)
            stretched.add_metric([], p.stretched)
        yield from (flows, moved, rates, skipped, missed, stretched)
        yield gauge(M.PASSIVE_OPEN, p.open_flows if p else None)
        yield gauge(M.PASSIVE_LISTING_CPU, p.listing_seconds if p else None)
        yield gauge(M.PASSIVE_INTERVAL, p.interval_seconds if p else None)

    # -- a mesh site's slots and round plan

    @staticmethod
    def _mesh(s: ExporterState) -> Iterator[Metric]:
        def counter(spec: M.Spec, values: dict[SeriesKey, int]) -> CounterMetricFamily:
            fam = CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)
            for key in sorted(values, key=_labels):
                fam.add_metric(_labels(key), values[key])
            return fam

        yield counter(M.SLOT_OVERRUNS_TOTAL, s.slot_overruns)
        last = GaugeMetricFamily(M.LAST_SLOT_OVERRUN.name, M.LAST_SLOT_OVERRUN.help, labels=M.LAST_SLOT_OVERRUN.labels)
        for key in sorted(s.slot_last_overrun, key=_labels):
            last.add_metric(_labels(key), s.slot_last_overrun[key])
        yield last
        spec = M.SLOTS_MISSED_TOTAL
        missed = CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)
        for key, reason in sorted(s.slots_missed, key=lambda m: (_labels(m[0]), m[1])):
            missed.add_metric([*_labels(key), reason], s.slots_missed[(key, reason)])
        yield missed
        planned = GaugeMetricFamily(M.ROUND_PLANNED.name, M.ROUND_PLANNED.help, labels=())
        period = GaugeMetricFamily(M.ROUND_PERIOD.name, M.ROUND_PERIOD.help, labels=())
        fits = GaugeMetricFamily(M.ROUND_FITS.name, M.ROUND_FITS.help, labels=())
        guard = GaugeMetricFamily(M.GUARD.name, M.GUARD.help, labels=())
        info = GaugeMetricFamily(M.PLAN_INFO.name, M.PLAN_INFO.help, labels=M.PLAN_INFO.labels)
        if s.mesh_round is not None:
            planned.add_metric([], s.mesh_round.planned_seconds)
            period.add_metric([], s.mesh_round.period_seconds)
            fits.add_metric([], 1.0 if s.mesh_round.fits else 0.0)
            guard.add_metric([], s.mesh_round.guard_seconds)
            info.add_metric([s.mesh_round.fingerprint], 1.0)
        yield from (planned, period, fits, guard, info)

    # -- tuning sweeps: one series per sweep and dataset, until the sweep runs again

    @staticmethod
    def _sweeps(s: ExporterState) -> Iterator[Metric]:
        best = GaugeMetricFamily(M.SWEEP_BEST.name, M.SWEEP_BEST.help, labels=M.SWEEP_BEST.labels)
        gain = GaugeMetricFamily(M.SWEEP_GAIN.name, M.SWEEP_GAIN.help, labels=M.SWEEP_GAIN.labels)
        for name in sorted(s.sweeps):
            for b in s.sweeps[name]:
                best.add_metric([name, b.dataset, b.setting], b.throughput_bytes_per_second)
                if b.gain_ratio is not None:
                    gain.add_metric([name, b.dataset, b.setting], b.gain_ratio)
        yield best
        yield gain

    # -- the regression test: one series per tested series

    @staticmethod
    def _regressions(s: ExporterState) -> Iterator[Metric]:
        fam = {spec.name: GaugeMetricFamily(spec.name, spec.help, labels=spec.labels) for spec in M.REGRESSION}
        for key in sorted(s.regressions, key=_labels):
            for name, value in regression_samples(s.regressions[key]):
                fam[name].add_metric(_labels(key), value)
        yield from fam.values()
        changed = {
            spec.name: GaugeMetricFamily(spec.name, spec.help, labels=spec.labels) for spec in M.REGRESSION_CHANGE
        }
        for key in sorted(s.regressions, key=_labels):
            for name, extra, value in regression_change_samples(s.regressions[key]):
                changed[name].add_metric([*_labels(key), *extra], value)
        yield from changed.values()

    # -- plan-move's predictions: per remote and configured size

    @staticmethod
    def _moves(s: ExporterState) -> Iterator[Metric]:
        fam = {spec.name: GaugeMetricFamily(spec.name, spec.help, labels=spec.labels) for spec in M.MOVES}
        for remote, size in sorted(s.moves):
            for name, extra, value in move_samples(s.moves[(remote, size)]):
                fam[name].add_metric([remote, size, *(v for _, v in extra)], value)
        yield from fam.values()

    # -- last results

    @staticmethod
    def _last_results(s: ExporterState) -> Iterator[Metric]:
        fam = {spec.name: GaugeMetricFamily(spec.name, spec.help, labels=spec.labels) for spec in M.LAST_RESULT}
        for key in sorted(s.latest, key=_labels):
            lv = _labels(key)
            for name, extra, value in last_result_samples(s.latest[key]):
                fam[name].add_metric(lv + [v for _, v in extra], value)
        for key in sorted(s.last_success, key=_labels):
            fam[M.LAST_SUCCESS.name].add_metric(_labels(key), s.last_success[key])
        yield from fam.values()

    # -- paths

    @staticmethod
    def _paths(s: ExporterState) -> Iterator[Metric]:
        fam = {spec.name: GaugeMetricFamily(spec.name, spec.help, labels=spec.labels) for spec in M.PATH}
        for remote in sorted(s.paths):
            for name, extra, value in path_samples(s.paths[remote]):
                fam[name].add_metric([remote, *(v for _, v in extra)], value)
        yield from fam.values()

    # -- counters and histograms

    @staticmethod
    def _series_counters(s: ExporterState) -> Iterator[Metric]:
        def counter(spec: M.Spec) -> CounterMetricFamily:
            # prometheus_client appends _total itself.
            return CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)

        def hist(spec: M.Spec) -> HistogramMetricFamily:
            return HistogramMetricFamily(spec.name, spec.help, labels=spec.labels)

        transfers, files, wire, retrans = (
            counter(M.TRANSFERS_TOTAL),
            counter(M.FILE_BYTES_TOTAL),
            counter(M.WIRE_BYTES_TOTAL),
            counter(M.RETRANSMITS_TOTAL),
        )
        duration, throughput, payload = hist(M.DURATION_HIST), hist(M.THROUGHPUT_HIST), hist(M.PAYLOAD_SIZE_HIST)
        for key in sorted(s.series, key=_labels):
            c, lv = s.series[key], _labels(key)
            for outcome, n in c.outcomes.items():
                transfers.add_metric([*lv, outcome], n)
            duration.add_metric(lv, c.duration.buckets(), c.duration.total)
            throughput.add_metric(lv, c.throughput.buckets(), c.throughput.total)
            files.add_metric(lv, c.file_bytes)
            retrans.add_metric(lv, c.retransmits)
            for way in WAYS:
                wire.add_metric([*lv, way], c.wire_bytes[way])
                payload.add_metric([*lv, way], c.payload_sizes[way].buckets(), c.payload_sizes[way].total)
        yield from (transfers, duration, throughput, files, wire, retrans)
        if s.payload_histograms:
            yield payload

    # -- the exporter itself

    @staticmethod
    def _self_metrics(s: ExporterState) -> Iterator[Metric]:
        def gauge(spec: M.Spec, value: float | None, labels: Sequence[str] = ()) -> GaugeMetricFamily:
            g = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
            if value is not None:
                g.add_metric(list(labels), value)
            return g

        def counter(spec: M.Spec, value: float) -> CounterMetricFamily:
            return CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, value=value)

        interval = GaugeMetricFamily(
            M.SCHEDULE_INTERVAL.name, M.SCHEDULE_INTERVAL.help, labels=M.SCHEDULE_INTERVAL.labels
        )
        for key in sorted(s.schedule_interval, key=_labels):
            interval.add_metric(_labels(key), s.schedule_interval[key])
        yield interval
        yield counter(M.ROUNDS_TOTAL, s.rounds_total)
        skipped = CounterMetricFamily(
            M.ROUNDS_SKIPPED_TOTAL.name.removesuffix("_total"), M.ROUNDS_SKIPPED_TOTAL.help, labels=["reason"]
        )
        for reason, n in sorted(s.rounds_skipped.items()):
            skipped.add_metric([reason], n)
        yield skipped
        yield gauge(M.ROUND_OVERRUN, s.round_overrun)
        rd = HistogramMetricFamily(M.ROUND_DURATION_HIST.name, M.ROUND_DURATION_HIST.help)
        rd.add_metric([], s.round_duration.buckets(), s.round_duration.total)
        yield rd
        yield gauge(M.LAST_ROUND_END, s.last_round_end)
        yield gauge(M.CONFIG_RELOAD_OK, 1.0 if s.config_ok else 0.0)
        yield gauge(M.CONFIG_RELOAD_TS, s.config_ok_timestamp)
        yield gauge(M.WEB_CONFIG_RELOAD_OK, 1.0 if s.web_config_ok else 0.0)
        yield gauge(M.WEB_CONFIG_RELOAD_TS, s.web_config_ok_timestamp)
        yield counter(M.WEB_CONFIG_REFUSED_TOTAL, s.web_config_refused)
        door = s.front_door
        for spec, i in ((M.WEB_TLS_ENABLED, 0), (M.WEB_BASIC_AUTH_ENABLED, 1), (M.WEB_CLIENT_CERT_REQUIRED, 2)):
            yield gauge(spec, None if door is None else float(door[i]))
        yield counter(M.JOURNAL_FAILURES_TOTAL, s.journal_failures)
        yield counter(M.JOURNAL_DROPPED_TOTAL, s.journal_dropped)
        yield gauge(M.JOURNAL_UNWRITTEN, s.journal_unwritten)
        yield gauge(M.JOURNAL_UNWRITTEN_BASELINES, s.journal_unwritten_baselines)
        yield gauge(M.JOURNAL_DAMAGED, s.journal_damaged)
        yield gauge(M.JOURNAL_LOADING, 1.0 if s.journal_loading else 0.0)
        pending = GaugeMetricFamily(M.UNDO_PENDING.name, M.UNDO_PENDING.help, labels=M.UNDO_PENDING.labels)
        for kind in sorted(s.undo_pending):
            pending.add_metric([kind], s.undo_pending[kind])
        yield pending
        rejected = CounterMetricFamily(
            M.HTTP_REJECTED_TOTAL.name.removesuffix("_total"), M.HTTP_REJECTED_TOTAL.help, labels=["reason"]
        )
        for reason, n in sorted(s.http_rejected.items()):
            rejected.add_metric([reason], n)
        yield rejected
        yield gauge(M.BUILD_INFO, 1.0, [__version__])
