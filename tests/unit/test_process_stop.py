"""process.kill_all_active, the exporter's stop: it ends the transfer commands it finds
running, and none of what finishes a transfer whose command had ended by itself
(process.measured, issue 47: a stop seconds after the data moved dropped its result).
The truth is the kernel's: a real process group, and how it ended."""

from __future__ import annotations

import signal
import subprocess

from bigbinf import process


def test_a_stop_leaves_what_finishes_a_measured_transfer_and_ends_the_rest() -> None:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    process.track(proc)
    try:
        process.measured.set()
        assert process.kill_all_active() == 0
        assert proc.poll() is None  # still running: its owner stops it
        process.measured.clear()
        assert process.kill_all_active() == 1
        assert proc.wait(30) == -signal.SIGTERM
    finally:
        process.measured.clear()
        process.untrack(proc)
        proc.kill()
        proc.wait()
