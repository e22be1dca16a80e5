"""The bounds: for each candidate limit of a transfer, the rate that limit allows, computed
from what was measured (one function per bound), with its inputs and the words that say it.

A limit held the transfer where the steady rate meets its bound (`meets`: within the
tolerance below); the verdict names that bound and its evidence shows both numbers ("the
remote's advertised receive window 64.0 kB over 82.0 ms allows 0.78 MB/s; the steady rate
was 0.76 MB/s").  Rates are payload bytes per second, as the transfer's own rate is.

- receive_window: the window the receiver advertised as the sender saw it while sending
  (tcpi_snd_wnd, the median), else the receiver's buffer where it stopped growing (at its
  maximum, autotuning off: tcp_moderate_rcvbuf=0 keeps tcp_rmem's default, or set by its
  program: `locked`), over the round trip the transfer saw;
- send_buffer: the sender's buffer where it stopped growing (at its maximum, or set by
  its program: `locked`), over the round trip the transfer saw;
- path_capacity: the path's estimate (a wire rate), as payload;
- loss (Mathis et al.): MSS / RTT x C / sqrt(p), C = sqrt(3/2), p the congestion events
  per segment sent: the *real* losses (retransmissions less those the receiver reported as
  duplicates: DSACK, tcpi_dsack_dups: the segment had arrived; reordering, a spurious
  timeout) and the round trips the path marked CE in (ECN: Inputs.ce_rounds; CUBIC and
  Reno halve once per marked round trip, as per loss event, however many packets a queue
  marked in it: counted per packet, p overstates a queue that marks in bursts); for a CUBIC
  sender the larger of that and CUBIC's own response (RFC 9438: a window of
  1.05 x (RTT / p)^(3/4) segments, RTT in seconds), which a long path reaches first;
  met down to LOSS_LOW of it (timeouts, which neither model counts, cost more) and at any
  rate above it (p per segment lost overstates p per congestion event: bursts);
- packet_rate: where the MSS is below what the path's MTU allows, the packets per second
  the path carries at full size (its estimate) times this MSS: a path whose limit is
  per packet (a router's or a userspace forwarder's per-packet cost) carries no more;
- program: each program of the transfer (either end) moved the data at the transfer's
  rate while on a core, queued for one or waiting on storage for its `busy` share of its
  life: at all of it, the rate over that share (cpu or disk by which wait dominated);
- application: the sender's program supplied data at the rate it sent while its write
  queue stood empty (no backlog): the rate itself, where the sender was idle;
- ssh_window: a transfer carried in an OpenSSH channel (scp, sftp, rsync over ssh; not
  HPN-SSH, whose window grows with the TCP buffers) has at most its fixed channel window
  (and sftp's requests) in flight per round trip: that window over the round trip the
  transfer saw, whatever the TCP buffers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bigbinf.judge.inputs import Inputs
from bigbinf.judge.words import host_name, human_bits, human_bytes, human_rate

# A rate meets a bound within this share of it either way: the bound is computed from
# sampled windows and a round trip that varies, the rate fitted from sampled progress.
TOLERANCE = 0.25
# A buffer's bound (skmem rb, tb) counts the kernel's overhead per segment too: the window
# a receive buffer gives is 50-90% of it (tcp_adv_win_scale, the kernel's scaling_ratio),
# so a rate down to this share of buffer/RTT still meets it.
BUFFER_LOW = 0.4
MATHIS_C = math.sqrt(1.5)
# An MSS this far below what the path's MTU allows is clamped (a router's TCPMSS rule, an
# advmss route), not a rounding of options.
MSS_CLAMP_SHARE = 0.8
IP_TCP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamps 12: a 1500-byte MTU carries 1448
LINK_HEADERS = 14  # Ethernet: what a wire rate counts beside the IP packet
CEILING_SHARE = 0.9  # a buffer this close to its maximum stopped growing there
PACED = frozenset({"bbr"})  # congestion controls that do not slow for loss (no Mathis bound)
# CUBIC's response to loss (RFC 9438, section 5): an average window of
# (C x (3 + beta) / (4 x (1 - beta)))^(1/4) x (RTT / p)^(3/4) segments, C = 0.4, beta = 0.7.
CUBIC_K = (0.4 * 3.7 / 1.2) ** 0.25
# The loss bound is met down to this share of it: a transfer that also waited out
# retransmission timeouts (neither response function counts them) runs below it.  And any
# rate above it meets it: p is counted per segment lost, the models' per congestion event,
# and losses come in bursts (a queue's overflow drops several segments of one window, one
# halving), so the loss allows at least the bound computed, never less.
LOSS_LOW = 0.4
# A buffer is the program's (SO_RCVBUF/SO_SNDBUF lock it: autotuning never grows it) where
# the sender was limited by it this share of its busy time or more (rules.LIMITED_SHARE)
# and it stood below LOCKED_SHARE of the maximum autotuning could have given it.
LOCKED_CLOCK = 0.3
LOCKED_SHARE = 0.5
# A receiver's window is clamped apart from its buffer (a route's `window` metric) where it
# advertised at most this share of its receive buffer: a window from the buffer alone is
# 50-90% of it (tcp_adv_win_scale, scaling_ratio).
CLAMPED_SHARE = 0.3
# A standing queue (rules.py's, one definition): a delay this share of the path's minimum
# round trip above its least, and at least QUEUE_SECONDS (a quiet path's sits within a few
# ms of its minimum).
QUEUE_SHARE = 0.2
QUEUE_SECONDS = 0.002
# Without window scaling (RFC 7323) no window exceeds the 16-bit field: 65535 B per stream.
UNSCALED_WINDOW = 65535
# OpenSSH's session channel window is fixed (channels.h CHAN_SES_WINDOW_DEFAULT: 64
# packets of 32 KiB), and so are sftp's requests (64 outstanding of 32 KiB unless sftp
# -R/-B say otherwise; the profiles pass neither, and scp speaks sftp since OpenSSH 9.0):
# no more than 2 MiB is in flight per round trip, whatever the TCP buffers.
SSH_WINDOW = 64 * 32 * 1024
# The window holds ssh's packet framing and sftp's headers beside the data, and is
# reopened only as the receiving end consumes it (a window adjust after 3 packets): the
# rate runs below window / RTT, down to this share of it (a tuned 100 Mbit/s, 403 ms path:
# steady rates 3.83-4.68 MB/s against 5.20, 74-90%, with 2.0-2.11 MB in flight).
SSH_WINDOW_LOW = 0.7
# The local programs that carry a transfer in an OpenSSH channel (scp, sftp and rsync
# start ssh), and HPN-SSH's, whose dynamic window follows the TCP receive buffer.
SSH_CLIENTS = frozenset({"ssh"})
HPN_PROGRAMS = frozenset({"hpnssh", "hpnscp", "hpnsshd"})
SSH_PROTOCOLS = frozenset({"scp", "sftp", "rsync"})


@dataclass(frozen=True)
class Bound:
    """One limit's bound: what it allows, from what, in words."""

    name: str  # receive_window, send_buffer, path_capacity, loss, packet_rate, cpu, disk, application
    rate: float  # payload bytes per second it allows
    words: str  # "the remote's receive buffer 131 kB over 82.0 ms allows 1.60 MB/s"
    side: str = ""  # local | remote | path
    inputs: dict[str, float] = field(default_factory=dict)
    low: float = 1 - TOLERANCE  # the least share of `rate` that still meets it
    program: str = ""  # cpu, disk: the program
    high: float = 1 + TOLERANCE  # the most share of `rate` that still meets it
    shown: str = ""  # its name in a list of bounds, where not `name` (the loss bound from CE marks alone)

    def meets(self, rate: float) -> bool:
        """Whether a steady `rate` meets this bound: from `low` of it to `high` of it."""
        return self.rate > 0 and self.low * self.rate <= rate <= self.high * self.rate

    def said(self, rate: float, phase_mean: bool = False) -> str:
        what = "data phase's mean rate" if phase_mean else "steady rate"
        return f"{self.words}; the transfer's {what} was {human_rate(rate)}"


