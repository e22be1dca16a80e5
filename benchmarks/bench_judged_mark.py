"""What the judged mark (history/judged.py, issue 44) costs a judged result: the bytes
written to it and the fsyncs, and the CPU and wall time of a result's publish
(RoundRunner.publish: journaled, published, judged by the regression test, marked), at
1, 40 and 1,000 series, alternated between exporter trees in fresh interpreters.

Each child: a RoundRunner on a journal under --scratch (a real disk: fsync is what it
costs there), each series' history loaded with four weeks of runs (4 a day) and tested,
the mark written once; then rounds of one run of every series (6 h apart, 25 MB/s with
3% noise: no regression opens), each round ended as RoundRunner._round ends one (its
`round_judged` where the tree has it), and whatever the mark still owes written at the
end (`write_mark`, as a stop does).  os.fsync and os.replace are counted by the file
they touch.  "no mark": the same on this tree with the marking off (judging False): what
the rest of a result costs.

Usage:
    .venv/bin/python benchmarks/bench_judged_mark.py [--tree /work/main/exporter] [--runs 3]
        [--series 1,40,1000] [--scratch /var/tmp]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, math, os, sys, time
from pathlib import Path
import numpy as np

series, rounds, directory, marking = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1"
counts = {"mark_fsyncs": 0, "other_fsyncs": 0, "mark_bytes": 0, "mark_writes": 0}
real_fsync, real_replace = os.fsync, os.replace

def fsync(fd):
    try:
        name = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        name = ""
    counts["mark_fsyncs" if ".regressions.judged.json" in name else "other_fsyncs"] += 1
    return real_fsync(fd)

def replace(src, dst, *a, **k):
    if str(dst).endswith(".regressions.judged.json"):
        counts["mark_bytes"] += os.path.getsize(src)
        counts["mark_writes"] += 1
    return real_replace(src, dst, *a, **k)

os.fsync, os.replace = fsync, replace

from bigbinf.config import parse_config
from bigbinf.result import Result, SeriesKey
from bigbinf.service.collector import ExporterState
from bigbinf.service.rounds import RoundRunner

CONFIG = '''
remotes: {lab: {address: 127.0.0.1, data_dir: /d, key: /k/id}}
datasets: {f32m: {file: f.bin, size: 32MiB}}
protocols: {scp: {}}
journal: {path: JOURNAL}
'''
runner = RoundRunner(parse_config(CONFIG.replace("JOURNAL", str(directory / "j.jsonl")), "bench"), ExporterState())
directions = ("download", "upload")
keys = [SeriesKey(f"p{i % 5}", f"r{i // 40}", f"d{(i // 5) % 4}", directions[(i // 20) % 2]) for i in range(series)]
assert len(set(keys)) == series
rng = np.random.default_rng(44)
size = 32 * 2**20
end = time.time() - 3600
t0 = end - rounds * 21600
for key in keys:
    runs = [(t0 - (112 - i) * 21600, 25e6 * math.exp(rng.normal(0, 0.03))) for i in range(112)]
    runner.history.load(key, runs)
    runner.history.retest(key)
    runner.history.latest[key] = runs[-1][0]
runner.judging = marking
if marking:
    runner._mark_judged(runner.judged_mark, runner.history, t0)
for k in counts:
    counts[k] = 0
round_judged = getattr(runner, "round_judged", None)
write_mark = getattr(runner, "write_mark", None)
cpu, wall = time.process_time(), time.perf_counter()
for r in range(rounds):
    for i, key in enumerate(keys):
        x = 25e6 * math.exp(rng.normal(0, 0.03))
        runner.publish(Result(key.protocol, key.remote, key.dataset, key.direction, t0 + (r + 1) * 21600 + i, "ok",
                              duration_seconds=size / x, file_bytes=size))
    if round_judged is not None:
        round_judged()
if write_mark is not None:
    write_mark()
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
n = rounds * series
mark = directory / "j.regressions.judged.json"
print(json.dumps({"results": n, "cpu_ms": cpu / n * 1e3, "wall_ms": wall / n * 1e3,
                  "mark_bytes": counts["mark_bytes"] / n, "mark_fsyncs": counts["mark_fsyncs"] / n,
                  "other_fsyncs": counts["other_fsyncs"] / n, "mark_writes": counts["mark_writes"],
                  "mark_size": mark.stat().st_size if mark.exists() else 0}))
"""

ROUNDS = {1: 200, 40: 10, 1000: 1}


def child(tree: str, series: int, marking: bool, scratch: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-judged-mark-", dir=scratch) as directory:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(series), str(ROUNDS.get(series, 1)), directory, "1" if marking else "0"],
            env={**os.environ, "PYTHONPATH": tree},
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", default=[], help="another exporter tree (PYTHONPATH)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--series", default="1,40,1000")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp"))
    args = parser.parse_args()
    trees = [str(ROOT / "exporter"), *args.tree]
    ways = [(tree, True) for tree in trees] + [(trees[0], False)]
    sizes = [int(s) for s in args.series.split(",")]
    seen: dict[tuple[int, str, bool], list[dict[str, float]]] = {}
    loads = []
    for _ in range(args.runs):
        for series in sizes:
            for tree, marking in ways:
                loads.append(os.getloadavg()[0])
                seen.setdefault((series, tree, marking), []).append(child(tree, series, marking, args.scratch))
    print(f"load average (1 min) {min(loads):.1f}-{max(loads):.1f}, {args.runs} runs each, medians")
    print(
        "| series | tree | results | mark bytes / result | mark fsyncs / result | other fsyncs / result "
        "| CPU-ms / result | wall ms / result | mark size (B) |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for (series, tree, marking), rows in seen.items():

        def med(name: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(r[name] for r in rows)

        cpu = [r["cpu_ms"] for r in rows]
        print(
            f"| {series} | {tree if marking else tree + ' (no mark)'} | {rows[0]['results']:.0f} "
            f"| {med('mark_bytes'):,.0f} | {med('mark_fsyncs'):.3f} | {med('other_fsyncs'):.2f} "
            f"| {med('cpu_ms'):.2f} ({min(cpu):.2f}-{max(cpu):.2f}) | {med('wall_ms'):.2f} | {med('mark_size'):,.0f} |"
        )


if __name__ == "__main__":
    main()
