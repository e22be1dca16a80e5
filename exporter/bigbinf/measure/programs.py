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
starts), and any process given by pid with its descendants (the remote's socket owners
when the remote is a namespace on this host, as in the lab: measure/tcp/state.py reads
them from `ss -p`).  The descendants matter: the program that writes an upload to a
remote's disk does not hold the socket.  sshd's session process holds it and hands the
data to a child through pipes: `scp -t`, sftp-server, or sshd's own internal-sftp child
(OpenSSH's scp speaks SFTP), the one in state D under a slow disk.  nginx workers,
GridFTP's and xrootd's children hold their sockets themselves.  The tree is found from
each process's parent (/proc/PID/stat), which every kernel has (/proc/PID/task/TID/children
needs CONFIG_PROC_CHILDREN).  sshd's children all carry the name "sshd": one that serves
internal-sftp says so in its title (cmdline "sshd: USER@internal-sftp") and is named
`internal-sftp`.

Each process's CPU quota and the time its cgroup was throttled are read too
(measure/cgroups.py): a program held by a quota is short of CPU however idle the host.
Sampled at the same adaptive pace as the TCP listings; a process that lived between two
samples is not seen (it did no bulk work).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bigbinf.measure.cgroups import CpuBandwidth, IoLimit, file_reader, group_dirs, read_groups, read_io_limits


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
    pid: int = 0
    waits: list[tuple[float, float]] = field(default_factory=list)  # (monotonic, wait) per sample
    cpus: list[tuple[float, float]] = field(default_factory=list)  # (monotonic, seconds on a core) per sample
    # Its cgroups' CPU bandwidth (measure/cgroups.py): the directories read (its own group
    # and its ancestors), each one's throttled seconds at the first and last reading and
    # when those were taken, and the smallest quota of them (cores; None: no limit).
    cgroup_dirs: tuple[str, ...] = ()
    cgroups_known: bool = False  # its /proc/PID/cgroup was read (once: a process rarely moves)
    throttled: dict[str, tuple[float, float]] = field(default_factory=dict)
    throttle_span: tuple[float, float] | None = None
    quota_cores: float | None = None
    # Its storage groups' limits (bytes/s, the least over its groups and devices; None: no
    # limit read): the most storage let it read or write (v1 blkio.throttle.*, v2 io.max).
    io_read_limit: float | None = None
    io_write_limit: float | None = None

    def record_io(self, limits: Mapping[str, IoLimit]) -> None:
        """One reading of its groups' storage limits (those of cgroup_dirs that have one)."""
        mine = [limits[d] for d in self.cgroup_dirs if d in limits]
        reads = [m.read_bytes_per_second for m in mine if m.read_bytes_per_second is not None]
        writes = [m.write_bytes_per_second for m in mine if m.write_bytes_per_second is not None]
        if reads:
            self.io_read_limit = min(reads)
        if writes:
            self.io_write_limit = min(writes)

    def record_cgroups(self, readings: Mapping[str, CpuBandwidth], now: float) -> None:
        """One reading of its groups' bandwidth (those of cgroup_dirs that were read)."""
        mine = {d: readings[d] for d in self.cgroup_dirs if d in readings}
        if not mine:
            return
        for d, bandwidth in mine.items():
            first = self.throttled.get(d, (bandwidth.throttled_seconds, 0.0))[0]
            self.throttled[d] = (first, bandwidth.throttled_seconds)
        self.throttle_span = (self.throttle_span[0] if self.throttle_span else now, now)
        quotas = [b.quota_cores for b in mine.values() if b.quota_cores is not None]
        if quotas:
            self.quota_cores = min(quotas)

    def throttled_share(self) -> float | None:
        """The share of the time between its first and last cgroup readings its groups
        were throttled (the most of any of them; cut to 1), None with fewer than two."""
        if self.throttle_span is None or self.throttle_span[1] <= self.throttle_span[0]:
            return None
        span = self.throttle_span[1] - self.throttle_span[0]
        return min(1.0, max(max(last - first for first, last in self.throttled.values()) / span, 0.0))

    @property
    def seconds(self) -> float:
        return self.last_seen - self.first_seen

    def queued_before(self, cut: float) -> float:
        """Seconds it queued for a core between its watch's start and `cut` (monotonic),
        as of its last sample by then (0 if none was)."""
        seen = [wait for at, wait in self.waits if at <= cut]
        return max(0.0, seen[-1] - self.wait_base) if seen else 0.0

    def cpu_before(self, cut: float) -> float:
        """Seconds it ran on a core between its first sample and `cut` (monotonic), as of
        its last sample by then (0 if none was): set-up's CPU (ssh's key exchange), which
        moved no data."""
        seen = [cpu for at, cpu in self.cpus if at <= cut]
        return max(0.0, seen[-1] - self.cpu_first) if seen else 0.0

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
            # Where its cgroups could be read: the share its CPU quota held it back, and
            # the quota (cores) where there is one.
            **({"cpu_throttled_share": share} if (share := self.throttled_share()) is not None else {}),
            **({"cpu_quota_cores": self.quota_cores} if self.quota_cores is not None else {}),
            **({"io_read_limit_bytes_per_second": self.io_read_limit} if self.io_read_limit is not None else {}),
            **({"io_write_limit_bytes_per_second": self.io_write_limit} if self.io_write_limit is not None else {}),
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