def round_trip(i: Inputs) -> float | None:
    """The round trip the transfer saw (its sender's smoothed RTT, mean over the samples),
    else the path's minimum: a window allows a window per round trip, queue included."""
    return i.sender.get("rtt_avg_seconds") or i.receiver.get("rtt_avg_seconds") or i.rtt


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def receive_window(i: Inputs) -> Bound | None:
    """The receiver's window over the round trip: the advertised window the sender saw
    while sending (median), else the receiver's buffer where it stopped growing."""
    rtt = round_trip(i)
    if not rtt:
        return None
    host = host_name(i.receiver_side)
    advertised = i.sender.get("snd_wnd_median_bytes")
    if advertised:
        return Bound(
            "receive_window",
            advertised / rtt,
            f"{host}'s advertised receive window {human_bytes(advertised)} (the median the sender saw) over "
            f"{_ms(rtt)} allows {human_rate(advertised / rtt)}",
            window_side(i),
            {"window_bytes": advertised, "rtt_seconds": rtt, **_autotuning(i, i.receiver_side)},
        )
    buffer, why = stopped_buffer(i, "tcp_rmem", i.receiver.get("rcvbuf_max_bytes"), i.receiver_side)
    if not buffer:
        return None
    return Bound(
        "receive_window",
        buffer / rtt,
        f"{host}'s receive buffer {human_bytes(buffer)} ({why}) over {_ms(rtt)} allows {human_rate(buffer / rtt)}",
        i.receiver_side,
        {"buffer_bytes": buffer, "rtt_seconds": rtt, **_autotuning(i, i.receiver_side)},
        low=BUFFER_LOW,
    )


