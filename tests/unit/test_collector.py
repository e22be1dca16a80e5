"""The exposition: names, types, labels and values, against a golden file and by sample."""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from bigbinf import metrics as M
from bigbinf.history.change import Change, Side
from bigbinf.history.regression import Tested, Verdict
from bigbinf.result import PAYLOAD_BUCKETS, PathBaseline, Result, SeriesKey, empty_histogram
from bigbinf.service.collector import BigbinfCollector, ExporterState

GOLDEN = Path(__file__).parents[1] / "golden" / "metrics.prom"
LABELS = {"protocol": "scp", "remote": "lab", "dataset": "f64m", "direction": "download"}


def _result(start: float, outcome: str = "ok", **kw) -> Result:
    hist = empty_histogram()
    hist["down"][PAYLOAD_BUCKETS.index(1448)] = 46000
    hist["up"][0] = 23000
    values = {
        "protocol": "scp",
        "remote": "lab",
        "dataset": "f64m",
        "direction": "download",
        "start_timestamp": start,
        "outcome": outcome,
        "duration_seconds": 2.75,
        "file_bytes": 64 << 20,
        "files": 1,
        "verified": outcome == "ok",
        "wire_bytes_down": 70_000_000,
        "wire_bytes_up": 1_600_000,
        "payload_bytes_down": 67_200_000,
        "payload_bytes_up": 40_000,
        "packets_down": 46_000,
        "packets_up": 23_000,
        "retransmits_wire": 3,
        "payload_histogram": hist,
        "transport": "tcp",
        "data_flows": 1,
    }
    values.update(kw)
    return Result(**values)


def _state() -> ExporterState:
    state = ExporterState()
    state.record_config(True, when=1_763_000_000.0)
    state.record_undo_pending({"route": 0, "sysctl": 1, "upload": 0})  # a remote's buffer cap not yet put back
    state.record_http_rejections({"capacity": 0, "request_timeout": 3, "unauthorized": 1})
    state.prime(
        [SeriesKey("scp", "lab", "f64m", "download"), SeriesKey("scp", "lab", "f5m", "download")],
        schedule_interval=50460.0,
    )
    state.record(_result(1_763_000_100.0))
    state.record(
        _result(
            1_763_000_200.0,
            outcome="failed",
            error="scp exited 1",
            duration_seconds=0.2,
            wire_bytes_down=500,
            wire_bytes_up=400,
            verified=False,
        )
    )
    state.record(
        _result(1_763_000_150.0, direction="upload", retransmits_sender=120, retransmits_sender_source="kernel")
    )
    state.record(
        _result(
            1_763_000_160.0,
            protocol="iperf3",
            retransmits_sender=7,
            retransmits_sender_source="iperf3",
            verified=False,
            reported={"bytes": 64 << 20, "seconds": 2.5, "retransmits": 7},
        )
    )
    # An iperf3 upload: this host sends, so the kernel's count and iperf3's own are both there.
    state.record(
        _result(
            1_763_000_170.0,
            protocol="iperf3",
            direction="upload",
            retransmits_sender=9,
            retransmits_sender_source="kernel",
            rtt_seconds=0.0125,
            verified=False,
            reported={"bytes": 64 << 20, "seconds": 2.0, "retransmits": 8, "mean_rtt_seconds": 0.0125},
        )
    )
    # A judged upload: this host sends, so its kernel's view is the sender's.
    state.record(
        _result(
            1_763_000_180.0,
            protocol="http",
            direction="upload",
            tcp_local={
                "busy_seconds": 2.5,
                "rwnd_limited_seconds": 2.0,
                "sndbuf_limited_seconds": 0.0,
                "delivery_rate_median_bytes_per_second": 24_000_000.0,
                "min_rtt_seconds": 0.0402,
            },
            limited_by="receive_window",
            limited_evidence="the sender was limited by the receive window 80% of its 2.5 s busy time",
            limited_side="remote",  # an upload: the receiver is the remote
            # What the sender's kernel used (tcp_info), here as the protocol asked.
            congestion_control="cubic",
            congestion_requested="cubic",
        )
    )
    state.record_path(PATH)
    state.record_round(5.0, 1_763_000_205.0)
    # The regression test's verdicts: one regressed series, one tested and not.
    state.record_regressions(
        {
            SeriesKey("scp", "lab", "f64m", "download"): Verdict(
                Tested(0.78125, 0.71, 0.84, 1.2e-05, 3, 56, 1_763_000_100.0),
                0.000125,
                True,
                since=1_762_990_000.0,
                level_before=3.2e7,
                accepted_at=1_762_000_000.0,
                change=Change(
                    Side(56, 3.2e7, {"link_capacity": 50}, 0.0005, "cubic", 0.02, 0.0, 1500, 3.3e7),
                    Side(9, 2.5e7, {"congestion": 8}, 0.004, "cubic", 0.021, 0.01, 1500, 3.3e7),
                ),
            ),
            SeriesKey("scp", "lab", "f64m", "upload"): Verdict(
                Tested(0.98, 0.9, 1.07, 0.31, 3, 40, 1_763_000_150.0), 0.31, False
            ),
        }
    )
    return state


