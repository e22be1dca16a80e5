"""The committed rules under Prometheus's own rule engine: promtool runs every unit test in
prometheus/tests (simulated days of batches, regressions, failures and stale series:
about a minute, hence e2e; tests/unit/test_rules.py checks the generator and the tests'
coverage)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

PROM = Path(__file__).resolve().parents[2] / "prometheus"


def test_promtool_unit_tests_pass() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run scripts/setup.sh")
    tests = sorted((PROM / "tests").glob("*.yml"))
    assert tests
    # One promtool per file, all at once: each is single-threaded, and the slowest files
    # (days of samples) would otherwise run one after another on one core.  Go's collector
    # at GOGC=400 rather than 100: the same evaluations with about a quarter less CPU
    # (the module's promtools 95.7 -> 73.7 CPU-s; batches.test.yml's peak RSS 125 -> 270 MB).
    env = {**os.environ, "GOGC": "400"}
    procs = {
        test: subprocess.Popen(
            [promtool, "test", "rules", str(test)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        for test in tests
    }
    outputs = {test.name: (proc.communicate()[0], proc.returncode) for test, proc in procs.items()}
    assert {name: out for name, (out, returncode) in outputs.items() if returncode != 0} == {}
