"""capture.py without root: tcpdump's argv, its counts, and telling a drained tcpdump
(asleep in poll(2)) from one still at work, on real processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bigbinf.measure.wire.capture import SNAPLEN_DEFAULT, Capture, CaptureStats, capture_argv


def test_argv_of_each_tool_keeps_the_host_pair_filter() -> None:
    helper = capture_argv("c0", Path("/x.pcap"), "198.18.0.1", "198.18.0.2", SNAPLEN_DEFAULT, 32 << 20)
    # The default: pcapdump.py with a 10 ms block timeout (measure/wire/capture.py says why).
    assert helper[2].endswith("pcapdump.py") and helper[helper.index("-T") + 1] == "10"
    assert helper[helper.index("-B") + 1] == "32768"  # KiB
    assert helper[helper.index("-s") + 1] == "128"
    assert helper[-5:] == ["host", "198.18.0.1", "and", "host", "198.18.0.2"]
    tcpdump = capture_argv("c0", Path("/x.pcap"), "198.18.0.1", "198.18.0.2", 128, 32 << 20, tool="tcpdump")
    assert tcpdump[0].endswith("tcpdump") and "--immediate-mode" in tcpdump
    assert tcpdump[-5:] == ["host", "198.18.0.1", "and", "host", "198.18.0.2"]
    buffered = capture_argv("c0", Path("/x.pcap"), "a", "b", 96, 1 << 20, tool="tcpdump", immediate=False, bpf=[])
    assert "--immediate-mode" not in buffered and buffered[-1] == "/x.pcap"


def test_the_default_snaplen_holds_the_largest_tcp_header_with_options() -> None:
    # Linux cooked v2 (interface "any") 20 + IPv6 40 + TCP with 40 bytes of options 60.
    assert SNAPLEN_DEFAULT >= 20 + 40 + 60


@pytest.mark.parametrize(
    ("captured", "received", "dropped", "unread"),
    [(100, 100, 0, 0), (90, 100, 10, 0), (80, 100, 10, 10), (100, 0, 0, 0)],
)
def test_unread_is_what_passed_the_filter_and_neither_reached_the_file_nor_was_dropped(
    captured: int, received: int, dropped: int, unread: int
) -> None:
    assert CaptureStats(captured, received, dropped).unread == unread


def test_counts_are_read_from_tcpdumps_last_words() -> None:
    capture = Capture("c0", Path("/x.pcap"), "a", "b")
    capture._stderr = [
        "tcpdump: listening on c0, link-type EN10MB (Ethernet), snapshot length 128 bytes",
        "185401 packets captured",
        "185420 packets received by filter",
        "7 packets dropped by kernel",
    ]
    stats = capture._parse_stats()
    assert stats == CaptureStats(185401, 185420, 7)
    assert stats is not None and stats.unread == 12
    # A loss only when tcpdump was stopped before it had read its ring.
    capture.stats = stats
    capture.drained = True
    assert capture.unread == 0
    capture.drained = False
    assert capture.unread == 12


def _process(code: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"go\n"
    return proc


def test_tcpdump_is_drained_when_asleep_in_poll() -> None:
    asleep = _process("import select; print('go', flush=True); select.poll().poll()")
    busy = _process("print('go', flush=True)\nwhile True: pass")
    try:
        for proc, drained in ((asleep, True), (busy, False)):
            capture = Capture("c0", Path("/x.pcap"), "a", "b", tool="tcpdump")
            capture.proc = proc
            assert capture.wait_drained(timeout=0.3) is drained
    finally:
        for proc in (asleep, busy):
            proc.kill()
            proc.wait()
