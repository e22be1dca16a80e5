"""The bounds (judge/bounds.py), each with its number computed by hand here, and the
verdicts that name the bound the steady rate met: the remote's autotuning off, an MSS
clamp, reordering without loss, a sender held by ssh's channel window; withholding where
no bound meets the rate; next steps that never recommend what is in use."""

from __future__ import annotations

import dataclasses
import math

import pytest

from bigbinf.judge import bounds
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.verdict import judge_limit
from bigbinf.result import PathBaseline, Result

from ..support import evidence
from .test_judge import MiB, download, sender, upload

# 100 Mbit/s, 80 ms, MTU 1500: the plain remote.
SITE = PathBaseline(
    "site",
    0.0,
    rtt_min_seconds=0.08,
    bandwidth_bytes_per_second=12.5e6,
    bandwidth_source="iperf3",
    mtu_bytes=1500,
    buffers={
        "local": {"tcp_rmem": 6291456.0, "tcp_wmem": 4194304.0, "tcp_rmem_min": 4096.0, "tcp_rmem_default": 131072.0},
        "remote": {
            "tcp_rmem": 6291456.0,
            "tcp_wmem": 4194304.0,
            "tcp_rmem_min": 4096.0,
            "tcp_rmem_default": 131072.0,
            "tcp_moderate_rcvbuf": 0.0,
        },
    },
    congestion_control={"local": "cubic", "remote": "cubic"},
)


def inputs(r: Result, baseline: PathBaseline | None = SITE) -> Inputs:
    return Inputs.of(r, baseline)


def said(r: Result, baseline: PathBaseline | None = SITE) -> tuple[str, str, str, str]:
    limit = judge_limit(r, baseline)
    assert limit is not None
    assert evidence.contradictions(limit.reason, limit.side, limit.evidence) == [], limit.evidence
    return limit.reason, limit.side, limit.evidence, limit.next_step


# ---------------------------------------------------------------- each bound's number


def test_the_receive_window_bound_is_the_advertised_window_over_the_round_trip() -> None:
    # 64 kB advertised, 82 ms seen: 65536 / 0.082 = 799,220 B/s.
    i = inputs(upload(tcp_local=sender(snd_wnd_median_bytes=65536.0, rtt_avg_seconds=0.082)))
    b = bounds.receive_window(i)
    assert b is not None and b.rate == pytest.approx(65536 / 0.082) and b.side == "remote"
    assert "the remote's advertised receive window 65.54 kB (65536 B)" in b.words and "over 82.0 ms" in b.words
    assert b.meets(0.76e6) and not b.meets(0.5e6) and not b.meets(1.1e6)


def test_without_the_window_the_receive_bound_is_a_buffer_that_stopped_growing() -> None:
    # The remote's autotuning off: its 131072-byte buffer over 82 ms = 1,598,439 B/s,
    # met down to 40% of it (a window is part of its buffer).
    r = upload(tcp_local=sender(rtt_avg_seconds=0.082), tcp_remote={"rcvbuf_max_bytes": 131072.0})
    b = bounds.receive_window(inputs(r))
    assert b is not None and b.rate == pytest.approx(131072 / 0.082)
    assert "net.ipv4.tcp_moderate_rcvbuf=0 on the remote: it never grows" in b.words
    assert b.meets(0.7e6) and not b.meets(0.6e6)
    # A buffer still below its maximum, autotuning on, bounds nothing.
    on = PathBaseline("site", 0.0, rtt_min_seconds=0.08, buffers={"remote": {"tcp_rmem": 6291456.0}})
    assert bounds.receive_window(inputs(r, on)) is None


