"""The mesh's slot plan (mesh/plan.py) and `mesh plan|durations|config` (mesh/cli.py):
deterministic, never two slots on one site at once, concurrent where pairs are disjoint,
sized as documented, and honest about a round that does not fit."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import itertools
import json
import os
import random
import subprocess
import sys
import zoneinfo
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from bigbinf.journal.store import Journal
from bigbinf.mesh import cli as mesh_cli
from bigbinf.mesh.config import MeshConfig, MeshError, parse_mesh
from bigbinf.mesh.plan import (
    Durations,
    RoundPlan,
    TestKey,
    dump_durations,
    load_durations,
    mesh_tests,
    next_rounds,
    parse_durations,
    plan_day,
    plan_round,
    round_at,
    round_starts,
    site_busy_seconds,
    slot_length,
    tournament,
    write_durations,
)
from bigbinf.result import Result

ROOT = Path(__file__).resolve().parents[2]
DAY = dt.date(2026, 11, 23)  # a Monday
T0 = dt.datetime(2026, 11, 23, tzinfo=dt.UTC).timestamp()


def raw_mesh(sites: int = 4, **schedule: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "sites": {
            f"s{i:02d}": {"address": f"10.0.0.{i + 1}", "data_dir": "/srv/data", "probe": {"enabled": False}}
            for i in range(sites)
        },
        "datasets": {"f8m": {"file": "f8m.bin", "size": "8MiB"}, "f1g": {"file": "f1g.bin", "size": "1GiB"}},
        "protocols": {"http": {}, "ftp": {}},
        "tests": [{"protocols": ["http"], "datasets": ["f8m"]}],
        "schedule": {"interval": "1h", **schedule},
    }


def mesh_of(raw: dict[str, Any]) -> MeshConfig:
    return parse_mesh(yaml.safe_dump(raw, sort_keys=False), "mesh.yaml")


def key(src: str, dst: str, protocol: str = "http", dataset: str = "f8m", direction: str = "download") -> TestKey:
    return TestKey(src, dst, protocol, dataset, direction)


def twelve_sites() -> MeshConfig:
    raw = raw_mesh(12, guard="3s", repetitions=2)
    raw["tests"] = [
        {"protocols": ["http", "ftp"], "datasets": ["f8m", "f1g"]},
        {"protocols": ["http"], "datasets": ["f8m"], "pairs": [["s00", "s05"], ["s07", "s03"]], "budget": "95s"},
    ]
    for i, site in enumerate(raw["sites"].values()):
        if i % 3:
            site["bandwidth"] = f"{100 * i}mbit"  # some estimated, the rest default or measured
        if i % 4 == 0:
            site["probe"] = {"count": 5, "interval": "0.3s"}
    return mesh_of(raw)


def sparse_mesh(sites: int, shape: str, repetitions: int = 1) -> MeshConfig:
    """The issue's shapes: each site testing its 4 ring neighbours, a star around s00, a
    random half of the ordered pairs (fixed seed), or all pairs; two protocols, probes on
    at every third site (a path's first slot is longer), guard 2 s."""
    raw = raw_mesh(sites, guard="2s", repetitions=repetitions)
    names = list(raw["sites"])
    for i, site in enumerate(raw["sites"].values()):
        site["bandwidth"] = "10gbit"
        if i % 3 == 0:
            site.pop("probe")
    if shape == "ring":
        pairs = [[a, names[(i + d) % sites]] for i, a in enumerate(names) for d in (1, -1, 2, -2)]
    elif shape == "star":
        pairs = [[names[0], b] for b in names[1:]] + [[b, names[0]] for b in names[1:]]
    elif shape == "random":
        rng = random.Random(15)
        pairs = [[a, b] for a in names for b in names if a != b and rng.random() < 0.5]
    else:
        pairs = "all"  # type: ignore[assignment]
    raw["tests"] = [{"protocols": ["http", "ftp"], "datasets": ["f1g"], "pairs": pairs}]
    return mesh_of(raw)


def uneven_durations(mesh: MeshConfig) -> Durations:
    """A measured length per test, 5-120 s (fixed seed), as after some days of running."""
    rng = random.Random(15)
    return Durations({k: [round(rng.uniform(5, 120), 3)] for k in mesh_tests(mesh)})


def some_durations(mesh: MeshConfig) -> Durations:
    return Durations({k: [10 + i % 7, 3.25 * (i % 5)] for i, k in enumerate(mesh_tests(mesh)) if i % 2})


def slot_rows(plan: RoundPlan) -> list[tuple[Any, ...]]:
    return [(s.start, s.end, *vars(s.test).values(), s.repetition, s.source, s.probe) for s in plan.slots]


# ---------------------------------------------------------------- determinism


_SUBPROCESS = """
import json, sys, yaml
from bigbinf.mesh.config import parse_mesh
from bigbinf.mesh.plan import Durations, plan_round, mesh_tests
from tests.unit.test_mesh_plan import twelve_sites, some_durations, slot_rows, T0, sparse_mesh, uneven_durations
mesh = twelve_sites()
plan = plan_round(mesh, T0, T0 + 86400, some_durations(mesh))
ring = sparse_mesh(12, "ring", repetitions=2)
sparse = plan_round(ring, T0, T0 + 86400, uneven_durations(ring))
print(json.dumps({"fingerprint": plan.fingerprint, "slots": slot_rows(plan), "ring": slot_rows(sparse)}))
"""


def test_two_processes_with_different_hash_seeds_and_zones_plan_alike() -> None:
    mesh = twelve_sites()
    plan = plan_round(mesh, T0, T0 + 86400, some_durations(mesh))
    outputs = []
    # The machines' own time zones differ too: the plan must use only schedule.timezone.
    for seed, tz in (("1", "UTC"), ("4242", "Asia/Kolkata")):
        proc = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONHASHSEED": seed, "TZ": tz},
            timeout=120,
            check=True,
        )
        outputs.append(json.loads(proc.stdout))
    assert outputs[0] == outputs[1]
    assert outputs[0]["fingerprint"] == plan.fingerprint
    assert outputs[0]["slots"] == [list(row) for row in slot_rows(plan)]
    # A sparse mesh of uneven slots: packed in time (the list scheduling), alike too.
    ring = sparse_mesh(12, "ring", repetitions=2)
    assert outputs[0]["ring"] == [
        list(row) for row in slot_rows(plan_round(ring, T0, T0 + 86400, uneven_durations(ring)))
    ]


