"""The verdict's confusion matrix, buffers (issue 23): 256 KiB caps at either end of a 1 MB
BDP path, and parallel streams each bound by a capped window.  tests/support/verdicts.py
says how each cause is induced; benchmarks/verdict_matrix.py prints the whole table."""

from __future__ import annotations

import pytest

from ..support import verdicts

pytestmark = pytest.mark.lab
CAUSES = [c for c in verdicts.CAUSES if "buffer cap (" in c.name or "streams" in c.name]
matrix_labs, test_the_verdict_names_the_cause, test_the_hit_rate_is_not_below_95_percent = verdicts.module_tests(
    CAUSES, ("wan",)
)
