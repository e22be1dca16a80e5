"""Path baseline probes: RTT and loss from a probe train, and the path MTU.

Run once per remote per round, outside the transfers' captures, so the probes never show
up in a transfer's wire counts.

- icmp: a train of `count` echo requests `interval` apart, sent on schedule whatever the
  replies do (a train that waits for each reply measures less often on a slow path and
  hides bursts of loss).  Our own identifier, sequence numbers and a send stamp in the
  payload: replies are matched by all three, so other pings and stale replies never count.
  A raw socket where we may (root), else an unprivileged ICMP datagram socket.
- tcp: the time connect() takes to `port`, where ICMP is filtered: a SYN and its SYN-ACK
  or RST are one round trip.  Also what an IPv6 remote gets when icmp is asked for (the
  echo here is IPv4's): the outcome's method says "tcp".
- the path MTU (icmp): the largest IP packet with DF set that gets an echo reply, found
  from this host's own MTU towards the remote downwards (mtu_upper_bound).  With tcp only
  the kernel's own view is reported (IP_MTU of the connected socket: the route's MTU, or
  what PMTU discovery learnt).

From another network namespace the probe runs as

    python -m bigbinf.measure.path.probe [--method icmp|tcp] [--port P] [--count N]
        [--interval SECONDS] [--timeout SECONDS] [--mtu|--no-mtu] ADDRESS

inside `ip netns exec NETNS`, which prints the ProbeOutcome as one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import fcntl
import json
import math
import os
import secrets
import select
import socket
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from bigbinf.process import in_netns, run_with_timeout

ProbeMethod = Literal["icmp", "tcp"]


@dataclass(frozen=True)
class ProbeSettings:
    """How a remote's path is probed (config: remotes.NAME.probe)."""

    method: ProbeMethod = "icmp"  # tcp: connect time to `port`, where ICMP is filtered
    port: int = 22  # tcp probes only
    count: int = 20
    interval: float = 0.2  # seconds between probe starts
    timeout: float = 1.0  # a probe not answered within this is lost
    mtu: bool = True  # also search the largest DF packet that passes (ICMP echo)
    enabled: bool = True


@dataclass(frozen=True)
class ProbeOutcome:
    method: str
    sent: int
    answered: int
    rtt_min_seconds: float | None = None  # None when nothing answered
    rtt_avg_seconds: float | None = None
    rtt_max_seconds: float | None = None
    rtt_mdev_seconds: float | None = None  # as ping's mdev: sqrt(mean(rtt^2) - mean(rtt)^2)
    mtu_bytes: int | None = None  # largest IP packet with DF that got an answer; None if unknown
    error: str = ""  # why nothing (or no MTU) was measured, with the fix; "" when all went well
    # The echo requests' ICMP identifier (icmp only): finds the train in a capture.
    identifier: int | None = None

    @property
    def loss_ratio(self) -> float:
        return 1.0 if self.sent == 0 else 1.0 - self.answered / self.sent


_MODULE = "bigbinf.measure.path.probe"
_METHODS = ("icmp", "tcp")

ICMP_ECHO_REPLY = 0
ICMP_DEST_UNREACH = 3
ICMP_ECHO_REQUEST = 8
ICMP_TIME_EXCEEDED = 11
ICMP_FRAG_NEEDED = 4  # code of DEST_UNREACH
ECHO_OVERHEAD = 28  # IPv4 header without options + ICMP header: IP packet = payload + 28
TRAIN_PACKET = 84  # IP bytes of a train probe: ping's default 56 bytes of data
STAMP = struct.Struct("!Q")
MIN_MTU = 68  # the smallest MTU IPv4 allows (RFC 791)
MAX_IP_PACKET = 65535
MTU_TRIES = 3  # a size with no reply may have met loss, not a too-small link
# Longest the MTU search can take, in probe waits: one try of the upper bound, then a
# binary search over at most 65535 sizes (16 halvings), each size tried MTU_TRIES times.
_MTU_MAX_WAITS = (1 + 16) * MTU_TRIES
_MTU_MIN_WAIT = 0.2  # seconds; see _mtu_wait
SUBPROCESS_MARGIN = 10.0  # interpreter start, `ip netns exec`, a name lookup

