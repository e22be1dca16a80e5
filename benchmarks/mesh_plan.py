"""What the mesh's slot plan costs, and how well it packs, measured side by side in one run.

    .venv/bin/python benchmarks/mesh_plan.py [--shapes 10,30,100] [--sites 50,100]
        [--interval-sites 50] [--memory-sites 100] [--against REF]

1. **Shapes** (issue 26): rings (each site tests its 4 ring neighbours, both ways), stars
   (a hub and every other site, both ways), a random half of the ordered pairs (fixed
   seed) and full meshes, of 10, 30 and 100 sites; 2 protocols (http, scp) x one 1 GiB
   dataset x download, guard 2 s, probes on (a path's first slot is 6 s longer), cron
   `0 1 * * *` and `0 13 * * *` (2 rounds a day).  Two kinds of slot lengths: estimated
   (every site's bandwidth 10gbit: equal slots) and measured (a durations file with one
   duration per test, 5-120 s, fixed seed).  Per mesh: the plan's span against its lower
   bound (the busiest site's slots and guards end to end) for the plan as made (the
   shorter of list scheduling in time and the tournament order) and for the tournament
   order alone (how every plan was packed before), and `plan_day`'s time (CPU and wall).
2. **Sizes**: the all-pairs meshes of 50 and 100 sites, as before: the seconds to parse
   and validate the mesh file, to plan the day (`plan_day`, and packed round by round for
   comparison), and `mesh plan` whole, in this process and as a new process (`python -m
   bigbinf mesh plan`, imports included), with cron and, for --interval-sites, `interval:
   1h` (24 rounds) and `interval: 15m` (96 rounds).
3. **Memory**: the largest resident set of `mesh plan --format json` (and text) as a new
   process, for a --memory-sites all-pairs mesh with hourly rounds (475,200 slots a day at
   100 sites); with --against REF also the code of git revision REF (its exporter/ tree,
   extracted to a temporary directory), run the same way beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import io
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bigbinf.mesh import cli as mesh_cli
from bigbinf.mesh import plan as meshplan
from bigbinf.mesh.config import MeshConfig, parse_mesh
from bigbinf.mesh.plan import (
    Durations,
    dump_durations,
    load_durations,
    mesh_tests,
    plan_day,
    plan_round,
    site_busy_seconds,
)

DAY = dt.date(2026, 11, 25)
ROOT = Path(__file__).resolve().parents[1]


def mesh_raw(sites: int, durations: Path | None, interval: str | None = None, pairs: Any = "all") -> dict[str, Any]:
    schedule: dict[str, Any] = {"guard": "2s"}
    if interval is None:
        schedule["cron"] = ["0 1 * * *", "0 13 * * *"]
    else:
        schedule["interval"] = interval
    if durations is not None:
        schedule["durations"] = str(durations)
    return {
        "name": f"mesh{sites}",
        "sites": {
            f"site{i:03d}": {
                "address": f"10.{i // 250}.{i % 250}.1",
                "data_dir": "/srv/bigbinf/data",
                "key": "/etc/bigbinf/id_ed25519",
                "bandwidth": "10gbit",
            }
            for i in range(sites)
        },
        "datasets": {"g1": {"file": "g1.bin", "size": "1GiB"}},
        "protocols": {"http": {}, "scp": {}},
        "tests": [{"protocols": ["http", "scp"], "datasets": ["g1"], "pairs": pairs}],
        "schedule": schedule,
    }


def shape_pairs(sites: int, shape: str) -> Any:
    names = [f"site{i:03d}" for i in range(sites)]
    if shape == "full":
        return "all"
    if shape == "ring":
        ring = {(a, names[(i + d) % sites]): None for i, a in enumerate(names) for d in (1, -1, 2, -2)}
        return [list(p) for p in ring]
    if shape == "star":
        return [[names[0], b] for b in names[1:]] + [[b, names[0]] for b in names[1:]]
    rng = random.Random(15)  # a random half of the ordered pairs
    return [[a, b] for a in names for b in names if a != b and rng.random() < 0.5]


def measured(mesh: MeshConfig) -> Durations:
    rng = random.Random(15)
    return Durations({key: [round(rng.uniform(5, 120), 3)] for key in mesh_tests(mesh)})


def durations_file(mesh: MeshConfig, path: Path) -> None:
    rng = random.Random(15)
    tests = [{**dataclasses.asdict(key), "durations": [round(rng.uniform(5, 120), 3)]} for key in mesh_tests(mesh)]
    path.write_text(dump_durations({"mesh": mesh.name, "tests": tests}), encoding="utf-8")


def timed(func: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = func(*args)
    return value, time.perf_counter() - start


# ---------------------------------------------------------------- 1. shapes


def tournament_ratio(mesh: MeshConfig, durations: Durations) -> float:
    """span / bound of the tournament order alone (the plan before list scheduling)."""
    tests = mesh_tests(mesh)
    lengths = {t: meshplan._transfer_ms(mesh, t, b, durations) for t, b in tests.items()}
    probes = {t: meshplan.probe_ms(mesh, t) for t in tests}
    order = meshplan._slot_order(list(mesh.sites), list(tests))
    placed = meshplan._pack_in_order(order, lengths, probes, meshplan.guard_ms(mesh), mesh.schedule.repetitions)
    return ratio(mesh, placed)


def ratio(mesh: MeshConfig, placed: Any) -> float:
    busy = dict.fromkeys(mesh.sites, 0)
    count = dict.fromkeys(mesh.sites, 0)
    for p in placed:
        for site in (p.test.src, p.test.dst):
            busy[site] += p.end - p.start
            count[site] += 1
    guard = meshplan.guard_ms(mesh)
    bound = max(busy[s] + guard * max(0, count[s] - 1) for s in mesh.sites)
    return meshplan._span(placed) / bound


def shapes(sizes: list[int]) -> None:
    print(
        "| sites | shape | lengths | slots per round | span / bound | tournament order alone | "
        "plan_day CPU s | plan_day wall s |"
    )
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for sites in sizes:
        for shape in ("ring", "star", "random", "full"):
            mesh = parse_mesh(yaml.safe_dump(mesh_raw(sites, None, pairs=shape_pairs(sites, shape))), "mesh")
            for kind in ("estimated", "measured"):
                durations = measured(mesh) if kind == "measured" else Durations()
                cpu, wall = time.process_time(), time.perf_counter()
                plans = plan_day(mesh, DAY, durations)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                first = plans[0]
                span = first.planned_end - first.start
                bound = max(site_busy_seconds(mesh, first).values())
                print(
                    f"| {sites} | {shape} | {kind} | {len(first.slots):,} | {span / bound:.3f} "
                    f"| {tournament_ratio(mesh, durations):.3f} | {cpu:.2f} | {wall:.2f} |",
                    flush=True,
                )


# ---------------------------------------------------------------- 2. sizes


def cli_plan(path: Path) -> tuple[int, float]:
    parser = argparse.ArgumentParser()
    mesh_cli.register(parser.add_subparsers())
    args = parser.parse_args(["mesh", "plan", "--mesh.file", str(path), "--date", DAY.isoformat()])
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = args.func(args)
    return code, time.perf_counter() - start


def process_plan(path: Path) -> float:
    """`bigbinf-exporter mesh plan` as a user runs it: a new process, imports included."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf", "mesh", "plan", "--mesh.file", str(path), "--date", DAY.isoformat()],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 3):  # a broken command is a failed benchmark, not a "-"
        raise SystemExit(f"mesh plan --mesh.file {path} exited {proc.returncode}:\n{proc.stderr}")
    return seconds


