"""Every metric the exporter publishes: name, type, labels and HELP, defined once.

The collector, the backfill writer, the docs' metrics reference and the rules all use
these names; docs/metrics.md is checked against this table by a test.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from bigbinf.result import OUTCOMES, Result

PREFIX = "bigbinf_"
SERIES_LABELS = ("protocol", "remote", "dataset", "direction")
CACHED = " Cached from the last scheduled run of the series; not measured at scrape time."


@dataclass(frozen=True)
class Spec:
    name: str
    type: str  # gauge | counter | histogram | info | stateset-as-gauge
    help: str
    labels: tuple[str, ...] = ()
    unit_note: str = ""


def _last(name: str, help_: str, extra: tuple[str, ...] = ()) -> Spec:
    return Spec(PREFIX + "last_transfer_" + name, "gauge", help_ + CACHED, SERIES_LABELS + extra)


LAST_RESULT: tuple[Spec, ...] = (
    _last("start_timestamp_seconds", "UTC start time of the last transfer of the series."),
    _last("success", "1 if the last transfer's outcome was ok, else 0."),
    _last(
        "outcome",
        "1 for the outcome (ok, failed, timeout, skipped) of the last transfer, 0 for the others.",
        ("outcome",),
    ),
    _last("duration_seconds", "Wall-clock duration of the last transfer command."),
    _last("throughput_bytes_per_second", "File bytes divided by duration of the last transfer (0 unless ok)."),
    _last("file_bytes", "Bytes of the dataset moved by the last transfer."),
    _last(
        "wire_bytes",
        "Link-layer frame bytes captured during the last transfer; way=down is remote to client.",
        ("way",),
    ),
    _last("payload_bytes", "TCP/UDP payload bytes captured during the last transfer.", ("way",)),
    _last("packets", "Packets captured during the last transfer.", ("way",)),
    _last("byte_ratio", "Wire bytes (down + up) per file byte of the last transfer."),
    _last(
        "retransmits_wire",
        "Retransmitted TCP segments seen in the capture of the last transfer (receiver-side view: undercounts the "
        "sender's under drops).",
    ),
    _last(
        "verified",
        "1 if the last transfer's file size (and sha256 where known) matched, else 0; always 0 for "
        "memory-to-memory tests (iperf3), which move no file.",
    ),
    _last("data_flows", "Distinct 5-tuples that carried data (>= 64 KiB payload) in the last transfer."),
    _last("transport", "1 for the transport (tcp or udp) that carried the last transfer's data.", ("transport",)),
    _last(
        "retransmits_sender",
        "Retransmitted segments counted by the sender in the last transfer: source=kernel is "
        "tcp_info of the transfer's sockets (uploads: this host sends), source=iperf3 is iperf3's own report "
        "(downloads: the remote's count; uploads: beside the kernel's). Absent when the sender is remote and "
        "does not report.",
        ("source",),
    ),
    _last(
        "reported_throughput_bytes_per_second",
        "Throughput the tool itself reported for the last transfer: "
        "iperf3's bytes received over its own measuring time (memory to memory, without process and "
        "connection start-up); absent for copy tools.",
    ),
    _last("rtt_seconds", "Mean round-trip time reported by the tool for the last transfer (iperf3); absent otherwise."),
    _last(
        "capture_dropped_packets",
        "Packets the kernel dropped before tcpdump read them during the last transfer; non-zero means the wire "
        "numbers are low.",
    ),
)
LAST_SUCCESS = Spec(
    PREFIX + "last_success_timestamp_seconds",
    "gauge",
    "UTC start time of the last transfer of the series whose outcome was ok." + CACHED,
    SERIES_LABELS,
)
LAST_RESULT = (*LAST_RESULT, LAST_SUCCESS)

# Counters and histograms: every transfer is counted exactly once, so windowed queries
# (increase/rate over any range) count transfers, bytes and retransmits exactly.
UPDATED = " Updated when a scheduled transfer ends, never at scrape time."
DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)
THROUGHPUT_BUCKETS = (1e5, 1e6, 5e6, 1e7, 2.5e7, 5e7, 7.5e7, 1e8, 2.5e8, 5e8, 1e9, 2.5e9, 5e9, 1e10)

TRANSFERS_TOTAL = Spec(
    PREFIX + "transfers_total",
    "counter",
    "Transfers run since the exporter started, by outcome." + UPDATED,
    (*SERIES_LABELS, "outcome"),
)
DURATION_HIST = Spec(
    PREFIX + "transfer_duration_seconds",
    "histogram",
    "Wall-clock duration of transfers whose outcome was ok." + UPDATED,
    SERIES_LABELS,
)
THROUGHPUT_HIST = Spec(
    PREFIX + "transfer_throughput_bytes_per_second",
    "histogram",
    "Throughput (file bytes / duration) of transfers whose outcome was ok." + UPDATED,
    SERIES_LABELS,
)
FILE_BYTES_TOTAL = Spec(
    PREFIX + "transfer_file_bytes_total",
    "counter",
    "File bytes moved by transfers whose outcome was ok." + UPDATED,
    SERIES_LABELS,
)
WIRE_BYTES_TOTAL = Spec(
    PREFIX + "transfer_wire_bytes_total",
    "counter",
    "Link-layer frame bytes captured during transfers whose outcome was ok." + UPDATED,
    (*SERIES_LABELS, "way"),
)
RETRANSMITS_TOTAL = Spec(
    PREFIX + "transfer_retransmits_wire_total",
    "counter",
    "Retransmitted TCP segments seen in captures of transfers whose outcome was ok." + UPDATED,
    SERIES_LABELS,
)
PAYLOAD_SIZE_HIST = Spec(
    PREFIX + "transfer_payload_size_bytes",
    "histogram",
    "TCP/UDP payload size of every captured packet of ok transfers (the protocol's packet-size fingerprint)." + UPDATED,
    (*SERIES_LABELS, "way"),
)

SCHEDULE_INTERVAL = Spec(
    PREFIX + "schedule_interval_seconds",
    "gauge",
    "Longest expected gap between two scheduled starts of the series: the schedule interval, "
    "or for cron schedules the longest gap between consecutive fire times, plus the jitter. "
    "Stale-data alerts compare the last success against a multiple of it.",
    SERIES_LABELS,
)
ROUNDS_TOTAL = Spec(PREFIX + "rounds_total", "counter", "Scheduled rounds completed since the exporter started.")
ROUNDS_SKIPPED_TOTAL = Spec(
    PREFIX + "rounds_skipped_total", "counter", "Rounds not started because the previous round was still running."
)
ROUND_DURATION_HIST = Spec(PREFIX + "round_duration_seconds", "histogram", "Wall-clock duration of completed rounds.")
LAST_ROUND_END = Spec(PREFIX + "last_round_end_timestamp_seconds", "gauge", "UTC time the last round ended.")
CONFIG_RELOAD_OK = Spec(
    PREFIX + "config_last_reload_successful",
    "gauge",
    "1 if the last configuration load or reload succeeded, else 0 (the previous configuration stays in force).",
)
CONFIG_RELOAD_TS = Spec(
    PREFIX + "config_last_reload_success_timestamp_seconds",
    "gauge",
    "UTC time of the last successful configuration load.",
)
JOURNAL_FAILURES_TOTAL = Spec(
    PREFIX + "journal_write_failures_total",
    "counter",
    "Results that could not be written to the journal (they are still published).",
)
BUILD_INFO = Spec(
    PREFIX + "build_info", "gauge", "Always 1; the version label says which bigbinf is running.", ("version",)
)

ALL = (
    *LAST_RESULT,
    TRANSFERS_TOTAL,
    DURATION_HIST,
    THROUGHPUT_HIST,
    FILE_BYTES_TOTAL,
    WIRE_BYTES_TOTAL,
    RETRANSMITS_TOTAL,
    PAYLOAD_SIZE_HIST,
    SCHEDULE_INTERVAL,
    ROUNDS_TOTAL,
    ROUNDS_SKIPPED_TOTAL,
    ROUND_DURATION_HIST,
    LAST_ROUND_END,
    CONFIG_RELOAD_OK,
    CONFIG_RELOAD_TS,
    JOURNAL_FAILURES_TOTAL,
    BUILD_INFO,
)


# Labels beyond the series labels, e.g. (("way", "down"),).
Extra = tuple[tuple[str, str], ...]


def last_result_samples(r: Result) -> Iterator[tuple[str, Extra, float]]:
    """The last-result gauges one result sets: (metric, labels beyond the series', value).

    The single owner of this mapping: the collector publishes it live and the backfill
    writes it into history, so the two can never disagree."""
    p = PREFIX + "last_transfer_"
    yield p + "start_timestamp_seconds", (), r.start_timestamp
    yield p + "success", (), 1.0 if r.outcome == "ok" else 0.0
    for outcome in OUTCOMES:
        yield p + "outcome", (("outcome", outcome),), 1.0 if r.outcome == outcome else 0.0
    yield p + "duration_seconds", (), r.duration_seconds
    yield p + "throughput_bytes_per_second", (), r.throughput_bytes_per_second
    yield p + "file_bytes", (), r.file_bytes
    for name, down, up in (
        ("wire_bytes", r.wire_bytes_down, r.wire_bytes_up),
        ("payload_bytes", r.payload_bytes_down, r.payload_bytes_up),
        ("packets", r.packets_down, r.packets_up),
    ):
        yield p + name, (("way", "down"),), down
        yield p + name, (("way", "up"),), up
    yield p + "byte_ratio", (), r.byte_ratio
    yield p + "retransmits_wire", (), r.retransmits_wire
    yield p + "verified", (), 1.0 if r.verified else 0.0
    yield p + "data_flows", (), r.data_flows
    if r.transport:
        yield p + "transport", (("transport", r.transport),), 1.0
    if r.retransmits_sender is not None:
        yield p + "retransmits_sender", (("source", r.retransmits_sender_source),), r.retransmits_sender
    if "retransmits" in r.reported and r.retransmits_sender_source != "iperf3":
        # An iperf3 upload: the kernel's count above, iperf3's own beside it.
        yield p + "retransmits_sender", (("source", "iperf3"),), r.reported["retransmits"]
    if r.reported.get("bytes", 0) > 0 and r.reported.get("seconds", 0) > 0:
        yield p + "reported_throughput_bytes_per_second", (), r.reported["bytes"] / r.reported["seconds"]
    if r.rtt_seconds is not None:
        yield p + "rtt_seconds", (), r.rtt_seconds
    yield p + "capture_dropped_packets", (), r.capture_dropped
