"""A userspace delay line for the lab where the kernel has no netem: real latency and loss.

    python -m bigbinf.lab.delayline [--control FILE] TUN_A TUN_B DELAY_SECONDS LOSS_PERCENT [LIMIT_PACKETS]

Runs in the lab's middle namespace (`<name>-wan`), which routes the client's packets into
TUN_A and the remote's into TUN_B (lab.py sets up the routes once both devices are up).
Every packet read from one device is written into the other DELAY_SECONDS later, unless
it is lost (LOSS_PERCENT, independently per packet) or LIMIT_PACKETS are already waiting
in its direction (tail drop, like netem's limit).  The delay is one-way, as netem's on
each veth: the round trip gains twice DELAY_SECONDS.

With --control FILE, what a router on the path does besides can be changed while it runs
(the lab's causes: tests/support/plain_causes_path.py): on SIGHUP the line reads FILE, a
JSON object (absent or {} = nothing besides the delay and loss), with
- "reorder_percent", "reorder_seconds": that share of the packets, each way, held that much
  longer than the rest (the packets behind it overtake it: reordering without loss);
- "pps": at most that many packets a second forwarded each way, the rest waiting in line
  (a router whose forwarding rate, not its link, is the bottleneck: a packet-rate bound).
On SIGUSR1 it prints its counters (`delayline: forwarded N, lost N, ...`, the same line as
at exit) to stderr, the lab's log: what it did, for a test's truth.

Limits (docs/configuration.md): timers are epoll's, so a packet may wait up to ~1 ms
longer than asked; one Python loop forwards both ways, which caps the shaped rate (see
docs/benchmarks.md).  Prints `ready` once both devices are up; stops on SIGTERM.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import json
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
MAX_PACKET = 65535
DEFAULT_LIMIT = 10000
TUN_QUEUE = 10000
# The line stands in for netem, which runs in the kernel's softirq: ahead of user
# processes for the CPU (nice -10 where allowed, its autogroup too), so that a busy machine delays packets
# a little more rather than dropping them.
NICE = -10


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    # A long queue in front of the reader: while this process waits for a CPU (a busy
    # machine), packets wait there instead of being dropped by the device (its default
    # 500), as they would wait in netem's queue, which runs in the kernel.
    subprocess.run(["ip", "link", "set", "dev", name, "txqueuelen", str(TUN_QUEUE), "up"], check=True)
    return fd


class Stop(Exception):
    """Raised by the signal handler: a handler that only set a flag would not end a
    blocking poll (PEP 475 retries it)."""


COUNTERS = ("forwarded", "lost", "overflow", "reordered", "paced")
# A paced line's slots may fall this far behind the clock and be caught up at once: epoll
# waits whole milliseconds, longer than a slot at a few thousand packets a second, so
# without it the line would forward one packet per wake-up (426/s asked 3000/s).
PACE_SLACK = 0.005


def forward(
    fd_a: int, fd_b: int, delay: float, loss: float, limit: int, counts: dict[str, int], router: dict[str, float]
) -> None:
    """Move packets a->b and b->a, each `delay` seconds late, until Stop; `router` (read at
    each packet: the SIGHUP handler changes it) may reorder some and pace all (see above)."""
    # Keyed by the device read: (due time, packet) in arrival order, and the packets held
    # longer (reordered), in their own arrival order: each queue's due times only grow.
    waiting: dict[int, collections.deque[tuple[float, bytes]]] = {fd_a: collections.deque(), fd_b: collections.deque()}
    late: dict[int, collections.deque[tuple[float, bytes]]] = {fd_a: collections.deque(), fd_b: collections.deque()}
    next_slot = {fd_a: 0.0, fd_b: 0.0}  # the paced line's next free time, each way
    peer = {fd_a: fd_b, fd_b: fd_a}
    poller = select.epoll()
    for fd in (fd_a, fd_b):
        poller.register(fd, select.EPOLLIN)
    drop = loss / 100.0
    rand = random.random
    clock = time.monotonic
    while True:
        now = clock()
        due = None
        pps = router.get("pps", 0.0)
        for fd in (fd_a, fd_b):
            out = peer[fd]
            for queue in (waiting[fd], late[fd]):
                while queue and queue[0][0] <= now:
                    if pps:  # one packet per 1/pps seconds each way; the rest wait their turn
                        if next_slot[fd] > now:
                            break
                        if now - next_slot[fd] > PACE_SLACK:
                            next_slot[fd] = now - PACE_SLACK  # an idle line banks no more than the slack
                        else:
                            counts["paced"] += 1
                        next_slot[fd] += 1.0 / pps
                    try:
                        os.write(out, queue.popleft()[1])
                        counts["forwarded"] += 1
                    except BlockingIOError:
                        counts["overflow"] += 1
                if queue:
                    ready = max(queue[0][0], next_slot[fd]) if pps else queue[0][0]
                    if due is None or ready < due:
                        due = ready
        events = poller.poll(-1 if due is None else max(0.0, due - now))
        for fd, _ in events:
            queue = waiting[fd]
            share, extra = router.get("reorder_percent", 0.0) / 100.0, router.get("reorder_seconds", 0.0)
            while True:
                try:
                    packet = os.read(fd, MAX_PACKET)
                except BlockingIOError:
                    break
                # Each packet's own clock, read after it: one read at the poll's return gave
                # the packets that came while this loop waited for a CPU too early a due
                # time (a kernel's smallest RTT 8.96 ms over 5 ms each way, beside burners).
                if drop and rand() < drop:
                    counts["lost"] += 1
                elif len(queue) + len(late[fd]) >= limit:
                    counts["overflow"] += 1
                elif share and rand() < share:
                    late[fd].append((clock() + delay + extra, packet))
                    counts["reordered"] += 1
                else:
                    queue.append((clock() + delay, packet))


def read_control(path: str | None) -> dict[str, float]:
    """The router's settings in `path` (see above); {} if there is none or it cannot be read."""
    if path is None:
        return {}
    try:
        with open(path) as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    keys = ("reorder_percent", "reorder_seconds", "pps")
    return {k: float(v) for k, v in raw.items() if k in keys and isinstance(v, int | float) and v >= 0}


