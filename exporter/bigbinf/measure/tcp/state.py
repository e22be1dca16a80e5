"""TCP state of a transfer's connections from the kernel (inet_diag through `ss`).

What limited a bulk transfer is written in its sockets' tcp_info: time limited by the
receive window or the send buffer (the sender's busy time splits into those and the
rest), retransmits, cwnd, delivery rate, and on the receiving side how far the
application lags behind (skmem r against rb).  TcpWatch reads it on one side of the
transfer through a prefix: [] here, `ip netns exec NS` in a namespace, a user's ssh
command on a remote host.  Every word after the prefix is a plain word, because ssh
joins them into a remote command line.

Two sources, both `ss`:
- listings (`ss -tinmH dst PEER`) every `interval` seconds: how the sockets evolve
  (delivery rate, cwnd, queue fill), and what the last one saw;
- close events (`ss -tinmEH dst PEER`, running throughout): the final tcp_info of every
  socket as it is destroyed, so counters are complete even for sockets that lived
  between two listings (one connection per file).  Event lines carry no skmem and no
  congestion control name; those come from the socket's last listing.

Which sockets count: those not there when the watch started (an ssh master connection
or a previous round's lingering sockets are not the transfer's); of those, the data
sockets moved at least DATA_FLOW_BYTES either way (control channels stay below).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import re
import shlex
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from bigbinf.guardian import marker_of
from bigbinf.measure.cgroups import cpu_files, group_dirs, printed_reader, read_groups, read_io_limits
from bigbinf.measure.programs import (
    ProgramLife,
    adaptive_interval,
    descendants,
    parse_parent,
    parse_schedstat,
    parse_stat,
    record,
)
from bigbinf.process import STDERR_TAIL_BYTES, kill_group, owned, track, untrack
from bigbinf.protocols.base import DATA_FLOW_BYTES


class TcpStateError(RuntimeError):
    """A stats command that failed: the message says which and why."""


class _TimedOut(TcpStateError):
    """A stats command that did not finish in time (the remote stopped answering)."""


@dataclass(frozen=True)
class SocketInfo:
    """One socket in one `ss -tinm` listing (base units; None where ss printed nothing)."""

    local: str  # "addr:port"
    peer: str
    congestion_control: str = ""
    cwnd: int | None = None  # segments
    ssthresh: int | None = None  # segments; printed only once the socket has reduced cwnd
    mss: int | None = None
    rtt_seconds: float | None = None
    min_rtt_seconds: float | None = None
    delivery_rate_bytes_per_second: float | None = None
    busy_seconds: float = 0.0  # tcpi_busy_time: time with data outstanding (includes the two below)
    rwnd_limited_seconds: float = 0.0
    sndbuf_limited_seconds: float = 0.0
    retransmits_total: int = 0
    bytes_acked: int = 0
    bytes_received: int = 0
    segs_out: int = 0
    rcv_space: int | None = None
    rcvbuf_bytes: int | None = None  # skmem rb
    sndbuf_bytes: int | None = None  # skmem tb
    rcv_queue_bytes: int | None = None  # skmem r: received, not yet read by the application
    app_limited: bool = False
    # Bytes the application wrote that TCP has not sent yet (ss prints notsent only when
    # there are any): a sender with a backlog had more to send than the network took.
    notsent_bytes: int = 0
    # The peer's advertised receive window (tcpi_snd_wnd: a sender's view of what the
    # receiver allows in flight), where ss prints it (iproute2 >= 5.x).
    snd_wnd_bytes: int | None = None
    # Retransmissions the receiver reported as duplicates (DSACK: tcpi_dsack_dups): the
    # segment had arrived, so its retransmission was spurious (reordering, a late ACK).
    dsack_dups: int = 0
    reord_seen: int = 0  # tcpi_reord_seen: reordering the sender detected
    # Segments delivered (tcpi_delivered), and of them those acknowledged with the ECN echo
    # (tcpi_delivered_ce: ECE set, a queue on the path marked CE), where ss prints them
    # (delivered_ce only where there were any).
    delivered: int = 0
    delivered_ce: int = 0
    backoff: int = 0  # tcpi_backoff: consecutive retransmission timeouts now
    pmtu: int | None = None  # the path MTU the socket uses
    advmss: int | None = None  # the MSS this end advertised
    # The window scale shifts (send, receive: `wscale:10,10`), printed only where both SYNs
    # carried the option (tcpi_options & TCPI_OPT_WSCALE): None with tcp_info printed (mss)
    # means scaling was not negotiated and no window exceeds 65535 B.
    wscale: tuple[int, int] | None = None
    state: str = ""  # ESTAB, FIN-WAIT-1...; UNCONN in a close event; "" when ss printed no state column
    # The processes holding the socket (`ss -p`: name, pid), where the listing asked and
    # the kernel let ss see them.
    owners: tuple[tuple[str, int], ...] = ()
    # False for a socket line without an info line (a TIME-WAIT socket has no tcp_info):
    # such a line must not replace what an earlier listing knew.
    has_info: bool = True

    @property
    def key(self) -> tuple[str, str]:
        return (self.local, self.peer)

    @property
    def moved_bytes(self) -> int:
        return max(self.bytes_acked, self.bytes_received)


# ---------------------------------------------------------------- parsing

# Bare words ss prints before the congestion control name (tcp_show_info): TCP options.
_OPTION_WORDS = frozenset({"ts", "sack", "ecn", "ecnseen", "fastopen"})
# ss prints these as "name value" pairs, not "name:value".
_SPACED_KEYS = frozenset({"send", "pacing_rate", "delivery_rate"})
# Keys printed after the congestion control name: a bare word after one of them is not it.
_AFTER_CC = frozenset({"wscale", "rto", "rtt", "ato", "mss", "pmtu", "cwnd"})
_WORD = re.compile(r"[a-z][a-z0-9_]*")
_RATE = re.compile(r"(\d+(?:\.\d+)?)([kKMGT]?)bps")
_RATE_SCALE = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_LEADING_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_SKMEM_FIELD = re.compile(r"([a-z_]+)(\d+)")
# TCP states as ss names them (ss's sstate_name), and UNCONN of a close event.
_STATES = frozenset(
    {
        "UNCONN",
        "ESTAB",
        "SYN-SENT",
        "SYN-RECV",
        "FIN-WAIT-1",
        "FIN-WAIT-2",
        "TIME-WAIT",
        "CLOSE-WAIT",
        "LAST-ACK",
        "LISTEN",
        "CLOSING",
        "NEW-SYN-RECV",
        "BOUND-INACTIVE",
    }
)


def parse_ss(text: str) -> list[SocketInfo]:
    """Sockets of an `ss -tinmH` (or -E) listing."""
    sockets: list[SocketInfo] = []
    head: tuple[str, str, str] | None = None  # state, local, peer
    tokens: list[str] = []
    has_info = False

    owners: tuple[tuple[str, int], ...] = ()

    def flush() -> None:
        if head is not None:
            sockets.append(dataclasses.replace(_socket(*head, tokens, has_info), owners=owners))

    for raw in text.splitlines():
        line = raw.rstrip("\r")  # through a pty lines end in \r\n
        if not line.strip():
            continue
        if line[0] in " \t":  # the info line belongs to the socket line above it
            if head is not None:
                tokens.extend(line.split())
                has_info = True
            continue
        parsed = _socket_line(line.split())
        if parsed is None:  # a header or anything else that is not a socket
            continue
        flush()
        (state, local, peer), tokens = parsed
        head = (state, local, peer)
        owners = _owners(line)
        tokens = [t for t in tokens if not t.startswith("users:")]
        has_info = bool(tokens)  # `ss -O` prints the info on the socket's own line
    flush()
    return sockets


_USERS = re.compile(r"users:\(\((.*)\)\)")
_USER = re.compile(r'"((?:[^"\\]|\\.)*)",pid=(\d+)')


def _owners(line: str) -> tuple[tuple[str, int], ...]:
    """(name, pid) of each process `ss -p` printed as holding the socket:
    users:(("sshd",pid=812,fd=4),("sshd",pid=811,fd=4))."""
    match = _USERS.search(line)
    if not match:
        return ()
    return tuple(dict.fromkeys((name, int(pid)) for name, pid in _USER.findall(match.group(1))))


def _socket_line(fields: list[str]) -> tuple[tuple[str, str, str], list[str]] | None:
    """(state, local, peer) and any trailing info tokens, or None for a non-socket line."""
    state = ""
    if fields and fields[0] in _STATES:
        state, fields = fields[0], fields[1:]
    # Recv-Q and Send-Q are numbers; with a filter such as `state established` ss omits
    # the state column, so a line may start with them directly.
    if len(fields) < 4 or not (fields[0].isdigit() and fields[1].isdigit()):
        return None
    return (state, fields[2], fields[3]), fields[4:]


def _socket(state: str, local: str, peer: str, tokens: list[str], has_info: bool) -> SocketInfo:
    values: dict[str, object] = {}
    cc_candidate = ""
    cc_closed = False
    pending = ""
    for token in tokens:
        if pending:
            if pending == "delivery_rate":
                rate = _rate(token)
                if rate is not None:
                    values["delivery_rate_bytes_per_second"] = rate
            pending = ""
            continue
        if token in _SPACED_KEYS:
            pending = token
            continue
        key, colon, value = token.partition(":")
        if not colon:
            if token == "app_limited":
                values["app_limited"] = True
            elif not cc_closed and token not in _OPTION_WORDS and _WORD.fullmatch(token):
                cc_candidate = token
            continue
        if key in _AFTER_CC:
            cc_closed = True
        try:
            _field(key, value, values)
        except (ValueError, IndexError):
            continue  # a malformed value: ignored like an unknown token
    if cc_candidate:
        values["congestion_control"] = cc_candidate
    return SocketInfo(local=local, peer=peer, state=state, has_info=has_info, **values)  # type: ignore[arg-type]


_INT_KEYS = frozenset(
    {"cwnd", "ssthresh", "mss", "rcv_space", "bytes_acked", "bytes_received", "segs_out"}
    | {"dsack_dups", "reord_seen", "backoff", "pmtu", "advmss", "delivered", "delivered_ce"}
)


def _field(key: str, value: str, values: dict[str, object]) -> None:
    """Store the SocketInfo fields one `key:value` token of an info line gives."""
    if key == "skmem":
        mem = {m.group(1): int(m.group(2)) for m in _SKMEM_FIELD.finditer(value)}
        for name, target in (("r", "rcv_queue_bytes"), ("rb", "rcvbuf_bytes"), ("tb", "sndbuf_bytes")):
            if name in mem:
                values[target] = mem[name]
    elif key in _INT_KEYS:
        values[key] = int(value)
    elif key == "snd_wnd":
        values["snd_wnd_bytes"] = int(value)
    elif key == "wscale":  # wscale:snd,rcv
        send, receive = value.split(",")
        values["wscale"] = (int(send), int(receive))
    elif key == "notsent":
        values["notsent_bytes"] = int(value)
    elif key == "rtt":  # rtt:avg/var in ms
        values["rtt_seconds"] = float(value.split("/")[0]) / 1000
    elif key == "minrtt":
        values["min_rtt_seconds"] = float(value) / 1000
    elif key in ("busy", "rwnd_limited", "sndbuf_limited"):  # busy:12ms, rwnd_limited:8ms(66.7%)
        match = _LEADING_NUMBER.match(value)
        if match:
            values["busy_seconds" if key == "busy" else f"{key}_seconds"] = float(match.group()) / 1000
    elif key == "retrans":  # retrans:now/total
        values["retransmits_total"] = int(value.split("/")[1])


def _rate(token: str) -> float | None:
    """Bytes per second of an ss rate in bits per second: 188723040bps, 191Mbps, 554kbps."""
    match = _RATE.fullmatch(token)
    if not match:
        return None
    return float(match.group(1)) * _RATE_SCALE[match.group(2)] / 8


# ---------------------------------------------------------------- summary


@dataclass(frozen=True)
class TcpSummary:
    """One side of a transfer: its TCP sockets to the other side, summarised."""

    sockets: int  # sockets seen (not there before the watch started)
    samples: int  # listings taken
    retransmits: int  # sum of retransmits_total over those sockets
    congestion_control: str  # of the data socket that moved the most bytes
    # Every congestion control the data sockets used (sorted; those whose name was read):
    # a requested algorithm must be the only one here (measure/tcp/tuning.py).
    congestion_controls: tuple[str, ...] = ()
    values: dict[str, float] = field(default_factory=dict)  # journaled: see VALUE_KEYS


# The keys of TcpSummary.values (all base units), over the data sockets; a key is absent
# when nothing gave it (no data socket at all: none).  "Observations" are the data
# sockets' infos in the listings and their close events; a sender is a data socket that
# had at least DATA_FLOW_BYTES acknowledged, a receiver one that received as much.
VALUE_KEYS = (
    "cwnd_max_segments",  # max over the senders' observations
    "cwnd_avg_segments",  # ... and the mean over them
    "ssthresh_min_segments",  # min over the senders' observations (printed once cwnd was cut)
    "ssthresh_avg_segments",  # ... and the mean over them: the window before each cut times its factor
    "rtt_avg_seconds",  # mean over the observations
    "min_rtt_seconds",  # min over the observations (the kernel's minrtt)
    "delivery_rate_median_bytes_per_second",  # per listing in which data moved, the sum over
    "delivery_rate_max_bytes_per_second",  # the senders that were sending: median and max
    "busy_seconds",  # sums of the last values (close event, else last listing)
    "rwnd_limited_seconds",
    "sndbuf_limited_seconds",
    "retransmits",
    "segs_out",
    "bytes_acked",
    "bytes_received",
    "rcv_space_max_bytes",  # max over the observations
    "rcvbuf_max_bytes",  # skmem rb, max over the listings
    "sndbuf_max_bytes",  # skmem tb, max over the listings
    # ... and their min over the listings: a buffer its program set (SO_RCVBUF/SO_SNDBUF)
    # stays constant from the first listing, an autotuned one grows from tcp_rmem's or
    # tcp_wmem's default.
    "rcvbuf_min_bytes",
    "sndbuf_min_bytes",
    "rcv_queue_ratio_avg",  # mean skmem r/rb of the receivers in listings where data arrived
    "app_limited_ratio",  # share of the senders' listed samples flagged app_limited (idle ones too)
    "app_limited_sending_ratio",  # share of the senders' samples while sending (as the backlog's) flagged so
    # Share of the senders' samples while sending (bytes acknowledged since the previous
    # listing) with a backlog (notsent > 0): near 1 the network took less than the program
    # wrote; near 0 the program wrote less than the network would take.
    "sender_backlog_ratio",
    # The listings in which the senders moved data (what the two ratios above and the
    # delivery rate stand on): a verdict about the sender needs enough of them.
    "sending_samples",
    "mss_bytes",  # of the data socket that moved the most
    "pmtu_bytes",  # ... its path MTU, and the MSS it advertised
    "advmss_bytes",
    # Window scaling per data stream: the data sockets whose tcp_info showed `wscale` (both
    # SYNs carried the option), and those whose tcp_info was read (mss printed) without it
    # in any observation (not negotiated: their window is capped at 65535 B).
    "wscale_streams",
    "unscaled_streams",
    # The receiver's advertised window as the senders saw it (tcpi_snd_wnd) while sending,
    # summed over the senders sending in a listing (parallel streams' windows add up): the
    # median over those listings and the max; and how many sender samples saw it at zero
    # (the receiver's program had stopped reading: a zero-window advertisement).
    "snd_wnd_median_bytes",
    "snd_wnd_max_bytes",
    "zero_window_samples",
    # Retransmissions the receiver reported as duplicates (DSACK, tcpi_dsack_dups): they
    # were not losses (reordering, a spurious timeout); and reordering the senders saw.
    "dsack_dups",
    "reord_seen",
    # ECN (RFC 3168): the segments the senders' peers acknowledged (tcpi_delivered) and of
    # them those acknowledged with ECE set (tcpi_delivered_ce): a queue on the path marked
    # CE, the receiver echoed it until the sender's CWR, so each marked round trip counts
    # about a window of segments here.
    "delivered_segments",
    "delivered_ce_segments",
    "backoff_max",  # the most consecutive retransmission timeouts any sender was in
    # Parallel streams: the senders, and the extremes of their own busy time and of their
    # busy time's share limited by the receive window (each stream judged on its own).
    "streams",
    "stream_busy_min_seconds",
    "stream_busy_max_seconds",
    "stream_rwnd_share_min",
    "stream_rwnd_share_max",
    # The transfer's progress over time (timed listings only; the data sockets' bytes
    # moved, summed): when data started and last moved, in seconds after the watch's
    # origin (the command's start), and the steady rate: bytes per second over the half
    # of the data that moved last (past slow start and any ramp-up).
    "data_start_seconds",
    "data_end_seconds",
    "steady_rate_bytes_per_second",
)


@dataclass(frozen=True)
class Listing:
    """One `ss` listing: when it was taken (seconds after the watch's origin; None when
    not known) and the sockets it showed."""

    at: float | None
    sockets: list[SocketInfo]


# What ss prints in a listing but not in a close event (no skmem, no congestion control
# name there).  Only these are taken over: other fields of the event are the final word.
_LISTING_ONLY = ("congestion_control", "rcvbuf_bytes", "sndbuf_bytes", "rcv_queue_bytes")


def _merge(closed: SocketInfo, last: SocketInfo | None) -> SocketInfo:
    """A close event's info, completed from the socket's last listing."""
    if last is None:
        return closed
    missing = {name: getattr(last, name) for name in _LISTING_ONLY if getattr(closed, name) in (None, "")}
    return dataclasses.replace(closed, **missing)


def summarise(
    baseline: Sequence[SocketInfo],
    listings: Sequence[Listing | Sequence[SocketInfo]],
    closed: Sequence[SocketInfo],
) -> TcpSummary:
    """The summary of one side: `baseline` the listing taken as the watch started (its
    sockets are excluded), `listings` those taken since, in order (timed, or plain lists
    of sockets), `closed` the close events.  Values are over the data sockets (see
    VALUE_KEYS and the module docstring)."""
    timed = [x if isinstance(x, Listing) else Listing(None, list(x)) for x in listings]
    before = {s.key for s in baseline}
    samples = [[s for s in listing.sockets if s.key not in before and s.has_info] for listing in timed]
    seen = {s.key for listing in timed for s in listing.sockets} | {s.key for s in closed}
    seen -= before
    last: dict[tuple[str, str], SocketInfo] = {}
    for listing in samples:
        for s in listing:
            last[s.key] = s
    final = dict(last)
    events: dict[tuple[str, str], SocketInfo] = {}
    for s in closed:
        if s.key not in before and s.has_info:
            events[s.key] = _merge(s, last.get(s.key))
    final.update(events)  # a close event is later than any listing of its socket

    retransmits = sum(s.retransmits_total for s in final.values())
    data = {k for k, s in final.items() if s.moved_bytes >= DATA_FLOW_BYTES}
    # The congestion control and mss that matter are the busiest data socket's (any
    # socket's when none moved data).
    candidates = [final[k] for k in data] or list(final.values())
    top = max(candidates, key=lambda s: s.moved_bytes, default=None)
    values = _values(samples, [events[k] for k in data if k in events], {k: final[k] for k in data})
    if top is not None and top.mss is not None and data:
        values["mss_bytes"] = float(top.mss)
    if top is not None and data:
        for name, value in (("pmtu_bytes", top.pmtu), ("advmss_bytes", top.advmss)):
            if value is not None:
                values[name] = float(value)
    if all(listing.at is not None for listing in timed):
        values.update(
            _progress(
                [(listing.at or 0.0, sockets) for listing, sockets in zip(timed, samples, strict=True)],
                {k: final[k] for k in data},
            )
        )
    return TcpSummary(
        sockets=len(seen),
        samples=len(listings),
        retransmits=retransmits,
        congestion_control=top.congestion_control if top else "",
        congestion_controls=tuple(sorted({final[k].congestion_control for k in data} - {""})),
        values={k: values[k] for k in VALUE_KEYS if k in values},
    )


def _values(
    samples: list[list[SocketInfo]], closing: list[SocketInfo], final: dict[tuple[str, str], SocketInfo]
) -> dict[str, float]:
    if not final:
        return {}
    values: dict[str, float] = {}
    # Senders are the data sockets whose own data was acknowledged, receivers those that
    # received data.  cwnd, ssthresh, the delivery rate and the app_limited flag mean
    # something only for a sender (a download's receiving socket sends a few bytes of
    # requests and is always flagged app-limited), the receive queue only for a receiver.
    senders = {k for k, s in final.items() if s.bytes_acked >= DATA_FLOW_BYTES}
    receivers = {k for k, s in final.items() if s.bytes_received >= DATA_FLOW_BYTES}
    data_samples = [[s for s in listing if s.key in final] for listing in samples]
    observed = [s for listing in data_samples for s in listing] + closing
    sending_observed = [s for s in observed if s.key in senders]

    _put(values, "cwnd_max_segments", max, (s.cwnd for s in sending_observed))
    _put(values, "cwnd_avg_segments", statistics.fmean, (s.cwnd for s in sending_observed))
    _put(values, "ssthresh_min_segments", min, (s.ssthresh for s in sending_observed))
    _put(values, "ssthresh_avg_segments", statistics.fmean, (s.ssthresh for s in sending_observed))
    _put(values, "rtt_avg_seconds", statistics.fmean, (s.rtt_seconds for s in observed))
    _put(values, "min_rtt_seconds", min, (s.min_rtt_seconds for s in observed))
    _put(values, "rcv_space_max_bytes", max, (s.rcv_space for s in observed))
    _put(values, "rcvbuf_max_bytes", max, (s.rcvbuf_bytes for s in observed))
    _put(values, "sndbuf_max_bytes", max, (s.sndbuf_bytes for s in observed))
    _put(values, "rcvbuf_min_bytes", min, (s.rcvbuf_bytes for s in observed))
    _put(values, "sndbuf_min_bytes", min, (s.sndbuf_bytes for s in observed))

    # Per listing: the sum of the delivery rates of the sockets that were sending (their
    # bytes_acked grew since the previous listing): parallel streams add up, and a stream
    # that got no ack meanwhile keeps a stale rate.  Only listings in which data moved
    # (one socket's bytes_acked grew by DATA_FLOW_BYTES) count: before the start, after
    # the end, on a receiver's side, and during a login's handshakes (scp: the first
    # second or so) the rate says nothing about the path.
    rates: list[float] = []
    backlog: list[float] = []
    windows: list[float] = []
    queue_ratios: list[float] = []
    flags: list[float] = []
    previous: dict[tuple[str, str], SocketInfo] = {}
    for listing in data_samples:
        grown = {s.key: s.bytes_acked - _prev(previous, s).bytes_acked for s in listing if s.key in senders}
        if any(growth >= DATA_FLOW_BYTES for growth in grown.values()):
            sending = [s for s in listing if grown.get(s.key, 0) > 0]
            rates.append(sum(s.delivery_rate_bytes_per_second or 0.0 for s in sending))
            backlog.extend(float(s.notsent_bytes > 0) for s in sending)
            # The kernel's app-limited flag, of the same samples: an ssh socket idle through
            # its login (2-3 s of 8, listed densely at the start) and after the last data is
            # flagged in every listing, which said nothing of the sender while it sent (a
            # link below ssh's window: 54-60% of all listings flagged, 0-2 of 20 while sending).
            flags.extend(float(s.app_limited) for s in sending)
            # The window the receiver(s) allowed in flight at once: parallel streams' add up.
            known = [s.snd_wnd_bytes for s in sending if s.snd_wnd_bytes is not None]
            if known:
                windows.append(float(sum(known)))
        # The receive queue's fill while data arrives: near 1, the application does not
        # read as fast as the network delivers.
        for s in listing:
            receiving = s.key in receivers and s.bytes_received > _prev(previous, s).bytes_received
            if receiving and s.rcv_queue_bytes is not None and s.rcvbuf_bytes:
                queue_ratios.append(s.rcv_queue_bytes / s.rcvbuf_bytes)
        previous.update((s.key, s) for s in listing)
    _put(values, "delivery_rate_median_bytes_per_second", statistics.median, rates)
    _put(values, "sender_backlog_ratio", statistics.fmean, backlog)
    if rates:
        values["sending_samples"] = float(len(rates))
    _put(values, "delivery_rate_max_bytes_per_second", max, rates)
    _put(values, "rcv_queue_ratio_avg", statistics.fmean, queue_ratios)
    _put(values, "snd_wnd_median_bytes", statistics.median, windows)
    _put(values, "snd_wnd_max_bytes", max, windows)
    # A zero window is seen by a sender that is not sending, so every listed sample of a
    # sender counts where it had data waiting (notsent: a window closed on a sender with
    # nothing to send holds nothing back, and a connection's end shows one); ss leaves
    # snd_wnd out where it is 0, so such a sample without it, of a socket whose other
    # samples have it, saw a zero window.
    listed = [s for listing in data_samples for s in listing if s.key in senders]
    windowed = {s.key for s in listed if s.snd_wnd_bytes is not None}
    if windowed:
        held = [s for s in listed if s.key in windowed and not s.snd_wnd_bytes and s.notsent_bytes > 0]
        values["zero_window_samples"] = float(len(held))
    # Over every listing too: a throttled sender (curl --limit-rate) idles between its
    # bursts, flagged in those listings, and that idleness is the application rules'
    # evidence; while sending alone it is rarely flagged.
    _put(values, "app_limited_sending_ratio", statistics.fmean, flags)
    every = [float(s.app_limited) for listing in data_samples for s in listing if s.key in senders]
    _put(values, "app_limited_ratio", statistics.fmean, every)

    scaled = {s.key for s in observed if s.wscale is not None}
    read = {s.key for s in observed if s.mss is not None}
    if read:
        values["wscale_streams"] = float(len(scaled))
        values["unscaled_streams"] = float(len(read - scaled))

    last = final.values()
    streams = [final[k] for k in senders]
    if streams:
        values["streams"] = float(len(streams))
        values["stream_busy_min_seconds"] = min(s.busy_seconds for s in streams)
        values["stream_busy_max_seconds"] = max(s.busy_seconds for s in streams)
        shares = [s.rwnd_limited_seconds / s.busy_seconds for s in streams if s.busy_seconds > 0]
        _put(values, "stream_rwnd_share_min", min, shares)
        _put(values, "stream_rwnd_share_max", max, shares)
    values["busy_seconds"] = sum(s.busy_seconds for s in last)
    values["rwnd_limited_seconds"] = sum(s.rwnd_limited_seconds for s in last)
    values["sndbuf_limited_seconds"] = sum(s.sndbuf_limited_seconds for s in last)
    values["retransmits"] = float(sum(s.retransmits_total for s in last))
    values["segs_out"] = float(sum(s.segs_out for s in last))
    values["dsack_dups"] = float(sum(s.dsack_dups for s in last))
    values["reord_seen"] = float(sum(s.reord_seen for s in last))
    values["delivered_segments"] = float(sum(s.delivered for s in last))
    values["delivered_ce_segments"] = float(sum(s.delivered_ce for s in last))
    _put(values, "backoff_max", max, (s.backoff for s in sending_observed))
    values["bytes_acked"] = float(sum(s.bytes_acked for s in last))
    values["bytes_received"] = float(sum(s.bytes_received for s in last))
    return values


def _progress(
    listings: list[tuple[float, list[SocketInfo]]], final: dict[tuple[str, str], SocketInfo]
) -> dict[str, float]:
    """data_start/end_seconds and steady_rate_bytes_per_second (VALUE_KEYS) from the timed
    listings: at each, the bytes the data sockets had moved (a socket not listed keeps what
    it had).  Nothing when most of the bytes moved on sockets no listing saw (one short
    connection per file): the series would not be the transfer's."""
    total = sum(s.moved_bytes for s in final.values())
    moved: dict[tuple[str, str], int] = {}
    series: list[tuple[float, int]] = []
    for at, sockets in listings:
        for s in sockets:
            if s.key in final:
                moved[s.key] = max(moved.get(s.key, 0), s.moved_bytes)
        series.append((at, sum(moved.values())))
    if not series or total <= 0 or series[-1][1] < PROGRESS_SEEN_SHARE * total:
        return {}
    grew = [(at, b) for (at, b), (_, before) in zip(series, [(0.0, 0), *series], strict=False) if b > before]
    started = [at for at, b in series if b >= DATA_FLOW_BYTES]
    if not grew or not started:
        return {}
    end, last = grew[-1]
    values = {"data_start_seconds": started[0], "data_end_seconds": end}
    # The least-squares slope of the listings from the one where half the data had moved
    # to the last one in which data moved: each listing's time is when its ss started, a
    # few ms off on a busy machine, and the fit evens that out where two points would not.
    steady = [(at, b) for at, b in series if at <= end and b >= last / 2]
    if len(steady) >= 2:
        mean_t = sum(at for at, _ in steady) / len(steady)
        mean_b = sum(b for _, b in steady) / len(steady)
        spread = sum((at - mean_t) ** 2 for at, _ in steady)
        if spread > 0:
            slope = sum((at - mean_t) * (b - mean_b) for at, b in steady) / spread
            if slope > 0:
                values["steady_rate_bytes_per_second"] = slope
    return values


