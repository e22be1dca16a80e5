"""One transfer through the real path: lab sshd, tcpdump, analyser, verification.

Independent truths: the client veth's kernel counters, the test's own clock inside the same
command, the dataset's sha256 written by the lab, tshark's sequence analysis, /proc.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from pathlib import Path

import pytest

from bigbinf import lab
from bigbinf.config import Config, capture_directory
from bigbinf.lab import LabLayout
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer

from ..conftest import veth_counters

pytestmark = pytest.mark.lab
MiB = 1024 * 1024


def _only_spec(config: Config):
    specs = plan_round(config, lab.site(config))
    assert len(specs) == 1
    return specs[0]


def test_scp_download_wire_bytes_equal_kernel_counters_and_timing_matches(make_lab, tmp_path: Path) -> None:
    config = make_lab(
        link={"rate": "200mbit", "burst": "64KiB"}, datasets={"f64m": {"file": "f64m.bin", "size": "64MiB"}}
    )
    spec = _only_spec(config)
    # The same command, timed from inside by the test: a shell around scp that reads the
    # clock just before starting it and just after it exits.  One run, two clocks: on a
    # busy machine two separate runs differ by more than what is compared here.
    clock = tmp_path / "clock"
    timed = (
        "sh", "-c", f'date +%s.%N > {clock}.start; "$@"; status=$?; date +%s.%N > {clock}.end; exit $status',
        "sh", *spec.template,
    )  # fmt: skip
    spec = dataclasses.replace(spec, template=timed)

    before = veth_counters(config)
    result = run_transfer(spec, config, "test")
    after = veth_counters(config)

    assert result.outcome == "ok", result.error
    assert result.verified
    assert result.file_bytes == 64 * MiB
    # Everything on the veth during the call was captured, byte for byte (the lab has no
    # ARP/ND traffic, so the counters see only the transfer).
    assert result.wire_bytes_down == after["down"] - before["down"]
    assert result.wire_bytes_up == after["up"] - before["up"]
    assert result.packets_down == after["packets_down"] - before["packets_down"]
    assert result.packets_up == after["packets_up"] - before["packets_up"]
    assert result.capture_dropped == 0
    # Offloads are off: no frame is larger than a 1500-byte MTU frame, so the payload-size
    # histogram has nothing above 1472 (UDP) / 1460 (TCP).
    assert sum(result.payload_histogram["down"][9:]) == 0
    assert 1.0 < result.byte_ratio < 1.1

    # The duration is the command's, as a user would time it: never shorter than scp ran,
    # longer only by starting a process and its shell (milliseconds, tens of them with the
    # CPUs busy), and none of the capture's start or stop, or the linger after it (each
    # 0.1-0.3 s), is in it.
    inside = float(Path(f"{clock}.end").read_text()) - float(Path(f"{clock}.start").read_text())
    print(f"scp: exporter {result.duration_seconds:.3f} s, inside the command {inside:.3f} s")
    assert inside <= result.duration_seconds < inside + 0.1
    assert result.throughput_bytes_per_second == pytest.approx(64 * MiB / result.duration_seconds)
    # And the shaped link bounds it: 200 Mbit/s is 25 MB/s.
    assert result.throughput_bytes_per_second < 25e6


def test_retransmits_under_drops_match_tshark(make_lab) -> None:
    # A tbf queue of 20 KB cannot absorb a TCP burst: real drops, real retransmissions.
    config = make_lab(
        link={"rate": "200mbit", "burst": "32KiB", "limit": "20KiB"},
        datasets={"f16m": {"file": "f16m.bin", "size": "16MiB"}},
        capture={"keep": True},
    )
    spec = _only_spec(config)
    result = run_transfer(spec, config, "test")
    assert result.outcome == "ok", result.error
    assert result.pcap_path and Path(result.pcap_path).exists()
    tshark = subprocess.run(
        ["tshark", "-r", result.pcap_path, "-Y", "tcp.analysis.retransmission", "-T", "fields", "-e", "frame.number"],
        capture_output=True,
        text=True,
        check=True,
    )
    tshark_count = len(tshark.stdout.split())
    assert result.retransmits_wire > 0
    assert abs(result.retransmits_wire - tshark_count) <= 0.01 * tshark_count, (result.retransmits_wire, tshark_count)


def _processes_with(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def test_hanging_command_is_killed_at_timeout(make_lab, tmp_path: Path) -> None:
    marker = f"{time.time_ns()}"
    # A command that forks a child and hangs: the whole process group must go.
    hang = ["python3", "-c", f"import subprocess,time; subprocess.Popen(['sleep', '3600.{marker}']); time.sleep(3600)"]
    config = make_lab(protocols={"hang": {"command": hang, "timeout": "2s"}})
    spec = _only_spec(config)
    t0 = time.monotonic()
    result = run_transfer(spec, config, "test")
    elapsed = time.monotonic() - t0
    assert result.outcome == "timeout"
    assert "killed after the 2s timeout" in result.error
    assert 2.0 <= result.duration_seconds < 5.0
    assert elapsed < 30
    assert _processes_with(marker) == []
    # The capture was stopped: no tcpdump of this lab is left.
    assert _processes_with(LabLayout(config.lab).client_if) == []


def test_failing_command_and_wrong_file_are_failed_with_reason(make_lab) -> None:
    config = make_lab(
        protocols={
            "false": {"command": ["false"]},
            "short": {"command": ["head", "-c", "1000", "/dev/zero"]},
            # Right size, wrong content: only the sha256 can tell.
            "wrong": {
                "command": [
                    "python3",
                    "-c",
                    "import sys; open(sys.argv[1], 'wb').write(bytes(1048576))",
                    "{local_path}",
                ]
            },
        }
    )
    results = {s.protocol: run_transfer(s, config, "test") for s in plan_round(config, lab.site(config))}
    assert results["false"].outcome == "failed"
    assert results["false"].error.startswith("false exited 1")
    assert results["short"].outcome == "failed"
    assert results["short"].error.startswith("verification: no file arrived")
    assert results["wrong"].outcome == "failed"
    assert results["wrong"].error.startswith("verification: f1m.bin: sha256 ")


def test_missing_binary_is_skipped(make_lab) -> None:
    config = make_lab(protocols={"hpnscp": {"command": ["hpnscp-not-installed", "{host}"]}})
    result = run_transfer(_only_spec(config), config, "test")
    assert result.outcome == "skipped"
    assert result.error == "hpnscp-not-installed is not installed on this host"


def test_received_file_and_capture_are_removed_unless_kept(make_lab) -> None:
    config = make_lab()
    spec = _only_spec(config)
    workdir = config.transfer.workdir

    def transfer_dirs() -> list[Path]:
        return sorted(p for p in workdir.iterdir() if p.name.startswith("bigbinf-"))

    captures = capture_directory(config)
    assert run_transfer(spec, config, "test").outcome == "ok"
    assert transfer_dirs() == []  # the copy went with the transfer's temp dir
    assert list(captures.iterdir()) == []  # and the pcap, written apart from it

    keep = config.model_copy(update={"transfer": config.transfer.model_copy(update={"keep_files": True})})
    assert run_transfer(spec, keep, "test").outcome == "ok"
    (kept,) = transfer_dirs()
    assert (kept / "f1m.bin").stat().st_size == 1024 * 1024
    assert list(captures.iterdir()) == []  # keep_files keeps copies; capture.keep keeps captures
