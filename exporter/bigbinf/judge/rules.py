"""The rules: what limited a transfer, one verdict of result.LIMITS, the side it is on, and the
numbers that say so.

Every input is assembled in one place (`Inputs.of`) from the Result and the round's path
baseline: the sender's tcp_info clocks (busy time, and the parts of it limited by the
receive window and the send buffer, summed and per stream), the buffers both ends grew to
against the maximum the transfer had (the host's sysctl, or its own tcp_buffer_max cap),
the retransmissions, the progress over time (the steady rate past slow start, when data
started and ended: measure/tcp/state.py), and the transfer's programs' CPU and storage
waits (measure/programs.py), the remote as it was seen and this host's waits for a CPU
(Result.remote_view, Result.host_busy).  The rules, in order (docs/metrics.md, "Why was
it slow?"), which follows the physics: what the path allows first, then what held the
sender, and what only shows once nothing else does last:

1. link_capacity: the steady rate (never below the transfer's average) reached
   LINK_SHARE of the path's bandwidth (said with the loss, when the sender lost more
   than LOSS_SHARE: a policer or a short queue); never against an estimate made by
   iperf3 for iperf3 itself (circular), nor one the transfer outran (stale: inputs.py);
2. cpu: a program of the transfer (on this host, or on the remote where its programs
   were seen) was on a core or queued for one for CPU_SHARE of its life; busy_host
   instead where it was this host's and waited for a core at least as long as it ran,
   no quota holding it, on a host seen busy (vetoes.held_by_busy_host); cpu too where
   a program of this host wanted a core CPU_EXPLAINS of its life and its cgroup's CPU
   quota held it back (_quota_held);
3. cpu on the remote, starved: its cgroup held by its quota, or its own listings late or
   unanswered (vetoes.starved_remote), unless a TCP bound of this transfer met the rate
   and its receiver kept up (_kept_up: a starved reader leaves its queue standing);
4. application (the receiver's side): the sender was window-limited, but the receiver's
   queue stood full: its program did not read fast enough (on the remote only where its
   programs were seen; on this host, not where it waited for a CPU on a busy host:
   _slow_reader);
5. receive_window / send_buffer: the sender was limited by the window or its send buffer
   for LIMITED_SHARE of its busy time (per stream where there are several), or a buffer
   grew to its maximum and that is below the BDP (what shows where the sender cannot be
   asked, and under BBR) unless the sender's loss says otherwise;
6. congestion, in loss recovery: a segment lost per window while data was in flight
   most of the time (vetoes.in_recovery): a sender repairing holes looks idle, and is not;
7. application (detail ssh_window, this host): a transfer in an OpenSSH channel whose
   steady rate met its fixed window over the round trip (bounds.ssh_window), every TCP
   bound and every program's well above the rate, the sender with mostly nothing unsent
   (_ssh_window, unsent_stood): the window, full for a round trip, held it, not a reader,
   a throttle or the path;
8. application (the sender's side), only with positive evidence: the sender had data in
   flight for less than IDLE_SHARE of the transfer or rarely a backlog, and no veto
   (vetoes.application_veto: enough listings, flagged app-limited, the remote seen);
   cpu or disk where a program seen explains it; before congestion, so a few segments
   lost in slow start never outrank a throttle;
9. congestion: the sender's congestion events (real losses, and round trips the path marked
   CE in: ECN, detail ecn where it marked any) were at least LOSS_SHARE of its segments, or,
   with CE marks and MIN_CONGESTION_EVENTS events or more, the loss bound from them met
   the steady rate;
10. link_capacity of the return path (_return_path): the ACKs' way held a standing queue
    while the data way's one-way delay stayed flat (the capture's TCP timestamps), and the
    ACK clock's bound (bounds.ack_clock) met the rate; a queue so placed is never another
    flow's;
11. shared_path: network-limited below the path's estimate, nothing of the transfer
    holding it (_shared_path), a standing queue on the data way (withheld where the
    timestamps put most of it on the return way, or carried ticks the one-way pass could
    not place it from: _queue_not_on_data_way): before busy_host,
    whose waits a sender with a backlog in flight shows did not hold it (unless the
    lab's delay line, the path on this host, waited for a CPU);
12. busy_host: this host waited for a CPU BUSY_SHARE of the transfer (vetoes.busy_host),
    where the remote's programs are ruled out (vetoes.remote_not_ruled_out);
Where the rate meets the named limit's bound and a lower network bound whose own rule
stands, the lower one is named (_tighter: the tightest constraint holds); then startup,
where it costs more than the limit above: the transfer spent STARTUP_SHARE
of its time or more below its steady rate (connection set-up, slow start; set-up its
programs spent queued for a CPU does not count, nor the longest any one of them queued in
the data phase: a busy host's, not the start's; nor any time beyond what the physics
allows a start: vetoes.slow_start_seconds, vetoes.setup_seconds); where the path's capacity
is unknown and the data moved within what slow start of the file takes, the transfer never
left its start and has no steady phase to judge (_start_only).  Nothing else is a
guess: with no rule met the verdict is empty and the evidence says what was seen, and
what the vetoes withheld.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from bigbinf.judge import bounds, vetoes
from bigbinf.judge.bounds import Bound
from bigbinf.judge.inputs import CORROBORATED_SHARE, Inputs
from bigbinf.judge.words import host_name, human_bits, human_bytes, human_rate

LINK_SHARE = 0.9  # "within 10% of the shaped rate"
LIMITED_SHARE = 0.3  # of the sender's busy time
LOSS_SHARE = 0.001  # retransmitted segments per segment sent: 0.1%
# The loss bound's response functions (Mathis, CUBIC's) are the long-run mean of a window's
# sawtooth: below this many congestion events in a transfer its window spent most of it
# growing toward what else stops it (the link, a buffer), and a bound from them met by the
# rate is a coincidence.  A breaker's 100 Mbit/s link with its capacity unknown: 1-2 CE
# marks in 64 MiB, their bound 13.4-14.2 MB/s, the rate 11.9 MB/s (the link's; the same
# without the marks) was called ECN marking, 7 of 7.
MIN_CONGESTION_EVENTS = 4
# Mean fill of the receiver's queue above which its application is behind: one that reads
# as fast as data arrives keeps it near 0 (0.001-0.006 seen with a capped buffer), curl
# --limit-rate 0.3-0.7.
RECEIVER_BEHIND = 0.2
CPU_SHARE = 0.9  # of a program's life on a core or queued for one: it could not go faster
CPU_EXPLAINS = 0.5  # ... and this much explains a sender with nothing to send
BACKLOG_SHARE = vetoes.BACKLOG_SHARE  # a sender with unsent data in fewer of its samples had nothing to send
DISK_SHARE = 0.3  # of a program's samples waiting on storage
IDLE_SHARE = vetoes.IDLE_SHARE  # data in flight for less than this share of the transfer: the sender was idle
STARTUP_SHARE = 0.2  # of the transfer's time lost below its steady rate
BULK_SHARE = vetoes.SEEN_SHARE  # a program that lived this share of the transfer did its bulk work
STEADY_WITHIN = 0.9  # a file averages "near" its steady rate within 10% of it
# A standing queue: the round trip the transfer saw stood this share of the path's
# minimum above it, and at least QUEUE_SECONDS (a quiet path's smoothed RTT sits within a
# few ms of its minimum; a bottleneck another flow keeps full holds its queue's delay).
QUEUE_SHARE = bounds.QUEUE_SHARE
QUEUE_SECONDS = bounds.QUEUE_SECONDS
# A receiver that advertised a zero window in this share of the sender's samples had
# stopped reading (its buffer full): a buffer too small for the path never closes.
ZERO_WINDOW_SHARE = 0.1
ZERO_WINDOWS = 3  # ... and at least this many: one is a moment, a reader that stopped shows again
SSH_SENDERS = frozenset({"ssh", "scp", "sftp"})  # this host's end of an ssh channel
# ssh's window is named only where every TCP bound stood this far above the steady rate
# (beyond any tolerance that meets it: 1.25) and every program's this far (busy under half
# its life: CPU_EXPLAINS), so neither a buffer nor a program can be what held the channel.
WELL_ABOVE = 1.5
PROGRAMS_ABOVE = 1 / CPU_EXPLAINS


@dataclass(frozen=True)
class Limit:
    reason: str  # one of result.LIMITS; "" = no limit could be named (evidence says why)
    evidence: str  # the numbers, in words
    side: str = ""  # local | remote (this host, the remote host) | path | ""
    next_step: str = ""  # what to do about it, concretely (`advise` adds the sysctl lines)
    program: str = ""  # cpu, disk: the program named
    detail: str = ""  # congestion: "ecn" where the path's CE marks held it (ECN marking, nothing lost);
    # cpu: "starved" where the remote could not answer its own listings or its quota held it;
    # "quota" where this host's program was held by its cgroup's CPU quota; application: "ssh_window" where
    # ssh's fixed channel window held it
    reach_bytes: float | None = None  # startup: a file this large averages within 10% of the steady rate


def steady_limit(i: Inputs) -> Limit:
    """The limit of the transfer's steady phase: the bound the steady rate met.  The
    kernel's signals (`_signalled`: the clock shares, zero windows, a buffer at its
    ceiling, a program on a core, data in flight, a backlog) say which limit to hold the
    rate against; that limit is named only where the steady rate meets its bound
    (`bound_of`, within bounds.TOLERANCE) or, where it has none that numbers can give,
    where its vetoes let it stand.  A limit whose bound was computed and is not met is
    never given: the verdict is withheld, with every bound computed and how far the rate
    was from each."""
    limit = _signalled(i)
    bound = bound_of(limit, i)
    steady = bounds.judged_rate(bound, i) if bound is not None else i.steady_rate
    if bound is not None and bound.meets(steady):
        return _tighter(limit, bound, steady, i) or limit
    if bound is None:
        return limit
    return Limit(
        "",
        f"withheld {limit.reason}: the steady rate {human_rate(steady)} is {steady / bound.rate:.0%} of its bound, "
        f"outside the {bound.low:.0%}-{bound.high:.0%} that meets it ({bound.words}); "
        f"{bounds.distances(bounds.computed(i), steady)}; what pointed at it: {limit.evidence}",
    )


def _tighter(limit: Limit, bound: Bound, steady: float, i: Inputs) -> Limit | None:
    """Where the steady rate meets the named limit's bound and also a lower one of this
    transfer's network bounds (bounds.computed) whose own rule stands (`_named_by`): the
    rate is held by the tightest constraint, so the lower bound is the limit, whatever
    rule came first, and the evidence says the higher one was met too.  (A scp upload
    with a 3 MiB send buffer: its bound 29.9 MB/s met at 57% within the buffers' 40%,
    ssh's window's 19.9 MB/s at 86%, with the whole window in flight: the window held
    it, and a larger buffer bought nothing.)  Bounds met at any rate above them (the
    loss bound) are no ceiling the rate sits under, and program bounds stand on their
    program's own share: neither is weighed here.  None where no lower bound stands."""
    if bound.name not in _NETWORK_BOUNDS:
        return None
    lower = [
        b
        for b in bounds.met(bounds.computed(i), steady)
        if b.rate < bound.rate and b.name != bound.name and b.high != float("inf")
    ]
    for b in lower:
        named = _named_by(b, i, steady)
        if named is not None:
            higher = f"{bound.words} met the rate too ({steady / bound.rate:.0%} of it), but the lower bound holds it"
            return replace(named, evidence=f"{named.evidence}; {higher}")
    return None


