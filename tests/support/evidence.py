"""Each number in a verdict's evidence, read back from its words and checked against the
rule that chose the verdict (issue 34, item 4): an evidence line that contradicts its own
verdict is a defect, whatever the verdict.  Read from the text alone, as a reader of the
journal or the exporter's pages sees it, with the rules' thresholds (bigbinf.judge), so a
rule changed without its words (or the reverse) is caught.

Shared by the synthetic walk over the rules (tests/unit/test_judge_evidence.py) and the
lab's verdict matrix (tests/support/verdicts.py: tests/lab/test_verdicts_*.py,
benchmarks/verdict_matrix.py)."""

from __future__ import annotations

import re

from bigbinf.judge import bounds, rules, vetoes
from bigbinf.judge.inputs import CORROBORATED_SHARE, STALE_SHARE

# "A allows X MB/s (...); the transfer's steady rate was Y MB/s": a bound beside the rate
# (bounds.Bound.said), unless followed by "(not within N% of it)".
_BOUND_PAIR = re.compile(
    r"(advertised receive window|receive buffer|send buffer|the path's capacity|packets/s|of segments \(real|"
    r"the ACK clock|ssh's channel window)"
    r"[^;]*?allows "
    r"([\d.]+) MB/s[^;]*; the transfer's steady rate was ([\d.]+) MB/s(?: \(\d+ Mbit/s\))?( \(not within)?"
)
_BOUND_OF = {
    "advertised receive window": ("receive_window", 1 - bounds.TOLERANCE),
    "receive buffer": ("receive_window", bounds.BUFFER_LOW),
    "send buffer": ("send_buffer", bounds.BUFFER_LOW),
    "the path's capacity": ("link_capacity", 1 - bounds.TOLERANCE),
    "packets/s": ("link_capacity", 1 - bounds.TOLERANCE),
    "of segments (real": ("congestion", bounds.LOSS_LOW),
    "the ACK clock": ("link_capacity", 1 - bounds.TOLERANCE),
    "ssh's channel window": ("application", bounds.SSH_WINDOW_LOW),
}
# The most share of a bound a rate may be to meet it: the loss's any (docs/metrics.md: p per
# segment lost overstates p per congestion event, so the loss allows at least its bound).
_HIGH_OF = {"congestion": float("inf")}
# "N retransmitted of M segments (" or "..., K of them spurious (...), L lost (": the real losses.
_LOSSES = re.compile(r"(\d+) retransmitted of \d+ segments(?:, \d+ of them spurious \([^)]*\), (\d+) lost)?")


def _losses(text: str) -> list[int]:
    return [int(m.group(2) if m.group(2) is not None else m.group(1)) for m in _LOSSES.finditer(text)]


def _shares(text: str, *after: str) -> list[int]:
    """The first percentage after each phrase (every occurrence)."""
    found = []
    for phrase in after:
        for match in re.finditer(re.escape(phrase) + r"[^%]*?(\d+)%", text):
            found.append(int(match.group(1)))
    return found


def _path_shares(text: str) -> list[int]:
    """Every "N% of the path's X" (Inputs.share_of_path's words)."""
    return [int(v) for v in re.findall(r"(\d+)% of the path's", text)]


def _pct(share: float) -> int:
    """A threshold as the evidence rounds it (":.0%")."""
    return round(share * 100)