def repacked(mesh: MeshConfig, durations: Durations) -> None:
    """The day packed round by round (plan_round per round), for comparison."""
    for plan in plan_day(mesh, DAY, durations):
        plan_round(mesh, plan.start, plan.end, durations)


def run(sites: int, kind: str, tmp: Path, interval: str | None = None) -> str:
    durations = tmp / f"durations{sites}.json" if kind == "measured" else None
    if durations is not None:
        durations_file(parse_mesh(yaml.safe_dump(mesh_raw(sites, None)), "mesh"), durations)
    text = yaml.safe_dump(mesh_raw(sites, durations, interval), sort_keys=False)
    mesh, parse_s = timed(parse_mesh, text, "mesh")
    loaded = Durations()
    if durations is not None:
        loaded = load_durations(mesh)
    plans, plan_s = timed(plan_day, mesh, DAY, loaded)
    _, repacked_s = timed(repacked, mesh, loaded)
    repacked_s -= plan_s  # repacked() plans the day first, for the rounds' starts and ends
    path = tmp / f"mesh{sites}-{kind}.yaml"
    path.write_text(text, encoding="utf-8")
    code, cli_s = cli_plan(path)
    if code not in (0, 3):
        raise SystemExit(f"mesh plan --mesh.file {path} exited {code}")
    process_s = process_plan(path)
    first = plans[0]
    span = first.planned_end - first.start
    bound = max(site_busy_seconds(mesh, first).values())
    fits = all(p.fits for p in plans)
    slack = min(p.slack_seconds for p in plans)  # after the last slot's guard gap, as `mesh plan` says
    verdict = f"yes, {slack:,.0f} s to spare" if fits else f"NO, {max(p.overflow_seconds for p in plans):,.0f} s over"
    schedule = f"interval {interval}" if interval else "cron"
    return (
        f"| {sites} | {kind} | {schedule}, {len(plans)} rounds | {len(first.slots):,} | {parse_s:.2f} "
        f"| {plan_s:.2f} | {repacked_s:.2f} | {cli_s:.2f} | {process_s:.2f} (exit {code}) "
        f"| {verdict} | {span:,.0f} | {bound:,.0f} | {span / bound:.3f} |"
    )


