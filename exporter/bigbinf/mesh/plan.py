"""The mesh's slot plan: when each test runs, computed alike by every site's exporter.

There is no coordinator.  Every exporter computes the same plan from the same inputs
(the mesh file, the durations file distributed with it, and the round's start), so two
tests that share a site never run at once, although no exporter asks another anything.
That rests on three things:

* determinism: the order comes from mesh-file order only (never set or hash order), and
  every length is an integer number of milliseconds computed with exact fractions, so
  every machine gets identical numbers (RoundPlan.fingerprint: equal iff two sites plan
  alike; it leaves the round's start out, so it changes only with the files);
* the durations file: slots are sized from it, never from an exporter's own journal,
  which differs from site to site (and so would the plans); an exporter reads it once
  with the mesh file, so all the rounds of one load are sized alike;
* round starts on the local wall clock of schedule.timezone (interval: local midnight +
  k x interval, a short last round merged into the one before; cron: the lines' times),
  each converted to UTC on its own, a time the clock skips starting no round and one it
  shows twice starting one, the first time;
* synchronised clocks (NTP): a slot starts on each exporter's own clock; the guard gap
  after every slot absorbs their offset and the connections' teardown (docs/mesh.md).

Packing: a test occupies both its sites for its slot, and a site is free again a guard
gap after its slot ends.  Two packings are made and the shorter kept: list scheduling in
time (whenever sites are free, the busiest starts a test with its busiest free partner;
close to the lower bound on sparse meshes and unequal slots) and the round-robin
tournament order (the circle method over the sites in mesh order, each test at the
earliest time both its sites are free; the lower bound on a full mesh of equal slots).
"""

from __future__ import annotations

import bisect
import collections
import datetime as dt
import functools
import hashlib
import heapq
import json
import math
import zoneinfo
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from pydantic import Field, ValidationError

from bigbinf.config import ConfigError as _ConfigError
from bigbinf.config import ConfigIssue, Direction, Name, ProbeConfig, _Strict, pydantic_issues, read_yaml
from bigbinf.cron import crontab_trigger
from bigbinf.mesh.config import MeshConfig, MeshError, MeshTest, exporter_of, path_bandwidth, test_pairs

# Added to a measured or estimated transfer: starting the capture, the ssh session and the
# tool, and stopping the capture afterwards (seconds; lab measurements: 0.5-1.5 s).
SETUP_SECONDS = Fraction(2)
# The path MTU search (icmp probes with mtu: true): the route's MTU passes on most paths,
# one echo; a path narrower than its route needs a search and may overrun its slot.
MTU_SEARCH_SECONDS = Fraction(1)
# A measured slot is headroom x the longest of this many recent ok durations.
TYPICAL_OF = 5
# Durations kept per test in the durations file (mesh durations --keep).
KEEP = 5

SOURCES = ("budget", "measured", "estimated", "default")


@dataclass(frozen=True, order=True)
class TestKey:
    """One test of the mesh: src's exporter moves dataset with protocol to or from dst."""

    __test__ = False  # not a pytest test class, whatever its name

    src: str
    dst: str
    protocol: str
    dataset: str
    direction: str

    def __str__(self) -> str:
        return f"{self.src} -> {self.dst} {self.protocol}/{self.dataset}/{self.direction}"


class Slot(NamedTuple):
    """One test's slot of a round.  A named tuple (immutable, like the rest of a plan): a
    100-site round has 20,000 of them, and a frozen dataclass takes 3 times as long to make."""

    start: float  # UTC epoch seconds, whole milliseconds
    end: float  # start + length (the slot's end; the guard gap comes after it)
    test: TestKey
    repetition: int  # 0-based, schedule.repetitions per round
    source: str  # how the length was found: "budget" | "measured" | "estimated" | "default"
    probe: bool  # the first slot of (src, dst) in this round: the runner probes the path in it
    # The slot's length / schedule.headroom (whole ms, rounded up): its test's typical
    # length.  A slot whose start is late (the site's previous transfer overran) starts
    # only while at least this much of it is left (service/mesh_runner.py); 0: while any is.
    typical: float = 0.0

    @property
    def length(self) -> float:
        return _seconds(_ms(self.end) - _ms(self.start))

    def involves(self, site: str) -> bool:
        return site in (self.test.src, self.test.dst)


@dataclass(frozen=True)
class RoundPlan:
    start: float  # this round's start
    end: float  # the next round's start: the round must be over by then
    slots: tuple[Slot, ...]  # in start order
    # Equal at every site iff they plan alike: the schedule, the guard and every slot's
    # test, length and offset from the round's start; not the start itself, so it stays
    # the same from round to round (a day's rounds are one packing, shifted).
    fingerprint: str
    guard: float = 0.0  # schedule.guard: after the last slot too, before the next round's first

    @property
    def planned_end(self) -> float:
        return max((s.end for s in self.slots), default=self.start)

    @property
    def slack_seconds(self) -> float:
        """The time between the last slot's guard gap and the next round (< 0: overrun)."""
        return _seconds(_ms(self.end) - _ms(self.planned_end) - _ms(self.guard))

    @property
    def fits(self) -> bool:
        """planned_end + guard <= end: the next round's first slot may start at its start."""
        return _ms(self.planned_end) + _ms(self.guard) <= _ms(self.end)

    @property
    def overflow_seconds(self) -> float:
        return max(0.0, -self.slack_seconds)


