"""The verdict's confusion matrix, the path (issue 23): loss on the data path (with and
without a capped buffer), loss on the ACK path only, a plain shaped link, the demo's link
and a policer.
tests/support/verdicts.py says how each cause is induced; benchmarks/verdict_matrix.py
prints the whole table."""

from __future__ import annotations

import pytest

from bigbinf.config import Config

from ..support import verdicts
from ..support.verdicts import Cause, Outcome

pytestmark = pytest.mark.lab
LABS = ("lossy", "shaped", "policed", "demo")
CAUSES = [c for c in verdicts.CAUSES if c.lab in LABS]
OUTCOMES: list[Outcome] = []


@pytest.fixture(scope="module")
def labs(make_module_lab) -> dict[str, Config]:
    return {name: verdicts.matrix_lab(make_module_lab, name, CAUSES) for name in LABS}


@pytest.mark.parametrize("cause", CAUSES, ids=lambda c: f"{c.name}-{c.protocol}-{c.direction}")
def test_the_verdict_names_the_cause(labs: dict[str, Config], cause: Cause) -> None:
    verdicts.check_cause(labs[cause.lab], cause, OUTCOMES)


def test_at_least_95_percent_of_the_runs_are_right() -> None:
    right, runs = verdicts.hit_rate(OUTCOMES)
    assert runs, "no cause ran"
    assert right >= 0.95 * runs, f"{right} of {runs}"
