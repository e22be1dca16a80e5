"""The plain-site matrix covers every bound issue 42 names (tests/support/plain_causes.py):
at least one induced cause expects each, and each of issue 42's new causes says the bound
that should name it and how its truth is read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support import plain_site
from tests.support.plain_causes import CAUSES

# Issue 42's bounds, by the verdict that names each (the packet rate: the path's, its
# evidence naming the packet rate).
BOUNDS = {
    "the receiver's window": "receive_window",
    "the sender's buffer": "send_buffer",
    "the path's capacity": "link_capacity",
    "loss": "congestion",
    "a program's CPU": "cpu",
    "storage": "disk",
    "the application": "application",
}


def test_every_bound_has_a_cause() -> None:
    expected = {c.expected for c in CAUSES}
    assert [bound for bound, verdict in BOUNDS.items() if verdict not in expected] == []
    assert [c for c in CAUSES if c.expected == "link_capacity" and "packet" in c.evidence]


def test_every_bound_but_the_path_s_has_a_cause_on_each_host() -> None:
    # A bound named on the wrong side sends the reader to the wrong host: both are tried.
    for verdict in ("receive_window", "send_buffer", "cpu", "disk", "application"):
        assert {c.side for c in CAUSES if c.expected == verdict} == {"local", "remote"}, verdict


def test_a_cause_that_must_fail_says_how_and_expects_no_verdict() -> None:
    failing = [c for c in CAUSES if c.error]
    assert failing and all(c.expected == "" and c.side == "" and c.bound for c in failing)


def test_the_slow_reader_passes_on_what_it_reads_and_ends_with_its_receiver(tmp_path: Path) -> None:
    reader = tmp_path / "slow-reader.py"
    reader.write_text(plain_site.SLOW_READER)
    upload = plain_site.slow_reader_protocol(reader)["upload_command"]
    assert f"--rsync-path=python3 {reader} {plain_site.SLOW_READER_BYTES_PER_SECOND} | rsync" in upload
    data = os.urandom(50_000)  # less than a pipe holds: written whole before it is read
    # Its input never ends (an ssh channel stays open): it ends when what it feeds does.
    feeder = subprocess.Popen([sys.executable, str(reader), "100000000"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)  # fmt: skip
    assert feeder.stdin is not None and feeder.stdout is not None
    feeder.stdin.write(data)
    feeder.stdin.flush()
    got = b""
    while len(got) < len(data):
        got += feeder.stdout.read(len(data) - len(got))
    assert got == data
    feeder.stdout.close()  # the receiver behind it is gone; its input is still open
    assert feeder.wait(timeout=10) == 0
    feeder.stdin.close()