def test_the_send_buffer_bound_is_a_buffer_at_its_maximum_over_the_round_trip() -> None:
    capped = PathBaseline("site", 0.0, rtt_min_seconds=0.08, buffers={"local": {"tcp_wmem": 1048576.0}})
    r = upload(tcp_local=sender(sndbuf_max_bytes=1048576.0, rtt_avg_seconds=0.1))
    b = bounds.send_buffer(inputs(r, capped))
    assert b is not None and b.rate == pytest.approx(10485760) and "at its tcp_wmem maximum" in b.words
    below = upload(tcp_local=sender(sndbuf_max_bytes=500_000.0, rtt_avg_seconds=0.1))
    assert bounds.send_buffer(inputs(below, capped)) is None


def test_the_path_capacity_bound_is_the_estimate_as_payload() -> None:
    # 12.5 MB/s on the wire; 5% of the wire was headers: 12.5e6 / 1.05 of payload.
    r = download(wire_bytes_down=105_000_000, payload_bytes_down=100_000_000, tcp_remote=sender())
    b = bounds.path_capacity(inputs(r))
    assert b is not None and b.rate == pytest.approx(12.5e6 / 1.05)


def test_the_loss_bound_is_mathis_with_real_losses_only() -> None:
    # 100 retransmitted of 46,000, 60 of them spurious (DSACK): p = 40/46000; MSS 1448,
    # 80 ms: 1448 / 0.08 x sqrt(1.5) / sqrt(p).
    r = download(tcp_remote=sender(dsack_dups=60.0, mss_bytes=1448.0, rtt_avg_seconds=0.08), retransmits_sender=100)
    i = inputs(r)
    assert (i.real_losses, i.spurious) == (40, 60)
    b = bounds.loss(i)
    assert b is not None and b.rate == pytest.approx(1448 / 0.08 * math.sqrt(1.5) / math.sqrt(40 / 46000))
    # All spurious: nothing lost, no loss bound; bbr: no Mathis bound either.
    none_lost = download(tcp_remote=sender(dsack_dups=100.0, rtt_avg_seconds=0.08), retransmits_sender=100)
    assert bounds.loss(inputs(none_lost)) is None
    paced = download(tcp_remote=sender(rtt_avg_seconds=0.08), retransmits_sender=100, congestion_control="bbr")
    assert bounds.loss(inputs(paced)) is None


def test_the_packet_rate_bound_where_the_mss_is_clamped() -> None:
    # MSS 524 on a 1500-byte MTU (1448 allowed): 12.5e6 / 1514 packets/s x 524 B.
    r = download(tcp_remote=sender(mss_bytes=524.0))
    b = bounds.packet_rate(inputs(r))
    assert b is not None and b.rate == pytest.approx(12.5e6 / 1514 * 524)
    assert "MSS 524 B is below the 1448 B the path's MTU 1500 B allows" in b.words
    assert bounds.packet_rate(inputs(download(tcp_remote=sender(mss_bytes=1448.0)))) is None


def test_a_program_bound_is_the_rate_over_its_busy_share() -> None:
    # scp on a core or queued 95% of its life: the transfer's rate / 0.95.
    r = download(
        duration_seconds=20.0,
        tcp_remote=sender(),
        programs={"local scp": {"seconds": 20.0, "runnable_share": 0.95, "io_wait_share": 0.0}},
    )
    i = inputs(r)
    (b,) = bounds.programs(i, ("local",), 0.5)
    assert (b.name, b.program, b.side) == ("cpu", "scp", "local")
    assert b.rate == pytest.approx(i.steady_rate / 0.95) and b.meets(i.steady_rate)


# ---------------------------------------------------------------- verdicts by the bound met


