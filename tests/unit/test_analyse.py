"""bigbinf.measure.analyse (and pcap.py) on pcaps crafted with scapy, checked three ways: numbers derived by
hand in each test, scapy's own parse of the same file (frame and payload bytes), and
tshark's `tcp.analysis.retransmission` (per way and frame by frame; skipped without
tshark).  A lab test (root, network namespaces) checks a real bulk transfer with drops.
"""

from __future__ import annotations

import heapq
import os
import random
import shutil
import socket
import struct
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop
from scapy.layers.l2 import ARP, CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether
from scapy.packet import Packet as ScapyPacket
from scapy.packet import Raw
from scapy.utils import PcapNgWriter, PcapReader, PcapWriter

import bigbinf.measure.pcap as pcap_module
from bigbinf.measure.analyse import (
    Analysis,
    FlowStats,
    Packet,
    PcapError,
    _retransmissions,
    analyse_pcap,
    iter_packets,
)
from bigbinf.result import PAYLOAD_BUCKETS, empty_histogram

CLIENT, REMOTE, STRANGER = "198.18.0.1", "198.18.0.2", "198.18.0.3"
CLIENT6, REMOTE6 = "2001:2::1", "2001:2::2"  # RFC 5180 benchmarking prefix
CPORT, RPORT = 40000, 5001
T0 = 1_700_000_000  # capture start, epoch seconds
ISN_C, ISN_R = 1000, 5000
TSHARK = shutil.which("tshark")


# ----------------------------------------------------------------------------- crafting


def eth() -> ScapyPacket:
    # Explicit MACs: otherwise scapy resolves the destination by ARP/ND on a real link.
    return Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def seg(down: bool, seq: int, ack: int, flags: str = "A", payload: int = 0, window: int = 502) -> ScapyPacket:
    """An Ethernet/IPv4/TCP frame between the two hosts: 54 bytes + payload on the wire."""
    src, dst, sport, dport = (REMOTE, CLIENT, RPORT, CPORT) if down else (CLIENT, REMOTE, CPORT, RPORT)
    packet = eth() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, window=window)
    return packet / Raw(b"x" * payload) if payload else packet


def write(
    path: Path,
    records: list[tuple[float | tuple[int, int], ScapyPacket | bytes]],
    *,
    linktype: int = 1,
    nano: bool = False,
    endianness: str = "<",
    snaplen: int = 65535,
) -> Path:
    """Write (time, frame) records; a time is seconds after T0 or an exact (sec, ns).
    Frames longer than snaplen are cut as tcpdump -s would, keeping the wire length."""
    writer = PcapWriter(str(path), linktype=linktype, nano=nano, endianness=endianness, snaplen=snaplen, sync=True)
    writer.write_header(None)  # write_packet() alone does not
    for when, frame in records:
        data = bytes(frame)
        if isinstance(when, tuple):
            sec, ns = when
        else:
            sec, ns = divmod(T0 * 1_000_000_000 + round(when * 1e9), 1_000_000_000)
        frac = ns if nano else ns // 1000
        writer.write_packet(data[:snaplen], sec=sec, usec=frac, wirelen=len(data))
    writer.close()
    return path


def handshake(t: float = 0.0, rtt: float = 0.010) -> list[tuple[float, ScapyPacket]]:
    """SYN, SYN/ACK, ACK; Wireshark's out-of-order window becomes SYN -> ACK = 2 * rtt."""
    return [
        (t, seg(False, ISN_C, 0, "S")),
        (t + rtt, seg(True, ISN_R, ISN_C + 1, "SA")),
        (t + 2 * rtt, seg(False, ISN_C + 1, ISN_R + 1, "A")),
    ]


# ------------------------------------------------------------------ independent truths


@dataclass
class ScapyView:
    wire: dict[str, int]
    payload: dict[str, int]
    packets: dict[str, int]


def scapy_view(path: Path, client: str, remote: str) -> ScapyView:
    """Frame and L4 payload bytes per way from scapy's dissection of the same file."""
    view = ScapyView({"down": 0, "up": 0}, {"down": 0, "up": 0}, {"down": 0, "up": 0})
    with PcapReader(str(path)) as reader:
        for packet in reader:
            ip = packet.getlayer(IP) or packet.getlayer(IPv6)
            if ip is None or {ip.src, ip.dst} != {client, remote}:
                continue
            way = "down" if ip.src == remote else "up"
            view.wire[way] += packet.wirelen
            view.packets[way] += 1
            view.payload[way] += _scapy_payload(ip)
    return view


