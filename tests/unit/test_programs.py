"""The transfer's programs from /proc (measure/programs.py): real processes, judged by the
kernel's own clocks (schedstat) and states."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bigbinf.measure.programs import (
    BusyHost,
    ProgramLife,
    ProgramWatch,
    adaptive_interval,
    descendants,
    host_wait_seconds,
    parse_parent,
    program_name,
    read_stat,
    record,
    summary,
)
from bigbinf.process import observe_sessions, run_with_timeout


def _watched(argv: list[str], seconds: float) -> dict[str, dict[str, float]]:
    """Run argv in a session of its own for about `seconds`, watched as a transfer is."""
    with ProgramWatch(0.05) as watch, observe_sessions(watch.add_session):
        run_with_timeout(argv, timeout=seconds)
    return summary(watch.lives(), "local")


def test_a_busy_loop_is_runnable_all_its_life_whatever_the_machine_does() -> None:
    # On a core or queued for one: both count, so a busy machine changes the split, not the sum.
    # 2.5 s: the interpreter's start (reading its modules: neither on a core nor queued)
    # took 0.09 of a 0.8 s life in a CI run at load 10 (0.894 runnable); here it is 4% or less.
    seen = _watched([sys.executable, "-c", "while True: pass"], 2.5)
    (busy,) = seen.values()
    assert busy["runnable_share"] >= 0.9, busy
    assert busy["samples"] >= 5 and 2.0 <= busy["seconds"] <= 3.0


def test_a_sleeping_program_is_neither_on_a_core_nor_waiting() -> None:
    seen = _watched(["sleep", "5"], 0.6)
    # Its start (fork, exec) can queue for a core on a busy host (failed at < 0.1 at load
    # 14); a program counted runnable while it sleeps would be near 1.
    assert seen["local sleep"]["runnable_share"] < 0.5
    assert seen["local sleep"]["io_wait_share"] == 0.0


def test_a_program_is_named_as_it_is_after_exec_and_each_process_once() -> None:
    # sh execs sleep: the same pid, then sleep's name (as `ip netns exec CMD` and taskset do).
    seen = _watched(["sh", "-c", "exec sleep 5"], 0.6)
    assert set(seen) == {"local sleep"}


def test_every_process_of_the_session_is_seen() -> None:
    # A command's helpers (scp starts ssh) are in its session.
    seen = _watched(["sh", "-c", "sleep 5 & sleep 5 & wait"], 0.6)
    assert {"local sh", "local sleep"} <= set(seen)


def test_a_process_outside_the_session_is_not() -> None:
    outsider = subprocess.Popen(["sleep", "5"], start_new_session=True)
    try:
        seen = _watched(["sh", "-c", "exec cat /dev/zero > /dev/null"], 0.6)
    finally:
        outsider.kill()
        outsider.wait()
    assert set(seen) == {"local cat"}


def test_a_name_with_spaces_and_parentheses_is_read_whole() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "open('/proc/self/comm', 'w').write('a) (b c'); import time; time.sleep(5)"]
    )
    try:
        deadline = time.monotonic() + 5
        while (stat := read_stat(proc.pid)) is not None and stat[0] != "a) (b c" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stat is not None and stat[0] == "a) (b c" and stat[2] in "RS"
    finally:
        proc.kill()
        proc.wait()
    assert read_stat(proc.pid) is None  # gone: None, not an error


@pytest.mark.parametrize(("elapsed", "expected"), [(0.0, 0.05), (1.0, 0.05), (4.0, 0.2), (10.0, 0.5), (600.0, 0.5)])
def test_the_pace_is_five_percent_of_the_time_so_far_within_bounds(elapsed: float, expected: float) -> None:
    assert adaptive_interval(0.5, elapsed) == pytest.approx(expected)


def test_the_run_queue_before_the_first_data_counts_from_birth_until_the_cut() -> None:
    # Two busy loops on one core queue for it about half the time each (more beside a
    # burner there); cut half-way, each queued at most the half's length and, the two
    # together, most of it.
    loops = "import os\nos.fork()\nwhile True: pass"
    with ProgramWatch(0.05) as watch, observe_sessions(watch.add_session):
        start = time.monotonic()
        run_with_timeout(["taskset", "-c", "0", sys.executable, "-c", loops], timeout=1.2)
    lives = [life for life in watch.lives() if life.samples >= 2]
    assert len(lives) == 2, lives
    cut = start + 0.6
    queued = [life.queued_before(cut) for life in lives]
    assert all(0.0 < q <= 0.65 for q in queued), queued
    assert sum(queued) >= 0.25, queued
    assert all(life.queued_before(start - 1) == 0.0 for life in lives)  # nothing sampled by then
    (seen,) = summary(lives, "local", cut).values()
    assert seen["run_queue_seconds_before_data"] in queued
    assert "run_queue_seconds_before_data" not in next(iter(summary(lives, "local").values()))


def test_a_process_born_before_the_watch_counts_from_its_first_sample() -> None:
    # schedstat counts from birth: a server started long before the transfer (nginx's
    # worker) must not bring its old waits into the set-up.
    lives: dict[tuple[int, int], ProgramLife] = {}
    record(lives, 10, ("nginx", 1, "S", 500), (9.0, 40.0), now=100.0, born_after=900)
    record(lives, 10, ("nginx", 1, "S", 500), (9.1, 40.3), now=101.0, born_after=900)
    record(lives, 11, ("sshd", 1, "R", 950), (0.1, 0.4), now=100.0, born_after=900)
    record(lives, 11, ("sshd", 1, "R", 950), (0.2, 0.7), now=101.0, born_after=900)
    record(lives, 12, ("ssh", 1, "R", 950), (0.1, 0.4), now=100.0)  # a remote host's clock: no birth to compare
    record(lives, 12, ("ssh", 1, "R", 950), (0.2, 0.7), now=101.0)
    old, born, remote = lives[(10, 500)], lives[(11, 950)], lives[(12, 950)]
    assert old.queued_before(101.0) == pytest.approx(0.3)
    assert born.queued_before(101.0) == pytest.approx(0.7) and born.queued_before(100.5) == pytest.approx(0.4)
    assert remote.queued_before(101.0) == pytest.approx(0.3)


# ---------------------------------------------------------------- the process tree, over a fake /proc


def _process(
    root: Path,
    pid: int,
    comm: str,
    ppid: int,
    state: str = "S",
    cmdline: str = "",
    cgroup: str = "1:cpu:/\n",
    clocks: tuple[int, int] = (1_000_000, 0),
) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
    # stime cutime cstime priority nice threads itrealvalue starttime ...
    (d / "stat").write_text(f"{pid} ({comm}) {state} {ppid} {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {pid}0 0 0\n")
    (d / "schedstat").write_text(f"{clocks[0]} {clocks[1]} 5\n")
    (d / "cmdline").write_text(cmdline or f"{comm}\0")
    (d / "cgroup").write_text(cgroup)


def _cpu_group(root: Path, group: str, throttled_ns: int, quota_us: int) -> None:
    d = root / "sys/fs/cgroup/cpu" / group.lstrip("/")
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpu.stat").write_text(f"nr_periods 10\nnr_throttled 9\nthrottled_time {throttled_ns}\n")
    (d / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")


def _sshd_upload(root: Path) -> None:
    """An sftp upload's processes as OpenSSH 9.2 lays them out: the listener, the session's
    monitor and its unprivileged child (both hold the TCP socket), the internal-sftp child
    writing to a slow disk (state D, no socket), and another session's sshd beside it."""
    _process(root, 1, "init", 0)
    _process(root, 500, "sshd", 1, cmdline="sshd: /usr/sbin/sshd -D [listener] 0 of 100-200 startups\0")
    _process(root, 600, "sshd", 500, cmdline="sshd: root [priv]\0\0\0", cgroup="1:cpu:/bbt-q\n")
    _process(root, 601, "sshd", 600, state="R", cmdline="sshd: root@notty\0\0", cgroup="1:cpu:/bbt-q\n")
    _process(root, 602, "sshd", 601, state="D", cmdline="sshd: root@internal-sftp\0\0\0", cgroup="1:cpu:/bbt-q\n")
    _process(root, 700, "sshd", 500, cmdline="sshd: other [priv]\0")  # another session: not the transfer's
    _process(root, 701, "bash", 700)
    _cpu_group(root, "/bbt-q", 0, 5000)
    _cpu_group(root, "", 0, -1)