# Linux socket options Python 3.11's socket module does not name.
IP_MTU_DISCOVER = 10
IP_PMTUDISC_PROBE = 3  # set DF and ignore the cached path MTU: the probe decides
IP_MTU = 14
IPV6_MTU = 24
SOL_RAW = 255
ICMP_FILTER = 1
SO_TIMESTAMPNS: int = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")
IP_PKTINFO = 8
IP_RECVFRAGSIZE = 25  # linux/in.h (4.17): the largest fragment of a reassembled datagram
_PKTINFO = struct.Struct("=i4s4s")  # struct in_pktinfo: ifindex, spec_dst, addr
_INT = struct.Struct("=i")
SIOCGIFMTU = 0x8921
_IFREQ = struct.Struct("16si20x")  # struct ifreq: name, ifr_mtu in the union
_TCP_INFO_TOTAL_RETRANS = 100  # offset of tcpi_total_retrans in struct tcp_info

_UNREACH = {
    0: "network unreachable",
    1: "host unreachable",
    2: "protocol unreachable",
    3: "port unreachable",
    4: "fragmentation needed",
    9: "network administratively prohibited",
    10: "host administratively prohibited",
    13: "communication administratively prohibited",
}
# Payload filler after the send stamp, as ping's: recognisable in a capture.
_FILL = bytes(range(256)) * 256


# ---------------------------------------------------------------- pure parts


