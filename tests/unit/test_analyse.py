"""bigbinf.measure.wire.analyse (and pcap.py) on pcaps and pcapngs crafted with scapy (or
block by block), checked three ways: numbers derived by hand in each test, scapy's own
parse of the same file (frame and payload bytes as captured), and tshark's
`tcp.analysis.retransmission` (per way and frame by frame; skipped without tshark).  A
lab test (root, network namespaces) checks a real bulk transfer with drops.
"""

from __future__ import annotations

import dataclasses
import gzip
import heapq
import os
import random
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from scapy.config import conf
from scapy.contrib.mpls import MPLS
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPerror, TCPerror
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop, Jumbo
from scapy.layers.l2 import ARP, GRE, CookedLinux, CookedLinuxV2, Dot1AD, Dot1Q, Ether
from scapy.layers.ppp import PPP, PPPoE
from scapy.packet import Packet as ScapyPacket
from scapy.packet import Raw, bind_layers
from scapy.utils import PcapNgWriter, PcapReader, PcapWriter

import bigbinf.measure.wire.analyse as analyse_module
import bigbinf.measure.wire.pcap as pcap_module
from bigbinf.measure.wire.analyse import (
    ENGINE_VARIABLE,
    Analysis,
    EmptyCapture,
    FlowStats,
    Packet,
    PcapError,
    TruncatedCapture,
    _fast_tally,
    _retransmissions,
    analyse_pcap,
    iter_packets,
)
from bigbinf.result import PAYLOAD_BUCKETS, empty_histogram

# scapy, the independent reader, does not know these two by itself.
conf.l2types.register(14, conf.l2types[101])  # OpenBSD's raw IP link type
bind_layers(CookedLinux, MPLS, proto=0x8847)  # MPLS in Linux cooked captures

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
    records: int = 0


def scapy_view(path: Path, client: str, remote: str) -> ScapyView:
    """Frame and L4 payload bytes per way from scapy's dissection of the same file, as
    captured (super-frames not split)."""
    view = ScapyView({"down": 0, "up": 0}, {"down": 0, "up": 0}, {"down": 0, "up": 0})
    with PcapReader(str(path)) as reader:
        for packet in reader:
            view.records += 1
            ip = packet.getlayer(IP) or packet.getlayer(IPv6)
            if ip is None or {ip.src, ip.dst} != {client, remote}:
                continue
            way = "down" if ip.src == remote else "up"
            view.wire[way] += packet.wirelen
            view.packets[way] += 1
            view.payload[way] += _scapy_payload(ip, packet.wirelen - (len(bytes(packet)) - len(bytes(ip))))
    return view


def _scapy_payload(ip: ScapyPacket, on_wire: int) -> int:
    """on_wire: the IP packet's bytes on the wire (the frame's original length less the
    link layer): what an IP length of 0 (TSO, BIG TCP) or a length beyond it means."""
    l4 = ip.getlayer(TCP) or ip.getlayer(UDP) or ip.payload
    if isinstance(ip, IP):
        header = ip.ihl * 4
        length = ip.len or on_wire
    else:
        header = 40 + len(bytes(ip.payload)) - len(bytes(l4))  # with the extension headers
        jumbo = ip.getlayer(Jumbo)
        length = 40 + (ip.plen or (jumbo.jumboplen if jumbo else on_wire - 40))
        if not ip.plen and not jumbo and ip.nh == 6:  # scapy takes no payload then: dissect it here
            l4, header = TCP(bytes(ip)[40:]), 40
    l4_length = min(length, on_wire) - header
    if isinstance(l4, TCP):
        return l4_length - l4.dataofs * 4
    if isinstance(l4, UDP):
        return l4_length - 8
    return l4_length


# tshark runs in threads while pytest rewrites os.environ (PYTEST_CURRENT_TEST) for each
# test: a child spawned (vfork) from the live environ can read it mid-rewrite and fail
# with EFAULT ("Bad address").  A copy taken once is never rewritten.
TOOL_ENV = dict(os.environ)


