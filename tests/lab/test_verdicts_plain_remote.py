"""The verdict on a plain remote (issue 34, item 5): the remote host's causes of
tests/support/plain_causes_remote.py, each three runs through the real path
(tests/support/plain_site.py).  In CI the subset that matters most, one of each kind
(benchmarks/verdict_matrix.py --plain runs them all): the remote's sshd held to 5% of a
core with the stats command's listings going through it too (no remote program seen:
its lateness is the evidence) and with them unstarved (its cgroup's throttling is), a
slow remote disk under an sftp upload (the writer, sftp-server, in state D), nginx's
limit_rate, and the remote's tcp_wmem cap under an scp download."""

import pytest

from ..support import plain_site
from ..support.plain_causes_remote import CAUSES

pytestmark = pytest.mark.lab

CI = [
    c
    for c in CAUSES
    if (c.name, c.protocol, c.direction)
    in {
        ("a remote sshd held to 5% of a core (listings through it)", "scp", "download"),
        ("a remote sshd held to 5% of a core (listings unstarved)", "sftp", "download"),
        ("a slow remote disk under an upload", "sftp", "upload"),
        ("a remote throttle (nginx limit_rate)", "http-remote-throttle", "download"),
        ("a remote sender buffer cap", "scp", "download"),
    }
]
assert len(CI) == 5

plain_sites, test_the_verdict_names_the_cause, test_precision_and_coverage = plain_site.module_tests(CI)