def _scapy_payload(ip: ScapyPacket) -> int:
    l4 = ip.getlayer(TCP) or ip.getlayer(UDP) or ip.payload
    # IPv6: the payload length also covers the extension headers before l4.
    l4_length = ip.len - ip.ihl * 4 if isinstance(ip, IP) else ip.plen - (len(bytes(ip.payload)) - len(bytes(l4)))
    if isinstance(l4, TCP):
        return l4_length - l4.dataofs * 4
    if isinstance(l4, UDP):
        return l4_length - 8
    return l4_length


def tshark_retransmissions(path: Path, remote: str) -> list[tuple[int, bool]]:
    """(frame number, down) of every frame tshark marks tcp.analysis.retransmission: the
    per-way counts of `-Y 'tcp.analysis.retransmission && ip.src==A'`, in one run."""
    out = subprocess.run(
        [TSHARK or "tshark", "-n", "-r", str(path), "-Y", "tcp.analysis.retransmission",
         "-T", "fields", "-e", "frame.number", "-e", "ip.src", "-e", "ipv6.src"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    found = []
    for line in out.splitlines():
        number, src4, src6 = line.split("\t")
        found.append((int(number), (src4 or src6) == remote))
    return found


def bucket(payload: int) -> int:
    return next((i for i, bound in enumerate(PAYLOAD_BUCKETS) if payload <= bound), len(PAYLOAD_BUCKETS))


# ---------------------------------------------------------------- crafted scenarios
#
# Every crafted pcap is registered here, written once per test module, and handed to
# tshark in parallel right away: tshark takes ~0.3 s to start, so running it on ~30
# files one after the other would cost ~10 s.  Each test then checks its file against
# scapy and tshark (check()) and against the numbers written in the test.


@dataclass(frozen=True)
class Scenario:
    build: Callable[[], list[tuple[float | tuple[int, int], ScapyPacket | bytes]]]
    options: dict[str, Any]
    client: str
    remote: str


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, client: str = CLIENT, remote: str = REMOTE, **options: Any) -> Callable[[Callable], Callable]:  # type: ignore[type-arg]
    def register(build: Callable) -> Callable:  # type: ignore[type-arg]
        SCENARIOS[name] = Scenario(build, options, client, remote)
        return build

    return register


@dataclass
class Crafted:
    path: Path
    client: str
    remote: str
    tshark: Future[list[tuple[int, bool]]] | None


@pytest.fixture(scope="module")
def crafted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Crafted]]:
    directory = tmp_path_factory.mktemp("crafted")
    # tshark is CPU-bound: one per core (more only crowded a busy 2-core machine).
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        files = {}
        for name, sc in SCENARIOS.items():
            path = write(directory / f"{name}.pcap", sc.build(), **sc.options)
            future = pool.submit(tshark_retransmissions, path, sc.remote) if TSHARK else None
            files[name] = Crafted(path, sc.client, sc.remote, future)
        yield files


def check(crafted: dict[str, Crafted], name: str) -> Analysis:
    """Analyse a crafted pcap, and hold the result against scapy and tshark."""
    pcap = crafted[name]
    analysis = analyse_pcap(pcap.path, pcap.client, pcap.remote)
    view = scapy_view(pcap.path, pcap.client, pcap.remote)
    assert analysis.wire_bytes == view.wire
    assert analysis.payload_bytes == view.payload
    assert analysis.packets == view.packets
    assert sum(map(sum, analysis.payload_histogram.values())) == sum(view.packets.values())
    if pcap.tshark is not None:
        theirs = pcap.tshark.result()
        down = sum(1 for _, is_down in theirs if is_down)
        assert analysis.retransmits == {"down": down, "up": len(theirs) - down}
        assert _retransmissions(pcap.path, pcap.client, pcap.remote) == theirs
    return analysis


# ------------------------------------------------------------------------- basic flow


@scenario("basic")
def basic_flow() -> list[tuple[float, ScapyPacket]]:
    """Handshake, a 100-byte request, three 1000-byte segments back, ACKs, FIN both ways."""
    return [
        *handshake(),
        (0.021, seg(False, 1001, 5001, "PA", 100)),
        (0.031, seg(True, 5001, 1101, "A")),
        (0.032, seg(True, 5001, 1101, "PA", 1000)),
        (0.033, seg(True, 6001, 1101, "PA", 1000)),
        (0.034, seg(True, 7001, 1101, "PA", 1000)),
        (0.044, seg(False, 1101, 8001, "A")),
        (0.05, seg(True, 8001, 1101, "FA")),
        (0.06, seg(False, 1101, 8002, "FA")),
        (0.07, seg(True, 8002, 1102, "A")),
    ]