@pytest.fixture(autouse=True, params=["python", "auto"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs with each analyser engine as the default (the environment
    variable), so the errors, the lenient reads and the numbers written in the tests
    hold for the pure-Python path and for the compiled fast path with its fallback;
    check_file() also compares the two engines' Analysis field by field."""
    monkeypatch.setenv(ENGINE_VARIABLE, request.param)
    return str(request.param)


def tshark_retransmissions(path: Path, remote: str) -> list[tuple[int, bool]]:
    """(frame number, down) of every frame tshark marks tcp.analysis.retransmission: the
    per-way counts of `-Y 'tcp.analysis.retransmission && ip.src==A'`, in one run."""
    out = subprocess.run(
        [TSHARK or "tshark", "-n", "-r", str(path), "-Y", "tcp.analysis.retransmission",
         "-T", "fields", "-e", "frame.number", "-e", "ip.src", "-e", "ipv6.src"],
        capture_output=True, text=True, check=True, env=TOOL_ENV,
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


def check(crafted: dict[str, Crafted], name: str, *, mtu: int | None = None) -> Analysis:
    """Analyse a crafted pcap, and hold the result against scapy and tshark."""
    pcap = crafted[name]
    theirs = pcap.tshark.result() if pcap.tshark is not None else None
    return check_file(pcap.path, pcap.client, pcap.remote, theirs, mtu=mtu)


def check_file(
    path: Path, client: str, remote: str, theirs: list[tuple[int, bool]] | None, *, mtu: int | None = None
) -> Analysis:
    analysis = analyse_pcap(path, client, remote, mtu=mtu, engine="python")
    # The compiled fast path (or, where it does not apply, its fallback) gives the same
    # Analysis, every field, as the pure-Python reference.
    assert analyse_pcap(path, client, remote, mtu=mtu, engine="auto") == analysis
    view = scapy_view(path, client, remote)
    assert analysis.captured_wire_bytes == view.wire
    assert analysis.payload_bytes == view.payload
    assert analysis.captured_packets == view.packets
    assert analysis.records == view.records
    if analysis.superframes == {"down": 0, "up": 0}:
        assert analysis.wire_bytes == analysis.captured_wire_bytes
        assert analysis.packets == analysis.captured_packets
    assert {way: sum(counts) for way, counts in analysis.payload_histogram.items()} == analysis.packets
    assert {
        way: sum(getattr(f, f"packets_{way}") for f in analysis.flows) for way in ("down", "up")
    } == analysis.packets
    if theirs is not None:
        down = sum(1 for _, is_down in theirs if is_down)
        assert analysis.retransmits == {"down": down, "up": len(theirs) - down}
        assert _retransmissions(path, client, remote, engine="python") == theirs
        assert _retransmissions(path, client, remote, engine="auto") == theirs
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
    "raw14": (14, 0, lambda ip: ip),  # OpenBSD's raw IP, as some libpcap builds wrote it
    # Encapsulations the decoder opens, after the link layer and any VLAN tags.
    "pppoe": (1, 22, lambda ip: eth() / PPPoE(sessionid=7) / PPP(proto=0x0021) / ip),
    "vlan_pppoe": (1, 26, lambda ip: eth() / Dot1Q(vlan=10) / PPPoE(sessionid=7) / PPP(proto=0x0021) / ip),
    "mpls": (1, 22, lambda ip: eth() / MPLS(label=16, s=0) / MPLS(label=17, s=1) / ip),
    "vlan_mpls": (1, 22, lambda ip: eth() / Dot1Q(vlan=10) / MPLS(label=16, s=1) / ip),
    "sll_mpls": (113, 20, lambda ip: CookedLinux(pkttype=0, lladdrtype=1, lladdrlen=6, proto=0x8847) / MPLS(s=1) / ip),
    "sll2_pppoe": (
        276,
        28,
        lambda ip: CookedLinuxV2(proto=0x8864, ifindex=2, lladdrtype=1, lladdrlen=6) / PPPoE() / PPP(proto=0x21) / ip,
    ),
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
def test_a_capture_cut_short_is_an_error_unless_asked(crafted: dict[str, Crafted], tmp_path: Path, cut: int) -> None:
    path = tmp_path / "killed.pcap"
    whole = crafted["basic"].path.read_bytes()
    path.write_bytes(whole[:-cut])
    last_record = len(whole) - (16 + 54)  # the last ACK (down, 54 bytes)
    with pytest.raises(TruncatedCapture) as error:
        analyse_pcap(path, CLIENT, REMOTE)
    assert error.value.offset == last_record
    assert f"{path}: the record at byte {last_record} " in str(error.value)
    assert "the capture was cut short" in str(error.value)
    assert isinstance(error.value, PcapError)  # what transfer.py catches

    analysis = analyse_pcap(path, CLIENT, REMOTE, strict=False)
    assert analysis.truncated_tail is True
    assert analysis.truncated_at == last_record
    assert analysis.records == 11
    assert analysis.packets == {"down": 6, "up": 5}  # the last ACK is gone
    assert analysis.wire_bytes == {"down": BASIC_DOWN_WIRE - 54, "up": BASIC_UP_WIRE}
    assert len(list(iter_packets(path, CLIENT, REMOTE))) == 11  # figures: lenient


def test_empty_and_header_only_files_are_errors_not_zero_counts(tmp_path: Path) -> None:
    # Zero counts would read as a transfer that moved nothing; a capture that ran holds
    # at least one record.  Either engine, strict or not.
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    header_only = write(tmp_path / "header.pcap", [])
    header_only_ng = tmp_path / "header.pcapng"
    header_only_ng.write_bytes(shb() + idb("<", 1, 128) + block("<", 5, b"\x00" * 12))  # and statistics
    for path, words in (
        (empty, "the file is empty (0 bytes)"),
        (header_only, "the capture holds no packets, only its file header"),
        (header_only_ng, "the capture holds no packets, only its file header"),
    ):
        for engine in ("python", "auto"):
            for strict in (True, False):
                with pytest.raises(EmptyCapture) as error:  # a PcapError: transfer.py tells it apart
                    analyse_pcap(path, CLIENT, REMOTE, engine=engine, strict=strict)  # type: ignore[arg-type]
                assert str(error.value).startswith(f"{path}: {words}")
                assert "capture the transfer again" in str(error.value)
    # Records of other hosts only: a capture that ran, and nothing between the two hosts.
    others = write(tmp_path / "others.pcap", [(0.0, eth() / IP(src=STRANGER, dst=CLIENT) / TCP())])
    analysis = analyse_pcap(others, CLIENT, REMOTE)
    assert (analysis.records, analysis.other_packets, analysis.packets) == (1, 1, {"down": 0, "up": 0})
    assert analysis.flows == () and analysis.first_packet_timestamp is None
    assert analysis.payload_histogram == empty_histogram()


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    # Opening a FIFO for reading waits for a writer: the analysis would hang (outside the
    # worker: forever).  The analysis runs in a thread so a hang fails the test, not the run.
    fifo = tmp_path / "capture.pcap"
    os.mkfifo(fifo)
    for engine in ("python", "auto"):
        with ThreadPoolExecutor(max_workers=1) as pool:
            future = pool.submit(analyse_pcap, fifo, CLIENT, REMOTE, engine=engine)
            try:
                error = future.exception(timeout=30)
            finally:
                if not future.done():  # unblock the thread so the test can end
                    with open(fifo, "wb"):
                        pass
        assert isinstance(error, PcapError)
        assert str(error) == (
            f"{fifo}: not a regular file but a FIFO (named pipe); a capture is read from a file: give the path "
            "of the pcap or pcapng file (write a pipe's capture to a file first)"
        )
    with pytest.raises(PcapError, match="not a regular file but a directory"):
        analyse_pcap(tmp_path, CLIENT, REMOTE)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"<html>not a capture</html>" * 4, "not a pcap or pcapng file"),
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


# ------------------------------------------------------------- offloads: super-frames
#
# With TSO/GSO on the sender and GRO on the receiver (and BIG TCP) the capture sees TCP
# frames larger than the MTU.  wire_bytes and packets count the frames they stand for:
# ceil(payload / segment size) frames, each with the super-frame's headers.

TIMESTAMPS = [("NOP", None), ("NOP", None), ("Timestamp", (1, 2))]  # 12 option bytes, as Linux's data segments
SYN_OPTIONS = [("SAckOK", b""), ("Timestamp", (1, 0)), ("NOP", None), ("WScale", 7)]


def seg_with(
    down: bool,
    seq: int,
    ack: int,
    flags: str,
    payload: int = 0,
    *,
    options: list[tuple[str, Any]] | None = None,
    ip_len: int | None = None,
) -> ScapyPacket:
    """An Ethernet/IPv4/TCP frame with TCP options (timestamps unless told); ip_len=0 is
    a TSO frame as captured before segmentation."""
    src, dst, sport, dport = (REMOTE, CLIENT, RPORT, CPORT) if down else (CLIENT, REMOTE, CPORT, RPORT)
    ip = IP(src=src, dst=dst) if ip_len is None else IP(src=src, dst=dst, len=ip_len)
    tcp = TCP(
        sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, options=TIMESTAMPS if options is None else options
    )
    return eth() / ip / tcp / Raw(b"o" * payload) if payload else eth() / ip / tcp


def seg6_with(
    down: bool, seq: int, ack: int, flags: str, payload: int = 0, *, options: list[tuple[str, Any]] | None = None,
    extensions: tuple[ScapyPacket, ...] = (), plen: int | None = None,
) -> ScapyPacket:  # fmt: skip
    src, dst, sport, dport = (REMOTE6, CLIENT6, RPORT, CPORT) if down else (CLIENT6, REMOTE6, CPORT, RPORT)
    packet = eth() / (IPv6(src=src, dst=dst) if plen is None else IPv6(src=src, dst=dst, plen=plen))
    for extension in extensions:
        packet = packet / extension
    tcp = TCP(
        sport=sport, dport=dport, seq=seq, ack=ack, flags=flags, options=TIMESTAMPS if options is None else options
    )
    return packet / tcp / Raw(b"6" * payload) if payload else packet / tcp


HEADERS = 14 + 20 + 32  # Ethernet, IPv4, TCP with timestamps


@scenario("offloads")
def offloads() -> list[tuple[float, ScapyPacket]]:
    """The client announces MSS 1460 (so the remote's segments carry 1448 with
    timestamps), the remote 1400 (the client's carry 1388).  Down: GRO merged 64000
    bytes at the capturing receiver, twice (the second an RTO retransmission); up: a
    TSO frame of 20000 bytes with IP total length 0, as captured before the NIC cut it."""
    return [
        (0.0, seg_with(False, ISN_C, 0, "S", options=[("MSS", 1460), *SYN_OPTIONS])),
        (0.010, seg_with(True, ISN_R, ISN_C + 1, "SA", options=[("MSS", 1400), *SYN_OPTIONS])),
        (0.020, seg_with(False, ISN_C + 1, ISN_R + 1, "A")),
        (0.030, seg_with(True, 5001, 1001, "A", 1448)),  # exactly one segment: not split
        (0.031, seg_with(True, 6449, 1001, "PA", 64000)),
        (0.032, seg_with(False, 1001, 6449, "A")),
        (0.040, seg_with(False, 1001, 6449, "PA", 20000, ip_len=0)),
        (0.050, seg_with(True, 70449, 21001, "A")),
        (0.300, seg_with(True, 6449, 21001, "PA", 64000)),  # resent: one retransmission, as tshark
        (0.301, seg_with(False, 21001, 70449, "A")),
    ]


def test_offload_super_frames_are_counted_as_the_frames_on_the_wire(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "offloads")  # captured figures as scapy, retransmissions as tshark
    # Down: 64000 = 44 x 1448 + 288, twice; up: 20000 = 14 x 1388 + 568.
    captured = analysis.captured_wire_bytes
    assert analysis.wire_bytes == {"down": captured["down"] + 2 * 44 * HEADERS, "up": captured["up"] + 14 * HEADERS}
    assert analysis.wire_bytes["down"] == (14 + 20 + 40) + HEADERS + (HEADERS + 1448) + 2 * (64000 + 45 * HEADERS)
    assert analysis.captured_packets == {"down": 5, "up": 5}
    assert analysis.packets == {"down": 5 + 2 * 44, "up": 5 + 14}
    assert analysis.superframes == {"down": 2, "up": 1}
    assert analysis.payload_bytes == {"down": 1448 + 2 * 64000, "up": 20000}  # the TSO frame's from its frame
    assert analysis.retransmits == {"down": 1, "up": 0}  # per captured frame
    assert analysis.flows == (FlowStats("tcp", CPORT, RPORT, 129448, 20000, 93, 19),)
    expected = empty_histogram()
    expected["down"][0] = 2
    expected["down"][bucket(1448)] = 1 + 2 * 44
    expected["down"][bucket(288)] = 2
    expected["up"][0] = 4
    expected["up"][bucket(1388)] = 14
    expected["up"][bucket(568)] = 1
    assert analysis.payload_histogram == expected


def test_a_record_longer_than_its_super_frame_adds_its_excess_once(tmp_path: Path) -> None:
    # From a real capture: a GSO frame whose IP length is 60,165 recorded with an
    # original length of 262,144 (a snap length written as the frame's).  Its 60,113
    # bytes of payload stand for 42 segments of 1448, each with the real headers (66
    # bytes); the record's excess is the captured frame's, once: not added to all 42
    # (8.5 MB of wire bytes for one 262 KB record).
    handshake_frames = [
        seg_with(False, ISN_C, 0, "S", options=[("MSS", 1460), *SYN_OPTIONS]),
        seg_with(True, ISN_R, ISN_C + 1, "SA", options=[("MSS", 1460), *SYN_OPTIONS]),
        seg_with(False, ISN_C + 1, ISN_R + 1, "A"),
    ]
    big = bytes(seg_with(True, 5001, 1001, "PA", 60_165 - 20 - 32))
    assert len(big) == 14 + 60_165
    records = [(T0, i, len(bytes(f)), bytes(f)) for i, f in enumerate(handshake_frames)]
    path = tmp_path / "excess.pcap"
    path.write_bytes(classic_pcap([*records, (T0, 10, 262_144, big)], snaplen=262_144))
    analysis = check_file(path, CLIENT, REMOTE, tshark_retransmissions(path, REMOTE) if TSHARK else None)
    assert fast_path_applies(path, CLIENT, REMOTE)
    assert analysis.superframes == {"down": 1, "up": 0}
    assert analysis.packets["down"] == 1 + 42
    syn_ack = len(bytes(handshake_frames[1]))
    assert analysis.captured_wire_bytes["down"] == syn_ack + 262_144
    assert analysis.wire_bytes["down"] == syn_ack + 262_144 + 41 * HEADERS
    assert analysis.payload_bytes["down"] == 60_113


def pppoe(frame: ScapyPacket, length: int | None = None, padding: int = 0) -> bytes:
    """An Ethernet/PPPoE session/PPP frame around the IP packet of `frame`; `length` is
    the PPPoE length field (default: the PPP protocol field and the IP packet)."""
    ip = bytes(frame[IP])
    session = PPPoE(sessionid=7, len=len(ip) + 2 if length is None else length) / PPP(proto=0x0021)
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=0x8864) / session) + ip + b"\0" * padding


