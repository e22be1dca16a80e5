"""What the rules read, assembled in one place from a Result and its round's path
baseline (`Inputs.of`): the sender's tcp_info clocks, the buffers against their maxima and
the BDP, the retransmissions, the progress over time, the programs' waits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from bigbinf.judge.words import human_bytes, human_rate
from bigbinf.result import PathBaseline, Result

CEILING_SHARE = 0.9  # a buffer this close to its sysctl maximum has reached it
SHORT_RTTS = 20  # a data phase of fewer round trips than this is slow start, not a steady rate
SHORT_BDPS = 16  # ... where that cannot be told: a file of fewer BDPs than this
# A transfer that sustained more than this share of the path's estimate (as wire rates)
# proves the estimate wrong: no path carries more than it can.  The margin covers an
# estimate that is only imprecise: a policer passes more than its configured rate (the
# lab's nftables policer at 50 Mbit/s sustained 7.0-7.55 MB/s on the wire over the last
# half of 16 MiB, 112-121%), and a listings' fit runs high beside CPU burners.
STALE_SHARE = 1.5
# Where the BDP is unknown, a buffer at its maximum names its limit only with the sender's
# own clock saying so this share of its busy time: a BBR sender paces at the rate the
# window allows, so the window stops a send only when it probes for more (a 1 MiB tcp_rmem
# cap on a 400 ms path: 20% of a BBR sender's busy time; a 1 MiB tcp_wmem cap: 28-35%),
# while one whose window never binds (the link holds it) shows none.
CORROBORATED_SHARE = 0.1
KERNEL_COUNT = "the sender's kernel"
# Congestion controls that do not slow for a CE mark (BBR v1 takes neither loss nor ECN for
# congestion): their marks are no congestion events.
ECN_BLIND = frozenset({"bbr"})


@dataclass(frozen=True)
class Inputs:
    """What the rules read, from one Result and its round's path baseline."""

    duration: float
    file_bytes: int
    rate: float  # achieved over the transfer (the higher of file/wall clock and the capture's)
    steady: float | None  # bytes/s past slow start (the progress series)
    data_start: float | None  # seconds after the command started
    data_end: float | None
    bandwidth: float | None  # the path's (a wire rate), unless circular (iperf3 judged by iperf3)
    wire_factor: float  # wire bytes per payload byte the way the data went (the capture's; 1 without)
    bandwidth_note: str  # "(N% of the path's X, source)" or why there is none
    bdp: float | None
    rtt: float | None  # the path's minimum round trip (the probe's, else the kernel's)
    sender: Mapping[str, float]
    receiver: Mapping[str, float]
    sender_side: str
    receiver_side: str
    ceilings: dict[str, str]  # kind -> evidence that the buffer reached its maximum ("" if not)
    programs: Mapping[str, Mapping[str, float]]
    # Seconds the transfer's programs (both ends, where sampled) queued for a core before
    # the first data: set-up a busy host slowed, not the path's or the protocol's.
    setup_queued: float
    # Seconds the one of them that queued longest for a core did so after the first data:
    # a data phase a busy host stretched (the programs overlap: the longest, not the sum).
    data_queued: float
    retransmits: int
    segments: int
    loss_source: str
    probe_loss: str  # "x% of N probes" where the round's probe lost any, else ""
    # How the remote was seen as the transfer ran, and this host's waits for a CPU
    # (result.py: Result.remote_view, Result.host_busy); {} = not seen, not measured.
    remote_view: Mapping[str, float] = field(default_factory=dict)
    host_busy: Mapping[str, float] = field(default_factory=dict)
    # Where the path's estimate was proven stale by this transfer's own rate: what it said
    # and how to renew it (then `bandwidth` is None: nothing is judged against it).
    stale_estimate: str = ""
    stale_renew: str = ""  # ... and how to renew it
    remote: str = ""  # the remote's name in the configuration
    # kind -> evidence that the buffer reached its maximum where the BDP is unknown (no
    # estimate: whether that maximum is below it cannot be told; "" if not, or if known).
    at_max: Mapping[str, str] = field(default_factory=dict)
    # Both ends' TCP settings as the round's baseline read them (PathBaseline.buffers: the
    # buffer limits, tcp_moderate_rcvbuf where read), the transfer's own buffer cap, the
    # path's MTU, the sender's congestion control and its host's default.
    buffers: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    buffer_cap: int | None = None
    mtu: float | None = None
    congestion_control: str = ""
    default_congestion: Mapping[str, str] = field(default_factory=dict)
    # Retransmissions the receiver reported as duplicates (DSACK): not losses.
    spurious: int = 0
    protocol: str = ""
    direction: str = ""
    # The capture's largest flow (Result.one_way): each way's queue from the TCP
    # timestamps, and the ACKs the return way carried.
    one_way: Mapping[str, float] = field(default_factory=dict)
    # The capture's span (first to last packet), over which its wire bytes moved.
    wire_seconds: float | None = None
    # The capture's frame bytes the other way from the data (the ACKs' way), and the
    # data's payload: what the ACK clock's bound stands on (bounds.ack_clock).
    return_wire_bytes: float = 0.0
    data_payload_bytes: float = 0.0
    # The return path's capacity (the ACKs' way, wire bytes/s) as configured
    # (remotes.NAME.return_bandwidth); None: unknown (the ACK clock's bound then stands on
    # what that way carried).
    return_bandwidth: float | None = None

    @property
    def mss(self) -> float:
        """The sender's segment size (1448: a 1500-byte MTU with timestamps, where unread)."""
        return self.sender.get("mss_bytes") or self.receiver.get("mss_bytes") or 1448.0

    @property
    def sending_samples(self) -> float | None:
        """How many listings of the sending side saw it move data (None: not counted, a
        journal from before the count).  A remote sender's listings are also counted by
        the remote view; the fewer of the two is what the verdict stands on."""
        counts = [v for v in (self.sender.get("sending_samples"),) if v is not None]
        if self.sender_side == "remote" and "listings_received" in self.remote_view:
            counts.append(self.remote_view["listings_received"])
        return min(counts) if counts else None

    @property
    def remote_programs_seen(self) -> bool:
        """Whether the remote's programs were seen doing the work: the remote view's count
        where it made one; else (a journal or a remote without the view) any remote program
        the samples named.  Unseen, nothing is said of the remote's programs, and nothing
        on this host stands in for them."""
        if "programs_seen" in self.remote_view:
            return self.remote_view["programs_seen"] > 0
        return any(name.startswith("remote ") for name in self.programs)

    @classmethod
    def of(cls, r: Result, baseline: PathBaseline | None) -> Inputs:
        receiver = r.tcp_local if r.direction == "download" else r.tcp_remote
        receiver_side, sender_side = ("local", "remote") if r.direction == "download" else ("remote", "local")
        bandwidth = baseline.bandwidth_bytes_per_second if baseline else None
        source = baseline.bandwidth_source if baseline else ""
        note = ""
        if bandwidth and source == "iperf3" and r.protocol == "iperf3":
            # iperf3's own earlier rate under the same limits proves nothing about the path.
            bandwidth, note = None, "the path's capacity is known only from iperf3 itself"
        elif not bandwidth:
            note = "the path's capacity is unknown (no bandwidth configured, no iperf3 test)"
        bdp = baseline.bdp_bytes if baseline else None
        cap = r.tcp_buffer_max_bytes
        # The side whose listings timed the progress: the one with a steady rate, else the
        # one that saw the data start (a one-point series has no steady rate, but its
        # first data still ends the set-up).
        sides = (r.tcp_local, r.tcp_remote)
        progress = next((t for t in sides if "steady_rate_bytes_per_second" in t), None) or next(
            (t for t in sides if "data_start_seconds" in t), r.tcp_remote
        )
        retransmits, segments, counted = _loss(r, r.sender_tcp)
        wire, payload = (
            (r.wire_bytes_down, r.payload_bytes_down)
            if r.direction == "download"
            else (r.wire_bytes_up, r.payload_bytes_up)
        )
        return cls(
            duration=r.duration_seconds,
            file_bytes=r.file_bytes,
            rate=_achieved_rate(r),
            steady=progress.get("steady_rate_bytes_per_second"),
            data_start=progress.get("data_start_seconds"),
            data_end=progress.get("data_end_seconds"),
            bandwidth=bandwidth,
            wire_factor=wire / payload if r.wire_measured and payload > 0 and wire >= payload else 1.0,
            bandwidth_note=note or (f"{source}" if bandwidth else ""),
            bdp=bdp,
            rtt=(baseline.rtt_min_seconds if baseline else None) or progress.get("min_rtt_seconds") or None,
            sender=r.sender_tcp,
            receiver=receiver,
            sender_side=sender_side,
            receiver_side=receiver_side,
            ceilings={
                "tcp_rmem": _at_ceiling(
                    receiver.get("rcvbuf_max_bytes"), baseline, receiver_side, "tcp_rmem", bdp, cap
                ),
                "tcp_wmem": _at_ceiling(
                    r.sender_tcp.get("sndbuf_max_bytes"), baseline, sender_side, "tcp_wmem", bdp, cap
                ),
            },
            at_max={
                "tcp_rmem": _at_max(receiver.get("rcvbuf_max_bytes"), baseline, receiver_side, "tcp_rmem", cap),
                "tcp_wmem": _at_max(r.sender_tcp.get("sndbuf_max_bytes"), baseline, sender_side, "tcp_wmem", cap),
            }
            if bdp is None
            else {},
            programs=r.programs,
            setup_queued=sum(v.get("run_queue_seconds_before_data", 0.0) for v in r.programs.values()),
            data_queued=max(
                (
                    max(0.0, v.get("run_queue_seconds", 0.0) - v.get("run_queue_seconds_before_data", 0.0))
                    for v in r.programs.values()
                ),
                default=0.0,
            ),
            retransmits=retransmits,
            segments=segments,
            loss_source=counted,
            probe_loss=f"{baseline.loss_ratio:.1%} of {baseline.probes_sent} probes lost"
            if baseline and baseline.probes_sent and baseline.probes_answered < baseline.probes_sent
            else "",
            remote_view=r.remote_view,
            host_busy=r.host_busy,
            remote=r.remote,
            buffers=baseline.buffers if baseline else {},
            buffer_cap=cap,
            mtu=float(baseline.mtu_bytes) if baseline and baseline.mtu_bytes else None,
            congestion_control=r.congestion_control,
            default_congestion=baseline.congestion_control if baseline else {},
            spurious=min(retransmits, int(r.sender_tcp.get("dsack_dups", 0))) if counted == KERNEL_COUNT else 0,
            protocol=r.protocol,
            direction=r.direction,
            one_way=r.one_way,
            return_wire_bytes=float(r.wire_bytes_up if r.direction == "download" else r.wire_bytes_down),
            data_payload_bytes=float(payload),
            return_bandwidth=baseline.return_bandwidth_bytes_per_second if baseline else None,
            wire_seconds=r.last_packet_timestamp - r.first_packet_timestamp
            if r.first_packet_timestamp is not None and r.last_packet_timestamp is not None
            else None,
        )._checked_estimate(source)

    def _checked_estimate(self, source: str) -> Inputs:
        """These inputs with the path's estimate dropped where the transfer sustained a rate
        above it (STALE_SHARE): a rate above the estimate proves the estimate stale, never
        the path full.  Sustained: both its average and its steady rate (the listings' fit
        over the last half of the data) above it; an average above it alone is a
        bottleneck's burst allowance (the lab's 50 Mbit/s policer: 9.0 and 11.5 MB/s on
        average over 16 MiB, 144% and 184% of it, steady at 7.0 MB/s, 112%).  The BDP
        becomes what this rate proves at least."""
        sustained = min(self.rate, self.steady) if self.steady else self.rate
        share = self.path_share(sustained)
        if share is None or share <= STALE_SHARE or not self.bandwidth:
            return self
        renew = {
            # The judge measures nothing: an iperf3 estimate is the last ok iperf3 test's own
            # report (service/rounds.py), renewed only when one runs again.
            "iperf3": f"the next ok iperf3 test to {self.remote or 'this remote'} renews it: schedule one if "
            "none runs; if it stays low, its own buffers hold it (`advise`)",
            "configured": f"correct remotes.{self.remote or 'NAME'}.bandwidth in the configuration",
            "lab": "the lab's link rate is not what this path gives: check lab.link.rate",
        }.get(source, "re-measure it")
        said = (
            f"the path's estimate {human_rate(self.bandwidth)} ({source or 'unknown source'}) is stale: this transfer "
            f"sustained {human_rate(sustained * self.wire_factor)} on the wire, {share:.0%} of it, and no path "
            "carries more than it can; nothing is judged against it"
        )
        floor = sustained * self.wire_factor * self.rtt if self.rtt else None
        return replace(
            self,
            bandwidth=None,
            bandwidth_note="the path's estimate is stale",
            bdp=max(self.bdp or 0.0, floor or 0.0) or None,
            stale_estimate=f"{said} ({renew})",
            stale_renew=renew,
        )

    def maxed(self, kind: str, clock_share: float) -> str:
        """A buffer at its maximum, in words ("" if not shown): below the BDP (`ceilings`), or,
        where the BDP is unknown, with the sender's clock for that buffer (`clock_share` of
        its busy time) at CORROBORATED_SHARE or more (`at_max`)."""
        if self.ceilings.get(kind):
            return self.ceilings[kind]
        return self.at_max.get(kind, "") if clock_share >= CORROBORATED_SHARE else ""

    def path_share(self, rate: float) -> float | None:
        """A data rate's share of the path's bandwidth, both as wire rates (headers count
        against a link's rate: a full 1500-byte-MTU link carries ~95% of it as data)."""
        return rate * self.wire_factor / self.bandwidth if self.bandwidth else None

    def share_of_path(self, rate: float) -> str:
        share = self.path_share(rate)
        if share is not None and self.bandwidth:
            on_wire = f"{human_rate(rate * self.wire_factor)} on the wire: " if self.wire_factor > 1 else ""
            # Above the path and still judged against it: not sustained (_checked_estimate).
            burst = ": a burst above it, not sustained" if share > STALE_SHARE else ""
            return f" ({on_wire}{share:.0%} of the path's {human_rate(self.bandwidth)}, {self.bandwidth_note}{burst})"
        return f" ({self.bandwidth_note})" if self.bandwidth_note else ""

    @property
    def steady_fit(self) -> float | None:
        """The listings' steady rate, never above the path's bandwidth (as data): a fit
        above it is the bottleneck's bursts (a policer's bucket: 122% and 185% of the
        policed rate beside CPU burners) or listings each late by a wait for a CPU, not a
        rate the path sustains."""
        if self.steady and self.bandwidth:
            return min(self.steady, self.bandwidth / self.wire_factor)
        return self.steady

    @property
    def steady_rate(self) -> float:
        """The steady phase's rate as the rules judge it: the listings' fit (steady_fit),
        never below the transfer's average (slow start and gaps only lower that; a few
        sparse listings, each late by its wait for a CPU, can lower the fit: a full
        200 Mbit/s link fitted at under 90% of it beside two CPU burners), nor above the
        path where it is known (an average above it, not sustained, is a burst allowance's:
        _checked_estimate)."""
        average = min(self.rate, self.bandwidth / self.wire_factor) if self.bandwidth else self.rate
        return max(self.steady_fit or 0.0, average)

    @property
    def real_losses(self) -> int:
        """Segments lost: retransmissions less the spurious ones (DSACK: they had arrived)."""
        return max(0, self.retransmits - self.spurious)

    @property
    def loss(self) -> float:
        """Real losses per segment sent (spurious retransmissions are not losses)."""
        return self.real_losses / self.segments if self.segments else 0.0

    @property
    def ce_marked(self) -> float:
        """Segments the sender's peer acknowledged with the ECN echo (tcpi_delivered_ce: a
        queue on the path marked CE, and the receiver set ECE on its ACKs until the
        sender's CWR came); 0 where none were, or the sender could not be read."""
        return self.sender.get("delivered_ce_segments", 0.0)

    @property
    def ce_window(self) -> float:
        """The segments one marked round trip counts in `ce_marked`: the receiver echoes a
        mark on every ACK until the sender's CWR reaches it, a round trip later, so about
        the sender's window: its mean over the listings (else its largest), and never less
        than what a stream had in flight to move its share of the steady rate over its mean
        round trip (Little's law).  The listings alone can sample the window low (CI: a mean
        of 14 segments where 1.40 MB/s over 21.8 ms needs 21, the marked round trips then
        2.6 times the packets the router marked)."""
        listed = self.sender.get("cwnd_avg_segments") or self.sender.get("cwnd_max_segments") or 0.0
        rtt = self.sender.get("rtt_avg_seconds") or self.rtt
        streams = max(1, int(self.sender.get("streams", 1) or 1))
        carried = self.steady_rate / streams * rtt / self.mss if rtt and self.mss else 0.0
        return max(1.0, listed, carried)

    @property
    def ce_rounds(self) -> float:
        """The round trips in which the path marked CE, as the sender's congestion control
        responds to them: CUBIC and Reno reduce their window once per round trip that
        brought a mark (RFC 3168: CWR, then marks are ignored for that window), as once
        per loss event, however many packets the queue marked in it.  The segments
        acknowledged with the ECN echo over the window each marked round trip counts
        (at least 1 where any was marked); 0 for a sender that does not slow for marks
        (ECN_BLIND) or where none was marked.  Counting marked packets instead overstates
        p where a queue marks several in a round trip (5 in a row of every 500: the rate at
        191-330% of the bound from packets, 94-174% of the one from round trips; at random,
        0.5% of packets, 92-161% and 93-193%: docs/metrics.md)."""
        marked = self.ce_marked
        if marked <= 0 or self.congestion_control in ECN_BLIND:
            return 0.0
        return max(1.0, marked / self.ce_window)

    @property
    def congestion_events(self) -> float:
        """What the sender's congestion control took for congestion: its real losses and
        the round trips the path marked CE in (each halves CUBIC's or Reno's window once)."""
        return self.real_losses + self.ce_rounds

    @property
    def congestion(self) -> float:
        """Congestion events per segment sent: the p of the loss bound (bounds.loss)."""
        return self.congestion_events / self.segments if self.segments else 0.0

    def ce_words(self) -> str:
        """The path's CE marks in words ("" where none counted): "about N of M round trips
        marked CE by the path (...)": N an estimate (ce_rounds), M the segments over the
        window."""
        rounds = self.ce_rounds
        if not rounds:
            return ""
        window = self.ce_window
        delivered = self.sender.get("delivered_segments") or float(self.segments)
        total = max(rounds, delivered / window)
        return (
            f"about {rounds:.0f} of {total:.0f} round trips marked CE by the path ({self.ce_marked:.0f} of "
            f"{delivered:.0f} segments acknowledged with the receiver's ECN echo, tcpi_delivered_ce: a window of "
            f"about {window:.0f} segments per marked round trip)"
        )

    def loss_words(self) -> str:
        if not self.segments:
            return ""
        if self.spurious:
            return (
                f"{self.retransmits} retransmitted of {self.segments} segments, {self.spurious} of them spurious "
                f"(the receiver had them: DSACK), {self.real_losses} lost ({self.loss:.2%}, {self.loss_source})"
            )
        return f"{self.retransmits} retransmitted of {self.segments} segments ({self.loss:.2%}, {self.loss_source})"

    def real_loss_words(self) -> str:
        return self.loss_words()

    @property
    def standing_queue(self) -> float | None:
        """How far the round trip the transfer saw (its sender's mean smoothed RTT) stood
        above the path's minimum, in seconds (None: either unknown)."""
        seen = self.sender.get("rtt_avg_seconds")
        if not seen or not self.rtt:
            return None
        return seen - self.rtt

    @property
    def short(self) -> bool:
        """Whether the data moved in fewer than SHORT_RTTS round trips (slow start needs
        about log2(BDP / initial window) of them to fill a path: 6 for 1 MB), or, where
        the data phase or the RTT is unknown, the file was under SHORT_BDPS BDPs."""
        if self.rtt and self.phase_measured:
            return self.span < SHORT_RTTS * self.rtt
        return bool(self.bdp) and self.file_bytes < SHORT_BDPS * (self.bdp or 0.0)

    @property
    def phase_measured(self) -> bool:
        """Whether the listings saw the data phase begin and end apart (a one-point progress
        series, all of a short file moved between two listings, says neither)."""
        return self.data_start is not None and self.data_end is not None and self.data_end > self.data_start

    @property
    def in_flight(self) -> float | None:
        """The share of the data phase the sender had data in flight (its write queue not
        empty: the kernel's busy clock, which counts time held by the window or the send
        buffer too): its busiest stream's busy time over the phase (busy time summed over
        streams would exceed the wall clock).  None: the sender's clocks are unknown."""
        streams = int(self.sender.get("streams", 1) or 1)
        busy = self.sender.get("stream_busy_max_seconds") if streams > 1 else self.sender.get("busy_seconds")
        if busy is None or self.span <= 0:
            return None
        return min(1.0, busy / self.span)

    @property
    def span(self) -> float:
        """The data phase's length (first to last data), else the whole transfer's."""
        if self.data_start is not None and self.data_end is not None and self.data_end > self.data_start:
            return self.data_end - self.data_start
        return self.duration