def rtt_stats(rtts: Sequence[float]) -> tuple[float, float, float, float] | None:
    """min, avg, max and mdev (as ping: sqrt(mean(rtt^2) - mean(rtt)^2)); None if empty."""
    if not rtts:
        return None
    n = len(rtts)
    mean = math.fsum(rtts) / n
    mean_square = math.fsum(r * r for r in rtts) / n
    # Rounding can make the difference a hair negative for identical samples.
    mdev = math.sqrt(max(0.0, mean_square - mean * mean))
    return min(rtts), mean, max(rtts), mdev


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071); over data that holds its checksum it is 0."""
    if len(data) % 2:
        data += b"\0"
    total = sum(int(word) for word in struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(identifier: int, seq: int, payload: bytes) -> bytes:
    """An ICMP echo request (header and payload, no IP header)."""
    header = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, identifier, seq)
    return struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, checksum(header + payload), identifier, seq) + payload


def echo_payload(stamp: int, ip_size: int) -> bytes:
    """The payload that makes an echo request `ip_size` bytes of IP: the send stamp first."""
    return STAMP.pack(stamp) + _FILL[STAMP.size : max(STAMP.size, ip_size - ECHO_OVERHEAD)]


@dataclass(frozen=True)
class Icmp:
    """An ICMP message about one of our echo requests: its reply, or an error quoting it."""

    type: int
    code: int
    identifier: int
    seq: int
    payload: bytes = b""  # echo replies: the request's payload, echoed
    quoted_destination: str = ""  # errors: where the quoted request was going
    next_hop_mtu: int = 0  # fragmentation needed: the MTU of the link that refused it


def parse_icmp(packet: bytes, with_ip_header: bool) -> Icmp | None:
    """An echo reply, or a destination-unreachable / time-exceeded error quoting an echo
    request; None for anything else (including damaged packets).  Raw sockets deliver the
    IP header, ICMP datagram sockets do not."""
    icmp = packet
    if with_ip_header:
        if len(packet) < 20 or packet[0] >> 4 != 4:
            return None
        icmp = packet[(packet[0] & 0x0F) * 4 :]
    if len(icmp) < 8 or checksum(icmp) != 0:
        return None
    kind, code = icmp[0], icmp[1]
    if kind == ICMP_ECHO_REPLY:
        identifier, seq = struct.unpack("!HH", icmp[4:8])
        return Icmp(kind, code, int(identifier), int(seq), payload=icmp[8:])
    if kind not in (ICMP_DEST_UNREACH, ICMP_TIME_EXCEEDED):
        return None
    inner = icmp[8:]
    if len(inner) < 20 or inner[0] >> 4 != 4 or inner[9] != socket.IPPROTO_ICMP:
        return None
    quoted = inner[(inner[0] & 0x0F) * 4 :]
    if len(quoted) < 8 or quoted[0] != ICMP_ECHO_REQUEST:
        return None
    identifier, seq = struct.unpack("!HH", quoted[4:8])
    next_hop_mtu = int(struct.unpack("!H", icmp[6:8])[0]) if kind == ICMP_DEST_UNREACH else 0
    return Icmp(
        kind,
        code,
        int(identifier),
        int(seq),
        quoted_destination=socket.inet_ntoa(inner[16:20]),
        next_hop_mtu=next_hop_mtu,
    )


@dataclass(frozen=True)
class Sent:
    """One echo request on its way: when it left (two clocks) and the stamp it carries."""

    seq: int
    monotonic_ns: int
    realtime_ns: int

    @property
    def stamp(self) -> bytes:
        return STAMP.pack(self.monotonic_ns)


@dataclass(frozen=True)
class Received:
    message: Icmp
    source: str
    monotonic_ns: int
    kernel_realtime_ns: int | None  # SO_TIMESTAMPNS: when the kernel got it
    ifindex: int | None = None  # IP_PKTINFO: the interface it came in on
    # IP_RECVFRAGSIZE: where it came in fragments (reassembled by the kernel), the largest
    # of them as an IP packet; None where it came whole (or the kernel cannot say).
    fragment_bytes: int | None = None


def reply_to(received: Received, pending: dict[int, Sent], identifier: int, target: str) -> Sent | None:
    """The pending request this is the echo reply to, else None: the identifier, sequence
    number, source and the echoed send stamp must all match (another process's ping, a
    reply to an earlier train, a reply from elsewhere do not)."""
    msg = received.message
    if msg.type != ICMP_ECHO_REPLY or msg.identifier != identifier or received.source != target:
        return None
    sent = pending.get(msg.seq)
    if sent is None or msg.payload[: STAMP.size] != sent.stamp:
        return None
    return sent


def error_about(received: Received, pending: dict[int, Sent], identifier: int, target: str) -> Sent | None:
    """The pending request an ICMP error is about, else None."""
    msg = received.message
    if msg.type == ICMP_ECHO_REPLY or msg.identifier != identifier or msg.quoted_destination != target:
        return None
    return pending.get(msg.seq)


def describe_error(msg: Icmp) -> str:
    if msg.type == ICMP_TIME_EXCEEDED:
        return "TTL exceeded in transit (a routing loop?)"
    return _UNREACH.get(msg.code, f"destination unreachable (code {msg.code})")


def round_trip(sent: Sent, received: Received) -> float:
    """Seconds from send to receipt.  The kernel's receive stamp where there is one: it
    leaves out how long this process took to wake up.  It is on the wall clock, so it is
    used only when it is consistent with the monotonic clock (no clock step in between)."""
    by_us = (received.monotonic_ns - sent.monotonic_ns) / 1e9
    if received.kernel_realtime_ns is not None:
        by_kernel = (received.kernel_realtime_ns - sent.realtime_ns) / 1e9
        if 0.0 <= by_kernel <= by_us + 0.001:
            return by_kernel
    return by_us


def search_mtu(passes: Callable[[int], bool], upper: int, known_good: int | None = None) -> int | None:
    """The largest IP packet size in [MIN_MTU, upper] for which passes(size), assuming
    every smaller size passes too; None if not even MIN_MTU does.  The upper bound (the
    local route's MTU) first: on most paths it passes and one probe settles it.
    `known_good`: a size already known to pass (the train's), where the search may stop."""
    if upper < MIN_MTU:
        return None
    if passes(upper):
        return upper
    good = max(MIN_MTU - 1, min(known_good or 0, upper - 1))  # largest size known to pass
    bad = upper  # smallest size known not to
    while bad - good > 1:
        size = (good + bad) // 2
        if passes(size):
            good = size
        else:
            bad = size
    return good if good >= MIN_MTU else None


def check_settings(settings: ProbeSettings) -> None:
    """ValueError for settings no probe can follow (a configuration mistake, not the
    network's)."""
    if settings.method not in _METHODS:
        raise ValueError(f"probe method must be icmp or tcp, not {settings.method!r}")
    # Longer trains are fine: the 16-bit ICMP sequence number wraps, and only the
    # requests still within their timeout are matched against replies.
    if isinstance(settings.count, bool) or not isinstance(settings.count, int) or settings.count < 1:
        raise ValueError(f"probe count must be a whole number of probes from 1, not {settings.count!r}")
    for name in ("interval", "timeout"):
        value = getattr(settings, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ValueError(f"probe {name} must be a positive number of seconds, not {value!r}")
    if not 1 <= settings.port <= 65535:
        raise ValueError(f"probe port must be 1..65535, not {settings.port}")


def expected_seconds(settings: ProbeSettings) -> float:
    """The longest a probe (train and MTU search) can take, name lookup aside."""
    if settings.method == "tcp":
        # Sequential: each attempt starts on schedule or when the one before ends.
        return (settings.count - 1) * max(settings.interval, settings.timeout) + settings.timeout
    train = (settings.count - 1) * settings.interval + settings.timeout
    return train + (_MTU_MAX_WAITS * settings.timeout if settings.mtu else 0.0)


def settings_argv(settings: ProbeSettings) -> list[str]:
    """The command-line arguments that make main() probe with these settings."""
    return [
        "--method",
        settings.method,
        "--port",
        str(settings.port),
        "--count",
        str(settings.count),
        "--interval",
        repr(float(settings.interval)),
        "--timeout",
        repr(float(settings.timeout)),
        "--mtu" if settings.mtu else "--no-mtu",
    ]


def outcome_to_json(outcome: ProbeOutcome) -> str:
    return json.dumps(dataclasses.asdict(outcome), sort_keys=True)


def _typed(data: dict[str, Any], name: str, kinds: tuple[type, ...], optional: bool) -> Any:
    value = data.get(name)
    if value is None and optional:
        return None
    # bool is an int to Python, never a count or a size here.
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise ValueError(f"{name}: {value!r}")
    return value


def outcome_from_json(text: str) -> ProbeOutcome:
    """The ProbeOutcome main() printed; ValueError if `text` is not one."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    number = (int, float)
    return ProbeOutcome(
        method=_typed(data, "method", (str,), False),
        sent=_typed(data, "sent", (int,), False),
        answered=_typed(data, "answered", (int,), False),
        rtt_min_seconds=_typed(data, "rtt_min_seconds", number, True),
        rtt_avg_seconds=_typed(data, "rtt_avg_seconds", number, True),
        rtt_max_seconds=_typed(data, "rtt_max_seconds", number, True),
        rtt_mdev_seconds=_typed(data, "rtt_mdev_seconds", number, True),
        mtu_bytes=_typed(data, "mtu_bytes", (int,), True),
        error=_typed(data, "error", (str,), False),
        identifier=_typed(data, "identifier", (int,), True),
    )


def _with_rtts(outcome: ProbeOutcome, rtts: Sequence[float]) -> ProbeOutcome:
    stats = rtt_stats(rtts)
    if stats is None:
        return outcome
    low, avg, high, mdev = stats
    return dataclasses.replace(
        outcome, rtt_min_seconds=low, rtt_avg_seconds=avg, rtt_max_seconds=high, rtt_mdev_seconds=mdev
    )


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


# ---------------------------------------------------------------- ICMP


class _NoIcmpSocket(Exception):
    pass


_ANCILLARY_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) + socket.CMSG_SPACE(_PKTINFO.size) + socket.CMSG_SPACE(_INT.size)


class EchoSocket:
    """An ICMP socket for echo requests to one IPv4 address."""

    def __init__(self, target: str) -> None:
        self.target = target
        try:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            self.raw = True
        except PermissionError:
            try:
                # The kernel then owns the identifier (the socket's "port") and the
                # checksum, and delivers only the replies to us.
                self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
                self.raw = False
            except PermissionError:
                raise _NoIcmpSocket(
                    "cannot open an ICMP socket: a raw socket needs root (CAP_NET_RAW) and this user's group "
                    "is outside net.ipv4.ping_group_range; run as root or widen net.ipv4.ping_group_range "
                    "(sysctl -w net.ipv4.ping_group_range='0 2147483647')"
                ) from None
        try:
            if self.raw:
                self.identifier = secrets.randbelow(0x10000)
                # A raw ICMP socket gets every ICMP packet the host receives: keep out all
                # but replies and the errors that may quote our requests.
                wanted = (1 << ICMP_ECHO_REPLY) | (1 << ICMP_DEST_UNREACH) | (1 << ICMP_TIME_EXCEEDED)
                self.sock.setsockopt(SOL_RAW, ICMP_FILTER, struct.pack("=I", ~wanted & 0xFFFFFFFF))
            else:
                self.sock.bind(("", 0))
                self.identifier = int(self.sock.getsockname()[1])
            self.sock.setblocking(False)
            # Both optional: without them RTTs include our wake-up and the MTU search
            # starts from the route's MTU alone.
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
            # A reply that came back in fragments says the way back is narrower than the
            # request (the MTU search's "passes" needs both ways whole).
            with contextlib.suppress(OSError):
                self.sock.setsockopt(socket.IPPROTO_IP, IP_RECVFRAGSIZE, 1)
        except BaseException:
            self.sock.close()
            raise
        self.poller = select.poll()
        self.poller.register(self.sock, select.POLLIN)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> EchoSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def probe_df(self) -> None:
        """DF on every request from now on, whatever PMTU discovery has cached."""
        self.sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_PROBE)

    def send(self, seq: int, ip_size: int) -> Sent:
        """Send one echo request; OSError as sendto raises it (EMSGSIZE: too big here)."""
        stamp = time.monotonic_ns()
        packet = echo_request(self.identifier, seq & 0xFFFF, echo_payload(stamp, ip_size))
        sent = Sent(seq & 0xFFFF, stamp, time.time_ns())
        self.sock.sendto(packet, (self.target, 0))
        return sent

    def receive(self, timeout: float) -> list[Received]:
        """What has arrived, waiting up to `timeout` seconds for the first packet."""
        if not self.poller.poll(max(0.0, timeout) * 1000.0):
            return []
        out: list[Received] = []
        while True:
            try:
                data, ancillary, _flags, address = self.sock.recvmsg(MAX_IP_PACKET, _ANCILLARY_SPACE)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break  # a queued socket error: nothing more to read now
            now = time.monotonic_ns()
            msg = parse_icmp(data, with_ip_header=self.raw)
            if msg is None:
                continue
            kernel = ifindex = fragment = None
            for level, kind, value in ancillary:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= _TIMESPEC.size:
                    seconds, nanoseconds = _TIMESPEC.unpack_from(value)
                    kernel = int(seconds) * 1_000_000_000 + int(nanoseconds)
                elif level == socket.IPPROTO_IP and kind == IP_PKTINFO and len(value) >= _PKTINFO.size:
                    ifindex = int(_PKTINFO.unpack_from(value)[0])
                elif level == socket.IPPROTO_IP and kind == IP_RECVFRAGSIZE and len(value) >= _INT.size:
                    fragment = int(_INT.unpack_from(value)[0]) or None
            out.append(Received(msg, str(address[0]), now, kernel, ifindex, fragment))
        return out


@dataclass
class _Train:
    sent: int = 0
    rtts: list[float] = dataclasses.field(default_factory=list)
    send_errors: Counter[str] = dataclasses.field(default_factory=Counter)
    icmp_errors: Counter[str] = dataclasses.field(default_factory=Counter)
    interfaces: Counter[int] = dataclasses.field(default_factory=Counter)  # ifindex of the replies


def _echo_train(sock: EchoSocket, settings: ProbeSettings) -> _Train:
    train = _Train()
    timeout_ns = int(settings.timeout * 1e9)
    interval_ns = int(settings.interval * 1e9)
    pending: dict[int, Sent] = {}  # in send order
    start = time.monotonic_ns()
    next_seq = 0
    while True:
        now = time.monotonic_ns()
        if next_seq < settings.count and now >= start + next_seq * interval_ns:
            train.sent += 1
            try:
                sent = sock.send(next_seq, TRAIN_PACKET)
                pending[sent.seq] = sent
            except OSError as exc:
                train.send_errors[exc.strerror or str(exc)] += 1
            next_seq += 1
            continue
        while pending:
            first = next(iter(pending.values()))
            if now - first.monotonic_ns <= timeout_ns:
                break
            del pending[first.seq]
        if next_seq == settings.count and not pending:
            return train
        if next_seq < settings.count:
            wake = start + next_seq * interval_ns
        else:
            wake = next(iter(pending.values())).monotonic_ns + timeout_ns
        for received in sock.receive((wake - now) / 1e9):
            answered = reply_to(received, pending, sock.identifier, sock.target)
            if answered is not None:
                del pending[answered.seq]
                rtt = round_trip(answered, received)
                if rtt <= settings.timeout:
                    train.rtts.append(rtt)
                if received.ifindex is not None:
                    train.interfaces[received.ifindex] += 1
                continue
            about = error_about(received, pending, sock.identifier, sock.target)
            if about is not None:
                del pending[about.seq]  # lost for sure: no need to wait for it
                train.icmp_errors[f"{received.source} reported {describe_error(received.message)}"] += 1


def _mtu_wait(settings: ProbeSettings, rtts: Sequence[float]) -> float:
    """How long to wait for each MTU probe's reply.  Each failing size costs MTU_TRIES
    waits, and a search meets several: waiting the full timeout would make it take many
    timeouts.  The train has just measured the path, so a few times its slowest reply is
    plenty; and a reply to an earlier try of the same size still counts while the later
    ones wait, so the first try gets MTU_TRIES waits."""
    slowest = max(rtts, default=settings.timeout)
    return min(settings.timeout, max(_MTU_MIN_WAIT, 3 * slowest))


def _echo_passes(sock: EchoSocket, ip_size: int, wait: float, seqs: Callable[[], int]) -> bool:
    """Whether an echo request of `ip_size` bytes with DF set gets a reply that came back
    whole, in up to MTU_TRIES tries.  A reply in fragments (Received.fragment_bytes below
    the size) does not pass: the way back is narrower.  A veth (and many NICs) takes a
    frame up to a VLAN tag longer than its MTU on the way in, so a request 4 bytes over a
    1280-byte link passed and its reply, refragmented by the router, came back: the path
    read as 1284."""
    pending: dict[int, Sent] = {}
    for _ in range(MTU_TRIES):
        try:
            sent = sock.send(seqs(), ip_size)
            pending[sent.seq] = sent
        except OSError as exc:
            if exc.errno == errno.EMSGSIZE:
                return False  # larger than this host's own link: too big, no need to retry
            continue
        deadline = time.monotonic() + wait
        while (left := deadline - time.monotonic()) > 0:
            for received in sock.receive(left):
                if reply_to(received, pending, sock.identifier, sock.target) is not None:
                    return received.fragment_bytes is None or received.fragment_bytes >= ip_size
                about = error_about(received, pending, sock.identifier, sock.target)
                if about is not None and received.message.code == ICMP_FRAG_NEEDED:
                    return False  # a router said it is too big: that is no loss
    return False


def local_mtu(family: int, address: str) -> int:
    """The MTU of this host's route to `address`, lowered by what PMTU discovery learnt
    (for ~10 minutes after a "fragmentation needed"): OSError if there is no route.  A
    connected UDP socket: connect() sends nothing."""
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.connect((address, 9))
        if family == socket.AF_INET6:
            return int(sock.getsockopt(socket.IPPROTO_IPV6, IPV6_MTU))
        return int(sock.getsockopt(socket.IPPROTO_IP, IP_MTU))


def interface_mtu(ifindex: int) -> int | None:
    """The MTU of interface `ifindex` in this network namespace; None if it is gone."""
    try:
        name = socket.if_indextoname(ifindex)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            answer = fcntl.ioctl(sock.fileno(), SIOCGIFMTU, _IFREQ.pack(name.encode(), 0))
    except OSError:
        return None
    return int(_IFREQ.unpack(answer)[1])


def mtu_upper_bound(route_mtu: int, reply_interface_mtu: int | None) -> int:
    """Where the MTU search starts.  The route's MTU is lowered by what the kernel learnt
    from earlier "fragmentation needed" messages (ours included) until that expires; with
    IP_PMTUDISC_PROBE the kernel lets us send up to the interface's own MTU, so the
    search starts there, or a path whose MTU went back up would not be seen for minutes.
    The interface is the one the train's replies came in on: a host's way back is its
    way out, and where it is not, a larger bound only costs an EMSGSIZE."""
    return min(MAX_IP_PACKET, max(route_mtu, reply_interface_mtu or 0))


def _probe_icmp(address: str, target: str, settings: ProbeSettings) -> ProbeOutcome:
    try:
        sock = EchoSocket(target)
    except _NoIcmpSocket as exc:
        return ProbeOutcome("icmp", 0, 0, error=str(exc))
    except OSError as exc:
        return ProbeOutcome("icmp", 0, 0, error=f"cannot open an ICMP socket: {exc}")
    with sock:
        train = _echo_train(sock, settings)
        outcome = _with_rtts(ProbeOutcome("icmp", train.sent, len(train.rtts), identifier=sock.identifier), train.rtts)
        if not train.rtts:
            base = f"no answer to {train.sent} ICMP echo probes from {address} in {settings.timeout:g}s each"
            if train.icmp_errors:
                reasons = ", ".join(f"{why} ({n}x)" for why, n in train.icmp_errors.most_common(3))
                error = f"{base}: {reasons}: check the address and the route to it"
            elif train.send_errors:
                reasons = ", ".join(f"{why} ({n}x)" for why, n in train.send_errors.most_common(3))
                error = f"{base}: sending failed: {reasons}: check the address and this host's routes"
            else:
                error = f"{base}: the remote or a firewall drops ICMP; set remotes.NAME.probe.method: tcp"
            return dataclasses.replace(outcome, error=error)
        if not settings.mtu:
            return outcome
        try:
            route_mtu = local_mtu(socket.AF_INET, target)
            sock.probe_df()
        except OSError as exc:
            return dataclasses.replace(outcome, error=f"path MTU unknown: cannot read the local route's MTU: {exc}")
        replies_in = train.interfaces.most_common(1)
        upper = mtu_upper_bound(route_mtu, interface_mtu(replies_in[0][0]) if replies_in else None)
        wait = _mtu_wait(settings, train.rtts)
        counter = iter(range(settings.count, settings.count + 1_000_000))
        mtu = search_mtu(lambda size: _echo_passes(sock, size, wait, counter.__next__), upper, TRAIN_PACKET)
        if mtu is None:
            return dataclasses.replace(
                outcome,
                error=f"path MTU unknown: no echo request with DF set from {MIN_MTU} to {upper} bytes was answered",
            )
        return dataclasses.replace(outcome, mtu_bytes=mtu)


# ---------------------------------------------------------------- TCP


@dataclass(frozen=True)
class _Connect:
    rtt: float | None  # None: lost
    why_lost: str = ""
    mtu: int | None = None  # IP_MTU of the connected socket


def _syn_resent(sock: socket.socket) -> bool:
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_TOTAL_RETRANS + 4)
    except OSError:
        return False
    if len(info) < _TCP_INFO_TOTAL_RETRANS + 4:
        return False
    return int(struct.unpack_from("=I", info, _TCP_INFO_TOTAL_RETRANS)[0]) > 0


def _connect_once(family: int, sockaddr: tuple[Any, ...], timeout: float) -> _Connect:
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # The socket's close() at the end of the `with` is a normal close (FIN), not an
        # abortive one (SO_LINGER 0, RST): the remote's service (sshd) then logs at most
        # an ordinary "connection closed [preauth]", not resets that look like an attack.
        # The TIME_WAIT sockets this leaves are ours (we close first), a few per round,
        # each on its own ephemeral port: nothing piles up.
        sock.setblocking(False)
        start = time.monotonic()
        code = sock.connect_ex(sockaddr)
        if code == errno.EINPROGRESS:
            poller = select.poll()
            poller.register(sock, select.POLLOUT)
            if not poller.poll(timeout * 1000.0):
                return _Connect(None, "timed out")
            code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        elapsed = time.monotonic() - start
        # A refused connection answers too: the RST comes back in reply to the SYN, one
        # round trip like a SYN-ACK (both come from the remote's kernel, not its service).
        if code not in (0, errno.ECONNREFUSED):
            return _Connect(None, os.strerror(code))
        if elapsed > timeout:
            return _Connect(None, "timed out")
        if _syn_resent(sock):
            # The first SYN (or its answer) was lost: the time measures the kernel's
            # retransmission timer (1 s), not the path.
            return _Connect(None, "SYN resent")
        if code == errno.ECONNREFUSED:
            return _Connect(elapsed, "refused")
        try:
            level, option = (
                (socket.IPPROTO_IPV6, IPV6_MTU) if family == socket.AF_INET6 else (socket.IPPROTO_IP, IP_MTU)
            )
            mtu: int | None = int(sock.getsockopt(level, option))
        except OSError:
            mtu = None
        return _Connect(elapsed, mtu=mtu)


def _probe_tcp(address: str, family: int, sockaddr: tuple[Any, ...], settings: ProbeSettings) -> ProbeOutcome:
    rtts: list[float] = []
    lost: Counter[str] = Counter()
    refused = 0
    mtu: int | None = None
    start = time.monotonic()
    for attempt in range(settings.count):
        delay = start + attempt * settings.interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            result = _connect_once(family, sockaddr, settings.timeout)
        except OSError as exc:  # e.g. no free local port
            result = _Connect(None, exc.strerror or str(exc))
        if result.rtt is None:
            lost[result.why_lost] += 1
            continue
        rtts.append(result.rtt)
        refused += result.why_lost == "refused"
        mtu = result.mtu if result.mtu is not None else mtu
    outcome = _with_rtts(ProbeOutcome("tcp", settings.count, len(rtts)), rtts)
    where = f"{address} port {settings.port}"
    if not rtts:
        reasons = ", ".join(f"{why} ({n}x)" for why, n in lost.most_common(3))
        return dataclasses.replace(
            outcome,
            error=(
                f"no answer to {settings.count} TCP connection attempts to {where} in {settings.timeout:g}s each "
                f"({reasons}): the remote is down or a firewall drops the SYNs; set remotes.NAME.probe.port "
                "to a port the remote answers on"
            ),
        )
    if not settings.mtu:
        return outcome
    if mtu is None:
        why = (
            f"no connection to {where} completed (refused)"
            if refused
            else "the kernel does not report IP_MTU for a connected socket"
        )
        return dataclasses.replace(
            outcome, error=f"path MTU unknown: {why}; set remotes.NAME.probe.port to a port the remote listens on"
        )
    return dataclasses.replace(outcome, mtu_bytes=mtu)


# ---------------------------------------------------------------- entry points


def _ipv6_only(address: str, port: int) -> bool:
    """Whether `address` has an IPv6 address and no IPv4 one."""
    try:
        families = {info[0] for info in socket.getaddrinfo(address, port, socket.AF_UNSPEC, socket.SOCK_STREAM)}
    except OSError:
        return False  # said by the resolution below
    return socket.AF_INET6 in families and socket.AF_INET not in families


def _resolve(address: str, family: int, port: int) -> tuple[int, tuple[Any, ...]]:
    """(family, sockaddr) of `address` (an IP or a name); OSError if it has none."""
    infos = socket.getaddrinfo(address, port, family, socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"no address for {address}")
    found_family, _type, _proto, _name, sockaddr = infos[0]
    return int(found_family), tuple(sockaddr)


def _probe_here(address: str, settings: ProbeSettings) -> ProbeOutcome:
    method = settings.method
    family = socket.AF_INET if method == "icmp" else socket.AF_UNSPEC
    if method == "icmp" and _ipv6_only(address, settings.port):
        # The echo here is ICMP (IPv4) only: an IPv6 remote gets the TCP probe to its
        # port instead (a SYN and its SYN-ACK or RST are one round trip; the MTU the
        # kernel's), said by the outcome's method, rather than nothing (issue 36).
        return _probe_here(address, dataclasses.replace(settings, method="tcp"))
    try:
        found, sockaddr = _resolve(address, family, settings.port)
    except OSError as exc:
        kind = "an IPv4 address" if method == "icmp" else "an address"
        why = f"cannot find {kind} for {address}: {exc}"
        fix = "check remotes.NAME.address"
        if method == "icmp":
            # ICMPv6 has its own sockets and messages; a TCP connect works either way.
            fix += " (ICMP probes are IPv4 only: for an IPv6 remote set remotes.NAME.probe.method: tcp)"
        return ProbeOutcome(method, 0, 0, error=f"{why}; {fix}")
    if method == "icmp":
        return _probe_icmp(address, str(sockaddr[0]), settings)
    return _probe_tcp(address, found, sockaddr, settings)


def _probe_in_netns(address: str, settings: ProbeSettings, netns: str) -> ProbeOutcome:
    argv = in_netns(netns, [sys.executable, "-m", _MODULE, *settings_argv(settings), "--", address])
    limit = expected_seconds(settings) + SUBPROCESS_MARGIN
    where = f"the probe in network namespace {netns}"
    try:
        done = run_with_timeout(argv, limit, capture_stdout=True)
    except OSError as exc:
        return ProbeOutcome(settings.method, 0, 0, error=f"{where} could not start: {exc}")
    if done.timed_out:
        return ProbeOutcome(settings.method, 0, 0, error=f"{where} did not finish in {limit:g}s and was stopped")
    if done.returncode != 0:
        return ProbeOutcome(
            settings.method, 0, 0, error=f"{where} failed (exit {done.returncode}): {done.stderr_tail or 'no message'}"
        )
    lines = done.stdout.strip().splitlines()
    try:
        return outcome_from_json(lines[-1] if lines else "")
    except ValueError as exc:
        return ProbeOutcome(settings.method, 0, 0, error=f"{where} printed no probe outcome ({exc}): {done.stdout!r}")


def probe_path(address: str, settings: ProbeSettings, netns: str | None = None) -> ProbeOutcome:
    """Send the probe train (and the MTU search) to `address` (an IP), from `netns` where
    given.  Never raises for network trouble: a remote that answers nothing gives
    answered=0 (loss 1) and an error saying so.  ValueError for settings no probe can
    follow (check_settings)."""
    check_settings(settings)
    if not settings.enabled:
        return ProbeOutcome(settings.method, 0, 0, error="probes are off (remotes.NAME.probe.enabled: false)")
    if netns:
        return _probe_in_netns(address, settings, netns)
    try:
        return _probe_here(address, settings)
    except OSError as exc:  # anything the steps above did not expect: still an outcome
        return ProbeOutcome(settings.method, 0, 0, error=f"probing {address} failed: {exc}")


def _positive(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text}")
    return value


def parse_args(argv: Sequence[str] | None = None) -> tuple[str, ProbeSettings]:
    """(address, settings) from the command line; exits 2 with usage for bad arguments."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {_MODULE}",
        description="Probe the path to ADDRESS; print the outcome as one JSON object.",
    )
    defaults = ProbeSettings()
    parser.add_argument("address")
    parser.add_argument("--method", choices=_METHODS, default=defaults.method)
    parser.add_argument("--port", type=int, default=defaults.port)
    parser.add_argument("--count", type=int, default=defaults.count)
    parser.add_argument("--interval", type=_positive, default=defaults.interval)
    parser.add_argument("--timeout", type=_positive, default=defaults.timeout)
    parser.add_argument("--mtu", action=argparse.BooleanOptionalAction, default=defaults.mtu)
    args = parser.parse_args(argv)
    settings = ProbeSettings(
        method=args.method,
        port=args.port,
        count=args.count,
        interval=args.interval,
        timeout=args.timeout,
        mtu=args.mtu,
    )
    try:
        check_settings(settings)
    except ValueError as exc:
        parser.error(str(exc))
    return str(args.address), settings


def main(argv: Sequence[str] | None = None) -> int:
    address, settings = parse_args(argv)
    print(outcome_to_json(probe_path(address, settings)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
