"""The result of one transfer: the single record every later stage consumes.

Data flows one way: schedule -> run -> capture -> analyse -> *result* -> journal ->
collector -> /metrics.  A Result is immutable and serialises to one JSON object (one line
of the journal).  Fields added later must have defaults so old journals still load.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

SCHEMA_VERSION = 1

OUTCOMES = ("ok", "failed", "timeout", "skipped")
DIRECTIONS = ("download", "upload")
# Packet directions on the wire, as the study named them: "down" is remote -> client,
# "up" is client -> remote, whatever the transfer direction.
WAYS = ("down", "up")

# What limited a transfer (bigbinf/judge/rules.py); new reasons go at the end (dashboards
# number them by their place here).
LIMITS = (
    "receive_window",
    "send_buffer",
    "congestion",
    "link_capacity",
    "application",
    "startup",
    "cpu",
    "disk",
    "busy_host",  # this host's programs, capture or delay line waited for a CPU (issue 34)
    "shared_path",  # network-limited below the path's estimate: no loss, no window (issue 34)
)
LIMIT_SIDES = ("local", "remote", "path")

# Upper bounds (bytes) of the L4 payload-size histogram.  0 isolates pure ACKs; 1448 is
# the MSS of a 1500-byte MTU with TCP timestamps, 1460 without; 8948/8960 the same for
# 9000-byte jumbo frames.  Enough resolution for the study's Fig 5 "fingerprint".
PAYLOAD_BUCKETS = (0, 64, 128, 256, 512, 1024, 1400, 1448, 1460, 1472, 1500, 4096, 8948, 8960, 65535)


def empty_histogram() -> dict[str, list[int]]:
    """Per way, a count of packets per PAYLOAD_BUCKETS bucket (not cumulative); the last
    slot counts payloads above the largest bound."""
    return {way: [0] * (len(PAYLOAD_BUCKETS) + 1) for way in WAYS}


@dataclass(frozen=True)
class SeriesKey:
    """What identifies a series: these four are the metric labels of every result."""

    protocol: str
    remote: str
    dataset: str
    direction: str


class _Journaled:
    """What every journaled record shares: its start time, and its JSON line."""

    start_timestamp: float

    @property
    def start_utc(self) -> str:
        return dt.datetime.fromtimestamp(self.start_timestamp, dt.UTC).isoformat()

    def derived(self) -> dict[str, Any]:
        """Values computed from the fields."""
        return {}

    def to_json(self) -> dict[str, Any]:
        assert dataclasses.is_dataclass(self)
        # Derived values are written too, so readers of the journal (jq, the report,
        # other tools) need not re-derive them; from_json ignores them.
        return {**dataclasses.asdict(self), "start_utc": self.start_utc, **self.derived()}


@dataclass(frozen=True)
class Result(_Journaled):
    protocol: str
    remote: str
    dataset: str
    direction: str
    start_timestamp: float  # UTC epoch seconds when the command was started
    outcome: str
    error: str = ""
    duration_seconds: float = 0.0  # wall clock of the transfer command
    file_bytes: int = 0  # size of the dataset (sum of its files)
    files: int = 0  # number of files in the dataset
    verified: bool = False  # size (and sha256 where known) matched
    # The wire fields below hold numbers only if wire_measured: no capture, or one that
    # could not be read whole (cut short, corrupt), leaves them at 0 and unpublished.
    # True by default for records of journals written before the field existed.
    wire_measured: bool = True
    # Link-layer frame bytes remote -> client as they crossed the wire: a TSO/GSO/GRO
    # super-frame the capture saw as one counts as the MSS-sized frames it stands for.
    wire_bytes_down: int = 0
    wire_bytes_up: int = 0
    payload_bytes_down: int = 0  # L4 payload bytes remote -> client
    payload_bytes_up: int = 0
    packets_down: int = 0  # frames on the wire (super-frames split, as wire_bytes)
    packets_up: int = 0
    # The same frames as the capture saw them (a super-frame once, with one set of headers).
    captured_wire_bytes_down: int = 0
    captured_wire_bytes_up: int = 0
    captured_packets_down: int = 0
    captured_packets_up: int = 0
    superframes: int = 0  # captured frames that stood for more than one wire frame (both ways)
    retransmits_wire: int = 0  # retransmitted segments seen in the capture (both ways)
    first_packet_timestamp: float | None = None
    last_packet_timestamp: float | None = None
    capture_dropped: int = 0  # packets the kernel dropped before tcpdump read them
    transport: str = ""  # what carried the data on the wire: "tcp" or "udp" ("" if not captured)
    data_flows: int = 0  # distinct 5-tuples that carried data
    expected: str = ""  # what the profile expected to see, e.g. "TCP, >= 4 data flows"
    # Sender-side retransmits where the sender's count is available: "kernel" = tcp_info of
    # the transfer's sockets (uploads: the local kernel is the sender), "iperf3" = its JSON.
    retransmits_sender: int | None = None
    retransmits_sender_source: str = ""
    rtt_seconds: float | None = None  # mean RTT where the tool reports it (iperf3)
    # What the tool itself reported, where it reports anything (iperf3's JSON): bytes and
    # seconds (its receiver's), bytes_sent, retransmits (its sender's), mean_rtt_seconds.
    # Kept beside our own numbers.
    reported: dict[str, float] = field(default_factory=dict)
    payload_histogram: dict[str, list[int]] = field(default_factory=empty_histogram)
    round_id: str = ""
    # A mesh exporter's results only (service/mesh_runner.py): the site that ran the test,
    # and the slot the mesh plan gave it (UTC epoch seconds).  slot_overrun_seconds is how
    # far the transfer's traffic went past the slot's end: 0.0 within it, None outside a
    # mesh (a single-site exporter has no slots to overrun).
    site: str = ""
    slot_start_timestamp: float | None = None
    slot_end_timestamp: float | None = None
    slot_overrun_seconds: float | None = None
    client_address: str = ""  # the two hosts the capture was filtered on
    remote_address: str = ""
    pcap_path: str = ""  # set only when captures are kept
    # The transfer command as run (a password, where one reached it, replaced by ***): for
    # the transfer's page (service/pages.py); [] for records written before it was kept.
    argv: list[str] = field(default_factory=list)
    packets_path: str = ""  # per-packet list (JSON lines) of an imported 2015 .dump
    # TCP state of the transfer's sockets from each end's kernel (measure/tcp/state.py's
    # summary values, base units); tcp_remote stays empty when the remote cannot be
    # asked, and tcp_remote_note says why.
    tcp_local: dict[str, float] = field(default_factory=dict)
    tcp_remote: dict[str, float] = field(default_factory=dict)
    tcp_remote_note: str = ""
    congestion_control: str = ""  # of the sender's busiest data socket, where it was read
    # What the protocol's `congestion:` asked of the sender ("" = nothing): the transfer
    # fails unless every data socket of the sender used it (congestion_control).
    congestion_requested: str = ""
    # The protocol's `tcp_buffer_max:` (bytes): the sender's tcp_wmem and the receiver's
    # tcp_rmem maxima for the transfer's duration; None = the hosts' own.
    tcp_buffer_max_bytes: int | None = None
    # What limited the transfer (LIMITS), and the numbers that say so; "" = not judged.
    limited_by: str = ""
    limited_evidence: str = ""
    limited_side: str = ""  # where the limit is (LIMIT_SIDES): this host, the remote host, the path
    limited_next_step: str = ""  # what to do about it (bigbinf/judge/steps.py)
    # The transfer's programs (measure/programs.py), per "SIDE NAME": seconds seen,
    # cpu_seconds, run_queue_seconds, cpu_share, runnable_share, io_wait_share, samples,
    # and run_queue_seconds_before_data where the listings saw the first data.
    programs: dict[str, dict[str, float]] = field(default_factory=dict)
    # How the remote host was seen while the transfer ran (measure/: the remote's
    # listings through ssh): listings_expected, listings_received, listing_late_max_seconds
    # (how far the latest listing came behind its schedule), programs_seen (remote
    # programs found doing the work, through the data sockets' owners and their process
    # tree), cpu_throttled_share (of the transfer, the remote programs' cgroup was held by
    # its CPU quota: cgroup v1 cpu.stat throttled_time, v2 throttled_usec).  {} = not asked.
    # Also (measure/programs.py remote_view): listing_seconds_median (how long the answered
    # listings took: a healthy remote's, beside the late one) and cpu_quota_cores (the
    # smallest CPU quota over the remote programs' cgroups).  The throttling keys only where
    # the remote's cgroups could be read; programs' own values carry the same two per program.
    remote_view: dict[str, float] = field(default_factory=dict)
    # This host's waits for a CPU while the transfer ran, as shares of the transfer's
    # duration, less what their cgroup's CPU quota explains (measure/programs.py
    # host_wait_seconds): transfer_programs (its programs' run-queue time), capture (tcpdump's),
    # delay_line (the lab's userspace delay line, where there is one), and load1 (the
    # load average at the end).  {} = not measured.
    host_busy: dict[str, float] = field(default_factory=dict)
    # Of the capture's largest TCP flow (measure/wire/oneway.py): which way the data went
    # (data_up), data_bytes, the pure ACKs the other way (ack_packets) and that way's frame
    # bytes (ack_wire_bytes); from the TCP timestamps, each way's queue (data_queue_seconds,
    # ack_queue_seconds: the median one-way delay over the flow's second half above its
    # least; _max_seconds the most), the remote's clock rate and the samples.  {} = not read.
    one_way: dict[str, float] = field(default_factory=dict)
    # Why this ok run proves no bytes moved ("" if it does, or not judged: records from
    # before the field, imports): measure/transfer.py's unproven().  Its throughput is no
    # measurement then: it counts in no baseline (runs.counts_in_baseline).
    unproven: str = ""
    # "exporter", "import" for results brought in by `import`, "sweep" (service/sweeps.py),
    # "passive" for this host's own transfers judged by the passive watcher (bigbinf/passive/)
    source: str = "exporter"
    # A tuning sweep's runs only (source "sweep"): the sweep's name, the id of its run
    # (one per `sweep` command or scheduled start), the setting's values by dimension
    # (options, congestion, tcp_buffer_max) and its canonical label, and the repetition.
    sweep_name: str = ""
    sweep: str = ""
    sweep_setting: dict[str, Any] = field(default_factory=dict)
    sweep_label: str = ""
    sweep_repetition: int = 0
    # Imported 2015 dumps only: the protocol as the dump named it ("ftp", mapped to "sftp"),
    # and what the import corrected or assumed (a wrong `time`, a start time from the name).
    imported_protocol: str = ""
    import_note: str = ""
    # Passive results only (source "passive", bigbinf/passive/): the command name (comm)
    # of the process that held the connections (evidence, never a label), and what the
    # watcher could not see of the transfer (e.g. it was open when the watcher started).
    program: str = ""
    passive_note: str = ""
    schema: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome {self.outcome!r} is not one of {OUTCOMES}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction {self.direction!r} is not one of {DIRECTIONS}")

    @property
    def key(self) -> SeriesKey:
        return SeriesKey(self.protocol, self.remote, self.dataset, self.direction)

    @property
    def wire_bytes_total(self) -> int:
        return self.wire_bytes_down + self.wire_bytes_up

    @property
    def throughput_bytes_per_second(self) -> float:
        """File bytes over the command's wall-clock duration.

        Not the study's 'speed': that was bytes down (payload, overhead included) over the
        packet span; report.study_speed computes that one for comparison with old tables."""
        if self.outcome != "ok" or self.duration_seconds <= 0:
            return 0.0
        return self.file_bytes / self.duration_seconds

    @property
    def byte_ratio(self) -> float:
        """Wire bytes (down + up) per file byte; 1.05 means 5% overhead."""
        if self.file_bytes <= 0:
            return 0.0
        return self.wire_bytes_total / self.file_bytes

    def derived(self) -> dict[str, Any]:
        return {"throughput_bytes_per_second": self.throughput_bytes_per_second, "byte_ratio": self.byte_ratio}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Result:
        return _from_json(cls, record)

    @property
    def sender_tcp(self) -> dict[str, float]:
        """The sending end's TCP summary: the remote's for a download, ours for an upload."""
        return self.tcp_remote if self.direction == "download" else self.tcp_local


@dataclass(frozen=True)
class PathBaseline(_Journaled):
    """The path to one remote, probed once per round outside the transfers' captures:
    RTT and loss of a probe train, the path MTU, the bottleneck estimate, and both ends'
    TCP buffer limits.  Journaled like a Result, in its own file (journal.baseline_path)."""

    remote: str
    start_timestamp: float  # UTC epoch seconds when the probe started
    address: str = ""  # the IP probed
    method: str = "icmp"  # icmp | tcp
    probes_sent: int = 0
    probes_answered: int = 0
    rtt_min_seconds: float | None = None
    rtt_avg_seconds: float | None = None
    rtt_max_seconds: float | None = None
    rtt_mdev_seconds: float | None = None
    mtu_bytes: int | None = None
    bandwidth_bytes_per_second: float | None = None  # the bottleneck estimate
    bandwidth_source: str = ""  # configured | lab | iperf3
    # The return path's capacity (the ACKs' way), configured (remotes.NAME.return_bandwidth); None: unknown.
    return_bandwidth_bytes_per_second: float | None = None
    # Per side (local, remote): tcp_rmem, tcp_wmem (autotuning maxima), rmem_max,
    # wmem_max, and the first two's min and default (tcp_rmem_min, tcp_rmem_default...).
    buffers: dict[str, dict[str, float]] = field(default_factory=dict)
    congestion_control: dict[str, str] = field(default_factory=dict)  # per side: the default algorithm
    error: str = ""  # why the probe measured nothing (or no MTU)
    remote_note: str = ""  # why the remote's buffers are absent
    schema: int = SCHEMA_VERSION

    @property
    def loss_ratio(self) -> float:
        return 1.0 if self.probes_sent == 0 else 1.0 - self.probes_answered / self.probes_sent

    @property
    def bdp_bytes(self) -> float | None:
        """Bottleneck estimate times the minimum RTT: what a window must hold to fill the path."""
        if self.bandwidth_bytes_per_second is None or self.rtt_min_seconds is None:
            return None
        return self.bandwidth_bytes_per_second * self.rtt_min_seconds

    def derived(self) -> dict[str, Any]:
        return {"loss_ratio": self.loss_ratio, "bdp_bytes": self.bdp_bytes}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> PathBaseline:
        return _from_json(cls, record)


_RecordT = TypeVar("_RecordT", Result, PathBaseline)


_SHAPES: dict[type[Any], tuple[frozenset[str], tuple[str, ...]]] = {}


def _shape(cls: type[Any]) -> tuple[frozenset[str], tuple[str, ...]]:
    """A record class's field names and its required ones (in field order), worked out once:
    a checkpoint's rebuild reads a million lines."""
    if cls not in _SHAPES:
        fields = dataclasses.fields(cls)
        required = tuple(
            f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        )
        _SHAPES[cls] = (frozenset(f.name for f in fields), required)
    return _SHAPES[cls]


