"""The lab's userspace delay line (bigbinf/lab/delayline.py): a packet is never sent on
before its own `delay` has passed since it came, however late the line reads it."""

from __future__ import annotations

import socket
import time

import pytest

from bigbinf.lab import delayline

DELAY = 0.05
STALL = 0.1  # the line waiting for a CPU between two reads


def test_a_packet_that_came_while_the_line_waited_for_a_cpu_keeps_its_whole_delay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Datagram socket pairs stand in for the two TUN devices: one packet per read.
    line_a, far_a = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    line_b, far_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (line_a, line_b):
        s.setblocking(False)
    came: dict[bytes, float] = {}
    sent: dict[bytes, float] = {}
    real_read, real_write = delayline.os.read, delayline.os.write

    def read(fd: int, n: int) -> bytes:
        packet = real_read(fd, n)
        if packet == b"first":
            # Stalled after the first read; meanwhile the second packet comes.
            time.sleep(STALL)
            came[b"second"] = time.monotonic()
            far_a.send(b"second")
        return packet

    def write(fd: int, packet: bytes) -> int:
        sent[packet] = time.monotonic()
        written = real_write(fd, packet)
        if len(sent) == 2:
            raise delayline.Stop
        return written

    monkeypatch.setattr(delayline.os, "read", read)
    monkeypatch.setattr(delayline.os, "write", write)
    came[b"first"] = time.monotonic()
    far_a.send(b"first")
    counts = {"forwarded": 0, "lost": 0, "overflow": 0}
    try:
        with pytest.raises(delayline.Stop):
            delayline.forward(line_a.fileno(), line_b.fileno(), DELAY, 0.0, 100, counts)
        assert far_b.recv(100) == b"first" and far_b.recv(100) == b"second"
        for packet in (b"first", b"second"):
            assert sent[packet] - came[packet] >= DELAY, (packet, sent[packet] - came[packet])
    finally:
        for s in (line_a, far_a, line_b, far_b):
            s.close()