# The network bounds a verdict can stand on (bounds.computed's), by name.
_NETWORK_BOUNDS = frozenset(
    {"receive_window", "send_buffer", "path_capacity", "loss", "packet_rate", "ack_clock", "ssh_window"}
)


def _named_by(b: Bound, i: Inputs, steady: float) -> Limit | None:
    """The verdict a met network bound names where its own rule's evidence stands (None
    where it does not): ssh's window by _ssh_window (the sender with nothing unsent,
    every program idle), a window or a buffer where bounds.corroborated (its clock or
    autotuning off), the packet rate as it is, the path where _link names it, the return
    path by _return_path."""
    if b.name == "ssh_window":
        return _ssh_window(i, steady)
    if b.name in ("receive_window", "send_buffer"):
        busy = i.sender.get("busy_seconds", 0.0)
        key = "rwnd_limited_seconds" if b.name == "receive_window" else "sndbuf_limited_seconds"
        clock = i.sender.get(key, 0.0) / busy if busy > 0 else 0.0
        if not bounds.corroborated(b, clock, CORROBORATED_SHARE):
            return None
        return Limit(b.name, f"{b.said(steady)}{i.share_of_path(steady)}", b.side)
    if b.name == "packet_rate":
        return Limit(
            "link_capacity", f"the path's packet rate at this MSS: {b.said(steady)}", "path", detail="packet_rate"
        )
    if b.name == "path_capacity":
        return _link(i, steady)
    if b.name == "ack_clock":
        returning = _return_path(i, steady, i.in_flight)
        return returning if returning is not None and returning.reason else None
    return None


def bound_of(limit: Limit, i: Inputs) -> Bound | None:
    """The bound a verdict stands on (None where it has no numeric one: application's is
    the rate itself; startup is held by its vetoes; shared_path by a standing queue; cpu,
    disk and busy_host by their program's: bounds.program_cpu, storage, host_cpu)."""
    if limit.reason == "link_capacity" and limit.detail == "ack_clock":
        return bounds.ack_clock(i)
    if limit.reason == "link_capacity":
        # A full path with its MSS clamped is named so where the packet rate met the rate
        # too; the path's capacity is its bound either way.
        packets = bounds.packet_rate(i) if limit.detail == "packet_rate" else None
        return packets if packets and packets.meets(i.steady_rate) else bounds.path_capacity(i) or packets
    if limit.reason == "receive_window":
        return bounds.receive_window(i)
    if limit.reason == "send_buffer":
        return bounds.send_buffer(i)
    if limit.reason == "congestion":
        return bounds.loss(i)
    if limit.reason == "application" and limit.detail == "ssh_window":
        return bounds.ssh_window(i)
    if limit.reason in ("cpu", "disk", "busy_host") and limit.program and limit.detail != "starved":
        # (A remote starved of CPU stands on its unanswered listings: its programs' samples
        # are too few to count their CPU-seconds.)
        return bounds.of_program(i, limit.reason, limit.side, limit.program)
    return None