def test_a_pppoe_length_shorter_than_the_ip_length_bounds_the_payload(tmp_path: Path) -> None:
    # From a real capture: the PPPoE session header says 100 bytes of TCP payload follow,
    # the IPv4 total length 200.  tshark bounds the IP packet by the PPPoE length; taken
    # from the IP length, padding became payload and the next segments looked resent.
    down = [
        (0.010, pppoe(seg(True, ISN_R, ISN_C + 1, "SA"))),
        (0.030, pppoe(seg(True, 5001, 1001, "PA", 200), length=2 + 20 + 20 + 100)),
        (0.060, pppoe(seg(True, 5101, 1001, "PA", 100))),
        (0.090, pppoe(seg(True, 5201, 1001, "PA", 100), padding=30)),  # and trailing padding, as Ethernet's
    ]
    up = [
        (0.0, pppoe(seg(False, ISN_C, 0, "S"))),
        (0.020, pppoe(seg(False, ISN_C + 1, ISN_R + 1, "A"))),
        (0.120, pppoe(seg(False, 1001, 5301, "A"))),
    ]
    path = write(tmp_path / "pppoe.pcap", sorted(down + up, key=lambda record: record[0]))
    analysis = analyse_pcap(path, CLIENT, REMOTE, engine="python")
    assert analyse_pcap(path, CLIENT, REMOTE, engine="auto") == analysis
    assert analysis.payload_bytes == {"down": 300, "up": 0}
    assert analysis.retransmits == {"down": 0, "up": 0}
    # The frames as captured: padding and all (the frame's bytes crossed the wire).
    assert analysis.wire_bytes == {"down": sum(len(f) for _, f in down), "up": sum(len(f) for _, f in up)}
    if TSHARK:
        out = subprocess.run(
            [TSHARK, "-n", "-r", str(path), "-Y", "ip.src == " + REMOTE, "-T", "fields", "-e", "tcp.len"],
            capture_output=True, text=True, check=True, env=TOOL_ENV,
        ).stdout.split()  # fmt: skip
        assert sum(int(n) for n in out) == analysis.payload_bytes["down"]
        assert tshark_retransmissions(path, REMOTE) == _retransmissions(path, CLIENT, REMOTE) == []


@scenario("big_tcp_ipv6", client=CLIENT6, remote=REMOTE6, snaplen=262144)
def big_tcp_ipv6() -> list[tuple[float, ScapyPacket]]:
    """An IPv6 BIG TCP upload: a jumbogram (payload length 0, the length in a hop-by-hop
    jumbo option), and a super-frame with payload length 0 and no option (kernels that
    strip it before the tap); MSS 1440 both ways, 1428 with timestamps."""
    # The length is of the bytes after the fixed header: hop-by-hop header, TCP, payload.
    jumbo = IPv6ExtHdrHopByHop(options=[Jumbo(jumboplen=8 + 32 + 100_000)])
    return [
        (0.0, seg6_with(False, ISN_C, 0, "S", options=[("MSS", 1440), *SYN_OPTIONS])),
        (0.010, seg6_with(True, ISN_R, ISN_C + 1, "SA", options=[("MSS", 1440), *SYN_OPTIONS])),
        (0.020, seg6_with(False, ISN_C + 1, ISN_R + 1, "A")),
        (0.030, seg6_with(False, 1001, 5001, "A", 100_000, plen=0, extensions=(jumbo,))),
        (0.031, seg6_with(True, 5001, 101_001, "A")),
        (0.040, seg6_with(False, 101_001, 5001, "PA", 80_000, plen=0)),
        (0.041, seg6_with(True, 5001, 181_001, "A")),
    ]


