"""Every protocol module against an IPv6 remote, through the real path.

The remote is a plain site (not `lab: true`) at an IPv6 address: a lab's namespaces and
link (`make_module_lab(servers=[])`, IPv4 only, as the lab builds it) get an IPv6 pair
(2001:2::/48, the benchmarking range, no DAD, static neighbours), and `lab serve` runs
the servers in the remote's namespace on its IPv6 address, as a site runs them.  A
GridFTP server in the client's namespace is the local end of third-party transfers.

Independent truths: the client veth's kernel counters (wire bytes per way), the
datasets' sha256 manifests (downloads), the uploaded files' sha256 read on the remote's
disk before the module's own cleanup removes them, and the remote's upload directory
left empty by that cleanup.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bigbinf import lab as lab_module
from bigbinf.config import Config, ConfigError, ProtocolConfig, parse_config
from bigbinf.lab import LabLayout
from bigbinf.lab import servers as labservers
from bigbinf.measure import datasets, transfer
from bigbinf.measure.plan import TransferSpec, plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.process import in_netns

from ..conftest import LAB_ROOT
from ..support.exporter import start_lab_serve

pytestmark = pytest.mark.lab

CLIENT6, REMOTE6 = "2001:2:0:27::1", "2001:2:0:27::2"
BOTH = ["download", "upload"]
# Each module once, both ways where it has both (rsyncd and the refused ones: download).
PROTOCOLS = {
    "scp": {"directions": BOTH},
    "hpn-scp": {"module": "hpnscp", "binary": "/usr/bin/scp"},  # scp's templates
    "sftp": {"directions": BOTH},
    "rsync": {"directions": BOTH},
    "rsyncd": {},
    "ftp": {"directions": BOTH},
    "http": {"directions": BOTH},
    "gridftp": {"directions": BOTH},
    "gridftp-pp": {"module": "gridftp", "options": {"pipelining": True}, "directions": BOTH},
    "xrootd": {"directions": BOTH},
    "iperf3": {"directions": BOTH},
    # A command of the user's own: {url_host} is the address as a URL takes it.
    "curl-get": {"command": ["curl", "-sS", "--fail", "-o", "{local_path}", "http://{url_host}/{remote_name}"]},
}
# IPv4 only: refused by --config.check for an IPv6 literal, and when the transfer starts
# for an address that resolves to IPv6.  (bbftp is not packaged here: `true` stands in,
# and never runs.)
IPV4_ONLY = {
    "bbftp": {"binary": "true"},
    "gridftp-udt": {"module": "gridftp", "options": {"udt": True}},
}
DATASETS = {
    "f1m": {"file": "f1m.bin", "size": "1MiB"},
    "many": {"file": "many", "size": "64KiB", "count": 20},
}
# The directory transfers: the modules whose tools copy trees (lftp's mirror for FTP).
TREES = {
    "scp": ["download"],  # (sftp, rsync, gridftp and xrootd name a tree's remote as they name a file's)
    "ftp": BOTH,  # lftp's mirror, not curl: its own URL
}
# The modules' own cleanups remove uploads from a site; where a module has none for a
# directory, ssh removes it (what a site would configure).
SSH_RM = ["ssh", "-F", "{ssh_config}", "-i", "{key}", "{user}@{host}", "rm", "-rf", "--", "{remote_path}"]


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def _add_ipv6(layout: LabLayout) -> None:
    """IPv6 on the lab's veth pair: addresses without DAD and static neighbours (no ND
    traffic), no link-local addresses (no router solicitations), no RAs accepted."""
    ends = ((layout.client_ns, layout.client_if, CLIENT6), (layout.remote_ns, layout.remote_if, REMOTE6))
    for ns, ifname, _ in ends:
        _run("ip", "-n", ns, "link", "set", ifname, "addrgenmode", "none")
        for key in (f"net.ipv6.conf.{ifname}.accept_ra=0", f"net.ipv6.conf.{ifname}.disable_ipv6=0"):
            _run(*in_netns(ns, ["sysctl", "-qw", key]))
    for (ns, ifname, address), (peer_ns, peer_if, peer_address) in zip(ends, reversed(ends), strict=True):
        _run("ip", "-n", ns, "addr", "add", f"{address}/64", "dev", ifname, "nodad")
        mac = _mac(peer_ns, peer_if)
        _run("ip", "-n", ns, "neigh", "replace", peer_address, "lladdr", mac, "dev", ifname, "nud", "permanent")


def _mac(ns: str, ifname: str) -> str:
    out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", ifname], capture_output=True, text=True, check=True)
    return str(json.loads(out.stdout)[0]["address"])


def _hosts(layout: LabLayout) -> None:
    """What `lab up` writes for GridFTP (it reverse-resolves its listen address) and
    xrootd (it resolves this host's name): the namespaces' private hosts files."""
    import socket

    text = (
        f"127.0.0.1 localhost\n::1 localhost\n127.0.1.1 {socket.gethostname()}\n"
        f"{CLIENT6} {layout.config.name}-client\n{REMOTE6} {layout.config.name}-remote\n"
    )
    for ns in (layout.client_ns, layout.remote_ns):
        labservers.write_file(labservers.netns_hosts(ns), text)


@pytest.fixture(scope="module")
def sites(make_module_lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Config]]:
    """The client's configs, per dataset: a plain remote at REMOTE6, served by `lab serve`."""
    net = make_module_lab(servers=[], link={"rate": "1gbit", "burst": "128KiB"})
    layout = LabLayout(net.lab)
    _add_ipv6(layout)
    _hosts(layout)
    # The serving lab: the same name (so its layout names the same namespaces), its own state.
    state = LAB_ROOT / f"bigbinf-{net.lab.name}-v6"
    serve_raw = {
        "lab": {
            "name": net.lab.name,
            "state_dir": str(state),
            "remote_address": REMOTE6,
            "client_address": CLIENT6,
            "servers": ["sshd", "vsftpd", "rsyncd", "nginx", "xrootd", "gridftp", "iperf3"],
            "datasets": list(DATASETS),
        },
        "remotes": {"lab": {"lab": True}},
        "datasets": DATASETS,
        "protocols": {"scp": {}},
    }
    tmp = tmp_path_factory.mktemp("v6")
    serve_file = tmp / "serve.yaml"
    serve_file.write_text(yaml.safe_dump(serve_raw))
    serve_layout = LabLayout(parse_config(serve_file.read_text(), "serve.yaml").lab)
    serve = local_gridftp = None
    try:
        serve = start_lab_serve(layout.remote_ns, serve_file, state)
        # The local end of pipelined (third-party) GridFTP transfers, on CLIENT6.
        argv = labservers._gridftp_argv_for(CLIENT6, serve_layout, "client")
        local_gridftp = subprocess.Popen(
            in_netns(layout.client_ns, argv), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        srv = state / "srv"
        protocols = {name: dict(cfg) for name, cfg in PROTOCOLS.items()}
        for name in ("gridftp", "gridftp-pp"):
            protocols[name]["cleanup_command"] = SSH_RM
        remote = {
            "address": REMOTE6,
            "key": str(state / "client_ed25519"),
            "ssh_config": str(state / "ssh_config"),
            "data_dir": str(srv / "data"),
            "upload_dir": str(srv / "upload"),
            "serve_root": str(srv),
            "checksums": str(srv / "data" / "SHA256SUMS"),
            "netns": layout.client_ns,
            "interface": layout.client_if,
            # The stats command of a site whose sockets can be read: its namespace here.
            "stats_command": ["ip", "netns", "exec", layout.remote_ns],
        }
        common = {
            "remotes": {"site": remote},
            # Reachable by other users: the local GridFTP server runs as nobody.
            "transfer": {"workdir": str(state / "work"), "timeout": "90s"},
            "journal": {"path": str(tmp / "journal.jsonl")},
        }
        # One config per dataset: a module's cleanup covers only the kinds it can remove.
        trees = {name: {**protocols[name], "directions": directions} for name, directions in TREES.items()}
        configs = {
            "f1m": {**common, "datasets": {"f1m": DATASETS["f1m"]}, "protocols": protocols},
            "many": {**common, "datasets": {"many": DATASETS["many"]}, "protocols": trees},
        }
        deadline = time.monotonic() + 30
        while not labservers.listening(LabLayout(net.lab), labservers.SERVERS["gridftp-client"]):
            assert local_gridftp.poll() is None and time.monotonic() < deadline, (
                "the local GridFTP server did not start"
            )
            time.sleep(0.1)
        yield {name: parse_config(yaml.safe_dump(raw), str(tmp / f"{name}.yaml")) for name, raw in configs.items()}
    finally:
        for proc in (local_gridftp, serve):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        lab_module.teardown(serve_layout)  # its state dir; the namespaces go with make_module_lab's lab
        shutil.rmtree(state, ignore_errors=True)


def _counters(config: Config) -> dict[str, int]:
    """The client veth's kernel counters: rx = down (remote -> client), tx = up."""
    remote = config.remotes["site"]
    assert remote.netns is not None
    out = subprocess.run(
        ["ip", "-n", remote.netns, "-j", "-s", "link", "show", remote.interface],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    stats = json.loads(out)[0]["stats64"]
    return {"down": stats["rx"]["bytes"], "up": stats["tx"]["bytes"], "packets_down": stats["rx"]["packets"]}


def _spec(config: Config, protocol: str, dataset: str, direction: str) -> TransferSpec:
    for spec in plan_round(config, lab_module.site(config)):
        if (spec.protocol, spec.dataset, spec.direction) == (protocol, dataset, direction):
            return spec
    raise AssertionError(f"no transfer {protocol}/{dataset}/{direction} in the plan")


class Uploads:
    """Around the module's cleanup of an upload (after the capture, before the removal):
    the sha256 of each file the upload left on the remote, read from its disk, and the
    veth's counters then (the cleanup's own session is not the transfer's)."""

    def __init__(self, config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sums: dict[str, str] = {}
        self.counters: dict[str, int] | None = None
        remove = transfer._remove_upload

        def reading_first(spec, config_, workdir, upload_name):  # type: ignore[no-untyped-def]
            self.counters = _counters(config)
            assert spec.remote.upload_dir is not None
            target = spec.remote.upload_dir / upload_name
            for path in sorted([target] if target.is_file() else target.rglob("*")):
                if path.is_file():
                    name = str(path.relative_to(target)) if path != target else ""
                    self.sums[name] = hashlib.sha256(path.read_bytes()).hexdigest()
            return remove(spec, config_, workdir, upload_name)

        monkeypatch.setattr(transfer, "_remove_upload", reading_first)


CASES = [(p, "f1m", d) for p, cfg in PROTOCOLS.items() for d in cfg.get("directions", ["download"])]
CASES += [(p, "many", d) for p, directions in TREES.items() for d in directions]


@pytest.mark.parametrize(("protocol", "dataset", "direction"), CASES, ids=[f"{p}-{s}-{d}" for p, s, d in CASES])
def test_every_module_moves_data_to_and_from_an_ipv6_remote(
    sites: dict[str, Config], protocol: str, dataset: str, direction: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = sites[dataset]
    spec = _spec(site, protocol, dataset, direction)
    uploads = Uploads(site, monkeypatch)
    before = _counters(site)
    result = run_transfer(spec, site, "test")
    after = uploads.counters or _counters(site)
    assert result.outcome == "ok", result.error
    assert (result.remote_address, result.client_address) == (REMOTE6, CLIENT6)
    assert result.wire_bytes_down == after["down"] - before["down"]
    assert result.wire_bytes_up == after["up"] - before["up"]
    assert result.transport == "tcp" and result.data_flows >= 1
    # Both ends' TCP state was read over IPv6 (ss filters on the /128): the sender's count.
    assert result.tcp_remote_note == "" and result.retransmits_sender_source == "kernel"
    ds = site.datasets[dataset]
    moved = result.payload_bytes_down if direction == "download" else result.payload_bytes_up
    if protocol == "iperf3":
        # iperf3 -n counts what its client wrote; an upload's client may close its data
        # connection before the socket's queue has drained (measured: 0.5-0.7 of 1 MiB
        # crossed).  The wire carries at least what the receiving iperf3 says it read.
        assert result.reported["bytes_sent"] >= datasets.total_bytes(ds)
        assert moved >= result.reported["bytes"] > 0
        return
    assert moved >= datasets.total_bytes(ds)
    manifest = datasets.read_manifest(spec.remote.checksums)
    if direction == "download":
        assert result.verified  # size and sha256 of every file against the remote's manifest
        return
    # Upload: what reached the remote is the upload's source, file by file (against the
    # source's own manifest), and the module's cleanup (ssh rm, curl DELE, lftp rm, HTTP
    # DELETE, xrdfs rm) removed it over IPv6.
    manifest = datasets.read_manifest(site.transfer.workdir / "sources" / datasets.MANIFEST)
    names = datasets.member_names(ds)
    if ds.count == 1:
        assert uploads.sums == {"": manifest[names[0]]}
    else:
        assert uploads.sums == {name.split("/", 1)[1]: manifest[name] for name in names}
    assert "stays on" not in result.error
    assert list((spec.remote.upload_dir or Path("/nonexistent")).iterdir()) == []


@pytest.mark.parametrize("protocol", list(IPV4_ONLY))
def test_ipv4_only_tools_are_refused_before_they_run(sites: dict[str, Config], protocol: str) -> None:
    # bbftp's client connects over AF_INET; GridFTP's UDT data channel binds IPv4 sockets
    # (seen here: the transfer then waits forever).  --config.check refuses the literal:
    site = sites["f1m"]
    raw = site.model_dump(mode="json", exclude_unset=True)
    raw["protocols"] = {protocol: IPV4_ONLY[protocol]}
    with pytest.raises(ConfigError, match=f"remotes.site.address: {REMOTE6} is IPv6, and protocol {protocol} reaches"):
        parse_config(yaml.safe_dump(raw), "v4only.yaml")
    # ... and a transfer to an address that is (or resolves to) IPv6 stops before it runs,
    # with the reason (the config here as it would be with a name: not checked at load).
    site = site.model_copy(update={"protocols": {protocol: ProtocolConfig.model_validate(IPV4_ONLY[protocol])}})
    before = _counters(site)
    result = run_transfer(_spec(site, protocol, "f1m", "download"), site, "test")
    after = _counters(site)
    assert result.outcome == "failed"
    assert result.error.startswith(f"{protocol} reaches a remote over IPv4 only (")
    assert f"and remote site is {REMOTE6}: give remotes.site.address an IPv4 address" in result.error
    assert result.duration_seconds == 0 and not result.wire_measured
    assert after["packets_down"] == before["packets_down"]  # nothing crossed
