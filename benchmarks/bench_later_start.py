"""A later start (issue 44: at 1 M results within 2 s and 150 MB, from exec to /metrics up
and the first round able to run), alternated between exporter trees, each in a fresh
interpreter with its tree's bytecode compiled (as an installed exporter runs;
bench_journal.deployed_env):

* its CPU, split in two: importing the package and parsing the command line that serves,
  then `Exporter(...)` (the configuration, the checkpoint, the restore);
* the whole start (`bigbinf-exporter` as a process): wall clock from exec to the first
  /metrics answer, and on to the scrape that says the journal is read
  (bigbinf_journal_loading 0: the rounds may run), its CPU and VmHWM then.

Usage:
    .venv/bin/python benchmarks/bench_later_start.py --make DIR [--results 1000000] [--series 40]
    .venv/bin/python benchmarks/bench_later_start.py DIR/mesh.yaml [--runs 3] [--tree /work/main/exporter]

--make writes a journal of N results over 40 series (5 remotes x 2 protocols x 2 datasets
x 2 directions, one run every 20 minutes each: 347 days at 1 M), with the configuration,
then starts an exporter on it once (the split into day segments, the checkpoint, the
first replay through the regression state) and once more (a later start: what each one
after it finds).  CONFIG: the configuration of a journal already split and started once
(--make's, bench_journal.py's mesh.yaml, or any exporter's).  Each tree is given as a
PYTHONPATH; the default is this checkout's alone.  A start changes the journal's files as
any start does (the judged mark, the checkpoint caught up), and trees may keep them
differently (an older exporter's judged mark is not this one's): each tree starts on its
own copy of CONFIG's directory (made under --scratch, removed after).

--spoil-mark: before each start, the judged mark's last series is given a digest of runs
it never judged (what a journal rewound or replaced gives): the mark reads whole and
names every series, and the start falls back to the full re-judge (the runs a suspicion
may span, 33 a series) once it has loaded the series up to that one (issue 44: that
fallback ran before /metrics; now after it, with bigbinf_journal_loading 1).
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

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.mesh: the tests' mesh

from tests.support.mesh import mesh_keys, write_mesh_config

from bench_journal import ROOT, deployed_env, start, write_journal

# Run in the child: the serving command line's import and parse, then the Exporter.
CHILD = """
import sys, time
t0 = time.process_time()
from bigbinf import cli
words = ["--config.file", sys.argv[1], "--web.listen-address", "127.0.0.1:0"]
serving = getattr(cli, "_serves", None)
args = (cli.build_parser(serving=True) if serving and serving(words) else cli.build_parser()).parse_args(words)
try:
    from bigbinf.service.server import Exporter
except ImportError:  # before the exporter moved out of cli.py
    Exporter = cli.Exporter
