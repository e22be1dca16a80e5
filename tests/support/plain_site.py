"""A plain remote site (issue 34, item 5): the judge proven where it was not built.

The lab's namespaces and link stand in for the network between two sites, but the exporter
is pointed at the remote as a user points it at a site of theirs, not `lab: true`:
- its own sshd, configured as the distribution ships it (`Subsystem sftp
  /usr/lib/openssh/sftp-server`: OpenSSH's scp speaks SFTP, so the writer of an scp or
  sftp upload is sftp-server, sshd's child through the user's shell), on PLAIN_PORT,
  with cgroup v1's cpu hierarchy mounted where it and its sessions see it, as on any
  host (the lab's servers, started through `ip netns exec`, see none);
- nginx and iperf3 (the lab's own servers);
- reached by address, key and ssh_config; the remote's TCP state and programs read over
  ssh (`stats_command`), its sysctls set over ssh (`tcp_command`), both through one
  ControlMaster; the path's bandwidth unknown unless a cause gives an estimate (an
  iperf3 test's own report, as the exporter keeps one, or a stale one).

Causes are induced by what really causes them (tests/support/plain_causes_*.py) and run
through the real path: the round's probe (measure_path), then run_transfer.  Shared by
tests/lab/test_verdicts_plain.py and benchmarks/verdict_matrix.py --plain.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from bigbinf.config import Config, parse_config, parse_duration
from bigbinf.lab import LabLayout
from bigbinf.measure.datasets import total_bytes
from bigbinf.measure.path.baseline import measure_path
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.protocols.scp import SSH_COMMAND_LINE
from bigbinf.result import LIMITS, PathBaseline, Result

from . import against_truth, session, truth, verdicts

PLAIN_PORT = 2222
SFTP_SERVER = Path("/usr/lib/openssh/sftp-server")  # Debian's default `Subsystem sftp`
REMOTE = "site"  # the remote's name in the plain config
CPU = Path("/sys/fs/cgroup/cpu")
BLKIO = Path("/sys/fs/cgroup/blkio")
Changes = dict[str, dict[str, Any]]  # config sections to change for one run
THROTTLE_PORT = 8080  # a throttled nginx beside the lab's own (a cause's setup starts it)
CURL = ["{binary}", "-sS", "--fail"]
# A program on the remote that passes on what it is given at most 2 MiB/s (a site's
# ingest behind ssh): rsync's receiver is started through the remote's shell, so its
# --rsync-path puts the reader in front of it, reading the ssh channel (plain_config
# writes it where the remote sees it).  It ends when the receiver behind it does: the
# channel stays open until the whole session ends, so it never reads an end of file.
SLOW_READER_BYTES_PER_SECOND = 2 * 1024 * 1024
SLOW_READER = """\
import os, select, sys, time
rate = int(sys.argv[1])
poll = select.poll()
poll.register(0, select.POLLIN)
poll.register(1, 0)  # errors only: the receiver behind this reader has gone
while True:
    events = dict(poll.poll())
    if events.get(1):
        break
    if events.get(0):
        chunk = os.read(0, 65536)
        if not chunk:
            break
        try:
            os.write(1, chunk)
        except BrokenPipeError:
            break
        time.sleep(len(chunk) / rate)
"""

# A burst reader (the breaker's, issue 42): it takes BURST_BYTES, then sleeps BURST_PAUSE
# seconds, over and over, in front of the remote's rsync as SLOW_READER is.
BURST_BYTES, BURST_PAUSE = 4 * 1024 * 1024, 1.0
BURST_READER = """\
import os, select, sys, time
burst, pause = int(sys.argv[1]), float(sys.argv[2])
poll = select.poll()
poll.register(0, select.POLLIN)
poll.register(1, 0)  # errors only: the receiver behind this reader has gone
taken = 0
while True:
    events = dict(poll.poll())
    if events.get(1):
        break
    if events.get(0):
        chunk = os.read(0, 65536)
        if not chunk:
            break
        try:
            os.write(1, chunk)
        except BrokenPipeError:
            break
        taken += len(chunk)
        if taken >= burst:
            taken = 0
            time.sleep(pause)