def _signalled(i: Inputs) -> Limit:
    """The limit the kernel's signals point at (the rules of the module docstring, in
    their order); where none does, the empty verdict with what was seen and what each
    veto withheld."""
    steady = i.steady_rate
    rate_words = f"delivery rate {human_rate(i.rate)}{i.share_of_path(i.rate)}"
    link = _link(i, steady)
    # An estimate from iperf3 can itself be held down by the hosts' buffers: then only
    # the buffer rules below may call the link full.
    if link and i.bandwidth_note != "iperf3":
        return link
    # The remote's programs are judged only where they were seen doing the work.
    sides = ("local", "remote") if i.remote_programs_seen else ("local",)
    # A program on a core or queued for one nearly all its life could not have gone
    # faster, whatever TCP shows.  (Waiting on storage counts only where TCP shows that it
    # mattered, below: a writer in the kernel's I/O wait now and then is not the limit of
    # a transfer the network holds back.)
    withheld: list[str] = []
    # Programs a share pointed at whose bound the rate did not meet (said where nothing is named).
    unmet: list[str] = []
    program = _program_limit(i, CPU_SHARE, "", rate_words, sides=sides, disk=False, withheld=unmet)
    starved = vetoes.starved_remote(i)
    if program and program.side == "remote" and starved:
        # A remote program short of CPU on a remote seen starved: its quota, not its cipher.
        return replace(program, evidence=f"{program.evidence}; {starved}", detail="starved")
    if program:
        return program
    quota = _quota_held(i, rate_words, unmet)
    if quota:
        return quota
    # A remote too starved of CPU to answer its own listings cannot have kept up with the
    # transfer either (its listings and its programs wait for the same CPU).
    kept = _kept_up(i) if starved else ""
    if kept:
        # No numeric bound stands behind a starved remote: where one of this transfer's
        # TCP bounds met the rate and its receiver kept up, that bound held it, and the
        # late listings were the machine's, not the transfer's.
        unmet.append(f"not cpu on the remote ({starved}): {kept}")
    elif starved:
        return Limit("cpu", f"{starved}; {rate_words}", "remote", program=_remote_program(i), detail="starved")
    sender = i.sender
    busy = sender.get("busy_seconds", 0.0)
    rwnd = sender.get("rwnd_limited_seconds", 0.0) / busy if busy > 0 else 0.0
    sndbuf = sender.get("sndbuf_limited_seconds", 0.0) / busy if busy > 0 else 0.0
    streams = int(sender.get("streams", 1) or 1)
    window = _window_words(sender, rwnd, busy, streams)
    behind = i.receiver.get("rcv_queue_ratio_avg")
    zero, samples = sender.get("zero_window_samples", 0.0), sender.get("sending_samples", 0.0)
    closed = samples > 0 and zero >= max(ZERO_WINDOWS, ZERO_WINDOW_SHARE * samples)
    queued = behind is not None and behind >= RECEIVER_BEHIND
    if (rwnd >= LIMITED_SHARE and queued) or closed:
        # A receiver whose window closed (zero advertised: its buffer full, unread) or
        # whose queue stood full while the window held the sender reads slower than the
        # network delivers: the window is its program's, not its buffer's.
        # The window here is the reader's (its queue unread), not its buffer's: said so,
        # never as a receive-window limit.
        held = f"the window its receiver advertised held the sender {rwnd:.0%} of its {busy:.1f} s busy time"
        said = [held if rwnd >= LIMITED_SHARE else ""]
        if queued:
            said.append(f"the receiver's queue stood {behind:.0%} full")
        if closed:
            said.append(f"the receiver advertised a zero window in {zero:.0f} of the sender's {samples:.0f} samples")
        why = ", ".join(filter(None, said)) + ": its program reads slower than the network delivers"
        if i.receiver_side == "local" or i.remote_programs_seen:
            receiving = tuple(s for s in sides if s == i.receiver_side)
            return _slow_reader(i, why, rate_words, receiving, unmet)
        withheld.append(
            f"not application on the remote ({why}): the remote's programs could not be seen, so its writer's "
            "disk or CPU cannot be ruled out"
        )
    elif not sender and queued and i.receiver_side == "local":
        # A download whose sender (the remote) could not be asked (a passive flow): this
        # host's own receive queue standing full says its reader fell behind by itself.  A
        # reader that keeps up keeps it near 0 whatever held the sender (a capped buffer
        # 0.001-0.006, a throttled or policed sender the same); the window this host
        # advertised was what its unread data left, so the sender's state adds nothing.
        why = (
            f"this host's receive queue stood {behind:.0%} full while data arrived: its program reads slower than "
            "the network delivers (the window it advertised was what its unread data left; the sender's TCP "
            "state is unknown)"
        )
        return _slow_reader(i, why, rate_words, ("local",), unmet)
    # Congestion events: real losses, and round trips the path marked CE in (ECN: CUBIC and
    # Reno halve once for either; Inputs.congestion).
    lossy = bool(sender) and i.congestion >= LOSS_SHARE
    # A buffer at its maximum is evidence only where the clocks cannot say (no sender, or
    # BBR's pacing hiding the window from them) and the sender's loss (or the path's CE
    # marks) does not explain the rate better: with either, cwnd stays below the window
    # and more buffer buys nothing.
    # (Where the BDP is unknown, with the sender's clock saying the same: Inputs.maxed.)
    rcv_ceiling = i.maxed("tcp_rmem", rwnd) if not lossy else ""
    snd_ceiling = i.maxed("tcp_wmem", sndbuf) if not lossy else ""
    receive_limited = rwnd >= LIMITED_SHARE or bool(rcv_ceiling)
    send_limited = sndbuf >= LIMITED_SHARE or bool(snd_ceiling)
    if receive_limited and (not send_limited or rwnd >= sndbuf) and not withheld:
        # A clock share under LIMITED_SHARE is quoted only where it corroborates a buffer at
        # its maximum with the BDP unknown (Inputs.maxed): there it is half the evidence.
        quoted = rwnd >= LIMITED_SHARE or (bool(rcv_ceiling) and not i.ceilings["tcp_rmem"])
        rcvbuf = i.receiver.get("rcvbuf_max_bytes") or 0.0
        # Where the bound is the advertised window, the buffer behind it is said apart
        # (autotuning off, or set by its program; at its maximum the ceiling says it).
        stopped, why = bounds.stopped_buffer(i, "tcp_rmem", rcvbuf, i.receiver_side)
        behind = bool(stopped) and not rcv_ceiling and bool(i.sender.get("snd_wnd_median_bytes"))
        said = [
            window if quoted else "",
            rcv_ceiling and f"the receiver's {rcv_ceiling}",
            f"{host_name(i.receiver_side)}'s receive buffer {human_bytes(rcvbuf)} ({why})" if behind else "",
            bounds.unscaled(i),
            bounds.clamped_window(i),
        ]
        return Limit(
            "receive_window",
            "; ".join([*filter(None, said), *_bound_said(bounds.receive_window(i), i), rate_words]),
            bounds.window_side(i),
        )
    if send_limited:
        buffered = f"the sender was limited by its send buffer {sndbuf:.0%} of its {busy:.1f} s busy time"
        quoted = sndbuf >= LIMITED_SHARE or (bool(snd_ceiling) and not i.ceilings["tcp_wmem"])
        said = [buffered if quoted else "", snd_ceiling and f"the sender's {snd_ceiling}"]
        return Limit(
            "send_buffer",
            "; ".join([*filter(None, said), *_bound_said(bounds.send_buffer(i), i), rate_words]),
            i.sender_side,
        )
    if link:
        return link
    # Loss that kept the sender repairing a hole in every round trip explains a sender that
    # looks idle (notsent 0, little in flight): congestion, before any idleness is read.
    in_flight = i.in_flight
    recovery = vetoes.in_recovery(i, in_flight) if sender else ""
    if recovery:
        return Limit("congestion", "; ".join([recovery, *_bound_said(bounds.loss(i), i), rate_words]), "path")
    windowed = _ssh_window(i, steady)
    if windowed:
        return windowed
    idle = _sender_idle(sender, i, streams)
    if idle:
        # The sender had nothing to send.  Its own program, or (ssh, whose channel window
        # the receiving end opens) the receiving one: the one seen on a core or queued for
        # one most of its life, or on storage, is why; else the program chose its pace,
        # where nothing stands against that (vetoes.application_veto).
        before = len(unmet)
        program = _program_limit(i, CPU_EXPLAINS, idle, rate_words, sides=sides, withheld=unmet)
        if program:
            return program
        veto = vetoes.application_veto(i) or _queued_window(i, steady)
        channel = _ssh_channel(i)
        if not veto and channel:
            # ssh sends only what its channel window lets it, and the receiving end's ssh
            # opens that window as its reader takes the data: an idle ssh sender with
            # nothing on this host holding it waits for the remote's reader, and what
            # holds the reader (its storage, its CPU) holds the transfer.
            reader = _channel_reader(i)
            if reader:
                name, v = reader
                reading = (
                    f"{idle}: {channel}; {name} (the remote) waited on storage in {v.get('io_wait_share', 0.0):.0%} of "
                    f"{v.get('samples', 0.0):.0f} samples over {v.get('seconds', 0.0):.1f} s and was on a core or "
                    f"queued for one {v.get('runnable_share', 0.0):.0%}"
                )
                reader_held = None
                if v.get("io_wait_share", 0.0) >= DISK_SHARE:
                    reader_held = _gated(i, "disk", "remote", name, reading, rate_words, unmet)
                if not reader_held and v.get("runnable_share", 0.0) >= CPU_EXPLAINS:
                    reader_held = _gated(i, "cpu", "remote", name, reading, rate_words, unmet)
                if reader_held:
                    return reader_held
                channel = reading.removeprefix(f"{idle}: ")
            if len(unmet) > before:
                # A program's share said it held the transfer and its bound says it did not:
                # what held the reader is not known, so application is not named either.
                veto = "a program's share pointed at it, and the rate did not meet its bound (below)"
        if not veto and channel:
            bound = bounds.application(i, i.receiver_side, f"{idle}: {channel}")
            return Limit("application", bound.said(steady) + i.share_of_path(steady), i.receiver_side)
        if not veto and len(unmet) > before:
            veto = "a program's share pointed at it, and the rate did not meet its bound (below)"
        if not veto:
            bound = bounds.application(
                i, i.sender_side, f"{idle}: its program sent no faster (a throttle, or a program that does not keep up)"
            )
            return Limit(
                "application",
                f"{bound.words}; steady rate {human_rate(steady)}{i.share_of_path(steady)}",
                i.sender_side,
            )
        withheld.append(f"not application ({idle}): {veto}")
    if sender and i.ce_rounds and i.ce_rounds >= i.real_losses:
        # The path's CE marks, where they are most of the congestion events (more losses
        # than marks: the path drops, and congestion below says so, its bound counting
        # both): named where they are LOSS_SHARE of the segments with the losses, or where
        # their bound meets the steady rate (a queue that marks in bursts: 5 marked round
        # trips of 5796 segments held CUBIC at 90% of their bound).
        marks = bounds.loss(i)
        enough = i.ce_rounds + i.real_losses >= MIN_CONGESTION_EVENTS
        if lossy or (marks is not None and enough and _marks_held(marks, bounds.judged_rate(marks, i))):
            return _ecn_marked(i, rate_words)
    if lossy or (not sender and i.segments and i.loss >= LOSS_SHARE):
        return Limit("congestion", "; ".join([i.loss_words(), *_bound_said(bounds.loss(i), i), rate_words]), "path")
    # Network-limited below the path, no loss: which of this transfer's own bounds met the
    # rate (the window its receiver advertised, its buffers, the packets its MSS needs).
    own = _own_bound(i, steady, in_flight) if sender and not withheld else None
    if own:
        return own
    returning = _return_path(i, steady, in_flight) if not withheld else None
    if returning and returning.reason:
        return returning
    if returning:
        withheld.append(returning.evidence)
    # A sender positively network-limited (in flight, a backlog, no loss, no window) was
    # held by neither end's programs, however busy this host: a receiver short of CPU
    # fills its queue and closes the window, a sender short of it runs out of backlog.  So
    # shared_path comes before the busy host's residual rule, unless the lab's delay line
    # (the path itself, run on this host's CPUs) waited for a CPU: then the path's
    # slowness may be this host's (a competing flow beside two CPU burners: 30-41% of the
    # estimate, every run busy_host before this order).
    path_on_host = i.host_busy.get("delay_line", 0.0) >= vetoes.BUSY_SHARE
    shared = _shared_path(i, steady, in_flight, rwnd, sndbuf, streams) if sender and not withheld else None
    queue = _standing_queue(i)
    elsewhere = _queue_not_on_data_way(i) if queue else ""
    if shared and elsewhere:
        withheld.append(f"not shared_path ({shared.evidence}): {elsewhere}")
        shared = None
    elif shared and not queue:
        withheld.append(f"not shared_path ({shared.evidence}): {_no_other_flow(i)}")
        shared = None
    elif shared:
        shared = replace(shared, evidence=f"{shared.evidence}; {queue}")
    if shared and not path_on_host:
        return shared
    busy_host = vetoes.busy_host(i)
    unseen = vetoes.remote_not_ruled_out(i) if busy_host else ""
    # busy_host as a bound: a program of this host held by the CPU, its wait explaining the
    # missing rate (vetoes.host_held); a host that was busy while the transfer's programs
    # slept waiting for the network did not hold it.
    held = vetoes.host_held(i) if busy_host else ""
    if busy_host and not unseen and held:
        return Limit("busy_host", f"{held}; {busy_host}; {rate_words}", "local")
    if unseen:
        # This host's waits do not stand in for a remote that may have held it.
        withheld.append(f"not busy_host ({busy_host}): {unseen}")
    elif busy_host:
        withheld.append(
            f"not busy_host ({busy_host}): no program of this host was on a core or queued for one "
            f"{vetoes.HOST_HELD_SHARE:.0%} of its life with its wait explaining the missing rate (they waited for "
            "the network, not for a CPU)"
        )
    if not sender:
        # The sender (a download's remote) could not be asked: its limits cannot be ruled
        # out, so naming one would be a guess.
        return Limit("", "; ".join([f"the sender's TCP state is unknown; {rate_words}", *withheld, *unmet]))
    if shared:
        return shared
    flight = f"data in flight {in_flight:.0%} of the data phase; " if in_flight is not None else ""
    computed = bounds.listed(bounds.computed(i))
    clamp = bounds.mss_clamp(i)
    if clamp:
        withheld.append(clamp)
    return Limit(
        "",
        "; ".join(
            [
                f"no limit found: no bound met the steady rate {human_rate(steady)} ({computed}); {flight}{rate_words}",
                *withheld,
                *unmet,
            ]
        ),
    )


