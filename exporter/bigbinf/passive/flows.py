"""The connections the passive watcher follows, grouped into transfers, and a transfer's
Result (source "passive"), judged by the scheduled transfers' judge.

A flow is one connection (local and peer endpoint) from the first listing that showed it
to its close event.  Its samples are the listings in which it moved data (an idle
listing adds nothing the next one does not say), thinned to at most MAX_SAMPLES, so a
flow costs O(1) memory however long it lives and the watcher O(flows).

Flows of one transfer are grouped where the kernel shows they belong together: the same
owning process (pid, from `ss -p`), the same remote, and overlapping lives (a GridFTP
client's control channel and its parallel data streams; an rsync's one connection).  A
connection to a remote with no service's port (GridFTP's data channels in active mode run
between the two hosts' ephemeral ports) is followed, and counts only in a group that also
holds a service's connection: alone, it is dropped when it closes.  A
group is due once every flow of it has closed and `linger` has passed with no new one (a
next file's connection joins the same transfer).  A flow whose owner no listing saw (it
lived between two listings) is a transfer of its own.  One that closed before any listing
showed it (its close event alone: no samples, no owner, no start) is never judged; where it
moved min_bytes to a watched remote's service it is counted as missed, so that a watcher
whose listings come too seldom (a busy host stretches them) says so.

The Result carries only this host's kernel's view (tcp_local; the remote is not asked:
nothing is sent to it), with no capture (wire_measured false): the judge reads it through
its one entry point, judge_limit, as it reads a scheduled transfer's."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from bigbinf.judge.verdict import with_limit
from bigbinf.measure.tcp.state import Listing, SocketInfo, summarise
from bigbinf.passive.select import UNKNOWN, Selection
from bigbinf.protocols.base import DATA_FLOW_BYTES
from bigbinf.result import PathBaseline, Result

log = logging.getLogger(__name__)

MAX_SAMPLES = 256  # per flow; past this every second one is dropped (the newest kept)
SOURCE = "passive"
DATASET = "passive"  # a passive result's dataset label: its files are not known
REMOTE_NOTE = "a passive flow: only this host's kernel is read (nothing is sent to the remote)"


@dataclass
class Flow:
    """One connection followed: when it was first seen and where it could have begun (the
    listing before, which did not show it), its samples, its last info, its close."""

    key: tuple[str, str]
    remote: str
    service: str
    first_at: float  # monotonic: the listing that first showed it
    first_wall: float
    began_after: float | None  # monotonic: the listing before it (None: open when the watcher started)
    last: SocketInfo
    samples: list[tuple[float, SocketInfo]] = field(default_factory=list)
    closed: SocketInfo | None = None
    closed_at: float | None = None
    owner: tuple[str, int] | None = None  # (comm, pid) from ss -p
    lost_at: float | None = None  # monotonic: the first listing that no longer showed it (no close event yet)
    command: list[str] = field(default_factory=list)  # the owner's command line, where record_commands asks
    # Whether its owner is a bigbinf exporter's own transfer (its processes carry the
    # guardian's marker): the scheduled transfers are judged as such, never as passive ones.
    scheduled: bool | None = None  # None: not looked at yet

    @property
    def moved(self) -> int:
        info = self.closed or self.last
        return info.moved_bytes

    @property
    def end(self) -> float | None:
        return self.closed_at

    def sample(self, at: float, info: SocketInfo) -> None:
        if not info.has_info:
            return
        self.last = info
        if info.owners and self.owner is None:
            self.owner = info.owners[0]
        if self.samples and info.moved_bytes == self.samples[-1][1].moved_bytes and not info.notsent_bytes:
            # Nothing moved since the last sample and nothing waits to be sent: it adds
            # nothing (a sender held by a zero window has data waiting: kept).
            return
        self.samples.append((at, info))
        if len(self.samples) > MAX_SAMPLES:
            newest = self.samples[-1]
            self.samples = [*self.samples[:-1:2], newest]


@dataclass(frozen=True)
class Transfer:
    """Flows judged as one transfer."""

    remote: str
    flows: tuple[Flow, ...]


class Tracker:
    """The flows followed and the transfers they make: fed listings and close events (by
    the watcher, or a test), asked for the transfers that are due."""

    def __init__(self, selection: Selection, linger: float, max_flows: int, min_bytes: int = 0) -> None:
        self.selection = selection
        self.linger = linger
        self.max_flows = max_flows
        self.min_bytes = min_bytes
        self.flows: dict[tuple[str, str], Flow] = {}
        self.skipped = 0  # connections listed but not followed (max_flows reached), counted once each
        self.missed = 0  # transfers (min_bytes to a service) that closed before any listing showed them
        self._skipped_keys: set[tuple[str, str]] = set()
        self._previous_listing: float | None = None

    @property
    def skipped_keys(self) -> frozenset[tuple[str, str]]:
        """The connections the last listing skipped (max_flows reached)."""
        return frozenset(self._skipped_keys)

    def listing(
        self,
        at: float,
        sockets: Iterable[SocketInfo],
        wall: float | None = None,
        unchanged: Iterable[tuple[str, str]] = (),
    ) -> None:
        """One listing taken at `at` (monotonic); `unchanged`: followed flows it showed
        as their last sample left them (not parsed again: watcher.py's quick look)."""
        wall = time.time() if wall is None else wall
        shown: set[tuple[str, str]] = set(unchanged)
        for key in shown:
            if key in self.flows:
                self.flows[key].lost_at = None
        # Those skipped before and listed again (unchanged holds them too) stay skipped, uncounted.
        skipped: set[tuple[str, str]] = shown & self._skipped_keys
        for s in sockets:
            if not s.has_info or s.state in ("TIME-WAIT", "LISTEN", "SYN-SENT", "SYN-RECV"):
                continue
            flow = self.flows.get(s.key)
            if flow is None or flow.closed is not None:
                if flow is not None:  # the same endpoints again: a new connection
                    continue
                if len(self.flows) >= self.max_flows:
                    skipped.add(s.key)
                    continue
                remote = self.selection.remote_of(s.peer)
                if not remote:
                    continue
                service, _ = self.selection.service_of(s.local, s.peer)
                if service == UNKNOWN:
                    service = ""  # followed only for a program that holds a service's connection too
                flow = Flow(s.key, remote, service, at, wall, self._previous_listing, s)
                self.flows[s.key] = flow
            shown.add(s.key)
            flow.lost_at = None
            flow.sample(at, s)
        for key, flow in self.flows.items():
            if key not in shown and flow.closed is None and flow.lost_at is None:
                flow.lost_at = at
        new = skipped - self._skipped_keys
        self.skipped += len(new)
        self._skipped_keys = skipped
        self._previous_listing = at

    def closed(self, at: float, sockets: Iterable[SocketInfo]) -> None:
        """Close events read at `at` (monotonic): each socket's final tcp_info."""
        for s in sockets:
            flow = self.flows.get(s.key)
            if flow is None and s.has_info and s.key not in self._skipped_keys and self._a_missed_transfer(s):
                self.missed += 1
            if flow is None or flow.closed is not None or not s.has_info:
                continue  # not followed (one no listing saw, or one skipped)
            flow.closed = _completed(s, flow.last)
            flow.closed_at = at

    def _a_missed_transfer(self, s: SocketInfo) -> bool:
        """Whether a close event no listing preceded is a transfer the watcher was asked
        about: min_bytes moved between a watched remote and one of its services' ports."""
        if s.moved_bytes < max(1, self.min_bytes) or not self.selection.remote_of(s.peer):
            return False
        service, _ = self.selection.service_of(s.local, s.peer)
        return service != UNKNOWN

    def due(self, now: float, lost_after: float) -> list[Transfer]:
        """The transfers whose flows have all closed, `linger` ago (taken out of the
        tracker).  A flow no listing has shown for `lost_after` seconds and whose close
        event never came (the event was lost) is closed at its last listing."""
        for flow in self.flows.values():
            if flow.closed is None and flow.lost_at is not None and now - flow.lost_at >= lost_after:
                flow.closed, flow.closed_at = flow.last, flow.lost_at
        return self._take(
            lambda group: all(f.closed_at is not None for f in group) and now - _ended(group) >= self.linger
        )

    def flush(self, now: float) -> list[Transfer]:
        """Every flow, open or not (the watcher stops: nothing measured is lost); an open
        one ends at its last listing."""
        for flow in self.flows.values():
            if flow.closed_at is None:
                flow.closed_at = flow.samples[-1][0] if flow.samples else flow.first_at
        return self._take(lambda _group: True)

    def _take(self, ready: Callable[[list[Flow]], bool]) -> list[Transfer]:
        """The groups `ready` takes, out of the tracker; a group none of whose
        connections is a service's (no port of passive.services, no program that also
        held one), or one of a bigbinf exporter's own transfers (Flow.scheduled), is
        dropped: not a transfer the watcher was asked about."""
        taken: list[Transfer] = []
        for group in self.groups():
            if ready(group):
                for flow in group:
                    del self.flows[flow.key]
                if any(f.service for f in group) and not any(f.scheduled for f in group):
                    taken.append(Transfer(group[0].remote, tuple(group)))
        return taken

    def groups(self) -> list[list[Flow]]:
        """The flows as transfers: by remote and owning pid, lives overlapping (within
        `linger`); a flow of unknown owner alone."""
        by_owner: dict[tuple[str, int], list[Flow]] = {}
        alone: list[list[Flow]] = []
        for flow in self.flows.values():
            if flow.owner is None:
                alone.append([flow])
            else:
                by_owner.setdefault((flow.remote, flow.owner[1]), []).append(flow)
        groups = alone
        for flows in by_owner.values():
            flows.sort(key=lambda f: f.first_at)
            current: list[Flow] = []
            reach = float("-inf")  # the latest close of the group so far (inf: one is open)
            for flow in flows:
                if current and flow.first_at > reach + self.linger:
                    groups.append(current)
                    current, reach = [], float("-inf")
                current.append(flow)
                reach = max(reach, flow.closed_at if flow.closed_at is not None else float("inf"))
            if current:
                groups.append(current)
        return groups


def _all_closed(group: Sequence[Flow]) -> bool:
    return all(f.closed_at is not None for f in group)


def _ended(group: Sequence[Flow]) -> float:
    return max(f.closed_at or 0.0 for f in group)


# What ss prints in a listing but not in a close event: taken from the last listing
# (as measure/tcp/state.py's summarise does for a scheduled transfer).
_LISTING_ONLY = ("congestion_control", "rcvbuf_bytes", "sndbuf_bytes", "rcv_queue_bytes")


def _completed(closed: SocketInfo, last: SocketInfo) -> SocketInfo:
    missing = {name: getattr(last, name) for name in _LISTING_ONLY if getattr(closed, name) in (None, "")}
    return dataclasses.replace(closed, owners=last.owners, **missing)


def result_of(
    transfer: Transfer,
    now_wall: float,
    now_mono: float,
    baseline: PathBaseline | None,
    min_bytes: int,
) -> Result | None:
    """The transfer's Result, judged; None where it moved less than `min_bytes`."""
    flows = transfer.flows
    finals = [f.closed or f.last for f in flows]
    sent = sum(s.bytes_acked for s in finals)
    received = sum(s.bytes_received for s in finals)
    direction = "upload" if sent > received else "download"
    moved = max(sent, received)
    if moved < min_bytes:
        return None
    # Times from the earliest the transfer could have begun: the listing before the one
    # that first showed it (None: it was open when the watcher started; then its first sight).
    began = min(f.began_after if f.began_after is not None else f.first_at for f in flows)
    ended = _ended(flows)
    listings: dict[float, list[SocketInfo]] = {}
    for flow in flows:
        for at, info in flow.samples:
            listings.setdefault(at, []).append(info)
    timed = [Listing(at - began, sockets) for at, sockets in sorted(listings.items())]
    closed = [f.closed for f in flows if f.closed is not None and f.closed is not f.last]
    summary = summarise([], timed, closed)
    biggest = max(flows, key=lambda f: f.moved)
    # The service is that of the connections with a service's port (a GridFTP client's
    # control channel, where its data channels are between ephemeral ports).
    service = max((f for f in flows if f.service), key=lambda f: f.moved, default=biggest).service
    owner = next((f.owner for f in flows if f.owner is not None), None)
    notes = []
    if any(f.began_after is None for f in flows):
        notes.append("open when the watcher started: its start and first bytes were before it")
    argv = next((f.command for f in flows if f.command), [])
    result = Result(
        protocol=service,
        remote=transfer.remote,
        dataset=DATASET,
        direction=direction,
        start_timestamp=now_wall - (now_mono - began),
        outcome="ok",
        duration_seconds=max(0.0, ended - began),
        file_bytes=moved,
        files=1,
        wire_measured=False,
        transport="tcp",
        # The data streams: connections that moved data either way (a control channel does not).
        data_flows=sum(1 for s in finals if s.moved_bytes >= DATA_FLOW_BYTES),
        client_address=_host(biggest.key[0]),
        remote_address=_host(biggest.key[1]),
        argv=argv,
        tcp_local=summary.values,
        tcp_remote_note=REMOTE_NOTE,
        congestion_control=summary.congestion_control,
        retransmits_sender=summary.retransmits if direction == "upload" else None,
        retransmits_sender_source="kernel" if direction == "upload" else "",
        source=SOURCE,
        program=owner[0] if owner is not None else "",
        passive_note="; ".join(notes),
    )
    return with_limit(result, baseline, f"passive {result.protocol} {result.remote}")


def _host(endpoint: str) -> str:
    return endpoint.rpartition(":")[0].strip("[]").split("%")[0].removeprefix("::ffff:")
