"""What the userspace delay line can carry: iperf3 through it and over the direct veth, side by side.

    sudo .venv/bin/python benchmarks/bench_delayline.py [--seconds 5] [--delay 1ms] [--rates none,200mbit]

Builds one private lab (unique name, removed at the end) and, for each tc rate, runs
iperf3 downloads alternately over the direct veth pair and through the delay line
(`up` with and without delay), and prints the medians and their ratio.  Where the
kernel has netem the lab uses it instead and this measures netem.  Needs root.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

import yaml

from bigbinf import lab
from bigbinf.config import parse_config
from bigbinf.lab import LabLayout, network
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer


def _config(name: str, tmp: Path, rate: str, delay: str, seconds: float):
    raw = {
        "lab": {
            "name": name,
            "state_dir": str(tmp / "lab"),
            "servers": ["iperf3"],
            "link": {"delay": delay, **({} if rate == "none" else {"rate": rate, "burst": "256KiB"})},
        },
        "remotes": {"lab": {"lab": True}},
        # iperf3 sends this many bytes; sized so a run takes about `seconds` at 1 Gbit/s.
        "datasets": {"mem": {"file": "mem.bin", "size": f"{int(seconds * 125)}MB"}},
        "protocols": {"iperf3": {}},
        "transfer": {"workdir": str(tmp / "work")},
        "journal": {"path": str(tmp / "journal.jsonl")},
        "schedule": {"interval": "1h"},
    }
    return parse_config(yaml.safe_dump(raw), "bench")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--delay", default="1ms")
    parser.add_argument("--rates", default="none,200mbit")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    name = "bbb" + uuid.uuid4().hex[:7]
    tmp = Path(tempfile.mkdtemp(prefix="bigbinf-bench-", dir="/var/tmp"))
    tmp.chmod(0o755)
    layout = LabLayout(_config(name, tmp, "none", "0s", args.seconds).lab)
    mechanism = "netem" if network.netem_available() else "userspace delay line"
    print(f"iperf3 downloads, {args.runs} runs each, alternating; delayed link: {args.delay} each way by {mechanism}")
    print(f"{'rate':<9} {'direct MB/s':>12} {'delayed MB/s':>13} {'ratio':>6}")
    try:
        for rate in args.rates.split(","):
            direct = _config(name, tmp, rate, "0s", args.seconds)
            delayed = _config(name, tmp, rate, args.delay, args.seconds)
            speeds: dict[str, list[float]] = {"direct": [], "delayed": []}
            for _ in range(args.runs):
                for kind, config in (("direct", direct), ("delayed", delayed)):
                    lab.up(config)
                    result = run_transfer(plan_round(config, lab.site(config))[0], config)
                    if result.outcome != "ok":
                        raise SystemExit(f"{kind} {rate}: {result.outcome}: {result.error}")
                    speeds[kind].append(result.throughput_bytes_per_second / 1e6)
            a, b = statistics.median(speeds["direct"]), statistics.median(speeds["delayed"])
            print(f"{rate:<9} {a:>12.1f} {b:>13.1f} {b / a:>6.2f}")
    finally:
        lab.teardown(layout)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
