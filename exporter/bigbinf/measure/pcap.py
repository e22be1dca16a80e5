"""Read a classic pcap of one transfer: the packets between two hosts, decoded.

The first half of the "analyse" stage (capture -> *read* -> analyse -> result): it reads
what tcpdump wrote (``tcpdump -s 128 -w F host A and host B``) with ``mmap`` + ``struct``
in pure Python: scapy dissects ~8 k packets/s, far too slow for the ~2 M packets of a
2 GiB transfer; this loop does a few struct unpacks and integer operations per packet and
keeps memory O(flows) (docs/benchmarks.md, "pcap analyser", has the numbers).
analyse.py counts what the decoded packets say.

What each packet yields, per way ("down" = remote -> client, "up" = client -> remote),
for the packets whose IP addresses are exactly the two hosts (all others, and non-IP
frames, are only counted in ``ScanTotals.other_packets``):

* wire bytes: the original length of each link-layer frame, the pcap record's
  ``orig_len``, so the snap length does not matter;
* payload bytes: the L4 payload from the IP header's lengths (IPv4 total length, IPv6
  payload length) minus the IP, IPv6 extension and TCP/UDP header lengths, never from
  the captured length.  For transport "other" (ICMP, ...) it is the whole IP payload;
  a later IP fragment counts all its bytes as payload of the first fragment's flow;
* for TCP segments the sequence analysis can use: ports, seq, ack, segment length,
  flags and window (``NO_ANALYSIS`` in the flags field otherwise: fragments, short
  segments).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["Packet", "PcapError", "iter_packets"]


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
_SUPPORTED_LINKTYPES = (LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, *_RAW_IP_LINKTYPES)

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

# Transport codes used internally (index into TRANSPORT_NAMES).
TCP, UDP, OTHER = 0, 1, 2
TRANSPORT_NAMES = ("tcp", "udp", "other")

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
def mapped(path: PathLike) -> Iterator[bytes | mmap.mmap]:
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


class ScanTotals:
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
# window); flags is NO_ANALYSIS unless the TCP sequence analysis can use the segment.
Decoded = tuple[int, bool, int, int, int, int, int, int, int, int, int, int]
NO_ANALYSIS = -1
# Or'ed into the flags of segments whose TCP header length is below 20: Wireshark still runs the sequence
# analysis on them but stops dissecting before it reports the result.
BOGUS_HEADER = 0x10000


def decode(name: str, buf: bytes | mmap.mmap, client: str, remote: str, totals: ScanTotals) -> Iterator[Decoded]:
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
        if offset > release_at and isinstance(buf, mmap.mmap):  # everything before it is decoded
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
            transport = TCP if proto == _IPPROTO_TCP else UDP if proto == _IPPROTO_UDP else OTHER
            yield ts_ns, down, orig_len, transport, l4_length, sport, dport, 0, 0, 0, NO_ANALYSIS, 0
        elif proto == _IPPROTO_TCP and l4 + 20 <= end:
            sport, dport, seq, ack, data_offset, flags, window = tcp_header(buf, l4)
            tcp_length = (data_offset >> 4) * 4
            seglen = l4_length - tcp_length
            if fragment_key is not None:
                _remember_fragment(fragments, fragment_key, sport, dport)
                # The segment spans fragments; Wireshark analyses only the reassembled one.
                yield ts_ns, down, orig_len, TCP, max(seglen, 0), sport, dport, 0, 0, 0, NO_ANALYSIS, 0
            elif seglen < 0:  # "short segment": Wireshark computes no length, no analysis
                yield ts_ns, down, orig_len, TCP, 0, sport, dport, 0, 0, 0, NO_ANALYSIS, 0
            else:
                if tcp_length < 20:
                    flags |= BOGUS_HEADER
                yield ts_ns, down, orig_len, TCP, seglen, sport, dport, seq, ack, seglen, flags, window
        elif proto == _IPPROTO_UDP and l4 + 8 <= end:
            sport, dport = ports(buf, l4)
            if fragment_key is not None:
                _remember_fragment(fragments, fragment_key, sport, dport)
            yield ts_ns, down, orig_len, UDP, max(l4_length - 8, 0), sport, dport, 0, 0, 0, NO_ANALYSIS, 0
        else:
            yield ts_ns, down, orig_len, OTHER, l4_length, 0, 0, 0, 0, 0, NO_ANALYSIS, 0


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


def iter_packets(path: PathLike, client_address: str, remote_address: str) -> Iterator[Packet]:
    """Every packet between the two hosts, in file order (a truncated last record is
    skipped silently here; analyse_pcap reports it)."""
    name = os.fspath(path)
    with mapped(name) as buf:
        for ts_ns, down, orig_len, transport, payload, *_ in decode(
            name, buf, client_address, remote_address, ScanTotals()
        ):
            yield Packet(ts_ns / 1e9, "down" if down else "up", orig_len, payload, TRANSPORT_NAMES[transport])
