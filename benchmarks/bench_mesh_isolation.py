"""What the slot plan buys: a 3-site lab mesh measured three ways, side by side in one run.

Usage (root; a few minutes):
    sudo .venv/bin/python benchmarks/bench_mesh_isolation.py [--size 16MiB] [--interval 60]

1. alone: each site's tests run by `once`, one site after the other (the truth);
2. cron: the three sites' `once` started together, as three exporters whose cron fires
   at the same minute would (what a per-exporter cron gives a mesh);
3. plan: the three exporters of the mesh (`--mesh.file M --site S`), one round of slots.

For each pair (from -> to) it prints the throughput alone and the ratio of the other two
to it, and for each mode how many pairs of transfers that share a site overlapped on the
wire (the captures' first to last packet), the smallest gap between two of them, and the
byte ratios (wire bytes per file byte: a capture filtered on a host pair also counts the
reverse test between the same two sites when the two overlap).  The
lab mesh (bbi + random suffix, 198.19.x.0/24) is removed afterwards, even on failure.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))

from bigbinf.journal.store import Journal  # noqa: E402
from bigbinf.lab import mesh as labmesh  # noqa: E402
from bigbinf.mesh.config import MeshConfig, exporter_of, load_mesh  # noqa: E402
from bigbinf.result import Result  # noqa: E402

SITES = {"alpha": "100mbit", "beta": "50mbit", "gamma": "80mbit"}


def write_mesh(work: Path, name: str, subnet: str, mode: str, size: str, interval: int) -> MeshConfig:
    raw: dict[str, Any] = {
        "name": name,
        "lab": {"name": name, "state_dir": f"/var/tmp/bigbinf-{name}", "subnet": subnet},
        "sites": {
            site: {
                "link": {"rate": rate},
                "servers": ["sshd", "nginx"],
                "probe": {"count": 3, "interval": "20ms", "mtu": False},
                "exporter": {"listen": f"127.0.0.1:{9870 + i}", "journal": str(work / mode / site / "journal.jsonl")},
            }
            for i, (site, rate) in enumerate(SITES.items())
        },
        "datasets": {"data": {"file": "data.bin", "size": size}},
        "protocols": {"http": {}},
        "tests": [{"protocols": ["http"], "datasets": ["data"]}],
        "schedule": {"interval": f"{interval}s", "guard": "1s"},
        "transfer": {"workdir": f"/var/tmp/bigbinf-{name}/work", "timeout": "5m"},
    }
    path = work / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_mesh(path, lab=labmesh.layout)


def results(mesh: MeshConfig) -> list[Result]:
    out = []
    for site in SITES:
        path = exporter_of(mesh, site).journal
        out += [r for r in Journal(path).read() if r.outcome == "ok"] if path.exists() else []
    return out


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bigbinf", *args]


def run_alone(path: Path) -> None:
    for site in SITES:
        subprocess.run(cli("once", "--mesh.file", str(path), "--site", site), cwd=ROOT, check=True, capture_output=True)


def run_cron(path: Path) -> None:
    procs = [
        subprocess.Popen(cli("once", "--mesh.file", str(path), "--site", site), cwd=ROOT, stdout=subprocess.DEVNULL)
        for site in SITES
    ]
    for proc in procs:
        proc.wait()


def run_plan(mesh: MeshConfig, path: Path, interval: int) -> None:
    procs = [
        subprocess.Popen(
            cli("--mesh.file", str(path), "--site", site),
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for site in SITES
    ]
    try:
        deadline = time.time() + 3 * interval + 60
        while len([r for r in results(mesh) if r.slot_start_timestamp]) < 2 * len(SITES):
            if time.time() > deadline:
                raise SystemExit("the exporters did not complete a round of slots in time")
            time.sleep(2)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)


def overlaps(runs: list[Result]) -> tuple[int, float]:
    """(pairs of transfers sharing a site whose wire spans overlap, the smallest gap in s)."""
    count, gap = 0, float("inf")
    for a, b in itertools.combinations(runs, 2):
        if not {a.site, a.remote} & {b.site, b.remote}:
            continue
        a0, a1, b0, b1 = (
            a.first_packet_timestamp,
            a.last_packet_timestamp,
            b.first_packet_timestamp,
            b.last_packet_timestamp,
        )
        assert None not in (a0, a1, b0, b1)
        between = max(b0 - a1, a0 - b1)  # type: ignore[operator]
        count += between < 0
        gap = min(gap, between)
    return count, gap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="16MiB", help="the dataset each pair moves (default 16MiB)")
    parser.add_argument("--interval", type=int, default=60, help="seconds between the plan's rounds (default 60)")
    args = parser.parse_args()
    name = "bbi" + uuid.uuid4().hex[:5]
    subnet = f"198.19.{uuid.uuid4().int % 200 + 20}.0/24"
    work = Path(f"/var/tmp/bigbinf-bench-{name}")
    work.mkdir(parents=True)
    meshes = {
        mode: write_mesh(work, name, subnet, mode, args.size, args.interval) for mode in ("alone", "cron", "plan")
    }
    try:
        labmesh.up(meshes["alone"])
        run_alone(work / "alone.yaml")
        run_cron(work / "cron.yaml")
        run_plan(meshes["plan"], work / "plan.yaml", args.interval)
        by_mode = {mode: results(mesh) for mode, mesh in meshes.items()}
    finally:
        labmesh.down(meshes["alone"])
        subprocess.run(["rm", "-rf", "--", str(work)], check=False)

    def mean(runs: list[Result], site: str, remote: str) -> float:
        values = [r.throughput_bytes_per_second for r in runs if r.site == site and r.remote == remote]
        return sum(values) / len(values) if values else float("nan")

    print(f"3-site lab mesh ({', '.join(f'{s} {r}' for s, r in SITES.items())}), http {args.size} per pair")
    print(f"{'pair':<16}{'alone MB/s':>11}{'cron / alone':>14}{'plan / alone':>14}")
    for site, remote in itertools.permutations(SITES, 2):
        alone = mean(by_mode["alone"], site, remote)
        print(
            f"{site + ' -> ' + remote:<16}{alone / 1e6:>11.2f}"
            f"{mean(by_mode['cron'], site, remote) / alone:>14.3f}{mean(by_mode['plan'], site, remote) / alone:>14.3f}"
        )
    for mode, runs in by_mode.items():
        count, gap = overlaps(runs)
        ratios = [r.byte_ratio for r in runs]
        print(
            f"{mode:<6} {len(runs)} transfers; {count} pairs sharing a site overlapped; min gap {gap * 1000:.1f} ms; "
            f"byte ratio {min(ratios):.3f}-{max(ratios):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
