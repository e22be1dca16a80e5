"""Physics that vetoes: what a verdict's evidence must satisfy before the verdict is given.

Each check says, in words, why a verdict cannot be what the rules would otherwise say
("" where nothing stands against it); the rules ask these before they give a verdict and
go on to the next rule, or withhold the verdict, saying why (docs/metrics.md, "Why was it
slow?", the vetoes).  `contradiction` is the last word: a verdict whose own numbers say
the opposite of it is never given.

- startup: slow start doubles the window every round trip, so it moves a file in about
  log2(bytes / initial window) round trips and a few more (the request, the exit); and a
  protocol's set-up takes a bounded number of round trips (TCP's handshake, ssh's version
  and key exchange, authentication, channel and request; FTP's login and data connection)
  plus what the hosts compute meanwhile.  Time beyond either is not startup: a busy host,
  a starved remote, a slow login.
- application (the sender's side): a sender that had nothing to send, with no
  retransmission backlog (a sender repairing a hole in every window shows notsent 0 and
  little in flight: the loss holds it, not its program), flagged app-limited by its kernel
  where it was in flight most of the time (the flag marks only the round trip after each
  gap, so a sender whose write queue stood empty most of the data phase shows it rarely:
  `unflagged`), over enough listings of the side that sent, and with the other end's
  programs seen (an ssh sender waits on the channel window the receiving end's writer
  opens: where that writer cannot be seen, this host's program does not stand in for it).
- link_capacity: a rate above the path's estimate proves the estimate stale, never the
  path full (inputs.py drops such an estimate before any rule reads it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from bigbinf.judge import bounds
from bigbinf.judge.inputs import CORROBORATED_SHARE, STALE_SHARE, Inputs
from bigbinf.judge.words import host_name, human_rate

INITIAL_WINDOW_SEGMENTS = 10  # RFC 6928, Linux's default
# Round trips slow start may take beyond log2(bytes / initial window): the request that
# starts the data, delayed ACKs, the exit from slow start and the last window's ACK.
RAMP_SPARE_RTTS = 4
# Round trips a protocol's set-up takes at most: ssh's TCP handshake, version exchange, key
# exchange (2), new keys, service request, authentication (2-3), channel open, exec and the
# scp/sftp request come to 10-12; FTP's greeting, login, options and data connection fewer.
SETUP_RTTS = 20
SETUP_HOST_SECONDS = 0.5  # what the hosts compute meanwhile (key exchange, forks, a login's shell)
# A sender that lost this many segments per window it had in flight repaired a hole in
# every round trip: its notsent 0 and idle-looking clocks are loss recovery, not its program.
RECOVERY_PER_WINDOW = 1.0
RECOVERY_SHARE = 0.05  # ... where its window is unknown: 1 in 20 segments retransmitted
MIN_SENDER_SAMPLES = 5  # listings of the sending side moving data that a sender's verdict needs
APP_LIMITED_MIN = 0.05  # of the sender's samples its kernel flagged app-limited, at least
# A starved remote: its programs' cgroup held by its CPU quota this share of the transfer,
THROTTLED_SHARE = 0.2
# or its own listings (a tiny `ss` every 0.1 s) late by LATE_SECONDS and LATE_SHARE of the
# transfer, or fewer than ANSWERED_SHARE of them answered at all.  Listings are late for
# other reasons too: this host's ssh and `ss` wait for a CPU on a busy host (at load 10 an
# unstarved remote answered 8-21 of 18-24 listings, the latest 1.7 s behind), and a lossy
# path delays the stats session's packets behind retransmission timeouts.  So lateness
# counts only past what those produced, not on a lossy path, and on a busy host only beyond
# what this host's programs waited for a CPU; a remote sshd at 5% of a core answered 1-4
# of 27-40, 8-12 s late.
LATE_SECONDS = 3.0
LATE_SHARE = 0.25
ANSWERED_SHARE = 0.25
# A listing crosses the path: a channel opened through the ControlMaster, the command, and
# its output through the ssh connection (restarted from its initial window after the idle
# between listings), behind the transfer's own queue at the bottleneck.  Healthy listings
# on a 400 ms path took 2.5-2.9 round trips (median) and up to 5.5-10 (a remote that
# nothing starved: 2.2-3.9 s "late"); on a 10 ms path this is 0.1 s.
LISTING_RTTS = 10
MIN_LISTINGS = 8  # ... of at least this many expected (a short transfer's few prove nothing)
LATE_LOSS_SHARE = 0.001  # a sender that lost this share of its segments: the path may have delayed them
# A busy host: this host's programs, its capture or the lab's delay line waited for a CPU
# this share of the transfer (a delay line that waits delays every packet behind it).
BUSY_SHARE = 0.1
BACKLOG_SHARE = 0.5  # rules.BACKLOG_SHARE: a sender with unsent data in this share of its samples had data
SEEN_SHARE = 0.5  # rules.BULK_SHARE: the remote's programs seen this share of the transfer were seen doing the work
IDLE_SHARE = 0.6  # rules.IDLE_SHARE: data in flight less than this share of the data phase is idle
BUSY_PARTS = {
    "transfer_programs": "the transfer's programs",
    "capture": "the capture",
    "delay_line": "the lab's delay line",
}


def slow_start_seconds(i: Inputs) -> float | None:
    """The longest slow start of this file on this path can take (None: no RTT known)."""
    if not i.rtt:
        return None
    windows = max(2.0, i.file_bytes / (INITIAL_WINDOW_SEGMENTS * i.mss))
    return (math.log2(windows) + RAMP_SPARE_RTTS) * i.rtt


def setup_seconds(i: Inputs) -> float | None:
    """The longest a protocol's set-up can take on this path (None: no RTT known)."""
    return SETUP_RTTS * i.rtt + SETUP_HOST_SECONDS if i.rtt else None