# Down: SYN/ACK, ACK, 3 x data, FIN, ACK.  Up: SYN, ACK, request, ACK, FIN.
BASIC_DOWN_WIRE = 4 * 54 + 3 * 1054
BASIC_UP_WIRE = 4 * 54 + 154


def test_handshake_data_and_acks_both_ways(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "basic")
    assert analysis.wire_bytes == {"down": BASIC_DOWN_WIRE, "up": BASIC_UP_WIRE}
    assert analysis.payload_bytes == {"down": 3000, "up": 100}
    assert analysis.packets == {"down": 7, "up": 5}
    assert analysis.retransmits == {"down": 0, "up": 0}
    assert analysis.first_packet_timestamp == pytest.approx(T0, abs=1e-6)
    assert analysis.last_packet_timestamp == pytest.approx(T0 + 0.070, abs=1e-6)
    expected = empty_histogram()
    expected["down"][0], expected["down"][bucket(1000)] = 4, 3
    expected["up"][0], expected["up"][bucket(100)] = 4, 1
    assert bucket(1000) == 5 and bucket(100) == 2
    assert analysis.payload_histogram == expected
    assert analysis.flows == (FlowStats("tcp", CPORT, RPORT, 3000, 100, 7, 5),)
    assert analysis.other_packets == 0
    assert analysis.truncated_tail is False


def test_iter_packets_yields_each_packet(crafted: dict[str, Crafted]) -> None:
    packets = list(iter_packets(crafted["basic"].path, CLIENT, REMOTE))
    assert len(packets) == 12
    assert all(isinstance(p, Packet) for p in packets)
    first, data_segment = packets[0], packets[5]
    assert (first.way, first.frame_bytes, first.payload_bytes, first.transport) == ("up", 54, 0, "tcp")
    assert (data_segment.way, data_segment.frame_bytes, data_segment.payload_bytes) == ("down", 1054, 1000)
    assert data_segment.timestamp == pytest.approx(T0 + 0.032, abs=1e-6)
    assert sum(p.frame_bytes for p in packets if p.way == "down") == BASIC_DOWN_WIRE


# ------------------------------------------------------------------------ retransmits


def data(down: bool, seq: int, t: float, size: int = 1000) -> tuple[float, ScapyPacket]:
    return t, seg(down, seq, ISN_C + 1 if down else ISN_R + 1, "PA", size)


def ack_up(ack: int, t: float) -> tuple[float, ScapyPacket]:
    return t, seg(False, ISN_C + 1, ack, "A")


@scenario("rto")
def rto_after_hole() -> list[tuple[float, ScapyPacket]]:
    # 6001 is lost before the capture point; one duplicate ACK is not enough for a fast
    # retransmission, and 269 ms is beyond the 20 ms out-of-order window: plain RTO.
    return [
        *handshake(),
        data(True, 5001, 0.03),
        data(True, 7001, 0.031),
        ack_up(6001, 0.032),
        ack_up(6001, 0.033),
        data(True, 6001, 0.3),
        ack_up(8001, 0.301),
    ]


def test_rto_retransmission_after_a_hole(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "rto")
    assert analysis.retransmits == {"down": 1, "up": 0}
    assert analysis.payload_bytes == {"down": 3000, "up": 0}


@scenario("duplicate")
def duplicate_segment() -> list[tuple[float, ScapyPacket]]:
    return [*handshake(), data(True, 5001, 0.03), data(True, 5001, 0.1), ack_up(6001, 0.101)]


def test_exact_duplicate_segment(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "duplicate")
    assert analysis.retransmits == {"down": 1, "up": 0}
    assert analysis.payload_bytes["down"] == 2000  # the wire carried it twice


@scenario("spurious")
def spurious() -> list[tuple[float, ScapyPacket]]:
    # Already acknowledged when it comes again: Wireshark's "spurious retransmission",
    # which also sets tcp.analysis.retransmission.
    return [*handshake(), data(True, 5001, 0.03), ack_up(6001, 0.031), data(True, 5001, 0.032)]


