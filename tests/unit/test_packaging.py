"""packaging/: the systemd unit is unprivileged and hardened, and systemd-analyze accepts it.
tests/lab/test_unprivileged.py runs the exporter with the unit's user and capabilities."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ..support.exporter import ROOT
from ..support.systemd import SYSUSERS, UNIT, unit_capabilities, unit_settings


def test_the_unit_is_unprivileged_and_hardened() -> None:
    s = unit_settings()
    assert s["User"] == ["bigbinf"] and s["Group"] == ["bigbinf"]
    assert unit_capabilities() == ["CAP_NET_RAW"]  # the capture's packet socket, nothing more
    assert s["CapabilityBoundingSet"] == s["AmbientCapabilities"]
    for key, value in (
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("StateDirectory", "bigbinf"),
    ):
        assert s[key] == [value], key
    assert "ExecReload" in s and "-HUP" in s["ExecReload"][0]
    assert "u bigbinf - " in SYSUSERS.read_text()


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    """systemd-analyze verify (no systemd needs to run): the unit as shipped, with
    ExecStart pointed at this checkout's venv (verify insists the binary exists)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed (Debian package systemd)")
    unit = tmp_path / UNIT.name
    unit.write_text(UNIT.read_text().replace("/opt/bigbinf/.venv", str(ROOT / ".venv")))
    assert (ROOT / ".venv" / "bin" / "bigbinf-exporter").exists()
    proc = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # Warnings (an unknown or misspelt key) do not change the exit status: none allowed.
    assert proc.stderr.strip() == "", proc.stderr
