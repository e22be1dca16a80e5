"""The journal in day segments and its checkpoint (issue 37): rotation by the records'
days, ranged reads that open only their segments (a segment outside the range is made
unreadable and the read still succeeds), an old single-file journal read as it is and
then split, retention, a sealing cut short read exactly once, and a checkpoint whose
restore equals what the whole journal gives, caught up, rebuilt when missing, damaged or
of another version."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from bigbinf.history.regression import BAD_DAY_BASELINES, History, RegressionSettings
from bigbinf.journal import checkpoint, store
from bigbinf.journal.store import DAMAGED, DAY, Journal, _ident, damaged, leftovers, read, segments
from bigbinf.result import Result
from bigbinf.runs import RecentRuns, move_runs
from bigbinf.service.collector import ExporterState
from bigbinf.service.sweeps import latest_bests

T0 = 1_760_000_000.0  # 2025-10-09, a Thursday


def result(t: float, protocol: str = "scp", **kw: object) -> Result:
    fields: dict[str, object] = {
        "outcome": "ok",
        "duration_seconds": 2.0 + (t % 7),
        "file_bytes": 5 * 2**20,
        "files": 1,
        **kw,
    }
    return Result(protocol, "uwc", "5MiB", "download", t, **fields)  # type: ignore[arg-type]


def starts(records: object) -> list[float]:
    return [r.start_timestamp for r in records]  # type: ignore[attr-defined]


def test_a_later_days_record_rotates_the_live_file_into_a_sealed_day_segment(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    times = [T0 + h * 3600 for h in range(0, 72, 6)]  # three days, four a day
    for t in times:
        journal.append(result(t))
    days = sorted({int(t // DAY) for t in times})
    closed = segments(path)
    # Every day but the last sealed (gzip), the last day still the live file.
    assert [int(s.first // DAY) for s in closed] == days[:-1] and all(s.sealed for s in closed)
    assert {int(t // DAY) for t in starts(read(path))} == set(days) and starts(read(path)) == times
    live = [json.loads(line)["start_timestamp"] for line in path.read_text().splitlines()]
    assert live == [t for t in times if int(t // DAY) == days[-1]]
    assert not leftovers(path) and not [p for p in tmp_path.iterdir() if p.name.endswith(".jsonl")][1:]


def test_a_ranged_read_opens_only_the_segments_it_needs(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    times = [T0 + h * 3600 for h in range(0, 96, 4)]
    for t in times:
        journal.append(result(t))
    first, second, *_ = segments(path)
    second.path.write_bytes(b"not gzip at all")  # a read that opened it would fail
    since = first.first
    until = second.first  # [since, until): the first day only
    assert starts(read(path, since, until)) == [t for t in times if since <= t < until]
    later = segments(path)[2].first
    assert starts(read(path, since=later)) == [t for t in times if t >= later]
    # The whole journal does open it: read without it (it is moved aside, never raised).
    assert starts(read(path)) == [t for t in times if not second.first <= t <= second.last]
    assert [p.name for p in damaged(path)] == [next(n for n in os.listdir(tmp_path) if ".damaged-" in n)]
    assert not second.path.exists()  # nothing of it was readable: no part left for it


def test_an_old_single_file_journal_is_read_as_it_is_then_split_by_day(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    times = [T0 + h * 3600 for h in range(0, 24 * 40, 5)]  # 40 days in one file, as before
    lines = [json.dumps(result(t).to_json(), sort_keys=True, separators=(",", ":")) for t in times]
    lines.insert(7, '{"torn')  # damaged by hand: kept, reported where it then lies
    path.write_text("\n".join(lines) + "\n")
    before = starts(read(path))
    assert before == times
    assert Journal(path).rotate_now()
    assert path.stat().st_size == 0  # all of it sealed; the live file is there, empty, for the tools that check it
    closed = segments(path)
    assert len(closed) == len({int(t // DAY) for t in times}) and all(s.sealed for s in closed)
    skipped: list = []
    assert starts(read(path, skipped=skipped)) == times
    # The torn line went with the line before it (day 2): a torn line in a sealed part is
    # damage (issue 44), so that part is moved aside and its readable rest kept, once.
    assert skipped == [] and [p.name.split(DAMAGED)[0] for p in damaged(path)] == [closed[1].path.name]
    assert starts(read(path, skipped=skipped)) == times and skipped == []
    Journal(path).append(result(times[-1] + 60))
    assert starts(read(path))[-1] == times[-1] + 60 and path.exists()


def test_retention_removes_whole_old_segments_but_never_imported_dumps(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, retention=10 * DAY)
    dumps = [T0 - 3650 * DAY + i * 60 for i in range(3)]  # 2015's, imported
    for t in dumps:
        journal.append(result(t, source="import"))
    times = [T0 + d * DAY for d in range(30)]
    for t in times:
        journal.append(result(t))
    kept = starts(read(path))
    newest = times[-1]
    assert [t for t in kept if t not in dumps] == [t for t in times if t >= newest - 11 * DAY]
    assert [t for t in kept if t in dumps] == dumps  # .import parts: kept whatever their age
    assert any(s.imported for s in segments(path))


def test_a_sealing_cut_short_is_read_exactly_once_and_finished_later(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    times = [T0 + h * 3600 for h in range(0, 72, 3)]
    path.write_text("".join(json.dumps(result(t).to_json()) + "\n" for t in times))
    token = "20251009T085320Z-20251012T055320Z"
    plain = path.with_name(f"journal.{token}.jsonl")
    path.rename(plain)  # rotated; then killed while sealing: one part written, a temporary file
    part = path.with_name(f"journal.{token}.{_ident(token)}.jsonl.gz")
    part.write_bytes(b"")  # even a bad part of it is not read while the plain one exists
    temporary = path.with_name(f".journal.{token}.{_ident(token)}.jsonl.gz.abcd")
    temporary.write_bytes(b"\x1f\x8b half")
    assert starts(read(path)) == times
    assert leftovers(path) == [temporary]
    Journal(path).rotate_now()  # the next start (or append) finishes it
    assert not plain.exists() and not temporary.exists() and all(s.sealed for s in segments(path))
    assert starts(read(path)) == times


# ---------------------------------------------------------------------------------------
# The checkpoint


def mixed_journal(path: Path) -> list[Result]:
    """Forty days of two series (ok and failed), sweeps' runs, imported dumps."""
    journal = Journal(path)
    written = []
    for i in range(40 * 8):
        t = T0 + i * 3 * 3600
        for protocol in ("scp", "http"):
            outcome = "failed" if i % 11 == 0 else "ok"
            written.append(result(t + (protocol == "http"), protocol, outcome=outcome))
        if i % 40 == 5:
            sweep = f"sweep-{i}"
            for rep in range(3):
                written.append(
                    result(
                        t + 100 + rep,
                        "http",
                        source="sweep",
                        sweep=sweep,
                        sweep_name="buffers",
                        sweep_label=f"buffer {rep}",
                        sweep_setting={"tcp_buffer_max": f"{rep + 1}MiB"},
                    )
                )
        if i == 100:
            written.append(result(T0 - 3000 * DAY, source="import"))
    for r in written:
        journal.append(r)
    return written


