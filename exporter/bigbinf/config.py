"""Configuration: schedules/*.yaml, validated at load.

Order of validation (as blackbox_exporter does): defaults are filled in, unknown keys are
rejected, and every error is gathered and reported as `FILE: dotted.path[i]: message`,
so a user fixes a file in one pass.  Cross-references (a protocol's module, a remote's
lab, the schedule's transfer list) are checked in the same pass.
"""

from __future__ import annotations

import contextlib
import os
import re
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from bigbinf.protocols import REGISTRY, module_for
from bigbinf.protocols.base import PLACEHOLDERS, TemplateError, check_template_element, placeholders_in
from bigbinf.protocols.hosts import is_ipv6
from bigbinf.result import DIRECTIONS

# ---------------------------------------------------------------- value types

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
_RATE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$")


def parse_size(value: Any) -> int:
    """Bytes from 1048576, "1MiB", "1.5GiB" or "5MB"."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 64MiB")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("size must not be negative")
        return value
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"{value!r} is not a size; write bytes or a number with B, KiB, MiB, GiB, TiB, kB, MB, GB, TB")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def parse_duration(value: Any) -> float:
    """Seconds from 30, "30s", "500ms", "10m", "2h"."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("duration must not be negative")
        return float(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*", str(value))
    if not match:
        raise ValueError(f"{value!r} is not a duration; write e.g. 500ms, 30s, 10m, 2h")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2)]


def _check_positive(value: float) -> float:
    # A zero timeout would kill every transfer at once; a zero interval would spin.
    if value <= 0:
        raise ValueError("must be more than 0, e.g. 30s or 30m")
    return value


def _check_name(value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{value!r} is not a valid name: use lower-case letters, digits, '_', '.', '-' (max 63)")
    return value


def _check_file_name(value: str) -> str:
    # One path component: lab up writes it as root under data_dir, and it ends up inside
    # sftp batch files and lftp/bbftp command scripts.
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}", value):
        raise ValueError(
            f"{value!r} is not a plain file name: use letters, digits, '_', '.', '+', '-' "
            "(no '/', no leading '.' or '-')"
        )
    return value


# What every command a value can reach reads as itself: an argv element, a remote shell
# (scp and rsync name remote paths through it, uploads are removed through it), a tool's
# own command language (lftp and bbftp scripts, sftp batch files, the command strings
# rsync -e and bbftp -L split on white space) and a URL.  No white space, quote, glob,
# `$`, `;`, `|`, `&`, `!`, `#`, `%` or control character; never a leading '-' (an option).
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9_.+/-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_plain_path(value: Path) -> Path:
    if not _PLAIN_PATH.fullmatch(str(value)):
        raise ValueError(
            f"{str(value)!r} is not a plain absolute path: start with '/' and use letters, digits, '_', '.', '+', "
            "'-', '/' (it reaches commands, remote shells and URLs; a symlink with such a name will do)"
        )
    return value


def _check_no_control(value: Any) -> Any:
    # A path or name that only this process reads, but that logs and messages quote.
    if _CONTROL.search(str(value)):
        raise ValueError(f"{str(value)!r} contains a control character (a newline, a tab, ...); remove it")
    return value


def _check_user(value: str) -> str:
    # POSIX's portable user names (a hyphen never first: ssh, scp, bbftp and lftp would
    # read the name as an option), at most 32 characters as on Linux.
    if not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,31}", value):
        raise ValueError(
            f"{value!r} is not a portable user name: 1-32 letters, digits, '.', '_', '-', not starting with '-' "
            "(it is placed in commands as user@host)"
        )
    return value


def _check_env_name(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
        raise ValueError(
            f"{value!r} is not an environment variable name: letters, digits, '_', not starting with a digit"
        )
    return value


def _check_netns(value: str) -> str:
    # ip netns exec NAME: a file name under /run/netns, and never an option of ip.
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,62}", value):
        raise ValueError(
            f"{value!r} is not a network namespace name: 1-63 letters, digits, '_', '.', '-', "
            "starting with a letter, digit or '_'"
        )
    return value


def _check_interface(value: str) -> str:
    # The capture's -i: a Linux interface name (at most 15 bytes, no '/'), or "any".
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}", value):
        raise ValueError(
            f"{value!r} is not an interface name: 1-15 letters, digits, '_', '.', '-', starting with a letter, "
            "digit or '_' (or any)"
        )
    return value


def _check_binary(value: str) -> str:
    # argv[0] of the module's command: a program looked up in PATH, or an absolute path.
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}", value) and not _PLAIN_PATH.fullmatch(value):
        raise ValueError(
            f"{value!r} is neither a program name (letters, digits, '_', '.', '+', '-') nor a plain absolute path"
        )
    return value


def _check_ip(value: str) -> str:
    import ipaddress

    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None
    return value


def _check_host(value: str) -> str:
    import ipaddress

    try:
        ipaddress.ip_address(value)
        return value
    except ValueError:
        pass
    # A fully qualified name may end in a dot (dtn.example.org.: no search domain tried).
    if not re.fullmatch(
        r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?",
        value.removesuffix("."),
    ):
        raise ValueError(f"{value!r} is neither an IP address nor a host name")
    return value


def _check_rate(value: str) -> str:
    if not _RATE.match(value):
        raise ValueError(f"{value!r} is not a tc rate; write e.g. 200mbit, 1gbit")
    return value


def _check_nonzero_rate(value: str) -> str:
    if rate_bytes_per_second(value) <= 0:
        raise ValueError(f"{value!r}: a path's bandwidth must be more than 0; leave it out if unknown")
    return value


_RATE_UNITS = {"bit": 1 / 8, "bps": 1}  # tc's units: "bit" is bits, "bps" is bytes per second
_RATE_PREFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}