def _at_ceiling(
    buffer: float | None, baseline: PathBaseline | None, side: str, kind: str, bdp: float | None, cap: int | None
) -> str:
    """Evidence that a buffer grew to the maximum autotuning had for this transfer and that
    maximum is below the BDP ("" if not): autotuning wanted more and was refused.  The
    maximum is the host's sysctl, or the transfer's own `tcp_buffer_max` cap where that is
    lower (a sweep's setting: the host's sysctl is not what the transfer had).  A buffer
    below its maximum was big enough for what the transfer asked, however small."""
    ceiling, named = _maximum(baseline, side, kind, cap)
    if buffer is None or ceiling is None or bdp is None or ceiling >= bdp or buffer < CEILING_SHARE * ceiling:
        return ""
    return f"buffer grew to {human_bytes(buffer)}, its {named} {human_bytes(ceiling)}, below the BDP {human_bytes(bdp)}"


def _at_max(buffer: float | None, baseline: PathBaseline | None, side: str, kind: str, cap: int | None) -> str:
    """Where the BDP is unknown (no estimate of the path's capacity): evidence that a
    buffer grew to its maximum ("" if not).  Autotuning wanted more and was refused, but
    whether that maximum is below the BDP cannot be told: only with the sender's own
    clocks saying the same does it name a limit (rules.py)."""
    ceiling, named = _maximum(baseline, side, kind, cap)
    if buffer is None or ceiling is None or buffer < CEILING_SHARE * ceiling:
        return ""
    return f"buffer grew to {human_bytes(buffer)}, its {named} {human_bytes(ceiling)} (the BDP unknown)"