def in_recovery(i: Inputs, in_flight: float | None) -> str:
    """Words, where the sender's loss kept it repairing holes every round trip ("" if not):
    RECOVERY_PER_WINDOW segments lost per window (its largest congestion window), or
    RECOVERY_SHARE of its segments where the window is unknown; and it had data in flight
    (`in_flight`, of the data phase) most of the time, as a sender repairing holes does.
    Loss never explains time with nothing in flight: a throttle's pauses (nginx's
    limit_rate lost 6% in slow start, then sent in bursts 34% of the time) stay its own."""
    if not i.segments or not i.real_losses or (in_flight is not None and in_flight < IDLE_SHARE):
        return ""
    cwnd = i.sender.get("cwnd_max_segments")
    if cwnd:
        per_window = i.loss * cwnd
        if per_window >= RECOVERY_PER_WINDOW:
            return (
                f"{i.loss_words()}: {per_window:.1f} segments lost per window of up to {cwnd:.0f}, a hole "
                "repaired in every round trip (loss recovery, not a program with nothing to send)"
            )
        return ""
    if i.loss >= RECOVERY_SHARE:
        return f"{i.loss_words()}: one segment in {1 / i.loss:.0f} repaired (loss recovery, not an idle program)"
    return ""


def application_veto(i: Inputs) -> str:
    """Why the sender's idleness cannot be called its program's ("" if nothing stands
    against it; loss recovery is the rules' to say first: in_recovery)."""
    samples = i.sending_samples
    if samples is not None and samples < MIN_SENDER_SAMPLES:
        return (
            f"only {samples:.0f} listing{'s' if samples != 1 else ''} of the sender "
            f"({host_name(i.sender_side)}) saw it send, fewer than the {MIN_SENDER_SAMPLES} a sender's verdict needs"
        )
    if unflagged(i):
        app = i.sender.get("app_limited_ratio", 0.0)
        return f"its kernel flagged it app-limited in {app:.0%} of the samples: it was not waiting for its program"
    if not i.remote_programs_seen:
        other = "the sender's" if i.sender_side == "remote" else "the receiving end's"
        return (
            f"the remote's programs could not be seen ({_remote_seen_words(i.remote_view)}): {other} program on the "
            "remote may hold it (an ssh sender waits for the channel window the receiving writer opens), and "
            "nothing on this host stands in for it"
        )
    kept = kept_from_cores(i)
    if kept:
        return kept
    return ""