def unscaled(i: Inputs) -> str:
    """Words, where window scaling was not negotiated ("" if not seen): the transfer's own
    data streams' tcp_info read (on either end) without `wscale`, none with it, and the
    window the sender was advertised no more than 65535 B per stream.  Never inferred from
    the window alone: a window of 64 KiB is also a small buffer's or a route's."""
    read = [t for t in (i.sender, i.receiver) if "unscaled_streams" in t]
    if not read or any(t.get("wscale_streams", 0.0) > 0 for t in read):
        return ""
    if not any(t.get("unscaled_streams", 0.0) > 0 for t in read):
        return ""
    advertised = i.sender.get("snd_wnd_median_bytes")
    streams = max(1.0, i.sender.get("streams", 1.0) or 1.0)
    if advertised and advertised > UNSCALED_WINDOW * streams:
        return ""  # a window above what no scaling allows: the listings disagree, say nothing
    off = scaling_off(i)
    why = (
        f"net.ipv4.tcp_window_scaling=0 on {host_name(off)}: its SYNs do not offer it"
        if off
        else "neither host has it off (net.ipv4.tcp_window_scaling not 0 where read): something between the "
        "sites strips the option from the SYNs"
    )
    return (
        "neither end negotiated window scaling (no wscale in tcp_info): the window is capped at 64 KiB "
        f"whatever the buffers ({UNSCALED_WINDOW} B per stream); {why}"
    )


def scaling_off(i: Inputs) -> str:
    """The side whose host has net.ipv4.tcp_window_scaling=0 (the receiver's first: its
    window is the one capped), "" where neither has it off or it was not read."""
    for side in (i.receiver_side, i.sender_side):
        if i.buffers.get(side, {}).get("tcp_window_scaling") == 0:
            return side
    return ""


def window_side(i: Inputs) -> str:
    """Where the receive window's limit is fixed: the receiver, unless scaling was not
    negotiated: then the host with it off, else the path (a middlebox stripped it)."""
    if unscaled(i):
        return scaling_off(i) or "path"
    return i.receiver_side


def route_window(i: Inputs) -> float:
    """The receiver's route window as read (its `window` metric, bytes; 0 where none was read)."""
    return i.buffers.get(i.receiver_side, {}).get("route_window", 0.0)


def _autotuning(i: Inputs, side: str) -> dict[str, float]:
    """{"tcp_moderate_rcvbuf": 0.0} where the side's receive autotuning is off, else {}."""
    off = i.buffers.get(side, {}).get("tcp_moderate_rcvbuf") == 0
    return {"tcp_moderate_rcvbuf": 0.0} if off else {}


def corroborated(bound: Bound, clock_share: float, least: float) -> bool:
    """Whether a window's or a buffer's bound may name a limit where no clock rule did:
    where the receiver's window cannot be anything else (its autotuning off), or the
    sender's own clock for it says so `least` of its busy time.  A rate near the window
    over the RTT alone does not show the window held it: a sender whose cwnd another flow
    holds runs just below a window autotuning sized for it, its clock for the window
    near 0 (and a buffer's bound is met down to BUFFER_LOW of it).  Other bounds (the
    packet rate) stand on their own."""
    if bound.name not in ("receive_window", "send_buffer"):
        return True
    return bound.inputs.get("tcp_moderate_rcvbuf") == 0 or clock_share >= least


def send_buffer(i: Inputs) -> Bound | None:
    """The sender's buffer over the round trip, where it stopped growing (at its maximum)."""
    rtt = round_trip(i)
    buffer, why = stopped_buffer(i, "tcp_wmem", i.sender.get("sndbuf_max_bytes"), i.sender_side)
    if not rtt or not buffer:
        return None
    return Bound(
        "send_buffer",
        buffer / rtt,
        f"{host_name(i.sender_side)}'s send buffer {human_bytes(buffer)} ({why}) over {_ms(rtt)} allows "
        f"{human_rate(buffer / rtt)}",
        i.sender_side,
        {"buffer_bytes": buffer, "rtt_seconds": rtt},
        low=BUFFER_LOW,
    )


def stopped_buffer(i: Inputs, kind: str, buffer: float | None, side: str) -> tuple[float | None, str]:
    """A buffer that stopped growing, and why (None where it may still have grown): at
    CEILING_SHARE of its maximum (the host's sysctl, or the transfer's tcp_buffer_max), or,
    for a receiver, autotuning off (tcp_moderate_rcvbuf=0 on its host: its buffer stays at
    tcp_rmem's default however long the path)."""
    if not buffer:
        return None, ""
    settings = i.buffers.get(side, {})
    if kind == "tcp_rmem" and settings.get("tcp_moderate_rcvbuf") == 0:
        return buffer, f"net.ipv4.tcp_moderate_rcvbuf=0 on {host_name(side)}: it never grows"
    cap = i.buffer_cap
    ceiling = settings.get(kind)
    named = f"{kind} maximum"
    if cap is not None and (ceiling is None or cap < ceiling):
        ceiling, named = cap, "tcp_buffer_max cap"
    if ceiling and buffer >= CEILING_SHARE * ceiling:
        return buffer, f"at its {named} {human_bytes(ceiling)}"
    held = locked(i, kind, buffer, side)
    if held:
        return buffer, held
    return None, ""


