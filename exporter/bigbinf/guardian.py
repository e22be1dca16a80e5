"""Nothing outlives the exporter: the marker its processes carry, the guardian that ends
them when the exporter ends, and the reaper that ends those of an exporter gone before.

    python3 -I guardian.py OWNER        (its standard input is the lifeline)

Every process the exporter starts (captures, transfer commands and whatever they start,
ss watchers, ssh masters, the analyser worker, multiprocessing's resource tracker; not
the guardian) inherits one environment variable, ``BIGBINF_OWNER=<pid namespace>.<pid>.<start time>``:
the exporter's own identity, which no other process has or will have (a pid is reused,
never with the same start time).  From it:

* the guardian, a small process the exporter starts first (process.own_children),
  without the marker (it works on after the exporter has ended, when any start would
  end what carries it), blocks reading a pipe whose other end only the exporter holds.  When the exporter
  ends, however it ends (SIGKILL, the OOM killer, a crash, a normal exit), the kernel
  closes that end, the read returns, and the guardian ends every process carrying the
  exporter's marker, and the process groups they lead: SIGTERM, then SIGKILL after a
  grace.  Standard library only, run as a file (no import of the package: a fresh
  interpreter of a few MB);
* an ssh ControlMaster (ControlPersist) hides its environment (setproctitle); the
  exporter names its ssh commands on the lifeline, and the guardian asks their masters
  to exit (`ssh -O exit`) once it has ended the rest;
* at start, the exporter ends every process whose marker names an exporter that no
  longer runs (``reap``: the guardian was killed with it, `kill -9` of both), and logs
  each.  A marker whose owner runs is never touched, so the exporters of a mesh on one
  host never end each other's children; one from another pid namespace (a container)
  cannot be judged here and is left alone.

Why not the parent-death signal (PR_SET_PDEATHSIG) alone: it fires when the *thread*
that started the child ends; the kernel clears it when the child executes a set-id or
file-capability program that gains privileges; it reaches only the direct child, not
scp's ssh or lftp's helpers, nor a detached ssh master.  It is the second layer, for
when the guardian is killed with the exporter (process.owned, issue 36: set by
`setpriv` as it executes the command, no preexec_fn in a threaded program).  Why not a
wrapper per command: the capture's and the watchers' own pids are read in /proc (the
tcpdump's wait, ss's netlink socket), and a wrapper would stand in between (setpriv
executes the command in its own place).  One guardian and one marker cover every
descendant, whatever thread started it, whatever it executes, and what escapes both the
guardian and the parent-death signal is still found by its marker at the next start.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from typing import NamedTuple

MARKER = "BIGBINF_OWNER"
GRACE_SECONDS = 2.0  # between SIGTERM and SIGKILL: a capture drains, scp removes its temp file
# After the exporter ended, scan until this long has passed with nothing found: a child it
# forked just before carries the marker in /proc only once it has executed its program
# (until then /proc shows the exporter's own first environment, without it), and a
# shell's last fork may come while others are ended.  Beside two CPU burners an `ss -E`
# forked as the exporter was killed executed after three back-to-back passes and ran on.
LATE_EXEC_SECONDS = 1.0
LONGEST_SCAN_SECONDS = 10.0  # a respawning process does not keep the guardian forever


def identity(pid: int | str = "self") -> str:
    """`<pid namespace inode>.<pid>.<start time>` of a process (this one by default): what
    the marker holds.  OSError if the process is gone."""
    real = os.getpid() if pid == "self" else int(pid)
    return f"{_pid_namespace(pid)}.{real}.{_start_time(real)}"


def _pid_namespace(pid: int | str = "self") -> int:
    """The inode of a process's pid namespace; 0 where /proc does not show it (a
    container that hides it: then every marker there reads as of this namespace)."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except PermissionError:
        return 0