# ---------------------------------------------------------------- exact arithmetic


def _exact(value: float | int) -> Fraction:
    # The decimal the user wrote (repr is the shortest round-tripping decimal, the same on
    # every platform), not the binary double: 0.2 x 20 must be 4 s, not 4.000000000000001.
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


def _ceil_ms(seconds: Fraction) -> int:
    return math.ceil(seconds * 1000)


def _ms(seconds: float) -> int:
    """Whole milliseconds of an epoch or length given in seconds (floats of whole ms)."""
    return round(seconds * 1000)


def _seconds(ms: int) -> float:
    return ms / 1000


# ---------------------------------------------------------------- the durations file


class _DurationEntry(_Strict):
    src: Name
    dst: Name
    protocol: Name
    dataset: Name
    direction: Direction
    durations: Annotated[list[Annotated[float, Field(ge=0)]], Field(min_length=1)]  # seconds, oldest first
    last_utc: str = ""  # start of the newest of them


class _DurationsFile(_Strict):
    mesh: str = ""
    written_utc: str = ""
    keep: Annotated[int, Field(ge=1)] = KEEP
    tests: list[_DurationEntry] = Field(default_factory=list)


class Durations:
    """Recent ok durations per test, from the durations file (`mesh durations`)."""

    def __init__(self, tests: Mapping[TestKey, Sequence[float]] | None = None, written_utc: str = "") -> None:
        self.tests = {key: tuple(values) for key, values in (tests or {}).items()}
        self.written_utc = written_utc

    def __len__(self) -> int:
        return len(self.tests)

    def typical(self, test: TestKey) -> float | None:
        """The longest of the last TYPICAL_OF durations: a slot must hold a slow run too."""
        recent = self.tests.get(test, ())[-TYPICAL_OF:]
        return max(recent) if recent else None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        raise ValueError(f"key {repeated[0]!r} is given twice in one object")
    return dict(pairs)


def _read_durations_json(text: str, source: str) -> dict[str, Any]:
    try:
        raw = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as exc:
        raise MeshError(source, [ConfigIssue("", f"line {exc.lineno} column {exc.colno}: {exc.msg}")]) from None
    except ValueError as exc:
        raise MeshError(source, [ConfigIssue("", str(exc))]) from None
    if not isinstance(raw, dict):
        raise MeshError(source, [ConfigIssue("", "expected a JSON object with tests: [...]")])
    return raw


def parse_durations(text: str, source: str) -> Durations:
    """A durations file: JSON as `mesh durations` writes it (a YAML file of the same shape
    is read too, but slowly: ~0.5 ms a test against JSON's ~2 us)."""
    if text.lstrip().startswith("{"):
        raw = _read_durations_json(text, source)
    else:
        try:
            raw = read_yaml(text, source, "tests: a list of {src, dst, protocol, dataset, direction, durations}")
        except _ConfigError as exc:
            raise MeshError(source, exc.issues) from None
    try:
        data = _DurationsFile.model_validate(raw)
    except ValidationError as exc:
        raise MeshError(source, pydantic_issues(exc, _DurationsFile)) from None
    tests: dict[TestKey, tuple[float, ...]] = {}
    issues = []
    for i, entry in enumerate(data.tests):
        key = TestKey(entry.src, entry.dst, entry.protocol, entry.dataset, entry.direction)
        if key in tests:
            issues.append(ConfigIssue(f"tests[{i}]", f"{key} is listed twice; regenerate with mesh durations"))
        tests[key] = tuple(entry.durations)
    if issues:
        raise MeshError(source, issues)
    return Durations(tests, data.written_utc)


def dump_durations(data: Mapping[str, Any]) -> str:
    """write_durations' content as the file's text: JSON, one test a line (diffable)."""
    head = json.dumps({k: v for k, v in data.items() if k != "tests"})[:-1]
    tests = ",\n".join(json.dumps(t) for t in data["tests"])
    return f'{head}, "tests": [\n{tests}\n]}}\n' if tests else f'{head}, "tests": []}}\n'


def load_durations(mesh: MeshConfig) -> Durations:
    """The mesh's durations file (schedule.durations); empty if it names none."""
    path = mesh.schedule.durations
    if path is None:
        return Durations()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MeshError(
            str(path),
            [
                ConfigIssue(
                    "",
                    f"cannot read the durations file ({exc.strerror}); write it with `mesh durations` "
                    "or remove schedule.durations",
                )
            ],
        ) from None
    return parse_durations(text, str(path))


