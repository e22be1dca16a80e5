"""A process's CPU quota and its throttling (measure/cgroups.py), over fake /proc and
/sys/fs/cgroup trees laid out as cgroup v1 (cpu alone, or cpu,cpuacct), v2 and the hybrid
of both mount them; and one real cgroup of this host where the kernel mounts v1's cpu."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bigbinf.measure.cgroups import CpuBandwidth, cpu_dirs, cpu_files, file_reader, printed_reader, read_groups
from bigbinf.measure.programs import ProgramWatch, summary
from tests.support import session


def _write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _v1_group(
    root: Path, mount: str, group: str, throttled_ns: int, quota_us: int = -1, period_us: int = 100000
) -> None:
    base = f"/sys/fs/cgroup/{mount}{group}"
    _write(root, f"{base}/cpu.stat", f"nr_periods 40\nnr_throttled 30\nthrottled_time {throttled_ns}\n")
    _write(root, f"{base}/cpu.cfs_quota_us", f"{quota_us}\n")
    _write(root, f"{base}/cpu.cfs_period_us", f"{period_us}\n")


def test_v1_cpu_cpuacct_the_group_and_its_ancestors_with_the_quota_on_a_parent(tmp_path: Path) -> None:
    # systemd's layout: the quota on the slice, the process in a scope below it; the
    # throttling is counted on the slice (whose quota ran out), not on the scope.
    text = (
        "12:pids:/user.slice\n4:cpu,cpuacct:/user.slice/session-3.scope\n1:name=systemd:/user.slice\n0::/user.slice\n"
    )
    dirs = cpu_dirs(text)
    assert dirs == (
        "/sys/fs/cgroup/cpu,cpuacct/user.slice/session-3.scope",
        "/sys/fs/cgroup/cpu/user.slice/session-3.scope",
        "/sys/fs/cgroup/cpu,cpuacct/user.slice",
        "/sys/fs/cgroup/cpu/user.slice",
        "/sys/fs/cgroup/cpu,cpuacct",
        "/sys/fs/cgroup/cpu",
    )
    _v1_group(tmp_path, "cpu,cpuacct", "/user.slice/session-3.scope", 0)
    _v1_group(tmp_path, "cpu,cpuacct", "/user.slice", 2_500_000_000, quota_us=5000)
    _v1_group(tmp_path, "cpu,cpuacct", "", 0)
    found = read_groups(dirs, file_reader(tmp_path))
    assert found == {
        "/sys/fs/cgroup/cpu,cpuacct/user.slice/session-3.scope": CpuBandwidth(0.0, None),
        "/sys/fs/cgroup/cpu,cpuacct/user.slice": CpuBandwidth(2.5, 0.05),
        "/sys/fs/cgroup/cpu,cpuacct": CpuBandwidth(0.0, None),
    }


def test_v1_cpu_mounted_alone_as_on_this_kernel(tmp_path: Path) -> None:
    dirs = cpu_dirs("2:cpuacct:/\n1:cpu:/bbt-x\n0::/\n")
    assert dirs == ("/sys/fs/cgroup/cpu/bbt-x", "/sys/fs/cgroup/cpu")  # v1 holds cpu: v2's line is not read
    _v1_group(tmp_path, "cpu", "/bbt-x", 7_000_000, quota_us=20000, period_us=100000)
    assert read_groups(dirs, file_reader(tmp_path))["/sys/fs/cgroup/cpu/bbt-x"] == CpuBandwidth(0.007, 0.2)


def test_v2_throttled_usec_and_cpu_max(tmp_path: Path) -> None:
    dirs = cpu_dirs("0::/system.slice/ssh.service\n")
    assert dirs[:2] == ("/sys/fs/cgroup/system.slice/ssh.service", "/sys/fs/cgroup/unified/system.slice/ssh.service")
    base = "/sys/fs/cgroup/system.slice/ssh.service"
    _write(tmp_path, f"{base}/cpu.stat", "usage_usec 10\nnr_periods 9\nnr_throttled 8\nthrottled_usec 1500000\n")
    _write(tmp_path, f"{base}/cpu.max", "5000 100000\n")
    _write(tmp_path, "/sys/fs/cgroup/system.slice/cpu.stat", "usage_usec 10\nthrottled_usec 0\n")
    _write(tmp_path, "/sys/fs/cgroup/system.slice/cpu.max", "max 100000\n")
    found = read_groups(dirs, file_reader(tmp_path))
    assert found == {base: CpuBandwidth(1.5, 0.05), "/sys/fs/cgroup/system.slice": CpuBandwidth(0.0, None)}


def test_a_group_without_the_cpu_controller_counts_nothing(tmp_path: Path) -> None:
    # v2's cpu.stat of a group whose cpu controller is not enabled has no throttling line;
    # the hybrid layout's unified tree likewise.
    _write(tmp_path, "/sys/fs/cgroup/unified/a/cpu.stat", "usage_usec 10\nuser_usec 5\nsystem_usec 5\n")
    assert read_groups(cpu_dirs("0::/a\n"), file_reader(tmp_path)) == {}
    assert cpu_dirs("") == () and cpu_dirs("garbage\n3:memory:/x\n") == ()


def test_a_group_path_cannot_climb_out_of_its_mount() -> None:
    assert cpu_dirs("1:cpu:/a/../../etc\n") == (
        "/sys/fs/cgroup/cpu/a/etc",
        "/sys/fs/cgroup/cpu/a",
        "/sys/fs/cgroup/cpu",
    )


def test_what_a_remote_printed_reads_as_its_files() -> None:
    printed = {
        "/sys/fs/cgroup/cpu/bbt-s/cpu.stat": "nr_periods 3\nnr_throttled 3\nthrottled_time 250000000\n",
        "/sys/fs/cgroup/cpu/bbt-s/cpu.cfs_quota_us": "5000\n",
        "/sys/fs/cgroup/cpu/bbt-s/cpu.cfs_period_us": "100000\n",
    }
    dirs = cpu_dirs("1:cpu:/bbt-s\n")
    assert set(printed) <= set(cpu_files(dirs))  # what a listing asks for covers what is read
    assert read_groups(dirs, printed_reader(printed)) == {"/sys/fs/cgroup/cpu/bbt-s": CpuBandwidth(0.25, 0.05)}


V1_CPU = Path("/sys/fs/cgroup/cpu")


@pytest.mark.skipif(
    os.geteuid() != 0 or not (V1_CPU / "cpu.cfs_quota_us").exists(), reason="needs root and cgroup v1's cpu"
)
def test_a_busy_loop_in_a_real_quota_is_seen_throttled() -> None:
    # The kernel's own count: a busy loop held to 10% of a core is throttled nearly all
    # the time it is watched, and its quota is read from its group.
    group = session.register_cgroup(V1_CPU / f"bbt-i34-unit-{os.getpid()}")
    group.mkdir()
    loop = None
    try:
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("10000")
        loop = subprocess.Popen(
            ["sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec sh -c "while :; do :; done"', "sh", str(group)],
            start_new_session=True,
        )
        deadline = time.monotonic() + 5
        while str(loop.pid) not in (group / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
            time.sleep(0.01)
        with ProgramWatch(0.1) as watch:
            watch.add_pids([loop.pid])
            time.sleep(1.5)
        (seen,) = summary(watch.lives(), "local").values()
        assert seen["cpu_quota_cores"] == pytest.approx(0.1)
        # Near 0.9 (1 - the quota) on a quiet machine; beside CPU burners the loop may get
        # less than its quota's worth some periods, and is then not throttled in them.
        assert seen["cpu_throttled_share"] > 0, seen
        assert seen["cpu_share"] < 0.3, seen  # the quota's 0.1, and the sampled span's edges
    finally:
        if loop is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(loop.pid, signal.SIGKILL)
            loop.wait()
        deadline = time.monotonic() + 5
        while (group / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.01)
        group.rmdir()
