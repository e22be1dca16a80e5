"""The limiting-factor rules and the buffer advice, on hand-made summaries (pure units;
tests/lab/test_why_slow.py proves each verdict on real transfers)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from bigbinf.cli import format_paths, main
from bigbinf.config import ConfigError, parse_config
from bigbinf.history.advice import buffer_changes, target_buffer
from bigbinf.journal.store import BaselineJournal, Journal, baseline_path
from bigbinf.judge import vetoes
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.rules import Limit
from bigbinf.judge.verdict import NO_TCP_STATE, judge_limit, leaves_out_of_baselines
from bigbinf.result import LIMITS, PathBaseline, Result

from ..support import evidence

MiB = 1 << 20
PATH = PathBaseline("lab", 0.0, rtt_min_seconds=0.04, bandwidth_bytes_per_second=25e6, bandwidth_source="lab")
# The same path with our receive and the remote's send maxima below its 1 MB BDP.
CAPPED = PathBaseline(
    "lab",
    0.0,
    rtt_min_seconds=0.04,
    bandwidth_bytes_per_second=25e6,
    bandwidth_source="lab",
    buffers={
        "local": {"tcp_rmem": 262144.0, "tcp_wmem": 4194304.0},
        "remote": {"tcp_rmem": 6291456.0, "tcp_wmem": 131072.0},
    },
)


# The remote seen as it ran (Result.remote_view): every listing answered on time, its
# programs found.  The tests of a remote not seen say so.
SEEN = {"listings_expected": 100.0, "listings_received": 100.0, "listing_late_max_seconds": 0.05, "programs_seen": 1.0}


def download(**kw: object) -> Result:
    values: dict = {
        "remote_view": SEEN,
        "protocol": "http",
        "remote": "lab",
        "dataset": "f64m",
        "direction": "download",
        "start_timestamp": 0.0,
        "outcome": "ok",
        "duration_seconds": 20.0,
        "file_bytes": 64 * MiB,
        "transport": "tcp",
        "packets_down": 46_000,
    }
    values.update(kw)
    return Result(**values)


def upload(**kw: object) -> Result:
    return download(direction="upload", **kw)


def sender(**kw: float) -> dict[str, float]:
    return {
        "busy_seconds": 19.0,
        "rwnd_limited_seconds": 0.0,
        "sndbuf_limited_seconds": 0.0,
        "delivery_rate_median_bytes_per_second": 3.3e6,
        "segs_out": 46_000,
        **kw,
    }


def test_a_full_link_is_link_capacity_even_with_drops() -> None:
    r = download(
        duration_seconds=2.8, tcp_remote=sender(delivery_rate_median_bytes_per_second=24e6), retransmits_sender=300
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and limit.reason == "link_capacity"
    assert "96% of the path's" in limit.evidence


def test_just_below_the_link_share_is_not_link_capacity() -> None:
    r = download(duration_seconds=3.5, tcp_remote=sender())  # 19.2 MB/s: 77%
    limit = judge_limit(r, PATH)
    # Nothing else to blame either: no verdict rather than a guess (never "application"
    # without evidence that the sender was idle).
    assert limit is not None and limit.reason == "" and limit.evidence.startswith("no limit found")
    # The capture's payload rate over the packet span counts, not start-up.
    wire = download(
        duration_seconds=3.5,
        tcp_remote=sender(),
        payload_bytes_down=64 * MiB,
        first_packet_timestamp=100.0,
        last_packet_timestamp=102.9,
    )
    assert judge_limit(wire, PATH).reason == "link_capacity"  # type: ignore[union-attr]
    # A bursty sender's per-ACK delivery rate does not make a full link.
    bursty = download(tcp_remote=sender(delivery_rate_median_bytes_per_second=200e6))
    assert judge_limit(bursty, PATH).reason == ""  # type: ignore[union-attr]
    # The steady rate (past slow start) counts, not the whole transfer's average; and both
    # as wire rates (the capture's bytes on the wire per payload byte: headers count).
    steady = download(
        duration_seconds=3.5,
        tcp_remote=sender(),
        tcp_local={"steady_rate_bytes_per_second": 23.5e6, "data_start_seconds": 0.2, "data_end_seconds": 3.4},
        wire_bytes_down=int(64 * MiB * 1.045),
        payload_bytes_down=64 * MiB,
    )
    limit = judge_limit(steady, PATH)
    assert limit is not None and limit.reason == "link_capacity" and limit.side == "path"
    assert "steady rate 23.50 MB/s" in limit.evidence and "on the wire: 98% of the path's" in limit.evidence


def test_window_limited_sender_with_a_reading_receiver_is_receive_window() -> None:
    r = download(
        tcp_remote=sender(rwnd_limited_seconds=17.0),
        tcp_local={"rcvbuf_max_bytes": 262144.0, "rcv_queue_ratio_avg": 0.05},
    )
    limit = judge_limit(r, CAPPED)
    assert limit is not None and limit.reason == "receive_window"
    assert "89% of its 19.0 s busy time" in limit.evidence
    assert "the receiver's buffer grew to 262.14 kB (262144 B), its tcp_rmem maximum" in limit.evidence
    assert "below the BDP 1.00 MB" in limit.evidence
    # The clock alone says so too, without the buffers.
    assert judge_limit(r, PATH).reason == "receive_window"  # type: ignore[union-attr]


def test_window_limited_because_the_receiver_does_not_read_is_application() -> None:
    r = download(tcp_remote=sender(rwnd_limited_seconds=17.0), tcp_local={"rcv_queue_ratio_avg": 0.9})
    limit = judge_limit(r, PATH)
    assert limit is not None and limit.reason == "application"
    assert "90% full" in limit.evidence


def test_send_buffer_by_its_clock_or_its_ceiling() -> None:
    r = download(tcp_remote=sender(sndbuf_limited_seconds=15.0, sndbuf_max_bytes=131072.0))
    limit = judge_limit(r, CAPPED)
    assert limit is not None and limit.reason == "send_buffer"
    assert "79% of its 19.0 s" in limit.evidence and "tcp_wmem maximum 131.07 kB" in limit.evidence
    paced = download(tcp_remote=sender(sndbuf_limited_seconds=2.0, sndbuf_max_bytes=131072.0))
    limit = judge_limit(paced, CAPPED)
    assert limit is not None and limit.reason == "send_buffer" and limit.side == "remote"
    # Said by the ceiling alone: the clock's 11% is not quoted as evidence for it.
    assert "limited by its send buffer" not in limit.evidence
    assert judge_limit(paced, PATH).reason == ""  # type: ignore[union-attr]  # no ceiling known


def test_the_larger_clock_decides_between_the_two_buffers() -> None:
    r = download(tcp_remote=sender(rwnd_limited_seconds=7.0, sndbuf_limited_seconds=9.0))
    assert judge_limit(r, PATH).reason == "send_buffer"  # type: ignore[union-attr]


def test_without_the_sender_a_receiver_buffer_at_a_ceiling_below_bdp_is_receive_window() -> None:
    r = download(tcp_local={"rcvbuf_max_bytes": 262144.0})
    limit = judge_limit(r, CAPPED)
    assert limit is not None and limit.reason == "receive_window" and "tcp_rmem maximum" in limit.evidence
    # Small, but below its maximum: autotuning had room, the transfer did not ask for more.
    idle = download(tcp_local={"rcvbuf_max_bytes": 200000.0}, tcp_remote=sender(busy_seconds=2.0))
    assert judge_limit(idle, CAPPED).reason == "application"  # type: ignore[union-attr]
    # A cap through tcp_buffer_max (a sweep's) is the ceiling, below the host's larger sysctl.
    swept = download(tcp_local={"rcvbuf_max_bytes": 131072.0}, tcp_buffer_max_bytes=131072)
    limit = judge_limit(swept, CAPPED)
    assert limit is not None and limit.reason == "receive_window" and "tcp_buffer_max cap 131.07 kB" in limit.evidence


def test_retransmits_make_congestion_from_the_best_count() -> None:
    kernel = download(tcp_remote=sender(), retransmits_sender=460, retransmits_wire=80)
    limit = judge_limit(kernel, PATH)
    assert limit is not None and limit.reason == "congestion"
    assert "460 retransmitted of 46000 segments (1.00%, the sender's kernel)" in limit.evidence
    wire_only = download(tcp_local={"rcvbuf_max_bytes": 8e6}, retransmits_wire=80)
    limit = judge_limit(wire_only, PATH)
    assert limit is not None and limit.reason == "congestion" and "lower bound" in limit.evidence
    below = download(tcp_remote=sender(), retransmits_sender=40)  # 0.09%: below the share
    assert judge_limit(below, PATH).reason == ""  # type: ignore[union-attr]
    # With loss, a buffer at its ceiling is not the limit: cwnd stayed below the window
    # (the clock says 1%), and more buffer would buy nothing.
    lossy = download(
        tcp_remote=sender(rwnd_limited_seconds=0.2), tcp_local={"rcvbuf_max_bytes": 262144.0}, retransmits_sender=230
    )
    limit = judge_limit(lossy, CAPPED)
    assert limit is not None and limit.reason == "congestion" and limit.side == "path"


def test_an_idle_sender_is_application() -> None:
    r = download(tcp_remote=sender(busy_seconds=2.0, app_limited_ratio=0.8))
    limit = judge_limit(r, PATH)
    assert limit is not None and (limit.reason, limit.side) == ("application", "remote")
    assert "data in flight 10% of the 20.0 s data phase" in limit.evidence and "80%" in limit.evidence
    # A fine-grained throttle keeps data in flight, but never a backlog of unsent data.
    fine = download(tcp_remote=sender(sender_backlog_ratio=0.1))
    limit = judge_limit(fine, PATH)
    assert limit is not None and limit.reason == "application" and "unsent data in 10% of its samples" in limit.evidence


def test_an_idle_sender_outranks_its_loss_in_slow_start() -> None:
    # nginx's limit_rate: the sender idle 2.8 s of 8.3 s, and 6% lost in slow start: the
    # throttle is the limit, not the network.
    r = download(
        duration_seconds=8.3, file_bytes=16 * MiB, tcp_remote=sender(busy_seconds=2.8), retransmits_sender=2800
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and limit.reason == "application"


def test_a_program_on_a_core_or_queued_for_one_is_cpu_with_its_side() -> None:
    ssh = {"seconds": 19.0, "cpu_share": 0.55, "runnable_share": 0.97, "io_wait_share": 0.0, "samples": 40.0}
    r = download(
        tcp_remote=sender(busy_seconds=6.0), programs={"local ssh": ssh, "remote sshd": {**ssh, "runnable_share": 0.4}}
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and (limit.reason, limit.side) == ("cpu", "local")
    assert (
        "ssh (this host) was on a core or queued for one 97% of its 19.0 s: it used 55% of a core and waited 42%"
        in limit.evidence
    )
    # A program that lived for a moment (a login helper) does not count.
    brief = download(tcp_remote=sender(busy_seconds=6.0), programs={"local ssh": {**ssh, "seconds": 1.0}})
    assert judge_limit(brief, PATH).reason == "application"  # type: ignore[union-attr]


def test_a_program_waiting_on_storage_is_disk() -> None:
    # On storage in 90% of its samples: working all its life it allows rate / 0.92.
    scp = {"seconds": 19.0, "cpu_share": 0.01, "runnable_share": 0.02, "io_wait_share": 0.9, "samples": 50.0}
    r = upload(tcp_local=sender(busy_seconds=4.0), programs={"local scp": scp})
    limit = judge_limit(r, PATH)
    assert limit is not None and (limit.reason, limit.side) == ("disk", "local"), limit
    assert "scp (this host) waited on storage in 90% of 50 samples" in limit.evidence
    assert "working all its life it allows" in limit.evidence and "the transfer's steady rate was" in limit.evidence
    # In 60% of them, asleep most of the rest, no IO limit read: its bound is not met, so
    # neither disk nor (its program not keeping up) application is named.
    half = upload(tcp_local=sender(busy_seconds=4.0), programs={"local scp": {**scp, "io_wait_share": 0.6}})
    limit = judge_limit(half, PATH)
    assert limit is not None and limit.reason == "", limit
    assert "not disk" in limit.evidence


def test_a_short_transfer_is_startup_with_the_size_that_would_reach_steady_state() -> None:
    # 32 MiB whose steady rate was the link's, but 0.6 s of its 2 s went to set-up and slow start.
    r = download(
        duration_seconds=2.0,
        file_bytes=32 * MiB,
        tcp_remote=sender(busy_seconds=1.8),
        tcp_local={"steady_rate_bytes_per_second": 23.9e6, "data_start_seconds": 0.35, "data_end_seconds": 1.98},
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and (limit.reason, limit.side) == ("startup", "path")
    lost = 2.0 - 32 * MiB / 23.9e6
    assert f"cost {lost:.2f} s of the 2.00 s transfer" in limit.evidence
    assert "connection set-up 0.35 s before the first data" in limit.evidence
    assert f"files of at least {9 * 23.9e6 * lost / 1e6:.2f} MB" in limit.evidence
    # 1 MiB over a 40 ms path: over in a few round trips; the path's rate stands in.
    short = download(duration_seconds=0.45, file_bytes=MiB, tcp_remote=sender(busy_seconds=0.4))
    limit = judge_limit(short, PATH)
    assert limit is not None and limit.reason == "startup" and "before a steady rate could show" in limit.evidence
    # With loss, a slow ramp is the loss's doing.
    lossy = download(
        duration_seconds=2.0,
        file_bytes=32 * MiB,
        tcp_remote=sender(busy_seconds=1.9),
        retransmits_sender=300,
        tcp_local={"steady_rate_bytes_per_second": 23.9e6, "data_start_seconds": 0.35, "data_end_seconds": 1.98},
    )
    assert judge_limit(lossy, PATH).reason in ("congestion", "link_capacity")  # type: ignore[union-attr]


def test_parallel_streams_are_judged_per_stream() -> None:
    r = download(
        tcp_remote=sender(
            busy_seconds=76.0,
            rwnd_limited_seconds=30.0,
            streams=4.0,
            stream_busy_max_seconds=19.0,
            stream_rwnd_share_min=0.38,
            stream_rwnd_share_max=0.41,
        )
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and limit.reason == "receive_window"
    assert "each of the sender's 4 streams was limited by the receive window 38%-41% of its busy time" in limit.evidence
    # Busy time summed over the streams never reads as more than the transfer.
    idle = download(tcp_remote=sender(busy_seconds=30.0, streams=4.0, stream_busy_max_seconds=7.5))
    limit = judge_limit(idle, PATH)
    assert limit is not None and "data in flight 38% of the 20.0 s data phase (its busiest stream)" in limit.evidence


def test_iperf3_is_never_judged_against_its_own_estimate() -> None:
    measured = PathBaseline(
        "lab", 0.0, rtt_min_seconds=0.04, bandwidth_bytes_per_second=3.4e6, bandwidth_source="iperf3"
    )
    r = download(protocol="iperf3", tcp_remote=sender(), retransmits_sender=4800)  # 10.4% lost
    limit = judge_limit(r, measured)
    assert limit is not None and limit.reason == "congestion"
    assert "known only from iperf3 itself" in limit.evidence and "10.43%" in limit.evidence


@pytest.mark.parametrize(
    "kw",
    [
        {"outcome": "failed", "tcp_remote": sender()},
        {},  # no TCP state from either end
    ],
)
def test_nothing_to_judge(kw: dict) -> None:
    assert judge_limit(download(**kw), PATH) is None


def test_a_udp_transfer_says_it_is_not_judged() -> None:
    # UDT carries the data over UDP: no kernel TCP state to judge by, and the evidence says
    # so instead of nothing.
    for kw in ({"tcp_remote": sender()}, {}):
        limit = judge_limit(download(transport="udp", protocol="gridftp-udt", **kw), PATH)
        assert limit is not None and limit.reason == "" and limit.evidence == NO_TCP_STATE


def test_without_a_baseline_the_kernel_counters_still_judge() -> None:
    r = download(tcp_remote=sender(rwnd_limited_seconds=17.0))
    limit = judge_limit(r, None)
    assert limit is not None and limit.reason == "receive_window" and "BDP" not in limit.evidence


def test_target_is_twice_the_bdp_in_whole_mib() -> None:
    assert target_buffer(1_000_000) == 2 * MiB
    assert target_buffer(1_100_000) == 3 * MiB
    assert target_buffer(10) == MiB


def test_buffer_changes_name_the_side_that_needs_them() -> None:
    local = {"tcp_rmem": 262144.0, "tcp_rmem_min": 4096.0, "tcp_rmem_default": 65536.0, "tcp_wmem": 4194304.0}
    remote = {"tcp_rmem": 6291456.0, "tcp_wmem": 131072.0, "tcp_wmem_min": 4096.0, "tcp_wmem_default": 16384.0}
    remote |= {"rmem_max": 212992.0, "wmem_max": 212992.0}
    changes = buffer_changes(1e6, {"local": local, "remote": remote}, ["download"])
    lines = {(c.side, c.line) for c in changes}
    assert ("local", 'sysctl -w net.ipv4.tcp_rmem="4096 65536 2097152"') in lines  # we receive downloads
    assert ("remote", 'sysctl -w net.ipv4.tcp_wmem="4096 16384 2097152"') in lines  # the remote sends them
    assert ("remote", 'sysctl -w net.core.wmem_max="2097152"') in lines
    # The remote's receive side and our send side do not matter for downloads.
    assert not any(c.kind in ("tcp_rmem", "rmem_max") and c.side == "remote" for c in changes)
    assert not any(c.side == "local" and c.kind == "tcp_wmem" for c in changes)
    uploads = buffer_changes(1e6, {"local": local, "remote": remote}, ["upload"])
    assert {(c.side, c.kind) for c in uploads} == {("remote", "rmem_max")}  # remote tcp_rmem 6 MiB suffices


def _site_config(tmp_path) -> Path:  # type: ignore[no-untyped-def]
    path = tmp_path / "site.yaml"
    path.write_text(
        "remotes: {site: {address: 198.18.0.2, data_dir: /data, key: /etc/hostname}}\n"
        "datasets: {f1m: {file: f1m.bin, size: 1MiB}}\n"
        "protocols: {http: {}}\n"
        f"journal: {{path: {tmp_path / 'journal.jsonl'}}}\n"
    )
    return path


def test_advise_names_an_unknown_remote_and_a_path_not_yet_probed(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = _site_config(tmp_path)
    assert main(["--config.file", str(config), "advise", "--remote", "nope"]) == 2
    assert "--remote nope: no such remote; configured: site" in capsys.readouterr().err
    assert main(["--config.file", str(config), "advise"]) == 0
    out = capsys.readouterr().out
    assert "== path site (198.18.0.2)" in out and "no path baseline yet: run a round first" in out


def test_advise_from_the_journals_prints_the_lines_and_the_network_verdict(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    config = _site_config(tmp_path)
    journal = tmp_path / "journal.jsonl"
    # A 10 TB/s estimate makes a BDP no host here can reach: the local lines must appear.
    BaselineJournal(baseline_path(journal)).append(
        PathBaseline(
            "site",
            1.0,
            probes_sent=20,
            probes_answered=20,
            rtt_min_seconds=0.1,
            bandwidth_bytes_per_second=1e13,
            bandwidth_source="configured",
        )
    )
    Journal(journal).append(
        download(
            remote="site",
            limited_by="link_capacity",
            limited_side="path",
            limited_evidence="rate 96%",
            limited_next_step="the path is full: nothing on either host makes this faster",
        )
    )
    assert main(["--config.file", str(config), "advise"]) == 0
    out = capsys.readouterr().out
    assert "bandwidth 10000000.00 MB/s" in out and "http/f64m/download" in out
    assert ": link_capacity (path): rate 96%\n       next: the path is full: nothing on either host" in out
    line = re.search(r'sysctl -w net\.ipv4\.tcp_rmem="\d+ \d+ (\d+)"\s+# local', out)
    assert line and int(line.group(1)) >= 2 * 1e13 * 0.1  # 2 x BDP
    assert "the remote's buffers cannot be read: give remotes.site.stats_command" in out
    assert "the network, not the host, is the limit" in out and "will not make them faster now" in out
    # This host is "this host" whatever side the last verdict named (it read "(path)" after a
    # path verdict, "(local)" after a local one).
    assert "to lift the buffer limit on this host:" in out
    Journal(journal).append(download(remote="site", start_timestamp=5.0, limited_by="cpu", limited_side="local"))
    assert main(["--config.file", str(config), "advise"]) == 0
    assert "to lift the buffer limit on this host:" in capsys.readouterr().out


def test_a_download_whose_sender_cannot_be_asked_is_not_guessed() -> None:
    # Our buffer had room, no loss on the wire, the link not full: the remote's limits
    # cannot be ruled out, so no verdict rather than "application".
    r = download(tcp_local={"rcvbuf_max_bytes": 6e6, "rcv_queue_ratio_avg": 0.01})
    limit = judge_limit(r, PATH)
    assert limit is not None and limit.reason == "" and "the sender's TCP state is unknown" in limit.evidence


def test_an_iperf3_estimate_lets_the_buffer_rules_speak_first() -> None:
    # The estimate came from an iperf3 test that the same small buffer held down: a copy
    # as fast as it is not proof of a full path.
    measured = PathBaseline(
        "lab", 0.0, rtt_min_seconds=0.04, bandwidth_bytes_per_second=3.4e6, bandwidth_source="iperf3"
    )
    r = download(tcp_remote=sender(rwnd_limited_seconds=17.0))  # 64 MiB in 20 s: 3.36 MB/s, 99%
    assert judge_limit(r, measured).reason == "receive_window"  # type: ignore[union-attr]
    assert judge_limit(download(tcp_remote=sender()), measured).reason == "link_capacity"  # type: ignore[union-attr]


def test_a_zero_bandwidth_is_refused_and_unprobed_paths_say_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = _site_config(tmp_path)
    text = config.read_text().replace("key: /etc/hostname}", "key: /etc/hostname, bandwidth: 0bit}")
    with pytest.raises(ConfigError) as err:
        parse_config(text, "site.yaml")
    assert "remotes.site.bandwidth: '0bit': a path's bandwidth must be more than 0" in err.value.render()
    assert format_paths([PathBaseline("site", 0.0)]) == "path site: not probed"


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (download(tcp_remote=sender(busy_seconds=6.0), programs={"local ssh": {"seconds": 19.0, "cpu_share": 0.6,
          "runnable_share": 0.98, "io_wait_share": 0.0, "samples": 30.0}}), "HPN-scp"),
        (download(tcp_remote=sender(busy_seconds=6.0), programs={"local gzip": {"seconds": 19.0, "cpu_share": 0.9,
          "runnable_share": 0.95, "io_wait_share": 0.0, "samples": 30.0}}), "gzip used all the CPU it could get"),
        (download(tcp_remote=sender(rwnd_limited_seconds=17.0), tcp_local={"rcvbuf_max_bytes": 262144.0}),
         "on this host: sysctl -w net.ipv4.tcp_rmem='4096 131072 2000000' (its maximum to 2 x BDP)"),
        (download(tcp_local={"rcvbuf_max_bytes": 131072.0}, tcp_buffer_max_bytes=131072),
         "raise or drop the protocol's tcp_buffer_max (131.07 kB"),
        (download(tcp_remote=sender(), retransmits_sender=460),
         "the network: talk to the path's operator (460 retransmitted"),
        (download(tcp_remote=sender(busy_seconds=2.0)), "the sending program sent at"),
        (download(duration_seconds=0.45, file_bytes=MiB, tcp_remote=sender(busy_seconds=0.4)),
         "larger files (at least"),
    ],
)  # fmt: skip
def test_each_verdict_names_a_concrete_next_step(result: Result, expected: str) -> None:
    limit = judge_limit(result, CAPPED)
    assert limit is not None and expected in limit.next_step, limit


def test_storage_waits_count_only_where_tcp_shows_they_mattered() -> None:
    # curl writing a lossy download was in I/O wait in 40% of the samples, but the sender
    # always had data to send and lost 1%: the network held it back, not curl's disk.
    curl = {"seconds": 19.0, "cpu_share": 0.01, "runnable_share": 0.05, "io_wait_share": 0.4, "samples": 20.0}
    r = download(tcp_remote=sender(sender_backlog_ratio=1.0), retransmits_sender=460, programs={"local curl": curl})
    assert judge_limit(r, PATH).reason == "congestion"  # type: ignore[union-attr]


def test_a_short_transfer_whose_ssh_was_busy_logging_in_is_startup() -> None:
    # 1 MiB over scp: ssh's key exchange kept it on a core (a busy machine), but the file
    # was over in a few round trips: the set-up is the limit.
    ssh = {"seconds": 1.9, "cpu_share": 0.3, "runnable_share": 0.95, "io_wait_share": 0.0, "samples": 20.0}
    r = upload(
        duration_seconds=1.94, file_bytes=MiB, tcp_local=sender(busy_seconds=0.3, segs_out=760),
        tcp_remote={"data_start_seconds": 1.65, "data_end_seconds": 1.9}, programs={"local ssh": ssh},
    )  # fmt: skip
    limit = judge_limit(r, PATH)
    assert limit is not None and limit.reason == "startup" and "connection set-up 1.65 s" in limit.evidence


def test_set_up_spent_queued_for_a_cpu_is_not_startup() -> None:
    # A full link (steady 23.9 MB/s of 25), 64 MiB in 3.8 s: 0.96 s of set-up before the
    # first data, on a host whose cores were taken (seen beside two CPU burners).
    def full_link(queued: dict[str, float]) -> Result:
        programs = {
            name: {"seconds": 3.7, "cpu_share": 0.2, "runnable_share": 0.5, "io_wait_share": 0.0, "samples": 30.0,
                   "run_queue_seconds_before_data": seconds}
            for name, seconds in queued.items()
        }  # fmt: skip
        return download(
            duration_seconds=3.8,
            tcp_remote=sender(busy_seconds=2.8),
            tcp_local={"steady_rate_bytes_per_second": 23.9e6, "data_start_seconds": 0.96, "data_end_seconds": 3.78},
            programs=programs,
        )

    lost = 3.8 - 64 * MiB / 23.9e6  # 0.99 s, 26% of the transfer
    # Its programs queued 0.3 + 0.45 s of the set-up for a core: what is left (0.24 s) is
    # under the 20% a start must cost; the steady phase's limit is the verdict.
    busy = judge_limit(full_link({"local ssh": 0.3, "remote sshd": 0.45}), PATH)
    assert busy is not None and busy.reason == "link_capacity", busy
    # Queued for less: the start still cost over 20%, and the evidence says how much was the CPU's.
    some = judge_limit(full_link({"local ssh": 0.1}), PATH)
    assert some is not None and some.reason == "startup", some
    assert (
        f"cost {lost:.2f} s" in some.evidence
        and "set-up 0.96 s before the first data (0.10 s of it queued for a CPU)" in some.evidence
    )
    # Never more than the set-up itself: a program's queueing over the whole transfer is not the set-up's.
    capped = judge_limit(full_link({"local ssh": 5.0}), PATH)
    assert capped is not None and capped.reason == "link_capacity"
    # Without the measurement (a remote host's programs, older records): as before.
    plain = judge_limit(full_link({}), PATH)
    assert plain is not None and plain.reason == "startup" and "queued for a CPU" not in plain.evidence


def test_the_steady_rate_is_never_below_the_capture_s_average() -> None:
    # A full 25 MB/s link: the capture carried 64 MiB of payload in 2.8 s (24 MB/s), but
    # the listings' fit said 20 MB/s (sparse listings, each late by its wait for a CPU).
    # Slow start only lowers an average: the steady rate was at least 24 MB/s.
    def full(first: float, duration: float = 3.0) -> Result:
        return download(
            duration_seconds=duration,
            tcp_remote=sender(busy_seconds=2.9),
            tcp_local={"steady_rate_bytes_per_second": 20e6, "data_start_seconds": 0.1, "data_end_seconds": 2.95},
            wire_measured=True,
            payload_bytes_down=64 * MiB,
            wire_bytes_down=int(64 * MiB * 1.05),
            first_packet_timestamp=first,
            last_packet_timestamp=2.9,
        )

    limit = judge_limit(full(0.1), PATH)
    assert limit is not None and limit.reason == "link_capacity", limit
    # Where the capture's average (and the file's over the wall clock) is no higher than
    # the fit, the fit stands: 64 MiB over 4 s is 16.8 MB/s; 20 MB/s is 84% on the wire.
    slow = judge_limit(full(-1.1, duration=4.2), PATH)
    assert slow is not None and slow.reason != "link_capacity", slow


def test_a_receiver_that_sleeps_more_than_it_waits_on_storage_paces_itself() -> None:
    # curl --limit-rate beside other writers: its queue stood full, it waited on storage in
    # 36% of its samples and slept in most of the rest: its own pace, not its disk.
    def reading(curl: dict[str, float]) -> Result:
        return download(
            tcp_remote=sender(rwnd_limited_seconds=17.0),
            tcp_local={"rcv_queue_ratio_avg": 0.9},
            programs={"local curl": curl},
        )

    paced = {"seconds": 19.0, "cpu_share": 0.01, "runnable_share": 0.02, "io_wait_share": 0.36, "samples": 40.0}
    limit = judge_limit(reading(paced), PATH)
    assert limit is not None and (limit.reason, limit.side) == ("application", "local"), limit
    # One that rarely sleeps with data waiting is held by its storage.
    writing = {**paced, "runnable_share": 0.3, "io_wait_share": 0.6}
    limit = judge_limit(reading(writing), PATH)
    assert limit is not None and (limit.reason, limit.side) == ("disk", "local"), limit
    assert "curl (this host) waited on storage in 60% of 40 samples" in limit.evidence


def test_a_reader_that_waited_for_a_cpu_on_a_busy_host_is_not_called_slow_by_itself() -> None:
    # Its queue stood full; this host was busy.  curl waited for a CPU 30% of its life and
    # ran 10%: its pace and the CPU it was denied cannot be told apart (withheld); the
    # host's CPU bound (on a core or queued 40%: it allowed 2.5x the rate) does not hold.
    busy = {"transfer_programs": 0.3, "load1": 6.0}

    def reading(curl: dict[str, float], host_busy: dict[str, float] = busy) -> Result:
        return download(
            tcp_remote=sender(rwnd_limited_seconds=17.0),
            tcp_local={"rcv_queue_ratio_avg": 0.85},
            programs={"local curl": curl},
            host_busy=host_busy,
        )

    starved = {"seconds": 19.0, "cpu_share": 0.1, "runnable_share": 0.4, "io_wait_share": 0.0, "samples": 40.0}
    starved["cpu_throttled_share"] = 0.0
    limit = judge_limit(reading(starved), PATH)
    assert limit is not None and limit.reason == "", limit
    assert "not application (" in limit.evidence and "curl (this host) waited for a CPU 30%" in limit.evidence
    assert text_contradictions(limit, reading(starved), PATH) == []
    # A quiet host: the same reader is its own pace.
    assert judge_limit(reading(starved, {"load1": 0.5}), PATH).reason == "application"  # type: ignore[union-attr]
    # A throttled reader beside the burners waits a little at each wake-up: still its pace.
    paced = {**starved, "cpu_share": 0.02, "runnable_share": 0.06}
    limit = judge_limit(reading(paced), PATH)
    assert limit is not None and (limit.reason, limit.side) == ("application", "local"), limit
    # On a core or queued nearly all its life, waiting most of it: the host held it.
    held = {**starved, "cpu_share": 0.15, "runnable_share": 0.97}
    limit = judge_limit(reading(held), PATH)
    assert limit is not None and (limit.reason, limit.side) == ("busy_host", "local"), limit


def test_a_steady_rate_fitted_above_the_path_is_not_a_reason_for_startup() -> None:
    # A policer's bursts (or listings each late for a CPU) fitted a steady rate at 185% of
    # the path's 25 MB/s; the transfer averaged 93% of it, lossless.
    fitted = {"steady_rate_bytes_per_second": 1.85 * 25e6, "data_start_seconds": 0.05, "data_end_seconds": 1.43}
    r = download(
        duration_seconds=64 * MiB / (0.93 * 25e6),
        tcp_remote=sender(busy_seconds=2.8),
        tcp_local=fitted,
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and limit.reason == "link_capacity", limit
    assert "(100% of the path's 25.00 MB/s" in limit.evidence, limit.evidence


def test_a_data_phase_stretched_by_waits_for_a_cpu_is_not_startup() -> None:
    # 64 MiB at a steady 24 MB/s takes 2.8 s; it took 4.4 s, and curl queued for a core
    # 1.2 s of it after the first data (CPU burners): the host's time, not slow start's.
    progress = {"steady_rate_bytes_per_second": 24e6, "data_start_seconds": 0.05, "data_end_seconds": 4.38}
    curl = {"seconds": 4.4, "cpu_share": 0.1, "runnable_share": 0.4, "io_wait_share": 0.0, "samples": 40.0}

    def took(queued: float) -> Result:
        program = {**curl, "run_queue_seconds": queued, "run_queue_seconds_before_data": 0.01}
        return download(
            duration_seconds=4.4,
            tcp_remote=sender(busy_seconds=4.3),
            tcp_local=progress,
            programs={"local curl": program},
        )

    limit = judge_limit(took(1.2), PATH)
    assert limit is not None and limit.reason == "link_capacity", limit
    # Without those waits, 1.6 s of 4.4 s below the steady rate is still not the start's:
    # slow start moves 64 MiB in at most log2(64 MiB / 10 segments) + 4 = 16 round trips,
    # 0.65 s on this 40 ms path.  The steady phase's limit stands.
    limit = judge_limit(took(0.01), PATH)
    assert limit is not None and limit.reason == "link_capacity", limit


# ---------------------------------------------------------------- issue 34: the numbers an
# independent site measured, each a verdict that did not hold there.

# 100 Mbit/s paths: 10 ms (the starved sshd), 80 ms (the short queue, the 1 MiB upload).
PATH10 = PathBaseline("site", 0.0, rtt_min_seconds=0.01, bandwidth_bytes_per_second=12.5e6, bandwidth_source="iperf3")
PATH80 = PathBaseline("site", 0.0, rtt_min_seconds=0.08, bandwidth_bytes_per_second=12.5e6, bandwidth_source="iperf3")
PATH20 = PathBaseline("site", 0.0, rtt_min_seconds=0.02, bandwidth_bytes_per_second=25e6, bandwidth_source="lab")


def text_contradictions(limit: Limit, r: Result, baseline: PathBaseline | None) -> list[str]:
    return evidence.contradictions(
        limit.reason, limit.side, limit.evidence, vetoes.slow_start_seconds(Inputs.of(r, baseline))
    )


def starved_scp_download(remote_view: dict[str, float]) -> Result:
    """8 MiB by scp from a remote whose sshd was held to 5% of a core: 11 s on a 10 ms
    path, the first data after 0.3 s, the listings' steady rate 5 MB/s over the last half:
    9.3 s lost below it, of which the data phase's ramp was 8.9 s (~900 round trips)."""
    return download(
        protocol="scp",
        file_bytes=8 * MiB,
        duration_seconds=11.0,
        remote_view=remote_view,
        programs={},
        tcp_local={"data_start_seconds": 0.3, "data_end_seconds": 10.9, "steady_rate_bytes_per_second": 5e6},
    )