# ---------------------------------------------------------------- the tests and their lengths


def _entries(mesh: MeshConfig) -> Iterator[tuple[TestKey, MeshTest]]:
    """Every test with the tests: entry that defines it, in mesh order (repeats included)."""
    for entry in mesh.tests:
        for src, dst in test_pairs(mesh, entry):
            for protocol in entry.protocols:
                for dataset in entry.datasets:
                    for direction in entry.directions:
                        yield TestKey(src, dst, protocol, dataset, direction), entry


def mesh_tests(mesh: MeshConfig) -> dict[TestKey, float | None]:
    """Every test once, in mesh order (as outgoing() lists them), with its budget: that of
    the first tests: entry naming it that has one (so a narrower entry can budget some of
    an "all pairs" entry's tests), else None."""
    tests: dict[TestKey, float | None] = {}
    for key, entry in _entries(mesh):
        if tests.get(key) is None:
            tests[key] = entry.budget
    return tests


def _transfer_ms(mesh: MeshConfig, test: TestKey, budget: float | None, durations: Durations) -> tuple[int, str]:
    if budget is not None:
        return _whole_ms(budget), "budget"
    typical = durations.typical(test)
    if typical is not None:
        return _measured_ms(mesh.schedule.headroom, typical), "measured"
    bandwidth = path_bandwidth(mesh, test.src, test.dst)
    if bandwidth:
        dataset = mesh.datasets[test.dataset]
        return _estimated_ms(mesh.schedule.headroom, dataset.size * dataset.count, bandwidth), "estimated"
    return _whole_ms(mesh.schedule.budget), "default"


# Fractions are slow (~20 us an operation) and a 100-site mesh has 20,000 tests: lengths
# are computed in integers instead (the same exact values: the decimals written, as
# numerator and denominator), and the few distinct ones that repeat are cached.


def _ratio(value: float | int) -> tuple[int, int]:
    """_exact(value) as (numerator, denominator): the decimal written, not the double."""
    return Decimal(repr(value)).as_integer_ratio() if isinstance(value, float) else (value, 1)


def _ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


@functools.lru_cache(maxsize=65536)
def _whole_ms(seconds: float) -> int:
    n, d = _ratio(seconds)
    return _ceil_div(n * 1000, d)


@functools.lru_cache(maxsize=64)
def _headroom_ratio(headroom: float) -> tuple[int, int]:
    return _ratio(headroom)


_SETUP_MS = _ceil_ms(SETUP_SECONDS)


def _headroom_ms(headroom: float, seconds: tuple[int, int]) -> int:
    """headroom x seconds (numerator, denominator) + the setup, rounded up to whole ms."""
    h_n, h_d = _headroom_ratio(headroom)
    return _ceil_div(h_n * seconds[0] * 1000, h_d * seconds[1]) + _SETUP_MS


def _measured_ms(headroom: float, typical: float) -> int:
    return _headroom_ms(headroom, _ratio(typical))


@functools.lru_cache(maxsize=65536)
def _estimated_ms(headroom: float, size: int, bandwidth: float) -> int:
    b_n, b_d = _ratio(bandwidth)
    return _headroom_ms(headroom, (size * b_d, b_n))


@functools.lru_cache(maxsize=65536)
def _typical_ms(length_ms: int, headroom: float) -> int:
    """A slot's length / headroom, rounded up: its test's typical length (Slot.typical)."""
    h_n, h_d = _headroom_ratio(headroom)
    return _ceil_div(length_ms * h_d, h_n)


def probe_ms(mesh: MeshConfig, test: TestKey) -> int:
    """The path probe's time (dst's probe settings, as the runner uses them; 0 if disabled):
    the train (measure/path/probe.py's expected_seconds, a little generously) and the MTU search."""
    return _probe_ms(mesh.sites[test.dst].probe)


@functools.lru_cache(maxsize=1024)  # per site's settings, not per test
def _probe_ms(probe: ProbeConfig) -> int:
    if not probe.enabled:
        return 0
    interval, timeout = _exact(probe.interval), _exact(probe.timeout)
    if probe.method == "tcp":  # sequential connects: each waits for the one before
        return _ceil_ms(probe.count * max(interval, timeout) + timeout)
    mtu = MTU_SEARCH_SECONDS if probe.mtu else Fraction(0)
    return _ceil_ms(probe.count * interval + timeout + mtu)


def slot_length(mesh: MeshConfig, test: TestKey, durations: Durations, probe: bool = False) -> tuple[float, str]:
    """A test's slot in seconds (whole ms) and where the length came from (SOURCES)."""
    ms, source = _transfer_ms(mesh, test, mesh_tests(mesh).get(test), durations)
    return _seconds(ms + (probe_ms(mesh, test) if probe else 0)), source


# ---------------------------------------------------------------- order and packing


