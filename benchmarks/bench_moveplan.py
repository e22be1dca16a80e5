"""plan-move's predictions against real moves in the lab (issue 28; needs root).

Two phases, each on its own lab and journal:

1. **steady link** (200 Mbit/s, 20 ms RTT): scheduled rounds of 32, 64, 128 and 256 MiB
   files with http and gridftp, and a tuning sweep (gridftp parallel 1, 4 on 128 MiB);
   then plan-move's model predicts a 1 GiB and a 4 GiB move with the recommended option,
   and the moves are run, alternating, `--trials` in all.
2. **peak and off-peak**: the same rounds, the link shaped to `--peak-rate` in every other
   round ("peak") and to 200 Mbit/s in the others ("off-peak").  The lab cannot wait for
   the afternoon, so a round run while the link is shaped as peak is journaled as if it
   had started at 13:MM:SS, an off-peak one at 03:MM:SS (the same day, the same minutes):
   the model sees a link that is slower at 13h, as on a shared research network.  Trials
   alternate between the two shapings, each compared with the prediction for its hour.

Per trial: the predicted duration and 90% interval (made before the move, from the
rounds and the sweep only), the actual wall clock, inside or not, and the error.

    sudo .venv/bin/python benchmarks/bench_moveplan.py [--trials 10] [--rounds 5]

3. **a year of history** (`--phase year`, no root, no lab): 1 M results journaled
   (benchmarks/bench_journal.py's journal: 120 series, one an hour each, 347 days), the
   checkpoint beside it as a running exporter keeps it; then `bigbinf-exporter plan-move`
   and `advise` as an operator runs them (and `advise` with one protocol more configured
   that never ran, which must not make it read the whole journal), each in a fresh process, wall clock and CPU
   seconds (user + system), side by side with another interpreter's code (`--before`,
   e.g. main's venv with PYTHONPATH=/work/main/exporter) on the same files.  The goal:
   both within 2 s.

    .venv/bin/python benchmarks/bench_moveplan.py --phase year [--results 1000000] [--before-path /work/main/exporter]
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
import zoneinfo
from datetime import datetime
from pathlib import Path
from typing import Any

from bigbinf import lab
from bigbinf.config import Config, validate_config
from bigbinf.history.moveplan import duration_text, plan, predict
from bigbinf.journal.store import Journal
from bigbinf.lab import network
from bigbinf.lab.layout import LabLayout
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.runs import runs_to
from bigbinf.service.collector import ExporterState
from bigbinf.service.rounds import RoundRunner, run_id
from bigbinf.service.sweeps import SweepRunner, settings, spec_for

UTC = zoneinfo.ZoneInfo("UTC")
ROUND_SETS = ("f32m", "f64m", "f128m", "f256m")
MOVES = ("f1g", "f4g")


def make_config(name: str, tmp: Path, rate: str) -> Config:
    raw: dict[str, Any] = {
        "lab": {
            "name": name,
            "state_dir": str(tmp / "lab"),
            "client_address": "198.19.29.1",
            "remote_address": "198.19.29.2",
            "link": {"rate": rate, "burst": "64KiB", "delay": "10ms"},
            "servers": ["nginx", "gridftp"],
        },
        "remotes": {"lab": {"lab": True}},
        "datasets": {
            **{d: {"file": f"{d}.bin", "size": d[1:].replace("m", "MiB")} for d in ROUND_SETS},
            "f1g": {"file": "f1g.bin", "size": "1GiB"},
            "f4g": {"file": "f4g.bin", "size": "4GiB"},
        },
        "protocols": {"http": {}, "gridftp": {}},
        "schedule": {
            "interval": "1h",
            "transfers": [
                {"protocol": p, "remote": "lab", "dataset": d} for p in ("http", "gridftp") for d in ROUND_SETS
            ],
        },
        "sweeps": {
            "streams": {
                "protocol": "gridftp",
                "remote": "lab",
                "datasets": ["f128m"],
                "options": {"parallel": [1, 4]},
                "repetitions": 2,
            }
        },
        "transfer": {"timeout": "20m", "workdir": str(tmp / "work")},
        "capture": {"enabled": False},  # the moves' wall clock is what is predicted, not the wire
        "journal": {"path": str(tmp / "journal.jsonl")},
    }
    return validate_config(raw, "bench_moveplan")


def reshape(config: Config, rate: str) -> None:
    assert config.lab is not None
    link = config.lab.link.model_copy(update={"rate": rate})
    network.shape(LabLayout(config.lab.model_copy(update={"link": link})))


def at_hour(result: Any, hour: int) -> Any:
    when = datetime.fromtimestamp(result.start_timestamp, UTC).replace(hour=hour)
    return dataclasses.replace(result, start_timestamp=when.timestamp())


def run_rounds(config: Config, runner: RoundRunner, rounds: int, peak_rate: str | None) -> None:
    specs = plan_round(config, lab.site(config))
    for i in range(rounds * (2 if peak_rate else 1)):
        peak = bool(peak_rate) and i % 2 == 0
        if peak_rate:
            reshape(config, peak_rate if peak else "200mbit")
        round_id = run_id()
        for spec in specs:
            r = run_transfer(spec, config, round_id)
            if peak_rate:
                r = at_hour(r, 13 if peak else 3)
            runner.journal.append(r)
        print(f"  round {i + 1}: {'peak' if peak else 'off-peak' if peak_rate else 'steady'}", flush=True)


def trials(config: Config, runner: RoundRunner, n: int, peak_rate: str | None, out: list[dict[str, Any]]) -> None:
    runs = runs_to(Journal(config.journal.path).read(), "lab")
    site = lab.site(config)
    for i in range(n):
        dataset = MOVES[i % 2]
        size = config.datasets[dataset].size
        peak = bool(peak_rate) and (i // 2) % 2 == 0
        hour = 13 if peak else 3 if peak_rate else datetime.now(UTC).hour
        if peak_rate:
            reshape(config, peak_rate if peak else "200mbit")
        the_plan = plan(runs, "lab", size, 1, UTC, None, 0.9)
        best = the_plan.ranked[0][0]
        p = predict(best, size, 1, hour, 0.9)
        if best.setting:
            grid = {s.label: s for s in settings(config, "streams")}
            spec = spec_for(config, "streams", grid[best.setting], dataset, site)
        else:
            spec = next(s for s in plan_round(config, site) if s.protocol == best.protocol)
            spec = dataclasses.replace(spec, dataset=dataset, dataset_config=config.datasets[dataset])
        r = run_transfer(spec, config, run_id())
        inside = p.lower <= r.duration_seconds <= p.upper
        error = abs(r.duration_seconds - p.seconds) / r.duration_seconds
        row = {
            "phase": "peak/off-peak" if peak_rate else "steady",
            "hour": hour,
            "move": dataset,
            "option": best.option,
            "predicted": p.seconds,
            "lower": p.lower,
            "upper": p.upper,
            "actual": r.duration_seconds,
            "outcome": r.outcome,
            "inside": inside,
            "error": error,
        }
        out.append(row)
        print(
            f"  trial {i + 1}: {dataset} {best.option} at {hour:02d}h: predicted {duration_text(p.seconds)} "
            f"({duration_text(p.lower)}-{duration_text(p.upper)}), actual {r.duration_seconds:.1f}s "
            f"{r.outcome}, {'inside' if inside else 'OUTSIDE'}, error {error:.1%}",
            flush=True,
        )


def phase(name: str, tmp: Path, rounds: int, n: int, peak_rate: str | None, out: list[dict[str, Any]]) -> None:
    config = make_config(name, tmp, "200mbit")
    print(f"{name}: lab up", flush=True)
    lab.up(config)
    try:
        runner = RoundRunner(config, ExporterState(), lab=lab.site)
        run_rounds(config, runner, rounds, peak_rate)
        if not peak_rate:
            SweepRunner(runner, progress=sys.stdout).run("streams", wait=0)
        trials(config, runner, n, peak_rate, out)
    finally:
        lab.down(config)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--peak-rate", default="120mbit")
    ap.add_argument("--phase", choices=["steady", "peak", "both", "year"], default="both")
    ap.add_argument("--results", type=int, default=1_000_000, help="--phase year: results journaled")
    ap.add_argument("--before-path", help="--phase year: PYTHONPATH of the code to compare with")
    ap.add_argument("--repeat", type=int, default=3, help="--phase year: runs of each command")
    args = ap.parse_args(argv)
    if args.phase == "year":
        return year(args.results, args.before_path, args.repeat)
    rows: list[dict[str, Any]] = []
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-moveplan-", dir="/var/tmp") as tmp:
        Path(tmp).chmod(0o755)  # the lab's servers run as other users
        if args.phase in ("steady", "both"):
            phase("bbi28s", Path(tmp) / "steady", args.rounds, args.trials, None, rows)
            shutil.rmtree(Path(tmp) / "steady", ignore_errors=True)
        if args.phase in ("peak", "both"):
            phase("bbi28k", Path(tmp) / "peak", args.rounds, args.trials, args.peak_rate, rows)
    print("\n| phase | move | start hour | option | predicted | 90% interval | actual | inside | error |")
    print("| --- | --- | ---: | --- | ---: | --- | ---: | --- | ---: |")
    for r in rows:
        print(
            f"| {r['phase']} | {r['move']} | {r['hour']:02d} | {r['option']} | {r['predicted']:.1f} s | "
            f"{r['lower']:.1f}-{r['upper']:.1f} s | {r['actual']:.1f} s | {'yes' if r['inside'] else 'no'} | "
            f"{r['error']:.1%} |"
        )
    for ph in sorted({r["phase"] for r in rows}):
        part = [r for r in rows if r["phase"] == ph]
        inside = sum(r["inside"] for r in part)
        median = statistics.median(r["error"] for r in part)
        print(f"{ph}: {inside} of {len(part)} inside the 90% interval; median error {median:.1%}")
    print(f"({time.monotonic() - began:.0f} s)")
    return 0


def _timed(argv: list[str], pythonpath: str) -> tuple[float, float, int]:
    """Wall and CPU seconds (user + system) of one command in a fresh process, its exit code."""
    import os
    import resource
    import subprocess

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(argv, env={**os.environ, "PYTHONPATH": pythonpath}, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def year(results: int, before_path: str | None, repeat: int) -> int:
    """plan-move and advise on a year of history (phase 3)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.bench_journal import DATASETS, PROTOCOLS, REMOTES, write_journal
    from tests.support.mesh import write_mesh_config

    from bigbinf.journal import checkpoint

    own = str(Path(__file__).resolve().parents[1] / "exporter")
    ways = [("before", before_path)] if before_path else []
    ways.append(("after", own))
    with tempfile.TemporaryDirectory(prefix="bench-moveplan-year-") as tmp:
        directory = Path(tmp)
        config = write_mesh_config(directory, REMOTES, PROTOCOLS, DATASETS)
        journal_path = directory / "journal.jsonl"
        write_journal(journal_path, results)
        journal = Journal(journal_path)
        journal.rotate_now()  # day segments, as an exporter keeps them
        checkpoint.of(journal)  # ... and its checkpoint, as it saves it
        # The same journal configured with one protocol more, never run (newly configured,
        # or its tool never installed): advise must not read the whole journal for it.
        (directory / "more").mkdir()
        more = write_mesh_config(directory / "more", REMOTES, PROTOCOLS + 1, DATASETS)
        more.write_text(more.read_text().replace(str(directory / "more" / "journal.jsonl"), str(journal_path)))
        commands = {
            "plan-move": (config, ["plan-move", "--remote", "site00", "--size", "40TiB"]),
            "advise": (config, ["advise", "--remote", "site00"]),
            "advise, a protocol never run": (more, ["advise", "--remote", "site00"]),
        }
        print("| command | code | wall (s) | CPU (s) | exit |")
        print("| --- | --- | ---: | ---: | ---: |")
        for name, (config_file, tail) in commands.items():
            for way, path in ways:
                argv = [sys.executable, "-m", "bigbinf", "--config.file", str(config_file), *tail]
                times = [_timed(argv, path or own) for _ in range(repeat)]
                wall = statistics.median(t[0] for t in times)
                cpu = statistics.median(t[1] for t in times)
                print(f"| {name} | {way} | {wall:.2f} | {cpu:.2f} | {times[0][2]} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
