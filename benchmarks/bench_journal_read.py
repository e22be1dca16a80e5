"""Reading a whole undamaged journal (issue 44 break 3): each member's CRC checked before
its lines are given, a member per 64 KiB of lines, against the tree(s) given (main's: one
member per part, lines given as inflated), side by side in one run, alternated.

Usage:
    .venv/bin/python benchmarks/bench_journal_read.py --tree /work/main/exporter [--results 50000] [--runs 5]

Per tree: an old single-file journal of --results results (one an hour for each of 120
series, ~1.1 KB a line) is split into day parts by that tree's code (journal-compact's
rotate_now), then read whole (`store.read`, every part and line parsed into a Result) in
a fresh interpreter, --runs times; "this tree on TREE's parts" reads the parts another
tree sealed (the upgrade path: parts written by the current main, read by this code).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1] / "exporter"

MAKE = """
import json, sys
from pathlib import Path
from bigbinf.journal.store import Journal
path, n = Path(sys.argv[1]), int(sys.argv[2])
t0 = 1_700_000_000.0
with open(path, "w") as f:
    for i in range(n):
        series, hour = i % 120, i // 120
        line = {"protocol": "p%d" % (series % 5), "remote": "r%d" % (series % 6), "dataset": "d%d" % (series % 2),
                "direction": "download", "start_timestamp": t0 + hour * 3600.0 + series, "outcome": "ok",
                "duration_seconds": 2.0 + (i % 7) / 10, "file_bytes": 5 << 20, "files": 1, "verified": True,
                "error": "%07d" % i + "x" * 800}
        f.write(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\\n")
Journal(path).rotate_now()
"""

READ = """
import sys, time
from bigbinf.journal.store import read
t = time.perf_counter(); c = time.process_time()
n = sum(1 for _ in read(sys.argv[1]))
print(n, time.perf_counter() - t, time.process_time() - c)
"""


def run(tree: Path, code: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], env=env, check=True, capture_output=True, text=True
    ).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", default=[], type=Path, help="another exporter tree (PYTHONPATH)")
    parser.add_argument("--results", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bigbinf-bench-read-"))
    try:
        trees = [HERE, *args.tree]
        journals = {}
        for i, tree in enumerate(trees):
            path = scratch / f"t{i}" / "journal.jsonl"
            path.parent.mkdir()
            run(tree, MAKE, str(path), str(args.results))
            parts = sorted(path.parent.glob("journal.*.jsonl.gz"))
            size = sum(p.stat().st_size for p in parts)
            journals[tree] = path
            print(f"{tree}: {len(parts)} parts, {size / 1e6:.1f} MB sealed")
        ways = [(tree, tree) for tree in trees] + [(HERE, tree) for tree in trees[1:]]
        times: dict[tuple[Path, Path], list[tuple[float, float]]] = {way: [] for way in ways}
        for _ in range(args.runs):
            for reader, sealer in ways:
                n, wall, cpu = run(reader, READ, str(journals[sealer])).split()
                assert int(n) == args.results, (reader, sealer, n)
                times[(reader, sealer)].append((float(wall), float(cpu)))
        print(json.dumps({"uptime": os.getloadavg()}))
        for (reader, sealer), got in times.items():
            wall = statistics.median(w for w, _ in got)
            cpu = statistics.median(c for _, c in got)
            print(f"{reader} reading {sealer}'s parts: median {wall:.2f} s wall, {cpu:.2f} CPU-s ({args.runs} runs)")
    finally:
        shutil.rmtree(scratch)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
