"""Sender-side retransmits from the kernel, per socket: `ss -tinE` close events.

When the sender is local (uploads), the kernel's own count is the truth: each TCP
socket's tcp_info carries `retrans:<now>/<total>` and ss -E prints the final tcp_info
of every socket as it closes.  Summed over the transfer's sockets to the remote this
equals the namespace's `TcpRetransSegs` delta (nstat) when nothing else runs there, but
unlike nstat it counts only the transfer's sockets, so it is exact in a busy namespace
too.  The capture sees only what reached the wire, and for downloads only the remote
sender knows.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import threading
import time

from bigbinf.measure.process import in_netns, kill_group, track, untrack

_RETRANS = re.compile(r"\bretrans:\d+/(\d+)")
_START_SECONDS = 0.2  # ss subscribes to socket-destroy events within milliseconds


class SocketWatch:
    """Context manager: sum of total retransmits of TCP sockets to `remote` that close
    while it runs."""

    def __init__(self, remote: str, netns: str | None = None) -> None:
        # stdbuf: ss writes through stdio, which would hold events in a block buffer that
        # is lost when we stop it.
        argv = ["ss", "-tinEH", "dst", remote]
        if shutil.which("stdbuf"):
            argv = ["stdbuf", "-oL", *argv]
        self.argv = in_netns(netns, argv)
        self.proc: subprocess.Popen[bytes] | None = None
        self.retransmits: int | None = None
        self.sockets = 0
        self._chunks: list[bytes] = []
        self._reader: threading.Thread | None = None

    def __enter__(self) -> SocketWatch:
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        track(self.proc)
        # Drain continuously: a many-files upload closes a socket per file, and a full pipe
        # would block ss and lose events.
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        time.sleep(_START_SECONDS)
        return self

    def _drain(self) -> None:
        assert self.proc is not None
        stdout = self.proc.stdout
        assert isinstance(stdout, io.BufferedReader)  # Popen's default buffered pipe
        # read1: whatever is there, at most one read(2): events arrive as sockets close.
        for chunk in iter(lambda: stdout.read1(65536), b""):
            self._chunks.append(chunk)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> int | None:
        proc = self.proc
        if proc is None:
            return self.retransmits
        self.proc = None
        kill_group(proc, grace=1.0)
        untrack(proc)
        if self._reader:
            self._reader.join(5)
        output = b"".join(self._chunks).decode("utf-8", "replace")
        totals = [int(m.group(1)) for m in _RETRANS.finditer(output)]
        # A socket that never retransmitted prints no retrans field; count sockets by
        # their info lines (indented) to tell "no sockets seen" from "0 retransmits".
        self.sockets = sum(1 for line in output.splitlines() if line.startswith(("\t", " ")))
        self.retransmits = sum(totals) if self.sockets else None
        return self.retransmits
