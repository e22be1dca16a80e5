"""Read a classic pcap of one transfer and count what crossed the wire between two hosts.

This is the "analyse" stage: capture -> *analyse* -> result.  It reads what tcpdump
wrote (``tcpdump -s 128 -w F host A and host B``) with ``mmap`` + ``struct`` in pure
Python: scapy dissects ~8 k packets/s, far too slow for the ~2 M packets of a 2 GiB
transfer; this loop does a few struct unpacks and integer operations per packet and
keeps memory O(flows) (docs/benchmarks.md, "pcap analyser", has the numbers).

What is counted, per way ("down" = remote -> client, "up" = client -> remote), over
the packets whose IP addresses are exactly the two hosts (all others, and non-IP
frames, only go into ``other_packets``):

* wire bytes: the original length of each link-layer frame, the pcap record's
  ``orig_len``, so the snap length does not matter;
* payload bytes: the L4 payload from the IP header's lengths (IPv4 total length, IPv6
  payload length) minus the IP, IPv6 extension and TCP/UDP header lengths, never from
  the captured length.  For transport "other" (ICMP, ...) it is the whole IP payload;
  a later IP fragment counts all its bytes as payload of the first fragment's flow;
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
* The kernel counts segments before TSO/GSO splits them; the capture counts frames.

The sender's kernel counter is the truth about the sender; this count is the truth
about the wire at the capture point.  For downloads only the latter is local.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket
import struct
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Union

from .result import PAYLOAD_BUCKETS

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["Analysis", "FlowStats", "Packet", "PcapError", "analyse_pcap", "iter_packets"]


class PcapError(Exception):
    """The file cannot be analysed; the message names the file, the problem and the fix."""


@dataclass(frozen=True)
class Packet:
    """One captured packet between the two hosts."""

    timestamp: float  # epoch seconds
    way: str  # "down" if the IP source is remote_address, else "up"
    frame_bytes: int  # original (wire) length of the link-layer frame = pcap orig_len
    payload_bytes: int  # L4 payload from the IP lengths, not from the captured length
    transport: str  # "tcp" | "udp" | "other"


@dataclass(frozen=True)
class FlowStats:
    transport: str
    client_port: int
    remote_port: int
    payload_bytes_down: int
    payload_bytes_up: int
    packets_down: int
    packets_up: int


@dataclass(frozen=True)
class Analysis:
    wire_bytes: dict[str, int]  # {"down": .., "up": ..}: sum of orig_len
    payload_bytes: dict[str, int]
    packets: dict[str, int]
    retransmits: dict[str, int]  # per way, as tshark 4.0's tcp.analysis.retransmission
    first_packet_timestamp: float | None
    last_packet_timestamp: float | None
    payload_histogram: dict[str, list[int]]  # shape of exporter.result.empty_histogram()
    flows: tuple[FlowStats, ...]  # per 5-tuple, sorted by total payload, largest first
    other_packets: int  # packets not between the two hosts (ignored in all counts)
    truncated_tail: bool  # the last record was cut off (capture killed mid-write)


# --------------------------------------------------------------------------- file format

# Classic pcap magic numbers -> (struct byte order, nanoseconds per fraction unit).
_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),  # little-endian, microsecond timestamps
    b"\xa1\xb2\xc3\xd4": (">", 1000),  # big-endian, microsecond
    b"\x4d\x3c\xb2\xa1": ("<", 1),  # little-endian, nanosecond
    b"\xa1\xb2\x3c\x4d": (">", 1),  # big-endian, nanosecond
}
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
_FILE_HEADER_LEN = 24
_RECORD_HEADER_LEN = 16
# Pages already decoded are handed back to the kernel every this many bytes: the mapped
# file would otherwise show up whole in the process's RSS (though only as page cache).
_RELEASE_EVERY = 32 << 20
# Larger than any record tcpdump or Wireshark writes (WTAP_MAX_PACKET_SIZE_STANDARD is
# 256 KiB): a bigger incl_len means the file is damaged, not that a packet is huge.
_MAX_RECORD = 0x40000

# Link types (https://www.tcpdump.org/linktypes.html).
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW_OLD = 12  # the value OpenBSD-era libpcap wrote for raw IP
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
_RAW_IP_LINKTYPES = (LINKTYPE_RAW_OLD, LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6)
_SUPPORTED_LINKTYPES = (LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2) + _RAW_IP_LINKTYPES

_ETH_IPV4 = 0x0800
_ETH_IPV6 = 0x86DD
_VLAN_TPIDS = frozenset((0x8100, 0x88A8, 0x9100))  # 802.1Q, 802.1ad (QinQ), old QinQ

_IPPROTO_TCP = 6
_IPPROTO_UDP = 17
# IPv6 extension headers skipped to find the transport header: hop-by-hop, routing,
# destination options, mobility, HIP, shim6 all have the (len + 1) * 8 layout;
# fragment (44) is fixed 8 bytes; AH (51) is (len + 2) * 4.
_IPV6_EXT_8 = frozenset((0, 43, 60, 135, 139, 140))
_IPV6_FRAGMENT = 44
_IPV6_AH = 51

# Transport codes used internally (index into _TRANSPORT_NAMES).
_TCP, _UDP, _OTHER = 0, 1, 2
_TRANSPORT_NAMES = ("tcp", "udp", "other")

# TCP flag bits.
_FIN, _SYN, _RST, _ACK = 0x01, 0x02, 0x04, 0x10

_u16 = struct.Struct("!H").unpack_from
_u32 = struct.Struct("!I").unpack_from
_tcp_header = struct.Struct("!HHIIBBH").unpack_from  # sport dport seq ack off flags win
_ports = struct.Struct("!HH").unpack_from
# IPv4 header: version/IHL, total length, fragment field, protocol, source + destination.
_ipv4_header = struct.Struct("!BxH2xHxB2x8s").unpack_from


@dataclass(frozen=True)
class _FileHeader:
    record: struct.Struct  # record header: ts_sec, ts_frac, incl_len, orig_len
    ns_per_frac: int
    linktype: int
    snaplen: int


def _parse_file_header(name: str, buf: bytes | mmap.mmap) -> _FileHeader | None:
    """None for an empty file (tcpdump killed before it wrote anything: zero counts)."""
    size = len(buf)
    if size == 0:
        return None
    magic = bytes(buf[:4])
    if magic == _PCAPNG_MAGIC:
        raise PcapError(
            f"{name}: pcapng is not supported; capture with `tcpdump -w` (classic pcap) "
            f"or convert with `editcap -F pcap {name} OUT.pcap`"
        )
    if size < _FILE_HEADER_LEN and any(known.startswith(magic) for known in _MAGICS):
        raise PcapError(
            f"{name}: truncated pcap file header ({size} of {_FILE_HEADER_LEN} bytes); "
            "the capture was stopped before it started: capture again"
        )
    if magic not in _MAGICS:
        raise PcapError(
            f"{name}: not a classic pcap file (magic {magic.hex()}); capture with "
            f"`tcpdump -w`, or convert with `editcap -F pcap {name} OUT.pcap`"
        )
    order, ns_per_frac = _MAGICS[magic]
    snaplen, network = struct.unpack_from(order + "II", buf, 16)
    # The upper bits of the link-type field may carry FCS information (pcap spec).
    linktype = network & 0xFFFF
    if linktype not in _SUPPORTED_LINKTYPES:
        raise PcapError(
            f"{name}: link type {linktype} is not supported (Ethernet, Linux SLL/SLL2 and "
            "raw IP are); capture on an Ethernet-like interface or with `tcpdump -i any`"
        )
    return _FileHeader(struct.Struct(order + "IIII"), ns_per_frac, linktype, snaplen)


@contextlib.contextmanager
def _mapped(path: PathLike) -> Iterator[bytes | mmap.mmap]:
    """The file's bytes, memory-mapped so a multi-GB capture is not read into memory."""
    name = os.fspath(path)
    mm: mmap.mmap | None = None
    try:
        with open(name, "rb") as f:
            if os.fstat(f.fileno()).st_size:  # mmap cannot map an empty file
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                mm.madvise(mmap.MADV_SEQUENTIAL)  # read once, front to back: read ahead
    except OSError as e:
        raise PcapError(f"{name}: cannot read the capture ({e.strerror}); check the path and permissions") from e
    if mm is None:
        yield b""
        return
    try:
        yield mm
    finally:
        mm.close()


