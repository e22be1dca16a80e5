"""Read the capture of one transfer: the packets between two hosts, decoded.

The first half of the "analyse" stage (capture -> *read* -> analyse -> result): it reads
what tcpdump or dumpcap wrote (classic pcap or pcapng) with ``mmap`` + ``struct`` in pure
Python: scapy dissects ~8 k packets/s, far too slow for the ~2 M packets of a 2 GiB
transfer; this loop does a few struct unpacks and integer operations per packet and
keeps memory O(flows) (docs/benchmarks.md, "pcap analyser", has the numbers).
analyse.py counts what the decoded packets say.

One loop decodes the frames; a record reader per file format feeds it
``(ts_ns, start, end, orig_len, linktype)``: classic pcap (one link type per file) and
pcapng (one per interface; byte order per section).  Link layers: Ethernet, Linux
SLL/SLL2 and raw IP, with 802.1Q/802.1ad VLAN tags, PPPoE sessions and MPLS label
stacks opened in any of them.

What each packet yields, per way ("down" = remote -> client, "up" = client -> remote),
for the packets whose IP addresses are exactly the two hosts (all others, and non-IP
frames, are only counted in ``ScanTotals.other_packets``):

* the frame as captured: its original length, the record's ``orig_len``, so the snap
  length does not matter;
* payload bytes: the L4 payload from the IP header's lengths (IPv4 total length, IPv6
  payload length or jumbo payload option) minus the IP, IPv6 extension and TCP/UDP
  header lengths, never from the captured length.  A length of 0 (a TSO/GSO/BIG TCP
  super-frame captured before segmentation) or one longer than the frame is taken from
  the frame.  For transport "other" (ICMP, ...) it is the whole IP payload; a later IP
  fragment counts all its bytes as payload of the first fragment's flow;
* for TCP segments the sequence analysis can use: ports, seq, ack, segment length,
  flags and window (``NO_ANALYSIS`` in the flags field otherwise: fragments, short
  segments);
* for a TCP super-frame (offloads: a payload larger than the connection's segment size)
  the wire frames it stands for, see ``_Splitter``.  UDP super-frames (UDP GSO) are not
  split: their segment size (gso_size) is not on the wire.

Packets between the two hosts inside encapsulations the decoder does not open (IP-in-IP,
GRE, UDP tunnels, unknown ethertypes or link types) are counted per kind in
``ScanTotals.undecoded``, so they show up instead of as a silent zero.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import socket
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn, Union

PathLike = Union[str, "os.PathLike[str]"]

__all__ = ["EmptyCapture", "Packet", "PcapError", "TruncatedCapture", "iter_packets"]


class PcapError(Exception):
    """The file cannot be analysed; the message names the file, the problem and the fix."""


class EmptyCapture(PcapError):
    """The file holds no packet record: empty (0 bytes), or only its file header (and, for
    pcapng, other blocks).  Zero counts would read as a transfer that moved nothing."""


class TruncatedCapture(PcapError):
    """The file ends inside a record: the capture was cut short (killed, disk full)."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(message)
        self.offset = offset


@dataclass(frozen=True)
class Packet:
    """One captured packet between the two hosts."""

    timestamp: float  # epoch seconds
    way: str  # "down" if the IP source is remote_address, else "up"
    frame_bytes: int  # original length of the captured link-layer frame = record's orig_len
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
_GZIP_MAGIC = b"\x1f\x8b"
_FILE_HEADER_LEN = 24
# Pages already decoded are handed back to the kernel every this many bytes: the mapped
# file would otherwise show up whole in the process's RSS (though only as page cache).
_RELEASE_EVERY = 32 << 20
# No frame is longer: BIG TCP super-frames reach 512 KiB (gso_max_size 524280), everything
# else is far shorter.  A longer original or captured length means a damaged record.
_MAX_FRAME = 0x80000

# pcapng (https://www.ietf.org/archive/id/draft-ietf-opsawg-pcapng-02.html) block types.
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"  # the Section Header Block's type, a palindrome
_BYTE_ORDER_MAGICS = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
_SHB, _IDB, _PB, _SPB, _EPB = 0x0A0D0D0A, 1, 2, 3, 6
_OPT_END, _IF_TSRESOL, _IF_TSOFFSET = 0, 9, 14

# Link types (https://www.tcpdump.org/linktypes.html).
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW_OLD = 12  # the value OpenBSD-era libpcap wrote for raw IP
LINKTYPE_RAW_OPENBSD = 14  # OpenBSD's DLT_RAW, written as is by some libpcap builds
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
_RAW_IP_LINKTYPES = frozenset((LINKTYPE_RAW_OLD, LINKTYPE_RAW_OPENBSD, LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6))
_SUPPORTED_LINKTYPES = frozenset((LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2, *_RAW_IP_LINKTYPES))

_ETH_IPV4 = 0x0800
_ETH_IPV6 = 0x86DD
_NOT_IP = -1  # a raw-IP frame whose version nibble is neither 4 nor 6
_VLAN_TPIDS = frozenset((0x8100, 0x88A8, 0x9100))  # 802.1Q, 802.1ad (QinQ), old QinQ
_PPPOE_SESSION = 0x8864
_PPP_IPV4, _PPP_IPV6 = 0x0021, 0x0057
_MPLS = frozenset((0x8847, 0x8848))  # unicast, multicast
# Ethertypes the link layer hands over that _open_encapsulations looks inside.
_ENCAPSULATIONS = _VLAN_TPIDS | {_PPPOE_SESSION} | _MPLS

