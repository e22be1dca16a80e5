"""A year of history (issue 37): the exporter's start, `once`'s history cost and the RSS
with 10 k, 100 k and 1 M results journaled, before (main's code: one file read whole,
five times) and after (day segments and the checkpoint beside them).

Usage:
    .venv/bin/python benchmarks/bench_journal.py                       # after only, 10k,100k,1M
    .venv/bin/python benchmarks/bench_journal.py --upgrade 1000000 --cache /var/tmp/bigbinf-bench-X \\
        [--upgrade-before /work/main/exporter] [--keep]
    .venv/bin/python benchmarks/bench_journal.py --before /work/main/.venv/bin/python
    .venv/bin/python benchmarks/bench_journal.py --sizes 10000 --before-limit 120

The journal: 120 series (tests/support/mesh.py's configuration, 6 remotes x 5 protocols
x 2 datasets x 2 directions), one result an hour each (1 M results: 347 days), written
as JSON lines directly from per-series templates (mesh_result's lines, ~1.4 KB) so a
million take seconds; 1 in 20 failed.  Per size and way:

* start: from exec of `bigbinf-exporter` to its first /metrics answer, the series
  restored then (bigbinf_last_transfer_start_timestamp_seconds of each) and the exporter's
  VmRSS / VmHWM then; and on to bigbinf_journal_loading 0 with the series restored then.
  A start with no regressions' journal yet (the first after the upgrade, as here) and a
  long first replay through the regression state (service/restore.py `deferred`) answers
  /metrics first with nothing restored and restores all of it in the background, before
  any round: what the design promises is every series restored at loading 0;
* once's history: what `once` spends before its round (RoundRunner + restore), in a
  fresh process, with its VmHWM, after that start's background restore has written the
  regressions' journal (a later `once`: it restores the states from that journal and
  judges again what a restart judges); a `once` on a journal no exporter has judged yet
  replays the first start's runs itself, a one-off not measured here; advise's history:
  what `advise` reads of the journals (advice.history; before: both journals whole, as
  main's advise did), in the same process.

"after" first turns the old single file into what an upgraded exporter keeps (`split`:
journal.rotate_now, day segments; `checkpoint`: rebuilt from the whole journal): the
one-time cost of the upgrade, timed too.  "before" runs the same steps with another
interpreter (main's venv: its code, read-only) on the single file; a start that has not
answered within --before-limit seconds is reported as "> limit".

The pass line (the issue's goals): at 1 M, start (to the first /metrics) <= 5 s, VmHWM
<= 200 MB, once's history <= 1 s, advise's history <= 1 s, every series restored at
loading 0 (at the first /metrics where the start restored before it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.support.mesh: the same mesh the tests use

from tests.support.mesh import mesh_keys, mesh_result, write_mesh_config  # noqa: E402

REMOTES, PROTOCOLS, DATASETS = 6, 5, 2
SERIES = REMOTES * PROTOCOLS * DATASETS * 2
HOUR = 3600.0
GOAL_START_S, GOAL_RSS_MB, GOAL_ONCE_S = 5.0, 200.0, 1.0

ONCE = r"""
import resource, sys, time
t0 = time.perf_counter()
from bigbinf.config import load_config
from bigbinf import lab
from bigbinf.service.collector import ExporterState
from bigbinf.service.restore import restore
from bigbinf.service.rounds import RoundRunner, series_of
config = load_config(sys.argv[1])
t1 = time.perf_counter()
runner = RoundRunner(config, ExporterState(), lab=lab.site)
restore(runner.state, runner, config, lab.site)
t2 = time.perf_counter()
from bigbinf.history import advice
from bigbinf.journal.store import BaselineJournal, Journal, baseline_path
t3 = time.perf_counter()
if hasattr(advice, "history"):
    advice.history(config, set(config.remotes), set(series_of(config)))
else:  # main's advise: both journals read whole
    list(BaselineJournal(baseline_path(config.journal.path)).read())
    [r for r in Journal(config.journal.path).read() if r.source == "exporter"]
