"""benchmarks/bench_analyse.py runs where the test extra (scapy) is not installed: its
--tools table leaves scapy's row out and says why, instead of crashing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# As an install without scapy: importing it fails and find_spec finds nothing.
WITHOUT_SCAPY = (
    "import runpy, sys; sys.modules['scapy'] = None; sys.argv = sys.argv[1:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def test_bench_analyse_tools_without_scapy(tmp_path: Path) -> None:
    bench = ROOT / "benchmarks" / "bench_analyse.py"
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_SCAPY, str(bench), "--tools", "--packets", "2000", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Analysis equal (every field): yes" in done.stdout
    assert "scapy: not installed, not timed (pip install 'bigbinf[test]')" in done.stdout
    assert "analyse_pcap (BIGBINF_ANALYSER, default auto)" in done.stdout  # the rest of the table
    assert "scapy PcapReader" not in done.stdout
