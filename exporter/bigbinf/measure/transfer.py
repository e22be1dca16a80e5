"""One transfer, measured from the wire: prepare -> run under capture -> analyse -> judge -> Result.

Each step hands the next one a typed value (Subject, Prepared, Ran, Wire, Verdict) and
`_result` assembles the Result from them.  Whatever goes wrong (the command fails or
hangs, the capture or the analysis fails, the file is wrong, the wire shows another
transport than the profile claims), a Result is still returned with what was measured
and an error that says what happened; a transfer never raises into the round.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from bigbinf import credentials, guardian, process
from bigbinf.config import Config, DatasetConfig, capture_directory, kept_pcap_directory
from bigbinf.fserrors import describe_os_error, is_host_error
from bigbinf.journal.pending import PendingAnalysis, PendingStore
from bigbinf.judge.verdict import with_limit
from bigbinf.judge.words import human_bytes
from bigbinf.measure import datasets
from bigbinf.measure.leftovers import new_workdir
from bigbinf.measure.path.route import resolve, route_to
from bigbinf.measure.plan import TransferSpec
from bigbinf.measure.programs import BusyHost, ProgramWatch, remote_view
from bigbinf.measure.programs import summary as program_summary
from bigbinf.measure.stall import stall_words
from bigbinf.measure.tcp.state import TcpSummary, TcpWatch, on_this_host
from bigbinf.measure.tcp.tuning import Side, Tuned, TuningError, check
from bigbinf.measure.undo import Undo, UndoError, UndoJournal
from bigbinf.measure.wire.analyse import Analysis, EmptyCapture, PcapError
from bigbinf.measure.wire.analyser_worker import AnalysisStopped, AnalysisTimeout, analyse_in_worker
from bigbinf.measure.wire.capture import Capture, CaptureError, wait_closed, wait_linger
from bigbinf.measure.wire.oneway import one_way
from bigbinf.process import in_netns, netns_exists, observe_sessions, run_with_timeout
from bigbinf.protocols.base import DATA_FLOW_BYTES, Expectation, RunContext, RunOutcome, render
from bigbinf.protocols.hosts import is_ipv6, url_host
from bigbinf.result import PathBaseline, Result, SeriesKey

log = logging.getLogger(__name__)
# Uploads to a remote whose files we cannot read: verified stays 0, the outcome is not
# made a failure for it.
UNVERIFIABLE = datasets.Verification(False, "uploads to this remote cannot be read back to verify")
CLEANUP_TIMEOUT_SECONDS = 120.0
CONFIRM_INTERVAL_SECONDS = 0.1  # between listings of a sender whose congestion control was asked for
WATCH_SPARE_SECONDS = 60.0  # a remote watcher's lifetime beyond the transfer's longest


# ---------------------------------------------------------------- the steps' values


@dataclass(frozen=True)
class Subject:
    """What is measured: the series and the dataset, known before anything runs."""

    protocol: str
    remote: str
    dataset: str
    direction: str
    round_id: str
    file_bytes: int
    files: int
    remote_address: str  # as configured; the resolved IP once prepared
    expected: str  # what the capture must show, e.g. "TCP, >= 4 data flows"
    client_address: str = ""  # this host's address towards the remote, once prepared
    congestion_requested: str = ""  # the protocol's congestion (measure/tcp/tuning.py)
    tcp_buffer_max: int | None = None  # the protocol's tcp_buffer_max

    @classmethod
    def of(cls, spec: TransferSpec, round_id: str) -> Subject:
        ds = spec.dataset_config
        return cls(
            protocol=spec.protocol,
            remote=spec.remote.name,
            dataset=spec.dataset,
            direction=spec.direction,
            round_id=round_id,
            file_bytes=datasets.total_bytes(ds),
            files=ds.count,
            remote_address=spec.remote.address,
            expected=spec.expectation.describe(),
            congestion_requested=spec.congestion,
            tcp_buffer_max=spec.tcp_buffer_max,
        )

    def result(self, outcome: str, error: str) -> Result:
        """A Result with who and what filled in: all a transfer that ends before its
        command runs has; the measured steps fill in the rest (_result)."""
        return Result(
            protocol=self.protocol,
            remote=self.remote,
            dataset=self.dataset,
            direction=self.direction,
            round_id=self.round_id,
            file_bytes=self.file_bytes,
            files=self.files,
            remote_address=self.remote_address,
            client_address=self.client_address,
            expected=self.expected,
            start_timestamp=time.time(),
            outcome=outcome,
            error=error,
            wire_measured=False,
            congestion_requested=self.congestion_requested,
            tcp_buffer_max_bytes=self.tcp_buffer_max,
        )


@dataclass(frozen=True)
class Prepared:
    """Everything resolved before the command starts."""

    subject: Subject  # with the resolved addresses
    context: RunContext[Any]  # the rendered command and what its runner needs
    pcap: Path  # where the capture is written (capture.directory)
    mtu: int | None = None  # of the route to the remote: the segment size when no SYN was captured
    password: str = field(default="", repr=False)  # to redact from errors; never logged


@dataclass(frozen=True)
class Ran:
    """How the command ended, and what was recorded around it."""

    outcome: RunOutcome
    captured: bool  # a capture ran (capture.enabled)
    capture_dropped: int  # packets the kernel dropped before the capture tool read them (its ring was full)
    capture_unread: int  # packets left in the ring when the tool had to be stopped before it read them
    capture_error: str  # the tool failed to stop cleanly: the wire numbers are suspect
    capture_packets: int | None  # what the tool says it wrote ("N packets captured"); None if it did not say
    sender_retransmits: int | None
    sender_retransmits_source: str  # "kernel" (the sender's sockets), "iperf3", or ""
    tcp_local: TcpSummary | None = None  # this host's sockets to the remote (TCP transfers)
    tcp_remote: TcpSummary | None = None  # the remote's sockets to us, where it can be asked
    tcp_remote_note: str = ""  # why tcp_remote is absent
    programs: dict[str, dict[str, float]] = field(default_factory=dict)  # measure/programs.py's summary
    capture_tool: str = "pcapdump"  # capture.tool: what the messages about the capture name
    # The remote was asked and listed no socket to us: why is known once the capture is
    # (_remote_note): NAT or a server elsewhere, or no connection was made at all.
    remote_listed_none: bool = False
    remote_view: dict[str, float] = field(default_factory=dict)  # Result.remote_view
    host_busy: dict[str, float] = field(default_factory=dict)  # Result.host_busy


@dataclass(frozen=True)
class Wire:
    """What the capture shows (analyse.py's Analysis, reduced to what a Result keeps).
    wire_bytes and packets are the frames that crossed the wire (offload super-frames
    split into segments); captured_* are the frames as the capture saw them."""

    wire_bytes_down: int
    wire_bytes_up: int
    captured_wire_bytes_down: int
    captured_wire_bytes_up: int
    captured_packets_down: int
    captured_packets_up: int
    superframes: int  # captured frames that stood for several wire frames (both ways)
    payload_bytes_down: int
    payload_bytes_up: int
    packets_down: int
    packets_up: int
    retransmits_wire: int
    first_packet_timestamp: float | None
    last_packet_timestamp: float | None
    payload_histogram: dict[str, list[int]]
    data_flows: int  # flows that carried >= DATA_FLOW_BYTES of payload
    transport: str  # what carried the most payload: "tcp", "udp" or "" (nothing)
    undecoded: dict[str, int]  # packets between the hosts inside encapsulations not opened, per kind
    one_way: dict[str, float] = dataclasses.field(default_factory=dict)  # Result.one_way (wire/oneway.py)

    @classmethod
    def of(cls, a: Analysis) -> Wire:
        data_flows = [f for f in a.flows if f.payload_bytes_down + f.payload_bytes_up >= DATA_FLOW_BYTES]
        main = max(data_flows, key=lambda f: f.payload_bytes_down + f.payload_bytes_up, default=None)
        return cls(
            wire_bytes_down=a.wire_bytes["down"],
            wire_bytes_up=a.wire_bytes["up"],
            captured_wire_bytes_down=a.captured_wire_bytes["down"],
            captured_wire_bytes_up=a.captured_wire_bytes["up"],
            captured_packets_down=a.captured_packets["down"],
            captured_packets_up=a.captured_packets["up"],
            superframes=a.superframes["down"] + a.superframes["up"],
            payload_bytes_down=a.payload_bytes["down"],
            payload_bytes_up=a.payload_bytes["up"],
            packets_down=a.packets["down"],
            packets_up=a.packets["up"],
            retransmits_wire=a.retransmits["down"] + a.retransmits["up"],
            first_packet_timestamp=a.first_packet_timestamp,
            last_packet_timestamp=a.last_packet_timestamp,
            payload_histogram=a.payload_histogram,
            data_flows=len(data_flows),
            transport=main.transport if main else "",
            undecoded=dict(a.undecoded),
        )


@dataclass(frozen=True)
class Verdict:
    """The outcome, and every reason against it (the first one leads the error)."""

    outcome: str  # ok | failed | timeout
    errors: tuple[str, ...]
    verified: bool  # size (and sha256 where known) matched
    hashed: bool = False  # ... and every file's sha256 (not the sizes alone)


class _PrepareError(Exception):
    """A transfer that cannot start on this host (no route, no address, no source)."""


class _CaptureStartError(Exception):
    """The capture did not start: the command is not run."""


# ---------------------------------------------------------------- the transfer


@overload
def run_transfer(
    spec: TransferSpec, config: Config, round_id: str = "", baseline: PathBaseline | None = None, defer: None = None
) -> Result: ...
@overload
def run_transfer(
    spec: TransferSpec, config: Config, round_id: str, baseline: PathBaseline | None, defer: PendingStore
) -> Result | PendingAnalysis: ...
def run_transfer(
    spec: TransferSpec,
    config: Config,
    round_id: str = "",
    baseline: PathBaseline | None = None,
    defer: PendingStore | None = None,
) -> Result | PendingAnalysis:
    """One transfer; `baseline` (this round's probe of the path) lets it be judged
    against the path's bandwidth and BDP.  With `defer`, a capture whose analysis timed
    out or was stopped by the exporter's stop is kept there and its PendingAnalysis
    returned, to be finished later (journal/pending.py); without, such a transfer is
    failed now, saying what timed out."""
    subject = Subject.of(spec, round_id)
    process.measured.clear()  # the last transfer's result is the caller's now
    binary = render(spec.template[:1], {"binary": spec.binary})[0] if spec.template else spec.binary
    missing = [program for program in (binary, *spec.requires) if shutil.which(program) is None]
    if missing:  # checked every round: installing the program brings the series back
        return subject.result("skipped", f"{missing[0]} is not installed on this host")
    unavailable = spec.lab.unavailable(spec.lab_servers) if spec.lab else ""
    if unavailable:  # asked every time: starting the server brings the series back
        return subject.result("skipped", unavailable)
    unready = _unready(spec)
    if unready:  # before anything is uploaded, so there is nothing to clean up either
        return subject.result("failed", unready)
    # A file an upload leaves on the remote (none for a memory-to-memory test: iperf3).
    writes_remote_file = spec.direction == "upload" and spec.profile.produces_file
    upload_name = f"{spec.dataset_config.file}.{uuid.uuid4().hex[:12]}" if writes_remote_file else ""
    workdir: Path | None = None
    cleanup_problem = ""
    result: Result | PendingAnalysis | None = None
    journal = UndoJournal.beside(config.journal.path)
    upload: Undo | None = None
    try:
        workdir = new_workdir(config)
        if upload_name:  # written down before anything can reach the remote
            upload = _write_down_upload(spec, config, workdir, upload_name, journal)
        result = measure(spec, config, subject, workdir, upload_name, baseline, defer)
    except UndoError as exc:  # nothing has run: an upload that could not be undone is not made
        result = subject.result("failed", str(exc))
    except Exception as exc:  # a transfer never takes the round (and its other results) down
        result = _internal_error(spec, subject, exc, config)
    finally:
        measured = result.result if isinstance(result, PendingAnalysis) else result
        if upload_name and workdir is not None and (measured is None or _upload_may_be_on_remote(measured)):
            cleanup_problem = _remove_upload(spec, config, workdir, upload_name)
        if workdir is not None:  # a password's file never outlives its use, kept files or not
            for name in spec.profile.secret_files:
                (workdir / name).unlink(missing_ok=True)
        if upload is not None and not cleanup_problem:
            _struck_off(journal, upload)
        if workdir is not None and not config.transfer.keep_files:
            shutil.rmtree(workdir, ignore_errors=True)
    if cleanup_problem:  # the measurement stands; the note says what was left on the remote
        if isinstance(result, PendingAnalysis):
            noted = "; ".join(filter(None, [result.result.error, cleanup_problem]))
            entry = dataclasses.replace(result, result=dataclasses.replace(result.result, error=noted))
            if defer is not None:  # always, with an entry: its record, rewritten to journal the note
                defer.put(entry)
            return entry
        result = dataclasses.replace(result, error="; ".join(filter(None, [result.error, cleanup_problem])))
    return result


def measure(
    spec: TransferSpec,
    config: Config,
    subject: Subject,
    workdir: Path,
    upload_name: str,
    baseline: PathBaseline | None = None,
    defer: PendingStore | None = None,
) -> Result | PendingAnalysis:
    """The transfer's four steps, each handing its typed value to the next."""
    try:
        prepared = prepare(spec, config, subject, workdir, upload_name)
    except _PrepareError as exc:
        return subject.result("failed", str(exc))
    try:
        return _measure_prepared(spec, config, prepared, baseline, defer)
    finally:  # kept captures were moved away; the others go, whatever happened
        prepared.pcap.unlink(missing_ok=True)


def _measure_prepared(
    spec: TransferSpec,
    config: Config,
    prepared: Prepared,
    baseline: PathBaseline | None,
    defer: PendingStore | None = None,
) -> Result | PendingAnalysis:
    tuned = tuning(spec, prepared.subject, UndoJournal.beside(config.journal.path))
    try:
        try:
            with tuned:  # the protocol's congestion and buffer cap, for the command only
                ran = run_under_capture(spec, config, prepared)
        except TuningError as exc:  # nothing has run: what was applied is undone already
            return _with_restore_errors(prepared.subject.result("failed", f"tuning: {exc}"), tuned)
        try:
            wire, analysis_error = analyse(prepared, ran)
        except (AnalysisTimeout, AnalysisStopped) as exc:  # measured all the same: analysed later
            return _deferred(spec, config, prepared, ran, tuned, baseline, exc, defer)
        ran = _remote_note(spec, prepared, ran, wire)
        pcap_path = (
            _keep_pcap(prepared.pcap, kept_pcap_directory(config), _series(spec), ran.outcome.start_timestamp)
            if ran.captured and config.capture.keep and prepared.pcap.exists()
            else None
        )
        verdict = judge(spec, prepared, ran, wire, analysis_error, baseline)
    except _CaptureStartError as exc:
        return _with_restore_errors(prepared.subject.result("failed", f"capture: {exc}"), tuned)
    except Exception as exc:  # the addresses are known now: the result keeps them
        return _with_restore_errors(_internal_error(spec, prepared.subject, exc, config), tuned)
    result = _with_restore_errors(_result(prepared, ran, wire, verdict, pcap_path), tuned)
    return with_limit(result, baseline, spec.label)


def tuning(spec: TransferSpec, subject: Subject, journal: UndoJournal | None = None) -> Tuned:
    """The protocol's congestion and tcp_buffer_max as settings of the transfer's two
    ends: the sender gets the congestion control and the send buffer cap, the receiver
    the receive buffer cap (measure/tcp/tuning.py).  This host is set in the transfer's
    namespace, the remote through its tcp_command (the lab's: its namespace); each
    change's undo written to `journal` first."""
    remote = spec.remote
    here = Side(
        "this host" + (f" (namespace {remote.netns})" if remote.netns else ""),
        tuple(in_netns(remote.netns, [])),
        subject.remote_address,
    )
    there = Side(
        f"remote {remote.name}",
        tuple(remote.tcp_argv([])),
        subject.client_address,
        missing="" if remote.tcp_command else f"remotes.{remote.name} has no tcp_command: nothing can be set there",
    )
    sender, receiver = (there, here) if spec.direction == "download" else (here, there)
    return Tuned(spec.congestion, spec.tcp_buffer_max, sender, receiver, journal)


def _with_restore_errors(result: Result, tuned: Tuned) -> Result:
    """The result, with what could not be put back after it said in its error: the
    measurement stands, the host's setting does not."""
    if not tuned.restore_errors:
        return result
    return dataclasses.replace(result, error="; ".join(filter(None, [result.error, *tuned.restore_errors])))


def _internal_error(spec: TransferSpec, subject: Subject, exc: Exception, config: Config | None = None) -> Result:
    """A bug or an unforeseen failure: logged with its traceback, and a failed result.  What
    a host's file system refuses (read-only, full, quota, permission, I/O) is no bug: a
    failed result whose error names the directory, the error and the fix, in one line
    (the result's own log line), without a traceback."""
    if is_host_error(exc) and isinstance(exc, OSError):
        return subject.result("failed", _host_error(exc, config))
    log.error("%s: unexpected error", spec.label, exc_info=exc)
    return subject.result("failed", f"internal error: {type(exc).__name__}: {exc}")


def _host_error(exc: OSError, config: Config | None) -> str:
    """`exc` said of the configured directory it happened in (transfer.workdir,
    capture.directory, the journal's), else of its own file."""
    if config is not None and exc.filename is not None:
        where = Path(str(exc.filename))
        places = [
            ("transfer.workdir", config.transfer.workdir),
            ("capture.directory", capture_directory(config)),
            ("journal.path's directory", config.journal.path.parent),
        ]
        for what, directory in places:
            if where == directory or directory in where.parents:
                return describe_os_error(exc, directory, what)
    return describe_os_error(exc)


def prepare(spec: TransferSpec, config: Config, subject: Subject, workdir: Path, upload_name: str) -> Prepared:
    """Resolve the addresses, create an upload's source, render the command."""
    password = credentials.password(spec.remote.password_env)
    pcap = capture_directory(config) / f"{workdir.name}.pcap"
    try:
        if config.capture.enabled:  # (with capture off, nothing is written there)
            pcap.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # captures show who talked to whom
        shortfall = space_shortfall(spec, config, workdir, pcap.parent)
        if shortfall:
            raise _PrepareError(shortfall)
        source = upload_source(spec, config) if spec.direction == "upload" and spec.profile.produces_file else None
        remote_ip = resolve(spec.remote.address, spec.remote.netns)
        ipv4_only = spec.profile.ipv4_only(spec.options)
        if ipv4_only and is_ipv6(remote_ip):
            raise _PrepareError(
                f"{spec.protocol} reaches a remote over IPv4 only ({ipv4_only}), and remote {spec.remote.name} is "
                f"{remote_ip}: give remotes.{spec.remote.name}.address an IPv4 address, or measure it with another "
                "protocol"
            )
        client, mtu = route_to(remote_ip, spec.remote.netns)
    except OSError as exc:
        # A full, read-only or refused directory: said of the configured place, with its fix.
        raise _PrepareError(_host_error(exc, config) if is_host_error(exc) else str(exc)) from None
    except (CaptureError, subprocess.SubprocessError) as exc:
        raise _PrepareError(str(exc)) from None
    values = placeholder_values(spec, workdir, source, upload_name, client)
    # The secret reaches the command only through its environment (under the variable the
    # remote names, e.g. RSYNC_PASSWORD) or a private file a module writes (FTP: its
    # environment then has no password at all); never argv.
    env = _password_env(spec, password)
    context: RunContext[Any] = RunContext(
        argv=spec.profile.for_address(render(spec.template, values), remote_ip),
        timeout_seconds=spec.timeout_seconds,
        workdir=workdir,
        netns=spec.remote.netns,
        options=spec.options,
        env=env,
        values=values,
        direction=spec.direction,
        kind=spec.kind,
        password=password,
    )
    return Prepared(
        subject=dataclasses.replace(subject, client_address=client, remote_address=remote_ip),
        context=context,
        pcap=pcap,
        mtu=mtu,
        password=password,
    )


def run_under_capture(spec: TransferSpec, config: Config, prepared: Prepared) -> Ran:
    """The command, with the capture and (TCP) the socket watches around it.
    Raises _CaptureStartError when the capture cannot start: nothing has run then."""
    cap_cfg, subject = config.capture, prepared.subject
    capture = (
        Capture(
            spec.remote.interface,
            prepared.pcap,
            subject.client_address,
            subject.remote_address,
            netns=spec.remote.netns,
            snaplen=cap_cfg.snaplen,
            buffer_bytes=cap_cfg.buffer,
            tool=cap_cfg.tool,
            start_timeout=cap_cfg.start_timeout,
        )
        if cap_cfg.enabled
        else None
    )
    # The kernels' own view of the TCP sockets, both ends where the remote can be asked:
    # the sender's count is the truth about retransmits, and its tcp_info says what
    # limited it.  Read by netlink (ss) here and in the lab; a remote's stats command
    # opens its session before the capture starts (docs/configuration.md).
    tcp = spec.expectation.transport == "tcp"
    # Only listings name a socket's congestion control (close events do not): where one
    # was asked for, the sender's sockets are listed often enough to catch a short
    # transfer's, on this host and in the lab (a listing there costs milliseconds); a
    # site's stats command keeps its own interval (each listing is a session to it).
    confirm = bool(spec.congestion)
    local_interval = config.transfer.tcp_interval
    remote_interval = spec.remote.stats_interval
    if confirm and spec.direction == "upload":
        local_interval = min(local_interval, CONFIRM_INTERVAL_SECONDS)
    if confirm and spec.direction == "download" and spec.remote.local_fs:
        remote_interval = min(remote_interval, CONFIRM_INTERVAL_SECONDS)
    # The programs' CPU and storage waits: the command's own processes here, and the
    # remote's socket owners (ss -p names them): read here where its processes are on this
    # host too (a namespace: the lab), else by its stats command's listings (ssh).
    local_programs = ProgramWatch(config.transfer.tcp_interval)
    remote_programs = ProgramWatch(remote_interval)
    busy = BusyHost(config.transfer.tcp_interval, spec.remote.path_pid_file)  # the capture's and the path's waits
    remote_prefix = spec.remote.stats_argv([])
    # The transfer's programs carry the exporter's marker (process.own_children): a socket
    # to the same peer that only other programs hold is not the transfer's.
    local_watch = (
        TcpWatch(
            in_netns(spec.remote.netns, []),
            subject.remote_address,
            local_interval,
            transfer_marker=os.environ.get(guardian.MARKER),
        )
        if tcp
        else None
    )
    # A remote watcher ends with its lifeline; at the latest once the transfer cannot be running.
    lifetime = spec.timeout_seconds + cap_cfg.start_timeout + cap_cfg.linger + WATCH_SPARE_SECONDS
    remote_watch = (
        TcpWatch(
            remote_prefix,
            subject.client_address,
            remote_interval,
            on_owners=remote_programs.add_pids if on_this_host(remote_prefix) else None,
            lifetime=lifetime,
        )
        if tcp and spec.remote.stats_command
        else None
    )
    capture_error = ""
    with ExitStack() as watching:  # the watches stop (and keep their summaries) on the way out
        for watch in (local_watch, remote_watch):
            if watch:
                watching.enter_context(watch)
            if watch is local_watch and local_watch and remote_watch:
                # Run after the remote watch stops, before this host's does: the remote's
                # stats sessions (ssh from this host) are sockets to the remote here too,
                # and not the transfer's.
                watching.callback(lambda: local_watch.leave_out(remote_watch.own_sessions()))
            if watch is remote_watch and local_watch and remote_watch:
                # Run before the remote watch stops: the remote's ends of the flows another
                # program held here (a production transfer between the same hosts).
                watching.callback(lambda: remote_watch.leave_out_peers(local_watch.foreign_ends()))
        if capture:
            try:
                capture.start()
            except CaptureError as exc:
                raise _CaptureStartError(str(exc)) from None
        watching.enter_context(local_programs)
        watching.enter_context(remote_programs)
        watching.enter_context(busy)
        if capture and capture.proc:
            busy.add("capture", capture.proc.pid)
        try:
            started = time.monotonic()
            for watch in (local_watch, remote_watch):
                if watch:
                    watch.origin = started  # progress times count from the command's start
            with observe_sessions(local_programs.add_session):
                outcome: RunOutcome = spec.profile.runner(prepared.context)
            if outcome.returncode == 0 and not outcome.timed_out:
                process.measured.set()  # a stop from now on lets it finish (process.measured)
            if process.stopping.is_set() and outcome.returncode != 0:
                pass  # the exporter's stop killed the command: its closing packets are not worth the wait
            elif tcp:
                wait_closed(spec.remote.netns, subject.remote_address, cap_cfg.linger)
            else:
                wait_linger(cap_cfg.linger)
        finally:
            if capture:
                try:
                    capture.stop()
                except CaptureError as exc:  # the transfer's own outcome stays; the wire numbers are suspect
                    capture_error = f"capture: {exc}"
    tcp_local = local_watch.stop() if local_watch else None  # stop() again: the summary it kept
    tcp_remote = remote_watch.stop() if remote_watch else None
    if local_watch and tcp_local is None:
        _say_once(spec, f"this host's TCP state could not be read: {local_watch.error}")
    remote_note = ""
    # Asked, but the remote listed no socket to our address: NAT or a server elsewhere, or
    # no connection at all; the capture tells which (_remote_note, after the analysis).
    remote_listed_none = bool(remote_watch and tcp_remote is not None and not tcp_remote.sockets)
    if remote_listed_none:
        tcp_remote = None
    elif tcp and tcp_remote is None:
        remote_note = (
            _remote_stats_failed(spec, remote_watch.error)
            if remote_watch
            else f"remotes.{spec.remote.name} has no stats_command: the remote's TCP state cannot be read"
        )
    sender = tcp_remote if spec.direction == "download" else tcp_local
    retransmits, source = _sender_retransmits(sender, outcome)
    # The first data, on the programs' clock: what they queued for a core before it was
    # set-up slowed by a busy host (measure/tcp/limits.py's startup discounts it).
    progress = [s.values.get("data_start_seconds") for s in (tcp_local, tcp_remote) if s]
    first_data = min((v for v in progress if v is not None), default=None)
    data_start = started + first_data if first_data is not None else None
    stats = capture.stats if capture else None
    return Ran(
        outcome=outcome,
        captured=capture is not None,
        capture_dropped=stats.dropped if stats else 0,
        capture_unread=capture.unread if capture else 0,
        capture_error=capture_error,
        capture_packets=capture.stats.captured if capture and capture.stats else None,
        sender_retransmits=retransmits,
        sender_retransmits_source=source,
        tcp_local=tcp_local,
        tcp_remote=tcp_remote,
        tcp_remote_note=remote_note,
        programs={
            **program_summary(local_programs.lives(), "local", data_start),
            # The remote's: sampled here (a namespace of this host) or by its listings (ssh).
            **program_summary(
                [*remote_programs.lives(), *(remote_watch.program_lives() if remote_watch else [])],
                "remote",
                data_start,
            ),
        },
        capture_tool=cap_cfg.tool,
        remote_listed_none=remote_listed_none,
        remote_view=remote_view(
            remote_watch.listing_view(),
            [*remote_programs.lives(), *remote_watch.program_lives()],
        )
        if remote_watch
        else {},
        host_busy=busy.values(local_programs.lives(), outcome.duration_seconds),
    )


def _remote_note(spec: TransferSpec, prepared: Prepared, ran: Ran, wire: Wire | None) -> Ran:
    """Why the remote's TCP state is absent when the remote listed no socket to us.  A
    transfer that never connected (no payload crossed either way on the wire; without a
    capture, no socket here either) had none to list: said, not warned about.  One that
    did connect went to an address the remote does not know as ours (NAT) or to a server
    elsewhere: that is a fact of the site, warned about once."""
    if not ran.remote_listed_none:
        return ran
    if wire is not None:
        connected = wire.payload_bytes_down + wire.payload_bytes_up > 0
    else:
        connected = ran.tcp_local is None or ran.tcp_local.sockets > 0
    if not connected:
        note = f"no connection to remote {spec.remote.name} was made: it had no TCP state to show"
    else:
        note = _remote_stats_failed(
            spec,
            f"the remote showed no TCP socket to {prepared.subject.client_address} "
            "(NAT, or the server runs at another address)",
        )
    return dataclasses.replace(ran, tcp_remote_note=note)


def analyse(prepared: Prepared, ran: Ran) -> tuple[Wire | None, str]:
    """The wire numbers of the capture, or why there are none ("" when there was no capture)."""
    if not ran.captured:
        return None, ""
    pcap, subject, tool = prepared.pcap, prepared.subject, ran.capture_tool
    if ran.capture_error:
        # Cut short (the tool ended before the transfer, or was killed), or failed: counts
        # from what it wrote would be low by an unknown part.  capture_error says which.
        return None, ""
    if ran.capture_dropped or ran.capture_unread:
        # Packets the capture never saw: counts from it would be low by an unknown part (and
        # the retransmissions by another), so they are absent, as those of a capture cut short.
        lost = []
        if ran.capture_dropped:
            lost.append(
                f"the kernel dropped {ran.capture_dropped} packets before {tool} read them (its buffer was full)"
            )
        if ran.capture_unread:
            lost.append(f"{tool} was stopped with {ran.capture_unread} packets unread")
        return None, (
            f"capture: {' and '.join(lost)}; the wire numbers are absent: raise capture.buffer, or give the "
            f"capture more CPU (docs/runbook.md)"
        )
    return wire_of(pcap, subject.client_address, subject.remote_address, prepared.mtu, ran.capture_packets, tool)


def wire_of(
    pcap: Path, client_address: str, remote_address: str, mtu: int | None, capture_packets: int | None, tool: str
) -> tuple[Wire | None, str]:
    """The wire numbers of a capture file, or why there are none.  AnalysisTimeout and
    AnalysisStopped pass through: the capture is measured, its analysis only late."""
    try:
        # strict: a file that ends inside a record (cut short) is an error, not partial counts
        # in the analyser's worker process: numba and LLVM stay out of the exporter's RSS
        analysis = analyse_in_worker(pcap, client_address, remote_address, mtu=mtu)
    except (AnalysisTimeout, AnalysisStopped):
        raise
    except EmptyCapture as exc:
        # No record in the file: cut short if the tool says it wrote some (a disk that
        # filled before even the header was flushed), else nothing passed its filter.
        return None, _cut_short(tool, capture_packets, pcap, 0) if capture_packets else f"analysis: {exc}"
    except PcapError as exc:
        return None, f"analysis: {exc}"
    if capture_packets is not None and analysis.records < capture_packets:
        # The tool counts what it handed to the file, and exits 0 even when the disk took
        # only part of it: without this check a cut capture would pass for a complete one.
        return None, _cut_short(tool, capture_packets, pcap, analysis.records)
    if analysis.damaged_records:
        # Records the analyser skipped (pcap._skip_damaged): what they carried is missing.
        return None, (
            f"analysis: {pcap} holds {analysis.damaged_records} damaged record"
            f"{'s' if analysis.damaged_records != 1 else ''} (the first at byte {analysis.damaged_at}); the "
            "wire numbers are absent: the capture file was corrupted after it was written (the disk, or "
            "another writer)"
        )
    return dataclasses.replace(Wire.of(analysis), one_way=_one_way(pcap, client_address, remote_address)), ""


def _one_way(pcap: Path, client_address: str, remote_address: str) -> dict[str, float]:
    """Result.one_way of the capture ({} where it cannot be read: the analysis above read it,
    so only a file changed since; the rest of the wire numbers stand)."""
    try:
        return one_way(pcap, client_address, remote_address)
    except (PcapError, OSError, ValueError) as exc:
        log.warning("one-way delays of %s: %s", pcap, exc)
        return {}


def _deferred(
    spec: TransferSpec,
    config: Config,
    prepared: Prepared,
    ran: Ran,
    tuned: Tuned,
    baseline: PathBaseline | None,
    exc: AnalysisTimeout | AnalysisStopped,
    store: PendingStore | None,
) -> Result | PendingAnalysis:
    """A transfer that ran, whose capture's analysis timed out or was stopped: judged on
    everything but the capture, which is kept in `store` for a later analysis (issue 36:
    published late rather than lost).  Without a store it is failed now, saying what
    timed out, its capture kept where capture.keep keeps captures."""
    ran = _remote_note(spec, prepared, ran, None)
    judged = judge(spec, prepared, ran, None, "", baseline)
    measured = _with_restore_errors(_result(prepared, ran, None, judged, None), tuned)
    entry = PendingAnalysis(
        result=measured,
        pcap=str(prepared.pcap),
        client_address=prepared.subject.client_address,
        remote_address=prepared.subject.remote_address,
        mtu=prepared.mtu,
        capture_packets=ran.capture_packets,
        capture_tool=ran.capture_tool,
        transport=spec.expectation.transport,
        min_data_flows=spec.expectation.min_data_flows,
        keep_directory=str(kept_pcap_directory(config)) if config.capture.keep else "",
        baseline=baseline,
        reason=str(exc),
    )
    if isinstance(exc, AnalysisStopped) and measured.outcome != "ok":
        # The stop cut the command itself (or it failed): its wire numbers are not worth a
        # stop's seconds (moving the capture), and its round's note runs it again.
        return complete(entry, None, f"analysis: {exc}")
    if store is None:  # the capture is kept all the same: it can be analysed by hand
        kept = dataclasses.replace(entry, keep_directory=str(kept_pcap_directory(config)))
        return complete(kept, None, f"analysis: {exc}")
    entry = dataclasses.replace(entry, pcap=str(store.adopt(prepared.pcap)))
    store.put(entry)
    when = "at the next start" if isinstance(exc, AnalysisStopped) else "before the next round"
    log.warning("%s: %s; its capture is kept (%s) and analysed %s", spec.label, exc, entry.pcap, when)
    return entry


def analyse_pending(entry: PendingAnalysis) -> Result:
    """A pending analysis done: its result, judged on the capture too.  AnalysisTimeout
    and AnalysisStopped pass through (the entry stays pending)."""
    wire, error = wire_of(
        Path(entry.pcap),
        entry.client_address,
        entry.remote_address,
        entry.mtu,
        entry.capture_packets,
        entry.capture_tool,
    )
    return complete(entry, wire, error)


def complete(entry: PendingAnalysis, wire: Wire | None, analysis_error: str) -> Result:
    """The entry's result with its capture's numbers (or why there are none): the checks
    that need the capture (judge's) and what limited it; the capture moved to its
    keep_directory, if it has one."""
    measured = entry.result
    problems = _transport_problems(Expectation(entry.transport, entry.min_data_flows), wire)
    notes = ([analysis_error] if analysis_error else []) + _undecoded(wire)
    broken = problems or analysis_error
    pcap_path = ""
    if entry.keep_directory and Path(entry.pcap).exists():
        kept = _keep_pcap(Path(entry.pcap), Path(entry.keep_directory), measured.key, measured.start_timestamp)
        pcap_path = str(kept)
    result = dataclasses.replace(
        measured,
        outcome="failed" if broken and measured.outcome == "ok" else measured.outcome,
        error="; ".join(e for e in (measured.error, *problems, *notes) if e),
        pcap_path=pcap_path,
    )
    label = f"{measured.protocol} {measured.direction} {measured.dataset} with {measured.remote}"
    return with_limit(_with_wire(result, wire), entry.baseline, label)


def _cut_short(tool: str, capture_packets: int | None, pcap: Path, records: int) -> str:
    return (
        f"capture: {tool} captured {capture_packets} packets but {pcap} holds {records}: the "
        f"capture was cut short (a full disk?); the wire numbers are absent: free space in {pcap.parent} "
        "or set capture.directory"
    )


def judge(
    spec: TransferSpec,
    prepared: Prepared,
    ran: Ran,
    wire: Wire | None,
    analysis_error: str,
    baseline: PathBaseline | None = None,
) -> Verdict:
    """ok only if the command exited 0, the copy is right, the wire shows the expected
    transport and the capture and its analysis worked; every reason against is kept.  A
    timeout says what the TCP listings saw of the stall (measure/stall.py): a path-MTU
    black hole the round's probe measured, no data after the handshake, a zero window,
    repeated retransmission timeouts."""
    outcome = ran.outcome
    notes = [e for e in (ran.capture_error, analysis_error) if e] + _undecoded(wire)
    if outcome.timed_out:
        download = spec.direction == "download"
        local = ran.tcp_local.values if ran.tcp_local else {}
        remote = ran.tcp_remote.values if ran.tcp_remote else {}
        seen = stall_words(
            remote if download else local,
            local if download else remote,
            baseline,
            prepared.mtu,
            "the remote" if download else "this host",
        )
        return Verdict("timeout", (f"killed after the {spec.timeout_seconds:g}s timeout: {seen}", *notes), False)
    if outcome.returncode != 0:
        exited = _exited(prepared.context.argv[0], outcome.returncode, outcome.stderr_tail[-500:])
        return Verdict("failed", (exited, *notes), False)
    if outcome.failure:  # exited 0, but the tool itself says it failed
        return Verdict("failed", (outcome.failure, *notes), False)
    verified, hashed, problems = _check(spec, prepared, outcome, wire)
    # The kernel's word on what was set: a requested algorithm the sender did not use, or
    # a buffer above the cap, is a failed measurement of that setting.
    download = spec.direction == "download"
    problems += check(
        spec.congestion,
        spec.tcp_buffer_max,
        ran.tcp_remote if download else ran.tcp_local,
        ran.tcp_local if download else ran.tcp_remote,
        f"remote {spec.remote.name}" if download else "this host",
    )
    broken = problems or any(e.startswith(("analysis", "capture")) for e in notes)
    return Verdict("failed" if broken else "ok", (*problems, *notes), verified, hashed)


def _undecoded(wire: Wire | None) -> list[str]:
    """Said, not failed: what crossed in them is missing from the counts."""
    if wire is None:
        return []
    return [
        f"{count} packet{'s' if count != 1 else ''} between the hosts not decoded ({kind})"
        for kind, count in sorted(wire.undecoded.items())
    ]


def _transport_problems(want: Expectation, wire: Wire | None) -> list[str]:
    """What the capture saw against the transport the protocol must use."""
    if wire is None:
        return []
    seen = (wire.transport or "nothing", wire.data_flows)
    if seen[0] == want.transport and seen[1] >= want.min_data_flows:
        return []
    return [
        f"transport: expected {want.describe()}; the capture saw "
        f"{seen[0].upper()} with {seen[1]} data flow{'s' if seen[1] != 1 else ''}"
    ]


def _result(prepared: Prepared, ran: Ran, wire: Wire | None, verdict: Verdict, pcap_path: Path | None) -> Result:
    reported = ran.outcome.reported
    result = dataclasses.replace(
        prepared.subject.result(verdict.outcome, _redact("; ".join(verdict.errors), [prepared.password])),
        start_timestamp=ran.outcome.start_timestamp,
        duration_seconds=ran.outcome.duration_seconds,
        verified=verdict.verified,
        # Lost to the capture either way: the published count is every packet it missed.
        capture_dropped=ran.capture_dropped + ran.capture_unread,
        retransmits_sender=ran.sender_retransmits,
        retransmits_sender_source=ran.sender_retransmits_source,
        reported=dict(reported),
        rtt_seconds=reported.get("mean_rtt_seconds"),
        pcap_path=str(pcap_path) if pcap_path else "",
        argv=[_redact(arg, [prepared.password]) for arg in prepared.context.argv],
        tcp_local=dict(ran.tcp_local.values) if ran.tcp_local else {},
        tcp_remote=dict(ran.tcp_remote.values) if ran.tcp_remote else {},
        tcp_remote_note=ran.tcp_remote_note,
        programs=ran.programs,
        remote_view=ran.remote_view,
        host_busy=ran.host_busy,
        congestion_control=_sender_congestion_control(prepared, ran),
    )
    result = _with_wire(result, wire)
    why = unproven(result, verdict.hashed)
    if why:  # said on the result (the flag, and its error, where every reader looks)
        note = f"{why}: its throughput is no measurement and counts in no baseline"
        result = dataclasses.replace(result, unproven=why, error="; ".join(filter(None, [result.error, note])))
    return result


def unproven(result: Result, hashed: bool = True) -> str:
    """Why an ok transfer proves no bytes moved ("" if it does).  Proof is the content's
    sha256 matched (`hashed`, with `verified`), payload the capture saw, the transfer's
    data sockets' bytes in this host's kernel (tcp_local), or the program's own count (as
    iperf3's).  A size that matched is none by itself: a command that moved nothing
    (`true`) exits 0 at once, one that made a file of the size (`truncate -s`) too, and
    either would read as a transfer at gigabytes a second."""
    if result.outcome != "ok" or result.reported.get("bytes", 0) > 0:
        return ""
    if result.verified and hashed:
        return ""
    if result.wire_measured and result.payload_bytes_down + result.payload_bytes_up > 0:
        return ""
    if result.tcp_local.get("bytes_acked", 0.0) + result.tcp_local.get("bytes_received", 0.0) > 0:
        return ""
    checked = "only the size verified (no sha256 known)" if result.verified else "no verification"
    if not result.wire_measured:
        return f"unproven: no capture and {checked}"
    return f"unproven: no bytes on the wire and {checked}"


def _with_wire(result: Result, wire: Wire | None) -> Result:
    if wire is None:  # no capture, or none that could be read: the wire fields keep their defaults
        return result
    return dataclasses.replace(
        result,
        wire_measured=True,
        wire_bytes_down=wire.wire_bytes_down,
        wire_bytes_up=wire.wire_bytes_up,
        captured_wire_bytes_down=wire.captured_wire_bytes_down,
        captured_wire_bytes_up=wire.captured_wire_bytes_up,
        captured_packets_down=wire.captured_packets_down,
        captured_packets_up=wire.captured_packets_up,
        superframes=wire.superframes,
        payload_bytes_down=wire.payload_bytes_down,
        payload_bytes_up=wire.payload_bytes_up,
        packets_down=wire.packets_down,
        packets_up=wire.packets_up,
        retransmits_wire=wire.retransmits_wire,
        first_packet_timestamp=wire.first_packet_timestamp,
        last_packet_timestamp=wire.last_packet_timestamp,
        payload_histogram=wire.payload_histogram,
        data_flows=wire.data_flows,
        transport=wire.transport,
        one_way=wire.one_way,
    )


# ---------------------------------------------------------------- helpers of the steps


# A capture's size: every frame is at most a 16-byte pcap record header + snaplen bytes.
# Frames: the data in segments of a 1500-byte MTU's MSS (offloads off: the most frames)
# plus an ACK for every second one (delayed ACKs), plus a few hundred per file for the
# handshakes and the protocol's own chatter.
_MSS = 1448
_FRAMES_PER_FILE = 200
_SPARE_BYTES = 16 << 20  # what else may be written there meanwhile (logs, the journal)


def capture_bytes_needed(file_bytes: int, files: int, snaplen: int) -> int:
    data_frames = -(-file_bytes // _MSS)
    return (data_frames * 3 // 2 + files * _FRAMES_PER_FILE) * (16 + snaplen)


def space_shortfall(spec: TransferSpec, config: Config, workdir: Path, capture_dir: Path) -> str:
    """Why the disks cannot hold what this transfer writes ("" if they can): the received
    copy (downloads) or a missing upload source in transfer.workdir, and the capture.
    A memory-to-memory test (iperf3) writes neither copy nor source: only its capture.
    Checked before anything runs, so a full disk fails the transfer with the reason
    instead of cutting the capture or the copy short."""
    ds = spec.dataset_config
    size = datasets.total_bytes(ds)
    needs: dict[int, list[tuple[Path, int, str, str]]] = {}  # per file system (st_dev)

    def need(path: Path, amount: int, what: str, key: str) -> None:
        needs.setdefault(path.stat().st_dev, []).append((path, amount, what, key))

    if not spec.profile.produces_file:
        pass
    elif spec.direction == "download":
        need(workdir, size, f"the received copy ({human_bytes(size)})", "transfer.workdir")
    elif not _source_present(config.transfer.workdir / "sources", ds):
        need(config.transfer.workdir, size, f"the upload source ({human_bytes(size)})", "transfer.workdir")
    if config.capture.enabled:
        need(
            capture_dir,
            capture_bytes_needed(size, ds.count, config.capture.snaplen),
            f"the capture of {human_bytes(size)}",
            "capture.directory",
        )
    for wanted in needs.values():
        total = sum(amount for _, amount, _, _ in wanted) + _SPARE_BYTES
        free = shutil.disk_usage(wanted[0][0]).free
        if free < total:
            where = " and ".join(str(path) for path, *_ in wanted)
            keys = " or ".join(dict.fromkeys(key for *_, key in wanted))
            whats = " and ".join(what for _, _, what, _ in wanted)
            return (
                f"not enough disk space: {human_bytes(free)} free for {where}, which need about "
                f"{human_bytes(total)} ({whats}, {human_bytes(_SPARE_BYTES)} spare); free space there "
                f"or set {keys} to a larger disk"
            )
    return ""


def _source_present(root: Path, ds: DatasetConfig) -> bool:
    return all(
        (root / name).is_file() and (root / name).stat().st_size == ds.size for name in datasets.member_names(ds)
    )


def upload_source(spec: TransferSpec, config: Config) -> Path:
    """The local copy an upload sends: created once per dataset, reused after."""
    root = config.transfer.workdir / "sources"
    root.mkdir(parents=True, exist_ok=True)
    datasets.ensure(root, spec.dataset_config)
    return root / spec.dataset_config.file


def placeholder_values(
    spec: TransferSpec, workdir: Path, local_source: Path | None = None, upload_name: str = "", client: str = ""
) -> dict[str, str]:
    remote, ds = spec.remote, spec.dataset_config
    if spec.direction == "download" or local_source is None:  # or memory to memory: no file either end
        remote_path, local_path = remote.data_dir / ds.file, workdir / ds.file
    else:
        assert remote.upload_dir is not None  # guaranteed by validation
        remote_path, local_path = remote.upload_dir / upload_name, local_source
    try:
        remote_name = str(remote_path.relative_to(remote.serve_root))
    except ValueError:
        remote_name = str(remote_path).lstrip("/")
    return {
        "host": remote.address,
        "url_host": url_host(remote.address),
        "client": client,
        "url_client": url_host(client),
        "port": str(remote.port),
        "user": remote.user,
        "key": str(remote.key or ""),
        "ssh_config": str(remote.ssh_config or "/dev/null"),
        "remote_path": str(remote_path),
        "remote_name": remote_name,
        "remote_dir": str(remote_path.parent),
        "file": ds.file,
        "local_path": str(local_path),
        "local_dir": str(workdir),
        "size": str(datasets.total_bytes(ds)),
        "binary": spec.binary,
    }


def _password_env(spec: TransferSpec, password: str) -> dict[str, str]:
    """The remote's password under its password_env name, for a module that reads it there."""
    variable = spec.remote.password_env
    return {variable: password} if variable and spec.profile.password_in_env else {}


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def _upload_may_be_on_remote(result: Result) -> bool:
    """False when nothing of an upload can have reached the remote: its command never ran
    (it failed before: no duration), or the capture saw no payload go up (it never
    connected).  Then there is nothing to remove, and no warning that a file "stays"."""
    if result.duration_seconds == 0:
        return False
    return not (result.wire_measured and result.payload_bytes_up == 0)


def _write_down_upload(
    spec: TransferSpec, config: Config, workdir: Path, upload_name: str, journal: UndoJournal
) -> Undo | None:
    """What removes an upload from the remote, written to the undo journal before the
    upload starts (a killed exporter's next start removes it); None where bigbinf does
    not remove uploads (cleanup_command: [])."""
    remote = spec.remote
    where, what = f"remote {remote.name}", f"an upload of {spec.dataset} by {spec.protocol}"
    if remote.local_fs and remote.upload_dir:  # the lab: its disk is ours
        return journal.add(Undo("upload", where, what, path=str(remote.upload_dir / upload_name)))
    if not spec.cleanup:
        return None
    values = placeholder_values(
        spec, workdir, config.transfer.workdir / "sources" / spec.dataset_config.file, upload_name
    )
    return journal.add(
        Undo(
            "upload",
            where,
            f"{what} at {values['remote_path']}",
            prefix=tuple(in_netns(remote.netns, [])),
            words=tuple(render(spec.cleanup, values)),
            env=remote.password_env or "",
        )
    )


def _struck_off(journal: UndoJournal, entry: Undo) -> None:
    try:
        journal.done(entry)
    except UndoError as exc:  # removed all the same: a later replay finds nothing left
        log.error("%s", exc)


def _remove_upload(spec: TransferSpec, config: Config, workdir: Path, upload_name: str) -> str:
    """Remove what an upload left on the remote; a problem is returned, not raised."""
    remote = spec.remote
    if remote.local_fs and remote.upload_dir:  # the lab: its disk is ours
        target = remote.upload_dir / upload_name
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
        return ""
    if not spec.cleanup:
        return ""  # cleanup_command: [] -- the site removes uploads itself
    password = credentials.password(remote.password_env)
    values = placeholder_values(
        spec, workdir, config.transfer.workdir / "sources" / spec.dataset_config.file, upload_name
    )
    argv = render(spec.cleanup, values)
    try:
        done = run_with_timeout(
            in_netns(remote.netns, argv),
            CLEANUP_TIMEOUT_SECONDS,
            cwd=str(workdir),
            env=_password_env(spec, password) or None,
        )
    except OSError as exc:
        problem = f"{argv[0]}: {exc.strerror}"
    else:
        if done.returncode == 0:
            return ""
        problem = (
            f"killed after {CLEANUP_TIMEOUT_SECONDS:g}s"
            if done.timed_out
            else _exited(argv[0], done.returncode, done.stderr_tail[-300:])
        )
    problem = _redact(f"cleanup: {values['remote_path']} stays on {remote.name}: {problem}", [password])
    log.warning("%s: %s", spec.label, problem)
    return problem


def _unready(spec: TransferSpec) -> str:
    """What on this host keeps the transfer from starting, said with its fix; "" if nothing."""
    remote = spec.remote
    if remote.netns and not netns_exists(remote.netns):
        if remote.local_fs:  # the lab's client namespace
            return (
                f"the lab is not up (no network namespace {remote.netns}): run "
                "`bigbinf-exporter --config.file <this config> lab up`"
            )
        return (
            f"remotes.{remote.name}.netns: network namespace {remote.netns} does not exist; create it "
            "or remove netns from the remote"
        )
    if remote.key and not remote.key.exists():
        return f"remotes.{remote.name}.key: {remote.key} does not exist; give the path of the private key"
    return ""


def _exited(program: str, returncode: int | None, stderr_tail: str) -> str:
    # One line per diagnostic (ssh ends its lines with \r\n): "; " keeps them apart in a
    # one-line error.
    lines = [line.strip() for line in stderr_tail.splitlines() if line.strip()]
    return f"{program} exited {returncode}" + (f": {'; '.join(lines)}" if lines else "")


def _check(
    spec: TransferSpec, prepared: Prepared, outcome: RunOutcome, wire: Wire | None
) -> tuple[bool, bool, list[str]]:
    """Integrity and transport checks of a command that exited 0: (verified, hashed:
    verified by sha256 too, problems)."""
    problems = []
    verified = hashed = False
    if spec.profile.produces_file:
        check = _verify(spec, prepared.context.values)
        verified, hashed = check.ok, check.ok and check.hashed
        if check is not UNVERIFIABLE and not check.ok:
            problems.append(f"verification: {check.detail}")
    else:
        # Memory to memory (iperf3): no file to verify (verified stays 0), but the tool's own
        # count says whether the dataset's size was sent at all.  Its receiver's count can be
        # short of it (bytes still in flight when the sender's count completes the test).
        size, sent = datasets.total_bytes(spec.dataset_config), outcome.reported.get("bytes_sent")
        if sent is None or sent < size:
            problems.append(
                f"verification: {spec.binary} reported "
                + (f"{sent:.0f} bytes sent of {size}" if sent is not None else "no byte count")
            )
    problems += _transport_problems(spec.expectation, wire)
    return verified, hashed, problems


def _verify(spec: TransferSpec, values: Mapping[str, str]) -> datasets.Verification:
    ds = spec.dataset_config
    if spec.direction == "download":
        sums = datasets.read_manifest(spec.remote.checksums)
        return datasets.verify_copy(Path(values["local_path"]), ds, sums)
    if not spec.remote.local_fs:
        return UNVERIFIABLE
    sums = datasets.read_manifest(Path(values["local_path"]).parent / datasets.MANIFEST)
    return datasets.verify_copy(Path(values["remote_path"]), ds, sums)


_stats_failures_logged: set[tuple[str, str]] = set()


def _say_once(spec: TransferSpec, problem: str) -> None:
    """A fact of the site (a stats command that fails), logged once per remote and reason."""
    if (spec.remote.name, problem) not in _stats_failures_logged:
        _stats_failures_logged.add((spec.remote.name, problem))
        log.warning("%s", problem)


def _remote_stats_failed(spec: TransferSpec, error: str) -> str:
    """The reason the remote's TCP state is absent, logged once: the transfer itself is
    measured all the same."""
    note = f"remotes.{spec.remote.name}.stats_command: {error or 'no listing'}; the remote's TCP state is absent"
    _say_once(spec, note)
    return note


def _sender_retransmits(sender: TcpSummary | None, outcome: RunOutcome) -> tuple[int | None, str]:
    if sender is not None and sender.sockets:
        return sender.retransmits, "kernel"
    if "retransmits" in outcome.reported:
        return int(outcome.reported["retransmits"]), "iperf3"
    return None, ""


def _sender_congestion_control(prepared: Prepared, ran: Ran) -> str:
    sender = ran.tcp_remote if prepared.subject.direction == "download" else ran.tcp_local
    return sender.congestion_control if sender else ""


def _series(spec: TransferSpec) -> SeriesKey:
    return SeriesKey(spec.protocol, spec.remote.name, spec.dataset, spec.direction)


def _keep_pcap(pcap: Path, keep_dir: Path, key: SeriesKey, start: float) -> Path:
    keep_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # captures show who talked to whom
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start))
    name = f"{key.protocol}_{key.remote}_{key.dataset}_{key.direction}_{stamp}_{uuid.uuid4().hex[:6]}.pcap"
    target = keep_dir / name
    shutil.move(pcap, target)
    return target
