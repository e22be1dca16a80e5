"""The lab's userspace delay line (bigbinf/lab/delayline.py): a packet is never sent on
before its own `delay` has passed since it came, however late the line reads it; a
reordered packet is overtaken and counted, never lost; a paced line forwards no faster
than its packet rate; its router settings are read from its control file."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

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
    counts = dict.fromkeys(delayline.COUNTERS, 0)
    try:
        with pytest.raises(delayline.Stop):
            delayline.forward(line_a.fileno(), line_b.fileno(), DELAY, 0.0, 100, counts, {})
        assert far_b.recv(100) == b"first" and far_b.recv(100) == b"second"
        for packet in (b"first", b"second"):
            assert sent[packet] - came[packet] >= DELAY, (packet, sent[packet] - came[packet])
    finally:
        for s in (line_a, far_a, line_b, far_b):
            s.close()


def _line(
    monkeypatch: pytest.MonkeyPatch, packets: list[bytes], router: dict[str, float], draws: Iterator[float]
) -> tuple[list[tuple[bytes, float]], dict[str, int]]:
    """`packets` sent into one end at once, through a line with `router` (its random draws
    `draws`): what came out of the other end, in order, with when, and the line's counts."""
    line_a, far_a = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    line_b, far_b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    for s in (line_a, line_b):
        s.setblocking(False)
    out: list[tuple[bytes, float]] = []
    real_write = delayline.os.write

    def write(fd: int, packet: bytes) -> int:
        out.append((packet, time.monotonic()))
        written = real_write(fd, packet)
        if len(out) == len(packets):
            raise delayline.Stop
        return written

    monkeypatch.setattr(delayline.os, "write", write)
    monkeypatch.setattr(delayline.random, "random", lambda: next(draws))
    for packet in packets:
        far_a.send(packet)
    counts = dict.fromkeys(delayline.COUNTERS, 0)
    try:
        with pytest.raises(delayline.Stop):
            delayline.forward(line_a.fileno(), line_b.fileno(), 0.01, 0.0, 100, counts, router)
        assert [far_b.recv(100) for _ in packets] == [p for p, _ in out]
    finally:
        for s in (line_a, far_a, line_b, far_b):
            s.close()
    return out, counts


def test_a_reordered_packet_is_overtaken_and_counted_never_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first packet drawn for reordering (0.01 < 50%), the next two not.
    router = {"reorder_percent": 50.0, "reorder_seconds": 0.05}
    out, counts = _line(monkeypatch, [b"1", b"2", b"3"], router, iter([0.01, 0.9, 0.9]))
    assert [p for p, _ in out] == [b"2", b"3", b"1"]
    # The last write ends the line (Stop) before it is counted.
    assert counts == {"forwarded": 2, "lost": 0, "overflow": 0, "reordered": 1, "paced": 0}


def test_a_paced_line_forwards_no_faster_than_its_packet_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    packets = [str(n).encode() for n in range(8)]
    out, counts = _line(monkeypatch, packets, {"pps": 20.0}, iter(()))
    assert [p for p, _ in out] == packets
    # Seven slots of 50 ms after the first, less the slack a line may catch up at once.
    assert out[-1][1] - out[0][1] >= 7 / 20 - delayline.PACE_SLACK - 0.002, [t - out[0][1] for _, t in out]
    # The last is uncounted (Stop); all but the first waited for their slot (the first found
    # the line idle, and so may the second, read a moment later).
    assert counts["forwarded"] == 7 and counts["paced"] >= 5 and counts["lost"] == 0


def test_the_control_file_sets_the_router_and_bad_content_sets_nothing(tmp_path: Path) -> None:
    control = tmp_path / "control.json"
    assert delayline.read_control(str(control)) == {}  # absent
    control.write_text(json.dumps({"reorder_percent": 3, "reorder_seconds": 0.01, "pps": -1, "other": 5}))
    assert delayline.read_control(str(control)) == {"reorder_percent": 3.0, "reorder_seconds": 0.01}
    control.write_text("[1, 2")
    assert delayline.read_control(str(control)) == {}
    assert delayline.read_control(None) == {}