def _slow_reader(i: Inputs, why: str, rate_words: str, sides: tuple[str, ...], unmet: list[str]) -> Limit:
    """The verdict on a receiver that read slower than the network delivered (`why`):
    its program's CPU or storage where their bound met the rate (_program_limit), else
    application, its own pace, unless it is this host's and waited for a CPU on a busy
    host (READER_WAITED of its life, at least as long as it ran): a reader starved of a
    core between its reads falls behind as a slow one does, and the CPU it was denied
    cannot be told from its pace.  busy_host where the host's CPU shows it held the
    transfer (vetoes.host_held), else withheld (a reader on a core or queued 40% of its
    life, asleep the rest, is not shown to be the CPU's, nor its own: beside two CPU
    burners, curl's queue stood 69-97% full with its wait under the busy_host bound)."""
    program = _program_limit(i, CPU_EXPLAINS, why, rate_words, sides=sides, fed=True, withheld=unmet)
    if program:
        return program
    side = sides[0] if sides else i.receiver_side
    busy = vetoes.busy_host(i) if side == "local" else ""
    waited = _reader_waited(i) if busy else ""
    if not waited:
        return Limit("application", f"{why}; {rate_words}", side)
    held = vetoes.host_held(i)
    if held:
        return Limit("busy_host", f"{why}; {held}; {busy}; {rate_words}", "local")
    return Limit(
        "",
        "; ".join(
            [
                f"not application ({why}): {waited}, on a busy host ({busy}): whether its own pace or this host's "
                "CPU set its rate is not shown",
                rate_words,
                *unmet,
            ]
        ),
    )


# A reader of this host that waited for a CPU this share of its life (and at least as long
# as it ran) cannot be called slow by itself on a busy host (_slow_reader).
READER_WAITED = 0.1


def _reader_waited(i: Inputs) -> str:
    """Words, where a program of the transfer on this host (alive BULK_SHARE of it) waited
    for a CPU READER_WAITED of its life and at least as long as it was on one ("" if
    none), its cgroup's quota aside (a quota's waits are the program's own limit)."""
    for label, v in sorted(i.programs.items()):
        side, _, name = label.partition(" ")
        if side != "local" or v.get("seconds", 0.0) < BULK_SHARE * i.duration:
            continue
        used = v.get("cpu_share", 0.0)
        waited = v.get("runnable_share", 0.0) - used - v.get("cpu_throttled_share", 0.0)
        if waited >= READER_WAITED and waited >= used:
            return (
                f"{name} (this host) waited for a CPU {waited:.0%} of its {v.get('seconds', 0.0):.1f} s and used "
                f"{used:.0%} of a core"
            )
    return ""


# Under LOSS_SHARE, the marks' bound is met up to this share of it only: their p counts
# marked round trips, not bursts of segments, so a rate far above it was not held by so
# few (Inputs.ce_rounds runs high, as each ECE echo covers the flight at the mark: 5 marks
# counted 6.3-7.3 round trips).  A breaker's runs: 5-7 marks that held CUBIC at 97-149% of
# their bound; 4-5 on a full link (the rate 91-98% of the same path's without marks) at
# 204-331%.  (At LOSS_SHARE and above the marks are named as losses are: random marking
# at 0.5% held CUBIC at 93-216% of the bound from marked round trips.)
MARKS_HIGH = 1.5


def _marks_held(marks: Bound, rate: float) -> bool:
    """Whether a few CE marks' loss bound (under LOSS_SHARE) meets `rate`: from its low
    to MARKS_HIGH of it."""
    return marks.meets(rate) and rate <= MARKS_HIGH * marks.rate


def _kept_up(i: Inputs) -> str:
    """Words, where a TCP bound of this transfer met the steady rate (the receive window,
    the send buffer, the path, its packet rate; a window or buffer corroborated as in
    _own_bound) and its receiver kept up: its queue did not stand RECEIVER_BEHIND full and
    it advertised no zero window ("" otherwise, or where the receiver's queue is unknown).
    A remote starved of CPU reads late: its queue stands full, its window closes.  A
    window its buffer makes, the queue empty, is the buffer's however late the remote's
    listings came (a plain remote with tcp_moderate_rcvbuf=0 beside a host at load 14:
    its 80,896 B window over 82.1 ms allowed 0.99 MB/s, the steady rate 0.95 MB/s, its
    listings up to 3.9 s late)."""
    behind = i.receiver.get("rcv_queue_ratio_avg")
    zero, samples = i.sender.get("zero_window_samples", 0.0), i.sender.get("sending_samples", 0.0)
    if behind is None or behind >= RECEIVER_BEHIND or (samples > 0 and zero >= ZERO_WINDOWS):
        return ""
    busy = i.sender.get("busy_seconds", 0.0)
    clocks = {
        "receive_window": i.sender.get("rwnd_limited_seconds", 0.0) / busy if busy > 0 else 0.0,
        "send_buffer": i.sender.get("sndbuf_limited_seconds", 0.0) / busy if busy > 0 else 0.0,
    }
    tcp = [
        b
        for b in (bounds.receive_window(i), bounds.send_buffer(i), bounds.path_capacity(i), bounds.packet_rate(i))
        if b and bounds.corroborated(b, clocks.get(b.name, 0.0), CORROBORATED_SHARE)
    ]
    met = bounds.met(tcp, i.steady_rate)
    if not met:
        return ""
    return (
        f"{met[0].said(i.steady_rate)}, and the receiver kept up (its queue {behind:.0%} full on average): "
        "a TCP bound held the rate, not a starved reader"
    )


def _ecn_marked(i: Inputs, rate_words: str) -> Limit:
    """congestion, detail ecn: the path marked CE (ECN) in round trips enough to hold the
    sender (with its real losses, LOSS_SHARE of its segments or more): a queue on the path
    that marks instead of dropping, each mark halving CUBIC's or Reno's window once per
    round trip as a loss does, with nothing lost (or fewer losses than marks).  The loss
    bound with p from both (bounds.loss) beside the rate."""
    control = f" ({i.congestion_control})" if i.congestion_control else ""
    lost = i.loss_words() or "no retransmission counted"
    said = (
        f"ECN marking (congestion on the path: a queue that marks): {i.ce_words()}, and {lost}: the sender's "
        f"congestion control{control} reduces its window once per marked round trip (RFC 3168), however many "
        "packets the queue marked in it"
    )
    return Limit("congestion", "; ".join([said, *_bound_said(bounds.loss(i), i), rate_words]), "path", detail="ecn")