t1 = time.process_time()
Exporter(args.config_file, args.listen, lab=cli.lab.site)
print(t1 - t0, time.process_time() - t1, len(sys.modules))
"""

PORT = 19_905
LIMIT = 600.0  # seconds a start may take to read its journal
MAKE_LIMIT = 3600.0  # the first start: the split, the checkpoint and the first replay (16 min at load 10)


def make(directory: Path, results: int, remotes: int, protocols: int, datasets: int, every: float) -> Path:
    """The journal and its configuration, started once and once more; returns the config."""
    directory.mkdir(parents=True, exist_ok=True)
    config = write_mesh_config(directory, remotes, protocols, datasets)
    raw = yaml.safe_load(config.read_text())
    raw["schedule"] = {"interval": f"{every:.0f}s"}
    config.write_text(yaml.safe_dump(raw))
    write_journal(directory / "journal.jsonl", results, mesh_keys(remotes, protocols, datasets), every)
    for what in ("first start", "a later start"):
        seen = start(sys.executable, config, PORT, MAKE_LIMIT, loaded_limit=MAKE_LIMIT)
        print(f"{what}: {seen}", flush=True)
    return config


def whole(tree_env: dict[str, str], config: Path) -> tuple[float, float, float, float]:
    """(wall to /metrics, wall to the journal read, CPU-s then, VmHWM MB then)."""
    seen = start(sys.executable, config, PORT, LIMIT, loaded_limit=LIMIT, env=tree_env)
    if seen["start_s"] is None:
        raise RuntimeError(f"no /metrics within {LIMIT:.0f} s")
    loaded = "loaded_s" in seen
    if loaded and seen["loaded_s"] is None:
        raise RuntimeError(f"the journal was not read within {LIMIT:.0f} s")
    return (
        seen["start_s"],
        seen["loaded_s"] if loaded else seen["start_s"],
        seen["loaded_cpu_s"] if loaded else seen["start_cpu_s"],
        seen["loaded_VmHWM"] if loaded else seen["VmHWM"],
    )


def spoil(config: Path) -> None:
    """The judged mark beside CONFIG's journal, its last series' digest replaced."""
    raw = yaml.safe_load(config.read_text())
    journal = Path(raw["journal"]["path"])
    mark = journal.with_name(f"{journal.stem}.regressions.judged.json")
    record = json.loads(mark.read_text())
    record["series"][-1]["tail"] = "0" * 24
    mark.write_text(json.dumps(record))


def span(values: list[float]) -> str:
    return f"{min(values):.2f}-{max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path, nargs="?")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", action="append", default=[], help="another exporter tree (PYTHONPATH)")
    parser.add_argument("--make", type=Path, metavar="DIR", help="write a journal into DIR and start on it twice")
    parser.add_argument("--results", type=int, default=1_000_000)
    parser.add_argument("--remotes", type=int, default=5)
    parser.add_argument("--protocols", type=int, default=2)
    parser.add_argument("--datasets", type=int, default=2)
    parser.add_argument("--every", type=float, default=1200.0, help="seconds between a series' runs")
    parser.add_argument("--scratch", type=Path, default=Path("/var/tmp"), help="where the trees' copies are made")
    parser.add_argument("--spoil-mark", action="store_true", help="the judged mark refused at each start (above)")
    args = parser.parse_args()
    if args.make:
        config = make(args.make, args.results, args.remotes, args.protocols, args.datasets, args.every)
        print(f"made {config}")
        return
    if args.config is None:
        parser.error("give CONFIG (or --make DIR)")
    trees = [str(ROOT / "exporter"), *args.tree]
    envs = {tree: deployed_env({**os.environ, "PYTHONPATH": tree}) for tree in trees}
    with tempfile.TemporaryDirectory(prefix="bench-later-start-", dir=args.scratch) as scratch:
        configs = {tree: copy(args.config, Path(scratch) / f"tree{i}") for i, tree in enumerate(trees)}
        measure(trees, envs, configs, args.runs, args.spoil_mark)


def copy(config: Path, directory: Path) -> Path:
    """CONFIG's directory copied to `directory`, its configuration naming the copy's journal."""
    shutil.copytree(config.parent, directory)
    raw = yaml.safe_load(config.read_text())
    raw["journal"]["path"] = str(directory / Path(raw["journal"]["path"]).name)
    copied = directory / config.name
    copied.write_text(yaml.safe_dump(raw))
    return copied


def measure(
    trees: list[str], envs: dict[str, dict[str, str]], configs: dict[str, Path], runs: int, spoiled: bool = False
) -> None:
    seen: dict[str, list[tuple[float, float, int]]] = {tree: [] for tree in trees}
    starts: dict[str, list[tuple[float, float, float, float]]] = {tree: [] for tree in trees}
    loads = []
    for _ in range(runs):
        for tree in trees:
            loads.append(os.getloadavg()[0])
            if spoiled:
                spoil(configs[tree])
            out = subprocess.run(
                [sys.executable, "-c", CHILD, str(configs[tree])],
                env=envs[tree],
                capture_output=True,
                text=True,
                check=True,
                cwd=ROOT,
            )
            imported, restored, modules = out.stdout.split()
            seen[tree].append((float(imported), float(restored), int(modules)))
            if spoiled:
                spoil(configs[tree])
            starts[tree].append(whole({**os.environ, "PYTHONPATH": tree}, configs[tree]))
    print(f"load average (1 min) {min(loads):.1f}-{max(loads):.1f}")
    print("| tree | import + parse (CPU-s) | Exporter() with restore (CPU-s) | total, median | modules |")
    print("|---|---:|---:|---:|---:|")
    for tree, rows in seen.items():
        imp, res = [r[0] for r in rows], [r[1] for r in rows]
        total = statistics.median(a + b for a, b, _ in rows)
        print(f"| {tree} | {span(imp)} | {span(res)} | {total:.2f} | {rows[0][2]} |")
    print()
    print("| tree | wall to /metrics (s) | wall to the journal read (s) | CPU-s then | VmHWM (MB) |")
    print("|---|---:|---:|---:|---:|")
    for tree, rows in starts.items():
        print(f"| {tree} | " + " | ".join(span([r[i] for r in rows]) for i in range(4)) + " |")


if __name__ == "__main__":
    main()
