"""The verdict on a plain remote (issue 34, item 5): this host's causes of
tests/support/plain_causes_host.py, each three runs through the real path
(tests/support/plain_site.py).  The subset that matters most and is new to the matrix: a
busy host (CPU burners), a slow local disk under a download (the writer waits on a
throttled, sync-mounted file system) and a CPU quota on this host's programs; the rest
(the slow source of an upload, curl's throttle) run in benchmarks/verdict_matrix.py
--plain and, on a lab remote, in tests/lab/test_verdicts_programs.py."""

import pytest

from ..support import plain_site
from ..support.plain_causes_host import CAUSES

pytestmark = pytest.mark.lab

IN_CI = [
    ("a busy local host", "http", "download"),
    ("a slow local disk (the receiver's writes)", "scp", "download"),
    ("a CPU-bound local program (a quota)", "scp", "upload"),
]
CAUSES_FOR_CI = [c for c in CAUSES if (c.name, c.protocol, c.direction) in IN_CI]
assert len(CAUSES_FOR_CI) == len(IN_CI)

plain_sites, test_the_verdict_names_the_cause, test_precision_and_coverage = plain_site.module_tests(CAUSES_FOR_CI)
