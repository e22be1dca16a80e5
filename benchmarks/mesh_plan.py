"""What the mesh's slot plan costs, and how well it packs: 50 and 100 sites, all pairs.

    .venv/bin/python benchmarks/mesh_plan.py [--sites 50,100] [--interval-sites 50]

Each mesh (built in memory, then written to a temporary file for `mesh plan`) has every
ordered pair of sites x 2 protocols (http, scp) x 1 dataset (1 GiB) x download: 4,900
tests at 50 sites, 19,800 at 100.  Two kinds of slot lengths:

* estimated: every site's bandwidth 10gbit, so every slot is alike (1 GiB / 10 Gbit/s
  x headroom 1.5 + 2 s of setup, + the probe in each path's first slot);
* measured: a durations file with a different typical duration per test (5-120 s, drawn
  with a fixed seed), as after a few days of running.

Each is planned with cron (2 rounds a day) and, for the --interval-sites meshes, with
`interval: 1h` (24 rounds) and `interval: 15m` (96 rounds): plan_day packs a day once and
shifts it to each round's start; the "repacked" column is the same day packed round by
round (plan_round per round, as before that), for comparison.

Per mesh and kind it prints the seconds to parse and validate the mesh file (every
site's derived configuration included), to plan the day and to run
`mesh plan` whole (load, plan, render the text), in this process and as a new process
(`python -m bigbinf mesh plan`, imports included); the slots per round; whether the day
fits and by how much; and the packing's quality: the plan's span (round start to last
slot end) against a lower bound no order can beat (the busiest site's slots and the guard
gaps between them), as a ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import io
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from bigbinf.mesh import cli as mesh_cli
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


def mesh_raw(sites: int, durations: Path | None, interval: str | None = None) -> dict[str, Any]:
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
        "tests": [{"protocols": ["http", "scp"], "datasets": ["g1"]}],
        "schedule": schedule,
    }


def durations_file(mesh: MeshConfig, path: Path) -> None:
    rng = random.Random(15)
    tests = [{**dataclasses.asdict(key), "durations": [round(rng.uniform(5, 120), 3)]} for key in mesh_tests(mesh)]
    path.write_text(dump_durations({"mesh": mesh.name, "tests": tests}), encoding="utf-8")


def timed(func: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = func(*args)
    return value, time.perf_counter() - start


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
    """The day as plan_day computed it before packing once: every round packed anew."""
    for plan in plan_day(mesh, DAY, durations):
        plan_round(mesh, plan.start, plan.end, durations)


def run(sites: int, kind: str, tmp: Path, interval: str | None = None) -> str:
    durations = tmp / f"durations{sites}.yaml" if kind == "measured" else None
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sites", default="50,100", help="comma-separated mesh sizes (default 50,100)")
    parser.add_argument(
        "--interval-sites", default="50", help="mesh sizes also planned with interval 1h and 15m (default 50)"
    )
    args = parser.parse_args()
    print(
        "| sites | lengths | schedule | slots per round | parse s | plan_day s | repacked s | mesh plan s "
        "| mesh plan, new process s | the day fits | span s | lower bound s | span / bound |"
    )
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for sites in (int(s) for s in args.sites.split(",")):
            for kind in ("estimated", "measured"):
                print(run(sites, kind, Path(tmp)), flush=True)
        for sites in (int(s) for s in args.interval_sites.split(",") if s):
            for interval in ("1h", "15m"):
                for kind in ("estimated", "measured"):
                    print(run(sites, kind, Path(tmp), interval), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