def test_the_fingerprint_changes_with_what_matters() -> None:
    mesh = twelve_sites()
    durations = some_durations(mesh)
    plan = plan_round(mesh, T0, T0 + 86400, durations)
    assert plan_round(mesh, T0, T0 + 86400, durations).fingerprint == plan.fingerprint
    # Not the round's start or end: every round of one mesh and durations file has the same
    # one, so sites agree between rounds too and the series does not change every round.
    assert plan_round(mesh, T0 + 1, T0 + 86400, durations).fingerprint == plan.fingerprint
    assert plan_round(mesh, T0 + 3600, T0 + 7200, durations).fingerprint == plan.fingerprint
    assert plan_round(mesh, T0, T0 + 86400, Durations()).fingerprint != plan.fingerprint
    raw = raw_mesh(12, guard="3s", repetitions=2)
    base = plan_round(mesh_of(raw), T0, T0 + 3600, Durations()).fingerprint
    for schedule in ({"guard": "4s"}, {"headroom": 2}, {"interval": "2h"}, {"timezone": "Europe/Berlin"}):
        changed = mesh_of({**raw, "schedule": {**raw["schedule"], **schedule}})
        assert plan_round(changed, T0, T0 + 3600, Durations()).fingerprint != base, schedule
    assert len(plan.fingerprint) == 12 and int(plan.fingerprint, 16) >= 0


# ---------------------------------------------------------------- packing


def test_no_two_slots_that_share_a_site_overlap_guard_included() -> None:
    mesh = twelve_sites()
    plan = plan_round(mesh, T0, T0 + 86400, some_durations(mesh))
    # 12 sites: 132 ordered pairs x 2 protocols x 2 datasets, twice over (the second
    # tests: entry budgets two of them).
    assert len(plan.slots) == 132 * 4 * 2
    assert {s.source for s in plan.slots} == {"budget", "measured", "estimated", "default"}
    assert [s.start for s in plan.slots] == sorted(s.start for s in plan.slots)
    for site in mesh.sites:
        mine = [s for s in plan.slots if s.involves(site)]
        assert mine, site
        for before, after in itertools.pairwise(mine):
            assert after.start >= before.end + 3.0, (site, before, after)
    assert all(s.start >= T0 and s.end > s.start for s in plan.slots)


def assert_no_overlap(mesh: MeshConfig, plan: RoundPlan) -> None:
    guard = mesh.schedule.guard
    for site in mesh.sites:
        mine = sorted((s for s in plan.slots if s.involves(site)), key=lambda s: s.start)
        for before, after in itertools.pairwise(mine):
            assert after.start >= before.end + guard, (site, before, after)


@pytest.mark.parametrize("sites", [10, 30])
@pytest.mark.parametrize("shape", ["ring", "star", "random", "full"])
def test_meshes_of_every_shape_pack_within_1_2_of_the_lower_bound(sites: int, shape: str) -> None:
    """The issue's shapes (100 sites and the plan's time: benchmarks/mesh_plan.py): the span
    of the round within 1.2 x the busiest site's slots and guards end to end, with equal
    (estimated) and uneven (measured) slots; never two slots of one site at once."""
    mesh = sparse_mesh(sites, shape)
    for durations in (Durations(), uneven_durations(mesh)):
        plan = plan_round(mesh, T0, T0 + 86400, durations)
        assert len(plan.slots) == len(mesh_tests(mesh))
        assert_no_overlap(mesh, plan)
        bound = max(site_busy_seconds(mesh, plan).values())
        assert plan.planned_end - plan.start <= 1.2 * bound, (shape, sites, (plan.planned_end - plan.start) / bound)


