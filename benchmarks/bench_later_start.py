"""A later start's CPU, split in two: importing the package and parsing the command line
that serves, then `Exporter(...)` (the configuration, the checkpoint, the restore), each
in a fresh interpreter with its tree's bytecode compiled (as an installed exporter runs;
bench_journal.deployed_env), alternated between exporter trees (issue 44: a later start
at 1 M results within 2 s).

Usage:
    .venv/bin/python benchmarks/bench_later_start.py CONFIG [--runs 5] [--tree /work/main/exporter]

CONFIG: the configuration of a journal already split and started once (bench_journal.py's
mesh.yaml, or any exporter's).  Each tree is given as a PYTHONPATH; the default is this
checkout's alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_journal import ROOT, deployed_env

# Run in the child: the serving command line's import and parse, then the Exporter.
CHILD = """
import sys, time
t0 = time.process_time()
from bigbinf import cli
words = ["--config.file", sys.argv[1], "--web.listen-address", "127.0.0.1:0"]
serving = getattr(cli, "_serves", None)
args = (cli.build_parser(serving=True) if serving and serving(words) else cli.build_parser()).parse_args(words)
t1 = time.process_time()
cli.Exporter(args.config_file, args.listen, lab=cli.lab.site)
print(t1 - t0, time.process_time() - t1, len(sys.modules))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], help="another exporter tree (PYTHONPATH)")
    args = parser.parse_args()
    trees = [str(ROOT / "exporter"), *args.tree]
    envs = {tree: deployed_env({**os.environ, "PYTHONPATH": tree}) for tree in trees}
    seen: dict[str, list[tuple[float, float, int]]] = {tree: [] for tree in trees}
    for _ in range(args.runs):
        for tree in trees:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(args.config)],
                env=envs[tree],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
            imported, restored, modules = out.stdout.split()
            seen[tree].append((float(imported), float(restored), int(modules)))
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| tree | import + parse (CPU-s) | Exporter() with restore (CPU-s) | total, median | modules |")
    print("|---|---:|---:|---:|---:|")
    for tree, rows in seen.items():
        imp, res = [r[0] for r in rows], [r[1] for r in rows]
        total = statistics.median(a + b for a, b, _ in rows)
        print(
            f"| {tree} | {min(imp):.2f}-{max(imp):.2f} | {min(res):.2f}-{max(res):.2f} | {total:.2f} | {rows[0][2]} |"
        )


if __name__ == "__main__":
    main()