# A program of this host that queued for a core this share of its life or more, and
# longer than it ran, was kept from running, not pacing itself: a throttled program sleeps
# (curl --limit-rate waited 0.1-5% of its life, beside CPU burners too).
KEPT_WAIT_SHARE = 0.25
KEPT_LIFE_SHARE = 0.5  # rules.BULK_SHARE: ... among those that lived this share of the transfer (the bulk work)


def kept_from_cores(i: Inputs) -> str:
    """Words, where a program of this host that did the bulk of the work waited for a core
    KEPT_WAIT_SHARE of its life and longer than it ran ("" if none did): the sender's
    idleness is then its CPU's (a busy host, a quota), not a program that chose its pace.
    ssh under a 20% quota on a host at load 10-12 waited 33-40% of its life and ran 5%;
    its sender looked idle (data in flight 13-39%) and was called application."""
    for label, v in sorted(i.programs.items()):
        side, _, name = label.partition(" ")
        seconds = v.get("seconds", 0.0)
        if side != "local" or seconds <= 0 or seconds < KEPT_LIFE_SHARE * i.duration:
            continue
        waited = v.get("run_queue_seconds", 0.0) / seconds
        if waited >= KEPT_WAIT_SHARE and waited > v.get("cpu_share", 0.0):
            return (
                f"{name} (this host) waited for a core {waited:.0%} of its {seconds:.1f} s and ran "
                f"{v.get('cpu_share', 0.0):.0%}: a program kept from its cores (a busy host, a CPU quota), not one "
                "that chose its pace"
            )
    return ""


def unflagged(i: Inputs) -> bool:
    """Whether the sender's kernel contradicts an idle program: it flagged the sender
    app-limited in fewer than APP_LIMITED_MIN of the samples, where the idleness rests on
    its backlog alone (data in flight IDLE_SHARE of the data phase or more, or unknown).
    A sender in flight nearly all the time with nothing unsent is app-limited in every
    round trip if its program is what it waits for (a program writing less than a window
    per round trip keeps the flag set), or window-bound with its queue just drained (the
    flag clear).  Not where its write queue stood empty most of the data phase (the
    kernel's own busy clock): the flag marks only the round trip after each gap, and
    tcp_info's copy of it keeps "the last non-app-limited or the highest app-limited" rate
    sample (tcp_rate.c: after an idle restart's small window, an app-limited one is rarely
    the highest), so a bursty throttle shows it in few samples however long it waited:
    nginx's limit_rate, empty 60-78% of the data phase, was flagged in 2-11% of them."""
    app = i.sender.get("app_limited_ratio")
    if app is None or app >= APP_LIMITED_MIN:
        return False
    in_flight = i.in_flight
    return in_flight is None or in_flight >= IDLE_SHARE


def _remote_seen_words(view: Mapping[str, float]) -> str:
    if not view:
        return "no listing of the remote's programs"
    if "programs_seen" in view:
        return f"{view['programs_seen']:.0f} of its programs found doing the work"
    return "no program of the transfer found on it"


