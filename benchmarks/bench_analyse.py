"""Benchmark the pcap analyser: the compiled fast path against the pure-Python path,
side by side on the same capture, each in a fresh subprocess (and, with --tools,
against tshark and scapy).

Usage:
    .venv/bin/python benchmarks/bench_analyse.py                 # synthetic 400k-packet bulk transfer
    .venv/bin/python benchmarks/bench_analyse.py --packets 1000000
    .venv/bin/python benchmarks/bench_analyse.py --pcap F.pcap --client A --remote B
    sudo .venv/bin/python benchmarks/bench_analyse.py --lab-capture F.pcap --mebibytes 900   # a real one

The synthetic capture is what tcpdump -s 128 writes for a bulk download over Ethernet:
1514-byte data frames (MSS 1448, TCP timestamps) cut to 128 captured bytes, one ACK per
two segments, and a loss every 500 segments repaired by a fast retransmission after
four duplicate ACKs; so the TCP analysis has real work.

--lab-capture records a real one first (root): a download between two network
namespaces it creates (bbR/bbC + random suffix, 198.18.0.0/15, removed afterwards even
on failure) through `tbf rate 200mbit burst 32kb limit 30kb`, captured at the
receiver's veth with `tcpdump -s 128 -B 4096 --immediate-mode` (tests/lab/test_analyse.py's lab).

Each engine runs in its own fresh interpreter, so its peak RSS (VmHWM) is its own: the
first call there pays the imports (and for the fast path numba's load of its cached
machine code; the compilation itself if the cache is cold), then the best of --repeat
calls is the steady rate, as in the long-running exporter.  Both print their Analysis,
which must be equal.  The machine is shared, timings are noisy: hence best-of.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bigbinf.measure.wire.analyse import analyse_pcap, iter_packets

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
    analysis = analyse_pcap(pcap, client, remote)  # the engine BIGBINF_ANALYSER says (auto)
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


def child(engine: str, pcap: Path, client: str, remote: str, repeat: int) -> None:
    """In a fresh interpreter: time the first call and the best of `repeat`; print JSON."""
    start = time.perf_counter()
    from bigbinf.measure.wire.analyse import analyse_pcap as analyse

    first_analysis = analyse(pcap, client, remote, engine=engine)
    first = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        analysis = analyse(pcap, client, remote, engine=engine)
        times.append(time.perf_counter() - start)
    assert analysis == first_analysis
    hwm = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith("VmHWM:"))
    print(
        json.dumps(
            {
                "first": first,
                "times": times,
                "records": analysis.records,
                "retransmits": analysis.retransmits["down"] + analysis.retransmits["up"],
                "peak_rss_kib": int(hwm.split()[1]),
                "analysis": repr(analysis),
            }
        )
    )


def run_engine(engine: str, pcap: Path, client: str, remote: str, repeat: int) -> dict[str, Any]:
    """child() in a fresh interpreter: its JSON line."""
    argv = [sys.executable, __file__, "--child", engine, "--pcap", str(pcap), "--client", client]
    argv += ["--remote", remote, "--repeat", str(repeat)]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


def compare_engines(pcap: Path, client: str, remote: str, repeat: int) -> None:
    """The pure-Python path and the fast path side by side, each in a fresh process."""
    results = {engine: run_engine(engine, pcap, client, remote, repeat) for engine in ("python", "auto")}
    old, new = results["python"], results["auto"]
    equal = old["analysis"] == new["analysis"]  # the repr of every field
    records = int(old["records"])
    size_mb = pcap.stat().st_size / 1e6
    print(f"{pcap.name}: {records:,} packets, {size_mb:.0f} MB, {old['retransmits']:,} retransmissions")
    print(f"Analysis equal (every field): {'yes' if equal else 'NO'}")
    print(f"{'engine':30} {'first call s':>12} {'best s':>8} {'packets/s':>12} {'peak RSS MB':>12}")
    best: dict[str, float] = {}
    for label, engine in (("pure Python (engine=python)", "python"), ("fast path (engine=auto)", "auto")):
        r = results[engine]
        best[engine] = min(r["times"])
        rate = records / best[engine]
        print(f"{label:30} {r['first']:12.2f} {best[engine]:8.3f} {rate:12,.0f} {r['peak_rss_kib'] / 1024:12.0f}")
    print(f"fast path is {best['python'] / best['auto']:.1f}x the pure-Python rate")
    if not equal:
        raise SystemExit("the two engines disagree")


def lab_capture(pcap: Path, mebibytes: int) -> None:
    """A real capture with drops and retransmissions, from tests/lab/test_analyse.py's lab."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.lab.test_analyse import Lab, capture_transfer

    start = time.perf_counter()
    with Lab() as lab:  # removes its namespaces (and so the veth pair) even on failure
        received, rx, tx = capture_transfer(lab, pcap, mebibytes)
    seconds = time.perf_counter() - start
    print(f"lab capture: {received:,} bytes received in {seconds:.0f} s; client veth rx {rx:,} B, tx {tx:,} B: {pcap}")