# ------------------------------------------------------------------------ packet decoding


class _ScanTotals:
    """What the decoder learns besides the packets themselves."""

    __slots__ = ("other_packets", "truncated_tail")

    def __init__(self) -> None:
        self.other_packets = 0
        self.truncated_tail = False


def _address_bytes(address: str) -> bytes:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_pton(family, address)
        except OSError:
            continue
    raise ValueError(f"{address!r} is not an IPv4 or IPv6 address")


# A decoded packet, as a flat tuple because it is built ~2 M times per capture:
# (ts_ns, down, orig_len, transport, payload, sport, dport, seq, ack, seglen, flags,
# window); flags is _NO_ANALYSIS unless the TCP sequence analysis can use the segment.
_Decoded = tuple[int, bool, int, int, int, int, int, int, int, int, int, int]
_NO_ANALYSIS = -1


def _decode(
    name: str, buf: bytes | mmap.mmap, client: str, remote: str, totals: _ScanTotals
) -> Iterator[_Decoded]:
    """Yield every packet between the two hosts; count the others in ``totals``.

    The record and IPv4 paths are written out in one loop on purpose: a function call
    per packet costs as much as the whole IPv4/TCP decode (measured), and this loop
    runs millions of times per capture.  Rarer paths (IPv6) are helper functions.
    """
    client_b, remote_b = _address_bytes(client), _address_bytes(remote)
    if len(client_b) != len(remote_b):
        raise ValueError(f"{client} and {remote} are not of the same address family")
    header = _parse_file_header(name, buf)
    if header is None:
        return
    v4 = len(client_b) == 4
    pair_down, pair_up = remote_b + client_b, client_b + remote_b
    unpack_record = header.record.unpack_from
    max_record = max(header.snaplen, _MAX_RECORD)
    ns_per_frac = header.ns_per_frac
    linktype = header.linktype
    size = len(buf)
    offset = _FILE_HEADER_LEN
    fragments: dict[tuple[bool, int, int], tuple[int, int]] = {}  # first-fragment ports
    released = 0  # pages below this offset were given back (madvise)
    release_at = _RELEASE_EVERY if isinstance(buf, mmap.mmap) else size + 1
    u16, tcp_header, ports, ipv4_header = _u16, _tcp_header, _ports, _ipv4_header
    vlan_tpids = _VLAN_TPIDS

    while offset < size:
        if offset + _RECORD_HEADER_LEN > size:
            totals.truncated_tail = True
            return
        ts_sec, ts_frac, caplen, orig_len = unpack_record(buf, offset)
        start = offset + _RECORD_HEADER_LEN
        end = start + caplen
        if caplen > max_record:
            raise PcapError(
                f"{name}: damaged record at byte {offset} (captured length {caplen} is "
                f"beyond any capture's); the file is corrupt: capture the transfer again"
            )
        if end > size:
            totals.truncated_tail = True
            return
        if offset > release_at:  # everything before this record has been decoded
            released = _release(buf, released, offset)
            release_at = released + _RELEASE_EVERY
        offset = end

        # --- link layer -> (l3 start, ethertype)
        if linktype == LINKTYPE_ETHERNET:
            if start + 14 > end:
                totals.other_packets += 1
                continue
            ethertype = u16(buf, start + 12)[0]
            l3 = start + 14
            if ethertype in vlan_tpids:
                l3, ethertype = _skip_vlan_tags(buf, l3, ethertype, end)
        elif linktype == LINKTYPE_LINUX_SLL:
            if start + 16 > end:
                totals.other_packets += 1
                continue
            l3, ethertype = _skip_vlan_tags(buf, start + 16, u16(buf, start + 14)[0], end)
        elif linktype == LINKTYPE_LINUX_SLL2:
            if start + 20 > end:
                totals.other_packets += 1
                continue
            l3, ethertype = _skip_vlan_tags(buf, start + 20, u16(buf, start)[0], end)
        else:  # raw IP: the version nibble says which
            l3 = start
            ethertype = _ETH_IPV4 if start < end and buf[start] >> 4 == 4 else _ETH_IPV6

        # --- network layer
        if ethertype == _ETH_IPV4:
            if not v4 or l3 + 20 > end:
                totals.other_packets += 1
                continue
            version_ihl, total_length, frag, proto, addresses = ipv4_header(buf, l3)
            if addresses == pair_down and version_ihl >> 4 == 4:
                down = True
            elif addresses == pair_up and version_ihl >> 4 == 4:
                down = False
            else:
                totals.other_packets += 1
                continue
            ihl = (version_ihl & 0x0F) * 4
            if ihl < 20:  # bogus header: count the packet, but do not trust what follows
                ihl, proto = 20, -1
            if total_length == 0:  # TSO frame captured before segmentation
                total_length = orig_len - (l3 - start)
            l4 = l3 + ihl
            l4_length = total_length - ihl
            frag_offset = frag & 0x1FFF
            fragment_key = (down, u16(buf, l3 + 4)[0], proto) if frag & 0x3FFF else None
        elif ethertype == _ETH_IPV6:
            if v4 or l3 + 40 > end or buf[l3] >> 4 != 6:
                totals.other_packets += 1
                continue
            addresses = buf[l3 + 8 : l3 + 40]
            if addresses == pair_down:
                down = True
            elif addresses == pair_up:
                down = False
            else:
                totals.other_packets += 1
                continue
            proto, l4, l4_length, frag_offset, fragment_key = _ipv6_transport(buf, l3, end, down)
        else:
            totals.other_packets += 1
            continue

        ts_ns = ts_sec * 1_000_000_000 + ts_frac * ns_per_frac
        if l4_length < 0:
            l4_length = 0

        # --- transport layer
        if frag_offset:  # a later fragment: all of it is payload, ports from the first
            sport, dport = fragments.get(fragment_key, (0, 0))  # type: ignore[arg-type]
            transport = _TCP if proto == _IPPROTO_TCP else _UDP if proto == _IPPROTO_UDP else _OTHER
            yield ts_ns, down, orig_len, transport, l4_length, sport, dport, 0, 0, 0, _NO_ANALYSIS, 0
        elif proto == _IPPROTO_TCP and l4 + 20 <= end:
            sport, dport, seq, ack, data_offset, flags, window = tcp_header(buf, l4)
            tcp_length = (data_offset >> 4) * 4
            seglen = l4_length - tcp_length
            if fragment_key is not None:
                _remember_fragment(fragments, fragment_key, sport, dport)
                # The segment spans fragments; Wireshark analyses only the reassembled one.
                yield ts_ns, down, orig_len, _TCP, max(seglen, 0), sport, dport, 0, 0, 0, _NO_ANALYSIS, 0
            elif seglen < 0:  # "short segment": Wireshark computes no length, no analysis
                yield ts_ns, down, orig_len, _TCP, 0, sport, dport, 0, 0, 0, _NO_ANALYSIS, 0
            else:
                if tcp_length < 20:
                    flags |= _BOGUS_HEADER
                yield ts_ns, down, orig_len, _TCP, seglen, sport, dport, seq, ack, seglen, flags, window
        elif proto == _IPPROTO_UDP and l4 + 8 <= end:
            sport, dport = ports(buf, l4)
            if fragment_key is not None:
                _remember_fragment(fragments, fragment_key, sport, dport)
            yield ts_ns, down, orig_len, _UDP, max(l4_length - 8, 0), sport, dport, 0, 0, 0, _NO_ANALYSIS, 0
        else:
            yield ts_ns, down, orig_len, _OTHER, l4_length, 0, 0, 0, 0, 0, _NO_ANALYSIS, 0