def test_spurious_retransmission_of_acknowledged_data(crafted: dict[str, Crafted]) -> None:
    assert check(crafted, "spurious").retransmits == {"down": 1, "up": 0}


@scenario("out_of_order")
def out_of_order() -> list[tuple[float, ScapyPacket]]:
    # SYN -> ACK took 20 ms; 6001 arrives 1 ms after 7001: out-of-order, not counted.
    return [*handshake(), data(True, 5001, 0.03), data(True, 7001, 0.031), data(True, 6001, 0.032)]


def test_out_of_order_within_the_handshake_rtt_is_not_a_retransmission(crafted: dict[str, Crafted]) -> None:
    assert check(crafted, "out_of_order").retransmits == {"down": 0, "up": 0}


def ten_ms_late() -> list[tuple[float, ScapyPacket]]:
    return [data(True, 5001, 0.030), data(True, 7001, 0.031), data(True, 6001, 0.041)]


scenario("late_with_handshake")(lambda: handshake() + ten_ms_late())
scenario("late_without_handshake")(ten_ms_late)  # capture started mid-flow: 3 ms window


def test_out_of_order_window_is_the_handshake_rtt_or_3_ms(crafted: dict[str, Crafted]) -> None:
    assert check(crafted, "late_with_handshake").retransmits["down"] == 0
    assert check(crafted, "late_without_handshake").retransmits["down"] == 1


@scenario("fast")
def fast_retransmission() -> list[tuple[float, ScapyPacket]]:
    return [
        *handshake(),
        data(True, 5001, 0.030),
        data(True, 7001, 0.031),  # 6001 lost
        data(True, 8001, 0.032),
        ack_up(6001, 0.0321),
        ack_up(6001, 0.0322),  # duplicate #1
        ack_up(6001, 0.0323),  # duplicate #2
        data(True, 6001, 0.0330),  # < 20 ms later: fast retransmission (beats out-of-order)
        ack_up(9001, 0.0331),
    ]


def test_fast_retransmission_after_two_duplicate_acks(crafted: dict[str, Crafted]) -> None:
    assert check(crafted, "fast").retransmits == {"down": 1, "up": 0}


@scenario("parked")
def ack_of_unseen_data() -> list[tuple[float, ScapyPacket]]:
    # The client ACKs server data the capture never saw (6001..8001).  Wireshark 4.0
    # then parks the server's duplicate-ACK counter at (guint32)-1, which passes its
    # ">= 2 duplicate ACKs" test: the client's resent 1001 counts as a fast
    # retransmission, although 7 ms after 1101..1201 it would otherwise be out-of-order.
    return [
        *handshake(),
        data(True, 5001, 0.03),
        ack_up(8001, 0.031),
        (0.032, seg(False, 1001, 8001, "PA", 100)),
        (0.033, seg(False, 1101, 8001, "PA", 100)),
        (0.04, seg(False, 1001, 8001, "PA", 100)),
    ]


def test_ack_of_unseen_data_makes_a_fast_retransmission(crafted: dict[str, Crafted]) -> None:
    assert check(crafted, "parked").retransmits == {"down": 0, "up": 1}


@scenario("keepalive")
def keep_alives() -> list[tuple[float, ScapyPacket]]:
    # A keep-alive repeats the last byte (seq = next - 1, 0 or 1 byte): it does not
    # advance the sequence, but Wireshark does not call it a retransmission.
    return [
        *handshake(),
        data(True, 5001, 0.030),
        ack_up(6001, 0.031),
        (10.0, seg(False, ISN_C, 6001, "A", 1)),  # 1-byte keep-alive
        (10.001, seg(True, 6001, ISN_C + 1, "A")),  # its ACK
        (20.0, seg(False, ISN_C, 6001, "A")),  # 0-byte keep-alive
        (20.001, seg(True, 6001, ISN_C + 1, "A")),
    ]


def test_keep_alives_are_not_retransmissions(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "keepalive")
    assert analysis.retransmits == {"down": 0, "up": 0}
    assert analysis.payload_bytes == {"down": 1000, "up": 1}


