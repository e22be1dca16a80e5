"""An exporter killed at random moments, and what it leaves: the harness of the chaos test
(tests/lab/test_leftovers.py, a handful of kills) and its benchmark
(benchmarks/bench_chaos.py, fifty).

The exporter measures the lab as a plain remote (not `lab: true`): ssh with a
ControlMaster for its stats and tcp commands, a congestion control route on the sender
(scp, both ways), TCP buffer caps on both ends (http, both ways), uploads (scp and http)
and a download without either (sftp).  Everything the test compares is read from the
kernel and the file system, not from bigbinf: processes per network namespace (and any
carrying a killed exporter's marker, or naming the ControlPath), sysctls, routes, files,
the lab's namespaces and listening sockets."""

from __future__ import annotations

import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from bigbinf import guardian
from bigbinf.config import Config
from bigbinf.journal.store import Journal, SkippedLine
from bigbinf.lab import LabLayout
from bigbinf.result import Result

from . import session
from .prometheus import free_port

ROOT = Path(__file__).resolve().parents[2]
# Every transfer the protocols below make (the benchmark's round); the test's lean round
# takes two: an scp upload (a congestion control route here, the upload removed on the
# remote) and an http download (buffer caps on both ends, the remote's over ssh).
ALL = [
    ("scp", "download"),
    ("scp", "upload"),
    ("http", "download"),
    ("http", "upload"),
    ("sftp", "download"),
]
LEAN = [("scp", "upload"), ("http", "download")]
PROTOCOLS: dict[str, Any] = {
    "scp": {"directions": ["download", "upload"], "congestion": "cubic"},
    "http": {"directions": ["download", "upload"], "tcp_buffer_max": "256KiB"},
    "sftp": {},
}
DATASETS = {"f4m": {"file": "f4m.bin", "size": "4MiB"}}
LINK = {"rate": "50mbit"}
SERVERS = ["sshd", "nginx"]


def netns_inode(ns: str) -> int:
    return os.stat(f"/run/netns/{ns}").st_ino


