"""The passive watcher as it runs: listings of the followed connections every `interval`
seconds (`ss -tinmH FILTER`, `-p` only where a listing shows a connection whose owner no
listing has shown yet: ss then reads every process's descriptors), one `ss -tinmEH FILTER`
throughout for the close events (each socket's final tcp_info), and the transfers that
are due judged and handed to `publish` (the exporter journals them).  The filter is the
kernel's (sock_diag's bytecode): the host's other sockets are never copied to user space.

Why ss and not a netlink library (pyroute2): the project drives ss already for every
scheduled transfer (measure/tcp/state.py, whose parser this uses), and ss is in every
iproute2; no new dependency, one parser of tcp_info.

Cost is bounded (docs/passive.md): a listing's time (ss and its parse) is kept under
CPU_SHARE of the time between listings, the interval stretched where it would not be
(counted in `stretched`), and at most `max_flows` connections are followed at once (the
rest listed are counted in `skipped`, once each, and never judged).  Nothing of a
connection's payload is read: ss reports the kernel's counters only."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from bigbinf.config import PassiveConfig
from bigbinf.guardian import marker_of
from bigbinf.measure.tcp.state import _wait_drained, _wait_subscribed, parse_ss
from bigbinf.passive.flows import Flow, Tracker, result_of
from bigbinf.passive.select import Selection
from bigbinf.process import in_netns, kill_group, owned
from bigbinf.result import PathBaseline, Result

log = logging.getLogger(__name__)

CPU_SHARE = 0.01  # of one core: the most the listings may cost of the time between them
COST_WEIGHT = 0.2  # of the last listing in the moving average of their cost
LISTING_TIMEOUT = 30.0
SUBSCRIBED_SECONDS = 1.0
DRAIN_SECONDS = 2.0
EVENTS_RETRY = 10.0  # seconds between two starts of a close-event watcher that ended
# Rate buckets of bigbinf_passive_flow_rate_bytes_per_second (bytes/s): 1 MB/s to 10 GB/s.
RATE_BUCKETS = (1e5, 1e6, 1e7, 2.5e7, 5e7, 1e8, 2.5e8, 5e8, 1e9, 2.5e9)


@dataclass
class PassiveCounts:
    """What the watcher has published since it started: the metrics' source (bounded
    labels only: remote, service, direction, verdict)."""

    flows: Counter[tuple[str, str, str, str]] = field(default_factory=Counter)  # remote, service, direction, verdict
    bytes: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # remote, service, direction
    rates: dict[tuple[str, str], list[int]] = field(
        default_factory=dict
    )  # remote, service -> bucket counts (+Inf last)
    rate_sums: dict[tuple[str, str], float] = field(default_factory=dict)
    skipped: int = 0
    missed: int = 0
    stretched: int = 0
    open_flows: int = 0
    listing_seconds: float = 0.0  # CPU seconds of a listing (moving average)
    interval_seconds: float = 0.0  # between listings now (stretched where the cost needs it)
    listings: int = 0  # taken since the start (not published: benchmarks/bench_passive.py counts them)

    def add(self, r: Result) -> None:
        self.flows[(r.remote, r.protocol, r.direction, r.limited_by or "none")] += 1
        self.bytes[(r.remote, r.protocol, r.direction)] += r.file_bytes
        rate = r.tcp_local.get("steady_rate_bytes_per_second") or r.throughput_bytes_per_second
        counts = self.rates.setdefault((r.remote, r.protocol), [0] * (len(RATE_BUCKETS) + 1))
        counts[next((i for i, b in enumerate(RATE_BUCKETS) if rate <= b), len(RATE_BUCKETS))] += 1
        self.rate_sums[(r.remote, r.protocol)] = self.rate_sums.get((r.remote, r.protocol), 0.0) + rate


class PassiveWatcher:
    """Start, then stop: every transfer it saw is published (those still open at the stop
    too: nothing measured is lost)."""

    def __init__(
        self,
        config: PassiveConfig,
        publish: Callable[[Result], None],
        baseline_of: Callable[[str], PathBaseline | None] = lambda _remote: None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.publish = publish
        self.baseline_of = baseline_of
        self.on_change = on_change
        selection = Selection.of(config)
        words = selection.ss_filter()
        self.list_argv = in_netns(config.netns, ["ss", "-tinmH", *words])
        self.owners_argv = in_netns(config.netns, ["ss", "-tinmpH", *words])
        events = ["ss", "-tinmEH", *words]
        if shutil.which("stdbuf"):  # line-buffered: events in a pipe's block buffer are lost at the stop
            events = ["stdbuf", "-oL", *events]
        self.events_argv = in_netns(config.netns, events)
        # Flows wait this long after their last close for a next connection of the same
        # transfer (a next file's, a late stream's).
        self.tracker = Tracker(
            selection, linger=max(2.0, 2 * config.interval), max_flows=config.max_flows, min_bytes=config.min_bytes
        )
        self.counts = PassiveCounts()
        self.recent: deque[Result] = deque(maxlen=config.recent)
        self.error = ""
        self._events: subprocess.Popen[bytes] | None = None
        self._chunks: list[bytes] = []
        self._pending = ""  # event text not yet parsed (a socket whose info line is still to come)
        self._chunk_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._sampler: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # the tracker and the counts
        # The first listing without owners: `ss -p` reads every process's descriptors (tens
        # of CPU-ms on a busy host), and its cost, held to CPU_SHARE, would stretch the
        # interval before any flow needs one (a fresh-clone CI run: an 8 MiB transfer
        # began and ended inside the first, stretched, interval; no listing saw it).
        self._ask_owners = False
        self._events_tried = 0.0

    # ------------------------------------------------------------ life

    def start(self) -> None:
        self._start_events()
        self._sampler = threading.Thread(target=self._sample, name="passive", daemon=True)
        self._sampler.start()
        log.info("passive: watching %s", " ".join(self.list_argv))

    def stop(self) -> None:
        """Stop; publish every transfer seen, the open ones as their last listing left them."""
        self._stopping.set()
        if self._sampler is not None:
            self._sampler.join(LISTING_TIMEOUT + 5)
        proc = self._events
        if proc is not None:
            if proc.poll() is None:
                _wait_drained(proc.pid, DRAIN_SECONDS)
            kill_group(proc, grace=0.5)
            if self._reader is not None:
                self._reader.join(2)
        now = time.monotonic()
        with self._lock:
            self._take_events(now, final=True)
            transfers = self.tracker.flush(now)
            self.counts.missed = self.tracker.missed  # close events read at the stop count too
        self._emit(transfers, now)

    # ------------------------------------------------------------ the loop

    def _start_events(self) -> None:
        """The close-event watcher (ss -E), once subscribed; where it cannot start or has
        ended (the namespace is not there yet), flows close by their listings alone
        (Tracker.due) and it is started again EVENTS_RETRY seconds later."""
        self._events_tried = time.monotonic()
        try:
            proc = subprocess.Popen(
                owned(self.events_argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            log.error(
                "passive: close events: %s could not start: %s; flows close by their listings", self.events_argv[0], exc
            )
            return
        assert isinstance(proc.stdout, io.BufferedReader)
        self._events = proc
        self._reader = threading.Thread(target=self._drain, args=(proc.stdout,), daemon=True)
        self._reader.start()
        if not _wait_subscribed(proc.pid, SUBSCRIBED_SECONDS):
            time.sleep(0.2)

    def _keep_events(self) -> None:
        proc = self._events
        if proc is not None and proc.poll() is None:
            return
        if time.monotonic() - self._events_tried < EVENTS_RETRY:
            return
        if proc is not None:
            log.warning("passive: close events: ss -E exited %s; starting it again", proc.returncode)
            if self._reader is not None:
                self._reader.join(1)
        self._start_events()

    def _drain(self, pipe: io.BufferedReader) -> None:
        for chunk in iter(lambda: pipe.read1(65536), b""):
            with self._chunk_lock:
                self._chunks.append(chunk)

    def _sample(self) -> None:
        due = time.monotonic()
        cost: float | None = None  # the listings' CPU seconds, a moving average
        while not self._stopping.wait(max(0.0, due - time.monotonic())):
            began = time.monotonic()
            self._keep_events()
            try:
                spent = self.once()
            except Exception:  # a surprise in one listing never ends the watcher
                log.exception("passive: a listing failed")
                spent = 0.0
            cost = spent if cost is None else COST_WEIGHT * spent + (1 - COST_WEIGHT) * cost
            interval = self.config.interval
            if cost > CPU_SHARE * interval:
                interval = cost / CPU_SHARE  # within the bound: fewer listings, each as it was
                with self._lock:
                    self.counts.stretched += 1
            with self._lock:
                self.counts.listing_seconds = cost
                self.counts.interval_seconds = interval
                self.counts.listings += 1
            due = began + interval

    def once(self) -> float:
        """One listing, the close events read since, and the transfers now due published;
        the CPU seconds it cost (ss's own, from its rusage, and this thread's)."""
        argv = self.owners_argv if self._ask_owners else self.list_argv
        thread_began = time.thread_time()
        try:
            code, stdout, stderr, child_cpu = _run_counted(argv, LISTING_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self._failed(f"passive: {' '.join(argv[:6])} ...: {exc}")
            return LISTING_TIMEOUT * CPU_SHARE
        if code != 0:
            tail = stderr.decode(errors="replace")[-200:].strip()
            self._failed(f"passive: {' '.join(argv[:6])} ... exited {code}: {tail}")
            return child_cpu
        if self.error:
            log.info("passive: listings work again")
            self.error = ""
        now = time.monotonic()
        text = stdout.decode("utf-8", "replace")
        with self._lock:
            changed, unchanged = (
                (text, []) if self._ask_owners else _changed(text, self.tracker.flows, self.tracker.skipped_keys)
            )
        sockets = parse_ss(changed)
        with self._lock:
            self._take_events(now)
            self.tracker.listing(now, sockets, unchanged=unchanged)
            for flow in self.tracker.flows.values():
                if flow.owner is not None and flow.scheduled is None:
                    flow.scheduled = _an_exporters(flow.owner[1])
                    if self.config.record_commands:
                        flow.command = _cmdline(flow.owner[1]) or ["?"]
            self._ask_owners = any(f.owner is None and f.closed is None for f in self.tracker.flows.values())
            transfers = self.tracker.due(now, lost_after=2 * self.config.interval + 1)
            self.counts.skipped = self.tracker.skipped
            self.counts.missed = self.tracker.missed
            self.counts.open_flows = len(self.tracker.flows)
        self._emit(transfers, now)
        return child_cpu + time.thread_time() - thread_began

    def _failed(self, error: str) -> None:
        """A listing that failed: logged once until it works again or fails otherwise (a
        namespace not there yet must not log a line per interval)."""
        if error != self.error:
            log.warning("%s; listing again every %.1f s", error, self.config.interval)
        self.error = error

    def _take_events(self, now: float, final: bool = False) -> None:
        with self._chunk_lock:
            text = self._pending + b"".join(self._chunks).decode("utf-8", "replace")
            self._chunks.clear()
        lines = text.split("\n")
        complete, rest = lines[:-1], lines[-1]
        # The last socket line may still wait for its info line (ss writes them apart).
        if not final and complete and not complete[-1].startswith((" ", "\t")):
            rest = complete.pop() + "\n" + rest
        self._pending = "" if final else rest
        if complete:
            self.tracker.closed(now, parse_ss("\n".join(complete)))

    def _emit(self, transfers: list, now: float) -> None:  # type: ignore[type-arg]
        wall = time.time()
        for transfer in transfers:
            try:
                result = result_of(
                    transfer,
                    wall,
                    now,
                    self.baseline_of(transfer.remote),
                    self.config.min_bytes,
                )
            except Exception:
                log.exception("passive: a transfer to %s could not be summarised", transfer.remote)
                continue
            if result is None:
                continue
            with self._lock:
                self.counts.add(result)
                self.recent.append(result)
            try:
                self.publish(result)
            except Exception:
                log.exception("passive: publishing a result failed")
        if transfers:
            self.on_change()

    def snapshot(self) -> tuple[PassiveCounts, list[Result]]:
        with self._lock:
            c = self.counts
            copy = PassiveCounts(
                Counter(c.flows),
                Counter(c.bytes),
                {k: list(v) for k, v in c.rates.items()},
                dict(c.rate_sums),
                c.skipped,
                c.missed,
                c.stretched,
                c.open_flows,
                c.listing_seconds,
                c.interval_seconds,
                c.listings,
            )
            return copy, list(self.recent)


def _run_counted(argv: list[str], timeout: float) -> tuple[int, bytes, bytes, float]:
    """Run `argv`; its exit status, output, and the CPU seconds it used (its own rusage,
    from wait4: exact, whatever else this process runs meanwhile)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    finally:
        usage = None
        with contextlib.suppress(ChildProcessError):
            _pid, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
    return proc.returncode or 0, stdout, stderr, cpu


