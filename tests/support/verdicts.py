"""The verdict's confusion matrix (issue 23): known causes induced in the lab, one at a time,
each run through the real path (run_transfer judged against the round's probe), and what
judge/ (bigbinf.judge) said of it.  Shared by tests/lab/test_verdicts_*.py (three runs per
cause, in CI) and benchmarks/verdict_matrix.py (the table in docs/benchmarks.md).

Every cause is induced by what really causes it, never by editing a result:
- buffer caps: the namespace's tcp_rmem/tcp_wmem maximum (sysctl, put back after);
- loss on the data path: the lab link's loss (the delay line drops packets both ways);
- loss on the ACK path only: nftables in the data sender's namespace drops a share of
  what arrives from the receiver (its ACKs), after the wire;
- a policer: tbf with a queue of a few packets, so the excess is dropped, not queued;
- a shaped link: tbf at its rate with a normal queue;
- startup: a file that ends before a connection leaves slow start;
- a CPU-bound program: the transfer's programs in a cpu cgroup with a quota of 20% of a core;
- throttles: nginx's limit_rate (the remote's program) or curl --limit-rate (ours);
- a slow disk: the upload's source on a loop device read through a blkio throttle;
- parallel streams each window-bound: GridFTP -p 4 with the receiver's buffer capped;
- buffer cap plus loss: a capped receiver on a lossy link, where more buffer buys nothing.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from bigbinf import lab
from bigbinf.config import Config, parse_config
from bigbinf.lab import LabLayout, network
from bigbinf.measure import datasets as dataset_files
from bigbinf.measure.path.baseline import measure_path
from bigbinf.measure.plan import TransferSpec, plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.result import LIMITS, Result

from . import evidence
from .exporter import ROOT

CURL = ["{binary}", "-sS", "--fail"]
THROTTLE_PORT = 8080  # the throttled nginx beside the lab's own

# The labs the causes run in: one link each (built once per test module), and what the
# lab remote's config adds (a configured bandwidth, where no tbf gives the lab's own).
LABS: dict[str, dict[str, Any]] = {
    # 200 Mbit/s, 40 ms RTT: BDP 1 MB, above the capped buffers below.
    "wan": {"link": {"rate": "200mbit", "delay": "20ms"}},
    # 200 Mbit/s, 20 ms RTT, 0.5% loss each way (the delay line's).
    "lossy": {"link": {"rate": "200mbit", "delay": "10ms", "loss": 0.5}},
    # A policer (nftables, in the receiver's namespace: policed()) on an unshaped 20 ms
    # path whose bandwidth is configured as the policer's rate, as an operator would.
    "policed": {"link": {"delay": "10ms"}, "remote": {"bandwidth": "50mbit"}},
    # A plain shaped link with a normal queue (no delay line: nothing in userspace on the
    # path, so a busy machine cannot slow the path itself).
    "shaped": {"link": {"rate": "100mbit"}},
    # No rate limit and no delay line: what limits is the hosts (CPU).
    "open": {"link": {}},
    # The demo's own link (schedules/demo.yaml): 200 Mbit/s, 20 ms RTT.
    "demo": {"link": yaml.safe_load((ROOT / "schedules" / "demo.yaml").read_text())["lab"]["link"]},
}
POLICER_BYTES_PER_SECOND = 50_000_000 // 8
DATASETS = {
    name: {"file": f"{name}.bin", "size": f"{name[1:-1]}MiB"} for name in ("f1m", "f2m", "f4m", "f8m", "f16m", "f32m")
}
PROTOCOLS: dict[str, Any] = {
    "http": {"directions": ["download", "upload"]},
    "scp": {"directions": ["download", "upload"]},
    "iperf3": {"directions": ["download", "upload"]},
    "gridftp-p4": {"module": "gridftp", "options": {"parallel": 4}, "directions": ["download"]},
    # CUBIC backs off on every loss (BBR rides through random loss): the loss limits.
    "http-cubic": {"module": "http", "congestion": "cubic", "directions": ["download", "upload"]},
    "iperf3-cubic": {"module": "iperf3", "congestion": "cubic", "directions": ["download", "upload"]},
    # nginx with limit_rate 2m beside the lab's own (started by the cause's setup).
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
}  # fmt: skip
SERVERS = ["nginx", "sshd", "iperf3", "gridftp"]
PROBE = {"count": 10, "interval": "20ms"}


Setup = Callable[[Config], contextlib.AbstractContextManager[None]]  # induces a cause for a `with`


@dataclass(frozen=True)
class Cause:
    """One induced cause, and the verdict (and side) an engineer acting on it needs."""

    name: str
    lab: str
    protocol: str
    dataset: str
    direction: str
    expected: str
    side: str
    setup: Setup | None = None


@dataclass
class Outcome:
    cause: Cause
    results: list[Result] = field(default_factory=list)

    def right(self, r: Result) -> bool:
        return (r.limited_by, r.limited_side) == (self.cause.expected, self.cause.side)


# ---------------------------------------------------------------- inducing causes


def _ns(config: Config, which: str) -> str:
    layout = LabLayout(config.lab)
    return layout.client_ns if which == "local" else layout.remote_ns


@contextlib.contextmanager
def sysctl(config: Config, which: str, key: str, value: str) -> Iterator[None]:
    """A per-namespace sysctl for the block, put back after (the lab is shared)."""
    ns = _ns(config, which)
    before = subprocess.run(
        ["ip", "netns", "exec", ns, "sysctl", "-n", key], capture_output=True, text=True, check=True
    ).stdout.split()
    subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={value}"], check=True)
    try:
        yield
    finally:
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={' '.join(before)}"], check=True)


def capped(
    which: str, key: str, maximum: int = 256 * 1024
) -> Callable[[Config], contextlib.AbstractContextManager[None]]:
    return lambda config: sysctl(config, which, key, f"4096 {min(131072, maximum)} {maximum}")


@contextlib.contextmanager
def ack_loss(config: Config, percent: int = 2) -> Iterator[None]:
    """nftables in the remote's namespace drops `percent`% of what arrives from the client
    (a download's ACKs), after the wire: the data path itself loses nothing."""
    ns = _ns(config, "remote")
    table = "bbt_ackloss"
    nft = ["ip", "netns", "exec", ns, "nft"]
    subprocess.run([*nft, "add", "table", "inet", table], check=True)
    try:
        subprocess.run(
            [*nft, "add", "chain", "inet", table, "in", "{ type filter hook prerouting priority -300; }"], check=True
        )
        subprocess.run(
            [*nft, "add", "rule", "inet", table, "in", "ip", "saddr", config.lab.client_address,
             "tcp", "flags", "&", "(syn|fin|rst)", "==", "0", "numgen", "random", "mod", "100", "<", str(percent),
             "drop"],
            check=True,
        )  # fmt: skip
        yield
    finally:
        subprocess.run([*nft, "delete", "table", "inet", table], check=False)


@contextlib.contextmanager
def policed(config: Config, which: str = "local") -> Iterator[None]:
    """A policer at POLICER_BYTES_PER_SECOND in front of `which` side (its namespace's
    prerouting: after the wire, before its stack): a token bucket of 128 kB, the excess
    dropped, never queued."""
    ns = _ns(config, which)
    peer = config.lab.remote_address if which == "local" else config.lab.client_address
    table = "bbt_policer"
    nft = ["ip", "netns", "exec", ns, "nft"]
    subprocess.run([*nft, "add", "table", "inet", table], check=True)
    try:
        subprocess.run(
            [*nft, "add", "chain", "inet", table, "in", "{ type filter hook prerouting priority -300; }"], check=True
        )
        subprocess.run(
            [*nft, "add", "rule", "inet", table, "in", "ip", "saddr", peer, "limit", "rate", "over",
             f"{POLICER_BYTES_PER_SECOND // 1000}", "kbytes/second", "burst", "128", "kbytes", "drop"],
            check=True,
        )  # fmt: skip
        yield
    finally:
        subprocess.run([*nft, "delete", "table", "inet", table], check=False)


CPU_CGROUP = Path("/sys/fs/cgroup/cpu")
CPU_SHARE = 0.2  # of one core, for the CPU-bound causes' transfer


@contextlib.contextmanager
def cpu_capped(config: Config) -> Iterator[None]:
    """This thread (and so the transfer command it starts: run_cause runs it here) in a
    cpu cgroup with a CFS quota of CPU_SHARE of a core: the transfer's own programs are
    short of CPU, as in a container with a CPU limit, whatever else the machine does (a
    nice value would not do: every session is its own autogroup, and the busy loop's
    session would get no more than ours)."""
    with _in_cgroup(CPU_CGROUP, "cpu") as cgroup:
        (cgroup / "cpu.cfs_period_us").write_text("100000")
        (cgroup / "cpu.cfs_quota_us").write_text(str(int(100000 * CPU_SHARE)))
        yield


@contextlib.contextmanager
def _in_cgroup(root: Path, kind: str) -> Iterator[Path]:
    """A cgroup of its own under `root` (a cgroup v1 hierarchy) with this thread in it for
    the block; afterwards every task that started in it meanwhile (the analyser's worker
    process) goes back to the root and the cgroup is removed."""
    cgroup = root / f"bbt-{kind}-{os.getpid()}-{threading.get_native_id()}"
    cgroup.mkdir()
    try:
        (cgroup / "tasks").write_text(str(threading.get_native_id()))
        yield cgroup
    finally:
        for tid in (cgroup / "tasks").read_text().split():
            with contextlib.suppress(OSError):  # exited meanwhile
                (root / "tasks").write_text(tid)
        cgroup.rmdir()


@contextlib.contextmanager
def throttled_nginx(config: Config, rate: str = "2m", port: int = THROTTLE_PORT, listen: str = "") -> Iterator[None]:
    """A second nginx in the remote's namespace on `port` (THROTTLE_PORT), serving the
    lab's tree at `rate` per connection (limit_rate, "" for none): the remote's program is
    the limit; `listen`: options of its listen directive (`sndbuf=32k rcvbuf=64k`: the
    program's own socket buffers), with the lab's WebDAV upload location too."""
    layout = LabLayout(config.lab)
    conf_dir = layout.run_dir / f"throttled-nginx-{port}"
    conf_dir.mkdir(parents=True, exist_ok=True)
    conf = conf_dir / "nginx.conf"
    conf.write_text(
        "daemon off; master_process off; worker_processes 1; user root;\n"
        f"pid {conf_dir}/nginx.pid; error_log {conf_dir}/error.log;\n"
        "events { worker_connections 16; }\n"
        f"http {{ access_log off; client_body_temp_path {conf_dir}/body; proxy_temp_path {conf_dir}/proxy;\n"
        f"  fastcgi_temp_path {conf_dir}/fcgi; uwsgi_temp_path {conf_dir}/uwsgi; scgi_temp_path {conf_dir}/scgi;\n"
        "  sendfile on; types { application/octet-stream bin; }\n"
        f"  server {{ listen {config.lab.remote_address}:{port}{' ' + listen if listen else ''}; "
        f"root {layout.serve_root};\n"
        + (f"    limit_rate {rate};\n" if rate else "")
        + "    location /upload/ { dav_methods PUT DELETE; create_full_put_path on; client_max_body_size 0; } }\n"
        "}\n"
    )
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = subprocess.Popen(["ip", "netns", "exec", layout.remote_ns, nginx, "-c", str(conf)], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            listening = subprocess.run(
                ["ip", "netns", "exec", layout.remote_ns, "ss", "-tlnH", "sport", f"= :{port}"],
                capture_output=True, text=True,
            ).stdout  # fmt: skip
            if listening.strip():
                break
            time.sleep(0.05)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(conf_dir, ignore_errors=True)


BLKIO = Path("/sys/fs/cgroup/blkio")
SLOW_DISK_BYTES_PER_SECOND = 2_000_000


@contextlib.contextmanager
def slow_disk(config: Config, dataset: str = "f16m") -> Iterator[None]:
    """The upload's source on a file system of its own (a loop device) that this thread's
    reads reach through a blkio throttle (SLOW_DISK_BYTES_PER_SECOND), its page cache
    dropped before the transfer: the sending program waits on its disk.  The transfer
    runs in this thread (run_cause), so its command inherits the throttled cgroup."""
    ds = config.datasets[dataset]
    sources = config.transfer.workdir / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    image = config.transfer.workdir / "slow-disk.img"
    with contextlib.ExitStack() as undo:
        with open(image, "wb") as f:
            f.truncate(ds.size + 64 * 1024 * 1024)
        undo.callback(image.unlink, missing_ok=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
        device = subprocess.run(
            ["losetup", "--find", "--show", str(image)], check=True, capture_output=True, text=True
        ).stdout.strip()
        undo.callback(subprocess.run, ["losetup", "-d", device], check=False)
        subprocess.run(["mount", device, str(sources)], check=True)
        undo.callback(subprocess.run, ["umount", "-l", str(sources)], check=False)
        dataset_files.ensure(sources, ds)  # what upload_source() would make, on the slow disk
        with open(sources / ds.file, "rb") as f:
            os.fsync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        major, minor = (int(n) for n in Path(f"/sys/class/block/{Path(device).name}/dev").read_text().split(":"))
        cgroup = undo.enter_context(_in_cgroup(BLKIO, "blkio"))
        (cgroup / "blkio.throttle.read_bps_device").write_text(f"{major}:{minor} {SLOW_DISK_BYTES_PER_SECOND}")
        yield


# ---------------------------------------------------------------- the causes

RMEM, WMEM = "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"

CAUSES = [
    # Buffers: 256 KiB against a 1 MB BDP, at one end or the other (tests/lab/test_verdicts_buffers.py).
    Cause("receiver buffer cap (local)", "wan", "http", "f8m", "download", "receive_window", "local",
          capped("local", RMEM)),
    Cause("receiver buffer cap (local)", "wan", "scp", "f16m", "download", "receive_window", "local",
          capped("local", RMEM)),
    Cause("receiver buffer cap (remote)", "wan", "http", "f8m", "upload", "receive_window", "remote",
          capped("remote", RMEM)),
    Cause("receiver buffer cap (remote)", "wan", "iperf3", "f8m", "upload", "receive_window", "remote",
          capped("remote", RMEM)),
    Cause("sender buffer cap (local)", "wan", "http", "f8m", "upload", "send_buffer", "local",
          capped("local", WMEM)),
    Cause("sender buffer cap (local)", "wan", "iperf3", "f8m", "upload", "send_buffer", "local",
          capped("local", WMEM)),
    Cause("sender buffer cap (remote)", "wan", "http", "f8m", "download", "send_buffer", "remote",
          capped("remote", WMEM)),
    Cause("sender buffer cap (remote)", "wan", "scp", "f16m", "download", "send_buffer", "remote",
          capped("remote", WMEM)),
    Cause("parallel streams each window-bound", "wan", "gridftp-p4", "f16m", "download", "receive_window", "local",
          capped("local", RMEM, 128 * 1024)),
    # The path (tests/lab/test_verdicts_paths.py).
    Cause("loss on the data path", "lossy", "http-cubic", "f2m", "download", "congestion", "path"),
    Cause("loss on the data path", "lossy", "iperf3-cubic", "f8m", "upload", "congestion", "path"),
    Cause("buffer cap plus loss", "lossy", "http-cubic", "f8m", "download", "congestion", "path",
          capped("local", RMEM)),
    Cause("loss on the ACK path only", "shaped", "http", "f32m", "download", "link_capacity", "path", ack_loss),
    Cause("loss on the ACK path only", "shaped", "iperf3", "f32m", "download", "link_capacity", "path", ack_loss),
    Cause("a plain shaped link", "shaped", "http", "f32m", "download", "link_capacity", "path"),
    Cause("a plain shaped link", "shaped", "iperf3", "f32m", "upload", "link_capacity", "path"),
    Cause("a policer", "policed", "http", "f16m", "download", "link_capacity", "path", policed),
    Cause("a policer", "policed", "iperf3", "f16m", "upload", "link_capacity", "path",
          lambda config: policed(config, "remote")),
    # Programs (tests/lab/test_verdicts_programs.py).
    Cause("a short file", "wan", "http", "f1m", "download", "startup", "path"),
    Cause("a short file", "wan", "scp", "f1m", "upload", "startup", "path"),
    Cause("a remote throttle (nginx limit_rate)", "wan", "http-remote-throttle", "f8m", "download", "application",
          "remote", throttled_nginx),
    Cause("a local throttle (curl --limit-rate)", "wan", "http-local-throttle", "f8m", "download", "application",
          "local"),
    Cause("a local throttle (curl --limit-rate)", "wan", "http-local-throttle", "f8m", "upload", "application",
          "local"),
    Cause("a slow disk (the sender's reads)", "wan", "scp", "f4m", "upload", "disk", "local",
          lambda config: slow_disk(config, "f4m")),
    Cause("a slow disk (the sender's reads)", "wan", "http", "f4m", "upload", "disk", "local",
          lambda config: slow_disk(config, "f4m")),
    Cause("a CPU-bound scp (sender)", "open", "scp", "f8m", "upload", "cpu", "local", cpu_capped),
    Cause("a CPU-bound receiver", "open", "scp", "f8m", "download", "cpu", "local", cpu_capped),
]  # fmt: skip
assert all(c.expected in LIMITS for c in CAUSES)


def run_cause(config: Config, cause: Cause) -> Result:
    """One run of `cause` in `config`'s lab: the path probed as a round does, then the
    transfer under the cause, judged against that probe."""
    (spec,) = [
        s
        for s in lab_specs(config)
        if (s.protocol, s.dataset, s.direction) == (cause.protocol, cause.dataset, cause.direction)
    ]
    with cause.setup(config) if cause.setup else contextlib.nullcontext():
        baseline = measure_path(spec.remote)
        return run_transfer(spec, config, "verdicts", baseline)


def lab_specs(config: Config) -> list[TransferSpec]:
    return plan_round(config, lab.site(config))


def contradictions(r: Result) -> list[str]:
    """What in a verdict's evidence says the opposite of the verdict itself (the defects
    issues 23 and 34 reported: a window verdict whose clock share is tiny, an application
    verdict whose sender was in flight all the time or app-limited in 0% of the samples, a
    link verdict below the link share or above the path...): each number read back from
    the words and checked against the rule that chose the verdict (tests/support/evidence.py)."""
    return evidence.contradictions(r.limited_by, r.limited_side, r.limited_evidence)


def matrix_lab(make_lab: Callable[..., Config], name: str, causes: list[Cause]) -> Config:
    """A lab for the causes that run in lab `name` (only the datasets they use), with the
    remote's probe and any configured bandwidth LABS gives."""
    used = {c.dataset for c in causes if c.lab == name}
    config = make_lab(
        link=LABS[name]["link"],
        datasets={d: DATASETS[d] for d in used},
        protocols=PROTOCOLS,
        servers=SERVERS,
    )
    raw = config.model_dump(mode="json", exclude_unset=True)
    raw["remotes"]["lab"].update({"probe": PROBE, **LABS[name].get("remote", {})})
    return parse_config(yaml.safe_dump(raw), f"verdicts-{name}.yaml")


T = TypeVar("T")
RUNS = 3  # per cause, in the tests
# A run whose delay line (the lab's path, a process on this host) queued for a CPU this
# share of the run or more was no trial of the induced cause: the path itself was held
# (CI, load 10.8: a policer's upload with its delay line waiting 60% went through it at
# 171% of the policed rate).  Such a run is set aside and another made, up to VOID_RUNS.
VOID_SHARE = 0.2
VOID_RUNS = RUNS


def path_wait_seconds(config: Config) -> float | None:
    """The seconds the lab's delay line has queued for a CPU, from the kernel's own
    /proc/PID/task/*/schedstat (its second field), or None where the link has none."""
    assert config.lab is not None
    pid_file = LabLayout(config.lab).run_dir / f"{network.DELAY_LINE}.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except (OSError, ValueError, IndexError):
        return None
    waited = 0
    for task in tasks:
        with contextlib.suppress(OSError, ValueError, IndexError):
            waited += int((task / "schedstat").read_text().split()[1])
    return waited / 1e9


def path_held(config: Config, run: Callable[[], T]) -> tuple[T, float]:
    """`run()`'s value and the share of its wall time the lab's path queued for a CPU."""
    wait_before, start = path_wait_seconds(config), time.monotonic()
    value = run()
    wait_after, took = path_wait_seconds(config), time.monotonic() - start
    if wait_before is None or wait_after is None:
        return value, 0.0
    return value, (wait_after - wait_before) / took


def trial(config: Config, cause: Cause) -> tuple[Result, float]:
    """One run of `cause` and the share of its wall time the lab's path queued for a CPU."""
    return path_held(config, lambda: run_cause(config, cause))


def check_cause(config: Config, cause: Cause, outcomes: list[Outcome]) -> None:
    """RUNS runs of `cause`: every one ok and free of contradictions, at least two of
    three right (the module's last test holds the rest to the goal); recorded for it.
    Always all three: the module's 95% is over a fixed number of runs.  A run whose path
    was held by this host's CPUs (VOID_SHARE) does not count, and is made again."""
    outcome = Outcome(cause)
    voided: list[str] = []
    while len(outcome.results) < RUNS:
        r, path_waited = trial(config, cause)
        assert r.outcome == "ok", r.error
        said = f"{cause.name} / {cause.protocol} {cause.direction}: "
        said += f"{r.limited_by} [{r.limited_side}] {r.limited_evidence}"
        if path_waited >= VOID_SHARE:
            print(f"set aside (the lab's delay line queued for a CPU {path_waited:.0%} of the run): {said}")
            voided.append(f"{path_waited:.0%}")
            held = f"this host held the lab's path ({voided} of the runs): no trial of {cause.name}"
            assert len(voided) <= VOID_RUNS, held
            continue
        outcome.results.append(r)
        print(f"{said} (the delay line queued {path_waited:.0%})")
    outcomes.append(outcome)
    said = [(r.limited_by, r.limited_side, r.limited_evidence) for r in outcome.results]
    assert [c for r in outcome.results for c in contradictions(r)] == [], said
    assert sum(outcome.right(r) for r in outcome.results) >= RUNS - 1, said


def hit_rate(outcomes: list[Outcome]) -> tuple[int, int]:
    return sum(o.right(r) for o in outcomes for r in o.results), sum(len(o.results) for o in outcomes)


GOAL = 0.95  # of the runs right (issue 23)
ALPHA = 0.05  # the chance of failing a verdict whose hit rate is the goal exactly


def below_goal_p(right: int, runs: int, goal: float = GOAL) -> float:
    """The chance of `right` or fewer of `runs` right if each run were right with the
    chance `goal` (the exact one-sided binomial test).  A module's 27 runs cannot tell 95%
    from 97% by counting: a verdict right 97% of the time misses twice or more in 19% of
    modules.  Below ALPHA, the runs say the hit rate is under the goal: 4 misses of 27 (p
    0.045), not 3 (0.15).  benchmarks/verdict_matrix.py measures the rate itself."""
    return sum(math.comb(runs, k) * goal**k * (1 - goal) ** (runs - k) for k in range(right + 1))


def module_tests(causes: list[Cause], labs: tuple[str, ...], also: tuple[Cause, ...] = ()) -> tuple[Any, Any, Any]:
    """A test module's share of the matrix: (the labs fixture, the per-cause test, the
    module's hit-rate test), to be bound to names in the module (pytest collects them
    there).  The labs are built once per module (with the datasets of `also` too: the
    module's other tests run there); the hit rate is over the module's runs."""
    outcomes: list[Outcome] = []

    @pytest.fixture(scope="module")
    def matrix_labs(make_module_lab: Callable[..., Config]) -> dict[str, Config]:
        return {name: matrix_lab(make_module_lab, name, [*causes, *also]) for name in labs}

    @pytest.mark.parametrize("cause", causes, ids=lambda c: f"{c.name}-{c.protocol}-{c.direction}")
    def test_the_verdict_names_the_cause(matrix_labs: dict[str, Config], cause: Cause) -> None:
        check_cause(matrix_labs[cause.lab], cause, outcomes)

    def test_the_hit_rate_is_not_below_95_percent() -> None:
        right, runs = hit_rate(outcomes)
        assert runs, "no cause ran"
        wrong = [
            (o.cause.name, o.cause.protocol, o.cause.direction, r.limited_by, r.limited_side, r.limited_evidence)
            for o in outcomes
            for r in o.results
            if not o.right(r)
        ]
        p = below_goal_p(right, runs)
        assert p >= ALPHA, f"{right} of {runs} (p {p:.3f} if {GOAL:.0%} were right); wrong: {wrong}"

    return matrix_labs, test_the_verdict_names_the_cause, test_the_hit_rate_is_not_below_95_percent