@scenario("wrap")
def sequence_wrap() -> list[tuple[float, ScapyPacket]]:
    isn = 2**32 - 1500  # the second segment crosses the wrap, the third starts after it
    second, third = (isn + 1001) % 2**32, (isn + 2001) % 2**32
    return [
        (0.0, seg(False, ISN_C, 0, "S")),
        (0.010, seg(True, isn, ISN_C + 1, "SA")),
        (0.020, seg(False, ISN_C + 1, isn + 1, "A")),
        (0.030, seg(True, isn + 1, ISN_C + 1, "PA", 1000)),
        (0.032, seg(True, third, ISN_C + 1, "PA", 1000)),  # the second was lost...
        (0.500, seg(True, second, ISN_C + 1, "PA", 1000)),  # ...and is resent: RTO
        (0.501, seg(False, ISN_C + 1, (isn + 3001) % 2**32, "A")),
    ]


def test_sequence_numbers_wrap_at_32_bits(crafted: dict[str, Crafted]) -> None:
    assert check(crafted, "wrap").retransmits == {"down": 1, "up": 0}


@scenario("reuse")
def port_reuse() -> list[tuple[float, ScapyPacket]]:
    # Same ports, a new SYN with a new ISN: Wireshark starts afresh, so the second
    # connection's segments are not compared with the first connection's.
    return [
        *basic_flow(),
        (1.0, seg(False, 90000, 0, "S")),
        (1.01, seg(True, 70000, 90001, "SA")),
        (1.02, seg(False, 90001, 70001, "A")),
        (1.03, seg(True, 70001, 90001, "PA", 500)),
    ]


def test_port_reuse_starts_a_new_conversation(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "reuse")
    assert analysis.retransmits == {"down": 0, "up": 0}
    assert analysis.flows == (FlowStats("tcp", CPORT, RPORT, 3500, 100, 9, 7),)


