"""Why was it slow?  Each verdict proved on real transfers in the lab, against the
kernels' own counters (tcp_info of both ends, nstat), and `advise`'s lines applied.

Link: 200 Mbit/s (tbf) with 20 ms each way through the delay line: RTT 40 ms, BDP
25 MB/s x 40 ms = 1 MB.  The numbers measured here are in docs/benchmarks.md.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from bigbinf import lab
from bigbinf.config import Config, parse_config
from bigbinf.history.advice import advise
from bigbinf.journal.store import BaselineJournal, Journal, baseline_path
from bigbinf.lab import LabLayout
from bigbinf.measure.path.baseline import measure_path
from bigbinf.measure.plan import TransferSpec, plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.result import PathBaseline, Result

from ..conftest import nstat_retrans

pytestmark = pytest.mark.lab
MiB = 1 << 20
RATE = 25e6  # 200 Mbit/s in bytes/s
DATASETS = {"f64m": {"file": "f64m.bin", "size": "64MiB"}, "f16m": {"file": "f16m.bin", "size": "16MiB"}}
CURL = ["{binary}", "-sS", "--fail"]
PROTOCOLS = {
    "http": {"directions": ["download", "upload"]},
    "scp": {"directions": ["download"]},
    # The application throttles itself: curl sends at most 4 MB/s.
    "http-throttled": {
        "module": "http",
        "directions": ["upload"],
        "upload_command": [*CURL, "--limit-rate", "4M", "-T", "{local_path}", "http://{host}/{remote_name}"],
    },
}
SERVERS = ["nginx", "sshd"]
PROBE = {"count": 20, "interval": "20ms"}


def _with_probe(config: Config) -> Config:
    """The lab's config with a longer probe train than the tests' default."""
    raw = config.model_dump(mode="json", exclude_unset=True)
    raw["remotes"]["lab"]["probe"] = PROBE
    return parse_config(yaml.safe_dump(raw), "why-slow.yaml")


@pytest.fixture(scope="module")
def wan(make_module_lab) -> Config:
    return _with_probe(
        make_module_lab(
            link={"rate": "200mbit", "delay": "20ms"}, datasets=DATASETS, protocols=PROTOCOLS, servers=SERVERS
        )
    )


def _spec(config: Config, protocol: str, dataset: str, direction: str) -> TransferSpec:
    specs = [
        s
        for s in plan_round(config, lab.site(config))
        if (s.protocol, s.dataset, s.direction) == (protocol, dataset, direction)
    ]
    assert len(specs) == 1
    return specs[0]


def measure(config: Config, protocol: str, dataset: str, direction: str) -> tuple[Result, PathBaseline]:
    """What a round does for one transfer: probe the path, run the transfer judged
    against it, journal both (advise reads the journals)."""
    spec = _spec(config, protocol, dataset, direction)
    baseline = measure_path(spec.remote)
    result = run_transfer(spec, config, "why-slow", baseline)
    Journal(config.journal.path).append(result)
    BaselineJournal(baseline_path(config.journal.path)).append(baseline)
    assert result.outcome == "ok", result.error
    return result, baseline


def _sysctl(ns: str, key: str, value: str | None = None) -> str:
    argv = (
        ["ip", "netns", "exec", ns, "sysctl", "-n", key]
        if value is None
        else ["ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={value}"]
    )
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


@contextmanager
def sysctl(ns: str, key: str, value: str) -> Iterator[None]:
    """A per-namespace sysctl, put back afterwards (the module's lab is shared)."""
    before = " ".join(_sysctl(ns, key).split())
    _sysctl(ns, key, value)
    try:
        yield
    finally:
        _sysctl(ns, key, before)


def test_probe_sees_the_configured_path(wan: Config) -> None:
    baseline = measure_path(_spec(wan, "http", "f64m", "download").remote)
    assert baseline.loss_ratio == 0 and baseline.probes_sent == 20
    assert baseline.rtt_min_seconds is not None and abs(baseline.rtt_min_seconds - 0.040) < 0.002
    assert baseline.mtu_bytes == 1500
    assert baseline.bandwidth_source == "lab" and baseline.bandwidth_bytes_per_second == RATE
    assert baseline.bdp_bytes is not None and 0.98e6 < baseline.bdp_bytes < 1.06e6
    # Both ends' limits, the remote's read in its own namespace.
    assert set(baseline.buffers) == {"local", "remote"}
    assert baseline.buffers["local"]["tcp_rmem"] == int(
        _sysctl(LabLayout(wan.lab).client_ns, "net.ipv4.tcp_rmem").split()[2]
    )


def test_a_small_receive_buffer_is_the_limit_and_advise_lifts_it(wan: Config) -> None:
    client_ns = LabLayout(wan.lab).client_ns
    with sysctl(client_ns, "net.ipv4.tcp_rmem", "4096 131072 262144"):
        slow, baseline = measure(wan, "http", "f64m", "download")
        assert slow.limited_by == "receive_window", slow.limited_evidence
        # Our receive buffer grew to its cap; the remote sender's own kernel saw the window
        # close on it (BBR paces, so only part of its busy time counts as rwnd-limited).
        assert 0.9 * 262144 <= slow.tcp_local["rcvbuf_max_bytes"] <= 262144
        sender = slow.tcp_remote
        assert sender["rwnd_limited_seconds"] > 0.2 * sender["busy_seconds"]
        assert slow.retransmits_sender_source == "kernel"  # a download's sender, asked in its namespace
        text = advise(wan, lab.site(wan), "lab")
        lines = re.findall(r'sysctl -w (net\.ipv4\.tcp_rmem)="(\d+) (\d+) (\d+)"\s+# local', text)
        assert lines, text
        key, low, default, high = lines[0]
        assert int(high) >= baseline.bdp_bytes  # type: ignore[operator]
        # Apply what advise printed, as a user would, and measure again.
        _sysctl(client_ns, key, f"{low} {default} {high}")
        fast, _ = measure(wan, "http", "f64m", "download")
    speedup = slow.duration_seconds / fast.duration_seconds
    print(
        f"receive window: {slow.duration_seconds:.2f} s ({slow.throughput_bytes_per_second / 1e6:.2f} MB/s) -> "
        f"{fast.duration_seconds:.2f} s ({fast.throughput_bytes_per_second / 1e6:.2f} MB/s) after "
        f"tcp_rmem max {high}: x{speedup:.2f}; {slow.limited_evidence}; then {fast.limited_by}"
    )
    assert speedup >= 2, (slow.duration_seconds, fast.duration_seconds)
    assert fast.limited_by != "receive_window", fast.limited_evidence


def test_the_remote_senders_small_send_buffer_is_the_limit_of_a_download(wan: Config) -> None:
    with sysctl(LabLayout(wan.lab).remote_ns, "net.ipv4.tcp_wmem", "4096 16384 131072"):
        result, _ = measure(wan, "http", "f16m", "download")
    print(f"send buffer (download): {result.duration_seconds:.2f} s, {result.limited_evidence}")
    assert result.limited_by == "send_buffer", result.limited_evidence
    assert result.tcp_remote["sndbuf_limited_seconds"] > 0.3 * result.tcp_remote["busy_seconds"]
    assert result.tcp_remote["sndbuf_max_bytes"] <= 2 * 131072  # skmem tb counts overhead too


def test_our_small_send_buffer_is_the_limit_of_an_upload(wan: Config) -> None:
    with sysctl(LabLayout(wan.lab).client_ns, "net.ipv4.tcp_wmem", "4096 16384 131072"):
        result, _ = measure(wan, "http", "f16m", "upload")
    print(f"send buffer (upload): {result.duration_seconds:.2f} s, {result.limited_evidence}")
    assert result.limited_by == "send_buffer", result.limited_evidence
    assert result.tcp_local["sndbuf_limited_seconds"] > 0.3 * result.tcp_local["busy_seconds"]


def test_a_throttled_application_is_the_limit(wan: Config) -> None:
    result, _ = measure(wan, "http-throttled", "f16m", "upload")
    print(f"application: {result.duration_seconds:.2f} s, {result.limited_evidence}")
    assert result.limited_by == "application", result.limited_evidence
    assert 3.4 < result.duration_seconds < 6  # 16 MiB at curl's 4 MB/s: the throttle held
    # Our kernel, the sender, saw neither buffer limit it, nor loss.
    sender = result.tcp_local
    assert sender["rwnd_limited_seconds"] < 0.1 * sender["busy_seconds"]
    assert sender["sndbuf_limited_seconds"] < 0.1 * sender["busy_seconds"]
    assert result.retransmits_sender == 0


def test_a_full_plain_link_is_link_capacity(make_lab) -> None:
    config = make_lab(link={"rate": "200mbit"}, datasets=DATASETS, protocols=PROTOCOLS, servers=SERVERS)
    result, baseline = measure(config, "http", "f64m", "download")
    assert result.first_packet_timestamp is not None and result.last_packet_timestamp is not None
    rate = result.payload_bytes_down / (result.last_packet_timestamp - result.first_packet_timestamp)
    kernel = result.tcp_remote["delivery_rate_median_bytes_per_second"]
    print(
        f"link capacity: {result.duration_seconds:.2f} s, delivery rate {rate / 1e6:.2f} MB/s on the wire, "
        f"the sender kernel's median {kernel / 1e6:.2f} MB/s; {result.limited_evidence}"
    )
    assert result.limited_by == "link_capacity", result.limited_evidence
    # Delivered over the transfer (payload over the packet span): within 10% of the shaped rate.
    # The kernel's per-ACK samples swing with tbf's bursts (20.5-23.2 MB/s medians seen): printed, not judged.
    assert abs(rate - RATE) <= 0.1 * RATE
    assert baseline.bdp_bytes is not None and baseline.bdp_bytes < 64 * 1024  # no delay: a tiny BDP


def test_a_dropping_link_is_congestion_with_the_senders_retransmits(make_lab) -> None:
    config = make_lab(
        link={"rate": "200mbit", "delay": "10ms", "loss": 1}, datasets=DATASETS, protocols=PROTOCOLS, servers=SERVERS
    )
    client_ns = LabLayout(config.lab).client_ns
    # Reno backs off on every loss (BBR would ride through 1% random loss and fill the link).
    _sysctl(client_ns, "net.ipv4.tcp_congestion_control", "reno")
    before = nstat_retrans(client_ns)
    result, _ = measure(config, "http", "f16m", "upload")
    retransmitted = nstat_retrans(client_ns) - before
    print(f"congestion: {result.duration_seconds:.2f} s, {result.limited_evidence}")
    assert result.limited_by == "congestion", result.limited_evidence
    assert result.congestion_control == "reno"
    assert result.retransmits_sender_source == "kernel"
    # The kernel's count, socket for socket; the namespace's counter may hold one more, sent
    # after the socket's last state was read (beside CPU burners: 112 against 113).
    assert retransmitted - 1 <= result.retransmits_sender <= retransmitted
    assert result.retransmits_sender > 0


# ---------------------------------------------------------------- a plain remote and its stats command


def _plain_remote_config(config: Config, tmp: Path, stats_user: str, dataset: str = "f16m") -> Config:
    """The lab as a user would point bigbinf at a real site: address, key and ssh_config,
    not `lab: true`; the remote's stats over ssh."""
    layout = LabLayout(config.lab)
    raw = config.model_dump(mode="json", exclude_unset=True)
    raw.pop("lab")
    raw["remotes"] = {
        "site": {
            "address": config.lab.remote_address,
            "key": str(layout.client_key),
            "ssh_config": str(layout.ssh_config),
            "data_dir": str(layout.data_dir),
            "checksums": str(layout.checksums),
            "netns": layout.client_ns,
            "interface": layout.client_if,
            "probe": {"count": 5, "interval": "20ms", "method": "tcp"},
            "stats_command": ["ssh", "-F", "{ssh_config}", "-o", "ConnectTimeout=3", f"{stats_user}@{{host}}"],
        }
    }
    raw["protocols"] = {"scp": {}}
    raw["datasets"] = {dataset: DATASETS[dataset]}
    raw["journal"] = {"path": str(tmp / "plain.jsonl")}
    return parse_config(yaml.safe_dump(raw), "plain.yaml")


def test_a_plain_remote_is_read_through_its_stats_command(wan: Config, tmp_path: Path) -> None:
    config = _plain_remote_config(wan, tmp_path, "root", "f64m")
    remote_ns = LabLayout(wan.lab).remote_ns
    before = nstat_retrans(remote_ns)
    # 64 MiB: long enough for the listings through ssh to name the transfer's owners and
    # then read their clocks twice, also when each ssh session waits for a CPU (16 MiB
    # was over before that once).
    result, baseline = measure(config, "scp", "f64m", "download")
    assert baseline.method == "tcp" and baseline.rtt_min_seconds is not None
    # The delay line holds each packet 20 ms each way; a busy machine only adds (42.1 ms
    # once in a CI run with four workers).
    assert 0.0395 <= baseline.rtt_min_seconds < 0.045, baseline.rtt_min_seconds
    assert set(baseline.buffers) == {"local", "remote"} and baseline.remote_note == ""
    assert baseline.bandwidth_bytes_per_second is None and baseline.bdp_bytes is None  # nothing configured
    # The remote sender's own count, over ssh, equals its namespace's kernel counter.
    assert result.retransmits_sender_source == "kernel"
    # The kernel's count, socket for socket; the namespace's counter may hold one more,
    # sent after the socket's last state was read (a FIN resent: a CI run, 0 against 1).
    kernel = nstat_retrans(remote_ns) - before
    assert kernel - 1 <= result.retransmits_sender <= kernel
    assert result.tcp_remote["bytes_acked"] >= 16 * MiB
    assert result.limited_evidence  # judged by the kernel counters even without a BDP
    # The remote's sshd, its CPU clocks read by the stats command's own listings (ss -p
    # named it; its shell read /proc after ss): sampled through the transfer.
    sshd = result.programs.get("remote sshd")
    assert sshd is not None and sshd["samples"] >= 2 and sshd["cpu_seconds"] > 0, result.programs


@contextmanager
def cores_taken() -> Iterator[None]:
    """A busy loop pinned to every core for the body of a `with` (a shared CI host)."""
    burners = [
        subprocess.Popen(["taskset", "-c", str(core), "sh", "-c", "while :; do :; done"])
        for core in sorted(os.sched_getaffinity(0))
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def _queued_before_data(result: Result) -> dict[str, float]:
    return {name: v["run_queue_seconds_before_data"] for name, v in result.programs.items()}


def _data_start(result: Result) -> float | None:
    """The first data, as the listings of either end saw it (the cut transfer.py makes)."""
    starts = [tcp["data_start_seconds"] for tcp in (result.tcp_local, result.tcp_remote) if "data_start_seconds" in tcp]
    return min(starts, default=None)


def test_set_up_queued_for_a_cpu_is_measured_on_both_ends(wan: Config) -> None:
    # ssh's key exchange is CPU work at both ends: with every core taken by a busy loop,
    # ssh and the remote's sshd queue for one before the first data.  Each can have queued
    # no longer than it lived before the first data (schedstat counts from birth).
    quiet, _ = measure(wan, "scp", "f16m", "download")
    with cores_taken():
        # Measured where the listings saw the data start (a progress series): beside the
        # burners they can be too sparse for one, and then no time is cut (tried twice).
        for _ in range(2):
            busy, _ = measure(wan, "scp", "f16m", "download")
            if _data_start(busy) is not None:
                break
    for label, result in (("quiet", quiet), ("cores taken", busy)):
        start = _data_start(result)
        if start is None:
            assert all("run_queue_seconds_before_data" not in v for v in result.programs.values()), result.programs
            print(f"\n{label}: no progress series, no cut")
            continue
        queued = _queued_before_data(result)
        print(f"\n{label}: set-up {start:.3f} s, queued {queued}; {result.limited_by}: {result.limited_evidence}")
        assert {"local ssh", "remote sshd"} <= set(queued), result.programs
        assert all(0.0 <= q <= start + 0.01 for q in queued.values()), (queued, start)
    assert _data_start(busy) is not None, "twice no progress series beside the burners"
    assert queued["local ssh"] + queued["remote sshd"] >= 0.02, (queued, _data_start(busy))
    # Whatever the verdict, set-up that waited for a core is not blamed on the start alone.
    if busy.limited_by == "startup" and sum(queued.values()) >= 0.01:
        assert "queued for a CPU" in busy.limited_evidence, busy.limited_evidence


def test_a_failing_stats_command_leaves_the_remote_side_absent_and_says_so_once(
    wan: Config, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = _plain_remote_config(wan, tmp_path, "nobody")  # the lab key does not log in as nobody
    with caplog.at_level(logging.WARNING):
        first, baseline = measure(config, "scp", "f16m", "download")
        second, _ = measure(config, "scp", "f16m", "download")
    for result in (first, second):
        assert result.outcome == "ok" and result.verified  # the transfer is measured all the same
        assert result.tcp_remote == {} and "stats_command" in result.tcp_remote_note
        assert result.tcp_local["bytes_received"] >= 16 * MiB
    assert "exited 255" in first.tcp_remote_note
    assert baseline.buffers.keys() == {"local"} and "exited 255" in baseline.remote_note
    said = [r for r in caplog.records if "stats_command" in r.getMessage() and "TCP state is absent" in r.getMessage()]
    assert len(said) == 1


def test_a_transfer_that_never_connected_says_so_and_warns_of_no_nat(
    wan: Config, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Refused at the remote (nothing listens on port 9): the remote has no socket to us
    # because there never was a connection, not because of NAT.
    config = _plain_remote_config(wan, tmp_path, "root")
    raw = config.model_dump(mode="json", exclude_unset=True)
    raw["protocols"]["refused"] = {"command": ["curl", "-sS", "--fail", "-o", "{local_path}", "http://{url_host}:9/x"]}
    config = parse_config(yaml.safe_dump(raw), "refused.yaml")
    spec = _spec(config, "refused", "f16m", "download")
    with caplog.at_level(logging.WARNING):
        result = run_transfer(spec, config, "why-slow")
    assert result.outcome == "failed" and result.error.startswith("curl exited 7"), result.error
    # The truth: the capture saw the SYN refused, and no byte of payload either way.
    assert result.wire_measured and result.packets_up >= 1
    assert result.payload_bytes_down == result.payload_bytes_up == 0
    assert result.tcp_remote == {}
    assert result.tcp_remote_note == "no connection to remote site was made: it had no TCP state to show"
    assert not [r for r in caplog.records if "NAT" in r.getMessage()]


def test_a_remote_listing_no_socket_to_us_after_a_transfer_is_named_nat_once(
    wan: Config, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A stats command that lists a host where the transfer's server is not (here: the
    # client's own namespace, which has no socket to the client's address), as NAT or a
    # server at another address would make it: the transfer connected, the remote saw none.
    config = _plain_remote_config(wan, tmp_path, "root")
    raw = config.model_dump(mode="json", exclude_unset=True)
    raw["remotes"]["elsewhere"] = {
        **raw["remotes"].pop("site"),
        "stats_command": ["ip", "netns", "exec", LabLayout(wan.lab).client_ns],
    }
    config = parse_config(yaml.safe_dump(raw), "elsewhere.yaml")
    spec = _spec(config, "scp", "f16m", "download")
    with caplog.at_level(logging.WARNING):
        results = [run_transfer(spec, config, "why-slow") for _ in range(2)]
    note = (
        f"remotes.elsewhere.stats_command: the remote showed no TCP socket to {wan.lab.client_address} (NAT, or the "
        "server runs at another address); the remote's TCP state is absent"
    )
    for result in results:
        assert result.outcome == "ok" and result.payload_bytes_down >= 16 * MiB
        assert result.tcp_remote_note == note
    assert [r.getMessage() for r in caplog.records if "NAT" in r.getMessage()] == [note]  # said once