def starved_remote(i: Inputs) -> str:
    """Words, where the remote was too starved of CPU to keep up ("" if not seen so): its
    programs' cgroup held by its quota THROTTLED_SHARE of the transfer, or, where the path
    lost nothing, its own listings late (LATE_SECONDS and LATE_SHARE of the transfer; on a
    busy host, beyond what this host's programs waited for a CPU) or, where this host was
    not busy, mostly unanswered."""
    view = i.remote_view
    said = []
    unhurried = remote_unhurried(i)
    if unhurried:
        # Its programs, sampled by those very listings, were not short of CPU: the listings'
        # lateness was this host's (its ssh and the stats command wait for a CPU on a busy
        # host) or the path's, not a starved remote's.
        view = {k: v for k, v in view.items() if k != "listing_late_max_seconds"}
    throttled = view.get("cpu_throttled_share")
    if throttled is not None and throttled >= THROTTLED_SHARE:
        said.append(f"its programs' cgroup was held by its CPU quota {throttled:.0%} of the transfer")
    expected, received = view.get("listings_expected"), view.get("listings_received")
    late = view.get("listing_late_max_seconds")
    excess, beyond = late, ""
    if (i.segments and i.loss >= LATE_LOSS_SHARE) or queued_toward_here(i):
        # Late listings are the path's delay as much as the remote's: behind retransmission
        # timeouts, or behind a standing queue on the way from the remote (they cross it:
        # a 256 kbit/s return way with a 1 s queue held an scp upload's listings 4.8 s).
        expected = late = excess = None
    elif busy_host(i):
        # On a busy host, unanswered listings are this host's as much as the remote's; a
        # late one counts only for its lateness beyond what this host's programs waited
        # for a CPU (a listing's ssh waits with them): a remote sshd at 5% of a core was
        # 6.4 s late where this host's programs waited 1.2 s; an unstarved one at load
        # 10, 1.7 s.
        expected = None
        waited = max(busy_shares(i).values(), default=0.0) * i.duration
        if late is not None:
            excess = late - waited
            beyond = f", {excess:.1f} s beyond this host's {waited:.1f} s of waits for a CPU"
    # A listing crosses the path: only what is beyond LISTING_RTTS of its round trips is late.
    crossing = LISTING_RTTS * (i.rtt or 0.0)
    if late is not None and excess is not None and excess - crossing >= max(LATE_SECONDS, LATE_SHARE * i.duration):
        if crossing >= 0.1:
            beyond += f", {crossing:.1f} s of it what {LISTING_RTTS} round trips take"
        said.append(f"its own listings came up to {late:.1f} s late ({late / i.duration:.0%} of the transfer){beyond}")
    # None answered at all is not counted here: a remote that cannot be asked (a broken
    # stats_command) answers none either; its lateness, where measured, still says it.
    if expected and expected >= MIN_LISTINGS and received and received < ANSWERED_SHARE * expected:
        said.append(f"it answered {received:.0f} of {expected:.0f} listings")
    if not said:
        return ""
    return "the remote was starved of CPU: " + ", ".join(said)


def queued_toward_here(i: Inputs) -> float | None:
    """The standing queue on the way from the remote to this host, in seconds, where the
    capture's TCP timestamps measured one (Result.one_way: the ACKs' way of an upload, the
    data's of a download; a queue as bounds.return_queue counts one), else None."""
    key = "ack_queue_seconds" if i.one_way.get("data_up") == 1.0 else "data_queue_seconds"
    queue = i.one_way.get(key)
    if queue is None or not i.rtt or queue < max(bounds.QUEUE_SHARE * i.rtt, bounds.QUEUE_SECONDS):
        return None
    return queue


UNHURRIED_WAIT = 0.1  # a remote program that queued for a core less than this share of its life had one


def remote_unhurried(i: Inputs) -> bool:
    """Whether the remote's programs were seen doing the work (remote_programs_seen) and
    none of them was short of CPU: each queued for a core less than UNHURRIED_WAIT of its
    life, its cgroup held by a CPU quota less than THROTTLED_SHARE of the time (a starved
    program waits in the run queue, throttled or not: a remote sshd at 5% of a core waited
    most of its life).  Then a late listing says nothing of the remote's CPU: beside CPU
    burners on this host (load 7-12, this host's transfer programs asleep most of the
    time), an unstarved remote whose nginx queued under 1% of its life answered a listing
    3.1-3.6 s late."""
    if not i.remote_programs_seen:
        return False
    remote = [v for name, v in i.programs.items() if name.startswith("remote ")]
    if not remote or i.remote_view.get("cpu_throttled_share", 0.0) >= THROTTLED_SHARE:
        return False
    return all(
        v.get("seconds", 0.0) > 0
        and v.get("run_queue_seconds", 0.0) / v["seconds"] < UNHURRIED_WAIT
        and v.get("cpu_throttled_share", 0.0) < THROTTLED_SHARE
        for v in remote
    )


