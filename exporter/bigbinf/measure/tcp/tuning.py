"""A protocol's `congestion` and `tcp_buffer_max`, applied to the transfer's hosts
without the tool knowing, restored afterwards, and read back from the kernel.

Congestion control: the sender's kernel picks the algorithm of a new connection from the
route to its peer when the route says `congctl` (for connect() and for accepted sockets
alike: tcp_ca_dst_init / tcp_ca_openreq_child), so one host route

    ip route replace PEER/32 dev D [via G] [src S] proto 177 congctl lock ALG

on the sending side changes nothing but this path, and `lock` makes a tool's own
setsockopt(TCP_CONGESTION) fail (EPERM) instead of overriding it silently.  The route
is put there just before the transfer and removed (or, where a /32 to the peer existed,
put back as it was) right after it, whatever happened; the host's default
(net.ipv4.tcp_congestion_control) is never touched.  Routes bigbinf adds carry
`proto 177`: only such a route is ever deleted, and one found where none should be is
removed before the next is set.

Buffers: tcp_wmem (sender) and tcp_rmem (receiver) are per network namespace; their
maximum is lowered to the cap (and min/default with it where they were above) for the
transfer and the old triple written back after.  Only in a namespace of the transfer's
own (the lab's, a remote's `netns`) or on a remote through its `tcp_command`: never this
host's own root namespace (config.py refuses it).

Every change is written down first, with what undoes it, in the undo journal
(measure/undo.py), and struck off once undone: an exporter killed mid-transfer leaves
the journal saying what to put back, and the next start (or round, or `lab down`, or
`sweep`) does it.  A side with an earlier change still not undone is not changed again
(what is there now is not what to restore).

What the kernel did is read back from the sockets' tcp_info (measure/tcp/state.py): the
congestion control of every data socket of the sender, the send buffer (skmem tb) of the
sender and the receive buffer (skmem rb) of the receiver.  `check` says what disagrees.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bigbinf.measure.tcp.state import TcpSummary
from bigbinf.measure.undo import Undo, UndoError, UndoJournal
from bigbinf.process import owned

log = logging.getLogger(__name__)

ROUTE_PROTO = "177"  # marks the routes bigbinf adds (iproute2 names no protocol 177)
COMMAND_TIMEOUT_SECONDS = 15.0
_LOCAL_PROGRAMS = frozenset({"ip", "nsenter"})  # prefixes that run the command on this host
# Flags `ip route show` prints that `ip route replace` does not take.
_SHOW_ONLY = frozenset({"linkdown", "dead", "offload", "trap", "rt_offload", "rt_trap", "rt_offload_failed", "notify"})


class TuningError(Exception):
    """A setting that could not be applied or restored: the message says where and why."""


@dataclass(frozen=True)
class Side:
    """One end of the transfer, as far as setting it goes."""

    what: str  # "this host (namespace X)", "remote lab": for messages
    prefix: tuple[str, ...]  # argv that runs a command there ([] here)
    peer: str  # the other end's address
    missing: str = ""  # why nothing can be run there ("" = it can)

    @property
    def through_shell(self) -> bool:
        """Whether the prefix hands its words to a remote shell (ssh joins them): then
        each word is quoted; `ip netns exec` and nothing run them as they are.  The
        program that gets the words is the one after any `ip netns exec NS` (a site's
        tcp_command run from a namespace of its own: `ip netns exec NS ssh ...`)."""
        words = list(self.prefix)
        while len(words) >= 4 and os.path.basename(words[0]) == "ip" and words[1:3] == ["netns", "exec"]:
            words = words[4:]
        return bool(words) and os.path.basename(words[0]) not in _LOCAL_PROGRAMS

    def run(self, argv: Sequence[str]) -> str:
        if self.missing:
            raise TuningError(f"{self.what}: {self.missing}")
        words = [shlex.quote(a) for a in argv] if self.through_shell else list(argv)
        full = [*self.prefix, *words]
        try:
            # owned: a remote's tcp_command through ssh may start the ControlMaster the
            # round's other sessions share, and only through owned is its persistence bounded.
            proc = subprocess.run(owned(full), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            raise TuningError(
                f"{self.what}: `{shlex.join(argv)}` did not finish in {COMMAND_TIMEOUT_SECONDS:g}s"
            ) from None
        except OSError as exc:
            raise TuningError(f"{self.what}: cannot run {full[0]}: {exc.strerror}") from None
        if proc.returncode != 0:
            said = " ".join((proc.stderr or proc.stdout).split())[-300:]
            raise TuningError(f"{self.what}: `{shlex.join(argv)}` exited {proc.returncode}: {said}")
        return proc.stdout


# ---------------------------------------------------------------- congestion control


def route_replacement(get_line: str, existing: str, peer: str, algorithm: str) -> tuple[list[str], str]:
    """(the `ip route replace` words that give the path to `peer` congestion control
    `algorithm`, the table), from `ip -o route get PEER` and the exact /32 route to the
    peer that exists already ("" if none; one of ours counts as none)."""
    table = re.search(r"\btable (\S+)", get_line)
    table_name = table.group(1) if table else "main"
    if existing:
        words = [w for w in existing.split() if w not in _SHOW_ONLY]
        words = _without_congctl(words)
        return [*words, "table", table_name, "congctl", "lock", algorithm], table_name
    words = [host_prefix(peer)]
    for key in ("via", "dev", "src"):
        found = re.search(rf"\b{key} (\S+)", get_line)
        if found:
            words += [key, found.group(1)]
    if "dev" not in words:
        raise TuningError(f"`ip route get {peer}` names no device: {get_line.strip()!r}")
    return [*words, "table", table_name, "proto", ROUTE_PROTO, "congctl", "lock", algorithm], table_name


def _without_congctl(words: list[str]) -> list[str]:
    out, i = [], 0
    while i < len(words):
        if words[i] == "congctl":
            i += 3 if i + 1 < len(words) and words[i + 1] == "lock" else 2
            continue
        out.append(words[i])
        i += 1
    return out


def host_prefix(peer: str) -> str:
    """The host route's prefix of an address: /32, or /128 for IPv6."""
    return f"{peer}/128" if ":" in peer else f"{peer}/32"


