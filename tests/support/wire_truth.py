"""The frames that really crossed a lab wire, counted independently of bigbinf.

With offloads on, a capture on the client sees TCP super-frames (TSO/GSO after the qdisc,
GRO-merged on receive).  The truth is counted at the far end of a wire whose sender
segments them (a veth with tso/gso off, a TUN device, a tbf with a small burst) and whose
receiving end has offloads off: there every captured frame is one frame as a NIC would
put it on the wire.  These helpers run that second capture (a plain tcpdump, not
bigbinf's Capture) and read it back with tshark (not bigbinf's pcap reader).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

TSHARK = shutil.which("tshark")
TCPDUMP = shutil.which("tcpdump") or "/usr/bin/tcpdump"
ETHERNET_MTU_FRAME = 1514  # the largest frame a 1500-byte MTU puts on an Ethernet wire (no FCS)


def run(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=timeout)


def in_ns(ns: str, *argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run("ip", "netns", "exec", ns, *argv, check=check, timeout=timeout)


def set_offloads(ns: str, ifname: str, on: bool) -> None:
    """TSO, GSO and GRO of one interface (GRO on a veth also switches it to NAPI)."""
    state = "on" if on else "off"
    in_ns(ns, "ethtool", "-K", ifname, "tso", state, "gso", state, "gro", state)


def offloads(ns: str, ifname: str) -> dict[str, bool]:
    """{"tso": .., "gso": .., "gro": ..} as ethtool -k reports them."""
    out = in_ns(ns, "ethtool", "-k", ifname).stdout
    names = {
        "tcp-segmentation-offload": "tso",
        "generic-segmentation-offload": "gso",
        "generic-receive-offload": "gro",
    }
    found = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in names:
            found[names[key.strip()]] = value.split()[0] == "on"
    return found


def link_details(ns: str, ifname: str) -> dict[str, int]:
    """The interface's GSO/GRO size limits from `ip -d -j link` (gso_max_size, gro_max_size,
    and gso_ipv4_max_size / gro_ipv4_max_size where iproute2 knows them)."""
    info = json.loads(run("ip", "-n", ns, "-d", "-j", "link", "show", "dev", ifname).stdout)[0]
    return {k: int(v) for k, v in info.items() if k.endswith("_max_size") or k.endswith("_max_segs")}


def kill_namespace(ns: str) -> None:
    """Every process in the namespace (all started by the test), then the namespace."""
    pids = run("ip", "netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    run("ip", "netns", "del", ns, check=False)


class FrameCapture:
    """A plain tcpdump in a namespace for the body of a `with`: the truth's capture."""

    def __init__(self, ns: str, ifname: str, pcap: Path, client: str, remote: str) -> None:
        self.pcap = pcap
        self.argv = ["ip", "netns", "exec", ns, TCPDUMP, "-i", ifname, "-s", "128", "-B", "8192",
                     "--immediate-mode", "-n", "-Z", "root", "-w", str(pcap),
                     "host", client, "and", "host", remote]  # fmt: skip
        self.proc: subprocess.Popen[str] | None = None
        self.stderr = ""
        self.dropped: int | None = None

    def __enter__(self) -> FrameCapture:
        self.proc = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        assert self.proc.stderr is not None
        lines = []
        while "listening on" not in (line := self.proc.stderr.readline()):
            lines.append(line)
            if not line:
                self.proc.wait(5)
                raise RuntimeError(f"tcpdump did not start: {''.join(lines)}")
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self.proc
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            _, self.stderr = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, self.stderr = proc.communicate()
        match = re.search(r"(\d+) packets? dropped by kernel", self.stderr)
        self.dropped = int(match.group(1)) if match else None


@dataclass(frozen=True)
class Frames:
    """Per way ("down" = remote -> client, "up"), as tshark reads a capture."""

    packets: dict[str, int]
    bytes: dict[str, int]
    largest: dict[str, int]  # the largest frame (orig_len)


def frames_per_way(pcap: Path, client: str, remote: str) -> Frames:
    """Frames and frame bytes (frame.len, the original length) per way between the two hosts."""
    assert TSHARK, "tshark is not installed (scripts/setup.sh installs it)"
    out = run(TSHARK, "-r", str(pcap), "-n", "-T", "fields", "-e", "ip.src", "-e", "ipv6.src",
              "-e", "ip.dst", "-e", "ipv6.dst", "-e", "frame.len", timeout=120).stdout  # fmt: skip
    packets, total, largest = {"down": 0, "up": 0}, {"down": 0, "up": 0}, {"down": 0, "up": 0}
    for line in out.splitlines():
        ip_src, ip6_src, ip_dst, ip6_dst, length = (line.split("\t") + [""] * 5)[:5]
        src, dst = ip_src or ip6_src, ip_dst or ip6_dst
        if {src, dst} != {client, remote}:
            continue
        way = "down" if src == remote else "up"
        packets[way] += 1
        total[way] += int(length)
        largest[way] = max(largest[way], int(length))
    return Frames(packets, total, largest)


def interface_counters(ns: str, ifname: str) -> dict[str, int]:
    """rx/tx bytes and packets of one interface, from its namespace's sysfs."""
    names = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")
    out = in_ns(ns, "cat", *(f"/sys/class/net/{ifname}/statistics/{n}" for n in names)).stdout.split()
    return dict(zip(names, map(int, out), strict=True))


def dropped_frames(ends: Iterable[tuple[str, str]]) -> int:
    """Frames the kernel dropped at these interfaces, summed over rx and tx.

    A veth counts a frame it could not hand to its peer (the peer's NAPI ring full, or
    its backlog past netdev_max_backlog: both happen when the receiving side waits for a
    CPU) as tx_dropped on the sending end, after that end's taps saw it: a capture at the
    sender counts it, a capture at the receiver never can."""
    names = ("rx_dropped", "tx_dropped")
    total = 0
    for ns, ifname in ends:
        out = in_ns(ns, "cat", *(f"/sys/class/net/{ifname}/statistics/{n}" for n in names)).stdout.split()
        total += sum(map(int, out))
    return total