def remote_not_ruled_out(i: Inputs) -> str:
    """Words, where the remote's programs may have held the transfer and nothing seen rules
    them out ("" where something does): a remote program holds a transfer only by feeding
    the sender too little (a sender with nothing unsent) or by reading too slowly (the
    window: its rule comes first).  So the remote is ruled out by a sender seen with unsent
    data in BACKLOG_SHARE of at least MIN_SENDER_SAMPLES of its listings (network-limited:
    no program of either end kept it waiting), or by the remote's programs seen doing the
    work for SEEN_SHARE of the transfer (the program rules judged them), unless their cgroup
    was held by its CPU quota BUSY_SHARE of the time (as long as this host waited to be
    called busy: a remote sshd at 5% of a core throttled 20% of a 64 MiB sftp download on
    a host whose programs waited 20% of it), and unless the set-up was slower than the
    physics allows by more than this host's waits explain (_slow_setup_not_ours: the same
    sshd's key exchange, 1.0 s beyond both, where its data phase ran unthrottled beside
    CPU burners).  Otherwise a residual verdict on this host (busy_host) would stand in
    for the remote unseen: a remote sshd held to 5% of a core, its programs seen for
    0.8-1.7 s of a 3-4 s scp download (the quota's throttling never read twice), the
    remote sender seen sending in one listing and flagged app-limited, was called a busy
    host at load 6 for this host's 11-14% of waits."""
    backlog = i.sender.get("sender_backlog_ratio")
    samples = i.sending_samples
    if backlog is not None and backlog >= BACKLOG_SHARE and (samples is None or samples >= MIN_SENDER_SAMPLES):
        return ""
    slow = _slow_setup_not_ours(i)
    if slow:
        return slow
    throttled = i.remote_view.get("cpu_throttled_share")
    if throttled is not None and throttled >= BUSY_SHARE:
        # Held by its quota as long as this host waited to be called busy: either may be why.
        return f"the remote's programs' cgroup was held by its CPU quota {throttled:.0%} of the time they were watched"
    remote = [v.get("seconds", 0.0) for name, v in i.programs.items() if name.startswith("remote ")]
    seen = max(remote, default=0.0)
    if i.duration > 0 and seen >= SEEN_SHARE * i.duration:
        return ""
    had = (
        f"the sender had unsent data in {backlog:.0%} of {samples or 0:.0f} listings"
        if backlog is not None
        else "the sender's backlog unknown"
    )
    return (
        f"the remote's programs could not be ruled out: {had}, and its programs were seen for {seen:.1f} s of the "
        f"{i.duration:.1f} s transfer ({_remote_seen_words(i.remote_view)})"
    )


def _slow_setup_not_ours(i: Inputs) -> str:
    """Words, where the set-up took longer than the physics allows (setup_seconds) by more
    than this host's programs queued for a CPU then, and the rest is at least BUSY_SHARE
    of the transfer ("" if not): time this host's waits do not explain, spent before the
    first data, where the remote's programs (a starved sshd's key exchange, a slow login)
    may have spent it."""
    most = setup_seconds(i)
    if most is None or i.data_start is None or i.duration <= 0:
        return ""
    local = [v for name, v in i.programs.items() if name.startswith("local ")]
    # The lab's delay line waiting for a CPU delays every packet of the set-up behind it.
    ours = sum(v.get("run_queue_seconds_before_data", 0.0) for v in local)
    ours += i.host_busy.get("delay_line", 0.0) * i.data_start
    slow = i.data_start - most - ours
    if slow < BUSY_SHARE * i.duration:
        return ""
    return (
        f"the set-up took {i.data_start:.2f} s, {slow:.2f} s beyond the {most:.2f} s a protocol's set-up takes on this "
        f"path and the {ours:.2f} s this host's programs queued for a CPU then (the remote's, a starved sshd's key "
        "exchange or a slow login, or the path's)"
    )


def busy_shares(i: Inputs) -> dict[str, float]:
    """This host's waits for a CPU as shares of the transfer, by what waited: the host
    view's where measured, else its programs' run-queue time (the samples') less what
    their cgroup's CPU quota explains (measure/programs.py host_wait_seconds)."""
    shares = {k: i.host_busy[k] for k in BUSY_PARTS if k in i.host_busy}
    if "transfer_programs" not in shares and i.duration > 0:
        local = [
            max(0.0, v.get("run_queue_seconds", 0.0) - v.get("cpu_throttled_share", 0.0) * v.get("seconds", 0.0))
            / i.duration
            for name, v in i.programs.items()
            if name.startswith("local ")
        ]
        if local:
            shares["transfer_programs"] = max(local)
    return shares