def _is_ours(route: str) -> bool:
    return f" proto {ROUTE_PROTO} " in f" {route} "


def set_congestion(side: Side, algorithm: str, journal: UndoJournal | None = None) -> Callable[[], None]:
    """Route the peer through congestion control `algorithm` on `side` (its undo written
    to `journal` first); returns the undo."""
    peer = side.peer
    get_line = " ".join(side.run(["ip", "-o", "route", "get", peer]).split())
    table = re.search(r"\btable (\S+)", get_line)
    table_name = table.group(1) if table else "main"
    existing = " ".join(
        side.run(["ip", "-o", "route", "show", "table", table_name, "exact", host_prefix(peer)]).split()
    )
    if existing and _is_ours(existing):  # left by an exporter killed mid-transfer
        log.warning("%s: removing a congestion route left behind: %s", side.what, existing)
        side.run(["ip", "route", "del", host_prefix(peer), "table", table_name, "proto", ROUTE_PROTO])
        existing = ""
    words, table_name = route_replacement(get_line, existing, peer, algorithm)
    if existing:
        restore = ["ip", "route", "replace", *[w for w in existing.split() if w not in _SHOW_ONLY], "table", table_name]
    else:  # before, there was no such route: ours goes (only ours: proto 177)
        restore = ["ip", "route", "del", host_prefix(peer), "table", table_name, "proto", ROUTE_PROTO]
    entry = _write_down(journal, side, "route", f"the route to {peer} given congestion control {algorithm}", restore)

    def undo() -> None:
        side.run(restore)
        _struck_off(journal, entry)

    try:
        side.run(["ip", "route", "replace", *words])
    except TuningError as exc:
        # It may have been applied all the same (a remote command that timed out after
        # the change): put back what was there; nothing to put back is no error.
        with contextlib.suppress(TuningError):
            undo()
        raise TuningError(f"congestion {algorithm}: {exc}" + _hint(str(exc), algorithm)) from None
    try:
        now = " ".join(side.run(["ip", "-o", "route", "get", peer]).split())
    except TuningError:
        undo()
        raise
    if not re.search(rf"\bcongctl lock {re.escape(algorithm)}\b", now):
        undo()
        raise TuningError(f"congestion {algorithm}: {side.what}: the route to {peer} does not say it: {now!r}")
    return undo


def _hint(error: str, algorithm: str) -> str:
    if "unknown tcp congestion" in error.lower() or "argument" in error or "Invalid" in error:
        return (
            f" (the kernel there does not know {algorithm!r}: see its "
            f"/proc/sys/net/ipv4/tcp_available_congestion_control, or load it with `modprobe tcp_{algorithm}`)"
        )
    return ""


# ---------------------------------------------------------------- buffers


def capped(triple: tuple[int, int, int], cap: int) -> tuple[int, int, int]:
    """A tcp_rmem/tcp_wmem triple whose maximum is `cap` (min and default lowered to it
    where they were above)."""
    low, default, _ = triple
    return min(low, cap), min(default, cap), cap


