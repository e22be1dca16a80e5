"""The breaks an independent breaker found in the bound-first judge (issue 42), each with
the numbers of the run that showed it: a busy host whose programs slept waiting for the
network; a burst reader's lost time through the transfer; a program's own socket buffer;
a route's window clamp; window scaling not negotiated; a verdict whose computed bound the rate does not meet."""

from __future__ import annotations

import dataclasses

from bigbinf.judge import bounds, vetoes
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.verdict import judge_limit
from bigbinf.result import PathBaseline, Result

from ..support import evidence
from .test_judge import MiB, download, sender, upload

BUFFERS = {"tcp_rmem": 6291456.0, "tcp_wmem": 4194304.0, "tcp_rmem_min": 4096.0, "tcp_rmem_default": 131072.0}
# 100 Mbit/s, 80 ms, MTU 1500, autotuning on at both ends.
SITE = PathBaseline(
    "site",
    0.0,
    rtt_min_seconds=0.08,
    bandwidth_bytes_per_second=12.5e6,
    bandwidth_source="iperf3",
    mtu_bytes=1500,
    buffers={"local": BUFFERS, "remote": BUFFERS},
    congestion_control={"local": "cubic", "remote": "cubic"},
)
# The same path with its capacity unknown (no bandwidth configured, no iperf3 test).
UNKNOWN = dataclasses.replace(SITE, bandwidth_bytes_per_second=None, bandwidth_source="")


def judged(r: Result, baseline: PathBaseline = SITE) -> tuple[str, str, str, str]:
    limit = judge_limit(r, baseline)
    assert limit is not None
    assert evidence.contradictions(limit.reason, limit.side, limit.evidence) == [], limit.evidence
    return limit.reason, limit.side, limit.evidence, limit.next_step


def full_rate_on_a_busy_host(curl: dict[str, float]) -> Result:
    """A 64 MiB download at a tbf link's 12 MB/s, capacity unknown to the judge, beside CPU
    burners (this host's programs waited 30% of the transfer, load 9): the sender kept a
    backlog in flight all the time, no loss, no window, no queue."""
    rate = 12e6
    return download(
        duration_seconds=64 * MiB / rate + 0.3,
        host_busy={"transfer_programs": 0.3, "capture": 0.12, "load1": 9.0},
        programs={"local curl": {"samples": 50.0, "seconds": 64 * MiB / rate, "cpu_throttled_share": 0.0, **curl}},
        tcp_remote=sender(
            busy_seconds=64 * MiB / rate,
            sender_backlog_ratio=0.9,
            app_limited_ratio=0.0,
            sending_samples=50.0,
            rtt_avg_seconds=0.081,
            snd_wnd_median_bytes=3e6,
        ),
        tcp_local={"data_start_seconds": 0.3, "data_end_seconds": 64 * MiB / rate + 0.3,
                   "steady_rate_bytes_per_second": rate},
    )  # fmt: skip


def test_a_busy_host_whose_programs_slept_waiting_for_the_network_is_not_busy_host() -> None:
    # curl asleep 75% of its life (on a core 5%, queued 20%): the network, not this host's
    # CPU, kept it waiting.  Withheld, the bounds computed named, the busy host said.
    r = full_rate_on_a_busy_host({"runnable_share": 0.25, "cpu_share": 0.05, "io_wait_share": 0.0})
    assert not vetoes.host_held(Inputs.of(r, UNKNOWN))
    reason, _, words, _ = judged(r, UNKNOWN)
    assert reason == "", words
    assert "not busy_host (this host was busy" in words and "waited for the network" in words
    assert "bounds computed: receive_window 37.04 MB/s" in words  # 3e6 / 0.081
    # Held off its cores (on one 16%, waiting 77%: it would have gone 0.93 / 0.16 = 5.8x
    # faster): busy_host.
    held = full_rate_on_a_busy_host({"runnable_share": 0.93, "cpu_share": 0.16, "io_wait_share": 0.0})
    assert judged(held, UNKNOWN)[:2] == ("busy_host", "local")


