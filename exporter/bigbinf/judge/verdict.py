"""The verdict of one transfer: its inputs assembled, the rules applied, the next step
said (the room's entry point: measure/transfer.py calls `judge_limit`)."""

from __future__ import annotations

from dataclasses import replace

from bigbinf.judge.inputs import Inputs
from bigbinf.judge.rules import Limit, startup, steady_limit
from bigbinf.judge.steps import next_step
from bigbinf.result import PathBaseline, Result


def judge_limit(r: Result, baseline: PathBaseline | None) -> Limit | None:
    """The limiting factor of an ok TCP transfer; None when there is nothing to judge by."""
    if r.outcome != "ok" or r.transport == "udp":
        return None
    if not r.sender_tcp and not (r.tcp_local if r.direction == "download" else r.tcp_remote):
        return None
    i = Inputs.of(r, baseline)
    steady = steady_limit(i)
    limit = startup(i, steady) or steady
    return replace(limit, next_step=next_step(limit, i, r))
