"""Plain-site causes on this host (tests/support/plain_site.py): what this host's own
programs, disk and CPU do to a transfer, each induced as a real host produces it.

- a busy host: CPU burners at normal priority, four on this host's CPU (the transfer's
  programs and the capture pinned there, the remote's namespace on the other CPU: on a
  real site the remote is another machine), so they wait for a CPU behind them, on an
  unshaped link that quiet carries the transfer 1.5-3x faster: busy_host;
- a slow local disk under a download: the transfer's workdir (where the received copy is
  written) on a sync-mounted file system on a loop device whose writes this thread's
  blkio cgroup throttles (a sync mount: the writer itself waits for each write to reach
  the disk, as on a slow disk whose cache is full; without it the page cache would take
  the file at memory speed and write it back later, in the flusher's cgroup): disk;
- a slow local disk under an upload: the source read through a blkio read throttle
  (tests/support/verdicts.py slow_disk): disk;
- a CPU-bound program: this thread (and so the transfer it starts) in a cpu cgroup with a
  quota of 10% of a core (verdicts.cpu_capped's cgroup): cpu;
- a local throttle: curl --limit-rate 2M: application.

The transfer's programs are started from the thread that runs run_cause, which is the
thread a cgroup cause moves (verdicts._in_cgroup): they inherit its cgroups.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bigbinf.config import capture_directory

from . import verdicts
from .plain_site import Changes, PlainCause, PlainSite, burners

BUSY_BURNERS = 4  # on this host's one CPU (busy()), each its own session (autogroup): a fifth of it for our programs
SLOW_DISK_BYTES_PER_SECOND = verdicts.SLOW_DISK_BYTES_PER_SECOND


@contextlib.contextmanager
def busy(site: PlainSite) -> Iterator[Changes | None]:
    """This host busy for the run: BUSY_BURNERS CPU burners at normal priority on this
    host's CPU, so its programs (the transfer's and the capture, started from this thread,
    which is pinned there) wait for it.  The lab's remote shares this machine's CPUs; it is
    another host on a real site, so for the block every process in the remote's namespace
    (its sshd and the sessions it forks, nginx, iperf3) runs on the other CPUs, which the
    burners leave alone: the busy host is this one, not both.  Every affinity is put back
    after, whatever happened."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:  # one CPU: the remote cannot be kept apart; both ends are busy
        with burners(BUSY_BURNERS):
            yield None
        return
    here, there = {cpus[0]}, set(cpus[1:])
    with contextlib.ExitStack() as undo:
        for pid in _pids_in(site.layout.remote_ns):
            with contextlib.suppress(OSError):  # exited meanwhile
                before = os.sched_getaffinity(pid)
                os.sched_setaffinity(pid, there)
                undo.callback(_set_affinity, pid, before)
        undo.callback(os.sched_setaffinity, 0, os.sched_getaffinity(0))
        os.sched_setaffinity(0, here)  # this thread: the transfer's programs and the capture inherit it
        undo.enter_context(burners(BUSY_BURNERS))  # on this thread's CPUs: `here`
        yield None


def _pids_in(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=True).stdout
    return [int(p) for p in out.split()]


def _set_affinity(pid: int, cpus: set[int]) -> None:
    with contextlib.suppress(OSError):  # exited meanwhile
        os.sched_setaffinity(pid, cpus)