def _cmdline(pid: str | int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _running(pid: str) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def processes_in(ns: str) -> set[tuple[int, str]]:
    """(pid, command line) of every live process in network namespace `ns`."""
    inode = netns_inode(ns)
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino != inode or not _running(entry):
                    continue
            except OSError:
                continue
            found.add((int(entry), _cmdline(entry)))
    return found


def naming(word: str) -> set[tuple[int, str]]:
    """Live processes whose command line holds `word` (e.g. a ControlPath directory)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(os.getpid()) and _running(entry):
            command = _cmdline(entry)
            if word in command:
                found.add((int(entry), command))
    return found


def marked_by(exporters: set[int]) -> set[tuple[int, str]]:
    """Live processes carrying the marker of one of these exporter pids, and their
    guardians (which do not carry it: named by their argument, the exporter's identity)."""
    marked = {
        (pid, _cmdline(pid))
        for pid, owner in guardian.marked()
        if owner.count(".") == 2 and int(owner.split(".")[1]) in exporters and _running(str(pid))
    }
    guardians = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _running(entry):
            words = _cmdline(entry).split()
            named = words[-1].split(".") if len(words) >= 2 and words[-2].endswith("guardian.py") else []
            if len(named) == 3 and named[1].isdigit() and int(named[1]) in exporters:
                guardians.add((int(entry), " ".join(words)))
    return marked | guardians


def guardian_of(exporter: int) -> int | None:
    """The pid of an exporter's guardian (named by its argument, the exporter's identity)."""
    found = [pid for pid, command in marked_by({exporter}) if command.split()[-2:-1] and "guardian.py" in command]
    return found[0] if found else None


def _in(ns: str, *argv: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, check=True).stdout


def _tree(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) + ("/" if p.is_dir() else "") for p in root.rglob("*"))


@dataclass
class Cycle:
    """One start that was killed: when, what it was doing, and what it left."""

    killed_after: float
    doing: str  # the last thing the log said
    gone_seconds: float | None  # until nothing it started ran (None: still running at the bound)
    left_running: list[str]  # what still ran then
    left_files: int  # transfer directories and captures it left for the next start
    left_undo: int  # pending entries in its undo journal
    left_round: bool  # a round written down and not finished
    with_guardian: bool = False  # its guardian was killed with it


@dataclass
class Chaos:
    """An exporter of the lab `config` (up), measuring it as a plain remote."""

    config: Config
    work: Path  # the test's private directory: the config, the journal, the logs
    transfers: list[tuple[str, str]] = field(default_factory=lambda: list(ALL))  # (protocol, direction)
    port: int = field(default_factory=free_port)
    cycles: list[Cycle] = field(default_factory=list)
    exporters: set[int] = field(default_factory=set)  # the pids of every exporter started
    env: dict[str, str] = field(default_factory=dict)  # the exporter's environment beyond this one's
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert self.config.lab is not None
        self.layout = LabLayout(self.config.lab)
        self.client_ns, self.remote_ns = self.layout.client_ns, self.layout.remote_ns
        # A ControlPath must fit a socket address (108 bytes): a short directory of its own.
        self.control = session.scratch_dir(Path("/tmp"), "bbcm-", 0o700)
        self.journal = self.work / "journal.jsonl"
        self.workdir = self.layout.state_dir / "chaos-work"
        self.captures = self.workdir.with_name(self.workdir.name + "-captures")
        self.log = self.work / "exporter.log"
        ssh = [
            "ssh",
            "-F",
            "{ssh_config}",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={self.control}/%C",
            "-o",
            "ControlPersist=30",
            "root@{host}",
        ]
        raw = {
            "remotes": {
                "site": {
                    "address": self.config.lab.remote_address,
                    "key": str(self.layout.client_key),
                    "ssh_config": str(self.layout.ssh_config),
                    "data_dir": str(self.layout.data_dir),
                    "upload_dir": str(self.layout.upload_dir),
                    "serve_root": str(self.layout.serve_root),
                    "checksums": str(self.layout.checksums),
                    "netns": self.client_ns,
                    "interface": self.layout.client_if,
                    "probe": {"count": 3, "interval": "20ms", "method": "tcp"},
                    "stats_command": ssh,
                    "stats_interval": "250ms",
                    "tcp_command": ssh,
                }
            },
            "datasets": DATASETS,
            "protocols": PROTOCOLS,
            "transfer": {"workdir": str(self.workdir), "timeout": "2m"},
            "journal": {"path": str(self.journal)},
            "schedule": {
                "interval": "1h",
                "start_delay": "1s",
                "transfers": [
                    {"protocol": p, "remote": "site", "dataset": "f4m", "direction": d} for p, d in self.transfers
                ],
            },
        }
        self.config_file = self.work / "chaos.yaml"
        self.config_file.write_text(yaml.safe_dump(raw))

    # ------------------------------------------------------------ the exporter

    def start(self) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != guardian.MARKER} | self.env
        argv = [
            sys.executable,
            "-m",
            "bigbinf",
            "--config.file",
            str(self.config_file),
            "--web.listen-address",
            f"127.0.0.1:{self.port}",
        ]
        with open(self.log, "ab") as log:
            proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log, env=env)
        self.exporters.add(proc.pid)
        self._procs.append(proc)
        return proc

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return str(r.read().decode())

    def results(self, skipped: list[SkippedLine] | None = None) -> list[Result]:
        return [r for r in Journal(self.journal).read(skipped) if r.source == "exporter"]

    def rounds(self) -> dict[str, collections.Counter[tuple[str, ...]]]:
        out: dict[str, collections.Counter[tuple[str, ...]]] = collections.defaultdict(collections.Counter)
        for r in self.results():
            out[r.round_id][(r.protocol, r.remote, r.dataset, r.direction)] += 1
        return out

    @property
    def marker(self) -> Path:
        return self.journal.with_name(f"{self.journal.stem}.round.json")

    @property
    def undo(self) -> Path:
        return self.journal.with_name(f"{self.journal.stem}.undo.jsonl")

    def settled(self, since: float) -> bool:
        """A round started at or after `since` is whole in the journal, and none is left
        unfinished."""
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(int(since)))
        whole = [rid for rid, series in self.rounds().items() if len(series) == len(self.transfers) and rid >= stamp]
        return bool(whole) and not self.marker.exists()

    def run_round(self, timeout: float = 240.0) -> tuple[subprocess.Popen[bytes], float]:
        """Start the exporter and wait until it has finished a round (and any it found
        unfinished); returns it running, and how long that took."""
        start = time.time()
        proc = self.start()
        deadline = time.monotonic() + timeout
        while not self.settled(start):
            if proc.poll() is not None:
                raise RuntimeError(f"the exporter exited {proc.returncode}: {self.log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                self.stop(proc)
                raise RuntimeError(f"no whole round within {timeout:.0f} s: {self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        return proc, time.time() - start

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        """Stop the exporter as a service manager does, and wait for its guardian too: it
        scans for a while after any end (guardian.py), and a snapshot taken meanwhile
        would count it as left running."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        deadline = time.monotonic() + guardian.LONGEST_SCAN_SECONDS + guardian.MASTER_EXIT_SECONDS
        while marked_by({proc.pid}) and time.monotonic() < deadline:
            time.sleep(0.05)

    def kill_at(self, seconds: float, with_guardian: bool = False) -> Cycle:
        """Start the exporter, SIGKILL it after `seconds` (`with_guardian`: its guardian
        too, at once), and see what it leaves: what still runs (waited for until the
        guardian's grace and a margin have passed), and what is left for the next start."""
        proc = self.start()
        time.sleep(seconds)
        if proc.poll() is not None:
            raise RuntimeError(f"the exporter exited {proc.returncode} by itself: {self.log.read_text()[-3000:]}")
        doing = _last_line(self.log)
        keeper = None
        deadline = time.monotonic() + 30
        while with_guardian and (keeper := guardian_of(proc.pid)) is None:  # not started yet: the kill waits for it
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"the exporter {proc.pid} has no guardian to kill")
            time.sleep(0.02)
        if keeper is not None:
            os.kill(keeper, signal.SIGKILL)
        proc.kill()
        proc.wait()
        killed = time.monotonic()
        gone: float | None = None
        running: set[tuple[int, str]] = set()
        while time.monotonic() - killed < guardian.GRACE_SECONDS + guardian.MASTER_EXIT_SECONDS + 5:
            running = self.running_of({proc.pid})
            if not running:
                gone = time.monotonic() - killed
                break
            time.sleep(0.05)
        left_files = len([p for d in (self.workdir, self.captures) if d.exists() for p in d.glob("bigbinf-*")])
        undo = len(self.undo.read_text().splitlines()) if self.undo.exists() else 0
        cycle = Cycle(
            seconds, doing, gone, sorted(c for _, c in running), left_files, undo, self.marker.exists(), with_guardian
        )
        self.cycles.append(cycle)
        return cycle

    def running_of(self, exporters: set[int]) -> set[tuple[int, str]]:
        """What an ended exporter may have left running: processes carrying its marker,
        any process in the client namespace, ss watchers and sshd sessions in the remote
        namespace, and anything naming the ControlPath (an ssh master)."""
        remote = {
            (pid, c)
            for pid, c in processes_in(self.remote_ns)
            if c.startswith(("ss ", "stdbuf ", "timeout ", "sh -c", "sshd: root", "scp ", "sleep ")) or "ss -tinm" in c
        }
        return marked_by(exporters) | processes_in(self.client_ns) | remote | naming(str(self.control))

    # ------------------------------------------------------------ comparing

    def snapshot(self) -> dict[str, Any]:
        """What must be the same before and after, read from the kernel and the disks."""
        out: dict[str, Any] = {}
        for side, ns in (("client", self.client_ns), ("remote", self.remote_ns)):
            out[f"{side} processes"] = sorted(processes_in(ns))
            out[f"{side} routes"] = _in(ns, "ip", "route", "show", "table", "all")
            for key in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_congestion_control"):
                out[f"{side} {key}"] = " ".join(_in(ns, "sysctl", "-n", key).split())
            out[f"{side} listening"] = sorted(_in(ns, "ss", "-tulnH").splitlines())
        name = self.layout.config.name
        out["namespaces"] = sorted(
            line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line.startswith(name)
        )
        out["ssh masters"] = sorted(naming(str(self.control)))
        out["control sockets"] = _tree(self.control)
        out["workdir"] = _tree(self.workdir)
        out["captures"] = _tree(self.captures)
        out["uploads on the remote"] = _tree(self.layout.upload_dir)
        # The journal's checkpoints (bigbinf/journal/checkpoint.py) are written when a start has
        # folded the journal: products like the journal, not leftovers; their temporary
        # files would still show.
        out["journal directory"] = sorted(
            p.name
            for p in self.journal.parent.iterdir()
            if p.name != self.log.name and not p.name.endswith(".checkpoint.json")
        )
        out["the exporters' processes"] = sorted(marked_by(self.exporters))
        out["exporter port"] = _listening_on(self.port)
        return out

    def journal_problems(self) -> list[str]:
        """Torn or unreadable lines, duplicates, and rounds not whole, in the journal."""
        skipped: list[SkippedLine] = []
        self.results(skipped)
        problems = [str(s) for s in skipped]
        for rid, series in sorted(self.rounds().items()):
            twice = [k for k, n in series.items() if n > 1]
            if twice:
                problems.append(f"round {rid}: journaled twice: {twice}")
            if len(series) != len(self.transfers):
                problems.append(f"round {rid}: {len(series)} of {len(self.transfers)} series journaled")
        return problems

    def published_against_journal(self, text: str, since: float) -> list[str]:
        """Every published last-result number and transfer count against the journal."""
        last: dict[tuple[str, ...], Result] = {}
        counts: collections.Counter[tuple[str, ...]] = collections.Counter()
        for r in self.results():
            key = (r.protocol, r.remote, r.dataset, r.direction)
            if key not in last or r.start_timestamp >= last[key].start_timestamp:
                last[key] = r
            if r.start_timestamp >= since:
                counts[(*key, r.outcome)] += 1
        wanted = {
            "bigbinf_last_transfer_start_timestamp_seconds": lambda r: r.start_timestamp,
            "bigbinf_last_transfer_duration_seconds": lambda r: r.duration_seconds,
            "bigbinf_last_transfer_throughput_bytes_per_second": lambda r: r.throughput_bytes_per_second,
            "bigbinf_last_transfer_success": lambda r: 1.0 if r.outcome == "ok" else 0.0,
            "bigbinf_last_transfer_byte_ratio": lambda r: r.byte_ratio,
        }
        problems = []
        seen: collections.Counter[tuple[str, ...]] = collections.Counter()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = sample.labels
                key = tuple(labels.get(k, "") for k in ("protocol", "remote", "dataset", "direction"))
                if sample.name in wanted and key in last:
                    expected = float(wanted[sample.name](last[key]))
                    if abs(sample.value - expected) > 1e-9 * max(1.0, abs(expected)):
                        problems.append(f"{sample.name}{key}: published {sample.value}, journaled {expected}")
                    seen[(sample.name,)] += 1
                counted = counts[(*key, labels.get("outcome", ""))]
                if sample.name == "bigbinf_transfers_total" and sample.value and counted != sample.value:
                    problems.append(
                        f"transfers_total{(*key, labels['outcome'])}: published {sample.value}, journaled {counted}"
                    )
        problems += [f"{name} missing for some series" for name in wanted if seen[(name,)] != len(last)]
        return problems

    def cleanup(self) -> None:
        """Whatever a failed run left: a running exporter, what its exporters started, the
        ControlPath directory."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for pid in self.exporters:
            for child, _ in marked_by({pid}):
                os.kill(child, signal.SIGKILL)
        for pid, _ in naming(str(self.control)):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.control, ignore_errors=True)


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _listening_on(port: int) -> bool:
    return any(f"127.0.0.1:{port} " in line for line in _run(["ss", "-tlnH"]).splitlines())


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if " INFO " in line or "WARN" in line]
    return lines[-1].split(": ", 1)[-1][:160] if lines else "(starting)"


def differences(before: dict[str, Any], after: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    return {k: (before[k], after.get(k)) for k in before if before[k] != after.get(k)}


def chaos(run: Chaos, kills: int, seed: int, horizon: float) -> dict[str, Any]:
    """`kills` starts each SIGKILLed at a uniform random moment in [0.2 s, horizon], then
    a start left to finish (and stopped); returns what it found: how long that start took
    to finish the rounds, /metrics against the journal, the journal's problems."""
    rng = random.Random(seed)
    for _ in range(kills):
        run.kill_at(rng.uniform(0.2, horizon))
    proc, settle_seconds = run.run_round()
    since = time.time() - settle_seconds
    # Journaled first, then published: the last result reaches /metrics a moment later.
    deadline = time.monotonic() + 10
    while (published := run.published_against_journal(run.metrics(), since)) and time.monotonic() < deadline:
        time.sleep(0.2)
    run.stop(proc)
    return {"settle_seconds": settle_seconds, "published": published, "journal": run.journal_problems()}


def summary(cycles: list[Cycle]) -> dict[str, Any]:
    gone = sorted(c.gone_seconds for c in cycles if c.gone_seconds is not None)
    both = sorted(c.gone_seconds for c in cycles if c.with_guardian and c.gone_seconds is not None)
    return {
        "kills": len(cycles),
        "of them with the guardian": sum(c.with_guardian for c in cycles),
        "with the guardian: gone within (median, max s)": (both[len(both) // 2], both[-1]) if both else None,
        "left running past the bound": sum(c.gone_seconds is None for c in cycles),
        "gone within (median, max s)": (gone[len(gone) // 2], gone[-1]) if gone else None,
        "kills that left files": sum(c.left_files > 0 for c in cycles),
        "kills that left undo entries": sum(c.left_undo > 0 for c in cycles),
        "kills mid-round": sum(c.left_round for c in cycles),
    }


def dumps(value: Any) -> str:
    return json.dumps(value, indent=1, default=str)