def _release(buf: mmap.mmap, released: int, offset: int) -> int:
    """Unmap the whole pages in [released, offset): decoded, not needed again (they stay
    in the page cache for anyone else); returns the new start of what is still mapped."""
    upto = offset - offset % mmap.PAGESIZE
    buf.madvise(mmap.MADV_DONTNEED, released, upto - released)
    return upto


def _skip_vlan_tags(buf: bytes | mmap.mmap, payload: int, ethertype: int, end: int) -> tuple[int, int]:
    """(l3 start, ethertype) after any 802.1Q/802.1ad tags (QinQ stacks them); each tag
    is 2 bytes of TCI then the next ethertype."""
    while ethertype in _VLAN_TPIDS and payload + 4 <= end:
        ethertype = _u16(buf, payload + 2)[0]
        payload += 4
    return payload, ethertype


def _ipv6_transport(
    buf: bytes | mmap.mmap, l3: int, end: int, down: bool
) -> tuple[int, int, int, int, tuple[bool, int, int] | None]:
    """Walk the IPv6 extension headers: (proto, l4 start, l4 length, frag offset, frag key)."""
    payload_length = _u16(buf, l3 + 4)[0]
    proto = buf[l3 + 6]
    p = l3 + 40
    limit = l3 + 40 + payload_length
    frag_offset = 0
    fragment_key = None
    while p + 8 <= end:
        if proto in _IPV6_EXT_8:
            length = (buf[p + 1] + 1) * 8
        elif proto == _IPV6_FRAGMENT:
            length = 8
            frag_field = _u16(buf, p + 2)[0]
            if frag_field & 0xFFF9:  # an offset or "more fragments": a real fragment
                frag_offset = frag_field >> 3
                fragment_key = (down, _u32(buf, p + 4)[0], buf[p])
        elif proto == _IPV6_AH:
            length = (buf[p + 1] + 2) * 4
        else:
            break
        proto = buf[p]
        p += length
    return proto, p, limit - p, frag_offset, fragment_key


