"""What protocol profiles hand to their tools, and when they refuse to run, without a lab.

Independent truths: the argv a fake client executable records for itself (what the
kernel actually exec'd, not what our templates say), files on disk and their sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import stat
import sys
from pathlib import Path

import pytest
import yaml

from bigbinf import lab
from bigbinf.config import Config, DatasetConfig, parse_config
from bigbinf.measure import datasets
from bigbinf.measure.plan import TransferSpec, plan_round
from bigbinf.measure.transfer import run_transfer

from ..conftest import NOT_APPLICABLE

# A stand-in for bbftp: appends its argv to argv.jsonl beside itself, then does what the
# -e command asks with local files (the "remote" is a directory on this host), so the
# transfer completes and verifies like a real one.
FAKE_BBFTP = """\
import json, os, shutil, sys
from pathlib import Path
here = Path(__file__).resolve().parent
with open(here / "argv.jsonl", "a") as log:
    log.write(json.dumps(sys.argv) + "\\n")
args = sys.argv[1:]
verb, *paths = args[args.index("-e") + 1].split()
if verb == "get":
    shutil.copyfile(paths[0], paths[1])
elif verb == "put":
    shutil.copyfile(paths[0], paths[1])
elif verb == "rm":
    os.unlink(paths[0])
else:
    sys.exit(f"fake bbftp: unknown command {verb}")
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(f"#!{sys.executable}\n" + text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def fake_bbftp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bbftp on PATH that records its argv; returns the argv log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "bbftp", FAKE_BBFTP)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "argv.jsonl"


def _site(tmp: Path, protocols: dict, datasets_: dict, **sections) -> Config:
    """A remote site that is this host (127.0.0.1), its files in tmp: no lab, no capture."""
    data, upload = tmp / "site-data", tmp / "site-upload"
    data.mkdir()
    upload.mkdir()
    (tmp / "ssh_config").write_text("Host *\n  BatchMode yes\n")
    (tmp / "id_site").write_text("not a real key\n")
    raw = {
        "remotes": {
            "site": {
                "address": "127.0.0.1",
                "port": 2222,
                "user": "bbuser",
                "key": str(tmp / "id_site"),
                "ssh_config": str(tmp / "ssh_config"),
                "data_dir": str(data),
                "upload_dir": str(upload),
                "checksums": str(data / datasets.MANIFEST),
            }
        },
        "datasets": datasets_,
        "protocols": protocols,
        "capture": {"enabled": False},
        "transfer": {"workdir": str(tmp / "work"), "timeout": "1m"},
        "journal": {"path": str(tmp / "journal.jsonl")},
        **sections,
    }
    config = parse_config(yaml.safe_dump(raw), str(tmp / "config.yaml"))
    for ds in config.datasets.values():
        datasets.ensure(data, ds)
    return config


def _spec(config: Config, protocol: str, dataset: str, direction: str) -> TransferSpec:
    for spec in plan_round(config, lab.site(config)):
        if (spec.protocol, spec.dataset, spec.direction) == (protocol, dataset, direction):
            return spec
    raise AssertionError(f"no transfer {protocol}/{dataset}/{direction} in the plan")


