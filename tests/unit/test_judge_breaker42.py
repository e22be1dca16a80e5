"""breaker42's runs on a plain remote (tests/unit/data/breaker42: the Results of its real
runs, with each run's truth beside them), re-judged.

- ssh's window over a deep queue: a 20 Mbit/s tbf with a 4 MB queue on a 40 ms path, the
  capacity unknown, CUBIC.  ssh's 2 MiB stood in flight, 1.5 MB of it queued (the RTT seen
  642-769 ms): its bound over that RTT was met at the shaper's 2.38 MB/s, and http on the
  same path ran as fast.  Main named application/ssh_window 10 of 10, and once that is
  refused, application (the sender waiting for its window): neither held it.
- A few CE marks on a full link: 4-5 marks in a 64 MiB CUBIC transfer on a 100 Mbit/s
  shaper, the rate 91-98% of the same path without marks, at 204-331% of the marks' loss
  bound: main named congestion/ecn.  Where the marks held the rate (the first packet
  marked, slow start ended at once) it sat at 97-103% of the bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bigbinf.judge import bounds, rules
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.verdict import judge_limit
from bigbinf.result import PathBaseline, Result

from ..support import evidence

DATA = Path(__file__).parent / "data" / "breaker42"


def run(name: str) -> tuple[dict, Result]:
    d = json.loads((DATA / f"{name}.json").read_text())
    return d, Result.from_json(d["result"])


def runs(cause: str) -> list[str]:
    return sorted(p.stem for p in DATA.glob(f"{cause}-[0-9].json"))


def test_the_fixtures_are_there() -> None:
    assert len(runs("ssh-bloat-scp")) == 4 and len(runs("ssh-bloat-sftp-up")) == 3
    assert len(runs("ssh-window-control")) == 3 and len(runs("ecn-5-marks-link")) == 3


@pytest.mark.parametrize("name", runs("ssh-bloat-scp") + runs("ssh-bloat-sftp-up"))
def test_a_window_queued_at_a_full_link_is_neither_the_window_nor_a_program(name: str) -> None:
    d, r = run(name)
    assert d["verdict"] == "application" and d["detail"] == "ssh_window"  # what main said
    assert d["rtt_seen"] > 10 * d["rtt_min"]  # the truth: the queue ssh's surplus built
    limit = judge_limit(r, None)
    assert limit is not None and limit.reason == "", limit
    assert "its surplus stood in a queue at a bottleneck" in limit.evidence
    assert evidence.contradictions(limit.reason, limit.side, limit.evidence) == []
    # With the link's 20 Mbit/s configured, the link is named.
    site = PathBaseline(
        r.remote,
        0.0,
        rtt_min_seconds=d["rtt_min"],
        mtu_bytes=1500,
        bandwidth_bytes_per_second=20e6 / 8,
        bandwidth_source="configured",
    )
    known = judge_limit(r, site)
    assert known is not None and known.reason == "link_capacity", known


@pytest.mark.parametrize("name", runs("ssh-window-control"))
def test_the_window_alone_on_a_long_path_is_still_ssh_window(name: str) -> None:
    # 200 ms, no shaper: ssh's window allows 10.3 MB/s, the steady rate 8.75-9.36.
    _, r = run(name)
    limit = judge_limit(r, None)
    assert limit is not None and (limit.reason, limit.detail) == ("application", "ssh_window"), limit


# The runs whose marks held the rate (the breaker's score: the rate well below the
# unmarked control's, at 97-149% of the bound) and those where 4-5 marks cost nothing.
HELD = [*runs("ecn-5-marks-link"), *runs("ecn-5-marks-link-up"), "ecn-5-marks-late-2"]
COST_NOTHING = ["ecn-5-marks-late-0", "ecn-5-marks-late-1", *runs("ecn-5-marks-late-up"), "ecn-few-marks-link-up-2"]


@pytest.mark.parametrize("name", HELD)
def test_marks_that_held_the_rate_are_named(name: str) -> None:
    _, r = run(name)
    limit = judge_limit(r, None)
    assert limit is not None and (limit.reason, limit.detail) == ("congestion", "ecn"), limit


@pytest.mark.parametrize("name", COST_NOTHING)
def test_a_few_marks_far_below_the_rate_are_not_named(name: str) -> None:
    d, r = run(name)
    assert d["verdict"] == "congestion" and d["real_losses"] == 0  # main's, with nothing lost
    i = Inputs.of(r, None)
    marks = bounds.loss(i)
    assert marks is not None and i.steady_rate > rules.MARKS_HIGH * marks.rate  # 204-331% of it
    limit = judge_limit(r, None)
    assert limit is not None and limit.reason != "congestion", limit