def test_repetitions_of_a_sparse_mesh_run_each_test_in_order_and_probe_first() -> None:
    mesh = sparse_mesh(10, "ring", repetitions=3)
    plan = plan_round(mesh, T0, T0 + 86400, uneven_durations(mesh))
    assert_no_overlap(mesh, plan)
    by_test: dict[TestKey, list[Any]] = {}
    for slot in plan.slots:
        by_test.setdefault(slot.test, []).append(slot)
    assert {len(slots) for slots in by_test.values()} == {3}
    for slots in by_test.values():  # in start order, repetition 1, 2, 3
        assert [s.repetition for s in slots] == [0, 1, 2]
    for path in {(t.src, t.dst) for t in by_test}:
        first = min((s for s in plan.slots if (s.test.src, s.test.dst) == path), key=lambda s: s.start)
        probes = [s for s in plan.slots if (s.test.src, s.test.dst) == path and s.probe]
        # The probe is in the path's first slot (its destination probes unless it is a third site).
        assert probes == ([first] if mesh.sites[path[1]].probe.enabled else []), path


def test_disjoint_pairs_run_at_the_same_time() -> None:
    mesh = mesh_of(raw_mesh(4, guard="2s", budget="30s"))
    plan = plan_round(mesh, T0, T0 + 3600, Durations())
    # Tournament round 1 has pairs (s00, s03) and (s01, s02): their first tests both start at once.
    assert [(s.start - T0, s.test.src, s.test.dst) for s in plan.slots[:2]] == [
        (0.0, "s00", "s03"),
        (0.0, "s01", "s02"),
    ]
    # 12 tests, each site in 6 of them: 6 x 30 s + 5 guards, the lower bound, reached.
    assert plan.planned_end - T0 == 6 * 30 + 5 * 2
    assert max(sum(1 for s in plan.slots if s.start == t) for t in {s.start for s in plan.slots}) == 2


def test_tournament_pairs_every_two_sites_once_disjoint_per_round() -> None:
    for n in (2, 5, 6, 13):
        sites = [f"x{i}" for i in range(n)]
        rounds = tournament(sites)
        pairs = [p for r in rounds for p in r]
        assert sorted(pairs) == sorted((a, b) for i, a in enumerate(sites) for b in sites[i + 1 :])
        for r in rounds:
            used = [s for p in r for s in p]
            assert len(used) == len(set(used))


def test_repetitions_are_whole_passes_and_only_the_first_slot_of_a_path_probes() -> None:
    raw = raw_mesh(2, repetitions=3, budget="10s", guard="1s")
    raw["sites"]["s01"]["probe"] = {"count": 10, "interval": "0.5s", "timeout": "2s", "mtu": False}
    raw["tests"][0]["protocols"] = ["http", "ftp"]
    plan = plan_round(mesh_of(raw), T0, T0 + 3600, Durations())
    rows = [(s.start - T0, s.test.src, s.test.protocol, s.repetition, s.probe) for s in plan.slots]
    assert rows[:5] == [
        (0.0, "s00", "http", 0, True),  # s01's probe: 10 x 0.5 s + 2 s = 7 s on top of 10 s
        (18.0, "s00", "ftp", 0, False),
        (29.0, "s01", "http", 0, False),  # s00's probe is disabled
        (40.0, "s01", "ftp", 0, False),
        (51.0, "s00", "http", 1, False),
    ]
    assert [r[3] for r in rows] == [0] * 4 + [1] * 4 + [2] * 4


# ---------------------------------------------------------------- lengths


def test_each_length_source_against_a_hand_computation() -> None:
    raw = raw_mesh(4, budget="7m", headroom=1.5)
    raw["sites"]["s00"]["bandwidth"] = "100mbit"
    raw["sites"]["s01"]["bandwidth"] = "50mbit"
    raw["tests"].append({"protocols": ["ftp"], "datasets": ["f8m"], "budget": "42.5s"})
    mesh = mesh_of(raw)
    durations = Durations({key("s02", "s00"): [30.0, 1.0, 2.0, 3.0, 4.0, 5.5]})
    # budget: the tests: entry's own.
    assert slot_length(mesh, key("s00", "s01", "ftp"), durations) == (42.5, "budget")
    # measured: headroom x the longest of the last 5 (30 s is older) + 2 s of setup.
    assert slot_length(mesh, key("s02", "s00"), durations) == (1.5 * 5.5 + 2, "measured")
    # estimated: 8 MiB at the slower link, 50 Mbit/s = 6.25 MB/s: 1.34217728 s x 1.5 + 2
    # = 4.01326592 s, rounded up to whole milliseconds.
    assert slot_length(mesh, key("s00", "s01"), durations) == (4.014, "estimated")
    # default: schedule.budget, where nothing is known (neither has a bandwidth).
    assert slot_length(mesh, key("s02", "s03"), durations) == (420.0, "default")
    # default too where only one end's rate is known: the other may be far slower.
    assert slot_length(mesh, key("s00", "s02"), durations) == (420.0, "default")