def rate_bytes_per_second(value: str) -> float:
    """Bytes per second of a tc rate ("200mbit" -> 25e6, "1gbps" -> 1e9), as tc reads it."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)", value)
    if not match:
        raise ValueError(f"{value!r} is not a tc rate; write e.g. 200mbit, 1gbit")
    return float(match.group(1)) * _RATE_PREFIXES[match.group(2)] * _RATE_UNITS[match.group(3)]


def _check_lab_name(value: str, max_length: int = 11) -> str:
    # Interface names are limited to 15 bytes and get a 4-byte suffix (a lab mesh's: up to 6).
    if not re.fullmatch(rf"[a-z][a-z0-9]{{0,{max_length - 1}}}", value):
        raise ValueError(
            f"{value!r} is not a valid lab name: 1-{max_length} lower-case letters/digits, starting with a letter"
        )
    return value


def _check_template(value: str) -> str:
    try:
        return check_template_element(value)
    except TemplateError as exc:
        raise ValueError(str(exc)) from None


def _check_congestion(value: str) -> str:
    # The kernel's names (TCP_CA_NAME_MAX 16 with its NUL); also a plain word for a remote shell.
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,14}", value):
        raise ValueError(f"{value!r} is not a congestion control name; write e.g. cubic, bbr, reno")
    return value


def congestion_unavailable(name: str, proc: Path = Path("/proc/sys/net/ipv4")) -> str:
    """Why this host's kernel cannot run congestion control `name` ("" if it can): not
    loaded (with the module that would load it), or not built at all."""
    try:
        available = (proc / "tcp_available_congestion_control").read_text().split()
    except OSError:
        return ""  # no /proc here (another OS): the transfer says so when it applies it
    if name in available:
        return ""
    release = os.uname().release
    modules = Path("/lib/modules") / release / "kernel" / "net" / "ipv4"
    if any(modules.glob(f"tcp_{name}.ko*")):
        return (
            f"{name!r} is not loaded in this kernel (available: {', '.join(available)}); load it with "
            f"`modprobe tcp_{name}` (and add tcp_{name} to /etc/modules-load.d/ to keep it after a reboot)"
        )
    return (
        f"{name!r} is not available in this kernel {release} (available: {', '.join(available)}; no module "
        f"tcp_{name} under {modules}); pick one of those, or install a kernel that has it"
    )


def _check_cron(value: str) -> str:
    from bigbinf.cron import crontab_trigger

    try:
        crontab_trigger(value, "UTC")
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a cron expression (minute hour day month weekday): {exc}") from None
    return value


def _check_timezone(value: str) -> str:
    import zoneinfo

    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not a time zone name; write e.g. UTC or Africa/Johannesburg") from None
    return value


Size = Annotated[int, BeforeValidator(parse_size)]
# A path that reaches a command (docs/configuration.md, "What values may hold").
PlainPath = Annotated[Path, AfterValidator(_check_plain_path)]
# A path only bigbinf itself opens.
LocalPath = Annotated[Path, AfterValidator(_check_no_control)]
UserName = Annotated[str, AfterValidator(_check_user)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]
NetnsName = Annotated[str, AfterValidator(_check_netns)]
InterfaceName = Annotated[str, AfterValidator(_check_interface)]
Duration = Annotated[float, BeforeValidator(parse_duration)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), AfterValidator(_check_positive)]
Name = Annotated[str, AfterValidator(_check_name)]
TemplateElement = Annotated[str, AfterValidator(_check_template)]
Direction = Literal["download", "upload"]
# A dataset is one file, or (count > 1) a directory of files, moved recursively.
DatasetKind = Literal["file", "tree"]


def dataset_kind(count: int) -> DatasetKind:
    """Whether a dataset of `count` files is a tree: decided here only."""
    return "tree" if count > 1 else "file"


LabServerName = Literal["sshd", "vsftpd", "rsyncd", "nginx", "xrootd", "gridftp", "gridftp-client", "iperf3", "bbftpd"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- the schema


class LinkConfig(_Strict):
    rate: Annotated[str, AfterValidator(_check_rate)] | None = None
    burst: Size = 64 * 1024  # tbf bucket; enough for 200 Mbit/s at HZ=250
    limit: Size | None = None  # tbf queue bytes; small values force drops
    delay: Duration = 0.0  # one-way, via netem where the kernel has it
    loss: Annotated[float, Field(ge=0, le=100)] = 0.0  # percent, via netem


class LabConfig(_Strict):
    name: Annotated[str, AfterValidator(_check_lab_name)] = "bigbinf"
    state_dir: PlainPath = Path("/var/lib/bigbinf/lab")
    client_address: Annotated[str, AfterValidator(_check_ip)] = "198.18.0.1"
    remote_address: Annotated[str, AfterValidator(_check_ip)] = "198.18.0.2"
    prefix_length: Annotated[int, Field(ge=8, le=30)] = 24
    link: LinkConfig = LinkConfig()
    datasets: list[Name] | None = None  # which datasets the lab creates; default all
    servers: list[LabServerName] | None = None  # which servers the lab runs; default all installed


class ProbeConfig(_Strict):
    """How the path to a remote is probed once per round (measure/path/probe.py)."""

    enabled: bool = True
    method: Literal["icmp", "tcp"] = "icmp"  # tcp: connect time, where ICMP is filtered
    port: Annotated[int, Field(ge=1, le=65535)] | None = None  # tcp probes; default the remote's port
    count: Annotated[int, Field(ge=1, le=100_000)] = 20
    interval: Annotated[float, BeforeValidator(parse_duration), Field(ge=0.001)] = 0.2
    timeout: PositiveDuration = 1.0
    mtu: bool = True  # search the largest DF packet that passes (icmp only)


class RemoteConfig(_Strict):
    lab: bool = False  # take address, user, key, netns, interface from the lab section
    address: Annotated[str, AfterValidator(_check_host)] | None = None
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    user: UserName = "root"
    key: PlainPath | None = None
    ssh_config: PlainPath | None = None
    data_dir: PlainPath | None = None  # where the datasets' files live on the remote
    upload_dir: PlainPath | None = None  # needed for uploads
    serve_root: PlainPath | None = None  # the directory URLs are relative to ({remote_name}); default /
    checksums: LocalPath | None = None  # local sha256sum-format file of the remote's dataset files
    netns: NetnsName | None = None  # client-side network namespace to run transfers in
    interface: InterfaceName = "any"  # capture interface on the client side
    password_env: EnvName | None = None  # name of an environment variable holding a password
    probe: ProbeConfig = ProbeConfig()
    # The path's bottleneck (a tc rate, e.g. 10gbit) for the bandwidth-delay product;
    # default: the lab's shaped rate, else the last ok iperf3 test to this remote.
    bandwidth: Annotated[str, AfterValidator(_check_rate), AfterValidator(_check_nonzero_rate)] | None = None
    # The return path's capacity (the ACKs' way, from the remote towards this host for an
    # upload; a tc rate), where it differs from `bandwidth` (an asymmetric access link):
    # what the ACK clock's bound compares with (judge/bounds.py ack_clock).  Unset: that
    # bound is what the ACK way carried while its queue stood.
    return_bandwidth: Annotated[str, AfterValidator(_check_rate), AfterValidator(_check_nonzero_rate)] | None = None
    # argv that runs a command on the remote (e.g. [ssh, -i, KEY, user@host]): bigbinf
    # appends `ss ...` or `sysctl -n ...` to read the remote's TCP state and buffers.
    stats_command: list[TemplateElement] | None = None
    stats_interval: PositiveDuration = 1.0  # between two listings of the remote's sockets
    # argv that runs a command as root on the remote (e.g. [ssh, -i, KEY, root@{host}]):
    # bigbinf appends `ip route ...` / `sysctl ...` to set a protocol's congestion or
    # tcp_buffer_max there for one transfer and to restore it (measure/tcp/tuning.py).
    tcp_command: list[TemplateElement] | None = None


class DatasetConfig(_Strict):
    file: Annotated[str, AfterValidator(_check_file_name)]  # with count > 1, the directory's name
    size: Size  # bytes per file
    count: Annotated[int, Field(ge=1, le=100_000)] = 1  # > 1: many files (moved recursively)
    create: Literal["random", "zero"] = "random"  # how the lab fills the file

    @property
    def kind(self) -> DatasetKind:
        return dataset_kind(self.count)


class ProtocolConfig(_Strict):
    module: str | None = None  # registry key; default: the protocol's name if registered, else "command"
    binary: Annotated[str, AfterValidator(_check_binary)] | None = (
        None  # the module's executable ({binary}), e.g. a site's HPN-scp build
    )
    options: dict[str, Any] = {}  # module parameters, e.g. gridftp's parallel, concurrency
    command: list[TemplateElement] | None = None  # overrides the module's default (download)
    upload_command: list[TemplateElement] | None = None
    # Removes an upload ({remote_path}) from a remote that is not the lab; [] leaves
    # uploads there.  Default: the module's own, where it has one (docs/protocols.md).
    cleanup_command: list[TemplateElement] | None = None
    directions: list[Direction] = ["download"]
    timeout: PositiveDuration | None = None
    # The sender's TCP congestion control for this protocol's transfers, set outside the
    # tool (a per-route congctl) and read back from the sockets' tcp_info (measure/tcp/tuning.py).
    congestion: Annotated[str, AfterValidator(_check_congestion)] | None = None
    # The sender's tcp_wmem and the receiver's tcp_rmem maximum for each transfer (bytes).
    tcp_buffer_max: Annotated[Size, Field(ge=4096)] | None = None


class TransferSelector(_Strict):
    protocol: Name
    remote: Name
    dataset: Name
    direction: Direction = "download"


class ScheduleConfig(_Strict):
    cron: list[Annotated[str, AfterValidator(_check_cron)]] = ["0 13 * * *", "0 3 * * *"]
    interval: PositiveDuration | None = None  # alternative to cron, for demos and tests
    timezone: Annotated[str, AfterValidator(_check_timezone)] = "UTC"
    jitter: Duration = 0.0  # random delay added to each start
    start_delay: Duration | None = None  # also run a round this long after the exporter starts
    rounds: Annotated[int, Field(ge=1, le=100)] = 1  # repetitions per scheduled run
    transfers: list[TransferSelector] | None = None  # default: every protocol x remote x dataset x direction


class TransferConfig(_Strict):
    timeout: PositiveDuration = 1800.0
    tcp_interval: PositiveDuration = 0.5  # between two listings of the local TCP sockets (ss)
    workdir: PlainPath = Path("/var/tmp/bigbinf")
    keep_files: bool = False


# capture.buffer, the kernel ring the capture reads from: the frames that arrive while its
# reader waits for a CPU wait there, and when it is full the kernel drops them (the
# transfer's wire numbers are then absent: measure/transfer.py).  Measured with both CPUs
# busy (benchmarks/bench_capture.py --part buffer, docs/benchmarks.md): a 256 KiB ring
# dropped at 200 Mbit/s and at 1 Gbit/s in every run, 1 MiB never did.  The floor is four
# times that; above ~1.6 Gbit/s the ring must hold CAPTURE_READER_WAIT_SECONDS of the path's
# frames: a path of R bit/s carries R / 8000 a second (1500-byte frames, and an ACK for
# every second one), each ~200 bytes of ring at snap length 128 (a 32 MiB ring held ~170,000).
CAPTURE_BUFFER_MIN = 4 * 1024 * 1024
CAPTURE_READER_WAIT_SECONDS = 0.1
_RING_BYTES_PER_FRAME = 200


def capture_buffer_needed(rate_bits_per_second: float) -> int:
    """The ring a path of this rate needs for its frames of CAPTURE_READER_WAIT_SECONDS."""
    frames = rate_bits_per_second / 8000 * CAPTURE_READER_WAIT_SECONDS
    return max(CAPTURE_BUFFER_MIN, int(frames * _RING_BYTES_PER_FRAME))


def _check_capture_buffer(value: int) -> int:
    if value < CAPTURE_BUFFER_MIN:
        raise ValueError(
            f"{value} bytes is below {CAPTURE_BUFFER_MIN // (1 << 20)}MiB: a smaller ring drops packets whenever "
            "the capture waits for a CPU (256KiB did at 200 Mbit/s with the CPUs busy), and a capture with drops "
            "has no wire numbers; leave it out (32MiB) or give at least 4MiB"
        )
    return value


class CaptureConfig(_Strict):
    enabled: bool = True
    snaplen: Annotated[int, Field(ge=64, le=128)] = 128  # headers (+ <= ~60 payload bytes)
    # What reads the packets: pcapdump (measure/wire/pcapdump.py: libpcap, buffered, a 10 ms
    # block timeout; the cheapest for the transfer) or tcpdump; measure/wire/capture.py says why.
    tool: Literal["pcapdump", "tcpdump"] = "pcapdump"
    # The kernel ring (-B): headroom, measure/wire/capture.py says why.  At least
    # CAPTURE_BUFFER_MIN (and what the configured rates need: capture_buffer_needed); at
    # most 1 GiB: libpcap takes it as a C int (2 GiB and more would wrap to nonsense).
    buffer: Annotated[Size, Field(le=1 << 30), AfterValidator(_check_capture_buffer)] = 32 * 1024 * 1024
    linger: Duration = 0.3  # at most this long after the command for the last ACK/FIN (TCP: until closed)
    keep: bool = False  # keep the pcap (under the journal's directory)
    start_timeout: PositiveDuration = 10.0
    # Where captures are written while a transfer runs: not next to the received file, so
    # that the transfer filling its disk does not silently cut the capture short, and so
    # that it can be put on another disk.  Default: `<transfer.workdir>-captures`.
    directory: PlainPath | None = None


def capture_directory(config: Config) -> Path:
    """capture.directory, or its default beside transfer.workdir."""
    workdir = config.transfer.workdir
    return config.capture.directory or workdir.with_name(workdir.name + "-captures")


def kept_pcap_directory(config: Config) -> Path:
    """Where captures are kept (capture.keep): beside the journal, and nowhere else: the
    exporter's page serves a kept pcap only from inside this directory."""
    return config.journal.path.parent / "pcaps"


