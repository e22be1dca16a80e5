"""A mesh-sized configuration (10 remotes x 20 protocols x 5 datasets x 2 directions)
passes --config.check and plans every series (its speed is in benchmarks/bench_metrics.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bigbinf.config import load_config
from bigbinf.service.rounds import series_of

from ..support.mesh import DATASETS, DIRECTIONS, PROTOCOLS, write_mesh_config

ROOT = Path(__file__).resolve().parents[2]


def test_mesh_config_passes_config_check_and_plans_every_series(tmp_path: Path) -> None:
    path = write_mesh_config(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(path), "--config.check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "configuration is valid" in proc.stdout + proc.stderr
    assert "warning" not in proc.stdout + proc.stderr
    config = load_config(path)
    assert config.metrics.payload_histograms is True
    series = series_of(config)
    expected = {
        (protocol, f"site{i:02d}", dataset, direction)
        for i in range(10)
        for protocol in PROTOCOLS
        for dataset in DATASETS
        for direction in DIRECTIONS
    }
    assert len(expected) == 2000
    assert {(s.protocol, s.remote, s.dataset, s.direction) for s in series} == expected
    assert len(series) == 2000


def test_payload_histograms_is_a_checked_boolean(tmp_path: Path) -> None:
    path = write_mesh_config(tmp_path, remotes=1, protocols=1, datasets=1, payload_histograms=False)
    assert load_config(path).metrics.payload_histograms is False
    path.write_text(path.read_text().replace("payload_histograms: false", "payload_histogram: false"))
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(path), "--config.check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "metrics.payload_histogram: unknown key 'payload_histogram'" in proc.stdout + proc.stderr