def test_nine_seconds_of_slow_start_on_a_10_ms_path_is_never_startup() -> None:
    # The remote's listings came late or not at all: the remote is starved, said with how late.
    late = {
        "listings_expected": 110.0,
        "listings_received": 12.0,
        "listing_late_max_seconds": 4.2,
        "programs_seen": 0.0,
    }
    r = starved_scp_download(late)
    limit = judge_limit(r, PATH10)
    assert limit is not None and (limit.reason, limit.side) == ("cpu", "remote"), limit
    assert "starved" in limit.evidence and "4.2 s late" in limit.evidence and "answered 12 of 110" in limit.evidence
    assert "CPU quota" in limit.next_step and "cipher" not in limit.next_step
    assert text_contradictions(limit, r, PATH10) == []
    # Its cgroup's throttling says the same, even with every listing on time.
    quota = {**SEEN, "cpu_throttled_share": 0.93}
    limit = judge_limit(starved_scp_download(quota), PATH10)
    assert limit is not None and (limit.reason, limit.side) == ("cpu", "remote")
    assert "held by its CPU quota 93% of the transfer" in limit.evidence
    # Not asked at all: nothing names the remote, and the 8.9 s are not called slow start
    # (which takes at most log2(8 MiB / 10 segments) + 4 = 13 round trips: 0.13 s).
    r = starved_scp_download({})
    limit = judge_limit(r, PATH10)
    assert limit is not None and limit.reason == "", limit
    assert "not startup" in limit.evidence and "not slow start" in limit.evidence
    assert "beyond the 0.13 s slow start" in limit.evidence, limit.evidence
    assert text_contradictions(limit, r, PATH10) == []