def locked(i: Inputs, kind: str, buffer: float, side: str) -> str:
    """Words, where a buffer is the program's own ("" if not): the sender was limited by it
    LOCKED_CLOCK of its busy time, yet it stood below LOCKED_SHARE of the maximum its
    host's autotuning could have given it (tcp_rmem's or tcp_wmem's, read there), with
    autotuning on, constant over the listings where their least was read (one that grew
    was autotuning's), and neither a clamped window nor one without scaling held it.  A
    buffer that limits the sender grows to that maximum unless its program set it
    (setsockopt SO_RCVBUF/SO_SNDBUF locks it, at twice the value set: nginx `sndbuf=32k` on
    its listen gives 64 KiB however high the sysctl)."""
    settings = i.buffers.get(side, {})
    maximum = settings.get(kind)
    busy = i.sender.get("busy_seconds", 0.0)
    clock = "rwnd_limited_seconds" if kind == "tcp_rmem" else "sndbuf_limited_seconds"
    share = i.sender.get(clock, 0.0) / busy if busy > 0 else 0.0
    if not maximum or not buffer or buffer >= LOCKED_SHARE * maximum or share < LOCKED_CLOCK:
        return ""
    if kind == "tcp_rmem" and settings.get("tcp_moderate_rcvbuf") == 0:
        return ""  # autotuning off: the sysctl's default, not the program's
    owner = i.receiver if kind == "tcp_rmem" else i.sender
    least = owner.get("rcvbuf_min_bytes" if kind == "tcp_rmem" else "sndbuf_min_bytes")
    if least is not None and least < CEILING_SHARE * buffer:
        return ""  # it grew while the transfer ran: autotuning's, not a buffer its program set

    if kind == "tcp_rmem" and (clamped_window(i) or unscaled(i)):
        return ""  # the window, not the buffer, was held (a route's window, or no scaling)
    option = "SO_RCVBUF" if kind == "tcp_rmem" else "SO_SNDBUF"
    return (
        f"set by its program ({option}: constant at {human_bytes(buffer)} while the sender was limited by it "
        f"{share:.0%} of its busy time, {human_bytes(maximum)} the most {kind} lets autotuning give it on "
        f"{host_name(side)})"
    )


def clamped_window(i: Inputs) -> str:
    """Words, where the receiver advertised a window far below what its buffer gives
    (CLAMPED_SHARE of it or less: a window clamp apart from the buffer), with the sender
    limited by that window LOCKED_CLOCK of its busy time ("" if not seen, or where window
    scaling was not negotiated: `unscaled` says that).  A route's `window` metric is named
    only where one was read there (non-zero), never inferred from the clamp."""
    if unscaled(i):
        return ""
    advertised = i.sender.get("snd_wnd_median_bytes")
    buffer = i.receiver.get("rcvbuf_max_bytes")
    busy = i.sender.get("busy_seconds", 0.0)
    share = i.sender.get("rwnd_limited_seconds", 0.0) / busy if busy > 0 else 0.0
    if not advertised or not buffer or advertised > CLAMPED_SHARE * buffer or share < LOCKED_CLOCK:
        return ""
    seen = f"{host_name(i.receiver_side)} advertised {human_bytes(advertised)} (the median) with a receive buffer of "
    metric = route_window(i)
    if metric > 0:
        return (
            f"{seen}{human_bytes(buffer)}: its window was clamped apart from its buffer (its route's `window` "
            f"metric {human_bytes(metric)})"
        )
    return f"{seen}{human_bytes(buffer)}: its window was held apart from its buffer"


def path_capacity(i: Inputs) -> Bound | None:
    """The path's estimate, as payload (headers count against a link's rate)."""
    if not i.bandwidth:
        return None
    rate = i.bandwidth / i.wire_factor
    return Bound(
        "path_capacity",
        rate,
        f"the path's capacity {human_rate(i.bandwidth)} ({i.bandwidth_note}) allows {human_rate(rate)} of payload",
        "path",
        {"bandwidth_bytes_per_second": i.bandwidth},
    )


