"""`lab serve`: the remote side's servers in the current network namespace, as the
compose demo remote runs them.  A namespace stands in for the container."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
import yaml

from bigbinf import lab
from bigbinf.config import parse_config
from bigbinf.lab import LabLayout
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer
from tests.support import session

from ..conftest import LAB_ROOT
from ..support.exporter import start_lab_serve

pytestmark = pytest.mark.lab


def test_lab_serve_runs_the_servers_in_place(make_lab, tmp_path: Path) -> None:
    net = make_lab(servers=[])  # namespaces and link only: nothing listens yet
    net_layout = LabLayout(net.lab)
    name = session.unique_name("bbs", 7)
    state = LAB_ROOT / f"bigbinf-{name}"
    serve_raw = {
        "lab": {
            "name": name,
            "state_dir": str(state),
            "remote_address": net.lab.remote_address,
            "servers": ["sshd", "vsftpd", "nginx"],
        },
        "remotes": {"lab": {"lab": True}},
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {"scp": {}},
    }
    serve_file = tmp_path / "serve.yaml"
    serve_file.write_text(yaml.safe_dump(serve_raw))
    srv = state / "srv"
    client_raw = {
        "remotes": {
            "site": {
                "address": net.lab.remote_address,
                "key": str(state / "client_ed25519"),
                "ssh_config": str(state / "ssh_config"),
                "data_dir": str(srv / "data"),
                "serve_root": str(srv),
                "checksums": str(srv / "data" / "SHA256SUMS"),
                "netns": net_layout.client_ns,
                "interface": net_layout.client_if,
            }
        },
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {"scp": {}, "ftp": {}, "http": {}},
        "transfer": {"workdir": str(tmp_path / "work")},
        "journal": {"path": str(tmp_path / "j.jsonl")},
    }
    client = parse_config(yaml.safe_dump(client_raw), "client.yaml")
    proc = None
    try:
        proc = start_lab_serve(net_layout.remote_ns, serve_file, state, timeout=60)
        results = [run_transfer(spec, client, "test") for spec in plan_round(client, lab.site(client))]
        assert sorted((r.protocol, r.outcome, r.verified) for r in results) == [
            ("ftp", "ok", True),
            ("http", "ok", True),
            ("scp", "ok", True),
        ], [r.error for r in results]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert not (state / "ready").exists()
        # Every server it started is gone with it.
        left = subprocess.run(["ip", "netns", "pids", net_layout.remote_ns], capture_output=True, text=True)
        assert left.stdout.split() == []
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        lab.teardown(LabLayout(parse_config(serve_file.read_text(), "serve.yaml").lab))
