"""Every protocol against its real server in the lab, both directions where possible.

Independent truths: the client veth's kernel counters (wire bytes per way), the
datasets' sha256 manifests (integrity), the capture's own flows (transport), and for
uploads the client namespace's TcpRetransSegs (nstat) for the sender's retransmits.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from exporter.config import Config
from exporter.lab import LabLayout
from exporter.labservers import SERVERS
from exporter.plan import TransferSpec, plan_round
from exporter.transfer import run_transfer

from .conftest import NOT_APPLICABLE, lab_config, nstat_retrans, veth_counters

pytestmark = pytest.mark.lab
BOTH = ["download", "upload"]
PROTOCOLS = {
    "scp": {}, "sftp": {}, "ftp": {}, "http": {}, "rsync": {}, "rsyncd": {}, "xrootd": {}, "iperf3": {},
    "gridftp": {},
    "gridftp-p4": {"module": "gridftp", "options": {"parallel": 4}},
    "gridftp-cc4": {"module": "gridftp", "options": {"concurrency": 4}},
    "gridftp-udt": {"module": "gridftp", "options": {"udt": True}},
}
DATASETS = {"f4m": {"file": "f4m.bin", "size": "4MiB"},
            # The many-small-files case, scaled down from the study's 1,000 x 1 MiB.
            "many": {"file": "many", "size": "64KiB", "count": 1000}}


@pytest.fixture(scope="module")
def lab(make_module_lab) -> Config:
    return make_module_lab(link={"rate": "1gbit", "burst": "128KiB"}, datasets=DATASETS,
                           protocols={name: {**cfg, "directions": BOTH} for name, cfg in PROTOCOLS.items()})


def _spec(config: Config, protocol: str, dataset: str, direction: str) -> TransferSpec:
    for spec in plan_round(config):
        if (spec.protocol, spec.dataset, spec.direction) == (protocol, dataset, direction):
            return spec
    raise AssertionError(f"no transfer {protocol}/{dataset}/{direction} in the plan")


def _transfer_checked(config: Config, spec: TransferSpec):
    before = veth_counters(config)
    result = run_transfer(spec, config, "test")
    after = veth_counters(config)
    assert result.outcome == "ok", result.error
    assert result.wire_bytes_down == after["down"] - before["down"]
    assert result.wire_bytes_up == after["up"] - before["up"]
    assert result.transport == spec.expectation.transport
    assert result.data_flows >= spec.expectation.min_data_flows
    return result


CASES = [(p, d) for p in PROTOCOLS if p != "gridftp-cc4" for d in BOTH]


@pytest.mark.parametrize("protocol,direction", CASES, ids=[f"{p}-{d}" for p, d in CASES])
def test_protocol_moves_a_file(lab: Config, protocol: str, direction: str) -> None:
    spec = _spec(lab, protocol, "f4m", direction)
    result = _transfer_checked(lab, spec)
    if protocol == "iperf3":
        # Memory to memory: no file to verify.  The sender's retransmits come from iperf3
        # when the remote sends, from our own kernel when we send.
        assert result.retransmits_sender_source == ("iperf3" if direction == "download" else "kernel")
        assert result.file_bytes > 0
        return
    assert result.verified
    assert result.file_bytes == 4 * 1024 * 1024
    # The data crossed the wire in the right direction.
    moved = result.payload_bytes_down if direction == "download" else result.payload_bytes_up
    assert moved >= result.file_bytes
    if direction == "upload" and spec.expectation.transport == "tcp":
        assert result.retransmits_sender_source == "kernel"
        assert result.retransmits_sender is not None


def test_gridftp_udt_moves_the_data_over_udp(lab: Config) -> None:
    result = _transfer_checked(lab, _spec(lab, "gridftp-udt", "f4m", "download"))
    assert result.transport == "udp" and result.verified
    # Only the control channels are TCP: almost every byte on the wire is UDP payload.
    assert result.payload_bytes_down >= result.file_bytes


def test_silent_fallback_to_tcp_is_a_failure(make_lab) -> None:
    # globus-url-copy -udt between client and server stays on TCP without a word; a
    # profile that expects UDT must not report that as a UDT result.
    config = make_lab(protocols={"udt-two-party": {
        "module": "gridftp", "options": {"udt": True},
        "command": ["globus-url-copy", "-udt", "ftp://{host}:2811{remote_path}", "file://{local_path}"]}})
    result = run_transfer(_spec(config, "udt-two-party", "f1m", "download"), config, "test")
    assert result.outcome == "failed"
    assert result.error == ("transport: expected UDP, >= 1 data flow; the capture saw TCP with 1 data flow")
    assert result.verified  # the file itself arrived fine: only the claim about it was wrong


def test_gridftp_parallel_streams_show_as_flows(lab: Config) -> None:
    result = _transfer_checked(lab, _spec(lab, "gridftp-p4", "f4m", "download"))
    assert result.data_flows >= 4
    assert result.expected == "TCP, >= 4 data flows"


@pytest.mark.parametrize("protocol", ["scp", "rsync", "gridftp-cc4", "sftp", "ftp", "xrootd", "rsyncd"])
def test_many_small_files_move_completely(lab: Config, protocol: str) -> None:
    result = _transfer_checked(lab, _spec(lab, protocol, "many", "download"))
    assert result.verified and result.files == 1000
    assert result.file_bytes == 1000 * 64 * 1024


@pytest.mark.parametrize("protocol", ["scp", "rsync", "gridftp-cc4"])
def test_many_small_files_upload(lab: Config, protocol: str) -> None:
    result = _transfer_checked(lab, _spec(lab, protocol, "many", "upload"))
    assert result.verified and result.files == 1000


def test_http_has_no_directory_transfer(lab: Config) -> None:
    assert not [s for s in plan_round(lab) if s.protocol == "http" and s.dataset == "many"]


def test_upload_sender_retransmits_equal_kernel_counter(make_lab) -> None:
    # A tbf queue too small for a TCP burst on the client's end: the client (the sender
    # of an upload) loses segments and retransmits them.
    config = make_lab(link={"rate": "200mbit", "burst": "32KiB", "limit": "20KiB"},
                      datasets={"f8m": {"file": "f8m.bin", "size": "8MiB"}},
                      protocols={"scp": {"directions": ["upload"]}})
    spec = _spec(config, "scp", "f8m", "upload")
    before = nstat_retrans(LabLayout(config.lab).client_ns)
    result = run_transfer(spec, config, "test")
    after = nstat_retrans(LabLayout(config.lab).client_ns)
    assert result.outcome == "ok", result.error
    assert result.retransmits_sender_source == "kernel"
    assert result.retransmits_sender > 0
    assert result.retransmits_sender == after - before


def test_iperf3_download_reports_the_remote_senders_retransmits(make_lab) -> None:
    # -R: the remote sends.  Its namespace's kernel counter is the truth iperf3 reports;
    # iperf3 counts its data stream, the namespace also its control connection.
    config = make_lab(link={"rate": "200mbit", "burst": "32KiB", "limit": "64KiB"},
                      datasets={"f8m": {"file": "f8m.bin", "size": "8MiB"}},
                      protocols={"iperf3": {}})
    remote_ns = LabLayout(config.lab).remote_ns
    before = nstat_retrans(remote_ns)
    result = run_transfer(_spec(config, "iperf3", "f8m", "download"), config, "test")
    after = nstat_retrans(remote_ns)
    assert result.outcome == "ok", result.error
    assert result.retransmits_sender_source == "iperf3"
    assert after - before > 0
    assert 0 <= (after - before) - result.retransmits_sender <= 2, (result.retransmits_sender, after - before)


@pytest.mark.parametrize("protocol,module,binary", [("hpn-scp", "hpnscp", "hpnscp"), ("bbftp", "bbftp", "bbftp")])
def test_profiles_without_their_binary_are_skipped(make_lab, protocol: str, module: str, binary: str) -> None:
    if shutil.which(binary):
        pytest.skip(f"{NOT_APPLICABLE}{binary} is installed, so it cannot be shown missing")
    config = make_lab(protocols={protocol: {"module": module}})
    result = run_transfer(_spec(config, protocol, "f1m", "download"), config, "test")
    assert result.outcome == "skipped"
    assert result.error == f"{binary} is not installed on this host"


def test_protocols_whose_lab_server_is_absent_are_skipped(make_lab, monkeypatch) -> None:
    # nginx "uninstalled" (a binary path that does not exist), vsftpd left out of lab.servers.
    monkeypatch.setitem(SERVERS, "nginx", dataclasses.replace(SERVERS["nginx"], binary="/nonexistent/nginx"))
    config = make_lab(servers=["sshd", "nginx"], protocols={"ftp": {}, "http": {}, "scp": {}})
    results = {s.protocol: run_transfer(s, config, "test") for s in plan_round(config)}
    assert results["ftp"].outcome == "skipped"
    assert results["ftp"].error == "the lab does not run vsftpd (lab.servers: sshd, nginx)"
    assert results["http"].outcome == "skipped"
    assert results["http"].error == "the lab's nginx server (/nonexistent/nginx) is not installed on this host"
    assert results["scp"].outcome == "ok", results["scp"].error


def _site_config(lab: Config, tmp: Path, datasets: dict, protocols: dict) -> Config:
    """The module's lab reached as an ordinary remote site: no lab shortcuts (uploads are
    not removed from its disk directly), the way a real data warehouse is configured."""
    layout = LabLayout(lab.lab)
    site = {"address": lab.lab.remote_address, "user": "root", "key": str(layout.client_key),
            "ssh_config": str(layout.ssh_config), "data_dir": str(layout.data_dir),
            "upload_dir": str(layout.upload_dir), "serve_root": str(layout.serve_root),
            "checksums": str(layout.checksums), "netns": layout.client_ns, "interface": layout.client_if}
    return lab_config(tmp, lab.lab.name, datasets=datasets, remotes={"site": site},
                      protocols={p: {"directions": ["upload"], **cfg} for p, cfg in protocols.items()})


UPLOAD_CLEANERS = [("f4m", p) for p in ("scp", "sftp", "rsync", "ftp", "http", "xrootd")] + \
                  [("many", p) for p in ("scp", "rsync", "ftp")]


@pytest.mark.parametrize("dataset,protocol", UPLOAD_CLEANERS, ids=[f"{p}-{d}" for d, p in UPLOAD_CLEANERS])
def test_uploads_to_a_site_are_removed_by_the_protocols_cleanup(lab: Config, tmp_path: Path,
                                                                dataset: str, protocol: str) -> None:
    config = _site_config(lab, tmp_path, {dataset: DATASETS[dataset]}, {protocol: {}})
    upload_dir = LabLayout(lab.lab).upload_dir
    assert list(upload_dir.iterdir()) == []
    spec = _spec(config, protocol, dataset, "upload")
    assert spec.cleanup and not spec.remote.local_fs
    # (Not the veth counters here: the removal's own traffic is on the link, after the capture.)
    result = run_transfer(spec, config, "test")
    assert result.outcome == "ok" and result.error == "", result.error
    assert result.payload_bytes_up >= result.file_bytes  # it did arrive before it was removed
    assert list(upload_dir.iterdir()) == []


def test_a_failed_cleanup_keeps_the_measurement_and_says_what_stays(lab: Config, tmp_path: Path) -> None:
    upload_dir = LabLayout(lab.lab).upload_dir
    try:
        config = _site_config(lab, tmp_path, {"f4m": DATASETS["f4m"]},
                              {"scp": {"cleanup_command": ["false"]}, "sftp": {"cleanup_command": []}})
        failing, left = (run_transfer(_spec(config, p, "f4m", "upload"), config, "test") for p in ("scp", "sftp"))
        assert failing.outcome == "ok" and failing.throughput_bytes_per_second > 0
        assert re.fullmatch(rf"cleanup: {upload_dir}/f4m\.bin\.[0-9a-f]{{12}} stays on site: false exited 1",
                            failing.error), failing.error
        assert left.outcome == "ok" and left.error == ""
        # Both stay: one because removing it failed, one because the config says so.
        assert len(list(upload_dir.iterdir())) == 2
    finally:
        for leftover in upload_dir.iterdir():
            leftover.unlink()
