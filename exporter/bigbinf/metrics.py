"""Every metric the exporter publishes: name, type, labels and HELP, defined once.

The collector, the backfill writer, the docs' metrics reference and the rules all use
these names; docs/metrics.md is checked against this table by a test.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from bigbinf.history.moveplan import Prediction
from bigbinf.history.regression import Verdict
from bigbinf.result import LIMIT_SIDES, LIMITS, OUTCOMES, PathBaseline, Result

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
        "Link-layer frame bytes that crossed the wire during the last transfer (an offload super-frame counts as the "
        "MSS-sized frames it stands for); way=down is remote to client; absent when the capture could not be read "
        "whole.",
        ("way",),
    ),
    _last("payload_bytes", "TCP/UDP payload bytes captured during the last transfer.", ("way",)),
    _last(
        "packets",
        "Frames that crossed the wire during the last transfer (super-frames split, as wire_bytes).",
        ("way",),
    ),
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
        "congestion_control",
        "1 for the congestion control the sender's kernel used on the last transfer's busiest data socket "
        "(tcp_info); a protocol's congestion setting that the sender did not use fails the transfer. Absent when "
        "the sender's sockets could not be read (a remote without stats_command, UDP).",
        ("algorithm",),
    ),
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
        "limited_by",
        f"1 for what limited the last transfer ({', '.join(LIMITS)}), 0 for the others; absent when it was "
        "not judged (failed, UDP, or no limit could be named from what the kernels showed).",
        ("reason",),
    ),
    _last(
        "limited_side",
        f"1 for where the last transfer's limit was ({', '.join(LIMIT_SIDES)}: this host, the remote host, the "
        "path between them), 0 for the others; absent when it was not judged.",
        ("side",),
    ),
    _last(
        "tcp_limited_seconds",
        "Time the sender's data sockets spent with data in flight (limit=busy), of it limited by the "
        "receive window (limit=rwnd) and by the send buffer (limit=sndbuf), from the sender's kernel "
        "(tcp_info) in the last transfer; absent when the sender is remote and cannot be asked.",
        ("limit",),
    ),
    _last(
        "tcp_delivery_rate_bytes_per_second",
        "Median delivery rate of the sender's data sockets (summed over parallel streams) while sending, from "
        "the sender's kernel in the last transfer; absent when the sender cannot be asked.",
    ),
    _last(
        "tcp_min_rtt_seconds",
        "Smallest round-trip time the kernel measured on the transfer's data sockets in the last transfer.",
    ),
    _last(
        "capture_dropped_packets",
        "Packets the capture lost in the last transfer (dropped by the kernel, or left unread in its ring at "
        "stop); non-zero means the transfer failed with its wire numbers absent (a capture that missed packets "
        "counts none).",
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
    "Link-layer frame bytes that crossed the wire (super-frames split) during transfers whose outcome was ok."
    + UPDATED,
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
    "TCP/UDP payload size of every packet on the wire of ok transfers (the protocol's packet-size fingerprint; "
    "super-frames split)." + UPDATED,
    (*SERIES_LABELS, "way"),
)

# The passive watcher (bigbinf/passive/, docs/passive.md): this host's own transfers.
# Bounded labels only: remote and service are the configuration's names, direction two
# values, verdict one of result.LIMITS or "none"; never ports, pids, programs or files.
PASSIVE_UPDATED = " Updated when a passive transfer (this host's own, seen by the passive watcher) closes."
PASSIVE_FLOWS_TOTAL = Spec(
    PREFIX + "passive_transfers_total",
    "counter",
    "This host's own transfers to a watched remote and service that moved at least passive.min_bytes, by the "
    "judge's verdict (none: not judged, e.g. a download, whose sender is the remote)." + PASSIVE_UPDATED,
    ("remote", "service", "direction", "verdict"),
)
PASSIVE_BYTES_TOTAL = Spec(
    PREFIX + "passive_bytes_total",
    "counter",
    "Bytes the judged passive transfers moved (the kernel's bytes_acked sent, bytes_received received)."
    + PASSIVE_UPDATED,
    ("remote", "service", "direction"),
)
PASSIVE_RATE_HIST = Spec(
    PREFIX + "passive_rate_bytes_per_second",
    "histogram",
    "Steady rate of passive transfers (the listings' fit over the last half of the data; else bytes over "
    "duration)." + PASSIVE_UPDATED,
    ("remote", "service"),
)
PASSIVE_SKIPPED_TOTAL = Spec(
    PREFIX + "passive_flows_skipped_total",
    "counter",
    "Connections the passive watcher listed but did not follow because passive.max_flows were followed already "
    "(never judged).",
)
PASSIVE_MISSED_TOTAL = Spec(
    PREFIX + "passive_transfers_missed_total",
    "counter",
    "Connections to a watched remote and service that moved at least passive.min_bytes and closed before any "
    "listing of the passive watcher showed them (their close event alone: never judged). passive.interval, "
    "or a busy host's stretched one (bigbinf_passive_interval_seconds), is longer than such transfers.",
)
PASSIVE_OPEN = Spec(PREFIX + "passive_open_flows", "gauge", "Connections the passive watcher follows now.")
PASSIVE_LISTING_CPU = Spec(
    PREFIX + "passive_listing_cpu_seconds",
    "gauge",
    "CPU seconds one listing of the passive watcher costs (ss and its parse; a moving average).",
)
PASSIVE_INTERVAL = Spec(
    PREFIX + "passive_interval_seconds",
    "gauge",
    "Seconds between the passive watcher's listings now: passive.interval, stretched where a listing's cost "
    "would exceed 1% of one core.",
)
PASSIVE_STRETCHED_TOTAL = Spec(
    PREFIX + "passive_interval_stretched_total",
    "counter",
    "Listings after which the passive watcher stretched its interval to stay within 1% of one core.",
)
PASSIVE = (
    PASSIVE_FLOWS_TOTAL,
    PASSIVE_BYTES_TOTAL,
    PASSIVE_RATE_HIST,
    PASSIVE_SKIPPED_TOTAL,
    PASSIVE_MISSED_TOTAL,
    PASSIVE_OPEN,
    PASSIVE_LISTING_CPU,
    PASSIVE_INTERVAL,
    PASSIVE_STRETCHED_TOTAL,
)

SCHEDULE_INTERVAL = Spec(
    PREFIX + "schedule_interval_seconds",
    "gauge",
    "Longest expected gap between two scheduled starts of the series: the schedule interval, "
    "or for cron schedules the longest gap between consecutive fire times, plus the jitter. "
    "Stale-data alerts compare the last success against a multiple of it.",
    SERIES_LABELS,
)
# The path to each remote, probed once per round outside the transfers' captures.
PATH_CACHED = " Cached from the last probe of the path (once per round); not measured at scrape time."
PATH_RTT = Spec(
    PREFIX + "path_rtt_seconds",
    "gauge",
    "Round-trip time of the last probe train to the remote: stat=min, avg, max, mdev (as ping)." + PATH_CACHED,
    ("remote", "stat"),
)
PATH_LOSS = Spec(
    PREFIX + "path_loss_ratio",
    "gauge",
    "Fraction of the last probe train's probes that got no answer (1 when the remote answered none)." + PATH_CACHED,
    ("remote",),
)
PATH_MTU = Spec(
    PREFIX + "path_mtu_bytes",
    "gauge",
    "Largest IP packet with DF set that reached the remote and was answered; absent when unknown." + PATH_CACHED,
    ("remote",),
)
PATH_BANDWIDTH = Spec(
    PREFIX + "path_bandwidth_bytes_per_second",
    "gauge",
    "Bottleneck bandwidth estimate of the path: source=configured (remotes.NAME.bandwidth), lab (the lab's "
    "shaped rate) or iperf3 (the last ok iperf3 test to the remote)." + PATH_CACHED,
    ("remote", "source"),
)
PATH_BDP = Spec(
    PREFIX + "path_bdp_bytes",
    "gauge",
    "Bandwidth-delay product: the bandwidth estimate (source as in bigbinf_path_bandwidth_bytes_per_second) "
    "times the minimum probe RTT; what a TCP window must hold to fill the path." + PATH_CACHED,
    ("remote", "source"),
)
PATH_PROBE_TS = Spec(
    PREFIX + "path_probe_timestamp_seconds",
    "gauge",
    "UTC time of the last probe of the path; method=icmp or tcp." + PATH_CACHED,
    ("remote", "method"),
)
TCP_BUFFER_MAX = Spec(
    PREFIX + "tcp_buffer_max_bytes",
    "gauge",
    "Largest TCP buffer the host at side (local: this host, remote: the remote, where it can be asked) allows: "
    "kind=tcp_rmem and tcp_wmem are the autotuning maxima (net.ipv4.tcp_rmem/tcp_wmem), rmem_max and wmem_max "
    "the caps on buffers applications set (net.core.*)." + PATH_CACHED,
    ("remote", "side", "kind"),
)
TCP_CONGESTION_CONTROL = Spec(
    PREFIX + "tcp_congestion_control",
    "gauge",
    "1 for the default congestion control (net.ipv4.tcp_congestion_control) of the host at side." + PATH_CACHED,
    ("remote", "side", "algorithm"),
)
PATH = (PATH_RTT, PATH_LOSS, PATH_MTU, PATH_BANDWIDTH, PATH_BDP, PATH_PROBE_TS, TCP_BUFFER_MAX, TCP_CONGESTION_CONTROL)

ROUNDS_TOTAL = Spec(PREFIX + "rounds_total", "counter", "Scheduled rounds completed since the exporter started.")
ROUND_SKIP_REASONS = (
    "round_running",  # the previous scheduled round was still running: rounds take longer than the interval
    "lock_held",  # a tuning sweep, a `once` or `sweep` command, or the start's recovery held the round lock
)
ROUNDS_SKIPPED_TOTAL = Spec(
    PREFIX + "rounds_skipped_total",
    "counter",
    "Scheduled rounds not started, by reason: round_running (the previous round was still running: the schedule "
    "does not fit this host, see bigbinf_round_overrun_seconds), lock_held (a tuning sweep or a once/sweep command "
    "held the round lock).",
    ("reason",),
)
ROUND_OVERRUN = Spec(
    PREFIX + "round_overrun_seconds",
    "gauge",
    "How far the last completed round ran past the next scheduled start: its duration less the schedule's gap "
    "after its start (0 when it fitted).  Absent before the first round and for a mesh site.",
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
WEB_CONFIG_RELOAD_OK = Spec(
    PREFIX + "web_config_last_reload_successful",
    "gauge",
    "1 if the last load or reload of --web.config.file succeeded, else 0: the file is invalid, unreadable, or "
    "would remove TLS, basic auth or client certificate verification the running one has (refused; the running "
    "web configuration, and the rest of the configuration, stay in force).",
)
WEB_CONFIG_RELOAD_TS = Spec(
    PREFIX + "web_config_last_reload_success_timestamp_seconds",
    "gauge",
    "UTC time of the last successful load of --web.config.file.",
)
WEB_CONFIG_REFUSED_TOTAL = Spec(
    PREFIX + "web_config_reloads_refused_total",
    "counter",
    "Reloads that refused --web.config.file (invalid, unreadable, gone, or weakening the front door): a refusal "
    "that a good reload followed before the next scrape still counts.",
)
WEB_TLS_ENABLED = Spec(
    PREFIX + "web_tls_enabled",
    "gauge",
    "1 if the web configuration in force serves TLS, else 0 (plain HTTP).",
)
WEB_BASIC_AUTH_ENABLED = Spec(
    PREFIX + "web_basic_auth_enabled",
    "gauge",
    "1 if the web configuration in force requires basic auth (basic_auth_users), else 0.",
)
WEB_CLIENT_CERT_REQUIRED = Spec(
    PREFIX + "web_client_cert_required",
    "gauge",
    "1 if the web configuration in force requires a verified client certificate (client_auth_type "
    "RequireAndVerifyClientCert or RequireAnyClientCert), else 0.",
)
JOURNAL_FAILURES_TOTAL = Spec(
    PREFIX + "journal_write_failures_total",
    "counter",
    "Results that could not be written to the journal (they are still published).",
)
JOURNAL_DROPPED_TOTAL = Spec(
    PREFIX + "journal_results_dropped_total",
    "counter",
    "Results (and path baselines) published but not kept for the journal: measured while it took no writes, "
    "with its in-memory bound of unwritten results reached: never journaled, gone at the next restart.",
)
JOURNAL_UNWRITTEN = Spec(
    PREFIX + "journal_unwritten_results",
    "gauge",
    "Transfer results measured and published but not yet written to the journal (its disk full, read-only or "
    "failing): kept in memory and retried every few seconds; a stop writes them elsewhere (docs/deployment.md).",
)
JOURNAL_UNWRITTEN_BASELINES = Spec(
    PREFIX + "journal_unwritten_path_baselines",
    "gauge",
    "Path baselines (one per remote per round) measured but not yet written to their journal (journal.paths.jsonl), "
    "kept and retried as the transfer results are (bigbinf_journal_unwritten_results).",
)
JOURNAL_DAMAGED = Spec(
    PREFIX + "journal_damaged_segments",
    "gauge",
    "Journal segments found damaged and moved aside (<segment>.damaged-<time>, beside the journal): their "
    "readable results are kept, the rest is lost; counted from the files, so it survives a restart and falls "
    "to 0 once they are removed.",
)
JOURNAL_LOADING = Spec(
    PREFIX + "journal_loading",
    "gauge",
    "1 while the exporter is still reading its journal after /metrics came up (a start that must split an old "
    "single-file journal, rebuild its checkpoint or replay the regression history first): the last-result "
    "series, baselines and regression verdicts are filled in, and rounds start, when it falls to 0.",
)
UNDO_PENDING = Spec(
    PREFIX + "tuning_undo_pending",
    "gauge",
    "Changes bigbinf made that are not yet undone, from its undo journal: a route's congestion control or a "
    "TCP buffer cap still set on a host, or an upload still on a remote (kind), left by an exporter killed "
    "mid-transfer or an undo that failed; replayed at start and at every round until it succeeds.",
    ("kind",),
)
# Why a connection was closed without its request being served (a bounded label set).
HTTP_REJECT_REASONS = (
    "capacity",  # closed to make room for a new connection (it had waited longest)
    "tls_handshake_timeout",
    "tls_error",  # a failed handshake (no or wrong client certificate, no common version)
    "client_certificate",  # a verified certificate without one of client_allowed_sans
    "http_to_https",  # plain HTTP to the TLS port
    "https_to_http",  # a TLS handshake at the plain port (answered 400 at its head's deadline)
    "request_timeout",  # the head or the body did not arrive in time
    "bad_request",  # 400 (malformed) or 505
    "too_large",  # 431 (head) or 413 (body, from its Content-Length or a chunk's declared size)
    "cross_site",  # 403: a state-changing request a browser made for another site (Origin, Sec-Fetch-Site, a form)
    "unauthorized",  # 401
    "write_timeout",  # the client did not take the response in time
    "fd_limit",  # accept() found no descriptor for it (EMFILE/ENFILE): it waited, another made room
)
HTTP_REJECTED_TOTAL = Spec(
    PREFIX + "http_connections_rejected_total",
    "counter",
    "Connections the exporter's HTTP server closed without serving their request, by reason: capacity (closed "
    "to make room for a new one), tls_handshake_timeout, tls_error, client_certificate (none of "
    "client_allowed_sans), http_to_https, https_to_http (a TLS handshake at the plain port), request_timeout "
    "(head or body), bad_request, too_large, cross_site (a browser's request for another site to a route that "
    "changes state), unauthorized, write_timeout, fd_limit (an accept that found the open-files limit reached).  "
    "Counted as they happen, published every few seconds.",
    ("reason",),
)
BUILD_INFO = Spec(
    PREFIX + "build_info", "gauge", "Always 1; the version label says which bigbinf is running.", ("version",)
)

SWEEP_LABELS = ("sweep", "dataset", "setting")
SWEEP_BEST = Spec(
    PREFIX + "sweep_best_throughput_bytes_per_second",
    "gauge",
    "Mean throughput of the best setting of the last run of a tuning sweep, per dataset (setting: its label). "
    "Kept until the sweep runs again; not measured at scrape time.",
    SWEEP_LABELS,
)
SWEEP_GAIN = Spec(
    PREFIX + "sweep_gain_ratio",
    "gauge",
    "Mean throughput of the best setting over the baseline setting's, in the last run of a tuning sweep, per "
    "dataset (1 = no gain); absent when the baseline had no ok run.",
    SWEEP_LABELS,
)
SWEEP = (SWEEP_BEST, SWEEP_GAIN)

# The live regression test of each series (bigbinf/history/regression.py; docs/runbook.md,
# BigbinfThroughputRegressed): published for series old enough to be tested.
TESTED = (
    " Computed from the journal by the regression test when an ok transfer of the series ends (q-values and "
    "regressed: when one of any series ends), never at scrape time; absent while the series is too young to test."
)
REGRESSION_RATIO = Spec(
    PREFIX + "throughput_regression_ratio",
    "gauge",
    "Recent over baseline median throughput of the series at the same time of day (Hodges-Lehmann): the "
    "last regression.recent_runs ok transfers against the regression.baseline_weeks before them." + TESTED,
    SERIES_LABELS,
)
REGRESSION_RATIO_LOWER = Spec(
    PREFIX + "throughput_regression_ratio_lower",
    "gauge",
    "Lower bound of the confidence interval (regression.confidence) of bigbinf_throughput_regression_ratio." + TESTED,
    SERIES_LABELS,
)
REGRESSION_RATIO_UPPER = Spec(
    PREFIX + "throughput_regression_ratio_upper",
    "gauge",
    "Upper bound of the confidence interval (regression.confidence) of bigbinf_throughput_regression_ratio." + TESTED,
    SERIES_LABELS,
)
REGRESSION_P = Spec(
    PREFIX + "throughput_regression_p_value",
    "gauge",
    "One-sided Mann-Whitney p-value that the recent transfers of the series are slower than its baseline at the "
    "same time of day." + TESTED,
    SERIES_LABELS,
)
REGRESSION_Q = Spec(
    PREFIX + "throughput_regression_q_value",
    "gauge",
    "Benjamini-Hochberg q-value of bigbinf_throughput_regression_p_value across every tested series of this "
    "exporter." + TESTED,
    SERIES_LABELS,
)
REGRESSED = Spec(
    PREFIX + "throughput_regressed",
    "gauge",
    "1 while a regression of the series' throughput is open: it opened when its q-value was at most "
    "regression.fdr and its ratio at most 1 - regression.material_drop, and stays open until its transfers "
    'show the series back at the level before it (docs/runbook.md, "A regression is a state"), '
    "or an operator accepts the new level (`bigbinf-exporter regression accept`); else 0.  Present while the "
    "series is tested or a regression of it is open.",
    SERIES_LABELS,
)
STATE = (
    " Changed when an ok transfer of the series ends or an operator accepts; journaled beside the journal "
    "(*.regressions.jsonl), so a restart keeps it."
)
REGRESSION_SINCE = Spec(
    PREFIX + "throughput_regression_since_timestamp_seconds",
    "gauge",
    "Start time of the first transfer of the series' open regression (absent when none is open)." + STATE,
    SERIES_LABELS,
)
REGRESSION_LEVEL_BEFORE = Spec(
    PREFIX + "throughput_regression_level_before_bytes_per_second",
    "gauge",
    "Median throughput of the baseline the series' open regression was found against: the level before it; "
    "the ratio gauges compare the recent transfers with that baseline as long as it is open." + STATE,
    SERIES_LABELS,
)
REGRESSION_ACCEPTED = Spec(
    PREFIX + "throughput_regression_accepted_timestamp_seconds",
    "gauge",
    "When an operator last accepted a regression of the series as its new level (absent if never)." + STATE,
    SERIES_LABELS,
)
REGRESSION_SUSPECTED = Spec(
    PREFIX + "throughput_regression_suspected",
    "gauge",
    "1 if the series is tested, no regression is open, and its ratio is at most 1 - regression.material_drop: "
    "materially below its baseline but not (yet) significant; a gauge to look at, not an alert." + TESTED,
    SERIES_LABELS,
)
REGRESSION_BASELINE_RUNS = Spec(
    PREFIX + "throughput_regression_baseline_runs",
    "gauge",
    "Ok transfers of the series' baseline that the regression test compared the recent ones with (those at "
    "their times of day)." + TESTED,
    SERIES_LABELS,
)
# What changed when an open regression began (bigbinf/history/change.py): its runs and
# path probes of the baseline weeks before its start (when="before") against those since
# (when="after"), computed when it opens and at a restart.
CHANGED = (
    " Of an open regression only: from the journal, when it opened (or the exporter started); `advise` says "
    "the rest (loss, MTU, buffer maxima)."
)
WHEN_LABELS = (*SERIES_LABELS, "when")
REGRESSION_CHANGE_INFO = Spec(
    PREFIX + "throughput_regression_change_info",
    "gauge",
    "Always 1; the most common why-slow verdict (limited_by) and congestion control of the series' runs before "
    "its open regression's start and since." + CHANGED,
    (*SERIES_LABELS, "limited_by_before", "limited_by_after", "congestion_control_before", "congestion_control_after"),
)
REGRESSION_CHANGE_RTT = Spec(
    PREFIX + "throughput_regression_path_rtt_seconds",
    "gauge",
    "Median minimum RTT of the remote's path probes before the open regression's start and since." + CHANGED,
    WHEN_LABELS,
)
REGRESSION_CHANGE_BANDWIDTH = Spec(
    PREFIX + "throughput_regression_path_bandwidth_bytes_per_second",
    "gauge",
    "Median bandwidth estimate of the remote's path probes before the open regression's start and since." + CHANGED,
    WHEN_LABELS,
)
REGRESSION_CHANGE_RETRANSMITS = Spec(
    PREFIX + "throughput_regression_retransmit_ratio",
    "gauge",
    "Retransmitted segments per packet of the series' captured runs before the open regression's start and since."
    + CHANGED,
    WHEN_LABELS,
)
REGRESSION_CHANGE = (
    REGRESSION_CHANGE_INFO,
    REGRESSION_CHANGE_RTT,
    REGRESSION_CHANGE_BANDWIDTH,
    REGRESSION_CHANGE_RETRANSMITS,
)

# plan-move's model (bigbinf/history/moveplan.py) for the config's moves.sizes, per remote.
MOVE_LABELS = ("remote", "size")
PREDICTED = (
    " The recommended option at its best start hour, from the ok transfers to the remote of the last "
    "moves.history (plan-move's model, docs/report.md); computed when a transfer to the remote ends, never at "
    "scrape time."
)
MOVE_PREDICTED = Spec(
    PREFIX + "move_predicted_seconds",
    "gauge",
    "Predicted duration of moving `size` (moves.sizes) with the remote." + PREDICTED,
    MOVE_LABELS,
)
MOVE_PREDICTED_LOWER = Spec(
    PREFIX + "move_predicted_lower_seconds",
    "gauge",
    "Lower end of the 90% prediction interval of bigbinf_move_predicted_seconds." + PREDICTED,
    MOVE_LABELS,
)
MOVE_PREDICTED_UPPER = Spec(
    PREFIX + "move_predicted_upper_seconds",
    "gauge",
    "Upper end of the 90% prediction interval of bigbinf_move_predicted_seconds." + PREDICTED,
    MOVE_LABELS,
)
MOVE_RECOMMENDATION = Spec(
    PREFIX + "move_recommendation_info",
    "gauge",
    "Always 1; option (a configured protocol, or a protocol with a sweep's setting) and start_hour (local, "
    "schedule.timezone) say what bigbinf_move_predicted_seconds assumes." + PREDICTED,
    (*MOVE_LABELS, "option", "start_hour"),
)
MOVES = (MOVE_PREDICTED, MOVE_PREDICTED_LOWER, MOVE_PREDICTED_UPPER, MOVE_RECOMMENDATION)

REGRESSION = (
    REGRESSION_RATIO,
    REGRESSION_RATIO_LOWER,
    REGRESSION_RATIO_UPPER,
    REGRESSION_P,
    REGRESSION_Q,
    REGRESSED,
    REGRESSION_BASELINE_RUNS,
    REGRESSION_SINCE,
    REGRESSION_LEVEL_BEFORE,
    REGRESSION_ACCEPTED,
    REGRESSION_SUSPECTED,
)

# A mesh exporter's slots (service/mesh_runner.py).  Published only by an exporter that
# runs for a mesh site (--mesh.file, --site): not in ALL, which is what a single-site
# exporter publishes (its exposition stays as it was); ALL_WITH_MESH is every metric.
SITE_LABEL = "site"  # on every series of a mesh exporter: the site it runs for
PLAN_CACHED = " Cached from the mesh plan when the round started; not computed at scrape time."
SLOT_OVERRUNS_TOTAL = Spec(
    PREFIX + "mesh_slot_overruns_total",
    "counter",
    "Transfers of the series whose traffic went on past the end of their slot in the mesh plan (the next slot "
    "of this site waited for them)." + UPDATED,
    SERIES_LABELS,
)
LAST_SLOT_OVERRUN = Spec(
    PREFIX + "mesh_last_slot_overrun_seconds",
    "gauge",
    "How far the last transfer of the series went past the end of its slot (the end of its traffic minus the "
    "slot's end); 0 when it ended within its slot." + CACHED,
    SERIES_LABELS,
)
# Why a slot of a mesh site was not run: the reason label of SLOTS_MISSED_TOTAL (bounded:
# these values only, each series exported with all of them from the start, at 0).
MISSED_LATE = "late_start"  # the site's previous transfer overran: too little of the slot left
MISSED_LOCKED = "lock_held"  # a tuning sweep, or a once or sweep process, held the round lock
MISSED_NO_FIT = "round_does_not_fit"  # the slot (and the guard after it) would run past the next round's start
MISSED_GONE = "not_configured"  # its test is not in the configuration now (a reload)
MISSED_ERROR = "error"  # a bug in running or publishing it (logged with a traceback)
MISSED_DOWN = "exporter_down"  # it started while the exporter was not running (counted at the next start)
MISSED_REASONS = (MISSED_LATE, MISSED_LOCKED, MISSED_NO_FIT, MISSED_GONE, MISSED_ERROR, MISSED_DOWN)
SLOTS_MISSED_TOTAL = Spec(
    PREFIX + "mesh_slots_missed_total",
    "counter",
    "Slots of the series in the mesh plan that this site's exporter did not run, by reason: late_start (the "
    "site's previous transfer overran and less than the test's typical length, slot / headroom, was left), "
    "lock_held (a tuning sweep, or a once or sweep process on the same journal), round_does_not_fit (the slot "
    "and the guard after it would run past the next round's start), not_configured (a reload dropped its "
    "test), error (logged), exporter_down (the slot started while the exporter was not running: counted when "
    "it starts again, from the plan, and published after its first scrape). Updated when the slot is passed "
    "over, never at scrape time.",
    (*SERIES_LABELS, "reason"),
)
ROUND_PLANNED = Spec(
    PREFIX + "mesh_round_planned_seconds",
    "gauge",
    "Time the slots of the current mesh round need (the end of its last slot minus the round's start); the "
    "round fits when this plus the guard is at most bigbinf_mesh_round_period_seconds." + PLAN_CACHED,
)
ROUND_PERIOD = Spec(
    PREFIX + "mesh_round_period_seconds",
    "gauge",
    "Length of the current mesh round: from its start to the next round's start." + PLAN_CACHED,
)
PLAN_INFO = Spec(
    PREFIX + "mesh_plan_info",
    "gauge",
    "Always 1; fingerprint is a short hash of the current round's slot plan (the schedule, the guard, and every "
    "slot's test, length and offset from the round's start; not the date), one value per mesh and durations "
    "file: every site of the mesh should show the same one." + PLAN_CACHED,
    ("fingerprint",),
)
ROUND_FITS = Spec(
    PREFIX + "mesh_round_fits",
    "gauge",
    "1 when the current mesh round fits: its last slot and the guard after it end by the next round's start; 0 "
    "when not (bigbinf-exporter mesh plan says by how much): its slots that would run past the next round's start "
    'are not run and count in bigbinf_mesh_slots_missed_total{reason="round_does_not_fit"}.' + PLAN_CACHED,
)
GUARD = Spec(
    PREFIX + "mesh_guard_seconds",
    "gauge",
    "The mesh's guard gap (schedule.guard): after every slot before the next slot of either of its sites; it "
    "absorbs the sites' clock offsets, which must stay under half of it." + PLAN_CACHED,
)
MESH = (
    SLOT_OVERRUNS_TOTAL,
    LAST_SLOT_OVERRUN,
    SLOTS_MISSED_TOTAL,
    ROUND_PLANNED,
    ROUND_PERIOD,
    ROUND_FITS,
    GUARD,
    PLAN_INFO,
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
    *PATH,
    SCHEDULE_INTERVAL,
    ROUNDS_TOTAL,
    ROUNDS_SKIPPED_TOTAL,
    ROUND_OVERRUN,
    ROUND_DURATION_HIST,
    LAST_ROUND_END,
    CONFIG_RELOAD_OK,
    CONFIG_RELOAD_TS,
    WEB_CONFIG_RELOAD_OK,
    WEB_CONFIG_RELOAD_TS,
    WEB_CONFIG_REFUSED_TOTAL,
    WEB_TLS_ENABLED,
    WEB_BASIC_AUTH_ENABLED,
    WEB_CLIENT_CERT_REQUIRED,
    JOURNAL_FAILURES_TOTAL,
    JOURNAL_DROPPED_TOTAL,
    JOURNAL_UNWRITTEN,
    JOURNAL_UNWRITTEN_BASELINES,
    JOURNAL_DAMAGED,
    JOURNAL_LOADING,
    UNDO_PENDING,
    HTTP_REJECTED_TOTAL,
    BUILD_INFO,
    *SWEEP,
    *REGRESSION,
    *REGRESSION_CHANGE,
    *MOVES,
    *PASSIVE,
)
ALL_WITH_MESH = (*ALL, *MESH)


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
    if r.wire_measured:  # else absent: a 0 would read as "nothing crossed", not "not measured"
        for name, down, up in (
            ("wire_bytes", r.wire_bytes_down, r.wire_bytes_up),
            ("payload_bytes", r.payload_bytes_down, r.payload_bytes_up),
            ("packets", r.packets_down, r.packets_up),
        ):
            yield p + name, (("way", "down"),), down
            yield p + name, (("way", "up"),), up
        yield p + "byte_ratio", (), r.byte_ratio
        yield p + "retransmits_wire", (), r.retransmits_wire
        yield p + "data_flows", (), r.data_flows
    yield p + "verified", (), 1.0 if r.verified else 0.0
    if r.transport:
        yield p + "transport", (("transport", r.transport),), 1.0
    if r.congestion_control:
        yield p + "congestion_control", (("algorithm", r.congestion_control),), 1.0
    if r.retransmits_sender is not None:
        yield p + "retransmits_sender", (("source", r.retransmits_sender_source),), r.retransmits_sender
    if "retransmits" in r.reported and r.retransmits_sender_source != "iperf3":
        # An iperf3 upload: the kernel's count above, iperf3's own beside it.
        yield p + "retransmits_sender", (("source", "iperf3"),), r.reported["retransmits"]
    if r.reported.get("bytes", 0) > 0 and r.reported.get("seconds", 0) > 0:
        yield p + "reported_throughput_bytes_per_second", (), r.reported["bytes"] / r.reported["seconds"]
    if r.rtt_seconds is not None:
        yield p + "rtt_seconds", (), r.rtt_seconds
    if r.limited_by:
        for reason in LIMITS:
            yield p + "limited_by", (("reason", reason),), 1.0 if r.limited_by == reason else 0.0
        if r.limited_side:
            for side in LIMIT_SIDES:
                yield p + "limited_side", (("side", side),), 1.0 if r.limited_side == side else 0.0
    sender = r.sender_tcp
    for limit, key in (
        ("busy", "busy_seconds"),
        ("rwnd", "rwnd_limited_seconds"),
        ("sndbuf", "sndbuf_limited_seconds"),
    ):
        if key in sender:
            yield p + "tcp_limited_seconds", (("limit", limit),), sender[key]
    if "delivery_rate_median_bytes_per_second" in sender:
        yield p + "tcp_delivery_rate_bytes_per_second", (), sender["delivery_rate_median_bytes_per_second"]
    min_rtts = [side["min_rtt_seconds"] for side in (r.tcp_local, r.tcp_remote) if "min_rtt_seconds" in side]
    if min_rtts:
        yield p + "tcp_min_rtt_seconds", (), min(min_rtts)
    yield p + "capture_dropped_packets", (), r.capture_dropped


BUFFER_KINDS = ("tcp_rmem", "tcp_wmem", "rmem_max", "wmem_max")
RTT_STATS = ("min", "avg", "max", "mdev")


def path_samples(b: PathBaseline) -> Iterator[tuple[str, Extra, float]]:
    """The path gauges one baseline sets: (metric, labels beyond `remote`, value).  Like
    last_result_samples, the single owner of this mapping."""
    yield PATH_PROBE_TS.name, (("method", b.method),), b.start_timestamp
    if b.probes_sent:
        yield PATH_LOSS.name, (), b.loss_ratio
    for stat in RTT_STATS:
        value = getattr(b, f"rtt_{stat}_seconds")
        if value is not None:
            yield PATH_RTT.name, (("stat", stat),), value
    if b.mtu_bytes is not None:
        yield PATH_MTU.name, (), b.mtu_bytes
    if b.bandwidth_bytes_per_second is not None:
        yield PATH_BANDWIDTH.name, (("source", b.bandwidth_source),), b.bandwidth_bytes_per_second
    if b.bdp_bytes is not None:
        yield PATH_BDP.name, (("source", b.bandwidth_source),), b.bdp_bytes
    for side in sorted(b.buffers):
        for kind in BUFFER_KINDS:
            if kind in b.buffers[side]:
                yield TCP_BUFFER_MAX.name, (("side", side), ("kind", kind)), b.buffers[side][kind]
    for side, algorithm in sorted(b.congestion_control.items()):
        yield TCP_CONGESTION_CONTROL.name, (("side", side), ("algorithm", algorithm)), 1.0


def regression_samples(v: Verdict) -> Iterator[tuple[str, float]]:
    """The regression gauges one series' verdict sets: (metric, value).  The single owner
    of this mapping: the collector, the exposition and the backfill use it."""
    if v.test is not None:
        yield REGRESSION_RATIO.name, v.test.ratio
        yield REGRESSION_RATIO_LOWER.name, v.test.ratio_lower
        yield REGRESSION_RATIO_UPPER.name, v.test.ratio_upper
        yield REGRESSION_P.name, v.test.p_value
        yield REGRESSION_Q.name, v.q_value
    if v.test is not None or v.regressed:
        yield REGRESSED.name, 1.0 if v.regressed else 0.0
    if v.test is not None:
        yield REGRESSION_BASELINE_RUNS.name, v.test.baseline_runs
    # An untested series' suspicion too (its test cannot run now): never mute while one
    # stands.  Its `regressed` stays absent, so that the fixed-ratio rules stand in for it.
    if v.test is not None or v.suspected:
        yield REGRESSION_SUSPECTED.name, 1.0 if v.suspected else 0.0
    if v.since is not None:
        yield REGRESSION_SINCE.name, v.since
    if v.level_before is not None:
        yield REGRESSION_LEVEL_BEFORE.name, v.level_before
    if v.accepted_at is not None:
        yield REGRESSION_ACCEPTED.name, v.accepted_at


def regression_change_samples(v: Verdict) -> Iterator[tuple[str, tuple[str, ...], float]]:
    """What changed when the series' open regression began: (metric, label values beyond
    the series', value).  The single owner of this mapping, like regression_samples."""
    change = v.change
    if change is None or not v.regressed:
        return
    a, b = change.before, change.after
    info = (a.verdict, b.verdict, a.congestion_control, b.congestion_control)
    yield REGRESSION_CHANGE_INFO.name, info, 1.0
    for spec, field_ in (
        (REGRESSION_CHANGE_RTT, "rtt_min_seconds"),
        (REGRESSION_CHANGE_BANDWIDTH, "bandwidth_bytes_per_second"),
        (REGRESSION_CHANGE_RETRANSMITS, "retransmit_ratio"),
    ):
        for when, side in (("before", a), ("after", b)):
            value = getattr(side, field_)
            if value is not None:
                yield spec.name, (when,), float(value)


def move_samples(p: Prediction) -> Iterator[tuple[str, Extra, float]]:
    """The move gauges of one remote and size: (metric, labels beyond remote and size,
    value).  Like the others, the single owner of this mapping."""
    yield MOVE_PREDICTED.name, (), p.seconds
    if p.interval_known:  # too few runs for an interval: no bound, rather than a made-up one
        yield MOVE_PREDICTED_LOWER.name, (), p.lower
        yield MOVE_PREDICTED_UPPER.name, (), p.upper
    yield MOVE_RECOMMENDATION.name, (("option", p.option), ("start_hour", f"{p.start_hour:02d}")), 1.0