def _option(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, argv
    return argv[argv.index(flag) + 1]


def test_bbftp_passes_the_remotes_ssh_identity_config_port_and_streams(tmp_path: Path, fake_bbftp: Path) -> None:
    config = _site(
        tmp_path,
        {"bbftp": {"options": {"streams": 4}, "directions": ["download", "upload"]}},
        {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
    )
    down = run_transfer(_spec(config, "bbftp", "f1m", "download"), config, "test")
    up = run_transfer(_spec(config, "bbftp", "f1m", "upload"), config, "test")
    assert down.outcome == "ok" and down.verified, down.error
    assert up.outcome == "ok", up.error
    assert list((tmp_path / "site-upload").iterdir()) == []  # the upload's cleanup ran, through bbftp too

    calls = [json.loads(line) for line in fake_bbftp.read_text().splitlines()]
    assert [_option(argv, "-e").split()[0] for argv in calls] == ["get", "put", "rm"]
    for argv in calls:
        assert Path(argv[0]).name == "bbftp"
        # ssh mode, but not -S: that would add StrictHostKeyChecking=no behind our back.
        assert "-s" in argv and "-S" not in argv
        assert _option(argv, "-u") == "bbuser"
        assert argv[-1] == "127.0.0.1"
        # bbftp splits -L itself (on white space, honouring quotes, no shell) and runs it
        # as ssh: the remote's config, key and port must be in it.
        ssh = shlex.split(_option(argv, "-L"))
        assert ssh[0] == "ssh"
        assert _option(ssh, "-F") == str(tmp_path / "ssh_config")
        assert _option(ssh, "-i") == str(tmp_path / "id_site")
        assert _option(ssh, "-p") == "2222"
        assert "BatchMode=yes" in ssh
    get, put, rm = calls
    # Streams on the transfers (the removal moves no data).
    assert _option(get, "-p") == "4" and _option(put, "-p") == "4"
    remote_file = tmp_path / "site-data" / "f1m.bin"
    assert _option(get, "-e").split()[1] == str(remote_file)
    assert _option(put, "-e").split()[2] == _option(rm, "-e").split()[1]
    assert Path(_option(rm, "-e").split()[1]).parent == tmp_path / "site-upload"


def test_bbftp_streams_are_its_expected_data_flows(tmp_path: Path) -> None:
    config = _site(tmp_path, {"bbftp": {"options": {"streams": 3}}}, {"f1m": {"file": "f1m.bin", "size": "1MiB"}})
    assert _spec(config, "bbftp", "f1m", "download").expectation.describe() == "TCP, >= 3 data flows"


def test_bbftp_in_the_lab_needs_bbftpd_on_the_remote(tmp_path: Path, fake_bbftp: Path) -> None:
    # The client is "installed" (the fake); the lab's remote has no bbftpd, which ssh
    # would start: skipped with that reason before any network step (the lab is not up).
    if shutil.which("bbftpd"):
        pytest.skip(f"{NOT_APPLICABLE}bbftpd is installed, so it cannot be shown missing")
    raw = {
        "lab": {"name": "bbtnolab", "state_dir": str(tmp_path / "lab")},
        "remotes": {"lab": {"lab": True}},
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {"bbftp": {}},
        "journal": {"path": str(tmp_path / "journal.jsonl")},
    }
    config = parse_config(yaml.safe_dump(raw), "t.yaml")
    result = run_transfer(_spec(config, "bbftp", "f1m", "download"), config, "test")
    assert result.outcome == "skipped"
    assert result.error == "the lab's bbftpd server (bbftpd) is not installed on this host"
    assert not fake_bbftp.exists()  # never ran


@pytest.mark.parametrize("mode", ["udt", "pipelining"])
def test_gridftp_third_party_modes_skip_without_a_local_gridftp_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # At a site (no lab to ask), the copy goes through a GridFTP server on this host: a
    # host without one is skipped naming it, not failed on a refused connection.
    if not shutil.which("globus-url-copy"):
        pytest.skip("globus-url-copy is not installed (scripts/setup.sh installs it): the client would be named")
    config = _site(tmp_path, {"gridftp": {"options": {mode: True}}}, {"f1m": {"file": "f1m.bin", "size": "1MiB"}})
    server = shutil.which("globus-gridftp-server")
    if server:
        # Present here (the lab needs it): hide it by leaving its directory off PATH.
        kept = [
            d for d in os.environ["PATH"].split(os.pathsep) if d and Path(d).resolve() != Path(server).resolve().parent
        ]
        monkeypatch.setenv("PATH", os.pathsep.join(kept))
        assert shutil.which("globus-gridftp-server") is None
    result = run_transfer(_spec(config, "gridftp", "f1m", "download"), config, "test")
    assert result.outcome == "skipped"
    assert result.error == "globus-gridftp-server is not installed on this host"


def test_gridftp_third_party_modes_copy_through_this_hosts_server(tmp_path: Path) -> None:
    # The argv of both modes (the lab tests run them: test_protocols_lab.py).
    config = _site(
        tmp_path,
        {
            "pp": {"module": "gridftp", "options": {"pipelining": True}},
            "udt": {"module": "gridftp", "options": {"udt": True}},
        },
        {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
    )
    pp, udt = (_spec(config, p, "f1m", "download") for p in ("pp", "udt"))
    assert pp.template[0] == "{binary}" and "-pp" in pp.template and pp.binary == "globus-url-copy"
    assert pp.template[-1] == "ftp://{url_client}:2811{local_path}"  # this host's server writes it
    assert udt.template[:3] == (sys.executable, "-m", "bigbinf.protocols.gridftp_udt")


# ---------------------------------------------------------------- verifying a set of files


MANY = DatasetConfig(file="many", size=4096, count=20)


def _received_set(tmp: Path) -> tuple[Path, dict[str, str]]:
    source = tmp / "source"
    source.mkdir()
    datasets.ensure(source, MANY)
    received = tmp / "received"
    shutil.copytree(source / "many", received / "many")
    return received / "many", datasets.read_manifest(source / datasets.MANIFEST)


def test_a_faithful_set_verifies(tmp_path: Path) -> None:
    copy, sums = _received_set(tmp_path)
    check = datasets.verify_copy(copy, MANY, sums)
    assert check.ok and check.detail == "20 files: sizes and sha256 match"


def test_one_corrupted_file_in_a_set_fails_verification_naming_it(tmp_path: Path) -> None:
    copy, sums = _received_set(tmp_path)
    victim = copy / "part-0013.bin"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one bit pattern flipped, size unchanged
    victim.write_bytes(bytes(data))
    actual = hashlib.sha256(bytes(data)).hexdigest()
    check = datasets.verify_copy(copy, MANY, sums)
    assert not check.ok
    assert check.detail == (
        f"many/part-0013.bin: sha256 {actual[:16]}... differs from the source's {sums['many/part-0013.bin'][:16]}..."
    )


def test_one_short_or_missing_file_in_a_set_fails_verification_naming_it(tmp_path: Path) -> None:
    copy, sums = _received_set(tmp_path)
    with open(copy / "part-0007.bin", "r+b") as f:
        f.truncate(100)
    check = datasets.verify_copy(copy, MANY, sums)
    assert (check.ok, check.detail) == (False, "many/part-0007.bin: received 100 bytes, expected 4096")
    (copy / "part-0007.bin").unlink()
    check = datasets.verify_copy(copy, MANY, sums)
    assert (check.ok, check.detail) == (False, "19 files arrived, expected 20")


# ---------------------------------------------------------------- IPv6 remotes

V6, V6_CLIENT = "2001:db8::2", "2001:db8::1"


def _ipv6_values() -> dict[str, str]:
    from bigbinf.protocols.base import PLACEHOLDERS
    from bigbinf.protocols.hosts import url_host

    values = {name: f"_{name}_" for name in PLACEHOLDERS}  # plain words, as render requires
    values.update(host=V6, url_host=url_host(V6), client=V6_CLIENT, url_client=url_host(V6_CLIENT))
    return values


@pytest.mark.parametrize(
    "module", sorted(m for m in __import__("bigbinf.protocols").protocols.REGISTRY if m != "command")
)
def test_every_template_brackets_an_ipv6_address_only_where_its_tool_needs_it(module: str) -> None:
    # Where the address is all of an argument (ssh's [user@]host, iperf3's, bbftp's
    # host), it goes bare; inside a URL or a host:path operand, in brackets (RFC 3986; scp, sftp and
    # rsync read "2001" as the host otherwise).  Every default command and cleanup, with
    # every option that changes the templates.
    from bigbinf.protocols import REGISTRY
    from bigbinf.protocols.base import render

    profile = REGISTRY[module]
    variants = [profile.option_values({})]
    if module == "gridftp":
        variants += [profile.option_values({"pipelining": True}), profile.option_values({"udt": True})]
    templates = [t for options in variants for t in profile.commands(options).values()]
    templates += list(profile.cleanup.values())
    assert templates
    for template in templates:
        for element in render(template, _ipv6_values()):
            for address in (V6, V6_CLIENT):
                # All of the argument, or ssh's user@host (nothing after it): bare.
                if address in element and element != address and not element.endswith("@" + address):
                    assert f"[{address}]" in element, (module, element)
                    assert element.replace(f"[{address}]", "").count(address) == 0, (module, element)


def test_url_host_brackets_ipv6_literals_only() -> None:
    from bigbinf.protocols.hosts import is_ipv6, url_host, url_hostport

    assert url_host("2001:db8::2") == "[2001:db8::2]"
    assert url_host("fe80::1%eth0") == "[fe80::1%eth0]"
    assert url_host("192.0.2.1") == "192.0.2.1"
    assert url_host("dtn.example.org") == "dtn.example.org"
    assert url_host("[2001:db8::2]") == "[2001:db8::2]"  # already bracketed: as it is
    assert url_hostport("2001:db8::2", 2811) == "[2001:db8::2]:2811"
    assert (is_ipv6("::1"), is_ipv6("127.0.0.1"), is_ipv6("localhost")) == (True, False, False)


def test_gridftp_adds_ipv6_for_an_ipv6_remote_only() -> None:
    from bigbinf.protocols.gridftp import with_ipv6

    argv = ["/usr/bin/globus-url-copy", "-p", "1", "ftp://[2001:db8::2]:2811/f", "file:///tmp/f"]
    assert with_ipv6(argv, V6) == [argv[0], "-ipv6", *argv[1:]]
    assert with_ipv6(argv, "192.0.2.1") == argv  # IPv4 transfers run as they always have
    assert with_ipv6([*argv[:1], "-ipv6", *argv[1:]], V6).count("-ipv6") == 1
    assert with_ipv6(["/opt/my-wrapper", "ftp://[2001:db8::2]/f"], V6) == ["/opt/my-wrapper", "ftp://[2001:db8::2]/f"]


def test_the_udt_driver_reads_bracketed_addresses() -> None:
    from bigbinf.protocols.gridftp_udt import split_hostport

    assert split_hostport("[2001:db8::2]:2811") == ("2001:db8::2", 2811)
    assert split_hostport("192.0.2.1:2812") == ("192.0.2.1", 2812)
    assert split_hostport("dtn.example.org:2811") == ("dtn.example.org", 2811)
