"""From a validated Config to the ordered list of transfers one round runs."""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bigbinf.config import Config, DatasetConfig, DatasetKind, ProtocolConfig, RemoteConfig, rate_bytes_per_second
from bigbinf.measure.path.probe import ProbeSettings
from bigbinf.process import in_netns
from bigbinf.protocols import REGISTRY, Expectation, Profile, module_for
from bigbinf.protocols.base import DATA_FLOW_BYTES, render
from bigbinf.result import SeriesKey


@dataclass(frozen=True)
class Remote:
    name: str
    address: str
    port: int
    user: str
    key: Path | None
    ssh_config: Path | None
    data_dir: Path
    upload_dir: Path | None
    serve_root: Path
    checksums: Path | None
    netns: str | None
    interface: str
    password_env: str | None
    local_fs: bool = False  # the remote's files are visible here (the lab): uploads can be verified
    probe: ProbeSettings = field(default_factory=ProbeSettings)
    # The path's bottleneck estimate from configuration ("configured", or "lab": the lab's
    # shaped rate); None leaves it to the last iperf3 test (service/rounds.py).
    bandwidth_bytes_per_second: float | None = None
    bandwidth_source: str = ""
    # The return path's capacity (the ACKs' way) from configuration; None: unknown.
    return_bandwidth_bytes_per_second: float | None = None
    # argv (rendered) that runs a command on the remote, to read its TCP state: () = it cannot be asked.
    stats_command: tuple[str, ...] = ()
    stats_interval: float = 1.0
    # argv (rendered) that runs a command as root on the remote, to set a transfer's
    # congestion control or buffer cap there (measure/tcp/tuning.py): () = it cannot be set.
    tcp_command: tuple[str, ...] = ()
    # The pid file of a userspace program on this host that carries the path (the lab's
    # delay line): its waits for a CPU are this host's (Result.host_busy).  None: none.
    path_pid_file: Path | None = None

    def tcp_argv(self, argv: list[str]) -> list[str]:
        """`argv` run as root on the remote through the tcp command; [] if there is none."""
        return in_netns(self.netns, [*self.tcp_command, *argv]) if self.tcp_command else []

    def stats_argv(self, argv: list[str]) -> list[str]:
        """`argv` run on the remote through the stats command, from this host's side of the path."""
        return in_netns(self.netns, [*self.stats_command, *argv])


class LabSite(Protocol):
    """What a `lab: true` remote stands for, supplied by the code that builds the lab
    (bigbinf.lab.site): the live path measures against a lab without importing it."""

    def remote(self, name: str, password_env: str | None) -> Remote:
        """The lab as a remote: its address, key, namespace and directories."""
        ...

    def unavailable(self, servers: tuple[str, ...]) -> str:
        """Why the lab cannot serve a transfer that needs these servers; "" if it can."""
        ...


class PlanError(Exception):
    """The config names a lab remote, but no lab was given to resolve it."""


@dataclass(frozen=True)
class TransferSpec:
    protocol: str
    profile: Profile[Any]
    template: tuple[str, ...]
    remote: Remote
    dataset: str
    dataset_config: DatasetConfig
    direction: str
    timeout_seconds: float
    options: Any  # the profile's own options dataclass
    binary: str = ""
    expectation: Expectation = field(default_factory=Expectation)
    # The lab servers it needs, and the lab that runs them (a transfer to the lab only):
    # run_transfer asks the lab before every transfer, and skips it, saying why, when
    # one of them is not run or not installed.
    lab_servers: tuple[str, ...] = ()
    lab: LabSite | None = None
    cleanup: tuple[str, ...] = ()  # argv template removing an upload from a remote site; () = none
    # Programs on this host the transfer needs besides its command (third-party GridFTP
    # modes: the local GridFTP server); run_transfer skips it when one is missing.
    requires: tuple[str, ...] = ()
    # The protocol's congestion and tcp_buffer_max: applied to the transfer's hosts
    # around the command and read back from their sockets (measure/tcp/tuning.py).
    congestion: str = ""
    tcp_buffer_max: int | None = None

    @property
    def kind(self) -> DatasetKind:
        return self.dataset_config.kind

    @property
    def label(self) -> str:
        return f"{self.protocol}/{self.remote.name}/{self.dataset}/{self.direction}"


