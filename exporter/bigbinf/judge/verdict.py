"""The verdict of one transfer: its inputs assembled, the rules applied in their order,
the physics' vetoes heard, the next step said (the room's entry point: measure/transfer.py
calls `judge_limit`), and whether a run belongs in its series' baselines."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import replace

from bigbinf.judge import vetoes
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.rules import Limit, startup, steady_limit
from bigbinf.judge.steps import next_step
from bigbinf.result import PathBaseline, Result

NO_TCP_STATE = "not judged: no TCP state (the data went over UDP: UDT has no kernel TCP state to read)"


def judge_limit(r: Result, baseline: PathBaseline | None) -> Limit | None:
    """The limiting factor of an ok transfer; None when there is nothing to judge by."""
    if r.outcome != "ok":
        return None
    if r.transport == "udp":
        return Limit("", NO_TCP_STATE)
    if not r.sender_tcp and not (r.tcp_local if r.direction == "download" else r.tcp_remote):
        return None
    i = Inputs.of(r, baseline)
    limit = rules_verdict(i)
    wrong = vetoes.contradiction(limit.reason, limit.side, i) if limit.reason else ""
    if wrong:
        # The last word: a verdict its own numbers contradict is withheld, saying why.
        limit = Limit("", f"withheld {limit.reason} ({wrong}): {limit.evidence}")
    if i.stale_estimate:
        limit = replace(limit, evidence=f"{limit.evidence}; {i.stale_estimate}")
    return replace(limit, next_step=next_step(limit, i, r))


def rules_verdict(i: Inputs) -> Limit:
    """What the rules say, before the last check: the steady phase's limit, or startup
    where the start cost more; an empty verdict carries what the physics withheld."""
    steady = steady_limit(i)
    start, not_startup = startup(i, steady)
    if start:
        return start
    if not_startup:  # what was slow at the start, named beside whatever held the rest
        return replace(steady, evidence=f"{steady.evidence}; {not_startup}")
    return steady


def leaves_out_of_baselines(r: Result) -> bool:
    """Whether a run says more about a busy host than about its series, so the regression
    test's baselines and plan-move's model leave it out: its verdict is busy_host, i.e.
    this host's waits for a CPU are what the judge found held it (rules.py: only where
    nothing of the path, the window, the loss or the programs did).  A run the path
    limited on a busy host still measured the path: it stays in (leaving out every run
    with some CPU wait would empty the baselines of a busy data-transfer node, and hide
    a regression measured on it).  A run never judged (UDP: no TCP state; no capture)
    has only the host's state it recorded to go by: left out where this host waited for
    a CPU (host_busy_recorded), whatever its transport, or a UDT run on a busy host would
    stand in the baselines beside TCP runs of the same host left out."""
    if r.limited_by == "busy_host":
        return True
    judged = bool(r.limited_by) or bool(r.limited_evidence and r.limited_evidence != NO_TCP_STATE)
    return not judged and bool(host_busy_recorded(r))


def host_busy_recorded(r: Result) -> str:
    """Words, where the run recorded this host busy (BUSY_SHARE of it waiting for a CPU in
    one of vetoes.BUSY_PARTS, Result.host_busy), else ""."""
    waited = [
        f"{vetoes.BUSY_PARTS[k]} waited {r.host_busy[k]:.0%}"
        for k in vetoes.BUSY_PARTS
        if r.host_busy.get(k, 0.0) >= vetoes.BUSY_SHARE
    ]
    return ", ".join(waited)


def with_limit(result: Result, baseline: PathBaseline | None, label: str) -> Result:
    """`result` with what limited it (judge_limit: verdict, evidence, side, next step)
    where that can be judged: a scheduled transfer's and a passive flow's alike."""
    try:
        limit = judge_limit(result, baseline)
    except Exception:  # a bug in judging never costs the measurement
        logging.getLogger(__name__).exception("%s: judging what limited it failed", label)
        return result
    if limit is None:
        return result
    return dataclasses.replace(
        result,
        limited_by=limit.reason,
        limited_evidence=limit.evidence,
        limited_side=limit.side if limit.reason else "",
        limited_next_step=limit.next_step,
    )
