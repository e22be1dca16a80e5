"""lab/servers.py start(): a server killed by a signal while it starts is started once
more (xrootd crashed with SIGSEGV at start beside two CPU burners); an exit status is
final at once.  A real process listening on loopback, judged by `ss` as the lab judges
its servers (`in_place`: this namespace, no root needed)."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import pytest

from bigbinf.config import LabConfig
from bigbinf.lab.layout import LabLayout
from bigbinf.lab.servers import LabServer, ServerError, start

# Killed by SIGSEGV the first time (its marker file absent), listening the second.
CRASH_ONCE = """
import os, signal, socket, sys, time
marker, port = sys.argv[1], int(sys.argv[2])
if not os.path.exists(marker):
    open(marker, "w").close()
    os.kill(os.getpid(), signal.SIGSEGV)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen()
time.sleep(60)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server(tmp_path: Path, argv: list[str], port: int) -> tuple[LabLayout, LabServer]:
    layout = LabLayout(LabConfig(name="bbtstart", state_dir=tmp_path / "lab"), in_place=True)
    (tmp_path / "lab" / "log").mkdir(parents=True)
    layout.run_dir.mkdir(parents=True)
    server = LabServer("fake", sys.executable, port, lambda _: None, lambda _: argv, "nothing")
    return layout, server


def test_a_server_killed_by_a_signal_at_start_is_started_once_more(tmp_path: Path) -> None:
    port = _free_port()
    marker = tmp_path / "crashed-once"
    layout, server = _server(tmp_path, [sys.executable, "-c", CRASH_ONCE, str(marker), str(port)], port)
    pid = start(layout, server, timeout=30)
    try:
        assert marker.exists()  # the first one did crash
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass
        log = layout.logfile("fake.stdout").read_text()
        assert "fake was killed by signal 11 at start; starting it again" in log
    finally:
        os.kill(pid, signal.SIGKILL)


def test_a_server_that_exits_at_start_is_not_started_again(tmp_path: Path) -> None:
    port = _free_port()
    count = tmp_path / "starts"
    argv = [sys.executable, "-c", f"open({str(count)!r}, 'a').write('x'); raise SystemExit(3)"]
    layout, server = _server(tmp_path, argv, port)
    with pytest.raises(ServerError, match="fake exited 3 in None; see"):
        start(layout, server, timeout=30)
    assert count.read_text() == "x"