def tournament(sites: Sequence[str]) -> list[list[tuple[str, str]]]:
    """Round-robin rounds of disjoint pairs (the circle method): site 0 stays, the others
    rotate.  Each pair is (earlier, later) in `sites` order; an odd count sits one out."""
    ring: list[str | None] = [*sites, None] if len(sites) % 2 else list(sites)
    n, rank = len(ring), {s: i for i, s in enumerate(sites)}
    rounds = []
    for r in range(n - 1):
        turn = [ring[0], *(ring[1:][(i - r) % (n - 1)] for i in range(n - 1))]
        pairs = []
        for i in range(n // 2):
            a, b = turn[i], turn[n - 1 - i]
            if a is not None and b is not None:
                pairs.append((a, b) if rank[a] < rank[b] else (b, a))
        rounds.append(pairs)
    return rounds


def _slot_order(sites: Sequence[str], tests: Sequence[TestKey]) -> list[TestKey]:
    """`tests` in tournament order: pair by pair, a -> b then b -> a, each direction's
    tests in mesh order."""
    by_path: dict[tuple[str, str], list[TestKey]] = {}
    for test in tests:
        by_path.setdefault((test.src, test.dst), []).append(test)
    order: list[TestKey] = []
    for pairs in tournament(list(sites)):
        for a, b in pairs:
            order += by_path.get((a, b), []) + by_path.get((b, a), [])
    return order


@dataclass(frozen=True)
class _Placed:
    start: int
    end: int
    seq: int
    test: TestKey
    repetition: int
    source: str
    probe: bool


def _pack_in_order(
    order: Sequence[TestKey],
    lengths: Mapping[TestKey, tuple[int, str]],
    probes: Mapping[TestKey, int],
    guard: int,
    repetitions: int,
) -> list[_Placed]:
    """Each test of `order` (repetitions: whole passes) at the earliest time both its
    sites are free after their last slot so far: with the tournament order and equal
    slots, every site is busy end to end (the lower bound)."""
    free: dict[str, int] = {}  # site -> when it may start its next slot (ms)
    probed: set[tuple[str, str]] = set()
    placed: list[_Placed] = []
    for repetition in range(repetitions):
        for test in order:
            path = (test.src, test.dst)
            probe = path not in probed and probes[test] > 0
            probed.add(path)
            length, source = lengths[test]
            begin = max(free.get(test.src, 0), free.get(test.dst, 0))
            end = begin + length + (probes[test] if probe else 0)
            free[test.src] = free[test.dst] = end + guard
            placed.append(_Placed(begin, end, len(placed), test, repetition, source, probe))
    placed.sort(key=lambda p: (p.start, p.seq))
    return placed


def _pack_by_time(
    sites: Sequence[str],
    tests: Sequence[TestKey],
    lengths: Mapping[TestKey, tuple[int, str]],
    probes: Mapping[TestKey, int],
    guard: int,
    repetitions: int,
) -> list[_Placed]:
    """List scheduling in time: whenever sites are free, each (the busiest first: the most
    slot time, guards and probes still to place) starts a test with a free partner (the
    busiest such partner), so no site waits while a test of it could run.  A pair's tests
    run in mesh order, repetition by repetition.  Sparse meshes (rings, stars, subsets)
    pack close to the lower bound this way; an order fixed in advance leaves sites idle."""
    index = {site: i for i, site in enumerate(sites)}
    # Per test (by its position in `tests`): the ends, length, source and probe, looked up
    # once (a TestKey's hash costs more than the rest of a placement).
    ends = [(index[t.src], index[t.dst]) for t in tests]
    length = [lengths[t][0] for t in tests]
    source = [lengths[t][1] for t in tests]
    probe_of = [probes[t] for t in tests]
    # pending[u][v]: the items (repetition x tests + test) of the pair (u, v), either
    # direction, in order; one deque shared by both ends.
    pending: list[dict[int, deque[int]]] = [{} for _ in sites]
    load = [0] * len(sites)  # per site: the slot time, guards and probes still to place (ms)
    for repetition in range(repetitions):
        for i, (u, v) in enumerate(ends):
            queue = pending[u].get(v)
            if queue is None:
                queue = pending[u][v] = pending[v][u] = deque()
            queue.append(repetition * len(tests) + i)
            load[u] += length[i] + guard
            load[v] += length[i] + guard
    for i in {ends[i]: i for i in range(len(tests))}.values():  # each path's probe, once
        load[ends[i][0]] += probe_of[i]
        load[ends[i][1]] += probe_of[i]
    probed: set[tuple[int, int]] = set()
    placed: list[_Placed] = []
    events: list[tuple[int, int]] = []  # (free again at, site)
    waiting: set[int] = set()  # free since an earlier time, no free partner then
    freed = {u for u in range(len(sites)) if pending[u]}  # free from now
    now = 0
    while True:
        free = waiting | freed
        for u in sorted(free, key=lambda site: (-load[site], site)):
            if u not in free:
                continue  # taken as a partner meanwhile
            # A waiting site has seen every partner that was free before: only those freed now are new.
            v = _busiest_partner(pending[u], freed if u in waiting else free, load)
            if v < 0:
                continue
            queue = pending[u][v]
            repetition, i = divmod(queue.popleft(), len(tests))
            if not queue:
                del pending[u][v], pending[v][u]
            probe = probe_of[i] > 0 and ends[i] not in probed
            if probe:
                probed.add(ends[i])
            end = now + length[i] + (probe_of[i] if probe else 0)
            placed.append(_Placed(now, end, len(placed), tests[i], repetition, source[i], probe))
            for site in (u, v):
                load[site] -= end - now + guard
                free.discard(site)
                waiting.discard(site)
                freed.discard(site)
                heapq.heappush(events, (end + guard, site))
        waiting = {site for site in waiting | freed if pending[site]}
        if not events:
            break
        now, freed = events[0][0], set()
        while events and events[0][0] == now:
            site = heapq.heappop(events)[1]
            if pending[site]:
                freed.add(site)
    assert len(placed) == repetitions * len(tests), "every test is placed"  # a pending pair always has a busy end
    placed.sort(key=lambda p: (p.start, p.seq))
    return placed


def _busiest_partner(partners: Mapping[int, deque[int]], free: set[int], load: Sequence[int]) -> int:
    """The partner in `free` with the most left to place (the lower index on a tie); -1: none."""
    best, most = -1, -1
    for v in partners if len(partners) <= len(free) else free:
        if v in free and v in partners and (load[v] > most or (load[v] == most and v < best)):
            best, most = v, load[v]
    return best


def _span(packing: Sequence[_Placed]) -> int:
    return max((p.end for p in packing), default=0)


def _fingerprint(mesh: MeshConfig, packing: Sequence[_Placed]) -> str:
    """Over what makes two sites plan alike: when rounds start (cron lines or interval,
    and the time zone), the guard, the headroom, and every slot of the packing (offsets
    from the round's start, test, repetition, source, probe).  The round's start and
    end are left out: every round of one mesh and durations file has the same one."""
    schedule = mesh.schedule
    when = f"interval {_interval_ms(mesh)}" if schedule.interval is not None else "cron " + "|".join(schedule.cron)
    digest = hashlib.sha256(f"{when} {schedule.timezone} {guard_ms(mesh)} {_exact(schedule.headroom)}\n".encode())
    for p in packing:
        t = p.test
        test = f"{t.src} {t.dst} {t.protocol} {t.dataset} {t.direction}"
        digest.update(f"{p.start} {p.end} {test} {p.repetition} {p.source} {p.probe}\n".encode())
    return digest.hexdigest()[:12]


def guard_ms(mesh: MeshConfig) -> int:
    return _ceil_ms(_exact(mesh.schedule.guard))


@dataclass(frozen=True)
class _Packing:
    """Every slot of a round that starts at 0 (ms), and their fingerprint: packing does not
    depend on the round's start, so a day's rounds are one packing, shifted (_shifted)."""

    placed: tuple[_Placed, ...]
    fingerprint: str


def _packing(mesh: MeshConfig, durations: Durations) -> _Packing:
    tests = mesh_tests(mesh)
    lengths = {test: _transfer_ms(mesh, test, budget, durations) for test, budget in tests.items()}
    probes = {test: probe_ms(mesh, test) for test in tests}
    placed = _pack(list(mesh.sites), list(tests), lengths, probes, guard_ms(mesh), mesh.schedule.repetitions)
    return _Packing(tuple(placed), _fingerprint(mesh, placed))


def _pack(
    sites: Sequence[str],
    tests: Sequence[TestKey],
    lengths: Mapping[TestKey, tuple[int, str]],
    probes: Mapping[TestKey, int],
    guard: int,
    repetitions: int,
) -> list[_Placed]:
    """The shorter of two packings (the tournament order's on a tie): list scheduling in
    time, which packs sparse meshes and unequal slots well, and the tournament order,
    which reaches the lower bound on a full mesh of equal slots where list scheduling's
    greedy matchings leave a few sites idle (docs/benchmarks.md, "Mesh plan")."""
    by_order = _pack_in_order(_slot_order(sites, tests), lengths, probes, guard, repetitions)
    by_time = _pack_by_time(sites, tests, lengths, probes, guard, repetitions)
    return by_time if _span(by_time) < _span(by_order) else by_order


def _shifted(mesh: MeshConfig, packing: _Packing, start_ms: int, end_ms: int) -> RoundPlan:
    """The round [start_ms, end_ms) of a packing: every slot moved by start_ms (integer ms,
    so exactly as packing from start_ms would place it)."""
    guard = guard_ms(mesh)
    headroom = mesh.schedule.headroom
    slots = tuple(
        Slot(
            _seconds(p.start + start_ms),
            _seconds(p.end + start_ms),
            p.test,
            p.repetition,
            p.source,
            p.probe,
            _seconds(_typical_ms(p.end - p.start, headroom)),
        )
        for p in packing.placed
    )
    return RoundPlan(_seconds(start_ms), _seconds(end_ms), slots, packing.fingerprint, _seconds(guard))


def plan_round(mesh: MeshConfig, start: float, end: float, durations: Durations) -> RoundPlan:
    """The slots of the round that starts at `start` (and must be over by `end`, its last
    slot's guard gap included)."""
    return _shifted(mesh, _packing(mesh, durations), _ms(start), _ms(end))


def site_busy_seconds(mesh: MeshConfig, plan: RoundPlan) -> dict[str, float]:
    """Per site, its slots' lengths plus the guard gaps between them: no order of these
    slots ends the round sooner than its start + the largest of these (a lower bound)."""
    guard = guard_ms(mesh)
    busy, count = dict.fromkeys(mesh.sites, 0), dict.fromkeys(mesh.sites, 0)
    for slot in plan.slots:
        for site in (slot.test.src, slot.test.dst):
            busy[site] += _ms(slot.end) - _ms(slot.start)
            count[site] += 1
    return {site: _seconds(busy[site] + guard * max(0, count[site] - 1)) for site in mesh.sites}


# ---------------------------------------------------------------- rounds

_DAY_MS = 86_400_000


def _zone(mesh: MeshConfig) -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(mesh.schedule.timezone)


def _midnight_ms(day: dt.date, zone: zoneinfo.ZoneInfo) -> int:
    return round(dt.datetime.combine(day, dt.time(0), tzinfo=zone).timestamp() * 1000)


def _local_day(ms: int, zone: zoneinfo.ZoneInfo) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, zone).date()