def _shared_path(
    i: Inputs, steady: float, in_flight: float | None, rwnd: float, sndbuf: float, streams: int
) -> Limit | None:
    """shared_path: a sender network-limited below the path's estimate, positively seen:
    data in flight most of the data phase, a backlog of unsent data, no loss and no window
    or buffer limit, yet the rate below LINK_SHARE of the path.  What holds it is on the
    path and not this transfer's: another flow on the bottleneck, or an estimate that is
    no longer the path's."""
    share = i.path_share(steady)
    backlog = i.sender.get("sender_backlog_ratio")
    if (
        share is None
        or share >= LINK_SHARE
        or in_flight is None
        or in_flight < IDLE_SHARE
        or backlog is None
        or backlog < BACKLOG_SHARE
        or i.congestion >= LOSS_SHARE
        or rwnd >= LIMITED_SHARE
        or sndbuf >= LIMITED_SHARE
    ):
        return None
    samples = i.sending_samples
    if samples is not None and samples < vetoes.MIN_SENDER_SAMPLES:
        return None
    busiest = " (its busiest stream)" if streams > 1 else ""
    return Limit(
        "shared_path",
        f"the sender had data in flight {in_flight:.0%} of the {i.span:.1f} s data phase{busiest} and unsent data "
        f"in {backlog:.0%} of its samples, with {i.loss_words() or 'no retransmission counted'}, limited by the "
        f"receive window {rwnd:.0%} and its send buffer {sndbuf:.0%} of its busy time, yet its steady rate was "
        f"{human_rate(steady)}{i.share_of_path(steady)}: the path gave it {1 - share:.0%} less than its estimate "
        "(another flow on the bottleneck, cross traffic, or an estimate no longer the path's)",
        "path",
    )


def _bound_said(bound: Bound | None, i: Inputs) -> list[str]:
    """The bound's words beside the steady rate, where it was computed ([] if not)."""
    if bound is None:
        return []
    met = "" if bound.meets(i.steady_rate) else f" (not within {bounds.TOLERANCE:.0%} of it)"
    return [bound.said(i.steady_rate) + met]


def _own_bound(i: Inputs, steady: float, in_flight: float | None) -> Limit | None:
    """A network-limited sender below the path with no real loss, held by one of this
    transfer's own bounds: the packets its MSS needs (packet_rate: link_capacity, named so),
    the window its receiver advertised or a buffer that stopped growing (receive_window,
    send_buffer), where the steady rate meets the bound (Bound.meets) and the sender was
    not idle (its program then is what the rules above judged).  The lowest bound met."""
    if in_flight is not None and in_flight < IDLE_SHARE:
        return None
    if i.bandwidth and (i.path_share(steady) or 0.0) >= LINK_SHARE:
        return None
    busy = i.sender.get("busy_seconds", 0.0)
    clocks = {
        "receive_window": i.sender.get("rwnd_limited_seconds", 0.0) / busy if busy > 0 else 0.0,
        "send_buffer": i.sender.get("sndbuf_limited_seconds", 0.0) / busy if busy > 0 else 0.0,
    }
    candidates = [
        b
        for b in (bounds.packet_rate(i), bounds.receive_window(i), bounds.send_buffer(i))
        if b and bounds.corroborated(b, clocks.get(b.name, 0.0), CORROBORATED_SHARE)
    ]
    met = bounds.met(candidates, steady)
    if not met:
        return None
    bound = met[0]
    path = bounds.path_capacity(i)
    rtt = bounds.round_trip(i)
    # A window holds a flow only below the BDP: over the path's minimum round trip it must
    # allow less than the path.  One above it fills the path and queues the rest at the
    # bottleneck, and that queue stretches the round trip until the window over it meets
    # the rate (a lifted 1.31 MB window on a 1 MB BDP: 23.5 MB/s over the 55.7 ms it saw,
    # 32.7 MB/s over the 40 ms path; the path 23.9).
    windowed = bound.name in ("receive_window", "send_buffer")
    if path and rtt and i.rtt and windowed and bound.rate * rtt / i.rtt >= path.rate:
        return None
    others = [b for b in bounds.computed(i) if b is not bound and b.name != bound.name]
    also = f"; {bounds.listed(others)}" if others else ""
    said = f"{bound.said(steady)}{i.share_of_path(steady)}{also}"
    if bound.name == "packet_rate":
        return Limit("link_capacity", f"the path's packet rate at this MSS: {said}", "path", detail="packet_rate")
    return Limit(bound.name, said, bound.side)


def _return_path(i: Inputs, steady: float, in_flight: float | None) -> Limit | None:
    """link_capacity on the return path (detail ack_clock): the ACKs' way held a standing
    queue while the data way's one-way delay stayed flat (bounds.return_queue), the sender
    not idle, and the ACK clock's bound (bounds.ack_clock) meets the steady rate.  Where it
    does not, an empty Limit whose evidence says why not (the withheld verdict lists the
    bounds computed after it); None where the return way held no queue (or the
    timestamps did not say)."""
    ack = bounds.ack_clock(i)
    if ack is None or (in_flight is not None and in_flight < IDLE_SHARE):
        return None
    needed = steady * ack.inputs["ack_wire_per_data_byte"]
    carried = ack.inputs["return_bytes_per_second"]
    if not ack.meets(steady):
        return Limit(
            "",
            f"not the return path ({ack.words}): the steady rate {human_rate(steady)} is {steady / ack.rate:.0%} of "
            f"it, outside {ack.low:.0%}-{ack.high:.0%}",
        )
    return Limit(
        "link_capacity",
        f"{ack.said(steady)}{i.share_of_path(steady)}: the ACKs needed {human_bits(needed)} at the steady rate and "
        f"the return path carried {human_bits(carried)}, its queue standing; this transfer's own ACKs built it, "
        f"no other flow is needed to explain it",
        "path",
        detail="ack_clock",
    )


def _queue_not_on_data_way(i: Inputs) -> str:
    """Words, where the round trip's standing queue is not positively the data way's, so
    it is no evidence of another flow on the data's bottleneck: the timestamps say the data
    way's one-way delay stayed flat, or rose less than the return way's (measure/wire/oneway.py:
    most of the rise was then the ACKs'), or the capture carried the remote's timestamps
    and the one-way pass could not place the queue on either way (its clock not fitted, too
    few ticks).  "" where the data way held the queue, or where nothing could tell the ways
    apart (no timestamps negotiated, no capture, a journal from before peer_ticks): there
    the round trip alone decides."""
    ack, data = i.one_way.get("ack_queue_seconds"), i.one_way.get("data_queue_seconds")
    if not i.rtt:
        return ""
    if data is None or ack is None:
        ticks = i.one_way.get("peer_ticks", 0.0)
        if not ticks:
            return ""
        return (
            f"the standing queue ({_rtt_words(i)}) could not be placed on either way: the capture carried "
            f"{ticks:.0f} ticks of the remote's TCP timestamps, but the one-way pass measured no delay from them "
            "(the remote's clock rate not fitted, or too few ticks), so it may be the return path's (this "
            "transfer's own ACKs) as well as another flow's"
        )
    least = max(QUEUE_SHARE * i.rtt, QUEUE_SECONDS)
    if data >= least and data >= ack:
        return ""
    if data < least:
        where = (
            "on the return path (the ACKs' way): this transfer's own ACKs can build it"
            if bounds.return_queue(i) is not None
            else "on neither way for long"
        )
    else:
        where = "mostly on the return path (the ACKs' way), where this transfer's own ACKs can build it"
    return (
        f"the standing queue ({_rtt_words(i)}) was {where}; by the remote's TCP timestamps the data way's one-way "
        f"delay stood {data * 1000:.1f} ms above its least, the return way's {ack * 1000:.1f} ms"
    )


def _standing_queue(i: Inputs) -> str:
    """Positive evidence of another flow on the bottleneck: the round trip the transfer saw
    stood QUEUE_SHARE of the path's minimum (and QUEUE_SECONDS) above it, a queue this
    transfer, below the path's rate, did not build alone ("" if not seen)."""
    queue = i.standing_queue
    if queue is None or not i.rtt or queue < max(QUEUE_SHARE * i.rtt, QUEUE_SECONDS) or _path_delay_rose(i):
        return ""
    return f"a standing queue: the round trip {_rtt_words(i)}"


def _no_other_flow(i: Inputs) -> str:
    """Why shared_path is withheld where no standing queue was seen: the path's own delay
    rose (_path_delay_rose), or the round trip stayed near its minimum."""
    rose = _path_delay_rose(i)
    if rose:
        return f"no other flow was seen: {rose}"
    return f"no other flow was seen (no standing queue: the round trip {_rtt_words(i)}, and no loss)"


