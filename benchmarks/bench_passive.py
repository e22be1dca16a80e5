"""The passive watcher's cost (issue 46): its CPU as a share of one core with many open
connections on the host, its memory per followed flow, and a host with tens of thousands
of connections sampled within the bound.

Usage:
    .venv/bin/python benchmarks/bench_passive.py                     # 1,000 idle + 4 busy, then 20,000
    .venv/bin/python benchmarks/bench_passive.py --idle 1000 --busy 4 --seconds 30 --many 20000

1. A private network namespace (removed after, whatever happens) holds a server on
   127.0.0.2:8080 and, in one load process (this file with --load), `--idle` client
   connections that send nothing and `--busy` that send about 2 MB/s each all the time;
   every connection is to the watched remote and service, so every one is listed, parsed
   and followed (the worst case: the kernel's filter passes them all).
2. The watcher (bigbinf.passive.watcher, its defaults: a listing a second) follows that
   namespace for `--seconds`; its CPU is this process's (the watcher's threads: parsing,
   the tracker) plus its listings' ss processes (their rusage, waited for) plus its
   close-event ss (/proc/PID/stat before it is stopped).  The load process's CPU is not
   counted (it is not waited for until after).
3. The same with `--many` connections (the followed bound, passive.max_flows, at its
   default 4,096): what is skipped (counted: bigbinf_passive_flows_skipped_total) and the
   interval the cost bound stretched it to (bigbinf_passive_interval_seconds).
4. Memory: the tracker's bytes per flow (tracemalloc), for idle flows (one sample) and for
   flows at MAX_SAMPLES samples, at two counts (O(flows): the same per flow).

Prints one table; docs/benchmarks.md, "The passive watcher", has the figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import selectors
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "exporter"))

from bigbinf.config import PassiveConfig
from bigbinf.measure.tcp.state import SocketInfo
from bigbinf.passive.flows import MAX_SAMPLES, Tracker
from bigbinf.passive.select import Selection
from bigbinf.passive.watcher import PassiveWatcher

SERVER = ("127.0.0.2", 8080)
BUSY_RATE = 2_000_000  # bytes/s per busy connection
CLK_TCK = os.sysconf("SC_CLK_TCK")


def load(idle: int, busy: int) -> None:
    """The load process (in the namespace): a server, `idle` silent clients, `busy`
    senders; prints "ready" once all are connected, runs until killed."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    # Several load processes share the port (SO_REUSEPORT: the kernel spreads the
    # accepted connections over them), so that each holds fewer descriptors than the limit.
    server = socket.create_server(SERVER, backlog=4096, reuse_port=True)
    accepted: list[socket.socket] = []
    sel = selectors.DefaultSelector()

    def serve() -> None:
        server.setblocking(False)
        sel.register(server, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fileobj is server:
                    with_conn = server.accept()[0]
                    with_conn.setblocking(False)
                    accepted.append(with_conn)
                    sel.register(with_conn, selectors.EVENT_READ)
                else:
                    conn = key.fileobj
                    assert isinstance(conn, socket.socket)
                    try:
                        if not conn.recv(1 << 20):
                            sel.unregister(conn)
                    except BlockingIOError:
                        pass

    threading.Thread(target=serve, daemon=True).start()
    clients = [socket.create_connection(SERVER) for _ in range(idle)]
    senders = [socket.create_connection(SERVER) for _ in range(busy)]
    print("ready", flush=True)  # every client connected (the kernel completes the handshakes)
    chunk = b"\0" * 65536
    while True:
        started = time.monotonic()
        for s in senders:
            for _ in range(BUSY_RATE // len(chunk) // 10):
                s.sendall(chunk)
        time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))
    del clients


PER_PROCESS = 4000  # connections per load process: 2 descriptors each, under the fd limit


WARMUP = 2  # listings before the measured window


def _after_listing(watcher: PassiveWatcher, n: int) -> int:
    """Wait until the watcher has taken its n-th listing; how many it has taken."""
    # A plain attribute read, 5 times a second: this process's CPU is the watcher's.
    while (done := watcher.counts.listings) < n:
        time.sleep(0.2)
    return done


