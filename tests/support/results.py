"""Results as a journal holds them, and the samples backfill must write for them:
shared by the backfill tests (unit: OpenMetrics text; e2e: a live Prometheus)."""

from __future__ import annotations

from typing import Any

from bigbinf.result import Result

HOUR = 3600.0
LAST = "bigbinf_last_transfer_"


def make_results(base: float) -> list[Result]:
    """Two series, an ok/failed/ok history and odd sub-millisecond start times.  Results
    are 20 min apart, more than the 5 min lookback, so an instant query at a result's
    start time sees only that result's samples."""

    def scp(i: int, **kw: Any) -> Result:
        return Result("scp", "uwc", "5MiB", "download", base + i * 1200 + 0.1234567, kw.pop("outcome", "ok"), **kw)

    return [
        scp(
            0,
            duration_seconds=2.5,
            file_bytes=5242880,
            files=1,
            verified=True,
            wire_bytes_down=5500000,
            wire_bytes_up=120000,
            payload_bytes_down=5243000,
            payload_bytes_up=300,
            packets_down=3700,
            packets_up=1850,
            retransmits_wire=4,
            capture_dropped=0,
            transport="tcp",
            data_flows=1,
            tcp_remote={
                "busy_seconds": 2.25,
                "rwnd_limited_seconds": 1.5,
                "sndbuf_limited_seconds": 0.0,
                "delivery_rate_median_bytes_per_second": 2_250_000.0,
                "min_rtt_seconds": 0.0405,
            },
            tcp_local={"min_rtt_seconds": 0.0401, "rcvbuf_max_bytes": 262144.0},
            congestion_control="cubic",  # what the remote's (the sender's) kernel used
            limited_by="receive_window",
            limited_evidence="the sender was limited by the receive window 67% of its 2.2 s busy time",
            limited_side="remote",
        ),
        scp(
            1,
            outcome="failed",
            error="exit 1",
            duration_seconds=0.75,
            file_bytes=5242880,
            wire_bytes_down=900,
            wire_bytes_up=400,
            packets_down=3,
            packets_up=4,
        ),
        scp(
            2,
            duration_seconds=2.0,
            file_bytes=5242880,
            verified=True,
            wire_bytes_down=5400000,
            wire_bytes_up=110000,
            payload_bytes_down=5242880,
            payload_bytes_up=0,
            packets_down=3650,
            packets_up=1800,
            retransmits_wire=0,
            capture_dropped=7,
        ),
        Result(
            "http",
            "uct",
            "1GiB",
            "upload",
            base + 3 * 1200 + 0.5,
            "ok",
            duration_seconds=47.125,
            file_bytes=2**30,
            verified=False,
            wire_bytes_down=2_000_000,
            wire_bytes_up=1_100_000_000,
            payload_bytes_down=10,
            payload_bytes_up=2**30,
            packets_down=300_000,
            packets_up=700_000,
            transport="udp",
            data_flows=2,
            retransmits_sender=42,
            retransmits_sender_source="kernel",
            rtt_seconds=0.0125,
            reported={"bytes": 2.0**30, "seconds": 40.0, "retransmits": 40.0},
        ),
        Result(
            "http",
            "uct",
            "1GiB",
            "upload",
            base + 4 * 1200,
            "timeout",
            error="killed after 600 s",
            duration_seconds=600.0,
            file_bytes=2**30,
        ),
    ]