def busy_host(i: Inputs) -> str:
    """Words, where this host was busy (BUSY_SHARE of the transfer waiting for a CPU in one
    of BUSY_PARTS), else ""."""
    shares = busy_shares(i)
    waited = [f"{BUSY_PARTS[k]} {v:.0%}" for k, v in shares.items() if v >= BUSY_SHARE]
    if not waited:
        return ""
    load = f"; load average {i.host_busy['load1']:.1f}" if "load1" in i.host_busy else ""
    return f"this host was busy: waiting for a CPU, {', '.join(waited)} of the {i.duration:.1f} s transfer{load}"


# A program of this host on a core or queued for one this share of its life or more was
# held by the CPU (the program bound, bounds.programs, met within its tolerance: 1 / 1.25).
HOST_HELD_SHARE = 1 / (1 + bounds.TOLERANCE)


def host_held(i: Inputs) -> str:
    """Words, where this host's CPU is what held the transfer (busy_host as a bound: ""
    where it was not shown): a program of the transfer on this host (alive BULK of it) was
    on a core or queued for one HOST_HELD_SHARE of its life or more, and the time it queued
    for a core explains the missing rate: without the wait it would have gone at
    rate x runnable / used, which reaches (1 - TOLERANCE) of the lowest bound computed
    above the rate, or, with none computed, at least twice the rate (it waited as long as
    it ran).  Or the lab's delay line (the path itself, on this host's CPUs) waited for a
    CPU BUSY_SHARE of the transfer: every packet waits with it.  A program mostly asleep
    (waiting for the network, its socket) was not held by this host's CPU, however busy
    the host: a transfer at a tbf link's full rate beside burners, its programs asleep
    most of their life, is not busy_host."""
    delay = i.host_busy.get("delay_line", 0.0)
    if delay >= BUSY_SHARE:
        return f"the lab's delay line (the path, on this host's CPUs) waited for a CPU {delay:.0%} of the transfer"
    rate = i.steady_rate
    above = [b.rate for b in bounds.computed(i) if b.rate > (1 + bounds.TOLERANCE) * rate]
    target = min(above) if above else None
    best = ""
    for label, v in sorted(i.programs.items()):
        side, _, name = label.partition(" ")
        runnable, used = v.get("runnable_share", 0.0), v.get("cpu_share", 0.0)
        if side != "local" or v.get("seconds", 0.0) < SEEN_SHARE * i.duration or runnable < HOST_HELD_SHARE:
            continue
        # The rate this host's CPU allowed it (bytes per CPU-second x the share of a core
        # it got while it wanted one) must meet the rate: then the host's CPU held it.
        allowed = bounds.host_cpu(i, label, v)
        if allowed is not None and not allowed.meets(rate):
            continue
        throttled = v.get("cpu_throttled_share", 0.0)
        waited = max(0.0, runnable - used - throttled)
        unheld = rate * runnable / used if used > 0 else math.inf
        explains = unheld >= (1 - bounds.TOLERANCE) * target if target else waited >= used
        if not explains or waited <= 0:
            continue
        against = (
            f", {unheld / target:.0%} of the lowest bound above the rate ({human_rate(target)})"
            if target
            else " (no bound above the rate computed: it waited at least as long as it ran)"
        )
        best = (
            f"{name} (this host) was on a core or queued for one {runnable:.0%} of its {v.get('seconds', 0.0):.1f} s, "
            f"used {used:.0%} of a core and waited {waited:.0%} for one: without the wait it would have gone at "
            f"{human_rate(unheld) if math.isfinite(unheld) else 'any rate'}{against}"
            + (f"; {allowed.said(rate)}" if allowed is not None else "")
        )
    return best


