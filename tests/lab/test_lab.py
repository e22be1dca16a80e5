"""The lab's link: delay and loss (netem, or the userspace delay line where the kernel has
no netem), `up` idempotent, `status`, and `down` leaving nothing behind.

Independent truths: a TCP handshake timed from the client's namespace, tshark's initial
RTT on the capture, the client veth's kernel counters, the remote sender's nstat
TcpRetransSegs, /proc and `ip netns`.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bigbinf import lab
from bigbinf.config import Config
from bigbinf.lab import LabLayout, delayline, network
from bigbinf.lab.servers import SERVERS
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.process import in_netns
from tests.support import session

from ..conftest import lab_config, nstat_retrans, quiet_veth_counters, veth_counters
from ..support.exporter import ROOT

pytestmark = pytest.mark.lab
ONE_WAY_SECONDS = 0.020

CONNECT = (
    "import socket, sys, time\n"
    "samples = []\n"
    "for _ in range(5):\n"
    "    t = time.monotonic(); s = socket.create_connection((sys.argv[1], 22)); samples.append(time.monotonic() - t)\n"
    "    s.close(); time.sleep(0.05)\n"
    "print(min(samples))\n"
)


def _handshake_seconds(config: Config) -> float:
    """connect() returns when the SYN-ACK is back: one round trip."""
    layout = LabLayout(config.lab)
    out = subprocess.run(
        ["ip", "netns", "exec", layout.client_ns, sys.executable, "-c", CONNECT, config.lab.remote_address],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return float(out)


def _pids_in(ns: str) -> list[str]:
    return subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()


def _lasting_pids(namespaces: tuple[str, ...]) -> dict[str, list[str]]:
    """Each namespace's processes that are still there a second later: `up` checks sshd by
    logging in (`ssh ... true`), whose session processes take a moment to go."""
    first = {ns: set(_pids_in(ns)) for ns in namespaces}
    time.sleep(1.0)
    return {ns: sorted(first[ns] & set(_pids_in(ns))) for ns in namespaces}


def _ehash(ns: str | None = None, name: str = "tcp_ehash_entries") -> str:
    argv = ["sysctl", "-n", f"net.ipv4.{name}"]
    return subprocess.run(in_netns(ns, argv) if ns else argv, capture_output=True, text=True).stdout.strip()


def _host_child_table() -> str:
    """The host's setting for new namespaces, read under the lock that add_namespace holds
    while it has the setting changed (another worker's lab may be coming up: read without
    it, the setting was 8192 once, beside four workers)."""
    try:
        fd = os.open(network._CHILD_EHASH, os.O_RDONLY)
    except OSError:
        return ""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return os.pread(fd, 64, 0).decode().strip()
    finally:
        os.close(fd)


def test_delay_gives_the_round_trip_and_transfers_stay_measurable(make_lab) -> None:
    host_child_table = _host_child_table()
    config = make_lab(
        link={"rate": "200mbit", "delay": "20ms"},
        servers=["sshd"],
        capture={"keep": True},
        datasets={"f8m": {"file": "f8m.bin", "size": "8MiB"}},
    )
    layout = LabLayout(config.lab)
    # Each lab namespace has a TCP hash table of its own (ss walks all of it per listing),
    # and the host's setting for new namespaces is as it was.
    if host_child_table:  # kernel >= 5.19
        for ns in (layout.client_ns, layout.remote_ns):
            assert _ehash(ns) == str(network.LAB_TCP_HASH_BUCKETS)
        assert _host_child_table() == host_child_table
    # The mechanism depends on the kernel; the latency must not.
    assert Path("/run/netns", layout.wan_ns).exists() == (not network.netem_available())
    if not network.netem_available():
        # The delay line's devices queue what it has not read yet (a busy machine), and it
        # is ahead of user processes for the CPU, as netem in the kernel would be.
        for tun in (layout.tun_to_remote, layout.tun_to_client):
            info = json.loads(network.ip("-n", layout.wan_ns, "-j", "link", "show", "dev", tun, what="read tun"))
            assert info[0]["txqlen"] == delayline.TUN_QUEUE
        pid = network.delay_line_pid(layout)
        assert pid is not None and os.getpriority(os.PRIO_PROCESS, pid) == delayline.NICE

    # The least of a few handshakes: the delay line's own latency, without the waits for a
    # CPU that a busy machine adds to any one of them.
    rtt = min(_handshake_seconds(config) for _ in range(5))
    assert 2 * ONE_WAY_SECONDS <= rtt < 2 * ONE_WAY_SECONDS + 0.010, rtt

    spec = plan_round(config, lab.site(config))[0]
    before = quiet_veth_counters(config)  # the handshakes' last packets are in, not in the window
    result = run_transfer(spec, config, "test")
    after = veth_counters(config)
    assert result.outcome == "ok", result.error
    assert result.verified
    # The client's veth is still where the wire is read: capture == kernel counters.
    assert result.wire_bytes_down == after["down"] - before["down"]
    assert result.wire_bytes_up == after["up"] - before["up"]
    remote = config.lab.remote_address
    # Round trips the capture saw, the remote's answers to what the client sent: the
    # handshake's (SYN to the client's ACK), and each ACK of the client's data.
    irtt, acked = (
        [
            float(v)
            for v in subprocess.run(
                ["tshark", "-r", result.pcap_path, "-Y", f"ip.src == {remote} && {field}", "-T", "fields", "-e", field],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
        ]
        for field in ("tcp.analysis.initial_rtt", "tcp.analysis.ack_rtt")
    )
    # The handshake crossed the delay both ways.  The least of the ACKs' round trips says
    # the delay is there once each way, not twice (80 ms): a single one, the handshake's,
    # also holds a busy machine's waits for a CPU (54 ms beside two CPU burners, 70 ms in
    # a CI run of four workers).
    assert irtt and irtt[0] >= 2 * ONE_WAY_SECONDS, irtt
    assert len(acked) > 10 and 2 * ONE_WAY_SECONDS <= min(acked) < 3 * ONE_WAY_SECONDS, sorted(acked)[:10]

    status_ok, lines = lab.status(config)
    assert status_ok, lines
    if not network.netem_available():
        assert any(line.startswith("delay line   up") and "20ms and 0% loss each way" in line for line in lines), lines


def test_loss_makes_the_sender_retransmit(make_lab) -> None:
    config = make_lab(
        link={"rate": "200mbit", "delay": "2ms", "loss": 1.0},
        servers=["sshd"],
        datasets={"f8m": {"file": "f8m.bin", "size": "8MiB"}},
    )
    remote_ns = LabLayout(config.lab).remote_ns
    before = nstat_retrans(remote_ns)
    result = run_transfer(plan_round(config, lab.site(config))[0], config, "test")
    sent_again = nstat_retrans(remote_ns) - before
    assert result.outcome == "ok", result.error
    assert result.verified
    # ~5,900 data segments at 1% loss: the remote (the sender of a download) retransmitted,
    # and the capture, downstream of the loss for data, saw retransmissions too.
    assert sent_again > 0
    assert result.retransmits_wire > 0


def test_up_is_idempotent_follows_the_config_and_down_leaves_nothing(make_lab) -> None:
    config = make_lab(link={"delay": "5ms"}, servers=["sshd"])
    layout = LabLayout(config.lab)
    via_wan = not network.netem_available()
    pids_before = _lasting_pids(layout.namespaces)
    lab.up(config)  # again: nothing restarted, nothing duplicated
    assert _lasting_pids(layout.namespaces) == pids_before
    assert 0.010 <= _handshake_seconds(config) < 0.020

    # The same lab without delay: back to one veth pair, the delay line gone.
    direct = config.model_copy(
        update={"lab": config.lab.model_copy(update={"link": config.lab.link.model_copy(update={"delay": 0.0})})}
    )
    lab.up(direct)
    assert not Path("/run/netns", layout.wan_ns).exists()
    assert _handshake_seconds(direct) < 0.005
    if via_wan:
        lab.up(config)  # and back through the delay line
        assert Path("/run/netns", layout.wan_ns).exists()
        assert 0.010 <= _handshake_seconds(config) < 0.020

    delay_line = _pids_in(layout.wan_ns) if via_wan else []
    messages = lab.teardown(layout)
    assert f"deleted namespace {layout.client_ns}" in messages
    for ns in layout.namespaces:
        assert not Path("/run/netns", ns).exists()
    for pid in delay_line:
        assert not Path("/proc", pid).exists()
    assert not layout.state_dir.exists()


def _cli(config_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(config_file), "lab", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def test_lab_commands_up_status_down_leave_nothing_behind(tmp_path: Path) -> None:
    name = session.unique_name()
    config = lab_config(tmp_path, name, link={"rate": "200mbit", "delay": "2ms"})
    assert config.lab is not None
    # Built by the CLI, in a process of its own: registered here.
    session.register("lab", name=name, owner=name, state_dir=str(config.lab.state_dir))
    config_file = tmp_path / "lab.yaml"
    config_file.write_text(config.model_dump_json(exclude_defaults=True))  # JSON is YAML
    layout = LabLayout(config.lab)
    try:
        up = _cli(config_file, "up")
        assert up.returncode == 0, up.stderr
        status = _cli(config_file, "status")
        assert status.returncode == 0, status.stdout
        installed = [n for n, server in SERVERS.items() if server.installed()]
        for server in installed:
            assert any(line.split()[:2] == [server, "up"] for line in status.stdout.splitlines()), status.stdout
        pids = [pid for ns in layout.namespaces for pid in _pids_in(ns)]
        assert len(pids) >= len(installed)
        netns_dirs = [Path("/etc/netns", ns) for ns in (layout.client_ns, layout.remote_ns)]
        assert any(d.exists() for d in netns_dirs)  # GridFTP's private hosts file, where installed

        down = _cli(config_file, "down")
        assert down.returncode == 0, down.stderr
        assert f"deleted namespace {layout.remote_ns}" in down.stdout
        assert [pid for pid in pids if network.alive(pid)] == []
        assert [ns for ns in layout.namespaces if Path("/run/netns", ns).exists()] == []
        assert [d for d in netns_dirs if d.exists()] == []
        assert not layout.state_dir.exists()
        # Down means down: status says so and fails.
        after = _cli(config_file, "status")
        assert after.returncode == 1
    finally:
        lab.teardown(layout)


@pytest.mark.skipif(network.netem_available(), reason="not applicable here: the kernel has netem, no delay line")
def test_a_half_routed_delay_line_is_reported_and_completed_by_up(make_lab) -> None:
    # As if an earlier `up` failed after starting the delay line: its policy rule is gone.
    config = make_lab(link={"delay": "5ms"}, servers=["sshd"])
    layout = LabLayout(config.lab)
    subprocess.run(["ip", "-n", layout.wan_ns, "rule", "del", "priority", "100"], check=True)
    ok, lines = lab.status(config)
    assert not ok
    assert any(line.startswith("delay line   DOWN") and "not routed" in line for line in lines), lines
    lab.up(config)  # the process is kept; the routing is applied again
    ok, lines = lab.status(config)
    assert ok, lines
    assert 0.010 <= _handshake_seconds(config) < 0.020


def test_a_device_is_up_only_once_it_is_set_up() -> None:
    # The delay line creates its TUN devices, then sets them up: routes wait for the
    # second (a device that exists but is down takes no route: "Device for nexthop is not up").
    ns = session.register_netns(session.unique_name())
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        assert not network.device_up(ns, "probe0") and not network.link_exists(ns, "probe0")
        subprocess.run(["ip", "-n", ns, "tuntap", "add", "dev", "probe0", "mode", "tun"], check=True)
        assert network.link_exists(ns, "probe0") and not network.device_up(ns, "probe0")
        refused = subprocess.run(["ip", "-n", ns, "route", "add", "default", "dev", "probe0"], capture_output=True)
        assert refused.returncode != 0
        subprocess.run(["ip", "-n", ns, "link", "set", "probe0", "up"], check=True)
        assert network.device_up(ns, "probe0")
        subprocess.run(["ip", "-n", ns, "route", "add", "default", "dev", "probe0"], check=True)
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