_ACKED = re.compile(r"\bbytes_acked:(\d+)")
_RECEIVED = re.compile(r"\bbytes_received:(\d+)")


def _changed(
    text: str, flows: Mapping[tuple[str, str], Flow], skipped: AbstractSet[tuple[str, str]] = frozenset()
) -> tuple[str, list[tuple[str, str]]]:
    """The part of a listing worth parsing, and the sockets it need not parse: the
    followed flows it shows as they were (a socket whose bytes moved neither way since
    its last sample, with nothing waiting to be sent, adds nothing: Flow.sample would drop
    it), and those already skipped (max_flows: never followed, counted once).  Most
    of a host's connections are idle: this is what keeps a listing of thousands cheap
    (a look at a socket costs a fifth of parsing it; one regular expression over whole
    blocks cost more than this loop)."""
    keep: list[str] = []
    same: list[tuple[str, str]] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        head = lines[i]
        j = i + 1
        while j < len(lines) and lines[j][:1] in (" ", "\t"):
            j += 1
        block = lines[i:j]
        i = j
        fields = head.split()
        if len(fields) < 5 or head[:1] in (" ", "\t", ""):
            keep.extend(block)
            continue
        key = (fields[2], fields[3]) if fields[0].isdigit() else (fields[3], fields[4])
        if key in skipped:
            same.append(key)
            continue
        flow = flows.get(key)
        info = " ".join(block[1:]) if len(block) > 1 else " ".join(fields[5:])
        if flow is not None and flow.closed is None and "notsent:" not in info:
            acked, received = _ACKED.search(info), _RECEIVED.search(info)
            moved = max(int(acked.group(1)) if acked else 0, int(received.group(1)) if received else 0)
            if moved == flow.last.moved_bytes:
                same.append(key)
                continue
        keep.extend(block)
    return "\n".join(keep), same


def _an_exporters(pid: int) -> bool:
    """Whether process `pid` is one a bigbinf exporter started (its environment holds the
    guardian's marker, bigbinf/guardian.py): a scheduled transfer, not a production one."""
    with contextlib.suppress(OSError):
        return marker_of(pid) is not None
    return False


def _cmdline(pid: int) -> list[str]:
    """A process's command line (where the configuration asks: record_commands)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
        return [w.decode("utf-8", "replace") for w in f.read().split(b"\0") if w]
    return []