def test_the_socket_owners_descendants_are_found_and_sshds_sftp_child_named(tmp_path: Path) -> None:
    _sshd_upload(tmp_path)
    watch = ProgramWatch(0.05, root=tmp_path)
    watch.add_pids([600, 601])  # what ss -p names as the data socket's owners
    watch.sample()
    _cpu_group(tmp_path, "/bbt-q", 40_000_000_000, 5000)  # 40 s throttled since: more than the time passed
    (tmp_path / "proc/602/schedstat").write_text("2000000 1000000 9\n")
    watch.sample()
    lives = {life.pid: life for life in watch.lives()}
    assert set(lives) == {600, 601, 602}  # not the listener, not the other session
    assert lives[602].name == "internal-sftp" and lives[601].name == "sshd"
    seen = summary(watch.lives(), "remote")
    assert set(seen) == {"remote sshd", "remote internal-sftp"}
    writer = seen["remote internal-sftp"]
    assert writer["io_wait_share"] == 1.0 and writer["samples"] == 2
    assert writer["cpu_quota_cores"] == 0.05
    assert writer["cpu_throttled_share"] == 1.0  # cut to 1: throttled_time adds up over CPUs
    assert writer["cpu_seconds"] == pytest.approx(0.001) and writer["run_queue_seconds"] == pytest.approx(0.001)