PROGRESS_SEEN_SHARE = 0.8  # of the data's bytes, moved on sockets the listings saw

_NOTHING = SocketInfo("", "")


def _prev(previous: dict[tuple[str, str], SocketInfo], s: SocketInfo) -> SocketInfo:
    """The socket in the previous listing; a new socket starts from zero."""
    return previous.get(s.key, _NOTHING)


def _put(
    values: dict[str, float],
    key: str,
    reduce: Callable[[list[float]], float],
    items: Iterable[float | int | None],
) -> None:
    known = [float(v) for v in items if v is not None]
    if known:
        values[key] = float(reduce(known))


# ---------------------------------------------------------------- running ss

_PROGRAMS_MARK = "@bigbinf-programs@"  # between ss's listing and the processes' clocks (through ssh)
_TREE_MARK = "@bigbinf-tree@"  # between the processes' files and every process's parent
_PROC_FILES = ("stat", "schedstat", "cgroup", "cmdline")  # read of each remote program
# What of a /proc/PID/stat line the tree needs (grep -o, a basic regex): "PID (comm) S
# PPID"; comm ends at the last ')' (it may hold spaces and parentheses).
_STAT_HEAD = "^[0-9]* (.*) . [0-9]*"
_REMOTE_PROGRAMS = 32  # at most this many remote processes read per listing
_START_SECONDS = 0.2  # ss subscribes to socket-destroy events within milliseconds
_READY_SECONDS = 5.0  # at most this long for a remote watcher to log in before sampling starts
# Seen within milliseconds here; past this, something is off and the fixed wait is used.
_SUBSCRIBED_SECONDS = 1.0
_LOCAL_PREFIXES = frozenset({"ip", "nsenter"})  # programs that run ss on this host
# What a stats session through ssh prints first: its own connection (SSH_CONNECTION is
# "client_ip client_port server_ip server_port"), so that it can be told from the transfer's.
_SSH_CONNECTION = re.compile(r"(\S+) (\d+) (\S+) (\d+)")


