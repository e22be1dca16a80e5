"""The analyser's compiled fast path: the same counts and TCP retransmissions as the
pure-Python path (pcap.decode + analyse._TcpConversation), for the common capture.

Why compiled (numba) and not vectorised numpy: the two costly steps are sequential by
nature.  A classic pcap's record offsets are a chain (each record's length says where
the next starts), and the retransmission test is a state machine whose every step reads
the state the previous segment of either direction left (next expected sequence number,
last ACK and its time, duplicate-ACK count, the keep-alive and zero-window flags).
numpy can vectorise neither exactly: the offsets still need a sequential walk (in
Python ~0.4 us a record, alone near the 2 M packets/s goal), and running the state
machine per flow gains nothing on a bulk transfer, which is one flow.  Compiled, one
loop over the mapped file does both at over 20 M packets/s with O(flows) memory, and
releases the GIL meanwhile (nogil), so the exporter's HTTP threads keep serving.
docs/architecture.md weighs numba's size and warm-up.

What the fast path handles: classic pcap (either byte order, micro- or nanosecond) and
pcapng's Enhanced Packet Blocks (the caller reads the other blocks: sections,
interfaces, statistics; decimal time resolutions); Ethernet, Linux SLL/SLL2 and raw
IP; IPv4 and IPv6 without extension headers; TCP, UDP and other transports; TCP
super-frames split by MSS as pcap._Splitter does; a file cut short (``truncated_at``);
damaged records whose framing holds, skipped and counted (pcap._skip_damaged).
On anything else it stops and says so (``BAIL``), and the caller runs the exact
pure-Python path on the whole file: obsolete pcapng Packet Blocks, binary time
resolutions, timestamps beyond 2^62 ns, VLAN/PPPoE/MPLS, IPv4 fragments, IPv6 extension
headers or jumbograms, a malformed block or a record whose framing is lost (the Python
path raises the error that names its offset), and a frame not between the hosts that
contains the host pair's addresses (the Python path names its encapsulation).  The two
must never differ: where 64-bit arithmetic could (a pcapng timestamp of 2^63 ns and
more would wrap negative), the fast path bails rather than approximates.  Every rule
below mirrors a line of pcap.decode, pcap._classic_records/_pcapng_records or
analyse._TcpConversation.segment; the comments there say why each rule is what it is.

State lives in arrays the caller owns, so the file is scanned in bounded chunks (pages
handed back between them) and the per-flow state carries across chunks: memory is
O(flows), never O(packets).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

_F = TypeVar("_F", bound=Callable[..., Any])


def _compiled(function: _F) -> _F:
    # cache=True: the machine code is kept beside the module (or in numba's user cache
    # where that directory is read-only), so only the first process after an install pays the
    # compilation (seconds); later ones load it in a fraction of a second.
    try:
        compiled = numba.njit(cache=True, nogil=True)(function)
    except RuntimeError:  # no writable cache location at all (read-only install, no home)
        compiled = numba.njit(nogil=True)(function)  # compiled in every process instead
    return cast(_F, compiled)


Int64s = npt.NDArray[np.int64]
# Bytes read from the file widened to signed 64 bits before any arithmetic: in numba,
# int() of a uint8 is unsigned, and unsigned | signed is a float.  Typed as returning
# int for mypy (numba sees np.int64 itself).
_int64 = cast(Callable[[Any], int], np.int64)
# The compiled functions' array parameters: numba reads their elements as machine
# integers, while numpy's stubs would type every element as a numpy scalar that the
# integer arithmetic below would have to convert on every line.
Array = Any

# What scan() returns, with the offset it stopped at.
DONE = 0  # the end of the file (or a record cut by it: G_TRUNCATED_AT)
CHUNK = 1  # reached the chunk's end: release the pages read and call again
BAIL = 2  # something only the pure-Python path handles: rerun the file there
GROW = 3  # the flow table is full: grow it and call again from the same offset
FRAMES_FULL = 4  # the retransmission frame list is full: drain it and call again
BLOCK = 5  # a pcapng block other than a well-formed Enhanced Packet Block: the caller reads it

# Indices into the scalar state (int64 array g).
G_OTHER = 0  # records not between the hosts
G_HAVE_FIRST = 1
G_FIRST_TS = 2
G_LAST_TS = 3
G_RETRANSMITS = 4  # + way
G_SPLIT_WIRE = 6  # + way: bytes splitting super-frames added
G_SPLIT_PACKETS = 8  # + way
G_SUPERFRAMES = 10  # + way
G_FLOOR = 12  # pcap._Splitter.floor
G_RECORDS = 13  # records read: the frame number of the last one
G_TRUNCATED_AT = 14  # -1 or the offset of a record the end of the file cut
G_FLOWS = 15  # flows in use
G_FRAMES = 16  # retransmission frames in the frame list
G_DAMAGED = 17  # records skipped as damaged (pcap._skip_damaged)
G_DAMAGED_AT = 18  # the offset of the first of them
G_SIZE = 19

# Columns of the per-flow state (int64 array flows[flow, column]); "+ way" is 0 down, 1 up.
F_KEY = 0  # transport << 32 | client port << 16 | remote port, as analyse.py's flow key
F_WIRE = 1  # + way
F_PAYLOAD = 3  # + way
F_PACKETS = 5  # + way
F_MSS = 7  # + way: the MSS that limits this way's segments (announced by the other way's SYN); 0 none
F_HALF = 9  # + way * H_SIZE: the direction's _TcpHalf
H_BASE_SET = 0
H_BASE_SEQ = 1
H_NEXTSEQ = 2
H_NEXTSEQTIME = 3
H_LASTACK = 4
H_LASTACKTIME = 5
H_DUPACKNUM = 6
H_WINDOW = 7
H_LASTFLAGS = 8
H_MAXSEQTOBEACKED = 9
H_SIZE = 10
F_MRU_SYN = F_HALF + 2 * H_SIZE
F_FIRST_RTT = F_MRU_SYN + 1
F_SIZE = F_FIRST_RTT + 1

_NO_WINDOW = 0xFFFFFFFF  # _TcpHalf.window before any is seen (G_MAXUINT32)
_M32 = 0xFFFFFFFF
_HALF = 0x80000000
_FIN, _SYN, _RST, _ACK = 0x01, 0x02, 0x04, 0x10
_KEEP_ALIVE, _ZERO_WINDOW_PROBE = 0x1, 0x2
_FAST_RETRANSMIT_WINDOW_NS = 20_000_000
_DEFAULT_OOO_THRESHOLD_NS = 3_000_000
_DUPACK_PARKED = 0xFFFFFFFF
MAX_FRAME = 0x80000  # pcap._MAX_FRAME
_TCP, _UDP, _OTHER = 0, 1, 2
# Link types, as in pcap.py.
_ETHERNET, _SLL, _SLL2 = 1, 113, 276
_RAW_IP = (12, 14, 101, 228, 229)  # pcap._RAW_IP_LINKTYPES
_EPB = 6
# A pcapng interface, a row of the interfaces array: link type, snap length, and the
# timestamp's units * ts_mul // ts_div + ts_offset_ns (ts_mul 0: not representable in
# 64 bits, the Python path reads that file).
I_LINKTYPE, I_SNAPLEN, I_TS_MUL, I_TS_DIV, I_TS_OFFSET = 0, 1, 2, 3, 4
_TS_LIMIT = 1 << 62


def new_state(mtu: int) -> Int64s:
    g = np.zeros(G_SIZE, dtype=np.int64)
    g[G_FLOOR] = mtu
    g[G_TRUNCATED_AT] = -1
    return g


def new_flows(capacity: int) -> Int64s:
    return np.zeros((capacity, F_SIZE), dtype=np.int64)


def new_table(slots: int) -> Int64s:
    """An open-addressed hash table of flow indices (-1 empty); slots a power of 2."""
    return np.full(slots, -1, dtype=np.int64)


@_compiled
def _slot(key: int, mask: int) -> int:
    return ((key & 0xFFFF) * 0x9E37 ^ ((key >> 16) & 0xFFFF) * 0x85EB ^ (key >> 32) * 0xC2B3) & mask


@_compiled
def rehash(flows: Array, count: int, table: Array) -> None:
    mask = len(table) - 1
    for f in range(count):
        s = _slot(flows[f, F_KEY], mask)
        while table[s] != -1:
            s = (s + 1) & mask
        table[s] = f


@_compiled
def _u16(buf: Array, i: int) -> int:
    return (_int64(buf[i]) << 8) | _int64(buf[i + 1])


@_compiled
def _u32(buf: Array, i: int) -> int:
    return (_int64(buf[i]) << 24) | (_int64(buf[i + 1]) << 16) | (_int64(buf[i + 2]) << 8) | _int64(buf[i + 3])


@_compiled
def _u32_le(buf: Array, i: int) -> int:
    return (_int64(buf[i + 3]) << 24) | (_int64(buf[i + 2]) << 16) | (_int64(buf[i + 1]) << 8) | _int64(buf[i])


@_compiled
def _read32(buf: Array, i: int, big_endian: bool) -> int:
    return _u32(buf, i) if big_endian else _u32_le(buf, i)


@_compiled
def _holds_pair(buf: Array, start: int, end: int, pair_down: Array, pair_up: Array, back: int, version: int) -> bool:
    """pcap._Others._holds_pair: the pair's source + destination bytes where an IP header
    of the family has them (the version nibble ``back`` bytes before)."""
    n = len(pair_down)
    for which in range(2):
        pair = pair_down if which == 0 else pair_up
        first = pair[0]
        for i in range(start + back, end - n + 1):
            if buf[i] != first:
                continue
            same = True
            for j in range(1, n):
                if buf[i + j] != pair[j]:
                    same = False
                    break
            if same and buf[i - back] >> 4 == version:
                return True
    return False


@_compiled
def _same(buf: Array, at: int, pair: Array) -> bool:
    for j in range(len(pair)):  # noqa: SIM110 (a loop, not all(): numba compiles no generators)
        if buf[at + j] != pair[j]:
            return False
    return True


@_compiled
def _bucket(bucket_of: Array, payload: int) -> int:
    """analyse._BUCKET_OF's bucket; above the table (65535), the last bucket, as
    analyse.py's IndexError branch and its bisect."""
    if payload < len(bucket_of):
        return _int64(bucket_of[payload])
    return _int64(bucket_of[len(bucket_of) - 1]) + 1