def test_a_watch_of_pids_alone_reads_no_other_process(tmp_path: Path) -> None:
    _sshd_upload(tmp_path)
    watch = ProgramWatch(0.05, root=tmp_path, descend=False)
    watch.add_pids([600])
    watch.sample()
    assert [life.pid for life in watch.lives()] == [600]


def test_descendants_stop_at_init_and_at_the_limit() -> None:
    parents = {1: 0, 2: 1, 3: 1, 10: 2, 11: 10, 12: 11, 20: 3}
    assert descendants([2], parents) == {2, 10, 11, 12}
    assert descendants([1], parents) == {1}  # init holding a socket: not every process
    assert descendants([2, 3], parents, limit=3) == {2, 3, 10}
    assert descendants([5], {5: 6, 6: 5}) == {5, 6}  # a cycle (a torn read) ends


def test_the_name_of_sshds_children() -> None:
    assert program_name("sshd", "sshd: root@internal-sftp\0\0") == "internal-sftp"
    assert program_name("sshd-session", "sshd-session: alice@internal-sftp\0") == "internal-sftp"
    assert program_name("sshd", "sshd: root@notty\0") == "sshd"
    assert program_name("sshd", None) == "sshd"
    assert program_name("sftp-server", "/usr/lib/openssh/sftp-server\0") == "sftp-server"


def test_parent_of_a_stat_line_and_of_its_head() -> None:
    assert parse_parent("812 (sshd: a) b) S 811 812 812 0 -1") == 811
    assert parse_parent("812 (x) S 811") == 811
    assert parse_parent("garbage") is None


def test_busy_host_names_the_capture_and_the_transfers_most_queued_program() -> None:
    capture = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with BusyHost(0.05) as busy:
            busy.add("capture", capture.pid)
            time.sleep(0.4)
        life = ProgramLife("ssh", 0.0, 2.0, 0.0, 0.5, 0.0, 0.3, samples=3)
        before = float(Path("/proc/loadavg").read_text().split()[0])
        values = busy.values([life], duration=2.0)
        after = float(Path("/proc/loadavg").read_text().split()[0])
    finally:
        capture.kill()
        capture.wait()
    assert values["transfer_programs"] == pytest.approx(0.15)  # 0.3 s queued of 2 s
    assert 0.0 <= values["capture"] <= 1.0  # sampled: its schedstat while it ran
    # The kernel's, as it was then (/proc/loadavg rounds it to two decimals).
    assert any(abs(values["load1"] - seen) <= 0.005 for seen in (before, after)), (values, before, after)
    assert "delay_line" not in values  # none was given


def test_busy_host_reads_the_path_programs_pid_file(tmp_path: Path) -> None:
    line = subprocess.Popen(["sleep", "5"])
    try:
        (tmp_path / "delayline.pid").write_text(f"{line.pid} 20ms 0\n")
        with BusyHost(0.05, tmp_path / "delayline.pid"):
            time.sleep(0.3)
    finally:
        line.kill()
        line.wait()
    (tmp_path / "gone.pid").write_text("999999999\n")
    with BusyHost(0.05, tmp_path / "gone.pid") as nothing:
        pass
    assert "delay_line" not in nothing.values([], 1.0)


def test_waits_a_cpu_quota_explains_are_not_a_busy_host() -> None:
    # ssh held to 20% of a core by its cgroup's quota: 0.9 s of its 1.4 s queued for a
    # core, its group throttled 70% of the time (0.98 s): the quota's wait, not the host's.
    held = ProgramLife("ssh", 0.0, 1.4, 0.0, 0.07, 0.0, 0.9, samples=10)
    held.cgroup_dirs = ("/bbt",)
    held.throttled, held.throttle_span = {"/bbt": (0.0, 0.98)}, (0.0, 1.4)
    assert host_wait_seconds(held) == 0.0
    assert BusyHost(0.05).values([held], duration=1.5)["transfer_programs"] == 0.0
    # Throttled 0.2 s of it: the other 0.7 s it waited behind other programs.
    held.throttled = {"/bbt": (0.0, 0.2)}
    assert host_wait_seconds(held) == pytest.approx(0.7)
    assert BusyHost(0.05).values([held], duration=1.4)["transfer_programs"] == pytest.approx(0.5)
    # Its cgroups unread: every wait counts, as before.
    assert host_wait_seconds(ProgramLife("ssh", 0.0, 1.4, 0.0, 0.07, 0.0, 0.9, samples=10)) == pytest.approx(0.9)