t4 = time.perf_counter()
print(t2 - t1, len(runner.state.latest), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, t4 - t3)
"""


def write_journal(path: Path, n: int, keys: list[Any] | None = None, every: float = HOUR) -> None:
    """n results, SERIES series (or `keys`) `every` seconds apart each, ending now: written
    from templates."""
    rng = random.Random(37)
    keys = keys or mesh_keys(REMOTES, PROTOCOLS, DATASETS)
    marker = 1234567890.5
    templates = []
    for key in keys:
        variants = []
        for i in range(8):
            outcome = "failed" if i == 0 else "ok"
            record = mesh_result(key, marker, rng, outcome).to_json()
            record.pop("start_utc", None)
            variants.append(json.dumps(record, sort_keys=True, separators=(",", ":")))
        templates.append(variants)
    rounds = -(-n // len(keys))
    first = time.time() - rounds * every
    written = 0
    with open(path, "w") as f:
        for r in range(rounds):
            t0 = first + r * every
            lines = []
            for k, variants in enumerate(templates):
                if written >= n:
                    break
                variant = variants[0] if (r + k) % 20 == 0 else variants[1 + (r * 7 + k) % 7]
                lines.append(variant.replace(repr(marker), repr(t0 + k)) + "\n")
                written += 1
            f.write("".join(lines))


def _status(pid: int) -> dict[str, float]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out


# Where the exporter trees' bytecode is kept for the starts measured here: an installed
# exporter (pip install, the Dockerfile) imports compiled modules, while a shell with
# PYTHONDONTWRITEBYTECODE=1 (this project's sessions) would compile all of bigbinf at each
# start, some 0.4 CPU-s a host never spends.
PYCACHE = Path(tempfile.gettempdir()) / "bigbinf-bench-pycache"


def deployed_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) as an installed exporter runs: its bigbinf tree
    (PYTHONPATH, or this checkout's) compiled once into PYCACHE, and bytecode read."""
    out = {k: v for k, v in (os.environ if env is None else env).items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    tree = out.get("PYTHONPATH", "").split(os.pathsep)[0] or str(ROOT / "exporter")
    subprocess.run([sys.executable, "-m", "compileall", "-q", tree], env=out, check=True, stdout=subprocess.DEVNULL)
    return out


def start(
    python: str, config: Path, port: int, limit: float, loaded_limit: float = 0.0, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """From exec to the first /metrics answer; with `loaded_limit`, then on to the scrape
    that says the journal is read (bigbinf_journal_loading 0: a start that reads it after
    /metrics is up, issue 44), each with the series restored then and the VmHWM."""
    run_env = deployed_env(env)  # compiled before the clock starts, as an install compiles
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [python, "-m", "bigbinf", "--config.file", str(config), "--web.listen-address", f"127.0.0.1:{port}"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=run_env,
    )
    cpu0 = _cpu(proc.pid)
    try:
        body = _scrape(proc, port, t0, limit)
        if body is None:
            return {"start_s": None, "note": f"> {limit:.0f} s"}
        elapsed = time.perf_counter() - t0
        out: dict[str, Any] = {"start_s": elapsed, "restored": _restored(body), "loading": _loading(body)}
        out.update(_status(proc.pid))
        out["start_cpu_s"] = _cpu(proc.pid) - cpu0
        if loaded_limit and out["loading"]:
            while _loading(body) and time.perf_counter() - t0 < loaded_limit:
                time.sleep(1.0)
                body = _scrape(proc, port, t0, loaded_limit) or body
            out["loaded_s"] = time.perf_counter() - t0 if not _loading(body) else None
            out["loaded_restored"] = _restored(body)
            out["loaded_VmHWM"] = _status(proc.pid)["VmHWM"]
            out["loaded_cpu_s"] = _cpu(proc.pid) - cpu0
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _cpu(pid: int) -> float:
    """The process's user + system CPU seconds so far (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _scrape(proc: subprocess.Popen[bytes], port: int, t0: float, limit: float) -> str | None:
    while time.perf_counter() - t0 <= limit:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=limit) as r:
                return str(r.read().decode())
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError("the exporter exited") from None
            time.sleep(0.02)
    return None


def _restored(body: str) -> int:
    return sum(
        1
        for line in body.splitlines()
        if line.startswith("bigbinf_last_transfer_start_timestamp_seconds{") and not line.endswith(" NaN")
    )


def _loading(body: str) -> bool:
    return any(line.startswith("bigbinf_journal_loading ") and not line.endswith(" 0.0") for line in body.splitlines())


def once(python: str, config: Path, limit: float) -> dict[str, Any]:
    try:
        out = subprocess.run(
            [python, "-c", ONCE, str(config)], cwd=ROOT, capture_output=True, text=True, timeout=limit, check=True
        ).stdout.split()
    except subprocess.TimeoutExpired:
        return {"once_s": None, "advise_s": None}
    return {
        "once_s": float(out[0]),
        "once_series": int(out[1]),
        "once_hwm_mb": float(out[2]),
        "advise_s": float(out[3]),
    }


def upgrade(python: str, journal: Path) -> dict[str, float]:
    """What the first start after the upgrade does once: split the old file, build the checkpoint."""
    code = (
        "import sys, time\nfrom bigbinf.journal import checkpoint\n"
        "from bigbinf.journal.store import Journal, BaselineJournal\n"
        "t = time.perf_counter(); j = Journal(sys.argv[1]); j.rotate_now(); s = time.perf_counter() - t\n"
        "t = time.perf_counter(); checkpoint.of(j); c = time.perf_counter() - t\nprint(s, c)\n"
    )
    out = subprocess.run([python, "-c", code, str(journal)], cwd=ROOT, capture_output=True, text=True, check=True)
    split, built = map(float, out.stdout.split())
    return {"split_s": split, "checkpoint_s": built}


def upgrade_start(n: int, cache: Path, limit: float, before: str | None = None, keep: bool = False) -> dict[str, Any]:
    """The first `serve` after the upgrade on an old single file of `n` results (issue 44:
    /metrics first, then the split, the checkpoint's rebuild and the first replay in the
    background), then a later start: each from exec to the first /metrics (the first also
    on to bigbinf_journal_loading 0), with the series restored and the exporter's VmHWM
    then.  `before`: another exporter tree (PYTHONPATH, e.g. main's) whose later start on
    the same files is measured beside.  The single file is generated once into `cache`
    (a million lines: 1.6 GB) and copied; `keep` leaves the upgraded directory in `cache`
    (for bench_later_start.py)."""
    cache.mkdir(parents=True, exist_ok=True)
    source = cache / f"journal-{n}.jsonl"
    if not source.exists():
        write_journal(source.with_suffix(".tmp"), n)
        source.with_suffix(".tmp").rename(source)
    with contextlib.ExitStack() as stack:
        if keep:
            directory = Path(tempfile.mkdtemp(prefix="bench-upgrade-", dir=cache))
        else:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-upgrade-", dir=cache)))
        config = write_mesh_config(directory, REMOTES, PROTOCOLS, DATASETS)
        shutil.copyfile(source, directory / "journal.jsonl")
        first = start(sys.executable, config, 19_902, limit, loaded_limit=limit)
        print(json.dumps({"first": first}), flush=True)
        later = [start(sys.executable, config, 19_903, limit) for _ in range(3)]
        print(json.dumps({"later": later}), flush=True)
        earlier = []
        if before:
            env = {**os.environ, "PYTHONPATH": before}
            earlier = [start(sys.executable, config, 19_904, limit, env=env) for _ in range(3)]
            print(json.dumps({"later_before": earlier}), flush=True)
        sealed = list(directory.glob("journal.*.jsonl.gz"))
        parts, sealed_mb = len(sealed), sum(p.stat().st_size for p in sealed) / 2**20
    return {
        "n": n,
        "journal_mb": source.stat().st_size / 2**20,
        "first": first,
        "later": later,
        "later_before": earlier,
        "parts": parts,
        "sealed_mb": sealed_mb,
        "directory": str(directory) if keep else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--upgrade",
        metavar="SIZES",
        help="only the first start after an upgrade to a single file of SIZES results (and a later start)",
    )
    parser.add_argument("--cache", type=Path, help="where --upgrade keeps the generated single files (reused)")
    parser.add_argument("--upgrade-limit", type=float, default=3600.0, help="seconds an upgrade start may take")
    parser.add_argument(
        "--upgrade-before", metavar="PYTHONPATH", help="also the later start with this exporter tree (e.g. main's)"
    )
    parser.add_argument("--keep", action="store_true", help="--upgrade leaves the upgraded directory in --cache")
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--before", help="the interpreter of main's venv, e.g. /work/main/.venv/bin/python")
    parser.add_argument("--before-limit", type=float, default=120.0, help="seconds a before start may take")
    parser.add_argument("--before-sizes", default="10000,100000", help="sizes measured before (1 M takes long)")
    parser.add_argument(
        "--loaded-limit", type=float, default=900.0, help="seconds an after start may take to bigbinf_journal_loading 0"
    )
    args = parser.parse_args()
    if args.upgrade:
        cache = args.cache or Path(tempfile.mkdtemp(prefix="bigbinf-bench-", dir="/var/tmp"))
        for n in (int(x) for x in args.upgrade.split(",")):
            print(json.dumps(upgrade_start(n, cache, args.upgrade_limit, args.upgrade_before, args.keep)), flush=True)
        return
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="bench-journal-") as tmp:
            directory = Path(tmp)
            config = write_mesh_config(directory, REMOTES, PROTOCOLS, DATASETS)
            journal = directory / "journal.jsonl"
            t = time.perf_counter()
            write_journal(journal, n)
            generated = time.perf_counter() - t
            size_mb = journal.stat().st_size / 2**20
            if args.before and str(n) in args.before_sizes.split(","):
                before = {**start(args.before, config, 19_900, args.before_limit)}
                before.update(once(args.before, config, args.before_limit))
                rows.append({"n": n, "way": "before", "journal_mb": size_mb, **before})
                print(json.dumps(rows[-1]), flush=True)
            after: dict[str, Any] = {"generated_s": generated, **upgrade(sys.executable, journal)}
            after["disk_mb"] = sum(p.stat().st_size for p in directory.iterdir() if p.is_file()) / 2**20
            # On to loading 0: its background restore writes the regressions' journal `once` reads.
            after.update(start(sys.executable, config, 19_901, 120.0, loaded_limit=args.loaded_limit))
            after.update(once(sys.executable, config, 120.0))
            rows.append({"n": n, "way": "after", "journal_mb": size_mb, **after})
            print(json.dumps(rows[-1]), flush=True)
            shutil.rmtree(directory, ignore_errors=True)
    print()
    print(
        "| results | way | journal (MB) | start to first /metrics (s) | series restored | VmHWM (MB) "
        "| to loading 0 (s) | series restored | once's history (s) | advise's history (s) |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        start_s = f"{row['start_s']:.2f}" if row.get("start_s") is not None else row.get("note", "n/a")
        loaded_s = f"{row['loaded_s']:.2f}" if row.get("loaded_s") is not None else "n/a"
        once_s = f"{row['once_s']:.2f}" if row.get("once_s") is not None else "n/a"
        advise_s = f"{row['advise_s']:.2f}" if row.get("advise_s") is not None else "n/a"
        print(
            f"| {row['n']:,} | {row['way']} | {row['journal_mb']:.0f} | {start_s} | {row.get('restored', 'n/a')} "
            f"| {row.get('VmHWM', float('nan')):.0f} | {loaded_s} | {_restored_at_loaded(row)} | {once_s} "
            f"| {advise_s} |"
        )
    big = [r for r in rows if r["way"] == "after" and r["n"] >= 1_000_000]
    for row in big:
        ok = (
            row["start_s"] is not None
            and row["start_s"] <= GOAL_START_S
            and row["VmHWM"] <= GOAL_RSS_MB
            and row["once_s"] <= GOAL_ONCE_S
            and row["advise_s"] <= GOAL_ONCE_S
            and _restored_at_loaded(row) == SERIES
        )
        print(
            f"\npass line at {row['n']:,}: start {row['start_s']:.2f} s <= {GOAL_START_S}, VmHWM {row['VmHWM']:.0f} MB "
            f"<= {GOAL_RSS_MB:.0f}, once {row['once_s']:.2f} s and advise {row['advise_s']:.2f} s <= {GOAL_ONCE_S}, "
            f"{_restored_at_loaded(row)}/{SERIES} series at loading 0: " + ("PASS" if ok else "FAIL")
        )


def _restored_at_loaded(row: dict[str, Any]) -> Any:
    """The series restored once the journal was read: at loading 0 where the start read
    it after /metrics (`start`'s loaded_restored), else at the first answer."""
    return row.get("loaded_restored", row.get("restored", "n/a"))


if __name__ == "__main__":
    main()
