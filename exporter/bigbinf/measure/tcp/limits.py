"""What limited a transfer: one verdict of result.LIMITS, the side it is on, and the
numbers that say so.

Every input is assembled in one place (`Inputs.of`) from the Result and the round's path
baseline: the sender's tcp_info clocks (busy time, and the parts of it limited by the
receive window and the send buffer, summed and per stream), the buffers both ends grew to
against the maximum the transfer had (the host's sysctl, or its own tcp_buffer_max cap),
the retransmissions, the progress over time (the steady rate past slow start, when data
started and ended: measure/tcp/state.py), and the transfer's programs' CPU and storage
waits (measure/programs.py).  The rules, in order (docs/metrics.md, "Why was it slow?"):

1. cpu: a program of the transfer was on a core or queued for one for CPU_SHARE of its
   life (ssh's cipher on one core: the case that motivated HPN-scp);
2. disk: a program of the transfer waited on storage in DISK_SHARE of the samples;
3. link_capacity: the steady rate (never below the transfer's average) reached
   LINK_SHARE of the path's bandwidth (said with
   the loss, when the sender lost more than LOSS_SHARE: a policer or a short queue);
   never against an estimate made by iperf3 for iperf3 itself (circular);
4. application (the receiver's side): the sender was window-limited, but the receiver's
   queue stood full: its program did not read fast enough;
5. receive_window / send_buffer: the sender was limited by the window or its send buffer
   for LIMITED_SHARE of its busy time (per stream where there are several), or a buffer
   grew to its maximum and that is below the BDP (what shows where the sender cannot be
   asked, and under BBR) unless the sender's loss says otherwise;
6. application (the sender's side), only with positive evidence: the sender had data in
   flight for less than IDLE_SHARE of the transfer (a throttle, a program that does not
   keep up); before congestion, so a few segments lost in slow start never outrank it;
7. congestion: the sender retransmitted at least LOSS_SHARE of its segments;
then startup, where it costs more than the limit above: the transfer spent STARTUP_SHARE
of its time or more below its steady rate (connection set-up, slow start; set-up its
programs spent queued for a CPU does not count, nor the longest any one of them queued in
the data phase: a busy host's, not the start's).  Nothing else
is a guess: with no rule met the verdict is empty and the evidence says what was seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from bigbinf.result import PathBaseline, Result

LINK_SHARE = 0.9  # "within 10% of the shaped rate"
LIMITED_SHARE = 0.3  # of the sender's busy time
LOSS_SHARE = 0.001  # retransmitted segments per segment sent: 0.1%
CEILING_SHARE = 0.9  # a buffer this close to its sysctl maximum has reached it
# Mean fill of the receiver's queue above which its application is behind: one that reads
# as fast as data arrives keeps it near 0 (0.001-0.006 seen with a capped buffer), curl
# --limit-rate 0.3-0.7.
RECEIVER_BEHIND = 0.2
CPU_SHARE = 0.9  # of a program's life on a core or queued for one: it could not go faster
CPU_EXPLAINS = 0.5  # ... and this much explains a sender with nothing to send
BACKLOG_SHARE = 0.5  # a sender with unsent data in fewer of its samples had nothing to send
DISK_SHARE = 0.3  # of a program's samples waiting on storage
IDLE_SHARE = 0.6  # data in flight for less than this share of the transfer: the sender was idle
STARTUP_SHARE = 0.2  # of the transfer's time lost below its steady rate
BULK_SHARE = 0.5  # a program that lived this share of the transfer did its bulk work
STEADY_WITHIN = 0.9  # a file averages "near" its steady rate within 10% of it
SHORT_RTTS = 20  # a data phase of fewer round trips than this is slow start, not a steady rate
SHORT_BDPS = 16  # ... where that cannot be told: a file of fewer BDPs than this


@dataclass(frozen=True)
class Limit:
    reason: str  # one of result.LIMITS; "" = no limit could be named (evidence says why)
    evidence: str  # the numbers, in words
    side: str = ""  # local | remote (this host, the remote host) | path | ""
    next_step: str = ""  # what to do about it, concretely (`advise` adds the sysctl lines)
    program: str = ""  # cpu, disk: the program named
    reach_bytes: float | None = None  # startup: a file this large averages within 10% of the steady rate


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
        progress = r.tcp_local if "steady_rate_bytes_per_second" in r.tcp_local else r.tcp_remote
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
        )

    def path_share(self, rate: float) -> float | None:
        """A data rate's share of the path's bandwidth, both as wire rates (headers count
        against a link's rate: a full 1500-byte-MTU link carries ~95% of it as data)."""
        return rate * self.wire_factor / self.bandwidth if self.bandwidth else None

    def share_of_path(self, rate: float) -> str:
        share = self.path_share(rate)
        if share is not None and self.bandwidth:
            on_wire = f"{human_rate(rate * self.wire_factor)} on the wire: " if self.wire_factor > 1 else ""
            return f" ({on_wire}{share:.0%} of the path's {human_rate(self.bandwidth)}, {self.bandwidth_note})"
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
    def loss(self) -> float:
        return self.retransmits / self.segments if self.segments else 0.0

    def loss_words(self) -> str:
        if not self.segments:
            return ""
        return f"{self.retransmits} retransmitted of {self.segments} segments ({self.loss:.2%}, {self.loss_source})"

    @property
    def short(self) -> bool:
        """Whether the data moved in fewer than SHORT_RTTS round trips (slow start needs
        about log2(BDP / initial window) of them to fill a path: 6 for 1 MB), or, where
        the data phase or the RTT is unknown, the file was under SHORT_BDPS BDPs."""
        if self.rtt and self.data_start is not None and self.data_end is not None:
            return self.span < SHORT_RTTS * self.rtt
        return bool(self.bdp) and self.file_bytes < SHORT_BDPS * (self.bdp or 0.0)

    @property
    def span(self) -> float:
        """The data phase's length (first to last data), else the whole transfer's."""
        if self.data_start is not None and self.data_end is not None and self.data_end > self.data_start:
            return self.data_end - self.data_start
        return self.duration


def judge_limit(r: Result, baseline: PathBaseline | None) -> Limit | None:
    """The limiting factor of an ok TCP transfer; None when there is nothing to judge by."""
    if r.outcome != "ok" or r.transport == "udp":
        return None
    if not r.sender_tcp and not (r.tcp_local if r.direction == "download" else r.tcp_remote):
        return None
    i = Inputs.of(r, baseline)
    steady = _steady_limit(i)
    limit = _startup(i, steady) or steady
    return replace(limit, next_step=next_step(limit, i, r))


# Programs whose CPU work is ssh's cipher (scp and sftp run over it).
SSH_PROGRAMS = frozenset({"ssh", "sshd", "scp", "sftp", "sftp-server"})


def next_step(limit: Limit, i: Inputs, r: Result) -> str:
    """The concrete next step for a verdict, with its numbers (docs/metrics.md says the
    same per verdict)."""
    host = _host(limit.side)
    target = f" to at least 2 x BDP = {human_bytes(2 * i.bdp)}" if i.bdp else " to at least the path's BDP"
    capped = r.tcp_buffer_max_bytes is not None and "tcp_buffer_max cap" in limit.evidence
    if limit.reason in ("receive_window", "send_buffer"):
        key = "net.ipv4.tcp_rmem" if limit.reason == "receive_window" else "net.ipv4.tcp_wmem"
        if capped:
            step = f"raise or drop the protocol's tcp_buffer_max ({human_bytes(r.tcp_buffer_max_bytes)}){target}"
        else:
            step = f"raise {key}'s maximum on {host}{target} (`advise` prints the sysctl lines)"
        return step + ("; or more parallel streams, each with its own window" if r.protocol != "iperf3" else "")
    if limit.reason == "congestion":
        probe = f"; the probe saw {i.probe_loss}" if i.probe_loss else ""
        return (
            f"the network: talk to the path's operator ({i.loss_words()}{probe}); a congestion control "
            "that does not take random loss for congestion (bbr) keeps more of the rate meanwhile"
        )
    if limit.reason == "link_capacity":
        if i.loss >= LOSS_SHARE:
            return (
                "the path is full and its bottleneck drops what exceeds the rate: pacing (bbr) or shaping just "
                "below it avoids the retransmissions; more speed needs a faster path"
            )
        return "the path is full: nothing on either host makes this faster; a faster path, or fewer bytes, would"
    if limit.reason == "startup":
        return (
            f"larger files (at least {human_bytes(limit.reach_bytes)}), or many files over one persistent "
            "connection (ssh ControlMaster, GridFTP -pp, HTTP keep-alive, rsync of a whole tree)"
        )
    program = limit.program
    if limit.reason == "cpu":
        if program in SSH_PROGRAMS:
            return (
                f"ssh's cipher on one core ({host}): HPN-scp (multithreaded AES-CTR, or its NONE cipher for data "
                "already protected), a cheaper cipher (scp -c aes128-gcm@openssh.com where the CPU has AES-NI), "
                "or parallel streams (GridFTP -p N, several transfers at once)"
            )
        return f"{program} used all the CPU it could get ({host}): parallel streams or transfers, or a less busy host"
    if limit.reason == "disk":
        return f"{program} waited on its disk ({host}): faster storage, or several files read or written at once"
    if limit.reason == "application":
        if limit.side == i.receiver_side:
            return (
                f"the receiving program reads slower than the network delivers ({host}): lift its rate limit "
                "(curl --limit-rate, a consumer that does not keep up)"
            )
        steady = i.steady_fit or i.rate
        return (
            f"the sending program sent at {human_rate(steady)} ({host}): a rate limit (nginx limit_rate, "
            "--limit-rate, a QoS policy) or a program that does not keep up; lift it there"
        )
    return ""


def _steady_limit(i: Inputs) -> Limit:
    """The limit of the transfer's steady phase (rules 1-7 of the module docstring)."""
    # Never below the average over the packet span: slow start and gaps only lower that.
    # The listings' fit can be (a few sparse listings, each late by its wait for a CPU:
    # a full 200 Mbit/s link fitted at under 90% of it beside two CPU burners).
    steady = max(i.steady_fit or 0.0, i.rate)
    rate_words = f"delivery rate {human_rate(i.rate)}{i.share_of_path(i.rate)}"
    link = _link(i, steady)
    # An estimate from iperf3 can itself be held down by the hosts' buffers: then only
    # the buffer rules below may call the link full.
    if link and i.bandwidth_note != "iperf3":
        return link
    # A program on a core or queued for one nearly all its life could not have gone
    # faster, whatever TCP shows.  (Waiting on storage counts only where TCP shows that it
    # mattered, below: a writer in the kernel's I/O wait now and then is not the limit of
    # a transfer the network holds back.)
    program = _program_limit(i, CPU_SHARE, "", rate_words, disk=False)
    if program:
        return program
    sender = i.sender
    busy = sender.get("busy_seconds", 0.0)
    rwnd = sender.get("rwnd_limited_seconds", 0.0) / busy if busy > 0 else 0.0
    sndbuf = sender.get("sndbuf_limited_seconds", 0.0) / busy if busy > 0 else 0.0
    streams = int(sender.get("streams", 1) or 1)
    window = _window_words(sender, rwnd, busy, streams)
    behind = i.receiver.get("rcv_queue_ratio_avg")
    if rwnd >= LIMITED_SHARE and behind is not None and behind >= RECEIVER_BEHIND:
        why = (
            f"{window}, but the receiver's queue stood {behind:.0%} full: its program reads slower than the "
            "network delivers"
        )
        return _program_limit(i, CPU_EXPLAINS, why, rate_words, sides=(i.receiver_side,), fed=True) or Limit(
            "application", f"{why}; {rate_words}", i.receiver_side
        )
    lossy = bool(sender) and i.loss >= LOSS_SHARE
    # A buffer at its maximum is evidence only where the clocks cannot say (no sender, or
    # BBR's pacing hiding the window from them) and the sender's loss does not explain the
    # rate better: with loss, cwnd stays below the window and more buffer buys nothing.
    rcv_ceiling = i.ceilings["tcp_rmem"] if not lossy else ""
    snd_ceiling = i.ceilings["tcp_wmem"] if not lossy else ""
    receive_limited = rwnd >= LIMITED_SHARE or bool(rcv_ceiling)
    send_limited = sndbuf >= LIMITED_SHARE or bool(snd_ceiling)
    if receive_limited and (not send_limited or rwnd >= sndbuf):
        said = [window if rwnd >= LIMITED_SHARE else "", rcv_ceiling and f"the receiver's {rcv_ceiling}"]
        return Limit("receive_window", "; ".join([*filter(None, said), rate_words]), i.receiver_side)
    if send_limited:
        buffered = f"the sender was limited by its send buffer {sndbuf:.0%} of its {busy:.1f} s busy time"
        said = [buffered if sndbuf >= LIMITED_SHARE else "", snd_ceiling and f"the sender's {snd_ceiling}"]
        return Limit("send_buffer", "; ".join([*filter(None, said), rate_words]), i.sender_side)
    if link:
        return link
    idle = _sender_idle(sender, i, streams)
    if idle:
        # The sender had nothing to send.  Its own program, or (ssh, whose channel window
        # the receiving end opens) the receiving one: the one on a core or queued for one
        # most of its life is why; else the program chose its pace (a throttle).
        return _program_limit(i, CPU_EXPLAINS, idle, rate_words) or Limit(
            "application",
            f"{idle}: its program sent no faster (a throttle, or a program that does not keep up); "
            f"steady rate {human_rate(steady)}{i.share_of_path(steady)}",
            i.sender_side,
        )
    if lossy or (not sender and i.segments and i.loss >= LOSS_SHARE):
        return Limit("congestion", f"{i.loss_words()}; {rate_words}", "path")
    if not sender:
        # The sender (a download's remote) could not be asked: its limits cannot be ruled
        # out, so naming one would be a guess.
        return Limit("", f"the sender's TCP state is unknown; {rate_words}")
    in_flight = _in_flight(sender, i, streams)
    flight = f"data in flight {in_flight:.0%} of the data phase; " if in_flight is not None else ""
    return Limit("", f"no limit found: {flight}{rate_words}")


def _sender_idle(sender: Mapping[str, float], i: Inputs, streams: int) -> str:
    """Positive evidence that the sender had nothing to send, in words ("" if none): it
    rarely had a backlog (notsent) while sending, or data in flight for less than
    IDLE_SHARE of the data phase (a bursty throttle)."""
    backlog = sender.get("sender_backlog_ratio")
    in_flight = _in_flight(sender, i, streams)
    said = []
    if backlog is not None and backlog < BACKLOG_SHARE:
        said.append(f"the sender had unsent data in {backlog:.0%} of its samples")
    if in_flight is not None and in_flight < IDLE_SHARE:
        said.append(
            f"data in flight {in_flight:.0%} of the {i.span:.1f} s data phase"
            + (" (its busiest stream)" if streams > 1 else "")
        )
    if not said:
        return ""
    app = sender.get("app_limited_ratio")
    flagged = f"; app-limited in {app:.0%} of the samples" if app is not None else ""
    return "; ".join(said) + flagged


def _program_limit(
    i: Inputs,
    threshold: float,
    why: str,
    rate_words: str,
    sides: tuple[str, ...] = ("local", "remote"),
    disk: bool = True,
    fed: bool = False,
) -> Limit | None:
    """cpu or disk naming the transfer's program (on `sides`) that was on a core or
    queued for one for `threshold` of its life, or waited on storage in DISK_SHARE of its
    samples; `why` (what TCP showed, "" for none) leads the evidence, the rate ends it.
    `fed`: its input stood waiting for it (a receiver whose queue stood full), so one
    that slept more often than it waited on storage paced itself (curl --limit-rate
    beside other writers: 36% of its samples on storage, the rest mostly asleep), and its
    storage is not why."""
    program = _busiest(i.programs, "runnable_share", threshold, i.duration, sides)
    if program:
        name, side, v = program
        said = (
            f"{name} ({_host(side)}) was on a core or queued for one {v['runnable_share']:.0%} of its "
            f"{v['seconds']:.1f} s: it used {v['cpu_share']:.0%} of a core and waited "
            f"{v['runnable_share'] - v['cpu_share']:.0%} for one (busier programs on its cores, or a CPU quota)"
        )
        return Limit("cpu", f"{why + ': ' if why else ''}{said}; {rate_words}", side, program=name)
    waiting = _busiest(i.programs, "io_wait_share", DISK_SHARE, i.duration, sides) if disk else None
    if (
        waiting
        and fed
        and 1.0 - waiting[2]["runnable_share"] - waiting[2]["io_wait_share"] > waiting[2]["io_wait_share"]
    ):
        waiting = None
    if waiting:
        name, side, v = waiting
        said = (
            f"{name} ({_host(side)}) waited on storage in {v['io_wait_share']:.0%} of {v['samples']:.0f} "
            f"samples over {v['seconds']:.1f} s"
        )
        return Limit("disk", f"{why + ': ' if why else ''}{said}; {rate_words}", side, program=name)
    return None


def _link(i: Inputs, steady: float) -> Limit | None:
    """link_capacity when the steady rate reached LINK_SHARE of the path's bandwidth; the
    sender's loss is said with it (a policer or a short queue drops what exceeds the rate)."""
    share = i.path_share(steady)
    if share is None or share < LINK_SHARE:
        return None
    lossy = i.loss >= LOSS_SHARE
    return Limit(
        "link_capacity",
        f"steady rate {human_rate(steady)}{i.share_of_path(steady)}"
        + (
            f"; {i.loss_words()}: the bottleneck drops what exceeds its rate (a policer, a short queue)"
            if lossy
            else ""
        ),
        "path",
    )


def _startup(i: Inputs, steady_limit: Limit) -> Limit | None:
    """startup, where the time lost below the steady rate (set-up, slow start) is at least
    STARTUP_SHARE of the transfer and more than the steady phase's own limit cost."""
    if i.duration <= 0 or (i.sender and i.loss >= LOSS_SHARE):
        return None  # with loss, a slow ramp is the loss's doing: congestion says so
    steady, measured = i.steady_fit, True
    if i.bandwidth and i.short:
        # Too short for a steady rate to show (what the listings saw was slow start): the
        # path's rate (as data) stands in for it.
        steady, measured = i.bandwidth / i.wire_factor, False
    if not steady or steady <= i.rate:
        return None
    lost = i.duration - i.file_bytes / steady
    setup = max(0.0, i.data_start) if i.data_start is not None else None
    # Time spent queued for a core is the host's business, not the start's: a larger file
    # or a persistent connection would not have saved it.  Set-up's, and the data phase's
    # (the longest any one program waited then: a slow start stretched to 1.59 s of 4.39 s
    # beside CPU burners, on a path where it takes a tenth of a second).
    queued = min(setup, i.setup_queued) if setup is not None else 0.0
    if lost - queued - i.data_queued < STARTUP_SHARE * i.duration:
        return None
    if steady_limit.reason in ("cpu", "disk") and measured:
        # A program's own pace: the steady rate is not the network's.  (Over in a few
        # round trips, what kept a program busy was its set-up: ssh's key exchange.)
        return None
    if steady_limit.reason and steady_limit.reason != "link_capacity":
        # The steady phase's own limit cost file/steady - file/bandwidth; unknown
        # without a bandwidth: then the larger share of the time decides as well as it can.
        steady_cost = i.file_bytes / steady - (i.file_bytes * i.wire_factor / i.bandwidth if i.bandwidth else 0.0)
        if steady_cost >= lost - queued - i.data_queued:
            return None
    waited = f" ({queued:.2f} s of it queued for a CPU)" if queued >= 0.01 else ""
    parts = [f"connection set-up {setup:.2f} s before the first data{waited}" if setup is not None else ""]
    ramp = lost - (setup or 0.0) - (max(0.0, i.duration - i.data_end) if i.data_end is not None else 0.0)
    if ramp >= 0.01:
        stretched = f" ({i.data_queued:.2f} s of it queued for a CPU)" if i.data_queued >= 0.01 else ""
        parts.append(f"the ramp-up to it (slow start) {ramp:.2f} s{stretched}")
    # A file averages within 10% of the steady rate when the lost time is a tenth of it:
    # size >= STEADY_WITHIN / (1 - STEADY_WITHIN) x steady x lost.
    reach = STEADY_WITHIN / (1 - STEADY_WITHIN) * steady * lost
    then = (
        f"; its steady phase was limited by {steady_limit.reason}"
        if measured and steady_limit.reason not in ("", "link_capacity")
        else ""
    )
    if measured or not i.bdp:
        seen = f"the steady rate was {human_rate(steady)}{i.share_of_path(steady)}"
    else:
        seen = (
            f"the {human_bytes(i.file_bytes)} ended within {i.file_bytes / i.bdp:.1f} BDPs of the path "
            f"({human_bytes(i.bdp)}), before a steady rate could show"
        )
    return Limit(
        "startup",
        seen + f", but {' and '.join(filter(None, parts)) or 'the start'} cost {lost:.2f} s of the {i.duration:.2f} s "
        f"transfer (its average {human_rate(i.rate)} is {i.rate / steady:.0%} of the "
        f"{'steady rate' if measured else 'path'}); files of at least "
        f"{human_bytes(reach)} would average within 10% of it{then}",
        "path",
        reach_bytes=reach,
    )


def _asleep(program: Mapping[str, float]) -> float:
    """The share of a program's life neither on a core, queued for one, nor on storage."""
    return max(0.0, 1.0 - program.get("runnable_share", 0.0) - program.get("io_wait_share", 0.0))


def _busiest(
    programs: Mapping[str, Mapping[str, float]],
    key: str,
    threshold: float,
    duration: float,
    sides: tuple[str, ...] = ("local", "remote"),
) -> tuple[str, str, Mapping[str, float]] | None:
    """(name, side, values) of the program with the highest `key` at or above `threshold`
    among those that lived BULK_SHARE of the transfer (the ones that moved the data)."""
    found = [
        (v[key], name, v)
        for name, v in programs.items()
        if v.get(key, 0.0) >= threshold
        and v.get("seconds", 0.0) >= BULK_SHARE * duration
        and name.partition(" ")[0] in sides
    ]
    if not found:
        return None
    _, label, values = max(found, key=lambda item: item[0])
    side, _, name = label.partition(" ")
    return name, side, values


def _host(side: str) -> str:
    return {"local": "this host", "remote": "the remote"}.get(side, side)


def _window_words(sender: Mapping[str, float], rwnd: float, busy: float, streams: int) -> str:
    if not busy:
        return ""
    low, high = sender.get("stream_rwnd_share_min"), sender.get("stream_rwnd_share_max")
    if streams > 1 and low is not None and high is not None:
        return (
            f"each of the sender's {streams} streams was limited by the receive window {low:.0%}-{high:.0%} of its "
            f"busy time ({rwnd:.0%} of the {busy:.1f} s they were busy together)"
        )
    return f"the sender was limited by the receive window {rwnd:.0%} of its {busy:.1f} s busy time"


def _in_flight(sender: Mapping[str, float], i: Inputs, streams: int) -> float | None:
    """The share of the data phase the sender had data in flight: its busiest stream's
    busy time over the phase (busy time summed over streams would exceed the wall clock)."""
    busy = sender.get("stream_busy_max_seconds") if streams > 1 else sender.get("busy_seconds")
    if busy is None or i.span <= 0:
        return None
    return min(1.0, busy / i.span)


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
