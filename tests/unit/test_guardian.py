"""bigbinf.guardian and process.own_children: whatever an exporter starts ends with it,
however it ends, and a start ends what an exporter gone before left, never a running
exporter's.  Real processes throughout (fake exporters: Python processes that call
own_children and start children the ways the exporter does); the truth is /proc."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bigbinf import guardian

from ..support import session
from ..support.owners import live_owner

SOURCE = Path(__file__).resolve().parents[2] / "exporter"

# An exporter as far as its children go: own_children, then children started from a
# worker thread that has ended (where PR_SET_PDEATHSIG would already have fired), one that
# ignores SIGTERM and has a child of its own, and one that leaves its group and session
# (as an ssh ControlMaster does).  Prints its guardian's pid and its children's pids.
FAKE_EXPORTER = textwrap.dedent(
    """\
    import os, subprocess, sys, threading, time
    sys.path.insert(0, {source!r})
    from bigbinf import process
    process.own_children()
    pids = []
    def start(argv):
        pids.append(subprocess.Popen(argv, start_new_session=True, stdout=subprocess.DEVNULL).pid)
    worker = threading.Thread(target=start, args=(["sleep", "600"],))
    worker.start(); worker.join()
    start(["sh", "-c", "trap '' TERM; sleep 600 & wait"])
    escaped = subprocess.run(["sh", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
    pids.append(int(escaped.stdout))
    print(process._guardian.pid, *pids, flush=True)
    time.sleep(600)
    """
)

# A start: own_children, and what it says it ended.
FAKE_START = textwrap.dedent(
    """\
    import sys
    sys.path.insert(0, {source!r})
    from bigbinf import process
    for line in process.own_children():
        print(line, flush=True)
    """
)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _family(pid: int) -> set[int]:
    """`pid` and its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        found.add(p)
        todo += children.get(p, [])
    return found


def _wait_gone(pids: set[int], seconds: float) -> set[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_running(p) for p in pids):
        time.sleep(0.05)
    return {p for p in pids if _running(p)}


class Fake:
    def __init__(self, tmp: Path, name: str) -> None:
        script = tmp / f"{name}.py"
        script.write_text(FAKE_EXPORTER.format(source=str(SOURCE)))
        env = {k: v for k, v in os.environ.items() if k != guardian.MARKER}
        self.proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        first, *children = (int(w) for w in self.proc.stdout.readline().split())
        self.guardian = first
        # The shell that ignores SIGTERM forks its sleep when it gets a CPU: wait for it
        # (a busy machine), or the sleep is a child this test does not know of.
        deadline = time.monotonic() + 10
        while len(_family(children[1])) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        self.children = set()
        for child in children:
            self.children |= _family(child)
        self.owner = guardian.identity(self.proc.pid)

    def everything(self) -> set[int]:
        return self.children | {self.guardian}


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as exits:
        yield exits


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[list[Fake]]:
    made: list[Fake] = []
    yield made
    for fake in made:  # whatever a failed test left, by pid
        for pid in [fake.proc.pid, *fake.everything()]:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        fake.proc.wait()


def test_everything_an_exporter_started_ends_when_it_is_killed(tmp_path: Path, fakes: list[Fake]) -> None:
    fake = Fake(tmp_path, "exporter")
    fakes.append(fake)
    assert len(fake.children) == 4  # sleep; sh and its sleep; the escaped sleep
    time.sleep(0.5)
    # The child started from a thread that has ended runs on: nothing tied it to the thread.
    assert {p for p in fake.children if _running(p)} == fake.children
    assert all(dict(guardian.marked()).get(p) == fake.owner for p in fake.children)
    fake.proc.kill()
    fake.proc.wait()
    # SIGTERM, and SIGKILL after the grace for the one that ignores it.
    assert _wait_gone(fake.everything(), guardian.GRACE_SECONDS + 5) == set()


def test_a_normal_exit_ends_them_too(tmp_path: Path, fakes: list[Fake]) -> None:
    fake = Fake(tmp_path, "exporter")
    fakes.append(fake)
    fake.proc.terminate()  # Python's default: it exits without stopping its children
    fake.proc.wait()
    assert _wait_gone(fake.everything(), guardian.GRACE_SECONDS + 5) == set()


def test_a_start_ends_what_a_dead_exporter_left_and_nothing_of_a_live_one(tmp_path: Path, fakes: list[Fake]) -> None:
    dead, live = Fake(tmp_path, "dead"), Fake(tmp_path, "live")
    fakes += [dead, live]
    # Killed with its guardian (kill -9 of both): its children stay, orphaned.
    os.kill(dead.guardian, signal.SIGKILL)
    dead.proc.kill()
    dead.proc.wait()
    time.sleep(0.5)
    # Its children stay until a start ends them: this one, or another exporter's start on
    # the host meanwhile (the lab tier starts exporters all the time: a CI run saw 2 of 4
    # ended within the 0.5 s), which is the same mechanism.
    script = tmp_path / "start.py"
    script.write_text(FAKE_START.format(source=str(SOURCE)))
    env = {k: v for k, v in os.environ.items() if k != guardian.MARKER}
    said = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60).stdout
    assert _wait_gone(dead.children, 5) == set()
    # Each said, with the exporter it belonged to (other tests' killed exporters may have
    # left processes for their guardians meanwhile: those are ended too, and said).  Any
    # exporter's start on the host ends a dead one's leftovers, so one that another test
    # started between the kill and this start may have ended some of them first (a CI run:
    # 2 of the 4 said here): what this start said is the dead one's, and nothing is left.
    ended_here = [pid for pid, owner in _said(said) if owner == dead.owner]
    assert len(ended_here) == len(set(ended_here)) and set(ended_here) <= dead.children, (ended_here, dead.children)
    # The live exporter's children and guardian were not touched.
    assert {p for p in live.everything() if _running(p)} == live.everything()


def _said(text: str) -> list[tuple[int, str]]:
    out = []
    for line in text.splitlines():
        words = line.split()
        if len(words) > 4 and words[0] == "pid":
            out.append((int(words[1]), words[5].rstrip(",")))
    return out


def test_a_marker_is_judged_by_pid_and_start_time_and_only_in_this_pid_namespace() -> None:
    me = guardian.identity()
    ns, pid, start = me.split(".")
    assert guardian.alive(me)
    assert not guardian.alive(f"{ns}.{pid}.{int(start) + 1}")  # the pid, reused by another process
    assert guardian.alive(f"{int(ns) + 1}.{pid}.{int(start) + 1}")  # another pid namespace: not ours to judge
    assert guardian.alive("garbage")  # nor a marker that does not read


def test_a_child_that_executes_after_the_exporter_ended_is_ended_too(stack: contextlib.ExitStack) -> None:
    # A child forked just before the exporter ended shows the marker in /proc only once it
    # has executed its program: here one executes 0.3 s after the lifeline closed.
    owner = stack.enter_context(live_owner())
    read_end, write_end = os.pipe()
    ended: list[int] = []
    watcher = threading.Thread(target=lambda: ended.append(guardian.guard(owner, read_end).processes))
    watcher.start()
    os.close(write_end)  # the exporter has ended
    time.sleep(0.3)
    late = subprocess.Popen(["sleep", "60"], env={**os.environ, guardian.MARKER: owner}, start_new_session=True)
    try:
        watcher.join(guardian.LATE_EXEC_SECONDS + guardian.GRACE_SECONDS + 5)
        assert not watcher.is_alive() and ended == [1], ended
        assert late.wait(1) == -signal.SIGTERM
    finally:
        os.close(read_end)
        if late.poll() is None:
            late.kill()
            late.wait()


def test_an_ssh_executed_after_the_masters_were_asked_to_exit_is_ended_and_they_are_asked_again(
    monkeypatch: pytest.MonkeyPatch, stack: contextlib.ExitStack
) -> None:
    # An ssh forked as the exporter was killed may execute after the masters were asked to
    # exit: it finds none to join and becomes one (hidden from the marker once detached).
    # Here a marked process starts 0.3 s after the first ask; it must be ended, and the
    # masters asked again after it.
    owner = stack.enter_context(live_owner())
    asks: list[tuple[list[list[str]], bool]] = []
    late: list[subprocess.Popen[bytes]] = []

    def start_late() -> None:
        env = {**os.environ, guardian.MARKER: owner}
        late.append(subprocess.Popen(["sleep", "60"], env=env, start_new_session=True))

    def ask(commands: list[list[str]]) -> guardian.Asked:
        asks.append((commands, bool(late) and late[0].poll() is not None))
        if len(asks) == 1:
            threading.Timer(0.3, start_late).start()
        return guardian.Asked(0, [])

    monkeypatch.setattr(guardian, "stop_masters", ask)
    read_end, write_end = os.pipe()
    command = ["ssh", "-o", "ControlPath=/nonexistent/%C", "root@198.18.0.9"]
    os.write(write_end, f"{guardian.SSH_PREFIX}{json.dumps(command)}\n".encode())
    ended: list[int] = []
    watcher = threading.Thread(target=lambda: ended.append(guardian.guard(owner, read_end).processes))
    watcher.start()
    os.close(write_end)
    try:
        watcher.join(3 * guardian.LATE_EXEC_SECONDS + guardian.GRACE_SECONDS + 5)
        assert not watcher.is_alive() and ended == [1], ended
        assert late and late[0].wait(1) == -signal.SIGTERM
        # First before the late one ran, then once it had been ended; each with the command.
        assert asks == [([command], False), ([command], True)], asks
    finally:
        os.close(read_end)
        for proc in late:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_master_the_ask_does_not_reach_is_ended_by_its_title(stack: contextlib.ExitStack) -> None:
    # A ControlMaster hides its marker; one whose control socket is gone (a /tmp cleaner),
    # or that detached after the ask, does not hear `ssh -O exit`.  Stand-ins without the
    # marker: titled as the master of this command's ControlPath (as `ssh -G` expands its
    # %C), and as one of another path, which must be left alone.
    owner = stack.enter_context(live_owner())
    control = session.scratch_dir(Path("/tmp"), "bbcm-", 0o700)  # a socket address holds 108 bytes
    command = ["ssh", "-o", f"ControlPath={control}/%C", "root@198.18.0.9"]
    [path] = guardian.control_paths([command])
    assert path.startswith(f"{control}/") and "%" not in path, path
    ours = subprocess.Popen([f"ssh: {path} [mux]", "60"], executable="sleep", start_new_session=True)
    other = subprocess.Popen([f"ssh: {control}/other [mux]", "60"], executable="sleep", start_new_session=True)
    read_end, write_end = os.pipe()
    os.write(write_end, f"{guardian.SSH_PREFIX}{json.dumps(command)}\n".encode())
    os.close(write_end)
    try:
        ended = guardian.guard(owner, read_end)
        # No socket: ssh says there is no master there, which is not a failed ask.
        assert (ended.processes, ended.masters, ended.hidden, ended.failures) == (0, 0, 1, ()), ended
        assert ours.wait(1) == -signal.SIGTERM
        assert other.poll() is None
    finally:
        os.close(read_end)
        for proc in (ours, other):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(control, ignore_errors=True)


def test_a_start_elsewhere_leaves_a_killed_exporters_guardian_at_work(tmp_path: Path, fakes: list[Fake]) -> None:
    # Any exporter that starts on the host ends what carries a dead exporter's marker.  The
    # guardian of one just killed is then at work (its child that ignores SIGTERM gets
    # the grace), and only it knows the ssh masters: it must not carry the marker.
    fake = Fake(tmp_path, "exporter")
    fakes.append(fake)
    fake.proc.kill()
    fake.proc.wait()
    script = tmp_path / "start.py"
    script.write_text(FAKE_START.format(source=str(SOURCE)))
    env = {k: v for k, v in os.environ.items() if k != guardian.MARKER}
    said = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60).stdout
    assert fake.guardian not in {pid for pid, _ in _said(said)}, said
    assert _wait_gone(fake.everything(), guardian.GRACE_SECONDS + 5) == set()
