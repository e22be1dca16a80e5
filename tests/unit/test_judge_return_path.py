"""The return path (the ACKs' way): each way's queue from the TCP timestamps in a capture
(measure/wire/oneway.py, on a capture written here with the delays known), the ACK clock's
bound (judge/bounds.py ack_clock), and the verdicts: a queue the transfer's own ACKs built
on a slow return path is the return path's link_capacity, never shared_path; a queue on
the data way is still another flow's; a return queue whose bound the rate does not meet
is withheld with the bounds listed."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest

from bigbinf.judge import bounds
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.verdict import judge_limit
from bigbinf.measure.wire import oneway
from bigbinf.measure.wire.oneway import clock_rate, one_way
from bigbinf.result import PathBaseline, Result

from ..support import evidence
from .test_judge import MiB, sender, upload

# The breaker's site: 200 Mbit/s forward, 40 ms, the return way 256 kbit/s with a deep queue.
WAN = PathBaseline(
    "site", 0.0, rtt_min_seconds=0.04, bandwidth_bytes_per_second=25e6, bandwidth_source="iperf3", mtu_bytes=1500
)
ACK_FRAME = 66  # Ethernet 14 + IPv4 20 + TCP 20 + timestamps 12
PER_ACK = 2 * 1448  # a delayed ACK per two full segments
RETURN_BYTES = 256_000 / 8  # the return way's capacity, bytes/s
ACK_RATE = RETURN_BYTES * PER_ACK / ACK_FRAME  # what the ACK clock allows: 1.40 MB/s


def _uploaded(rate: float, one_way: dict[str, float], rtt_seen: float = 1.04) -> Result:
    """A 16 MiB upload over the data phase the ACK clock gives it, its steady rate `rate`,
    network-limited (in flight, a backlog, no loss, no window), the round trip it saw
    `rtt_seen` against the path's 40 ms."""
    seconds = 16 * MiB / ACK_RATE
    return upload(
        dataset="f16m",
        file_bytes=16 * MiB,
        duration_seconds=seconds + 0.3,
        tcp_local=sender(
            busy_seconds=seconds,
            sender_backlog_ratio=0.95,
            app_limited_ratio=0.0,
            sending_samples=60.0,
            rtt_avg_seconds=rtt_seen,
            snd_wnd_median_bytes=6e6,
            data_start_seconds=0.3,
            data_end_seconds=seconds + 0.3,
            steady_rate_bytes_per_second=rate,
        ),
        first_packet_timestamp=100.0,
        last_packet_timestamp=100.0 + seconds + 0.3,
        one_way=one_way,
        wire_measured=True,
        payload_bytes_up=int(one_way.get("data_bytes", 16 * MiB)),
        wire_bytes_up=int(one_way.get("data_bytes", 16 * MiB) * 1514 / 1448),
        wire_bytes_down=int(one_way.get("ack_wire_bytes", 0)),
    )


def _acks(queue_ack: float, queue_data: float, data: float = 16 * MiB) -> dict[str, float]:
    acks = data / PER_ACK
    return {
        "data_up": 1.0,
        "data_bytes": data,
        "ack_packets": acks,
        "ack_wire_bytes": acks * ACK_FRAME,
        "peer_clock_hz": 1000.0,
        "samples": 5000.0,
        "ack_queue_seconds": queue_ack,
        "data_queue_seconds": queue_data,
    }


def test_the_ack_clock_bound_is_the_return_capacity_over_the_ack_bytes_per_data_byte() -> None:
    # The return way carried 16 MiB / 2896 ACKs of 66 B over the 11.98 s data phase:
    # 32,000 B/s; per data byte 66 / 2896; so it allows 32,000 x 2896 / 66 = 1.40 MB/s.
    r = _uploaded(ACK_RATE, _acks(1.0, 0.0005))
    b = bounds.ack_clock(Inputs.of(r, WAN))
    assert b is not None and b.name == "ack_clock" and b.side == "path"
    assert b.rate == pytest.approx(ACK_RATE, rel=1e-4)
    assert b.inputs["return_bytes_per_second"] == pytest.approx(RETURN_BYTES, rel=1e-4)
    assert "256 kbit/s of this transfer's ACKs on the wire" in b.words and "1000.0 ms" in b.words
    # No queue on the return way, or one on the data way too: no ACK-clock bound.
    assert bounds.ack_clock(Inputs.of(dataclasses.replace(r, one_way=_acks(0.001, 0.0005)), WAN)) is None
    assert bounds.ack_clock(Inputs.of(dataclasses.replace(r, one_way=_acks(1.0, 0.5)), WAN)) is None
    assert bounds.ack_clock(Inputs.of(dataclasses.replace(r, one_way={}), WAN)) is None


