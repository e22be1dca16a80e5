"""The judged mark (history/judged.py, issue 44): a restart that trusts it restores each
series' regression state as the exporter left it, tests it once and judges only the runs
journaled after it; its state must be the one a full re-judge (the runs a suspicion may
span, judged again: what a restart without it does) reaches.  A mark it cannot trust
(damaged, another version, stale) falls back to that re-judge, said in one line."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bigbinf.config import parse_config
from bigbinf.history import judged
from bigbinf.history.judged import JudgedMark, judged_path
from bigbinf.history.regression import History
from bigbinf.history.regression_state import RegressionJournal, regressions_path
from bigbinf.result import Result, SeriesKey
from bigbinf.service.collector import ExporterState
from bigbinf.service.rounds import RoundRunner
from tests.unit.test_regression_state import runs

CONFIG = """
remotes: {lab: {address: 127.0.0.1, data_dir: /d, key: /k/id}}
datasets: {f32m: {file: f.bin, size: 32MiB}, f5m: {file: g.bin, size: 5MiB}}
protocols: {scp: {}}
journal: {path: JOURNAL}
"""
KEY = SeriesKey("scp", "lab", "f32m", "download")
OTHER = SeriesKey("scp", "lab", "f5m", "download")
KEYS = [KEY, OTHER]


def result(key: SeriesKey, t: float, throughput: float) -> Result:
    size = 32 * 2**20
    return Result(
        key.protocol,
        key.remote,
        key.dataset,
        key.direction,
        t,
        "ok",
        duration_seconds=size / throughput,
        file_bytes=size,
    )


def runner_of(directory: Path) -> RoundRunner:
    return RoundRunner(parse_config(CONFIG.replace("JOURNAL", str(directory / "j.jsonl")), "test"), ExporterState())


def steady_other(key_runs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """OTHER's runs, steady, a minute after each of KEY's."""
    rng = np.random.default_rng(3)
    return [(t + 60, 8e6 * math.exp(rng.normal(0, 0.05))) for t, _ in key_runs]


def judged_live(
    directory: Path, key_runs: list[tuple[float, float]], other: list[tuple[float, float]] | None = None
) -> RoundRunner:
    """An exporter that judged KEY's runs (and OTHER's, steady) as they came, in time order."""
    directory.mkdir()
    runner = runner_of(directory)
    runner.restore_history([], KEYS)  # its start: from now on it judges and marks
    other = steady_other(key_runs) if other is None else other
    for key, t, x in sorted([(KEY, t, x) for t, x in key_runs] + [(OTHER, t, x) for t, x in other], key=lambda r: r[1]):
        runner.publish(result(key, t, x))
    runner.write_mark()  # its stop
    return runner


def journaled_unjudged(runner: RoundRunner, key_runs: list[tuple[float, float]]) -> None:
    """Runs journaled while no exporter judged them (stopped; `once` rounds)."""
    for t, x in key_runs:
        runner.journal.append(result(KEY, t, x))


def restarted(directory: Path) -> tuple[RoundRunner, int]:
    """A restart on `directory`: the runner, and how many runs it judged through the state."""
    runner = runner_of(directory)
    added = 0
    real_add = History.add

    def counting(self: History, key: Any, timestamp: float, throughput: float) -> bool:
        nonlocal added
        added += 1
        return real_add(self, key, timestamp, throughput)

    History.add = counting  # type: ignore[method-assign]
    try:
        runner.restore_history(runner.journal.read(), KEYS)
    finally:
        History.add = real_add  # type: ignore[method-assign]
    return runner, added


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines that said a mark was not trusted."""
    return [r.getMessage() for r in caplog.records if "judged again" in r.getMessage()]


def as_rejudged(live: Path, copy: Path) -> Path:
    """`live`'s files with the mark an exporter before this version kept (the latest run
    judged, nothing more): a restart on them judges again the runs a suspicion may span."""
    shutil.copytree(live, copy)
    through = json.loads(judged_path(copy / "j.jsonl").read_text())["judged_through"]
    judged_path(copy / "j.jsonl").write_text(json.dumps({"judged_through": through}))
    return copy


