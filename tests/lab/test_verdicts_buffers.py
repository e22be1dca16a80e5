"""The verdict's confusion matrix, buffers (issue 23): 256 KiB caps at either end of a 1 MB
BDP path, and parallel streams each bound by a capped window.  tests/support/verdicts.py
says how each cause is induced; benchmarks/verdict_matrix.py prints the whole table."""

from __future__ import annotations

import pytest

from bigbinf.config import Config

from ..support import verdicts
from ..support.verdicts import Cause, Outcome

pytestmark = pytest.mark.lab
CAUSES = [c for c in verdicts.CAUSES if "buffer cap (" in c.name or "streams" in c.name]
OUTCOMES: list[Outcome] = []


@pytest.fixture(scope="module")
def wan(make_module_lab) -> Config:
    return verdicts.matrix_lab(make_module_lab, "wan", CAUSES)


@pytest.mark.parametrize("cause", CAUSES, ids=lambda c: f"{c.name}-{c.protocol}-{c.direction}")
def test_the_verdict_names_the_cause(wan: Config, cause: Cause) -> None:
    verdicts.check_cause(wan, cause, OUTCOMES)


def test_at_least_95_percent_of_the_runs_are_right() -> None:
    right, runs = verdicts.hit_rate(OUTCOMES)
    assert runs, "no cause ran"
    assert right >= 0.95 * runs, f"{right} of {runs}"