def test_busy_host_is_a_bound_its_wait_must_explain_the_missing_rate() -> None:
    # On a core or queued for one 85% of its life, using 60%: without the wait it would
    # have gone 12e6 x 0.85 / 0.6 = 17 MB/s, short of 75% of the 37 MB/s window bound
    # above the rate: its wait does not explain the missing rate.
    i = Inputs.of(full_rate_on_a_busy_host({"runnable_share": 0.85, "cpu_share": 0.6}), UNKNOWN)
    assert not vetoes.host_held(i)
    # Using 20%: 12e6 x 0.85 / 0.2 = 51 MB/s, 138% of that bound: it does.
    i = Inputs.of(full_rate_on_a_busy_host({"runnable_share": 0.85, "cpu_share": 0.2}), UNKNOWN)
    said = vetoes.host_held(i)
    assert "without the wait it would have gone at 51.00 MB/s" in said and "138% of the lowest bound" in said, said
    # The lab's delay line waiting 31% of the transfer: the path itself on this host's CPUs.
    delay = dataclasses.replace(
        full_rate_on_a_busy_host({"runnable_share": 0.1, "cpu_share": 0.05}),
        host_busy={"transfer_programs": 0.04, "delay_line": 0.31, "load1": 22.0},
    )
    assert "the lab's delay line" in vetoes.host_held(Inputs.of(delay, UNKNOWN))


def burst_reader(seen: bool) -> Result:
    """A 16 MiB upload into a remote reader that takes 4 MiB, then sleeps 1 s, four times:
    bursts at 10 MB/s (0.42 s each) and three sleeps in which the window closes (zero
    window in 14 of the sender's 40 samples); 0.5 s of ssh-less set-up."""
    return upload(
        protocol="http",
        file_bytes=16 * MiB,
        duration_seconds=0.5 + 4 * 4 * MiB / 10e6 + 3.0,
        remote_view=({"listings_expected": 50.0, "listings_received": 50.0, "listing_late_max_seconds": 0.05,
                      "programs_seen": 1.0} if seen else {}),
        programs={"remote reader": {"seconds": 4.6, "runnable_share": 0.03, "cpu_share": 0.03, "samples": 46.0}}
        if seen else {},
        tcp_local=sender(
            busy_seconds=2.4,
            rwnd_limited_seconds=1.2,
            zero_window_samples=14.0,
            sending_samples=40.0,
            segs_out=11_600.0,
            rtt_avg_seconds=0.082,
            data_start_seconds=0.5,
            data_end_seconds=0.5 + 4 * 4 * MiB / 10e6 + 3.0,
            steady_rate_bytes_per_second=10e6,
        ),
    )  # fmt: skip


def test_a_burst_reader_is_its_application_never_startup() -> None:
    # Lost 5.18 - 16 MiB / 10 MB/s = 3.5 s: 0.5 s set-up, 3.0 s in the data phase where
    # slow start of 16 MiB takes at most (log2(16 MiB / 14480) + 4) x 82 ms = 1.16 s: the
    # time was lost through the transfer, in every sleep, not at its start.
    reason, side, words, step = judged(burst_reader(seen=True))
    assert (reason, side) == ("application", "remote"), words
    assert "zero window in 14 of the sender's 40 samples" in words
    assert "not startup" in words and "went through the transfer, not at its start" in words
    assert "receiving program reads slower" in step
    # Its programs unseen: withheld, and still never startup.
    reason, _, words, _ = judged(burst_reader(seen=False))
    assert reason == "" and "not startup" in words, words


def test_a_program_set_send_buffer_is_the_programs_with_its_bound() -> None:
    # nginx `sndbuf=32k` on its listen: the kernel keeps 64 KiB (twice the value set), the
    # remote's tcp_wmem maximum 4 MiB; limited by it 60% of its busy time.  65536 / 0.082 s
    # = 0.80 MB/s, the steady rate 0.78 MB/s.
    rate = 0.78e6
    r = download(
        duration_seconds=64 * MiB / rate,
        tcp_remote=sender(busy_seconds=80.0, sndbuf_limited_seconds=48.0, sndbuf_max_bytes=65536.0,
                          rtt_avg_seconds=0.082, sender_backlog_ratio=0.95, sending_samples=80.0),
        tcp_local={"data_start_seconds": 0.3, "data_end_seconds": 64 * MiB / rate,
                   "steady_rate_bytes_per_second": rate},
        remote="site",
    )  # fmt: skip
    b = bounds.send_buffer(Inputs.of(r, SITE))
    assert b is not None and round(b.rate) == round(65536 / 0.082) and b.meets(rate)
    reason, side, words, step = judged(r)
    assert (reason, side) == ("send_buffer", "remote"), words
    assert "set by its program (SO_SNDBUF: constant at 65.54 kB" in words
    assert "allows 0.80 MB/s" in words and "the transfer's steady rate was 0.78 MB/s" in words
    assert "in the program's configuration" in step and "nginx `sndbuf=`" in step and "sysctl" not in step, step