def test_lengths_are_whole_milliseconds_from_the_decimals_written() -> None:
    raw = raw_mesh(2, headroom=1.1)
    raw["sites"]["s01"]["probe"] = {"count": 20, "interval": "0.2s", "timeout": "1s"}
    mesh = mesh_of(raw)
    durations = Durations({key("s00", "s01"): [0.0001]})
    # 1.1 x 0.0001 + 2 = 2.00011 s -> 2.001 (up, never down).
    assert slot_length(mesh, key("s00", "s01"), durations) == (2.001, "measured")
    # Probe: 20 x 0.2 s + 1 s timeout + 1 s MTU search = 6 s exactly (not 6.001 from 0.2's binary value).
    with_probe, _ = slot_length(mesh, key("s00", "s01"), durations, probe=True)
    assert with_probe == 8.001
    plan = plan_round(mesh, T0 + 0.0004, T0 + 60, durations)
    assert plan.start == T0  # round starts are whole milliseconds too
    assert all(round(s.start * 1000) == s.start * 1000 for s in plan.slots)


# ---------------------------------------------------------------- fits and overflow


def two_sites_budget(period: str) -> MeshConfig:
    raw = raw_mesh(2, interval=period, guard="5s")
    raw["tests"][0]["budget"] = "40s"
    return mesh_of(raw)


def test_overflow_against_a_hand_computation() -> None:
    # s00 -> s01 in [0, 40], the guard until 45, s01 -> s00 in [45, 85], the guard until
    # 90 (the next round's first slot shares both sites): 30 s past a 60 s period.
    plan = plan_day(two_sites_budget("60s"), DAY, Durations())[0]
    assert [(s.start - plan.start, s.end - plan.start) for s in plan.slots] == [(0.0, 40.0), (45.0, 85.0)]
    assert (plan.end - plan.start, plan.planned_end - plan.start, plan.guard) == (60.0, 85.0, 5.0)
    assert not plan.fits and plan.overflow_seconds == 30.0 and plan.slack_seconds == -30.0
    fits = plan_day(two_sites_budget("90s"), DAY, Durations())[0]
    assert fits.fits and fits.overflow_seconds == 0.0 and fits.slack_seconds == 0.0


def test_a_round_needs_its_last_guard_gap_too() -> None:
    # Exactly at the boundary: the slots end at 85 s, the period is 85 s, but the next
    # round's first slot (s00 -> s01 again) must not start until the guard has passed.
    plan = plan_day(two_sites_budget("85s"), DAY, Durations())[0]
    assert plan.planned_end - plan.start == 85.0 and plan.end - plan.start == 85.0
    assert not plan.fits and plan.overflow_seconds == 5.0
    assert plan_day(two_sites_budget("89.999s"), DAY, Durations())[0].overflow_seconds == 0.001