def _path_delay_rose(i: Inputs) -> str:
    """Words where the round trip's rise above the path's minimum is the path's own delay,
    not a queue ("" otherwise, or where the capture's timestamps did not say): each way's
    one-way delay held a floor through the flow's second half (measure/wire/oneway.py:
    the late delays' FLOOR_SHARE quantile above the least) on both ways, and their sum accounts for
    the rise but what is within the standing queue's threshold (QUEUE_SHARE of the path's
    minimum, and of the rise: a userspace delay line on a host at load 28 added 10 ms to
    a 60 ms step, every tbf empty).  A queue another flow builds at a bottleneck varies
    with both flows' windows and drains toward the path's delay; a route onto a longer
    path raises the floor and holds flat (a 20 -> 80 ms step with every queue empty: each
    way's floor 30 ms up).  Then the sender's own congestion control held its rate on the longer path
    (BBRv1 keeps the min RTT it measured for 10 s: its window, 2 x its bandwidth estimate
    x that RTT, caps it well below the path at four times the round trip)."""
    queue, w = i.standing_queue, i.one_way
    floors = (w.get("data_queue_floor_seconds"), w.get("ack_queue_floor_seconds"))
    medians = (w.get("data_queue_seconds"), w.get("ack_queue_seconds"))
    if queue is None or not i.rtt or None in floors or None in medians:
        return ""
    data_floor, ack_floor = (float(v or 0.0) for v in floors)
    data, ack = (float(v or 0.0) for v in medians)
    least = max(QUEUE_SHARE * i.rtt, QUEUE_SECONDS)
    base = data_floor + ack_floor
    # Both ways' floors rose: a queue at one bottleneck delays one way (a competing iperf3
    # flow through a 100 Mbit/s tbf kept the data way's floor 7.4-10.6 ms up, never
    # draining, the return way's 0.3-0.8 ms), a longer path both (each ~31 ms of a 60 ms
    # step).  A route that lengthened one way only is left to the round trip, as before.
    if min(data_floor, ack_floor) < least or queue - base >= max(least, QUEUE_SHARE * queue):
        return ""
    held = _congestion_window_words(i)
    return (
        f"the round trip {_rtt_words(i)}, but as the path's own delay, not a queue: by the remote's TCP timestamps "
        f"through the flow's second half the data way's one-way delay stood at least {data_floor * 1000:.1f} ms "
        f"above its least (median {data * 1000:.1f} ms) and the return way's {ack_floor * 1000:.1f} ms (median "
        f"{ack * 1000:.1f} ms): a floor that rose and held flat is a longer path (a route change), while a queue "
        f"another flow builds varies; {held}"
    )


def _congestion_window_words(i: Inputs) -> str:
    """What the sender's congestion control allowed on the path whose delay rose: its
    largest window over the round trip it saw, where the listings read it."""
    cwnd, rtt = i.sender.get("cwnd_max_segments"), bounds.round_trip(i)
    control = f" ({i.congestion_control})" if i.congestion_control else ""
    loss = i.loss_words() or "no retransmission counted"
    if not cwnd or not rtt:
        return f"the sender's congestion control{control} held its rate, with {loss}"
    allows = cwnd * i.mss / rtt
    return (
        f"the sender's congestion control{control} held its window (at most {cwnd:.0f} segments of "
        f"{i.mss:.0f} B over {rtt * 1000:.1f} ms allows {human_rate(allows)}), with {loss}"
    )


def _rtt_words(i: Inputs) -> str:
    seen = i.sender.get("rtt_avg_seconds")
    if not seen or not i.rtt:
        return "the transfer saw unknown"
    above = (seen - i.rtt) * 1000
    return f"the transfer saw was {seen * 1000:.1f} ms, {above:.1f} ms above the path's minimum {i.rtt * 1000:.1f} ms"


def _ssh_window(i: Inputs, steady: float) -> Limit | None:
    """application, detail ssh_window: the steady rate met ssh's fixed channel window over
    the round trip (bounds.ssh_window), every TCP bound computed (the receive window, the
    send buffer, the path, the loss) stood WELL_ABOVE it and no program of the transfer on
    either end was busy (each one's bound, the rate over its share of life on a core,
    queued for one or on storage, PROGRAMS_ABOVE the rate), with the remote's programs
    seen.  Then neither a reader nor a throttle held ssh: the window did, full for a whole
    round trip (a tuned 100 Mbit/s, 403 ms path: 2.0-2.11 MB in flight, cwnd 6 MB, peer
    window 8-11 MB, sftp-server 0.2-0.6% of a core, 3.8-4.7 MB/s against 5.20).  A reader
    that holds the channel runs well below the window, or is busy: the rules after this
    name it.  Its side is this host: the program it runs (ssh, its sftp client) opens the
    window of a download and keeps sftp's requests of both ways; which program carries the
    transfer is chosen here."""
    bound = bounds.ssh_window(i)
    if bound is None or not bound.meets(steady) or not i.remote_programs_seen:
        return None
    if _queued_window(i, steady):
        return None
    if unsent_stood(i):
        # ssh writes no more than its window, and TCP sends all it is given: a sender the
        # window holds has nothing unsent.  Unsent data in most samples is TCP holding what
        # ssh wrote (the path, cwnd, pacing): the window is not the limit.
        return None
    tcp = [b for b in (bounds.receive_window(i), bounds.send_buffer(i), bounds.path_capacity(i), bounds.loss(i)) if b]
    if any(b.rate < WELL_ABOVE * steady for b in tcp):
        return None
    programs = bounds.programs(i, ("local", "remote"), BULK_SHARE)
    if any(b.rate < PROGRAMS_ABOVE * steady for b in programs):
        return None
    clear = f"the TCP bounds well above it ({bounds.listed(tcp).removeprefix('bounds computed: ')})" if tcp else ""
    busiest = max(programs, key=lambda b: b.inputs.get("busy_share", 0.0), default=None)
    idle = (
        f"no program busy: the busiest, {busiest.program} ({host_name(busiest.side)}), on a core, queued for one or on "
        f"storage {busiest.inputs.get('busy_share', 0.0):.0%} of its life"
        if busiest
        else "no program of the transfer on a core, queued for one or on storage"
    )
    app = i.sender.get("app_limited_sending_ratio")
    flagged = (
        f"the sender app-limited in {app:.0%} of its samples while sending (waiting for the window)"
        if app is not None
        else ""
    )
    return Limit(
        "application",
        "; ".join(filter(None, [bound.said(steady) + i.share_of_path(steady), clear, idle, flagged])),
        "local",
        detail="ssh_window",
    )


def _queued_window(i: Inputs, steady: float) -> str:
    """Words, where an ssh channel's window stood full in flight with most of it queued
    ("" otherwise, or where a round trip is unknown): the round trip the transfer saw was
    WELL_ABOVE the path's minimum, the window over that minimum allowed WELL_ABOVE the
    steady rate, and the rate over the round trip seen filled the window (SSH_WINDOW_LOW
    of it).  Then the round trip the window's bound is met over is the queue its own
    surplus built at a bottleneck that held the rate, and an ssh that waits for its window
    waits for that queue, not for a reader: neither the window nor a program held it (a
    20 Mbit/s shaper with a 4 MB queue, 40 ms: 2 MiB over the 41 ms minimum allows 51 MB/s,
    the RTT seen 642-769 ms met the bound at 2.38 MB/s, the shaper's rate, and http on the
    same path ran as fast).  Where the window holds, the round trip stays near the minimum
    (a tuned 403 ms path: 73-90% of the window over it); a slow reader keeps the window
    closed, so little is in flight and nothing queues."""
    seen = bounds.round_trip(i)
    if not i.rtt or not seen or steady <= 0 or not bounds.ssh_carried(i):
        return ""
    unqueued = bounds.SSH_WINDOW / i.rtt
    if seen < WELL_ABOVE * i.rtt or unqueued < WELL_ABOVE * steady:
        return ""
    if steady * seen < bounds.SSH_WINDOW_LOW * bounds.SSH_WINDOW:
        return ""
    return (
        f"ssh's window stood full in flight ({human_bytes(steady * seen)} over the {seen * 1000:.0f} ms round trip "
        f"seen, {seen / i.rtt:.1f}x the path's minimum {i.rtt * 1000:.1f} ms), and over that minimum it allows "
        f"{human_rate(unqueued)}, {unqueued / steady:.1f}x the steady rate: its surplus stood in a queue at a "
        "bottleneck that held the rate, not the window nor a program"
    )


def unsent_stood(i: Inputs) -> str:
    """Words, where the sender's socket held unsent data in BACKLOG_SHARE of its samples
    or more and its kernel did not find it waiting for its program (flagged app-limited in
    fewer than BACKLOG_SHARE of the samples in which it sent) ("" otherwise, or where its
    backlog is unknown): what its program wrote, TCP could not send yet, so the program's
    supply (ssh's channel window: ssh writes at most the window) was not what held it.  The
    flag (tcp_rate_check_app_limited: less than an MSS unsent, the window not full) holds
    for the round trip after each wait, so a burst paced out after each window adjust
    leaves it set where a sampled notsent shows a moment's backlog.  A 130 Mbit/s link
    below ssh's window over 100 ms: unsent data in 80-100% of the listings, flagged 0-2 of
    18-21 samples while sending, 1.62 MB of the 2.10 MB window in flight; the window alone
    on the same path: unsent data in 0-50%, flagged 94-100%."""
    backlog = i.sender.get("sender_backlog_ratio")
    app = i.sender.get("app_limited_sending_ratio")
    if backlog is None or backlog < BACKLOG_SHARE or (app is not None and app >= BACKLOG_SHARE):
        return ""
    flagged = f", flagged app-limited in {app:.0%} of them" if app is not None else ""
    return f"the sender had unsent data in {backlog:.0%} of its samples{flagged} (TCP held what its program wrote)"