def test_a_program_set_receive_buffer_is_the_programs() -> None:
    # nginx `rcvbuf=64k` under an upload: 131072 B kept, advertised 65536 (half: the
    # kernel's overhead share), window-limited 70%; the remote's tcp_rmem maximum 6 MiB.
    rate = 0.78e6
    r = upload(
        file_bytes=16 * MiB,
        duration_seconds=16 * MiB / rate,
        tcp_local=sender(busy_seconds=21.0, rwnd_limited_seconds=14.7, snd_wnd_median_bytes=65536.0,
                         rtt_avg_seconds=0.082, data_start_seconds=0.3, data_end_seconds=16 * MiB / rate,
                         steady_rate_bytes_per_second=rate),
        tcp_remote={"rcvbuf_max_bytes": 131072.0},
        remote="site",
    )  # fmt: skip
    reason, side, words, step = judged(r)
    assert (reason, side) == ("receive_window", "remote"), words
    assert "receive buffer 131.07 kB (131072 B) (set by its program (SO_RCVBUF" in words
    assert "nginx `rcvbuf=`" in step and "sysctl" not in step, step
    # The same buffer with the remote's autotuning off is the sysctl's default, not the program's.
    off = dataclasses.replace(SITE, buffers={"local": BUFFERS, "remote": {**BUFFERS, "tcp_moderate_rcvbuf": 0.0}})
    off_reason, off_side, off_words, off_step = judged(r, off)
    assert (off_reason, off_side) == ("receive_window", "remote") and "set by its program" not in off_words
    assert "tcp_moderate_rcvbuf=0 on the remote: it never grows" in off_words and "moderate_rcvbuf=1" in off_step
    # Constant over the listings (131072 B in the first and the last): still the program's.
    constant = dataclasses.replace(r, tcp_remote={"rcvbuf_max_bytes": 131072.0, "rcvbuf_min_bytes": 131072.0})
    assert "set by its program (SO_RCVBUF" in judged(constant)[2]
    # One that grew while the transfer ran (46080 B to 131072 B) is autotuning's: no
    # program's buffer is claimed, in the evidence or the step (breaker b42, A' scp 3).
    grew = dataclasses.replace(r, tcp_remote={"rcvbuf_max_bytes": 131072.0, "rcvbuf_min_bytes": 46080.0})
    reason, side, words, step = judged(grew)
    assert (reason, side) == ("receive_window", "remote"), words
    assert "set by its program" not in words and "the program set its own buffer" not in step, (words, step)
    assert "set by the program itself" not in step and "it is not what holds the window" in step, step


def _route_clamped(**receiver: float) -> Result:
    """An upload whose remote window stayed at 65535 B while its buffer grew to 3 MB, with
    window scaling negotiated (`wscale` seen): 65535 / 0.082 = 0.80 MB/s, steady 0.78 MB/s."""
    rate = 0.78e6
    return upload(
        file_bytes=8 * MiB,
        duration_seconds=8 * MiB / rate,
        tcp_local=sender(busy_seconds=10.5, rwnd_limited_seconds=8.0, snd_wnd_median_bytes=65535.0,
                         rtt_avg_seconds=0.082, data_start_seconds=0.3, data_end_seconds=8 * MiB / rate,
                         steady_rate_bytes_per_second=rate, wscale_streams=1.0, unscaled_streams=0.0),
        tcp_remote={"rcvbuf_max_bytes": 3e6, **receiver},
        remote="site",
    )  # fmt: skip