def test_ipv6_jumbograms_and_payload_length_0(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "big_tcp_ipv6")
    assert analysis.payload_bytes == {"down": 0, "up": 180_000}
    headers = 14 + 40 + 32  # what each real segment carries: no hop-by-hop jumbo header
    # 100000 = 70 x 1428 + 40; 80000 = 56 x 1428 + 32.
    assert analysis.superframes == {"down": 0, "up": 2}
    assert analysis.packets == {"down": 3, "up": 2 + 71 + 57}
    syn, ack = headers + 8, headers  # the SYN's TCP options take 20 bytes, not 12
    assert analysis.captured_wire_bytes["up"] == syn + ack + (headers + 8 + 100_000) + (headers + 80_000)
    assert analysis.wire_bytes["up"] == syn + ack + (100_000 + 71 * headers) + (80_000 + 57 * headers)
    assert analysis.payload_histogram["up"][bucket(1428)] == 70 + 56
    assert analysis.payload_histogram["up"][bucket(40)] == 2  # both remainders (40 and 32)


@scenario("no_handshake_ipv6", client=CLIENT6, remote=REMOTE6)
def no_handshake_ipv6() -> list[tuple[float, ScapyPacket]]:
    """Capture started mid-transfer: no SYN, so the segment size comes from the MTU, less
    the IPv6 header with its extension headers and the TCP header.  A UDP GSO frame is
    not split: its segment size is not on the wire."""
    extensions = (IPv6ExtHdrHopByHop(), IPv6ExtHdrDestOpt())
    return [
        (0.0, seg6_with(True, 5001, 1001, "A", 20_000, extensions=extensions)),
        (0.001, seg6_with(False, 1001, 25001, "A")),
        (0.002, eth() / IPv6(src=REMOTE6, dst=CLIENT6) / UDP(sport=9000, dport=40001) / Raw(b"u" * 30_000)),
    ]