def resolve_remote(name: str, remote: RemoteConfig, lab: LabSite | None) -> Remote:
    if remote.lab:
        if lab is None:
            raise PlanError(f"remotes.{name}: lab: true, but no lab was given to plan against")
        resolved = lab.remote(name, remote.password_env)
    else:
        resolved = _site_remote(name, remote)
    probe = remote.probe
    resolved = dataclasses.replace(
        resolved,
        probe=ProbeSettings(
            enabled=probe.enabled,
            method=probe.method,
            port=probe.port or resolved.port,
            count=probe.count,
            interval=probe.interval,
            timeout=probe.timeout,
            mtu=probe.mtu,
        ),
        stats_interval=remote.stats_interval,
    )
    if remote.bandwidth:  # the user's word beats the lab's rate
        resolved = dataclasses.replace(
            resolved, bandwidth_bytes_per_second=rate_bytes_per_second(remote.bandwidth), bandwidth_source="configured"
        )
    if remote.return_bandwidth:
        resolved = dataclasses.replace(
            resolved, return_bandwidth_bytes_per_second=rate_bytes_per_second(remote.return_bandwidth)
        )
    return resolved


def _site_remote(name: str, remote: RemoteConfig) -> Remote:
    assert remote.address and remote.data_dir  # guaranteed by validation
    values = {
        "host": remote.address,
        "port": str(remote.port),
        "user": remote.user,
        "key": str(remote.key or ""),
        "ssh_config": str(remote.ssh_config or "/dev/null"),
    }
    return Remote(
        name=name,
        address=remote.address,
        port=remote.port,
        user=remote.user,
        key=remote.key,
        ssh_config=remote.ssh_config,
        data_dir=remote.data_dir,
        upload_dir=remote.upload_dir,
        serve_root=remote.serve_root or Path("/"),
        checksums=remote.checksums,
        netns=remote.netns,
        interface=remote.interface,
        password_env=remote.password_env,
        stats_command=tuple(render(remote.stats_command, values)) if remote.stats_command else (),
        tcp_command=tuple(render(remote.tcp_command, values)) if remote.tcp_command else (),
    )


def _spec(
    config: Config, lab: LabSite | None, protocol: str, remote: str, dataset: str, direction: str
) -> TransferSpec | None:
    proto = config.protocols[protocol]
    if direction not in proto.directions:
        return None
    profile = REGISTRY[module_for(protocol, proto.module)]
    ds = config.datasets[dataset]
    options = profile.option_values(proto.options)
    own = proto.command if direction == "download" else proto.upload_command
    template = own or profile.commands(options).get((direction, ds.kind))
    if template is None:
        return None  # e.g. HTTP cannot move a directory: not every protocol does every dataset
    expectation = profile.expect(options) if ds.kind == "file" else _tree_expectation(profile, options, ds)
    remote_config = config.remotes[remote]
    return TransferSpec(
        protocol=protocol,
        profile=profile,
        template=tuple(template),
        remote=resolve_remote(remote, remote_config, lab),
        dataset=dataset,
        dataset_config=ds,
        direction=direction,
        timeout_seconds=proto.timeout or config.transfer.timeout,
        binary=proto.binary or profile.binary,
        options=options,
        requires=tuple(profile.local_binaries(options)),
        expectation=expectation,
        lab_servers=profile.lab_servers(options) if remote_config.lab else (),
        lab=lab if remote_config.lab else None,
        cleanup=_cleanup(proto, profile, ds.kind) if direction == "upload" and not remote_config.lab else (),
        congestion=proto.congestion or "",
        tcp_buffer_max=proto.tcp_buffer_max,
    )


