"""From a validated Config to the ordered list of transfers one round runs."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import Config, DatasetConfig, ProtocolConfig, RemoteConfig
from .lab import LabLayout
from .protocols import REGISTRY, Expectation, Profile
from .protocols.base import DATA_FLOW_BYTES


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


@dataclass(frozen=True)
class TransferSpec:
    protocol: str
    profile: Profile
    template: tuple[str, ...]
    remote: Remote
    dataset: str
    dataset_config: DatasetConfig
    direction: str
    timeout_seconds: float
    binary: str = ""
    kind: str = "file"  # "tree" for a many-files dataset
    options: Mapping[str, Any] = field(default_factory=dict)
    expectation: Expectation = Expectation()
    lab_servers: tuple[str, ...] = ()  # the lab servers it needs (a transfer to the lab only)
    cleanup: tuple[str, ...] = ()  # argv template removing an upload from a remote site; () = none
    # Programs on this host the transfer needs besides its command (third-party GridFTP
    # modes: the local GridFTP server); run_transfer skips it when one is missing.
    requires: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.protocol}/{self.remote.name}/{self.dataset}/{self.direction}"


def resolve_remote(name: str, remote: RemoteConfig, config: Config) -> Remote:
    if remote.lab:
        assert config.lab is not None  # guaranteed by validation
        layout = LabLayout(config.lab)
        return Remote(name=name, address=config.lab.remote_address, port=22, user="root",
                      key=layout.client_key, ssh_config=layout.ssh_config, data_dir=layout.data_dir,
                      upload_dir=layout.upload_dir, serve_root=layout.serve_root,
                      checksums=layout.checksums, netns=layout.client_ns, interface=layout.client_if,
                      password_env=remote.password_env, local_fs=True)
    assert remote.address and remote.data_dir  # guaranteed by validation
    return Remote(name=name, address=remote.address, port=remote.port, user=remote.user, key=remote.key,
                  ssh_config=remote.ssh_config, data_dir=remote.data_dir, upload_dir=remote.upload_dir,
                  serve_root=remote.serve_root or Path("/"), checksums=remote.checksums,
                  netns=remote.netns, interface=remote.interface, password_env=remote.password_env)


def _spec(config: Config, protocol: str, remote: str, dataset: str, direction: str) -> TransferSpec | None:
    proto = config.protocols[protocol]
    if direction not in proto.directions:
        return None
    profile = REGISTRY[proto.module or (protocol if protocol in REGISTRY else "command")]
    ds = config.datasets[dataset]
    kind = "tree" if ds.count > 1 else "file"
    options = profile.option_values(proto.options)
    own = proto.command if direction == "download" else proto.upload_command
    template = own or profile.commands(options).get((direction, kind))
    if template is None:
        return None  # e.g. HTTP cannot move a directory: not every protocol does every dataset
    expectation = profile.expect(options) if kind == "file" else _tree_expectation(profile, options, ds)
    remote_config = config.remotes[remote]
    return TransferSpec(protocol=protocol, profile=profile, template=tuple(template),
                        remote=resolve_remote(remote, remote_config, config),
                        dataset=dataset, dataset_config=ds, direction=direction,
                        timeout_seconds=proto.timeout or config.transfer.timeout,
                        binary=proto.binary or profile.binary, kind=kind, options=options,
                        requires=tuple(profile.local_binaries(options)),
                        expectation=expectation,
                        lab_servers=profile.lab_servers(options) if remote_config.lab else (),
                        cleanup=_cleanup(proto, profile, kind) if direction == "upload" and not remote_config.lab else ())


def _tree_expectation(profile: Profile, options: Mapping[str, Any], ds: DatasetConfig) -> Expectation:
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


def _cleanup(proto: ProtocolConfig, profile: Profile, kind: str) -> tuple[str, ...]:
    own = proto.cleanup_command
    return tuple(own if own is not None else profile.cleanup.get(kind, ()))


def plan_round(config: Config) -> list[TransferSpec]:
    """Transfers of one round, in a stable order (the schedule's list, or every combination)."""
    if config.schedule.transfers is not None:
        wanted = [(t.protocol, t.remote, t.dataset, t.direction) for t in config.schedule.transfers]
    else:
        wanted = list(itertools.product(config.protocols, config.remotes, config.datasets, ("download", "upload")))
    specs = [_spec(config, *w) for w in wanted]
    return [s for s in specs if s is not None]