def test_a_route_window_is_named_with_ip_route_only_where_one_was_read() -> None:
    # The remote's route to this host read with `window 65535`.
    read = dataclasses.replace(SITE, buffers={"local": BUFFERS, "remote": {**BUFFERS, "route_window": 65535.0}})
    reason, side, words, step = judged(_route_clamped(), read)
    assert (reason, side) == ("receive_window", "remote"), words
    assert "its window was clamped apart from its buffer (its route's `window` metric 65.53 kB (65535 B))" in words
    assert "on the remote (site): its route to this host" in step and "ip route change" in step, step
    assert "tcp_rmem=" not in step and "sysctl" not in step
    # No route window read: the clamp is said, its mechanism is not made up.
    reason, side, words, step = judged(_route_clamped())
    assert (reason, side) == ("receive_window", "remote"), words
    assert "its window was held apart from its buffer" in words and "metric" not in words, words
    assert "ip route change" not in step and "look for a `window` metric" in step, step


# A breaker's site (issue 42): 100 Mbit/s, 80 ms; tcp_rmem max 32 MiB, rmem_max 4 MiB,
# autotuning and window scaling on at both ends (read: tcp_window_scaling=1).
WIDE = {"tcp_rmem": 33554432.0, "tcp_wmem": 33554432.0, "rmem_max": 4194304.0, "wmem_max": 4194304.0,
        "tcp_rmem_min": 4096.0, "tcp_rmem_default": 131072.0, "tcp_moderate_rcvbuf": 1.0,
        "tcp_window_scaling": 1.0}  # fmt: skip
WAN80 = PathBaseline(
    "b42-wan80",
    0.0,
    rtt_min_seconds=0.0805,
    bandwidth_bytes_per_second=12.5e6,
    bandwidth_source="configured",
    mtu_bytes=1500,
    buffers={"local": WIDE, "remote": WIDE},
    congestion_control={"local": "cubic", "remote": "bbr"},
)


def unscaled_download(receive_buffer: float = 371923.0) -> Result:
    """The breaker's http download of 8 MiB with window scaling stripped from its SYNs:
    no wscale on either end's data socket, the remote sender advertised 65535 B, limited
    by it 35% of its 11.5 s busy time, over 83.9 ms: 0.78 MB/s; steady 0.75 MB/s; the
    receive buffer autotuned to 371923 B; no loss; route windows 0 (none read)."""
    rate = 0.75e6
    return download(
        file_bytes=8 * MiB,
        duration_seconds=8 * MiB / rate + 0.4,
        retransmits_sender=0,
        congestion_control="bbr",
        remote="b42-wan80",
        tcp_remote=sender(busy_seconds=11.5, rwnd_limited_seconds=4.0, snd_wnd_median_bytes=65535.0,
                          rtt_avg_seconds=0.0839, sender_backlog_ratio=0.95, sending_samples=11.0,
                          segs_out=5800, wscale_streams=0.0, unscaled_streams=1.0),
        tcp_local={"rcvbuf_max_bytes": receive_buffer, "wscale_streams": 0.0, "unscaled_streams": 1.0,
                   "data_start_seconds": 0.4, "data_end_seconds": 8 * MiB / rate + 0.4,
                   "steady_rate_bytes_per_second": rate},
    )  # fmt: skip


def test_window_scaling_stripped_on_the_path_is_the_path_not_a_route_window() -> None:
    reason, side, words, step = judged(unscaled_download(), WAN80)
    assert (reason, side) == ("receive_window", "path"), words
    assert (
        "neither end negotiated window scaling (no wscale in tcp_info): the window is capped at 64 KiB "
        "whatever the buffers"
    ) in words
    assert "something between the sites strips the option from the SYNs" in words
    assert "65.53 kB (65535 B) (the median the sender saw) over 83.9 ms allows 0.78 MB/s" in words, words
    assert "route" not in words and "SO_RCVBUF" not in words, words
    assert "strips the window-scale option from the SYNs" in step and "parallel streams" in step, step
    assert "ip route" not in step and "sysctl" not in step and "SO_RCVBUF" not in step, step