def state(runner: RoundRunner) -> dict[str, Any]:
    """Everything of the regression test a restart restores: each series' track (open
    regression, spans, accepts, suspicion), its test, its runs, and the journaled events."""
    h = runner.history

    def plain(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, tuple | list):
            return [plain(v) for v in value]
        return value

    out: dict[str, Any] = {}
    for key in KEYS:
        track = h.tracks.get(key)
        test = h.tests.get(key)
        if track is not None and track.suspect is None:
            # Where a suspicion began means nothing once it has ended (the next one sets it).
            track = dataclasses.replace(track, suspect_began=None)
        out[str(key)] = {
            "track": None if track is None else plain(list(vars(track).values())),
            "test": None if test is None else {k: plain(v) for k, v in vars(test).items()},
            "runs": plain(h.runs.get(key, ())),
            "pending": h.round_runs.get(key, []),
        }
    out["events"] = [
        (e.kind, e.key, e.at, e.since) for e in RegressionJournal(runner.config.journal.path).read_events()
    ]
    return out


def quiet_drop(after: int = 0) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """30 days at 25 MB/s, then 30% down (quiet, 3%): opens on its 3rd slow run; `after`
    runs of the same journaled after the mark."""
    rng = np.random.default_rng(47)
    slow = runs(5, 30, 17.5e6, 0.03, rng)
    judged_runs = runs(30, 0, 25e6, 0.03, rng) + slow
    return judged_runs, runs(2, 35, 17.5e6, 0.03, rng)[:after]


def recovered_drop(after: int = 0) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    rng = np.random.default_rng(45)
    judged_runs = runs(30, 0, 25e6, 0.03, rng) + runs(5, 30, 15e6, 0.03, rng) + runs(3, 35, 25e6, 0.03, rng)
    return judged_runs, runs(2, 38, 25e6, 0.03, rng)[:after]


def suspected(after: int = 0) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """A noisy (12%) 20% drop, stopped while suspect (not open); `after` more slow runs."""
    rng = np.random.default_rng(40)
    base = runs(30, 0, 25e6, 0.12, rng)
    slow = runs(10, 30, 20e6, 0.12, rng)
    history = History(judged_live_settings())
    for t, x in base:
        history.add(KEY, t, x)
    for i, (t, x) in enumerate(slow):
        history.add(KEY, t, x)
        track = history.tracks.get(KEY)
        if track is not None and track.suspect is not None and track.episode is None and i >= 1:
            return base + slow[: i + 1], slow[i + 1 : i + 1 + after]
    raise AssertionError("no suspicion in progress on this seed")


def judged_live_settings() -> Any:
    from bigbinf.history.regression import settings_of

    return settings_of(parse_config(CONFIG.replace("JOURNAL", "/nonexistent/j.jsonl"), "test"))