def test_restoring_from_the_checkpoint_equals_restoring_from_the_whole_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    written = mixed_journal(path)
    everything = list(read(path))
    assert Counter(starts(everything)) == Counter(starts(written))
    fold = checkpoint.of(Journal(path))
    # Each series' last result and last success, as ExporterState.restore makes them.
    whole, kept = ExporterState(), ExporterState()
    whole.restore(r for r in everything if r.source == "exporter")
    kept.restore(fold.latest_results())
    assert whole.latest == kept.latest and whole.last_success == kept.last_success
    # Each sweep's last run and its verdict.
    assert latest_bests(everything, ["buffers"]) == latest_bests(fold.sweep_results(), ["buffers"])
    # The regression test's history.
    settings = RegressionSettings()
    full, restored = History(settings), History(settings)
    runs: dict = {}
    for r in everything:
        if r.source == "exporter" and r.outcome == "ok":
            runs.setdefault(r.key, []).append((r.start_timestamp, r.throughput_bytes_per_second))
    for key, series in runs.items():
        full.load(key, series)
    # As service/restore.py reads them: the bad days' baseline reaches BAD_DAY_BASELINES back.
    weeks = settings.baseline_weeks * BAD_DAY_BASELINES
    for key, series in fold.history_runs(settings.recent_runs, weeks).items():
        restored.load(key, series)
    assert full.runs.keys() == restored.runs.keys()
    for key in full.runs:
        assert all((a == b).all() for a, b in zip(full.runs[key], restored.runs[key], strict=True))
    # The move model's runs.
    moves = RecentRuns()
    for r in everything:
        for run in move_runs([r], r.remote, "download"):  # those the model leaves out too, with why
            moves.add(r.remote, run)
    assert {k: list(v) for k, v in moves.cells["uwc"].items()} == {
        k: list(v) for k, v in fold.move_runs("download").cells["uwc"].items()
    }
    # plan-move's one remote from the checkpoint as saved (its blob alone decoded).
    saved = checkpoint.ResultsFold(fold.journal)
    assert saved.load()
    assert sorted(saved.move_basis("download", "uwc", 1e9), key=repr) == sorted(moves.basis("uwc", 1e9), key=repr)
    # The pages' last transfers: the last RECENT_KEEP, in journal order.
    recent = [r for r in everything if r.source in ("exporter", "sweep")][-checkpoint.RECENT_KEEP :]
    assert [r for r in fold.recent_results() if r in recent] == recent
    # And all of it the same from the file, as the next start loads it.
    loaded = checkpoint.of(Journal(path))
    assert loaded is not fold and loaded.saved_inode == os.stat(checkpoint.checkpoint_path(path)).st_ino
    assert loaded.latest_results() == fold.latest_results() and loaded.sweep_results() == fold.sweep_results()
    assert loaded.recent_results(100) == fold.recent_results(100)
    assert loaded.history_runs(3, 4.0) == fold.history_runs(3, 4.0)
    for direction in ("download", "upload"):
        assert {r: {c: list(d) for c, d in cells.items()} for r, cells in loaded.moves[direction].cells.items()} == {
            r: {c: list(d) for c, d in cells.items()} for r, cells in fold.moves[direction].cells.items()
        }