def _interval_ms(mesh: MeshConfig) -> int | None:
    interval = mesh.schedule.interval
    return None if interval is None else _ceil_ms(_exact(interval))


def _instant(wall: dt.datetime, zone: zoneinfo.ZoneInfo) -> int | None:
    """A local wall-clock time (naive) as UTC epoch ms: None if the clock skips it (a DST
    gap), the first of the two if it shows it twice (fold 0: the earlier)."""
    aware = wall.replace(tzinfo=zone, fold=0)
    ms = round(aware.timestamp() * 1000)
    back = dt.datetime.fromtimestamp(ms / 1000, zone).replace(tzinfo=None)
    return ms if back == wall else None


def _wall(ms: int, zone: zoneinfo.ZoneInfo) -> dt.datetime:
    """What the local clock shows at `ms` (naive)."""
    return dt.datetime.fromtimestamp(ms / 1000, zone).replace(tzinfo=None)


@functools.lru_cache(maxsize=1024)
def _interval_day(timezone: str, interval: int, day: dt.date) -> tuple[int, ...]:
    """A day's interval round starts (UTC epoch ms): its first instant (local midnight),
    then local midnight + k x interval on the local clock, each converted to UTC on its
    own (a time the clock skips is no start; one it shows twice starts once, the first
    time).  A last round shorter than the interval is no round of its own: the one
    before it runs on to the next midnight."""
    zone = zoneinfo.ZoneInfo(timezone)
    starts = [_midnight_ms(day, zone)]
    midnight = dt.datetime.combine(day, dt.time(0))
    offset = interval
    while _DAY_MS - offset >= interval:
        ms = _instant(midnight + dt.timedelta(milliseconds=offset), zone)
        if ms is not None and ms > starts[-1]:
            starts.append(ms)
        offset += interval
    return tuple(starts)


