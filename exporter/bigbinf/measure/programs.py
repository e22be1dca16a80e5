"""The transfer's programs: how much of a core each used, how long it waited for one, and
how often it waited for storage, from /proc while the transfer runs.

What a CPU-bound transfer looks like from outside: its sending or receiving program (ssh's
cipher, the case that motivated HPN-scp) is always runnable: on a core, or queued for one
behind another process.  /proc/PID/schedstat says both: the nanoseconds it ran and the
nanoseconds it waited in a run queue, so "on a core or waiting for one for 97% of its life"
holds whether it had a core to itself (it used ~100% of one) or shared one (it used 50%
and waited 47%).  A program waiting for its disk sleeps uninterruptibly (state D) in the
kernel's I/O wait: the share of samples in D says how much of its life went there.

Which programs: on this host, every process of the transfer command's session (the
command runs in a session of its own, process.py; `observe` hears of each one as it
starts), and any process given by pid (the remote's socket owners when the remote is a
namespace on this host, as in the lab: measure/tcp/state.py reads them from `ss -p`).
Sampled at the same adaptive pace as the TCP listings; a process that lived between two
samples is not seen (it did no bulk work).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class ProgramLife:
    """What the samples saw of one process."""

    name: str  # /proc/PID/comm, at most 15 characters
    first_seen: float  # monotonic
    last_seen: float
    cpu_first: float  # seconds on a core at the first sample
    cpu_last: float
    wait_first: float  # seconds queued for a core (schedstat) at the first sample
    wait_last: float
    samples: int = 0
    io_waits: int = 0  # samples in state D
    start_ticks: int = 0  # /proc/PID/stat starttime: a reused pid is another process
    # Where its run-queue time counts from: 0 for a process born after its watch started
    # (schedstat counts from birth, so a set-up helper's waits before its first sample
    # count too), else its wait at the first sample.
    wait_base: float = 0.0
    waits: list[tuple[float, float]] = field(default_factory=list)  # (monotonic, wait) per sample

    @property
    def seconds(self) -> float:
        return self.last_seen - self.first_seen

    def queued_before(self, cut: float) -> float:
        """Seconds it queued for a core between its watch's start and `cut` (monotonic),
        as of its last sample by then (0 if none was)."""
        seen = [wait for at, wait in self.waits if at <= cut]
        return max(0.0, seen[-1] - self.wait_base) if seen else 0.0

    def values(self) -> dict[str, float]:
        """The journaled summary (base units): over the time the samples saw it."""
        span = self.seconds
        return {
            "seconds": span,
            "cpu_seconds": self.cpu_last - self.cpu_first,
            "run_queue_seconds": self.wait_last - self.wait_first,
            "cpu_share": (self.cpu_last - self.cpu_first) / span if span > 0 else 0.0,
            "runnable_share": (self.cpu_last - self.cpu_first + self.wait_last - self.wait_first) / span
            if span > 0
            else 0.0,
            "io_wait_share": self.io_waits / self.samples if self.samples else 0.0,
            "samples": float(self.samples),
        }


def parse_stat(text: str) -> tuple[str, int, str, int] | None:
    """(comm, session id, state, start ticks) of a /proc/PID/stat line, or None."""
    # comm may hold spaces and parentheses: it ends at the last ')'.
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    try:
        return head.partition("(")[2], int(fields[3]), fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def parse_schedstat(text: str) -> tuple[float, float] | None:
    """(seconds on a core, seconds queued for one) of a /proc/PID/schedstat line, or None."""
    fields = text.split()
    try:
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (IndexError, ValueError):
        return None


def read_stat(pid: int) -> tuple[str, int, str, int] | None:
    """parse_stat of a process on this host; None if it is gone or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return parse_stat(f.read().decode("utf-8", "replace"))
    except OSError:
        return None


