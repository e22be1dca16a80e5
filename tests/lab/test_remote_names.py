"""A remote given by name, in its configured network namespace (issue 36): the name is
resolved where the transfer's tools resolve it, inside the namespace (`ip netns exec`
gives it /etc/netns/NAME/hosts), not in the exporter's own; and GridFTP to a name that
resolves to IPv6 runs with -ipv6, which the journal's argv shows.

Independent truths: the namespace's own hosts file (written here), the host's resolver
(which does not know the names), and the argv the stand-in globus-url-copy received.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bigbinf.config import parse_config
from bigbinf.journal.store import Journal
from bigbinf.measure.path.route import resolve
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.measure.wire.capture import CaptureError
from tests.support import session

pytestmark = pytest.mark.lab

V4_NAME_ADDRESS = "198.18.236.7"
V6_NAME_ADDRESS = "2001:2:0:36::7"  # the IPv6 benchmarking range, as tests/lab/test_ipv6.py uses it


@pytest.fixture
def namespace() -> Iterator[tuple[str, str, str]]:
    """A network namespace (loopback up, with the two addresses on it) with its own hosts
    file naming them: (namespace, v4 name, v6 name)."""
    tag = uuid.uuid4().hex[:6]
    ns, v4, v6 = f"bbtnm{tag}", f"bbt-v4-{tag}.test", f"bbt-v6-{tag}.test"
    etc = Path("/etc/netns") / ns
    subprocess.run(["ip", "netns", "add", session.register_netns(ns)], check=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        for address in (f"{V4_NAME_ADDRESS}/32", f"{V6_NAME_ADDRESS}/128"):
            subprocess.run(["ip", "-n", ns, "addr", "add", address, "dev", "lo", "nodad"], check=True)
        etc.mkdir(parents=True)
        (etc / "hosts").write_text(f"127.0.0.1 localhost\n{V6_NAME_ADDRESS} {v6}\n{V4_NAME_ADDRESS} {v4}\n")
        yield ns, v4, v6
    finally:
        shutil.rmtree(etc, ignore_errors=True)
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_a_name_is_resolved_inside_the_remotes_namespace(namespace: tuple[str, str, str]) -> None:
    ns, v4, v6 = namespace
    assert resolve(v4, ns) == V4_NAME_ADDRESS
    assert resolve(v6, ns) == V6_NAME_ADDRESS
    assert resolve("198.18.236.9", ns) == "198.18.236.9"  # an address: as it is
    with pytest.raises(CaptureError, match=f"cannot resolve {v4}: "):
        resolve(v4)  # the exporter's own namespace does not know it
    with pytest.raises(CaptureError, match=f"cannot resolve bbt-nowhere.test in network namespace {ns}"):
        resolve("bbt-nowhere.test", ns)


# Stands in for globus-url-copy: writes the argv it was given, then the file it was asked for.
STUB = """#!{python}
import json, sys
with open({argv_file!r}, "w") as f:
    json.dump(sys.argv, f)
target = sys.argv[-1].removeprefix("file://")
with open(target, "wb") as f:
    f.truncate(1024)
"""


def test_gridftp_to_a_name_that_resolves_to_ipv6_runs_and_journals_ipv6(
    namespace: tuple[str, str, str], tmp_path: Path
) -> None:
    ns, v4, v6 = namespace
    stub = tmp_path / "bin" / "globus-url-copy"
    stub.parent.mkdir()
    received = tmp_path / "argv.json"
    stub.write_text(STUB.format(python=sys.executable, argv_file=str(received)))
    stub.chmod(0o755)
    raw = {
        "remotes": {
            "six": {"address": v6, "netns": ns, "data_dir": "/data", "probe": {"enabled": False}},
            "four": {"address": v4, "netns": ns, "data_dir": "/data", "probe": {"enabled": False}},
        },
        "datasets": {"f1k": {"file": "f1k.bin", "size": "1KiB"}},
        "protocols": {"gridftp": {"binary": str(stub)}},
        "transfer": {"workdir": str(tmp_path / "work"), "timeout": "30s"},
        "capture": {"enabled": False},
        "journal": {"path": str(tmp_path / "journal.jsonl")},
    }
    config = parse_config(yaml.safe_dump(raw), str(tmp_path / "config.yaml"))
    journal = Journal(config.journal.path)
    ran = {}
    for spec in plan_round(config):
        result = run_transfer(spec, config)
        journal.append(result)
        assert received.exists(), result.error
        ran[spec.remote.name] = (result, json.loads(received.read_text()))
        received.unlink()
    six, six_argv = ran["six"]
    four, four_argv = ran["four"]
    assert six.outcome == "ok" and four.outcome == "ok", (six.error, four.error)
    assert six.remote_address == V6_NAME_ADDRESS and four.remote_address == V4_NAME_ADDRESS
    assert six_argv[1] == "-ipv6" and "-ipv6" not in four_argv  # what ran
    journaled = {r.remote: r.argv for r in journal.read()}
    assert journaled["six"][1] == "-ipv6" and "-ipv6" not in journaled["four"]  # what the journal says ran
    assert os.path.basename(journaled["six"][0]) == "globus-url-copy"
