"""The verdict on a plain remote (issue 34, item 5): the path's causes of
tests/support/plain_causes_path.py, each three runs through the real path
(tests/support/plain_site.py).  The CI's share: the causes the issue found judged wrong
(loss-bound BBR into a short queue, both ways a sender looks idle; a 1 MiB scp upload on
80 ms; a policer with an iperf3 estimate and with a stale one) and the plain shaped link;
the full set runs in benchmarks/verdict_matrix.py --plain."""

import pytest

from ..support import plain_site
from ..support.plain_causes_path import CAUSES

pytestmark = pytest.mark.lab

CI = {
    ("a plain shaped link (iperf3 estimate)", "shaped", "http", "download"),
    ("loss-bound BBR into a short queue", "shortq", "scp", "upload"),
    ("loss-bound BBR into a short queue", "shortq", "http", "download"),
    ("a short file on a long round trip", "shortq", "scp", "upload"),
    ("a policer, iperf3 estimate", "open20", "http", "download"),
    ("a policer, stale estimate", "open20", "http", "download"),
}
CAUSES_FOR_CI = [c for c in CAUSES if (c.name, c.site, c.protocol, c.direction) in CI]

plain_sites, test_the_verdict_names_the_cause, test_precision_and_coverage = plain_site.module_tests(CAUSES_FOR_CI)
