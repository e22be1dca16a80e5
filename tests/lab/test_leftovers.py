"""Nothing left behind (issue 25): a watch through an ssh ControlMaster ends on the remote
when it ends, over IPv4 and IPv6, stopped or killed; and an exporter killed at random
moments mid-round leaves nothing once started again, which finishes the round.  The
truth is the kernel and the disks: processes per network namespace, sysctls, routes,
files, namespaces and listening sockets, read before and after (tests/support/chaos.py);
the journal read back; /metrics against it.  The long run (50 kills) is
benchmarks/bench_chaos.py."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bigbinf import guardian
from bigbinf.config import Config
from bigbinf.lab import LabLayout
from bigbinf.measure.tcp.state import TcpWatch

from ..support import chaos, session
from ..support.chaos import Chaos, naming, processes_in
from ..support.owners import live_owner

pytestmark = pytest.mark.lab
SOURCE = Path(__file__).resolve().parents[2] / "exporter"
PERSIST = 2  # ControlPersist: the master may stay this long after its last session


@pytest.fixture(scope="module")
def site(make_module_lab) -> Config:
    return make_module_lab(link=chaos.LINK, datasets=chaos.DATASETS, protocols=chaos.PROTOCOLS, servers=chaos.SERVERS)


@pytest.fixture
def control() -> Iterator[Path]:
    """A ControlPath directory short enough for a socket address; masters and sockets
    removed after (by pid), whatever happened."""
    directory = session.scratch_dir(Path("/tmp"), "bbcm-", 0o700)
    yield directory
    for pid, _ in naming(str(directory)):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(directory, ignore_errors=True)


def _in(ns: str, *argv: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, *argv], check=True, capture_output=True)


@pytest.fixture
def remote_over(site: Config, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, Path]]:
    """(remote address, client address, ssh_config) of an sshd in the lab's remote
    namespace: the lab's own (IPv4), or for IPv6 one of this test's on the lab's link
    (2001:2::/48, the IPv6 benchmarking range), IPv6 switched off again after."""
    layout = LabLayout(site.lab)
    if request.param == 4:
        yield site.lab.remote_address, site.lab.client_address, layout.ssh_config
        return
    ends = ((layout.client_ns, layout.client_if, "2001:2::1"), (layout.remote_ns, layout.remote_if, "2001:2::2"))
    for ns, ifname, address in ends:
        _in(ns, "sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=0")
        _in(ns, "ip", "addr", "add", f"{address}/64", "dev", ifname, "nodad")
    config = tmp_path / "sshd6_config"
    lines = [
        line
        for line in layout.sshd_config.read_text().splitlines()
        if not line.startswith(("ListenAddress", "PidFile"))
    ]
    config.write_text("\n".join(["ListenAddress 2001:2::2", f"PidFile {tmp_path / 'sshd6.pid'}", *lines]) + "\n")
    config.chmod(0o600)
    sshd = subprocess.Popen(
        ["ip", "netns", "exec", layout.remote_ns, shutil.which("sshd") or "/usr/sbin/sshd", "-D", "-f", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    known = tmp_path / "known_hosts6"
    known.write_text(f"2001:2::2 {layout.host_key.with_suffix('.pub').read_text()}")
    ssh_config = tmp_path / "ssh_config6"
    ssh_config.write_text(
        f"Host 2001:2::2\n  IdentityFile {layout.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n"
    )
    try:
        deadline = time.monotonic() + 15
        while subprocess.run(
            ["ip", "netns", "exec", layout.client_ns, "ssh", "-F", str(ssh_config), "root@2001:2::2", "true"],
            capture_output=True,
        ).returncode:
            assert time.monotonic() < deadline, "the IPv6 sshd did not let us in"
            time.sleep(0.2)
        yield "2001:2::2", "2001:2::1", ssh_config
    finally:
        os.killpg(sshd.pid, signal.SIGTERM)
        sshd.wait(10)
        for ns, ifname, _ in ends:
            _in(ns, "sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1")


def _prefix(site: Config, ssh_config: Path, control: Path, address: str) -> list[str]:
    layout = LabLayout(site.lab)
    return [
        "ip",
        "netns",
        "exec",
        layout.client_ns,
        "ssh",
        "-F",
        str(ssh_config),
        "-o",
        "ControlMaster=auto",
        "-o",
        f"ControlPath={control}/%C",
        "-o",
        f"ControlPersist={PERSIST}",
        f"root@{address}",
    ]


def _left_of_the_watch(site: Config, control: Path) -> set[tuple[int, str]]:
    """A close-event watcher in the remote namespace (ss or the sh around it), or an ssh
    master of this test's ControlPath."""
    remote = {
        (pid, command)
        for pid, command in processes_in(LabLayout(site.lab).remote_ns)
        if "ss -tinmEH" in command or command.startswith("ss ")
    }
    return remote | naming(str(control))