def _start_time(pid: int) -> int:
    """Clock ticks since boot at which `pid` started (/proc/PID/stat field 22)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        # The command name (field 2) may hold spaces and parentheses: split after its last ")".
        return int(f.read().rpartition(b")")[2].split()[19])


def alive(owner: str) -> bool:
    """Whether the exporter a marker names still runs.  A marker from another pid
    namespace, or one that does not parse, cannot be judged here: taken as alive."""
    try:
        ns, pid, start = (int(part) for part in owner.split("."))
    except ValueError:
        return True
    if ns != _pid_namespace():
        return True
    try:
        return _start_time(pid) == start
    except (OSError, ValueError, IndexError):
        return False


def marked() -> Iterator[tuple[int, str]]:
    """(pid, owner) of every process this one may read that carries a marker."""
    key = MARKER.encode() + b"="
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                environ = f.read()
        except OSError:  # gone, or another user's
            continue
        for entry in environ.split(b"\0"):
            if entry.startswith(key):
                yield int(name), entry[len(key) :].decode("ascii", "replace")
                break


def marker_of(pid: int) -> str | None:
    """The marker in process `pid`'s environment (the exporter it belongs to), None where
    it carries none; OSError where its environment cannot be read (gone, another user's).
    Only that one entry is looked for; nothing of the environment is kept."""
    key = MARKER.encode() + b"="
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read()
    for entry in environ.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key) :].decode("ascii", "replace")
    return None


def describe(pid: int) -> str:
    """The command line of `pid`, shortened (for the log)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().rstrip(b"\0").split(b"\0")
    except OSError:
        return "?"
    text = " ".join(w.decode("utf-8", "replace") for w in words)
    return text if len(text) <= 200 else text[:197] + "..."


def _running(pid: int, start: int) -> bool:
    """Whether `pid` is still the process that started at `start` and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return fields[0] != b"Z" and int(fields[19]) == start
    except (OSError, ValueError, IndexError):
        return False


def end(pids: Iterable[int], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM each process (the whole group where it leads one, so helpers that do not
    carry the marker go too), then SIGKILL whatever still runs after `grace` seconds."""
    targets: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            targets[pid] = _start_time(pid)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid, start in targets.items():
            if not _running(pid, start):
                continue
            with contextlib.suppress(OSError):
                if os.getpgid(pid) == pid:
                    os.killpg(pid, sig)
                os.kill(pid, sig)
        deadline = time.monotonic() + (grace if sig == signal.SIGTERM else 1.0)
        while time.monotonic() < deadline and any(_running(p, s) for p, s in targets.items()):
            time.sleep(0.02)


def reap(me: str) -> list[tuple[int, str, str]]:
    """End every process whose marker names an exporter that no longer runs (not `me`);
    returns (pid, owner, command line) of each."""
    orphans = [(pid, owner) for pid, owner in marked() if owner != me and pid != os.getpid() and not alive(owner)]
    found = [(pid, owner, describe(pid)) for pid, owner in orphans]
    end(pid for pid, _ in orphans)
    return found


class Ended(NamedTuple):
    processes: int  # carrying the marker
    masters: int  # ssh masters that said they exit
    seconds: float  # from the exporter's end to the guardian's
    hidden: int = 0  # ssh masters still running after the asks, ended by their title
    failures: tuple[str, ...] = ()  # what ssh said of each ask that failed


def guard(owner: str, lifeline: int = 0) -> Ended:
    """Wait until `lifeline` reaches EOF (the exporter has ended), then end every process
    carrying `owner`'s marker, and the ssh masters of the commands the exporter named on
    the lifeline meanwhile."""
    said = b""
    while True:
        try:
            chunk = os.read(lifeline, 65536)
        except InterruptedError:
            continue
        except OSError:
            break
        if not chunk:
            break
        said += chunk
    ended = masters = 0
    failures: list[str] = []
    commands = _ssh_commands(said)
    masters_asked = False  # since the last marked process was ended
    began = quiet_since = time.monotonic()

    def ask() -> None:
        nonlocal masters
        asked = stop_masters(commands)
        masters += asked.exited
        failures.extend(f for f in asked.failures if f not in failures)

    while time.monotonic() - began < LONGEST_SCAN_SECONDS:
        targets = [pid for pid, o in marked() if o == owner and pid != os.getpid()]
        if targets:
            end(targets)
            ended += len(targets)
            quiet_since = time.monotonic()
            masters_asked = False
        elif time.monotonic() - quiet_since < LATE_EXEC_SECONDS:
            time.sleep(0.05)
        elif masters_asked:
            break
        else:
            # The masters go once nothing marked has run for a while, and the scan goes
            # on for as long again: an ssh executed late (forked as the exporter was
            # killed) finds no master to join and becomes one itself, hidden from the
            # marker as soon as it detaches.  Seen marked, it is ended, and the masters
            # are asked again.
            ask()
            masters_asked = True
            quiet_since = time.monotonic()
    if not masters_asked:
        ask()
    # A master the asks did not reach still runs, hidden from the marker: one whose
    # control socket is gone (removed by a /tmp cleaner, or never linked), one that
    # detached after the last ask, or one that did not answer in time.  It is found by the
    # title it gives itself.  (The master left after kills beside CPU burners and in CI
    # was another matter: this guardian, then carrying the marker, ended by another
    # exporter's start before it could ask; process.ensure_guardian.)
    hidden = masters_on(control_paths(commands)) if commands else []
    end(hidden)
    return Ended(ended, masters, time.monotonic() - began, len(hidden), tuple(failures))


# An ssh ControlMaster with ControlPersist runs on after the command that started it, as a
# daemon that rewrites its own environment and command line (setproctitle): no marker to
# find it by.  The exporter names its ssh commands on the lifeline (SSH_PREFIX and the
# argv as JSON, a line each); once it has ended, each one's master is asked to exit, and
# one that still runs is found by its title, `ssh: CONTROL_PATH [mux]`.
SSH_PREFIX = "ssh-command "
MASTER_EXIT_SECONDS = 5.0
SSH_SAID_BYTES = 300  # of an ask's error, in the exporter's log


def _ssh_commands(said: bytes) -> list[list[str]]:
    commands = []
    for line in said.decode("utf-8", "replace").splitlines():
        if line.startswith(SSH_PREFIX):
            with contextlib.suppress(ValueError):
                argv = json.loads(line[len(SSH_PREFIX) :])
                if isinstance(argv, list) and all(isinstance(w, str) for w in argv) and argv not in commands:
                    commands.append(argv)
    return commands


def _with_ssh_option(argv: list[str], *option: str) -> list[str] | None:
    """`argv` (`[...] ssh [options] destination`, possibly behind `ip netns exec NS`) with
    `option` given to ssh first; None if it runs no ssh."""
    at = next((i for i, word in enumerate(argv) if os.path.basename(word) == "ssh"), None)
    return None if at is None else [*argv[: at + 1], *option, *argv[at + 1 :]]


def _run_all(argvs: list[list[str]]) -> list[subprocess.CompletedProcess[bytes]]:
    """Run the commands at once, each for at most MASTER_EXIT_SECONDS (killed then: its
    return code is negative); those that cannot be started are left out."""
    started = []
    for argv in argvs:
        with contextlib.suppress(OSError):
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            started.append((argv, proc))
    deadline = time.monotonic() + MASTER_EXIT_SECONDS
    done = []
    for argv, proc in started:
        try:
            out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        done.append(subprocess.CompletedProcess(argv, proc.returncode, out, err))
    return done


class Asked(NamedTuple):
    exited: int  # masters that said they exit
    failures: list[str]  # what ssh said of each ask that failed (none running is not one)


def stop_masters(commands: list[list[str]]) -> Asked:
    """Ask the ControlMaster of each ssh command to exit: `ssh -O exit` with the same
    options, all at once.  Nothing happens where there is none (no ControlPath, or no
    master running)."""
    asks = [a for a in (_with_ssh_option(c, "-O", "exit") for c in commands) if a is not None]
    exited, failures = 0, []
    for done in _run_all(asks):
        said = done.stderr.decode("utf-8", "replace").strip()
        if done.returncode == 0:
            exited += 1
        elif done.returncode < 0:
            failures.append(f"`ssh -O exit` gave no answer in {MASTER_EXIT_SECONDS:.0f} s")
        elif "No such file or directory" not in said and "Connection refused" not in said:
            failures.append(said[:SSH_SAID_BYTES] or f"`ssh -O exit` exited {done.returncode}")
    return Asked(exited, failures)


def control_paths(commands: list[list[str]]) -> list[str]:
    """The ControlPath of each ssh command as ssh expands it (`ssh -G`: the configuration
    read and printed, no connection), where there is one."""
    paths = []
    for done in _run_all([a for a in (_with_ssh_option(c, "-G") for c in commands) if a is not None]):
        for line in done.stdout.decode("utf-8", "replace").splitlines():
            key, _, value = line.partition(" ")
            if done.returncode == 0 and key == "controlpath" and value not in ("", "none") and value not in paths:
                paths.append(value)
    return paths


def masters_on(paths: list[str]) -> list[int]:
    """Running processes titled as an ssh ControlMaster on one of `paths`
    (`ssh: PATH [mux]`: what a master sets once it has detached)."""
    titles = {os.fsencode(f"ssh: {path} [mux]") for path in paths}
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                title = f.read().split(b"\0", 1)[0].rstrip(b" ")
            if title in titles and _running(int(name), _start_time(int(name))):
                found.append(int(name))
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].count(".") != 2:
        print("usage: guardian.py OWNER (stdin: the lifeline)", file=sys.stderr)
        return 2
    # The exporter ends its children itself on Ctrl-C; the guardian acts at its end only.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    ended = guard(argv[0])
    if (
        ended.processes or ended.masters or ended.hidden or ended.failures
    ):  # in the exporter's log: what it left, and how long
        hidden = f"; {ended.hidden} ssh masters the asks did not reach, ended by their title" if ended.hidden else ""
        said = "".join(f"; an ask failed: {failure}" for failure in ended.failures)
        print(
            f"bigbinf guardian: the exporter ended; ended {ended.processes} of its processes and "
            f"{ended.masters} ssh masters in {ended.seconds:.1f} s{hidden}{said}",
            file=sys.stderr,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