def _ssh_channel(i: Inputs) -> str:
    """Words, where the idle sender is this host's end of an ssh channel and the data goes
    to the remote ("" if not): ssh sends no more than the channel window the remote's sshd
    opens as its reader takes the data, so the reader there, not ssh, set the pace (a
    window full for a whole round trip with the reader idle is _ssh_window's, before)."""
    if i.sender_side != "local":
        return ""
    senders = [
        name.partition(" ")[2]
        for name, v in i.programs.items()
        if name.startswith("local ") and name.partition(" ")[2] in SSH_SENDERS
    ]
    receiving = [name.partition(" ")[2] for name in i.programs if name.startswith("remote ")]
    if "ssh" not in senders or not receiving:
        return ""
    return (
        "the sender is ssh, which sends only what its channel window allows, and the remote's sshd opens that "
        f"window as the program it feeds there ({', '.join(sorted(set(receiving)))}) takes the data: the remote's "
        "reader, not this host's, kept the sender waiting"
    )


def _channel_reader(i: Inputs) -> tuple[str, Mapping[str, float]] | None:
    """(name, values) of the remote program an ssh channel fed (not sshd itself: it hands
    the data on through a pipe), the one seen longest; None where none was seen."""
    readers = [
        (v.get("seconds", 0.0), name.partition(" ")[2], v)
        for name, v in i.programs.items()
        if name.startswith("remote ") and name.partition(" ")[2] != "sshd"
    ]
    if not readers:
        return None
    _, name, v = max(readers, key=lambda item: item[0])
    return name, v


def _quota_held(i: Inputs, rate_words: str, unmet: list[str] | None = None) -> Limit | None:
    """cpu on this host, held by a CPU quota: a program of the transfer that wanted a core
    (on one or queued for one) CPU_EXPLAINS of its life, in a cgroup its CPU quota held
    back vetoes.THROTTLED_SHARE of the time (cgroup v1 cpu.stat throttled_time, v2
    throttled_usec).  Its group ran out of CPU time in those periods while the program
    was ready to run: the quota, not the network or the program's own pace, set the rate,
    however idle the host (the remote's counterpart is vetoes.starved_remote).  A program
    held so sends or reads in bursts, so TCP shows neither an idle sender nor a full
    window reliably: an scp download under a 20% quota kept data in flight 67-79% of the
    data phase, its ssh runnable 79% and its group throttled 45-100% of the time."""
    held = [
        (v["runnable_share"], label.partition(" ")[2], v)
        for label, v in i.programs.items()
        if label.startswith("local ")
        and v.get("runnable_share", 0.0) >= CPU_EXPLAINS
        and v.get("cpu_throttled_share", 0.0) >= vetoes.THROTTLED_SHARE
        and v.get("seconds", 0.0) >= BULK_SHARE * i.duration
    ]
    if not held:
        return None
    _, name, v = max(held, key=lambda item: item[0])
    quota = f" of {v['cpu_quota_cores']:.2f} cores" if "cpu_quota_cores" in v else ""
    said = (
        f"{name} (this host) was on a core or queued for one {v['runnable_share']:.0%} of its {v['seconds']:.1f} s: "
        f"it used {v['cpu_share']:.0%} of a core and its cgroup was held by its CPU quota{quota} "
        f"{v['cpu_throttled_share']:.0%} of the time"
    )
    limit = _gated(i, "cpu", "local", name, said, rate_words, unmet)
    return replace(limit, detail="quota") if limit else None


def _remote_program(i: Inputs) -> str:
    """The remote program that did the most work, by its samples' seconds ("the remote's
    programs" where none was seen)."""
    remote = [
        (v.get("cpu_seconds", 0.0), label[len("remote ") :])
        for label, v in i.programs.items()
        if label.startswith("remote ")
    ]
    return max(remote)[1] if remote else "the remote's programs"


def _sender_idle(sender: Mapping[str, float], i: Inputs, streams: int) -> str:
    """Positive evidence that the sender had nothing to send, in words ("" if none): it
    rarely had a backlog (notsent) while sending, or data in flight for less than
    IDLE_SHARE of the data phase (a bursty throttle)."""
    backlog = sender.get("sender_backlog_ratio")
    in_flight = i.in_flight
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
    withheld: list[str] | None = None,
) -> Limit | None:
    """cpu or disk naming the transfer's program (on `sides`) that was on a core or
    queued for one for `threshold` of its life, or waited on storage in DISK_SHARE of its
    samples, where its bound (bounds.program_cpu, bounds.storage; busy_host's
    bounds.host_cpu) meets the steady rate; `why` (what TCP showed, "" for none) leads the
    evidence, the bound beside the rate ends it.  A share that points at a program whose
    bound the rate does not meet names nothing: it is said in `withheld` with its bound,
    and the rules go on.  `fed`: its input stood waiting for it (a receiver whose queue
    stood full), so one that slept more often than it waited on storage paced itself
    (curl --limit-rate beside other writers: 36% of its samples on storage, the rest mostly
    asleep), and its storage is not why."""
    lead = f"{why}: " if why else ""
    program = _busiest(i.programs, "runnable_share", threshold, i.duration, sides)
    if program:
        name, side, v = program
        # Short of a core because this host's other programs held it: the host, not the program.
        held = vetoes.held_by_busy_host(i, name, side, v)
        if held:
            gated = _gated(i, "busy_host", side, name, f"{lead}{held}", rate_words, withheld)
            if gated:
                return gated
        else:
            said = (
                f"{name} ({host_name(side)}) was on a core or queued for one {v['runnable_share']:.0%} of its "
                f"{v['seconds']:.1f} s: it used {v['cpu_share']:.0%} of a core and waited "
                f"{v['runnable_share'] - v['cpu_share']:.0%} for one (busier programs on its cores, or a CPU quota)"
            )
            gated = _gated(i, "cpu", side, name, f"{lead}{said}", rate_words, withheld)
            if gated:
                return gated
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
            f"{name} ({host_name(side)}) waited on storage in {v['io_wait_share']:.0%} of {v['samples']:.0f} "
            f"samples over {v['seconds']:.1f} s"
        )
        return _gated(i, "disk", side, name, f"{lead}{said}", rate_words, withheld)
    return None


def _gated(
    i: Inputs, reason: str, side: str, name: str, said: str, rate_words: str, withheld: list[str] | None
) -> Limit | None:
    """A program's verdict (cpu, disk, busy_host) where its bound meets the steady rate,
    the bound beside the rate in its evidence; None where it does not (said in `withheld`
    with the bound and how far the rate was from it).  A program with no bound computed
    (its CPU-seconds not counted) stands on its share, as before bounds."""
    bound = bounds.of_program(i, reason, side, name)
    steady = bounds.judged_rate(bound, i) if bound is not None else i.steady_rate
    if bound is not None and not bound.meets(steady):
        if withheld is not None:
            withheld.append(
                f"not {reason} ({said}): {bound.words}, and the steady rate {human_rate(steady)} is "
                f"{steady / bound.rate:.0%} of it, outside the {bound.low:.0%}-{bound.high:.0%} that meets it"
            )
        return None
    both = f"; {bound.said(steady, steady != i.steady_rate)}" if bound is not None else ""
    return Limit(reason, f"{said}{both}; {rate_words}", "local" if reason == "busy_host" else side, program=name)


def _link(i: Inputs, steady: float) -> Limit | None:
    """link_capacity when the steady rate reached LINK_SHARE of the path's bandwidth; the
    sender's loss is said with it (a policer or a short queue drops what exceeds the rate)."""
    share = i.path_share(steady)
    if share is None or share < LINK_SHARE:
        return None
    lossy = i.loss >= LOSS_SHARE
    packets = bounds.packet_rate(i)
    # A clamped MSS is named; its packet rate only where the rate meets it (an estimate
    # made under the same clamp, iperf3's, is already the clamped rate).
    clamp = (packets.said(steady) if packets and packets.meets(steady) else "") or bounds.mss_clamp(i)
    return Limit(
        "link_capacity",
        f"steady rate {human_rate(steady)}{i.share_of_path(steady)}"
        + "".join(f"; {said}" for said in _bound_said(bounds.path_capacity(i), i))
        + (f"; and {clamp}" if clamp else "")
        + (
            f"; {i.loss_words()}: the bottleneck drops what exceeds its rate (a policer, a short queue)"
            if lossy
            else ""
        ),
        "path",
        detail="packet_rate" if clamp else "",
    )


