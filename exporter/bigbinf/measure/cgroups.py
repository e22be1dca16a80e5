"""A process's CPU quota and how long it held the process back (cgroup v1 and v2).

A program in a cgroup with a CFS bandwidth limit (a container's CPU limit, a systemd
CPUQuota=, an operator's cpu cgroup) runs at most `quota` per `period`; once its group has
used that, every runnable task of the group is taken off the CPUs until the next period:
"throttled".  The kernel counts it in the group's cpu.stat:

- cgroup v1 (the cpu controller's hierarchy, mounted as /sys/fs/cgroup/cpu or
  /sys/fs/cgroup/cpu,cpuacct): nr_periods, nr_throttled, throttled_time (nanoseconds);
  the limit in cpu.cfs_quota_us (-1: none) and cpu.cfs_period_us;
- cgroup v2 (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1): nr_periods,
  nr_throttled, throttled_usec (microseconds); the limit in cpu.max ("max 100000": none).

The limit may sit on any ancestor of the process's own group (systemd's slices: the
quota on `user.slice`, the process in a scope below), and the throttling is counted on
the group whose quota ran out: so every group from the process's own up to the
hierarchy's root is read, and the most any of them was throttled is the process's.
throttled_time adds up over the CPUs the group was throttled on, so a group of several
busy threads may count more throttled seconds than wall-clock seconds: a share above 1
is cut to 1.

Which files: /proc/PID/cgroup names the groups (`4:cpu,cpuacct:/a/b` on v1, `0::/a/b` on
v2); where v1 has the cpu controller, v2 does not (a controller is in one hierarchy).
The functions here are pure over a `read` of a path, so the same code reads this host's
files and those a remote's listing printed (measure/tcp/state.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = "/sys/fs/cgroup"
V1_FILES = ("cpu.stat", "cpu.cfs_quota_us", "cpu.cfs_period_us")
V2_FILES = ("cpu.stat", "cpu.max")
# A group's storage limits (bytes per second per device "MAJOR:MINOR"): v1's blkio
# controller (blkio.throttle.read_bps_device, write_bps_device: "8:0 2097152" a line), v2's
# io.max ("8:0 rbps=2097152 wbps=max riops=max wiops=max" a line).
IO_V1_FILES = ("blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device")
IO_V2_FILES = ("io.max",)
MAX_DEPTH = 16  # groups read per process, its own and its ancestors: nesting deeper is not seen


@dataclass(frozen=True)
class CpuBandwidth:
    """One group's CPU bandwidth state at one reading."""

    throttled_seconds: float  # summed over CPUs (see the module docstring)
    quota_cores: float | None  # quota / period; None: no limit on this group


def cpu_dirs(cgroup_text: str) -> tuple[str, ...]:
    """The directories of the cpu controller's groups of a /proc/PID/cgroup text: the
    process's own group first, then each ancestor up to the hierarchy's root, at each
    usual mount point (a directory that does not exist is simply not read).  () when the
    text names no cpu controller."""
    return _controller_dirs(cgroup_text, "cpu")


def io_dirs(cgroup_text: str) -> tuple[str, ...]:
    """The directories of the storage controller's groups of a /proc/PID/cgroup text, the
    process's own first, then its ancestors: v1's blkio hierarchy where it has one, else
    v2's unified groups (io.max)."""
    return _controller_dirs(cgroup_text, "blkio")


def _controller_dirs(cgroup_text: str, controller: str) -> tuple[str, ...]:
    """v1's groups of `controller` where the text names its hierarchy, else v2's unified
    groups: each the process's own first, then its ancestors."""
    v1: list[str] = []
    v2: list[str] = []
    for line in cgroup_text.splitlines():
        number, colon, rest = line.strip().partition(":")
        controllers, colon2, path = rest.partition(":")
        if not colon or not colon2 or not path.startswith("/"):
            continue
        if controller in controllers.split(","):
            # Mounted under the list's name (cpu,cpuacct) with the single name often a
            # symlink to it, or under the single name alone (as on this project's CI).
            mounts = dict.fromkeys([controllers, controller])
            v1.extend(f"{CGROUP_ROOT}/{mount}{group}" for group in _chain(path) for mount in mounts)
        elif number == "0" and controllers == "":
            v2.extend(f"{root}{group}" for group in _chain(path) for root in (CGROUP_ROOT, f"{CGROUP_ROOT}/unified"))
    return tuple(dict.fromkeys(v1 or v2))


def group_dirs(cgroup_text: str) -> tuple[str, ...]:
    """Every group directory read for a process: its CPU groups', then its storage groups'."""
    return tuple(dict.fromkeys([*cpu_dirs(cgroup_text), *io_dirs(cgroup_text)]))