def _is_remote(prefix: Sequence[str]) -> bool:
    """Whether `prefix` runs its command on another host (an ssh command, also inside
    `ip netns exec`, or any other program we cannot tell to be local)."""
    return _through_ssh(prefix) or (bool(prefix) and os.path.basename(prefix[0]) not in _LOCAL_PREFIXES)


def on_this_host(prefix: Sequence[str]) -> bool:
    """Whether `prefix` runs its command on this host (here, or in a namespace of it), so
    the pids it reports are this host's."""
    return not _is_remote(prefix)


def _through_ssh(prefix: Sequence[str]) -> bool:
    return any(os.path.basename(word) == "ssh" for word in prefix)


def _endpoint(address: str) -> tuple[str, str]:
    """(address, port) of an ss endpoint ("198.18.0.1:22", "[2001:db8::1]:22",
    "[::ffff:198.18.0.1]:22", "fe80::1%eth0:22"), comparable with SSH_CONNECTION's."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]").split("%")[0]
    return host.removeprefix("::ffff:"), port


def _ours(s: SocketInfo, sessions: set[tuple[str, str]], not_ours: set[tuple[str, str]]) -> bool:
    """Whether a socket may be the transfer's: not one of the monitor's own ssh sessions,
    by its peer (this watch's, seen from the remote) or by its local end (another's)."""
    return _endpoint(s.peer) not in sessions and _endpoint(s.local) not in not_ours


def _split_own(text: str) -> tuple[tuple[str, str] | None, str]:
    """(the session's own peer endpoint, the rest) of a stats command's output through ssh."""
    first, _, rest = text.partition("\n")
    match = _SSH_CONNECTION.fullmatch(first.strip())
    if not match:
        return None, text
    return _endpoint(f"{match.group(1)}:{match.group(2)}"), rest


def _describe(argv: Sequence[str]) -> str:
    return shlex.join(argv)


def _tail(data: bytes) -> str:
    return data[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()


def _run(argv: Sequence[str], timeout: float, what: str) -> str:
    """stdout of a stats command; TcpStateError naming the command and why on failure.
    Bounded: on timeout the process group is killed, and reading what is left is bounded
    too (a helper that escaped the group, e.g. an ssh ControlPersist master, may hold
    the pipes open)."""
    try:
        proc = subprocess.Popen(
            owned(argv),  # ends with the exporter, even with its guardian
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise TcpStateError(f"{what} {_describe(argv)} could not start: {exc.strerror or exc}") from None
    track(proc)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc, grace=0.5)
        try:
            out, err = proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            out, err = b"", b""
    except BaseException:
        kill_group(proc, grace=0.5)
        raise
    finally:
        untrack(proc)
    if timed_out:
        tail = _tail(err or b"")
        raise _TimedOut(f"{what} {_describe(argv)} did not finish in {timeout:g}s" + (f": {tail}" if tail else ""))
    if proc.returncode != 0:
        tail = _tail(err or b"")
        raise TcpStateError(f"{what} {_describe(argv)} exited {proc.returncode}" + (f": {tail}" if tail else ""))
    return (out or b"").decode("utf-8", "replace")


class TcpWatch:
    """Context manager: every `interval` seconds a listing of TCP sockets to `peer`, and
    every such socket's last tcp_info as it closes, read through `prefix` (argv put in
    front of `ss`: [] here, ["ip", "netns", "exec", NS] in a namespace, an ssh command on
    a remote).

    Through ssh every stats session is itself a TCP connection to `peer` (without a
    ControlMaster in the command, a new one per listing): each session first prints its
    own SSH_CONNECTION (`printenv SSH_CONNECTION ;` before ss: plain words, which the
    remote shell runs as two commands) and those connections are left out.

    Call stop() once the transfer's sockets have closed (a short linger after the
    transfer): a socket still open then is summarised from its last listing.

    The close-event watcher runs for the whole transfer, and must not outlive it, nor
    this process (the issue of a remote `ss -E` kept alive by an ssh ControlMaster for
    minutes after the exporter ended).  On this host the guardian ends it with the
    exporter (bigbinf/guardian.py).  On a remote through ssh its standard input is a
    lifeline: a remote `sh` reads it and ends ss when it reaches EOF, which it does when
    stop() closes it, when the local ssh ends, or when this process ends however it
    ends (the descriptor passes through a ControlMaster like any other), and `timeout`
    ends ss after `lifetime` seconds in any case (a host that vanished never sends the
    EOF).  Through another remote prefix only `timeout` applies."""

    def __init__(
        self,
        prefix: Sequence[str],
        peer: str,
        interval: float = 0.5,
        on_owners: Callable[[set[int]], None] | None = None,
        lifetime: float | None = None,
        transfer_marker: str | None = None,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"TcpWatch interval must be positive, not {interval!r}")
        self.prefix = list(prefix)
        self.peer = peer
        self.interval = interval
        # One listing may take a while through ssh; bounded so a dead remote cannot hang us.
        self.timeout = max(5.0, 2 * interval)
        # The first listing may also have to log in (a new ssh connection).
        self.start_timeout = max(10.0, 2 * interval)
        self._ssh = _through_ssh(self.prefix)
        own = ["printenv", "SSH_CONNECTION", ";"] if self._ssh else []
        # ss reads "2001:db8::1" as host:port; a prefix length says it is an address
        # (not "[..]": over ssh the remote shell would take brackets for a glob).
        target = f"{peer}/128" if ":" in peer else peer
        self.list_argv = [*self.prefix, *own, "ss", "-tinmH", "dst", target]
        # With -p: the processes holding each socket (their CPU and I/O waits say whether
        # a program limited the transfer, measure/programs.py).  ss then reads every
        # process's descriptors, so only listings that meet a socket of unknown owner ask.
        self.owners_argv = [*self.prefix, *own, "ss", "-tinmpH", "dst", target]
        self.on_owners = on_owners
        # Where a listing costs milliseconds (here, in a namespace), the pace adapts: every
        # 5% of the time so far (measure/programs.py), so a short transfer's slow start and
        # steady rate are both seen; through ssh each listing is a session: `interval`.
        self.adaptive = not _is_remote(self.prefix)
        events = ["ss", "-tinmEH", "dst"]  # the target last
        # ss writes events through stdio: into a pipe they sit in a block buffer that is
        # lost when ss is stopped, so a line-buffered ss (stdbuf) is what makes them
        # arrive at all.  On a remote host it is needed just the same, and whether stdbuf
        # (or timeout) is there cannot be asked beforehand: if not, the watcher exits 127
        # and the listings alone remain (`problems` says so).
        if _is_remote(self.prefix) or shutil.which("stdbuf"):
            events = ["stdbuf", "-oL", *events]
        if _is_remote(self.prefix) and lifetime is not None:
            events = ["timeout", "-k", "5", f"{max(1, round(lifetime))}", *events]
        if self._ssh:
            self.watch_argv = [*self.prefix, *_with_lifeline(events, target)]
        else:
            self.watch_argv = [*self.prefix, *own, *events, target]
        self.error = ""
        self.problems: list[str] = []  # failures that still left a summary (e.g. no close events)
        self.summary: TcpSummary | None = None
        self._baseline: list[SocketInfo] | None = None
        self._listings: list[Listing] = []
        self._owned: set[tuple[str, str]] = set()  # sockets whose owners a listing has shown
        self._started_at = 0.0  # monotonic: listing times are seconds since the watch started
        # The moment the summary's times count from (time.monotonic()): the transfer sets
        # it to its command's start; by default the watch's own start.
        self.origin: float | None = None
        self._own: set[tuple[str, str]] = set()  # peer endpoints of our own ssh sessions
        # Local endpoints of sockets that are not the transfer's: the monitor's own stats
        # sessions to the remote, which another watch (the remote's, through ssh) named
        # (leave_out): on this host they are sockets to the same peer.
        self._not_ours: set[tuple[str, str]] = set()
        # Another program's flows to the same peer, started while the transfer ran (a
        # site's production transfer between the same hosts): on this host, sockets whose
        # owners (ss -p) all carry another marker than the transfer's or none
        # (guardian.marker_of); on the remote, their mirror (leave_out_peers).
        self.transfer_marker = transfer_marker if not _is_remote(self.prefix) else None
        self._foreign: set[tuple[str, str]] = set()
        self._marked: set[tuple[str, str]] = set()  # sockets whose owners carry the transfer's marker
        self._foreign_peers: set[tuple[str, str]] = set()
        self._last_failure = ""
        self._watcher: subprocess.Popen[bytes] | None = None
        self._chunks: list[bytes] = []
        self._err_chunks: list[bytes] = []
        self._first_output = threading.Event()
        self._ask_owners = False  # the first listing is the baseline: its sockets are not the transfer's
        # Through ssh, the remote's socket owners are sampled by the listings themselves
        # (measure/programs.py's clocks, read by the remote's shell after ss).
        self._program_pids: set[int] = set()
        self._program_tree: set[int] = set()  # their descendants, as the last listing showed
        self._programs: dict[tuple[int, int], ProgramLife] = {}
        # How the listings kept to their schedule (listing_view): when the sampler started
        # and the watch stopped, the listings answered after the first, the longest any
        # one came after it was due (answered or given up), each answered one's duration.
        self._sampling_since: float | None = None
        self._stopped_at: float | None = None
        self._first_seconds: float | None = None
        self._answered = 0
        self._late_max: float | None = None
        self._durations: list[float] = []
        self._readers: list[threading.Thread] = []
        self._sampler: threading.Thread | None = None
        self._stopping = threading.Event()
        self._started = False
        self._stopped = False
        self._lock = threading.Lock()

    def __enter__(self) -> TcpWatch:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Take the first listing, start the close-event watcher and the sampler.  Never
        raises for a failing command: the watch then has nothing and stop() says why."""
        if self._started:
            return
        self._started = True
        self._started_at = time.monotonic()
        try:
            self._baseline = self._list(self.start_timeout).sockets
        except TcpStateError as exc:
            self.error = str(exc)
            return
        finally:
            self._first_seconds = time.monotonic() - self._started_at
        # The watcher starts after the first listing: a socket that closes in between
        # was there before the watch and must not count as the transfer's.
        try:
            self._watcher = subprocess.Popen(
                owned(self.watch_argv),  # ends with the exporter, even with its guardian
                # Through ssh the remote watcher's lifeline: its EOF ends the remote ss.
                stdin=subprocess.PIPE if self._ssh else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            self.problems.append(f"close events: {_describe(self.watch_argv)} could not start: {exc}")
        else:
            track(self._watcher)
            # Drain continuously: a many-files transfer closes a socket per file, and a full
            # pipe would block ss and lose events.
            for pipe, sink, first in (
                (self._watcher.stdout, self._chunks, self._first_output),
                (self._watcher.stderr, self._err_chunks, None),
            ):
                assert isinstance(pipe, io.BufferedReader)  # Popen's default buffered pipe
                reader = threading.Thread(target=_drain, args=(pipe, sink, first), daemon=True)
                reader.start()
                self._readers.append(reader)
            if self._ssh:
                # The session's SSH_CONNECTION line comes just before ss starts: from then
                # on no close is missed (a short transfer may end before the first listing).
                self._first_output.wait(_READY_SECONDS)
            if _is_remote(self.prefix) or not _wait_subscribed(self._watcher.pid, _SUBSCRIBED_SECONDS):
                # ss prints nothing once subscribed: where its socket cannot be seen (on
                # another host) a short wait stands in for it.
                time.sleep(_START_SECONDS)
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _list(self, timeout: float) -> Listing:
        with self._lock:
            ask_owners = self._ask_owners
            program_pids = sorted(self._program_pids | self._program_tree)
            group_dirs = sorted({d for life in self._programs.values() for d in life.cgroup_dirs})
        now = time.monotonic()
        at = now - self._started_at
        argv = self.owners_argv if ask_owners else self.list_argv
        files: list[str] = []
        if program_pids or (ask_owners and self._ssh):
            # Words the remote's shell runs after ss: a marker, then each process's files
            # and its cgroups' CPU files prefixed with their names (grep -H; -a: cmdline
            # holds NULs), then every process's "PID (comm) S PPID" (the tree: the owners'
            # children, found again each listing, and at once with the owners), whatever
            # exits.  Paths a remote's cgroup names gave are quoted for its shell; the
            # glob is the shell's.
            files = [f"/proc/{pid}/{name}" for pid in program_pids for name in _PROC_FILES] + cpu_files(group_dirs)
            read_files = ["grep", "-asH", "-e", ".", *map(shlex.quote, files), ";"] if files else []
            tree = ["grep", "-sho", "-e", shlex.quote(_STAT_HEAD), "/proc/[0-9]*/stat"]
            argv = [*argv, ";", "echo", _PROGRAMS_MARK, ";", *read_files, "echo", _TREE_MARK, ";", *tree, ";", "true"]
        own, text = _split_own(_run(argv, timeout, "stats command"))
        text, _, clocks = text.partition(_PROGRAMS_MARK + "\n")
        clocks, _, tree_text = clocks.partition(_TREE_MARK + "\n")
        if files:
            self._record_programs(clocks, files, now)
        if own and self._ssh:
            with self._lock:
                self._own.add(own)
        sockets = parse_ss(text)
        if ask_owners and self.transfer_marker is not None:
            self._sort_owners(sockets, self.transfer_marker)
        if ask_owners:
            with self._lock:
                mine = set(self._own)
                self._owned.update(s.key for s in sockets)
            # The transfer's sockets' owners: not our own stats sessions' (through ssh).
            pids = {pid for s in sockets if _endpoint(s.peer) not in mine for _, pid in s.owners}
            if pids and self._ssh:
                with self._lock:
                    self._program_pids.update(pids)
            elif pids and self.on_owners is not None:
                self.on_owners(pids)
        if tree_text:
            self._grow_tree(tree_text)
        with self._lock:
            # The next listing asks again if this one shows a socket whose owners no
            # listing has asked for (the transfer's, once it connects).
            before = {b.key for b in self._baseline or ()}
            self._ask_owners = any(s.key not in self._owned and s.key not in before for s in sockets)
        return Listing(at, sockets)

    def _sort_owners(self, sockets: list[SocketInfo], marker: str) -> None:
        """Note which new sockets' owners carry the transfer's marker and which are all
        another program's (an owner whose environment cannot be read decides nothing)."""
        before = {b.key for b in self._baseline or ()}
        for s in sockets:
            if s.key in before or not s.owners:
                continue
            markers: list[str | None] = []
            for _, pid in s.owners:
                try:
                    markers.append(marker_of(pid))
                except OSError:  # gone meanwhile, or not readable: unknown
                    markers = []
                    break
            with self._lock:
                if marker in markers:
                    self._marked.add(s.key)
                elif markers:
                    self._foreign.add(s.key)

    def foreign_ends(self) -> set[tuple[str, str]]:
        """This host's (address, port) of the sockets to the peer that another program
        held while the transfer ran (empty where no socket was seen held by the transfer's
        own: then which is the transfer's cannot be told, and none is left out)."""
        with self._lock:
            if not self._marked:
                return set()
            return {_endpoint(key[0]) for key in self._foreign - self._marked}

    def leave_out_peers(self, peer_endpoints: set[tuple[str, str]]) -> None:
        """Leave out of the summary the sockets whose peer end is one of these (another
        watch's foreign_ends: the remote's end of another program's flow)."""
        with self._lock:
            self._foreign_peers |= peer_endpoints

    def _sample(self) -> None:
        """List every `interval` seconds, one listing at a time (a slow one is followed by
        the next at once), and once more when asked to stop."""
        self._sampling_since = time.monotonic()
        due = self._sampling_since + self._pace()
        timed_out = False
        while True:
            stopping = self._stopping.wait(max(0.0, due - time.monotonic()))
            if stopping and timed_out:
                return  # the remote stopped answering: a last listing would only wait as long again
            scheduled = min(due, time.monotonic())  # the last one is due when asked to stop
            due = max(due + self._pace(), time.monotonic())
            asked = time.monotonic()
            try:
                listing = self._list(self.timeout)
            except TcpStateError as exc:
                timed_out = isinstance(exc, _TimedOut)
                with self._lock:
                    self._last_failure = str(exc)
            else:
                timed_out = False
                with self._lock:
                    self._listings.append(listing)
                    self._answered += 1
                    self._durations.append(time.monotonic() - asked)
            with self._lock:
                self._late_max = max(self._late_max or 0.0, time.monotonic() - scheduled)
            if stopping:
                return

    def listing_view(self) -> dict[str, float]:
        """How the listings kept to their schedule (Result.remote_view's listing keys),
        once stopped: listings_expected (the first, one per due time from the sampler's
        start to the stop at the watch's pace, and the last at the stop),
        listings_received (those answered), listing_late_max_seconds (the longest from
        when a listing after the first was due until it was answered or given up; the
        first's own time where it failed: it logs in), listing_seconds_median (the
        answered ones' after the first, for comparison: a healthy remote's)."""
        if not self._started or self._stopped_at is None:
            return {}
        with self._lock:
            since = self._sampling_since
            answered, late, durations = self._answered, self._late_max, list(self._durations)
        first_ok = self._baseline is not None
        begin = since if since is not None else self._started_at
        slots, elapsed = 0, self._pace_at(0.0)
        while elapsed <= self._stopped_at - begin and slots < 100_000:
            slots += 1
            elapsed += self._pace_at(elapsed)
        view = {
            "listings_expected": float(1 + slots + (1 if since is not None else 0)),
            "listings_received": float(answered + first_ok),
        }
        if late is None and not first_ok and self._first_seconds is not None:
            late = self._first_seconds
        if late is not None:
            view["listing_late_max_seconds"] = late
        if durations:
            view["listing_seconds_median"] = statistics.median(durations)
        return view

    def _pace_at(self, elapsed: float) -> float:
        return adaptive_interval(self.interval, elapsed) if self.adaptive else self.interval

    def _record_programs(self, text: str, files: Sequence[str], now: float) -> None:
        """The remote processes' files (`PATH:line`, grep -H, for the paths asked: `files`)
        of one listing, as samples of their lives and their cgroups' CPU bandwidth."""
        printed: dict[str, str] = {}
        asked = sorted(files, key=len, reverse=True)  # the longest first: a path may prefix another's
        for line in text.split("\n"):
            path = next((f for f in asked if line.startswith(f + ":")), None)
            if path is not None:
                printed[path] = printed.get(path, "") + line[len(path) + 1 :] + "\n"
        read = printed_reader(printed)
        sampled: list[ProgramLife] = []
        pids = {int(f.split("/")[2]) for f in printed if f.startswith("/proc/")}
        for pid in sorted(pids):
            stat = parse_stat(printed.get(f"/proc/{pid}/stat", ""))
            clocks = parse_schedstat(printed.get(f"/proc/{pid}/schedstat", ""))
            if stat is None or clocks is None:
                continue
            with self._lock:
                life = record(self._programs, pid, stat, clocks, now, cmdline=printed.get(f"/proc/{pid}/cmdline"))
                if not life.cgroups_known and f"/proc/{pid}/cgroup" in printed:
                    life.cgroup_dirs, life.cgroups_known = group_dirs(printed[f"/proc/{pid}/cgroup"]), True
            sampled.append(life)
        dirs = dict.fromkeys(d for life in sampled for d in life.cgroup_dirs)
        readings = read_groups(dirs, read)
        limits = read_io_limits(dirs, read)
        with self._lock:
            for life in sampled:
                life.record_cgroups(readings, now)
                life.record_io(limits)

    def _grow_tree(self, text: str) -> None:
        """The socket owners' descendants, from every remote process's "PID (comm) S PPID"."""
        parents: dict[int, int] = {}
        for line in text.split("\n"):
            pid, _, rest = line.strip().partition(" ")
            parent = parse_parent(rest)
            if pid.isdigit() and parent is not None:
                parents[int(pid)] = parent
        if parents:
            with self._lock:
                self._program_tree = descendants(self._program_pids, parents, _REMOTE_PROGRAMS) - self._program_pids

    def program_lives(self) -> list[ProgramLife]:
        """The remote's socket owners as the listings through ssh sampled them."""
        with self._lock:
            return list(self._programs.values())

    def _pace(self) -> float:
        return self._pace_at(time.monotonic() - self._started_at)

    def own_sessions(self) -> set[tuple[str, str]]:
        """The (address, port) of this host's end of every stats session through ssh this
        watch opened (each printed its SSH_CONNECTION): on this host they are sockets to
        the remote like the transfer's, and not the transfer's."""
        with self._lock:
            return set(self._own)

    def leave_out(self, local_endpoints: set[tuple[str, str]]) -> None:
        """Leave out of the summary (stop()) the sockets whose local end is one of these
        (another watch's own_sessions): the monitor's own ssh sessions, whose busy time,
        windows and bytes would otherwise be summed with the transfer's (a remote's stats
        sessions added 8-18 s of busy time to an upload's sender and diluted its
        window-limited share from 32-35% per stream to 23%)."""
        with self._lock:
            self._not_ours |= local_endpoints

    def stop(self) -> TcpSummary | None:
        """Stop; the summary, or None when nothing could be read (then `error` says why)."""
        if self._stopped or not self._started:
            return self.summary
        self._stopped = True
        self._stopped_at = time.monotonic()
        if self._baseline is None:  # the first listing failed: nothing was started
            return None
        self._stopping.set()
        if self._sampler is not None:
            # The last listing and at most one in flight before it, each bounded.
            self._sampler.join(2 * (self.timeout + 2))
        own, closed_text = _split_own(self._stop_watcher())
        with self._lock:
            listings = list(self._listings)
            last_failure = self._last_failure
            if own and self._ssh:
                self._own.add(own)
            mine = set(self._own) | self._foreign_peers
            not_ours = set(self._not_ours)
        foreign = self.foreign_ends()
        not_ours |= foreign
        if foreign:
            self.problems.append(
                f"left out {len(foreign)} socket(s) to the peer that another program held while the transfer ran"
            )
        if last_failure:
            self.problems.append(last_failure)
        closed = parse_ss(closed_text)
        if not listings and not closed:
            self.error = last_failure or "no listing of the sockets could be taken"
            return None
        try:
            # Times after the origin (the command's start, where the caller set it).
            shift = (self.origin - self._started_at) if self.origin is not None else 0.0
            listings = [
                Listing(
                    None if listing.at is None else listing.at - shift,
                    [s for s in listing.sockets if _ours(s, mine, not_ours)],
                )
                for listing in listings
            ]
            closed = [s for s in closed if _ours(s, mine, not_ours)]
            self.summary = summarise(self._baseline, listings, closed)
        except Exception as exc:  # a surprise in ss's output must not fail the transfer
            self.error = f"tcp state summary of {_describe(self.list_argv)} failed: {exc!r}"
            return None
        return self.summary

    def _stop_watcher(self) -> str:
        proc = self._watcher
        if proc is None:
            return ""
        self._watcher = None
        exited_early = proc.poll()
        if self._ssh and proc.stdin is not None:
            # EOF on the lifeline: the remote sh ends ss and exits, and ssh with it, having
            # passed on everything ss printed (a ControlMaster's session ends with it).
            with contextlib.suppress(OSError):
                proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(_LIFELINE_SECONDS)
        if exited_early is None and not _is_remote(self.prefix):
            # The last close events may still sit in ss's netlink queue (a busy machine
            # may not have scheduled ss since the socket closed): let it read them first.
            dropped = _wait_drained(proc.pid, _DRAIN_SECONDS)
            if dropped:
                self.problems.append(f"close events: the kernel dropped {dropped} (ss fell behind)")
        kill_group(proc, grace=0.5)
        untrack(proc)
        for reader in self._readers:
            reader.join(2)
        if exited_early is not None:
            # ss runs until killed: having exited, it failed (stdbuf or ss missing on a
            # remote, no permission): close events are lost, the listings stand.
            tail = _tail(b"".join(self._err_chunks))
            self.problems.append(
                f"close events: {_describe(self.watch_argv)} exited {exited_early}" + (f": {tail}" if tail else "")
            )
        return b"".join(self._chunks).decode("utf-8", "replace")


# How long stop() waits for a remote watcher to end by its lifeline before killing the
# local ssh (a ControlMaster keeps the remote session either way: the EOF ends it).
_LIFELINE_SECONDS = 5.0
# What a remote watcher through ssh runs: ss in the background and a reader of the
# lifeline (the session's stdin, kept as fd 3) that ends ss at EOF; the exit status is
# ss's (127: no stdbuf or timeout there).  A POSIX sh script, one word for the remote
# login shell (quoted); the address is its argument, never part of the script.
_LIFELINE_SCRIPT = (
    'printenv SSH_CONNECTION; exec 3<&0 </dev/null; {events} "$1" 3<&- & p=$!; '
    "{{ read -r _ <&3; kill $p; }} >/dev/null 2>&1 & r=$!; wait $p; s=$?; kill $r 2>/dev/null; exit $s"
)


def _with_lifeline(events: Sequence[str], target: str) -> list[str]:
    """The words that run `events` followed by `target` on a remote through ssh, ended by
    EOF on the session's stdin."""
    return ["sh", "-c", shlex.quote(_LIFELINE_SCRIPT.format(events=shlex.join(events))), "sh", target]


def _wait_subscribed(pid: int, timeout: float) -> bool:
    """Wait until process `pid` (ss -E on this host, in whatever namespace) holds a
    sock_diag netlink socket bound to a multicast group: ss has subscribed to the
    socket-destroy events, and from then on no close is missed.  Seen in
    /proc/PID/net/netlink (its namespace's netlink sockets: protocol 4 is
    NETLINK_SOCK_DIAG, Groups the bound groups) for a socket among /proc/PID/fd.
    Polled every 2 ms: ss gets there within a few ms, where a fixed wait of 0.2 s per
    watch was most of a transfer's overhead.  False if not seen within `timeout` or
    /proc cannot tell (the process exited)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if _netlink_diag_sockets(pid):
                return True
        except (OSError, ValueError):
            return False
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)


_DRAIN_SECONDS = 2.0  # at most this long for ss to read and print what is queued for it


def _netlink_diag_sockets(pid: int) -> list[list[str]]:
    """The /proc/PID/net/netlink rows of process `pid`'s sock_diag sockets that are bound
    to a multicast group (ss -E's event socket): sk Eth Pid Groups Rmem Wmem Dump Locks
    Drops Inode.  OSError when the process is gone; ValueError when the table cannot tell
    (a kernel without the Inode column)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[len("socket:[") : -1])
    with open(f"/proc/{pid}/net/netlink") as table:
        header, *rows = table.read().splitlines()
    if "Inode" not in header.split():
        raise ValueError("/proc/net/netlink has no Inode column")
    return [
        fields
        for fields in (line.split() for line in rows)
        if len(fields) >= 10 and fields[1] == "4" and int(fields[3], 16) and fields[9] in inodes
    ]


def _wait_drained(pid: int, timeout: float) -> int:
    """Wait until ss -E (process `pid`, on this host) has read every event queued on its
    netlink socket and is asleep waiting for the next (so it has printed them): its
    socket's receive queue empty and the process sleeping, twice in a row.  Returns how
    many events the kernel dropped on that socket (its queue overflowed), 0 if none or if
    /proc cannot tell; returns at `timeout` whatever happened."""
    deadline = time.monotonic() + timeout
    settled = 0
    while time.monotonic() < deadline and settled < 2:
        try:
            rows = _netlink_diag_sockets(pid)
            with open(f"/proc/{pid}/stat") as stat:
                state = stat.read().rpartition(")")[2].split()[0]
        except (OSError, ValueError, IndexError):
            return 0
        if not rows:
            return 0
        settled = settled + 1 if state == "S" and all(int(r[4]) == 0 for r in rows) else 0
        time.sleep(0.002)
    with contextlib.suppress(OSError, ValueError):
        return sum(int(r[8]) for r in _netlink_diag_sockets(pid))
    return 0


def _drain(pipe: io.BufferedReader, sink: list[bytes], first: threading.Event | None) -> None:
    # read1: whatever is there, at most one read(2): events arrive as sockets close.
    for chunk in iter(lambda: pipe.read1(65536), b""):
        sink.append(chunk)
        if first is not None:
            first.set()


# ---------------------------------------------------------------- sysctl


@dataclass(frozen=True)
class HostTcpSettings:
    """One host's TCP buffer limits and default congestion control (sysctl)."""

    tcp_rmem: tuple[int, int, int]
    tcp_wmem: tuple[int, int, int]
    rmem_max: int
    wmem_max: int
    congestion_control: str


# tcp_rmem/tcp_wmem and the congestion control are per network namespace; rmem_max and
# wmem_max (the ceiling of SO_RCVBUF/SO_SNDBUF) are the host's.
SYSCTL_KEYS = (
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_congestion_control",
)


def read_tcp_settings(prefix: Sequence[str], timeout: float = 15.0) -> HostTcpSettings:
    """`sysctl -n` of the five keys through `prefix`; TcpStateError saying why on failure."""
    argv = [*prefix, "sysctl", "-n", *SYSCTL_KEYS]
    out = _run(argv, timeout, "settings command")
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    try:
        if len(lines) != len(SYSCTL_KEYS):
            raise ValueError(f"{len(lines)} lines for {len(SYSCTL_KEYS)} keys")
        rmem, wmem = (_triple(line) for line in lines[:2])
        rmem_max, wmem_max = int(lines[2]), int(lines[3])
        congestion = lines[4]
        if not _WORD.fullmatch(congestion):
            raise ValueError(f"{congestion!r} is not a congestion control name")
    except ValueError as exc:
        shown = out.strip()[-300:]
        raise TcpStateError(f"settings command {_describe(argv)} printed no settings ({exc}): {shown!r}") from None
    return HostTcpSettings(rmem, wmem, rmem_max, wmem_max, congestion)


# Read beside SYSCTL_KEYS, each on its own: a host without one still gives the others.
# tcp_window_scaling=0 on either end: no SYN of its carries the option, no window above 65535 B.
OPTIONAL_SYSCTL_KEYS = ("net.ipv4.tcp_moderate_rcvbuf", "net.ipv4.tcp_window_scaling")


def read_optional_settings(prefix: Sequence[str], timeout: float = 15.0) -> dict[str, float]:
    """The numeric settings of OPTIONAL_SYSCTL_KEYS that `prefix` can read, by their last
    name (tcp_moderate_rcvbuf: whether the receiver's buffer grows at all; tcp_window_scaling:
    whether its SYNs offer window scaling); {} for those
    it cannot (a host that lacks one, a command that fails: the judge then does without)."""
    found: dict[str, float] = {}
    for key in OPTIONAL_SYSCTL_KEYS:
        try:
            out = _run([*prefix, "sysctl", "-n", key], timeout, "settings command").strip()
        except TcpStateError:
            continue
        if out.isdigit():
            found[key.rpartition(".")[2]] = float(out)
    return found


def _triple(line: str) -> tuple[int, int, int]:
    parts = [int(p) for p in line.split()]
    if len(parts) != 3:
        raise ValueError(f"{line!r} is not three numbers")
    return parts[0], parts[1], parts[2]