def _remember_fragment(
    fragments: dict[tuple[bool, int, int], tuple[int, int]], key: tuple[bool, int, int], sport: int, dport: int
) -> None:
    # Bounded: IP IDs recycle, and only fragments in flight need their first one's ports.
    if len(fragments) > 4096:
        fragments.clear()
    fragments[key] = (sport, dport)


# ------------------------------------------------------------------------- TCP analysis

_M32 = 0xFFFFFFFF
_HALF = 0x80000000
_KEEP_ALIVE, _ZERO_WINDOW_PROBE = 0x1, 0x2  # the last-segment flags the analysis reads
_FAST_RETRANSMIT_WINDOW_NS = 20_000_000  # dup ACK -> fast retransmission, Wireshark's 20 ms
_DEFAULT_OOO_THRESHOLD_NS = 3_000_000  # out-of-order window when no handshake RTT is known
_U64 = 1 << 64
_DUPACK_PARKED = 0xFFFFFFFF  # (guint32)-1
# Set on segments whose TCP header length is below 20: Wireshark still runs the sequence
# analysis on them but stops dissecting before it reports the result.
_BOGUS_HEADER = 0x10000


class _TcpHalf:
    """Wireshark's per-direction tcp_flow_t / tcp_analyze_seq_flow_info_t, reduced to
    the fields the retransmission classification reads."""

    __slots__ = (
        "base_set",
        "base_seq",
        "nextseq",
        "nextseqtime",
        "lastack",
        "lastacktime",
        "dupacknum",
        "window",
        "lastflags",
        "maxseqtobeacked",
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

    __slots__ = ("down", "up", "mru_syn", "first_rtt")

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
        return retransmission and not flags & _BOGUS_HEADER


# ------------------------------------------------------------------------------ public


def iter_packets(path: PathLike, client_address: str, remote_address: str) -> Iterator[Packet]:
    """Every packet between the two hosts, in file order (a truncated last record is
    skipped silently here; analyse_pcap reports it)."""
    name = os.fspath(path)
    with _mapped(name) as buf:
        for ts_ns, down, orig_len, transport, payload, *_ in _decode(
            name, buf, client_address, remote_address, _ScanTotals()
        ):
            yield Packet(ts_ns / 1e9, "down" if down else "up", orig_len, payload, _TRANSPORT_NAMES[transport])


def _retransmissions(path: PathLike, client_address: str, remote_address: str) -> list[tuple[int, bool]]:
    """(1-based frame number, down) of every retransmission: to compare with tshark
    frame by frame in tests; analyse_pcap runs the same analysis without the list."""
    name = os.fspath(path)
    totals = _ScanTotals()
    found: list[tuple[int, bool]] = []
    conversations: dict[tuple[int, int], _TcpConversation] = {}
    with _mapped(name) as buf:
        yielded = 0
        for ts_ns, down, _o, _t, _p, sport, dport, seq, ack, seglen, flags, window in _decode(
            name, buf, client_address, remote_address, totals
        ):
            yielded += 1
            if flags == _NO_ANALYSIS:
                continue
            key = (dport, sport) if down else (sport, dport)
            conversation = conversations.get(key)
            if conversation is None:
                conversation = conversations[key] = _TcpConversation()
            if conversation.segment(down, ts_ns, seq, ack, seglen, flags, window):
                # Every earlier record was either yielded or counted as "other".
                found.append((yielded + totals.other_packets, down))
    return found


# Per-flow accumulator, a list for speed: wire bytes, payload bytes and packets, each
# [down, up], then the flow's TCP analysis (or None).
_WIRE, _PAYLOAD, _PACKETS, _CONVERSATION = 0, 2, 4, 6


def analyse_pcap(path: PathLike, client_address: str, remote_address: str) -> Analysis:
    """Count wire bytes, payload, packets, retransmissions, payload sizes and flows of
    the traffic between client_address and remote_address in a classic pcap."""
    name = os.fspath(path)
    totals = _ScanTotals()
    flows: dict[int, list] = {}  # key: transport << 32 | client_port << 16 | remote_port
    n_buckets = len(PAYLOAD_BUCKETS) + 1
    histogram = [0] * (2 * n_buckets)  # down buckets, then up buckets
    retransmits = [0, 0]
    first_ts: int | None = None
    last_ts = 0
    buckets = PAYLOAD_BUCKETS

    with _mapped(name) as buf:
        for ts_ns, down, orig_len, transport, payload, sport, dport, seq, ack, seglen, flags, window in _decode(
            name, buf, client_address, remote_address, totals
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
            flow[way] += orig_len
            flow[_PAYLOAD + way] += payload
            flow[_PACKETS + way] += 1
            histogram[way * n_buckets + bisect_left(buckets, payload)] += 1
            last_ts = ts_ns
            if flags != _NO_ANALYSIS:
                conversation = flow[_CONVERSATION]
                if conversation is None:
                    conversation = flow[_CONVERSATION] = _TcpConversation()
                if conversation.segment(down, ts_ns, seq, ack, seglen, flags, window):
                    retransmits[way] += 1

    def per_way(field: int) -> dict[str, int]:
        return {"down": sum(f[field] for f in flows.values()), "up": sum(f[field + 1] for f in flows.values())}

    return Analysis(
        wire_bytes=per_way(_WIRE),
        payload_bytes=per_way(_PAYLOAD),
        packets=per_way(_PACKETS),
        retransmits={"down": retransmits[0], "up": retransmits[1]},
        first_packet_timestamp=None if first_ts is None else first_ts / 1e9,
        last_packet_timestamp=None if first_ts is None else last_ts / 1e9,
        payload_histogram={"down": histogram[:n_buckets], "up": histogram[n_buckets:]},
        flows=_flow_stats(flows),
        other_packets=totals.other_packets,
        truncated_tail=totals.truncated_tail,
    )


def _flow_stats(flows: dict[int, list]) -> tuple[FlowStats, ...]:
    stats = [
        FlowStats(
            transport=_TRANSPORT_NAMES[key >> 32],
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