@_compiled
def scan(
    buf: Array,
    offset: int,
    stop: int,
    big_endian: bool,
    ns_per_frac: int,
    frac_limit: int,
    caplen_limit: int,
    linktype: int,
    pcapng: bool,
    interfaces: Array,
    n_interfaces: int,
    pair_down: Array,
    pair_up: Array,
    mtu: int,
    bucket_of: Array,
    g: Array,
    flows: Array,
    table: Array,
    histograms: Array,
    frames: Array,
    collect_frames: bool,
) -> tuple[int, int]:
    """Analyse the records from ``offset`` (a record or block boundary) until one starts
    at or after ``stop``; returns (status, offset to resume at).  A classic pcap's records
    (big_endian, ns_per_frac, frac_limit, caplen_limit, linktype), or a pcapng's
    Enhanced Packet Blocks (big_endian is the section's byte order; interfaces[:n_interfaces]
    the section's interfaces)."""
    size = len(buf)
    v4 = len(pair_down) == 8  # source + destination
    ip_base = 20 if v4 else 40
    back = 12 if v4 else 8
    version = 4 if v4 else 6
    mask = len(table) - 1
    capacity = flows.shape[0]
    while offset < stop:
        # Room for one more flow and one more frame before touching the record, so a
        # GROW or FRAMES_FULL resumes at this record with nothing half done.
        if g[G_FLOWS] + 1 > capacity or (g[G_FLOWS] + 1) * 2 > len(table):
            return GROW, offset
        if collect_frames and g[G_FRAMES] >= len(frames):
            return FRAMES_FULL, offset

        if pcapng:
            # --- an Enhanced Packet Block (pcap._pcapng_records); any other block, or
            # anything malformed, goes to the caller, which reads it or bails.
            if offset + 12 > size:
                g[G_TRUNCATED_AT] = offset
                return DONE, offset
            total = _read32(buf, offset + 4, big_endian)
            if _read32(buf, offset, big_endian) != _EPB or total < 32 or total % 4:
                return BLOCK, offset
            block_end = offset + total
            if block_end > size:
                g[G_TRUNCATED_AT] = offset
                return DONE, offset
            ifid, caplen, orig_len = (
                _read32(buf, offset + 8, big_endian),
                _read32(buf, offset + 20, big_endian),
                _read32(buf, offset + 24, big_endian),
            )
            units = _read32(buf, offset + 12, big_endian) << 32 | _read32(buf, offset + 16, big_endian)
            start = offset + 28
            end = start + caplen
            if _read32(buf, block_end - 4, big_endian) != total or ifid >= n_interfaces:
                return BAIL, offset  # malformed: the Python path raises the error naming the offset
            linktype = interfaces[ifid, I_LINKTYPE]
            snaplen = interfaces[ifid, I_SNAPLEN]
            if end > block_end - 4:
                return BAIL, offset  # malformed
            if orig_len > MAX_FRAME or 0 < snaplen < caplen:  # damaged: skipped, counted
                if g[G_DAMAGED] == 0:
                    g[G_DAMAGED_AT] = offset
                g[G_DAMAGED] += 1
                g[G_RECORDS] += 1
                offset = block_end
                continue
            ts_mul, ts_div = interfaces[ifid, I_TS_MUL], interfaces[ifid, I_TS_DIV]
            # units >= 2^63 reads negative in 64 bits: it would wrap to a time before 1970.
            if units < 0 or units >= _TS_LIMIT or ts_mul == 0:
                return BAIL, offset  # beyond 64-bit arithmetic: Python's integers do it
            if ts_div == 1:
                if units > _TS_LIMIT // ts_mul:
                    return BAIL, offset
                ts = units * ts_mul + interfaces[ifid, I_TS_OFFSET]
            elif ts_mul == 1:
                ts = units // ts_div + interfaces[ifid, I_TS_OFFSET]
            else:
                return BAIL, offset
            offset = block_end
            g[G_RECORDS] += 1
        else:
            # --- record header (pcap._classic_records)
            if offset + 16 > size:
                g[G_TRUNCATED_AT] = offset
                return DONE, offset
            if big_endian:
                ts_sec, ts_frac = _u32(buf, offset), _u32(buf, offset + 4)
                caplen, orig_len = _u32(buf, offset + 8), _u32(buf, offset + 12)
            else:
                ts_sec, ts_frac = _u32_le(buf, offset), _u32_le(buf, offset + 4)
                caplen, orig_len = _u32_le(buf, offset + 8), _u32_le(buf, offset + 12)
            start = offset + 16
            end = start + caplen
            if caplen > caplen_limit or orig_len > MAX_FRAME or ts_frac >= frac_limit or end > size:
                if end > size and caplen <= caplen_limit:
                    g[G_TRUNCATED_AT] = offset
                    return DONE, offset
                if caplen > MAX_FRAME or end > size:
                    return BAIL, offset  # framing lost: the Python path raises the error naming the offset
                if g[G_DAMAGED] == 0:  # damaged, framing intact: skipped, counted
                    g[G_DAMAGED_AT] = offset
                g[G_DAMAGED] += 1
                g[G_RECORDS] += 1
                offset = end
                continue
            offset = end
            g[G_RECORDS] += 1
            ts = ts_sec * 1_000_000_000 + ts_frac * ns_per_frac

        # --- link layer -> (l3, ethertype)
        if linktype == _ETHERNET:
            if start + 14 > end:
                g[G_OTHER] += 1
                continue
            ethertype = _u16(buf, start + 12)
            l3 = start + 14
        elif linktype == _SLL:
            if start + 16 > end:
                g[G_OTHER] += 1
                continue
            ethertype = _u16(buf, start + 14)
            l3 = start + 16
        elif linktype == _SLL2:
            if start + 20 > end:
                g[G_OTHER] += 1
                continue
            ethertype = _u16(buf, start)
            l3 = start + 20
        elif linktype in _RAW_IP:  # the version nibble says which
            l3 = start
            nibble = buf[start] >> 4 if start < end else 0
            ethertype = 0x0800 if nibble == 4 else 0x86DD if nibble == 6 else -1
        else:  # a pcapng interface of a link type not decoded: _Others.count_link
            g[G_OTHER] += 1
            if _holds_pair(buf, start, end, pair_down, pair_up, back, version):
                return BAIL, offset
            continue
        if ethertype in (0x8100, 0x88A8, 0x9100, 0x8864, 0x8847, 0x8848):
            return BAIL, offset  # VLAN, PPPoE, MPLS: pcap._open_encapsulations

        # --- network layer
        down = False
        if ethertype == 0x0800:
            if not v4 or l3 + 20 > end:
                g[G_OTHER] += 1
                if _holds_pair(buf, start, end, pair_down, pair_up, back, version):
                    return BAIL, offset
                continue
            version_ihl = _int64(buf[l3])
            if version_ihl >> 4 == 4 and _same(buf, l3 + 12, pair_down):
                down = True
            elif not (version_ihl >> 4 == 4 and _same(buf, l3 + 12, pair_up)):
                g[G_OTHER] += 1
                if _holds_pair(buf, start, end, pair_down, pair_up, back, version):
                    return BAIL, offset
                continue
            total_length = _u16(buf, l3 + 2)
            if _u16(buf, l3 + 6) & 0x3FFF:
                return BAIL, offset  # a fragment
            proto = _int64(buf[l3 + 9])
            ihl = (version_ihl & 0x0F) * 4
            if ihl < 20:
                ihl, proto = 20, -1
            on_wire = orig_len + start - l3
            if total_length > on_wire or total_length == 0:
                total_length = on_wire
            l4 = l3 + ihl
            l4_length = total_length - ihl
        elif ethertype == 0x86DD:
            if v4 or l3 + 40 > end or buf[l3] >> 4 != 6:
                g[G_OTHER] += 1
                if _holds_pair(buf, start, end, pair_down, pair_up, back, version):
                    return BAIL, offset
                continue
            if _same(buf, l3 + 8, pair_down):
                down = True
            elif not _same(buf, l3 + 8, pair_up):
                g[G_OTHER] += 1
                if _holds_pair(buf, start, end, pair_down, pair_up, back, version):
                    return BAIL, offset
                continue
            payload_length = _u16(buf, l3 + 4)
            proto = _int64(buf[l3 + 6])
            if proto in (0, 43, 44, 51, 60, 135, 139, 140):
                return BAIL, offset  # extension headers: pcap._ipv6_transport walks them
            if payload_length:
                limit = l3 + 40 + payload_length
            elif proto == 59:
                limit = l3 + 40
            else:
                return BAIL, offset  # a super-frame whose length only the frame knows
            if limit > start + orig_len:
                limit = start + orig_len
            l4 = l3 + 40
            l4_length = limit - l4
            total_length = limit - l3
        else:
            g[G_OTHER] += 1
            if _holds_pair(buf, start, end, pair_down, pair_up, back, version):
                return BAIL, offset
            continue
        if l4_length < 0:
            l4_length = 0

        # --- transport layer
        way = 0 if down else 1
        analyse = False
        syn_mss = 0
        seq = ack = seglen = flags = window = tcp_length = 0
        if proto == 6 and l4 + 20 <= end:
            transport = _TCP
            sport, dport = _u16(buf, l4), _u16(buf, l4 + 2)
            seq, ack = _u32(buf, l4 + 4), _u32(buf, l4 + 8)
            tcp_length = (_int64(buf[l4 + 12]) >> 4) * 4
            flags = _int64(buf[l4 + 13])
            window = _u16(buf, l4 + 14)
            seglen = l4_length - tcp_length
            if seglen < 0:
                payload = 0  # a short segment: no analysis
            else:
                payload = seglen
                analyse = True
                if flags & _SYN:  # _Splitter.syn: the MSS option
                    p, options_end = l4 + 20, min(l4 + tcp_length, end)
                    while p < options_end:
                        kind = buf[p]
                        if kind == 0:
                            break
                        if kind == 1:
                            p += 1
                            continue
                        if p + 2 > options_end or buf[p + 1] < 2:
                            break
                        if kind == 2 and buf[p + 1] == 4 and p + 4 <= options_end:
                            syn_mss = _u16(buf, p + 2)
                            break
                        p += _int64(buf[p + 1])
        elif proto == 17 and l4 + 8 <= end:
            transport = _UDP
            sport, dport = _u16(buf, l4), _u16(buf, l4 + 2)
            payload = l4_length - 8 if l4_length > 8 else 0
        else:
            transport = _OTHER
            sport = dport = 0
            payload = l4_length

        # --- the flow (analyse.analyse_pcap)
        key = (transport << 32) | ((dport << 16 | sport) if down else (sport << 16 | dport))
        s = _slot(key, mask)
        f = -1
        while table[s] != -1:
            if flows[table[s], F_KEY] == key:
                f = table[s]
                break
            s = (s + 1) & mask
        if f == -1:
            f = g[G_FLOWS]
            g[G_FLOWS] += 1
            table[s] = f
            flows[f, F_KEY] = key
            flows[f, F_HALF + H_WINDOW] = _NO_WINDOW
            flows[f, F_HALF + H_SIZE + H_WINDOW] = _NO_WINDOW
            if g[G_HAVE_FIRST] == 0:
                g[G_HAVE_FIRST] = 1
                g[G_FIRST_TS] = ts
        if syn_mss:  # it limits what the other way sends
            flows[f, F_MSS + 1 - way] = syn_mss
            if syn_mss + 20 + ip_base < g[G_FLOOR]:
                g[G_FLOOR] = syn_mss + 20 + ip_base

        # --- a super-frame? (_Splitter.split; IPv6 jumbograms went to the Python path)
        split_frames = 0
        if analyse and not flags & _SYN and total_length > g[G_FLOOR] and tcp_length >= 20:
            mss = flows[f, F_MSS + way]
            segment = mss - (tcp_length - 20) if mss else mtu - (l4 - l3) - tcp_length
            if segment > 0 and seglen > segment:
                split_frames = (seglen + segment - 1) // segment
                # The captured frame, and its headers again for every further segment.
                wire = orig_len + (split_frames - 1) * (l4 - start + tcp_length)
                flows[f, F_WIRE + way] += wire
                flows[f, F_PACKETS + way] += split_frames
                g[G_SPLIT_WIRE + way] += wire - orig_len
                g[G_SPLIT_PACKETS + way] += split_frames - 1
                g[G_SUPERFRAMES + way] += 1
                histograms[way, _bucket(bucket_of, segment)] += split_frames - 1
                histograms[way, _bucket(bucket_of, payload - (split_frames - 1) * segment)] += 1
        if split_frames == 0:
            flows[f, F_WIRE + way] += orig_len
            flows[f, F_PACKETS + way] += 1
            histograms[way, _bucket(bucket_of, payload)] += 1
        flows[f, F_PAYLOAD + way] += payload
        g[G_LAST_TS] = ts
        if not analyse:
            continue

        # --- TCP sequence analysis: analyse._TcpConversation.segment, line for line
        fwd = F_HALF + way * H_SIZE
        rev = F_HALF + (1 - way) * H_SIZE
        syn_ack = flags & (_SYN | _ACK)
        if syn_ack == _SYN:
            if flows[f, fwd + H_BASE_SET]:
                if seq != flows[f, fwd + H_BASE_SEQ]:
                    for column in range(F_HALF, F_SIZE):  # ports reused: a new conversation
                        flows[f, column] = 0
                    flows[f, F_HALF + H_WINDOW] = _NO_WINDOW
                    flows[f, F_HALF + H_SIZE + H_WINDOW] = _NO_WINDOW
                else:
                    flows[f, fwd + H_NEXTSEQ] = flows[f, fwd + H_MAXSEQTOBEACKED]
        elif syn_ack == _SYN | _ACK and flows[f, fwd + H_BASE_SET] and seq != flows[f, fwd + H_BASE_SEQ]:
            flows[f, fwd + H_BASE_SEQ] = seq
        if not flows[f, fwd + H_BASE_SET]:
            flows[f, fwd + H_BASE_SEQ] = seq if flags & _SYN else (seq - 1) & _M32
            flows[f, fwd + H_BASE_SET] = 1
        if not flows[f, rev + H_BASE_SET] and flags & _ACK:
            flows[f, rev + H_BASE_SEQ] = (ack - 1) & _M32
            flows[f, rev + H_BASE_SET] = 1

        nextseq = flows[f, fwd + H_NEXTSEQ]
        lastack = flows[f, fwd + H_LASTACK]
        no_sfr = (flags & (_SYN | _FIN | _RST)) == 0

        zero_window_probe = seglen == 1 and seq == nextseq and flows[f, rev + H_WINDOW] == 0
        keep_alive = False
        if not zero_window_probe:
            keep_alive = seglen <= 1 and no_sfr and seq == (nextseq - 1) & _M32
            # A DUPLICATE ACK: not a KEEP ALIVE ACK (the other way's last segment a
            # keep-alive), and a ZERO WINDOW PROBE ACK has window 0, so it is none either.
            if (
                seglen == 0
                and no_sfr
                and window == flows[f, fwd + H_WINDOW]
                and seq == nextseq
                and ack == lastack
                and window != 0
                and (flows[f, rev + H_LASTFLAGS] & _KEEP_ALIVE) == 0
            ):
                # A parked counter (ACKED LOST below) restarts at 1.
                if flows[f, fwd + H_DUPACKNUM] == _DUPACK_PARKED:
                    flows[f, fwd + H_DUPACKNUM] = 1
                else:
                    flows[f, fwd + H_DUPACKNUM] += 1

        if ack != lastack:
            flows[f, fwd + H_DUPACKNUM] = 0

        rev_max = flows[f, rev + H_MAXSEQTOBEACKED]
        if rev_max and flags & _ACK and ((rev_max - ack) & _M32) >= _HALF:
            if ((rev_max - flows[f, rev + H_NEXTSEQ]) & _M32) >= _HALF:
                flows[f, rev + H_MAXSEQTOBEACKED] = flows[f, rev + H_NEXTSEQ]
            else:
                flows[f, rev + H_DUPACKNUM] = _DUPACK_PARKED

        syn_fin = flags & (_SYN | _FIN)
        retransmission = False
        if (seglen or syn_fin) and not keep_alive:
            seq_not_advanced = nextseq != 0 and ((seq - nextseq) & _M32) >= _HALF
            if seglen > 1 and (nextseq - 1) & _M32 == seq:
                seq_not_advanced = False
            seg_end = (seq + seglen) & _M32
            rev_lastack = flows[f, rev + H_LASTACK]
            beyond_ack = (seg_end - rev_lastack) & _M32
            if seglen and rev_lastack and (beyond_ack == 0 or beyond_ack >= _HALF):
                retransmission = True
            elif seq_not_advanced:
                since_ack = ts - flows[f, rev + H_LASTACKTIME]
                if (
                    flows[f, rev + H_DUPACKNUM] >= 2
                    and rev_lastack == seq
                    and 0 <= since_ack < _FAST_RETRANSMIT_WINDOW_NS
                ):
                    retransmission = True
                else:
                    rtt = flows[f, F_FIRST_RTT]
                    since_next = ts - flows[f, fwd + H_NEXTSEQTIME]
                    # A negative RTT is a huge unsigned threshold: only since_next >= 0 counts.
                    if rtt == 0:
                        in_window = 0 <= since_next < _DEFAULT_OOO_THRESHOLD_NS
                    elif rtt < 0:
                        in_window = since_next >= 0
                    else:
                        in_window = 0 <= since_next < rtt
                    out_of_order = in_window and nextseq != (seg_end + (1 if syn_fin else 0)) & _M32
                    retransmission = not out_of_order

        if not zero_window_probe:
            new_next = (seq + seglen + (1 if syn_fin else 0)) & _M32
            if not nextseq or ((nextseq - new_next) & _M32) >= _HALF:
                flows[f, fwd + H_NEXTSEQ] = new_next
                flows[f, fwd + H_NEXTSEQTIME] = ts
            if seq == flows[f, fwd + H_MAXSEQTOBEACKED] or not flows[f, fwd + H_MAXSEQTOBEACKED]:
                flows[f, fwd + H_MAXSEQTOBEACKED] = flows[f, fwd + H_NEXTSEQ]
        flows[f, fwd + H_WINDOW] = window
        flows[f, fwd + H_LASTACK] = ack
        flows[f, fwd + H_LASTACKTIME] = ts
        flows[f, fwd + H_LASTFLAGS] = _KEEP_ALIVE if keep_alive else _ZERO_WINDOW_PROBE if zero_window_probe else 0

        if syn_ack == _SYN:
            flows[f, F_MRU_SYN] = ts
        elif syn_ack == _ACK and flows[f, F_MRU_SYN] and not flows[f, F_FIRST_RTT]:
            flows[f, F_FIRST_RTT] = ts - flows[f, F_MRU_SYN]
        # A TCP header shorter than 20 bytes: analysed, never reported (pcap.BOGUS_HEADER).
        if retransmission and tcp_length >= 20:
            g[G_RETRANSMITS + way] += 1
            if collect_frames:
                frames[g[G_FRAMES]] = g[G_RECORDS] << 1 | (1 if down else 0)
                g[G_FRAMES] += 1
    return CHUNK, offset