def return_queue(i: Inputs) -> float | None:
    """The queue the return way (the ACKs' direction) held, in seconds, where it stood
    and the data way's did not (None otherwise, or where the timestamps did not say): each
    way's one-way delay over the flow's second half above its least (measure/wire/oneway.py),
    the return way's at least QUEUE_SHARE of the path's minimum round trip (and
    QUEUE_SECONDS), the data way's below that or below QUEUE_SHARE of the return way's (a
    busy host's userspace delay line delays both ways by its own wait: tens of ms on the
    data way beside the ACKs' 300 ms and more leaves the return way's queue the standing
    one)."""
    ack, data = i.one_way.get("ack_queue_seconds"), i.one_way.get("data_queue_seconds")
    if ack is None or data is None or not i.rtt:
        return None
    least = max(QUEUE_SHARE * i.rtt, QUEUE_SECONDS)
    return ack if ack >= least and (data < least or data <= QUEUE_SHARE * ack) else None


def ack_clock(i: Inputs) -> Bound | None:
    """The ACK clock's bound, where the return way held a standing queue (return_queue):
    a sender sends as its ACKs come back, so the rate is at most the return way's capacity
    times the data bytes acknowledged per ACK wire byte.  A way whose queue stood was
    sending all it could: what the transfer's ACKs carried over the data phase is the
    capacity it had for them (the data flows' frames that way: measure/wire/oneway.py; the
    monitor's own sessions took the rest); the bound is that over the ACK wire bytes per
    data byte.  Where the one-way pass read only the capture's first records (`whole` 0),
    the capture's totals both ways stand in (the monitor's sessions counted too)."""
    queue = return_queue(i)
    whole = i.one_way.get("whole", 1.0) == 1.0
    data = i.one_way.get("data_bytes", 0.0) if whole else i.data_payload_bytes
    wire = i.one_way.get("ack_wire_bytes", 0.0) if whole else i.return_wire_bytes
    # One pure ACK per this much data, from the data flows read.
    per_ack = i.one_way.get("data_bytes", 0.0) / max(1.0, i.one_way.get("ack_packets", 0.0))
    seconds = i.span if i.phase_measured else i.wire_seconds
    if queue is None or data <= 0 or wire <= 0 or not seconds or seconds <= 0:
        return None
    carried = wire / seconds  # bytes/s on the return wire
    per_data = wire / data
    each = f", a pure ACK per {human_bytes(per_ack)} of data" if i.one_way.get("ack_packets") else ""
    held = (
        f"the return path (the ACKs' way) held a standing queue of {_ms(queue)} (its one-way delay above its "
        f"least, from the remote's TCP timestamps; the data way's {_ms(i.one_way.get('data_queue_seconds', 0.0))})"
    )
    cost = f"the ACKs cost {per_data:.2%} of the data's bytes on the return wire"
    capacity = i.return_bandwidth
    if capacity:
        # A capacity known apart from this transfer: the bound is not what the ACKs carried.
        rate = capacity / per_data
        words = (
            f"{held}; its configured capacity {human_bits(capacity)} (return_bandwidth; this transfer's ACKs carried "
            f"{human_bits(carried)}, {human_bytes(wire)}{each}); {cost}, so the ACK clock allows {human_rate(rate)}"
        )
    else:
        rate = carried / per_data
        words = (
            f"{held}: it carried all it could, {human_bits(carried)} of this transfer's ACKs on the wire "
            f"({human_bytes(wire)}{each}); {cost}, so the ACK clock allows {human_rate(rate)} (the return path's "
            "capacity is not configured: this bound is the ACK way's measured carriage, set "
            "remotes.NAME.return_bandwidth to compare it with a number not taken from the transfer)"
        )
    return Bound(
        "ack_clock",
        rate,
        words,
        "path",
        {
            "return_bytes_per_second": carried,
            "ack_wire_per_data_byte": per_data,
            "ack_queue_seconds": queue,
            **({"return_capacity_bytes_per_second": capacity} if capacity else {}),
        },
    )


def loss(i: Inputs) -> Bound | None:
    """Mathis: MSS / RTT x sqrt(3/2) / sqrt(p), p the congestion events per segment sent:
    the real losses and the round trips the path marked CE in (Inputs.congestion_events:
    CUBIC and Reno halve once for either)."""
    rtt = round_trip(i)
    lost, marked = i.real_losses, i.ce_rounds
    if not rtt or not i.segments or lost + marked <= 0 or i.congestion_control in PACED:
        # bbr does not take loss (nor a CE mark) for congestion (it keeps its rate up to
        # ~20% loss): no Mathis bound holds it.
        return None
    p = i.congestion
    rate = i.mss / rtt * MATHIS_C / math.sqrt(p)
    # (Loss is named only where something was lost.)
    event = (
        ("one halving per segment lost or marked round trip" if lost else "one halving per marked round trip")
        if marked
        else "one loss per congestion event"
    )
    model = f"Mathis: MSS/RTT x 1.22/sqrt(p), {event}"
    if i.congestion_control in ("", "cubic"):
        cubic = i.mss / rtt * CUBIC_K * (rtt / p) ** 0.75
        if cubic > rate:
            rate, model = cubic, "CUBIC's response: 1.05 x (RTT/p)^(3/4) segments per round trip, RFC 9438"
    if marked:
        what = (
            f"congestion events {p:.2%} of segments (real: {lost} lost and {marked:.0f} round trips marked CE, of "
            f"{i.segments} sent)"
        )
    else:
        what = f"loss {p:.2%} of segments (real: {lost} lost of {i.segments})"
    return Bound(
        "loss",
        rate,
        f"the {what} with a {i.mss:.0f}-byte MSS over {_ms(rtt)} allows {human_rate(rate)} ({model})",
        "path",
        {"loss_ratio": p, "mss_bytes": i.mss, "rtt_seconds": rtt, **({"ce_rounds": marked} if marked else {})},
        low=LOSS_LOW,
        high=math.inf,
        shown="" if lost or not marked else "ce_marks",
    )