def set_buffer_max(side: Side, key: str, cap: int, journal: UndoJournal | None = None) -> Callable[[], None]:
    """net.ipv4.`key` (tcp_rmem or tcp_wmem) capped at `cap` on `side` (its undo written to
    `journal` first); returns the undo."""
    out = side.run(["sysctl", "-n", f"net.ipv4.{key}"]).split()
    try:
        old = (int(out[0]), int(out[1]), int(out[2]))
    except (ValueError, IndexError):
        raise TuningError(f"{side.what}: net.ipv4.{key} read as {' '.join(out)!r}, not three numbers") from None

    def write(triple: tuple[int, int, int]) -> list[str]:
        return ["sysctl", "-q", "-w", f"net.ipv4.{key}={' '.join(map(str, triple))}"]

    restore = write(old)
    entry = _write_down(
        journal, side, "sysctl", f"net.ipv4.{key} capped at {cap} (was {' '.join(map(str, old))})", restore
    )

    def undo() -> None:
        side.run(restore)
        _struck_off(journal, entry)

    try:
        side.run(write(capped(old, cap)))
    except TuningError:
        with contextlib.suppress(TuningError):  # it may have been applied all the same (a timeout)
            undo()
        raise
    return undo


def _write_down(journal: UndoJournal | None, side: Side, kind: str, what: str, restore: list[str]) -> Undo | None:
    """The undo of a change about to be made, written to the journal (durably) first; a
    journal that cannot be written stops the change."""
    if journal is None:
        return None
    try:
        return journal.add(
            Undo(kind, side.what, what, prefix=side.prefix, quote=side.through_shell, words=tuple(restore))
        )
    except UndoError as exc:
        raise TuningError(f"{side.what}: {what}: not changed: {exc}") from None


def _struck_off(journal: UndoJournal | None, entry: Undo | None) -> None:
    if journal is not None and entry is not None:
        try:
            journal.done(entry)
        except UndoError as exc:  # undone all the same: a later replay finds nothing left to undo
            log.error("%s", exc)


# ---------------------------------------------------------------- around one transfer


@dataclass
class Tuned:
    """The settings of one transfer, as a context manager: `with Tuned(...)` applies them
    (raising TuningError, with anything applied already undone, when one cannot be) and
    restores them on the way out whatever happened; `restore_errors` says what could not
    be put back (also logged as errors)."""

    congestion: str
    buffer_max: int | None
    sender: Side
    receiver: Side
    journal: UndoJournal | None = None  # where each change's undo is written first
    restore_errors: list[str] = field(default_factory=list)
    _undo: list[Callable[[], None]] = field(default_factory=list)

    @property
    def wanted(self) -> bool:
        return bool(self.congestion) or self.buffer_max is not None

    def __enter__(self) -> Tuned:
        try:
            # Both sides first: a replay after this transfer's first change would undo it.
            if self.wanted:
                self._settled(self.sender)
            if self.buffer_max is not None:
                self._settled(self.receiver)
            if self.congestion:
                self._undo.append(set_congestion(self.sender, self.congestion, self.journal))
            if self.buffer_max is not None:
                self._undo.append(set_buffer_max(self.sender, "tcp_wmem", self.buffer_max, self.journal))
                self._undo.append(set_buffer_max(self.receiver, "tcp_rmem", self.buffer_max, self.journal))
        except BaseException:
            self.restore()
            raise
        return self

    def _settled(self, side: Side) -> None:
        """Undo what an earlier run left changed on `side` first; if that cannot be done,
        `side` is not changed again: what is there now is not what to restore after."""
        if self.journal is None:
            return
        try:
            left = self.journal.replay(lambda e: e.kind != "upload" and e.prefix == side.prefix).failed
        except UndoError as exc:
            raise TuningError(str(exc)) from None
        if left:
            raise TuningError(
                f"{side.what}: an earlier run's change there is still not undone, so it is not changed again "
                f"(what is there now is not what to put back): {left[0]}"
            )

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def restore(self) -> None:
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except TuningError as exc:
                log.error("restoring a transfer's TCP setting failed: %s", exc)
                self.restore_errors.append(f"restore: {exc}")


def check(
    congestion: str, buffer_max: int | None, sender: TcpSummary | None, receiver: TcpSummary | None, where: str
) -> list[str]:
    """What the sender's and receiver's kernels say against what was asked: one problem
    per disagreement ([] if they agree).  `where` names the sender ("this host",
    "the remote")."""
    problems = []
    if congestion:
        used = sender.congestion_controls if sender else ()
        if not used:
            problems.append(
                f"congestion: asked for {congestion} on the sender ({where}), but no listing of its data sockets "
                "named their congestion control (a transfer shorter than the interval between two listings, or "
                "no stats_command): nothing confirms it"
            )
        elif used != (congestion,):
            problems.append(
                f"congestion: asked for {congestion} on the sender ({where}); the kernel's tcp_info says its data "
                f"sockets used {', '.join(used)}"
            )
    if buffer_max is not None:
        for summary, value_key, what in (
            (sender, "sndbuf_max_bytes", "the sender's send buffer (skmem tb)"),
            (receiver, "rcvbuf_max_bytes", "the receiver's receive buffer (skmem rb)"),
        ):
            seen = summary.values.get(value_key) if summary else None
            if seen is not None and seen > buffer_max:
                problems.append(
                    f"tcp_buffer_max: asked for at most {buffer_max} bytes; {what} reached {seen:.0f} bytes"
                )
    return problems
