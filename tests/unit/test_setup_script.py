"""scripts/setup.sh as a new user runs it (issue 38): without --test it installs the
package alone, never the [test] extras (a 750 MB venv the demo does not need), and says
what it does.  The real script, run on a copy of the repository's layout; apt, dpkg and
pip are stubs that record what they were asked (nothing is installed)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def stub(path: Path, body: str) -> None:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize(("flag", "target"), [((), "."), (("--test",), ".[test,report]")])
def test_setup_installs_the_test_extras_only_with_test(tmp_path: Path, flag: tuple[str, ...], target: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("scripts/setup.sh runs as root")
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    calls = tmp_path / "calls"
    stub(bin_ / "dpkg-query", "printf 'install ok installed'")  # every Debian package there
    stub(bin_ / "apt-get", f'echo apt-get "$@" >> {calls}; exit 1')  # never asked
    stub(bin_ / "go", "echo go1.23.1")  # `go env GOVERSION`: a usable Go
    venv = repo / ".venv" / "bin"
    venv.mkdir(parents=True)
    stub(venv / "python", "exit 0")
    stub(venv / "pip", f'echo pip "$@" >> {calls}')
    stub(venv / "bigbinf-exporter", "echo 'bigbinf 0.0.0'")
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", str(repo / "scripts" / "setup.sh"), *flag], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    asked = calls.read_text().splitlines()
    assert not [line for line in asked if line.startswith("apt-get")]
    installs = [line for line in asked if line.startswith("pip install") and "-e" in line.split()]
    # pip's own output (each package, its download's progress): not silenced.
    assert installs == [f"pip install -e {target}"]
    # It says what it installs, how much and how long it took.
    out = done.stdout
    assert "setup: installing bigbinf" in out and "MB in .venv" in out
    assert "setup: Python packages installed" in out and "setup: done in" in out
    # Run again (the demo runs setup every time): the same pyproject.toml is not installed again.
    calls.unlink()
    again = subprocess.run(
        ["bash", str(repo / "scripts" / "setup.sh"), *flag], env=env, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0, again.stderr
    assert not calls.exists() or not [c for c in calls.read_text().splitlines() if c.startswith("pip install")]
    assert "setup: bigbinf's Python packages are in .venv already" in again.stdout
    # A changed pyproject.toml is.
    (repo / "pyproject.toml").write_text("# changed\n")
    changed = subprocess.run(
        ["bash", str(repo / "scripts" / "setup.sh"), *flag], env=env, capture_output=True, text=True, timeout=60
    )
    assert changed.returncode == 0, changed.stderr
    assert f"pip install -e {target}" in calls.read_text().splitlines()