def _maximum(baseline: PathBaseline | None, side: str, kind: str, cap: int | None) -> tuple[float | None, str]:
    """The most autotuning could give a buffer of `kind` on `side`, and its name."""
    host = baseline.buffers.get(side, {}).get(kind) if baseline else None
    if cap is not None and (host is None or cap < host):
        return cap, "tcp_buffer_max cap"
    return host, f"{kind} maximum"


def _achieved_rate(r: Result) -> float:
    """How fast the path carried the data over the whole transfer: the capture's payload
    rate over its packet span, or the file over the wall clock, the higher (each can only
    fall short: process start-up, idle gaps).  Not the kernel's delivery_rate: that is
    measured per ACK and a bursty sender's samples overstate the path (a curl throttled
    to 4 MB/s showed 200 MB/s on a 25 MB/s link).  The capture's payload counts each
    retransmitted segment again, and sees what a policer behind it drops: those segments
    (the capture's retransmission count, at the way's mean segment size) are taken off,
    or a policed 50 Mbit/s path showed a transfer at 202-239% of it, 23-32% retransmitted."""
    rates = [r.throughput_bytes_per_second]
    first, last = r.first_packet_timestamp, r.last_packet_timestamp
    if first is not None and last is not None and last > first:
        payload, packets = (
            (r.payload_bytes_down, r.packets_down) if r.direction == "download" else (r.payload_bytes_up, r.packets_up)
        )
        resent = r.retransmits_wire * payload / packets if packets else 0.0
        rates.append(max(0.0, payload - resent) / (last - first))
    return max(rates)


def _loss(r: Result, sender: Mapping[str, float]) -> tuple[int, int, str]:
    """(retransmits, segments sent, whose count) from the best source there is."""
    if r.retransmits_sender is not None and sender.get("segs_out"):
        return r.retransmits_sender, int(sender["segs_out"]), KERNEL_COUNT
    packets = r.packets_down if r.direction == "download" else r.packets_up
    return r.retransmits_wire, packets, "seen on the wire: a lower bound"