def startup(i: Inputs, steady_limit: Limit) -> tuple[Limit | None, str]:
    """startup, where the time lost below the steady rate (set-up, slow start) is at least
    STARTUP_SHARE of the transfer and more than the steady phase's own limit cost; and,
    where it is not, why, if the physics withheld it ("" otherwise).  Only what the
    physics allows counts: a set-up of at most vetoes.setup_seconds and a slow start of at
    most vetoes.slow_start_seconds; time beyond them is named, never called startup."""
    if i.duration <= 0 or (i.sender and i.congestion >= LOSS_SHARE):
        return None, ""  # with loss (or CE marks), a slow ramp is their doing: congestion says so
    behind = i.receiver.get("rcv_queue_ratio_avg")
    if not i.sender and i.receiver_side == "local" and behind is not None and behind >= RECEIVER_BEHIND:
        # A download judged from this host alone whose receive queue stood full: the
        # kernel's bytes are what arrived, not what its reader took, so the "steady rate"
        # is the network's burst into the buffer and the rest of the time the reader's
        # (curl --limit-rate 2M: steady 6.3 MB/s, read at 2): steady_limit names the reader.
        return None, ""
    only = _start_only(i, steady_limit) if not i.bandwidth else None
    if only is not None:
        return only
    steady, measured = i.steady_fit, True
    if i.bandwidth and i.short:
        # Too short for a steady rate to show (what the listings saw was slow start): the
        # path's rate (as data) stands in for it.
        steady, measured = i.bandwidth / i.wire_factor, False
    if not steady or steady <= i.rate:
        return None, ""
    lost = i.duration - i.file_bytes / steady
    setup = max(0.0, i.data_start) if i.data_start is not None else None
    # Time spent queued for a core is the host's business, not the start's: a larger file
    # or a persistent connection would not have saved it.  Set-up's, and the data phase's
    # (the longest any one program waited then: a slow start stretched to 1.59 s of 4.39 s
    # beside CPU burners, on a path where it takes a tenth of a second).
    queued = min(setup, i.setup_queued) if setup is not None else 0.0
    tail = max(0.0, i.duration - i.data_end) if i.data_end is not None else 0.0
    ramp = lost - (setup or 0.0) - tail
    # What the physics allows each part: the rest is not startup.
    setup_most, ramp_most = vetoes.setup_seconds(i), vetoes.slow_start_seconds(i)
    slow_setup = max(0.0, (setup or 0.0) - queued - setup_most) if setup_most is not None else 0.0
    slow_ramp = max(0.0, ramp - i.data_queued - ramp_most) if ramp_most is not None else 0.0
    cost = lost - queued - i.data_queued - slow_setup - slow_ramp
    beyond = _beyond_words(i, slow_setup, slow_ramp, setup_most, ramp_most)
    through = vetoes.lost_through_transfer(slow_ramp, cost)
    if through:
        return None, f"not startup: {beyond}; {through}"
    host = (vetoes.busy_host(i) or vetoes.starved_remote(i)) if beyond else ""
    if host:
        # A start longer than the physics allows, on a host seen busy or a remote seen
        # starved: how much of even the allowed part was theirs is unknown.  Not startup.
        return None, f"not startup: {beyond}; {host}"
    if cost < STARTUP_SHARE * i.duration:
        if beyond and lost - queued - i.data_queued >= STARTUP_SHARE * i.duration:
            return None, f"not startup: {beyond}"
        return None, ""
    if steady_limit.reason in ("cpu", "disk", "busy_host") and measured:
        # A program's own pace, or a busy host's: the steady rate is not the network's.
        # (Over in a few round trips, what kept a program busy was its set-up: ssh's
        # key exchange.)
        return None, ""
    if steady_limit.reason and (steady_limit.reason != "link_capacity" or steady_limit.detail == "ack_clock"):
        # The steady phase's own limit cost file/steady - file/bandwidth (the return
        # path's too: the data way was not full, and a set-up slow behind its queue is its
        # doing as much as the start's); unknown
        # without a bandwidth: then the larger share of the time decides as well as it can.
        steady_cost = i.file_bytes / steady - (i.file_bytes * i.wire_factor / i.bandwidth if i.bandwidth else 0.0)
        if steady_cost >= cost:
            return None, ""
    waited = f" ({queued:.2f} s of it queued for a CPU)" if queued >= 0.01 else ""
    parts = [f"connection set-up {setup:.2f} s before the first data{waited}" if setup is not None else ""]
    if ramp >= 0.01:
        stretched = f" ({i.data_queued:.2f} s of it queued for a CPU)" if i.data_queued >= 0.01 else ""
        # Slow start is named only for what it can have taken (vetoes.slow_start_seconds).
        if ramp_most is None or ramp - i.data_queued <= ramp_most:
            parts.append(f"the ramp-up to it (slow start) {ramp:.2f} s{stretched}")
        else:
            parts.append(f"the ramp-up to it {ramp:.2f} s{stretched}, slow start at most {ramp_most:.2f} s of it")
    # A file averages within 10% of the steady rate when the lost time is a tenth of it:
    # size >= STEADY_WITHIN / (1 - STEADY_WITHIN) x steady x lost.
    reach = STEADY_WITHIN / (1 - STEADY_WITHIN) * steady * (cost + queued + i.data_queued)
    # ssh's window is named as itself: "application" alone reads as a program's pace.
    held = "ssh's channel window (application)" if steady_limit.detail == "ssh_window" else steady_limit.reason
    then = (
        f"; its steady phase was limited by {held}"
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
        f"{human_bytes(reach)} would average within 10% of it{then}" + (f"; but {beyond}" if beyond else ""),
        "path",
        reach_bytes=reach,
    ), ""


def _start_only(i: Inputs, steady_limit: Limit) -> tuple[Limit | None, str] | None:
    """startup where the path's capacity is unknown and the data moved within what slow
    start of this file takes on this path (vetoes.slow_start_seconds): the transfer never
    left its start, so it has no steady rate (a "steady rate" fitted to its two or three
    listings is slow start's, and a sender between slow start's round trips looks idle:
    a steady phase's verdict would be a guess), and what the start cost is the whole
    transfer but any set-up beyond what the physics allows and the time its programs
    queued for a CPU.  None where the data phase was longer (startup() then judges it
    against a steady rate) or is not known at all.  The data phase of a one-point
    progress series (all of it between two listings) is at most from its first data to
    the end."""
    ramp_most, setup_most = vetoes.slow_start_seconds(i), vetoes.setup_seconds(i)
    if ramp_most is None or setup_most is None or i.data_start is None or not i.rtt:
        return None
    measured = i.phase_measured
    phase = i.span if measured else max(0.0, i.duration - i.data_start)
    if phase - i.data_queued > ramp_most:
        return None
    setup = max(0.0, i.data_start)
    queued = min(setup, i.setup_queued)
    slow_setup = max(0.0, setup - queued - setup_most)
    beyond = _beyond_words(i, slow_setup, 0.0, setup_most, ramp_most)
    host = (vetoes.busy_host(i) or vetoes.starved_remote(i)) if beyond else ""
    if host:
        return None, f"not startup: {beyond}; {host}"
    cost = i.duration - queued - i.data_queued - slow_setup
    if cost < STARTUP_SHARE * i.duration or (steady_limit.reason == "busy_host" and queued + i.data_queued >= cost):
        return None, (f"not startup: {beyond}" if beyond else "")
    # The path carried the file at least as fast as its data phase did: the least a larger
    # file's steady rate can be.
    floor = i.file_bytes / max(phase, i.rtt)
    reach = STEADY_WITHIN / (1 - STEADY_WITHIN) * floor * (cost + queued + i.data_queued)
    waited = f" ({queued:.2f} s of it queued for a CPU)" if queued >= 0.01 else ""
    stretched = f" ({i.data_queued:.2f} s of it queued for a CPU)" if i.data_queued >= 0.01 else ""
    return Limit(
        "startup",
        f"the {human_bytes(i.file_bytes)} moved in {'' if measured else 'at most '}{phase:.2f} s of data"
        f"{stretched}, within the {ramp_most:.2f} s slow start of it can take on this path "
        f"({ramp_most / i.rtt:.0f} round trips of {i.rtt * 1000:.1f} ms), after connection set-up {setup:.2f} s"
        f"{waited}: the transfer never left its start, which cost {cost:.2f} s of the {i.duration:.2f} s "
        f"(the path's capacity unknown: no steady rate showed); files of at least {human_bytes(reach)} would "
        f"average within 10% of even the rate its data phase reached, {human_rate(floor)}"
        + (f"; but {beyond}" if beyond else ""),
        "path",
        reach_bytes=reach,
    ), ""


def _beyond_words(
    i: Inputs, slow_setup: float, slow_ramp: float, setup_most: float | None, ramp_most: float | None
) -> str:
    """The start's time beyond what the physics allows it, in words ("" if none worth saying)."""
    said = []
    rtt = i.rtt or 0.0
    if slow_setup >= 0.01 and setup_most is not None:
        said.append(
            f"{slow_setup:.2f} s of the set-up beyond the {setup_most:.2f} s a protocol's set-up takes on this path "
            f"({vetoes.SETUP_RTTS} round trips of {rtt * 1000:.1f} ms and {vetoes.SETUP_HOST_SECONDS:.1f} s on the "
            "hosts): set-up slow on a host (a slow login or name lookup, a busy or starved host)"
        )
    if slow_ramp >= 0.01 and ramp_most is not None:
        said.append(
            f"{slow_ramp:.2f} s of the ramp-up beyond the {ramp_most:.2f} s slow start of "
            f"{human_bytes(i.file_bytes)} takes ({ramp_most / rtt if rtt else 0:.0f} round trips): not slow start "
            "but a sender or receiver that started slowly (a starved remote, a busy host, a program's own pace)"
        )
    return "; ".join(said)


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