def _retention(value: Any) -> float | None:
    if value is None:
        return None
    seconds = parse_duration(value)
    if seconds < 86400:
        raise ValueError("must be at least 1d (a day segment is the least it removes), e.g. 400d; null keeps all")
    return seconds


class JournalConfig(_Strict):
    # The live segment: results are appended here, and the closed day segments lie beside
    # it (journal.FIRST-LAST.ID.jsonl.gz, bigbinf/journal/store.py), as its checkpoint does.
    path: LocalPath = Path("/var/lib/bigbinf/journal.jsonl")
    # Closed segments whose newest result is this much older than the journal's newest are
    # removed (whole; never imported 2015 dumps); null keeps everything.  400 days: enough
    # for a year-on-year comparison (docs/configuration.md, docs/deployment.md).
    retention: Annotated[float | None, BeforeValidator(_retention)] = 400 * 86400.0
    # Every sealed part read through this often (service/scrub.py: between rounds, slowly),
    # so damage a disk does to a part in place is found within a day: a start reads only
    # what its checkpoint does not cover.  0 turns it off.
    scrub_interval: Annotated[float, BeforeValidator(parse_duration), Field(ge=0, le=400 * 86400)] = 86400.0


class MetricsConfig(_Strict):
    # false drops bigbinf_transfer_payload_size_bytes, a third of each series' samples
    # (docs/metrics.md): for meshes where the exposition's size matters.
    payload_histograms: bool = True


class PagesConfig(_Strict):
    """The exporter's own pages (service/pages.py, docs/pages.md)."""

    # The last N transfers the pages list (each with its own page): held in memory, so
    # bounded; restored from the journal's end at start.
    recent_transfers: Annotated[int, Field(ge=1, le=10_000)] = 100


class RegressionConfig(_Strict):
    """The live regression test of each series (bigbinf/history/regression.py, docs/configuration.md)."""

    enabled: bool = True
    recent_runs: Annotated[int, Field(ge=2, le=20)] = 3  # the recent window: the last N ok runs
    baseline_weeks: Annotated[float, Field(gt=0, le=13)] = 4.0  # the baseline: the N weeks before it
    # The baseline runs a recent run is compared with: within this of its time of day
    # (local time in schedule.timezone), either way.
    time_of_day_window: Annotated[float, BeforeValidator(parse_duration), Field(ge=60, le=12 * 3600)] = 7200.0
    min_baseline_runs: Annotated[int, Field(ge=3, le=100_000)] = 8  # per recent run, in its window
    fdr: Annotated[float, Field(gt=0, lt=1)] = 0.002  # Benjamini-Hochberg q at or below this: significant
    material_drop: Annotated[float, Field(ge=0, lt=1)] = 0.10  # and the ratio at most 1 - this: regressed
    confidence: Annotated[float, Field(ge=0.5, lt=1)] = 0.95  # of the ratio's interval


class MovesConfig(_Strict):
    """Moves whose duration the exporter predicts for every remote (bigbinf/history/moveplan.py,
    bigbinf_move_predicted_seconds): the sizes people plan to move, e.g. [1TiB, 40TiB]."""

    sizes: list[Annotated[Size, Field(gt=0)]] = []
    files: Annotated[int, Field(ge=1, le=1_000_000_000)] = 1  # how many files each move is
    direction: Direction = "download"
    history: Annotated[float, BeforeValidator(parse_duration), Field(ge=3600)] = 28 * 86400.0  # runs used


