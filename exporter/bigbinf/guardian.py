"""Nothing outlives the exporter: the marker its processes carry, the guardian that ends
them when the exporter ends, and the reaper that ends those of an exporter gone before.

    python3 -I guardian.py OWNER        (its standard input is the lifeline)

Every process the exporter starts (captures, transfer commands and whatever they start,
ss watchers, ssh masters, the analyser worker, multiprocessing's resource tracker)
inherits one environment variable, ``BIGBINF_OWNER=<pid namespace>.<pid>.<start time>``:
the exporter's own identity, which no other process has or will have (a pid is reused,
never with the same start time).  From it:

* the guardian, a small process the exporter starts first (process.own_children),
  blocks reading a pipe whose other end only the exporter holds.  When the exporter
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

Why not the parent-death signal (PR_SET_PDEATHSIG): it fires when the *thread* that
started the child ends, and the exporter starts children from worker threads (the
scheduler's pool, the mesh runner, the watches' samplers); the kernel clears it when the
child executes a set-id or file-capability program (tcpdump given cap_net_raw); it
reaches only the direct child, not scp's ssh or lftp's helpers; and setting it needs
code between fork and exec (preexec_fn), which is unsafe in a threaded program.  Why not
a wrapper per command: the capture's and the watchers' own pids are read in /proc (the
tcpdump's wait, ss's netlink socket), and a wrapper would stand in between.  One
guardian and one marker cover every descendant, whatever thread started it, whatever it
executes, and what escapes the guardian is still found by its marker at the next start.
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
    commands = _ssh_commands(said)
    masters_asked = False  # since the last marked process was ended
    began = quiet_since = time.monotonic()
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
            # marker as soon as it detaches (one way a ControlPersist master could
            # outlive a guardian that had asked the old one to exit: seen twice beside CPU
            # burners, its cause not yet confirmed).  Seen marked, it is ended, and the
            # masters are asked again.
            masters += stop_masters(commands)
            masters_asked = True
            quiet_since = time.monotonic()
    if not masters_asked:
        masters += stop_masters(commands)
    return Ended(ended, masters, time.monotonic() - began)


# An ssh ControlMaster with ControlPersist runs on after the command that started it, as a
# daemon that rewrites its own environment and command line (setproctitle): no marker to
# find it by.  The exporter names its ssh commands on the lifeline (SSH_PREFIX and the
# argv as JSON, a line each); once it has ended, each one's master is asked to exit.
SSH_PREFIX = "ssh-command "
MASTER_EXIT_SECONDS = 5.0


def _ssh_commands(said: bytes) -> list[list[str]]:
    commands = []
    for line in said.decode("utf-8", "replace").splitlines():
        if line.startswith(SSH_PREFIX):
            with contextlib.suppress(ValueError):
                argv = json.loads(line[len(SSH_PREFIX) :])
                if isinstance(argv, list) and all(isinstance(w, str) for w in argv) and argv not in commands:
                    commands.append(argv)
    return commands


def stop_masters(commands: list[list[str]]) -> int:
    """Ask the ControlMaster of each ssh command (`[...] ssh [options] destination`,
    possibly behind `ip netns exec NS`) to exit: `ssh -O exit` with the same options, all
    at once, each for at most MASTER_EXIT_SECONDS.  Nothing happens where there is none
    (no ControlPath, or no master running).  Returns how many masters said they exit."""
    asked = []
    for argv in commands:
        at = next((i for i, word in enumerate(argv) if os.path.basename(word) == "ssh"), None)
        if at is None:
            continue
        with contextlib.suppress(OSError):
            asked.append(
                subprocess.Popen(
                    [*argv[: at + 1], "-O", "exit", *argv[at + 1 :]],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
    deadline = time.monotonic() + MASTER_EXIT_SECONDS
    for proc in asked:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return sum(proc.returncode == 0 for proc in asked)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].count(".") != 2:
        print("usage: guardian.py OWNER (stdin: the lifeline)", file=sys.stderr)
        return 2
    # The exporter ends its children itself on Ctrl-C; the guardian acts at its end only.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    ended = guard(argv[0])
    if ended.processes or ended.masters:  # in the exporter's log: what it left, and how long ending it took
        print(
            f"bigbinf guardian: the exporter ended; ended {ended.processes} of its processes and "
            f"{ended.masters} ssh masters in {ended.seconds:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