def _interval_next(mesh: MeshConfig, after: int, interval: int) -> int:
    day = _local_day(after, _zone(mesh))
    for d in range(-1, 3):
        starts = _interval_day(mesh.schedule.timezone, interval, day + dt.timedelta(days=d))
        i = bisect.bisect_left(starts, after)  # a day of 1-minute rounds has 1,440 starts
        if i < len(starts):
            return starts[i]
    raise AssertionError("an interval schedule starts a round every day")  # pragma: no cover


def _interval_prev(mesh: MeshConfig, when: int, interval: int) -> int:
    day = _local_day(when, _zone(mesh))
    for d in range(1, -3, -1):
        starts = _interval_day(mesh.schedule.timezone, interval, day + dt.timedelta(days=d))
        i = bisect.bisect_right(starts, when)
        if i:
            return starts[i - 1]
    raise AssertionError("an interval schedule starts a round every day")  # pragma: no cover


def _cron_next(mesh: MeshConfig, after: int) -> int | None:
    """The first cron start at or after `after` (ms).  The lines are matched against the
    local wall clock (APScheduler's own zone handling fires inside a DST gap and repeats
    a time the clock shows twice), each match converted to UTC as interval starts are."""
    zone = _zone(mesh)
    triggers = [crontab_trigger(expr, dt.UTC) for expr in mesh.schedule.cron]
    wall = _wall(after, zone)
    for _ in range(100):  # a few steps past a DST change at most
        naive_now = wall.replace(tzinfo=dt.UTC)
        fires = [t.get_next_fire_time(None, naive_now) for t in triggers]
        found = [f.replace(tzinfo=None) for f in fires if f is not None]
        if not found:
            return None
        wall = min(found)
        ms = _instant(wall, zone)
        if ms is not None and ms >= after:
            return ms
        wall += dt.timedelta(milliseconds=1)  # skipped (a DST gap), or its first showing was earlier
    return None  # pragma: no cover


