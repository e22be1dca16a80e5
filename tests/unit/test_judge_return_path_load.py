"""The slow, deep-queued return path under load (issue 42; CI at load 8-14 named
shared_path in 4 of 4 runs where no other flow crossed the path): real runs through a plain
remote (tests/unit/data/return_path_load: each stored Result with the baseline it was
judged with and its truth), re-judged as they were and with the one-way figures a busy
host gives.

- A userspace delay line that waits for a CPU delays both ways by its own queue (tens of
  ms at load 30: docs/metrics.md): the data way's one-way delay then stands above the
  standing queue's threshold beside the ACKs' 300 ms and more.  The old judge took any data
  way queue over the threshold as the data way's, so neither the ACK clock nor the
  return-path words applied, and the round trip alone said another flow.
- The capture carried the remote's timestamps but the pass fitted no clock (or saw too few
  ticks): the old judge read the missing delays as "the ways not told apart" and gave
  shared_path from the round trip alone.

A competing flow on the data way's bottleneck (its queue on the data way, the return way's
under 4 ms) is still shared_path."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from bigbinf.judge.verdict import judge_limit
from bigbinf.result import PathBaseline, Result

from ..support import evidence

DATA = Path(__file__).parent / "data" / "return_path_load"
RETURN_PATH = ["acks-way-http", "acks-way-scp", "return-configured-http"]
COMPETING = ["competing-flow-http", "competing-flow-scp"]


def run(name: str) -> tuple[dict[str, Any], Result, PathBaseline]:
    d = json.loads((DATA / f"{name}.json").read_text())
    return d, Result.from_json(d["result"]), PathBaseline.from_json(d["baseline"])


def with_one_way(r: Result, **figures: float | None) -> Result:
    """`r` with its one-way figures changed (None: the key absent)."""
    w = {**r.one_way, **{k: v for k, v in figures.items() if v is not None}}
    for k in [k for k, v in figures.items() if v is None]:
        w.pop(k, None)
    return dataclasses.replace(r, one_way=w)


def test_the_fixtures_are_real_runs_whose_truth_says_no_other_flow() -> None:
    for name in RETURN_PATH:
        d, r, _ = run(name)
        t = d["truth"]
        assert r.outcome == "ok" and r.direction == "upload"
        # The router's shaper on the return way queued (its overlimits), the data way's never.
        assert t["return_way_qdisc_overlimits"] > 1000 and t["data_way_qdisc_overlimits"] == 0, t
        assert t["other_bytes"] == 0, t
    for name in COMPETING:
        d, r, _ = run(name)
        assert d["truth"]["other_bytes"] > 10 * 2**20, d["truth"]  # the competing flow crossed the path


@pytest.mark.parametrize("name", RETURN_PATH)
def test_as_measured_the_return_path_is_named(name: str) -> None:
    _, r, baseline = run(name)
    limit = judge_limit(r, baseline)
    assert limit is not None and (limit.reason, limit.side, limit.detail) == ("link_capacity", "path", "ack_clock")


@pytest.mark.parametrize("name", RETURN_PATH)
@pytest.mark.parametrize("data_queue", [0.012, 0.030])
def test_a_delay_lines_own_queue_on_the_data_way_is_not_another_flow(name: str, data_queue: float) -> None:
    # The data way 12 or 30 ms above its least (the threshold: 20% of the 40 ms path, 8 ms),
    # the return way's queue as measured (62-380 ms): the ACKs' queue stands, not another
    # flow's.  The old judge: shared_path.
    _, r, baseline = run(name)
    ack = r.one_way["ack_queue_seconds"]
    busy = with_one_way(r, data_queue_seconds=data_queue, data_queue_floor_seconds=data_queue / 2)
    limit = judge_limit(busy, baseline)
    assert limit is not None and limit.reason != "shared_path", limit.evidence
    assert "another flow on the bottleneck" not in limit.evidence or "not shared_path" in limit.evidence
    assert evidence.contradictions(limit.reason, limit.side, limit.evidence) == [], limit.evidence
    if data_queue <= 0.2 * ack:
        # The data way's queue a fifth of the ACKs' or less: the ACK clock's bound is said.
        assert (limit.reason, limit.detail) == ("link_capacity", "ack_clock"), limit.evidence
    else:
        assert limit.reason == "", limit.evidence
        assert "mostly on the return path (the ACKs' way)" in limit.evidence


@pytest.mark.parametrize("name", RETURN_PATH)
def test_timestamps_whose_delays_the_pass_could_not_measure_withhold_shared_path(name: str) -> None:
    # The capture carried the remote's ticks, but no clock was fitted: no delays at all.
    _, r, baseline = run(name)
    unplaced = with_one_way(
        r,
        peer_ticks=r.one_way["samples"],
        **{k: None for k in r.one_way if k.endswith("_seconds") or k in ("peer_clock_hz", "samples")},
    )
    assert "data_queue_seconds" not in unplaced.one_way and "ack_queue_seconds" not in unplaced.one_way
    limit = judge_limit(unplaced, baseline)
    assert limit is not None and limit.reason == "", limit.evidence
    assert "could not be placed on either way" in limit.evidence and "not shared_path" in limit.evidence
    # No timestamps at all (none negotiated: no ticks) leaves the round trip to decide, as before.
    bare = with_one_way(unplaced, peer_ticks=0.0)
    limit = judge_limit(bare, baseline)
    assert limit is not None and limit.reason == "shared_path", limit.evidence


@pytest.mark.parametrize("name", COMPETING)
def test_a_competing_flows_queue_on_the_data_way_is_still_shared_path(name: str) -> None:
    d, r, baseline = run(name)
    assert d["limited_by"] == "shared_path"  # what the judge said when it ran
    assert r.one_way["data_queue_seconds"] > 0.008 > r.one_way["ack_queue_seconds"]
    limit = judge_limit(r, baseline)
    assert limit is not None and (limit.reason, limit.side) == ("shared_path", "path"), limit.evidence
    # With peer_ticks, as the pass records it now: the same.
    ticked = with_one_way(r, peer_ticks=r.one_way["samples"])
    limit = judge_limit(ticked, baseline)
    assert limit is not None and limit.reason == "shared_path", limit.evidence