_IPPROTO_TCP = 6
_IPPROTO_UDP = 17
_IPPROTO_NONE = 59  # IPv6 "no next header": a payload length of 0 is then real
# IPv6 extension headers skipped to find the transport header: hop-by-hop, routing,
# destination options, mobility, HIP, shim6 all have the (len + 1) * 8 layout;
# fragment (44) is fixed 8 bytes; AH (51) is (len + 2) * 4.
_IPV6_EXT_8 = frozenset((0, 43, 60, 135, 139, 140))
_IPV6_HOP_BY_HOP = 0
_IPV6_FRAGMENT = 44
_IPV6_AH = 51
_JUMBO_OPTION = 0xC2
_JUMBO_HEADER = 8  # the hop-by-hop header a jumbogram carries only for its option

# Transport codes used internally (index into TRANSPORT_NAMES).
TCP, UDP, OTHER = 0, 1, 2
TRANSPORT_NAMES = ("tcp", "udp", "other")
_SYN = 0x02

_u16 = struct.Struct("!H").unpack_from
_u32 = struct.Struct("!I").unpack_from
_tcp_header = struct.Struct("!HHIIBBH").unpack_from  # sport dport seq ack off flags win
_ports = struct.Struct("!HH").unpack_from
# IPv4 header: version/IHL, total length, fragment field, protocol, source + destination.
_ipv4_header = struct.Struct("!BxH2xHxB2x8s").unpack_from

# What a record reader yields: (ts_ns, start, end, orig_len, linktype), with the
# captured bytes in buf[start:end].
Record = tuple[int, int, int, int, int]


@dataclass(frozen=True)
class _FileHeader:
    record: struct.Struct  # record header: ts_sec, ts_frac, incl_len, orig_len
    ns_per_frac: int
    linktype: int
    snaplen: int


@contextlib.contextmanager
def mapped(path: PathLike) -> Iterator[bytes | mmap.mmap]:
    """The file's bytes, memory-mapped so a multi-GB capture is not read into memory.
    Only a regular file: opened without blocking and refused otherwise, because opening
    a FIFO waits for a writer that may never come (and a device or directory is no
    capture either)."""
    name = os.fspath(path)
    mm: mmap.mmap | None = None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise PcapError(
                    f"{name}: not a regular file but {_file_kind(status.st_mode)}; a capture is read from a "
                    "file: give the path of the pcap or pcapng file (write a pipe's capture to a file first)"
                )
            if status.st_size:  # mmap cannot map an empty file
                mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
                mm.madvise(mmap.MADV_SEQUENTIAL)  # read once, front to back: read ahead
        finally:
            os.close(fd)
    except OSError as e:
        raise PcapError(f"{name}: cannot read the capture ({e.strerror}); check the path and permissions") from e
    if mm is None:
        yield b""
        return
    try:
        yield mm
    finally:
        # A view of the mapping (the fast path's numpy array) may still be referenced by
        # the traceback of an exception on its way out: closing would then replace that
        # exception with a BufferError.  The mapping closes when the view is collected.
        with contextlib.suppress(BufferError):
            mm.close()


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((what for test, what in kinds if test(mode)), "not a file")


class ScanTotals:
    """What the reader and decoder learn besides the packets themselves."""

    __slots__ = ("damaged", "damaged_at", "file_size", "other_packets", "truncated_at", "undecoded")

    def __init__(self) -> None:
        self.other_packets = 0  # records not yielded: other hosts, non-IP, undecoded
        self.truncated_at: int | None = None  # byte offset of a record cut by the end of the file
        self.file_size = 0
        self.undecoded: dict[str, int] = {}  # kind -> host-pair packets not opened
        self.damaged = 0  # records skipped as damaged (DAMAGED_RECORDS says which)
        self.damaged_at: int | None = None  # byte offset of the first of them

    @property
    def truncated_tail(self) -> bool:
        return self.truncated_at is not None


def _records(name: str, buf: bytes | mmap.mmap, totals: ScanTotals) -> Iterator[Record]:
    """The record reader for the file's format; an empty file is an error (no capture
    tool leaves one: it writes its file header before the first packet)."""
    size = len(buf)
    totals.file_size = size
    if size == 0:
        raise EmptyCapture(
            f"{name}: the file is empty (0 bytes), not even a pcap file header: the capture never "
            "started writing (stopped before it started, or no room for it); capture the transfer again"
        )
    magic = bytes(buf[:4])
    if magic == _PCAPNG_MAGIC:
        return _pcapng_records(name, buf, totals)
    if magic.startswith(_GZIP_MAGIC):
        raise PcapError(
            f"{name}: the capture is gzip-compressed; decompress it first "
            f"(`gzip -dc {name} > OUT.pcap`) and analyse OUT.pcap"
        )
    return _classic_records(name, buf, _parse_file_header(name, buf), totals)


