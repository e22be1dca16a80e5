"""The passive watcher through the real path (issue 46): transfers started by hand in the
lab's client namespace, outside the exporter (scp, curl, rsync, globus-url-copy -p 4),
while the watcher follows that namespace's connections with ss.  Each must appear as one
passive result whose bytes are the kernel's interface counters for it less the headers,
with four streams for -p 4; and a window cap on the receiver (tcp_rmem in the remote's
namespace) must get the verdict the scheduled transfer's judge gives under the same cap."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
import yaml

from bigbinf import lab
from bigbinf.config import Config, PassiveConfig
from bigbinf.journal.store import Journal
from bigbinf.lab import LabLayout
from bigbinf.measure.path.baseline import measure_path
from bigbinf.passive.watcher import PassiveWatcher
from bigbinf.process import unmarked_env
from bigbinf.result import PathBaseline, Result
from bigbinf.service.server import Exporter

from ..conftest import quiet_veth_counters
from ..support import verdicts
from ..support.prometheus import free_port

pytestmark = pytest.mark.lab

MiB = 2**20
# Per frame on this veth (offloads off): Ethernet 14, IPv4 20, TCP 20 plus options (at
# most 40; timestamps make it 32 on every data segment here).
HEADERS_MIN, HEADERS_MAX = 54, 94


@pytest.fixture(scope="module")
def site(make_module_lab) -> Config:  # type: ignore[no-untyped-def]
    causes = [c for c in verdicts.CAUSES if c.name == "receiver buffer cap (remote)" and c.protocol == "http"]
    config = verdicts.matrix_lab(make_module_lab, "wan", causes)
    # The datasets the hand-run transfers move (the lab writes them in its data dir).
    return config


@contextlib.contextmanager
def watching(config: Config, baseline: PathBaseline | None = None) -> Iterator[tuple[PassiveWatcher, list[Result]]]:
    layout = LabLayout(config.lab)
    passive = PassiveConfig.model_validate(
        {
            "enabled": True,
            "netns": layout.client_ns,
            # Named as the configured remote: its probe's baseline is what the judge reads.
            "remotes": {"lab": {"networks": [f"{config.lab.remote_address}/32"]}},
            "interval": "0.2s",
            "min_bytes": "4MiB",
        }
    )
    got: list[Result] = []
    watcher = PassiveWatcher(passive, got.append, baseline_of=lambda remote: baseline if remote == "lab" else None)
    watcher.start()
    try:
        yield watcher, got
    finally:
        watcher.stop()


def client(config: Config, *argv: str) -> None:
    """Run a command in the client namespace, by hand (not through the exporter)."""
    layout = LabLayout(config.lab)
    subprocess.run(
        ["ip", "netns", "exec", layout.client_ns, *argv],
        check=True,
        capture_output=True,
        timeout=60,
        env=unmarked_env(),
    )


def wait_for(got: list[Result], n: int, timeout: float = 15.0) -> list[Result]:
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    return list(got)


def by_hand(config: Config, tmp: str) -> dict[str, list[str]]:
    layout = LabLayout(config.lab)
    addr = config.lab.remote_address
    data = layout.data_dir
    commands = {
        "scp": ["scp", "-q", "-B", "-F", str(layout.ssh_config), f"root@{addr}:{data}/f8m.bin", f"{tmp}/scp.bin"],
        "curl": ["curl", "-sS", "--fail", "-o", f"{tmp}/curl.bin", f"http://{addr}/data/f8m.bin"],
        "rsync": [
            "rsync",
            "-q",
            "-e",
            f"ssh -F {layout.ssh_config}",
            f"root@{addr}:{data}/f8m.bin",
            f"{tmp}/rsync.bin",
        ],
    }
    if shutil.which("globus-url-copy"):
        commands["globus-url-copy -p 4"] = [
            "globus-url-copy",
            "-p",
            "4",
            f"ftp://{addr}:2811{data}/f8m.bin",
            f"file://{tmp}/gridftp.bin",
        ]
    return commands


def test_hand_run_transfers_are_one_result_each_with_the_interfaces_bytes(site: Config, tmp_path) -> None:  # type: ignore[no-untyped-def]
    tmp = str(tmp_path)
    subprocess.run(["chmod", "0777", tmp], check=True)
    with watching(site) as (watcher, got):
        for name, argv in by_hand(site, tmp).items():
            before = quiet_veth_counters(site)
            seen = len(got)
            client(site, *argv)
            results = wait_for(got, seen + 1)
            after = quiet_veth_counters(site)
            time.sleep(watcher.tracker.linger + 0.5)  # no second result for the same transfer
            assert len(got) == seen + 1, (name, [(r.protocol, r.file_bytes, r.data_flows) for r in got[seen:]])
            r = results[-1]
            assert (r.source, r.remote, r.direction, r.outcome) == ("passive", "lab", "download", "ok"), name
            assert r.file_bytes >= 8 * MiB, name
            # The bytes the kernel's counters saw come down, less each frame's headers, are
            # the bytes the result says were received (retransmissions aside: none here).
            wire, packets = after["down"] - before["down"], after["packets_down"] - before["packets_down"]
            assert HEADERS_MIN * packets <= wire - r.file_bytes <= HEADERS_MAX * packets, (name, wire, r.file_bytes)
            streams = 4 if "-p 4" in name else 1
            assert r.data_flows == streams, (name, r.data_flows)
            assert r.program, name  # the owner's command name, from ss -p
            assert r.argv == []  # record_commands is off
            assert r.duration_seconds > 0 and r.tcp_local["bytes_received"] >= 8 * MiB
    assert watcher.counts.skipped == 0 and watcher.tracker.flows == {}


def test_a_window_cap_gets_the_scheduled_judges_verdict(site: Config, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (cause,) = [c for c in verdicts.CAUSES if c.name == "receiver buffer cap (remote)" and c.protocol == "http"]
    # A 96 KiB cap (a window bound near 1.4 MB/s over the 44 ms path), not the cause's
    # 256 KiB (3.7 MB/s): far below what the lab's userspace delay line carries on a busy
    # host, whose probe then measured the path below the window's bound (CI: the scheduled
    # judge named link_capacity, the lower of the two bounds both met).
    cause = dataclasses.replace(cause, setup=verdicts.capped("remote", verdicts.RMEM, 96 * 1024))
    scheduled = verdicts.run_cause(site, cause)  # the exporter's own transfer, judged
    assert scheduled.outcome == "ok", scheduled.error
    layout = LabLayout(site.lab)
    addr = site.lab.remote_address
    source = layout.data_dir / f"{cause.dataset}.bin"
    (spec,) = [s for s in verdicts.lab_specs(site) if (s.protocol, s.direction) == ("http", "upload")]
    with cause.setup(site):
        baseline = measure_path(spec.remote)  # the round's probe, as the exporter keeps it
        with watching(site, baseline) as (_watcher, got):
            client(
                site, "curl", "-sS", "--fail", "-T", str(source), f"http://{addr}/upload/passive-{tmp_path.name}.bin"
            )
            (r,) = wait_for(got, 1)
    client(site, "curl", "-sS", "--fail", "-X", "DELETE", f"http://{addr}/upload/passive-{tmp_path.name}.bin")
    assert (r.direction, r.protocol, r.data_flows) == ("upload", "http", 1)
    assert (
        (r.limited_by, r.limited_side) == (scheduled.limited_by, scheduled.limited_side) == ("receive_window", "remote")
    ), (
        r.limited_evidence,
        scheduled.limited_evidence,
    )
    assert r.limited_next_step and r.retransmits_sender_source == "kernel"


def test_the_exporter_journals_publishes_and_lists_them_and_flushes_an_open_one_at_its_stop(
    site: Config, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    layout = LabLayout(site.lab)
    raw = site.model_dump(mode="json", exclude_unset=True)
    raw["journal"] = {"path": str(tmp_path / "journal.jsonl")}
    raw["passive"] = {
        "enabled": True,
        "netns": layout.client_ns,
        "remotes": {"lab": {"networks": [f"{site.lab.remote_address}/32"]}},
        "interval": "0.2s",
        "min_bytes": "4MiB",
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    exporter = Exporter(path, listen=f"127.0.0.1:{free_port()}", lab=lab.site)
    exporter.start()
    addr = site.lab.remote_address
    slow: subprocess.Popen[bytes] | None = None
    try:
        client(
            site, "scp", "-q", "-B", "-F", str(layout.ssh_config), f"root@{addr}:{layout.data_dir}/f8m.bin", "/dev/null"
        )
        deadline = time.monotonic() + 15
        while not exporter.passive_results() and time.monotonic() < deadline:
            time.sleep(0.1)
        # An open transfer at the stop: curl held at 1 MiB/s, fetching the 8 MiB file four
        # times over one kept-alive connection (32 s), paused after 5 s (5 MiB, above
        # min_bytes) and stopped with the exporter. Four times: the paused curl's kernel goes
        # on receiving into its socket buffer (CI: the whole of one 8 MiB file arrived so).
        # Unmarked: a marker this worker's environment may carry (an earlier test's
        # exporter) must not make it the exporter's own, nor another start's to end.
        url = f"http://{addr}/data/f8m.bin"
        slow = subprocess.Popen(
            ["ip", "netns", "exec", layout.client_ns, "curl", "-sS", "--fail", "--limit-rate", "1M",
             *[a for _ in range(4) for a in ("-o", "/dev/null", url)]],
            stderr=subprocess.PIPE, env=unmarked_env(),
        )  # fmt: skip
        time.sleep(5)
        assert slow.poll() is None, (slow.returncode, slow.stderr.read() if slow.stderr else b"")
        # Held open: a stop that takes longer than curl's last 3 s on a busy host must still
        # find it open (CI: the whole file journaled when the stop outlasted it).
        slow.send_signal(signal.SIGSTOP)
        metrics = exporter.metrics.refresh().chunks("text")
        text = b"".join(metrics).decode()
    finally:
        exporter.stop()
        if slow is not None:
            slow.kill()
            slow.wait()
    (scp,) = [r for r in exporter.passive_results() if r.protocol == "ssh"]
    assert scp.program == "ssh" and scp.direction == "download"  # scp's ssh holds the socket
    assert 'bigbinf_passive_transfers_total{direction="download",remote="lab",service="ssh",verdict=' in text
    journaled = [r for r in Journal(tmp_path / "journal.jsonl").read() if r.source == "passive"]
    assert {r.protocol for r in journaled} == {"ssh", "http"}  # the open curl too, at the stop
    (http,) = [r for r in journaled if r.protocol == "http"]
    assert 4 * MiB <= http.file_bytes < 3 * 8 * MiB and http.program == "curl"  # open, not done