def contradictions(reason: str, side: str, evidence: str, slow_start_most: float | None = None) -> list[str]:
    """What in `evidence` says the opposite of `reason` (on `side`); [] if nothing.
    `slow_start_most`, where known: the longest slow start the transfer could have had."""
    found = []
    # Any verdict: a share of the path above what a path carries is a stale estimate, and
    # must be said so, never read as a share of a path.
    for share in _path_shares(evidence):
        if share > _pct(STALE_SHARE) and "stale" not in evidence and "a burst above it, not sustained" not in evidence:
            found.append(f"{reason or 'no verdict'} quoting {share}% of the path without calling the estimate stale")
    # Loss claimed only where something was lost: spurious retransmissions (DSACK) are not.
    claims = ("the bottleneck drops", "segments lost per window", "repaired")
    if any(c in evidence for c in claims) and not any(n > 0 for n in _losses(evidence)):
        found.append(f"{reason or 'no verdict'} claiming loss where nothing was lost")
    # A verdict's own bound, quoted beside the rate without "(not within": within the tolerance.
    for m in _BOUND_PAIR.finditer(evidence):
        named, low = _BOUND_OF[m.group(1)]
        allowed, rate = float(m.group(2)), float(m.group(3))
        if named != reason or m.group(4) or allowed < 0.05:
            continue
        if not low * allowed - 0.01 <= rate <= _HIGH_OF.get(named, 1 + bounds.TOLERANCE) * allowed + 0.01:
            found.append(f"{reason} whose bound {allowed} MB/s the steady rate {rate} MB/s does not meet")
    if "the path is full" in evidence and reason != "link_capacity":
        found.append(f"{reason} saying the path is full")
    if reason in ("receive_window", "send_buffer"):
        # Several streams: the rule reads their share together ("(31% of the 9.6 s they
        # were busy together)"); the per-stream range before it may start below 30%.
        together = re.findall(r"\((\d+)% of the [\d.]+ s they were busy together\)", evidence)
        shares = [int(v) for v in together] or _shares(
            evidence, "limited by the receive window", "limited by its send buffer"
        )
        # With the BDP unknown, a buffer at its maximum needs the clock only to corroborate
        # it (inputs.CORROBORATED_SHARE).
        least = CORROBORATED_SHARE if "(the BDP unknown)" in evidence else rules.LIMITED_SHARE
        # Or its bound met the steady rate (checked above): the window over the round trip.
        met = any(_BOUND_OF[m.group(1)][0] == reason and not m.group(4) for m in _BOUND_PAIR.finditer(evidence))
        for share in shares:
            if share < _pct(least) and not met:
                found.append(f"{reason} with a clock share of {share}%")
        if not shares and "grew to" not in evidence and not met:
            found.append(f"{reason} with neither a clock share, a buffer at its maximum nor its bound met")
    if reason == "application":
        idle_words = "unsent data in" in evidence or "data in flight" in evidence
        closed = re.search(r"zero window in (\d+) of the sender's (\d+) samples", evidence)
        least = max(rules.ZERO_WINDOWS, rules.ZERO_WINDOW_SHARE * int(closed.group(2))) if closed else 0
        if closed and int(closed.group(1)) < least:
            found.append(f"application with a zero window in {closed.group(1)} of {closed.group(2)} samples")
        windowed = any(m.group(1) == "ssh's channel window" and not m.group(4) for m in _BOUND_PAIR.finditer(evidence))
        if windowed:
            # ssh's window (rules._ssh_window): its bound met is the evidence, not idleness;
            # no reader or throttle may be blamed beside it.
            for blamed in ("kept the sender waiting", "sent no faster", "reads slower"):
                if blamed in evidence:
                    found.append(f"application by ssh's window blaming a program ({blamed!r})")
        elif "queue stood" not in evidence and not closed:  # the sender's side: its idleness is the evidence
            for share in _shares(evidence, "data in flight"):
                # Rounded (":.0%"): a share just under a threshold prints as it.
                if share > _pct(rules.IDLE_SHARE) and not any(
                    s <= _pct(rules.BACKLOG_SHARE) for s in _shares(evidence, "unsent data in")
                ):
                    found.append(f"application with data in flight {share}% of the time")
            for share in _shares(evidence, "unsent data in"):
                if share > _pct(rules.BACKLOG_SHARE) and not any(
                    s <= _pct(rules.IDLE_SHARE) for s in _shares(evidence, "data in flight")
                ):
                    found.append(f"application with unsent data in {share}% of the samples")
            # The kernel's flag marks only the round trip after each gap: a sender whose
            # write queue stood empty most of the data phase needs no share of it
            # (vetoes.unflagged).
            idle_most = any(s <= _pct(rules.IDLE_SHARE) for s in _shares(evidence, "data in flight"))
            for share in _shares(evidence, "app-limited in"):
                if share < _pct(vetoes.APP_LIMITED_MIN) and not idle_most:
                    found.append(f"application with the sender app-limited in {share}% of the samples")
            if not idle_words:
                found.append("application without evidence that the sender was idle")
            if "retransmitted" in evidence and "repaired" in evidence:
                found.append("application beside loss recovery")
        else:
            for share in _shares(evidence, "queue stood"):
                if share < _pct(rules.RECEIVER_BEHIND):
                    found.append(f"application with the receiver's queue {share}% full")
    if reason == "link_capacity":
        # The steady rate's share (the first said: the delivery rate's may follow).
        # At a clamped MSS the path's capacity is its packet rate (bounds.packet_rate), met
        # below the byte rate; its own pair is checked above.
        packets = evidence.startswith("the path's packet rate at this MSS")
        if packets and not _BOUND_PAIR.search(evidence):
            found.append("link_capacity by the packet rate without its bound beside the rate")
        # The return path's (the ACKs' way): its own bound, the ACK clock; the data way's
        # share is below the path's by what the ACKs cost.
        returning = evidence.startswith("the return path (the ACKs' way)")
        if returning and "the ACK clock allows" not in evidence:
            found.append("link_capacity on the return path without the ACK clock's bound beside the rate")
        for share in [] if packets or returning else _path_shares(evidence)[:1]:
            if share < _pct(rules.LINK_SHARE):
                found.append(f"link_capacity at {share}% of the path")
            if share > _pct(STALE_SHARE):
                found.append(f"link_capacity at {share}% of the path (the estimate is stale)")
        if "stale" in evidence:
            found.append("link_capacity against a stale estimate")
    # ECN: the path's CE marks are congestion events with nothing retransmitted (rules._ecn_marked).
    marked = re.search(r"about (\d+) of \d+ round trips marked CE by the path", evidence)
    unmarked = not (marked and int(marked.group(1)) > 0)
    if reason == "congestion" and re.search(r"(?<!\d)0 retransmitted|\(0\.00%", evidence) and unmarked:
        found.append("congestion without retransmissions")
    starved = evidence.startswith("the remote was starved of CPU")
    if reason == "cpu" and not starved:
        for share in _shares(evidence, "was on a core or queued for one"):
            if share < _pct(rules.CPU_EXPLAINS):
                found.append(f"cpu with a program runnable {share}% of its life")
    if reason == "cpu" and starved and side != "remote":
        found.append("a starved remote named on another side")
    if reason == "disk":
        for share in _shares(evidence, "waited on storage in"):
            if share < _pct(rules.DISK_SHARE):
                found.append(f"disk with {share}% of the samples on storage")
    if reason == "busy_host":
        shares = [int(v) for v in re.findall(r"(?:programs|capture|delay line) (\d+)%", evidence)]
        if not shares or max(shares) < _pct(vetoes.BUSY_SHARE):
            found.append(f"busy_host with waits for a CPU of {shares}%")
    if reason == "shared_path":
        if "a standing queue" not in evidence:
            found.append("shared_path without a standing queue: no other flow seen")
        for share in _path_shares(evidence)[:1]:
            if share > _pct(rules.LINK_SHARE):
                found.append(f"shared_path at {share}% of the path")
        for share in _shares(evidence, "data in flight"):
            if share < _pct(rules.IDLE_SHARE):
                found.append(f"shared_path with data in flight {share}%")
        if re.search(r"\(\d+\.\d\d%, ", evidence) and not re.search(r"\(0\.0\d%, ", evidence):
            found.append("shared_path beside loss")
    if reason == "startup":
        # The ramp named slow start, less what it spent queued for a CPU (the host's).
        match = re.search(r"\(slow start\) ([\d.]+) s(?: \(([\d.]+) s of it queued for a CPU\))?", evidence)
        if match and slow_start_most is not None:
            ramp = float(match.group(1)) - float(match.group(2) or 0.0)
            # Said to 0.01 s, and a wait for a CPU under 0.01 s is not said.
            if ramp > slow_start_most + 0.02:
                found.append(f"startup calling {ramp:.2f} s slow start, more than its {slow_start_most:.2f} s")
    if reason in ("cpu", "disk", "application") and side == "remote" and "could not be seen" in evidence:
        found.append(f"{reason} on the remote, whose programs could not be seen")
    return found
