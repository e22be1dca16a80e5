"""A large mesh: many remote sites x many protocol profiles x datasets x both directions,
as a configuration and as an exporter state full of results.  Shared by the exposition
tests and benchmarks/bench_metrics.py."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

from bigbinf.result import PAYLOAD_BUCKETS, PathBaseline, Result, SeriesKey, empty_histogram
from bigbinf.service.collector import ExporterState

# 20 profiles over the shipped modules, as a site would configure variants of each.
PROTOCOLS: dict[str, dict[str, Any]] = {
    "scp": {},
    "hpn-scp": {"module": "hpnscp"},
    "sftp": {},
    "rsync": {},
    "http": {},
    "xrootd": {},
    "iperf3": {},
    "iperf3-bbr": {"module": "iperf3", "options": {"congestion": "bbr"}},
    "bbftp": {},
    "bbftp-p4": {"module": "bbftp", "options": {"streams": 4}},
    "gridftp": {},
    "gridftp-p2": {"module": "gridftp", "options": {"parallel": 2}},
    "gridftp-p4": {"module": "gridftp", "options": {"parallel": 4}},
    "gridftp-p8": {"module": "gridftp", "options": {"parallel": 8}},
    "gridftp-cc2": {"module": "gridftp", "options": {"concurrency": 2}},
    "gridftp-cc4": {"module": "gridftp", "options": {"concurrency": 4}},
    "gridftp-p4-cc4": {"module": "gridftp", "options": {"parallel": 4, "concurrency": 4}},
    "scp-hpn-none": {"module": "hpnscp", "binary": "/opt/hpnssh/bin/scp"},
    "sftp-alt": {"module": "sftp", "binary": "/opt/openssh/bin/sftp"},
    "rsync-alt": {"module": "rsync", "binary": "/opt/rsync/bin/rsync"},
}
# GridFTP cannot remove what it uploaded: the site gives the command that does.
for _name, _profile in PROTOCOLS.items():
    if _profile.get("module", _name) == "gridftp":
        _profile["cleanup_command"] = ["ssh", "-i", "{key}", "{user}@{host}", "rm", "-f", "{remote_path}"]
DATASETS = {"f5m": "5MiB", "f64m": "64MiB", "f256m": "256MiB", "f1g": "1GiB", "f4g": "4GiB"}
DIRECTIONS = ("download", "upload")


def write_mesh_config(
    directory: Path, remotes: int = 10, protocols: int = 20, datasets: int = 5, payload_histograms: bool = True
) -> Path:
    """A configuration of remotes x protocols x datasets x 2 directions (2,000 series by
    default), on an hourly interval (the tests and the benchmark never reach a round),
    written to DIRECTORY/mesh.yaml with its ssh_config and journal beside it."""
    assert protocols <= len(PROTOCOLS) and datasets <= len(DATASETS)
    ssh_config = directory / "ssh_config"
    ssh_config.write_text(f"UserKnownHostsFile {directory / 'known_hosts'}\n")
    raw = {
        "remotes": {
            f"site{i:02d}": {
                "address": f"198.18.{10 + i}.2",
                "data_dir": "/data",
                "upload_dir": "/upload",
                "key": "/etc/bigbinf/id_ed25519",
                "ssh_config": str(ssh_config),
                "bandwidth": "10gbit",
            }
            for i in range(remotes)
        },
        "datasets": {name: {"file": f"{name}.bin", "size": size} for name, size in list(DATASETS.items())[:datasets]},
        "protocols": {
            name: {**profile, "directions": list(DIRECTIONS)} for name, profile in list(PROTOCOLS.items())[:protocols]
        },
        "schedule": {"interval": "1h"},
        "journal": {"path": str(directory / "journal.jsonl")},
        "metrics": {"payload_histograms": payload_histograms},
    }
    path = directory / "mesh.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def mesh_keys(remotes: int, protocols: int, datasets: int) -> list[SeriesKey]:
    return [
        SeriesKey(protocol, f"site{i:02d}", dataset, direction)
        for i in range(remotes)
        for protocol in list(PROTOCOLS)[:protocols]
        for dataset in list(DATASETS)[:datasets]
        for direction in DIRECTIONS
    ]


def mesh_result(key: SeriesKey, start: float, rng: random.Random, outcome: str = "ok") -> Result:
    """A plausible result for `key`, its numbers drawn from `rng`."""
    hist = empty_histogram()
    segments = rng.randint(3_000, 3_000_000)
    hist["down"][PAYLOAD_BUCKETS.index(1448)] = segments
    hist["down"][0] = rng.randint(0, 50)
    hist["up"][0] = segments // 2
    hist["up"][1] = rng.randint(0, 40)
    duration = rng.uniform(0.4, 4000.0)
    file_bytes = segments * 1448
    return Result(
        protocol=key.protocol,
        remote=key.remote,
        dataset=key.dataset,
        direction=key.direction,
        start_timestamp=start,
        outcome=outcome,
        duration_seconds=duration,
        file_bytes=file_bytes,
        files=1,
        verified=outcome == "ok",
        wire_bytes_down=file_bytes + segments * 66,
        wire_bytes_up=segments // 2 * 66,
        payload_bytes_down=file_bytes,
        payload_bytes_up=rng.randint(0, 4000),
        packets_down=segments + hist["down"][0],
        packets_up=segments // 2 + hist["up"][1],
        retransmits_wire=rng.randint(0, 500),
        payload_histogram=hist,
        transport="tcp",
        data_flows=rng.randint(1, 8),
        retransmits_sender=rng.randint(0, 900) if key.direction == "upload" else None,
        retransmits_sender_source="kernel" if key.direction == "upload" else "",
        tcp_local={"min_rtt_seconds": rng.uniform(0.001, 0.3)},
    )


def mesh_state(
    remotes: int, protocols: int, datasets: int, results_per_series: int = 2, payload_histograms: bool = True
) -> ExporterState:
    """The exporter's state after `results_per_series` rounds over the mesh: every series
    primed and measured, some transfers failed, a path baseline per remote."""
    rng = random.Random(12)
    keys = mesh_keys(remotes, protocols, datasets)
    state = ExporterState()
    state.set_payload_histograms(payload_histograms)
    state.record_config(True, when=1_763_000_000.0)
    state.prime(keys, schedule_interval=3660.0)
    start = 1_763_000_000.0
    for round_ in range(results_per_series):
        for i, key in enumerate(keys):
            outcome = "failed" if rng.random() < 0.05 else "ok"
            state.record(mesh_result(key, start + round_ * 3600 + i * 1.5, rng, outcome))
        state.record_round(len(keys) * 1.5, start + round_ * 3600 + len(keys) * 1.5)
    for i in range(remotes):
        state.record_path(
            PathBaseline(
                remote=f"site{i:02d}",
                start_timestamp=start + i,
                address=f"198.18.{10 + i}.2",
                probes_sent=20,
                probes_answered=20 - i % 3,
                rtt_min_seconds=0.01 + i / 1000,
                rtt_avg_seconds=0.011 + i / 1000,
                rtt_max_seconds=0.02 + i / 1000,
                rtt_mdev_seconds=0.0004,
                mtu_bytes=1500,
                bandwidth_bytes_per_second=1.25e9,
                bandwidth_source="configured",
                buffers={"local": {"tcp_rmem": 6291456.0, "tcp_wmem": 4194304.0}},
                congestion_control={"local": "cubic"},
            )
        )
    return state