def test_a_queue_the_transfers_own_acks_built_is_the_return_path_never_another_flow() -> None:
    # The breaker's case: 0 bytes besides the transfer, the steady rate at the ACK clock.
    r = _uploaded(ACK_RATE * 1.05, _acks(1.0, 0.0005))
    limit = judge_limit(r, WAN)
    assert limit is not None
    assert (limit.reason, limit.side, limit.detail) == ("link_capacity", "path", "ack_clock"), limit.evidence
    assert "another flow on the bottleneck" not in limit.evidence
    assert "the ACKs needed 269 kbit/s at the steady rate and the return path carried 256 kbit/s" in limit.evidence
    assert evidence.contradictions(limit.reason, limit.side, limit.evidence) == [], limit.evidence
    assert "return path" in limit.next_step and "bbr" not in limit.next_step
    # The same round trip with the queue on the data way: another flow's (no ACK explains it).
    shared = judge_limit(dataclasses.replace(r, one_way=_acks(0.0005, 1.0)), WAN)
    assert shared is not None and shared.reason == "shared_path", shared.evidence
    # The return path's capacity is what its queue shows it carried: no estimate needed.
    unknown_path = judge_limit(r, dataclasses.replace(WAN, bandwidth_bytes_per_second=None, bandwidth_source=""))
    assert unknown_path is not None and unknown_path.detail == "ack_clock", unknown_path.evidence
    # Without the timestamps (none negotiated), the round trip alone decides as before.
    unknown = judge_limit(dataclasses.replace(r, one_way={}), WAN)
    assert unknown is not None and unknown.reason == "shared_path"


def test_a_return_queue_whose_bound_the_rate_does_not_meet_is_withheld_with_the_bounds() -> None:
    # Queue on the return way, but the rate twice what the ACK clock allows over the data
    # phase (its ACKs came bunched, or stretched): neither shared_path nor the return path.
    r = _uploaded(ACK_RATE, _acks(1.0, 0.0005, data=16 * MiB / 2.5))
    limit = judge_limit(r, WAN)
    assert limit is not None and limit.reason == "", limit.evidence
    assert "not the return path" in limit.evidence and "bounds computed:" in limit.evidence
    assert "ack_clock" in limit.evidence and "path_capacity 23.91 MB/s" in limit.evidence  # 25 MB/s over 1514 / 1448
    assert "the steady rate 1.40 MB/s (11 Mbit/s) is 250% of it, outside 75%-125%" in limit.evidence
    assert "another flow" not in limit.evidence


def test_a_configured_return_capacity_is_what_the_ack_clock_bound_compares_with() -> None:
    # Unconfigured, the bound is the ACK way's measured carriage, and it says so.
    r = _uploaded(ACK_RATE, _acks(1.0, 0.0005))
    carried = bounds.ack_clock(Inputs.of(r, WAN))
    assert carried is not None and "this bound is the ACK way's measured carriage" in carried.words
    assert "remotes.NAME.return_bandwidth" in carried.words
    # Configured at 256 kbit/s (a number not taken from the transfer): 32,000 x 2896 / 66.
    known = dataclasses.replace(WAN, return_bandwidth_bytes_per_second=RETURN_BYTES)
    b = bounds.ack_clock(Inputs.of(r, known))
    assert b is not None and b.rate == pytest.approx(RETURN_BYTES * PER_ACK / ACK_FRAME, rel=1e-4)
    assert "its configured capacity 256 kbit/s (return_bandwidth" in b.words and "measured carriage" not in b.words
    limit = judge_limit(r, known)
    assert limit is not None and limit.detail == "ack_clock", limit.evidence
    # Configured at 2 Mbit/s: the ACK clock allows 8x the rate, so the return path did not hold
    # it (though its queue stood): withheld, never another flow.
    wide = dataclasses.replace(WAN, return_bandwidth_bytes_per_second=8 * RETURN_BYTES)
    limit = judge_limit(r, wide)
    assert limit is not None and limit.reason == "", limit.evidence
    assert "not the return path" in limit.evidence and "another flow" not in limit.evidence