def _check_network(value: str) -> str:
    # An address or a network (198.18.0.0/15, 2001:db8::/32): what ss's `dst` takes.
    import ipaddress

    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address or network (e.g. 198.51.100.7 or 198.51.100.0/24)") from None
    return value


def _check_ports(value: Any) -> tuple[int, int]:
    # A port (22) or a range ("50000-51000"): a service's ports, as ss's sport/dport compare them.
    # A pair [50000, 51000] is the same range as a loaded config dumps it (model_dump).
    if isinstance(value, list | tuple) and len(value) == 2 and all(type(v) is int for v in value):
        value = f"{value[0]}-{value[1]}"
    text = str(value).strip()
    low, dash, high = text.partition("-")
    try:
        first, last = int(low), int(high) if dash else int(low)
    except ValueError:
        raise ValueError(f"{value!r} is not a port or a range of ports (e.g. 22 or 50000-51000)") from None
    if not 1 <= first <= last <= 65535:
        raise ValueError(f"{value!r}: ports are 1-65535, the range's first no higher than its last")
    return first, last


PortRange = Annotated[tuple[int, int], BeforeValidator(_check_ports)]

# The services a passive watcher looks at unless told otherwise (passive.services): the
# ports of the protocols bigbinf measures (GridFTP's control port and the data port range
# its servers are commonly given; the lab's is 50000-50100).
PASSIVE_SERVICES: dict[str, list[str]] = {
    "ssh": ["22"],
    "http": ["80", "443", "8080", "8443"],
    "gridftp": ["2811", "50000-51000"],
    "rsync": ["873"],
    "xrootd": ["1094"],
    "ftp": ["21"],
}


class PassiveRemoteConfig(_Strict):
    """Hosts whose connections with this one the passive watcher judges: by address or
    network.  Named as a configured remote, its round's path baseline (BDP, buffers) is
    what the judge reads."""

    networks: Annotated[list[Annotated[str, AfterValidator(_check_network)]], Field(min_length=1)]


class PassiveConfig(_Strict):
    """The passive watcher (bigbinf/passive/, docs/passive.md): this host's own TCP
    connections to `remotes` on `services`' ports, read from the kernel with ss, judged
    as a scheduled transfer is.  Off by default."""

    enabled: bool = False
    # The network namespace whose connections are watched (the lab's client namespace in
    # the demo); default this host's own.
    netns: NetnsName | None = None
    remotes: dict[Name, PassiveRemoteConfig] = {}
    services: dict[Name, Annotated[list[PortRange], Field(min_length=1)]] = Field(
        default_factory=lambda: {k: [_check_ports(v) for v in vs] for k, vs in PASSIVE_SERVICES.items()}
    )
    min_bytes: Size = 10 * 2**20  # a flow (or a group of streams) that moved less is not judged
    interval: Annotated[float, BeforeValidator(parse_duration), Field(ge=0.1, le=60)] = 1.0  # between listings
    # The most connections followed at once: a host with more is sampled (the first this
    # many the kernel lists; those left are counted, bigbinf_passive_flows_skipped_total).
    max_flows: Annotated[int, Field(ge=1, le=1_000_000)] = 4096
    # Whether a result keeps its program's command line (argv) and user; the command name
    # (comm) is kept as evidence either way, never as a label.
    record_commands: bool = False
    recent: Annotated[int, Field(ge=1, le=10_000)] = 50  # the last passive results the pages list


# A sweep's runs (settings x datasets x repetitions) above this need max_runs raised on purpose.
SWEEP_MAX_RUNS = 200


class SweepConfig(_Strict):
    """A tuning sweep (service/sweeps.py): a grid of settings of one protocol towards one
    remote, each run on every dataset, `repetitions` times, interleaved."""

    protocol: Name
    remote: Name
    datasets: Annotated[list[Name], Field(min_length=1)]
    direction: Direction = "download"
    # Module option -> the values to try, e.g. {parallel: [1, 2, 4, 8], concurrency: [1, 4]}.
    options: dict[str, Annotated[list[Any], Field(min_length=1)]] = {}
    # The sender's congestion control and the buffer cap to try (protocol options of
    # measure/tcp/tuning.py); empty: the protocol's own.
    congestion: list[Annotated[str, AfterValidator(_check_congestion)]] = []
    tcp_buffer_max: list[Annotated[Size, Field(ge=4096)]] = []
    repetitions: Annotated[int, Field(ge=2, le=100)] = 3
    # The setting the best one is compared with, per dimension; default: the protocol's own
    # value where the grid has it, else the dimension's first value.
    baseline: dict[str, Any] = {}
    max_runs: Annotated[int, Field(ge=1)] = SWEEP_MAX_RUNS
    # When to run it (cron, in schedule.timezone, like the rounds'); empty: on demand only.
    schedule: list[Annotated[str, AfterValidator(_check_cron)]] = []


class Config(_Strict):
    remotes: dict[Name, RemoteConfig]
    datasets: dict[Name, DatasetConfig]
    protocols: dict[Name, ProtocolConfig]
    schedule: ScheduleConfig = ScheduleConfig()
    transfer: TransferConfig = TransferConfig()
    capture: CaptureConfig = CaptureConfig()
    journal: JournalConfig = JournalConfig()
    metrics: MetricsConfig = MetricsConfig()
    pages: PagesConfig = PagesConfig()
    lab: LabConfig | None = None
    sweeps: dict[Name, SweepConfig] = {}
    regression: RegressionConfig = RegressionConfig()
    moves: MovesConfig = MovesConfig()
    passive: PassiveConfig = PassiveConfig()


# ---------------------------------------------------------------- errors


@dataclass(frozen=True)
class ConfigIssue:
    path: str  # dotted path with [i] indices; "" for the whole file
    message: str


class ConfigError(Exception):
    def __init__(self, source: str, issues: Sequence[ConfigIssue]) -> None:
        self.source = source
        self.issues = list(issues)
        super().__init__(self.render())

    def lines(self) -> list[str]:
        return [
            f"{self.source}: {i.path}: {i.message}" if i.path else f"{self.source}: {i.message}" for i in self.issues
        ]

    def render(self) -> str:
        return "\n".join(self.lines())


