"""Replay the suite's scheduling on measured test times: when would a run end with this
order of modules (tests/conftest.py SLOWEST_FIRST, at a git revision) under xdist's
loadfile scheduler (scripts/test.sh: `-n N --dist loadfile --no-loadscope-reorder`)?

Usage:
    .venv/bin/python benchmarks/suite_schedule.py JUNIT.xml                 # HEAD's order
    .venv/bin/python benchmarks/suite_schedule.py JUNIT.xml --rev c6d3b42 --rev HEAD --workers 4

JUNIT.xml: a run's `--junitxml` (each test's time: its setup, call and teardown).  The
real scheduler class is driven with stand-in workers on a simulated clock: a worker
runs a test once it holds the one after it (or is shutting down), as xdist's do, each
test taking its measured time.  Times measured under one load replay that load: read
the orders side by side, not the end time alone.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

from xdist.remote import Producer
from xdist.scheduler import LoadFileScheduling

ROOT = Path(__file__).resolve().parents[1]


def measured(junit: Path) -> dict[str, list[tuple[str, float]]]:
    """module path -> [(test, seconds)] in the order they ran."""
    tests: dict[str, list[tuple[str, float]]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        module = next(
            (
                "/".join(parts[:k]) + ".py"
                for k in range(len(parts), 0, -1)
                if (ROOT / ("/".join(parts[:k]) + ".py")).exists()
            ),
            "/".join(parts) + ".py",
        )
        tests.setdefault(module, []).append((case.get("name") or "", float(case.get("time") or 0)))
    return tests


def slowest_first(rev: str) -> list[str]:
    text = subprocess.run(
        ["git", "show", f"{rev}:tests/conftest.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "SLOWEST_FIRST":
            return [element.value for element in node.value.elts]  # type: ignore[attr-defined]
    raise SystemExit(f"{rev}: tests/conftest.py has no SLOWEST_FIRST")


class Worker:
    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[int] = []
        self.clock = 0.0

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += indices

    def shutdown(self) -> None:
        self.shutting_down = True


def replay(order: list[str], tests: dict[str, list[tuple[str, float]]], workers: int) -> list[float]:
    collection = [f"{m}::{name}#{i}" for m in order for i, (name, _) in enumerate(tests[m])]
    seconds = [t for m in order for _, t in tests[m]]
    config = SimpleNamespace(getvalue=lambda name: [f"{workers}*popen"], option=SimpleNamespace(loadscopereorder=False))
    scheduler = LoadFileScheduling(config, Producer("replay", enabled=False))  # type: ignore[arg-type]
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        scheduler.add_node(node)
        scheduler.add_node_collection(node, collection)
    scheduler.schedule()
    done = [0] * workers  # how many of its sent tests each worker has run
    while True:
        ready = [
            i for i, n in enumerate(nodes)
            if done[i] < len(n.sent) and (len(n.sent) - done[i] >= 2 or n.shutting_down)
        ]  # fmt: skip
        if not ready:
            break
        i = min(ready, key=lambda i: nodes[i].clock + seconds[nodes[i].sent[done[i]]])
        index = nodes[i].sent[done[i]]
        nodes[i].clock += seconds[index]
        done[i] += 1
        scheduler.mark_test_complete(nodes[i], index)
    left = len(collection) - sum(done)
    if left:
        raise SystemExit(f"the replay stalled with {left} tests not run")
    return [n.clock for n in nodes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("junit", type=Path)
    parser.add_argument("--rev", action="append", help="git revisions whose SLOWEST_FIRST to replay (default HEAD)")
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    tests = measured(args.junit)
    total = sum(t for ts in tests.values() for _, t in ts)
    print(f"{sum(map(len, tests.values()))} tests in {len(tests)} modules, {total:.0f} s in all: "
          f"{total / args.workers:.0f} s a worker at best")  # fmt: skip
    for rev in args.rev or ["HEAD"]:
        listed = slowest_first(rev)
        order = sorted(sorted(tests), key=lambda m: listed.index(m) if m in listed else len(listed))
        clocks = replay(order, tests, args.workers)
        workers = ", ".join(f"{c:.0f}" for c in sorted(clocks))
        print(f"{rev:>10} order: ends at {max(clocks):6.0f} s (workers {workers})")


if __name__ == "__main__":
    main()