def test_the_return_capacity_is_validated_at_load_with_the_other_errors(tmp_path: Path) -> None:
    from bigbinf.config import ConfigError, parse_config
    from bigbinf.measure.plan import resolve_remote

    text = (
        "remotes: {site: {address: 198.18.0.2, data_dir: /data, key: /etc/hostname, return_bandwidth: %s, "
        "bandwidth: %s}}\n"
        "datasets: {f1m: {file: f1m.bin, size: 1MiB}}\nprotocols: {http: {}}\n"
        f"journal: {{path: {tmp_path / 'journal.jsonl'}}}\n"
    )
    with pytest.raises(ConfigError) as err:
        parse_config(text % ("fast", "0bit"), "site.yaml")
    said = err.value.render()
    assert "remotes.site.return_bandwidth: 'fast' is not a tc rate" in said
    assert "remotes.site.bandwidth: '0bit'" in said  # every error gathered
    config = parse_config(text % ("256kbit", "200mbit"), "site.yaml")
    remote = resolve_remote("site", config.remotes["site"], None)
    assert remote.return_bandwidth_bytes_per_second == 32_000


# ---------------------------------------------------------------- the capture's timestamps


def _frame(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int, tsval: int, tsecr: int, n: int) -> bytes:
    options = b"\x01\x01\x08\x0a" + struct.pack("!II", tsval, tsecr)
    tcp = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, (32 // 4) << 4, 0x10, 65535, 0, 0) + options
    total = 20 + len(tcp) + n
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, 6, 0, src, dst)
    return b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00" + ip + tcp + b"\x00" * n


def _capture(path: Path, ack_queue: float, backwards: bool = False) -> None:
    """An upload of 4000 full segments at one per 1 ms; the remote ACKs every second one
    after a 10 ms forward delay, its clock 1000 Hz with an offset (`backwards`: counting
    down, a clock no rate fits); each ACK's way back 10 ms plus a queue growing linearly to
    `ack_queue` over the first half and standing."""
    client, remote = bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2])
    records: list[tuple[float, bytes]] = []
    for k in range(4000):
        t = 1000.0 + k * 0.001
        ours = int(t * 1000) & 0xFFFFFFFF  # this host's clock: 1 ms ticks
        records.append((t, _frame(client, remote, 40000, 80, k * 1448, 1, ours, 0, 1448)))
        if k % 2:
            at_remote = t + 0.010
            theirs = int((at_remote + 5_000_000.0) * 1000) & 0xFFFFFFFF  # the remote's offset clock
            if backwards:
                theirs = (0xFFFFFFFF - theirs) & 0xFFFFFFFF
            queue = ack_queue * min(1.0, k / 1000)  # built in the first quarter: the fit tilts 30%
            back = at_remote + 0.010 + queue
            frame = _frame(remote, client, 80, 40000, 1, (k + 1) * 1448, theirs, ours - 0, 0)
            records.append((back, frame))
    records.sort(key=lambda rec: rec[0])
    with path.open("wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for t, frame in records:
            sec, usec = int(t), round((t - int(t)) * 1e6)
            out.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame)


def test_each_ways_queue_from_the_timestamps_the_ack_way_queued_the_data_way_flat(tmp_path: Path) -> None:
    pcap = tmp_path / "upload.pcap"
    _capture(pcap, ack_queue=0.3)
    seen = one_way(pcap, "198.18.0.1", "198.18.0.2")
    assert seen["data_up"] == 1.0 and seen["data_bytes"] == 4000 * 1448
    assert seen["ack_packets"] == 2000 and seen["ack_wire_bytes"] == 2000 * ACK_FRAME
    assert seen["peer_clock_hz"] == 1000.0 and seen["peer_ticks"] == 2000
    # The standing 300 ms on the ACK way (within a tick of the clocks), the data way flat.
    assert seen["ack_queue_seconds"] == pytest.approx(0.3, abs=0.003)
    assert seen["data_queue_seconds"] < 0.003
    # No queue at all: both flat.
    _capture(pcap, ack_queue=0.0)
    flat = one_way(pcap, "198.18.0.1", "198.18.0.2")
    assert flat["ack_queue_seconds"] < 0.003 and flat["data_queue_seconds"] < 0.003
    # A clock no rate fits: the ticks counted, no delay said (the judge then withholds
    # shared_path: test_judge_return_path_load.py).
    _capture(pcap, ack_queue=0.3, backwards=True)
    unfitted = one_way(pcap, "198.18.0.1", "198.18.0.2")
    assert unfitted["peer_ticks"] == 2000 and unfitted["data_bytes"] == 4000 * 1448
    assert "ack_queue_seconds" not in unfitted and "peer_clock_hz" not in unfitted