def test_a_remote_with_autotuning_off_is_its_receive_window_with_the_setting_named() -> None:
    # The case: uploads into a remote with tcp_moderate_rcvbuf=0, 80 ms: its window
    # 64 kB; the sender's window-limited share diluted below 30% (no clock rule fires),
    # no other flow (the RTT at the path's minimum).  0.78 MB/s steady.
    rate = 65536 / 0.082 * 0.97
    r = upload(
        duration_seconds=16 * MiB / rate,
        file_bytes=16 * MiB,
        tcp_local=sender(
            busy_seconds=21.0,
            rwnd_limited_seconds=5.0,
            sender_backlog_ratio=0.9,
            app_limited_ratio=0.0,
            sending_samples=40.0,
            snd_wnd_median_bytes=65536.0,
            rtt_avg_seconds=0.082,
            data_start_seconds=0.3,
            data_end_seconds=0.3 + 16 * MiB / rate,
            steady_rate_bytes_per_second=rate,
        ),
        tcp_remote={"rcvbuf_max_bytes": 131072.0},
    )
    reason, side, words, step = said(r)
    assert (reason, side) == ("receive_window", "remote"), words
    assert "the remote's advertised receive window 65.54 kB" in words
    assert "the transfer's steady rate was 0.78 MB/s" in words
    assert step.startswith("on the remote (lab): sysctl net.ipv4.tcp_moderate_rcvbuf=1")


def test_an_mss_clamp_is_named_by_the_packet_rate_bound_not_another_flow() -> None:
    # MSS 524 on a 1500 MTU: a per-packet path carries 8,256 packets/s x 524 B = 4.33 MB/s.
    rate = 12.5e6 / 1514 * 524 * 0.95
    r = download(
        duration_seconds=64 * MiB / rate,
        tcp_remote=sender(
            busy_seconds=64 * MiB / rate,
            sender_backlog_ratio=0.9,
            app_limited_ratio=0.0,
            sending_samples=40.0,
            mss_bytes=524.0,
            rtt_avg_seconds=0.081,
        ),
        tcp_local={
            "data_start_seconds": 0.2,
            "data_end_seconds": 64 * MiB / rate,
            "steady_rate_bytes_per_second": rate,
        },
    )
    reason, side, words, step = said(r)
    assert (reason, side) == ("link_capacity", "path"), words
    assert "the sender's MSS 524 B is below the 1448 B" in words and "another flow" not in words
    assert "the MSS is clamped" in step


def test_a_network_limited_sender_with_no_queue_and_no_bound_met_is_withheld() -> None:
    # Below the path, no loss, no window, no queue: nothing positive says another flow.
    rate = 5e6
    r = download(
        duration_seconds=64 * MiB / rate,
        tcp_remote=sender(
            busy_seconds=64 * MiB / rate,
            sender_backlog_ratio=0.9,
            app_limited_ratio=0.0,
            sending_samples=40.0,
            rtt_avg_seconds=0.081,
            snd_wnd_median_bytes=3e6,
        ),
        tcp_local={
            "data_start_seconds": 0.2,
            "data_end_seconds": 64 * MiB / rate,
            "steady_rate_bytes_per_second": rate,
        },
    )
    limit = judge_limit(r, SITE)
    assert limit is not None and limit.reason == "", limit
    assert "no bound met the steady rate 5.00 MB/s" in limit.evidence
    assert "bounds computed: receive_window 37.04 MB/s" in limit.evidence  # 3e6 / 0.081
    assert "path_capacity 12.50 MB/s" in limit.evidence
    assert "not shared_path" in limit.evidence and "no standing queue" in limit.evidence
    # The same with the round trip 40 ms above the path's minimum: another flow's queue.
    queued = dataclasses_replace_sender(r, rtt_avg_seconds=0.12)
    reason, _, words, _ = said(queued)
    assert reason == "shared_path" and "a standing queue: the round trip the transfer saw was 120.0 ms" in words
    # Another flow holding its cwnd just below the window autotuning sized for it (the
    # window over the RTT 1.1 x the rate), its clock for the window 0: not the window.
    near = dataclasses_replace_sender(queued, snd_wnd_median_bytes=5e6 * 1.1 * 0.12)
    assert said(near)[0] == "shared_path"
    # ... and with the clock saying so a tenth of its busy time, the window it is.
    held = dataclasses_replace_sender(near, rwnd_limited_seconds=0.15 * near.tcp_remote["busy_seconds"])
    assert said(held)[:2] == ("receive_window", "local")
    # Not where the window is above the BDP (a lifted buffer at 87% of the path, its
    # window over the RTT it saw 23.5 MB/s, over the path's minimum 32.7, the path 23.9:
    # measured, tests/lab/test_why_slow.py): here 13e6 x 0.081 over 80 ms, above 12.5 MB/s.
    fast = download(
        duration_seconds=64 * MiB / 11e6,
        tcp_remote=sender(
            busy_seconds=64 * MiB / 11e6,
            rwnd_limited_seconds=0.15 * 64 * MiB / 11e6,
            sender_backlog_ratio=0.9,
            app_limited_ratio=0.0,
            sending_samples=40.0,
            rtt_avg_seconds=0.081,
            snd_wnd_median_bytes=13e6 * 0.081,  # allows 13 MB/s, the path 12.5
        ),
        tcp_local={
            "data_start_seconds": 0.2,
            "data_end_seconds": 64 * MiB / 11e6,
            "steady_rate_bytes_per_second": 11e6,
        },
    )
    assert said(fast)[0] != "receive_window"