def test_a_short_late_remote_listing_is_not_starvation() -> None:
    # A second late on a 60 s transfer, every listing answered: not starved (1 s and 10%).
    view = {**SEEN, "listing_late_max_seconds": 1.5}
    limit = judge_limit(download(duration_seconds=60.0, remote_view=view, tcp_remote=sender(busy_seconds=59.0)), PATH)
    assert limit is not None and limit.reason != "cpu"


def test_late_listings_on_a_busy_host_or_a_lossy_path_do_not_make_a_starved_remote() -> None:
    # Measured beside CPU burners (load 10): an unstarved remote answered 8 of 18 listings,
    # the latest 1.7 s behind; this host's own ssh and ss waited.  Not the remote's CPU.
    view = {**SEEN, "listings_expected": 18.0, "listings_received": 8.0, "listing_late_max_seconds": 1.7}
    busy = {"transfer_programs": 0.3, "capture": 0.12, "load1": 10.0}
    r = download(duration_seconds=6.0, remote_view=view, host_busy=busy, tcp_remote=sender(busy_seconds=5.5))
    limit = judge_limit(r, PATH)
    assert limit is None or (limit.reason, limit.side) != ("cpu", "remote"), limit
    assert not vetoes.starved_remote(Inputs.of(r, PATH))
    # The starved sshd's own numbers (12 of 110 answered, 4.2 s late) on a busy host: the
    # listings say nothing of the remote there; its cgroup's throttling still would.
    late = {"listings_expected": 110.0, "listings_received": 12.0, "listing_late_max_seconds": 4.2}
    busy_start = dataclasses.replace(starved_scp_download(late), host_busy=busy)
    assert not vetoes.starved_remote(Inputs.of(busy_start, PATH10))
    throttled = dataclasses.replace(busy_start, remote_view={**late, "cpu_throttled_share": 0.6})
    assert "CPU quota 60%" in vetoes.starved_remote(Inputs.of(throttled, PATH10))
    # The same late listings with the sender losing 1.3% of its segments: the stats session
    # crossed that path too (retransmission timeouts), so no starvation is read from them.
    lossy = dataclasses.replace(
        starved_scp_download(late), retransmits_sender=600, tcp_remote=sender(busy_seconds=10.0)
    )
    assert Inputs.of(lossy, PATH10).loss >= 0.01  # 600 of ~46,000 segments: 1.3%
    assert not vetoes.starved_remote(Inputs.of(lossy, PATH10))