def _format_loc(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _model_at(loc: Sequence[Any], root: type[BaseModel]) -> type[BaseModel] | None:
    """The model class that owns the mapping at `loc` (for listing its allowed keys)."""
    annotation: Any = root
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        elif get_origin(annotation) in (dict, list):
            annotation = get_args(annotation)[-1]
        else:
            return None
    annotation = _unwrap(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    # Optional[X] / Annotated[X, ...] -> X
    while True:
        args = get_args(annotation)
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = args[0]
        elif args and type(None) in args and origin is not dict:
            annotation = next(a for a in args if a is not type(None))
        else:
            return annotation


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxlist, _SHOWN.maxdict, _SHOWN.maxstring, _SHOWN.maxother = 2, 4, 4, 60, 60


def shown(value: Any) -> str:
    """A config value as an error quotes it, bounded: a YAML alias bomb (a list of lists of
    lists ..., 9**9 elements by reference) must not be printed whole."""
    return _SHOWN.repr(value)


def pydantic_issues(exc: ValidationError, root: type[BaseModel]) -> list[ConfigIssue]:
    """A model's validation errors as ConfigIssues (dotted paths, allowed keys named)."""
    issues = []
    for err in exc.errors():
        loc = list(err["loc"])
        # Pydantic adds the validator name ("function-after[...]") for Annotated types.
        loc = [p for p in loc if not (isinstance(p, str) and ("[" in p and p.endswith("]")))]
        kind = err["type"]
        if kind == "extra_forbidden":
            model = _model_at(loc[:-1], root)
            known = ", ".join(model.model_fields) if model else ""
            message = f"unknown key {loc[-1]!r}" + (f"; allowed keys: {known}" if known else "")
        elif kind == "missing":
            message = "required key is missing"
        elif kind == "literal_error":
            # Only the first letter lowered: the allowed values keep their case ('TLS12').
            message = f"{shown(err['input'])} is not allowed; {err['msg'][0].lower()}{err['msg'][1:]}"
        elif kind.startswith("value_error"):
            message = str(err["ctx"]["error"]) if "ctx" in err else err["msg"]
        elif kind == "list_type" and isinstance(err["input"], str) and str(loc[-1]).endswith("command"):
            message = (
                f"{err['input']!r} is a shell string; write an argv list, one element per argument, e.g. "
                '[scp, -B, "{user}@{host}:{remote_path}", "{local_path}"] (bigbinf never runs a shell)'
            )
        else:
            message = err["msg"][0].lower() + err["msg"][1:] + f" (got {shown(err['input'])})"
        issues.append(ConfigIssue(_format_loc(loc), message))
    return issues


def mapping(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    """raw[key] if it is a mapping, else {}: a wrong type there is the schema check's to report."""
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _cross_reference_issues(raw: Mapping[str, Any]) -> list[ConfigIssue]:
    """Checks that span sections; run on the raw mapping so they are reported together
    with the schema errors."""
    issues: list[ConfigIssue] = []
    remotes = mapping(raw, "remotes")
    datasets = mapping(raw, "datasets")
    protocols = mapping(raw, "protocols")
    for section, example in (
        ("remotes", "site: {address: dtn.example.org, data_dir: /data}"),
        ("datasets", "f1g: {file: f1g.bin, size: 1GiB}"),
        ("protocols", "scp: {}"),
    ):
        if raw.get(section) == {}:  # a round would run nothing, silently
            issues.append(ConfigIssue(section, f"empty: define at least one, e.g. {example}"))
    for name, remote in remotes.items():
        if not isinstance(remote, dict):
            continue
        issues += _stats_command_issues(name, remote)
        issues += _stats_command_issues(name, remote, "tcp_command")
        if remote.get("lab") and not raw.get("lab"):
            issues.append(ConfigIssue(f"remotes.{name}.lab", "lab: true needs a top-level lab: section"))
        if not remote.get("lab"):
            for key in ("address", "data_dir"):
                if not remote.get(key):
                    issues.append(ConfigIssue(f"remotes.{name}.{key}", "required unless lab: true"))
    uploads = []
    for name, proto in protocols.items():
        if not isinstance(proto, dict):
            continue
        module = module_for(name, proto.get("module"))
        if module not in REGISTRY:
            issues.append(
                ConfigIssue(
                    f"protocols.{name}.module", f"unknown module {module!r}; known modules: {', '.join(REGISTRY)}"
                )
            )
            continue
        profile = REGISTRY[module]
        options = mapping(proto, "options")
        bad_options = profile.check_options(options)
        issues += [ConfigIssue(f"protocols.{name}.options.{opt}", problem) for opt, problem in bad_options]
        defaults = profile.commands(profile.option_values(options)) if not bad_options else {}
        directions = proto.get("directions") or ["download"]
        for direction in directions if isinstance(directions, list) else []:
            key = "command" if direction == "download" else "upload_command"
            if (
                direction in DIRECTIONS
                and not proto.get(key)
                and not bad_options
                and (direction, "file") not in defaults
                and (direction, "tree") not in defaults
            ):
                issues.append(
                    ConfigIssue(
                        f"protocols.{name}.{key}", f"module {module!r} has no default {direction} command: give {key}"
                    )
                )
            if direction == "upload":
                uploads.append(name)
                if "cleanup_command" not in proto and profile.produces_file:
                    issues += _cleanup_issues(name, profile, remotes, datasets)
    issues += _key_issues(raw, remotes, protocols)
    issues += _tuning_issues(raw, remotes, protocols)
    issues += _ipv4_only_issues(raw, remotes, protocols)
    issues += _capture_buffer_issues(raw, remotes)
    issues += _sweep_issues(raw, remotes, datasets, protocols)
    schedule = mapping(raw, "schedule")
    for name in _upload_remotes(raw, remotes) if uploads else ():
        remote = remotes[name]
        if isinstance(remote, dict) and not remote.get("lab") and not remote.get("upload_dir"):
            issues.append(
                ConfigIssue(
                    f"remotes.{name}.upload_dir", f"required for uploads (protocols {', '.join(uploads)} upload)"
                )
            )
    for i, sel in enumerate(schedule.get("transfers") or []):
        if not isinstance(sel, dict):
            continue
        dangling = False
        for kind, known in (("protocol", protocols), ("remote", remotes), ("dataset", datasets)):
            if kind in sel and sel[kind] not in known:
                dangling = True
                issues.append(
                    ConfigIssue(
                        f"schedule.transfers[{i}].{kind}",
                        f"no {kind} named {sel[kind]!r}; defined: {', '.join(known) or 'none'}",
                    )
                )
        protocol: Any = sel.get("protocol")
        if not dangling and isinstance(protocols.get(protocol), dict):
            issues += _selector_issues(i, sel, protocols[protocol], datasets.get(sel.get("dataset", "")))
    lab = mapping(raw, "lab")
    for i, name in enumerate(lab.get("datasets") or []):
        if name not in datasets:
            issues.append(ConfigIssue(f"lab.datasets[{i}]", f"no dataset named {name!r}"))
    if schedule.get("interval") is not None and "cron" in schedule:
        issues.append(ConfigIssue("schedule", "give either cron or interval, not both"))
    passive = mapping(raw, "passive")
    if passive.get("enabled") is True and not mapping(passive, "remotes"):
        issues.append(
            ConfigIssue(
                "passive.remotes",
                "the watcher needs at least one remote to watch, e.g. archive: {networks: [198.51.100.0/24]}",
            )
        )
    return issues


# What a stats command may say: it runs once per remote, outside any one transfer.
STATS_PLACEHOLDERS = ("host", "port", "user", "key", "ssh_config")


def _stats_command_issues(name: str, remote: Mapping[str, Any], key: str = "stats_command") -> list[ConfigIssue]:
    """A remote's stats_command (or tcp_command, the same shape): an argv with the remote's
    own placeholders only."""
    command = remote.get(key)
    if not isinstance(command, list):
        return []
    issues = []
    if not command:
        issues.append(ConfigIssue(f"remotes.{name}.{key}", "empty: remove it, or give e.g. [ssh, -i, KEY, user@host]"))
    if remote.get("lab"):
        issues.append(
            ConfigIssue(
                f"remotes.{name}.{key}",
                f"a lab remote is read and set in its namespace already: remove {key}",
            )
        )
    closing = _ssh_stdin_closed([str(e) for e in command]) if key == "stats_command" else ""
    if closing:
        issues.append(
            ConfigIssue(
                f"remotes.{name}.{key}",
                f"{closing} closes ssh's standard input, which is the lifeline that ends the remote's `ss` "
                "watcher with the transfer and the exporter (measure/tcp/state.py): remove it",
            )
        )
    for i, element in enumerate(command):
        with contextlib.suppress(TemplateError):  # bad braces are reported by the schema check
            for placeholder in placeholders_in(str(element)):
                if placeholder in PLACEHOLDERS and placeholder not in STATS_PLACEHOLDERS:
                    known = ", ".join("{" + p + "}" for p in STATS_PLACEHOLDERS)
                    issues.append(
                        ConfigIssue(
                            f"remotes.{name}.{key}[{i}]",
                            f"{{{placeholder}}} belongs to a transfer; {key} may use {known}",
                        )
                    )
    return issues


def _scheduled(
    raw: Mapping[str, Any], remotes: Mapping[str, Any], protocols: Mapping[str, Any]
) -> set[tuple[Any, Any, Any]]:
    """(protocol, remote, direction) of every transfer the schedule runs: its transfers
    list, else every protocol x remote x direction."""
    selected = mapping(raw, "schedule").get("transfers")
    if isinstance(selected, list):
        return {
            (t.get("protocol"), t.get("remote"), t.get("direction", "download"))
            for t in selected
            if isinstance(t, dict)
        }
    return {
        (p, r, d)
        for p, proto in protocols.items()
        if isinstance(proto, dict)
        for r in remotes
        for d in (proto["directions"] if isinstance(proto.get("directions"), list) else ["download"])
    }


def _capture_buffer_issues(raw: Mapping[str, Any], remotes: Mapping[str, Any]) -> list[ConfigIssue]:
    """capture.buffer against the fastest configured path: a remote's bandwidth, or the
    lab link's rate for a lab remote (capture_buffer_needed)."""
    rates: dict[str, str] = {}
    for name, remote in remotes.items():
        if isinstance(remote, dict) and isinstance(remote.get("bandwidth"), str):
            rates[f"remotes.{name}.bandwidth"] = remote["bandwidth"]
        elif isinstance(remote, dict) and remote.get("lab"):
            link = mapping(mapping(raw, "lab"), "link")
            if isinstance(link.get("rate"), str):
                rates["lab.link.rate"] = link["rate"]
    try:
        buffer = parse_size(mapping(raw, "capture").get("buffer", 32 * 1024 * 1024))
        needs = {where: (rate, capture_buffer_needed(rate_bytes_per_second(rate) * 8)) for where, rate in rates.items()}
    except ValueError:
        return []  # a malformed size or rate: reported by the schema check
    if not needs or buffer < CAPTURE_BUFFER_MIN:  # below the floor: the schema check says so
        return []
    where, (rate, needed) = max(needs.items(), key=lambda item: item[1][1])
    if buffer >= needed:
        return []
    mib = -(-needed // (1 << 20))
    return [
        ConfigIssue(
            "capture.buffer",
            f"{buffer} bytes holds less than {CAPTURE_READER_WAIT_SECONDS:g} s of the frames of a {rate} path "
            f"({where}): the kernel drops packets whenever the capture waits that long for a CPU, and a capture "
            f"with drops has no wire numbers; set capture.buffer to at least {mib}MiB",
        )
    ]


def _ipv4_only_issues(
    raw: Mapping[str, Any], remotes: Mapping[str, Any], protocols: Mapping[str, Any]
) -> list[ConfigIssue]:
    """A protocol whose tool reaches remotes over IPv4 only (Profile.ipv4_only: bbftp,
    GridFTP's UDT mode) scheduled against a remote given as an IPv6 literal.  (A name
    that resolves to IPv6 is refused when its transfer starts.)"""
    issues = []
    for protocol, remote in sorted({(p, r) for p, r, _ in _scheduled(raw, remotes, protocols)}, key=str):
        proto, site = protocols.get(protocol), remotes.get(remote)
        if not isinstance(proto, dict) or not isinstance(site, dict) or not is_ipv6(str(site.get("address", ""))):
            continue
        profile = REGISTRY.get(module_for(protocol, proto.get("module")))
        options = mapping(proto, "options")
        if profile is None or profile.check_options(options):
            continue  # reported where the module or its options are checked
        why = profile.ipv4_only(profile.option_values(options))
        if why:
            issues.append(
                ConfigIssue(
                    f"remotes.{remote}.address",
                    f"{site['address']} is IPv6, and protocol {protocol} reaches a remote over IPv4 only ({why}); "
                    f"give an IPv4 address, or leave {protocol} out of this remote's transfers (schedule.transfers)",
                )
            )
    return issues


# ssh(1)'s options that take an argument: what follows them is not a flag.
_SSH_ARGUMENT_FLAGS = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
_SSH_STDIN_NULL = re.compile(r"(?i)(stdinnull|forkafterauthentication)\s*[= ]\s*yes")


def _ssh_stdin_closed(command: list[str]) -> str:
    """The option of an ssh command that closes its standard input (-n, -f, StdinNull,
    ForkAfterAuthentication), or ""."""
    at = next((i for i, word in enumerate(command) if os.path.basename(word) == "ssh"), None)
    if at is None:
        return ""
    i = at + 1
    while i < len(command) and command[i].startswith("-") and command[i] != "--":
        word = command[i]
        for j, flag in enumerate(word[1:], start=1):
            if flag in "nf":
                return f"-{flag}"
            if flag in _SSH_ARGUMENT_FLAGS:
                value = word[j + 1 :] or (command[i + 1] if i + 1 < len(command) else "")
                if flag == "o" and _SSH_STDIN_NULL.match(value):
                    return f"-o {value}"
                i += 0 if word[j + 1 :] else 1
                break
        i += 1
    return ""


def _tuning_issues(
    raw: Mapping[str, Any], remotes: Mapping[str, Any], protocols: Mapping[str, Any]
) -> list[ConfigIssue]:
    """`congestion` and `tcp_buffer_max` are set where bigbinf can set them and read them
    back (measure/tcp/tuning.py): the sender's algorithm, both ends' buffers.  A lab remote
    can always; a site needs tcp_command (set) and stats_command (read back) for its
    end, and for the buffers a netns for ours (never this host's own sysctls)."""
    issues: list[ConfigIssue] = []
    triples = _scheduled(raw, remotes, protocols)
    needs: dict[tuple[Any, str], list[str]] = {}  # (remote, key) -> why
    for name, proto in protocols.items():
        if not isinstance(proto, dict):
            continue
        congestion = proto.get("congestion")
        tuned = [key for key in ("congestion", "tcp_buffer_max") if proto.get(key) is not None]
        if tuned and mapping(proto, "options").get("udt") is True:
            issues.append(
                ConfigIssue(
                    f"protocols.{name}.{tuned[0]}",
                    "udt: true moves the data over UDP, where TCP's congestion control and buffers do not apply "
                    f"(and there is no TCP socket to read them back from): remove {' and '.join(tuned)}",
                )
            )
        if isinstance(congestion, str) and re.fullmatch(r"[a-z][a-z0-9_]{0,14}", congestion):
            problem = congestion_unavailable(congestion)
            if problem:
                issues.append(ConfigIssue(f"protocols.{name}.congestion", problem))
            options = mapping(proto, "options")
            if module_for(name, proto.get("module")) == "iperf3" and options.get("congestion"):
                issues.append(
                    ConfigIssue(
                        f"protocols.{name}.options.congestion",
                        "give either the protocol's congestion (set outside the tool, for the sender, and locked) "
                        "or iperf3's own -C option, not both: a locked route refuses iperf3's setsockopt",
                    )
                )
    for protocol, remote, direction in sorted(triples, key=str):
        proto, site = protocols.get(protocol), remotes.get(remote)
        if not isinstance(proto, dict) or not isinstance(site, dict) or site.get("lab"):
            continue
        if proto.get("congestion") and direction == "download":
            what = f"protocol {protocol} downloads with congestion: {proto['congestion']} (the remote sends)"
            needs.setdefault((remote, "tcp_command"), []).append(what)
            needs.setdefault((remote, "stats_command"), []).append(what)
        if proto.get("tcp_buffer_max") is not None:
            what = f"protocol {protocol} caps TCP buffers (tcp_buffer_max, both ends)"
            for key in ("tcp_command", "stats_command", "netns"):
                needs.setdefault((remote, key), []).append(what)
    fixes = {
        "tcp_command": "give an argv that runs a command as root on the remote, e.g. "
        '[ssh, -i, /etc/bigbinf/tcp_key, "root@{host}"] (bigbinf appends ip route / sysctl words)',
        "stats_command": 'give an argv that runs ss on the remote, e.g. [ssh, -i, KEY, "stats@{host}"], '
        "so that the kernel's tcp_info there confirms what was set",
        "netns": "run this remote's transfers in a network namespace of their own (bigbinf never changes this "
        "host's own sysctls)",
    }
    for (remote, key), whats in needs.items():
        if not remotes[remote].get(key):
            issues.append(
                ConfigIssue(f"remotes.{remote}.{key}", f"required: {'; '.join(dict.fromkeys(whats))}; {fixes[key]}")
            )
    return issues


def _upload_remotes(raw: Mapping[str, Any], remotes: Mapping[str, Any]) -> list[str]:
    """The remotes something uploads to: every remote, unless schedule.transfers lists the
    transfers (a mesh site's derived config does), then those it uploads to, and sweeps'."""
    selected = mapping(raw, "schedule").get("transfers")
    if not isinstance(selected, list):
        return list(remotes)
    chosen = [t for t in selected if isinstance(t, dict)]
    chosen += [s for s in mapping(raw, "sweeps").values() if isinstance(s, dict)]
    wanted = {t.get("remote") for t in chosen if t.get("direction") == "upload"}
    return [name for name in remotes if name in wanted]


def _key_issues(raw: Mapping[str, Any], remotes: Mapping[str, Any], protocols: Mapping[str, Any]) -> list[ConfigIssue]:
    """A site remote without `key` whose transfers log in with -i {key}: ssh would get an
    empty identity and fail on every round; say so at load."""
    schedule = mapping(raw, "schedule")
    selected = schedule.get("transfers")
    pairs: set[tuple[Any, Any]] = (
        {(t.get("protocol"), t.get("remote")) for t in selected if isinstance(t, dict)}
        if isinstance(selected, list)
        else {(p, r) for p in protocols for r in remotes}
    )
    needing: dict[str, list[str]] = {}
    for protocol, remote in sorted(pairs, key=str):
        site, proto = remotes.get(remote), protocols.get(protocol)
        if not isinstance(site, dict) or site.get("lab") or site.get("key") or not isinstance(proto, dict):
            continue
        if "key" in _placeholders_used(protocol, proto):
            needing.setdefault(remote, []).append(protocol)
    return [
        ConfigIssue(
            f"remotes.{remote}.key",
            f"required: protocols {', '.join(names)} log in with {{key}}; "
            "give the path of the private key for this remote",
        )
        for remote, names in needing.items()
    ]


def _placeholders_used(name: str, proto: Mapping[str, Any]) -> set[str]:
    """Every placeholder in the templates a protocol can render (its own or its module's)."""
    profile = REGISTRY.get(module_for(name, proto.get("module")))
    options = mapping(proto, "options")
    defaults = (
        profile.commands(profile.option_values(options)) if profile and not profile.check_options(options) else {}
    )
    directions: list[Any] = proto["directions"] if isinstance(proto.get("directions"), list) else ["download"]
    templates: list[Any] = []
    for direction in directions:
        own = proto.get("command" if direction == "download" else "upload_command")
        templates += [own] if isinstance(own, list) else [t for (d, _), t in defaults.items() if d == direction]
    used: set[str] = set()
    for element in (e for t in templates for e in t if isinstance(e, str)):
        with contextlib.suppress(TemplateError):  # reported with its path by the schema check
            used.update(placeholders_in(element))
    return used


def _cleanup_issues(
    name: str, profile: Any, remotes: Mapping[str, Any], datasets: Mapping[str, Any]
) -> list[ConfigIssue]:
    """Scheduled uploads to a real site would fill its disk unless something removes them."""
    sites = [r for r, remote in remotes.items() if isinstance(remote, dict) and not remote.get("lab")]
    kinds = {
        dataset_kind(d["count"]) if isinstance(d, dict) and isinstance(d.get("count"), int) else "file"
        for d in datasets.values()
    }
    missing = sorted(k for k in kinds if k not in profile.cleanup)
    if not sites or not missing:
        return []
    what = " or ".join("a directory" if k == "tree" else "a file" for k in missing)
    return [
        ConfigIssue(
            f"protocols.{name}.cleanup_command",
            f"uploads to {', '.join(sites)} would stay there: module {profile.name!r} cannot remove "
            f"{what} it uploaded; give an argv that removes {{remote_path}}, or [] to leave uploads",
        )
    ]


def _selector_issues(i: int, sel: Mapping[str, Any], proto: Mapping[str, Any], dataset: Any) -> list[ConfigIssue]:
    """An explicitly listed transfer the plan could not run must not vanish silently."""
    direction = sel.get("direction", "download")
    directions = proto.get("directions") or ["download"]
    if direction not in directions:
        return [
            ConfigIssue(
                f"schedule.transfers[{i}].direction",
                f"protocol {sel['protocol']!r} does not run {direction}s; add it to its directions",
            )
        ]
    own = proto.get("command" if direction == "download" else "upload_command")
    module = module_for(sel["protocol"], proto.get("module"))
    profile = REGISTRY.get(module)
    count = dataset.get("count", 1) if isinstance(dataset, dict) else 1
    kind = dataset_kind(count) if isinstance(count, int) else "file"
    if own or profile is None or profile.check_options(proto.get("options") or {}):
        return []
    if (direction, kind) not in profile.commands(profile.option_values(proto.get("options") or {})):
        return [
            ConfigIssue(
                f"schedule.transfers[{i}].dataset",
                f"module {module!r} cannot {direction} a directory of files; pick another protocol",
            )
        ]
    return []


def _sweep_issues(
    raw: Mapping[str, Any], remotes: Mapping[str, Any], datasets: Mapping[str, Any], protocols: Mapping[str, Any]
) -> list[ConfigIssue]:
    """What a sweep names must exist and fit its module; its grid must stay within max_runs;
    every algorithm must be in this kernel; the baseline must be a point of the grid."""
    issues: list[ConfigIssue] = []
    for name, sweep in mapping(raw, "sweeps").items():
        if not isinstance(sweep, dict):
            continue
        where = f"sweeps.{name}"
        dangling = False
        for kind, known in (("protocol", protocols), ("remote", remotes)):
            if kind in sweep and sweep[kind] not in known:
                dangling = dangling or kind == "protocol"
                issues.append(
                    ConfigIssue(
                        f"{where}.{kind}", f"no {kind} named {sweep[kind]!r}; defined: {', '.join(known) or 'none'}"
                    )
                )
        ds_list: list[Any] = sweep["datasets"] if isinstance(sweep.get("datasets"), list) else []
        for i, ds in enumerate(ds_list):
            if ds not in datasets:
                issues.append(
                    ConfigIssue(
                        f"{where}.datasets[{i}]", f"no dataset named {ds!r}; defined: {', '.join(datasets) or 'none'}"
                    )
                )
        proto: Any = protocols.get(str(sweep.get("protocol")))
        options = mapping(sweep, "options")
        profile = None
        if not dangling and isinstance(proto, dict):
            profile = REGISTRY.get(module_for(sweep["protocol"], proto.get("module")))
        if profile is not None and isinstance(proto, dict):
            direction = sweep.get("direction", "download")
            if direction not in (proto.get("directions") or ["download"]):
                issues.append(
                    ConfigIssue(
                        f"{where}.direction",
                        f"protocol {sweep['protocol']!r} does not run {direction}s; add it to its directions",
                    )
                )
            known = profile.option_fields
            for opt, values in options.items():
                if opt not in known:
                    allowed = ", ".join(known) or "none (sweep its congestion or tcp_buffer_max instead)"
                    issues.append(
                        ConfigIssue(
                            f"{where}.options.{opt}",
                            f"module {profile.name!r} has no option {opt!r}; allowed: {allowed}",
                        )
                    )
                    continue
                listed: list[Any] = values if isinstance(values, list) else []
                for j, value in enumerate(listed):
                    for _opt, problem in profile.check_options({opt: value}):
                        issues.append(ConfigIssue(f"{where}.options.{opt}[{j}]", problem))
            if proto.get("command" if direction == "download" else "upload_command") is None:
                for i, ds in enumerate(ds_list):
                    d = datasets.get(ds)
                    count = d.get("count", 1) if isinstance(d, dict) else 1
                    kind = dataset_kind(count) if isinstance(count, int) else "file"
                    if not profile.check_options(mapping(proto, "options")) and (
                        direction,
                        kind,
                    ) not in profile.commands(profile.option_values(mapping(proto, "options"))):
                        issues.append(
                            ConfigIssue(
                                f"{where}.datasets[{i}]",
                                f"module {profile.name!r} cannot {direction} a directory of files; "
                                "pick another dataset or protocol",
                            )
                        )
        congestion: list[Any] = sweep["congestion"] if isinstance(sweep.get("congestion"), list) else []
        for i, algorithm in enumerate(congestion):
            if isinstance(algorithm, str) and re.fullmatch(r"[a-z][a-z0-9_]{0,14}", algorithm):
                problem = congestion_unavailable(algorithm)
                if problem:
                    issues.append(ConfigIssue(f"{where}.congestion[{i}]", problem))
        own_cc = "congestion" in options or (isinstance(proto, dict) and mapping(proto, "options").get("congestion"))
        if congestion and profile is not None and profile.name == "iperf3" and own_cc:
            issues.append(
                ConfigIssue(
                    f"{where}.congestion",
                    "iperf3's own congestion option (-C) is set too: a locked route refuses its setsockopt; "
                    "sweep one of the two, not both",
                )
            )
        buffers: list[Any] = sweep["tcp_buffer_max"] if isinstance(sweep.get("tcp_buffer_max"), list) else []
        site = remotes.get(str(sweep.get("remote")))
        if isinstance(site, dict) and not site.get("lab"):
            wanted = (["tcp_command", "stats_command"] if congestion else []) + (
                ["tcp_command", "stats_command", "netns"] if buffers else []
            )
            for key in dict.fromkeys(wanted):
                if not site.get(key):
                    issues.append(
                        ConfigIssue(
                            f"remotes.{sweep['remote']}.{key}",
                            f"required: sweep {name} sets congestion or tcp_buffer_max there "
                            "(docs/configuration.md, tuning)",
                        )
                    )
        dimensions = {
            **{k: v for k, v in options.items() if isinstance(v, list)},
            **({"congestion": congestion} if congestion else {}),
            **({"tcp_buffer_max": buffers} if buffers else {}),
        }
        grid = {f"options.{k}": v for k, v in options.items() if isinstance(v, list)}
        issues += _repeated_grid_values(
            where, {"datasets": ds_list, **grid, "congestion": congestion, "tcp_buffer_max": buffers}
        )
        settings = 1
        for values in dimensions.values():
            settings *= max(len(values), 1)
        repetitions = sweep.get("repetitions", 3)
        max_runs = sweep.get("max_runs", SWEEP_MAX_RUNS)
        if isinstance(repetitions, int) and isinstance(max_runs, int) and ds_list:
            runs = settings * len(ds_list) * repetitions
            if runs > max_runs:
                issues.append(
                    ConfigIssue(
                        where,
                        f"the grid is {settings} settings x {len(ds_list)} datasets x {repetitions} repetitions = "
                        f"{runs} runs, more than max_runs {max_runs}; drop values, datasets or repetitions, "
                        f"or raise max_runs to {runs} if the sweep should really take that long",
                    )
                )
        for key, value in mapping(sweep, "baseline").items():
            if key not in dimensions:
                issues.append(
                    ConfigIssue(
                        f"{where}.baseline.{key}",
                        f"not a dimension of this sweep; swept: {', '.join(dimensions) or 'nothing'}",
                    )
                )
            elif key != "tcp_buffer_max" and value not in dimensions[key]:
                issues.append(
                    ConfigIssue(
                        f"{where}.baseline.{key}",
                        f"{value!r} is not one of the sweep's values {dimensions[key]!r}: the baseline must be "
                        "a setting the sweep runs",
                    )
                )
    return issues


def _repeated_grid_values(where: str, lists: Mapping[str, list[Any]]) -> list[ConfigIssue]:
    """A value listed twice in a sweep's datasets or grid: its runs would be one setting
    run twice as often, pooled into one row of the verdict.  Sizes compare as bytes
    (256KiB and 262144 are one buffer cap)."""
    issues = []
    for key, values in lists.items():
        first: dict[tuple[str, str], int] = {}
        for j, value in enumerate(values):
            same = value
            if key == "tcp_buffer_max":
                with contextlib.suppress(ValueError):
                    same = parse_size(value)
            seen = (type(same).__name__, repr(same))
            if seen in first:
                issues.append(
                    ConfigIssue(
                        f"{where}.{key}[{j}]",
                        f"{value!r} is listed twice (also [{first[seen]}]): its runs would be pooled into one "
                        "row; list each value once",
                    )
                )
            else:
                first[seen] = j
    return issues


# ---------------------------------------------------------------- loading


class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, first: yaml.Mark, again: yaml.Mark) -> None:
        self.problem_mark = again
        self.problem = (
            f"duplicate key {key!r} (first on line {first.line + 1}): YAML would silently keep only "
            "the last; remove or merge one"
        )


class _StrictLoader(yaml.SafeLoader):
    """safe_load, except that a key given twice in one mapping is an error."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in seen:
                raise _DuplicateKey(key, seen[key], key_node.start_mark)
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def read_config_text(path: str | Path, source: str) -> str:
    """A config file's text, or ConfigError naming the file: unreadable, or not UTF-8 (a
    Latin-1 comment, a UTF-16 editor's save)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(source, [ConfigIssue("", f"cannot read the file: {exc.strerror}")]) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            source,
            [ConfigIssue("", f"cannot read the file: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})")],
        ) from None


def yaml_mapping_or_error(text: str, source: str) -> Any:
    """yaml.load with duplicate keys refused; ConfigError naming the line, or the nesting."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}: " if mark else ""
        kind = "" if isinstance(exc, _DuplicateKey) else "YAML syntax error: "
        raise ConfigError(source, [ConfigIssue("", f"{where}{kind}{getattr(exc, 'problem', exc)}")]) from None
    except RecursionError:  # PyYAML composes nested nodes recursively: [[[[... thousands deep
        raise ConfigError(source, [ConfigIssue("", "YAML nested too deeply")]) from None


def read_yaml(text: str, source: str, what: str) -> dict[str, Any]:
    """A YAML mapping (duplicate keys refused), or ConfigError naming the line."""
    raw = yaml_mapping_or_error(text, source)
    if not isinstance(raw, dict):
        raise ConfigError(source, [ConfigIssue("", f"the file must be a YAML mapping with {what}")])
    return raw


def validate_config(raw: dict[str, Any], source: str) -> Config:
    """A Config from a mapping: the schema and the cross-reference checks, every issue gathered."""
    issues = _cross_reference_issues(raw)
    config = None
    try:
        config = Config.model_validate(raw)
    except ValidationError as exc:
        issues = pydantic_issues(exc, Config) + issues
    if issues or config is None:
        raise ConfigError(source, issues)
    return config


def parse_config(text: str, source: str) -> Config:
    return validate_config(read_yaml(text, source, "remotes, datasets and protocols"), source)


def load_config(path: str | Path) -> Config:
    source = str(path)
    return parse_config(read_config_text(path, source), source)