@pytest.mark.parametrize(("mtu", "segment"), [(None, 1500 - 56 - 32), (1500, 1500 - 56 - 32), (9000, 9000 - 56 - 32)])
def test_without_a_handshake_the_mtu_gives_the_segment_size(
    crafted: dict[str, Crafted], mtu: int | None, segment: int
) -> None:
    analysis = check(crafted, "no_handshake_ipv6", mtu=mtu)
    frames = -(-20_000 // segment)  # 15 of 1412, or 3 of 8912
    headers = 14 + 40 + 16 + 32
    assert analysis.superframes == {"down": 1, "up": 0}
    assert analysis.packets == {"down": frames + 1, "up": 1}
    assert analysis.wire_bytes["down"] == 20_000 + frames * headers + (14 + 40 + 8 + 30_000)
    assert analysis.payload_histogram["down"][bucket(segment)] == frames - 1
    assert analysis.payload_histogram["down"][bucket(20_000 - (frames - 1) * segment)] == 1


def test_a_wrong_mtu_is_refused(crafted: dict[str, Crafted]) -> None:
    with pytest.raises(PcapError, match="is not a link MTU"):
        analyse_pcap(crafted["basic"].path, CLIENT, REMOTE, mtu=20)


# ------------------------------------------------------------------------ wrong input


@scenario("ip_length_beyond_frame")
def ip_length_beyond_frame() -> list[tuple[float, ScapyPacket]]:
    # 100 bytes of payload, but the IPv4 total length says 1500: taken as such, the next
    # segment (5101) would look like old data, a retransmission.  tshark caps it too.
    long4 = eth() / IP(src=REMOTE, dst=CLIENT, len=1500) / TCP(sport=RPORT, dport=CPORT, seq=5001, ack=1001, flags="PA")
    return [
        *handshake(),
        (0.030, long4 / Raw(b"x" * 100)),
        (0.100, seg(True, 5101, 1001, "PA", 100)),
        (0.101, seg(False, 1001, 5201, "A")),
    ]


@scenario("ipv6_length_beyond_frame", client=CLIENT6, remote=REMOTE6)
def ipv6_length_beyond_frame() -> list[tuple[float, ScapyPacket]]:
    return [
        (0.030, seg6_with(True, 5001, 1001, "PA", 100, plen=1500)),
        (0.100, seg6_with(True, 5101, 1001, "PA", 100)),
    ]


@pytest.mark.parametrize("name", ["ip_length_beyond_frame", "ipv6_length_beyond_frame"])
def test_an_ip_length_beyond_the_frame_is_capped(crafted: dict[str, Crafted], name: str) -> None:
    analysis = check(crafted, name)
    assert analysis.payload_bytes["down"] == 200
    assert analysis.retransmits == {"down": 0, "up": 0}


@pytest.mark.parametrize(
    ("client", "remote", "words"),
    [
        (CLIENT, CLIENT, "the client and the remote are the same address"),
        ("2001:2:0::1", "2001:2::1", "the client and the remote are the same address"),
        ("client.example", REMOTE, "the client address 'client.example' is not an IPv4 or IPv6 address"),
        (CLIENT, "", "the remote address '' is not an IPv4 or IPv6 address"),
        (CLIENT, None, "the remote address None is not an IPv4 or IPv6 address"),
        (CLIENT, REMOTE6, "not of the same address family"),
    ],
)
def test_wrong_host_addresses_are_pcap_errors(
    crafted: dict[str, Crafted], client: Any, remote: Any, words: str
) -> None:
    path = crafted["basic"].path
    with pytest.raises(PcapError, match=words) as error:
        analyse_pcap(path, client, remote)
    assert str(path) in str(error.value)


def classic_pcap(records: list[tuple[int, int, int, bytes]], *, snaplen: int = 65535, nano: bool = False) -> bytes:
    """A little-endian classic pcap of (ts_sec, ts_frac, orig_len, data) records, written
    by hand: the fields are exactly what the test says, damage included."""
    out = struct.pack("<IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1)
    for sec, frac, orig_len, data in records:
        out += struct.pack("<IIII", sec, frac, len(data), orig_len) + data
    return out


FRAME = bytes(seg(True, 5001, 1001, "PA", 10))  # 64 bytes


def tshark_frames(path: Path) -> list[int]:
    """frame.len of every frame tshark reads; it fails on a file it cannot read to the end."""
    out = subprocess.run(
        [TSHARK or "tshark", "-n", "-r", str(path), "-T", "fields", "-e", "frame.len"],
        capture_output=True, text=True, check=True, env=TOOL_ENV,
    ).stdout  # fmt: skip
    return [int(length) for length in out.split()]


DAMAGED = [
    ((T0, 0, 200, FRAME * 3), {"snaplen": 128}),  # captured length beyond the snap length
    ((T0, 0, 0x80001, FRAME), {}),  # original length beyond any frame's
    ((T0, 0, 0xFFFFFFFF, FRAME), {}),
    ((T0, 1_000_000, 64, FRAME), {}),  # a fraction of 1 s or more
    ((T0, 1_000_000_000, 64, FRAME), {"nano": True}),
]


@pytest.mark.parametrize(("record", "options"), DAMAGED, ids=["snaplen", "orig_len", "orig_len_max", "us", "ns"])
def test_a_damaged_record_whose_framing_holds_is_skipped_and_counted(
    tmp_path: Path, record: tuple[int, int, int, bytes], options: dict[str, Any]
) -> None:
    # tshark reads past such a record (the next starts where its captured length says);
    # so does the analyser, deliberately: the record is not counted, and said.
    good = (T0, 0, 64, FRAME)
    path = tmp_path / "damaged.pcap"
    path.write_bytes(classic_pcap([good, record, good], **options))
    if TSHARK:
        assert len(tshark_frames(path)) == 3
    analysis = analyse_pcap(path, CLIENT, REMOTE, engine="python")
    assert analyse_pcap(path, CLIENT, REMOTE, engine="auto") == analysis
    assert fast_path_applies(path, CLIENT, REMOTE)  # skipped by the fast path itself
    assert (analysis.damaged_records, analysis.damaged_at) == (1, 24 + 16 + 64)
    assert analysis.records == 3
    assert analysis.packets == {"down": 2, "up": 0}
    assert analysis.wire_bytes == {"down": 128, "up": 0}
    assert len(list(iter_packets(path, CLIENT, REMOTE))) == 2


@pytest.mark.parametrize(
    ("record", "options", "words"),
    [
        ((T0, 0, 64, b"\0" * 0x80001), {}, "captured length 524289 exceeds any frame's (524288 bytes)"),
        (
            (T0, 0, 64, FRAME * 3),
            {"snaplen": 128, "cut": 10},
            "captured length 192 exceeds the file's snap length 128 and runs past the end of the file",
        ),
    ],
    ids=["caplen", "snaplen_past_end"],
)
def test_a_damaged_record_that_loses_the_framing_is_an_error_naming_its_offset(
    tmp_path: Path, record: tuple[int, int, int, bytes], options: dict[str, Any], words: str
) -> None:
    good = (T0, 0, 64, FRAME)
    path = tmp_path / "damaged.pcap"
    options = dict(options)  # the parameter's own dict is shared by both engines' runs
    cut = options.pop("cut", 0)
    content = classic_pcap([good, record, good], **options)
    path.write_bytes(content[: len(content) - 80 - cut] if cut else content)
    damaged_at = 24 + 16 + 64
    for read in (
        lambda: analyse_pcap(path, CLIENT, REMOTE, strict=False, engine="python"),
        lambda: analyse_pcap(path, CLIENT, REMOTE, strict=False, engine="auto"),
        lambda: list(iter_packets(path, CLIENT, REMOTE)),
    ):
        with pytest.raises(PcapError) as error:
            read()
        assert f"{path}: damaged record at byte {damaged_at}: {words}" in str(error.value)
        assert "capture the transfer again" in str(error.value)


def test_one_damaged_record_among_many_leaves_the_rest_counted_as_tshark_counts_them(
    crafted: dict[str, Crafted], tmp_path: Path
) -> None:
    # As in real captures refused whole for one over-long record among 100 or 245: a
    # record of other hosts with an impossible original length in the middle of a
    # busy trace.  Every other frame is counted; the retransmissions are tshark's, frame
    # by frame (the damaged record still takes its frame number).
    whole = crafted["random"].path.read_bytes()  # nanosecond classic pcap
    offset, index = 24, 0
    while index < 150:
        offset += 16 + struct.unpack_from("<I", whole, offset + 8)[0]
        index += 1
    stranger = bytes(eth() / IP(src=STRANGER, dst=CLIENT) / TCP())
    damaged = struct.pack("<IIII", T0, 0, len(stranger), 0x100000) + stranger
    path = tmp_path / "one_damaged.pcap"
    path.write_bytes(whole[:offset] + damaged + whole[offset:])
    original = analyse_pcap(crafted["random"].path, CLIENT, REMOTE, engine="python")
    analysis = analyse_pcap(path, CLIENT, REMOTE, engine="python")
    assert analyse_pcap(path, CLIENT, REMOTE, engine="auto") == analysis
    assert (analysis.damaged_records, analysis.damaged_at, analysis.records) == (1, offset, original.records + 1)
    fields = {"damaged_records": 0, "damaged_at": None, "records": original.records}
    assert dataclasses.replace(analysis, **fields) == original
    frames = _retransmissions(path, CLIENT, REMOTE, engine="python")
    assert _retransmissions(path, CLIENT, REMOTE, engine="auto") == frames
    assert frames == [(n + (n > 150), down) for n, down in _retransmissions(crafted["random"].path, CLIENT, REMOTE)]
    if TSHARK:
        assert len(tshark_frames(path)) == original.records + 1
        assert frames == tshark_retransmissions(path, REMOTE)


def test_a_gzip_file_is_named_as_such(crafted: dict[str, Crafted], tmp_path: Path) -> None:
    path = tmp_path / "capture.pcap.gz"
    path.write_bytes(gzip.compress(crafted["basic"].path.read_bytes()))
    with pytest.raises(PcapError, match="gzip-compressed") as error:
        analyse_pcap(path, CLIENT, REMOTE)
    assert f"gzip -dc {path}" in str(error.value)


# ------------------------------------------------------ encapsulations not opened


def pair_inside(down: bool = True, payload: int = 500) -> ScapyPacket:
    # UDP: tshark opens these tunnels, and TCP inside would join its sequence analysis.
    src, dst = (REMOTE, CLIENT) if down else (CLIENT, REMOTE)
    return IP(src=src, dst=dst) / UDP(sport=9000, dport=40001) / Raw(b"t" * payload)


@scenario("tunnels")
def tunnels() -> list[tuple[float, ScapyPacket | bytes]]:
    """The basic flow, and host-pair packets inside encapsulations the decoder does not
    open (each counted by kind), and frames that only look so (not counted)."""
    router = "198.18.0.254"
    outer = eth() / IP(src=STRANGER, dst=router)
    extra: list[tuple[float, ScapyPacket | bytes]] = [
        (0.0001, outer / GRE() / pair_inside()),
        (0.0002, outer / GRE() / pair_inside(down=False)),
        (0.0003, outer / pair_inside()),  # IP in IP
        (0.0004, Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02", type=0x88B5) / pair_inside()),
        # An ICMP error quotes the header of the packet it answers: not a packet between the hosts.
        (0.0006, eth() / IP(src=router, dst=CLIENT) / ICMP(type=3, code=4) / IPerror(src=CLIENT, dst=REMOTE)
                 / TCPerror()),
        (0.0007, outer / UDP() / Raw(b"no pair in here" * 10)),
    ]  # fmt: skip
    return sorted([*basic_flow(), *extra], key=lambda record: record[0])


def test_host_pair_packets_inside_encapsulations_not_opened_are_counted(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "tunnels")
    assert analysis.undecoded == {"GRE": 2, "IPv4-in-IP": 1, "ethertype 0x88b5": 1}
    assert analysis.other_packets == 6
    assert analysis.records == 12 + 6
    assert analysis.packets == {"down": 7, "up": 5}  # the basic flow's, nothing more
    assert analysis.wire_bytes == {"down": BASIC_DOWN_WIRE, "up": BASIC_UP_WIRE}


VXLAN_HEADER = b"\x08\0\0\0\0\0\x01\0"  # flags: VNI valid; VNI 1


@scenario("tunnels_ipv6", client=CLIENT6, remote=REMOTE6)
def tunnels_ipv6() -> list[tuple[float, ScapyPacket]]:
    """Tunnels of IPv6: 6in4, IPv6 in IPv6, VXLAN (a UDP tunnel)."""
    inner = IPv6(src=REMOTE6, dst=CLIENT6) / UDP(sport=9000, dport=40001) / Raw(b"6" * 100)
    return [
        *ipv6_flow(),
        (0.2, eth() / IP(src=STRANGER, dst=REMOTE) / inner),  # 6in4 (IP protocol 41)
        (0.3, eth() / IPv6(src="2001:2::9", dst=REMOTE6) / inner),  # IPv6 in IPv6 (also 41)
        (0.4, eth() / IP(src=STRANGER, dst=REMOTE) / UDP(sport=4789, dport=4789) / VXLAN_HEADER / eth() / inner),
    ]  # fmt: skip


def test_ipv6_host_pair_in_tunnels_is_counted(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "tunnels_ipv6")
    assert analysis.undecoded == {"IPv6-in-IP": 2, "UDP tunnel": 1}
    assert analysis.records == 9


def test_mpls_over_something_else_is_counted_not_opened(tmp_path: Path) -> None:
    # An Ethernet pseudowire (control word, then Ethernet) is not IP after the labels.
    # (Not against scapy: it opens these.)
    pseudowire = eth() / MPLS(s=1) / b"\0\0\0\0" / eth() / pair_inside()
    path = write(tmp_path / "pseudowire.pcap", [(0.0, pseudowire), (0.001, seg(True, 5001, 1001, "PA", 10))])
    analysis = analyse_pcap(path, CLIENT, REMOTE)
    assert analysis.undecoded == {"MPLS, not over IP": 1}
    assert analysis.captured_packets == {"down": 1, "up": 0}
    assert (analysis.records, analysis.other_packets) == (2, 1)


def test_records_count_every_record(crafted: dict[str, Crafted]) -> None:
    analysis = check(crafted, "noise")
    assert analysis.records == 12 + 4
    assert analysis.undecoded == {}


# ------------------------------------------------------------------------------ pcapng
#
# What dumpcap and Wireshark write.  Files come from scapy's PcapNgWriter, from editcap,
# and from the writer below, which spells out every block (several sections of either
# byte order, per-interface link types and time resolutions, obsolete and unknown
# blocks, damage).


def block(order: str, block_type: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack(order + "II", block_type, len(body) + 12) + body + struct.pack(order + "I", len(body) + 12)


def shb(order: str = "<") -> bytes:
    return block(order, 0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1))


def idb(
    order: str, linktype: int, snaplen: int = 0, *, tsresol: int | None = None, tsoffset: int | None = None
) -> bytes:
    options = b""
    if tsresol is not None:
        options += struct.pack(order + "HHB3x", 9, 1, tsresol)
    if tsoffset is not None:
        options += struct.pack(order + "HHq", 14, 8, tsoffset)
    if options:
        options += struct.pack(order + "HH", 0, 0)
    return block(order, 1, struct.pack(order + "HHI", linktype, 0, snaplen) + options)


def epb(order: str, interface: int, units: int, data: bytes, orig_len: int | None = None) -> bytes:
    fields = (interface, units >> 32, units & 0xFFFFFFFF, len(data), len(data) if orig_len is None else orig_len)
    return block(order, 6, struct.pack(order + "IIIII", *fields) + data)


def packet_block(order: str, interface: int, units: int, data: bytes) -> bytes:
    """The obsolete Packet Block (type 2) that pcapng 1.0 writers used."""
    fields = (interface, 0, units >> 32, units & 0xFFFFFFFF, len(data), len(data))  # 0: drops
    return block(order, 2, struct.pack(order + "HHIIII", *fields) + data)


def ns_after_t0(when: float) -> int:
    return round(when * 1e9)


def test_pcapng_from_scapy_counts_as_the_classic_pcap(crafted: dict[str, Crafted], tmp_path: Path) -> None:
    path = tmp_path / "basic.pcapng"
    writer = PcapNgWriter(str(path))
    for when, frame in basic_flow():
        frame.time = T0 + when
        writer.write(frame)
    writer.close()
    classic = analyse_pcap(crafted["basic"].path, CLIENT, REMOTE)
    assert fast_path_applies(path, CLIENT, REMOTE)  # Enhanced Packet Blocks, microseconds
    analysis = check_file(path, CLIENT, REMOTE, tshark_retransmissions(path, REMOTE) if TSHARK else None)
    # scapy writes microseconds from a float: the times agree to a microsecond.
    assert analysis.first_packet_timestamp == pytest.approx(classic.first_packet_timestamp, abs=2e-6)
    assert analysis.last_packet_timestamp == pytest.approx(classic.last_packet_timestamp, abs=2e-6)
    times = {"first_packet_timestamp": None, "last_packet_timestamp": None}
    assert dataclasses.replace(analysis, **times) == dataclasses.replace(classic, **times)


def test_pcapng_from_editcap_is_the_classic_pcap_to_the_nanosecond(crafted: dict[str, Crafted], tmp_path: Path) -> None:
    if not shutil.which("editcap"):
        pytest.skip("editcap is not installed")
    classic = crafted["random"].path  # nanosecond timestamps: editcap writes if_tsresol 9
    path = tmp_path / "random.pcapng"
    subprocess.run(["editcap", "-F", "pcapng", str(classic), str(path)], check=True, capture_output=True)
    assert path.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"
    theirs = tshark_retransmissions(path, REMOTE) if TSHARK else None
    assert fast_path_applies(path, CLIENT, REMOTE)  # nanoseconds (if_tsresol 9)
    assert check_file(path, CLIENT, REMOTE, theirs) == analyse_pcap(classic, CLIENT, REMOTE)


def sections_and_interfaces() -> bytes:
    """The basic flow across two sections (little-endian, then big-endian) and four
    interfaces of three link types and three time resolutions, with blocks to skip,
    obsolete Packet Blocks, and a host-pair packet on a link type not decoded."""
    frames = basic_flow()
    sll2 = CookedLinuxV2(proto=0x0800, ifindex=2, lladdrtype=1, lladdrlen=6, src=b"\x02" * 8)
    out = shb("<") + idb("<", 1) + block("<", 4, b"\x00" * 8) + idb("<", 276, 262144, tsresol=9)
    for index, (when, frame) in enumerate(frames[:6]):
        if index % 2:
            out += epb("<", 1, T0 * 10**9 + ns_after_t0(when), bytes(sll2 / frame[IP]))
        else:  # microseconds, the default resolution
            out += epb("<", 0, (T0 * 10**9 + ns_after_t0(when)) // 1000, bytes(frame))
    out += block("<", 5, b"\x00" * 12)  # interface statistics: skipped
    # Units of 2^-30 s after T0 (if_tsoffset): the binary resolution.
    out += shb(">") + idb(">", 101, tsresol=0x80 | 30, tsoffset=T0) + idb(">", 147, 128)
    out += block(">", 0x40000BAD, b"PEN\x00custom data")
    for index, (when, frame) in enumerate(frames[6:]):
        units = round(ns_after_t0(when) * 2**30 / 10**9)
        write_block = packet_block if index % 2 else epb
        out += write_block(">", 0, units, bytes(frame[IP]))
    inside = bytes(pair_inside())
    out += epb(">", 1, 0, inside[:128], len(inside))  # USER0: a link type not decoded, cut to its snap length
    return out


def test_pcapng_sections_interfaces_resolutions_and_blocks(crafted: dict[str, Crafted], tmp_path: Path) -> None:
    path = tmp_path / "sections.pcapng"
    path.write_bytes(sections_and_interfaces())
    # Obsolete Packet Blocks, binary time units and the pair on USER0: the Python path's.
    assert not fast_path_applies(path, CLIENT, REMOTE)
    analysis = analyse_pcap(path, CLIENT, REMOTE)
    basic = analyse_pcap(crafted["basic"].path, CLIENT, REMOTE)
    assert analysis.payload_bytes == basic.payload_bytes
    assert analysis.packets == basic.packets
    assert analysis.payload_histogram == basic.payload_histogram
    assert analysis.flows == basic.flows
    assert analysis.first_packet_timestamp == pytest.approx(T0, abs=1e-6)
    assert analysis.last_packet_timestamp == pytest.approx(T0 + 0.070, abs=1e-6)
    # Each resolution to its own precision: microseconds, nanoseconds, 2^-30 s (< 1 ns).
    with pcap_module.mapped(path) as buf:
        times = [record[0] for record in pcap_module._records(str(path), buf, pcap_module.ScanTotals())]
    truth = [T0 * 10**9 + ns_after_t0(when) for when, _ in basic_flow()]
    assert times[:6:2] == [ns // 1000 * 1000 for ns in truth[:6:2]]
    assert times[1:6:2] == truth[1:6:2]
    assert all(0 <= ns - mine <= 1 for mine, ns in zip(times[6:12], truth[6:], strict=True))
    assert times[12] == 0  # USER0 has no if_tsoffset: units 0 are the epoch
    # Frames 0-5: Ethernet (even, 14 bytes) or SLL2 (odd, 20); 6-11: raw IP.
    ways = [frame[IP].src == REMOTE for _, frame in basic_flow()]
    link = [14, 20, 14, 20, 14, 20] + [0] * 6
    wire = {"down": 0, "up": 0}
    for (_, frame), down, header in zip(basic_flow(), ways, link, strict=True):
        wire["down" if down else "up"] += len(frame[IP]) + header
    assert analysis.wire_bytes == wire
    assert analysis.undecoded == {"link type 147": 1}
    assert (analysis.records, analysis.other_packets) == (13, 1)
    if TSHARK:
        assert _retransmissions(path, CLIENT, REMOTE) == tshark_retransmissions(path, REMOTE) == []


def test_pcapng_retransmissions_match_tshark_frame_by_frame(crafted: dict[str, Crafted], tmp_path: Path) -> None:
    if not TSHARK:
        pytest.skip("tshark is not installed")
    # The fast retransmission scenario on two interfaces, nanosecond and microsecond.
    path = tmp_path / "fast.pcapng"
    out = shb() + idb("<", 1, tsresol=9) + idb("<", 1)
    for index, (when, frame) in enumerate(fast_retransmission()):
        ns = T0 * 10**9 + ns_after_t0(when)
        out += epb("<", index % 2, ns if index % 2 == 0 else ns // 1000, bytes(frame))
    path.write_bytes(out)
    assert fast_path_applies(path, CLIENT, REMOTE)
    theirs = tshark_retransmissions(path, REMOTE)
    assert theirs and _retransmissions(path, CLIENT, REMOTE) == theirs
    assert analyse_pcap(path, CLIENT, REMOTE).retransmits == {"down": 1, "up": 0}


def test_pcapng_simple_packet_blocks_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "simple.pcapng"
    head = shb() + idb("<", 1)
    path.write_bytes(head + block("<", 3, struct.pack("<I", len(FRAME)) + FRAME))
    with pytest.raises(PcapError, match=f"Simple Packet Block at byte {len(head)}: it carries no timestamp"):
        analyse_pcap(path, CLIENT, REMOTE)


GOOD_PCAPNG = shb() + idb("<", 1, 128) + epb("<", 0, T0 * 10**6, FRAME)
EPB = epb("<", 0, 0, FRAME)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (block("<", 6, b"\x00" * 20)[:-4] + struct.pack("<I", 99), "block length 32 at its start, 99 at its end"),
        (struct.pack("<II", 6, 30) + b"\x00" * 22, "block length 30 (not a multiple of 4 of at least 12)"),
        (epb("<", 1, 0, FRAME), "packet on interface 1, which no Interface Description Block defined"),
        (EPB[:20] + struct.pack("<I", 999) + EPB[24:], "captured length 999 runs past"),
        (block("<", 0x0A0D0D0A, b"\x11\x22\x33\x44" + b"\x00" * 12), "section header with byte-order magic 11223344"),
    ],
    ids=["trailer", "length", "interface", "caplen", "byte-order"],
)  # fmt: skip
def test_pcapng_malformed_blocks_name_their_offset(tmp_path: Path, damage: bytes, words: str) -> None:
    path = tmp_path / "malformed.pcapng"
    path.write_bytes(GOOD_PCAPNG + damage + epb("<", 0, T0 * 10**6, FRAME))
    with pytest.raises(PcapError, match=r"pcapng block at byte|damaged record at byte") as error:
        analyse_pcap(path, CLIENT, REMOTE, strict=False)
    assert f"at byte {len(GOOD_PCAPNG)}: {words}" in str(error.value)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    "damage", [epb("<", 0, 0, FRAME, orig_len=0x80001), epb("<", 0, 0, FRAME * 3)], ids=["orig_len", "snaplen"]
)
def test_pcapng_damaged_packet_blocks_are_skipped_and_counted(tmp_path: Path, damage: bytes) -> None:
    # An original length beyond any frame's, a captured length beyond the interface's
    # snap length (128): the block's own length frames it, tshark reads past it.
    path = tmp_path / "damaged.pcapng"
    path.write_bytes(GOOD_PCAPNG + damage + epb("<", 0, T0 * 10**6, FRAME))
    if TSHARK:
        assert len(tshark_frames(path)) == 3
    analysis = analyse_pcap(path, CLIENT, REMOTE, engine="python")
    assert analyse_pcap(path, CLIENT, REMOTE, engine="auto") == analysis
    assert fast_path_applies(path, CLIENT, REMOTE)
    assert (analysis.damaged_records, analysis.damaged_at, analysis.records) == (1, len(GOOD_PCAPNG), 3)
    assert analysis.packets == {"down": 2, "up": 0}


def test_pcapng_timestamps_at_2_to_the_63_ns_are_the_same_in_both_engines(tmp_path: Path) -> None:
    # 64 bits of nanoseconds (if_tsresol 9) at or above 2^63 read negative in signed
    # 64-bit arithmetic: the fast engine made it -505.4 s where the Python one and
    # tshark read the year 2554.
    units = 2**64 - 505_400_000_000
    path = tmp_path / "late.pcapng"
    path.write_bytes(shb() + idb("<", 1, tsresol=9) + epb("<", 0, units, FRAME) + epb("<", 0, units + 1000, FRAME))
    analysis = analyse_pcap(path, CLIENT, REMOTE, engine="python")
    assert analyse_pcap(path, CLIENT, REMOTE, engine="auto") == analysis
    assert analysis.first_packet_timestamp == units / 1e9
    assert analysis.last_packet_timestamp == (units + 1000) / 1e9
    if TSHARK:
        out = subprocess.run(
            [TSHARK, "-n", "-r", str(path), "-T", "fields", "-e", "frame.time_epoch"],
            capture_output=True, text=True, check=True, env=TOOL_ENV,
        ).stdout.split()  # fmt: skip
        # (a double near 1.8e10 s holds time to ~4 microseconds)
        assert [float(t) for t in out] == pytest.approx([units / 1e9, (units + 1000) / 1e9], abs=1e-5)


def test_pcapng_cut_short(tmp_path: Path) -> None:
    path = tmp_path / "cut.pcapng"
    path.write_bytes(GOOD_PCAPNG + epb("<", 0, T0 * 10**6, FRAME)[:-10])
    with pytest.raises(TruncatedCapture, match=f"the record at byte {len(GOOD_PCAPNG)} runs past the end"):
        analyse_pcap(path, CLIENT, REMOTE)
    analysis = analyse_pcap(path, CLIENT, REMOTE, strict=False)
    assert (analysis.truncated_at, analysis.records, analysis.packets["down"]) == (len(GOOD_PCAPNG), 1, 1)
    assert fast_path_applies(path, CLIENT, REMOTE)  # a cut-short file is the fast path's too
    path.write_bytes(shb()[:20])
    with pytest.raises(PcapError, match="truncated pcapng section header"):
        analyse_pcap(path, CLIENT, REMOTE)


# ------------------------------------------------------- the compiled fast path
#
# check_file() holds every crafted capture's Analysis and frame list by the fast engine
# ("auto") against the pure-Python one and tshark.  These tests make sure that is not
# vacuous (the fast path really ran, not its fallback) and cover what only the fast path
# has: chunks, a flow table that grows, a frame list drained, and the fallbacks.

# The captures the fast path must handle itself: classic pcap, Ethernet/SLL/SLL2/raw,
# both byte orders and timestamp units, IPv4 TCP/UDP, IPv4 super-frames, lengths
# beyond the frame, other hosts and non-IP frames.  Everything else falls back.
FAST = {
    "basic", "rto", "duplicate", "spurious", "out_of_order", "late_with_handshake",
    "late_without_handshake", "fast", "parked", "keepalive", "wrap", "reuse", "random", "udp",
    "noise", "flows", "sizes", "link_sll", "link_sll2", "link_raw101", "link_raw12",
    "link_raw14", "nano_early", "nano_late", "big_endian", "snaplen_64", "offloads",
    "ip_length_beyond_frame", "ipv6_length_beyond_frame", "many_flows",
}  # fmt: skip
# pcapng, VLAN/PPPoE/MPLS, IPv6 extension headers and jumbograms, tunnels: the Python path.
FALLBACK = {
    "link_vlan", "link_qinq", "link_pppoe", "link_vlan_pppoe", "link_mpls", "link_vlan_mpls",
    "link_sll_mpls", "link_sll2_pppoe", "ipv6", "big_tcp_ipv6", "no_handshake_ipv6", "tunnels",
    "tunnels_ipv6", "late_vlan",
}  # fmt: skip


def fast_path_applies(path: Path, client: str, remote: str) -> bool:
    with pcap_module.mapped(path) as buf:
        return _fast_tally(str(path), buf, client, remote, None, None) is not None


@scenario("many_flows", nano=True)
def many_random_flows() -> list[tuple[tuple[int, int], bytes]]:
    """40 random conversations at once: more flows than the fast path's first table."""
    traces = [_random_trace(random.Random(100 + seed), CPORT + 1000 + seed, 120) for seed in range(40)]
    return [((when // 10**9, when % 10**9), frame) for when, frame in heapq.merge(*traces)]


# The basic flow, then one segment of it in a VLAN tag: the fast path has counted most
# of the file when it meets the tag, and must throw that away for the Python path.
scenario("late_vlan")(lambda: [*basic_flow(), (0.08, eth() / Dot1Q(vlan=10) / seg(True, 8002, 1102, "A")[IP])])


def test_fast_path_runs_on_common_captures_and_falls_back_on_the_rest(crafted: dict[str, Crafted]) -> None:
    assert set(crafted) == FAST | FALLBACK  # a new scenario must be sorted into one
    for name, pcap in crafted.items():
        assert fast_path_applies(pcap.path, pcap.client, pcap.remote) == (name in FAST), name
        check(crafted, name)  # both engines equal, and equal to scapy and tshark


def test_fast_path_across_chunks_a_growing_flow_table_and_frame_drains(
    crafted: dict[str, Crafted], monkeypatch: pytest.MonkeyPatch
) -> None:
    pcap = crafted["many_flows"]
    theirs = pcap.tshark.result() if pcap.tshark is not None else None
    python = analyse_pcap(pcap.path, CLIENT, REMOTE, engine="python")
    assert len(python.flows) == 40
    assert python.retransmits["down"] + python.retransmits["up"] > 100
    monkeypatch.setattr(analyse_module, "_FAST_CHUNK", 4096)  # ~50 records a call
    monkeypatch.setattr(analyse_module, "_FAST_FRAMES", 3)  # the frame list drains often
    assert pcap.path.stat().st_size > 50 * 4096
    assert fast_path_applies(pcap.path, CLIENT, REMOTE)
    assert analyse_pcap(pcap.path, CLIENT, REMOTE, engine="auto") == python
    frames = _retransmissions(pcap.path, CLIENT, REMOTE, engine="auto")
    assert frames == _retransmissions(pcap.path, CLIENT, REMOTE, engine="python")
    if theirs is not None:
        assert frames == theirs


def test_the_engine_is_chosen_by_argument_then_environment(
    crafted: dict[str, Crafted], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = crafted["basic"].path
    expected = analyse_pcap(path, CLIENT, REMOTE, engine="python")

    def fast_must_not_run(*args: object) -> None:
        raise AssertionError("the fast path ran")

    monkeypatch.setattr(analyse_module, "_fast_tally", fast_must_not_run)
    monkeypatch.setenv(ENGINE_VARIABLE, "python")
    assert analyse_pcap(path, CLIENT, REMOTE) == expected
    with pytest.raises(AssertionError, match="the fast path ran"):
        analyse_pcap(path, CLIENT, REMOTE, engine="auto")  # the argument wins
    monkeypatch.setenv(ENGINE_VARIABLE, "numba")
    with pytest.raises(PcapError, match="BIGBINF_ANALYSER='numba' is not an analyser engine"):
        analyse_pcap(path, CLIENT, REMOTE)
    with pytest.raises(PcapError, match="analyser engine 'fast' is not one"):
        analyse_pcap(path, CLIENT, REMOTE, engine="fast")  # type: ignore[arg-type]


def test_without_the_compiled_module_the_python_path_answers(
    crafted: dict[str, Crafted], monkeypatch: pytest.MonkeyPatch
) -> None:
    import bigbinf.measure.wire

    path = crafted["random"].path
    expected = analyse_pcap(path, CLIENT, REMOTE, engine="python")
    # As on an install where numba is missing: importing fastscan fails.
    monkeypatch.delattr(bigbinf.measure.wire, "fastscan", raising=False)
    monkeypatch.setitem(sys.modules, "bigbinf.measure.wire.fastscan", None)
    assert not fast_path_applies(path, CLIENT, REMOTE)
    assert analyse_pcap(path, CLIENT, REMOTE, engine="auto") == expected


def _outcome(path: Path, client: str, remote: str, engine: str) -> tuple[str, object]:
    try:
        return "analysis", analyse_pcap(path, client, remote, strict=False, engine=engine)  # type: ignore[arg-type]
    except PcapError as error:
        return type(error).__name__, str(error)


def test_the_two_engines_never_differ_on_bit_flipped_captures(
    crafted: dict[str, Crafted], tmp_path: Path, engine: str
) -> None:
    # As the real-capture check did with 150 bit-flipped captures: whatever a flipped bit
    # makes of a file (damage, a strange length, a timestamp near 2^63 ns), the compiled
    # engine and the pure-Python one give the same Analysis, or the same error.
    sources: list[tuple[bytes, str, str]] = [
        (crafted[name].path.read_bytes(), crafted[name].client, crafted[name].remote)
        for name in ("basic", "random", "offloads", "udp", "link_sll2", "nano_late", "no_handshake_ipv6")
    ]
    ng = shb() + idb("<", 1, tsresol=9) + idb("<", 101)
    for index, (when, frame) in enumerate(fast_retransmission()):
        ns = T0 * 10**9 + ns_after_t0(when)  # interface 1 counts microseconds
        ng += epb("<", index % 2, ns // 1000 ** (index % 2), bytes(frame if index % 2 == 0 else frame[IP]))
    late = 2**63 + 500_000  # past 2^63 ns: negative in 64 signed bits
    ng += epb("<", 0, late, FRAME) + epb("<", 0, late + 10**6, FRAME)
    sources.append((ng, CLIENT, REMOTE))
    rng = random.Random(f"flips-{engine}")
    path = tmp_path / "flipped"
    differing = []
    for trial in range(150):
        data, client, remote = sources[trial % len(sources)]
        flipped = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        path.write_bytes(flipped)
        python, auto = (_outcome(path, client, remote, e) for e in ("python", "auto"))
        if python != auto:
            differing.append((trial, python, auto))
    assert differing == []