def _wait_nothing_left(site: Config, control: Path, seconds: float) -> set[tuple[int, str]]:
    deadline = time.monotonic() + seconds
    while (left := _left_of_the_watch(site, control)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _another_connection(site: Config, ssh_config: Path, address: str) -> None:
    """A TCP connection from the client to the remote that is not the watch's: its close
    is an event the watch must see."""
    layout = LabLayout(site.lab)
    _in(layout.client_ns, "ssh", "-F", str(ssh_config), "-o", "ControlPath=none", f"root@{address}", "true")


@pytest.mark.parametrize("remote_over", [4, 6], indirect=True, ids=["ipv4", "ipv6"])
def test_a_watch_through_a_control_master_ends_on_the_remote_when_stopped(
    site: Config, remote_over: tuple[str, str, Path], control: Path
) -> None:
    address, client, ssh_config = remote_over
    watch = TcpWatch(_prefix(site, ssh_config, control, address), client, interval=0.2, lifetime=120)
    with watch:
        _another_connection(site, ssh_config, address)
        time.sleep(0.5)
        assert _left_of_the_watch(site, control)  # the remote watcher and the master run meanwhile
    summary = watch.stop()
    assert summary is not None, watch.error
    assert summary.sockets >= 1, watch.problems  # close events still arrive through the lifeline
    assert not any("close events" in p for p in watch.problems), watch.problems
    # Reported: the remote `ss -tinmEH` and the master stayed for minutes (IPv6) until killed.
    assert _wait_nothing_left(site, control, PERSIST + 5) == set()


HOLDER = textwrap.dedent(
    """\
    import sys, time
    sys.path.insert(0, {source!r})
    from bigbinf.measure.tcp.state import TcpWatch
    watch = TcpWatch({prefix!r}, {client!r}, interval=0.2, lifetime=120)
    watch.start()
    print("watching", flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("remote_over", [4, 6], indirect=True, ids=["ipv4", "ipv6"])
def test_a_watch_through_a_control_master_ends_on_the_remote_when_its_process_is_killed(
    site: Config, remote_over: tuple[str, str, Path], control: Path, tmp_path: Path
) -> None:
    address, client, ssh_config = remote_over
    script = tmp_path / "holder.py"
    script.write_text(
        HOLDER.format(source=str(SOURCE), prefix=_prefix(site, ssh_config, control, address), client=client)
    )
    holder = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "watching"
        assert _left_of_the_watch(site, control)
        holder.kill()  # no guardian here: the lifeline alone ends the remote watcher
        holder.wait()
        assert _wait_nothing_left(site, control, PERSIST + 5) == set()
    finally:
        holder.kill()
        holder.wait()


def _remote_sessions(site: Config) -> set[tuple[int, str]]:
    return {(pid, c) for pid, c in processes_in(LabLayout(site.lab).remote_ns) if c.startswith("sshd: root@notty")}


def test_a_master_whose_control_socket_is_gone_is_ended_by_the_guardian(site: Config, control: Path) -> None:
    # A real ControlMaster of a command named to the guardian, its socket then removed (as
    # a /tmp cleaner does): `ssh -O exit` cannot reach it, and it hides its marker.
    before = _remote_sessions(site)
    prefix = [
        "ControlPersist=600" if w.startswith("ControlPersist=") else w
        for w in _prefix(site, LabLayout(site.lab).ssh_config, control, site.lab.remote_address)
    ]
    subprocess.run([*prefix, "true"], check=True, capture_output=True, timeout=60)
    masters = naming(str(control))
    assert len(masters) == 1 and len(_remote_sessions(site) - before) == 1, masters
    for socket in control.iterdir():
        socket.unlink()
    read_end, write_end = os.pipe()
    os.write(write_end, f"{guardian.SSH_PREFIX}{json.dumps(prefix)}\n".encode())
    os.close(write_end)  # an exporter that named this command has ended
    try:
        with live_owner() as owner:
            ended = guardian.guard(owner, read_end)
    finally:
        os.close(read_end)
    assert (ended.masters, ended.hidden) == (0, 1), ended
    assert _wait_nothing_left(site, control, 5) == set()
    # Its session on the remote ended with it.
    deadline = time.monotonic() + 5
    while _remote_sessions(site) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _remote_sessions(site) - before == set()


def test_an_exporter_killed_at_random_moments_leaves_nothing_once_started_again(site: Config, tmp_path: Path) -> None:
    run = Chaos(site, tmp_path, chaos.LEAN)
    try:
        first, seconds = run.run_round()  # the state after a whole round: what every later one must equal
        run.stop(first)
        time.sleep(1)
        before = run.snapshot()
        seed = int(os.environ.get("BIGBINF_CHAOS_SEED") or random.randrange(1 << 30))  # a failure's seed replays it
        # Kills from the start up to a round's end (the first round also compiled the analyser).
        report = chaos.chaos(run, kills=4, seed=seed, horizon=min(seconds, 8.0 * len(run.transfers) + 4))
        time.sleep(1)
        after = run.snapshot()
        print(chaos.dumps({"seed": seed, "round_seconds": seconds, **chaos.summary(run.cycles), **report}))
        for cycle in run.cycles:
            print(chaos.dumps(cycle))
        print(*(line for line in run.log.read_text().splitlines() if "guardian" in line), sep="\n")
        # Every child died with the exporter, within the guardian's grace.
        assert [c.left_running for c in run.cycles if c.gone_seconds is None] == []
        assert chaos.differences(before, after) == {}
        assert report["journal"] == [] and report["published"] == []
        assert not run.undo.exists() and not run.marker.exists()
    finally:
        run.cleanup()