def _tree_expectation(profile: Profile[Any], options: Any, ds: DatasetConfig) -> Expectation:
    """What a many-files transfer must show.  Per-file knobs (GridFTP -p 4) need not show
    with small files (-p 4 on 256 KiB files used one stream), so by default only the
    transport is enforced; a profile's expect_tree (GridFTP -cc N: N sessions) counts
    only as far as the dataset can fill it: at most one flow per file, and only if one
    file alone makes a flow a data flow."""
    file_expectation = profile.expect(options)
    if profile.expect_tree is None:
        return Expectation(transport=file_expectation.transport, min_data_flows=1)
    wanted = profile.expect_tree(options)
    flows = min(wanted.min_data_flows, ds.count) if ds.size >= DATA_FLOW_BYTES else 1
    return Expectation(transport=wanted.transport, min_data_flows=flows)


def _cleanup(proto: ProtocolConfig, profile: Profile[Any], kind: DatasetKind) -> tuple[str, ...]:
    own = proto.cleanup_command
    return tuple(own if own is not None else profile.cleanup.get(kind, ()))


def plan_remotes(config: Config, lab: LabSite | None = None) -> list[Remote]:
    """Every configured remote, resolved: the paths a round probes."""
    return [resolve_remote(name, remote, lab) for name, remote in config.remotes.items()]


def series_key(spec: TransferSpec) -> SeriesKey:
    return SeriesKey(spec.protocol, spec.remote.name, spec.dataset, spec.direction)


def plan_series(config: Config, lab: LabSite | None = None) -> list[SeriesKey]:
    """The series of one round (plan_round's transfers), in its order."""
    return [series_key(s) for s in plan_round(config, lab)]


def plan_round(config: Config, lab: LabSite | None = None) -> list[TransferSpec]:
    """Transfers of one round, in a stable order (the schedule's list, or every combination).

    `lab` resolves the config's `lab: true` remotes (bigbinf.lab.site(config)); a config
    without them needs none."""
    if config.schedule.transfers is not None:
        wanted = [(t.protocol, t.remote, t.dataset, t.direction) for t in config.schedule.transfers]
    else:
        wanted = list(itertools.product(config.protocols, config.remotes, config.datasets, ("download", "upload")))
    specs = [_spec(config, lab, *w) for w in wanted]
    return [s for s in specs if s is not None]


def host_key_warnings(config: Config) -> list[str]:
    """Remotes reached over ssh (a protocol whose lab server is sshd) that name no
    known_hosts: ssh runs in batch mode, so an unknown host key fails every transfer
    with "Host key verification failed." instead of asking."""
    ssh_protocols = [
        name
        for name, proto in config.protocols.items()
        if "sshd"
        in (profile := REGISTRY[module_for(name, proto.module)]).lab_servers(profile.option_values(proto.options))
    ]
    if not ssh_protocols:
        return []
    warnings = []
    for name, remote in config.remotes.items():
        if remote.lab:  # the lab writes its own ssh_config and known_hosts
            continue
        where = f"remotes.{name}.ssh_config"
        if remote.ssh_config is None:
            problem = "is not set"
        elif not remote.ssh_config.is_file():
            problem = f"{remote.ssh_config} does not exist"
        elif not re.search(
            r"^\s*(UserKnownHostsFile|GlobalKnownHostsFile|StrictHostKeyChecking\s*=?\s*(no|off|accept-new))\b",
            _read(remote.ssh_config),
            re.M | re.I,
        ):
            if (Path.home() / ".ssh" / "known_hosts").is_file():
                continue  # ssh falls back to the user's own known_hosts
            problem = f"{remote.ssh_config} names no UserKnownHostsFile and ~/.ssh/known_hosts does not exist"
        else:
            continue
        warnings.append(
            f"{where}: {problem}: {', '.join(ssh_protocols)} run ssh in batch mode, so the host key of "
            f"{remote.address} will fail verification; give an ssh_config with `UserKnownHostsFile FILE` holding "
            f"its key (`ssh-keyscan -p {remote.port} {remote.address} > FILE`, checked by hand)"
        )
    return warnings


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