PATH = PathBaseline(
    remote="lab",
    start_timestamp=1_763_000_090.0,
    address="198.18.0.2",
    probes_sent=20,
    probes_answered=19,
    rtt_min_seconds=0.0401,
    rtt_avg_seconds=0.0405,
    rtt_max_seconds=0.0421,
    rtt_mdev_seconds=0.0004,
    mtu_bytes=1500,
    bandwidth_bytes_per_second=25_000_000.0,
    bandwidth_source="lab",
    buffers={"local": {"tcp_rmem": 262144.0, "tcp_wmem": 4194304.0, "rmem_max": 4194304.0, "wmem_max": 4194304.0}},
    congestion_control={"local": "bbr", "remote": "cubic"},
)


def _registry(state: ExporterState) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BigbinfCollector(state))
    return registry


def test_exposition_matches_golden_file() -> None:
    text = generate_latest(_registry(_state())).decode()
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), (
        "exposition changed: review it, then UPDATE_GOLDEN=1 pytest tests/unit/test_collector.py"
    )


def test_samples() -> None:
    reg = _registry(_state())
    get = reg.get_sample_value
    # The last result is the failed one; the last success is the earlier ok one.
    assert get("bigbinf_last_transfer_success", LABELS) == 0
    assert get("bigbinf_last_transfer_outcome", {**LABELS, "outcome": "failed"}) == 1
    assert get("bigbinf_last_transfer_outcome", {**LABELS, "outcome": "ok"}) == 0
    assert get("bigbinf_last_transfer_throughput_bytes_per_second", LABELS) == 0
    assert get("bigbinf_last_success_timestamp_seconds", LABELS) == 1_763_000_100.0
    # Every transfer counted once, by outcome; histograms count only ok transfers.
    assert get("bigbinf_transfers_total", {**LABELS, "outcome": "ok"}) == 1
    assert get("bigbinf_transfers_total", {**LABELS, "outcome": "failed"}) == 1
    assert get("bigbinf_transfer_duration_seconds_count", LABELS) == 1
    assert get("bigbinf_transfer_throughput_bytes_per_second_sum", LABELS) == (64 << 20) / 2.75
    assert get("bigbinf_transfer_wire_bytes_total", {**LABELS, "way": "down"}) == 70_000_000
    assert get("bigbinf_transfer_payload_size_bytes_bucket", {**LABELS, "way": "down", "le": "1400"}) == 0
    assert get("bigbinf_transfer_payload_size_bytes_bucket", {**LABELS, "way": "down", "le": "1448"}) == 46000
    assert get("bigbinf_transfer_payload_size_bytes_sum", {**LABELS, "way": "down"}) == 67_200_000
    # A primed series exists at 0 before its first transfer, so increase() counts the first.
    primed = {**LABELS, "dataset": "f5m"}
    assert get("bigbinf_transfers_total", {**primed, "outcome": "ok"}) == 0
    assert get("bigbinf_last_transfer_success", primed) is None
    assert get("bigbinf_rounds_total") == 1
    assert get("bigbinf_schedule_interval_seconds", primed) == 50460.0
    upload = {**LABELS, "direction": "upload"}
    assert get("bigbinf_last_transfer_retransmits_sender", {**upload, "source": "kernel"}) == 120
    assert get("bigbinf_last_transfer_transport", {**upload, "transport": "tcp"}) == 1
    # Unknown sender counts are absent, not 0: a download's sender is the remote.
    assert get("bigbinf_last_transfer_retransmits_sender", {**LABELS, "source": "kernel"}) is None
    iperf = {**LABELS, "protocol": "iperf3"}
    assert get("bigbinf_last_transfer_retransmits_sender", {**iperf, "source": "iperf3"}) == 7
    assert get("bigbinf_last_transfer_retransmits_sender", {**iperf, "source": "kernel"}) is None
    assert get("bigbinf_last_transfer_reported_throughput_bytes_per_second", iperf) == (64 << 20) / 2.5
    assert get("bigbinf_last_transfer_rtt_seconds", iperf) is None  # -R: iperf3 reports no RTT
    iperf_up = {**iperf, "direction": "upload"}
    assert get("bigbinf_last_transfer_rtt_seconds", iperf_up) == 0.0125
    assert get("bigbinf_last_transfer_retransmits_sender", {**iperf_up, "source": "kernel"}) == 9
    assert get("bigbinf_last_transfer_retransmits_sender", {**iperf_up, "source": "iperf3"}) == 8
    # The verdict: 1 for the reason, 0 for the others; the sender's chronographs beside it.
    http_up = {**upload, "protocol": "http"}
    assert get("bigbinf_last_transfer_limited_by", {**http_up, "reason": "receive_window"}) == 1
    assert get("bigbinf_last_transfer_limited_by", {**http_up, "reason": "link_capacity"}) == 0
    assert get("bigbinf_last_transfer_limited_side", {**http_up, "side": "remote"}) == 1
    assert get("bigbinf_last_transfer_limited_side", {**http_up, "side": "local"}) == 0
    assert get("bigbinf_last_transfer_tcp_limited_seconds", {**http_up, "limit": "rwnd"}) == 2.0
    assert get("bigbinf_last_transfer_tcp_delivery_rate_bytes_per_second", http_up) == 24_000_000.0
    assert get("bigbinf_last_transfer_limited_by", {**LABELS, "reason": "receive_window"}) is None  # not judged
    # The path: one probe per round, its numbers and both ends' limits.
    assert get("bigbinf_path_rtt_seconds", {"remote": "lab", "stat": "min"}) == 0.0401
    assert get("bigbinf_path_loss_ratio", {"remote": "lab"}) == 1 - 19 / 20
    assert get("bigbinf_path_mtu_bytes", {"remote": "lab"}) == 1500
    assert get("bigbinf_path_bdp_bytes", {"remote": "lab", "source": "lab"}) == 25_000_000.0 * 0.0401
    assert get("bigbinf_tcp_buffer_max_bytes", {"remote": "lab", "side": "local", "kind": "tcp_rmem"}) == 262144
    assert get("bigbinf_tcp_buffer_max_bytes", {"remote": "lab", "side": "remote", "kind": "tcp_rmem"}) is None
    assert get("bigbinf_tcp_congestion_control", {"remote": "lab", "side": "remote", "algorithm": "cubic"}) == 1
    assert get("bigbinf_path_probe_timestamp_seconds", {"remote": "lab", "method": "icmp"}) == 1_763_000_090.0
    # Copy tools report nothing of their own.
    assert get("bigbinf_last_transfer_reported_throughput_bytes_per_second", LABELS) is None
    assert get("bigbinf_config_last_reload_successful") == 1


