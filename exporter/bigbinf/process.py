"""Running external commands: argv lists only, optional network namespace, hard timeouts.

A transfer command may fork helpers (scp forks ssh, lftp forks children).  Each command
runs in a new session, so on timeout the whole process group is killed, not just the
direct child; nothing it started is left behind.

Nor when the exporter itself ends: `own_children` marks every process started from then
on as this exporter's, starts the guardian that ends them when this process ends however
it ends, and ends those of an exporter that ended before (bigbinf/guardian.py).

Nor when the guardian dies with it (`kill -9` of both, issue 36): `owned(argv)`, which
every place that starts a command passes its argv through, makes the kernel end it too.
* The parent-death signal (PR_SET_PDEATHSIG, SIGKILL): set by `setpriv --pdeathsig`
  (util-linux), which then executes the command in its place (the same pid: what reads
  the capture's or a watcher's /proc still finds it), not by a preexec_fn (Python code
  between fork and exec, unsafe in a threaded program).  It fires when the *thread* that
  started the command ends: every command is started by the thread that waits for it
  (a round's, a sweep's, the mesh runner's), which outlives it.  It reaches the direct
  child only: its own children (scp's ssh) end when it does, on the end of the pipes
  it held.  The kernel clears it when the command gains privileges by executing (a
  set-id program, or file capabilities beyond the exporter's own): the guardian and
  the next start's reap cover those.  Where setpriv is missing or too old, commands
  run as before (the guardian alone).
* ssh ControlMasters detach (ControlPersist): no parent-death signal reaches them, and
  the guardian that asks them to exit may be dead too.  The exporter's ssh commands that
  use a master get `-o ControlPersist=2` first (ssh keeps the first value of an option):
  once the commands that used it have ended, with the exporter or not, the master exits
  within 2 s.  Sessions 250 ms apart (stats_interval) still share one master.
* Under systemd the service's cgroup is ended whole when the exporter's main process
  ends (KillMode=control-group, the default): packaging/bigbinf-exporter.service.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bigbinf import guardian

IP = "ip"
# Process groups started for transfers and captures, so that a shutdown in the middle of
# a round can stop them (they run in their own sessions and would otherwise outlive us).
_active: set[subprocess.Popen[bytes]] = set()
_active_lock = threading.Lock()
KILL_GRACE_SECONDS = 2.0
STDERR_TAIL_BYTES = 2000
GUARDIAN = Path(guardian.__file__)
log = logging.getLogger(__name__)
_guardian: subprocess.Popen[bytes] | None = None
_guardian_lock = threading.Lock()
_owner: str | None = None


def owner() -> str:
    """This process's identity (guardian.identity): what its marker holds, and what names
    the files of its transfers (so a start can tell those of an exporter that ended)."""
    global _owner
    if _owner is None:
        _owner = guardian.identity()
    return _owner


def own_children() -> list[str]:
    """Make this process an exporter that leaves nothing behind: every process started
    from now on carries its marker (an environment variable, inherited by everything
    they start in turn), a guardian ends them all when this process ends, however it
    ends, and the processes of an exporter that ended before without its guardian
    doing so are ended now.  Returns a line per process ended (logged here too)."""
    me = owner()
    os.environ[guardian.MARKER] = me
    ended = [
        f"pid {pid} of the exporter {owner_id}, which no longer runs: {command}"
        for pid, owner_id, command in guardian.reap(me)
    ]
    for line in ended:
        log.warning("ended a leftover process: %s", line)
    ensure_guardian()
    return ended


def ensure_guardian() -> None:
    """Start the guardian, or start it again if it died (killed on its own); a no-op
    before own_children or while it runs."""
    global _guardian
    me = os.environ.get(guardian.MARKER)
    if me is None or me != owner():
        return  # not an exporter: nothing to guard (or a marker inherited from our parent)
    with _guardian_lock:
        if _guardian is not None and _guardian.poll() is None:
            return
        if _guardian is not None:
            log.warning("the guardian (pid %d) exited %s: starting another", _guardian.pid, _guardian.returncode)
        try:
            # Its stdin is the lifeline: the write end stays open in this process only
            # (pipes are not inherited by other children), and closes when it ends.  It
            # does not carry the marker: once this exporter has ended, any exporter that
            # starts on the host ends what carries it (reap), and the guardian is then at
            # work on what only it knows of, the ssh masters (beside a test tier that starts
            # exporters all the time, a killed exporter's guardian was ended that way,
            # silently, and its master ran its whole ControlPersist).
            _guardian = subprocess.Popen(
                [sys.executable, "-I", str(GUARDIAN), me],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,
                env=unmarked_env(),
            )
            _tell_guardian(_ssh_commands)  # a guardian started again hears them again
        except OSError as exc:
            _guardian = None
            log.error(
                "cannot start the guardian (%s): processes this exporter starts may outlive it if it is "
                "killed; the next start ends them",
                exc,
            )


_ssh_commands: list[list[str]] = []


def note_ssh(argv: Sequence[str]) -> None:
    """Tell the guardian of an ssh command this exporter runs (a remote's stats_command or
    tcp_command), so that once this exporter has ended, the command's ssh ControlMaster
    is asked to exit: it hides from the marker (guardian.py).  Each command once; a no-op
    for a command without ssh, or before own_children."""
    words = list(argv)
    if not any(os.path.basename(w) == "ssh" for w in words):
        return
    with _guardian_lock:
        if words in _ssh_commands:
            return
        _ssh_commands.append(words)
        _tell_guardian([words])


def _tell_guardian(commands: list[list[str]]) -> None:
    if _guardian is None or _guardian.stdin is None or _guardian.poll() is not None:
        return
    lines = "".join(f"{guardian.SSH_PREFIX}{json.dumps(c)}\n" for c in commands)
    try:
        _guardian.stdin.write(lines.encode())
        _guardian.stdin.flush()
    except OSError as exc:
        log.warning("cannot tell the guardian of ssh commands (%s); it is started again at the next round", exc)


# ssh keeps a detached master this long after its last session (see the module docstring).
CONTROL_PERSIST_SECONDS = 2


def owned(argv: Sequence[str]) -> list[str]:
    """`argv` as the exporter runs it, so that it ends with the exporter even when the
    guardian is killed too (module docstring): under the parent-death signal, and an
    ssh ControlMaster's persistence bounded.  Unchanged outside an exporter (before
    own_children: `once`, the tests' own commands) and for a program not installed
    (Popen then says so, as before)."""
    words = list(argv)
    if os.environ.get(guardian.MARKER) != owner() or not words or shutil.which(words[0]) is None:
        return words
    words = _persist_bounded(words)
    setpriv = _setpriv()
    return [setpriv, "--pdeathsig", "KILL", "--", *words] if setpriv else words


@functools.cache
def _setpriv() -> str | None:
    """setpriv, if it can set the parent-death signal (util-linux 2.33 and later)."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        usage = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "--pdeathsig" in usage else None