def run(idle: int, busy: int, seconds: float, netns: str, listings: int = 3) -> dict[str, float]:
    parts = max(1, -(-idle // PER_PROCESS))
    procs = []
    try:
        for i in range(parts):
            share = idle // parts + (1 if i < idle % parts else 0)
            procs.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        netns,
                        sys.executable,
                        __file__,
                        "--load",
                        str(share),
                        str(busy if i == 0 else 0),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line.strip() != "ready":
                raise SystemExit(f"a load process did not start: {line!r}")
        config = PassiveConfig.model_validate(
            {"enabled": True, "netns": netns, "remotes": {"bench": {"networks": ["127.0.0.2/32"]}},
             "services": {"http": ["8080"]}}
        )  # fmt: skip
        watcher = PassiveWatcher(config, lambda r: None)
        watcher.start()
        # The first listings learn every connection (and their owners: ss -p reads every
        # process's descriptors): a start's cost, reported apart.  The measured window runs
        # from just after the WARMUP-th listing to just after `listings` more, and at
        # least `seconds`: the share holds over whole intervals, however stretched.
        first = _after_listing(watcher, WARMUP)
        self0, children0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        events = watcher._events
        events0 = _cpu_of(events.pid) if events is not None else 0.0
        began = time.monotonic()
        deadline = began + seconds
        done = first
        while done < first + listings or time.monotonic() < deadline:
            done = _after_listing(watcher, done + 1)
        wall = time.monotonic() - began
        self1, children1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        events_cpu = (_cpu_of(events.pid) if events is not None else 0.0) - events0
        counts, _ = watcher.snapshot()
        watcher.stop()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    own = self1.ru_utime + self1.ru_stime - self0.ru_utime - self0.ru_stime
    ss_cpu = children1.ru_utime + children1.ru_stime - children0.ru_utime - children0.ru_stime
    return {
        "connections": idle + busy,
        "wall": wall,
        "cpu_share": (own + ss_cpu + events_cpu) / wall,
        "own": own / wall,
        "listings": ss_cpu / wall,
        "events": events_cpu / wall,
        "followed": counts.open_flows,
        "skipped": counts.skipped,
        "interval": counts.interval_seconds,
        "listing_cpu": counts.listing_seconds,
        "measured": done - first,
        "peak_rss_mib": self1.ru_maxrss / 1024,
    }


def _cpu_of(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def memory_per_flow(flows: int, samples: int) -> float:
    """tracemalloc bytes per followed flow, each with `samples` listings that moved data."""
    selection = Selection.from_maps({"r": ["10.0.0.0/8"]}, {"http": [(8080, 8080)]})
    tracker = Tracker(selection, linger=2.0, max_flows=flows)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(samples):
        tracker.listing(
            float(i),
            [
                SocketInfo(
                    f"10.0.0.1:{10000 + n}",
                    "10.0.0.2:8080",
                    state="ESTAB",
                    bytes_acked=i * 1000 + n,
                    rtt_seconds=0.01,
                    cwnd=10,
                )
                for n in range(flows)
            ],
        )
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    used = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(tracker.flows) == flows
    return used / flows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--busy", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--many", type=int, default=20000)
    parser.add_argument("--load", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load:
        load(*args.load)
        return 0
    netns = f"bbpass{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        print(f"load average at start: {os.getloadavg()[0]:.2f}")
        rows = [run(args.idle, args.busy, args.seconds, netns)]
        if args.many:
            rows.append(run(args.many, args.busy, args.seconds, netns, listings=2))
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
    head = "connections  cpu(1 core)  watcher  ss lists  events  followed  skipped  interval  listing cpu  window"
    print(head)
    for r in rows:
        print(
            f"{r['connections']:>11.0f}  {r['cpu_share']:>10.2%}  {r['own']:>7.2%}  {r['listings']:>8.2%}  "
            f"{r['events']:>6.2%}  {r['followed']:>8.0f}  {r['skipped']:>7.0f}  {r['interval']:>7.1f}s  "
            f"{r['listing_cpu'] * 1000:>9.1f}ms  {r['wall']:.0f}s, {r['measured']:.0f} listings, "
            f"RSS {r['peak_rss_mib']:.0f}MiB"
        )
    for flows in (1000, 4000):
        idle, full = memory_per_flow(flows, 1), memory_per_flow(flows, MAX_SAMPLES + 1)
        at = f"at {MAX_SAMPLES} samples {full / 1024:.1f} KiB"
        print(f"memory per flow, {flows} flows: idle {idle / 1024:.1f} KiB, {at}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
