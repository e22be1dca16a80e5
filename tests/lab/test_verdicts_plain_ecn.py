"""Verdicts from bounds on a plain remote (issue 42): ECN congestion marks without loss.
Both ends request ECN and the router between the sites marks CE on a share of the packets
instead of dropping any (tests/support/plain_causes_path.py ecn_marking); CUBIC halves its
window once per marked round trip as on a loss, so the loss bound with p from the marks
holds the rate and the verdict is congestion on the path, its evidence the marks ("N of M
... marked CE by the path"), never a loss (the truth: nothing dropped, the router's nft
counter of CE marks, the sender's TcpExtTCPDeliveredCE).  BBR, which does not slow for CE,
fills the link.  Two runs each through the real path (tests/support/plain_site.py); three
each: benchmarks/verdict_matrix.py --plain --causes "ECN marks without loss (CUBIC)"."""

import pytest

from ..support import plain_site
from ..support.plain_causes import CAUSES

pytestmark = pytest.mark.lab

IN_CI = {
    ("ECN marks without loss (CUBIC)", "http-cubic", "download"),
    ("ECN marks without loss (CUBIC)", "iperf3-cubic", "upload"),
}
CAUSES_FOR_CI = [c for c in CAUSES if (c.name, c.protocol, c.direction) in IN_CI]
assert len(CAUSES_FOR_CI) == len(IN_CI)

plain_sites, test_the_verdict_names_the_cause, test_precision_and_coverage = plain_site.module_tests(
    CAUSES_FOR_CI, runs=2, truth_checked=True
)
