"""Verdicts from bounds on a plain remote (issue 42, item 5): a slow, deep-queued return
path (a 256 kbit/s tbf with a 1 s queue on the router's way toward this host: an
upload's ACKs), two runs through the real path (tests/support/plain_site.py).  The
verdict it needs: link_capacity on the path, its evidence the return path (the ACKs'
way) with the ACK clock's bound beside the rate, never another flow (nothing else crossed
the path); each run's truth from the router shaper's own counters on that way
(tests/support/truth.py return_way_qdisc_*), held to the evidence
(tests/support/against_truth.py).  Three runs each, and the path's capacity unknown:
benchmarks/verdict_matrix.py --plain --causes ..."""

import pytest

from ..support import plain_site
from ..support.plain_causes import CAUSES

pytestmark = pytest.mark.lab

IN_CI = {
    ("a slow deep-queued return path (the ACKs' way)", "http", "upload"),
    ("a slow deep-queued return path (return capacity configured)", "http", "upload"),
}
CAUSES_FOR_CI = [c for c in CAUSES if (c.name, c.protocol, c.direction) in IN_CI]
assert len(CAUSES_FOR_CI) == len(IN_CI)

plain_sites, test_the_verdict_names_the_cause, test_precision_and_coverage = plain_site.module_tests(
    CAUSES_FOR_CI, runs=2, truth_checked=True
)