def test_late_listings_on_a_busy_host_count_beyond_its_own_waits() -> None:
    # A remote sshd at 5% of a core, its stats sessions through it, on a host at load 4.2
    # (a plain site's sftp download, 16 MiB on 20 ms): this host's programs waited 18% of
    # the 6.7 s (1.2 s); the listings came 6.4 s late, 5.2 s beyond that: starved.
    view = {"listings_expected": 16.0, "listings_received": 4.0, "listing_late_max_seconds": 6.42, "programs_seen": 0.0}
    busy = {"transfer_programs": 0.18, "capture": 0.01, "load1": 4.2}
    r = download(
        protocol="sftp", file_bytes=16 * MiB, duration_seconds=6.7, remote_view=view, host_busy=busy, programs={},
        tcp_remote=sender(busy_seconds=1.4, segs_out=11_673.0, app_limited_ratio=1.0),
    )  # fmt: skip
    limit = judge_limit(r, PATH20)
    assert limit is not None and (limit.reason, limit.side) == ("cpu", "remote"), limit
    assert "6.4 s late" in limit.evidence and "5.2 s beyond this host's 1.2 s of waits" in limit.evidence
    assert "answered" not in limit.evidence  # unanswered listings are a busy host's too
    assert text_contradictions(limit, r, PATH20) == []
    # Late by less than 3 s beyond what this host waited (4 s): the listings say nothing.
    waited = dataclasses.replace(r, host_busy={**busy, "transfer_programs": 0.6})
    assert not vetoes.starved_remote(Inputs.of(waited, PATH20))


