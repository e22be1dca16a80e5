"""Plain-site causes on the path side (tests/support/plain_site.py): what the network
between the two sites does to a transfer, induced as a real path does it (a short queue,
a policer, a competing flow on the bottleneck, random loss, loss on the ACK path, a long
round trip), and this host's buffers where the long round trip makes them matter."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

from bigbinf.lab.network import delay_line_control, delay_line_pid, mac, needs_delay_line
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer

from . import verdicts
from .plain_site import Changes, PlainCause, PlainSite, iperf3_rate

POLICED_BITS = 50_000_000  # the policer's rate
STALE_POLICED_BITS = 20_000_000  # ... and the tighter one an earlier iperf3 test measured
SHORT_QUEUE_RATE, SHORT_QUEUE_BYTES = "100mbit", 625_000  # tbf's `latency 50ms` at 100 Mbit/s
BUFFER_MAX = 1024 * 1024  # a buffer cap below the "long" path's 2.5 MB BDP
# A competing flow between two other addresses on the same link (the capture's host pair
# does not see it): one on each lab veth, in 198.18.0.0/15.
FLOW_CLIENT, FLOW_REMOTE, FLOW_PORT = "198.19.254.1", "198.19.254.2", 5299
FLOW_SECONDS = 600  # longer than any run; stopped with the cause
FLOW_RAMP = 2.0  # seconds the competing flow runs before the transfer starts


@contextlib.contextmanager
def router_queue(site: PlainSite) -> Iterator[Changes | None]:
    """The bottleneck a router between the sites has: tbf at SHORT_QUEUE_RATE with a
    SHORT_QUEUE_BYTES queue (`latency 50ms`) on each way out of the delay line's namespace,
    for the block.  In the middle, not on a sender's own interface: there TCP small queues
    hold the sender back before its own qdisc overflows (a tbf of 625 kB on the sender's
    veth dropped nothing under BBR at 80 ms), and a short queue loses nothing."""
    layout = site.layout
    devices = (layout.wan_client_if, layout.wan_remote_if)
    tc = ["ip", "netns", "exec", layout.wan_ns, "tc", "qdisc"]
    try:
        for dev in devices:
            subprocess.run(
                [*tc, "replace", "dev", dev, "root", "tbf", "rate", SHORT_QUEUE_RATE, "burst", "64kb",
                 "limit", str(SHORT_QUEUE_BYTES)],
                check=True,
            )  # fmt: skip
        yield None
    finally:
        for dev in devices:
            subprocess.run([*tc, "del", "dev", dev, "root"], check=False, capture_output=True)


def _nft(site: PlainSite, which: str) -> list[str]:
    layout = site.layout
    return ["ip", "netns", "exec", layout.client_ns if which == "local" else layout.remote_ns, "nft"]


@contextlib.contextmanager
def policer(site: PlainSite, which: str, bits: int, table: str = "bbt_policer") -> Iterator[None]:
    """A policer at `bits`/s in front of `which` side (its namespace's prerouting: after
    the wire, before its stack) on what the peer sends: a token bucket of 128 kB, the
    excess dropped, never queued (as verdicts.policed, at any rate), and counted (the
    truth's nft_dropped: without a counter the truth read its drops as 0)."""
    lab = site.lab.lab
    assert lab is not None
    peer = lab.remote_address if which == "local" else lab.client_address
    nft = _nft(site, which)
    subprocess.run([*nft, "add", "table", "inet", table], check=True)
    try:
        subprocess.run(
            [*nft, "add", "chain", "inet", table, "in", "{ type filter hook prerouting priority -300; }"], check=True
        )
        subprocess.run(
            [*nft, "add", "rule", "inet", table, "in", "ip", "saddr", peer, "limit", "rate", "over",
             str(bits // 8000), "kbytes/second", "burst", "128", "kbytes", "counter", "drop"],
            check=True,
        )  # fmt: skip
        yield
    finally:
        subprocess.run([*nft, "delete", "table", "inet", table], check=False)


def policed(which: str) -> Callable[[PlainSite], contextlib.AbstractContextManager[Changes | None]]:
    """The receiver's policer at POLICED_BITS (`which`: the receiving side)."""

    @contextlib.contextmanager
    def setup(site: PlainSite) -> Iterator[Changes | None]:
        with policer(site, which, POLICED_BITS):
            yield None

    return setup


_KEPT: dict[tuple[int, str], float] = {}  # estimates kept across runs, as the exporter keeps its last iperf3 test's


def stale_iperf3_rate(site: PlainSite) -> float:
    """An ok iperf3 test's report measured earlier under a tighter policer
    (STALE_POLICED_BITS, in front of the current one) and kept: the path has since
    changed (the policer is at POLICED_BITS now) and the estimate was not renewed."""
    key = (id(site), "stale")
    if key not in _KEPT:
        with policer(site, "local", STALE_POLICED_BITS, table="bbt_policer_earlier"):
            _KEPT[key] = iperf3_rate(site)
    return _KEPT[key]


def kept_iperf3_rate(site: PlainSite) -> float:
    """An ok iperf3 test's report through the path as it is now, of 32 MiB, kept for the
    site's later runs as the exporter keeps its last one.  Long enough for a policer:
    nftables' `limit rate over` bucket holds a second of its rate besides its burst, so an
    8 MiB test through the 50 Mbit/s policer passed whole in 0.45 s (149 Mbit/s, nothing
    lost) while 32 MiB took 4.5 s (60 Mbit/s)."""
    key = (id(site), "iperf3")
    if key not in _KEPT:
        want = ("iperf3", "f32m", "download")
        (spec,) = [s for s in plan_round(site.config, None) if (s.protocol, s.dataset, s.direction) == want]
        r = run_transfer(spec, site.config, "plain-estimate")
        assert r.outcome == "ok" and r.reported.get("seconds", 0) > 0, (r.outcome, r.error)
        _KEPT[key] = r.reported["bytes"] / r.reported["seconds"]
    return _KEPT[key]


def iperf3_rate_before_flow(site: PlainSite) -> float:
    """The iperf3 estimate competing_flow measured before its flow started."""
    return _KEPT[(id(site), "before-flow")]


@contextlib.contextmanager
def _flow_addresses(site: PlainSite) -> Iterator[None]:
    """FLOW_CLIENT on the client's veth and FLOW_REMOTE on the remote's, each routed to the
    other over the lab's link with a permanent neighbour entry (no ARP), for the block.  A
    link without a delay line only (the delay line routes the lab's two addresses)."""
    assert site.lab.lab is not None and not needs_delay_line(site.lab.lab.link), "a direct link only"
    layout = site.layout
    client, remote = (layout.client_ns, layout.client_if), (layout.remote_ns, layout.remote_if)
    ends = ((*client, FLOW_CLIENT, FLOW_REMOTE, *remote), (*remote, FLOW_REMOTE, FLOW_CLIENT, *client))
    undo: list[list[str]] = []
    try:
        for ns, ifname, mine, theirs, peer_ns, peer_if in ends:
            subprocess.run(["ip", "-n", ns, "addr", "add", f"{mine}/32", "dev", ifname], check=True)
            undo.append(["ip", "-n", ns, "addr", "del", f"{mine}/32", "dev", ifname])
            subprocess.run(["ip", "-n", ns, "route", "add", f"{theirs}/32", "dev", ifname, "src", mine], check=True)
            undo.append(["ip", "-n", ns, "route", "del", f"{theirs}/32", "dev", ifname])
            lladdr = mac(peer_ns, peer_if)
            subprocess.run(
                ["ip", "-n", ns, "neigh", "replace", theirs, "lladdr", lladdr, "dev", ifname, "nud", "permanent"],
                check=True,
            )
            undo.append(["ip", "-n", ns, "neigh", "del", theirs, "dev", ifname])
        yield
    finally:
        for argv in reversed(undo):
            subprocess.run(argv, check=False, capture_output=True)


def competing_flow(direction: str) -> Callable[[PlainSite], contextlib.AbstractContextManager[Changes | None]]:
    """A long-running iperf3 flow between two other addresses on the same link, in the
    transfer's direction (`direction`: download = remote to client), started after the
    path's estimate was measured (an ok iperf3 test on the idle link, kept for the runs)
    and FLOW_RAMP seconds before the transfer; both iperf3s stopped after, by their pids."""

    @contextlib.contextmanager
    def setup(site: PlainSite) -> Iterator[Changes | None]:
        key = (id(site), "before-flow")
        if key not in _KEPT:
            _KEPT[key] = iperf3_rate(site)
        layout = site.layout
        with contextlib.ExitStack() as stack:
            stack.enter_context(_flow_addresses(site))
            server = subprocess.Popen(
                ["ip", "netns", "exec", layout.remote_ns, "iperf3", "-s", "-B", FLOW_REMOTE, "-p", str(FLOW_PORT)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            stack.callback(_stop, server)
            time.sleep(0.5)
            client = subprocess.Popen(
                ["ip", "netns", "exec", layout.client_ns, "iperf3", "-c", FLOW_REMOTE, "-B", FLOW_CLIENT,
                 "-p", str(FLOW_PORT), "-t", str(FLOW_SECONDS), *(["-R"] if direction == "download" else [])],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
            stack.callback(_stop, client)
            time.sleep(FLOW_RAMP)
            assert client.poll() is None, "the competing flow did not start"
            yield None

    return setup


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def capped(key: str) -> Callable[[PlainSite], contextlib.AbstractContextManager[Changes | None]]:
    """This host's `key` (tcp_rmem or tcp_wmem) maximum at BUFFER_MAX for the block."""

    @contextlib.contextmanager
    def setup(site: PlainSite) -> Iterator[Changes | None]:
        with verdicts.sysctl(site.lab, "local", f"net.ipv4.{key}", f"4096 131072 {BUFFER_MAX}"):
            yield None

    return setup


@contextlib.contextmanager
def ack_loss(site: PlainSite) -> Iterator[Changes | None]:
    """2% of what the remote receives from the client dropped (a download's ACKs)."""
    with verdicts.ack_loss(site.lab):
        yield None


CAUSES: list[PlainCause] = [
    # A plain shaped link, its capacity known from an iperf3 test: the link is full.
    PlainCause("a plain shaped link (iperf3 estimate)", "shaped", "http", "f32m", "download", "link_capacity", "path",
               estimate=iperf3_rate),
    # ... and an iperf3 upload on it, against the capacity the site configured (an iperf3
    # estimate would be iperf3 judged by itself).
    PlainCause("a plain shaped link (configured rate)", "shaped-known", "iperf3", "f32m", "upload", "link_capacity",
               "path"),
    # BBR into a router's 625 kB queue at 80 ms: it overshoots and loses 9-24% of its segments,
    # a sender repairing holes every round trip, which looks idle (notsent 0).
    *(PlainCause("loss-bound BBR into a short queue", "shortq", p, "f32m", d, "congestion", "path",
                 setup=router_queue)
      for p, d in (("scp", "download"), ("scp", "upload"), ("http", "download"))),
    # CUBIC fills the same queue and backs off at each overflow.
    *(PlainCause("loss-bound CUBIC into a short queue", "shortq", p, "f32m", d, "congestion", "path",
                 setup=router_queue)
      for p, d in (("http-cubic", "download"), ("scp-cubic", "upload"))),
    # A 50 Mbit/s policer with no capacity known: what is seen is loss on the path.
    PlainCause("a policer, no estimate", "open20", "http", "f32m", "download", "congestion", "path",
               setup=policed("local")),
    PlainCause("a policer, no estimate", "open20", "iperf3", "f32m", "upload", "congestion", "path",
               setup=policed("remote")),
    # ... measured by an iperf3 test through it: the transfer fills what the path gives.
    PlainCause("a policer, iperf3 estimate", "open20", "http", "f32m", "download", "link_capacity", "path",
               setup=policed("local"), estimate=kept_iperf3_rate),
    # ... measured earlier under a 20 Mbit/s policer and kept: the transfer outruns it.
    PlainCause("a policer, stale estimate", "open20", "http", "f32m", "download", "congestion", "path",
               setup=policed("local"), estimate=stale_iperf3_rate),
    # Another flow on the bottleneck, started after the estimate was measured.
    *(PlainCause("a competing flow on the bottleneck", "shaped", p, "f32m", "download", "shared_path", "path",
                 setup=competing_flow("download"), estimate=iperf3_rate_before_flow)
      for p in ("http", "scp")),
    # This host's buffers capped below the 2.5 MB BDP of a 400 ms path.
    PlainCause("tcp_rmem capped on a long path", "long", "http", "f16m", "download", "receive_window", "local",
               setup=capped("tcp_rmem")),
    *(PlainCause("tcp_wmem capped on a long path", "long", p, "f16m", "upload", "send_buffer", "local",
                 setup=capped("tcp_wmem"))
      for p in ("http", "iperf3")),
    # Short files on long round trips: slow start and set-up are most of the transfer.
    *(PlainCause("a short file on a long round trip", s, p, f, d, "startup", "path")
      for s, p, f, d in (("long", "http", "f1m", "download"), ("long", "scp", "f1m", "upload"),
                         ("shortq", "scp", "f1m", "upload"),
                         ("wan", "scp", "f1m", "upload"), ("wan", "sftp", "f2m", "download"))),
    # Random loss on the data path: CUBIC backs off at each loss.
    *(PlainCause("random loss on the path", "lossy", p, "f32m", d, "congestion", "path")
      for p, d in (("http-cubic", "download"), ("iperf3-cubic", "upload"))),
    # Loss on the ACK path only: the data path is full and loses nothing.
    PlainCause("ACKs lost on a shaped link", "shaped", "http", "f32m", "download", "link_capacity", "path",
               setup=ack_loss, estimate=iperf3_rate),
]  # fmt: skip


# ---------------------------------------------------------------- issue 42: a router's causes
# On the "router" site (100 Mbit/s, 20 ms, its rate configured): the delay line's namespace
# is the router between the sites.

REORDER_PERCENT, REORDER_SECONDS = 3.0, 0.010  # 3% of the packets, each way, 10 ms late
# A router that forwards at most the packets a second its link carries at full size (100
# Mbit/s over 1514-byte frames), each way: line rate for full-sized packets, not for small.
ROUTER_PPS = 8256
CLAMPED_MSS = 536
BLACK_HOLE_MTU = 1280
STALL_TIMEOUT = "20s"  # the black hole's transfer is killed after this (the default is 30 minutes)


@contextlib.contextmanager
def router_settings(site: PlainSite, settings: dict[str, float]) -> Iterator[None]:
    """The delay line (the router) reorders or paces as `settings` say for the block
    (lab/delayline.py --control, read on SIGHUP), and goes back to a plain delay after."""
    layout = site.layout
    pid = delay_line_pid(layout)
    assert pid is not None, "the site has no delay line"
    control = delay_line_control(layout)
    control.write_text(json.dumps(settings))
    os.kill(pid, signal.SIGHUP)
    try:
        yield
    finally:
        control.write_text("{}")
        os.kill(pid, signal.SIGHUP)


@contextlib.contextmanager
def reordering(site: PlainSite) -> Iterator[Changes | None]:
    """REORDER_PERCENT of the packets each way REORDER_SECONDS late in the router: the
    packets behind them overtake them; the router loses nothing."""
    with router_settings(site, {"reorder_percent": REORDER_PERCENT, "reorder_seconds": REORDER_SECONDS}):
        yield None


def _router_nft(site: PlainSite, table: str, hook: str, rule: list[str]) -> contextlib.AbstractContextManager[None]:
    """One nftables rule (with a counter: the truth's) in a table of its own in the router's
    namespace, on `hook`, for the block."""

    @contextlib.contextmanager
    def installed() -> Iterator[None]:
        nft = ["ip", "netns", "exec", site.layout.wan_ns, "nft"]
        subprocess.run([*nft, "add", "table", "inet", table], check=True)
        try:
            subprocess.run(
                [*nft, "add", "chain", "inet", table, "c", f"{{ type filter hook {hook} priority 0; }}"], check=True
            )
            subprocess.run([*nft, "add", "rule", "inet", table, "c", *rule], check=True)
            yield
        finally:
            subprocess.run([*nft, "delete", "table", "inet", table], check=False)

    return installed()


@contextlib.contextmanager
def mss_clamp(site: PlainSite) -> Iterator[Changes | None]:
    """The router rewrites every SYN's MSS to CLAMPED_MSS (as a router clamping for a tunnel
    does), and forwards at most ROUTER_PPS packets a second each way: at the clamped MSS the
    packet rate, not the link's bytes, bounds the transfer (ROUTER_PPS x 524 B = 4.3 MB/s,
    where full-sized segments fill the link's 12.5 MB/s)."""
    clamp = ["tcp", "flags", "syn", "tcp", "option", "maxseg", "size", "set", str(CLAMPED_MSS), "counter"]
    with _router_nft(site, "bbt_mss", "forward", clamp), router_settings(site, {"pps": ROUTER_PPS}):
        yield None


@contextlib.contextmanager
def pmtu_black_hole(site: PlainSite) -> Iterator[Changes | None]:
    """The router's link toward this host at BLACK_HOLE_MTU, and the ICMP
    fragmentation-needed it sends back dropped on its way out (a filter that drops all
    ICMP): the remote's full-sized segments vanish and it is never told why.  The
    transfer's timeout STALL_TIMEOUT, so that a run that stalls ends."""
    layout = site.layout
    link = ["ip", "-n", layout.wan_ns, "link", "set", "dev", layout.wan_client_if, "mtu"]
    drop = ["icmp", "type", "destination-unreachable", "icmp", "code", "frag-needed", "counter", "drop"]
    with _router_nft(site, "bbt_pmtu", "output", drop):
        subprocess.run([*link, str(BLACK_HOLE_MTU)], check=True)
        try:
            yield {"transfer": {"timeout": STALL_TIMEOUT}}
        finally:
            subprocess.run([*link, "1500"], check=False)


_PPS_BOUND = f"the packet rate: {ROUTER_PPS} packets/s x the 524 B MSS"
CAUSES += [
    # The rate's true bound is the link (its rate configured); the reordering costs
    # spurious retransmits only, which the receiver's duplicate SACKs undo.
    *(PlainCause("reordering without loss", "router", p, "f32m", d, "link_capacity", "path", reordering,
                 bound="the path's capacity (100 Mbit/s configured); no loss: the retransmits spurious")
      for p, d in (("http", "download"), ("iperf3", "upload"))),
    # The verdict is the path's (link_capacity): its evidence must name the packet rate.
    *(PlainCause("an MSS clamp (536) in a packet-rate-bound router", "router", p, "f16m", d, "link_capacity", "path",
                 mss_clamp, bound=_PPS_BOUND, evidence=r"(?i)packet rate|packets/s")
      for p, d in (("http", "download"), ("iperf3", "upload"))),
    PlainCause("a path-MTU black hole", "router", "http", "f1m", "download", "", "", pmtu_black_hole,
               error=r"(?i)(mtu.*black hole|black hole.*mtu)",
               bound="none: the transfer stalls; the path's MTU 1280 below the hosts' 1500"),
]  # fmt: skip


# ---------------------------------------------------------------- issue 42: the return path
# A slow, deep-queued return way: the upload's ACKs (remote -> this host) through the
# router's RETURN_RATE shaper with a RETURN_QUEUE_BYTES queue, the data way at the site's
# 200 Mbit/s.  The ACK clock bounds the rate at RETURN_RATE x the data per ACK wire byte
# (a delayed ACK of 66 B per 2 x 1448 B: 256 kbit/s allows 1.40 MB/s); nothing else
# crosses the path.
RETURN_RATE = "256kbit"
RETURN_QUEUE_BYTES = 32_000  # 1 s at 256 kbit/s


@contextlib.contextmanager
def slow_return_path(site: PlainSite) -> Iterator[Changes | None]:
    """tbf at RETURN_RATE with a RETURN_QUEUE_BYTES queue on the router's way out toward
    this host (the upload's return direction), for the block; its own counters (tc -s on
    that device: tests/support/truth.py return_way_qdisc_*) are the truth of which way
    queued."""
    layout = site.layout
    tc = ["ip", "netns", "exec", layout.wan_ns, "tc", "qdisc"]
    try:
        subprocess.run(
            [*tc, "replace", "dev", layout.wan_client_if, "root", "tbf", "rate", RETURN_RATE, "burst", "4kb",
             "limit", str(RETURN_QUEUE_BYTES)],
            check=True,
        )  # fmt: skip
        yield None
    finally:
        subprocess.run([*tc, "del", "dev", layout.wan_client_if, "root"], check=False, capture_output=True)


_RETURN_BOUND = f"the ACK clock: {RETURN_RATE} of return capacity x 2896 B of data per 66 B ACK = 1.40 MB/s"
CAUSES += [
    # The breaker's: the data way's 200 Mbit/s configured (shared_path 6 of 6 before).
    *(PlainCause("a slow deep-queued return path (the ACKs' way)", "wan-known", p, "f8m", "upload", "link_capacity",
                 "path", slow_return_path, evidence=r"return path \(the ACKs' way\)", bound=_RETURN_BOUND)
      for p in ("http", "scp")),
    # The return way's capacity configured (remotes.NAME.return_bandwidth = RETURN_RATE):
    # the bound compares with a number not taken from the transfer.
    PlainCause("a slow deep-queued return path (return capacity configured)", "wan-return-known", "http", "f8m",
               "upload", "link_capacity", "path", slow_return_path,
               evidence=r"its configured capacity 256 kbit/s \(return_bandwidth", bound=_RETURN_BOUND),
    # ... and with the path's capacity unknown: the return way's queue shows its own.
    PlainCause("a slow deep-queued return path (capacity unknown)", "wan", "http", "f8m", "upload",
               "link_capacity", "path", slow_return_path, evidence=r"return path \(the ACKs' way\)",
               bound=_RETURN_BOUND),
]  # fmt: skip


# ---------------------------------------------------------------- issue 42: ECN marks, no loss
# On the "router" site: both ends request ECN (net.ipv4.tcp_ecn=1) and the router marks CE
# on ECN_MARK_PER_MILLE of the ECN-capable packets it forwards instead of dropping any (a
# queue whose AQM marks: this kernel has no fq_codel, codel, red or pie qdisc, so an
# nftables rule stands in for the marking, at random like the lossy site's loss).  The
# rule matches on the way out toward either host, after the delay line: one packet per
# segment there (the veths in front of it carry the senders' GSO batches).
ECN_MARK_PER_MILLE = 5
# A queue that marks in bursts (a step-marking AQM: every packet while the queue stands
# above its threshold): ECN_BURST packets in a row of every ECN_BURST_EVERY ECT packets,
# each burst within one round trip: 1% of the packets, a fifth as many marked round trips.
# (At 5 in 1000 an 8 MiB CUBIC upload's window grew to fill the 100 Mbit/s link between
# bursts in 2 of 3 runs: the link held it, not the marks.)
ECN_BURST, ECN_BURST_EVERY = 5, 500


def ecn_marking(mode: str = "random") -> Callable[[PlainSite], contextlib.AbstractContextManager[Changes | None]]:
    """ECN requested on both ends and the router marking CE on ECN-capable (ECT(0))
    packets it sends on toward either host, counted (the truth's nft_marked_ce):
    ECN_MARK_PER_MILLE of them at random (`mode` "random"), or ECN_BURST in a row of every
    ECN_BURST_EVERY ("bursts")."""

    @contextlib.contextmanager
    def setup(site: PlainSite) -> Iterator[Changes | None]:
        layout = site.layout
        every = str(ECN_BURST_EVERY)
        which = (["numgen", "random", "mod", "1000", "<", str(ECN_MARK_PER_MILLE)] if mode == "random"
                 else ["numgen", "inc", "mod", every, "<", str(ECN_BURST)])  # fmt: skip
        mark = ["oifname", "{", layout.wan_client_if, ",", layout.wan_remote_if, "}", "ip", "ecn", "ect0", *which,
                "ip", "ecn", "set", "ce", "counter"]  # fmt: skip
        with contextlib.ExitStack() as stack:
            for side in ("local", "remote"):
                stack.enter_context(verdicts.sysctl(site.lab, side, "net.ipv4.tcp_ecn", "1"))
            stack.enter_context(_router_nft(site, "bbt_ecn", "forward", mark))
            yield None

    return setup


_ECN_BOUND = "the loss bound with p from the CE marks (none lost): Mathis, MSS/RTT x 1.22/sqrt(p)"
CAUSES += [
    # CUBIC halves its window once per round trip that brought a CE echo, as on a loss: the
    # marks, not the link (100 Mbit/s configured), hold the rate; nothing is lost.
    *(PlainCause("ECN marks without loss (CUBIC)", "router", p, "f8m", d, "congestion", "path", ecn_marking(),
                 evidence=r"marked CE by the path", bound=_ECN_BOUND)
      for p, d in (("http-cubic", "download"), ("iperf3-cubic", "upload"), ("scp-cubic", "upload"))),
    # ... marked in bursts: one halving per burst, not per mark.
    *(PlainCause("ECN marks in bursts without loss (CUBIC)", "router", p, "f8m", d, "congestion", "path",
                 ecn_marking("bursts"), evidence=r"marked CE by the path", bound=_ECN_BOUND)
      for p, d in (("http-cubic", "download"), ("iperf3-cubic", "upload"))),
    # BBR (v1) does not slow for ECN: the link is full.
    PlainCause("ECN marks without loss (BBR)", "router", "http", "f32m", "download", "link_capacity", "path",
               ecn_marking(), bound="the path's capacity (100 Mbit/s configured); BBR does not slow for CE marks"),
]  # fmt: skip