def dataclasses_replace_sender(r: Result, **kw: float) -> Result:
    return dataclasses.replace(r, tcp_remote={**r.tcp_remote, **kw})


def test_reordering_without_loss_never_says_segments_were_lost() -> None:
    # 3% of packets late, every retransmission spurious (DSACK): nothing was lost.
    rate = 5e6
    r = download(
        duration_seconds=64 * MiB / rate,
        retransmits_sender=1400,
        tcp_remote=sender(
            busy_seconds=64 * MiB / rate,
            sender_backlog_ratio=0.9,
            app_limited_ratio=0.0,
            sending_samples=40.0,
            rtt_avg_seconds=0.081,
            dsack_dups=1400.0,
            cwnd_max_segments=300.0,
        ),
        tcp_local={
            "data_start_seconds": 0.2,
            "data_end_seconds": 64 * MiB / rate,
            "steady_rate_bytes_per_second": rate,
        },
    )
    limit = judge_limit(r, SITE)
    assert limit is not None and limit.reason != "congestion", limit
    for claim in ("segments lost", "the bottleneck drops", "repaired"):
        assert claim not in limit.evidence
    assert evidence.contradictions(limit.reason, limit.side, limit.evidence) == []
    # Half of them real: congestion, its count of losses the real one.
    lossy = dataclasses_replace_sender(r, dsack_dups=700.0)
    reason, _, words, _ = said(lossy)
    assert reason == "congestion" and "700 of them spurious" in words and "700 lost" in words


def test_an_ssh_upload_held_by_the_remote_reader_is_application_on_the_remote() -> None:
    # ssh sends only what its channel window allows: the sender idle, this host's ssh
    # and scp mostly asleep, the remote's reader seen.
    rate = 2 * MiB
    r = upload(
        protocol="scp",
        duration_seconds=16 * MiB / rate,
        file_bytes=16 * MiB,
        tcp_local=sender(
            busy_seconds=3.0,
            sender_backlog_ratio=0.05,
            app_limited_ratio=0.6,
            sending_samples=30.0,
            data_start_seconds=0.5,
            data_end_seconds=8.4,
            steady_rate_bytes_per_second=rate,
        ),
        programs={
            "local ssh": {
                "seconds": 8.0,
                "runnable_share": 0.1,
                "cpu_share": 0.1,
                "io_wait_share": 0.0,
                "samples": 16.0,
            },
            "local scp": {
                "seconds": 8.0,
                "runnable_share": 0.05,
                "cpu_share": 0.05,
                "io_wait_share": 0.0,
                "samples": 16.0,
            },
            "remote sftp-server": {
                "seconds": 8.0,
                "runnable_share": 0.05,
                "cpu_share": 0.05,
                "io_wait_share": 0.0,
                "samples": 16.0,
            },
        },
    )
    reason, side, words, _ = said(r)
    assert (reason, side) == ("application", "remote"), words
    assert "the sender is ssh" in words and "sftp-server (the remote) waited on storage in 0%" in words
    # The reader held by its disk (a sync mount through a throttle, state D in 12 of 12
    # samples): disk, on the remote, its bound (2.10 MB/s over 0.95 of its life) beside the rate.
    slow = {**r.programs, "remote sftp-server": {**r.programs["remote sftp-server"], "io_wait_share": 0.9}}
    reason, side, words, _ = said(dataclasses.replace(r, programs=slow))
    assert (reason, side) == ("disk", "remote"), words
    assert "sftp-server (the remote) waited on storage in 90%" in words
    assert "working all its life it allows 2.21 MB/s" in words and "steady rate was 2.10 MB/s" in words
    # On storage only 60% of its samples and asleep most of the rest: working all its life
    # it would allow 3.23 MB/s, which 2.10 does not meet: neither disk nor application.
    half = {**r.programs, "remote sftp-server": {**r.programs["remote sftp-server"], "io_wait_share": 0.6}}
    reason, side, words, _ = said(dataclasses.replace(r, programs=half))
    assert reason == "", words
    assert "not disk" in words and "allows 3.23 MB/s" in words


