"""One transfer, measured from the wire: capture -> run -> stop -> analyse -> verify -> Result.

Whatever goes wrong (the command fails or hangs, the capture or the analysis fails, the
file is wrong), a Result is still returned with what was measured and an error that says
what happened; a transfer never raises into the round.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .analyse import Analysis, PcapError, analyse_pcap
from .capture import Capture, CaptureError, wait_linger
from .config import Config
from .lab import read_checksums
from .plan import TransferSpec
from .process import in_netns
from .protocols.base import RunContext, RunOutcome, render
from .result import Result

log = logging.getLogger(__name__)
HASH_CHUNK = 4 * 1024 * 1024


class SkipTransfer(Exception):
    """The transfer cannot run here (e.g. its binary is not installed)."""


@dataclass(frozen=True)
class Verification:
    ok: bool
    detail: str


def client_address_for(remote_address: str, netns: str | None) -> str:
    """The local source address the kernel uses to reach the remote (`ip route get`)."""
    argv = in_netns(netns, ["ip", "-o", "route", "get", remote_address])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    match = re.search(r"\bsrc (\S+)", proc.stdout)
    if proc.returncode != 0 or not match:
        raise CaptureError(f"no route to {remote_address}" + (f" in namespace {netns}" if netns else "")
                           + f": {proc.stderr.strip() or proc.stdout.strip()}")
    return match.group(1)


def placeholder_values(spec: TransferSpec, workdir: Path) -> dict[str, str]:
    remote, ds = spec.remote, spec.dataset_config
    return {
        "host": remote.address, "port": str(remote.port), "user": remote.user,
        "key": str(remote.key or ""), "ssh_config": str(remote.ssh_config or "/dev/null"),
        "remote_path": str(remote.data_dir / ds.file), "remote_dir": str(remote.data_dir),
        "file": ds.file, "local_path": str(workdir / ds.file), "local_dir": str(workdir),
        "size": str(ds.size),
    }


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(HASH_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def verify_download(spec: TransferSpec, local: Path) -> Verification:
    ds = spec.dataset_config
    if not local.exists():
        return Verification(False, f"no file arrived at {local}")
    size = local.stat().st_size
    if size != ds.size:
        return Verification(False, f"received {size} bytes, expected {ds.size}")
    expected = read_checksums(spec.remote.checksums).get(ds.file) if spec.remote.checksums else None
    if expected is None:
        return Verification(True, "size matches (no sha256 known for the remote file)")
    actual = sha256_file(local)
    if actual != expected:
        return Verification(False, f"sha256 {actual[:16]}... differs from the remote's {expected[:16]}...")
    return Verification(True, "size and sha256 match")


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def run_transfer(spec: TransferSpec, config: Config, round_id: str = "") -> Result:
    base = dict(protocol=spec.protocol, remote=spec.remote.name, dataset=spec.dataset,
                direction=spec.direction, round_id=round_id, file_bytes=spec.dataset_config.size, files=1,
                remote_address=spec.remote.address)
    binary = spec.profile.binary or spec.template[0]
    if shutil.which(binary) is None:
        return Result(start_timestamp=time.time(), outcome="skipped",
                      error=f"{binary} is not installed on this host", **base)
    config.transfer.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="bigbinf-", dir=config.transfer.workdir))
    try:
        return _measure(spec, config, workdir, base)
    finally:
        if not config.transfer.keep_files:
            shutil.rmtree(workdir, ignore_errors=True)


def _measure(spec: TransferSpec, config: Config, workdir: Path, base: dict) -> Result:
    secrets = []
    env = {}
    if spec.remote.password_env:
        secret = os.environ.get(spec.remote.password_env, "")
        secrets.append(secret)
        env[spec.remote.password_env] = secret
    ctx = RunContext(argv=render(spec.template, placeholder_values(spec, workdir)),
                     timeout_seconds=spec.timeout_seconds, workdir=workdir, netns=spec.remote.netns, env=env)
    cap_cfg = config.capture
    try:
        client = client_address_for(spec.remote.address, spec.remote.netns)
    except (CaptureError, OSError, subprocess.SubprocessError) as exc:
        return Result(start_timestamp=time.time(), outcome="failed", error=str(exc), **base)
    base["client_address"] = client
    pcap = workdir / "capture.pcap"
    capture = Capture(spec.remote.interface, pcap, client, spec.remote.address, netns=spec.remote.netns,
                      snaplen=cap_cfg.snaplen, buffer_bytes=cap_cfg.buffer,
                      start_timeout=cap_cfg.start_timeout) if cap_cfg.enabled else None
    try:
        if capture:
            capture.start()
        try:
            outcome: RunOutcome = spec.profile.runner(ctx)
            wait_linger(cap_cfg.linger)
        finally:
            stats = capture.stop() if capture else None
    except CaptureError as exc:
        return Result(start_timestamp=time.time(), outcome="failed", error=f"capture: {exc}", **base)

    errors: list[str] = []
    measured = dict(start_timestamp=outcome.start_timestamp, duration_seconds=outcome.duration_seconds,
                    capture_dropped=stats.dropped if stats else 0)
    if capture:
        try:
            measured.update(_from_analysis(analyse_pcap(pcap, client, spec.remote.address)))
        except PcapError as exc:
            errors.append(f"analysis: {exc}")
        if stats and stats.dropped:
            errors.append(f"tcpdump dropped {stats.dropped} packets: wire numbers are low")
        if cap_cfg.keep and pcap.exists():
            measured["pcap_path"] = str(_keep_pcap(pcap, config, spec, outcome.start_timestamp))

    if outcome.timed_out:
        kind = "timeout"
        errors.insert(0, f"killed after the {spec.timeout_seconds:g}s timeout")
    elif outcome.returncode != 0:
        kind = "failed"
        errors.insert(0, f"{ctx.argv[0]} exited {outcome.returncode}: {outcome.stderr_tail[-500:]}".strip())
    else:
        check = verify_download(spec, workdir / spec.dataset_config.file)
        measured["verified"] = check.ok
        kind = "ok" if check.ok and not any(e.startswith("analysis") for e in errors) else "failed"
        if not check.ok:
            errors.insert(0, f"verification: {check.detail}")
    return Result(outcome=kind, error=_redact("; ".join(errors), secrets), **base, **measured)


def _from_analysis(a: Analysis) -> dict:
    return dict(wire_bytes_down=a.wire_bytes["down"], wire_bytes_up=a.wire_bytes["up"],
                payload_bytes_down=a.payload_bytes["down"], payload_bytes_up=a.payload_bytes["up"],
                packets_down=a.packets["down"], packets_up=a.packets["up"],
                retransmits_wire=a.retransmits["down"] + a.retransmits["up"],
                first_packet_timestamp=a.first_packet_timestamp, last_packet_timestamp=a.last_packet_timestamp,
                payload_histogram=a.payload_histogram)


def _keep_pcap(pcap: Path, config: Config, spec: TransferSpec, start: float) -> Path:
    keep_dir = config.journal.path.parent / "pcaps"
    keep_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start))
    target = keep_dir / f"{spec.protocol}_{spec.remote.name}_{spec.dataset}_{spec.direction}_{stamp}_{uuid.uuid4().hex[:6]}.pcap"
    shutil.move(pcap, target)
    return target