def test_a_day_is_packed_once_and_shifted(monkeypatch: pytest.MonkeyPatch) -> None:
    from bigbinf.mesh import plan as P

    mesh = twelve_sites()
    durations = some_durations(mesh)
    calls = []
    real = P._pack

    def counting(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(P, "_pack", counting)
    day = plan_day(mesh, DAY, durations)
    assert len(day) == 24 and calls == [1]
    # Exactly the plans of packing each round from its own start, fingerprints included.
    for plan in day[:3] + day[-2:]:
        alone = plan_round(mesh, plan.start, plan.end, durations)
        assert (alone.fingerprint, alone.slots) == (plan.fingerprint, plan.slots)
    assert len({p.fingerprint for p in day}) == 1  # the start is not in the fingerprint


# ---------------------------------------------------------------- rounds


def test_cron_round_starts_in_a_time_zone() -> None:
    mesh = mesh_of(
        {**raw_mesh(2), "schedule": {"cron": ["0 3 * * *", "30 14 * * 1"], "timezone": "Africa/Johannesburg"}}
    )
    utc = [dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M") for t in round_starts(mesh, DAY)]
    assert utc == ["01:00", "12:30"]  # Monday: both lines; SAST is UTC+2
    assert len(round_starts(mesh, DAY + dt.timedelta(days=1))) == 1  # Tuesday: the daily one
    plans = plan_day(mesh, DAY, Durations())
    assert [p.end for p in plans] == [round_starts(mesh, DAY)[1], round_starts(mesh, DAY + dt.timedelta(days=1))[0]]


BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
SPRING, AUTUMN = dt.date(2026, 3, 29), dt.date(2026, 10, 25)  # 23 and 25 hours in Berlin


def local_rounds(mesh: MeshConfig, day: dt.date) -> list[tuple[str, float]]:
    """Each round's local start (with its UTC offset) and length in hours."""
    return [
        (dt.datetime.fromtimestamp(p.start, BERLIN).strftime("%H:%M%z"), (p.end - p.start) / 3600)
        for p in plan_day(mesh, day, Durations())
    ]


def test_interval_rounds_start_at_local_wall_clock_times_across_dst() -> None:
    six = mesh_of(raw_mesh(2, interval="6h", timezone="Europe/Berlin"))
    # The clock jumps 02:00 -> 03:00: the first round is an hour short, the rest on the hour.
    assert local_rounds(six, SPRING) == [("00:00+0100", 5), ("06:00+0200", 6), ("12:00+0200", 6), ("18:00+0200", 6)]
    # 03:00 -> 02:00: the first round is an hour long; the others still start at 06, 12, 18.
    assert local_rounds(six, AUTUMN) == [("00:00+0200", 7), ("06:00+0100", 6), ("12:00+0100", 6), ("18:00+0100", 6)]
    seven = mesh_of(raw_mesh(2, interval="7h", timezone="Europe/Berlin"))
    # 21:00-24:00 would be a 3 h round: shorter than the interval, merged into the one before.
    assert local_rounds(seven, DAY) == [("00:00+0100", 7), ("07:00+0100", 7), ("14:00+0100", 10)]
    assert local_rounds(seven, SPRING) == [("00:00+0100", 6), ("07:00+0200", 7), ("14:00+0200", 10)]
    assert local_rounds(seven, AUTUMN) == [("00:00+0200", 8), ("07:00+0100", 7), ("14:00+0100", 10)]
    # Every day's rounds end at the next day's first: no gap, no overlap.
    for mesh in (six, seven):
        for day in (SPRING - dt.timedelta(days=1), SPRING, AUTUMN, DAY):
            plans = plan_day(mesh, day, Durations()) + plan_day(mesh, day + dt.timedelta(days=1), Durations())
            assert all(a.end == b.start for a, b in itertools.pairwise(plans))
    # An hourly schedule: 02:00 does not exist in spring (no round); in autumn it is shown
    # twice, and starts one round, the first time, which lasts two hours.
    hourly = mesh_of(raw_mesh(2, interval="1h", timezone="Europe/Berlin"))
    spring = local_rounds(hourly, SPRING)
    assert len(spring) == 23 and spring[1:3] == [("01:00+0100", 1), ("03:00+0200", 1)]
    autumn = local_rounds(hourly, AUTUMN)
    assert len(autumn) == 24 and autumn[2:4] == [("02:00+0200", 2), ("03:00+0100", 1)]
    # round_at and next_rounds agree with the day's plan, inside the repeated hour too.
    repeated = plan_day(hourly, AUTUMN, Durations())[2]
    inside = round_at(hourly, repeated.start + 5400, Durations())  # 02:30 the second time
    assert inside is not None and (inside.start, inside.end) == (repeated.start, repeated.end)
    assert next(next_rounds(hourly, repeated.start + 1, Durations())).start == repeated.end


def test_cron_rounds_on_dst_days_skip_a_missing_time_and_start_once_at_a_repeated_one() -> None:
    mesh = mesh_of({**raw_mesh(2), "schedule": {"cron": ["30 2 * * *", "0 */6 * * *"], "timezone": "Europe/Berlin"}})
    # 02:30 does not exist on the spring day: no round then (not 03:30, nor 01:30 UTC).
    assert local_rounds(mesh, SPRING) == [
        ("00:00+0100", 5),
        ("06:00+0200", 6),
        ("12:00+0200", 6),
        ("18:00+0200", 6),
    ]
    # 02:30 is shown twice on the autumn day: one round, at the first.
    assert local_rounds(mesh, AUTUMN) == [
        ("00:00+0200", 2.5),
        ("02:30+0200", 4.5),
        ("06:00+0100", 6),
        ("12:00+0100", 6),
        ("18:00+0100", 6),
    ]
    second = dt.datetime(2026, 10, 25, 2, 45, tzinfo=BERLIN, fold=1).timestamp()  # 02:45, the second time
    plan = round_at(mesh, second, Durations())
    assert plan is not None and dt.datetime.fromtimestamp(plan.start, BERLIN).strftime("%H:%M%z") == "02:30+0200"


def test_a_late_slot_may_start_while_its_typical_length_is_left() -> None:
    raw = raw_mesh(2, headroom=1.6, guard="1s")
    raw["tests"][0]["budget"] = "40s"
    plan = plan_round(mesh_of(raw), T0, T0 + 3600, Durations())
    assert [(s.length, s.typical) for s in plan.slots] == [(40.0, 25.0), (40.0, 25.0)]


def test_round_at_and_next_rounds() -> None:
    mesh = mesh_of(raw_mesh(2, interval="10m"))
    plan = round_at(mesh, T0 + 1234.5, Durations())
    assert plan is not None and (plan.start, plan.end) == (T0 + 1200, T0 + 1800)
    assert round_at(mesh, T0 + 1200, Durations()) == plan  # a start belongs to its own round
    rounds = next_rounds(mesh, T0 + 1200.001, Durations())
    assert [(next(rounds).start - T0) for _ in range(3)] == [1800, 2400, 3000]
    cron = mesh_of({**raw_mesh(2), "schedule": {"cron": ["15 4 * * 0"]}})  # Sundays 04:15
    weekly = round_at(cron, T0, Durations())  # Monday 00:00: in the round of the day before
    assert weekly is not None and weekly.start == T0 - 86400 + 4 * 3600 + 900 and weekly.end == weekly.start + 7 * 86400


# ---------------------------------------------------------------- the durations file


def result(site: str, remote: str, start: float, duration: float, **kw: Any) -> Result:
    """A result as a mesh exporter's slot journals it (slot fields set)."""
    outcome = kw.pop("outcome", "ok")
    kw.setdefault("slot_start_timestamp", start)
    kw.setdefault("slot_end_timestamp", start + 60)
    return Result("http", remote, "f8m", "download", start, outcome, duration_seconds=duration, site=site, **kw)


def test_durations_from_journals_round_trip(tmp_path: Path) -> None:
    raw = raw_mesh(3)
    raw["sites"]["s02"]["exporter"] = {"journal": str(tmp_path / "s02.jsonl")}
    mesh = mesh_of(raw)
    a, b, c = Journal(tmp_path / "a.jsonl"), Journal(tmp_path / "b.jsonl"), Journal(tmp_path / "s02.jsonl")
    for i in range(7):  # the last 5 kept, oldest first, whatever the order in the journal
        a.append(result("s00", "s01", T0 + 100 - i, 10.0 + i))
    a.append(result("s00", "s01", T0 + 200, 99.0, outcome="failed"))  # not ok: left out
    a.append(result("s00", "s01", T0 + 300, 88.0, source="sweep"))  # not scheduled: left out
    a.append(result("s00", "s09", T0 + 300, 5.0))  # not a mesh test: left out
    a.append(result("s00", "s01", T0 + 400, 77.0, slot_start_timestamp=None))  # `once`, outside any slot: left out
    b.append(result("", "s00", T0, 7.25))  # no site in the result: SITE= says s01
    c.append(result("", "s00", T0, 3.5))  # no site: its path is s02's exporter.journal
    data = write_durations(mesh, [tmp_path / "a.jsonl", ("s01", tmp_path / "b.jsonl"), tmp_path / "s02.jsonl"])
    assert [(t["src"], t["dst"], t["durations"]) for t in data["tests"]] == [
        ("s00", "s01", [14.0, 13.0, 12.0, 11.0, 10.0]),
        ("s01", "s00", [7.25]),
        ("s02", "s00", [3.5]),
    ]
    path = tmp_path / "durations.json"
    path.write_text(dump_durations(data))
    raw["schedule"]["durations"] = str(path)
    durations = load_durations(mesh_of(raw))
    assert durations.typical(key("s00", "s01")) == 14.0 and durations.typical(key("s02", "s00")) == 3.5
    assert durations.typical(key("s01", "s02")) is None
    with pytest.raises(MeshError, match="give --journal SITE=PATH"):
        write_durations(mesh, [tmp_path / "b.jsonl"])


def test_a_bad_durations_file_is_an_error_naming_it(tmp_path: Path) -> None:
    raw = raw_mesh(2)
    path = tmp_path / "d.json"
    raw["schedule"]["durations"] = str(path)
    mesh = mesh_of(raw)
    with pytest.raises(MeshError) as missing:
        load_durations(mesh)
    assert missing.value.render().startswith(f"{path}: cannot read the durations file")
    assert "mesh durations" in missing.value.render()
    path.write_text('{"tests": [\n{"src": "s00"\n]}')
    with pytest.raises(MeshError, match=rf"^{path}: line 3 column 1: "):
        load_durations(mesh)
    row = {"src": "s00", "dst": "s01", "protocol": "http", "dataset": "f8m", "direction": "download"}
    path.write_text(json.dumps({"tests": [{**row, "durations": [1.0], "speed": 2}, {**row, "durations": []}]}))
    with pytest.raises(MeshError) as bad:
        load_durations(mesh)
    assert bad.value.lines() == [
        f"{path}: tests[0].speed: unknown key 'speed'; allowed keys: "
        "src, dst, protocol, dataset, direction, durations, last_utc",
        f"{path}: tests[1].durations: list should have at least 1 item after validation, not 0 (got [])",
    ]
    path.write_text(json.dumps({"tests": [{**row, "durations": [1.0]}, {**row, "durations": [2.0]}]}))
    with pytest.raises(MeshError, match=r"tests\[1\]: s00 -> s01 http/f8m/download is listed twice"):
        load_durations(mesh)
    assert parse_durations("tests: []\n", "y.yaml").tests == {}  # YAML of the same shape reads too


def test_a_relative_durations_path_is_beside_the_mesh_file(tmp_path: Path) -> None:
    from bigbinf.mesh.config import load_mesh

    raw = raw_mesh(2)
    raw["schedule"]["durations"] = "durations.json"
    (tmp_path / "mesh.yaml").write_text(yaml.safe_dump(raw))
    assert load_mesh(tmp_path / "mesh.yaml").schedule.durations == tmp_path / "durations.json"


# ---------------------------------------------------------------- the command


def run_mesh(argv: Sequence[str]) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    mesh_cli.register(parser.add_subparsers())
    args = parser.parse_args(["mesh", *argv])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = args.func(args)
    return code, out.getvalue(), err.getvalue()


def write(tmp_path: Path, raw: dict[str, Any]) -> str:
    path = tmp_path / "mesh.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)


def test_mesh_plan_says_the_day_fits_exit_0(tmp_path: Path) -> None:
    raw = raw_mesh(4, interval="12h", guard="2s", budget="30s")
    code, out, _ = run_mesh(["plan", "--mesh.file", write(tmp_path, raw), "--date", "2026-11-23"])
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "mesh t: 2026-11-23 (UTC), 2 rounds, 4 sites, guard 2 s"
    assert lines[1].startswith("round 00:00:00.000 (next round 12:00:00.000), fingerprint ")
    assert lines[2] == "  00:00:00.000-00:00:30.000  s00 -> s03  http/f8m/download  (default)"
    assert "  fits: 12 slots end at 00:03:10.000, 43008.000 s before the next round after the 2 s guard" in lines
    assert lines[-1] == "the day fits: all 2 rounds end before the next one starts"


def test_mesh_plan_says_by_how_much_a_round_does_not_fit_exit_3(tmp_path: Path) -> None:
    raw = raw_mesh(2, interval="60s", guard="5s")
    raw["tests"][0]["budget"] = "40s"
    path = write(tmp_path, raw)
    code, out, _ = run_mesh(["plan", "--mesh.file", path, "--date", "2026-11-23"])
    assert code == 3
    assert (
        "  does NOT fit: ends, with the 5 s guard, 30.000 s after the next round starts (period 60.000 s, "
        "planned 85.000 s; s00 alone is busy 85.000 s + the 5 s guard, so no order fits); "
        "lower schedule.repetitions" in out
    )
    assert out.splitlines()[-1] == "the day does NOT fit: 1440 of 1440 rounds overrun, by up to 30.000 s"
    code, out, _ = run_mesh(["plan", "--mesh.file", path, "--date", "2026-11-23", "--format", "json"])
    data = json.loads(out)
    assert code == 3 and data["fits"] is False and len(data["rounds"]) == 1440
    assert data["rounds"][0]["overflow_seconds"] == 30.0 and data["rounds"][0]["slots"][1]["src"] == "s01"


def test_mesh_plan_writes_each_round_as_it_is_planned() -> None:
    """Streamed: the first round's text and JSON come out before the second round is
    planned (a day of 96 rounds of 20,000 slots is never held at once; the memory it
    saves is in docs/benchmarks.md), and the pieces make the whole document."""
    mesh = mesh_of(raw_mesh(3, interval="6h", budget="30s"))

    def rounds(drawn: list[RoundPlan]) -> Any:
        for plan in plan_day(mesh, DAY, Durations()):
            drawn.append(plan)
            yield plan

    for render in (mesh_cli.plan_text, mesh_cli.plan_json):
        drawn: list[RoundPlan] = []
        tally = mesh_cli.DayTally()
        pieces = render(mesh, DAY, rounds(drawn), None, tally)
        first = "".join(itertools.islice(pieces, 3))
        assert len(drawn) == 1 and (" -> " in first or '"src"' in first), render
        whole = first + "".join(pieces)
        assert len(drawn) == 4 and tally.rounds == 4 and tally.fits
        if render is mesh_cli.plan_json:
            data = json.loads(whole)
            assert data["fits"] is True and [len(r["slots"]) for r in data["rounds"]] == [6, 6, 6, 6]
            assert data["rounds"][0]["slots"][0] == {
                "start": T0,
                "end": T0 + 30,
                "src": "s01",
                "dst": "s02",
                "protocol": "http",
                "dataset": "f8m",
                "direction": "download",
                "repetition": 0,
                "source": "default",
                "probe": False,
            }


def test_mesh_plan_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """`mesh plan | head`: the reader goes away after a line; no traceback, exit 141 (as a
    process that SIGPIPE ended)."""
    raw = raw_mesh(2, interval="1m", budget="10s")  # 1,440 rounds: far more than a pipe holds
    path = write(tmp_path, raw)
    argv = [sys.executable, "-m", "bigbinf", "mesh", "plan", "--mesh.file", path, "--date", "2026-11-23"]
    for extra in ([], ["--format", "json"]):
        proc = subprocess.Popen([*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 141 and err == "", err


def test_mesh_plan_exactly_at_the_boundary_does_not_fit_exit_3(tmp_path: Path) -> None:
    raw = raw_mesh(2, interval="85s", guard="5s")
    raw["tests"][0]["budget"] = "40s"
    code, out, _ = run_mesh(["plan", "--mesh.file", write(tmp_path, raw), "--date", "2026-11-23"])
    assert code == 3
    assert "  does NOT fit: ends, with the 5 s guard, 5.000 s after the next round starts (period 85.000 s" in out


def test_mesh_plan_site_lists_that_sites_slots_with_the_whole_meshs_totals(tmp_path: Path) -> None:
    raw = raw_mesh(4, interval="12h", budget="30s")
    code, out, _ = run_mesh(["plan", "--mesh.file", write(tmp_path, raw), "--date", "2026-11-23", "--site", "s01"])
    slots = [line for line in out.splitlines() if " -> " in line]
    assert code == 0 and len(slots) == 2 * 6 and all("s01" in line for line in slots)
    assert "fits: 12 slots end" in out


def test_mesh_command_errors(tmp_path: Path) -> None:
    code, _, err = run_mesh(["plan"])
    assert (code, err) == (2, "bigbinf-exporter mesh plan: error: give --mesh.file FILE\n")
    raw = raw_mesh(2)
    raw["tests"][0]["datasets"] = ["nope"]
    path = write(tmp_path, raw)
    code, _, err = run_mesh(["plan", "--mesh.file", path])
    assert code == 1 and err.startswith(f"{path}: tests[0].datasets[0]: no dataset named 'nope'; defined: f8m, f1g")
    path = write(tmp_path, raw_mesh(2))
    code, _, err = run_mesh(["plan", "--mesh.file", path, "--date", "23/11/2026"])
    assert code == 2 and "--date '23/11/2026': write the day as YYYY-MM-DD" in err
    code, _, err = run_mesh(["config", "--mesh.file", path, "--site", "s09"])
    assert code == 2 and "--site s09: no such site in the mesh; defined: s00, s01" in err
    code, _, err = run_mesh(["durations", "--mesh.file", path])
    assert code == 2 and "give --journal [SITE=]PATH" in err


def test_mesh_config_prints_a_sites_configuration(tmp_path: Path) -> None:
    code, out, _ = run_mesh(["config", "--mesh.file", write(tmp_path, raw_mesh(3)), "--site", "s01"])
    config = yaml.safe_load(out)
    assert code == 0 and list(config["remotes"]) == ["s00", "s02"]
    assert config["remotes"]["s02"]["address"] == "10.0.0.3"
    assert [(t["remote"], t["protocol"]) for t in config["schedule"]["transfers"]] == [("s00", "http"), ("s02", "http")]


def test_mesh_durations_writes_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, raw_mesh(2))
    Journal(tmp_path / "j.jsonl").append(result("", "s01", T0, 4.5))
    out = tmp_path / "d.json"
    code, stdout, _ = run_mesh(
        ["durations", "--mesh.file", path, "--journal", f"s00={tmp_path}/j.jsonl", "--out", str(out)]
    )
    assert code == 0 and stdout == f"{out}: durations of 1 tests from 1 journals\n"
    assert parse_durations(out.read_text(), str(out)).tests == {key("s00", "s01"): (4.5,)}
    raw = raw_mesh(2)
    raw["schedule"]["durations"] = "d.json"
    code, stdout, _ = run_mesh(["plan", "--mesh.file", write(tmp_path, raw), "--date", "2026-11-23"])
    written = json.loads(out.read_text())["written_utc"]
    assert stdout.splitlines()[0] == f"durations: {out} (written {written}): 1 of 2 tests measured"
    assert "s00 -> s01  http/f8m/download  (measured)" in stdout


def test_mesh_durations_replaces_the_file_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, raw_mesh(2))
    Journal(tmp_path / "j.jsonl").append(result("", "s01", T0, 4.5))
    out = tmp_path / "d.json"
    out.write_text("the old file\n")
    argv = ["durations", "--mesh.file", path, "--journal", f"s00={tmp_path}/j.jsonl", "--out", str(out)]

    def failing_replace(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", failing_replace)
    code, _, err = run_mesh(argv)
    assert code == 2 and "cannot write (No space left on device)" in err
    assert out.read_text() == "the old file\n"  # untouched, not truncated or half written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json", "j.jsonl", "mesh.yaml"]  # no temporary left
    monkeypatch.undo()
    assert run_mesh(argv)[0] == 0
    assert parse_durations(out.read_text(), str(out)).tests == {key("s00", "s01"): (4.5,)}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json", "j.jsonl", "mesh.yaml"]


def test_bigbinf_exporter_mesh_plan(tmp_path: Path) -> None:
    path = write(tmp_path, raw_mesh(2, interval="12h", budget="30s"))
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf", "mesh", "plan", "--mesh.file", path, "--date", "2026-11-23"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "the day fits: all 2 rounds end before the next one starts"