def parse_parent(text: str) -> int | None:
    """The parent pid of a /proc/PID/stat line (or of its head "PID (comm) S PPID"), or None."""
    fields = text.rpartition(")")[2].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def descendants(roots: Iterable[int], parents: Mapping[int, int], limit: int = 256) -> set[int]:
    """`roots` and every process whose chain of parents reaches one of them (pid ->
    parent pid, as /proc/PID/stat says), at most `limit` in all (a fork bomb under a
    server must not make the watch read thousands of processes)."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        if pid != parent:
            children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    todo = sorted(set(roots))
    while todo and len(found) < limit:
        pid = todo.pop(0)
        if pid in found:
            continue
        found.add(pid)
        if pid != 1:  # init holding a socket (socket activation) does not make every process the transfer's
            todo.extend(sorted(children.get(pid, ())))
    return found


INTERNAL_SFTP = "internal-sftp"
_SSHD_NAMES = frozenset({"sshd", "sshd-session"})  # OpenSSH 9.8 runs sessions as sshd-session


def program_name(comm: str, cmdline: str | None) -> str:
    """The name a program is journaled under: its comm, except sshd's internal-sftp child
    (the same comm as every sshd process), which sshd titles "sshd: USER@internal-sftp"."""
    if comm in _SSHD_NAMES and cmdline:
        title = cmdline.split("\0")[0].strip()
        if title.endswith("@" + INTERNAL_SFTP):
            return INTERNAL_SFTP
    return comm


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
    cmdline: str | None = None,
) -> ProgramLife:
    """One sample of a process into `lives` (keyed by pid and start time: a reused pid is
    another process); the life it went to.  `born_after`: the start ticks of the watch's
    start where the process's start ticks are on the same clock (this host's).
    `cmdline`: its /proc/PID/cmdline where read (sshd's children are named by it)."""
    comm, _session, state, start_ticks = stat
    cpu, waited = clocks
    life = lives.get((pid, start_ticks))
    if life is None:
        newborn = born_after is not None and start_ticks >= born_after
        life = lives[(pid, start_ticks)] = ProgramLife(
            comm,
            now,
            now,
            cpu,
            cpu,
            waited,
            waited,
            start_ticks=start_ticks,
            wait_base=0.0 if newborn else waited,
            pid=pid,
        )
    # The name as it is now: `ip netns exec` and taskset exec the program they run, sshd
    # titles its child once it knows what the child serves.
    life.name, life.last_seen, life.cpu_last, life.wait_last = program_name(comm, cmdline), now, cpu, waited
    life.waits.append((now, waited))
    life.cpus.append((now, cpu))
    life.samples += 1
    life.io_waits += state == "D"
    return life


class ProgramWatch:
    """Samples the processes of the sessions it is told of (`add_session`) and the pids it
    is given with their descendants (`add_pids`), every `interval()` seconds, until
    stop().  `descend`: False reads the pids alone (a process known to work alone, where
    reading every process's stat each sample would cost more than it tells).  `root`:
    where /proc and /sys are (a test's fake tree)."""

    def __init__(self, interval: float, root: Path = Path("/"), descend: bool = True) -> None:
        self.interval = interval
        self.root = root
        self.descend = descend
        self._read = file_reader(root)
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
            sessions, roots = set(self._sessions), set(self._pids)
        if not sessions and not roots:
            return
        # Every process's stat: for the sessions' members and the roots' descendants.
        texts: dict[int, str] = {}
        listed: list[int] = []
        if sessions or self.descend:
            with contextlib.suppress(OSError):
                listed = [int(p) for p in os.listdir(self.root / "proc") if p.isdigit()]
        for pid in {*listed, *roots}:
            text = self._read(f"/proc/{pid}/stat")
            if text is not None:
                texts[pid] = text
        stats = {pid: stat for pid, text in texts.items() if (stat := parse_stat(text)) is not None}
        parents = {pid: parent for pid, text in texts.items() if (parent := parse_parent(text)) is not None}
        wanted = descendants(roots, parents) if self.descend else set(roots)
        wanted |= {pid for pid, stat in stats.items() if stat[1] in sessions}
        sampled: list[ProgramLife] = []
        for pid in sorted(wanted):
            stat = stats.get(pid)
            clocks = parse_schedstat(self._read(f"/proc/{pid}/schedstat") or "")
            if stat is None or clocks is None:
                continue
            cmdline = self._read(f"/proc/{pid}/cmdline") if stat[0] in _SSHD_NAMES else None
            with self._lock:
                life = record(self._lives, pid, stat, clocks, now, self._started_ticks, cmdline)
                known = life.cgroups_known
            if not known:
                dirs = group_dirs(self._read(f"/proc/{pid}/cgroup") or "")
                with self._lock:
                    life.cgroup_dirs, life.cgroups_known = dirs, True
            sampled.append(life)
        # Each group's bandwidth once per sample, however many of the programs are in it.
        groups = list(dict.fromkeys(d for life in sampled for d in life.cgroup_dirs))
        readings = read_groups(groups, self._read)
        limits = read_io_limits(groups, self._read)
        with self._lock:
            for life in sampled:
                life.record_cgroups(readings, now)
                life.record_io(limits)

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
            # Its CPU and life before the first data (set-up): what moved no data.
            values["cpu_seconds_before_data"] = life.cpu_before(data_start)
            values["seconds_before_data"] = min(life.seconds, max(0.0, data_start - life.first_seen))
        key = f"{side} {life.name}"
        if key not in best or values["runnable_share"] > best[key]["runnable_share"]:
            best[key] = values
    return best


def remote_view(listings: Mapping[str, float], lives: Iterable[ProgramLife]) -> dict[str, float]:
    """Result.remote_view: how the remote's listings kept to their schedule (TcpWatch's
    listing_view), programs_seen (the remote processes sampled at least twice: the data
    sockets' owners and their descendants), and where their cgroups could be read,
    cpu_throttled_share (the most any of them was held by its CPU quota, as a share of the
    time it was watched) and cpu_quota_cores (the smallest quota among them)."""
    seen = [life for life in lives if life.samples >= 2]
    view = {**listings, "programs_seen": float(len(seen))}
    shares = [share for life in seen if (share := life.throttled_share()) is not None]
    if shares:
        view["cpu_throttled_share"] = max(shares)
    quotas = [life.quota_cores for life in seen if life.quota_cores is not None]
    if quotas:
        view["cpu_quota_cores"] = min(quotas)
    return view


class BusyHost:
    """This host's waits for a CPU beside a transfer (Result.host_busy): those of the
    programs that carry it without being the transfer's own (the capture, given by pid
    once it runs; a userspace program on the path, given by its pid file: the lab's delay
    line), sampled by a ProgramWatch of their own; the transfer's own programs' from the
    transfer's ProgramWatch.  A host so busy that these queue for a core stretches the
    transfer whatever the path and the remote do."""

    def __init__(self, interval: float, path_pid_file: Path | None = None) -> None:
        self._watch = ProgramWatch(interval, descend=False)
        self._roles: dict[int, str] = {}
        self._path_pid_file = path_pid_file

    def __enter__(self) -> BusyHost:
        self._watch.__enter__()
        pid = _pid_in(self._path_pid_file) if self._path_pid_file else None
        if pid is not None:
            self.add("delay_line", pid)
        return self

    def __exit__(self, *exc: object) -> None:
        self._watch.stop()

    def add(self, role: str, pid: int) -> None:
        """Watch process `pid` as `role` (a Result.host_busy key)."""
        self._roles[pid] = role
        self._watch.add_pids([pid])
        self._watch.sample()

    def values(self, transfer_programs: Iterable[ProgramLife], duration: float) -> dict[str, float]:
        """Result.host_busy: per role, the share of its observed life it queued for a core;
        transfer_programs, the most any of the transfer's programs on this host queued, as
        a share of the transfer's `duration`; load1 now.  Waits its cgroup's CPU quota
        explains are not counted (host_wait_seconds): they are the quota's, not a busy host's."""
        found: dict[str, float] = {}
        queued = [host_wait_seconds(life) for life in transfer_programs if life.samples >= 2]
        if queued and duration > 0:
            found["transfer_programs"] = min(1.0, max(queued) / duration)
        for life in self._watch.lives():
            role = self._roles.get(life.pid)
            if role is not None and life.samples >= 2 and life.seconds > 0:
                found[role] = min(1.0, max(found.get(role, 0.0), host_wait_seconds(life) / life.seconds))
        found["load1"] = os.getloadavg()[0]
        return found


def host_wait_seconds(life: ProgramLife) -> float:
    """Seconds a process queued for a core that its cgroup's CPU quota does not explain:
    its run-queue time less the time its groups were throttled, never below 0.  The tasks
    of a throttled group stay in the run queue, and /proc/PID/schedstat counts that time
    as waiting (a transfer held to 20% of a core by a quota showed ssh using 5% of a core
    and waiting 53%, on a host with cores to spare): the quota's wait, not a busy host's.
    A lower bound of the host's: the process may have slept through some of it."""
    queued = life.wait_last - life.wait_first
    share = life.throttled_share()
    return max(0.0, queued - (share * life.seconds if share is not None else 0.0))


def _pid_in(path: Path) -> int | None:
    """The pid a pid file's first word names, if it runs."""
    try:
        pid = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if read_stat(pid) is not None else None


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc/PID/stat's starttime unit


def adaptive_interval(longest: float, elapsed: float) -> float:
    """Sample every 5% of the time elapsed so far, at least every 50 ms and at most every
    `longest` seconds: about 20 samples of a short transfer (enough to see its slow start
    and its steady rate), the configured pace for a long one."""
    return min(longest, max(0.05, elapsed / 20))