def expected_samples(r: Result, last_ok: float | None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What the live exporter would publish for result r, written out by hand."""
    ok = r.outcome == "ok"
    plain: dict[str, float] = {
        "start_timestamp_seconds": r.start_timestamp,
        "success": 1.0 if ok else 0.0,
        "duration_seconds": r.duration_seconds,
        "throughput_bytes_per_second": r.file_bytes / r.duration_seconds if ok else 0.0,
        "file_bytes": r.file_bytes,
        "byte_ratio": (r.wire_bytes_down + r.wire_bytes_up) / r.file_bytes,
        "retransmits_wire": r.retransmits_wire,
        "verified": 1.0 if r.verified else 0.0,
        "capture_dropped_packets": r.capture_dropped,
        "data_flows": r.data_flows,
    }
    if r.rtt_seconds is not None:
        plain["rtt_seconds"] = r.rtt_seconds
    samples = {(LAST + name, ()): float(v) for name, v in plain.items()}
    for outcome in ("ok", "failed", "timeout", "skipped"):
        samples[(LAST + "outcome", (("outcome", outcome),))] = 1.0 if r.outcome == outcome else 0.0
    for name, down, up in (
        ("wire_bytes", r.wire_bytes_down, r.wire_bytes_up),
        ("payload_bytes", r.payload_bytes_down, r.payload_bytes_up),
        ("packets", r.packets_down, r.packets_up),
    ):
        samples[(LAST + name, (("way", "down"),))] = float(down)
        samples[(LAST + name, (("way", "up"),))] = float(up)
    if r.transport:
        samples[(LAST + "transport", (("transport", r.transport),))] = 1.0
    if r.congestion_control:
        samples[(LAST + "congestion_control", (("algorithm", r.congestion_control),))] = 1.0
    if r.retransmits_sender is not None:
        samples[(LAST + "retransmits_sender", (("source", r.retransmits_sender_source),))] = float(r.retransmits_sender)
    if "retransmits" in r.reported:  # iperf3's own count, beside the kernel's
        samples[(LAST + "retransmits_sender", (("source", "iperf3"),))] = r.reported["retransmits"]
    if r.reported:
        samples[(LAST + "reported_throughput_bytes_per_second", ())] = r.reported["bytes"] / r.reported["seconds"]
    if r.limited_by:  # the verdict, one of eight, and its side; the sender's clocks and rates beside it
        reasons = ("receive_window", "send_buffer", "congestion", "link_capacity", "application", "startup", "cpu")
        for reason in (*reasons, "disk"):
            samples[(LAST + "limited_by", (("reason", reason),))] = 1.0 if r.limited_by == reason else 0.0
        if r.limited_side:
            for side in ("local", "remote", "path"):
                samples[(LAST + "limited_side", (("side", side),))] = 1.0 if r.limited_side == side else 0.0
    sender = r.tcp_remote if r.direction == "download" else r.tcp_local
    for limit, key in (
        ("busy", "busy_seconds"),
        ("rwnd", "rwnd_limited_seconds"),
        ("sndbuf", "sndbuf_limited_seconds"),
    ):
        if key in sender:
            samples[(LAST + "tcp_limited_seconds", (("limit", limit),))] = sender[key]
    if "delivery_rate_median_bytes_per_second" in sender:
        samples[(LAST + "tcp_delivery_rate_bytes_per_second", ())] = sender["delivery_rate_median_bytes_per_second"]
    rtts = [side["min_rtt_seconds"] for side in (r.tcp_local, r.tcp_remote) if "min_rtt_seconds" in side]
    if rtts:
        samples[(LAST + "tcp_min_rtt_seconds", ())] = min(rtts)
    if last_ok is not None:
        samples[("bigbinf_last_success_timestamp_seconds", ())] = last_ok
    if r.source == "import":  # imported 2015 results are labelled, so a report keeps them apart
        samples = {(name, tuple(sorted((*labels, ("origin", "import"))))): v for (name, labels), v in samples.items()}
    return samples


def imported_result(start: float) -> Result:
    """A 2015 dump as `import` stores it."""
    return Result(
        "hpn-scp",
        "sanbi-vm.uwc.ac.za",
        "5MiB.dat",
        "download",
        start,
        "ok",
        duration_seconds=0.5,
        file_bytes=5242880,
        files=1,
        wire_bytes_down=5243000,
        wire_bytes_up=52,
        round_id="b3f1c2",
        remote_address="SANBI-VM.uwc.ac.za",
        client_address="137.158.0.9",
        source="import",
    )
