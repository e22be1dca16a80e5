"""Running external commands: argv lists only, optional network namespace, hard timeouts.

A transfer command may fork helpers (scp forks ssh, lftp forks children).  Each command
runs in a new session, so on timeout the whole process group is killed, not just the
direct child; nothing it started is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

IP = "ip"
# Process groups started for transfers and captures, so that a shutdown in the middle of
# a round can stop them (they run in their own sessions and would otherwise outlive us).
_active: set[subprocess.Popen[bytes]] = set()
_active_lock = threading.Lock()
KILL_GRACE_SECONDS = 2.0
STDERR_TAIL_BYTES = 2000


# Who wants to hear of a transfer command's session as it starts (measure/programs.py
# samples its processes' CPU and I/O waits): per thread, because the command runs in the
# thread that measures it, and other threads (a reload, the capture) start their own.
_observers = threading.local()


@contextlib.contextmanager
def observe_sessions(callback: Callable[[int], None]) -> Iterator[None]:
    """For the `with` block, `callback(session id)` for every command run_with_timeout
    starts in this thread (each runs in a session of its own, led by its pid)."""
    previous = getattr(_observers, "callback", None)
    _observers.callback = callback
    try:
        yield
    finally:
        _observers.callback = previous


def _started(pid: int) -> None:
    callback = getattr(_observers, "callback", None)
    if callback is not None:
        callback(pid)


def netns_exists(name: str) -> bool:
    """Whether a named network namespace (`ip netns add NAME`) exists."""
    return os.path.exists(os.path.join("/run/netns", name))


def in_netns(netns: str | None, argv: Sequence[str]) -> list[str]:
    """argv to run `argv` inside a named network namespace (or unchanged if none)."""
    return [IP, "netns", "exec", netns, *argv] if netns else list(argv)


def kill_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE_SECONDS) -> None:
    """SIGTERM the process group, then SIGKILL whatever is left after `grace` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(grace)
            # The leader is gone; members that ignored SIGTERM may remain: one more SIGKILL.
            if sig == signal.SIGTERM:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def track(proc: subprocess.Popen[bytes]) -> None:
    with _active_lock:
        _active.add(proc)


def untrack(proc: subprocess.Popen[bytes]) -> None:
    with _active_lock:
        _active.discard(proc)


def kill_all_active() -> int:
    """Kill every tracked process group (used on shutdown); returns how many."""
    with _active_lock:
        procs = list(_active)
    for proc in procs:
        if proc.poll() is None:
            kill_group(proc, grace=1.0)
        untrack(proc)
    return len(procs)


@dataclass(frozen=True)
class Completed:
    returncode: int | None  # None when killed at the timeout
    timed_out: bool
    duration_seconds: float
    start_timestamp: float
    stderr_tail: str
    stdout: str = ""  # only when asked for


def run_with_timeout(
    argv: Sequence[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    capture_stdout: bool = False,
) -> Completed:
    """Run argv in its own session; on timeout kill its whole process group."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    start_wall = time.time()
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if capture_stdout else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=full_env,
        cwd=cwd,
        start_new_session=True,
    )
    track(proc)
    try:
        _started(proc.pid)
        out, err = proc.communicate(timeout=timeout)
        return Completed(
            proc.returncode,
            False,
            time.monotonic() - start,
            start_wall,
            _tail(err),
            (out or b"").decode("utf-8", "replace"),
        )
    except subprocess.TimeoutExpired:
        duration = time.monotonic() - start
        kill_group(proc)
        out, err = proc.communicate()
        return Completed(None, True, duration, start_wall, _tail(err), (out or b"").decode("utf-8", "replace"))
    except BaseException:
        kill_group(proc)
        raise
    finally:
        untrack(proc)


def _tail(data: bytes | None) -> str:
    text = (data or b"")[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
    return text


def check_run(argv: Sequence[str], what: str, timeout: float = 60, input_: bytes | None = None) -> str:
    """Run a setup command; raise RuntimeError naming `what` and the command's stderr."""
    try:
        proc = subprocess.run(list(argv), input=input_, capture_output=True, timeout=timeout)
    except FileNotFoundError:
        raise RuntimeError(f"{what}: {argv[0]} is not installed (run scripts/setup.sh)") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"{what}: {' '.join(argv)} did not finish in {timeout}s") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise RuntimeError(f"{what}: {' '.join(argv)} failed ({proc.returncode}): {err}")
    return proc.stdout.decode("utf-8", "replace")