def test_the_checkpoint_catches_up_and_is_rebuilt_when_missing_damaged_or_of_another_version(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    for h in range(0, 48, 6):
        journal.append(result(T0 + h * 3600))
    fold = checkpoint.of(journal)  # attached: the journal's appends fold into it
    saved = checkpoint.checkpoint_path(path)
    assert saved.exists()
    other = Journal(path)  # another process's (once, import): appends the exporter did not see
    other.append(result(T0 + 49 * 3600))
    other.append(result(T0 + 80 * 3600))  # a later day: rotates
    journal.append(result(T0 + 81 * 3600))
    key = json.dumps(["scp", "uwc", "5MiB", "download"])
    assert fold.latest[key][1]["start_timestamp"] == T0 + 81 * 3600
    assert len(fold.series(key)) == 11

    def restored() -> tuple[float, int]:
        f = checkpoint.of(Journal(path))
        return f.latest[key][1]["start_timestamp"], len(f.series(key))

    assert restored() == (T0 + 81 * 3600, 11)
    saved.unlink()
    assert restored() == (T0 + 81 * 3600, 11) and saved.exists()
    saved.write_text("{damaged")
    assert restored() == (T0 + 81 * 3600, 11)
    data = json.loads(saved.read_text())
    data["version"] = checkpoint.VERSION + 1
    data["latest"] = []
    saved.write_text(json.dumps(data))
    assert restored() == (T0 + 81 * 3600, 11)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary file left


# ---------------------------------------------------------------------------------------
# Configuration and the command


def test_journal_retention_is_a_duration_of_at_least_a_day_or_null(tmp_path: Path) -> None:
    import yaml

    from bigbinf.config import ConfigError, load_config
    from tests.support.mesh import write_mesh_config

    config = write_mesh_config(tmp_path, 1, 1, 1)
    raw = yaml.safe_load(config.read_text())
    assert load_config(config).journal.retention == 400 * DAY  # the documented default
    for value, expected in (("90d", 90 * DAY), (None, None)):
        config.write_text(yaml.safe_dump({**raw, "journal": {**raw["journal"], "retention": value}}))
        assert load_config(config).journal.retention == expected
    config.write_text(yaml.safe_dump({**raw, "journal": {**raw["journal"], "retention": "12h"}}))
    with pytest.raises(ConfigError, match="retention"):
        load_config(config)


def test_journal_compact_splits_an_old_journal_and_writes_its_checkpoint(tmp_path: Path) -> None:
    from bigbinf import cli
    from tests.support.mesh import write_mesh_config

    config = write_mesh_config(tmp_path, 1, 1, 1)
    path = tmp_path / "journal.jsonl"
    times = [T0 + h * 3600 for h in range(0, 24 * 5, 2)]
    path.write_text("".join(json.dumps(result(t).to_json()) + "\n" for t in times))
    assert cli.main(["journal-compact", "--config.file", str(config)]) == 0
    assert len(segments(path)) == len({int(t // DAY) for t in times}) and checkpoint.checkpoint_path(path).exists()
    assert starts(read(path)) == times and path.stat().st_size == 0
    out = tmp_path / "report"
    assert cli.main(["report", "--journal", str(path), "--no-figures", "--out", str(out)]) == 0
    assert json.loads((out / "report.json").read_text())["used_count"] == len(times)


def test_a_crashs_zero_filled_tail_is_sealed_as_nothing(tmp_path: Path) -> None:
    # A crash on a file system that extends a file before its data reaches the disk leaves
    # the live file ending in NUL bytes: sealed with it, they were a 5th "result", and later
    # reads called the part damaged with 1 of 5 lost (breaker44: 1 of 301, 0 really lost).
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    times = [T0 + h * 3600 for h in range(0, 24, 6)]  # one day
    for t in times:
        journal.append(result(t))
    with open(path, "ab") as f:
        f.write(b"\0" * 4096)
    Journal(path).append(result(T0 + 2 * DAY))  # a later day: the live file is sealed
    sealed = [s.path.name for s in segments(path) if s.sealed]
    assert starts(read(path)) == [*times, T0 + 2 * DAY]
    counts = store.sealed_counts(path)
    assert sealed and sum(counts[name] for name in sealed) == len(times), counts
    assert store.check(path) == [] and damaged(path) == []


def test_a_take_back_across_days_writes_in_runs_and_still_rotates_by_day(tmp_path: Path) -> None:
    # A stop's spill of three days of results, taken back in runs of one fsync each
    # (store.WRITE_RUN): each day still its own sealed part, each result once, in order.
    path = tmp_path / "journal.jsonl"
    times = [T0 + h * 1800 for h in range(0, 3 * 48)]  # three days, every 30 minutes
    place = store.spill_places(path)[0]
    place.write_bytes(b"".join(json.dumps(result(t).to_json()).encode() + b"\n" for t in times))
    place.chmod(0o600)
    assert Journal(path).take_back() == len(times) and not place.exists()
    assert starts(read(path)) == times
    for s in segments(path):
        assert s.sealed and int(s.first // DAY) == int(s.last // DAY), s
    live = [json.loads(line)["start_timestamp"] for line in path.read_text().splitlines()]
    assert {int(t // DAY) for t in live} == {int(times[-1] // DAY)}
