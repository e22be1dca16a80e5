"""Two mesh sites' exporters as processes, the way users run them (`bigbinf-exporter
--mesh.file M --site S`), on this host's loopback: the issue's round that does not fit,
and an exporter killed and started again.

The mesh is the issue's (a -> b with a budget of 45 s, b -> a with 20 s, rounds of a
minute), scaled down to rounds of 4 s: a -> b in [0, 2.5 s], b -> a in [2.9 s, 4.1 s],
which with the 0.4 s guard ends 0.5 s after the next round's start.  Each test's command
(Python, sleeping, then writing the file: a real transfer's run, journal and publish,
without a network) lasts most of its slot.  Truths:

* the journals: no two transfers overlap (every test shares both sites); b's straddling
  test is never run, and b counts each of its slots missed, round_does_not_fit;
* the plan `mesh plan --format json` prints: every slot of a from its first journaled
  slot to the last one journaled before the end is either journaled or counted missed
  (all reasons, both processes), and the slots between a's kill and its second start
  are counted exporter_down by the second process.

Lean on purpose (two sites, 1 KiB files, no capture, no lab); the long proof on real
links is tests/lab/test_mesh_proof.py.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from bigbinf.journal.store import Journal
from bigbinf.result import Result

from ..support.exporter import ROOT, ExporterProcess
from ..support.prometheus import PrometheusServer, free_port

PERIOD = 4.0
# Sleeps, then writes the file (checked by size): `{local_path}` is the transfer's destination.
SLEEPER = "import sys, time; time.sleep(float(sys.argv[1])); open(sys.argv[2], 'wb').truncate(1024)"


def write_mesh(tmp: Path) -> Path:
    raw: dict[str, Any] = {
        "name": "slots",
        "sites": {
            site: {
                "address": f"127.0.0.{i + 1}",
                "data_dir": str(tmp / "data"),
                "probe": {"enabled": False},
                "exporter": {"listen": f"127.0.0.1:{free_port()}", "journal": str(tmp / site / "journal.jsonl")},
            }
            for i, site in enumerate(("a", "b"))
        },
        "datasets": {"f1k": {"file": "f1k.bin", "size": "1KiB"}},
        "protocols": {
            # each lasts most of its slot (a Python start included)
            "ab": {"command": [sys.executable, "-c", SLEEPER, "1.0", "{local_path}"]},
            "ba": {"command": [sys.executable, "-c", SLEEPER, "0.7", "{local_path}"]},
        },
        "tests": [
            {"protocols": ["ab"], "datasets": ["f1k"], "pairs": [["a", "b"]], "budget": "2.5s"},
            {"protocols": ["ba"], "datasets": ["f1k"], "pairs": [["b", "a"]], "budget": "1.2s"},
        ],
        "schedule": {"interval": f"{PERIOD:g}s", "guard": "400ms"},
        "transfer": {"workdir": str(tmp / "work"), "timeout": "30s"},
        "capture": {"enabled": False},
    }
    path = tmp / "mesh.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def exporter(mesh: Path, site: str, tmp: Path) -> ExporterProcess:
    listen = yaml.safe_load(mesh.read_text())["sites"][site]["exporter"]["listen"]
    process = ExporterProcess(mesh, tmp / f"{site}.log")
    process.address = listen
    process.argv = [sys.executable, "-m", "bigbinf", "--mesh.file", str(mesh), "--site", site]
    process.argv += ["--web.listen-address", listen]
    return process


def journal(tmp: Path, site: str) -> list[Result]:
    path = tmp / site / "journal.jsonl"
    return list(Journal(path).read()) if path.exists() else []


def missed(text: str) -> dict[str, float]:
    """bigbinf_mesh_slots_missed_total by reason, over the site's series."""
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("bigbinf_mesh_slots_missed_total{"):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            counts[reason] = counts.get(reason, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def gauge(text: str, name: str) -> float:
    (value,) = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    return value


def planned_starts(mesh: Path, site: str, since: float, until: float) -> list[float]:
    """The site's slot starts in [since, until], as `mesh plan --format json` prints them."""
    starts: list[float] = []
    day = dt.datetime.fromtimestamp(since, dt.UTC).date()
    while day <= dt.datetime.fromtimestamp(until, dt.UTC).date():
        argv = [sys.executable, "-m", "bigbinf", "mesh", "plan", "--mesh.file", str(mesh), "--site", site]
        proc = subprocess.run(
            [*argv, "--format", "json", "--date", day.isoformat()], capture_output=True, text=True, cwd=ROOT
        )
        assert proc.returncode == 3, proc.stderr  # the rounds do not fit: b's test straddles the next round
        for round_ in json.loads(proc.stdout)["rounds"]:
            starts += [s["start"] for s in round_["slots"] if s["src"] == site and since <= s["start"] <= until]
        day += dt.timedelta(days=1)
    return starts


def round_start_at(mesh: Path, when: float) -> float | None:
    """The start of the mesh's round in progress at `when` (None between rounds), as
    `mesh plan --format json` prints the rounds."""
    day = dt.datetime.fromtimestamp(when, dt.UTC).date()
    argv = [sys.executable, "-m", "bigbinf", "mesh", "plan", "--mesh.file", str(mesh), "--format", "json"]
    proc = subprocess.run([*argv, "--date", day.isoformat()], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 3, proc.stderr
    inside = [r["start"] for r in json.loads(proc.stdout)["rounds"] if r["start"] <= when < r["end"]]
    return max(inside, default=None)


def wait_for_results(tmp: Path, site: str, count: int, timeout: float = 60) -> list[Result]:
    return PrometheusServer.wait_for(
        lambda: (lambda r: r if len(r) >= count else None)(journal(tmp, site)),
        timeout=timeout,
        interval=0.1,
        what=f"{count} results of {site}",
    )


def test_no_overlap_straddling_slots_skipped_and_a_killed_exporters_slots_counted(tmp_path: Path) -> None:
    mesh = write_mesh(tmp_path)
    note = tmp_path / "a" / "journal.slots.json"  # where a's exporter notes the slots it handled (docs/mesh.md)
    with exporter(mesh, "b", tmp_path) as b:
        a1 = exporter(mesh, "a", tmp_path)
        with a1:
            # Its first note, written at its start: the slots from then on are its to run or count.
            started = PrometheusServer.wait_for(
                lambda: json.loads(note.read_text())["handled_through"] if note.exists() else None,
                timeout=30,
                interval=0.02,
                what="a's first note",
            )
            wait_for_results(tmp_path, "a", 1)
            before_kill = missed(a1.metrics())
            assert a1.proc is not None
            os.kill(a1.proc.pid, signal.SIGKILL)  # a crash: nothing of the exporter's stop runs
            a1.proc.wait(10)
        last_before = max(r.slot_start_timestamp or 0.0 for r in journal(tmp_path, "a"))
        time.sleep(2.5 * PERIOD)  # two rounds and more without a's exporter
        launched = time.time()
        with exporter(mesh, "a", tmp_path) as a2:
            results = wait_for_results(tmp_path, "a", len(journal(tmp_path, "a")) + 2)
            after = missed(a2.metrics())
        b_text = b.metrics()

    # b's test never runs (it would end, with the guard, after the next round's start), each
    # of its slots counted; every test shares both sites: no two transfers overlap.
    assert journal(tmp_path, "b") == []
    assert missed(b_text)["round_does_not_fit"] >= 3 and gauge(b_text, "bigbinf_mesh_round_fits") == 0.0
    spans = sorted((r.start_timestamp, r.start_timestamp + r.duration_seconds) for r in results)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans)), spans
    assert all(r.outcome == "ok" and r.slot_start_timestamp is not None for r in results)
    assert all(r.slot_end_timestamp == pytest.approx(r.slot_start_timestamp + 2.5) for r in results)  # type: ignore[operator]

    # The killed exporter's slots: from the plan, every slot of a after the last one it
    # journaled (the one it ran when killed included) and before the second process was
    # launched counts exporter_down in the second.
    # The first process counted exporter_down only the slots of a in the round in progress
    # at its first start that had begun before it (issue 36: neither run nor counted before).
    in_progress = round_start_at(mesh, started)
    began = planned_starts(mesh, "a", in_progress, started) if in_progress is not None else []
    assert before_kill.get("exporter_down", 0.0) == len(began), (before_kill, began)
    down = planned_starts(mesh, "a", last_before + 0.001, launched)
    assert len(down) >= 2 and after["exporter_down"] >= len(down)
    # Every slot of a from the first exporter's start to the last slot journaled is journaled
    # or counted missed (by the process before the kill, or by the one after it), once.
    starts = [r.slot_start_timestamp for r in results if r.slot_start_timestamp is not None]
    planned = planned_starts(mesh, "a", started, max(starts)) + [t for t in began if t < started]
    assert set(starts) <= set(planned) and len(set(starts)) == len(starts)
    counted = len(starts) + sum(before_kill.values()) + sum(after.values())
    assert counted == len(planned), (starts, before_kill, after, planned)