def allowed_mss(mtu: float) -> float:
    return mtu - IP_TCP_HEADERS


def mss_clamp(i: Inputs) -> str:
    """Words, where the sender's MSS is below MSS_CLAMP_SHARE of what the path's measured
    MTU allows ("" where it is not, or either is unknown)."""
    mtu = i.mtu
    mss = i.sender.get("mss_bytes") or i.receiver.get("mss_bytes")
    if not mtu or not mss or mss >= MSS_CLAMP_SHARE * allowed_mss(mtu):
        return ""
    return (
        f"the sender's MSS {mss:.0f} B is below the {allowed_mss(mtu):.0f} B the path's MTU {mtu:.0f} B allows "
        "(clamped on the way, or by an advmss)"
    )


def packet_rate(i: Inputs) -> Bound | None:
    """Where the MSS is clamped (mss_clamp): the path's packets per second at full size
    (its estimate over a full frame) times this MSS."""
    clamp = mss_clamp(i)
    if not clamp or not i.bandwidth or not i.mtu:
        return None
    mtu, mss = i.mtu, i.sender.get("mss_bytes") or i.receiver.get("mss_bytes") or 0.0
    packets = i.bandwidth / (mtu + LINK_HEADERS)
    rate = packets * mss
    return Bound(
        "packet_rate",
        rate,
        f"{clamp}: at the {packets:.0f} packets/s the path carries at full size ({human_rate(i.bandwidth)}) it "
        f"allows {human_rate(rate)}",
        "path",
        {"mss_bytes": mss, "mtu_bytes": mtu, "packets_per_second": packets},
    )


def programs(i: Inputs, sides: Iterable[str], least_life: float) -> list[Bound]:
    """Each program of the transfer (of `sides`, that lived `least_life` of the transfer
    or more): the rate it would allow working all its life, the transfer's rate over the
    share of its life it was on a core, queued for one or on storage."""
    found = []
    rate = i.steady_rate
    for label, v in sorted(i.programs.items()):
        side, _, name = label.partition(" ")
        if side not in sides or v.get("seconds", 0.0) < least_life * i.duration:
            continue
        cpu, disk = v.get("runnable_share", 0.0), v.get("io_wait_share", 0.0)
        busy = min(1.0, cpu + disk)
        if busy <= 0:
            continue
        kind = "cpu" if cpu >= disk else "disk"
        what = (
            f"on a core or queued for one {cpu:.0%}"
            if kind == "cpu"
            else f"waiting on storage in {disk:.0%} of its samples"
        )
        found.append(
            Bound(
                kind,
                rate / busy,
                f"{name} ({host_name(side)}) was {what} of its {v.get('seconds', 0.0):.1f} s (busy {busy:.0%} of it): "
                f"working all of it, it allows {human_rate(rate / busy)}",
                side,
                {"busy_share": busy},
                program=name,
            )
        )
    return found


def data_life(v: Mapping[str, float]) -> tuple[float, float]:
    """(CPU-seconds, seconds) of a program's watched life from the first data on: its
    set-up (ssh's key exchange: seconds of CPU under a tenth of a core) moved no data."""
    cpu = v.get("cpu_seconds", 0.0) - v.get("cpu_seconds_before_data", 0.0)
    return max(0.0, cpu), max(0.0, v.get("seconds", 0.0) - v.get("seconds_before_data", 0.0))


def per_cpu_second(i: Inputs, v: Mapping[str, float]) -> float | None:
    """The bytes a program moved per CPU-second it used in the data phase: what it moved
    while it was watched then (the file, or the steady rate over its watched data phase
    where that was shorter) over the CPU-seconds it used then (None: none counted)."""
    cpu, seconds = data_life(v)
    if cpu <= 0 or seconds <= 0:
        return None
    moved = min(float(i.file_bytes), i.steady_rate * seconds) if i.file_bytes > 0 else i.steady_rate * seconds
    return moved / cpu if moved > 0 else None