def tools(pcap: Path, args: argparse.Namespace) -> None:
    """tshark and scapy on the same file, for scale (docs/benchmarks.md, "The pcap analyser")."""
    rows: list[tuple[str, float, int]] = []
    time_analyser(pcap, args.client, args.remote)  # warm-up: numba's import and cached code load
    elapsed, packets, _ = min(time_analyser(pcap, args.client, args.remote) for _ in range(args.repeat))
    rows.append(("analyse_pcap (BIGBINF_ANALYSER, default auto)", elapsed, packets))
    elapsed, packets = min(time_iter_packets(pcap, args.client, args.remote) for _ in range(args.repeat))
    rows.append(("iter_packets (Packet objects, no TCP analysis)", elapsed, packets))
    if shutil.which("tshark"):
        elapsed, packets = time_tshark(pcap, ["-T", "fields", "-e", "frame.len"])
        rows.append(("tshark -T fields -e frame.len", elapsed, packets))
        elapsed, lines = time_tshark(pcap, ["-Y", "tcp.analysis.retransmission", "-T", "fields", "-e", "frame.number"])
        rows.append(("tshark -Y tcp.analysis.retransmission", elapsed, packets))
        print(f"tshark: {lines} retransmissions")
    else:
        print("tshark: not installed, not timed (apt install tshark)")
    # scapy is the test extra's, not the product's: without it the row is left out.
    if importlib.util.find_spec("scapy") is not None:
        elapsed, packets = min(time_scapy(pcap, args.scapy_packets) for _ in range(args.repeat))
        rows.append((f"scapy PcapReader (first {packets})", elapsed, packets))
    else:
        print("scapy: not installed, not timed (pip install 'bigbinf[test]')")
    ours = rows[0][2] / rows[0][1]
    print(f"{'reader':48} {'packets':>9} {'seconds':>8} {'packets/s':>11} {'analyse_pcap is':>16}")
    for name, elapsed, packets in rows:
        rate = packets / elapsed
        print(f"{name:48} {packets:9d} {elapsed:8.2f} {rate:11,.0f} {ours / rate:15.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pcap", type=Path, help="an existing capture (default: synthetic)")
    parser.add_argument("--client", default=CLIENT)
    parser.add_argument("--remote", default=REMOTE)
    parser.add_argument("--packets", type=int, default=400_000, help="synthetic capture size")
    parser.add_argument("--lab-capture", type=Path, help="record a real capture here first (root), then measure it")
    parser.add_argument("--mebibytes", type=int, default=900, help="size of the --lab-capture download")
    parser.add_argument("--tools", action="store_true", help="also time iter_packets, tshark and scapy")
    parser.add_argument("--scapy-packets", type=int, default=20_000, help="subset scapy reads")
    parser.add_argument("--repeat", type=int, default=3, help="best of N per engine")
    parser.add_argument("--child", choices=("python", "auto"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.pcap, args.client, args.remote, args.repeat)
        return

    with tempfile.TemporaryDirectory() as tmp:
        pcap = args.pcap
        if args.lab_capture is not None:
            pcap = args.lab_capture
            lab_capture(pcap, args.mebibytes)
        elif pcap is None:
            pcap = Path(tmp) / "synthetic.pcap"
            start = time.perf_counter()
            n = write_synthetic(pcap, args.packets)
            print(f"wrote {n} packets ({pcap.stat().st_size / 1e6:.1f} MB) in {time.perf_counter() - start:.1f} s")
        compare_engines(pcap, args.client, args.remote, args.repeat)
        if args.tools:
            print()
            tools(pcap, args)


if __name__ == "__main__":
    main()