# How far back to look for the start of the round a moment is in: an hour covers cron
# lines that fire often; a leap-year cycle covers "once a year on Feb 29".
_LOOKBACK_MS = tuple(d * 3_600_000 for d in (1, 24, 8 * 24, 32 * 24, 367 * 24, 1462 * 24))


def _cron_prev(mesh: MeshConfig, when: int) -> int | None:
    for back in _LOOKBACK_MS:
        last, start = None, _cron_next(mesh, when - back)
        while start is not None and start <= when:
            last, start = start, _cron_next(mesh, start + 1)
        if last is not None:
            return last
    return None


def _next_start(mesh: MeshConfig, after: int) -> int | None:
    """The first round start at or after `after` (ms); None if the cron never fires again."""
    interval = _interval_ms(mesh)
    return _interval_next(mesh, after, interval) if interval else _cron_next(mesh, after)


def _prev_start(mesh: MeshConfig, when: int) -> int | None:
    interval = _interval_ms(mesh)
    return _interval_prev(mesh, when, interval) if interval else _cron_prev(mesh, when)


def round_starts(mesh: MeshConfig, day: dt.date) -> list[float]:
    """The round starts on `day` in the schedule's time zone (UTC epoch seconds)."""
    zone = _zone(mesh)
    lo, hi = _midnight_ms(day, zone), _midnight_ms(day + dt.timedelta(days=1), zone)
    starts, start = [], _next_start(mesh, lo)
    while start is not None and start < hi:
        starts.append(_seconds(start))
        start = _next_start(mesh, start + 1)
    return starts


def longest_period_seconds(mesh: MeshConfig) -> float | None:
    """An interval schedule's longest round (what "stale" means for a series): the day's
    last round on the local clock (the interval, or more where a short tail is merged
    into it), plus the zone's largest change of UTC offset in a year (a DST day's round
    can be that much longer).  None for cron schedules (service.schedule measures those)."""
    interval = _interval_ms(mesh)
    if interval is None:
        return None
    last = _DAY_MS if interval >= _DAY_MS else _DAY_MS - (_DAY_MS - interval) // interval * interval
    zone = _zone(mesh)
    year = dt.date.today().year
    offsets = [
        dt.datetime(year, 1, 1, 12, tzinfo=zone).__add__(dt.timedelta(days=d)).utcoffset() or dt.timedelta(0)
        for d in range(0, 366, 7)
    ]
    shift = max(offsets) - min(offsets)
    return _seconds(max(interval, last) + round(shift.total_seconds() * 1000))


def _round(mesh: MeshConfig, start: int, packing: _Packing) -> RoundPlan:
    end = _next_start(mesh, start + 1)
    # Five-field cron lines always fire again; should one not, give the round a day.
    return _shifted(mesh, packing, start, end if end is not None else start + _DAY_MS)


def round_at(mesh: MeshConfig, when: float, durations: Durations) -> RoundPlan | None:
    """The round whose [start, end) holds `when`; None if the schedule never fired before."""
    start = _prev_start(mesh, math.floor(when * 1000))
    return None if start is None else _round(mesh, start, _packing(mesh, durations))


def next_rounds(mesh: MeshConfig, after: float, durations: Durations) -> Iterator[RoundPlan]:
    """The rounds starting at or after `after`, in order, for as long as the schedule fires."""
    start = _next_start(mesh, math.ceil(after * 1000))
    if start is None:
        return
    packing = _packing(mesh, durations)
    while start is not None:
        yield _round(mesh, start, packing)
        start = _next_start(mesh, start + 1)


def day_rounds(mesh: MeshConfig, day: dt.date, durations: Durations) -> Iterator[RoundPlan]:
    """Every round starting on `day` (local), each with its end at the next round's start:
    packed once, shifted to each round's start, made one at a time (`mesh plan` writes
    each as it comes: a day of 96 rounds of 20,000 slots is never held at once)."""
    starts = round_starts(mesh, day)
    if not starts:
        return
    packing = _packing(mesh, durations)
    for start in starts:
        yield _round(mesh, _ms(start), packing)


def plan_day(mesh: MeshConfig, day: dt.date, durations: Durations) -> list[RoundPlan]:
    return list(day_rounds(mesh, day, durations))