# A cgroup throttled this share of the time or more spent its CPU quota (vetoes.THROTTLED_SHARE).
QUOTA_SPENT = 0.2


def program_cpu(i: Inputs, label: str, v: Mapping[str, float]) -> Bound | None:
    """A program's CPU bound: the bytes it moved per CPU-second it used, times the CPU it
    could have had: one core (a process's data path is one thread), or its cgroup's CPU
    quota where lower (v1 cpu.cfs_quota_us / cpu.cfs_period_us, v2 cpu.max; the remote's
    read with its stats).  None where it used no CPU that was counted."""
    side, _, name = label.partition(" ")
    used = v.get("cpu_share", 0.0)
    per_cpu = per_cpu_second(i, v)
    if used <= 0 or per_cpu is None:
        return None
    quota = v.get("cpu_quota_cores")
    cores = min(1.0, quota) if quota else 1.0
    had = f"its cgroup's CPU quota {cores:.2f} cores" if quota and quota < 1.0 else "one core"
    throttled = v.get("cpu_throttled_share", 0.0)
    cpu_data, seconds_data = data_life(v)
    used_data = cpu_data / seconds_data if seconds_data > 0 else used
    if quota and throttled >= QUOTA_SPENT and used_data < cores:
        # The group spent its quota (throttled in most periods) and shares it with its
        # other programs: this one had what the quota left it, what it used in the data phase.
        used = cores = used_data
        had = (
            f"its cgroup's CPU quota {min(1.0, quota):.2f} cores, spent (throttled {throttled:.0%} of the time) "
            f"with its group's other programs, leaving it {used:.0%} of a core"
        )
    rate = per_cpu * cores
    return Bound(
        "cpu",
        rate,
        f"{name} ({host_name(side)}) moved {human_bytes(per_cpu)} per CPU-second (it used {used:.0%} of a core "
        f"over its {v.get('seconds', 0.0):.1f} s); with {had} it allows {human_rate(rate)}",
        side,
        {"bytes_per_cpu_second": per_cpu, "cores": cores, "cpu_share": used},
        program=name,
    )


def host_cpu(i: Inputs, label: str, v: Mapping[str, float]) -> Bound | None:
    """The rate a host's CPU allowed a program: the bytes it moved per CPU-second times
    the share of a core the host gave it while it wanted one (used over runnable: on a
    core, or queued for one).  A program runnable all its life got all the host let it
    have, and the bound is its rate; one asleep part of its life (waiting for the network,
    its storage) would have gone faster with the same CPU, and the host did not hold it.
    None where it was never runnable."""
    side, _, name = label.partition(" ")
    used, runnable = v.get("cpu_share", 0.0), v.get("runnable_share", 0.0)
    per_cpu = per_cpu_second(i, v)
    if used <= 0 or runnable <= 0 or per_cpu is None:
        return None
    given = min(1.0, used / runnable)
    rate = per_cpu * given
    return Bound(
        "busy_host",
        rate,
        f"{name} ({host_name(side)}) moved {human_bytes(per_cpu)} per CPU-second and got {given:.0%} of a core "
        f"while it wanted one (it used {used:.0%} and was on a core or queued for one {runnable:.0%} of its "
        f"{v.get('seconds', 0.0):.1f} s): the host's CPU allowed it {human_rate(rate)}",
        side,
        {"bytes_per_cpu_second": per_cpu, "core_given": given, "runnable_share": runnable},
        program=name,
    )


# A storage limit counts the device's bytes: a file system writes its metadata and
# journal beside the data (a sync mount commits both with each write), so the payload
# runs below the limit, down to this share of it.
STORAGE_LOW = 0.5


def storage(i: Inputs, label: str, v: Mapping[str, float]) -> Bound | None:
    """A program's storage bound: its cgroup's IO limit the way it moved the data (the
    receiver's writes, the sender's reads: v1 blkio.throttle.*_bps_device, v2 io.max,
    the least over its groups and devices), else its measured IO wait: the rate over the
    share of its life it waited on storage or worked on a core (working all of it, it
    allows no more).  None where it never waited on storage and has no limit read."""
    side, _, name = label.partition(" ")
    writes = side == i.receiver_side
    limit = v.get("io_write_limit_bytes_per_second" if writes else "io_read_limit_bytes_per_second")
    way = "writes" if writes else "reads"
    if limit:
        return Bound(
            "disk",
            limit,
            f"{name} ({host_name(side)})'s storage {way} are limited by its cgroup to {human_rate(limit)} "
            "(blkio.throttle / io.max): it allows that",
            side,
            {"io_limit_bytes_per_second": limit},
            low=STORAGE_LOW,
            program=name,
        )
    disk, cpu = v.get("io_wait_share", 0.0), v.get("runnable_share", 0.0)
    if disk <= 0:
        return None
    busy = min(1.0, disk + cpu)
    rate = i.steady_rate / busy
    return Bound(
        "disk",
        rate,
        f"{name} ({host_name(side)}) waited on storage in {disk:.0%} of its samples and was on a core or queued "
        f"for one {cpu:.0%} of its {v.get('seconds', 0.0):.1f} s (no IO limit read): working all its life it "
        f"allows {human_rate(rate)}",
        side,
        {"io_wait_share": disk, "busy_share": busy},
        program=name,
    )


