"""A packet capture to a pcap file through libpcap, with a short block timeout.

    python3 pcapdump.py -i IF -s SNAPLEN -B KIB -T MS -w FILE FILTER...

What tcpdump -w does (its options, its "listening on" line, its counts on SIGINT), with
one difference that tcpdump has no option for: the TPACKET_V3 block timeout.  Without
--immediate-mode, libpcap reads the kernel's ring a block (256 KiB, ~1,400 headers) at a
time, one wake-up per block instead of one per few packets, which is what makes a
capture cheap for the transfer (docs/benchmarks.md); but the kernel hands over a partly
filled block only after libpcap's timeout, which tcpdump fixes at 1000 ms, so a capture
stopped right after a transfer loses its tail, and one that waits a second for it costs
a second per transfer.  Here the timeout is -T milliseconds (10): on SIGINT or SIGTERM
the capture waits for the last block to be handed over (two timeouts), reads the ring
empty, and only then closes the file and prints its counts.

Every packet goes from the ring to the file inside libpcap (pcap_dispatch calls
pcap_dump, both C): Python runs once per block.  Standalone (standard library only):
run as a file, inside the capture's network namespace.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import select
import signal
import sys
import time

PCAP_NETMASK_UNKNOWN = 0xFFFFFFFF


class _Stat(ctypes.Structure):
    _fields_ = [("ps_recv", ctypes.c_uint), ("ps_drop", ctypes.c_uint), ("ps_ifdrop", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("bf_len", ctypes.c_uint), ("bf_insns", ctypes.c_void_p)]


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("pcap") or "libpcap.so.0.8"
    lib = ctypes.CDLL(name)
    p, c = ctypes.c_void_p, ctypes.c_char_p
    for fn, restype, argtypes in (
        ("pcap_create", p, [c, c]),
        ("pcap_set_snaplen", ctypes.c_int, [p, ctypes.c_int]),
        ("pcap_set_buffer_size", ctypes.c_int, [p, ctypes.c_int]),
        ("pcap_set_timeout", ctypes.c_int, [p, ctypes.c_int]),
        ("pcap_set_promisc", ctypes.c_int, [p, ctypes.c_int]),
        ("pcap_activate", ctypes.c_int, [p]),
        ("pcap_geterr", c, [p]),
        ("pcap_statustostr", c, [ctypes.c_int]),
        ("pcap_compile", ctypes.c_int, [p, ctypes.POINTER(_Program), c, ctypes.c_int, ctypes.c_uint32]),
        ("pcap_setfilter", ctypes.c_int, [p, ctypes.POINTER(_Program)]),
        ("pcap_setnonblock", ctypes.c_int, [p, ctypes.c_int, c]),
        ("pcap_get_selectable_fd", ctypes.c_int, [p]),
        ("pcap_dump_open", p, [p, c]),
        ("pcap_dispatch", ctypes.c_int, [p, ctypes.c_int, p, p]),
        ("pcap_dump_flush", ctypes.c_int, [p]),
        ("pcap_dump_close", None, [p]),
        ("pcap_stats", ctypes.c_int, [p, ctypes.POINTER(_Stat)]),
        ("pcap_datalink", ctypes.c_int, [p]),
        ("pcap_datalink_val_to_name", c, [ctypes.c_int]),
        ("pcap_close", None, [p]),
    ):
        f = getattr(lib, fn)
        f.restype, f.argtypes = restype, argtypes
    return lib


def _fail(message: str) -> int:
    print(f"pcapdump: {message}", file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-i", dest="interface", required=True)
    parser.add_argument("-s", dest="snaplen", type=int, default=128)
    parser.add_argument("-B", dest="buffer_kib", type=int, default=32768)
    parser.add_argument("-T", dest="timeout_ms", type=int, default=10, help="block timeout, ms")
    parser.add_argument("-w", dest="file", required=True)
    parser.add_argument("filter", nargs="*")
    args = parser.parse_args(argv)

    stop_r, stop_w = os.pipe()
    os.set_blocking(stop_w, False)
    signal.set_wakeup_fd(stop_w)  # SIGINT/SIGTERM wake the select below
    stopping = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    try:
        lib = _library()
    except (OSError, AttributeError) as exc:  # no libpcap, or one without these functions
        return _fail(f"cannot use libpcap ({exc}): install libpcap0.8 (tcpdump's library) or set capture.tool: tcpdump")
    errbuf = ctypes.create_string_buffer(512)
    handle = lib.pcap_create(args.interface.encode(), errbuf)
    if not handle:
        return _fail(errbuf.value.decode(errors="replace"))
    lib.pcap_set_snaplen(handle, args.snaplen)
    lib.pcap_set_buffer_size(handle, args.buffer_kib * 1024)
    lib.pcap_set_timeout(handle, args.timeout_ms)
    lib.pcap_set_promisc(handle, 1)  # as tcpdump does (ignored on "any")
    status = lib.pcap_activate(handle)
    if status < 0:
        detail = lib.pcap_geterr(handle) or lib.pcap_statustostr(status)
        return _fail(f"{args.interface}: {detail.decode(errors='replace')}")
    program = _Program()
    expression = " ".join(args.filter).encode()
    if (
        lib.pcap_compile(handle, ctypes.byref(program), expression, 1, PCAP_NETMASK_UNKNOWN) < 0
        or lib.pcap_setfilter(handle, ctypes.byref(program)) < 0
    ):
        return _fail(f"filter {' '.join(args.filter)!r}: {lib.pcap_geterr(handle).decode(errors='replace')}")
    if lib.pcap_setnonblock(handle, 1, errbuf) < 0:
        return _fail(errbuf.value.decode(errors="replace"))
    dumper = lib.pcap_dump_open(handle, args.file.encode())
    if not dumper:
        return _fail(f"{args.file}: {lib.pcap_geterr(handle).decode(errors='replace')}")
    fd = lib.pcap_get_selectable_fd(handle)
    dump = ctypes.cast(lib.pcap_dump, ctypes.c_void_p)  # the callback: C, per packet
    link = lib.pcap_datalink(handle)
    name = (lib.pcap_datalink_val_to_name(link) or b"?").decode()
    print(
        f"pcapdump: listening on {args.interface}, link-type {name}, snapshot length {args.snaplen} bytes",
        file=sys.stderr,
        flush=True,
    )

    captured = 0
    while not stopping:
        ready, _, _ = select.select([fd, stop_r], [], [], 1.0)
        if fd in ready:
            n = lib.pcap_dispatch(handle, -1, dump, dumper)
            if n < 0:
                return _fail(lib.pcap_geterr(handle).decode(errors="replace"))
            captured += n
    # The last block is handed over within one timeout of its first packet: wait two,
    # then read until the ring is empty.  Then, while the kernel's count of frames that
    # passed the filter is ahead of those read and dropped (a timer that fired late on a
    # busy machine), wait another timeout and read again, until it is not, or three
    # rounds brought nothing (on loopback libpcap itself discards the outgoing copies the
    # kernel counts), at most a second.
    timeout = args.timeout_ms / 1000
    time.sleep(2 * timeout)
    stats = _Stat()
    have_stats = False
    idle_rounds, deadline = 0, time.monotonic() + 1.0
    while True:
        before = captured
        while (n := lib.pcap_dispatch(handle, -1, dump, dumper)) > 0:
            captured += n
        have_stats = lib.pcap_stats(handle, ctypes.byref(stats)) == 0
        idle_rounds = idle_rounds + 1 if captured == before else 0
        if not have_stats or stats.ps_recv <= captured + stats.ps_drop:
            break
        if idle_rounds >= 3 or time.monotonic() >= deadline:
            break
        time.sleep(timeout)
    flushed = lib.pcap_dump_flush(dumper) == 0
    lib.pcap_dump_close(dumper)
    lib.pcap_close(handle)
    # The counts even when the file could not take everything (a full disk), as tcpdump
    # prints them: what was handed to the file against what the file holds is how the
    # analysis tells a capture cut short.
    lines = [f"{captured} packets captured"]
    if have_stats:
        lines += [f"{stats.ps_recv} packets received by filter", f"{stats.ps_drop} packets dropped by kernel"]
    print("\n".join(lines), file=sys.stderr, flush=True)
    return 0 if flushed else _fail(f"{args.file}: writing failed")


if __name__ == "__main__":
    sys.exit(main())