def _from_json(cls: type[_RecordT], record: dict[str, Any]) -> _RecordT:
    names, required = _shape(cls)
    # A missing field says which, instead of a TypeError about __init__'s arguments.
    missing = [name for name in required if name not in record]
    if missing:
        raise ValueError(f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    loaded = cls(**{k: v for k, v in record.items() if k in names})
    # Checked where records come from outside (journals, imports), not on every
    # construction: a measurement is never thrown away for a type check.
    _check_field_types(loaded)
    return loaded


# Type checks of Result fields, keyed by their annotation (a string: annotations are
# postponed).  A journal line with a wrong-typed field (a date string as start_timestamp,
# "12" as a byte count) must fail when it is read, where Journal.read reports the line
# and skips it, not later as a TypeError deep in report or backfill.  Fields whose
# annotation is not listed here are not checked.


def _is_number(value: Any) -> bool:
    # bool is an int subclass but not a measurement; NaN/inf are no value to average.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ints(values: list[Any]) -> bool:
    # What JSON gives (exactly int) checked in one pass; anything else the whole way.
    return all(type(n) is int for n in values) or all(_is_int(n) for n in values)


def _is_histogram(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, list) and _ints(v) for k, v in value.items()
    )


def _is_number_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _is_number(v) for k, v in value.items())


