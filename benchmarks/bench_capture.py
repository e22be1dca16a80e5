"""What capturing costs a transfer: the same transfers with and without tcpdump, side by side.

    sudo .venv/bin/python benchmarks/bench_capture.py [--size 256MiB] [--rate none|200mbit] [--runs 3]

Builds a private lab (unique name, removed at the end), runs scp and HTTP downloads
alternately with capture on and off, and prints the median durations and their ratio.
Also prints the analyser's time per capture.  Needs root.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from bigbinf import lab
from bigbinf.config import parse_config
from bigbinf.lab import LabLayout
from bigbinf.measure.analyse import analyse_pcap
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="256MiB")
    parser.add_argument("--rate", default="none", help="tc rate of the lab link, or none for an unshaped veth")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    name = "bbb" + uuid.uuid4().hex[:7]
    tmp = Path(tempfile.mkdtemp(prefix="bigbinf-bench-", dir="/var/tmp"))
    tmp.chmod(0o755)
    raw = {
        "lab": {
            "name": name,
            "state_dir": str(tmp / "lab"),
            "link": {} if args.rate == "none" else {"rate": args.rate, "burst": "256KiB"},
            "servers": ["sshd", "nginx"],
        },
        "remotes": {"lab": {"lab": True}},
        "datasets": {"big": {"file": "big.bin", "size": args.size}},
        "protocols": {"scp": {}, "http": {}},
        "transfer": {"workdir": str(tmp / "work")},
        "journal": {"path": str(tmp / "journal.jsonl")},
        "schedule": {"interval": "1h"},
    }
    config = parse_config(yaml.safe_dump(raw), "bench")
    layout = LabLayout(config.lab)
    on = config.model_copy(update={"capture": config.capture.model_copy(update={"keep": True})})
    off = config.model_copy(update={"capture": config.capture.model_copy(update={"enabled": False})})
    try:
        lab.up(config)
        print(
            f"{args.size} downloads over a {'unshaped veth' if args.rate == 'none' else args.rate} link, "
            f"{args.runs} runs each, alternating (medians):"
        )
        print(
            f"{'protocol':<8} {'no capture':>12} {'capture':>12} {'ratio':>7} {'MB/s off':>9} {'MB/s on':>9}"
            f" {'analyse':>9} {'packets':>9}"
        )
        for spec in plan_round(config, lab.site(config)):
            plain, captured, analyse_s, packets = [], [], [], 0
            for _ in range(args.runs):
                plain.append(run_transfer(spec, off).duration_seconds)
                result = run_transfer(spec, on)
                captured.append(result.duration_seconds)
                t0 = time.perf_counter()
                analyse_pcap(result.pcap_path, result.client_address, result.remote_address)
                analyse_s.append(time.perf_counter() - t0)
                packets = result.packets_down + result.packets_up
                Path(result.pcap_path).unlink()
            a, b = statistics.median(plain), statistics.median(captured)
            size = spec.dataset_config.size
            print(
                f"{spec.protocol:<8} {a:>11.3f}s {b:>11.3f}s {b / a:>7.2f} {size / a / 1e6:>9.1f} "
                f"{size / b / 1e6:>9.1f} {statistics.median(analyse_s):>8.3f}s {packets:>9}"
            )
    finally:
        lab.teardown(layout)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
