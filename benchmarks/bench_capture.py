"""What capturing costs a transfer: the same transfers with and without tcpdump, interleaved.

    sudo .venv/bin/python benchmarks/bench_capture.py [--runs 5] [--part all|levers|final|buffer]
        [--links all|unshaped|200mbit|offloads]

The default (both parts, 5 runs) takes ~5 minutes.

Builds private labs (unique names, removed at the end, even on failure) and runs every
transfer through `run_transfer`, the exporter's own path.  Two parts:

* levers: 256 MiB HTTP downloads over an unshaped veth (where capture costs most), with
  no capture and with one capture setting changed at a time from the previous defaults
  (tcpdump, 4 MiB ring, --immediate-mode, snaplen 128, nice 0, capture on disk,
  host-pair filter), plus the shipped defaults; the variants take turns, run after run.
  Besides the time: the median "stop s" (Capture.stop: drain, SIGINT, exit), the
  capture process's CPU seconds and wake-ups (voluntary context switches) per run;
* final: HTTP and scp, 256 MiB unshaped, 64 MiB at 200 Mbit/s (tbf), and 256 MiB
  unshaped with TSO/GSO/GRO on at both ends as on real hosts: no capture, the previous
  defaults (tcpdump, 4 MiB), the shipped defaults (pcapdump.py, 32 MiB) and tcpdump
  with the shipped ring (32 MiB, --immediate-mode), taking turns;
* buffer (not in "all"): the kernel drops per capture ring size (capture.buffer) at a
  path's rate, with both CPUs held busy (a busy loop pinned to each core beside the
  transfer, as on a loaded host): what capture.buffer's lower bound is made of
  (config.capture_buffer_needed).  pcapdump, HTTP downloads, sizes taking turns.

Every captured run is checked: tcpdump's kernel drops, the packets it left unread in its
ring, and the capture's wire bytes and packets each way against the client veth's kernel
counters (rx = down, tx = up; nothing else crosses the link).  With offloads off (the
lab's default) those are the published wire numbers; with offloads on, a veth counts the
super-frames it carried, so the capture's figures as captured are compared.  A ratio is
the median duration with capture over the median without.  Needs root.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from bigbinf import lab
from bigbinf.config import Config, parse_config
from bigbinf.lab import LabLayout
from bigbinf.measure import transfer
from bigbinf.measure.plan import TransferSpec, plan_round
from bigbinf.measure.wire import capture

MiB = 1 << 20
# The defaults before issue 12: tcpdump with a 4 MiB ring, at the transfer's own priority.
BEFORE: dict[str, Any] = {"tool": "tcpdump", "buffer_bytes": 4 * MiB, "nice": 0}
# An address in the benchmarking range that no lab uses: a BPF filter nothing passes.
NO_PACKET = ["host", "198.19.255.254"]


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    capture: dict[str, Any] | None  # Capture keyword arguments over the shipped ones; None: no capture
    config: dict[str, Any] = dataclasses.field(default_factory=dict)  # capture.* config keys
    # A filter that no packet passes: what attaching any packet socket costs the transfer
    # (the kernel's tap on every frame), the floor under every capture setting.  The run
    # has no wire numbers, so its outcome and the kernel-counter check are not asked.
    floor: bool = False


LEVERS = [
    Variant("no capture", None),
    Variant("before: tcpdump -B 4 MiB --immediate-mode -s 128, nice 0", BEFORE),
    Variant("tcpdump -B 32 MiB", {**BEFORE, "buffer_bytes": 32 * MiB}),
    Variant("tcpdump -B 1 MiB", {**BEFORE, "buffer_bytes": 1 * MiB}),
    Variant("tcpdump snaplen 96", BEFORE, {"snaplen": 96}),
    Variant("tcpdump nice 10", {**BEFORE, "nice": 10}),
    Variant("tcpdump SCHED_IDLE, -B 32 MiB", {**BEFORE, "sched_idle": True, "buffer_bytes": 32 * MiB}),
    Variant("tcpdump pinned to CPU 1 (taskset)", {**BEFORE, "cpus": {1}}),
    Variant("tcpdump, pcap on tmpfs (/dev/shm)", BEFORE, {"directory": "TMPFS"}),
    Variant("tcpdump, no BPF filter", {**BEFORE, "bpf": []}),
    Variant("tcpdump buffered (1 s block timeout)", {**BEFORE, "immediate": False}),
    Variant("tcpdump buffered, -B 32 MiB", {**BEFORE, "immediate": False, "buffer_bytes": 32 * MiB}),
    Variant("pcapdump (buffered, 10 ms block timeout), -B 4 MiB", {**BEFORE, "tool": "pcapdump"}),
    Variant("pcapdump, -B 32 MiB", {**BEFORE, "tool": "pcapdump", "buffer_bytes": 32 * MiB}),
    Variant("pcapdump, -B 32 MiB, nice 10", {**BEFORE, "tool": "pcapdump", "buffer_bytes": 32 * MiB, "nice": 10}),
    Variant("shipped defaults", {}),
    Variant("floor: shipped, a filter no packet passes (the tap alone)", {"bpf": NO_PACKET}, floor=True),
]
FINAL = [
    Variant("no capture", None),
    Variant("before", BEFORE),
    Variant("shipped", {}),
    Variant("tcpdump", {"tool": "tcpdump"}),
]


@dataclasses.dataclass
class Run:
    seconds: float
    dropped: int = 0
    unread: int = 0
    bytes_equal: bool | None = None  # None: no capture
    stop_seconds: float = 0.0
    cpu_seconds: float = 0.0  # tcpdump's user + system time
    wakeups: int = 0  # tcpdump's voluntary context switches: each one a sleep in poll(2) and a wake-up


class Instrumented:
    """transfer.Capture with a variant's keyword arguments; keeps the last capture and
    how long its stop() took."""

    def __init__(self) -> None:
        self.overrides: dict[str, Any] = {}
        self.last: capture.Capture | None = None
        self.stop_seconds = 0.0
        self.cpu_seconds = 0.0
        self.wakeups = 0
        original = capture.Capture
        bench = self

        class Variable(original):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **{**kwargs, **bench.overrides})
                bench.last = self

            def stop(self) -> capture.CaptureStats | None:
                if self.proc is not None:
                    bench.cpu_seconds, bench.wakeups = _usage(self.proc.pid)
                t0 = time.perf_counter()
                try:
                    return super().stop()
                finally:
                    bench.stop_seconds = time.perf_counter() - t0

        transfer.Capture = Variable  # type: ignore[misc]


def _usage(pid: int) -> tuple[float, int]:
    """(CPU seconds, voluntary context switches) of a process so far; zeros once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0, 0
    ticks = os.sysconf("SC_CLK_TCK")
    switches = next(line.split()[1] for line in status.splitlines() if line.startswith("voluntary_ctxt_switches"))
    return (int(fields[11]) + int(fields[12])) / ticks, int(switches)