def test_window_scaling_off_on_the_receiver_names_it_and_its_sysctl() -> None:
    # The breaker's A': net.ipv4.tcp_window_scaling=0 on this host (the download's receiver).
    off = dataclasses.replace(WAN80, buffers={"local": {**WIDE, "tcp_window_scaling": 0.0}, "remote": WIDE})
    reason, side, words, step = judged(unscaled_download(), off)
    assert (reason, side) == ("receive_window", "local"), words
    assert "net.ipv4.tcp_window_scaling=0 on this host" in words and "route" not in words, words
    assert step.startswith("on this host: sysctl -w net.ipv4.tcp_window_scaling=1"), step
    assert "ip route" not in step and "SO_RCVBUF" not in step and "tcp_rmem" not in step, step
    # An upload's receiver is the remote: its sysctl, read over its stats command.
    remote_off = dataclasses.replace(WAN80, buffers={"local": WIDE, "remote": {**WIDE, "tcp_window_scaling": 0.0}})
    r = unscaled_download(402000.0)
    up = dataclasses.replace(r, direction="upload", tcp_local=r.tcp_remote, tcp_remote=r.tcp_local)
    reason, side, words, step = judged(up, remote_off)
    assert (reason, side) == ("receive_window", "remote"), words
    assert "set by its program" not in words and "SO_RCVBUF" not in step, (words, step)
    assert step.startswith("on the remote (b42-wan80): sysctl -w net.ipv4.tcp_window_scaling=1"), step


def test_a_64_kib_window_with_scaling_negotiated_is_not_called_unscaled() -> None:
    # The same numbers with wscale seen on the data stream: not the missing option.
    r = unscaled_download()
    scaled = dataclasses.replace(
        r,
        tcp_remote={**r.tcp_remote, "wscale_streams": 1.0, "unscaled_streams": 0.0},
        tcp_local={**r.tcp_local, "wscale_streams": 1.0, "unscaled_streams": 0.0},
    )
    reason, side, words, step = judged(scaled, WAN80)
    assert (reason, side) == ("receive_window", "local"), words
    assert "window scaling" not in words and "window-scale" not in step, (words, step)
    # Not read at all (a journal from before the count): nothing said of scaling either.
    unread = dataclasses.replace(
        r,
        tcp_remote={k: v for k, v in r.tcp_remote.items() if "scaled" not in k and "wscale" not in k},
        tcp_local={k: v for k, v in r.tcp_local.items() if "scaled" not in k and "wscale" not in k},
    )
    assert "window scaling" not in judged(unread, WAN80)[2]


def test_a_verdict_whose_bound_is_not_met_is_withheld_with_each_distance() -> None:
    # Window-limited 40% of its busy time by its clock, but the window it was advertised
    # (3 MB over 81 ms: 37 MB/s) allows 7.4x the 5 MB/s steady rate: not the window.
    rate = 5e6
    r = download(
        duration_seconds=64 * MiB / rate,
        tcp_remote=sender(busy_seconds=13.0, rwnd_limited_seconds=5.2, snd_wnd_median_bytes=3e6,
                          rtt_avg_seconds=0.081, sender_backlog_ratio=0.9, sending_samples=40.0),
        tcp_local={"data_start_seconds": 0.2, "data_end_seconds": 64 * MiB / rate,
                   "steady_rate_bytes_per_second": rate},
    )  # fmt: skip
    reason, _, words, _ = judged(r)
    assert reason == "", words
    assert words.startswith("withheld receive_window: the steady rate 5.00 MB/s (40 Mbit/s) is 14% of its bound"), words
    assert "receive_window 37.04 MB/s (296 Mbit/s) (the steady rate 14% of it)" in words
    assert "path_capacity 12.50 MB/s (100 Mbit/s) (the steady rate 40% of it)" in words


def test_next_steps_never_recommend_pacing_to_a_bbr_sender_at_a_full_lossy_link() -> None:
    r = download(
        duration_seconds=64 * MiB / 11.5e6,
        tcp_remote=sender(delivery_rate_median_bytes_per_second=11.5e6),
        retransmits_sender=300,
        congestion_control="bbr",
    )
    reason, _, _, step = judged(r)
    assert reason == "link_capacity" and "=bbr" not in step and "already paces" in step, step