def _parse_file_header(name: str, buf: bytes | mmap.mmap) -> _FileHeader:
    size = len(buf)
    magic = bytes(buf[:4])
    if size < _FILE_HEADER_LEN and any(known.startswith(magic) for known in _MAGICS):
        raise PcapError(
            f"{name}: truncated pcap file header ({size} of {_FILE_HEADER_LEN} bytes); "
            "the capture was stopped before it started: capture again"
        )
    if magic not in _MAGICS:
        raise PcapError(
            f"{name}: not a pcap or pcapng file (magic {magic.hex()}); capture with "
            "`tcpdump -w` or dumpcap, or convert with `editcap -F pcap IN OUT.pcap`"
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


def _classic_records(name: str, buf: bytes | mmap.mmap, header: _FileHeader, totals: ScanTotals) -> Iterator[Record]:
    """Every record of a classic pcap, checked; a record cut by the end of the file ends
    the reading with ``totals.truncated_at`` set; a damaged one is skipped and counted
    in ``totals`` (_skip_damaged), or, where the records after it cannot be found, a
    PcapError."""
    unpack_record = header.record.unpack_from
    ns_per_frac = header.ns_per_frac
    frac_limit = 1_000_000_000 // ns_per_frac  # a sub-second field this large is damage
    snaplen = header.snaplen
    caplen_limit = min(snaplen, _MAX_FRAME) if snaplen > 0 else _MAX_FRAME
    max_frame = _MAX_FRAME
    linktype = header.linktype
    size = len(buf)
    offset = _FILE_HEADER_LEN
    released = 0  # pages below this offset were given back (madvise)
    release_at = _RELEASE_EVERY if isinstance(buf, mmap.mmap) else size + 1

    while offset < size:
        try:
            ts_sec, ts_frac, caplen, orig_len = unpack_record(buf, offset)
        except struct.error:  # fewer than 16 bytes left: cheaper than a test per record
            totals.truncated_at = offset
            return
        start = offset + 16
        end = start + caplen
        # One test for the four ways a record can be wrong: it runs every record.
        if caplen > caplen_limit or orig_len > max_frame or ts_frac >= frac_limit or end > size:
            if end > size and caplen <= caplen_limit:
                totals.truncated_at = offset  # its only fault: the file ends in it
                return
            _check_classic_framing(name, offset, caplen, end > size, header)
            _skip_damaged(totals, offset)
            offset = end
            continue
        if offset > release_at and isinstance(buf, mmap.mmap):  # everything before it is decoded
            released = _release(buf, released, offset)
            release_at = released + _RELEASE_EVERY
        offset = end
        yield ts_sec * 1_000_000_000 + ts_frac * ns_per_frac, start, end, orig_len, linktype


def _check_classic_framing(name: str, offset: int, caplen: int, past_end: bool, header: _FileHeader) -> None:
    """Raise for a damaged record whose captured length cannot be trusted to lead to the
    next record: beyond any frame's, or beyond the snap length and past the end of the
    file (no next record to show the length was right)."""
    if caplen > _MAX_FRAME:
        _damaged(name, offset, f"captured length {caplen} exceeds any frame's ({_MAX_FRAME} bytes)")
    if past_end:
        _damaged(
            name,
            offset,
            f"captured length {caplen} exceeds the file's snap length {header.snaplen} and runs past the end of "
            "the file",
        )


def _skip_damaged(totals: ScanTotals, offset: int) -> None:
    """A damaged record: a field is impossible while its framing holds.  An original
    length beyond any frame's (_MAX_FRAME), a captured length beyond the file's (or the
    pcapng interface's) snap length, a classic timestamp fraction of 1 s or more.  tshark
    reads past such a record (the next one starts where its captured length, or its
    pcapng block's length, says), and so does the analyser, deliberately: the record is
    skipped, not counted (what it says cannot be trusted), and the Analysis says how
    many there were and where the first is (``damaged_records``, ``damaged_at``).  The
    counts then miss what those records carried, so a transfer's result treats such a
    capture as one with drops: its wire numbers absent (measure/transfer.py).  A record
    whose framing is lost (a captured length beyond any frame's, or past the end of the
    file while beyond the snap length) still stops the analysis with a PcapError:
    nothing after it can be found."""
    if totals.damaged_at is None:
        totals.damaged_at = offset
    totals.damaged += 1


def _damaged(name: str, offset: int, what: str) -> NoReturn:
    raise PcapError(
        f"{name}: damaged record at byte {offset}: {what}; the file is corrupt "
        "(its counts would be wrong from here on): capture the transfer again"
    )


# A pcapng interface as the packet blocks need it: (link type, snap length, ts_mul, ts_div,
# ts_offset_ns); a timestamp's units * ts_mul // ts_div + ts_offset_ns are nanoseconds
# since the epoch.  A tuple: one unpack per packet.
_Interface = tuple[int, int, int, int, int]


def _pcapng_records(name: str, buf: bytes | mmap.mmap, totals: ScanTotals) -> Iterator[Record]:
    """Every packet record of a pcapng file: Enhanced, obsolete Packet and Simple Packet
    Blocks; Section Header Blocks set the byte order and start a new set of interfaces;
    other blocks are skipped.  A block cut by the end of the file ends the reading with
    ``totals.truncated_at`` set; a malformed one is a PcapError naming its offset; a
    damaged packet block is skipped and counted (_skip_damaged).

    Simple Packet Blocks carry no timestamp and are refused: borrowing the previous
    record's time would make the duration and the retransmission analysis (which reads
    the gaps between segments against 3 ms and 20 ms windows) silently wrong."""
    size = len(buf)
    if size < 28:
        raise PcapError(
            f"{name}: truncated pcapng section header ({size} of 28 bytes); "
            "the capture was stopped before it started: capture again"
        )
    offset = 0
    interfaces: list[_Interface] = []  # of the section
    order = "<"
    block_header = struct.Struct("<II").unpack_from
    epb = struct.Struct("<IIIII").unpack_from
    pb = struct.Struct("<HHIIII").unpack_from
    u32 = struct.Struct("<I").unpack_from
    released = 0
    release_at = _RELEASE_EVERY if isinstance(buf, mmap.mmap) else size + 1
    max_frame = _MAX_FRAME

    while offset < size:
        if offset + 12 > size:
            totals.truncated_at = offset
            return
        block_type, total = block_header(buf, offset)
        if block_type == _SHB:  # the same in either byte order; the section says which follows
            magic = bytes(buf[offset + 8 : offset + 12])
            if magic not in _BYTE_ORDER_MAGICS:
                _malformed(name, offset, f"section header with byte-order magic {magic.hex()}")
            order = _BYTE_ORDER_MAGICS[magic]
            block_header = struct.Struct(order + "II").unpack_from
            epb = struct.Struct(order + "IIIII").unpack_from
            pb = struct.Struct(order + "HHIIII").unpack_from
            u32 = struct.Struct(order + "I").unpack_from
            block_type, total = block_header(buf, offset)
            interfaces = []  # interface ids are per section
        if total < 12 or total % 4:
            _malformed(name, offset, f"block length {total} (not a multiple of 4 of at least 12)")
        block_end = offset + total
        if block_end > size:
            totals.truncated_at = offset
            return
        if u32(buf, block_end - 4)[0] != total:
            _malformed(name, offset, f"block length {total} at its start, {u32(buf, block_end - 4)[0]} at its end")

        if block_type == _EPB and total >= 32:
            ifid, ts_high, ts_low, caplen, orig_len = epb(buf, offset + 8)
        elif block_type == _PB and total >= 32:
            ifid, _drops, ts_high, ts_low, caplen, orig_len = pb(buf, offset + 8)
        else:
            _other_block(name, buf, offset, block_type, block_end, order, interfaces)
            offset = block_end
            continue
        start = offset + 28
        end = start + caplen
        if ifid >= len(interfaces):
            _malformed(name, offset, f"packet on interface {ifid}, which no Interface Description Block defined")
        linktype, snaplen, ts_mul, ts_div, ts_offset_ns = interfaces[ifid]
        if end > block_end - 4:
            _malformed(name, offset, f"captured length {caplen} runs past the block's end")
        if offset > release_at and isinstance(buf, mmap.mmap):
            released = _release(buf, released, offset)
            release_at = released + _RELEASE_EVERY
        if orig_len > max_frame or 0 < snaplen < caplen:  # damaged; the block's length frames it
            _skip_damaged(totals, offset)
            offset = block_end
            continue
        offset = block_end
        yield (ts_high << 32 | ts_low) * ts_mul // ts_div + ts_offset_ns, start, end, orig_len, linktype


def _other_block(
    name: str,
    buf: bytes | mmap.mmap,
    offset: int,
    block_type: int,
    block_end: int,
    order: str,
    interfaces: list[_Interface],
) -> None:
    """Every block but a well-formed packet block: interfaces are kept, the rest skipped."""
    body, body_end = offset + 8, block_end - 4
    if block_type in (_EPB, _PB):
        _malformed(name, offset, "packet block shorter than its fixed fields")
    if block_type == _IDB:
        interfaces.append(_parse_interface(name, buf, offset, body, body_end, order))
    elif block_type == _SPB:
        raise PcapError(
            f"{name}: Simple Packet Block at byte {offset}: it carries no timestamp, and the duration "
            "and the retransmission analysis need one per packet; capture with tcpdump or dumpcap, "
            "which write Enhanced Packet Blocks"
        )
    elif block_type == _SHB:
        major = struct.unpack_from(order + "H", buf, body + 4)[0] if body + 6 <= body_end else 0
        if major != 1:
            _malformed(name, offset, f"section header of pcapng version {major} (1 is known)")


def _parse_interface(
    name: str, buf: bytes | mmap.mmap, offset: int, body: int, body_end: int, order: str
) -> _Interface:
    if body + 8 > body_end:
        _malformed(name, offset, "interface description shorter than its fixed fields")
    linktype, _reserved, snaplen = struct.unpack_from(order + "HHI", buf, body)
    ts_mul, ts_div, ts_offset_ns = 1000, 1, 0  # default resolution: microseconds
    option = struct.Struct(order + "HH").unpack_from
    p = body + 8
    while p + 4 <= body_end:
        code, length = option(buf, p)
        value = p + 4
        if value + length > body_end:
            _malformed(name, offset, f"interface option {code} of {length} bytes runs past the block's end")
        if code == _OPT_END:
            break
        if code == _IF_TSRESOL and length >= 1:
            resolution = buf[value]
            exponent = resolution & 0x7F
            if resolution & 0x80:  # 2^-n seconds per unit
                ts_mul, ts_div = 1_000_000_000, 1 << exponent
            elif exponent <= 9:  # 10^-n seconds per unit
                ts_mul, ts_div = 10 ** (9 - exponent), 1
            else:
                ts_mul, ts_div = 1, 10 ** (exponent - 9)
        elif code == _IF_TSOFFSET and length >= 8:
            ts_offset_ns = struct.unpack_from(order + "q", buf, value)[0] * 1_000_000_000
        p = value + length + (-length % 4)
    return linktype, snaplen, ts_mul, ts_div, ts_offset_ns


def _malformed(name: str, offset: int, what: str) -> NoReturn:
    raise PcapError(
        f"{name}: malformed pcapng block at byte {offset}: {what}; the file is corrupt: capture the transfer again"
    )


def _release(buf: mmap.mmap, released: int, offset: int) -> int:
    """Unmap the whole pages in [released, offset): decoded, not needed again (they stay
    in the page cache for anyone else); returns the new start of what is still mapped."""
    upto = offset - offset % mmap.PAGESIZE
    buf.madvise(mmap.MADV_DONTNEED, released, upto - released)
    return upto


# ------------------------------------------------------------------------ packet decoding


def _address_bytes(name: str, role: str, address: object) -> bytes:
    if isinstance(address, str):
        # A zone ("fe80::1%eth0") is not in any IP header.
        text = address.split("%", 1)[0]
        for family in (socket.AF_INET, socket.AF_INET6):
            try:
                return socket.inet_pton(family, text)
            except (OSError, ValueError):
                continue
    raise PcapError(
        f"{name}: the {role} address {address!r} is not an IPv4 or IPv6 address; "
        "give the two hosts' IP addresses as the capture saw them (not host names)"
    )


def _host_pair(name: str, client: object, remote: object) -> tuple[bytes, bytes]:
    client_b, remote_b = _address_bytes(name, "client", client), _address_bytes(name, "remote", remote)
    if len(client_b) != len(remote_b):
        raise PcapError(
            f"{name}: the client {client!r} and the remote {remote!r} are not of the same address family; "
            "give both hosts' IPv4 or both hosts' IPv6 addresses"
        )
    if client_b == remote_b:
        raise PcapError(
            f"{name}: the client and the remote are the same address ({client!r}): no packet can tell "
            "its way; give the remote host's address, not this host's"
        )
    return client_b, remote_b


# A decoded packet, as a flat tuple because it is built ~2 M times per capture:
# (ts_ns, down, orig_len, transport, payload, sport, dport, seq, ack, seglen, flags,
# window, split); flags is NO_ANALYSIS unless the TCP sequence analysis can use the
# segment; split is None, or (frames, wire bytes, segment size) for a TCP super-frame.
Split = tuple[int, int, int]
Decoded = tuple[int, bool, int, int, int, int, int, int, int, int, int, int, Split | None]
NO_ANALYSIS = -1
# Or'ed into the flags of segments whose TCP header length is below 20: Wireshark still runs the sequence
# analysis on them but stops dissecting before it reports the result.
BOGUS_HEADER = 0x10000


def decode(
    name: str,
    buf: bytes | mmap.mmap,
    client: str,
    remote: str,
    totals: ScanTotals,
    mtu: int | None = None,
) -> Iterator[Decoded]:
    """Yield every packet between the two hosts; count the others in ``totals``.

    The frame and IPv4 paths are written out in one loop on purpose: a function call
    per packet costs as much as the whole IPv4/TCP decode (measured), and this loop
    runs millions of times per capture.  Rarer paths (IPv6, encapsulations, frames of
    other hosts, super-frames) are helper functions.
    """
    client_b, remote_b = _host_pair(name, client, remote)
    records = _records(name, buf, totals)
    v4 = len(client_b) == 4
    pair_down, pair_up = remote_b + client_b, client_b + remote_b
    others = _Others(buf, pair_down, pair_up, v4, totals)
    count_other = others.count
    splitter = _Splitter(mtu, v4)
    # A TCP packet whose IP length is at most this is no super-frame (see _Splitter).
    split_floor = splitter.floor
    fragments: dict[tuple[bool, int, int], tuple[int, int]] = {}  # first-fragment ports
    u16, tcp_header, ports, ipv4_header = _u16, _tcp_header, _ports, _ipv4_header
    encapsulations = _ENCAPSULATIONS

    for ts_ns, start, end, orig_len, linktype in records:
        # --- link layer -> (l3 start, ethertype)
        if linktype == LINKTYPE_ETHERNET:
            if start + 14 > end:
                totals.other_packets += 1
                continue
            ethertype = u16(buf, start + 12)[0]
            l3 = start + 14
        elif linktype == LINKTYPE_LINUX_SLL:
            if start + 16 > end:
                totals.other_packets += 1
                continue
            ethertype = u16(buf, start + 14)[0]
            l3 = start + 16
        elif linktype == LINKTYPE_LINUX_SLL2:
            if start + 20 > end:
                totals.other_packets += 1
                continue
            ethertype = u16(buf, start)[0]
            l3 = start + 20
        elif linktype in _RAW_IP_LINKTYPES:  # the version nibble says which
            l3 = start
            version = buf[start] >> 4 if start < end else 0
            ethertype = _ETH_IPV4 if version == 4 else _ETH_IPV6 if version == 6 else _NOT_IP
        else:  # a pcapng interface of a link type not decoded
            others.count_link(start, end, linktype)
            continue
        # Where the network layer's packet ends at the latest: the frame's end on the wire,
        # or a PPPoE session's own length (what follows is padding, as tshark reads it).
        ip_end = start + orig_len
        if ethertype in encapsulations:
            l3, ethertype, ip_end = _open_encapsulations(buf, l3, ethertype, end, ip_end)

        # --- network layer
        if ethertype == _ETH_IPV4:
            if not v4 or l3 + 20 > end:
                count_other(start, end, l3, ethertype)
                continue
            version_ihl, total_length, frag, proto, addresses = ipv4_header(buf, l3)
            if addresses == pair_down and version_ihl >> 4 == 4:
                down = True
            elif addresses == pair_up and version_ihl >> 4 == 4:
                down = False
            else:
                count_other(start, end, l3, ethertype)
                continue
            ihl = (version_ihl & 0x0F) * 4
            if ihl < 20:  # bogus header: count the packet, but do not trust what follows
                ihl, proto = 20, -1
            # 0: a TSO/BIG TCP frame captured before segmentation; longer than the frame
            # (or than a PPPoE session's length): a damaged length that would invent
            # payload.  Either way the frame (or the encapsulation) says.
            on_wire = ip_end - l3
            if total_length > on_wire or not total_length:
                total_length = on_wire
            l4 = l3 + ihl
            l4_length = total_length - ihl
            frag_offset = frag & 0x1FFF
            fragment_key = (down, u16(buf, l3 + 4)[0], proto) if frag & 0x3FFF else None
        elif ethertype == _ETH_IPV6:
            if v4 or l3 + 40 > end or buf[l3] >> 4 != 6:
                count_other(start, end, l3, ethertype)
                continue
            addresses = buf[l3 + 8 : l3 + 40]
            if addresses == pair_down:
                down = True
            elif addresses == pair_up:
                down = False
            else:
                count_other(start, end, l3, ethertype)
                continue
            proto, l4, l4_length, frag_offset, fragment_key = _ipv6_transport(buf, l3, end, ip_end, down)
            total_length = l4 - l3 + l4_length
        else:
            count_other(start, end, l3, ethertype)
            continue

        if l4_length < 0:
            l4_length = 0

        # --- transport layer
        if frag_offset:  # a later fragment: all of it is payload, ports from the first
            sport, dport = fragments.get(fragment_key, (0, 0))  # type: ignore[arg-type]
            transport = TCP if proto == _IPPROTO_TCP else UDP if proto == _IPPROTO_UDP else OTHER
            yield ts_ns, down, orig_len, transport, l4_length, sport, dport, 0, 0, 0, NO_ANALYSIS, 0, None
        elif proto == _IPPROTO_TCP and l4 + 20 <= end:
            sport, dport, seq, ack, data_offset, flags, window = tcp_header(buf, l4)
            tcp_length = (data_offset >> 4) * 4
            seglen = l4_length - tcp_length
            if fragment_key is not None:
                _remember_fragment(fragments, fragment_key, sport, dport)
                # The segment spans fragments; Wireshark analyses only the reassembled one.
                yield ts_ns, down, orig_len, TCP, max(seglen, 0), sport, dport, 0, 0, 0, NO_ANALYSIS, 0, None
            elif seglen < 0:  # "short segment": Wireshark computes no length, no analysis
                yield ts_ns, down, orig_len, TCP, 0, sport, dport, 0, 0, 0, NO_ANALYSIS, 0, None
            else:
                split = None
                if flags & _SYN:
                    split_floor = splitter.syn(buf, l4, tcp_length, end, down, sport, dport)
                elif total_length > split_floor:
                    split = splitter.split(buf, start, l3, l4, tcp_length, seglen, orig_len, down, sport, dport)
                if tcp_length < 20:
                    flags |= BOGUS_HEADER
                yield ts_ns, down, orig_len, TCP, seglen, sport, dport, seq, ack, seglen, flags, window, split
        elif proto == _IPPROTO_UDP and l4 + 8 <= end:
            sport, dport = ports(buf, l4)
            if fragment_key is not None:
                _remember_fragment(fragments, fragment_key, sport, dport)
            yield ts_ns, down, orig_len, UDP, max(l4_length - 8, 0), sport, dport, 0, 0, 0, NO_ANALYSIS, 0, None
        else:
            yield ts_ns, down, orig_len, OTHER, l4_length, 0, 0, 0, 0, 0, NO_ANALYSIS, 0, None


def _open_encapsulations(
    buf: bytes | mmap.mmap, l3: int, ethertype: int, end: int, ip_end: int
) -> tuple[int, int, int]:
    """(l3 start, ethertype, where the packet at l3 ends at the latest) inside any
    802.1Q/802.1ad tags (QinQ stacks them), PPPoE session header and MPLS label stack, in
    any order; the outermost one not opened (PPP other than IP, MPLS over something other
    than IP) is returned as found.  ip_end comes in as the frame's end on the wire; a
    PPPoE session header's length (the PPP protocol field and what follows) bounds it,
    as tshark bounds the IP packet by it: bytes after it are padding, not payload."""
    while True:
        if ethertype in _VLAN_TPIDS:
            if l3 + 4 > end:
                return l3, ethertype, ip_end
            ethertype = _u16(buf, l3 + 2)[0]  # after 2 bytes of TCI
            l3 += 4
        elif ethertype == _PPPOE_SESSION:
            # 6 bytes of PPPoE (version/type, code, session, length), then PPP's protocol.
            if l3 + 8 > end:
                return l3, ethertype, ip_end
            protocol = _u16(buf, l3 + 6)[0]
            if protocol == _PPP_IPV4:
                ethertype = _ETH_IPV4
            elif protocol == _PPP_IPV6:
                ethertype = _ETH_IPV6
            else:
                return l3, ethertype, ip_end
            ip_end = min(ip_end, l3 + 6 + _u16(buf, l3 + 4)[0])
            l3 += 8
        elif ethertype in _MPLS:
            # 4-byte label stack entries; the bottom-of-stack bit is the low bit of the third byte.
            p = l3
            while p + 4 <= end and not buf[p + 2] & 1:
                p += 4
            p += 4
            if p >= end:
                return l3, ethertype, ip_end
            version = buf[p] >> 4  # MPLS does not say what it carries: IP says by its version
            if version == 4:
                ethertype = _ETH_IPV4
            elif version == 6:
                ethertype = _ETH_IPV6
            else:
                return l3, ethertype, ip_end  # a pseudowire (control word, Ethernet), not IP
            l3 = p
        else:
            return l3, ethertype, ip_end


def _ipv6_transport(
    buf: bytes | mmap.mmap, l3: int, end: int, wire_end: int, down: bool
) -> tuple[int, int, int, int, tuple[bool, int, int] | None]:
    """Walk the IPv6 extension headers: (proto, l4 start, l4 length, frag offset, frag key).
    wire_end is where the packet ends at the latest (the frame's end on the wire, or a
    PPPoE session's length); the payload ends where the IPv6 lengths say, but never
    beyond it."""
    payload_length = _u16(buf, l3 + 4)[0]
    proto = buf[l3 + 6]
    if payload_length:
        limit = l3 + 40 + payload_length
    elif proto == _IPPROTO_NONE:
        limit = l3 + 40
    else:
        # A jumbogram (BIG TCP): the length is in the hop-by-hop jumbo option; a 0 without
        # it is a super-frame whose length only the frame knows.
        jumbo = _jumbo_length(buf, l3, end)
        limit = l3 + 40 + jumbo if jumbo is not None else wire_end
    if limit > wire_end:
        limit = wire_end
    p = l3 + 40
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


def _jumbo_length(buf: bytes | mmap.mmap, l3: int, end: int) -> int | None:
    """The Jumbo Payload option's length (RFC 2675: the bytes after the fixed IPv6
    header) if the packet's hop-by-hop header holds one, else None."""
    hop_by_hop = l3 + 40
    if buf[l3 + 6] != _IPV6_HOP_BY_HOP or hop_by_hop + 2 > end:
        return None
    p, options_end = hop_by_hop + 2, min(hop_by_hop + (buf[hop_by_hop + 1] + 1) * 8, end)
    while p < options_end:
        option = buf[p]
        if option == 0:  # Pad1: a single byte
            p += 1
            continue
        if p + 2 > options_end:
            return None
        length = buf[p + 1]
        if option == _JUMBO_OPTION and length == 4 and p + 6 <= options_end:
            return int(_u32(buf, p + 2)[0])
        p += 2 + length
    return None


def _remember_fragment(
    fragments: dict[tuple[bool, int, int], tuple[int, int]], key: tuple[bool, int, int], sport: int, dport: int
) -> None:
    # Bounded: IP IDs recycle, and only fragments in flight need their first one's ports.
    if len(fragments) > 4096:
        fragments.clear()
    fragments[key] = (sport, dport)


class _Splitter:
    """The wire frames of a TCP super-frame (TSO/GSO before the NIC cuts it, GRO after
    the receiver merged it, BIG TCP up to 512 KiB).

    The segment size per direction of a conversation is the MSS the *other* side
    announced in its SYN or SYN/ACK, minus this frame's TCP option bytes (what each
    segment carries again: Linux's 1448 of 1460 with timestamps); without a SYN, the
    link MTU minus the IP header (with extension headers, without a jumbogram's
    hop-by-hop header) and the TCP header; without an MTU, 1500.  A frame with more
    payload than that stands for ceil(payload / size) frames, each with this frame's
    headers: link layer, IP (without an IPv6 jumbogram's 8-byte hop-by-hop header, which
    real segments do not carry) and TCP.  Its wire bytes are the captured frame's (less
    the jumbogram's header) plus those headers once for every further segment.  Not
    the record's length less the payload per segment: a record longer than its IP
    packet (a trailer, or a bogus original length such as a 262,144-byte snap length
    written as the frame's) would add that excess to every segment; it is the captured
    frame's, counted once.

    ``floor`` keeps the decode loop's test to one comparison per segment: no segment
    whose IP length is at most the smallest MTU or MSS + 40 (IPv6: + 60) seen can be
    a super-frame, whichever rule applies to it.
    """

    __slots__ = ("floor", "ip_base", "mss", "mtu")

    def __init__(self, mtu: int | None, v4: bool) -> None:
        self.mtu = 1500 if mtu is None else mtu
        self.ip_base = 20 if v4 else 40  # the shortest IP header of the family
        self.floor = self.mtu
        # (client port << 16 | remote port) << 1 | (0 down, 1 up) -> MSS its receiver announced
        self.mss: dict[int, int] = {}

    def syn(
        self, buf: bytes | mmap.mmap, l4: int, tcp_length: int, end: int, down: bool, sport: int, dport: int
    ) -> int:
        """Remember the MSS option of a SYN or SYN/ACK; returns the new floor."""
        p, options_end = l4 + 20, min(l4 + tcp_length, end)
        while p < options_end:
            kind = buf[p]
            if kind == 0:  # end of options
                break
            if kind == 1:  # no-operation (padding)
                p += 1
                continue
            if p + 2 > options_end or buf[p + 1] < 2:
                break
            if kind == 2 and buf[p + 1] == 4 and p + 4 <= options_end:
                mss = _u16(buf, p + 2)[0]
                if mss:
                    # It limits what the other side sends: the opposite way's segments.
                    conversation = dport << 16 | sport if down else sport << 16 | dport
                    self.mss[conversation << 1 | (1 if down else 0)] = mss
                    self.floor = min(self.floor, mss + 20 + self.ip_base)
                break
            p += buf[p + 1]
        return self.floor

    def split(
        self,
        buf: bytes | mmap.mmap,
        start: int,
        l3: int,
        l4: int,
        tcp_length: int,
        seglen: int,
        orig_len: int,
        down: bool,
        sport: int,
        dport: int,
    ) -> Split | None:
        """(frames, wire bytes, segment size) if the segment is a super-frame, else None."""
        if tcp_length < 20:
            return None
        conversation = dport << 16 | sport if down else sport << 16 | dport
        jumbo = 0
        if buf[l3] >> 4 == 6 and not _u16(buf, l3 + 4)[0] and _jumbo_length(buf, l3, l4) is not None:
            jumbo = _JUMBO_HEADER
        mss = self.mss.get(conversation << 1 | (0 if down else 1))
        # What the receiver takes, less the options each segment repeats; else what the link takes.
        size = mss - (tcp_length - 20) if mss is not None else self.mtu - (l4 - l3 - jumbo) - tcp_length
        if size <= 0 or seglen <= size:
            return None
        frames = -(-seglen // size)
        headers = l4 - start - jumbo + tcp_length  # link layer, IP and TCP: what every segment carries
        return frames, orig_len - jumbo + (frames - 1) * headers, size


# Outer IP protocols that carry the host pair's packets inside, by name.
_TUNNEL_KINDS = {4: "IPv4-in-IP", 41: "IPv6-in-IP", 47: "GRE", 17: "UDP tunnel", 115: "L2TP"}
# ICMP errors quote the header of the packet they answer: they contain the pair's
# addresses, but are not packets between the hosts.
_ICMP = frozenset((1, 58))


class _Others:
    """Counts the records not between the two hosts; the rare ones that carry a packet
    between them inside something not opened (the pair's source + destination bytes
    where an IP header of the family has them) also by kind in ``totals.undecoded``."""

    __slots__ = ("back", "buf", "pairs", "totals", "version")

    def __init__(self, buf: bytes | mmap.mmap, pair_down: bytes, pair_up: bytes, v4: bool, totals: ScanTotals) -> None:
        self.buf = buf
        self.pairs = (pair_down, pair_up)
        self.back, self.version = (12, 4) if v4 else (8, 6)  # source address offset, version
        self.totals = totals

    def count(self, start: int, end: int, l3: int, ethertype: int) -> None:
        """ethertype is what the link layer (after any encapsulation opened) says is at l3."""
        self.totals.other_packets += 1
        if self._holds_pair(start, end):
            self._add(self._kind(end, l3, ethertype))

    def count_link(self, start: int, end: int, linktype: int) -> None:
        """A frame of a link layer not decoded (a pcapng interface's)."""
        self.totals.other_packets += 1
        if self._holds_pair(start, end):
            self._add(f"link type {linktype}")

    def _add(self, kind: str | None) -> None:
        if kind is not None:
            self.totals.undecoded[kind] = self.totals.undecoded.get(kind, 0) + 1

    def _holds_pair(self, start: int, end: int) -> bool:
        buf, back, version = self.buf, self.back, self.version
        for pair in self.pairs:
            found = buf.find(pair, start + back, end)
            while found != -1:
                if buf[found - back] >> 4 == version:
                    return True
                found = buf.find(pair, found + 1, end)
        return False

    def _kind(self, end: int, l3: int, ethertype: int) -> str | None:
        buf = self.buf
        if ethertype == _ETH_IPV4 and l3 + 20 <= end and buf[l3] >> 4 == 4:
            proto = buf[l3 + 9]
        elif ethertype == _ETH_IPV6 and l3 + 40 <= end and buf[l3] >> 4 == 6:
            proto = _ipv6_transport(buf, l3, end, end, False)[0]
        elif ethertype == _PPPOE_SESSION and l3 + 8 <= end:
            return f"PPPoE, PPP protocol 0x{_u16(buf, l3 + 6)[0]:04x}"
        elif ethertype in _MPLS:
            return "MPLS, not over IP"
        elif ethertype in (_ETH_IPV4, _ETH_IPV6, _NOT_IP):
            return "not IP"
        else:
            return f"ethertype 0x{ethertype:04x}"
        if proto in _ICMP:
            return None
        return _TUNNEL_KINDS.get(proto, f"IP protocol {proto}")


def iter_packets(path: PathLike, client_address: str, remote_address: str) -> Iterator[Packet]:
    """Every packet between the two hosts, in file order, as captured (a super-frame is
    one Packet; analyse_pcap splits them); a truncated last record is skipped silently
    here: analyse_pcap reports it."""
    name = os.fspath(path)
    with mapped(name) as buf:
        for ts_ns, down, orig_len, transport, payload, *_ in decode(
            name, buf, client_address, remote_address, ScanTotals()
        ):
            yield Packet(ts_ns / 1e9, "down" if down else "up", orig_len, payload, TRANSPORT_NAMES[transport])
