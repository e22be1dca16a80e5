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

from bigbinf.judge.inputs import STALE_SHARE, Inputs
from bigbinf.judge.words import host_name

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
# counts only where neither is seen, and only past what those produced; a remote sshd at
# 5% of a core answered 1-4 of 27-40, 8-12 s late.
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
    if not i.segments or not i.retransmits or (in_flight is not None and in_flight < IDLE_SHARE):
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
    programs' cgroup held by its quota THROTTLED_SHARE of the transfer, or, where this host
    was not busy and the path lost nothing, its own listings late (LATE_SECONDS and
    LATE_SHARE of the transfer) or mostly unanswered."""
    view = i.remote_view
    said = []
    throttled = view.get("cpu_throttled_share")
    if throttled is not None and throttled >= THROTTLED_SHARE:
        said.append(f"its programs' cgroup was held by its CPU quota {throttled:.0%} of the transfer")
    expected, received = view.get("listings_expected"), view.get("listings_received")
    late = view.get("listing_late_max_seconds")
    if busy_host(i) or (i.segments and i.loss >= LATE_LOSS_SHARE):
        # Late listings are this host's wait or the path's, as much as the remote's.
        expected = late = None
    # A listing crosses the path: only what is beyond LISTING_RTTS of its round trips is late.
    crossing = LISTING_RTTS * (i.rtt or 0.0)
    if late is not None and late - crossing >= max(LATE_SECONDS, LATE_SHARE * i.duration):
        beyond = f", {crossing:.1f} s of it what {LISTING_RTTS} round trips take" if crossing >= 0.1 else ""
        said.append(f"its own listings came up to {late:.1f} s late ({late / i.duration:.0%} of the transfer{beyond})")
    # None answered at all is not counted here: a remote that cannot be asked (a broken
    # stats_command) answers none either; its lateness, where measured, still says it.
    if expected and expected >= MIN_LISTINGS and received and received < ANSWERED_SHARE * expected:
        said.append(f"it answered {received:.0f} of {expected:.0f} listings")
    if not said:
        return ""
    return "the remote was starved of CPU: " + ", ".join(said)


def busy_shares(i: Inputs) -> dict[str, float]:
    """This host's waits for a CPU as shares of the transfer, by what waited: the host
    view's where measured, else its programs' run-queue time (the samples')."""
    shares = {k: i.host_busy[k] for k in BUSY_PARTS if k in i.host_busy}
    if "transfer_programs" not in shares and i.duration > 0:
        local = [
            v.get("run_queue_seconds", 0.0) / i.duration for name, v in i.programs.items() if name.startswith("local ")
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


def contradiction(reason: str, side: str, i: Inputs) -> str:
    """What in the verdict's own inputs says the opposite of it ("" if nothing): the last
    check before a verdict is given (a test holds that the rules never reach it)."""
    sender = i.sender
    busy = sender.get("busy_seconds", 0.0)
    if reason == "link_capacity":
        share = i.path_share(i.steady_rate)
        if share is None:
            return "link_capacity without a path estimate"
        if share > STALE_SHARE:
            return f"link_capacity at {share:.0%} of the path: the estimate is stale"
    if reason == "congestion" and not i.retransmits:
        return "congestion without retransmissions"
    if reason in ("receive_window", "send_buffer") and busy > 0:
        key = "rwnd_limited_seconds" if reason == "receive_window" else "sndbuf_limited_seconds"
        kind = "tcp_rmem" if reason == "receive_window" else "tcp_wmem"
        if sender.get(key, 0.0) / busy < 0.3 and not i.maxed(kind, sender.get(key, 0.0) / busy):
            return f"{reason} with a clock share of {sender.get(key, 0.0) / busy:.0%} and no buffer at its maximum"
    if reason == "application" and side == i.sender_side and unflagged(i):
        app = sender.get("app_limited_ratio", 0.0)
        return f"application with the sender app-limited in {app:.0%} of the samples and in flight most of the time"
    unseen = side == "remote" and reason in ("cpu", "disk", "application") and not i.remote_programs_seen
    if unseen and not (reason == "cpu" and starved_remote(i)):
        return f"{reason} on the remote, whose programs could not be seen"
    return ""