@dataclass(frozen=True)
class FitCheck:
    """The rounds starting in a time window: how many, how many do not fit, and the first
    few of those, planned (for their numbers)."""

    rounds: int
    late: int
    first_late: tuple[RoundPlan, ...]


def check_fit(mesh: MeshConfig, durations: Durations, after: float, seconds: float, keep: int = 3) -> FitCheck:
    """Whether the rounds that start in [after, after + seconds) fit: one packing, each
    round's period against its span and the guard (only rounds that do not fit are built)."""
    packing = _packing(mesh, durations)
    need = _span(packing.placed) + guard_ms(mesh)
    rounds, late, first = 0, 0, list[RoundPlan]()
    start, hi = _next_start(mesh, math.ceil(after * 1000)), after * 1000 + seconds * 1000
    while start is not None and start < hi:
        end = _next_start(mesh, start + 1)
        rounds += 1
        if end is not None and start + need > end:
            late += 1
            if len(first) < keep:
                first.append(_shifted(mesh, packing, start, end))
        start = end
    return FitCheck(rounds, late, tuple(first))


def site_slot_counts(
    mesh: MeshConfig, durations: Durations, site: str, since: float, until: float
) -> dict[TestKey, int]:
    """How many slots of each of `site`'s outgoing tests start after `since` and before
    `until` (UTC epoch seconds), over the rounds of the schedule as planned now: what an
    exporter that was not running from `since` to `until` missed.  Counted from the
    packing's offsets, round start by round start (no round's slots are built)."""
    lo, hi = since * 1000, until * 1000
    packing = _packing(mesh, durations)
    mine = [(p.start, p.test) for p in packing.placed if p.test.src == site]
    if not mine or hi <= lo:
        return {}
    last = max(offset for offset, _ in mine)
    whole = collections.Counter(test for _, test in mine)
    counts: collections.Counter[TestKey] = collections.Counter()
    start = _prev_start(mesh, math.floor(lo))
    start = start if start is not None else _next_start(mesh, math.ceil(lo))
    while start is not None and start < hi:
        if start > lo and start + last < hi:  # the whole round's slots in the window
            counts.update(whole)
        else:
            counts.update(test for offset, test in mine if lo < start + offset < hi)
        start = _next_start(mesh, start + 1)
    return dict(counts)


# ---------------------------------------------------------------- writing the durations file


def _journal_site(mesh: MeshConfig, path: Path) -> str | None:
    """The site whose exporter journals to `path` (sites.NAME.exporter.journal), if one does."""
    here = path.resolve()
    owners = [name for name in mesh.sites if exporter_of(mesh, name).journal.resolve() == here]
    return owners[0] if len(owners) == 1 else None


def write_durations(
    mesh: MeshConfig, journals: Sequence[Path | tuple[str | None, Path]], keep: int = KEEP
) -> dict[str, Any]:
    """The durations file's content from exporters' journals: per mesh test the last `keep`
    ok durations of runs in a slot of the plan (source "exporter", slot_start_timestamp
    set: never a `once` run, which may have overlapped other tests), oldest first.

    A result's site is its own `site` field; for older results without one, the SITE of
    a SITE=PATH journal, else the site whose exporter.journal is that path."""
    from bigbinf.journal.store import Journal, segments

    tests = mesh_tests(mesh)
    found: dict[TestKey, list[tuple[float, float]]] = {}
    for item in journals:
        given, path = item if isinstance(item, tuple) else (None, item)
        if not path.is_file() and not segments(path):
            raise MeshError(str(path), [ConfigIssue("", "no such journal file")])
        fallback = given or _journal_site(mesh, path)
        for result in Journal(path).read():
            if result.outcome != "ok" or result.source != "exporter" or result.slot_start_timestamp is None:
                continue  # failed, a sweep's or an import's, or run outside the slots (`once`)
            site = result.site or fallback
            if not site:
                raise MeshError(
                    str(path),
                    [ConfigIssue("", "its results do not say which site ran them; give --journal SITE=PATH")],
                )
            key = TestKey(site, result.remote, result.protocol, result.dataset, result.direction)
            if key in tests:
                found.setdefault(key, []).append((result.start_timestamp, result.duration_seconds))
    entries = []
    for key in tests:  # mesh order: the file is the same whoever writes it from the same journals
        runs = sorted(found.get(key, []))[-keep:]
        if runs:
            last = dt.datetime.fromtimestamp(runs[-1][0], dt.UTC).isoformat(timespec="seconds")
            entries.append(
                {
                    "src": key.src,
                    "dst": key.dst,
                    "protocol": key.protocol,
                    "dataset": key.dataset,
                    "direction": key.direction,
                    "durations": [round(d, 3) for _, d in runs],
                    "last_utc": last,
                }
            )
    written = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return {"mesh": mesh.name, "written_utc": written, "keep": keep, "tests": entries}
