"""The analyser on a real capture: a bulk transfer through a dropping queue between two
namespaces, checked against the client veth's kernel counters and tshark."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from bigbinf.measure.wire import analyser_worker
from bigbinf.measure.wire.analyse import _fast_tally, _retransmissions, analyse_pcap
from bigbinf.measure.wire.analyser_worker import analyse_in_worker
from bigbinf.measure.wire.pcap import mapped
from tests.support import session

# The same hosts, port and tshark comparison as the crafted captures of the unit tests.
from tests.unit.test_analyse import CLIENT, REMOTE, RPORT, TSHARK, tshark_retransmissions
from tests.unit.test_analyser_worker import check_rss

# --------------------------------------------------------------- lab: a real transfer


def _run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout)


def _lab_available() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("ip", "tc", "tcpdump", "ethtool"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    return None


SENDER = """
import socket, sys
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((sys.argv[1], int(sys.argv[2])))
server.listen(1)
print("ready", flush=True)
conn, _ = server.accept()
chunk = bytes(1 << 20)
for _ in range(int(sys.argv[3])):
    conn.sendall(chunk)
conn.close()
"""

RECEIVER = """
import socket, sys
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])))
total = 0
while data := conn.recv(1 << 20):
    total += len(data)
print(total)
"""


class Lab:
    """Two namespaces joined by a veth pair; REMOTE sends through a small tbf that drops."""

    def __init__(self) -> None:
        suffix = os.urandom(3).hex()
        self.ns_remote, self.ns_client = f"bbR{suffix}", f"bbC{suffix}"
        self.if_remote, self.if_client = f"vR{suffix}", f"vC{suffix}"

    def __enter__(self) -> Lab:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ns(
        self, namespace: str, *argv: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return _run("ip", "netns", "exec", namespace, *argv, check=check, timeout=timeout)

    def _build(self) -> None:
        _run("ip", "netns", "add", session.register_netns(self.ns_remote))
        _run("ip", "netns", "add", session.register_netns(self.ns_client))
        _run("ip", "link", "add", self.if_remote, "netns", self.ns_remote, "type", "veth",
             "peer", "name", self.if_client, "netns", self.ns_client)  # fmt: skip
        for namespace, interface, address in (
            (self.ns_remote, self.if_remote, REMOTE),
            (self.ns_client, self.if_client, CLIENT),
        ):
            # No IPv6 and no ARP on the link: nothing but the transfer in the counters.
            for key in ("all", "default", interface):
                self.ns(namespace, "sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1")
            self.ns(namespace, "ip", "link", "set", "lo", "up")
            self.ns(namespace, "ip", "addr", "add", f"{address}/24", "dev", interface)
            self.ns(namespace, "ip", "link", "set", interface, "up")
            self.ns(namespace, "ethtool", "-K", interface, "tso", "off", "gso", "off", "gro", "off")
        mac_remote = self._mac(self.ns_remote, self.if_remote)
        mac_client = self._mac(self.ns_client, self.if_client)
        self.ns(
            self.ns_remote,
            "ip",
            "neigh",
            "replace",
            CLIENT,
            "lladdr",
            mac_client,
            "dev",
            self.if_remote,
            "nud",
            "permanent",
        )
        self.ns(
            self.ns_client,
            "ip",
            "neigh",
            "replace",
            REMOTE,
            "lladdr",
            mac_remote,
            "dev",
            self.if_client,
            "nud",
            "permanent",
        )
        # A queue far smaller than the sender's burst: real drops, real retransmissions.
        self.ns(self.ns_remote, "tc", "qdisc", "add", "dev", self.if_remote, "root", "tbf",
                "rate", "200mbit", "burst", "32kb", "limit", "30kb")  # fmt: skip

    def _mac(self, namespace: str, interface: str) -> str:
        # `ip netns exec` mounts the namespace's own /sys: read it from inside.
        return self.ns(namespace, "cat", f"/sys/class/net/{interface}/address").stdout.strip()

    def counters(self) -> tuple[int, int]:
        """(rx_bytes, tx_bytes) of the client's veth."""
        out = self.ns(self.ns_client, "cat", f"/sys/class/net/{self.if_client}/statistics/rx_bytes",
                      f"/sys/class/net/{self.if_client}/statistics/tx_bytes").stdout.split()  # fmt: skip
        return int(out[0]), int(out[1])

    def close(self) -> None:
        # Deleting a namespace also removes its end of the veth pair (and so the pair).
        for namespace in (self.ns_remote, self.ns_client):
            _run("ip", "netns", "del", namespace, check=False)