"""
# A second nginx (verdicts.throttled_nginx, no rate limit) whose listen sets its own socket
# buffers, as an admin's `listen ... sndbuf=32k rcvbuf=64k` does.
BUFFERED_PORT = 8081
BUFFERED_LISTEN = (
    "sndbuf=32k rcvbuf=48k"  # 48k: kept as 98304 B, apart from tcp_rmem's default 131072 (the truth tells them apart)
)

# The links the causes run on (lab.link: tbf rate and queue, the delay line's delay and
# loss), and what the plain remote's config adds.
SITES: dict[str, dict[str, Any]] = {
    # 200 Mbit/s, 40 ms RTT: BDP 1 MB.
    "wan": {"link": {"rate": "200mbit", "delay": "20ms"}},
    # ... its rate configured, as a site knows its link (the return path's cause).
    "wan-known": {"link": {"rate": "200mbit", "delay": "20ms"}, "remote": {"bandwidth": "200mbit"}},
    # ... and its return path's capacity too (remotes.NAME.return_bandwidth: an asymmetric
    # site's uplink, known), what the ACK clock's bound compares with (issue 42).
    "wan-return-known": {
        "link": {"rate": "200mbit", "delay": "20ms"},
        "remote": {"bandwidth": "200mbit", "return_bandwidth": "256kbit"},
    },
    # 80 ms RTT through the delay line, no shaper on the hosts: the causes put the short
    # queue in the middle, as a router's (plain_causes_path.router_queue: 100 Mbit/s, tbf's
    # `latency 50ms` 625 kB); on a sender's own interface TCP small queues keep it from
    # ever overflowing.
    "shortq": {"link": {"delay": "40ms"}},
    # 50 Mbit/s, 400 ms RTT: BDP 2.5 MB.
    "long": {"link": {"rate": "50mbit", "delay": "200ms"}},
    # 200 Mbit/s, 20 ms RTT, 0.5% loss each way.
    "lossy": {"link": {"rate": "200mbit", "delay": "10ms", "loss": 0.5}},
    # No shaper, 20 ms RTT: a cause's policer is the bottleneck.
    "open20": {"link": {"delay": "10ms"}},
    # 100 Mbit/s, 80 ms RTT: BDP 1 MB (issue 42's autotuning and window causes).
    "wan80": {"link": {"rate": "100mbit", "delay": "40ms"}},
    # 100 Mbit/s, 20 ms RTT through a router (the delay line) that a cause may make
    # reorder, pace to a packet rate, clamp the MSS or black-hole the path MTU; its rate
    # configured, as a site knows its link.
    "router": {"link": {"rate": "100mbit", "delay": "10ms"}, "remote": {"bandwidth": "100mbit"}},
    # 100 Mbit/s with a normal queue, no delay line.
    "shaped": {"link": {"rate": "100mbit"}},
    # ... its rate configured for the remote (remotes.NAME.bandwidth), as a site knows its link.
    "shaped-known": {"link": {"rate": "100mbit"}, "remote": {"bandwidth": "100mbit"}},
    # No shaper, no delay line: what limits is the hosts.
    "open": {"link": {}},
}
DATASETS = {
    name: {"file": f"{name}.bin", "size": f"{name[1:-1]}MiB"}
    for name in ("f1m", "f2m", "f4m", "f8m", "f16m", "f32m", "f64m")
}
PROTOCOLS: dict[str, Any] = {
    "scp": {"directions": ["download", "upload"]},
    "sftp": {"directions": ["download", "upload"]},
    "http": {"directions": ["download", "upload"]},
    "iperf3": {"directions": ["download", "upload"]},
    # CUBIC backs off on every loss (BBR rides through random loss).  A download's
    # sender is the remote: its algorithm is set over tcp_command.
    "http-cubic": {"module": "http", "congestion": "cubic", "directions": ["download", "upload"]},
    "scp-cubic": {"module": "scp", "congestion": "cubic", "directions": ["download", "upload"]},
    "iperf3-cubic": {"module": "iperf3", "congestion": "cubic", "directions": ["download", "upload"]},
    # nginx with limit_rate beside the lab's own (started by the cause's setup).
    "http-remote-throttle": {
        "module": "http",
        "directions": ["download"],
        "command": [*CURL, "-o", "{local_path}", f"http://{{host}}:{THROTTLE_PORT}/{{remote_name}}"],
    },
    # curl itself reads or sends at most 2 MB/s.
    "http-local-throttle": {
        "module": "http",
        "directions": ["download", "upload"],
        "command": [*CURL, "--limit-rate", "2M", "-o", "{local_path}", "http://{host}/{remote_name}"],
        "upload_command": [*CURL, "--limit-rate", "2M", "-T", "{local_path}", "http://{host}/{remote_name}"],
    },
    # The nginx whose listen sets its own socket buffers (BUFFERED_LISTEN).
    "http-buffered": {
        "module": "http",
        "directions": ["download", "upload"],
        "command": [*CURL, "-o", "{local_path}", f"http://{{host}}:{BUFFERED_PORT}/{{remote_name}}"],
        "upload_command": [*CURL, "-T", "{local_path}", f"http://{{host}}:{BUFFERED_PORT}/{{remote_name}}"],
    },
}  # fmt: skip


def slow_reader_protocol(reader: Path, args: str = str(SLOW_READER_BYTES_PER_SECOND)) -> dict[str, Any]:
    """rsync over ssh into the remote's slow reader (SLOW_READER at `reader`, or another
    reader script with its `args`), in front of its receiver."""
    rsync_path = f"--rsync-path=python3 {reader} {args} | rsync"
    return {
        "module": "rsync",
        "directions": ["upload"],
        "upload_command": ["{binary}", "-a", "--whole-file", "-e", SSH_COMMAND_LINE, rsync_path, "--",
                           "{local_path}", "{user}@{url_host}:{remote_path}"],
    }  # fmt: skip


LAB_SERVERS = ["sshd", "nginx", "iperf3"]  # the lab's sshd only for its keys and ssh_config
PROBE = {"count": 10, "interval": "20ms"}
STATS_INTERVAL = "500ms"


@dataclass
class PlainSite:
    """A lab's network with a plain remote on it: `lab` (the namespaces and link, where the
    causes are induced) and `config` (what the exporter is pointed at: remotes.site)."""

    name: str
    lab: Config
    config: Config
    sshd_pid: int  # the plain sshd's listener: the sessions it forks inherit its cgroups
    control: Path  # the ControlMaster's directory

    @property
    def layout(self) -> LabLayout:
        return LabLayout(self.lab.lab)

    @property
    def ssh(self) -> list[str]:
        """ssh to the plain remote through the ControlMaster (as stats_command is)."""
        return _ssh(self.layout, self.control)

    @property
    def host(self) -> str:
        assert self.lab.lab is not None
        return f"root@{self.lab.lab.remote_address}"

    def remote_run(self, argv: list[str], timeout: float = 60) -> str:
        """A command on the remote as the stats command runs it (over ssh, from the client's namespace)."""
        out = subprocess.run(
            ["ip", "netns", "exec", self.layout.client_ns, *self.ssh, self.host, *argv],
            capture_output=True, text=True, timeout=timeout, check=True,
        )  # fmt: skip
        return out.stdout

    def open_master(self) -> None:
        self.remote_run(["true"])

    def close_master(self) -> None:
        subprocess.run(
            ["ip", "netns", "exec", self.layout.client_ns, *self.ssh, "-O", "exit", self.host],
            check=False, timeout=30, capture_output=True,
        )  # fmt: skip

    def with_changes(self, changes: Changes | None) -> Config:
        """The plain config with sections changed: {"remote": {...}} updates remotes.site
        (e.g. upload_dir), any other key the top-level section of that name (e.g.
        {"transfer": {"workdir": ...}})."""
        if not changes:
            return self.config
        raw = self.config.model_dump(mode="json", exclude_unset=True)
        for section, values in changes.items():
            target = raw["remotes"][REMOTE] if section == "remote" else raw.setdefault(section, {})
            target.update(values)
        return parse_config(yaml.safe_dump(raw), f"plain-{self.name}.yaml")


def _ssh(layout: LabLayout, control: Path) -> list[str]:
    return [
        "ssh", "-F", str(layout.ssh_config), "-p", str(PLAIN_PORT), "-o", "ConnectTimeout=10",
        "-o", "ControlMaster=auto", "-o", f"ControlPath={control}/%C", "-o", "ControlPersist=120",
    ]  # fmt: skip


@contextlib.contextmanager
def plain_site(make_lab: Callable[..., Config], name: str, datasets: set[str], tmp: Path) -> Iterator[PlainSite]:
    """Site `name` of SITES built (the lab by `make_lab`, which also tears it down) with
    its plain remote up for the block; the plain sshd, its cgroup mounts and the
    ControlMaster removed after, whatever happened."""
    lab_config = make_lab(
        link=SITES[name]["link"],
        datasets={d: DATASETS[d] for d in datasets},
        protocols={"scp": {}},
        servers=LAB_SERVERS,
    )
    control = session.scratch_dir(Path("/tmp"), "bbcm-", 0o700)  # a socket path fits 108 bytes
    with contextlib.ExitStack() as undo:
        undo.callback(_remove_dir, control)
        pid = undo.enter_context(default_sshd(lab_config))
        undo.enter_context(cgroups_mounted_for(pid))
        config = plain_config(lab_config, name, tmp, control)
        site = PlainSite(name, lab_config, config, pid, control)
        site.open_master()
        undo.callback(site.close_master)
        yield site


def _remove_dir(path: Path) -> None:
    for entry in path.iterdir():
        entry.unlink(missing_ok=True)
    path.rmdir()


def plain_config(lab_config: Config, name: str, tmp: Path, control: Path) -> Config:
    """The lab as a user would point bigbinf at a site: address, port, key and
    ssh_config, not `lab: true`; stats and sysctls over ssh through a ControlMaster."""
    assert lab_config.lab is not None
    layout = LabLayout(lab_config.lab)
    raw = lab_config.model_dump(mode="json", exclude_unset=True)
    raw.pop("lab")
    ssh = [*_ssh(layout, control), "root@{host}"]
    raw["remotes"] = {
        REMOTE: {
            "address": lab_config.lab.remote_address,
            "port": PLAIN_PORT,
            "key": str(layout.client_key),
            "ssh_config": str(layout.ssh_config),
            "data_dir": str(layout.data_dir),
            "upload_dir": str(layout.upload_dir),
            "serve_root": str(layout.serve_root),
            "checksums": str(layout.checksums),
            "netns": layout.client_ns,
            "interface": layout.client_if,
            "probe": PROBE,
            "stats_command": ssh,
            "tcp_command": ssh,
            "stats_interval": STATS_INTERVAL,
            **SITES[name].get("remote", {}),
        }
    }
    reader = layout.state_dir / "slow-reader.py"
    reader.write_text(SLOW_READER)
    burst = layout.state_dir / "burst-reader.py"
    burst.write_text(BURST_READER)
    raw["protocols"] = {
        **PROTOCOLS,
        "rsync-slow-reader": slow_reader_protocol(reader),
        "rsync-burst-reader": slow_reader_protocol(burst, f"{BURST_BYTES} {BURST_PAUSE}"),
    }
    raw["journal"] = {"path": str(tmp / f"plain-{name}.jsonl")}
    return parse_config(yaml.safe_dump(raw), f"plain-{name}.yaml")


@contextlib.contextmanager
def default_sshd(lab_config: Config) -> Iterator[int]:
    """An sshd in the lab's remote namespace configured as a distribution ships it (the
    lab's keys; `Subsystem sftp /usr/lib/openssh/sftp-server`) on PLAIN_PORT; its pid
    (`ip netns exec` execs sshd: the same process)."""
    assert lab_config.lab is not None
    layout = LabLayout(lab_config.lab)
    tag = uuid.uuid4().hex[:6]
    conf = layout.run_dir / f"sshd-plain-{tag}.conf"
    pidfile = layout.run_dir / f"sshd-plain-{tag}.pid"
    lines = []
    for line in layout.sshd_config.read_text().splitlines():
        if line.startswith("Subsystem "):
            line = f"Subsystem sftp {SFTP_SERVER}"
        elif line.startswith("Port "):
            line = f"Port {PLAIN_PORT}"
        elif line.startswith("PidFile "):
            line = f"PidFile {pidfile}"
        lines.append(line)
    conf.write_text("\n".join(lines) + "\n")
    conf.chmod(0o600)
    sshd = subprocess.Popen(
        ["ip", "netns", "exec", layout.remote_ns, "/usr/sbin/sshd", "-D", "-f", str(conf), "-E",
         str(layout.run_dir / f"sshd-plain-{tag}.log")],
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            listening = subprocess.run(
                ["ip", "netns", "exec", layout.remote_ns, "ss", "-tlnH", "sport", f"= :{PLAIN_PORT}"],
                capture_output=True, text=True, check=False,
            ).stdout  # fmt: skip
            if listening.strip():
                break
            time.sleep(0.05)
        yield sshd.pid
    finally:
        sshd.terminate()
        try:
            sshd.wait(10)
        except subprocess.TimeoutExpired:
            sshd.kill()
            sshd.wait()
        conf.unlink(missing_ok=True)
        pidfile.unlink(missing_ok=True)


@contextlib.contextmanager
def cgroups_mounted_for(pid: int) -> Iterator[None]:
    """cgroup v1's cpu hierarchy mounted where process `pid` (an sshd in the lab) and its
    sessions see it, for the block, as on any host: the lab starts its servers through
    `ip netns exec`, whose fresh sysfs has nothing under /sys/fs/cgroup.  In that process's
    mount namespace only (ip netns exec made it a slave: nothing reaches this host's)."""
    enter = ["nsenter", "-t", str(pid), "-m"]
    seen = subprocess.run([*enter, "test", "-e", "/sys/fs/cgroup/cpu/cpu.stat"], check=False).returncode == 0
    if seen or not (CPU / "cpu.stat").exists():
        yield
        return
    subprocess.run([*enter, "mount", "-t", "tmpfs", "-o", "size=64k", "bbt-cgroup", "/sys/fs/cgroup"], check=True)
    try:
        subprocess.run([*enter, "mkdir", "/sys/fs/cgroup/cpu"], check=True)
        mount = ["mount", "-t", "cgroup", "-o", "cpu", "bbt-cgroup-cpu", "/sys/fs/cgroup/cpu"]
        subprocess.run([*enter, *mount], check=True)
        yield
    finally:
        subprocess.run([*enter, "umount", "-R", "/sys/fs/cgroup"], check=False)


@contextlib.contextmanager
def listener_in_group(hierarchy: Path, pid: int, kind: str) -> Iterator[Path]:
    """A cgroup v1 group of its own under `hierarchy` with the sshd listener `pid` in it
    for the block (the sessions it forks meanwhile inherit it); afterwards every process
    in it goes back to the hierarchy's root and the group is removed, whatever happened."""
    group = hierarchy / f"bbt-{kind}-{os.getpid()}-{threading.get_native_id()}-{uuid.uuid4().hex[:4]}"
    session.register_cgroup(group).mkdir()  # the reaper removes it if this block never ends
    try:
        (group / "cgroup.procs").write_text(str(pid))
        yield group
    finally:
        deadline = time.monotonic() + 10
        while True:
            procs = (group / "cgroup.procs").read_text().split()
            for p in procs:
                with contextlib.suppress(OSError):  # exited meanwhile
                    (hierarchy / "cgroup.procs").write_text(p)
            if not procs or time.monotonic() > deadline:
                break
        group.rmdir()


# ---------------------------------------------------------------- causes and runs

# Induces a cause for a `with`; what it yields changes the plain config for the run
# (PlainSite.with_changes), e.g. a remote upload_dir on a slow disk.
Setup = Callable[[PlainSite], contextlib.AbstractContextManager["Changes | None"]]
Estimate = Callable[[PlainSite], float | None]  # the path's bandwidth estimate the round has (bytes/s)


@dataclass(frozen=True)
class PlainCause:
    """One induced cause on a plain site, and the verdict (and side) an engineer acting
    on it needs: or, where `error` is given, the failure (a pattern its error must match)."""

    name: str
    site: str
    protocol: str
    dataset: str
    direction: str
    expected: str
    side: str
    setup: Setup | None = None
    estimate: Estimate | None = None  # default: none (no bandwidth configured, no iperf3 test)
    error: str = ""  # a regular expression: the run fails, and says this
    # A regular expression the evidence must match too, where the verdict alone does not
    # say which bound held (a packet rate is named link_capacity: its evidence says so).
    evidence: str = ""
    bound: str = ""  # issue 42: the bound that should name it (the numbers the evidence must show)
    path_rate: str = ""  # the path's rate for the truth's BDP where the cause sets it (default the site's)


def right(cause: PlainCause, r: Result) -> bool:
    """Whether run `r` said what `cause` needs: its verdict and side, or its failure."""
    if cause.error:
        return r.outcome != "ok" and re.search(cause.error, r.error or "") is not None
    named = not cause.evidence or re.search(cause.evidence, r.limited_evidence) is not None
    return r.outcome == "ok" and (r.limited_by, r.limited_side) == (cause.expected, cause.side) and named


@dataclass
class PlainOutcome(verdicts.Outcome):
    """A cause's runs, each with its truth (tests/support/truth.py), in run order."""

    truths: list[truth.Truth] = field(default_factory=list)

    def right(self, r: Result) -> bool:
        return right(self.cause, r)  # type: ignore[arg-type]

    def contradicted(self) -> list[list[str]]:
        """Per run, the evidence lines its truth contradicts."""
        return [
            against_truth.contradicted(r.limited_evidence, t, r.limited_side)
            for r, t in zip(self.results, self.truths, strict=True)
        ]


def run_cause(site: PlainSite, cause: PlainCause) -> Result:
    """One run: the cause induced, the path probed as a round does (with the estimate the
    exporter would have), then the transfer, judged against that probe."""
    return run_cause_with_truth(site, cause)[0]


def run_cause_with_truth(
    site: PlainSite, cause: PlainCause, baselines: list[PathBaseline] | None = None
) -> tuple[Result, truth.Truth]:
    """run_cause, and the run's truth: the counters of tests/support/truth.py, read just
    before and just after the transfer (not the probe nor the estimate), with the cause
    still induced; the path's baseline the judge was given is appended to `baselines`
    (so a recorded run can be re-judged as it was)."""
    with cause.setup(site) if cause.setup else contextlib.nullcontext() as changes:
        config = site.with_changes(changes)
        bandwidth = cause.estimate(site) if cause.estimate else None
        (spec,) = [
            s
            for s in plan_round(config, None)
            if (s.protocol, s.dataset, s.direction) == (cause.protocol, cause.dataset, cause.direction)
        ]
        baseline = measure_path(spec.remote, bandwidth)
        if baselines is not None:
            baselines.append(baseline)
        before = truth.snapshot(site.layout)
        r = run_transfer(spec, config, "plain-verdicts", baseline)
        after = truth.snapshot(site.layout)
        lab = site.lab.lab
        assert lab is not None
        link = SITES[cause.site]["link"]
        rate = parse_rate(cause.path_rate or link.get("rate", ""))
        rtt = 2 * parse_duration(link["delay"]) if link.get("delay") else None
        size = total_bytes(config.datasets[cause.dataset])
        t = truth.truth(
            site.layout, before, after, cause.direction, size, (lab.client_address, lab.remote_address),
            {"rate": rate, "rtt": rtt},
        )  # fmt: skip
        return r, t


def parse_rate(text: str) -> float | None:
    """tc's "100mbit" in bytes per second; None for none."""
    match = re.fullmatch(r"(\d+)([kmg]?)bit", text)
    if not match:
        return None
    return int(match.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match.group(2)] / 8


def iperf3_rate(site: PlainSite, direction: str = "download") -> float:
    """What an ok iperf3 test to the plain remote reports (bytes/s), as the exporter
    keeps it for the path's estimate (service/rounds.py)."""
    (spec,) = [
        s for s in plan_round(site.config, None) if (s.protocol, s.dataset, s.direction) == ("iperf3", "f8m", direction)
    ]
    r = run_transfer(spec, site.config, "plain-estimate")
    assert r.outcome == "ok" and r.reported.get("seconds", 0) > 0, (r.outcome, r.error)
    return r.reported["bytes"] / r.reported["seconds"]


def check_causes(causes: list[PlainCause]) -> None:
    assert all(c.expected in LIMITS or (c.error and not c.expected) for c in causes)
    assert all(c.site in SITES and c.dataset in DATASETS for c in causes)
    assert all(c.protocol in PROTOCOLS or c.protocol in ("rsync-slow-reader", "rsync-burst-reader") for c in causes)


@contextlib.contextmanager
def burners(count: int) -> Iterator[list[int]]:
    """`count` busy loops, one pinned to each CPU this process may use in turn, killed on
    the way out whatever happened: the matrix "beside CPU burners"."""
    cpus = sorted(os.sched_getaffinity(0))
    procs = [
        subprocess.Popen(["taskset", "-c", str(cpus[i % len(cpus)]), "sh", "-c", "while :; do :; done"],
                         start_new_session=True)
        for i in range(count)
    ]  # fmt: skip
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def module_tests(causes: list[PlainCause], runs: int = 3, truth_checked: bool = False) -> tuple[Any, Any, Any]:
    """A lab test module's share of the plain matrix: (the sites fixture, the per-cause
    test, the module's hit-rate test), to be bound to names in the module (pytest collects
    them there).  Each cause `runs` times: all ok (or all failed as it says, for a cause
    that must fail), no evidence line against its verdict, the majority right;
    `truth_checked`: no evidence line its truth contradicts either
    (tests/support/against_truth.py).  Over the module, a verdict given right in at least
    95% of runs (the exact binomial test of tests/support/verdicts.py) and at most 10%
    withheld."""
    outcomes: list[PlainOutcome] = []

    @pytest.fixture(scope="module")
    def plain_sites(make_module_lab: Callable[..., Config], tmp_path_factory: Any) -> Iterator[dict[str, PlainSite]]:
        with contextlib.ExitStack() as stack:
            sites = {}
            for name in dict.fromkeys(c.site for c in causes):
                used = {c.dataset for c in causes if c.site == name} | {"f8m"}
                tmp = tmp_path_factory.mktemp(f"plain-{name}")
                sites[name] = stack.enter_context(plain_site(make_module_lab, name, used, tmp))
            yield sites

    @pytest.mark.parametrize("cause", causes, ids=lambda c: f"{c.name}-{c.protocol}-{c.direction}")
    def test_the_verdict_names_the_cause(plain_sites: dict[str, PlainSite], cause: PlainCause) -> None:
        outcome = PlainOutcome(cause)  # type: ignore[arg-type]
        site, voided = plain_sites[cause.site], []
        while len(outcome.results) < runs:
            # A run whose lab path (the delay line, a process on this host) was held by this
            # host's CPUs is no trial of the cause, as in verdicts.check_cause (CI: an MSS
            # clamp's packet-rate bound met at 74% of it beside the suite's own load).
            (r, t), held = verdicts.path_held(site.lab, lambda: run_cause_with_truth(site, cause))
            said = (f"{cause.name} / {cause.protocol} {cause.direction}: {r.outcome} {r.limited_by} "
                    f"[{r.limited_side}] {r.limited_evidence} {r.error}\n  truth: {truth.summary(t)}")  # fmt: skip
            if held >= verdicts.VOID_SHARE:
                print(f"set aside (the lab's delay line queued for a CPU {held:.0%} of the run): {said}")
                voided.append(f"{held:.0%}")
                assert len(voided) <= verdicts.VOID_RUNS, f"this host held the lab's path ({voided}): no trial"
                continue
            print(said)
            if not cause.error:
                assert r.outcome == "ok", r.error
            outcome.results.append(r)
            outcome.truths.append(t)
        outcomes.append(outcome)
        said = [(r.outcome, r.limited_by, r.limited_side, r.limited_evidence, r.error) for r in outcome.results]
        assert [c for r in outcome.results for c in verdicts.contradictions(r)] == [], said
        if truth_checked:
            assert [c for run in outcome.contradicted() for c in run] == [], said
        assert sum(outcome.right(r) for r in outcome.results) * 2 > runs, said

    def test_precision_and_coverage() -> None:
        results = [(o, r) for o in outcomes for r in o.results if not o.cause.error]  # type: ignore[attr-defined]
        assert results or any(o.cause.error for o in outcomes), "no cause ran"  # type: ignore[attr-defined]
        judged = [(o, r) for o, r in results if r.limited_by]
        right = sum(o.right(r) for o, r in judged)
        wrong = [(o.cause.name, o.cause.protocol, r.limited_by, r.limited_side) for o, r in judged if not o.right(r)]
        p = verdicts.below_goal_p(right, len(judged)) if judged else 1.0
        assert p >= verdicts.ALPHA, f"{right} of {len(judged)} verdicts right (p {p:.3f}); wrong: {wrong}"
        withheld = len(results) - len(judged)
        assert not results or verdicts.below_goal_p(len(judged), len(results), 0.9) >= verdicts.ALPHA, (
            f"{withheld} of {len(results)} runs withheld"
        )

    return plain_sites, test_the_verdict_names_the_cause, test_precision_and_coverage
