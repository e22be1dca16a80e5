"""One transfer, measured from the wire: capture -> run -> stop -> analyse -> verify -> Result.

Whatever goes wrong (the command fails or hangs, the capture or the analysis fails, the
file is wrong, the wire shows another transport than the profile claims), a Result is
still returned with what was measured and an error that says what happened; a transfer
never raises into the round.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from . import datasets, lab
from .analyse import Analysis, PcapError, analyse_pcap
from .capture import Capture, CaptureError, wait_linger
from .config import Config
from .plan import TransferSpec
from .process import in_netns, run_with_timeout
from .protocols.base import DATA_FLOW_BYTES, RunContext, RunOutcome, render
from .result import Result
from .sockstats import SocketWatch

log = logging.getLogger(__name__)
# Uploads to a remote whose files we cannot read: verified stays 0, the outcome is not
# made a failure for it.
UNVERIFIABLE = datasets.Verification(False, "uploads to this remote cannot be read back to verify")


def resolve(address: str) -> str:
    """An IP for the remote (configs may name hosts): routes and capture filters need one."""
    try:
        return socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)[0][4][0]
    except socket.gaierror as exc:
        raise CaptureError(f"cannot resolve {address}: {exc.strerror}") from None


def client_address_for(remote_address: str, netns: str | None) -> str:
    """The local source address the kernel uses to reach the remote (`ip route get`)."""
    argv = in_netns(netns, ["ip", "-o", "route", "get", remote_address])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    match = re.search(r"\bsrc (\S+)", proc.stdout)
    if proc.returncode != 0 or not match:
        raise CaptureError(f"no route to {remote_address}" + (f" in namespace {netns}" if netns else "")
                           + f": {proc.stderr.strip() or proc.stdout.strip()}")
    return match.group(1)


def upload_source(spec: TransferSpec, config: Config) -> Path:
    """The local copy an upload sends: created once per dataset, reused after."""
    root = config.transfer.workdir / "sources"
    root.mkdir(parents=True, exist_ok=True)
    datasets.ensure(root, spec.dataset_config)
    return root / spec.dataset_config.file


def placeholder_values(spec: TransferSpec, workdir: Path, local_source: Path | None = None,
                       upload_name: str = "", client: str = "") -> dict[str, str]:
    remote, ds = spec.remote, spec.dataset_config
    if spec.direction == "download":
        remote_path, local_path = remote.data_dir / ds.file, workdir / ds.file
    else:
        assert remote.upload_dir is not None and local_source is not None  # guaranteed by validation
        remote_path, local_path = remote.upload_dir / upload_name, local_source
    try:
        remote_name = str(remote_path.relative_to(remote.serve_root))
    except ValueError:
        remote_name = str(remote_path).lstrip("/")
    return {
        "host": remote.address, "client": client, "port": str(remote.port), "user": remote.user,
        "key": str(remote.key or ""), "ssh_config": str(remote.ssh_config or "/dev/null"),
        "remote_path": str(remote_path), "remote_name": remote_name, "remote_dir": str(remote_path.parent),
        "file": ds.file, "local_path": str(local_path), "local_dir": str(workdir),
        "size": str(datasets.total_bytes(ds)), "binary": spec.binary,
    }


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def run_transfer(spec: TransferSpec, config: Config, round_id: str = "") -> Result:
    ds = spec.dataset_config
    base: dict[str, Any] = dict(protocol=spec.protocol, remote=spec.remote.name, dataset=spec.dataset,
                                direction=spec.direction, round_id=round_id, file_bytes=datasets.total_bytes(ds),
                                files=ds.count, remote_address=spec.remote.address,
                                expected=spec.expectation.describe())
    binary = render(spec.template[:1], {"binary": spec.binary})[0] if spec.template else spec.binary
    missing = [program for program in (binary, *spec.requires) if shutil.which(program) is None]
    if missing:  # checked every round: installing the program brings the series back
        return Result(start_timestamp=time.time(), outcome="skipped",
                      error=f"{missing[0]} is not installed on this host", **base)
    if spec.lab_servers and config.lab is not None:
        reason = lab.missing_server(config, spec.lab_servers)
        if reason:
            return Result(start_timestamp=time.time(), outcome="skipped", error=reason, **base)
    unready = _unready(spec)
    if unready:  # before anything is uploaded, so there is nothing to clean up either
        return Result(start_timestamp=time.time(), outcome="failed", error=unready, **base)
    upload_name = f"{ds.file}.{uuid.uuid4().hex[:12]}" if spec.direction == "upload" else ""
    workdir: Path | None = None
    cleanup_problem = ""
    try:
        config.transfer.workdir.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix="bigbinf-", dir=config.transfer.workdir))
        result = _measure(spec, config, workdir, upload_name, base)
    except Exception as exc:  # a transfer never takes the round (and its other results) down
        log.exception("%s: unexpected error", spec.label)
        result = Result(start_timestamp=time.time(), outcome="failed",
                        error=f"internal error: {type(exc).__name__}: {exc}", **base)
    finally:
        if upload_name and workdir is not None:
            cleanup_problem = _remove_upload(spec, config, workdir, upload_name)
        if workdir is not None and not config.transfer.keep_files:
            shutil.rmtree(workdir, ignore_errors=True)
    if cleanup_problem:  # the measurement stands; the note says what was left on the remote
        result = dataclasses.replace(result, error="; ".join(filter(None, [result.error, cleanup_problem])))
    return result


CLEANUP_TIMEOUT_SECONDS = 120.0


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
    password = os.environ.get(remote.password_env, "") if remote.password_env else ""
    values = placeholder_values(spec, workdir, config.transfer.workdir / "sources" / spec.dataset_config.file,
                                upload_name)
    argv = render(spec.cleanup, values)
    try:
        done = run_with_timeout(in_netns(remote.netns, argv), CLEANUP_TIMEOUT_SECONDS, cwd=str(workdir),
                                env={remote.password_env: password} if remote.password_env else None)
    except OSError as exc:
        problem = f"{argv[0]}: {exc.strerror}"
    else:
        if done.returncode == 0:
            return ""
        problem = (f"killed after {CLEANUP_TIMEOUT_SECONDS:g}s" if done.timed_out
                   else _exited(argv[0], done.returncode, done.stderr_tail[-300:]))
    problem = _redact(f"cleanup: {values['remote_path']} stays on {remote.name}: {problem}", [password])
    log.warning("%s: %s", spec.label, problem)
    return problem


def _unready(spec: TransferSpec) -> str:
    """What on this host keeps the transfer from starting, said with its fix; "" if nothing."""
    remote = spec.remote
    if remote.netns and not lab.namespace_exists(remote.netns):
        if remote.local_fs:  # the lab's client namespace
            return (f"the lab is not up (no network namespace {remote.netns}): run "
                    "`bigbinf-exporter --config.file <this config> lab up`")
        return (f"remotes.{remote.name}.netns: network namespace {remote.netns} does not exist; create it "
                "or remove netns from the remote")
    if remote.key and not remote.key.exists():
        return f"remotes.{remote.name}.key: {remote.key} does not exist; give the path of the private key"
    return ""


def _measure(spec: TransferSpec, config: Config, workdir: Path, upload_name: str, base: dict[str, Any]) -> Result:
    password = os.environ.get(spec.remote.password_env, "") if spec.remote.password_env else ""
    try:
        source = upload_source(spec, config) if spec.direction == "upload" else None
        remote_ip = resolve(spec.remote.address)
        client = client_address_for(remote_ip, spec.remote.netns)
    except (CaptureError, OSError, subprocess.SubprocessError) as exc:
        return Result(start_timestamp=time.time(), outcome="failed", error=str(exc), **base)
    values = placeholder_values(spec, workdir, source, upload_name, client)
    # The secret reaches the command only through its environment (under the variable the
    # remote names, e.g. RSYNC_PASSWORD) or a private file a module writes; never argv.
    env = {spec.remote.password_env: password} if spec.remote.password_env else {}
    ctx = RunContext(argv=render(spec.template, values), timeout_seconds=spec.timeout_seconds, workdir=workdir,
                     netns=spec.remote.netns, env=env, values=values, options=spec.options,
                     direction=spec.direction, kind=spec.kind, password=password)
    base["client_address"] = client
    cap_cfg = config.capture
    pcap = workdir / "capture.pcap"
    base["remote_address"] = remote_ip
    capture = Capture(spec.remote.interface, pcap, client, remote_ip, netns=spec.remote.netns,
                      snaplen=cap_cfg.snaplen, buffer_bytes=cap_cfg.buffer,
                      start_timeout=cap_cfg.start_timeout) if cap_cfg.enabled else None
    # For uploads over TCP the local kernel is the sender: its per-socket count is the truth.
    watch = SocketWatch(remote_ip, spec.remote.netns) \
        if spec.direction == "upload" and spec.expectation.transport == "tcp" else None
    errors: list[str] = []
    try:
        if capture:
            capture.start()
    except CaptureError as exc:
        return Result(start_timestamp=time.time(), outcome="failed", error=f"capture: {exc}", **base)
    try:
        with ExitStack() as stack:
            if watch:
                stack.enter_context(watch)
            outcome: RunOutcome = spec.profile.runner(ctx)
            wait_linger(cap_cfg.linger)
    finally:
        if capture:
            try:
                capture.stop()
            except CaptureError as exc:  # the transfer's own outcome stays; the wire numbers are suspect
                errors.append(f"capture: {exc}")

    measured: dict[str, Any] = dict(start_timestamp=outcome.start_timestamp,
                                    duration_seconds=outcome.duration_seconds,
                                    capture_dropped=capture.stats.dropped if capture and capture.stats else 0)
    measured.update(_sender_retransmits(watch, outcome))
    if outcome.reported:
        measured["reported"] = dict(outcome.reported)
    if "mean_rtt_seconds" in outcome.reported:
        measured["rtt_seconds"] = outcome.reported["mean_rtt_seconds"]
    analysis = None
    if capture:
        try:
            analysis = analyse_pcap(pcap, client, remote_ip)
            measured.update(_from_analysis(analysis))
        except PcapError as exc:
            errors.append(f"analysis: {exc}")
        if capture.stats and capture.stats.dropped:
            errors.append(f"tcpdump dropped {capture.stats.dropped} packets: wire numbers are low")
        if cap_cfg.keep and pcap.exists():
            measured["pcap_path"] = str(_keep_pcap(pcap, config, spec, outcome.start_timestamp))

    if outcome.timed_out:
        errors.insert(0, f"killed after the {spec.timeout_seconds:g}s timeout")
        kind = "timeout"
    elif outcome.returncode != 0:
        errors.insert(0, _exited(ctx.argv[0], outcome.returncode, outcome.stderr_tail[-500:]))
        kind = "failed"
    else:
        problems = _check(spec, values, analysis, measured)
        errors[:0] = problems
        kind = "failed" if problems or any(e.startswith(("analysis", "capture")) for e in errors) else "ok"
    return Result(outcome=kind, error=_redact("; ".join(errors), [password]), **base, **measured)


def _exited(program: str, returncode: int | None, stderr_tail: str) -> str:
    return f"{program} exited {returncode}" + (f": {stderr_tail.strip()}" if stderr_tail.strip() else "")


def _check(spec: TransferSpec, values: dict[str, str], analysis: Analysis | None, measured: dict) -> list[str]:
    """Integrity and transport checks of a command that exited 0; sets measured['verified']."""
    problems = []
    if spec.profile.produces_file:
        check = _verify(spec, values)
        measured["verified"] = check.ok
        if check is not UNVERIFIABLE and not check.ok:
            problems.append(f"verification: {check.detail}")
    else:
        # Memory to memory (iperf3): no file to verify (verified stays 0), but the tool's own
        # count says whether the dataset's size was sent at all.  Its receiver's count can be
        # short of it (bytes still in flight when the sender's count completes the test).
        size, sent = datasets.total_bytes(spec.dataset_config), measured.get("reported", {}).get("bytes_sent")
        if sent is None or sent < size:
            problems.append(f"verification: {spec.binary} reported "
                            + (f"{sent:.0f} bytes sent of {size}" if sent is not None else "no byte count"))
    if analysis is not None:
        want, seen = spec.expectation, (measured.get("transport") or "nothing", measured.get("data_flows", 0))
        if seen[0] != want.transport or seen[1] < want.min_data_flows:
            problems.append(f"transport: expected {want.describe()}; the capture saw "
                            f"{seen[0].upper()} with {seen[1]} data flow{'s' if seen[1] != 1 else ''}")
    return problems


def _verify(spec: TransferSpec, values: dict[str, str]) -> datasets.Verification:
    ds = spec.dataset_config
    if spec.direction == "download":
        sums = datasets.read_manifest(spec.remote.checksums)
        return datasets.verify_copy(Path(values["local_path"]), ds, sums)
    if not spec.remote.local_fs:
        return UNVERIFIABLE
    sums = datasets.read_manifest(Path(values["local_path"]).parent / datasets.MANIFEST)
    return datasets.verify_copy(Path(values["remote_path"]), ds, sums)


def _sender_retransmits(watch: SocketWatch | None, outcome: RunOutcome) -> dict[str, Any]:
    if watch is not None and watch.retransmits is not None:
        return {"retransmits_sender": watch.retransmits, "retransmits_sender_source": "kernel"}
    if "retransmits" in outcome.reported:
        return {"retransmits_sender": int(outcome.reported["retransmits"]), "retransmits_sender_source": "iperf3"}
    return {}


def _from_analysis(a: Analysis) -> dict[str, Any]:
    data_flows = [f for f in a.flows if f.payload_bytes_down + f.payload_bytes_up >= DATA_FLOW_BYTES]
    main = max(data_flows, key=lambda f: f.payload_bytes_down + f.payload_bytes_up, default=None)
    return dict(wire_bytes_down=a.wire_bytes["down"], wire_bytes_up=a.wire_bytes["up"],
                payload_bytes_down=a.payload_bytes["down"], payload_bytes_up=a.payload_bytes["up"],
                packets_down=a.packets["down"], packets_up=a.packets["up"],
                retransmits_wire=a.retransmits["down"] + a.retransmits["up"],
                first_packet_timestamp=a.first_packet_timestamp, last_packet_timestamp=a.last_packet_timestamp,
                payload_histogram=a.payload_histogram, data_flows=len(data_flows),
                transport=main.transport if main else "")


def _keep_pcap(pcap: Path, config: Config, spec: TransferSpec, start: float) -> Path:
    keep_dir = config.journal.path.parent / "pcaps"
    keep_dir.mkdir(mode=0o700, parents=True, exist_ok=True)  # captures show who talked to whom
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start))
    name = f"{spec.protocol}_{spec.remote.name}_{spec.dataset}_{spec.direction}_{stamp}_{uuid.uuid4().hex[:6]}.pcap"
    target = keep_dir / name
    shutil.move(pcap, target)
    return target