SCENARIOS = {
    "open regression": quiet_drop(),
    "open regression, runs after the mark": quiet_drop(after=4),
    "recovered": recovered_drop(),
    "recovered, runs after the mark": recovered_drop(after=3),
    "suspicion in progress": suspected(),
    "suspicion in progress, runs after the mark": suspected(after=3),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_restart_from_the_mark_is_the_full_rejudge(
    tmp_path: Path, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    judged_runs, after = SCENARIOS[name]
    live = judged_live(tmp_path / "live", judged_runs)
    if "suspicion" in name:
        track = live.history.tracks[KEY]
        assert track.suspect is not None and track.episode is None  # what the mark must carry
    journaled_unjudged(live, after)
    rejudged, rejudged_adds = restarted(as_rejudged(tmp_path / "live", tmp_path / "rejudged"))
    shutil.copytree(tmp_path / "live", tmp_path / "marked")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bigbinf.service.rounds"):
        marked, marked_adds = restarted(tmp_path / "marked")
    assert not said(caplog)
    assert marked_adds == len(after)  # only the runs journaled after the mark
    assert rejudged_adds >= 30  # the last runs a suspicion may span, judged again
    assert state(marked) == state(rejudged)
    if "open" in name:
        assert marked.history.tracks[KEY].episode is not None
    if name == "recovered":
        assert [e[0] for e in state(marked)["events"]] == ["opened", "recovered"]
    # And the next restart, from the mark this one wrote, again the same.
    again, adds = restarted(tmp_path / "marked")
    assert adds == 0 and state(again)["events"] == state(marked)["events"]


def test_the_mark_carries_a_rounds_pending_repetitions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """schedule.rounds: 3, stopped after 2 of a round's 3 runs: the mark keeps them
    pending, so the round's third run, journaled after it, joins them (one observation),
    as it did on an exporter that ran on (the full re-judge cuts that round in two: its
    window of runs is not counted in rounds)."""
    monkeypatch.setattr(f"{__name__}.CONFIG", CONFIG + "schedule: {interval: 6h, rounds: 3}\n")
    rng = np.random.default_rng(9)
    rounds_ = [
        (t + r * 90, x * math.exp(rng.normal(0, 0.02))) for t, x in runs(30, 0, 25e6, 0.03, rng) for r in range(3)
    ]
    other = steady_other(rounds_[:-1])
    live = judged_live(tmp_path / "live", rounds_[:-1], other)
    assert len(live.history.round_runs[KEY]) == 2
    journaled_unjudged(live, rounds_[-1:])
    marked, adds = restarted(tmp_path / "live")
    assert adds == 1
    ran_on = judged_live(tmp_path / "ran-on", rounds_, other)
    for key in list(ran_on.history.tests):
        ran_on.history.step(key)  # as every restart does
    assert state(marked) == state(ran_on)
    ts = state(marked)[str(KEY)]["runs"][0]
    assert ts[-1] == rounds_[-3][0] and len(ts) == len(set(ts))  # the round, at its first run's start


Rejudged = tuple[Path, dict[str, Any], int]


@pytest.fixture(scope="module")
def suspected_rejudged(tmp_path_factory: pytest.TempPathFactory) -> Rejudged:
    """An exporter stopped during a suspicion (its directory, never written by a test:
    each copies it), and the full re-judge's state of it and how many runs that judged
    again.  The same for every test that starts from it (fixed runs and seeds), so made
    once for the module: 18 tests made it each."""
    base = tmp_path_factory.mktemp("suspected")
    judged_runs, _ = suspected()
    judged_live(base / "live", judged_runs)
    rejudged, adds = restarted(as_rejudged(base / "live", base / "rejudged"))
    return base / "live", state(rejudged), adds


def hostile(mark: Path) -> dict[str, str]:
    good = json.loads(mark.read_text())
    series = good["series"][0]
    return {
        "garbage": "\x00\xff not json at all",
        "torn": mark.read_text()[: len(mark.read_text()) // 2],
        "empty": "",
        "a list": "[]",
        "an older version": json.dumps({"judged_through": good["judged_through"]}),
        "a later version": json.dumps({**good, "version": 3}),
        "version a string": json.dumps({**good, "version": "2"}),
        "series not a list": json.dumps({**good, "series": {"a": 1}}),
        "a mark beyond the journal": json.dumps({**good, "series": [{**series, "through": series["through"] + 3600}]}),
        "a huge mark": json.dumps({**good, "series": [{**series, "through": 1e308}]}),
        "a huge pending count": json.dumps({**good, "series": [{**series, "pending": 10**30}]}),
        "a mark of the wrong type": json.dumps({**good, "series": [{**series, "through": "yesterday"}]}),
        "a suspicion of the wrong type": json.dumps({**good, "series": [{**series, "suspect": True}]}),
        "a digest of the wrong type": json.dumps({**good, "series": [{**series, "tail": 12}]}),
        "an event not a list": json.dumps({**good, "series": [{**series, "last_event": "opened"}]}),
        "a series missing": json.dumps({**good, "series": good["series"][1:]}),
        "a number too long to read": '{"version": 2, "judged_through": ' + "9" * 5000 + ', "series": []}',
    }


@pytest.mark.parametrize(
    "case",
    [
        "garbage",
        "torn",
        "empty",
        "a list",
        "an older version",
        "a later version",
        "version a string",
        "series not a list",
        "a mark beyond the journal",
        "a huge mark",
        "a huge pending count",
        "a mark of the wrong type",
        "a suspicion of the wrong type",
        "a digest of the wrong type",
        "an event not a list",
        "a series missing",
        "a number too long to read",
    ],
)
def test_a_mark_it_cannot_trust_falls_back_to_the_full_rejudge_and_says_so(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture, suspected_rejudged: Rejudged
) -> None:
    live, rejudged_state, rejudged_adds = suspected_rejudged
    shutil.copytree(live, tmp_path / "hostile")
    mark = judged_path(tmp_path / "hostile" / "j.jsonl")
    mark.write_text(hostile(mark)[case])
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bigbinf.service.rounds"):
        fallen_back, adds = restarted(tmp_path / "hostile")
    lines = said(caplog)
    assert len(lines) == 1 and lines[0].startswith(f"{mark}: ")
    assert adds == rejudged_adds
    assert state(fallen_back) == rejudged_state
    # It wrote a good mark: the next restart trusts it.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bigbinf.service.rounds"):
        _, adds = restarted(tmp_path / "hostile")
    assert adds == 0 and not said(caplog)


def test_a_missing_mark_is_the_full_rejudge(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, suspected_rejudged: Rejudged
) -> None:
    live, rejudged_state, _ = suspected_rejudged
    shutil.copytree(live, tmp_path / "missing")
    judged_path(tmp_path / "missing" / "j.jsonl").unlink()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bigbinf.service.rounds"):
        missing, _ = restarted(tmp_path / "missing")
    lines = said(caplog)
    assert len(lines) == 1 and "missing" in lines[0]
    assert state(missing) == rejudged_state


def blindly(
    history: History, key: Any, mark: judged.SeriesMark | None, runs: list[tuple[float, float]], last_event: Any
) -> tuple[int, str]:
    """A mark trusted without its checks: the series' runs up to it loaded with its state."""
    assert mark is not None
    cut = int(np.searchsorted([t for t, _ in runs], mark.through, side="right"))
    judged.restore_carried(history, key, mark)
    history.load(key, runs[:cut])
    return cut, ""


def test_a_stale_mark_is_not_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mark taken during a suspicion, then the results' journal replaced (a copy from
    elsewhere, a backup): its last weeks differ, and end in a 50% drop no exporter here
    judged.  Trusted, the mark would take those runs as judged: the drop opens only on the
    restart's one step, late and from the wrong run; checked, its runs are not the mark's,
    the restart judges again and opens it since its first slow run, on the 3rd."""
    judged_runs, _ = suspected()
    judged_live(tmp_path / "before", judged_runs)
    stale = judged_path(tmp_path / "before" / "j.jsonl").read_bytes()
    rng = np.random.default_rng(11)
    replaced = [(t + 300, 25e6 * math.exp(rng.normal(0, 0.03))) for t, _ in judged_runs[-30:]]
    slow = [(t, x * 0.5) for t, x in replaced[-6:]]
    directory = tmp_path / "live"
    directory.mkdir()
    writer = runner_of(directory)
    journaled_unjudged(writer, judged_runs[:-30] + replaced[:-6] + slow)
    regressions_path(writer.config.journal.path).touch()  # a start had been here: no events
    judged_path(writer.config.journal.path).write_bytes(stale)
    shutil.copytree(directory, tmp_path / "blind")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bigbinf.service.rounds"):
        checked, _ = restarted(directory)
    lines = said(caplog)
    assert len(lines) == 1 and "not a run of the journal" in lines[0]
    events = state(checked)["events"]
    assert [(kind, since) for kind, _, _, since in events] == [("opened", slow[0][0])] and events[0][2] == slow[2][0]
    monkeypatch.setattr(judged, "resume_series", blindly)
    blind, _ = restarted(tmp_path / "blind")
    assert state(blind)["events"] != events  # opened late, or not at all


def test_an_event_journaled_after_the_mark_is_not_decided_twice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between journaling a regression's opening and writing the mark: the mark
    still carries the suspicion that opened it.  Trusted, the series would keep that
    suspicion under its open regression (a span left out of its baseline once it
    recovers); checked, the restart judges again, as the full re-judge does."""
    judged_runs, _ = quiet_drop()
    live_dir = tmp_path / "live"
    # The mark as it was one run before the opening: the exporter run up to there.
    probe = judged_live(tmp_path / "probe", judged_runs)
    opened_at = RegressionJournal(probe.config.journal.path).read_events()[0].at
    before = [r for r in judged_runs if r[0] < opened_at]
    judged_live(live_dir, before)
    stale = judged_path(live_dir / "j.jsonl").read_bytes()
    assert json.loads(stale)["series"][0]["suspect"] is not None
    shutil.rmtree(live_dir)
    judged_live(live_dir, judged_runs)
    rejudged, _ = restarted(as_rejudged(live_dir, tmp_path / "rejudged"))
    judged_path(live_dir / "j.jsonl").write_bytes(stale)
    shutil.copytree(live_dir, tmp_path / "blind")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bigbinf.service.rounds"):
        checked, _ = restarted(live_dir)
    lines = said(caplog)
    assert len(lines) == 1 and "last regression event" in lines[0]
    assert state(checked) == state(rejudged)
    assert checked.history.tracks[KEY].episode is not None and checked.history.tracks[KEY].suspect is None

    def no_event_check(history: History, key: Any, mark: Any, runs: Any, last_event: Any) -> tuple[int, str]:
        return real(history, key, mark, runs, mark.last_event if mark is not None else None)

    real = judged.resume_series
    monkeypatch.setattr(judged, "resume_series", no_event_check)
    blind, _ = restarted(tmp_path / "blind")
    assert blind.history.tracks[KEY].suspect is not None  # the suspicion kept under the open regression
    assert state(blind) != state(rejudged)


def test_the_mark_is_replaced_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Written through a temporary file: a write that fails (a full disk) leaves the old
    mark whole, and says so."""
    judged_runs, _ = quiet_drop()
    live = judged_live(tmp_path / "live", judged_runs[:100])
    path = judged_path(live.config.journal.path)
    old = path.read_bytes()
    assert json.loads(old)["version"] == judged.VERSION

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(judged.os, "fsync", full)
    live.publish(result(KEY, judged_runs[100][0], judged_runs[100][1]))
    live.write_mark()
    assert path.read_bytes() == old
    marks, why = JudgedMark(live.config.journal.path).read(1)
    assert marks is not None and why == ""


# A kill anywhere (issue 44): an exporter's start (service/restore.py restore, as serve and
# once restore) and its results published one by one (RoundRunner.publish: journaled,
# judged, the mark written at each round's end and at once after an event), SIGKILLed.
KILLED = r"""
import json, logging, math, os, sys
from pathlib import Path
from bigbinf.config import parse_config
from bigbinf.history.regression import History
from bigbinf.service.collector import ExporterState
from bigbinf.service.restore import restore
from bigbinf.service.rounds import RoundRunner, no_lab
from tests.unit.test_judged_mark import CONFIG, kill_runs, result

directory, acks = Path(sys.argv[1]), sys.argv[2]
refused = []

class Said(logging.Handler):
    def emit(self, record):
        if "judged again" in record.getMessage():
            refused.append(record.getMessage())

logging.getLogger("bigbinf.service.rounds").addHandler(Said())
logging.getLogger("bigbinf.service.rounds").setLevel(logging.INFO)
added = 0
real_add = History.add

def counting(self, key, t, x):
    global added
    added += 1
    return real_add(self, key, t, x)

History.add = counting
config = parse_config(CONFIG.replace("JOURNAL", str(directory / "j.jsonl")), "test")
runner = RoundRunner(config, ExporterState())
restore(runner.state, runner, config, no_lab)
History.add = real_add
journaled = {(r.key, r.start_timestamp) for r in runner.journal.read()}
ack = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
os.write(ack, (json.dumps({"added": added, "refused": refused}) + "\n").encode())
rounds = kill_runs()
for n, round_ in enumerate(rounds):
    for key, t, x in round_:
        if (key, t) not in journaled:
            runner.publish(result(key, t, x))
            os.write(ack, f"{n}\n".encode())
    runner.round_judged()
runner.write_mark()
os.write(ack, b"done\n")
"""


def kill_runs() -> list[list[tuple[SeriesKey, float, float]]]:
    """Rounds of both series, 4 a day for 16 days: KEY 10 days at 25 MB/s, 3 at 70% (it
    opens), then back (it recovers); OTHER steady."""
    rng = np.random.default_rng(44)
    key_runs = runs(10, 0, 25e6, 0.03, rng) + runs(3, 10, 17.5e6, 0.03, rng) + runs(3, 13, 25e6, 0.03, rng)
    other = steady_other(key_runs)
    return [[(KEY, t, x), (OTHER, o[0], o[1])] for (t, x), o in zip(key_runs, other, strict=True)]


def start_of(directory: Path) -> RoundRunner:
    """An exporter's start on `directory` (restore, as serve's and once's)."""
    from bigbinf.service.restore import restore
    from bigbinf.service.rounds import no_lab

    runner = runner_of(directory)
    restore(runner.state, runner, runner.config, no_lab)
    return runner


def after_the_mark(directory: Path) -> int | None:
    """How many journaled runs lie after their series' judged mark (read as JSON, the
    results with the journal's plain reader); None: no mark."""
    from bigbinf.journal.store import read

    path = judged_path(directory / "j.jsonl")
    if not path.exists():
        return None
    through = {SeriesKey(*(s[n] for n in judged.NAMES)): s["through"] for s in json.loads(path.read_text())["series"]}
    return sum(1 for r in read(directory / "j.jsonl") if r.start_timestamp > through.get(r.key, -math.inf))


def test_a_kill_anywhere_replays_the_runs_after_the_mark_and_ends_as_an_exporter_never_killed(
    tmp_path: Path,
) -> None:
    """SIGKILLed at random moments (after 0-16 results, up to 20 ms into the next), again
    and again, while it journals and judges: each start that trusts the mark judges
    exactly the runs journaled after each series' mark (none twice, none skipped), never
    more than a round's (the mark is written per round), and the end (a last start on
    each) is the state of an exporter that ran throughout: the same tracks, tests, runs
    and regressions' events, each event once."""
    import os
    import random
    import signal
    import subprocess
    import sys
    import time

    rounds = kill_runs()
    never = tmp_path / "never"
    never.mkdir()
    ran = start_of(never)
    for round_ in rounds:
        for key, t, x in round_:
            ran.publish(result(key, t, x))
        ran.round_judged()
    ran.write_mark()
    truth = state(start_of(never))
    assert [e[0] for e in truth["events"]] == ["opened", "recovered"]

    killed = tmp_path / "killed"
    killed.mkdir()
    rng = random.Random(44)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": f"{root / 'exporter'}:{root}"}
    kills, trusted, refused, done = 0, 0, 0, False
    for attempt in range(80):
        expected = after_the_mark(killed)
        acks = tmp_path / f"acks{attempt}"
        child = subprocess.Popen([sys.executable, "-c", KILLED, str(killed), str(acks)], env=env, cwd=root)
        try:
            deadline = time.monotonic() + 60
            while not (acks.exists() and acks.read_text().endswith("\n")):
                assert child.poll() is None and time.monotonic() < deadline, "the start did not end"
                time.sleep(0.01)
            # Killed after a random number of results published (whatever the host's
            # pace), and a random moment into the next: in its journaling, judging, marking.
            target = rng.randint(0, 16)
            while child.poll() is None and len(acks.read_text().splitlines()) <= target:
                time.sleep(0.001)
            time.sleep(rng.uniform(0.0, 0.02))
            done = child.poll() == 0
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
        lines = acks.read_text().splitlines()
        started = json.loads(lines[0])
        if started["refused"]:
            refused += 1  # killed between an event journaled and the mark written: the full re-judge
        elif expected is not None:
            trusted += 1
            judged_runs = started["added"]
            assert judged_runs == expected, f"start {attempt}: judged {judged_runs}, {expected} after the mark"
            assert expected <= len(rounds[0]), f"start {attempt}: {expected} runs after the mark, more than a round"
        done = done or lines[-1] == "done"
        if done:
            break
        kills += 1
    print(f"{kills} kills: {trusted} starts trusted the mark, {refused} judged again")
    assert done and kills >= 5
    assert trusted >= kills // 2, (trusted, refused, kills)
    assert state(start_of(killed)) == truth


def test_a_mark_refused_series_by_series_is_judged_again_after_metrics_is_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A mark that reads whole and names every series (few runs after it: the start
    restores before /metrics) but fails a series' checks (its runs not those it judged):
    the full re-judge, of more than restore.REPLAY_INLINE runs (33 of each of 1,000 series:
    tens of CPU-s), is done after /metrics is up, with bigbinf_journal_loading 1 and the
    journaled states published meanwhile, not inline before it; said once; then the same
    states as the inline fallback (`once`'s, which has no /metrics to wait for)."""
    from bigbinf import metrics as M
    from bigbinf.service import restore as restore_module
    from bigbinf.service import server
    from tests.unit.test_regression_state import _sample

    judged_runs, _ = quiet_drop()
    directory = tmp_path / "live"
    live = judged_live(directory, judged_runs)
    assert live.history.tracks[KEY].episode is not None
    path = judged_path(live.config.journal.path)
    record = json.loads(path.read_text())
    record["series"][-1]["tail"] = "0" * 24  # that series' runs are not those it judged
    path.write_text(json.dumps(record))
    shutil.copytree(directory, tmp_path / "inline")
    config_file = tmp_path / "c.yaml"
    config_file.write_text(CONFIG.replace("JOURNAL", str(directory / "j.jsonl")))
    monkeypatch.setattr(restore_module, "REPLAY_INLINE", 10)  # 2 series' 33 runs are more
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="bigbinf.service.rounds"):
        exporter = server.Exporter(config_file, "127.0.0.1:0")
    try:
        assert exporter.loading is not None and "judge again" in exporter.loading
        assert exporter.state.journal_loading and not exporter.loaded.is_set()
        assert exporter.runner.history.runs == {}  # nothing judged before /metrics
        assert _sample(exporter.state, M.REGRESSED.name) == 1.0  # the journaled state, published
        assert _sample(exporter.state, M.REGRESSION_RATIO.name) is None  # no test until the re-judge
        exporter.runner.stopping.set()  # the background read alone, no rounds after it
        exporter._load_journal()
        assert not exporter.state.journal_loading and exporter.loaded.is_set()
        assert _sample(exporter.state, M.REGRESSION_RATIO.name) == pytest.approx(0.7, abs=0.05)
        assert len(said(caplog)) == 1  # the mark's refusal, said once
        deferred_state = state(exporter.runner)
    finally:
        exporter.stop()
    inline, _ = restarted(tmp_path / "inline")
    assert deferred_state == state(inline)