def test_a_busy_host_does_not_stand_in_for_a_remote_not_ruled_out() -> None:
    # A remote sshd at 5% of a core, its listings unstarved, on a host at load 6.6 (a plain
    # site's scp download, 16 MiB on 20 ms): this host's programs waited 14% of the 4.0 s;
    # the remote sender was seen sending in one listing, flagged app-limited, its programs
    # seen for 1.7 s (their quota read once: no throttling share).  Not busy_host.
    view = {**SEEN, "listings_expected": 10.0, "listings_received": 6.0, "listing_late_max_seconds": 2.29,
            "cpu_quota_cores": 0.05}  # fmt: skip
    remote = {"seconds": 1.66, "cpu_seconds": 0.02, "run_queue_seconds": 0.18, "cpu_share": 0.01,
              "runnable_share": 0.12, "io_wait_share": 0.0, "samples": 2.0, "cpu_quota_cores": 0.05}  # fmt: skip
    r = download(
        protocol="scp", file_bytes=16 * MiB, duration_seconds=4.0, remote_view=view,
        host_busy={"transfer_programs": 0.14, "capture": 0.02, "load1": 6.6},
        programs={"remote sshd": remote, "remote sftp-server": {**remote, "runnable_share": 0.07}},
        tcp_remote=sender(busy_seconds=1.39, segs_out=11_694.0, app_limited_ratio=1.0, sender_backlog_ratio=0.0,
                          sending_samples=1.0),
        tcp_local={"data_start_seconds": 2.5, "data_end_seconds": 3.9},
    )  # fmt: skip
    limit = judge_limit(r, None)
    assert limit is not None and limit.reason == "", limit
    assert "not busy_host (this host was busy" in limit.evidence
    assert "programs were seen for 1.7 s of the 4.0 s transfer" in limit.evidence, limit.evidence
    # The sender seen with a backlog in most of enough listings: network-limited, no
    # program of either end held it; nor did this host's CPU, with no program of it seen
    # on a core or queued for one (vetoes.host_held): withheld, the busy host named.
    backlog = dataclasses.replace(r, tcp_remote={**r.tcp_remote, "sender_backlog_ratio": 0.9, "sending_samples": 6.0})
    assert not vetoes.remote_not_ruled_out(Inputs.of(backlog, None))
    limit = judge_limit(backlog, None)
    assert limit is not None and limit.reason == "", limit
    assert "not busy_host (this host was busy" in limit.evidence and "waited for the network" in limit.evidence
    # So are the remote's programs, seen doing the work for most of the transfer; but not
    # where their cgroup's quota held them as long as this host waited (20% of the time).
    longer = dataclasses.replace(r, programs={name: {**v, "seconds": 3.5} for name, v in r.programs.items()})
    assert not vetoes.remote_not_ruled_out(Inputs.of(longer, None))
    # Nor where the set-up was slower than the physics allows by more than this host's
    # waits then explain: 2.34 s before the first data (0.91 s allowed), this host's ssh
    # queued 0.28 s of it (the same sshd beside CPU burners, its data phase unthrottled).
    local = {"seconds": 5.4, "run_queue_seconds": 1.1, "run_queue_seconds_before_data": 0.28}
    slow = dataclasses.replace(
        longer,
        programs={**longer.programs, "local ssh": local},
        tcp_local={"data_start_seconds": 2.34, "data_end_seconds": 3.9},
    )
    said = vetoes.remote_not_ruled_out(Inputs.of(slow, PATH20))
    assert "the set-up took 2.34 s, 1.16 s beyond the 0.90 s" in said and "the 0.28 s this host's programs" in said
    assert not vetoes.remote_not_ruled_out(Inputs.of(slow, None))  # no RTT: what set-up takes is unknown
    held = dataclasses.replace(longer, remote_view={**view, "cpu_throttled_share": 0.197})
    assert "held by its CPU quota 20% of the time" in vetoes.remote_not_ruled_out(Inputs.of(held, None))
    limit = judge_limit(held, None)
    assert limit is not None and limit.reason == "", limit


def test_a_rate_above_the_path_estimate_makes_it_stale_never_the_path_full() -> None:
    # The journal's earlier iperf3 estimate of 2.7 MB/s, a transfer at 6.26 MB/s: 232%.
    stale = PathBaseline("site", 0.0, rtt_min_seconds=0.02, bandwidth_bytes_per_second=2.7e6, bandwidth_source="iperf3")
    r = download(file_bytes=25 * MiB, duration_seconds=25 * MiB / 6.264e6, tcp_remote=sender(busy_seconds=4.1))
    limit = judge_limit(r, stale)
    assert limit is not None and limit.reason not in ("link_capacity", "shared_path"), limit
    assert "is stale" in limit.evidence and "232% of it" in limit.evidence
    assert "the path is full" not in limit.evidence + limit.next_step
    assert "re-measure" in limit.next_step and "the next ok iperf3 test to lab renews it" in limit.next_step
    assert text_contradictions(limit, r, stale) == []
    # A policer's drops with it: congestion, the estimate still called stale.
    lossy = download(
        file_bytes=25 * MiB,
        duration_seconds=25 * MiB / 6.264e6,
        tcp_remote=sender(busy_seconds=4.1),
        retransmits_sender=1400,
    )
    limit = judge_limit(lossy, stale)
    assert limit is not None and limit.reason == "congestion" and "is stale" in limit.evidence
    # A configured estimate names the setting to correct.
    configured = dataclasses.replace(stale, bandwidth_source="configured")
    limit = judge_limit(r, configured)
    assert limit is not None and "correct remotes.lab.bandwidth" in limit.evidence
    # At the estimate (within STALE_SHARE): the link is full, as before.
    assert judge_limit(r, dataclasses.replace(stale, bandwidth_bytes_per_second=6.4e6)).reason == "link_capacity"  # type: ignore[union-attr]


def loss_bound_bbr(direction: str, retransmitted: float) -> Result:
    """scp of 64 MiB through a 100 Mbit/s, 80 ms path into a short queue (tbf latency
    50ms): BBR keeps data in flight all the time, its write queue empty of unsent data
    (what awaits retransmission is not notsent; ssh's channel window is full behind the
    holes), its kernel never app-limited, 9-24% of segments retransmitted."""
    segs = 50_000
    state = sender(
        busy_seconds=40.0,
        sender_backlog_ratio=0.0,
        app_limited_ratio=0.0,
        cwnd_max_segments=1100.0,
        sending_samples=300.0,
        segs_out=float(segs),
    )
    side = {"tcp_remote": state} if direction == "download" else {"tcp_local": state}
    return download(
        protocol="scp",
        direction=direction,
        duration_seconds=41.0,
        retransmits_sender=int(segs * retransmitted),
        tcp_local={**state, "data_start_seconds": 0.9, "data_end_seconds": 40.9} if direction == "upload" else {},
        **{k: v for k, v in side.items() if k != "tcp_local" or direction == "download"},
    )


@pytest.mark.parametrize("direction", ["download", "upload"])
@pytest.mark.parametrize("retransmitted", [0.09, 0.24])
def test_loss_bound_bbr_into_a_short_queue_is_congestion_never_application(
    direction: str, retransmitted: float
) -> None:
    r = loss_bound_bbr(direction, retransmitted)
    limit = judge_limit(r, PATH80)
    assert limit is not None and (limit.reason, limit.side) == ("congestion", "path"), limit
    assert "repaired in every round trip" in limit.evidence
    assert text_contradictions(limit, r, PATH80) == []
    # Without its window known, 1 segment in 20 retransmitted says the same.
    r = dataclasses.replace(r, tcp_remote={k: v for k, v in r.tcp_remote.items() if k != "cwnd_max_segments"})
    r = dataclasses.replace(r, tcp_local={k: v for k, v in r.tcp_local.items() if k != "cwnd_max_segments"})
    assert judge_limit(r, PATH80).reason == "congestion"  # type: ignore[union-attr]


def test_an_application_verdict_needs_its_kernel_to_have_seen_it_app_limited() -> None:
    # Unsent data in 10% of the samples, but app-limited in 0% of them: its kernel never
    # saw it wait for its program.  Never "application ... app-limited in 0%".
    r = download(tcp_remote=sender(busy_seconds=19.0, sender_backlog_ratio=0.1, app_limited_ratio=0.0))
    limit = judge_limit(r, PATH)
    assert limit is not None and limit.reason == "" and "app-limited in 0%" in limit.evidence, limit
    assert "not application" in limit.evidence
    flagged = download(tcp_remote=sender(busy_seconds=19.0, sender_backlog_ratio=0.1, app_limited_ratio=0.6))
    assert judge_limit(flagged, PATH).reason == "application"  # type: ignore[union-attr]


