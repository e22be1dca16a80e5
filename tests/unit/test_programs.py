"""The transfer's programs from /proc (measure/programs.py): real processes, judged by the
kernel's own clocks (schedstat) and states."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from bigbinf.measure.programs import ProgramLife, ProgramWatch, adaptive_interval, read_stat, record, summary
from bigbinf.process import observe_sessions, run_with_timeout


def _watched(argv: list[str], seconds: float) -> dict[str, dict[str, float]]:
    """Run argv in a session of its own for about `seconds`, watched as a transfer is."""
    with ProgramWatch(0.05) as watch, observe_sessions(watch.add_session):
        run_with_timeout(argv, timeout=seconds)
    return summary(watch.lives(), "local")


def test_a_busy_loop_is_runnable_all_its_life_whatever_the_machine_does() -> None:
    # On a core or queued for one: both count, so a busy machine changes the split, not the sum.
    seen = _watched([sys.executable, "-c", "while True: pass"], 0.8)
    (busy,) = seen.values()
    assert busy["runnable_share"] >= 0.9, busy
    assert busy["samples"] >= 5 and 0.5 <= busy["seconds"] <= 1.0


def test_a_sleeping_program_is_neither_on_a_core_nor_waiting() -> None:
    seen = _watched(["sleep", "5"], 0.6)
    assert seen["local sleep"]["runnable_share"] < 0.1
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
