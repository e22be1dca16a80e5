"""Path probes, the parts that need no root and no lab: statistics, ICMP packets, reply
matching, the MTU search, the train's schedule, the JSON between namespaces, arguments.

Independent truths: the statistics module, scapy's own ICMP encoder and decoder, the
RFC 1071 example, known MTUs behind a fake path, the clock, real loopback sockets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import itertools
import json
import math
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.all import ICMP, IP, ICMPerror, IPerror, Raw

from bigbinf.measure.path import probe
from bigbinf.measure.path.probe import (
    MIN_MTU,
    MTU_TRIES,
    Icmp,
    ProbeOutcome,
    ProbeSettings,
    Received,
    Sent,
    checksum,
    echo_payload,
    echo_request,
    outcome_from_json,
    outcome_to_json,
    parse_args,
    parse_icmp,
    probe_path,
    reply_to,
    round_trip,
    rtt_stats,
    search_mtu,
    settings_argv,
)

TARGET = "198.18.0.2"

# ---------------------------------------------------------------- statistics


def test_rtt_stats_are_min_avg_max_and_pings_mdev() -> None:
    rtts = [0.0401, 0.0405, 0.0399, 0.0420, 0.0410]
    low, avg, high, mdev = rtt_stats(rtts) or (0, 0, 0, 0)
    assert (low, high) == (0.0399, 0.0420)
    assert avg == pytest.approx(statistics.fmean(rtts), abs=1e-15)
    # ping's mdev, sqrt(mean(x^2) - mean(x)^2), is the population standard deviation.
    assert mdev == pytest.approx(statistics.pstdev(rtts), rel=1e-9)
    assert mdev == pytest.approx(math.sqrt(sum(r * r for r in rtts) / 5 - (sum(rtts) / 5) ** 2), rel=1e-6)


def test_rtt_stats_of_nothing_is_none_and_of_equal_samples_has_no_spread() -> None:
    assert rtt_stats([]) is None
    # 0.1 squared and averaged rounds to a hair below mean^2: no sqrt of a negative.
    assert rtt_stats([0.1] * 7) == (0.1, pytest.approx(0.1), 0.1, 0.0)
    assert rtt_stats([0.25]) == (0.25, 0.25, 0.25, 0.0)


# ---------------------------------------------------------------- packets


def test_checksum_matches_rfc_1071_and_verifies_to_zero() -> None:
    data = bytes.fromhex("0001f203f4f5f6f7")  # RFC 1071's example: sum ddf2, checksum 220d
    assert checksum(data) == 0x220D
    assert checksum(data + (0x220D).to_bytes(2, "big")) == 0
    assert checksum(b"\x01") == checksum(b"\x01\x00")  # odd length: padded with a zero byte


@pytest.mark.parametrize("ip_size", [84, 68, 1400, 1500])
def test_echo_request_is_what_scapy_builds(ip_size: int) -> None:
    payload = echo_payload(123456789, ip_size)
    packet = echo_request(0xBEEF, 513, payload)
    assert len(packet) + 20 == ip_size
    theirs = bytes(ICMP(type=8, id=0xBEEF, seq=513) / Raw(payload))
    assert packet == theirs
    decoded = ICMP(packet)
    assert (decoded.type, decoded.id, decoded.seq) == (8, 0xBEEF, 513)
    assert payload[:8] == (123456789).to_bytes(8, "big")


def test_parse_echo_reply_with_and_without_ip_header() -> None:
    reply = IP(src=TARGET, dst="198.18.0.1") / ICMP(type=0, id=4242, seq=7) / Raw(b"stampxyz" + b"fill")
    parsed = parse_icmp(bytes(reply), with_ip_header=True)
    assert parsed == Icmp(0, 0, 4242, 7, payload=b"stampxyzfill")
    # An ICMP datagram socket hands over the ICMP message only.
    assert parse_icmp(bytes(reply[ICMP]), with_ip_header=False) == parsed


def test_parse_drops_damaged_and_unrelated_packets() -> None:
    good = bytearray(bytes(IP() / ICMP(type=0, id=1, seq=1) / Raw(b"12345678")))
    damaged = bytes(good[:-1]) + bytes([good[-1] ^ 0xFF])
    assert parse_icmp(damaged, with_ip_header=True) is None
    assert parse_icmp(bytes(IP() / ICMP(type=8, id=1, seq=1)), with_ip_header=True) is None  # a request
    assert parse_icmp(bytes(IP() / ICMP(type=13)), with_ip_header=True) is None  # timestamp request
    assert parse_icmp(b"\x45\x00", with_ip_header=True) is None
    # An error quoting someone's TCP segment, not an echo request.
    tcp_error = IP() / ICMP(type=3, code=3) / IPerror(dst=TARGET, proto=6) / Raw(b"\0" * 8)
    assert parse_icmp(bytes(tcp_error), with_ip_header=True) is None


def test_parse_fragmentation_needed_quoting_our_request() -> None:
    error = (
        IP(src="198.18.0.254", dst="198.18.0.1")
        / ICMP(type=3, code=4, nexthopmtu=1400)
        / IPerror(src="198.18.0.1", dst=TARGET)
        / ICMPerror(type=8, id=77, seq=5)
    )
    parsed = parse_icmp(bytes(error), with_ip_header=True)
    assert parsed == Icmp(3, 4, 77, 5, quoted_destination=TARGET, next_hop_mtu=1400)
    assert probe.describe_error(parsed) == "fragmentation needed"
    exceeded = IP() / ICMP(type=11) / IPerror(dst=TARGET) / ICMPerror(type=8, id=77, seq=6)
    assert parse_icmp(bytes(exceeded), with_ip_header=True) == Icmp(11, 0, 77, 6, quoted_destination=TARGET)


# ---------------------------------------------------------------- matching replies


def _received(msg: Icmp, source: str = TARGET, at_ns: int = 0, kernel_ns: int | None = None) -> Received:
    return Received(msg, source, at_ns, kernel_ns)


def test_reply_matches_only_our_identifier_sequence_source_and_stamp() -> None:
    sent = Sent(5, 1_000_000_000, 1_700_000_000_000_000_000)
    pending = {5: sent}
    ours = Icmp(0, 0, 4242, 5, payload=sent.stamp + b"fill")
    assert reply_to(_received(ours), pending, 4242, TARGET) is sent
    assert reply_to(_received(dataclasses.replace(ours, identifier=4243)), pending, 4242, TARGET) is None  # other ping
    assert reply_to(_received(dataclasses.replace(ours, seq=6)), pending, 4242, TARGET) is None  # not pending
    assert reply_to(_received(ours, source="198.18.0.3"), pending, 4242, TARGET) is None  # not the target
    stale = dataclasses.replace(ours, payload=Sent(5, 7, 0).stamp + b"fill")  # an earlier train's seq 5
    assert reply_to(_received(stale), pending, 4242, TARGET) is None
    assert reply_to(_received(ours), {}, 4242, TARGET) is None  # already answered or expired


def test_error_matches_the_quoted_request() -> None:
    pending = {5: Sent(5, 1, 2)}
    error = Icmp(3, 1, 4242, 5, quoted_destination=TARGET)
    assert probe.error_about(_received(error, source="198.18.0.1"), pending, 4242, TARGET) is pending[5]
    other = dataclasses.replace(error, quoted_destination="198.18.0.9")
    assert probe.error_about(_received(other, source="198.18.0.1"), pending, 4242, TARGET) is None


def test_round_trip_prefers_the_kernel_stamp_unless_the_wall_clock_stepped() -> None:
    sent = Sent(1, 5_000_000_000, 1_700_000_000_000_000_000)
    woke_late = _received(Icmp(0, 0, 1, 1), at_ns=5_042_000_000, kernel_ns=1_700_000_000_040_000_000)
    assert round_trip(sent, woke_late) == pytest.approx(0.040)
    stepped_back = _received(Icmp(0, 0, 1, 1), at_ns=5_042_000_000, kernel_ns=1_699_999_999_000_000_000)
    assert round_trip(sent, stepped_back) == pytest.approx(0.042)
    stepped_on = _received(Icmp(0, 0, 1, 1), at_ns=5_042_000_000, kernel_ns=1_700_000_010_000_000_000)
    assert round_trip(sent, stepped_on) == pytest.approx(0.042)
    assert round_trip(sent, _received(Icmp(0, 0, 1, 1), at_ns=5_042_000_000)) == pytest.approx(0.042)


# ---------------------------------------------------------------- the MTU search


class FakePath:
    """passes(size) of a path whose MTU is `mtu`; counts the probes."""

    def __init__(self, mtu: int) -> None:
        self.mtu = mtu
        self.tried: list[int] = []

    def passes(self, size: int) -> bool:
        self.tried.append(size)
        return size <= self.mtu


@pytest.mark.parametrize("mtu", [68, 69, 84, 85, 576, 1280, 1399, 1400, 1480, 1499])
@pytest.mark.parametrize("known_good", [None, 84])
def test_mtu_search_finds_the_exact_mtu_in_a_binary_search(mtu: int, known_good: int | None) -> None:
    path = FakePath(mtu)
    assert search_mtu(path.passes, 1500, known_good) == (mtu if mtu >= (known_good or 0) else known_good)
    assert path.tried[0] == 1500
    assert len(path.tried) <= 1 + math.ceil(math.log2(1500 - MIN_MTU + 1))


def test_mtu_search_upper_bound_passing_is_one_probe() -> None:
    path = FakePath(9000)
    assert search_mtu(path.passes, 1500) == 1500
    assert path.tried == [1500]


def test_mtu_search_gives_none_when_nothing_passes() -> None:
    path = FakePath(0)
    assert search_mtu(path.passes, 1500) is None
    assert min(path.tried) == MIN_MTU  # searched all the way down
    assert search_mtu(FakePath(9000).passes, 60) is None  # no MTU below IPv4's minimum


def test_mtu_search_starts_from_the_interface_not_a_learnt_path_mtu() -> None:
    assert probe.mtu_upper_bound(1400, 1500) == 1500  # the kernel learnt 1400 earlier
    assert probe.mtu_upper_bound(1500, None) == 1500  # no interface known: the route's
    assert probe.mtu_upper_bound(65536, 65536) == 65535  # loopback: no IP packet is larger


def test_interface_mtu_is_the_kernels() -> None:
    lo = socket.if_nametoindex("lo")
    with open("/sys/class/net/lo/mtu") as sysfs:
        assert probe.interface_mtu(lo) == int(sysfs.read())
    assert probe.interface_mtu(max(i for i, _ in socket.if_nameindex()) + 1000) is None


class FakeEchoSocket:
    """An EchoSocket whose path is scripted: answer(seq, size) gives a reply's delay in
    seconds or None (lost); too_big_here makes sendto fail with EMSGSIZE; refuse gives a
    fragmentation-needed error from a router instead of a reply."""

    def __init__(self, answer, too_big_here: int = 65535, refuse_above: int = 65535) -> None:
        self.identifier = 4242
        self.target = TARGET
        self.answer = answer
        self.too_big_here = too_big_here
        self.refuse_above = refuse_above
        self.sends: list[tuple[float, int, int]] = []  # (time, seq, size)
        self.queue: list[tuple[int, Received]] = []  # (due ns, packet)

    def send(self, seq: int, ip_size: int) -> Sent:
        seq &= 0xFFFF  # as on the wire
        now = time.monotonic_ns()
        self.sends.append((now / 1e9, seq, ip_size))
        if ip_size > self.too_big_here:
            raise OSError(errno.EMSGSIZE, "Message too long")
        sent = Sent(seq, now, time.time_ns())
        if ip_size > self.refuse_above:
            msg = Icmp(3, 4, self.identifier, seq, quoted_destination=TARGET, next_hop_mtu=self.refuse_above)
            self.queue.append((now, Received(msg, "198.18.0.254", now, None)))
            return sent
        delay = self.answer(seq, ip_size)
        for one in delay if isinstance(delay, list) else [delay]:
            if one is None:
                continue
            # (delivered after, received at): a reply stamped later than it is handed over
            delivered, stamped = one if isinstance(one, tuple) else (one, one)
            msg = Icmp(0, 0, self.identifier, seq, payload=sent.stamp)
            received = Received(msg, TARGET, now + int(stamped * 1e9), None)
            self.queue.append((now + int(delivered * 1e9), received))
        return sent

    def receive(self, timeout: float) -> list[Received]:
        deadline = time.monotonic_ns() + int(timeout * 1e9)
        if self.queue:
            deadline = min(deadline, min(due for due, _ in self.queue))
        time.sleep(max(0.0, (deadline - time.monotonic_ns()) / 1e9))
        now = time.monotonic_ns()
        ready = [r for due, r in self.queue if due <= now]
        self.queue = [(due, r) for due, r in self.queue if due > now]
        return ready


def _seqs():
    return iter(range(100, 1000)).__next__


def test_an_mtu_probe_that_meets_loss_is_tried_again() -> None:
    tries: list[int] = []

    def answer(seq: int, size: int) -> float | None:
        tries.append(seq)
        return 0.001 if len(tries) == MTU_TRIES else None  # the first tries are lost

    sock = FakeEchoSocket(answer)
    assert probe._echo_passes(sock, 1500, 0.02, _seqs()) is True
    assert len(sock.sends) == MTU_TRIES


def test_an_mtu_probe_without_any_reply_fails_after_every_try() -> None:
    sock = FakeEchoSocket(lambda seq, size: None)
    assert probe._echo_passes(sock, 1500, 0.01, _seqs()) is False
    assert [size for _, _, size in sock.sends] == [1500] * MTU_TRIES


def test_a_late_reply_to_an_earlier_try_still_counts() -> None:
    # The first try's reply comes while the second waits: handed over only once the second
    # request is out (by the sends, not a time: a busy host's sleeps overshoot).
    class Late(FakeEchoSocket):
        def send(self, seq: int, ip_size: int) -> Sent:
            sent = super().send(seq, ip_size)
            if len(self.sends) == 1:
                self.first = sent
            else:
                msg = Icmp(0, 0, self.identifier, self.first.seq, payload=self.first.stamp)
                self.queue.append((time.monotonic_ns(), Received(msg, TARGET, time.monotonic_ns(), None)))
            return sent

    sock = Late(lambda seq, size: None)
    assert probe._echo_passes(sock, 1500, 0.02, _seqs()) is True
    assert len(sock.sends) == 2


def test_too_big_here_or_refused_by_a_router_is_decided_at_once() -> None:
    local = FakeEchoSocket(lambda seq, size: 0.001, too_big_here=1500)
    assert probe._echo_passes(local, 1501, 0.01, _seqs()) is False
    assert len(local.sends) == 1
    router = FakeEchoSocket(lambda seq, size: 0.001, refuse_above=1400)
    assert probe._echo_passes(router, 1401, 0.5, _seqs()) is False
    assert len(router.sends) == 1
    assert probe._echo_passes(router, 1400, 0.5, _seqs()) is True


def test_a_reply_that_came_back_in_fragments_does_not_pass() -> None:
    # A 1280-byte link toward us: a veth takes a request of up to 1284 bytes on its way in
    # (a VLAN tag's slack), the router refragments the reply to at most 1280 on its way
    # back (IP_RECVFRAGSIZE says so): the path is 1280, not 1284.
    class Narrow(FakeEchoSocket):
        def receive(self, timeout: float) -> list[Received]:
            size = self.sends[-1][2] if self.sends else 0
            return [dataclasses.replace(r, fragment_bytes=1276) if size > 1280 else r for r in super().receive(timeout)]

    narrow = Narrow(lambda seq, size: 0.001 if size <= 1284 else None)
    assert probe._echo_passes(narrow, 1284, 0.05, _seqs()) is False
    assert probe._echo_passes(narrow, 1280, 0.05, _seqs()) is True
    found = probe.search_mtu(lambda size: probe._echo_passes(narrow, size, 0.05, _seqs()), 1500, 84)
    assert found == 1280


def test_mtu_search_through_retries_finds_the_path_mtu_despite_loss() -> None:
    # Every second probe lost: retries keep the search from mistaking loss for size.
    lost = iter([True, False] * 100)

    def answer(seq: int, size: int) -> float | None:
        return None if size > 1400 or next(lost) else 0.001

    sock = FakeEchoSocket(answer)
    assert search_mtu(lambda size: probe._echo_passes(sock, size, 0.01, _seqs()), 1500, 84) == 1400


# ---------------------------------------------------------------- the train


def _settings(**kw) -> ProbeSettings:
    return dataclasses.replace(ProbeSettings(), **kw)


def test_train_sends_on_schedule_without_waiting_for_replies() -> None:
    sock = FakeEchoSocket(lambda seq, size: None)  # nothing ever answers
    start = time.monotonic()
    train = probe._echo_train(sock, _settings(count=5, interval=0.02, timeout=0.3))
    took = time.monotonic() - start
    times = [t for t, _, _ in sock.sends]
    assert [seq for _, seq, _ in sock.sends] == [0, 1, 2, 3, 4]
    assert {size for _, _, size in sock.sends} == {probe.TRAIN_PACKET}
    # Each at or after its slot (start + seq x interval: one sent late, the next catches up,
    # 25 ms then 15 ms apart on a busy CI host), none held for the 0.3 s timeout.
    assert all(t - times[0] >= seq * 0.02 - 0.001 for seq, t in enumerate(times)), times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(g < 0.1 for g in gaps), gaps
    assert (train.sent, train.rtts) == (5, [])
    assert 0.08 + 0.3 <= took < 0.08 + 0.3 + 0.15  # waits the timeout for the last, no longer


def test_train_counts_late_duplicate_and_missing_replies_right() -> None:
    # seq 1: late; 2: lost; 3: duplicated; 5: received late but read at once (the wake-up
    # came with other packets), so only its receive time says it is late.
    delays = {0: 0.005, 1: 0.2, 2: None, 3: [0.005, 0.006], 4: 0.01, 5: (0.005, 0.15)}
    sock = FakeEchoSocket(lambda seq, size: delays[seq])
    train = probe._echo_train(sock, _settings(count=6, interval=0.01, timeout=0.1))
    assert train.sent == 6
    assert sorted(round(r, 3) for r in train.rtts) == [0.005, 0.005, 0.01]  # seq 0, 3 (once), 4


def test_train_ends_early_once_everything_is_answered() -> None:
    sock = FakeEchoSocket(lambda seq, size: 0.002)
    start = time.monotonic()
    train = probe._echo_train(sock, _settings(count=3, interval=0.01, timeout=5.0))
    assert len(train.rtts) == 3
    assert time.monotonic() - start < 0.5


# ---------------------------------------------------------------- outcomes, settings, arguments


def test_outcome_json_round_trip() -> None:
    full = ProbeOutcome("icmp", 20, 19, 0.04, 0.0405, 0.042, 0.0004, 1500, "", 4242)
    assert outcome_from_json(outcome_to_json(full)) == full
    assert json.loads(outcome_to_json(full))["rtt_mdev_seconds"] == 0.0004
    empty = ProbeOutcome("tcp", 5, 0, error="no answer")
    assert outcome_from_json(outcome_to_json(empty)) == empty
    assert outcome_from_json(outcome_to_json(empty)).loss_ratio == 1.0
    assert full.loss_ratio == pytest.approx(0.05)
    assert ProbeOutcome("icmp", 0, 0).loss_ratio == 1.0


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"sent": 1, "answered": 1, "error": ""}',  # no method
        '{"method": "icmp", "sent": "20", "answered": 1, "error": ""}',
        '{"method": "icmp", "sent": true, "answered": 1, "error": ""}',
        '{"method": "icmp", "sent": 1, "answered": 1, "error": "", "mtu_bytes": 1500.5}',
        "Traceback (most recent call last):",
    ],
)
def test_outcome_from_json_rejects_what_is_not_an_outcome(text: str) -> None:
    with pytest.raises(ValueError):
        outcome_from_json(text)


@pytest.mark.parametrize(
    "bad",
    [
        {"method": "udp"},
        {"count": 0},
        {"count": -3},
        {"interval": 0},
        {"interval": -1.0},
        {"timeout": 0.0},
        {"timeout": float("nan")},
        {"port": 0},
        {"port": 65536},
    ],
)
def test_impossible_settings_raise_before_any_probe(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        probe_path(TARGET, _settings(**bad))


@pytest.mark.parametrize(
    "settings",
    [ProbeSettings(), ProbeSettings("tcp", 2222, 7, 0.005, 0.3, False), ProbeSettings(interval=0.1 + 0.2)],
)
def test_settings_survive_the_command_line(settings: ProbeSettings) -> None:
    assert parse_args([*settings_argv(settings), "--", "-odd-name"]) == ("-odd-name", settings)


@pytest.mark.parametrize(
    "argv",
    [
        ["--count", "0", TARGET],
        ["--interval", "-1", TARGET],
        ["--timeout", "inf", TARGET],
        ["--method", "udp", TARGET],
        ["--port", "99999", TARGET],
        [],
    ],
)
def test_bad_arguments_exit_with_usage(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_expected_seconds_bounds_the_subprocess() -> None:
    assert probe.expected_seconds(_settings(method="tcp", count=5, interval=0.2, timeout=1.0)) == 5.0
    train = probe.expected_seconds(_settings(count=20, interval=0.2, timeout=1.0, mtu=False))
    assert train == pytest.approx(19 * 0.2 + 1.0)
    with_mtu = probe.expected_seconds(_settings(count=20, interval=0.2, timeout=1.0))
    assert with_mtu == pytest.approx(train + 17 * MTU_TRIES * 1.0)


def test_disabled_probes_send_nothing() -> None:
    outcome = probe_path(TARGET, _settings(enabled=False))
    assert (outcome.sent, outcome.answered, outcome.loss_ratio) == (0, 0, 1.0)
    assert "enabled: false" in outcome.error


def test_a_namespace_that_does_not_exist_is_an_error_outcome_not_an_exception() -> None:
    netns = "bbt" + uuid.uuid4().hex[:7]
    outcome = probe_path(TARGET, _settings(count=1, timeout=0.1), netns=netns)
    assert (outcome.sent, outcome.answered) == (0, 0)
    assert f"the probe in network namespace {netns}" in outcome.error


def test_a_name_without_an_address_is_an_error_outcome() -> None:
    outcome = probe_path("no-such-host.invalid", _settings(count=1, timeout=0.1))
    assert outcome.answered == 0
    assert "cannot find an IPv4 address for no-such-host.invalid" in outcome.error


# ---------------------------------------------------------------- TCP on loopback (no root needed)


@contextlib.contextmanager
def _accepting(host: str, family: socket.AddressFamily) -> Iterator[int]:
    """A listener on `host` that accepts and closes every connection; yields its port."""
    with socket.create_server((host, 0), family=family) as server:
        stop = threading.Event()

        def accept() -> None:
            server.settimeout(0.1)
            while not stop.is_set():
                try:
                    server.accept()[0].close()
                except TimeoutError:
                    continue

        acceptor = threading.Thread(target=accept)
        acceptor.start()
        try:
            yield server.getsockname()[1]
        finally:
            stop.set()
            acceptor.join()


def test_tcp_probes_to_a_listener_measure_connect_and_report_the_kernels_mtu() -> None:
    with _accepting("127.0.0.1", socket.AF_INET) as port:
        outcome = probe_path("127.0.0.1", _settings(method="tcp", port=port, count=5, interval=0.01))
    assert (outcome.sent, outcome.answered, outcome.error) == (5, 5, "")
    assert outcome.rtt_min_seconds is not None and 0 < outcome.rtt_min_seconds < 0.05
    assert outcome.mtu_bytes == probe.local_mtu(socket.AF_INET, "127.0.0.1")  # loopback's 65536


def test_tcp_probes_to_a_closed_port_count_the_refusals_as_answers() -> None:
    with socket.socket() as placeholder:  # a port certainly closed: bound, never listening
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
        outcome = probe_path("127.0.0.1", _settings(method="tcp", port=port, count=3, interval=0.01))
    assert (outcome.sent, outcome.answered, outcome.loss_ratio) == (3, 3, 0.0)
    assert outcome.mtu_bytes is None
    assert outcome.error.startswith(f"path MTU unknown: no connection to 127.0.0.1 port {port} completed (refused)")


def test_an_ipv6_remote_asked_for_icmp_gets_the_tcp_probe() -> None:
    """The echo here is IPv4's: an IPv6 remote with method icmp (the default) is probed by
    TCP connect to its port instead, and the outcome says so (before issue 36: nothing
    measured, only an error)."""
    with _accepting("::1", socket.AF_INET6) as port:
        outcome = probe_path("::1", _settings(method="icmp", port=port, count=4, interval=0.01))
    assert (outcome.method, outcome.sent, outcome.answered, outcome.error) == ("tcp", 4, 4, "")
    assert outcome.rtt_min_seconds is not None and outcome.rtt_min_seconds > 0
    assert outcome.mtu_bytes == probe.local_mtu(socket.AF_INET6, "::1")


def test_config_check_says_an_ipv6_remotes_icmp_probe_is_a_tcp_one(tmp_path: Path) -> None:
    import subprocess
    import sys

    import yaml

    raw = {
        "remotes": {
            "six": {"address": "2001:db8::2", "data_dir": "/data"},
            "six-tcp": {"address": "2001:db8::3", "data_dir": "/data", "probe": {"method": "tcp"}},
            "four": {"address": "198.18.0.2", "data_dir": "/data"},
        },
        "datasets": {"f1k": {"file": "f1k.bin", "size": "1KiB"}},
        "protocols": {"http": {}},
        "journal": {"path": str(tmp_path / "journal.jsonl")},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    done = subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(path), "--config.check"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "probe.method" in line]
    assert len(warnings) == 1 and "remotes.six.probe.method: icmp, and 2001:db8::2 is IPv6" in warnings[0]
    assert "TCP connect to port 22" in warnings[0]
