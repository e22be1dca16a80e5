"""What the exporter's pages show that /metrics does not: the last N transfers (each under
a stable id), the path baselines probed around them, each sweep's last run, and what is
running now.

Bounded (config `pages.recent_transfers`): a ring of results, a ring of baselines of the
same length, and one run per configured sweep (a sweep's runs are bounded by its
max_runs).  Fed by the round runner as it publishes (service/rounds.py), the sweep runner
as it journals (service/sweeps.py) and, at start, from the journals' ends
(service/restore.py); read by the pages (service/pages.py) as snapshots.  It is not
ExporterState: nothing here is a metric, and a change here must not re-render /metrics.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import re
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from bigbinf.result import PathBaseline, Result

DEFAULT_SIZE = 100
# A transfer's id: its start in milliseconds and a digest of what it was (the series, its
# source and sweep run): the same in every restart that restores it from the journal.
TRANSFER_ID = re.compile(r"[0-9]{1,16}-[0-9a-f]{10}")


def transfer_id(r: Result) -> str:
    what = "\0".join((r.protocol, r.remote, r.dataset, r.direction, r.source, r.sweep, r.site, repr(r.start_timestamp)))
    return f"{max(0, round(r.start_timestamp * 1000))}-{hashlib.sha256(what.encode()).hexdigest()[:10]}"


def valid_id(text: str) -> bool:
    return TRANSFER_ID.fullmatch(text) is not None


@dataclass(frozen=True)
class Running:
    what: str  # e.g. "round 20260101T130000Z: http site/a/download"
    since: float


class RecentTransfers:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._lock = threading.Lock()
        self._results: deque[tuple[str, Result]] = deque(maxlen=size)
        self._by_id: dict[str, Result] = {}
        self._baselines: deque[PathBaseline] = deque(maxlen=size)
        self._sweeps: dict[str, tuple[Result, ...]] = {}  # each sweep's last run
        self._running: Running | None = None

    @property
    def size(self) -> int:
        return self._results.maxlen or DEFAULT_SIZE

    def resize(self, size: int) -> None:
        """A reload changed pages.recent_transfers: keep the newest `size`."""
        with self._lock:
            if size == self.size:
                return
            self._results = deque(self._results, maxlen=size)
            self._baselines = deque(self._baselines, maxlen=size)
            self._by_id = dict(self._results)

    # ------------------------------------------------------------ fed

    def add(self, r: Result) -> None:
        """A transfer just journaled (a round's, a slot's, a sweep's run); a sweep's run
        also becomes part of its sweep's current run."""
        if r.outcome == "skipped":
            return  # nothing ran (no binary): said by the metrics, not a transfer to look at
        key = transfer_id(r)
        with self._lock:
            if len(self._results) == self._results.maxlen:
                old, _ = self._results[0]
                self._by_id.pop(old, None)
            self._results.append((key, r))
            self._by_id[key] = r
            if r.source == "sweep" and r.sweep_name:
                runs = self._sweeps.get(r.sweep_name, ())
                if runs and runs[0].sweep != r.sweep:
                    runs = ()  # a new run of the sweep replaces its last one
                self._sweeps[r.sweep_name] = (*runs, r)

    def add_baseline(self, b: PathBaseline) -> None:
        with self._lock:
            self._baselines.append(b)

    def restore(self, results: Iterable[Result], baselines: Iterable[PathBaseline], sweeps: Iterable[str]) -> None:
        """From the journals (oldest first): their last transfers and baselines, and the
        last run of each sweep in `sweeps`."""
        wanted = set(sweeps)
        last: deque[Result] = deque(maxlen=self.size)
        runs: dict[str, list[Result]] = {}
        for r in results:
            if r.outcome == "skipped" or (r.source == "sweep" and r.sweep_name not in wanted):
                continue
            last.append(r)
            if r.source == "sweep":
                run = runs.setdefault(r.sweep_name, [])
                if run and run[0].sweep != r.sweep:
                    run.clear()
                run.append(r)
        for r in last:
            self.add(r)
        with self._lock:
            self._sweeps.update({name: tuple(run) for name, run in runs.items()})
            self._baselines.extend(baselines)

    def forget_sweeps(self, sweeps: Iterable[str]) -> None:
        keep = set(sweeps)
        with self._lock:
            self._sweeps = {name: runs for name, runs in self._sweeps.items() if name in keep}

    def running(self, what: str | None) -> None:
        """What runs now (None: nothing), for the front page."""
        with self._lock:
            self._running = Running(what, time.time()) if what else None

    # ------------------------------------------------------------ read

    def transfers(self) -> list[tuple[str, Result]]:
        """(id, result) of the last transfers, newest first."""
        with self._lock:
            return list(reversed(self._results))

    def get(self, key: str) -> Result | None:
        with self._lock:
            return self._by_id.get(key)

    def baseline_for(self, r: Result) -> PathBaseline | None:
        """The path baseline of `r`'s round: the last probe of its remote that started
        before it did (a round probes its paths first)."""
        with self._lock:
            before = [b for b in self._baselines if b.remote == r.remote and b.start_timestamp <= r.start_timestamp]
        return max(before, key=lambda b: b.start_timestamp, default=None)

    def bandwidths(self, transfers: Iterable[tuple[str, Result]]) -> dict[str, float]:
        """By transfer id, the bandwidth estimate of the path baseline of its round (as
        baseline_for), where one with an estimate is held: one sort, then a bisection per
        transfer."""
        with self._lock:
            by_remote: dict[str, list[tuple[float, float]]] = {}
            for b in self._baselines:
                if b.bandwidth_bytes_per_second:
                    by_remote.setdefault(b.remote, []).append((b.start_timestamp, b.bandwidth_bytes_per_second))
        for probes in by_remote.values():
            probes.sort()
        out = {}
        for key, r in transfers:
            probes = by_remote.get(r.remote, [])
            i = bisect.bisect_right(probes, (r.start_timestamp, math.inf))
            if i:
                out[key] = probes[i - 1][1]
        return out

    def sweeps(self) -> dict[str, tuple[Result, ...]]:
        with self._lock:
            return dict(self._sweeps)

    def now(self) -> Running | None:
        with self._lock:
            return self._running