def _chain(path: str) -> list[str]:
    """ "/a/b" -> ["/a/b", "/a", ""]: a group and its ancestors, as suffixes of a mount."""
    parts = [p for p in path.split("/") if p and p not in (".", "..")][:MAX_DEPTH]
    return ["/" + "/".join(parts[:n]) if n else "" for n in range(len(parts), -1, -1)]


def cpu_files(dirs: Iterable[str]) -> list[str]:
    """Every file cpu_bandwidth and io_limits may read for these directories (v1's and
    v2's names)."""
    names = dict.fromkeys([*V1_FILES, *V2_FILES, *IO_V1_FILES, *IO_V2_FILES])
    return [f"{d}/{name}" for d in dirs for name in names]


@dataclass(frozen=True)
class IoLimit:
    """A group's storage limits: the least bytes per second over its devices each way
    (None: no limit that way)."""

    read_bytes_per_second: float | None
    write_bytes_per_second: float | None


def io_limits(directory: str, read: Callable[[str], str | None]) -> IoLimit | None:
    """A group's storage limits from its files (None where it has none, or none is read)."""
    reads: list[float] = []
    writes: list[float] = []
    for name, into in zip(IO_V1_FILES, (reads, writes), strict=True):
        for line in (read(f"{directory}/{name}") or "").splitlines():
            fields = line.split()
            if len(fields) == 2 and ":" in fields[0] and fields[1].isdigit() and int(fields[1]) > 0:
                into.append(float(fields[1]))
    for line in (read(f"{directory}/io.max") or "").splitlines():
        for field_ in line.split()[1:]:
            key, _, value = field_.partition("=")
            if value.isdigit() and int(value) > 0:
                {"rbps": reads, "wbps": writes}.get(key, []).append(float(value))
    if not reads and not writes:
        return None
    return IoLimit(min(reads) if reads else None, min(writes) if writes else None)


def read_io_limits(dirs: Iterable[str], read: Callable[[str], str | None]) -> dict[str, IoLimit]:
    """io_limits of each directory that has one."""
    found = {}
    for d in dirs:
        limit = io_limits(d, read)
        if limit is not None:
            found[d] = limit
    return found


def cpu_bandwidth(directory: str, read: Callable[[str], str | None]) -> CpuBandwidth | None:
    """A group's throttled time and quota from its files (`read` returns a file's text or
    None where it cannot be read); None when the directory holds no throttling count
    (not mounted there, or v2's cpu.stat of a group without the cpu controller)."""
    stat_text = read(f"{directory}/cpu.stat")
    if stat_text is None:
        return None
    stat = _keyed(stat_text)
    if "throttled_time" in stat:  # v1, nanoseconds
        throttled = stat["throttled_time"] / 1e9
        quota = _v1_quota(read(f"{directory}/cpu.cfs_quota_us"), read(f"{directory}/cpu.cfs_period_us"))
    elif "throttled_usec" in stat:  # v2, microseconds
        throttled = stat["throttled_usec"] / 1e6
        quota = _v2_quota(read(f"{directory}/cpu.max"))
    else:
        return None
    return CpuBandwidth(throttled, quota)


def _keyed(text: str) -> dict[str, int]:
    values = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        try:
            values[key] = int(value)
        except ValueError:
            continue
    return values


def _v1_quota(quota: str | None, period: str | None) -> float | None:
    try:
        q, p = int((quota or "").strip()), int((period or "").strip())
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _v2_quota(text: str | None) -> float | None:
    fields = (text or "").split()
    try:
        return int(fields[0]) / int(fields[1]) if len(fields) == 2 and fields[0] != "max" else None
    except (ValueError, ZeroDivisionError):
        return None


def read_groups(dirs: Iterable[str], read: Callable[[str], str | None]) -> dict[str, CpuBandwidth]:
    """cpu_bandwidth of each directory that has one."""
    found = {}
    for d in dirs:
        bandwidth = cpu_bandwidth(d, read)
        if bandwidth is not None:
            found[d] = bandwidth
    return found


def file_reader(root: Path = Path("/")) -> Callable[[str], str | None]:
    """A `read` of this host's files (under `root`: a test's fake tree)."""

    def read(path: str) -> str | None:
        try:
            with open(root / path.lstrip("/"), "rb") as f:
                return f.read(65536).decode("utf-8", "replace")
        except OSError:
            return None

    return read


def printed_reader(files: Mapping[str, str]) -> Callable[[str], str | None]:
    """A `read` of the files a remote printed (path -> text)."""
    return files.get