def _is_str_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _is_number_maps(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _is_number_map(v) for k, v in value.items())


_TYPE_CHECKS: dict[str, tuple[str, Any]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "int": ("a whole number", _is_int),
    "float": ("a finite number", _is_number),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "dict[str, list[int]]": ("an object of lists of whole numbers", _is_histogram),
    "dict[str, float]": ("an object of finite numbers", _is_number_map),
    "dict[str, str]": ("an object of strings", _is_str_map),
    "list[str]": ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "dict[str, dict[str, float]]": ("an object of objects of finite numbers", _is_number_maps),
}


_CHECKS: dict[type[Any], tuple[tuple[str, bool, str, Any], ...]] = {}


def _field_checks(cls: type[Any]) -> tuple[tuple[str, bool, str, Any], ...]:
    """(field, optional, expected, check) of every checked field, worked out once per class."""
    if cls not in _CHECKS:
        checks = []
        for f in dataclasses.fields(cls):
            annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            check = _TYPE_CHECKS.get(annotation.removesuffix(" | None"))
            if check is not None:
                checks.append((f.name, annotation.endswith(" | None"), *check))
        _CHECKS[cls] = tuple(checks)
    return _CHECKS[cls]


def _check_field_types(result: Result | PathBaseline) -> None:
    """ValueError naming the field, the expected type and the value, for the first wrong one."""
    for name, optional, expected, valid in _field_checks(type(result)):
        value = getattr(result, name)
        if optional and value is None:
            continue
        if not valid(value):
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            raise ValueError(
                f"field {name}: expected {expected}{' or null' if optional else ''}, got {type(value).__name__} {shown}"
            )
