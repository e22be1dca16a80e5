"""TcpWatch through the real path: lab transfers (scp through the lab's sshd, iperf3) over
shaped, delayed and lossy links, read in both namespaces and through ssh.

Independent truths: each namespace's kernel retransmit counter (nstat TcpRetransSegs),
the other end's kernel (bytes one side acknowledged the other received), sysctls set
by the test and read back, iperf3's own report, the shaped rate.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bigbinf import guardian, lab
from bigbinf.config import Config
from bigbinf.lab import LabLayout
from bigbinf.measure.plan import TransferSpec, plan_round
from bigbinf.measure.programs import adaptive_interval
from bigbinf.measure.tcp.state import TcpSummary, TcpWatch, read_tcp_settings
from bigbinf.measure.transfer import placeholder_values, run_transfer
from bigbinf.process import in_netns, unmarked_env
from bigbinf.protocols.base import render

from ..conftest import nstat_retrans
from ..support.owners import live_owner

pytestmark = pytest.mark.lab
MiB = 1024 * 1024
IPERF3_COOKIE_BYTES = 37  # iperf3 sends its session cookie first on each data connection
RATE = 200e6 / 8  # the shaped link, bytes per second
IPERF3 = 5201  # the lab's iperf3 server


@pytest.fixture(scope="module")
def lossy(make_module_lab) -> Config:
    # Loss on the wire (the delay line drops 1% each way), not in a local qdisc: a local
    # drop is no retransmission, the sender just tries again.
    return make_module_lab(
        link={"rate": "200mbit", "delay": "5ms", "loss": 1},
        datasets={"f8m": {"file": "f8m.bin", "size": "8MiB"}},
        protocols={"scp": {}},
        servers=["sshd", "iperf3"],
    )


@pytest.fixture(scope="module")
def long_fat(make_module_lab) -> Config:
    # 40 ms RTT at 200 Mbit/s: a BDP of 1 MB, above the buffers the tests cap.
    return make_module_lab(link={"rate": "200mbit", "delay": "20ms"}, servers=["iperf3"])


def _ns(config: Config) -> tuple[str, str]:
    layout = LabLayout(config.lab)
    return layout.client_ns, layout.remote_ns


def _watches(config: Config, interval: float = 0.2) -> tuple[TcpWatch, TcpWatch]:
    """(local, remote): the client's sockets to the remote and the remote's to the client."""
    client_ns, remote_ns = _ns(config)
    return (
        TcpWatch(["ip", "netns", "exec", client_ns], config.lab.remote_address, interval),
        TcpWatch(["ip", "netns", "exec", remote_ns], config.lab.client_address, interval),
    )


def _wait_closed(config: Config, port: int, timeout: float = 10.0) -> None:
    """Until neither end has a socket of the transfer (to or from the remote's `port`;
    TIME-WAIT aside): its close events are then in (the exporter lingers after a transfer
    for the same reason)."""
    client_ns, remote_ns = _ns(config)
    end = f"{config.lab.remote_address}:{port}"
    deadline = time.monotonic() + timeout
    for ns, which in ((client_ns, "dst"), (remote_ns, "src")):
        while subprocess.run(in_netns(ns, ["ss", "-tnH", which, end]), capture_output=True, text=True).stdout.strip():
            assert time.monotonic() < deadline, f"sockets {which} {end} in {ns} did not close"
            time.sleep(0.05)


@contextmanager
def _sysctl(ns: str, key: str, value: str) -> Iterator[None]:
    """Set a per-namespace sysctl for the block, then put the old value back."""
    old = subprocess.run(in_netns(ns, ["sysctl", "-n", key]), capture_output=True, text=True, check=True).stdout
    subprocess.run(in_netns(ns, ["sysctl", "-qw", f"{key}={value}"]), check=True)
    try:
        yield
    finally:
        subprocess.run(in_netns(ns, ["sysctl", "-qw", f"{key}={' '.join(old.split())}"]), check=True)


def _iperf3(config: Config, *args: str) -> dict:
    client_ns, _ = _ns(config)
    argv = ["iperf3", "-c", config.lab.remote_address, "-J", *args]
    proc = subprocess.run(in_netns(client_ns, argv), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
    return json.loads(proc.stdout)["end"]


def _scp_download(config: Config) -> TransferSpec:
    (spec,) = [s for s in plan_round(config, lab.site(config)) if (s.protocol, s.direction) == ("scp", "download")]
    return spec


def _summaries(local: TcpWatch, remote: TcpWatch) -> tuple[TcpSummary, TcpSummary]:
    down, up = local.stop(), remote.stop()
    assert down is not None, local.error
    assert up is not None, remote.error
    assert local.problems == [] and remote.problems == []
    return down, up


def test_scp_download_sender_retransmits_equal_the_remote_kernels_count(lossy: Config, tmp_path: Path) -> None:
    client_ns, remote_ns = _ns(lossy)
    spec = _scp_download(lossy)
    argv = in_netns(spec.remote.netns, render(spec.template, placeholder_values(spec, tmp_path)))
    local, remote = _watches(lossy)
    before = nstat_retrans(remote_ns), nstat_retrans(client_ns)
    with local, remote:
        subprocess.run(argv, check=True, capture_output=True, timeout=120)
        _wait_closed(lossy, 22)
    after = nstat_retrans(remote_ns), nstat_retrans(client_ns)
    assert (tmp_path / "f8m.bin").stat().st_size == 8 * MiB
    down, up = _summaries(local, remote)
    print(f"scp download: remote {up}\nlocal {down}\nnstat remote/client {after[0] - before[0]}/{after[1] - before[1]}")

    # The sender is the remote's sshd: its count is the kernel's, socket for socket.
    assert up.retransmits == after[0] - before[0] > 0
    # The client's few (its requests; acks are never resent).  One of them may come after
    # the socket's last state was read (seen once with the CPUs busy: 1 against 2).
    assert after[1] - before[1] - 1 <= down.retransmits <= after[1] - before[1]
    assert up.sockets == down.sockets == 1  # scp's one ssh connection
    assert up.values["retransmits"] == up.retransmits
    # One connection seen from both ends: what the sender had acknowledged is what the
    # receiver received, and the other way round, each plus the FIN when its ack arrived
    # (over a lossy link the last ack may be lost, and a reset ends the connection).
    assert up.values["bytes_acked"] - down.values["bytes_received"] in (0, 1)
    assert down.values["bytes_acked"] - up.values["bytes_received"] in (0, 1)
    assert up.values["bytes_acked"] > 8 * MiB  # the file and ssh's framing
    assert up.values["segs_out"] > 8 * MiB / 1448
    # Over 5 ms each way: the kernel's smallest RTT is the delay line's 10 ms and a bit.
    assert 0.010 <= up.values["min_rtt_seconds"] < 0.015
    assert up.congestion_control == read_tcp_settings(["ip", "netns", "exec", remote_ns]).congestion_control


def test_iperf3_upload_sender_retransmits_equal_the_local_kernels_count(lossy: Config) -> None:
    client_ns, remote_ns = _ns(lossy)
    local, remote = _watches(lossy)
    before = nstat_retrans(client_ns), nstat_retrans(remote_ns)
    with local, remote:
        report = _iperf3(lossy, "-n", "8M")
        _wait_closed(lossy, IPERF3)
    after = nstat_retrans(client_ns), nstat_retrans(remote_ns)
    up, down = _summaries(local, remote)
    print(
        f"iperf3 upload: local {up}\nremote {down}\nnstat client/remote {after[0] - before[0]}/{after[1] - before[1]}"
    )

    assert up.retransmits == after[0] - before[0] > 0
    assert down.retransmits == after[1] - before[1]
    assert up.sockets == down.sockets == 2  # iperf3's control and data connections
    # iperf3 reads the same tcp_info of its data stream, but before the end: the kernel
    # may still have retransmitted after that.
    assert 0 < report["sum_sent"]["retransmits"] <= up.values["retransmits"] <= up.retransmits
    # iperf3 stops once it has written -n bytes and resets its data connection: the
    # sender's last word is what was acknowledged then, while what was in flight still
    # reaches the receiver.  The control connection is no data socket.  The data connection
    # carries iperf3's 37-byte cookie before the -n bytes, and bytes_acked also counts the
    # sequence numbers its SYN and FIN take (a CI run: acked 8,388,647 with 8,388,645
    # received, all of 8 MiB + 37 read before the last listing).
    assert MiB < up.values["bytes_acked"] <= down.values["bytes_received"] + 2
    assert down.values["bytes_received"] <= 8 * MiB + IPERF3_COOKIE_BYTES
    assert down.values["bytes_received"] >= report["sum_received"]["bytes"]


def test_remote_read_through_ssh_matches_its_namespace_and_leaves_out_its_own_sessions(lossy: Config) -> None:
    # The way a real remote is read: its stats command is ssh (here to the lab's sshd,
    # from the client's namespace), every listing a session of its own.
    client_ns, remote_ns = _ns(lossy)
    layout = LabLayout(lossy.lab)
    ssh = ["ip", "netns", "exec", client_ns, "ssh", "-F", str(layout.ssh_config), f"root@{lossy.lab.remote_address}"]
    through_ssh = TcpWatch(ssh, lossy.lab.client_address, 0.3)
    in_ns = TcpWatch(["ip", "netns", "exec", remote_ns], lossy.lab.client_address, 0.3)
    with in_ns, through_ssh:
        # Long enough for a few listings through ssh, also when each ssh session takes
        # half a second to open on a busy machine (24 MiB was one listing, or none; 48 MiB
        # two, neither with the data socket's algorithm, once each listing also read the
        # remote's process tree: issue 34).
        _iperf3(lossy, "-n", "96M", "-R")
        _wait_closed(lossy, IPERF3)
    remote, direct = through_ssh.stop(), in_ns.stop()
    assert remote is not None, through_ssh.error
    assert direct is not None, in_ns.error
    assert through_ssh.problems == []
    print(f"through ssh {remote}\nin the namespace {direct}")
    assert remote.samples >= 2
    # The namespace's own view also holds the ssh sessions (one per listing and the
    # watcher's); through ssh they are left out, and the transfer's two remain.
    assert remote.sockets == 2 < direct.sockets
    # The close events arrived through ssh: the data socket's final count is the one the
    # namespace's watcher saw as it closed (96 MiB and the FIN), not an earlier listing's.
    assert remote.values["bytes_acked"] == direct.values["bytes_acked"]
    # iperf3 -n may overshoot by one of its 128 KiB blocks (25,296,897 = 24 MiB + 128 KiB + FIN seen).
    assert 92 * MiB < remote.values["bytes_acked"] <= 96 * MiB + 128 * 1024 + 1
    assert remote.values["retransmits"] == direct.values["retransmits"] > 0
    assert remote.values["busy_seconds"] == direct.values["busy_seconds"]
    # What only listings tell (skmem, the congestion control) came through ssh too.
    assert remote.congestion_control == direct.congestion_control != ""
    assert remote.values["sndbuf_max_bytes"] > 0 and remote.values["delivery_rate_max_bytes_per_second"] > 0


@pytest.mark.parametrize("marked", [True, False], ids=["transfer marked", "no marker"])
def test_another_programs_flow_to_the_same_peer_is_left_out_at_both_ends(
    lossy: Config, tmp_path: Path, marked: bool
) -> None:
    # A site's own transfer between the same two hosts, started while ours runs: iperf3
    # (unmarked, 32 MiB from the remote) beside our scp download of 8 MiB, whose ssh
    # carries the transfer's marker.  Truth: iperf3's report of its bytes, the file's size.
    client_ns, remote_ns = _ns(lossy)
    spec = _scp_download(lossy)
    with live_owner() as owner:
        env = {**unmarked_env(), guardian.MARKER: owner}
        argv = in_netns(spec.remote.netns, render(spec.template, placeholder_values(spec, tmp_path)))
        local = TcpWatch(
            ["ip", "netns", "exec", client_ns],
            lossy.lab.remote_address,
            0.2,
            transfer_marker=owner if marked else None,
        )
        remote = TcpWatch(["ip", "netns", "exec", remote_ns], lossy.lab.client_address, 0.2)
        with local, remote:
            other = subprocess.Popen(
                in_netns(client_ns, ["iperf3", "-c", lossy.lab.remote_address, "-J", "-R", "-n", "32M"]),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=unmarked_env(),
            )
            try:
                subprocess.run(argv, check=True, capture_output=True, timeout=120, env=env)
                out, err = other.communicate(timeout=120)
            finally:
                if other.poll() is None:
                    other.kill()
                    other.wait()
            assert other.returncode == 0, err
            _wait_closed(lossy, 22)
            _wait_closed(lossy, IPERF3)
            remote.leave_out_peers(local.foreign_ends())  # as the transfer does, before the remote's stop
        down, up = local.stop(), remote.stop()
    assert down is not None and up is not None, (local.error, remote.error)
    iperf3_bytes = json.loads(out)["end"]["sum_received"]["bytes"]
    assert (tmp_path / "f8m.bin").stat().st_size == 8 * MiB and iperf3_bytes >= 32 * MiB
    print(f"marked {marked}: local {down}\nremote {up}\nproblems {local.problems}")
    if marked:
        # scp's one connection at each end; iperf3's two left out.
        assert up.sockets == down.sockets == 1, (up, down)
        assert 8 * MiB < up.values["bytes_acked"] < 9 * MiB
        assert local.problems == ["left out 2 socket(s) to the peer that another program held while the transfer ran"]
    else:
        # Without the transfer's marker nothing tells them apart: all three count.
        assert up.sockets == down.sockets == 3, (up, down)
        assert up.values["bytes_acked"] > 8 * MiB + iperf3_bytes


@pytest.mark.parametrize("marked", [True, False], ids=["exporter marked", "no marker"])
def test_a_transfer_beside_another_programs_flow_to_the_same_peer_reads_its_own_sockets(
    lossy: Config, monkeypatch: pytest.MonkeyPatch, marked: bool
) -> None:
    # Through run_transfer: the command's shell starts an unmarked iperf3 (32 MiB from the
    # remote) and 0.3 s later scp's 8 MiB download, both between the same two hosts.
    spec = _scp_download(lossy)
    flow = f"env -u {guardian.MARKER} iperf3 -c {lossy.lab.remote_address} -R -n 32M >/dev/null"
    beside = ("sh", "-c", f'{flow} & sleep 0.3; "$@"; s=$?; wait; exit $s', "sh", *spec.template)
    spec = dataclasses.replace(spec, template=beside)
    with live_owner() as owner:
        if marked:
            monkeypatch.setenv(guardian.MARKER, owner)  # as process.own_children marks an exporter
        else:
            monkeypatch.delenv(guardian.MARKER, raising=False)
        result = run_transfer(spec, lossy, "test")
    assert result.outcome == "ok" and result.verified, result.error
    remote = result.tcp_remote
    assert remote is not None
    print(f"marked {marked}: {remote}")
    if marked:
        assert remote["streams"] == 1 and 8 * MiB < remote["bytes_acked"] < 9 * MiB, remote
    else:
        assert remote["streams"] == 2 and remote["bytes_acked"] > 40 * MiB, remote


def test_capped_receive_buffer_makes_the_sender_rwnd_limited(long_fat: Config) -> None:
    client_ns, _ = _ns(long_fat)
    cap = 262144
    with _sysctl(client_ns, "net.ipv4.tcp_rmem", f"4096 65536 {cap}"):
        assert read_tcp_settings(["ip", "netns", "exec", client_ns]).tcp_rmem == (4096, 65536, cap)
        local, remote = _watches(long_fat, 0.5)
        with local, remote:
            report = _iperf3(long_fat, "-R", "-t", "3", "-C", "cubic")
            _wait_closed(long_fat, IPERF3)
        receiver, sender = _summaries(local, remote)
    print(f"rwnd: sender {sender}\nreceiver {receiver}")
    busy = sender.values["busy_seconds"]
    assert 2.5 < busy < 4
    # An uncapped sender's window clock reads near 0; capped, 0.25 in one CI run under
    # load (the delay line's jitter lets the window open between rounds), 0.5+ quiet.
    assert sender.values["rwnd_limited_seconds"] / busy > 0.2
    assert sender.values["sndbuf_limited_seconds"] / busy < 0.1
    assert receiver.values["rcvbuf_max_bytes"] <= cap
    # A window of at most the buffer per 40 ms round trip: far below the link.
    rate = sender.values["delivery_rate_median_bytes_per_second"]
    assert rate < cap / 0.040 < 0.5 * RATE
    assert rate == pytest.approx(report["sum_received"]["bits_per_second"] / 8, rel=0.3)


def test_capped_send_buffer_makes_the_sender_sndbuf_limited(long_fat: Config) -> None:
    _, remote_ns = _ns(long_fat)
    cap = 131072
    with _sysctl(remote_ns, "net.ipv4.tcp_wmem", f"4096 16384 {cap}"):
        assert read_tcp_settings(["ip", "netns", "exec", remote_ns]).tcp_wmem == (4096, 16384, cap)
        local, remote = _watches(long_fat, 0.5)
        with local, remote:
            _iperf3(long_fat, "-R", "-t", "3", "-C", "cubic")
            _wait_closed(long_fat, IPERF3)
        _, sender = _summaries(local, remote)
    print(f"sndbuf: sender {sender}")
    busy = sender.values["busy_seconds"]
    # The buffer held the sender where its program kept it fed: beside the suite's load
    # iperf3 itself fell behind (app-limited in 77% of the samples while sending) and the
    # buffer's clock was 40% of the busy time, against 0.8% for the window's.  The rate is
    # the buffer's bound: 128 KiB over the RTT.
    assert sender.values["sndbuf_limited_seconds"] / busy > 0.25
    assert sender.values["sndbuf_limited_seconds"] > 10 * sender.values["rwnd_limited_seconds"]
    assert sender.values["rwnd_limited_seconds"] / busy < 0.1
    assert sender.values["sndbuf_max_bytes"] <= cap
    bound = cap / sender.values["min_rtt_seconds"]
    assert sender.values["delivery_rate_median_bytes_per_second"] <= 1.25 * bound


def _scheduled_listings(longest: float, elapsed: float) -> int:
    """How many listings the adaptive pace asks for in `elapsed` seconds, were each instant."""
    at, count = 0.0, 0
    while at < elapsed:
        at += adaptive_interval(longest, at)
        count += 1
    return count


def test_sampling_samples_and_the_delivery_rate_is_the_links(long_fat: Config) -> None:
    local, remote = _watches(long_fat, 0.5)
    start = time.monotonic()
    with local, remote:
        report = _iperf3(long_fat, "-R", "-t", "2.5")
        elapsed = time.monotonic() - start
        _wait_closed(long_fat, IPERF3)
    receiver, sender = _summaries(local, remote)
    print(f"sampling over {elapsed:.2f} s: sender {sender}\nreceiver {receiver}")
    # At least one listing per 0.5 s while it ran (the pace never slows past the configured one);
    # at most what the adaptive pace schedules (every 5% of the time elapsed, from 50 ms), and the
    # last one at stop.
    assert 3 <= elapsed / 0.5 - 1 <= sender.samples <= _scheduled_listings(0.5, elapsed) + 2
    median = sender.values["delivery_rate_median_bytes_per_second"]
    # The fastest sample may carry the shaper's burst on top of its rate within one RTT
    # (26.7 MB/s seen on the 25 MB/s link: 64 KiB in 40 ms is 1.6 MB/s more).
    burst = 65536 / 0.040
    # The rate the link gave this run: iperf3's own measure (the userspace delay line gives
    # less than the shaper's rate when it waits for a CPU).
    assert median <= sender.values["delivery_rate_max_bytes_per_second"] < 1.05 * RATE + burst
    # The median of a handful of samples: a delay line waiting for a CPU (two burners, four
    # workers) made it 9.0 MB/s against iperf3's 12.9 MB/s average, 30% under; a unit
    # mistake (bits, a per-stream share) would be 8x or 2x off.
    assert median == pytest.approx(report["sum_received"]["bits_per_second"] / 8, rel=0.35)
    assert sender.values["rwnd_limited_seconds"] < 0.3 * sender.values["busy_seconds"]
    assert 0.035 <= sender.values["min_rtt_seconds"] < 0.05  # 20 ms each way through the delay line
    # The receiving side has no sender figures, but its buffer and queue.
    assert "delivery_rate_median_bytes_per_second" not in receiver.values
    assert receiver.values["rcvbuf_max_bytes"] > 0 and 0 <= receiver.values["rcv_queue_ratio_avg"] < 1


@pytest.mark.parametrize(
    ("remote", "expected"),
    [
        # No such host on the lab's subnet: ssh gives up.
        (["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", "nobody@198.18.0.77"], "exited 255"),
        # The lab's sshd, a user it does not know.
        (["ssh", "-F", "{ssh_config}", "bigbinf-no-such-user@{remote}"], "exited 255: bigbinf-no-such-user@"),
        (["false"], "exited 1"),
    ],
)
def test_failing_remote_gives_none_quickly_and_says_why(lossy: Config, remote: list[str], expected: str) -> None:
    client_ns, _ = _ns(lossy)
    layout = LabLayout(lossy.lab)
    words = [w.format(ssh_config=layout.ssh_config, remote=lossy.lab.remote_address) for w in remote]
    prefix = ["ip", "netns", "exec", client_ns, *words]
    start = time.monotonic()
    with TcpWatch(prefix, lossy.lab.client_address, 0.2) as watch:
        _iperf3(lossy, "-n", "1M", "-R")
    summary = watch.stop()
    elapsed = time.monotonic() - start
    print(f"{elapsed:.2f} s: {watch.error}")
    assert summary is None
    assert watch.error.startswith(f"stats command ip netns exec {client_ns} {words[0]}")
    assert expected in watch.error
    assert elapsed < 8
