"""Evidence lines the truth contradicts (issue 42, item 5): a verdict's evidence read back
from its words, as a reader of the journal sees it, and held to what really happened
(tests/support/truth.py), not to the rule that chose it (that is tests/support/evidence.py):

- loss claimed ("segments lost", "the bottleneck drops", "a loss of 0.4%") where nothing
  on the path or in either host dropped a packet;
- another flow claimed ("another flow on the bottleneck", "cross traffic", "competing")
  where nothing but the transfer crossed the remote's interface;
- a window or buffer claimed where the setting says otherwise: a buffer larger than that
  end's maximum allows, or a limit by a buffer that could grow past four times the path's
  bandwidth-delay product (autotuning on, no route window, window scaling on at both
  ends), or a receive window on the side that does not receive (a send buffer on the side
  that does not send);
- a route's `window` metric claimed where that end's route has none;
- a standing queue on the return path (the ACKs' way) claimed where the router's shaper
  on that way never held a packet back (0 overlimits);
- CE marks claimed ("about N of M round trips marked CE by the path") where the path
  marked none (the router's nft counter of CE marks and the receiver's IpExtInCEPkts both
  0), or far more marked round trips than the path marked packets (each needs a mark).

Pure: (evidence, truth) in, what contradicts out; unit-tested in tests/unit/test_against_truth.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Packets or bytes another flow must have moved across the remote's interface to count as
# one: the monitor's own listings over ssh move a few hundred kB in a run.
OTHER_FLOW_BYTES = 2_000_000
OTHER_FLOW_SHARE = 0.1  # ... or this share of the transfer's bytes, whichever is more
ROOM = 4  # a buffer whose maximum allows this many BDPs never holds the rate

_LOSS = re.compile(r"\b(?:drops?|dropped|loss(?:es)?|lost|lossy|holes?)\b", re.IGNORECASE)
# What before a loss word says there was none ("no loss", "0 lost", "spurious", "probes").
_NOT_LOSS_BEFORE = re.compile(
    r"(?:\bno|\bwithout|\bnot|\bnever|\bnothing|\bzero|(?<![\d.])0|\bspurious(?:ly)?|\bprobes?|\btime|"
    r"\bneither|\bnor|\bcould not|\bestimate|\bpath's estimate)\s+(?:\w+\s+){0,2}$",
    re.IGNORECASE,
)
_NOT_LOSS_AFTER = re.compile(r"^\s*(?:0\b|0\.0+%|none\b|nothing\b|bound\b.*?\b0\.0+%)", re.IGNORECASE)
_FLOW = re.compile(r"\b(?:another flow|other flows?|cross[- ]traffic|competing (?:flow|traffic)|a second flow)\b", re.I)
_NOT_FLOW_BEFORE = re.compile(r"(?:\bno|\bwithout|\bnot|\bnever|\bnor)\s+(?:\w+\s+){0,2}$", re.IGNORECASE)
_RECEIVE = re.compile(r"\breceive (?:window|buffer)|\breceiver's (?:window|buffer)|\brwnd\b|\btcp_rmem\b", re.I)
_SEND = re.compile(r"\bsend(?:er's)? buffer|\bsndbuf\b|\btcp_wmem\b", re.IGNORECASE)
_SIZE_AFTER = re.compile(r"^[^;]{0,60}?\((\d+) B\)")  # words.human_bytes: "131.07 kB (131072 B)"
_ROUTE_WINDOW = re.compile(r"\broute's `window` metric", re.IGNORECASE)
# The marked round trips are an estimate (the echoed segments over the sender's mean
# window, below the window a mark arrives in where marks come at the window's peaks:
# 0.82-1.75 times the marks at random 0.5%, where each marked round trip has one, and 2.14
# in a CI run at 0.6%, 77 of 36); more than this many times the packets the path marked
# is no estimate of them.
CE_ROUNDS_OVER = 2.5
_CE_MARKED = re.compile(r"about (\d+) of \d+ round trips marked CE by the path")
_SIDE_BEFORE = {"remote": re.compile(r"\bthe remote's\s+$", re.I), "local": re.compile(r"\bthis host's\s+$", re.I)}


def _claims(pattern: re.Pattern[str], not_before: re.Pattern[str], text: str) -> list[str]:
    found = []
    for match in pattern.finditer(text):
        before = text[max(0, match.start() - 40) : match.start()]
        after = text[match.end() : match.end() + 30]
        if not_before.search(before) or (pattern is _LOSS and _NOT_LOSS_AFTER.search(after)):
            continue
        found.append(text[max(0, match.start() - 30) : match.end() + 30].strip())
    return found


def _side_of(text: str, start: int, default: str) -> str:
    before = text[max(0, start - 20) : start]
    for side, pattern in _SIDE_BEFORE.items():
        if pattern.search(before):
            return side
    return default


def _other_flow(truth: Mapping[str, Any]) -> bool:
    least = max(OTHER_FLOW_BYTES, OTHER_FLOW_SHARE * truth.get("transfer_bytes", 0))
    return truth.get("other_bytes", 0) > least


def contradicted(evidence: str, truth: Mapping[str, Any], side: str = "") -> list[str]:
    """The claims in `evidence` that `truth` contradicts ([] if none).  `side`: the
    verdict's side, for a window or buffer named without one."""
    found = []
    if truth.get("dropped", 0) == 0:
        found += [f"loss claimed, nothing dropped: {c!r}" for c in _claims(_LOSS, _NOT_LOSS_BEFORE, evidence)]
    if not _other_flow(truth):
        found += [
            f"another flow claimed, {truth.get('other_bytes', 0)} B besides the transfer: {c!r}"
            for c in _claims(_FLOW, _NOT_FLOW_BEFORE, evidence)
        ]
    claimed = "the return path (the ACKs' way) held a standing queue" in evidence
    if claimed and "not the return path" not in evidence and truth.get("return_way_qdisc_overlimits") == 0:
        found.append("a standing queue on the return path claimed, its shaper never held a packet back")
    for match in _CE_MARKED.finditer(evidence):
        rounds = int(match.group(1))
        marks = max(truth.get("path_nft_marked_ce", 0), truth.get(f"{truth.get('receiver', '')}_ce_received", 0))
        if marks == 0 or rounds > CE_ROUNDS_OVER * marks:
            found.append(f"CE marks claimed, the path marked {marks} packets: {match.group(0)!r}")
    for match in _ROUTE_WINDOW.finditer(evidence):
        where = side if side in ("local", "remote") else truth.get("receiver", "")
        if f"{where}_route_window" in truth and not truth[f"{where}_route_window"]:
            words = evidence[max(0, match.start() - 40) : match.end() + 20].strip()
            found.append(f"a route window claimed where {where}'s route has none: {words!r}")
    for pattern, key, role in ((_RECEIVE, "rmem_max", "receiver"), (_SEND, "wmem_max", "sender")):
        for match in pattern.finditer(evidence):
            if _NOT_FLOW_BEFORE.search(evidence[max(0, match.start() - 30) : match.start()]):
                continue  # "no receive window", "not the send buffer"
            where = _side_of(evidence, match.start(), side or truth.get(role, ""))
            words = evidence[max(0, match.start() - 20) : match.end() + 40].strip()
            if where in ("local", "remote") and where != truth.get(role):
                found.append(f"a {key[:4]} buffer on the {where} side, which is not the {role}: {words!r}")
                continue
            maximum = truth.get(f"{where}_{key}")
            size = _SIZE_AFTER.search(evidence[match.end() :])
            if size and maximum and int(size.group(1)) > maximum:
                found.append(f"a buffer of {size.group(1)} B where {where}'s {key} is {maximum}: {words!r}")
            if _buffer_has_room(truth, where, key):
                found.append(
                    f"a {key[:4]} limit where {where}'s {key} {maximum} allows {ROOM}x the BDP "
                    f"{truth.get('bdp_bytes')}: {words!r}"
                )
    return found


def _buffer_has_room(truth: Mapping[str, Any], where: str, key: str) -> bool:
    """Whether `where`'s setting lets its buffer grow past ROOM x the path's BDP."""
    maximum, bdp = truth.get(f"{where}_{key}"), truth.get("bdp_bytes")
    if not maximum or not bdp or truth.get(f"{where}_route_window"):
        return False
    # A listener there with its own buffer below that (SO_RCVBUF/SO_SNDBUF: a program's
    # setting, not the sysctl's) holds its connections whatever the maximum.
    own = truth.get(f"{where}_listen_{'rcvbufs' if key == 'rmem_max' else 'sndbufs'}") or []
    if any(b < ROOM * bdp for b in own):
        return False
    if key == "rmem_max" and 0 in (truth.get("local_window_scaling"), truth.get("remote_window_scaling")):
        return False  # no window scaling: no window above 65535 B whatever the buffer
    if key == "rmem_max" and truth.get(f"{where}_moderate_rcvbuf") == 0:
        return maximum > 0 and truth.get(f"{where}_rmem_default", 0) >= ROOM * bdp
    return bool(maximum >= ROOM * bdp)