def veth_counters(layout: LabLayout) -> dict[str, int]:
    out = subprocess.run(
        ["ip", "-n", layout.client_ns, "-j", "-s", "link", "show", layout.client_if],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    stats = json.loads(out)[0]["stats64"]
    return {
        "down": stats["rx"]["bytes"],
        "up": stats["tx"]["bytes"],
        "packets_down": stats["rx"]["packets"],
        "packets_up": stats["tx"]["packets"],
    }


@contextmanager
def private_lab(size: str, rate: str, offloads: bool = False) -> Iterator[tuple[Config, Path]]:
    name = "bbc" + uuid.uuid4().hex[:7]
    tmp = Path(tempfile.mkdtemp(prefix="bigbinf-bench-", dir="/var/tmp"))
    tmp.chmod(0o755)
    shm = Path(tempfile.mkdtemp(prefix="bigbinf-bench-", dir="/dev/shm"))
    raw = {
        "lab": {
            "name": name,
            "state_dir": str(tmp / "lab"),
            "link": {} if rate == "none" else {"rate": rate, "burst": "256KiB"},
            "servers": ["sshd", "nginx"],
        },
        "remotes": {"lab": {"lab": True}},
        "datasets": {"d": {"file": "d.bin", "size": size}},
        "protocols": {"http": {}, "scp": {}},
        "transfer": {"workdir": str(tmp / "work")},
        "journal": {"path": str(tmp / "journal.jsonl")},
        "schedule": {"interval": "1h"},
        # The tmpfs lever's capture directory (the others keep the default, on disk).
        "capture": {"directory": str(shm / "captures")},
    }
    config = parse_config(yaml.safe_dump(raw), "bench")
    layout = LabLayout(config.lab)
    try:
        lab.up(config)
        if offloads:  # as real hosts run: TSO/GSO/GRO on at both ends (the lab turns them off)
            for ns, ifname in ((layout.client_ns, layout.client_if), (layout.remote_ns, layout.remote_if)):
                on = ["ip", "netns", "exec", ns, "ethtool", "-K", ifname, "tso", "on", "gso", "on", "gro", "on"]
                subprocess.run(on, check=True, capture_output=True)
        yield config, shm / "captures"
    finally:
        lab.teardown(layout)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm, ignore_errors=True)


def configured(config: Config, variant: Variant, shm: Path) -> Config:
    if variant.capture is None:
        return config.model_copy(update={"capture": config.capture.model_copy(update={"enabled": False})})
    updates = {"directory": None, **variant.config}
    if updates["directory"] == "TMPFS":
        updates["directory"] = shm
    return config.model_copy(update={"capture": config.capture.model_copy(update=updates)})


