"""plan-move's model against real moves in the lab (issue 28), lean: rounds of 4, 8 and
16 MiB over a 100 Mbit/s link predict a 64 MiB move, which is then run.  The long proof
(1 and 4 GiB from 32-256 MiB rounds and a sweep, ten trials, and a link that changes
between peak and off-peak) is benchmarks/bench_moveplan.py (docs/benchmarks.md)."""

from __future__ import annotations

import dataclasses
import zoneinfo
from datetime import datetime

import pytest

from bigbinf import lab
from bigbinf.config import rate_bytes_per_second
from bigbinf.history.moveplan import plan, predict
from bigbinf.lab.layout import LabLayout
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.runs import runs_to
from bigbinf.service.collector import ExporterState
from bigbinf.service.rounds import RoundRunner

from .test_regression_lab import tbf_rate

pytestmark = pytest.mark.lab
UTC = zoneinfo.ZoneInfo("UTC")
MIB = 2**20


def test_a_move_takes_what_the_rounds_predict(make_lab) -> None:
    config = make_lab(
        link={"rate": "100mbit", "burst": "64KiB"},
        datasets={
            "f4m": {"file": "f4m.bin", "size": "4MiB"},
            "f8m": {"file": "f8m.bin", "size": "8MiB"},
            "f16m": {"file": "f16m.bin", "size": "16MiB"},
            "f64m": {"file": "f64m.bin", "size": "64MiB"},
        },
        protocols={"http": {}},
        servers=["nginx"],
        capture={"enabled": False},
    )
    assert config.lab is not None
    layout = LabLayout(config.lab)
    link = tbf_rate(layout.remote_ns, layout.remote_if)  # the kernel's rate: the physics
    assert link == rate_bytes_per_second("100mbit")
    runner = RoundRunner(config, ExporterState(), lab=lab.site)
    specs = plan_round(config, lab.site(config))
    rounds = [s for s in specs if s.dataset != "f64m"]
    for _ in range(3):
        assert runner.run_round(rounds) is not None
    results = list(runner.journal.read())
    runs = runs_to(results, "lab")
    # Nine ok runs, less those a busy host limited (judge.leaves_out_of_baselines: a CI run
    # beside three other workers judged one `busy_host`), which the model leaves out.
    assert [r.outcome for r in results].count("ok") == 9
    busy = sum(r.limited_by == "busy_host" for r in results)
    assert len(runs) == 9 - busy and busy <= 3, [r.limited_evidence for r in results if r.limited_by == "busy_host"]
    # Three real runs of one command are one command to plan-move (each ran in its own
    # private directory): what lets a sweep's setting that is the protocol's own merge.
    for size in {r.bytes for r in runs}:
        assert len({r.command for r in runs if r.bytes == size}) == 1, size
    assert all(r.command for r in runs)
    # The path's bandwidth estimate caps the rate, as plan-move and the exporter use it.
    the_plan = plan(runs, "lab", 64 * MIB, zone=UTC, bandwidth=link, level=0.99)
    assert the_plan.best is not None
    fit = the_plan.ranked[0][0]
    assert fit.sizes == (4 * MIB, 8 * MIB, 16 * MIB)
    move = next(s for s in specs if s.dataset == "f64m")
    for _ in range(2):
        hour = datetime.now(UTC).hour
        p = predict(fit, 64 * MIB, 1, hour, 0.99, cap=link)
        assert p.seconds >= 64 * MIB / link  # never faster than the shaped link
        result = run_transfer(dataclasses.replace(move), config, "move")
        assert result.outcome == "ok", result.error
        assert result.duration_seconds >= 64 * MIB / link  # physics: the link's rate bounds it
        assert p.lower <= result.duration_seconds <= p.upper, (p, result.duration_seconds)