@contextlib.contextmanager
def slow_write_disk(site: PlainSite) -> Iterator[Changes | None]:
    """The transfer's workdir (a download's received copy) on an ext4 file system of its
    own, mounted `sync`, on a loop device whose writes reach it through a blkio throttle
    of SLOW_DISK_BYTES_PER_SECOND for this thread's cgroup; the capture stays where it
    was.  Everything undone after, whatever happened."""
    config = site.config
    biggest = max(ds.size for ds in config.datasets.values())
    with contextlib.ExitStack() as undo:
        base = Path(tempfile.mkdtemp(prefix="bbt-slowdisk-", dir=config.transfer.workdir.parent))
        undo.callback(_rmdir_quiet, base)
        image, mountpoint = base / "disk.img", base / "workdir"
        mountpoint.mkdir()
        undo.callback(_rmdir_quiet, mountpoint)
        with open(image, "wb") as f:
            f.truncate(biggest + 64 * 1024 * 1024)
        undo.callback(image.unlink, missing_ok=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        device = subprocess.run(
            ["losetup", "--find", "--show", str(image)], check=True, capture_output=True, text=True
        ).stdout.strip()
        undo.callback(subprocess.run, ["losetup", "-d", device], check=False)
        subprocess.run(["mount", "-o", "sync", device, str(mountpoint)], check=True)
        undo.callback(subprocess.run, ["umount", "-l", str(mountpoint)], check=False)
        major, minor = (int(n) for n in Path(f"/sys/class/block/{Path(device).name}/dev").read_text().split(":"))
        cgroup = undo.enter_context(verdicts._in_cgroup(verdicts.BLKIO, "blkio"))
        (cgroup / "blkio.throttle.write_bps_device").write_text(f"{major}:{minor} {SLOW_DISK_BYTES_PER_SECOND}")
        yield {
            "transfer": {"workdir": str(mountpoint)},
            "capture": {"directory": str(capture_directory(config))},
        }


def _rmdir_quiet(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()


@contextlib.contextmanager
def slow_read_disk(site: PlainSite, dataset: str) -> Iterator[Changes | None]:
    """The upload's source on a file system of its own read through a blkio throttle
    (verdicts.slow_disk, in the plain site's workdir)."""
    with verdicts.slow_disk(site.config, dataset):
        yield None


# The quota of this host's transfer (its programs, the capture and the exporter's threads
# started meanwhile: a container's CPU limit), a tenth of a core: below what the group gets
# beside other load too.  At 20% (verdicts.CPU_SHARE) beside two CPU burners on a machine
# at load 11-12 the group was throttled only 5-14% of the time: its fair share was below
# the quota, the busy host held it, and busy_host is what the judge rightly said.
CPU_QUOTA = 0.1


@contextlib.contextmanager
def cpu_capped(site: PlainSite) -> Iterator[Changes | None]:
    """This thread, and the transfer it starts, held to CPU_QUOTA of a core by a CFS quota
    (verdicts.cpu_capped's cgroup)."""
    with verdicts._in_cgroup(verdicts.CPU_CGROUP, "cpu") as cgroup:
        (cgroup / "cpu.cfs_period_us").write_text("100000")
        (cgroup / "cpu.cfs_quota_us").write_text(str(int(100000 * CPU_QUOTA)))
        yield None


CAUSES: list[PlainCause] = [
    # A busy host on an unshaped link with no delay line (nothing in userspace on the
    # path): quiet, the transfer runs far faster than beside the burners.
    PlainCause("a busy local host", "open", "http", "f64m", "download", "busy_host", "local", busy),
    PlainCause("a busy local host", "open", "scp", "f64m", "upload", "busy_host", "local", busy),
    PlainCause("a slow local disk (the receiver's writes)", "wan", "http", "f8m", "download", "disk", "local",
               slow_write_disk),
    PlainCause("a slow local disk (the receiver's writes)", "wan", "scp", "f8m", "download", "disk", "local",
               slow_write_disk),
    PlainCause("a slow local disk (the sender's reads)", "wan", "scp", "f4m", "upload", "disk", "local",
               lambda site: slow_read_disk(site, "f4m")),
    PlainCause("a slow local disk (the sender's reads)", "wan", "http", "f4m", "upload", "disk", "local",
               lambda site: slow_read_disk(site, "f4m")),
    PlainCause("a CPU-bound local program (a quota)", "open", "scp", "f32m", "upload", "cpu", "local", cpu_capped),
    PlainCause("a CPU-bound local program (a quota)", "open", "scp", "f32m", "download", "cpu", "local", cpu_capped),
    PlainCause("a local throttle (curl --limit-rate)", "wan", "http-local-throttle", "f8m", "download",
               "application", "local"),
    PlainCause("a local throttle (curl --limit-rate)", "wan", "http-local-throttle", "f8m", "upload",
               "application", "local"),
]  # fmt: skip


@contextlib.contextmanager
def autotuning_off(site: PlainSite) -> Iterator[Changes | None]:
    """This host's receive autotuning off (tcp_moderate_rcvbuf=0 in its namespace),
    tcp_rmem at its default: a download's receive buffer stays at 131072 B."""
    with verdicts.sysctl(site.lab, "local", "net.ipv4.tcp_moderate_rcvbuf", "0"):
        yield None


# issue 42: the mirror of the remote's (plain_causes_remote.remote_autotuning_off).
CAUSES += [
    PlainCause("this host's receive autotuning off", "wan80", p, "f8m", "download", "receive_window", "local",
               autotuning_off, bound="this host's receive buffer (131072 B, not grown) over the 80 ms RTT")
    for p in ("http", "scp")
]  # fmt: skip


# ---------------------------------------------------------------- issue 42: the breaker's cause
# A transfer at a shaped link's full rate (100 Mbit/s, its capacity unknown to the judge)
# beside the burners: its programs sleep waiting for the network, so the busy host did not
# hold it.  The right verdict (link_capacity) needs the capacity: without it, withheld.
CAUSES += [
    PlainCause("a full link on a busy host (capacity unknown)", "shaped", "http", "f32m", "download",
               "link_capacity", "path", busy, bound="the link's 100 Mbit/s (unknown to the judge)"),
]  # fmt: skip
