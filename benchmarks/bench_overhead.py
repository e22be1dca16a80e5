"""Per-transfer overhead: what a transfer costs beyond its command's own duration.

    sudo .venv/bin/python benchmarks/bench_overhead.py [--size 64MiB] [--rate 200mbit] [--runs 5]

Builds a private lab (unique name, removed at the end) and runs HTTP and scp downloads
the way a round does: `run_transfer` and then `RoundRunner.publish` (journal with fsync,
then the exporter's state).  The overhead of one transfer is the wall time from the
start of that step to the result published, minus the command's duration
(`Result.duration_seconds`).  Each step is timed by wrapping the function that does it
(no change to the code measured); "other" is what no wrapped step accounts for
(planning the addresses' routes is in "prepare"; removing the received copy, building
the Result, logging are in "other").  The analyser's time is reported on its own line:
it is being sped up separately, and the target is for everything else.

Prints the median of each step per protocol.  Needs root.
"""

from __future__ import annotations

import argparse
import collections
import functools
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from bigbinf import lab
from bigbinf.config import parse_config
from bigbinf.journal import store
from bigbinf.lab import LabLayout
from bigbinf.measure import transfer
from bigbinf.measure.plan import plan_round
from bigbinf.measure.tcp import state as tcpstate
from bigbinf.measure.wire import capture
from bigbinf.service.collector import ExporterState
from bigbinf.service.rounds import RoundRunner

# (module or class, attribute, step name).  A step that runs twice in one transfer (the
# local and the remote TCP watch) adds up.
STEPS: list[tuple[Any, str, str]] = [
    (transfer, "prepare", "prepare (route, command)"),
    (tcpstate.TcpWatch, "start", "TCP watches: start"),
    (capture.Capture, "start", "capture: start (until listening)"),
    (transfer, "wait_closed", "linger (last FIN/ACK)"),
    (transfer, "wait_linger", "linger (last FIN/ACK)"),
    (capture.Capture, "stop", "capture: stop (drain, SIGINT, exit)"),
    (tcpstate.TcpWatch, "stop", "TCP watches: stop + summary"),
    (transfer, "analyse", "analysis (pcap)"),
    (transfer, "_verify", "verification (size, sha256)"),
    (transfer, "judge_limit", "what limited it"),
    (store.Journal, "append", "journal (write + fsync)"),
]
ANALYSIS = "analysis (pcap)"


class Timers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)

    def wrap(self, owner: Any, attribute: str, step: str) -> None:
        original: Callable[..., Any] | None = getattr(owner, attribute, None)
        if original is None:  # a step this version of the code does not have
            return

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[step] += time.perf_counter() - t0

        setattr(owner, attribute, timed)


@contextmanager
def private_lab(size: str, rate: str) -> Iterator[tuple[Any, Path]]:
    name = "bbo" + uuid.uuid4().hex[:7]
    tmp = Path(tempfile.mkdtemp(prefix="bigbinf-bench-", dir="/var/tmp"))
    tmp.chmod(0o755)
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
    }
    config = parse_config(yaml.safe_dump(raw), "bench")
    layout = LabLayout(config.lab)
    try:
        lab.up(config)
        yield config, tmp
    finally:
        lab.teardown(layout)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="64MiB")
    parser.add_argument("--rate", default="200mbit", help="tc rate of the lab link, or none for an unshaped veth")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    timers = Timers()
    for owner, attribute, step in STEPS:
        timers.wrap(owner, attribute, step)
    steps = list(dict.fromkeys(step for *_, step in STEPS))
    with private_lab(args.size, args.rate) as (config, _tmp):
        runner = RoundRunner(config, ExporterState(), lab=lab.site)
        specs = plan_round(config, lab.site(config))
        per: dict[str, list[dict[str, float]]] = {spec.protocol: [] for spec in specs}
        for _ in range(args.runs):
            for spec in specs:  # interleaved: the protocols take turns
                timers.seconds.clear()
                t0 = time.perf_counter()
                result = transfer.run_transfer(spec, config, "bench")
                runner.publish(result)
                wall = time.perf_counter() - t0
                if result.outcome != "ok":
                    print(f"{spec.protocol}: {result.outcome}: {result.error}", file=sys.stderr)
                    return 1
                row = dict(timers.seconds)
                row["command"] = result.duration_seconds
                row["overhead"] = wall - result.duration_seconds
                row["overhead without analysis"] = row["overhead"] - row.get(ANALYSIS, 0.0)
                row["other"] = row["overhead"] - sum(row.get(s, 0.0) for s in steps)
                per[spec.protocol].append(row)
    link = "an unshaped veth" if args.rate == "none" else args.rate
    print(f"{args.size} downloads over {link}, {args.runs} runs per protocol, interleaved; median seconds:")
    names = list(per)
    print(f"{'step':<40}" + "".join(f"{n:>10}" for n in names))
    for step in ["command", *steps, "other", "overhead", "overhead without analysis"]:
        if step in ("command", "overhead"):
            print("-" * (40 + 10 * len(names)))
        print(f"{step:<40}" + "".join(f"{statistics.median(r.get(step, 0.0) for r in per[n]):>10.3f}" for n in names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
