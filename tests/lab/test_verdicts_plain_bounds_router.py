"""Verdicts from bounds on a plain remote (issue 42, item 5): a router's causes
(reordering without loss, an MSS clamp in a packet-rate-bound router, a path-MTU black
hole), two runs each through the real path (tests/support/plain_site.py), each run's
truth read from counters the product does not read (tests/support/truth.py).  Each cause:
the verdict and side it needs in the majority of runs (the black hole: the failure naming
it), no evidence line against its own verdict, and none that its truth contradicts
(tests/support/against_truth.py: loss where nothing was dropped, another flow where none
crossed the link, a window the settings say otherwise).  All of them, three runs each:
benchmarks/verdict_matrix.py --plain --causes ..."""

import pytest

from ..support import plain_site
from ..support.plain_causes import CAUSES

pytestmark = pytest.mark.lab

IN_CI = {
    ("reordering without loss", "iperf3", "upload"),
    ("an MSS clamp (536) in a packet-rate-bound router", "http", "download"),
    ("a path-MTU black hole", "http", "download"),
}
CAUSES_FOR_CI = [c for c in CAUSES if (c.name, c.protocol, c.direction) in IN_CI]
assert len(CAUSES_FOR_CI) == len(IN_CI)

plain_sites, test_the_verdict_names_the_cause, test_precision_and_coverage = plain_site.module_tests(
    CAUSES_FOR_CI, runs=2, truth_checked=True
)
