"""Plain-site causes on the remote side (tests/support/plain_site.py).

Each is induced on the plain remote as its admin or its hardware would produce it:
- a CPU quota on its sshd: the listener in a cgroup v1 cpu group held to QUOTA of a core
  (the sessions it forks meanwhile inherit it), with the stats command's ControlMaster
  opened before the quota (its listings unstarved) or inside it (its listings go through
  the starved sshd too, as on the independent site of issue 34);
- a slow disk under an upload: the upload directory a sync-mounted ext4 on a loop device,
  mounted in the plain sshd's mount namespace, written through a blkio v1 throttle of
  SLOW_WRITES on the listener's group (the writer is sftp-server, in state D);
- a throttle: nginx's limit_rate (tests/support/verdicts.py throttled_nginx);
- buffer caps: the remote namespace's tcp_rmem/tcp_wmem maximum (the remote's sysctl).
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

from bigbinf.config import Config
from bigbinf.lab import LabLayout

from . import plain_site, session, verdicts
from .plain_site import BLKIO, CPU, Changes, PlainCause, PlainSite, Setup, listener_in_group

QUOTA = 0.05  # of a core, for the remote's sshd
PERIOD_US = 100_000
SLOW_WRITES = 2_000_000  # bytes per second, the remote's upload disk
RMEM, WMEM = verdicts.RMEM, verdicts.WMEM


@contextlib.contextmanager
def sshd_cpu_quota(site: PlainSite, master_inside: bool) -> Iterator[Changes | None]:
    """The plain sshd's listener held to QUOTA of a core for the block: the transfer's
    sessions inherit it.  `master_inside`: the stats command's ControlMaster is opened
    within the quota (its listings wait for the same starved CPU); else before it."""
    if master_inside:
        site.close_master()
    else:
        site.open_master()
    try:
        with listener_in_group(CPU, site.sshd_pid, "cpu") as group:
            (group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (group / "cpu.cfs_quota_us").write_text(str(int(PERIOD_US * QUOTA)))
            if master_inside:
                site.open_master()
            yield None
    finally:
        if master_inside:  # its processes left the group with it; a fresh one for what follows
            site.close_master()
            site.open_master()


@contextlib.contextmanager
def slow_remote_disk(lab_config: Config, pid: int, size: int) -> Iterator[tuple[Path, str]]:
    """A sync-mounted ext4 file system on a loop device, mounted where process `pid` (an
    sshd in the lab: `ip netns exec` gave it a mount namespace of its own) sees it, for the
    block: (its mount point, its major:minor).  Sync: every write goes to the device from
    the writer's own context, where its blkio group's throttle holds it."""
    assert lab_config.lab is not None
    layout = LabLayout(lab_config.lab)
    image = layout.state_dir / f"slow-remote-{uuid.uuid4().hex[:6]}.img"
    mount = image.with_suffix(".d")
    enter = ["nsenter", "-t", str(pid), "-m"]
    with contextlib.ExitStack() as undo:
        with open(image, "wb") as f:
            f.truncate(size + 64 * 1024 * 1024)
        undo.callback(image.unlink, missing_ok=True)
        session.register_loop(image)  # the reaper detaches its loop device if this block never ends
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        device = subprocess.run(
            ["losetup", "--find", "--show", str(image)], check=True, capture_output=True, text=True
        ).stdout.strip()
        undo.callback(subprocess.run, ["losetup", "-d", device], check=False)
        mount.mkdir()
        undo.callback(mount.rmdir)
        subprocess.run([*enter, "mount", "-o", "sync", device, str(mount)], check=True)
        undo.callback(subprocess.run, [*enter, "umount", "-l", str(mount)], check=False)
        yield mount, Path(f"/sys/class/block/{Path(device).name}/dev").read_text().strip()


@contextlib.contextmanager
def slow_upload_disk(site: PlainSite, size: int = 64 << 20) -> Iterator[Changes]:
    """The remote's upload_dir on a slow disk for the block: its writes (the sessions of
    the plain sshd's listener) reach the device through a blkio throttle of SLOW_WRITES."""
    with (
        slow_remote_disk(site.lab, site.sshd_pid, size) as (mount, device),
        listener_in_group(BLKIO, site.sshd_pid, "blkio") as group,
    ):
        (group / "blkio.throttle.write_bps_device").write_text(f"{device} {SLOW_WRITES}")
        yield {"remote": {"upload_dir": str(mount)}}


@contextlib.contextmanager
def remote_throttle(site: PlainSite) -> Iterator[Changes | None]:
    with verdicts.throttled_nginx(site.lab):
        yield None


@contextlib.contextmanager
def remote_cap(site: PlainSite, key: str) -> Iterator[Changes | None]:
    """The remote namespace's `key` maximum at 256 KiB for the block (put back after)."""
    with verdicts.capped("remote", key)(site.lab):
        yield None


def _quota(master_inside: bool) -> Setup:
    return lambda site: sshd_cpu_quota(site, master_inside)


_CPU = "a remote sshd held to 5% of a core"
_BEFORE, _INSIDE = f"{_CPU} (listings unstarved)", f"{_CPU} (listings through it)"
_DISK = "a slow remote disk under an upload"