def read_schedstat(pid: int) -> tuple[float, float] | None:
    """parse_schedstat of a process on this host, or None."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return parse_schedstat(f.read().decode("ascii", "replace"))
    except OSError:
        return None


def record(
    lives: dict[tuple[int, int], ProgramLife],
    pid: int,
    stat: tuple[str, int, str, int],
    clocks: tuple[float, float],
    now: float,
    born_after: int | None = None,
) -> None:
    """One sample of a process into `lives` (keyed by pid and start time: a reused pid is
    another process).  `born_after`: the start ticks of the watch's start where the
    process's start ticks are on the same clock (this host's)."""
    comm, _session, state, start_ticks = stat
    cpu, waited = clocks
    life = lives.get((pid, start_ticks))
    if life is None:
        newborn = born_after is not None and start_ticks >= born_after
        life = lives[(pid, start_ticks)] = ProgramLife(
            comm, now, now, cpu, cpu, waited, waited, start_ticks=start_ticks, wait_base=0.0 if newborn else waited
        )
    # The name as it is now: `ip netns exec` and taskset exec the program they run.
    life.name, life.last_seen, life.cpu_last, life.wait_last = comm, now, cpu, waited
    life.waits.append((now, waited))
    life.samples += 1
    life.io_waits += state == "D"


class ProgramWatch:
    """Samples the processes of the sessions it is told of (`add_session`) and the pids
    it is given (`add_pids`), every `interval()` seconds, until stop()."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._sessions: set[int] = set()
        self._pids: set[int] = set()
        self._lives: dict[tuple[int, int], ProgramLife] = {}  # (pid, start ticks)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._started_ticks: int | None = None  # the start, on /proc/PID/stat's clock

    def add_session(self, sid: int) -> None:
        with self._lock:
            self._sessions.add(sid)
        self.sample()  # at once: a short command may be done before the next tick

    def add_pids(self, pids: Iterable[int]) -> None:
        with self._lock:
            self._pids.update(pids)

    def __enter__(self) -> ProgramWatch:
        self._started = time.monotonic()
        # starttime counts clock ticks since boot (CLOCK_BOOTTIME); a tick early, so a
        # process started in the same tick counts as born after.
        self._started_ticks = int(time.clock_gettime(time.CLOCK_BOOTTIME) * CLOCK_TICKS) - 1
        self._thread = threading.Thread(target=self._run, name="program-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def _run(self) -> None:
        while not self._stopping.wait(adaptive_interval(self.interval, time.monotonic() - self._started)):
            self.sample()

    def sample(self) -> None:
        now = time.monotonic()
        with self._lock:
            sessions, pids = set(self._sessions), set(self._pids)
        if not sessions and not pids:
            return
        candidates = set(pids)
        if sessions:
            candidates.update(int(p) for p in os.listdir("/proc") if p.isdigit())
        for pid in candidates:
            stat = read_stat(pid)
            if stat is None or (pid not in pids and stat[1] not in sessions):
                continue
            clocks = read_schedstat(pid)
            if clocks is None:
                continue
            with self._lock:
                record(self._lives, pid, stat, clocks, now, self._started_ticks)

    def lives(self) -> list[ProgramLife]:
        with self._lock:
            return list(self._lives.values())


def summary(lives: Iterable[ProgramLife], side: str, data_start: float | None = None) -> dict[str, dict[str, float]]:
    """The journaled programs of one side: per program name (`SIDE NAME`), the process of
    that name that was runnable the largest share of its life (the one a verdict names),
    seen for at least two samples (one sample says nothing about a share).  With the
    monotonic time of the transfer's first data, also the seconds it queued for a core
    before then (run_queue_seconds_before_data: set-up that waited for a busy host's CPU,
    not for the path)."""
    best: dict[str, dict[str, float]] = {}
    for life in lives:
        if life.samples < 2 or life.seconds <= 0:
            continue
        values = life.values()
        if data_start is not None:
            values["run_queue_seconds_before_data"] = life.queued_before(data_start)
        key = f"{side} {life.name}"
        if key not in best or values["runnable_share"] > best[key]["runnable_share"]:
            best[key] = values
    return best


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc/PID/stat's starttime unit


def adaptive_interval(longest: float, elapsed: float) -> float:
    """Sample every 5% of the time elapsed so far, at least every 50 ms and at most every
    `longest` seconds: about 20 samples of a short transfer (enough to see its slow start
    and its steady rate), the configured pace for a long one."""
    return min(longest, max(0.05, elapsed / 20))
