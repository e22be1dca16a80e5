"""Failures that say why, through the real path against a plain remote (the lab's sshd
and iperf3 server addressed as a user would address a real site, not `lab: true`).

Truth: the failure the test itself arranged (a host that does not exist, a key the
server does not know, a host key that is not the server's, a session killed on the
remote, a port with no server), checked against what the result's error says.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from bigbinf.config import Config, parse_config
from bigbinf.lab import LabLayout
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.result import Result

pytestmark = pytest.mark.lab
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def lab_config(make_module_lab) -> Config:
    return make_module_lab(
        link={"rate": "100mbit"},
        datasets={"f1m": {"file": "f1m.bin", "size": "1MiB"}, "f32m": {"file": "f32m.bin", "size": "32MiB"}},
        servers=["sshd", "iperf3"],
    )


def _site(config: Config, tmp: Path, protocol: str, dataset: str, direction: str = "download", **remote) -> Config:
    """The lab as a plain remote; `remote` overrides its keys (address, key, ssh_config)."""
    layout = LabLayout(config.lab)
    site = {
        "address": config.lab.remote_address,
        "key": str(layout.client_key),
        "ssh_config": str(layout.ssh_config),
        "data_dir": str(layout.data_dir),
        "upload_dir": "/tmp",
        "netns": layout.client_ns,
        "interface": layout.client_if,
        "probe": {"enabled": False},
        **remote,
    }
    raw = {
        "remotes": {"site": site},
        "protocols": {protocol: {"directions": [direction]}},
        "datasets": {dataset: config.datasets[dataset].model_dump(mode="json")},
        "transfer": {"workdir": str(config.transfer.workdir), "timeout": "1m"},
        "journal": {"path": str(tmp / "journal.jsonl")},
    }
    return parse_config(yaml.safe_dump(raw), str(tmp / "site.yaml"))


def _run(config: Config) -> Result:
    (spec,) = plan_round(config)
    return run_transfer(spec, config, "errors")


def _new_key(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def _ssh_config_with(tmp: Path, config: Config, old: Path, new: Path) -> Path:
    """The lab's ssh_config with one of its files (key, known_hosts) replaced."""
    path = tmp / "ssh_config"
    path.write_text(LabLayout(config.lab).ssh_config.read_text().replace(str(old), str(new)))
    return path


@pytest.mark.parametrize("protocol", ["scp", "sftp"])
def test_an_unreachable_host_is_named(lab_config: Config, tmp_path: Path, protocol: str) -> None:
    # In the lab's subnet, but no host has it: the client's ARP goes unanswered.
    result = _run(_site(lab_config, tmp_path, protocol, "f1m", address="198.18.0.77"))
    assert result.outcome == "failed"
    assert "connect to host 198.18.0.77 port 22: No route to host" in result.error, result.error


@pytest.mark.parametrize("protocol", ["scp", "sftp"])
def test_a_key_the_server_does_not_know_is_named(lab_config: Config, tmp_path: Path, protocol: str) -> None:
    key = _new_key(tmp_path / "stranger_ed25519")
    # The lab's ssh_config names the lab key; this remote's names only the stranger.
    ssh_config = _ssh_config_with(tmp_path, lab_config, LabLayout(lab_config.lab).client_key, key)
    result = _run(_site(lab_config, tmp_path, protocol, "f1m", key=str(key), ssh_config=str(ssh_config)))
    assert result.outcome == "failed"
    assert "Permission denied (publickey" in result.error, result.error


@pytest.mark.parametrize("protocol", ["scp", "sftp"])
def test_a_host_key_that_is_not_the_servers_is_named(lab_config: Config, tmp_path: Path, protocol: str) -> None:
    other = _new_key(tmp_path / "other_host_key")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"{lab_config.lab.remote_address} {other.with_suffix('.pub').read_text()}")
    ssh_config = _ssh_config_with(tmp_path, lab_config, LabLayout(lab_config.lab).known_hosts, known_hosts)
    result = _run(_site(lab_config, tmp_path, protocol, "f1m", ssh_config=str(ssh_config)))
    assert result.outcome == "failed"
    assert "Host key verification failed" in result.error, result.error


def test_a_server_session_killed_mid_transfer_is_named(lab_config: Config, tmp_path: Path) -> None:
    remote_ns = LabLayout(lab_config.lab).remote_ns
    killed = threading.Event()

    def kill_the_session() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not killed.is_set():
            # The per-connection sshd ("sshd: root@notty") runs in the remote's namespace.
            found = subprocess.run(["pgrep", "-f", "sshd: root@notty"], capture_output=True, text=True).stdout.split()
            in_ns = subprocess.run(["ip", "netns", "pids", remote_ns], capture_output=True, text=True).stdout.split()
            mine = sorted(set(found) & set(in_ns))
            if mine:
                time.sleep(0.5)  # mid-transfer: 32 MiB take ~3 s at 100 Mbit/s
                subprocess.run(["kill", "-9", *mine], check=False)
                killed.set()
            time.sleep(0.05)

    killer = threading.Thread(target=kill_the_session, daemon=True)
    killer.start()
    result = _run(_site(lab_config, tmp_path, "scp", "f32m"))
    killer.join(25)
    assert killed.is_set()
    assert result.outcome == "failed"
    # ssh's own line says the connection broke under it (with -q only "Connection closed" was left).
    assert any(cause in result.error for cause in ("Broken pipe", "Connection reset", "closed by remote host")), (
        result.error
    )


def test_iperf3_connect_failure_says_why(lab_config: Config, tmp_path: Path) -> None:
    config = _site(lab_config, tmp_path, "iperf3", "f1m")
    raw = config.model_dump(mode="json", exclude_unset=True)
    raw["protocols"]["iperf3"]["options"] = {"port": 5299}  # no server listens there
    config = parse_config(yaml.safe_dump(raw), str(tmp_path / "iperf3.yaml"))
    result = _run(config)
    assert result.outcome == "failed"
    assert result.error.startswith("iperf3: unable to connect to server"), result.error
    assert "Connection refused" in result.error


def test_an_upload_that_never_connected_does_not_say_its_file_stays(lab_config: Config, tmp_path: Path) -> None:
    result = _run(_site(lab_config, tmp_path, "scp", "f1m", "upload", address="198.18.0.77"))
    assert result.outcome == "failed"
    assert "No route to host" in result.error
    assert "stays on" not in result.error, result.error