def capture_transfer(lab: Lab, pcap: Path, mebibytes: int) -> tuple[int, int, int]:
    """Bulk transfer REMOTE -> CLIENT captured at the client; (received, rx, tx) deltas."""
    sender = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns_remote, sys.executable, "-c", SENDER, REMOTE, str(RPORT), str(mebibytes)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    tcpdump = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns_client, "tcpdump", "-i", lab.if_client, "-s", "128", "-B", "4096",
         "--immediate-mode", "-w", str(pcap), "host", CLIENT, "and", "host", REMOTE],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert sender.stdout is not None and tcpdump.stderr is not None
        assert sender.stdout.readline().strip() == "ready"
        while "listening on" not in (line := tcpdump.stderr.readline()):
            assert line, "tcpdump did not start"
        rx0, tx0 = lab.counters()
        # The tbf's drops hold goodput near 10 MB/s; the benchmark's ~1 GiB takes ~100 s.
        received = lab.ns(
            lab.ns_client, sys.executable, "-c", RECEIVER, REMOTE, str(RPORT), timeout=max(120, mebibytes / 2)
        ).stdout
        sender.wait(timeout=60)
        time.sleep(0.3)
        rx1, tx1 = lab.counters()
    finally:
        for process in (tcpdump, sender):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for process in (tcpdump, sender):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    return int(received), rx1 - rx0, tx1 - tx0


@dataclass(frozen=True)
class BulkCapture:
    pcap: Path
    received: int  # bytes the receiver read
    rx: int  # the client veth's counters over the transfer
    tx: int


@pytest.fixture(scope="module")
def bulk_capture(tmp_path_factory: pytest.TempPathFactory) -> BulkCapture:
    """One real 64 MiB download through the dropping queue, captured at the client; the
    tests of this module analyse the same file."""
    reason = _lab_available()
    if reason:
        pytest.skip(reason)
    pcap = tmp_path_factory.mktemp("bulk") / "bulk.pcap"
    with Lab() as lab:
        received, rx, tx = capture_transfer(lab, pcap, 64)
    return BulkCapture(pcap, received, rx, tx)


@pytest.mark.lab
def test_real_bulk_transfer_with_qdisc_drops(bulk_capture: BulkCapture) -> None:
    pcap, rx, tx = bulk_capture.pcap, bulk_capture.rx, bulk_capture.tx
    assert bulk_capture.received == 64 << 20
    analysis = analyse_pcap(pcap, CLIENT, REMOTE, engine="python")
    # The compiled fast path handles this capture (no fallback) and agrees on every field.
    assert _fast_path_applies(pcap)
    assert analyse_pcap(pcap, CLIENT, REMOTE, engine="auto") == analysis
    # Frame bytes are what the client's veth counted, exactly, both ways.
    assert analysis.wire_bytes == {"down": rx, "up": tx}
    assert analysis.payload_bytes["down"] >= 64 << 20
    assert analysis.truncated_tail is False
    # The tbf dropped: retransmissions reached the wire, and tshark sees the same ones.
    assert analysis.retransmits["down"] > 0
    if TSHARK:
        theirs = tshark_retransmissions(pcap, REMOTE)
        down = sum(1 for _, is_down in theirs if is_down)
        assert analysis.retransmits == {"down": down, "up": len(theirs) - down}
        assert _retransmissions(pcap, CLIENT, REMOTE, engine="python") == theirs
        assert _retransmissions(pcap, CLIENT, REMOTE, engine="auto") == theirs


@pytest.mark.lab
def test_the_analyser_worker_gives_the_python_engines_analysis_of_a_real_capture(bulk_capture: BulkCapture) -> None:
    # The live path's call (transfer.analyse), through the worker process, against the
    # in-process reference; then the exporter's RSS after that analysis, through the
    # worker and in-process, each in a fresh interpreter (printed: docs/benchmarks.md).
    pcap = bulk_capture.pcap
    try:
        assert analyse_in_worker(pcap, CLIENT, REMOTE) == analyse_pcap(pcap, CLIENT, REMOTE, engine="python")
    finally:
        analyser_worker.shutdown()
    check_rss("real 64 MiB download", pcap, CLIENT, REMOTE)


def _fast_path_applies(pcap: Path) -> bool:
    with mapped(pcap) as buf:
        return _fast_tally(str(pcap), buf, CLIENT, REMOTE, None, None) is not None