def one_run(
    spec: TransferSpec,
    config: Config,
    variant: Variant,
    shm: Path,
    bench: Instrumented,
    layout: LabLayout,
    offloads: bool = False,
) -> Run:
    bench.overrides = dict(variant.capture or {})
    bench.last = None
    before = veth_counters(layout)
    result = transfer.run_transfer(spec, configured(config, variant, shm), "bench")
    after = veth_counters(layout)
    if variant.floor:
        return Run(result.duration_seconds)
    if result.outcome != "ok":
        raise SystemExit(f"{spec.protocol} with {variant.name}: {result.outcome}: {result.error}")
    run = Run(result.duration_seconds)
    if variant.capture is not None:
        stats = bench.last.stats if bench.last else None
        run.dropped = stats.dropped if stats else -1
        run.unread = stats.unread if stats else -1
        run.stop_seconds = bench.stop_seconds
        run.cpu_seconds, run.wakeups = bench.cpu_seconds, bench.wakeups
        # With offloads on, a veth counts the super-frames it carried, one set of headers
        # each: the capture's figures as captured are what it must equal (the published
        # wire numbers are those frames split back into wire frames: docs/metrics.md).
        if offloads:
            seen = (result.captured_wire_bytes_down, result.captured_wire_bytes_up)
            seen_packets = (result.captured_packets_down, result.captured_packets_up)
        else:
            seen = (result.wire_bytes_down, result.wire_bytes_up)
            seen_packets = (result.packets_down, result.packets_up)
        run.bytes_equal = seen == (after["down"] - before["down"], after["up"] - before["up"]) and seen_packets == (
            after["packets_down"] - before["packets_down"],
            after["packets_up"] - before["packets_up"],
        )
        if not run.bytes_equal:
            print(
                f"  ! {spec.protocol} {variant.name}: capture down {result.wire_bytes_down} B/{result.packets_down} "
                f"up {result.wire_bytes_up} B/{result.packets_up}; kernel down {after['down'] - before['down']} B/"
                f"{after['packets_down'] - before['packets_down']} up {after['up'] - before['up']} B/"
                f"{after['packets_up'] - before['packets_up']}",
                flush=True,
            )
    return run


def interleaved(
    spec: TransferSpec,
    config: Config,
    variants: list[Variant],
    runs: int,
    shm: Path,
    bench: Instrumented,
    offloads: bool = False,
) -> dict[str, list[Run]]:
    """Each variant once per round, the order rotated every round, `runs` rounds."""
    assert config.lab is not None
    layout = LabLayout(config.lab)
    out: dict[str, list[Run]] = {v.name: [] for v in variants}
    for r in range(runs):
        for i in range(len(variants)):
            variant = variants[(i + r) % len(variants)]
            out[variant.name].append(one_run(spec, config, variant, shm, bench, layout, offloads))
    return out


def checks(runs: list[Run]) -> str:
    if runs[0].bytes_equal is None:
        return f"{'-':>6} {'-':>6} {'-':>9}"
    equal = sum(bool(r.bytes_equal) for r in runs)
    return f"{sum(r.dropped for r in runs):>6} {sum(r.unread for r in runs):>6} {equal:>4}/{len(runs):<4}"


def levers(runs: int, bench: Instrumented) -> None:
    with private_lab("256MiB", "none") as (config, shm):
        spec = next(s for s in plan_round(config, lab.site(config)) if s.protocol == "http")
        print(f"\nLevers: 256 MiB HTTP downloads over an unshaped veth, {runs} runs each, interleaved (medians)")
        print(
            f"{'capture setting':<58} {'seconds':>8} {'ratio':>6} {'stop s':>7} {'cpu s':>6} {'wakeups':>8}"
            f" {'drops':>6} {'unread':>6} {'bytes=kernel':>9}"
        )
        out = interleaved(spec, config, LEVERS, runs, shm, bench)
        base = statistics.median(r.seconds for r in out["no capture"])
        for variant in LEVERS:
            rs = out[variant.name]
            med = statistics.median(r.seconds for r in rs)
            captured = variant.capture is not None and not variant.floor
            if captured:
                usage = (
                    f"{statistics.median(r.stop_seconds for r in rs):>7.3f} "
                    f"{statistics.median(r.cpu_seconds for r in rs):>6.2f} "
                    f"{statistics.median(r.wakeups for r in rs):>8.0f}"
                )
            else:
                usage = f"{'-':>7} {'-':>6} {'-':>8}"
            print(f"{variant.name:<58} {med:>8.3f} {med / base:>6.2f} {usage} {checks(rs)}", flush=True)


