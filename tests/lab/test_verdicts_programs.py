"""The verdict's confusion matrix, the programs (issue 23): a file too short to leave slow
start, a remote and a local throttle, a slow disk under the sender, a CPU-bound sender
and receiver.  tests/support/verdicts.py says how each cause is induced;
benchmarks/verdict_matrix.py prints the whole table."""

from __future__ import annotations

import pytest

from ..support import verdicts

pytestmark = pytest.mark.lab
LABS = ("wan", "open")
CAUSES = [c for c in verdicts.CAUSES if c.lab in LABS and "buffer cap (" not in c.name and "streams" not in c.name]
matrix_labs, test_the_verdict_names_the_cause, test_the_hit_rate_is_not_below_95_percent = verdicts.module_tests(
    CAUSES, LABS
)