def say_counts(counts: dict[str, int]) -> None:
    print("delayline: " + ", ".join(f"{k} {counts[k]}" for k in COUNTERS), file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    control = None
    if argv[:1] == ["--control"] and len(argv) > 1:
        control, argv = argv[1], argv[2:]
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    tun_a, tun_b = argv[0], argv[1]
    delay, loss = float(argv[2]), float(argv[3])
    limit = int(argv[4]) if len(argv) == 5 else DEFAULT_LIMIT

    def on_term(signum: int, frame: object) -> None:
        raise Stop

    counts = dict.fromkeys(COUNTERS, 0)
    router = read_control(control)

    def on_hup(signum: int, frame: object) -> None:
        router.clear()
        router.update(read_control(control))

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGUSR1, lambda signum, frame: say_counts(counts))
    with contextlib.suppress(OSError):
        os.nice(NICE)
    # And its session's: with autogroup scheduling (a desktop kernel's default, Debian's
    # too) CFS shares the CPUs between sessions first, so a nice inside its own session
    # (start_new_session) weighs nothing against a burner in another; CI's runs at load
    # 5-8 had the line queued 20-28% of every run with the process nice alone.
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as group:
        group.write(str(NICE))
    # A name of its own in ps, top and process accounting (not one more "python3").
    with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
        comm.write("bigbinf-delay")
    try:
        fd_a, fd_b = open_tun(tun_a), open_tun(tun_b)
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"delayline: cannot create {tun_a}/{tun_b}: {exc}", file=sys.stderr)
        return 1
    print("ready", flush=True)
    with contextlib.suppress(Stop):
        forward(fd_a, fd_b, delay, loss, limit, counts, router)
    say_counts(counts)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