def lost_through_transfer(slow_ramp: float, cost: float) -> str:
    """Words, where the time lost below the steady rate lies through the transfer, not at
    its start ("" if not): the data phase lost more beyond what slow start can take
    (`slow_ramp`) than the start itself can have cost (`cost`: set-up and slow start).  A
    reader that takes 4 MiB and sleeps a second, over and over, closes the window in every
    sleep: its lost time is in every burst, and no larger file would average nearer the
    burst rate."""
    if slow_ramp <= 0 or slow_ramp < cost:
        return ""
    return (
        # ("lost" is said of segments only: a reader takes time words for a loss claim.)
        f"the data phase took {slow_ramp:.2f} s longer than slow start can, more than the {max(cost, 0.0):.2f} s the "
        "start can have cost: the time went through the transfer, not at its start"
    )


def held_by_busy_host(i: Inputs, name: str, side: str, program: Mapping[str, float]) -> str:
    """Words, where a program of this host that was on a core or queued for one nearly all
    its life (the cpu rule's) was held by this host's other programs rather than by its
    own need for a core ("" if not): it waited for a core at least as long as it ran on
    one (given the cores it waited for, it would have gone twice as fast or more), its
    cgroup's CPU quota did not hold it (throttled less than THROTTLED_SHARE of the time:
    a quota's waits are the program's own limit, cpu), and this host was busy (busy_host).
    Not said where its cgroups could not be read (a quota cannot be ruled out), nor of the
    remote's programs (their host is not this one).  Six CPU burners on 2 cores: curl at
    16% of a core, waiting 77%."""
    throttled = program.get("cpu_throttled_share")
    if side != "local" or throttled is None or throttled >= THROTTLED_SHARE:
        return ""
    used = program.get("cpu_share", 0.0)
    waited = program.get("runnable_share", 0.0) - used
    if waited - throttled < used:
        return ""
    busy = busy_host(i)
    if not busy:
        return ""
    return (
        f"{name} (this host) was on a core or queued for one {program.get('runnable_share', 0.0):.0%} of its "
        f"{program.get('seconds', 0.0):.1f} s but used {used:.0%} of a core and waited {waited:.0%} for one, "
        f"no CPU quota holding it (its cgroup throttled {throttled:.0%} of the time): other programs held its "
        f"cores; {busy}"
    )


def contradiction(reason: str, side: str, i: Inputs) -> str:
    """What in the verdict's own inputs says the opposite of it ("" if nothing): the last
    check before a verdict is given (a test holds that the rules never reach it)."""
    sender = i.sender
    busy = sender.get("busy_seconds", 0.0)
    returning = bounds.ack_clock(i)
    if reason == "link_capacity" and not (returning and returning.meets(i.steady_rate)):
        # (The return path's capacity is what its standing queue shows it carried: no
        # estimate of the data way's is needed, nor is the rate near it.)
        share = i.path_share(i.steady_rate)
        if share is None:
            return "link_capacity without a path estimate"
        if share > STALE_SHARE:
            return f"link_capacity at {share:.0%} of the path: the estimate is stale"
    if reason == "congestion" and not i.real_losses and not i.ce_rounds:
        return "congestion without losses or CE marks" if i.retransmits else "congestion without retransmissions"
    if reason in ("receive_window", "send_buffer") and busy > 0:
        key = "rwnd_limited_seconds" if reason == "receive_window" else "sndbuf_limited_seconds"
        kind = "tcp_rmem" if reason == "receive_window" else "tcp_wmem"
        bound = bounds.receive_window(i) if reason == "receive_window" else bounds.send_buffer(i)
        share = sender.get(key, 0.0) / busy
        met = bound is not None and bound.meets(i.steady_rate) and bounds.corroborated(bound, share, CORROBORATED_SHARE)
        if sender.get(key, 0.0) / busy < 0.3 and not i.maxed(kind, sender.get(key, 0.0) / busy) and not met:
            return (
                f"{reason} with a clock share of {sender.get(key, 0.0) / busy:.0%}, no buffer at its maximum and no "
                "bound met"
            )
    if reason == "application" and side == i.sender_side and unflagged(i):
        app = sender.get("app_limited_ratio", 0.0)
        return f"application with the sender app-limited in {app:.0%} of the samples and in flight most of the time"
    unseen = side == "remote" and reason in ("cpu", "disk", "application") and not i.remote_programs_seen
    if unseen and not (reason == "cpu" and starved_remote(i)):
        return f"{reason} on the remote, whose programs could not be seen"
    return ""
