"""Count what crossed the wire between two hosts in one transfer's capture (pcap or pcapng).

The second half of the "analyse" stage (capture -> read -> *analyse* -> result):
pcap.py decodes the packets, this module adds them up per way and per flow and runs
the TCP sequence analysis that finds retransmissions.

What is counted, per way ("down" = remote -> client, "up" = client -> remote), over
the packets whose IP addresses are exactly the two hosts (all others, and non-IP
frames, only go into ``other_packets``; those of them that carry a packet between the
hosts inside an encapsulation not opened also into ``undecoded``, per kind):

* wire bytes and packets: the frames that crossed the wire.  A frame's bytes are its
  original length, the record's ``orig_len``, so the snap length does not matter.  With
  offloads on (TSO/GSO on the sender, GRO on the receiver, BIG TCP) the capture sees
  TCP super-frames larger than the MTU; each is counted as the MSS-sized frames it
  stands for, each with the super-frame's headers (pcap.py's ``_Splitter`` says how the
  segment size is found).  UDP super-frames (UDP GSO) are counted as captured: their
  segment size is not on the wire.  ``captured_wire_bytes`` and ``captured_packets``
  are the records as captured (one super-frame, one set of headers), ``superframes``
  how many were split.  With offloads off the two agree;
* payload bytes: the L4 payload from the IP header's lengths (IPv4 total length, IPv6
  payload length or jumbo option) minus the IP, IPv6 extension and TCP/UDP header
  lengths, never from the captured length (an IP length of 0, or longer than the
  frame, is taken from the frame).  For transport "other" (ICMP, ...) it is the whole
  IP payload; a later IP fragment counts all its bytes as payload of the first
  fragment's flow.  The payload-size histogram counts the wire frames: a split
  super-frame as its full segments and the remainder;
* retransmissions: the TCP segments tshark 4.0 marks ``tcp.analysis.retransmission``,
  reproduced from ``tcp_analyze_sequence_number`` in Wireshark 4.0.17's packet-tcp.c
  (see ``_TcpConversation``).  That field is set on plain (RTO) retransmissions, fast
  retransmissions and spurious retransmissions (data already acknowledged); it is not
  set on out-of-order segments, keep-alives or zero-window probes.  Checked frame by
  frame against tshark 4.0.17 on crafted, random and real captures (tests).  Not
  reproduced: segments inside IP fragments (tshark analyses the reassembled datagram),
  and Wireshark's cap of 10000 unacknowledged segments per direction.

Why the wire count of retransmissions differs from the sender's kernel count
(``nstat TcpRetransSegs``, ``ss -ti`` ``retrans``, iperf3 "Retr"):

* The capture runs at one end (the client; for a download, the receiver).  A segment
  dropped in a queue *before* the capture point (a qdisc, a router) is never seen;
  its retransmission is seen once and counted once, if it is not dropped too.  Every
  dropped retransmission is in the kernel's count and not on this wire.  So under
  queue drops the wire count is several times lower: a 64 MiB transfer through a tbf
  that dropped 31,902 frames had 57,388 retransmitted segments by the sender's
  ``nstat`` and 17,678 on the wire (the lab notes saw ~6x).
* The wire count is a heuristic on sequence numbers, not knowledge of what the sender
  did: reordering (as on a veth) makes a late original look like a retransmission,
  and a resent segment that was already acknowledged is a "spurious" retransmission.
  On a reordering veth tshark flagged 690 segments where the sender retransmitted 185.
* The kernel counts retransmitted segments (MSS-sized); the wire analysis counts
  captured frames, and with offloads on a retransmitted super-frame is one frame.

The sender's kernel counter is the truth about the sender; this count is the truth
about the wire at the capture point.  For downloads only the latter is local.

Two engines compute all of this: the pure-Python path here (pcap.decode feeding
``_TcpConversation``), the reference, and the compiled fast path in fastscan.py, which
handles the common capture at ~35x the rate and hands anything else back to the Python
path for the whole file.  Both give the same ``Analysis``; ``engine="python"`` or
``BIGBINF_ANALYSER=python`` forces the pure-Python path.  The exporter does not call
``analyse_pcap`` itself: analyser_worker.py runs it in a worker process, so that numba
and LLVM (~130 MB of RSS) stay out of the long-running exporter.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Literal, cast

from bigbinf.measure.wire.pcap import (
    _BYTE_ORDER_MAGICS,
    _EPB,
    _MAGICS,
    _PB,
    _PCAPNG_MAGIC,
    _RELEASE_EVERY,
    _SHB,
    BOGUS_HEADER,
    NO_ANALYSIS,
    TRANSPORT_NAMES,
    EmptyCapture,
    Packet,
    PathLike,
    PcapError,
    ScanTotals,
    TruncatedCapture,
    _host_pair,
    _Interface,
    _other_block,
    _parse_file_header,
    _release,
    decode,
    iter_packets,
    mapped,
)
from bigbinf.result import PAYLOAD_BUCKETS

# Packet, PcapError (EmptyCapture, TruncatedCapture) and iter_packets are re-exported: callers that analyse also read.
__all__ = [
    "Analysis",
    "EmptyCapture",
    "Engine",
    "FlowStats",
    "Packet",
    "PcapError",
    "TruncatedCapture",
    "analyse_pcap",
    "iter_packets",
]


@dataclass(frozen=True)
class FlowStats:
    transport: str
    client_port: int
    remote_port: int
    payload_bytes_down: int
    payload_bytes_up: int
    packets_down: int  # frames on the wire: super-frames split, as Analysis.packets
    packets_up: int


@dataclass(frozen=True)
class Analysis:
    """Per way, {"down": .., "up": ..}, of the packets between the two hosts."""

    wire_bytes: dict[str, int]  # frame bytes that crossed the wire: super-frames split
    payload_bytes: dict[str, int]  # L4 payload (the same split or not)
    packets: dict[str, int]  # frames that crossed the wire: super-frames split
    retransmits: dict[str, int]  # per way, as tshark 4.0's tcp.analysis.retransmission
    first_packet_timestamp: float | None
    last_packet_timestamp: float | None
    payload_histogram: dict[str, list[int]]  # shape of exporter.result.empty_histogram(); wire frames
    flows: tuple[FlowStats, ...]  # per 5-tuple, sorted by total payload, largest first
    other_packets: int  # records not counted: other hosts, non-IP, and the undecoded
    truncated_tail: bool  # the file ends inside a record (only with strict=False)
    captured_wire_bytes: dict[str, int]  # sum of orig_len of the records as captured
    captured_packets: dict[str, int]  # records as captured
    superframes: dict[str, int]  # captured frames that stood for several wire frames
    records: int  # every packet record in the file, between the hosts or not, damaged or not
    undecoded: dict[str, int]  # kind -> packets between the hosts inside encapsulations not opened
    truncated_at: int | None  # byte offset of the record the end of the file cut (strict=False)
    # Records skipped as damaged (pcap._skip_damaged: an impossible length or timestamp
    # in a record whose framing holds): the counts miss what they carried.
    damaged_records: int = 0
    damaged_at: int | None = None  # byte offset of the first of them


# TCP flag bits.
_FIN, _SYN, _RST, _ACK = 0x01, 0x02, 0x04, 0x10


# ------------------------------------------------------------------------- TCP analysis

_M32 = 0xFFFFFFFF
_HALF = 0x80000000
_KEEP_ALIVE, _ZERO_WINDOW_PROBE = 0x1, 0x2  # the last-segment flags the analysis reads
_FAST_RETRANSMIT_WINDOW_NS = 20_000_000  # dup ACK -> fast retransmission, Wireshark's 20 ms
_DEFAULT_OOO_THRESHOLD_NS = 3_000_000  # out-of-order window when no handshake RTT is known
_U64 = 1 << 64
_DUPACK_PARKED = 0xFFFFFFFF  # (guint32)-1


class _TcpHalf:
    """Wireshark's per-direction tcp_flow_t / tcp_analyze_seq_flow_info_t, reduced to
    the fields the retransmission classification reads."""

    __slots__ = (
        "base_seq",
        "base_set",
        "dupacknum",
        "lastack",
        "lastacktime",
        "lastflags",
        "maxseqtobeacked",
        "nextseq",
        "nextseqtime",
        "window",
    )

    def __init__(self) -> None:
        self.base_set = False
        self.base_seq = 0
        self.nextseq = 0  # 0 = not known yet, as in Wireshark
        self.nextseqtime = 0
        self.lastack = 0
        self.lastacktime = 0
        self.dupacknum = 0
        self.window = 0xFFFFFFFF  # G_MAXUINT32: no window seen yet
        self.lastflags = 0
        self.maxseqtobeacked = 0


class _TcpConversation:
    """tcp_analyze_sequence_number() of Wireshark 4.0.17 (epan/dissectors/packet-tcp.c)
    plus the bits of dissect_tcp() it depends on (port reuse, handshake RTT), in the
    order Wireshark evaluates them, reduced to what decides the expert field
    ``tcp.analysis.retransmission``.  Sequence numbers are absolute and compared with
    32-bit wrap (GT_SEQ/LT_SEQ); times are integer nanoseconds as in nstime_t.

    Memory is O(1) per conversation: Wireshark's list of unacked segments only feeds
    RTT/RTO display and bytes in flight, which do not change the classification.  (It
    also caps that list at 10000 segments, after which a FIN no longer counts for one
    sequence number; that needs 10000 unacknowledged segments and is not reproduced.)

    One flat method on purpose: it runs for every TCP segment of a multi-GB capture.
    """

    __slots__ = ("down", "first_rtt", "mru_syn", "up")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.down = _TcpHalf()  # remote -> client
        self.up = _TcpHalf()
        self.mru_syn = 0  # time of the most recent pure SYN (ts_mru_syn)
        self.first_rtt = 0  # handshake RTT (ts_first_rtt): the out-of-order window

    def segment(self, down: bool, ts: int, seq: int, ack: int, seglen: int, flags: int, window: int) -> bool:
        """Analyse one segment in capture order; True if tshark marks it a retransmission."""
        if down:
            fwd, rev = self.down, self.up
        else:
            fwd, rev = self.up, self.down
        syn_ack = flags & (_SYN | _ACK)

        # dissect_tcp, before the analysis: a pure SYN with a new ISN on a known
        # conversation starts a new conversation (ports reused); one with the same ISN
        # restores nextseq (issue 17616).  A SYN/ACK with a new ISN only rebases.
        if syn_ack == _SYN:
            if fwd.base_set:
                if seq != fwd.base_seq:
                    self._reset()
                    fwd, rev = (self.down, self.up) if down else (self.up, self.down)
                else:
                    fwd.nextseq = fwd.maxseqtobeacked
        elif syn_ack == _SYN | _ACK and fwd.base_set and seq != fwd.base_seq:
            fwd.base_seq = seq
        if not fwd.base_set:
            fwd.base_seq = seq if flags & _SYN else (seq - 1) & _M32
            fwd.base_set = True
        if not rev.base_set and flags & _ACK:  # the other side's ISN, as far as we know
            rev.base_seq = (ack - 1) & _M32
            rev.base_set = True

        nextseq = fwd.nextseq
        lastack = fwd.lastack
        no_sfr = not flags & (_SYN | _FIN | _RST)

        # ZERO WINDOW PROBE: skips the keep-alive and duplicate-ACK tests (goto finished_fwd).
        zero_window_probe = seglen == 1 and seq == nextseq and rev.window == 0
        keep_alive = False
        if not zero_window_probe:
            # KEEP ALIVE: 0 or 1 byte one below the next expected sequence number.
            keep_alive = seglen <= 1 and no_sfr and seq == (nextseq - 1) & _M32
            if seglen == 0 and no_sfr and window == fwd.window and seq == nextseq and ack == lastack:
                if window and rev.lastflags & _KEEP_ALIVE:
                    pass  # KEEP ALIVE ACK, not a duplicate ACK
                elif not window and rev.lastflags & _ZERO_WINDOW_PROBE:
                    pass  # ZERO WINDOW PROBE ACK
                elif window:
                    # DUPLICATE ACK; a parked counter (ACKED LOST below) restarts at 1.
                    fwd.dupacknum = 1 if fwd.dupacknum == _DUPACK_PARKED else fwd.dupacknum + 1

        # finished_fwd: a new ACK number resets the duplicate-ACK count.
        if ack != lastack:
            fwd.dupacknum = 0

        # ACKED LOST PACKET: this acks beyond the highest in-sequence byte seen the
        # other way (GT_SEQ(ack, maxseqtobeacked)).
        if rev.maxseqtobeacked and flags & _ACK and ((rev.maxseqtobeacked - ack) & _M32) >= _HALF:
            if ((rev.maxseqtobeacked - rev.nextseq) & _M32) >= _HALF:  # LT_SEQ(mx, nextseq)
                rev.maxseqtobeacked = rev.nextseq
            else:
                # The other side is stalled on pure ACKs: Wireshark parks that side's
                # duplicate-ACK counter at -1, which in its guint32 field is >= 2 below.
                rev.dupacknum = _DUPACK_PARKED

        # RETRANSMISSION / FAST RETRANSMISSION / OUT-OF-ORDER / SPURIOUS, for segments
        # that carry data, SYN or FIN and are not keep-alives.
        syn_fin = flags & (_SYN | _FIN)
        retransmission = False
        if (seglen or syn_fin) and not keep_alive:
            # LT_SEQ(seq, nextseq), unless it starts one byte early and adds data
            # (data after a zero-window probe byte).
            seq_not_advanced = nextseq != 0 and ((seq - nextseq) & _M32) >= _HALF
            if seglen > 1 and (nextseq - 1) & _M32 == seq:
                seq_not_advanced = False
            end = (seq + seglen) & _M32
            beyond_ack = (end - rev.lastack) & _M32  # LE_SEQ(end, lastack): 0 or negative
            if seglen and rev.lastack and (beyond_ack == 0 or beyond_ack >= _HALF):
                retransmission = True  # spurious: all of it was already acknowledged
            elif seq_not_advanced:
                since_ack = ts - rev.lastacktime
                if rev.dupacknum >= 2 and rev.lastack == seq and 0 <= since_ack < _FAST_RETRANSMIT_WINDOW_NS:
                    retransmission = True  # fast: >= 2 dup ACKs for it, < 20 ms ago
                else:
                    # Out-of-order if close in time to the highest segment (the handshake
                    # RTT, 3 ms if none; a negative RTT is a huge guint64) and not just
                    # filling the gap right below it; otherwise a plain retransmission.
                    rtt = self.first_rtt
                    threshold = _DEFAULT_OOO_THRESHOLD_NS if rtt == 0 else rtt % _U64
                    since_next = ts - fwd.nextseqtime
                    out_of_order = 0 <= since_next < threshold and nextseq != (end + (1 if syn_fin else 0)) & _M32
                    retransmission = not out_of_order

        # finished_checking_retransmission_type: highest sequence seen, highest
        # in-sequence byte (zero-window probes advance neither), last ACK and window.
        if not zero_window_probe:
            new_next = (seq + seglen + (1 if syn_fin else 0)) & _M32
            if not nextseq or ((nextseq - new_next) & _M32) >= _HALF:
                fwd.nextseq = new_next
                fwd.nextseqtime = ts
            if seq == fwd.maxseqtobeacked or not fwd.maxseqtobeacked:
                fwd.maxseqtobeacked = fwd.nextseq
        fwd.window = window
        fwd.lastack = ack
        fwd.lastacktime = ts
        fwd.lastflags = _KEEP_ALIVE if keep_alive else _ZERO_WINDOW_PROBE if zero_window_probe else 0

        # dissect_tcp, after the analysis: the handshake RTT runs from the most recent
        # pure SYN to the first pure ACK.
        if syn_ack == _SYN:
            self.mru_syn = ts
        elif syn_ack == _ACK and self.mru_syn and not self.first_rtt:
            self.first_rtt = ts - self.mru_syn
        return retransmission and not flags & BOGUS_HEADER


# Which implementation analyses: "auto" runs the compiled fast path (fastscan.py) where
# it handles the capture and the pure-Python path (decode + _TcpConversation) otherwise;
# "python" always runs the pure-Python path (the reference the fast path is tested
# against, and the way out should the fast path ever be suspected).  The argument wins
# over the environment variable.
Engine = Literal["auto", "python"]
ENGINE_VARIABLE = "BIGBINF_ANALYSER"
_log = logging.getLogger(__name__)


def _engine(engine: Engine | None) -> Engine:
    if engine is None:
        chosen = os.environ.get(ENGINE_VARIABLE, "auto")
        if chosen not in ("auto", "python"):
            raise PcapError(f"{ENGINE_VARIABLE}={chosen!r} is not an analyser engine; set it to auto or python")
        return "python" if chosen == "python" else "auto"
    if engine not in ("auto", "python"):
        raise PcapError(f"analyser engine {engine!r} is not one; use 'auto' or 'python'")
    return engine


def _retransmissions(
    path: PathLike, client_address: str, remote_address: str, *, engine: Engine | None = None
) -> list[tuple[int, bool]]:
    """(1-based frame number, down) of every retransmission: to compare with tshark
    frame by frame in tests; analyse_pcap runs the same analysis without the list."""
    name = os.fspath(path)
    if _engine(engine) == "auto":
        found: list[tuple[int, bool]] = []
        with mapped(name) as buf:
            if _fast_tally(name, buf, client_address, remote_address, None, found) is not None:
                return found
    totals = ScanTotals()
    found = []
    conversations: dict[tuple[int, int], _TcpConversation] = {}
    with mapped(name) as buf:
        yielded = 0
        for ts_ns, down, _o, _t, _p, sport, dport, seq, ack, seglen, flags, window, _s in decode(
            name, buf, client_address, remote_address, totals
        ):
            yielded += 1
            if flags == NO_ANALYSIS:
                continue
            key = (dport, sport) if down else (sport, dport)
            conversation = conversations.get(key)
            if conversation is None:
                conversation = conversations[key] = _TcpConversation()
            if conversation.segment(down, ts_ns, seq, ack, seglen, flags, window):
                # Every earlier record was either yielded or counted as "other".
                found.append((yielded + totals.other_packets + totals.damaged, down))
    return found


# Per-flow accumulator, a list for speed: wire bytes, payload bytes and packets, each
# [down, up] (wire bytes and packets with super-frames split), then the flow's TCP
# analysis (or None).
_WIRE, _PAYLOAD, _PACKETS, _CONVERSATION = 0, 2, 4, 6
# The payload-size bucket (index into PAYLOAD_BUCKETS' histogram) of every payload up to
# 65535 bytes, one byte each: an index is half the cost of a bisect, per packet.
_BUCKET_OF = b"".join(
    bytes([index]) * (bound - (PAYLOAD_BUCKETS[index - 1] if index else -1))
    for index, bound in enumerate(PAYLOAD_BUCKETS)
)
_MAX_MTU = 0x80000  # beyond the largest frame there is (a BIG TCP super-frame): not a link MTU


@dataclass
class _Tally:
    """What one pass over a capture adds up, by either engine, before it becomes an Analysis."""

    flows: dict[int, list[Any]]  # key: transport << 32 | client_port << 16 | remote_port
    histograms: tuple[list[int], list[int]]  # down, up
    retransmits: list[int]  # [down, up]
    split_wire: list[int]  # per way: what splitting super-frames added to the captured figures
    split_packets: list[int]
    superframes: list[int]  # per way: how many were split
    first_ts: int | None
    last_ts: int
    totals: ScanTotals


def analyse_pcap(
    path: PathLike,
    client_address: str,
    remote_address: str,
    *,
    mtu: int | None = None,
    strict: bool = True,
    engine: Engine | None = None,
) -> Analysis:
    """Count wire bytes, payload, packets, retransmissions, payload sizes and flows of
    the traffic between client_address and remote_address in a pcap or pcapng file.

    mtu: the link MTU towards the remote, for the segment size of TCP super-frames on
    connections whose SYN was not captured (1500 if None).  strict: a file that ends
    inside a record (the capture was cut short) raises TruncatedCapture; with
    strict=False the counts up to there are returned with truncated_tail set.  A damaged
    record whose framing holds is skipped and counted (damaged_records, damaged_at:
    pcap._skip_damaged says why), either way.  Every other problem with the file or the
    arguments is a PcapError naming the fix: among them a path that is no regular file
    (a FIFO), an empty file, and one with no packet record at all.
    engine: "auto" (the compiled fast path where it applies) or "python"; None reads
    the BIGBINF_ANALYSER environment variable (default auto).  Both give the same Analysis."""
    name = os.fspath(path)
    if mtu is not None and (not isinstance(mtu, int) or not 68 <= mtu <= _MAX_MTU):
        raise PcapError(f"{name}: MTU {mtu!r} is not a link MTU (68 to {_MAX_MTU}); give the route's MTU or None")
    chosen = _engine(engine)
    with mapped(name) as buf:
        tally = None
        if chosen == "auto":
            tally = _fast_tally(name, buf, client_address, remote_address, mtu, None)
        if tally is None:
            tally = _python_tally(name, buf, client_address, remote_address, mtu)
    return _analysis(name, tally, strict)


def _python_tally(
    name: str, buf: bytes | mmap.mmap, client_address: str, remote_address: str, mtu: int | None
) -> _Tally:
    totals = ScanTotals()
    flows: dict[int, list[Any]] = {}  # key: transport << 32 | client_port << 16 | remote_port
    n_buckets = len(PAYLOAD_BUCKETS) + 1
    histograms = ([0] * n_buckets, [0] * n_buckets)  # down, up
    retransmits = [0, 0]
    # Per way: what splitting super-frames added to the captured figures, and how many.
    split_wire, split_packets, superframes = [0, 0], [0, 0], [0, 0]
    first_ts: int | None = None
    last_ts = 0
    bucket_of = _BUCKET_OF

    for ts_ns, down, orig_len, transport, payload, sport, dport, seq, ack, seglen, flags, window, split in decode(
        name, buf, client_address, remote_address, totals, mtu
    ):
        if down:
            way = 0
            key = transport << 32 | dport << 16 | sport
        else:
            way = 1
            key = transport << 32 | sport << 16 | dport
        flow = flows.get(key)
        if flow is None:
            flow = flows[key] = [0, 0, 0, 0, 0, 0, None]
            if first_ts is None:  # the first packet always starts a flow
                first_ts = ts_ns
        flow[way] += orig_len  # _WIRE + way
        flow[way + 2] += payload  # _PAYLOAD + way
        flow[way + 4] += 1  # _PACKETS + way
        if split is None:
            try:
                histograms[way][bucket_of[payload]] += 1
            except IndexError:  # above the table: the last bucket (no exception costs nothing)
                histograms[way][-1] += 1
        else:
            frames, wire, size = split
            flow[way] += wire - orig_len
            flow[way + 4] += frames - 1
            split_wire[way] += wire - orig_len
            split_packets[way] += frames - 1
            superframes[way] += 1
            histograms[way][bisect_left(PAYLOAD_BUCKETS, size)] += frames - 1
            histograms[way][bisect_left(PAYLOAD_BUCKETS, payload - (frames - 1) * size)] += 1
        last_ts = ts_ns
        if flags != NO_ANALYSIS:
            conversation = flow[6]  # _CONVERSATION
            if conversation is None:
                conversation = flow[6] = _TcpConversation()
            if conversation.segment(down, ts_ns, seq, ack, seglen, flags, window):
                retransmits[way] += 1
    return _Tally(flows, histograms, retransmits, split_wire, split_packets, superframes, first_ts, last_ts, totals)


# The fast path scans this many bytes between calls: the pages read are handed back
# between them (as the Python path does), and a Ctrl-C or a GIL waiter gets a turn.
_FAST_CHUNK = _RELEASE_EVERY
_FAST_FRAMES = 1 << 16  # retransmission frames collected per drain (_retransmissions only)
_fast_unavailable_logged = False


def _fast_tally(
    name: str,
    buf: bytes | mmap.mmap,
    client_address: str,
    remote_address: str,
    mtu: int | None,
    frames_out: list[tuple[int, bool]] | None,
) -> _Tally | None:
    """The tally by the compiled fast path (fastscan.py), or None where it does not
    handle the capture (the caller then runs the Python path on the whole file).  The
    checks the Python path makes first (the addresses, then the file header) come first
    here too, so an unusable file raises the same PcapError either way."""
    client_b, remote_b = _host_pair(name, client_address, remote_address)
    size = len(buf)
    magic = bytes(buf[:4])
    pcapng = magic == _PCAPNG_MAGIC and size >= 28
    if not pcapng and (size < 24 or magic not in _MAGICS):  # empty, or an error the Python path words
        return None
    # A classic pcap's one header; a pcapng's sections and interfaces are read as met.
    header = None if pcapng else _parse_file_header(name, buf)
    try:
        import numpy as np

        from bigbinf.measure.wire import fastscan
    except ImportError as e:  # an install without numba: still correct, only slower
        global _fast_unavailable_logged
        if not _fast_unavailable_logged:
            _log.warning("the compiled pcap analyser is not available (%s); using the pure-Python one", e)
            _fast_unavailable_logged = True
        return None

    n_buckets = len(PAYLOAD_BUCKETS) + 1
    g = fastscan.new_state(1500 if mtu is None else mtu)
    flows = fastscan.new_flows(16)
    table = fastscan.new_table(64)
    histograms = np.zeros((2, n_buckets), dtype=np.int64)
    frames = np.zeros(_FAST_FRAMES if frames_out is not None else 1, dtype=np.int64)
    bucket_of = np.frombuffer(_BUCKET_OF, dtype=np.uint8)
    if header is None:
        big_endian, ns_per_frac, caplen_limit, linktype, offset = False, 1, 0, 0, 0
    else:
        big_endian, ns_per_frac, linktype = header.record.format.startswith(">"), header.ns_per_frac, header.linktype
        caplen_limit = min(header.snaplen, fastscan.MAX_FRAME) if header.snaplen > 0 else fastscan.MAX_FRAME
        offset = 24
    interfaces: list[_Interface] = []
    interface_rows = _interface_rows(interfaces)
    pair_down = np.frombuffer(remote_b + client_b, dtype=np.uint8)
    pair_up = np.frombuffer(client_b + remote_b, dtype=np.uint8)
    data = np.frombuffer(buf, dtype=np.uint8)  # a view of the mapping: nothing is copied
    try:
        released = 0
        while True:
            status, offset = _scan_or_bail(
                fastscan.scan,
                data,
                offset,
                min(offset + _FAST_CHUNK, size),
                big_endian,
                ns_per_frac,
                1_000_000_000 // ns_per_frac,
                caplen_limit,
                linktype,
                pcapng,
                interface_rows,
                len(interfaces),
                pair_down,
                pair_up,
                1500 if mtu is None else mtu,
                bucket_of,
                g,
                flows,
                table,
                histograms,
                frames,
                frames_out is not None,
            )
            if status == fastscan.BAIL:
                return None
            if frames_out is not None:
                frames_out.extend((int(v) >> 1, bool(v & 1)) for v in frames[: g[fastscan.G_FRAMES]])
                g[fastscan.G_FRAMES] = 0
            if status == fastscan.GROW:
                count = int(g[fastscan.G_FLOWS])
                grown = fastscan.new_flows(4 * flows.shape[0])
                grown[:count] = flows[:count]
                flows, table = grown, fastscan.new_table(8 * grown.shape[0])
                fastscan.rehash(flows, count, table)
            elif status == fastscan.CHUNK:
                if isinstance(buf, mmap.mmap) and offset - released > _FAST_CHUNK:
                    released = _release(buf, released, offset)
                if offset >= size:
                    break
            elif status == fastscan.DONE:
                break
            elif status == fastscan.BLOCK:
                block = _pcapng_block(name, buf, offset, "big" if big_endian else "little", interfaces)
                if block is None:
                    return None
                offset, order, interfaces = block
                big_endian = order == "big"
                interface_rows = _interface_rows(interfaces)
    finally:
        del data  # the mapping cannot close while a view of it lives

    totals = ScanTotals()
    totals.file_size = size
    totals.other_packets = int(g[fastscan.G_OTHER])
    truncated_at = int(g[fastscan.G_TRUNCATED_AT])
    totals.truncated_at = None if truncated_at < 0 else truncated_at
    totals.damaged = int(g[fastscan.G_DAMAGED])
    totals.damaged_at = int(g[fastscan.G_DAMAGED_AT]) if totals.damaged else None
    flow_lists: dict[int, list[Any]] = {}
    for row in flows[: int(g[fastscan.G_FLOWS])].tolist():
        flow_lists[row[fastscan.F_KEY]] = [
            *row[fastscan.F_WIRE : fastscan.F_WIRE + 2],
            *row[fastscan.F_PAYLOAD : fastscan.F_PAYLOAD + 2],
            *row[fastscan.F_PACKETS : fastscan.F_PACKETS + 2],
            None,
        ]

    def pair(index: int) -> list[int]:
        return [int(g[index]), int(g[index + 1])]

    down_histogram, up_histogram = histograms.tolist()
    return _Tally(
        flows=flow_lists,
        histograms=(down_histogram, up_histogram),
        retransmits=pair(fastscan.G_RETRANSMITS),
        split_wire=pair(fastscan.G_SPLIT_WIRE),
        split_packets=pair(fastscan.G_SPLIT_PACKETS),
        superframes=pair(fastscan.G_SUPERFRAMES),
        first_ts=int(g[fastscan.G_FIRST_TS]) if g[fastscan.G_HAVE_FIRST] else None,
        last_ts=int(g[fastscan.G_LAST_TS]),
        totals=totals,
    )


def _pcapng_block(
    name: str, buf: bytes | mmap.mmap, offset: int, order: str, interfaces: list[_Interface]
) -> tuple[int, str, list[_Interface]] | None:
    """Read the pcapng block at offset that is not an Enhanced Packet Block, as
    pcap._pcapng_records does: (next offset, the byte order, "little" or "big", and the
    interfaces from here on), or None for anything the fast path leaves to the Python
    path (an obsolete Packet Block, anything malformed or cut short, which it reports)."""
    size = len(buf)
    fmt = "<" if order == "little" else ">"
    if offset + 12 > size:
        return None
    block_type, total = struct.unpack_from(fmt + "II", buf, offset)
    if block_type == _SHB:  # the same in either byte order; the section says which follows
        magic = bytes(buf[offset + 8 : offset + 12])
        if magic not in _BYTE_ORDER_MAGICS:
            return None
        fmt = _BYTE_ORDER_MAGICS[magic]
        block_type, total = struct.unpack_from(fmt + "II", buf, offset)
        interfaces = []  # interface ids are per section
    block_end = offset + total
    if total < 12 or total % 4 or block_end > size or struct.unpack_from(fmt + "I", buf, block_end - 4)[0] != total:
        return None
    if block_type in (_EPB, _PB):
        return None
    interfaces = list(interfaces)
    try:
        _other_block(name, buf, offset, block_type, block_end, fmt, interfaces)
    except PcapError:
        return None
    return block_end, "little" if fmt == "<" else "big", interfaces


_I64 = 1 << 62  # what the fast path's 64-bit timestamp arithmetic takes


def _interface_rows(interfaces: list[_Interface]) -> Any:
    """fastscan's interfaces array: a row per interface, ts_mul 0 where a field would not
    fit its 64-bit arithmetic (the fast path then leaves the file to the Python path)."""
    import numpy as np

    rows = np.zeros((max(len(interfaces), 1), 5), dtype=np.int64)
    for index, (linktype, snaplen, ts_mul, ts_div, ts_offset_ns) in enumerate(interfaces):
        if max(ts_mul, ts_div, abs(ts_offset_ns)) >= _I64:
            ts_mul, ts_div, ts_offset_ns = 0, 1, 0
        rows[index] = (linktype, snaplen, ts_mul, ts_div, ts_offset_ns)
    return rows


def _scan_or_bail(scan: Any, *args: Any) -> tuple[int, int]:
    """fastscan.scan(*args); should numba fail to compile it (a numba or LLVM release the
    pinned range did not foresee), the analysis still comes out: by the Python path."""
    from numba.core.errors import NumbaError

    from bigbinf.measure.wire import fastscan

    try:
        return cast(tuple[int, int], scan(*args))
    except NumbaError as e:
        _log.error("the compiled pcap analyser failed (%s); using the pure-Python one", e)
        # The traceback's frames hold the view of the mapping, which could then not close.
        e.__traceback__ = None
        return fastscan.BAIL, 0


def _analysis(name: str, tally: _Tally, strict: bool) -> Analysis:
    totals, flows = tally.totals, tally.flows
    if strict and totals.truncated_at is not None:
        raise TruncatedCapture(
            f"{name}: the record at byte {totals.truncated_at} runs past the end of the file "
            f"({totals.file_size} bytes): the capture was cut short (tcpdump killed while writing, or its "
            "disk full), so its counts would be partial; capture the transfer again with room for the capture",
            totals.truncated_at,
        )

    def per_way(field: int) -> dict[str, int]:
        return {"down": sum(f[field] for f in flows.values()), "up": sum(f[field + 1] for f in flows.values())}

    wire_bytes, packets = per_way(_WIRE), per_way(_PACKETS)
    split_wire, split_packets, superframes = tally.split_wire, tally.split_packets, tally.superframes
    records = packets["down"] - split_packets[0] + packets["up"] - split_packets[1] + totals.other_packets
    records += totals.damaged
    if not records and totals.truncated_at is None:
        # Zero counts would read as a transfer that sent nothing; a capture tool that ran
        # records at least the transfer's first packet (or someone else's).
        raise EmptyCapture(
            f"{name}: the capture holds no packets, only its file header: nothing was captured between its "
            "start and its stop (the wrong interface, or a filter no packet matched); capture the transfer "
            "again on the interface towards the remote"
        )
    first_ts = tally.first_ts
    return Analysis(
        wire_bytes=wire_bytes,
        payload_bytes=per_way(_PAYLOAD),
        packets=packets,
        retransmits={"down": tally.retransmits[0], "up": tally.retransmits[1]},
        first_packet_timestamp=None if first_ts is None else first_ts / 1e9,
        last_packet_timestamp=None if first_ts is None else tally.last_ts / 1e9,
        payload_histogram={"down": tally.histograms[0], "up": tally.histograms[1]},
        flows=_flow_stats(flows),
        other_packets=totals.other_packets,
        truncated_tail=totals.truncated_tail,
        captured_wire_bytes={"down": wire_bytes["down"] - split_wire[0], "up": wire_bytes["up"] - split_wire[1]},
        captured_packets={"down": packets["down"] - split_packets[0], "up": packets["up"] - split_packets[1]},
        superframes={"down": superframes[0], "up": superframes[1]},
        records=records,
        undecoded=dict(totals.undecoded),
        truncated_at=totals.truncated_at,
        damaged_records=totals.damaged,
        damaged_at=totals.damaged_at,
    )


def _flow_stats(flows: dict[int, list[Any]]) -> tuple[FlowStats, ...]:
    stats = [
        FlowStats(
            transport=TRANSPORT_NAMES[key >> 32],
            client_port=(key >> 16) & 0xFFFF,
            remote_port=key & 0xFFFF,
            payload_bytes_down=flow[_PAYLOAD],
            payload_bytes_up=flow[_PAYLOAD + 1],
            packets_down=flow[_PACKETS],
            packets_up=flow[_PACKETS + 1],
        )
        for key, flow in flows.items()
    ]
    stats.sort(key=lambda f: (-(f.payload_bytes_down + f.payload_bytes_up), f.transport, f.client_port, f.remote_port))
    return tuple(stats)
