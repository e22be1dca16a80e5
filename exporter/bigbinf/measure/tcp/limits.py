"""What limited a transfer: one verdict of LIMITS, with the numbers that say so.

The sender's kernel knows best: tcp_info's busy time (data in flight) splits into time
limited by the receive window (rwnd_limited), by the send buffer (sndbuf_limited), and
the rest (congestion control's own pace).  The path baseline adds the bottleneck
estimate and the BDP.  The rules, in order (docs/metrics.md, "Why was it slow?"):

1. link_capacity: the transfer's rate reached LINK_SHARE of the path's bandwidth;
2. application, when the sender was window-limited for LIMITED_SHARE of its busy time
   but the receiver's queue stood full: its program did not read fast enough;
3. receive_window: the sender was window-limited for LIMITED_SHARE of its busy time, or
   the receiver's buffer grew to its tcp_rmem maximum and that is below the BDP (what
   shows even when the sender cannot be asked, and under BBR, whose pacing hides part
   of the window limit from the rwnd_limited clock);
4. send_buffer: the same for the sender's send buffer and tcp_wmem (the larger clock
   share decides when both hold);
5. congestion: the sender retransmitted at least LOSS_SHARE of its segments;
6. application: none of the network limits was active (the sender often had nothing
   to send: a throttled or disk-bound program, or a transfer too short to leave slow
   start).  Only when the sender's kernel was asked: otherwise not judged.

With an iperf3-measured bandwidth (which the hosts' own buffers may have held down),
rule 1 comes after rules 2-4.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from bigbinf.result import PathBaseline, Result

LINK_SHARE = 0.9  # "within 10% of the shaped rate"
LIMITED_SHARE = 0.3  # of the sender's busy time
LOSS_SHARE = 0.001  # retransmitted segments per segment sent: 0.1%
CEILING_SHARE = 0.9  # a buffer this close to its sysctl maximum has reached it
RECEIVER_BEHIND = 0.5  # mean fill of the receiver's queue above which its application is behind


@dataclass(frozen=True)
class Limit:
    reason: str  # one of result.LIMITS
    evidence: str  # the numbers, in words


def judge_limit(r: Result, baseline: PathBaseline | None) -> Limit | None:
    """The limiting factor of an ok TCP transfer; None when there is nothing to judge by."""
    if r.outcome != "ok" or r.transport == "udp":
        return None
    sender, receiver = r.sender_tcp, (r.tcp_local if r.direction == "download" else r.tcp_remote)
    if not sender and not receiver:
        return None
    bandwidth = baseline.bandwidth_bytes_per_second if baseline else None
    bdp = baseline.bdp_bytes if baseline else None
    rate = _achieved_rate(r)
    share = ""
    if bandwidth and baseline:
        share = f" ({rate / bandwidth:.0%} of the path's {human_rate(bandwidth)}, {baseline.bandwidth_source})"
    link = (
        Limit("link_capacity", f"delivery rate {human_rate(rate)}{share}")
        if (bandwidth and rate >= LINK_SHARE * bandwidth)
        else None
    )
    # An estimate from iperf3 can itself be held down by the hosts' buffers: then only
    # the buffer rules below may call the link full (iperf3 at its own earlier rate, or
    # a copy as slow as a buffer-limited iperf3, is not proof of a full path).
    if link and baseline and baseline.bandwidth_source != "iperf3":
        return link
    busy = sender.get("busy_seconds", 0.0)
    rwnd = sender.get("rwnd_limited_seconds", 0.0) / busy if busy > 0 else 0.0
    sndbuf = sender.get("sndbuf_limited_seconds", 0.0) / busy if busy > 0 else 0.0
    receiver_side, sender_side = ("local", "remote") if r.direction == "download" else ("remote", "local")
    cap = r.tcp_buffer_max_bytes
    rcv_ceiling = _at_ceiling(receiver.get("rcvbuf_max_bytes"), baseline, receiver_side, "tcp_rmem", bdp, cap)
    snd_ceiling = _at_ceiling(sender.get("sndbuf_max_bytes"), baseline, sender_side, "tcp_wmem", bdp, cap)
    window = f"the sender was limited by the receive window {rwnd:.0%} of its {busy:.1f} s busy time" if busy else ""
    behind = receiver.get("rcv_queue_ratio_avg")
    if rwnd >= LIMITED_SHARE and behind is not None and behind >= RECEIVER_BEHIND:
        return Limit(
            "application",
            f"{window}, but the receiver's queue stood {behind:.0%} full: its application (or disk) "
            "reads slower than the network delivers",
        )
    receive_limited = rwnd >= LIMITED_SHARE or bool(rcv_ceiling)
    send_limited = sndbuf >= LIMITED_SHARE or bool(snd_ceiling)
    if receive_limited and (not send_limited or rwnd >= sndbuf):
        return Limit(
            "receive_window",
            "; ".join(filter(None, [window, rcv_ceiling and f"the receiver's {rcv_ceiling}"]))
            + f"; delivery rate {human_rate(rate)}{share}",
        )
    if send_limited:
        buffered = (
            f"the sender was limited by its send buffer {sndbuf:.0%} of its {busy:.1f} s busy time" if busy else ""
        )
        return Limit(
            "send_buffer",
            "; ".join(filter(None, [buffered, snd_ceiling and f"the sender's {snd_ceiling}"]))
            + f"; delivery rate {human_rate(rate)}{share}",
        )
    if link:
        return link
    retransmits, segments, counted = _loss(r, sender)
    if segments and retransmits / segments >= LOSS_SHARE:
        return Limit(
            "congestion",
            f"{retransmits} retransmitted of {segments} segments ({retransmits / segments:.2%}, {counted}); "
            f"delivery rate {human_rate(rate)}{share}",
        )
    if not sender:
        # The sender (a download's remote) could not be asked: none of its limits can be
        # ruled out, so "application" would be a guess.
        return None
    in_flight = f"data in flight {busy:.1f} s of the {r.duration_seconds:.1f} s transfer" if busy else ""
    app = sender.get("app_limited_ratio")
    flagged = f"app-limited in {app:.0%} of the samples" if app is not None else ""
    detail = "; ".join(filter(None, [in_flight, flagged, f"delivery rate {human_rate(rate)}{share}"]))
    return Limit("application", f"no network limit was active: {detail}")


def _at_ceiling(
    buffer: float | None, baseline: PathBaseline | None, side: str, kind: str, bdp: float | None, cap: int | None
) -> str:
    """Evidence that a buffer grew to the maximum autotuning had for this transfer and that
    maximum is below the BDP ("" if not): autotuning wanted more and was refused.  The
    maximum is the host's sysctl, or the transfer's own `tcp_buffer_max` cap where that is
    lower (a sweep's setting: the host's sysctl is not what the transfer had).  A buffer
    below its maximum was big enough for what the transfer asked, however small."""
    host = baseline.buffers.get(side, {}).get(kind) if baseline else None
    ceiling, named = host, f"{kind} maximum"
    if cap is not None and (host is None or cap < host):
        ceiling, named = cap, "tcp_buffer_max cap"
    if buffer is None or ceiling is None or bdp is None or ceiling >= bdp or buffer < CEILING_SHARE * ceiling:
        return ""
    return f"buffer grew to {human_bytes(buffer)}, its {named} {human_bytes(ceiling)}, below the BDP {human_bytes(bdp)}"


def _achieved_rate(r: Result) -> float:
    """How fast the path carried the data over the whole transfer: the capture's payload
    rate over its packet span, or the file over the wall clock, the higher (each can only
    fall short: process start-up, idle gaps).  Not the kernel's delivery_rate: that is
    measured per ACK and a bursty sender's samples overstate the path (a curl throttled
    to 4 MB/s showed 200 MB/s on a 25 MB/s link)."""
    rates = [r.throughput_bytes_per_second]
    first, last = r.first_packet_timestamp, r.last_packet_timestamp
    if first is not None and last is not None and last > first:
        payload = r.payload_bytes_down if r.direction == "download" else r.payload_bytes_up
        rates.append(payload / (last - first))
    return max(rates)


def _loss(r: Result, sender: Mapping[str, float]) -> tuple[int, int, str]:
    """(retransmits, segments sent, whose count) from the best source there is."""
    if r.retransmits_sender is not None and sender.get("segs_out"):
        return r.retransmits_sender, int(sender["segs_out"]), "the sender's kernel"
    packets = r.packets_down if r.direction == "download" else r.packets_up
    return r.retransmits_wire, packets, "seen on the wire: a lower bound"


def human_bytes(value: float | None) -> str:
    if value is None:
        return "unknown"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.2f} {unit} ({value:.0f} B)"
    return f"{value:.0f} B"


def human_rate(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value / 1e6:.2f} MB/s ({value * 8 / 1e6:.0f} Mbit/s)"
