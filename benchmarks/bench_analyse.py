"""Benchmark the pcap analyser against tshark and scapy on the same capture.

Usage:
    .venv/bin/python benchmarks/bench_analyse.py                 # synthetic 400k-packet bulk transfer
    .venv/bin/python benchmarks/bench_analyse.py --packets 1000000
    .venv/bin/python benchmarks/bench_analyse.py --pcap F.pcap --client A --remote B

The synthetic capture is what tcpdump -s 128 writes for a bulk download over Ethernet:
1514-byte data frames (MSS 1448, TCP timestamps) cut to 128 captured bytes, one ACK per
two segments, and a loss every 500 segments repaired by a fast retransmission after
four duplicate ACKs; so the TCP analysis has real work.  All tools read the same file
in one run; scapy only reads a subset (it is ~50x slower) and is scaled by its count.
Python readers are timed best-of --repeat (the machine is shared, timings are noisy);
tshark, at ~10 s a run, once.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

from bigbinf.measure.analyse import analyse_pcap, iter_packets

CLIENT, REMOTE = "198.18.0.1", "198.18.0.2"
MSS = 1448
SNAPLEN = 128


def _frame(
    src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, flags: int, payload: int
) -> tuple[bytes, int]:
    """(captured bytes, wire length) of an Ethernet/IPv4/TCP frame with a timestamp option."""
    options = b"\x01\x01\x08\x0a" + struct.pack("!II", 1, 2)
    tcp = (
        struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 8 << 4, flags, 502, 0, 0) + options
    )
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp) + payload, 0, 0x4000, 64, 6, 0, src, dst)
    eth = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00"
    wire = eth + ip + tcp + bytes(payload)
    return wire[:SNAPLEN], len(wire)


def write_synthetic(path: Path, packets: int) -> int:
    """A bulk download of about `packets` packets; returns the number written."""
    client, remote = socket.inet_aton(CLIENT), socket.inet_aton(REMOTE)
    cport, rport = 40000, 5001
    ts = 1_700_000_000_000_000_000
    seq, cseq = 1000, 5000
    written = 0
    lost: int | None = None
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, SNAPLEN, 1))

        def emit(down: bool, s: int, a: int, flags: int, payload: int, gap_ns: int) -> None:
            nonlocal ts, written
            ts += gap_ns
            if down:
                data, wire = _frame(remote, client, rport, cport, s, a, flags, payload)
            else:
                data, wire = _frame(client, remote, cport, rport, s, a, flags, payload)
            f.write(struct.pack("<IIII", ts // 10**9, ts % 10**9, len(data), wire))
            f.write(data)
            written += 1

        emit(False, cseq, 0, 0x02, 0, 0)
        emit(True, seq, cseq + 1, 0x12, 0, 50_000)
        emit(False, cseq + 1, seq + 1, 0x10, 0, 50_000)
        seq += 1
        cseq += 1
        acked = seq
        segment = 0
        while written < packets:
            segment += 1
            if segment % 500 == 0 and lost is None:
                lost = seq  # dropped before the capture point: never written
            else:
                emit(True, seq, cseq, 0x10, MSS, 60_000)
            seq += MSS
            if segment % 2 == 0:
                acked = lost if lost is not None else seq
                emit(False, cseq, acked, 0x10, 0, 5_000)
                if lost is not None and segment % 500 == 6:
                    emit(False, cseq, acked, 0x10, 0, 5_000)  # fourth duplicate ACK
                    emit(True, lost, cseq, 0x10, MSS, 100_000)  # fast retransmission
                    lost = None
                    emit(False, cseq, seq, 0x10, 0, 5_000)
    return written


def time_analyser(pcap: Path, client: str, remote: str) -> tuple[float, int, int]:
    start = time.perf_counter()
    analysis = analyse_pcap(pcap, client, remote)
    elapsed = time.perf_counter() - start
    packets = analysis.records  # as captured: super-frames once
    return elapsed, packets, analysis.retransmits["down"] + analysis.retransmits["up"]


def time_iter_packets(pcap: Path, client: str, remote: str) -> tuple[float, int]:
    start = time.perf_counter()
    count = sum(1 for _ in iter_packets(pcap, client, remote))
    return time.perf_counter() - start, count


def time_tshark(pcap: Path, args: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    out = subprocess.run(["tshark", "-n", "-r", str(pcap), *args], capture_output=True, check=True).stdout
    return time.perf_counter() - start, out.count(b"\n")


def time_scapy(pcap: Path, limit: int) -> tuple[float, int]:
    import scapy.layers.inet
    import scapy.layers.l2  # noqa: F401
    from scapy.utils import PcapReader

    start = time.perf_counter()
    count = 0
    with PcapReader(str(pcap)) as reader:
        for _packet in reader:  # PcapReader dissects every packet into layers
            count += 1
            if count >= limit:
                break
    return time.perf_counter() - start, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pcap", type=Path, help="an existing capture (default: synthetic)")
    parser.add_argument("--client", default=CLIENT)
    parser.add_argument("--remote", default=REMOTE)
    parser.add_argument("--packets", type=int, default=400_000, help="synthetic capture size")
    parser.add_argument("--scapy-packets", type=int, default=20_000, help="subset scapy reads")
    parser.add_argument("--repeat", type=int, default=3, help="best of N for the Python readers")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        pcap = args.pcap
        if pcap is None:
            pcap = Path(tmp) / "synthetic.pcap"
            start = time.perf_counter()
            n = write_synthetic(pcap, args.packets)
            print(f"wrote {n} packets ({pcap.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - start:.1f} s")

        rows: list[tuple[str, float, int]] = []
        runs = [time_analyser(pcap, args.client, args.remote) for _ in range(args.repeat)]
        elapsed, packets, retransmits = min(runs)
        rows.append(("analyse_pcap (full analysis)", elapsed, packets))
        print(
            f"analyse_pcap: {packets} packets, {retransmits} retransmissions, "
            + ", ".join(f"{r[0]:.2f}" for r in runs)
            + " s"
        )
        elapsed, packets = min(time_iter_packets(pcap, args.client, args.remote) for _ in range(args.repeat))
        rows.append(("iter_packets (Packet objects, no TCP analysis)", elapsed, packets))
        if shutil.which("tshark"):
            elapsed, packets = time_tshark(pcap, ["-T", "fields", "-e", "frame.len"])
            rows.append(("tshark -T fields -e frame.len", elapsed, packets))
            elapsed, lines = time_tshark(
                pcap, ["-Y", "tcp.analysis.retransmission", "-T", "fields", "-e", "frame.number"]
            )
            rows.append(("tshark -Y tcp.analysis.retransmission", elapsed, packets))
            print(f"tshark: {lines} retransmissions")
        elapsed, packets = min(time_scapy(pcap, args.scapy_packets) for _ in range(args.repeat))
        rows.append((f"scapy PcapReader (first {packets})", elapsed, packets))

        ours = rows[0][2] / rows[0][1]
        print()
        print(f"{'reader':48} {'packets':>9} {'seconds':>8} {'packets/s':>11} {'analyse_pcap is':>16}")
        for name, elapsed, packets in rows:
            rate = packets / elapsed
            print(f"{name:48} {packets:9d} {elapsed:8.2f} {rate:11,.0f} {ours / rate:15.1f}x")


if __name__ == "__main__":
    main()