def test_a_bursty_remote_throttle_needs_no_share_of_the_kernels_flag() -> None:
    # nginx's limit_rate 2m, 8 MiB over 200 Mbit/s and 40 ms (the lab's
    # test_verdicts_programs): its socket empty 71% of the 3.0 s data phase, unsent data
    # in 25% of the samples, no loss, but flagged app-limited in only 2% of them: the
    # kernel flags the round trip after each gap, not the gap.  application, remote.
    progress = {"data_start_seconds": 0.15, "data_end_seconds": 3.15, "steady_rate_bytes_per_second": 2.6e6}
    r = download(
        file_bytes=8 * MiB,
        duration_seconds=8 * MiB / 2.62e6,
        tcp_remote=sender(
            busy_seconds=0.87, sender_backlog_ratio=0.25, app_limited_ratio=0.02, sending_samples=12.0, segs_out=6000.0
        ),
        tcp_local=progress,
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and (limit.reason, limit.side) == ("application", "remote"), limit
    assert "data in flight 29% of the 3.0 s data phase" in limit.evidence and "app-limited in 2%" in limit.evidence
    assert text_contradictions(limit, r, PATH) == []
    # The same flag with data in flight all the time: its kernel never saw it wait for
    # its program, whatever the backlog says.  Withheld.
    busy = dataclasses.replace(r, tcp_remote={**r.tcp_remote, "busy_seconds": 3.0})
    limit = judge_limit(busy, PATH)
    assert limit is not None and limit.reason == "" and "not application" in limit.evidence, limit
    assert "app-limited in 2% of the samples" in limit.evidence
    assert text_contradictions(limit, busy, PATH) == []


def test_a_download_judged_from_two_remote_listings_is_not_application() -> None:
    view = {**SEEN, "listings_expected": 3.0, "listings_received": 2.0}
    r = download(remote_view=view, tcp_remote=sender(busy_seconds=2.0, sending_samples=2.0))
    limit = judge_limit(r, PATH)
    assert limit is not None and limit.reason == "" and "only 2 listings of the sender" in limit.evidence, limit
    # The kernel's own count, where the remote view is absent, says the same.
    r = download(remote_view={"programs_seen": 1.0}, tcp_remote=sender(busy_seconds=2.0, sending_samples=1.0))
    assert "only 1 listing of the sender" in judge_limit(r, PATH).evidence  # type: ignore[union-attr]


def slow_remote_disk_upload(remote_view: dict[str, float], programs: dict[str, dict[str, float]]) -> Result:
    """16 MiB by scp to a remote whose file system writes at 2 MiB/s: our ssh idle (the
    channel window waits for the remote's writer), in flight 30% of the time."""
    return upload(
        protocol="scp",
        file_bytes=16 * MiB,
        duration_seconds=8.5,
        remote_view=remote_view,
        programs=programs,
        tcp_local=sender(busy_seconds=2.5, sender_backlog_ratio=0.05, app_limited_ratio=0.7),
    )


def test_a_slow_remote_disk_unseen_is_never_application_on_this_host() -> None:
    idle_sshd = {"seconds": 8.4, "cpu_share": 0.02, "runnable_share": 0.03, "io_wait_share": 0.0, "samples": 80.0}
    ssh = {**idle_sshd, "cpu_share": 0.1, "runnable_share": 0.12}
    # The product sampled another sshd (no I/O wait): the view found none of the
    # transfer's programs, so nothing is said of the remote, and nothing here stands in.
    r = slow_remote_disk_upload({**SEEN, "programs_seen": 0.0}, {"local ssh": ssh, "remote sshd": idle_sshd})
    limit = judge_limit(r, PATH80)
    assert limit is not None and limit.reason == "" and limit.side == "", limit
    assert "the remote's programs could not be seen" in limit.evidence
    assert "this host" not in limit.next_step
    assert text_contradictions(limit, r, PATH80) == []
    # No view at all (an older remote): the same.
    r = slow_remote_disk_upload({}, {"local ssh": ssh})
    assert judge_limit(r, PATH80).reason == ""  # type: ignore[union-attr]
    # Seen: the internal-sftp child in state D in every sample is the remote's disk.
    writer = {**idle_sshd, "io_wait_share": 0.95}
    r = slow_remote_disk_upload(SEEN, {"local ssh": ssh, "remote sshd": writer})
    limit = judge_limit(r, PATH80)
    assert limit is not None and (limit.reason, limit.side, limit.program) == ("disk", "remote", "sshd"), limit


def test_a_remote_receiver_behind_whose_programs_are_unseen_is_not_named() -> None:
    # An HTTP upload whose remote receiver's queue stood full: its writer's disk or CPU
    # cannot be ruled out unseen, and the window is not the limit either.
    r = upload(
        remote_view={**SEEN, "programs_seen": 0.0},
        tcp_local=sender(rwnd_limited_seconds=15.0),
        tcp_remote={"rcv_queue_ratio_avg": 0.8},
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and limit.reason == "" and "not application on the remote" in limit.evidence, limit


def test_a_one_mib_scp_upload_with_a_one_point_progress_series_is_startup() -> None:
    # 80 ms: 2.9 s before the first data (ssh set-up), all 1 MiB moved by the one listing
    # that saw data.  The data phase is not known; the file is one BDP: startup, the
    # set-up beyond what ssh's round trips take (20 x 80 ms + 0.5 s = 2.1 s) named.
    progress = {"data_start_seconds": 2.9, "data_end_seconds": 2.9}
    r = upload(
        protocol="scp",
        file_bytes=MiB,
        duration_seconds=3.3,
        tcp_local=sender(busy_seconds=0.3, segs_out=800.0, **progress),
    )
    limit = judge_limit(r, PATH80)
    assert limit is not None and limit.reason == "startup", limit
    assert "0.80 s of the set-up beyond the 2.10 s a protocol's set-up takes" in limit.evidence
    assert text_contradictions(limit, r, PATH80) == []


def busy_demo(host_busy: dict[str, float]) -> Result:
    """The demo on a host at load 22: 32 MiB over 200 Mbit/s, 20 ms; data in flight all
    the time, a backlog, no loss, no window limit, at 40% of the path."""
    return download(
        file_bytes=32 * MiB,
        duration_seconds=32 * MiB / 10e6,
        host_busy=host_busy,
        tcp_remote=sender(
            busy_seconds=3.3,
            sender_backlog_ratio=0.9,
            app_limited_ratio=0.0,
            sending_samples=30.0,
            rtt_avg_seconds=0.035,  # 15 ms above the path's 20 ms: another flow's queue
        ),
        tcp_local={"data_start_seconds": 0.05, "data_end_seconds": 3.35, "steady_rate_bytes_per_second": 10e6},
    )


def test_a_busy_host_is_named_and_left_out_of_the_baselines() -> None:
    busy = {"transfer_programs": 0.04, "capture": 0.06, "delay_line": 0.31, "load1": 22.0}
    r = busy_demo(busy)
    limit = judge_limit(r, PATH20)
    assert limit is not None and (limit.reason, limit.side) == ("busy_host", "local"), limit
    assert "the lab's delay line 31%" in limit.evidence and "load average 22.0" in limit.evidence
    assert "less busy host" in limit.next_step
    assert text_contradictions(limit, r, PATH20) == []
    judged = dataclasses.replace(r, limited_by=limit.reason)
    assert leaves_out_of_baselines(judged)


def test_a_network_limited_sender_on_a_busy_host_is_still_a_shared_path() -> None:
    # A competing flow beside two CPU burners (tests/support/plain_causes_path.py): this
    # host's programs waited 30% of the transfer, yet the sender kept a backlog in flight
    # all the time: neither end's programs held it.  Where the lab's delay line (the path
    # itself, on this host's CPUs) waited, the busy host stays the verdict (above).
    r = busy_demo({"transfer_programs": 0.3, "capture": 0.05, "delay_line": 0.0, "load1": 6.0})
    limit = judge_limit(r, PATH20)
    assert limit is not None and (limit.reason, limit.side) == ("shared_path", "path"), limit
    assert text_contradictions(limit, r, PATH20) == []
    starved = dataclasses.replace(r, tcp_remote={**r.tcp_remote, "sender_backlog_ratio": 0.2})
    assert judge_limit(starved, PATH20).reason != "shared_path"  # type: ignore[union-attr]


def test_a_network_limited_sender_below_the_estimate_is_a_shared_path() -> None:
    r = busy_demo({"transfer_programs": 0.01, "capture": 0.02, "delay_line": 0.03, "load1": 0.4})
    limit = judge_limit(r, PATH20)
    assert limit is not None and (limit.reason, limit.side) == ("shared_path", "path"), limit
    for said in ("data in flight 100%", "unsent data in 90%", "40% of the path", "60% less than its estimate"):
        assert said in limit.evidence, limit.evidence
    assert "other traffic on the bottleneck" in limit.next_step
    assert text_contradictions(limit, r, PATH20) == []
    assert not leaves_out_of_baselines(dataclasses.replace(r, limited_by=limit.reason))
    # With loss it is congestion; with a window limit, the window.
    assert judge_limit(dataclasses.replace(r, retransmits_sender=400), PATH20).reason == "congestion"  # type: ignore[union-attr]
    windowed = dataclasses.replace(r, tcp_remote={**r.tcp_remote, "rwnd_limited_seconds": 2.0})
    assert judge_limit(windowed, PATH20).reason == "receive_window"  # type: ignore[union-attr]


def test_host_side_set_up_on_a_busy_host_is_not_startup() -> None:
    # 20 ms: 3.1 s before the first data of a 16 MiB download (the demo at load 15-28),
    # then the link's rate: not startup (ssh's set-up takes 0.9 s here), the host named.
    r = download(
        protocol="scp",
        file_bytes=16 * MiB,
        duration_seconds=3.1 + 16 * MiB / 24e6,
        host_busy={"transfer_programs": 0.35, "capture": 0.1, "load1": 18.0},
        tcp_remote=sender(busy_seconds=0.7, sender_backlog_ratio=0.9, app_limited_ratio=0.0),
        tcp_local={"data_start_seconds": 3.1, "data_end_seconds": 3.8, "steady_rate_bytes_per_second": 24e6},
    )
    limit = judge_limit(r, PATH20)
    assert limit is not None and limit.reason != "startup", limit
    assert "not startup: 2.20 s of the set-up beyond the 0.90 s" in limit.evidence
    assert "this host was busy" in limit.evidence
    assert text_contradictions(limit, r, PATH20) == []


def test_which_runs_leave_the_baselines() -> None:
    plain = download(tcp_remote=sender())
    assert not leaves_out_of_baselines(plain)
    assert leaves_out_of_baselines(dataclasses.replace(plain, limited_by="busy_host"))
    # A run the path (or anything but this host's CPU) limited stays, however busy the host.
    busy = {"transfer_programs": 0.3, "capture": 0.12, "delay_line": 0.2}
    for reason in ("link_capacity", "congestion", "cpu", "receive_window"):
        assert not leaves_out_of_baselines(dataclasses.replace(plain, limited_by=reason, host_busy=busy))
    # Judged and withheld (the evidence says why): the judge heard the host's state.
    withheld = dataclasses.replace(plain, limited_evidence="withheld busy_host (...)", host_busy=busy)
    assert not leaves_out_of_baselines(withheld)


def test_a_run_never_judged_leaves_the_baselines_by_the_host_state_it_recorded() -> None:
    # A UDT run: no TCP state, never judged; its own line says the delay line waited 36%.
    udt = download(transport="udp", limited_evidence=NO_TCP_STATE, host_busy={"delay_line": 0.36, "load1": 5.0})
    assert leaves_out_of_baselines(udt)
    quiet = dataclasses.replace(udt, host_busy={"delay_line": 0.02, "transfer_programs": 0.05, "load1": 9.0})
    assert not leaves_out_of_baselines(quiet)  # a load average alone is not a wait
    # Nothing recorded: nothing to leave it out by.
    assert not leaves_out_of_baselines(dataclasses.replace(udt, host_busy={}))
    # Each part at the judge's own share (vetoes.BUSY_SHARE), not below it.
    for part in vetoes.BUSY_PARTS:
        at = dataclasses.replace(udt, host_busy={part: vetoes.BUSY_SHARE})
        below = dataclasses.replace(udt, host_busy={part: vetoes.BUSY_SHARE * 0.99})
        assert leaves_out_of_baselines(at) and not leaves_out_of_baselines(below), part
    # A TCP run without a verdict (no TCP state read) goes by its host state too.
    unread = download(host_busy={"capture": 0.4})
    assert leaves_out_of_baselines(unread)


def test_new_reasons_are_at_the_end_of_limits() -> None:
    # Dashboards number the reasons by their place: the old ones keep theirs.
    assert LIMITS[:8] == (
        "receive_window", "send_buffer", "congestion", "link_capacity", "application", "startup", "cpu", "disk"
    )  # fmt: skip
    assert LIMITS[8:] == ("busy_host", "shared_path")


def test_a_starved_remote_program_seen_is_named_with_its_quota() -> None:
    # The remote's sshd seen, on a core or queued for one 97% of its life, its cgroup
    # throttled 80% of the transfer: the quota, not ssh's cipher, is the next step.
    sshd = {"seconds": 19.0, "cpu_share": 0.05, "runnable_share": 0.97, "io_wait_share": 0.0, "samples": 40.0}
    r = download(
        protocol="scp",
        remote_view={**SEEN, "cpu_throttled_share": 0.8},
        programs={"remote sshd": sshd},
        tcp_remote=sender(busy_seconds=6.0),
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and (limit.reason, limit.side, limit.program) == ("cpu", "remote", "sshd"), limit
    assert "held by its CPU quota 80%" in limit.evidence and "CPU quota" in limit.next_step


def test_a_remote_that_answered_no_listing_is_not_called_starved() -> None:
    # None answered: a remote that cannot be asked looks the same; not a verdict on it.
    r = starved_scp_download({"listings_expected": 110.0, "listings_received": 0.0})
    limit = judge_limit(r, PATH10)
    assert limit is not None and limit.reason != "cpu", limit


def test_retransmitted_payload_is_not_a_rate_above_the_path() -> None:
    # The lab's policer at 50 Mbit/s (6.25 MB/s), 16 MiB downloaded: the capture (before
    # the policer) saw 23.4 MB of payload in 2.9 s, 4,581 of its 16,170 segments resent.
    # What was delivered is the 16.8 MB: 5.8 MB/s, 93% of the path, never 129% or "stale".
    policed = PathBaseline(
        "lab", 0.0, rtt_min_seconds=0.02, bandwidth_bytes_per_second=6.25e6, bandwidth_source="configured"
    )
    r = download(
        file_bytes=16 * MiB,
        duration_seconds=3.4,
        first_packet_timestamp=100.0,
        last_packet_timestamp=102.9,
        payload_bytes_down=23_414_160,
        packets_down=16_170,
        retransmits_wire=4_581,
        retransmits_sender=4_581,
        tcp_remote=sender(busy_seconds=3.0, segs_out=16_170.0),
    )
    limit = judge_limit(r, policed)
    assert limit is not None and "stale" not in limit.evidence, limit
    assert limit.reason == "link_capacity" and "the bottleneck drops what exceeds its rate" in limit.evidence


def test_a_program_held_off_its_cores_by_a_busy_host_is_busy_host_not_cpu() -> None:
    # Six CPU burners on 2 cores (tests/support/plain_causes_host.py): curl used 16% of a
    # core and waited 77% for one, its cgroup never throttled: the host held it.
    curl = {"seconds": 19.0, "cpu_share": 0.16, "runnable_share": 0.93, "io_wait_share": 0.0, "samples": 40.0}
    busy = {"transfer_programs": 0.65, "capture": 0.18, "load1": 9.0}
    r = download(
        tcp_remote=sender(busy_seconds=6.0),
        programs={"local curl": {**curl, "cpu_throttled_share": 0.0}},
        host_busy=busy,
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and (limit.reason, limit.side) == ("busy_host", "local"), limit
    assert "used 16% of a core and waited 77% for one" in limit.evidence
    assert "the transfer's programs 65%" in limit.evidence
    assert text_contradictions(limit, r, PATH) == []
    # Held by its own quota (cpu_capped: throttled most of the time), it is cpu ...
    quota = dataclasses.replace(r, programs={"local curl": {**curl, "cpu_throttled_share": 0.7}})
    assert judge_limit(quota, PATH).reason == "cpu"  # type: ignore[union-attr]
    # ... and where its cgroup could not be read a quota cannot be ruled out: cpu as before;
    assert judge_limit(dataclasses.replace(r, programs={"local curl": curl}), PATH).reason == "cpu"  # type: ignore[union-attr]
    # so is one that ran more than it waited (its own need for a core),
    ran = {**curl, "cpu_share": 0.55, "runnable_share": 0.97, "cpu_throttled_share": 0.0}
    assert judge_limit(dataclasses.replace(r, programs={"local curl": ran}), PATH).reason == "cpu"  # type: ignore[union-attr]
    # and a remote program waiting as long: its host is not this one.
    remote = dataclasses.replace(r, programs={"remote nginx": {**curl, "cpu_throttled_share": 0.0}})
    assert judge_limit(remote, PATH).reason == "cpu"  # type: ignore[union-attr]


def test_a_program_of_this_host_held_by_its_cpu_quota_is_cpu_with_the_quota() -> None:
    # scp download, this host's programs under a 20% quota (tests/support/plain_causes_host.py):
    # the remote sender kept data in flight 79% of the data phase (no idle sender, no full
    # window), ssh runnable 79% of its life, its group throttled 83% of the time.
    ssh = {"seconds": 1.9, "cpu_share": 0.09, "runnable_share": 0.79, "io_wait_share": 0.0, "samples": 22.0}
    held = {**ssh, "cpu_throttled_share": 0.83, "cpu_quota_cores": 0.2}
    r = download(
        protocol="scp",
        duration_seconds=2.0,
        file_bytes=32 * MiB,
        tcp_remote=sender(busy_seconds=1.5, sender_backlog_ratio=1.0, app_limited_ratio=0.5, sending_samples=6.0),
        tcp_local={"data_start_seconds": 0.1, "data_end_seconds": 2.0},
        programs={"local ssh": held},
    )
    limit = judge_limit(r, None)
    assert limit is not None and (limit.reason, limit.side, limit.program) == ("cpu", "local", "ssh"), limit
    assert "its cgroup was held by its CPU quota of 0.20 cores 83% of the time" in limit.evidence
    assert "lift the quota" in limit.next_step
    assert text_contradictions(limit, r, None) == []
    # Its group barely throttled, or the program mostly asleep: not the quota's.
    for values in ({**held, "cpu_throttled_share": 0.1}, {**held, "runnable_share": 0.3}):
        other = judge_limit(dataclasses.replace(r, programs={"local ssh": values}), None)
        assert other is None or other.detail != "quota", other


def test_late_listings_from_a_remote_whose_programs_had_their_cores_are_not_starvation() -> None:
    # Beside CPU burners on this host (load 7-12) with curl asleep most of the time (this
    # host not "busy" by its transfer's waits): a listing 3.6 s late on a 3.8 s transfer,
    # from a remote whose nginx queued 0.3% of its life, never throttled.
    view = {**SEEN, "listings_expected": 10.0, "listings_received": 9.0, "listing_late_max_seconds": 3.6}
    nginx = {"seconds": 3.5, "cpu_share": 0.003, "run_queue_seconds": 0.011, "runnable_share": 0.006,
             "io_wait_share": 0.0, "samples": 8.0, "cpu_throttled_share": 0.0}  # fmt: skip
    r = upload(duration_seconds=3.8, file_bytes=8 * MiB, remote_view=view, programs={"remote nginx": nginx},
               tcp_local=sender(busy_seconds=3.8))  # fmt: skip
    assert not vetoes.starved_remote(Inputs.of(r, PATH))
    limit = judge_limit(r, PATH)
    assert limit is None or (limit.reason, limit.side) != ("cpu", "remote"), limit
    # Its nginx queued for a core 40% of its life (a starved remote's program waits): starved.
    waiting = dataclasses.replace(r, programs={"remote nginx": {**nginx, "run_queue_seconds": 1.4}})
    assert "listings came up to 3.6 s late" in vetoes.starved_remote(Inputs.of(waiting, PATH))
    # Its programs unseen: the lateness still counts, as before.
    unseen = dataclasses.replace(r, programs={}, remote_view={**view, "programs_seen": 0.0})
    assert "listings came up to 3.6 s late" in vetoes.starved_remote(Inputs.of(unseen, PATH))


def test_a_sender_whose_program_waited_for_a_core_is_not_application() -> None:
    # scp upload, ssh under a 20% quota on a host at load 10-12: it waited for a core 33%
    # of its life and ran 5%; its sender looked idle (data in flight 39%, nothing unsent).
    ssh = {"seconds": 3.5, "cpu_share": 0.045, "run_queue_seconds": 1.16, "runnable_share": 0.37,
           "io_wait_share": 0.0, "samples": 31.0, "cpu_throttled_share": 0.01}  # fmt: skip
    r = upload(
        protocol="scp",
        duration_seconds=3.6,
        file_bytes=32 * MiB,
        tcp_local=sender(busy_seconds=1.4, sender_backlog_ratio=0.0, app_limited_ratio=0.95, sending_samples=6.0),
        programs={"local ssh": ssh, "remote sshd": {**ssh, "run_queue_seconds": 0.01, "cpu_throttled_share": 0.0}},
    )
    limit = judge_limit(r, PATH)
    assert limit is None or limit.reason != "application", limit
    assert "ssh (this host) waited for a core 33% of its 3.5 s and ran 4%" in vetoes.application_veto(
        Inputs.of(r, PATH)
    )
    # A throttled program sleeps: curl --limit-rate waited 5% of its life.  Application.
    curl = {**ssh, "run_queue_seconds": 0.17, "cpu_share": 0.007, "runnable_share": 0.05}
    throttled = dataclasses.replace(r, protocol="http", programs={"local curl": curl, "remote nginx": curl})
    assert judge_limit(throttled, PATH).reason == "application"  # type: ignore[union-attr]


# A 400 ms path whose capacity nobody measured, this host's buffers capped at 1 MiB.
LONG_UNKNOWN = PathBaseline(
    "lab",
    0.0,
    rtt_min_seconds=0.4,
    buffers={
        "local": {"tcp_rmem": 1048576.0, "tcp_wmem": 1048576.0},
        "remote": {"tcp_rmem": 33554432.0, "tcp_wmem": 4194304.0},
    },
)


def test_a_buffer_at_its_maximum_with_the_bdp_unknown_needs_the_sender_s_clock_too() -> None:
    # Measured (a plain remote, 50 Mbit/s at 400 ms, no estimate): this host's tcp_rmem
    # capped at 1 MiB, a BBR sender rwnd-limited 1.66 s of its 8.1 s busy time (20%: it
    # paces at what the window allows), our receive buffer at its 1 MiB maximum.
    progress = {"data_start_seconds": 1.4, "data_end_seconds": 7.6, "steady_rate_bytes_per_second": 1.49e6}
    r = download(
        file_bytes=8 * MiB,
        duration_seconds=8.1,
        tcp_remote=sender(busy_seconds=8.1, rwnd_limited_seconds=1.66, segs_out=5800),
        tcp_local={"rcvbuf_max_bytes": 1048576.0, "rcv_queue_ratio_avg": 0.0, **progress},
    )
    limit = judge_limit(r, LONG_UNKNOWN)
    assert limit is not None and (limit.reason, limit.side) == ("receive_window", "local"), limit
    assert "its tcp_rmem maximum 1.05 MB (1048576 B) (the BDP unknown)" in limit.evidence
    assert "limited by the receive window 20% of its 8.1 s busy time" in limit.evidence
    assert text_contradictions(limit, r, LONG_UNKNOWN) == []
    # The buffer at its maximum alone, the sender's clock silent: whether that maximum is
    # below the BDP cannot be told, so it names nothing.
    silent = dataclasses.replace(r, tcp_remote=sender(busy_seconds=8.1, rwnd_limited_seconds=0.2, segs_out=5800))
    assert judge_limit(silent, LONG_UNKNOWN).reason != "receive_window"  # type: ignore[union-attr]
    # The send buffer the same way (tcp_wmem at 1 MiB, the clock 28% of the busy time).
    up = upload(
        protocol="iperf3",
        file_bytes=16 * MiB,
        duration_seconds=12.0,
        tcp_local=sender(
            busy_seconds=10.0, sndbuf_limited_seconds=2.8, sndbuf_max_bytes=1048576.0, segs_out=11600,
            app_limited_ratio=0.7, sender_backlog_ratio=0.3, sending_samples=20.0,
            data_start_seconds=3.4, data_end_seconds=11.5, steady_rate_bytes_per_second=1.8e6,
        ),
    )  # fmt: skip
    limit = judge_limit(up, LONG_UNKNOWN)
    assert limit is not None and (limit.reason, limit.side) == ("send_buffer", "local"), limit
    assert "tcp_wmem maximum 1.05 MB (1048576 B) (the BDP unknown)" in limit.evidence
    assert "limited by its send buffer 28% of its 10.0 s busy time" in limit.evidence
    assert text_contradictions(limit, up, LONG_UNKNOWN) == []
    # With the BDP known and above the maximum, the ceiling says so by itself, as before.
    known = dataclasses.replace(LONG_UNKNOWN, bandwidth_bytes_per_second=6.25e6, bandwidth_source="configured")
    assert Inputs.of(up, known).ceilings["tcp_wmem"] and not Inputs.of(up, known).at_max


def test_listings_late_by_the_round_trips_of_a_long_path_are_not_a_starved_remote() -> None:
    # Measured on a 400 ms path with nothing starved: listings answered in 1.0-1.15 s
    # (median), the latest 2.2-3.9 s after it was due, over 8-10 s transfers.
    view = {**SEEN, "listings_expected": 21.0, "listings_received": 10.0, "listing_late_max_seconds": 3.9}
    long_path = PathBaseline("lab", 0.0, rtt_min_seconds=0.4)
    r = upload(duration_seconds=9.0, remote_view=view, tcp_local=sender(busy_seconds=9.0))
    assert not vetoes.starved_remote(Inputs.of(r, long_path))
    # Late beyond what ten of its round trips take, it still is: 9 s late is 5 s more.
    later = dataclasses.replace(r, remote_view={**view, "listing_late_max_seconds": 9.0})
    said = vetoes.starved_remote(Inputs.of(later, long_path))
    assert "9.0 s late" in said and "4.0 s of it what 10 round trips take" in said, said
    # On a 10 ms path the round trips are nothing: the starved sshd's 4.2 s still counts.
    starved = {"listings_expected": 110.0, "listings_received": 12.0, "listing_late_max_seconds": 4.2}
    assert "4.2 s late" in vetoes.starved_remote(Inputs.of(starved_scp_download(starved), PATH10))


def test_a_short_file_whose_path_capacity_is_unknown_is_startup_when_it_never_left_slow_start() -> None:
    # Measured (a plain remote, 400 ms, no estimate): 1 MiB by scp, 8.5 s of ssh set-up
    # (within 20 round trips and 0.5 s), then 3.0 s of data (slow start of 1 MiB takes up
    # to 10 round trips: 4.1 s); the sender flagged app-limited between slow start's round
    # trips and a "steady rate" of 0.19 MB/s fitted to its few listings.  Not application:
    # the start, with the size that would average near even the data phase's rate.
    progress = {"data_start_seconds": 8.5, "data_end_seconds": 11.5, "steady_rate_bytes_per_second": 0.19e6}
    r = upload(
        protocol="scp",
        file_bytes=MiB,
        duration_seconds=11.5,
        tcp_local=sender(
            busy_seconds=10.6, segs_out=760.0, app_limited_ratio=0.76, sender_backlog_ratio=0.4,
            sending_samples=5.0, **progress,
        ),
    )  # fmt: skip
    long_path = PathBaseline("site", 0.0, rtt_min_seconds=0.4)
    limit = judge_limit(r, long_path)
    assert limit is not None and (limit.reason, limit.side) == ("startup", "path"), limit
    assert "moved in 3.00 s of data, within the 4.07 s slow start" in limit.evidence, limit.evidence
    assert "never left its start" in limit.evidence and limit.reach_bytes and limit.reach_bytes > 30e6
    assert text_contradictions(limit, r, long_path) == []
    # A one-point progress series (the 1 MiB scp upload on 80 ms, no estimate):
    # the data phase is at most from its first data to the end.
    one = upload(
        protocol="scp",
        file_bytes=MiB,
        duration_seconds=3.3,
        tcp_local=sender(busy_seconds=0.3, segs_out=800.0, data_start_seconds=2.9, data_end_seconds=2.9),
    )
    path80 = PathBaseline("site", 0.0, rtt_min_seconds=0.08)
    limit = judge_limit(one, path80)
    assert limit is not None and limit.reason == "startup", limit
    assert "moved in at most 0.40 s of data" in limit.evidence
    assert "0.80 s of the set-up beyond the 2.10 s" in limit.evidence
    # A data phase longer than slow start can take is not the start's: judged as before.
    late = {"data_start_seconds": 1.0, "data_end_seconds": 11.5, "steady_rate_bytes_per_second": 0.1e6}
    slow = dataclasses.replace(r, tcp_local=sender(busy_seconds=10.6, segs_out=760.0, **late))
    limit = judge_limit(slow, long_path)
    assert limit is None or "never left its start" not in limit.evidence


def test_a_download_whose_sender_cannot_be_asked_is_held_by_a_local_reader_its_queue_shows() -> None:
    # A passive download (only this host's kernel read): its receive queue stood 60% full,
    # so its own program read slower than the network delivered, whatever the sender was.
    r = download(remote_view={}, tcp_local={"rcvbuf_max_bytes": 6e6, "rcv_queue_ratio_avg": 0.6})
    limit = judge_limit(r, PATH)
    assert limit is not None and (limit.reason, limit.side) == ("application", "local"), limit
    assert "receive queue stood 60% full" in limit.evidence and "sender's TCP state is unknown" in limit.evidence
    # One that kept up (a queue near 0, as a capped buffer or a slow sender leaves it) is not.
    kept_up = judge_limit(
        download(remote_view={}, tcp_local={"rcvbuf_max_bytes": 6e6, "rcv_queue_ratio_avg": 0.01}), PATH
    )
    assert kept_up is not None and kept_up.reason == ""


def test_a_reader_behind_its_queue_is_not_read_as_a_slow_start() -> None:
    # curl --limit-rate 2M, passive: the kernel took the file at 6.3 MB/s into the receive
    # buffer while curl read it at 2 MB/s; the time between is the reader's, not a ramp's.
    progress = {"steady_rate_bytes_per_second": 6.3e6, "data_start_seconds": 0.53, "data_end_seconds": 3.4}
    r = download(
        remote_view={},
        duration_seconds=3.45,
        file_bytes=8 * MiB,
        tcp_local={"rcvbuf_max_bytes": 6e6, "rcv_queue_ratio_avg": 0.65, **progress},
    )
    limit = judge_limit(r, PATH)
    assert limit is not None and (limit.reason, limit.side) == ("application", "local"), limit