def test_restore_keeps_newest_and_last_success() -> None:
    state = ExporterState()
    n = state.restore([_result(300.0, outcome="timeout"), _result(100.0), _result(200.0)])
    assert n == 3
    reg = _registry(state)
    assert reg.get_sample_value("bigbinf_last_transfer_start_timestamp_seconds", LABELS) == 300.0
    assert reg.get_sample_value("bigbinf_last_success_timestamp_seconds", LABELS) == 200.0


def _mesh_state() -> ExporterState:
    """A mesh site's exporter's state: every family, the mesh ones included."""
    from bigbinf.service.collector import MeshRound

    state = ExporterState("alpha")
    state.record_config(True, when=1_763_000_000.0)
    state.prime([SeriesKey("scp", "beta", "f64m", "download")], schedule_interval=3600.0)
    state.record(_result(1_763_000_100.0, remote="beta"))
    state.record_mesh_round(MeshRound(120.0, 3600.0, "0123456789ab"))
    return state


def test_every_metric_has_help_and_base_unit_names() -> None:
    text = generate_latest(_registry(_state())).decode() + generate_latest(_registry(_mesh_state())).decode()
    for spec in M.ALL_WITH_MESH:
        assert f"# HELP {spec.name} " in text, spec.name
        assert not any(bad in spec.name for bad in ("_ms", "_kb", "_mb", "_bits", "_percent")), spec.name
        if spec.name.startswith(M.PREFIX + "last_transfer_"):
            assert "Cached from the last scheduled run" in spec.help
        if spec in M.PATH:
            assert "Cached from the last probe of the path" in spec.help
        if spec.name.startswith(M.PREFIX + "transfer"):  # transfers_total, transfer_*
            assert "Updated when a scheduled transfer ends, never at scrape time." in spec.help, spec.name
    assert "bigbinf_transfers_total{" in text


def test_results_and_path_baselines_not_yet_journaled_are_published_apart() -> None:
    """Break 6 (issue 44): neither number stands for the other (the alert on each says what it counts)."""
    state = _state()
    state.record_journal_health(7, 2, 0)
    get = _registry(state).get_sample_value
    assert get("bigbinf_journal_unwritten_results") == 7
    assert get("bigbinf_journal_unwritten_path_baselines") == 2