# ---------------------------------------------------------------- next steps


def test_next_steps_never_recommend_bbr_to_a_bbr_sender() -> None:
    lossy = download(
        tcp_remote=sender(cwnd_max_segments=10.0), retransmits_sender=2000, congestion_control="bbr", remote="site"
    )
    reason, _, _, step = said(lossy)
    assert reason == "congestion" and "bbr" not in step, step
    cubic = download(
        tcp_remote=sender(cwnd_max_segments=10.0), retransmits_sender=2000, congestion_control="cubic", remote="site"
    )
    step = said(cubic)[3]
    assert "on the sender, the remote (site) (it uses cubic): sysctl net.ipv4.tcp_congestion_control=bbr" in step


def test_next_steps_never_recommend_a_buffer_size_already_set() -> None:
    # The receiver (this host) window-limited, its tcp_rmem maximum already 6 MB, above
    # 2 x BDP (2 x 12.5e6 x 0.08 = 2 MB): the program's own buffer is the cap.
    r = download(tcp_remote=sender(rwnd_limited_seconds=15.0))
    reason, side, _, step = said(r)
    assert (reason, side) == ("receive_window", "local")
    assert "already 2 x BDP or more" in step and "sysctl -w" not in step
    small = PathBaseline(
        "site",
        0.0,
        rtt_min_seconds=0.08,
        bandwidth_bytes_per_second=12.5e6,
        buffers={"local": {"tcp_rmem": 262144.0, "tcp_rmem_min": 4096.0, "tcp_rmem_default": 131072.0}},
    )
    step = said(r, small)[3]
    assert step.startswith("on this host: sysctl -w net.ipv4.tcp_rmem='4096 131072 2000000'"), step


def test_a_receiver_that_closed_its_window_is_its_reader_not_its_buffer() -> None:
    # An upload into a remote reader that stopped reading now and then: the sender saw a
    # zero window in 12 of its 40 samples (ss leaves the 0 out), its clock 15% window-limited.
    r = upload(
        tcp_local=sender(rwnd_limited_seconds=3.0, zero_window_samples=12.0, sending_samples=40.0),
        programs={"remote cat": {"seconds": 20.0, "runnable_share": 0.02, "cpu_share": 0.02, "samples": 40.0}},
    )
    reason, side, words, _ = said(r)
    assert (reason, side) == ("application", "remote"), words
    assert "the receiver advertised a zero window in 12 of the sender's 40 samples" in words
    # One zero window in 40 samples is no closed window.
    once = dataclasses.replace(r, tcp_local={**r.tcp_local, "zero_window_samples": 1.0})
    assert judge_limit(once, SITE).reason != "application"  # type: ignore[union-attr]
