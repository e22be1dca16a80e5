"""The committed rules under Prometheus's own rule engine: promtool runs every unit test in
prometheus/tests (simulated days of batches, regressions, failures and stale series:
about a minute, hence e2e; tests/unit/test_rules.py checks the generator and the tests'
coverage)."""

from __future__ import annotations

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
    proc = subprocess.run([promtool, "test", "rules", *map(str, tests)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