@scenario("random", nano=True)
def random_traces() -> list[tuple[tuple[int, int], bytes]]:
    """Six random conversations (distinct client ports, so independent for Wireshark
    and for us) merged in time: holes, duplicates, reordering, duplicate ACKs,
    keep-alives, zero windows, FINs, RSTs, port reuse, timings around 3 ms and 20 ms."""
    traces = [_random_trace(random.Random(seed), CPORT + 100 + seed, 300) for seed in range(6)]
    return [((when // 10**9, when % 10**9), frame) for when, frame in heapq.merge(*traces)]


def test_random_traces_match_tshark_frame_by_frame(crafted: dict[str, Crafted]) -> None:
    if not TSHARK:
        pytest.skip("tshark is not installed")
    analysis = check(crafted, "random")  # compares the frame lists too
    assert analysis.retransmits["down"] + analysis.retransmits["up"] > 50  # real coverage
    assert len(analysis.flows) == 6


def _random_trace(rng: random.Random, cport: int, n: int) -> list[tuple[int, bytes]]:
    client, remote = socket.inet_aton(CLIENT), socket.inet_aton(REMOTE)
    ts = T0 * 10**9
    frames: list[tuple[int, bytes]] = []
    gaps = [0, 100_000, 2_999_000, 3_001_000, 10_000_000, 19_999_000, 20_001_000, 200_000_000]

    def emit(down: bool, seq: int, ack: int, flags: int, window: int, size: int) -> None:
        nonlocal ts
        ts += rng.choice(gaps) if rng.random() < 0.7 else rng.randrange(40_000_000)
        src, dst, sport, dport = (remote, client, RPORT, cport) if down else (client, remote, cport, RPORT)
        tcp = struct.pack("!HHIIBBHHH", sport, dport, seq % 2**32, ack % 2**32, 5 << 4, flags, window, 0, 0)
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 40 + size, 0, 0, 64, 6, 0, src, dst)
        frames.append((ts, b"\x02" * 12 + b"\x08\x00" + ip + tcp + b"x" * size))

    isn = {False: rng.randrange(2**32), True: 2**32 - rng.randrange(1, 20_000)}  # wraps
    mss = rng.choice([1, 2, 100, 1448])
    sent = {d: isn[d] + 1 for d in (False, True)}
    acked = {False: isn[True] + 1, True: isn[False] + 1}
    history: list[tuple[bool, int, int]] = []
    emit(False, isn[False], 0, 0x02, 64240, 0)
    emit(True, isn[True], isn[False] + 1, 0x12, 65160, 0)
    emit(False, isn[False] + 1, isn[True] + 1, 0x10, 502, 0)
    for _ in range(n):
        r, down = rng.random(), rng.random() < 0.7
        window = rng.choice([502] * 8 + [0, 1000])
        if r < 0.45:  # new data, sometimes after a hole
            seq = sent[down] + (mss if rng.random() < 0.15 else 0)
            size = rng.choice([mss, mss, rng.randrange(mss + 1)])
            emit(down, seq, acked[down], 0x18, window, size)
            history.append((down, seq, size))
            sent[down] = max(sent[down], seq + size)
        elif r < 0.6 and history:  # something sent before
            d, seq, size = rng.choice(history[-20:])
            emit(d, seq, acked[d], 0x18, window, size)
        elif r < 0.85:  # an ACK, often a duplicate
            d = not down
            mine = [s + z for w, s, z in history[-10:] if w == down]
            acked[d] = acked[d] if rng.random() < 0.5 else rng.choice(mine or [sent[down]])
            emit(d, sent[d], acked[d], 0x10, window, 0)
        elif r < 0.9:  # keep-alive or zero-window probe
            emit(down, sent[down] - rng.choice([0, 1]), acked[down], 0x10, window, rng.choice([0, 1, 2]))
        elif r < 0.93:  # FIN
            emit(down, sent[down], acked[down], 0x11, window, 0)
            sent[down] += rng.choice([0, 1])
        elif r < 0.96:  # RST, or a new connection on the same ports
            if rng.random() < 0.5:
                emit(down, sent[down], acked[down], 0x14, 0, 0)
            else:
                isn[False] = rng.randrange(2**32)
                emit(False, isn[False], 0, 0x02, 64240, 0)
                sent[False] = isn[False] + 1
        elif len(frames) >= 2:  # swap the last two frames (reordering on the wire)
            (t1, f1), (t2, f2) = frames[-2], frames[-1]
            frames[-2:] = [(t1, f2), (t2, f1)]
    return frames


# ------------------------------------------------------------------ transports, hosts


def udp(down: bool, size: int, sport: int = 40001, dport: int = 9000) -> ScapyPacket:
    src, dst, s, d = (REMOTE, CLIENT, dport, sport) if down else (CLIENT, REMOTE, sport, dport)
    return eth() / IP(src=src, dst=dst) / UDP(sport=s, dport=d) / Raw(b"u" * size)


scenario("udp")(
    lambda: [(0.0, udp(False, 512)), (0.001, udp(False, 512))] + [(0.01 * i, udp(True, 1200)) for i in (1, 2, 3)]
)


def test_udp_flow(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "udp")
    assert analysis.payload_bytes == {"down": 3600, "up": 1024}
    assert analysis.wire_bytes == {"down": 3 * (42 + 1200), "up": 2 * (42 + 512)}
    assert analysis.flows == (FlowStats("udp", 40001, 9000, 3600, 1024, 3, 2),)
    assert analysis.payload_histogram["up"][bucket(512)] == 2 and bucket(512) == 4
    assert analysis.payload_histogram["down"][bucket(1200)] == 3 and bucket(1200) == 6


@scenario("noise")
def with_other_hosts() -> list[tuple[float, ScapyPacket]]:
    noise = [
        (0.0005, eth() / IP(src=STRANGER, dst=REMOTE) / TCP(sport=1, dport=RPORT) / Raw(b"z" * 300)),
        (0.0006, eth() / IP(src=CLIENT, dst=STRANGER) / UDP(sport=2, dport=3) / Raw(b"z" * 30)),
        (0.0007, eth() / ARP(psrc=CLIENT, pdst=REMOTE, hwsrc="02:00:00:00:00:01")),
        (0.0008, eth() / IPv6(src=CLIENT6, dst=REMOTE6) / UDP()),
    ]
    return sorted(basic_flow() + noise, key=lambda record: record[0])


def test_other_hosts_and_non_ip_frames_are_ignored(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "noise")
    assert analysis.other_packets == 4
    assert analysis.wire_bytes == {"down": BASIC_DOWN_WIRE, "up": BASIC_UP_WIRE}
    assert analysis.packets == {"down": 7, "up": 5}


scenario("flows")(lambda: [*basic_flow(), (0.1, udp(True, 5000)), (0.2, udp(False, 10, sport=40002, dport=53))])


def test_flows_are_sorted_by_payload(crafted: dict[str, Crafted]) -> None:
    flows = check(crafted, "flows").flows
    assert [(f.transport, f.client_port, f.remote_port) for f in flows] == [
        ("udp", 40001, 9000),  # 5000 bytes
        ("tcp", CPORT, RPORT),  # 3100 bytes
        ("udp", 40002, 53),  # 10 bytes
    ]


scenario("sizes")(lambda: [(i * 0.001, udp(True, n)) for i, n in enumerate([0, 64, 65, 1448, 1449, 8950, 65000])])


def test_payload_histogram_bounds(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "sizes")
    expected = empty_histogram()
    for index in (0, 1, 2, 7, 8, 13, 14):  # 0 | <=64 | <=128 | <=1448 | <=1460 | <=8960 | <=65535
        expected["down"][index] += 1
    assert analysis.payload_histogram == expected


# ------------------------------------------------------------------------ link layers


def relinked(wrap: Callable[[ScapyPacket], ScapyPacket]) -> Callable[[], list[tuple[float, ScapyPacket]]]:
    """The basic flow with another link layer around each IP packet."""
    return lambda: [(when, wrap(packet[IP])) for when, packet in basic_flow()]


LINK_LAYERS = {  # name: (pcap link type, link-layer header bytes, wrapper)
    "vlan": (1, 18, lambda ip: eth() / Dot1Q(vlan=10) / ip),
    "qinq": (1, 22, lambda ip: eth() / Dot1AD(vlan=5) / Dot1Q(vlan=10) / ip),
    "sll": (113, 16, lambda ip: CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, src=b"\x02" * 8, proto=0x0800) / ip),
    "sll2": (
        276,
        20,
        lambda ip: CookedLinuxV2(proto=0x0800, ifindex=2, lladdrtype=1, lladdrlen=6, src=b"\x02" * 8) / ip,
    ),
    "raw101": (101, 0, lambda ip: ip),
    "raw12": (12, 0, lambda ip: ip),
}
for _name, (_linktype, _, _wrap) in LINK_LAYERS.items():
    scenario(f"link_{_name}", linktype=_linktype)(relinked(_wrap))


@pytest.mark.parametrize("name", LINK_LAYERS)
def test_link_types(crafted: dict[str, Crafted], name: str) -> None:
    header = LINK_LAYERS[name][1]
    analysis = check(crafted, f"link_{name}")
    # Same 7 + 5 packets as the basic flow, with `header` bytes of link layer, not 14.
    assert analysis.wire_bytes == {"down": BASIC_DOWN_WIRE + 7 * (header - 14), "up": BASIC_UP_WIRE + 5 * (header - 14)}
    assert analysis.payload_bytes == {"down": 3000, "up": 100}


@scenario("ipv6", client=CLIENT6, remote=REMOTE6)
def ipv6_flow() -> list[tuple[float, ScapyPacket]]:
    def seg6(down: bool, seq: int, ack: int, flags: str, payload: int = 0) -> ScapyPacket:
        src, dst, sport, dport = (REMOTE6, CLIENT6, RPORT, CPORT) if down else (CLIENT6, REMOTE6, CPORT, RPORT)
        packet = eth() / IPv6(src=src, dst=dst) / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt()
        return packet / TCP(sport=sport, dport=dport, seq=seq, ack=ack, flags=flags) / Raw(b"6" * payload)

    return [
        (0.0, seg6(False, ISN_C, 0, "S")),
        (0.010, seg6(True, ISN_R, ISN_C + 1, "SA")),
        (0.020, seg6(False, ISN_C + 1, ISN_R + 1, "A")),
        (0.030, seg6(True, ISN_R + 1, ISN_C + 1, "PA", 1200)),
        (0.100, seg6(True, ISN_R + 1, ISN_C + 1, "PA", 1200)),  # resent: a retransmission
        (0.101, seg6(False, ISN_C + 1, ISN_R + 1201, "A")),
    ]


def test_ipv6_with_extension_headers(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "ipv6")
    frame = 14 + 40 + 8 + 8 + 20  # Ethernet, IPv6, hop-by-hop, destination options, TCP
    assert analysis.wire_bytes == {"down": frame + 2 * (frame + 1200), "up": 3 * frame}
    assert analysis.payload_bytes == {"down": 2400, "up": 0}
    assert analysis.retransmits == {"down": 1, "up": 0}


# ------------------------------------------------------------------------ file formats


def late_by(late_ns: int) -> Callable[[], list[tuple[tuple[int, int], ScapyPacket]]]:
    # No handshake: the out-of-order window is exactly 3 ms.
    return lambda: [
        ((T0, 0), seg(True, 5001, 1001, "PA", 1000)),
        ((T0, 1_000), seg(True, 7001, 1001, "PA", 1000)),
        ((T0, 1_000 + late_ns), seg(True, 6001, 1001, "PA", 1000)),
    ]


scenario("nano_early", nano=True)(late_by(2_999_999))
scenario("nano_late", nano=True)(late_by(3_000_001))


def test_nanosecond_timestamps_decide_the_out_of_order_window(crafted: dict[str, Crafted]) -> None:
    # 2.999999 ms late is out-of-order, 3.000001 ms a retransmission: only nanosecond
    # timestamps can tell the two apart.
    assert check(crafted, "nano_early").retransmits["down"] == 0
    late = check(crafted, "nano_late")
    assert late.retransmits["down"] == 1
    assert late.last_packet_timestamp == pytest.approx(T0 + 0.003001001, abs=1e-6)


scenario("big_endian", endianness=">")(basic_flow)
scenario("snaplen_64", snaplen=64)(basic_flow)  # 10 payload bytes captured per packet


def test_big_endian_pcap(crafted: dict[str, Crafted]) -> None:
    assert crafted["big_endian"].path.read_bytes()[:4] == b"\xa1\xb2\xc3\xd4"
    assert check(crafted, "big_endian") == analyse_pcap(crafted["basic"].path, CLIENT, REMOTE)


def test_snaplen_does_not_change_the_counts(crafted: dict[str, Crafted]) -> None:
    assert check(crafted, "snaplen_64") == analyse_pcap(crafted["basic"].path, CLIENT, REMOTE)


def test_pages_given_back_while_reading_change_nothing(
    crafted: dict[str, Crafted], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = crafted["random"].path
    whole = analyse_pcap(path, CLIENT, REMOTE)
    monkeypatch.setattr(pcap_module, "_RELEASE_EVERY", 4096)  # madvise every page or so
    assert analyse_pcap(path, CLIENT, REMOTE) == whole
    assert path.stat().st_size > 20 * 4096


@pytest.mark.parametrize("cut", [10, 16 + 54 - 5])  # inside the last packet / its header
def test_truncated_last_record_is_tolerated(crafted: dict[str, Crafted], tmp_path: Path, cut: int) -> None:
    path = tmp_path / "killed.pcap"
    path.write_bytes(crafted["basic"].path.read_bytes()[:-cut])
    analysis = analyse_pcap(path, CLIENT, REMOTE)
    assert analysis.truncated_tail is True
    assert analysis.packets == {"down": 6, "up": 5}  # the last ACK (down, 54 bytes) is gone
    assert analysis.wire_bytes == {"down": BASIC_DOWN_WIRE - 54, "up": BASIC_UP_WIRE}


def test_empty_and_header_only_files_count_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    header_only = write(tmp_path / "header.pcap", [])
    for path in (empty, header_only):
        analysis = analyse_pcap(path, CLIENT, REMOTE)
        assert analysis.packets == {"down": 0, "up": 0}
        assert analysis.wire_bytes == {"down": 0, "up": 0}
        assert analysis.flows == ()
        assert analysis.first_packet_timestamp is None and analysis.last_packet_timestamp is None
        assert analysis.truncated_tail is False
        assert analysis.payload_histogram == empty_histogram()


def test_pcapng_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "capture.pcapng"
    writer = PcapNgWriter(str(path))
    writer.write(seg(True, 1, 1))
    writer.close()
    with pytest.raises(PcapError) as error:
        analyse_pcap(path, CLIENT, REMOTE)
    assert str(path) in str(error.value)
    assert "pcapng is not supported" in str(error.value)
    assert "editcap -F pcap" in str(error.value)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"<html>not a capture</html>" * 4, "not a classic pcap"),
        (b"\xd4\xc3\xb2\xa1\x02\x00\x04\x00", "truncated pcap file header"),
    ],
)
def test_garbage_and_truncated_header_are_refused(tmp_path: Path, content: bytes, words: str) -> None:
    path = tmp_path / "bad.pcap"
    path.write_bytes(content)
    with pytest.raises(PcapError, match=words) as error:
        analyse_pcap(path, CLIENT, REMOTE)
    assert str(path) in str(error.value)
    with pytest.raises(PcapError):
        list(iter_packets(path, CLIENT, REMOTE))


def test_missing_file_is_a_pcap_error(tmp_path: Path) -> None:
    with pytest.raises(PcapError, match="cannot read"):
        analyse_pcap(tmp_path / "nowhere.pcap", CLIENT, REMOTE)