# 16 MiB, but 64 MiB for the downloads with the listings unstarved: there the starved
# sshd's key exchange takes ~2 s and the data phase only 1.2-1.5 s, two or three
# listings of the remote sender at STATS_INTERVAL (beside two burners, one), fewer than a
# sender's verdict needs, so the verdict was withheld in 3 of 3 runs at load 6 and 3 of 3
# beside burners (rightly: the quota's throttling was never read twice).  Uploads and the
# starved listings' downloads run long enough at 16 MiB.
CAUSES: list[PlainCause] = [
    *(
        PlainCause(name, "open20", protocol, "f64m" if direction == "download" and not inside else "f16m",
                   direction, "cpu", "remote", _quota(inside))
        for name, inside in ((_BEFORE, False), (_INSIDE, True))
        for protocol in ("scp", "sftp")
        for direction in ("download", "upload")
    ),
    PlainCause(_DISK, "wan", "scp", "f8m", "upload", "disk", "remote", slow_upload_disk),
    PlainCause(_DISK, "wan", "sftp", "f8m", "upload", "disk", "remote", slow_upload_disk),
    PlainCause("a remote throttle (nginx limit_rate)", "wan", "http-remote-throttle", "f16m", "download",
               "application", "remote", remote_throttle),
    PlainCause("a remote receiver buffer cap", "wan", "http", "f8m", "upload", "receive_window", "remote",
               lambda site: remote_cap(site, RMEM)),
    PlainCause("a remote sender buffer cap", "wan", "http", "f8m", "download", "send_buffer", "remote",
               lambda site: remote_cap(site, WMEM)),
    PlainCause("a remote sender buffer cap", "wan", "scp", "f16m", "download", "send_buffer", "remote",
               lambda site: remote_cap(site, WMEM)),
]  # fmt: skip


# ---------------------------------------------------------------- issue 42: the remote's own settings and programs


@contextlib.contextmanager
def remote_autotuning_off(site: PlainSite) -> Iterator[Changes | None]:
    """The remote's receive autotuning off (net.ipv4.tcp_moderate_rcvbuf=0 in its
    namespace), tcp_rmem left at its default: its receive buffer stays at tcp_rmem's
    default (131072 B) whatever the path, as on a host whose admin turned it off."""
    with verdicts.sysctl(site.lab, "remote", "net.ipv4.tcp_moderate_rcvbuf", "0"):
        yield None


ROUTE_WINDOW = 65535  # bytes: the largest window the remote advertises on its route to this host


@contextlib.contextmanager
def remote_route_window(site: PlainSite) -> Iterator[Changes | None]:
    """The remote's route to this host with a `window` metric of ROUTE_WINDOW (an admin's
    per-route clamp): the window it advertises stays below it whatever its buffers, which
    are left as they are."""
    lab = site.lab.lab
    assert lab is not None
    layout = site.layout
    route = [f"{lab.client_address}/32", "dev", layout.remote_if]
    subprocess.run(["ip", "-n", layout.remote_ns, "route", "replace", *route, "window", str(ROUTE_WINDOW)], check=True)
    try:
        yield None
    finally:
        subprocess.run(["ip", "-n", layout.remote_ns, "route", "del", *route], check=False)


CAUSES += [
    *(PlainCause("the remote's receive autotuning off", "wan80", p, "f8m", "upload", "receive_window", "remote",
                 remote_autotuning_off, bound="the remote's receive buffer (131072 B, not grown) over the 80 ms RTT")
      for p in ("http", "scp")),
    # rsync over ssh into a reader of 2 MiB/s on the remote (plain_site.SLOW_READER): ssh's
    # channel window makes this host's sender wait; the program holding it is the remote's.
    PlainCause("a slow reader on the remote (through ssh)", "wan", "rsync-slow-reader", "f16m", "upload",
               "application", "remote", bound="the remote program's rate: 2 MiB/s"),
    *(PlainCause("the remote's route window", "wan80", p, "f8m", "upload", "receive_window", "remote",
                 remote_route_window, bound=f"the remote's advertised window ({ROUTE_WINDOW} B) over the 80 ms RTT")
      for p in ("http", "iperf3")),
]  # fmt: skip


# ---------------------------------------------------------------- issue 42: the breaker's causes


@contextlib.contextmanager
def program_buffers(site: PlainSite) -> Iterator[Changes | None]:
    """nginx's own socket buffers: a second nginx whose listen sets `sndbuf=32k rcvbuf=48k`
    (plain_site.BUFFERED_LISTEN; the kernel keeps twice each), the sysctls left as they
    are (their maxima far above the BDP)."""
    with verdicts.throttled_nginx(site.lab, "", plain_site.BUFFERED_PORT, plain_site.BUFFERED_LISTEN):
        yield None


CAUSES += [
    # rsync over ssh into a reader that takes 4 MiB, then sleeps 1 s, over and over: the
    # time is lost in every sleep, not at the start.
    PlainCause("a burst reader on the remote (through ssh)", "wan", "rsync-burst-reader", "f16m", "upload",
               "application", "remote", bound="the remote program's average reading rate (4 MiB a second at most)"),
    PlainCause("a program's own send buffer (nginx sndbuf=32k)", "wan80", "http-buffered", "f8m", "download",
               "send_buffer", "remote", program_buffers,
               bound="nginx's send buffer (64 KiB kept) over the 80 ms RTT"),
    PlainCause("a program's own receive buffer (nginx rcvbuf=48k)", "wan80", "http-buffered", "f8m", "upload",
               "receive_window", "remote", program_buffers,
               bound="nginx's receive buffer (96 KiB kept) over the 80 ms RTT"),
]  # fmt: skip