def _persist_bounded(words: list[str]) -> list[str]:
    """An ssh command that uses a ControlMaster with `-o ControlPersist=N` first."""
    at = next((i for i, word in enumerate(words) if os.path.basename(word) == "ssh"), None)
    if at is None or not _uses_master(tuple(words)):
        return words
    return [*words[: at + 1], "-o", f"ControlPersist={CONTROL_PERSIST_SECONDS}", *words[at + 1 :]]


@functools.lru_cache(maxsize=256)
def _uses_master(words: tuple[str, ...]) -> bool:
    """Whether an ssh command would use (or become) a ControlMaster, as ssh reads its
    options and configuration files (`ssh -G`: printed, no connection); once per command."""
    at = next(i for i, word in enumerate(words) if os.path.basename(word) == "ssh")
    try:
        done = subprocess.run(
            # Without a netns prefix: it reads files, it connects nowhere.
            [words[at], "-G", *words[at + 1 :]],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    settings = dict(line.partition(" ")[::2] for line in done.stdout.splitlines())
    master = settings.get("controlmaster", "false") not in ("false", "no")
    return master and settings.get("controlpath", "none") != "none"


def unmarked_env() -> dict[str, str]:
    """This environment without the marker: for processes that are not the exporter's to
    end with it (the lab's servers, which `lab up` starts and `lab down` stops)."""
    return {k: v for k, v in os.environ.items() if k != guardian.MARKER}


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
    """Count `proc` among what the exporter's stop ends.  One started after the stop had
    ended what ran (kill_all_active) is ended at once: a round past its last check of the
    stop (the capture or a watcher starting, the next transfer's command) must not run a
    transfer the stop no longer bounds, whose result the exiting exporter then drops.
    What finishes a measured transfer (process.measured) runs on, as in kill_all_active."""
    with _active_lock:
        _active.add(proc)
        late = stopping.is_set() and not measured.is_set()
    if late:
        kill_group(proc, grace=1.0)


def untrack(proc: subprocess.Popen[bytes]) -> None:
    with _active_lock:
        _active.discard(proc)


# Set by the exporter's stop (kill_all_active, in an exporter's own process): what is left
# of the round in progress skips its waits (a closing connection's last packets: the
# transfer was killed, its capture is not a measurement).
stopping = threading.Event()
# Set once a transfer's command has ended by itself, exit 0 (its data moved: a measurement),
# until its result is journaled or kept for the next start (service/rounds.py `_round`):
# a stop meanwhile ends none of what finishes it (the capture, the watchers, the upload's
# removal: each bounded on its own) and waits for the result (cli's serve), so that no
# transfer measured is lost to a stop, however long a busy host takes to finish it.
measured = threading.Event()


def kill_all_active() -> int:
    """Kill every tracked process group (used on shutdown); returns how many.  None while
    a measured transfer is being finished (`measured`): what runs then finishes it."""
    if os.environ.get(guardian.MARKER) == owner():
        stopping.set()
    with _active_lock:
        procs = [] if measured.is_set() else list(_active)
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
        owned(argv),
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