def sizes(tmp: Path, all_sites: list[int], interval_sites: list[int]) -> None:
    print(
        "| sites | lengths | schedule | slots per round | parse s | plan_day s | repacked s | mesh plan s "
        "| mesh plan, new process s | the day fits | span s | lower bound s | span / bound |"
    )
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    for sites in all_sites:
        for kind in ("estimated", "measured"):
            print(run(sites, kind, tmp), flush=True)
    for sites in interval_sites:
        for interval in ("1h", "15m"):
            for kind in ("estimated", "measured"):
                print(run(sites, kind, tmp, interval), flush=True)


# ---------------------------------------------------------------- 3. memory

_MAXRSS = (
    "import resource, subprocess, sys; "
    "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE); "
    "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def peak_rss(argv: list[str], env: dict[str, str]) -> tuple[int, float, float]:
    """(exit code, the largest resident set in MB, wall seconds) of argv as a new process."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _MAXRSS, *argv], capture_output=True, text=True, env=env, check=True)
    code, kib = out.stdout.split()
    return int(code), int(kib) / 1024, time.perf_counter() - start


def memory(tmp: Path, sites: int, against: str | None) -> None:
    path = tmp / f"memory{sites}.yaml"
    path.write_text(yaml.safe_dump(mesh_raw(sites, None, "1h"), sort_keys=False), encoding="utf-8")
    trees = {"this tree": None}
    if against:
        old = tmp / "against"
        old.mkdir()
        archive = subprocess.run(["git", "archive", against, "exporter"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
        trees[against] = str(old / "exporter")
    print("| code | format | exit | peak RSS MB | wall s |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, pythonpath in trees.items():
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath  # that revision's bigbinf, this environment's libraries
        for fmt in ("json", "text"):
            argv = [sys.executable, "-m", "bigbinf", "mesh", "plan", "--mesh.file", str(path)]
            argv += ["--date", DAY.isoformat(), "--format", fmt]
            code, mb, seconds = peak_rss(argv, env)
            print(f"| {name} | {fmt} | {code} | {mb:,.0f} | {seconds:.1f} |", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="10,30,100", help="mesh sizes of the shapes table (default 10,30,100)")
    parser.add_argument("--sites", default="50,100", help="all-pairs mesh sizes of the sizes table (default 50,100)")
    parser.add_argument(
        "--interval-sites", default="50", help="mesh sizes also planned with interval 1h and 15m (default 50)"
    )
    parser.add_argument("--memory-sites", type=int, default=100, help="the memory table's mesh (default 100)")
    parser.add_argument("--against", metavar="REF", help="also measure the memory of git revision REF's code")
    args = parser.parse_args()

    def numbers(text: str) -> list[int]:
        return [int(s) for s in text.split(",") if s]

    with tempfile.TemporaryDirectory() as tmp:
        print("## Shapes\n")
        shapes(numbers(args.shapes))
        print("\n## Sizes\n")
        sizes(Path(tmp), numbers(args.sites), numbers(args.interval_sites))
        print(f"\n## Memory: mesh plan, {args.memory_sites} sites, hourly rounds\n")
        memory(Path(tmp), args.memory_sites, args.against)
    return 0


if __name__ == "__main__":
    sys.exit(main())