LINKS = {  # name: size, rate, label, offloads on (as on real hosts; the lab's default is off)
    "unshaped": ("256MiB", "none", "unshaped veth, 256 MiB", False),
    "200mbit": ("64MiB", "200mbit", "200 Mbit/s, 64 MiB", False),
    "offloads": ("256MiB", "none", "unshaped, offloads on", True),
}


def final(runs: int, bench: Instrumented, links: list[str]) -> None:
    print(f"\nFinal: with / without capture, {runs} runs each, interleaved (medians; ratio = capture / none)")
    header = f"{'link':<22} {'protocol':<8} {'no capture':>10}"
    for variant in FINAL[1:]:
        header += f" {variant.name:>9} {'ratio':>6}"
    print(header + f" {'drops':>6} {'unread':>6} {'bytes=kernel':>9}")
    for size, rate, link, offloads in (LINKS[name] for name in links):
        with private_lab(size, rate, offloads) as (config, shm):
            for spec in plan_round(config, lab.site(config)):
                out = interleaved(spec, config, FINAL, runs, shm, bench, offloads)
                none = statistics.median(r.seconds for r in out["no capture"])
                line = f"{link:<22} {spec.protocol:<8} {none:>10.3f}"
                for variant in FINAL[1:]:
                    med = statistics.median(r.seconds for r in out[variant.name])
                    line += f" {med:>9.3f} {med / none:>6.2f}"
                captured = [r for v in FINAL[1:] for r in out[v.name]]
                print(f"{line} {checks(captured)}", flush=True)


BUFFER_LINKS = {"200mbit": "64MiB", "1gbit": "128MiB", "none": "256MiB"}  # rate: download size
BUFFER_SIZES = (64 * 1024, 256 * 1024, 1 * MiB, 4 * MiB, 32 * MiB)


@contextmanager
def busy_cpus() -> Iterator[None]:
    """A busy loop pinned to each CPU for the length of the block."""
    loops = [
        subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while True: pass"])
        for cpu in sorted(os.sched_getaffinity(0))
    ]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def buffer_part(runs: int) -> None:
    """Drops per capture.buffer size and link rate, CPUs busy: the ring must hold what
    arrives while the reader waits for a CPU."""
    print(f"\nBuffer: kernel drops per capture.buffer, CPUs busy, {runs} runs each, interleaved")
    print(f"{'link':<10} {'ring':>8} {'runs with drops':>16} {'drops (max)':>12} {'frames (median)':>16}")
    for rate, size in BUFFER_LINKS.items():
        with private_lab(size, rate) as (config, _shm):
            spec = next(s for s in plan_round(config, lab.site(config)) if s.protocol == "http")
            assert config.lab is not None
            layout = LabLayout(config.lab)
            out: dict[int, list[tuple[int, int]]] = {b: [] for b in BUFFER_SIZES}
            with busy_cpus():
                for r in range(runs):
                    for i in range(len(BUFFER_SIZES)):
                        ring = BUFFER_SIZES[(i + r) % len(BUFFER_SIZES)]
                        # model_copy: below the configured lower bound on purpose.
                        cfg = config.model_copy(
                            update={"capture": config.capture.model_copy(update={"buffer": ring, "directory": None})}
                        )
                        before = veth_counters(layout)
                        result = transfer.run_transfer(spec, cfg, "bench")
                        after = veth_counters(layout)
                        frames = sum(after[k] - before[k] for k in ("packets_down", "packets_up"))
                        out[ring].append((result.capture_dropped, frames))
            for ring in BUFFER_SIZES:
                drops = [d for d, _ in out[ring]]
                frames = statistics.median(f for _, f in out[ring])
                with_drops = sum(1 for d in drops if d)
                print(
                    f"{rate:<10} {ring // 1024:>6}Ki {with_drops:>10}/{len(drops):<5} {max(drops):>12} {frames:>16.0f}",
                    flush=True,
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--part", choices=["all", "levers", "final", "buffer"], default="all")
    parser.add_argument("--links", choices=["all", *LINKS], default="all", help="the final part's links")
    args = parser.parse_args()
    bench = Instrumented()
    start = time.monotonic()
    print(
        f"shipped: {capture.TOOL_DEFAULT}, -B {capture.BUFFER_DEFAULT // MiB} MiB, nice {capture.NICE_DEFAULT}, "
        f"snaplen {capture.SNAPLEN_DEFAULT}; drops/unread are sums over the captured runs"
    )
    if args.part in ("all", "levers"):
        levers(args.runs, bench)
    if args.part in ("all", "final"):
        final(args.runs, bench, list(LINKS) if args.links == "all" else [args.links])
    if args.part == "buffer":
        buffer_part(args.runs)
    print(f"\n({time.monotonic() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