def test_the_remote_clock_rate_lies_between_its_two_fits_snapped_to_a_hosts_tick() -> None:
    times = [k * 0.01 for k in range(100)]
    ticks = [round(t * 1000) for t in times]
    # A 1 s queue growing over the way back within 5 s: arrivals stretched, the fit 20% low;
    # what the remote answers still keeps time with what this host sent.
    stretched = [t * 1.25 for t in times]
    assert clock_rate(stretched, ticks, list(zip(times, ticks, strict=True))) == 1000.0
    assert clock_rate([t * 1.03 for t in times], ticks) == 1000.0  # one fit, 3% tilted: a host's rate
    assert clock_rate(times, [round(t * 1.3e6) for t in times]) == pytest.approx(1.3e6, rel=1e-3)  # no host's
    assert clock_rate(times[:5], [1, 2, 3, 4, 5]) is None


def test_listings_late_behind_the_return_ways_queue_say_nothing_of_the_remotes_cpu() -> None:
    # The remote's listings come back the ACKs' way: behind its 1 s queue they came 4.8 s
    # late (an scp upload through 256 kbit/s).  Not a starved remote: the return path.
    late = {**upload().remote_view, "listing_late_max_seconds": 4.8}
    r = dataclasses.replace(_uploaded(ACK_RATE, _acks(1.0, 0.0005)), remote_view=late)
    limit = judge_limit(r, WAN)
    assert limit is not None and (limit.reason, limit.detail) == ("link_capacity", "ack_clock"), limit.evidence
    # Without the queue measured (no timestamps), the lateness still says starved.
    unmeasured = judge_limit(dataclasses.replace(r, one_way={}), WAN)
    assert unmeasured is not None and (unmeasured.reason, unmeasured.side) == ("cpu", "remote")


def test_a_slow_set_up_behind_the_return_queue_is_not_startup_where_the_steady_phase_cost_more() -> None:
    # scp through the same return path: its login's replies queue behind the ACKs, 1.3 s of
    # set-up before the first data of a 7.9 s transfer; the steady phase at the ACK clock
    # cost 8 MiB / 1.40 MB/s less 8 MiB / 25 MB/s = 5.6 s, more than the start's 2.3 s
    # (startup before, as 2 of 3 scp runs through the real path).
    r = _uploaded(ACK_RATE, _acks(1.0, 0.0005, data=8 * MiB))
    r = dataclasses.replace(
        r,
        dataset="f8m",
        file_bytes=8 * MiB,
        duration_seconds=8 * MiB / ACK_RATE + 2.3,
        tcp_local={**r.tcp_local, "data_start_seconds": 1.3, "data_end_seconds": 8 * MiB / ACK_RATE + 2.3},
    )
    limit = judge_limit(r, WAN)
    assert limit is not None and (limit.reason, limit.detail) == ("link_capacity", "ack_clock"), limit.evidence


def test_a_long_capture_is_read_up_to_its_first_max_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pcap = tmp_path / "upload.pcap"
    _capture(pcap, ack_queue=0.3)
    monkeypatch.setattr(oneway, "MAX_RECORDS", 3000)
    seen = one_way(pcap, "198.18.0.1", "198.18.0.2")
    assert (seen["records"], seen["whole"]) == (3000, 0.0)
    assert seen["data_bytes"] < 4000 * 1448 and "ack_queue_seconds" in seen


def test_a_cut_one_way_pass_leaves_the_bound_to_the_captures_totals() -> None:
    # Read only in part (whole 0): its byte counts are the first records'; the capture's
    # totals (Result.wire_bytes_down, payload_bytes_up) stand in.
    cut = {**_acks(1.0, 0.0005), "whole": 0.0, "data_bytes": 1e6, "ack_wire_bytes": 1e6 / PER_ACK * ACK_FRAME}
    r = _uploaded(ACK_RATE, cut)
    r = dataclasses.replace(r, payload_bytes_up=16 * MiB, wire_bytes_down=int(16 * MiB / PER_ACK * ACK_FRAME))
    b = bounds.ack_clock(Inputs.of(r, WAN))
    assert b is not None and b.inputs["return_bytes_per_second"] == pytest.approx(RETURN_BYTES, rel=1e-4)
