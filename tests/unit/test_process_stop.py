"""process.kill_all_active, the exporter's stop: it ends the transfer commands it finds
running, and none of what finishes a transfer whose command had ended by itself
(process.measured, issue 47: a stop seconds after the data moved dropped its result).
The truth is the kernel's: a real process group, and how it ended."""

from __future__ import annotations

import signal
import subprocess

from bigbinf import process


def test_a_stop_leaves_what_finishes_a_measured_transfer_and_ends_the_rest() -> None:
    process.stopping.clear()  # another test's stop in this worker may have left it set
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


def test_a_command_started_after_the_stop_is_ended_at_once_unless_it_finishes_a_measured_transfer() -> None:
    # A round past its last check of the stop starts the next transfer's command after
    # kill_all_active has run (issue 47: a PUT ran whole after the stop, past its 4 s, and
    # its result was dropped with the exiting exporter).  track ends it at once; what
    # finishes a measured transfer (an upload's removal, a watcher's last listing) runs on.
    procs = []
    try:
        process.stopping.set()
        late = subprocess.Popen(["sleep", "60"], start_new_session=True)
        procs.append(late)
        process.track(late)
        assert late.wait(30) == -signal.SIGTERM
        process.measured.set()
        finishing = subprocess.Popen(["sleep", "60"], start_new_session=True)
        procs.append(finishing)
        process.track(finishing)
        assert finishing.poll() is None
    finally:
        process.stopping.clear()
        process.measured.clear()
        for proc in procs:
            process.untrack(proc)
            proc.kill()
            proc.wait()