def judged_rate(bound: Bound, i: Inputs) -> float:
    """The rate `bound` is held against: the steady rate, except where a program's bound
    (cpu, disk, busy_host) is below it: a steady fit over part of the data phase runs
    above what the program supplies where the send buffer or the page cache let a burst
    through (a 4 MiB upload read through a 2 MB/s blkio limit fitted at 2.9-14 MB/s, its
    data phase at 2.0-2.3; scp under a spent 0.2-core quota fitted 11.7 MB/s over a 1 s
    data phase against its 8.3 MB/s), so there the data phase's mean rate is held."""
    steady = i.steady_rate
    if bound.program and i.phase_measured and steady > bound.high * bound.rate:
        return min(steady, i.file_bytes / i.span)
    return steady


def of_program(i: Inputs, kind: str, side: str, name: str) -> Bound | None:
    """The bound of `kind` (cpu, disk, busy_host) of the program `name` on `side`."""
    v = i.programs.get(f"{side} {name}")
    if v is None:
        return None
    fn = {"cpu": program_cpu, "disk": storage, "busy_host": host_cpu}[kind]
    return fn(i, f"{side} {name}", v)


def application(i: Inputs, side: str, why: str) -> Bound:
    """A program that does not keep up (the sender's, or the receiver's, on `side`): it
    supplied (or took) the data at the rate the transfer moved it, `why` saying how that
    was seen; the bound is that rate."""
    rate = i.steady_rate
    return Bound(
        "application",
        rate,
        f"{why}: the program on {host_name(side)} moved the data at {human_rate(rate)}",
        side,
    )


def ssh_carried(i: Inputs) -> bool:
    """Whether the transfer went through OpenSSH's fixed channel window: ssh seen among
    this host's programs, or a protocol that always runs it (scp, sftp, rsync over ssh);
    never HPN-SSH (its protocol named so, or its programs seen), whose window grows."""
    names = {label.partition(" ")[2] for label in i.programs}
    if "hpn" in i.protocol.lower() or names & HPN_PROGRAMS:
        return False
    local = {label.partition(" ")[2] for label in i.programs if label.startswith("local ")}
    return bool(local & SSH_CLIENTS) or i.protocol in SSH_PROTOCOLS


def ssh_window(i: Inputs) -> Bound | None:
    """OpenSSH's channel window (SSH_WINDOW) over the round trip the transfer saw, for a
    transfer carried in an ssh channel (None for any other, or without a round trip)."""
    rtt = round_trip(i)
    if not rtt or not ssh_carried(i):
        return None
    rate = SSH_WINDOW / rtt
    return Bound(
        "ssh_window",
        rate,
        f"ssh's channel window {SSH_WINDOW / (1 << 20):.1f} MiB (OpenSSH's fixed session window, and sftp's 64 "
        f"requests of 32 KiB) over {_ms(rtt)} allows {human_rate(rate)}",
        "local",
        {"window_bytes": float(SSH_WINDOW), "rtt_seconds": rtt},
        low=SSH_WINDOW_LOW,
    )


def computed(i: Inputs) -> list[Bound]:
    """Every network bound that could be computed from this transfer's inputs."""
    candidates = (
        receive_window(i),
        send_buffer(i),
        path_capacity(i),
        loss(i),
        packet_rate(i),
        ack_clock(i),
        ssh_window(i),
    )
    return [b for b in candidates if b]


def met(bounds: Iterable[Bound], rate: float) -> list[Bound]:
    """The bounds the rate meets, the lowest first (the tightest limit holds)."""
    return sorted((b for b in bounds if b.meets(rate)), key=lambda b: b.rate)


def listed(bounds: Iterable[Bound]) -> str:
    """The bounds computed, in words ("no bound could be computed" where none)."""
    said = [f"{b.shown or b.name} {human_rate(b.rate)}" for b in bounds]
    return "bounds computed: " + ", ".join(said) if said else "no bound could be computed"


def distances(bounds: Iterable[Bound], rate: float) -> str:
    """The bounds computed and how far the steady `rate` was from each, in words."""
    said = [
        f"{b.shown or b.name} {human_rate(b.rate)} (the steady rate {rate / b.rate:.0%} of it)"
        for b in bounds
        if b.rate > 0
    ]
    return "bounds computed: " + ", ".join(said) if said else "no bound could be computed"
