"""The first start on an old single-file journal, through the real exporter (issue 44):
/metrics is up before the journal is read (its split into day segments and the
checkpoint's rebuild run after, bigbinf_journal_loading 1 meanwhile), a kill during that
work and a restart read every result exactly once, a torn line inside a sealed day
part is damage (moved aside, its readable rest kept, counted), and kills of `serve` and
its guardian while it quarantines a damaged part lose and double nothing.

Independent truths: the results written (each carries its index in `error`), the journal
read back by id (with the product's reader, or with zlib and JSON alone), a checkpoint
rebuilt from scratch in this process, /metrics.  The
1 M-result figures are benchmarks/bench_journal.py --upgrade's.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import signal
import subprocess
import time
import zlib
from collections import Counter
from pathlib import Path

import pytest

from bigbinf.journal import checkpoint
from bigbinf.journal.store import DAMAGED, Journal, damaged, leftovers, read, segments
from bigbinf.result import Result
from bigbinf.service.restore import LOAD_INLINE_BYTES

from ..support.exporter import ROOT, ExporterProcess
from ..support.prometheus import PrometheusServer
from .test_journal_disks import PUBLISHED, metric, site, wait

pytestmark = pytest.mark.lab

HALF_HOUR = 1800.0
LAST_START = re.compile(r'bigbinf_last_transfer_start_timestamp_seconds\{[^}]*protocol="copy"[^}]*\} (\S+)')


def _parses(line: str) -> bool:
    try:
        json.loads(line)
    except ValueError:
        return False
    return True


def single_file(journal: Path, n: int) -> list[float]:
    """An old single-file journal of `n` results of the site's one series, half an hour
    apart and ending an hour ago, ~1.7 KB a line (what a year of a mesh's lines weighs);
    each one's index in its `error`.  Returns their starts."""
    t0 = time.time() - 3600 - n * HALF_HOUR
    template = Result(
        "copy", "here", "f1m", "download", 0.0, "ok",
        duration_seconds=0.05, file_bytes=1 << 20, files=1, verified=True, error="",
    ).to_json()  # fmt: skip
    template.pop("start_utc", None)
    starts = [t0 + i * HALF_HOUR for i in range(n)]
    journal.parent.mkdir(parents=True, exist_ok=True)
    with open(journal, "w") as f:
        for i, t in enumerate(starts):
            line = {**template, "start_timestamp": t, "error": f"{i:06d}" + "x" * 1500}
            f.write(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n")
    return starts


def ids(journal: Path) -> Counter[str]:
    return Counter(r.error[:6] for r in read(journal))


def last_start(exporter: ExporterProcess) -> float:
    m = LAST_START.search(exporter.metrics())
    return float(m[1]) if m else float("nan")


def same_as_a_rebuild(journal: Path) -> None:
    """The checkpoint on disk holds what one built from scratch from the journal holds."""
    kept = checkpoint.ResultsFold(Journal(journal))
    assert kept.load()
    kept.catch_up()
    rebuilt = checkpoint.ResultsFold(Journal(journal))
    rebuilt.catch_up()
    assert [r.to_json() for r in kept.latest_results()] == [r.to_json() for r in rebuilt.latest_results()]
    assert kept.history_runs(20, 13) == rebuilt.history_runs(20, 13)


def test_the_first_start_on_a_single_file_serves_metrics_then_reads_the_journal(tmp_path: Path) -> None:
    journal = tmp_path / "j" / "journal.jsonl"
    starts = single_file(journal, 12_000)  # 20 MB: past what a start reads before /metrics
    assert journal.stat().st_size > 2 * LOAD_INLINE_BYTES
    log = tmp_path / "exporter.log"
    config = site(tmp_path, journal, interval="1h")
    with ExporterProcess(config, log) as exporter:
        # Up before the journal is read: loading, the series not restored yet.
        assert metric(exporter, "bigbinf_journal_loading") == 1
        assert last_start(exporter) != starts[-1]
        wait("the journal read", lambda: metric(exporter, "bigbinf_journal_loading") == 0, 300)
        assert last_start(exporter) == starts[-1]
        assert "the journal is read after /metrics is up" in log.read_text()
    assert all(s.sealed for s in segments(journal)) and len(segments(journal)) > 200  # split by day
    assert ids(journal) == Counter(f"{i:06d}" for i in range(len(starts)))  # each once
    same_as_a_rebuild(journal)
    # A later start reads the checkpoint: restored before /metrics is up.
    with ExporterProcess(config, log) as exporter:
        assert metric(exporter, "bigbinf_journal_loading") == 0
        assert last_start(exporter) == starts[-1]


def phase(journal: Path) -> str:
    """Where the first start's background work stands, from the files: the old file being
    split (a plain segment there), or its day parts sealed and the checkpoint not yet saved."""
    closed = segments(journal)
    if any(not s.sealed for s in closed):
        return "split"
    if closed and not checkpoint.checkpoint_path(journal).exists():
        return "rebuild"
    return "other"


def test_no_round_runs_while_the_first_start_reads_the_history_and_the_first_is_judged_on_all_of_it(
    tmp_path: Path,
) -> None:
    """The first start on a single file (its split, checkpoint and first replay after
    /metrics is up), with rounds due every 2 s: no round runs, so no result is journaled
    or judged, while the history is still being read (the series' last transfer on
    /metrics stays the journal's, no round's result line is logged before "the journal is
    read"); the first rounds after are judged on the whole history: the regression test's
    baseline holds the file's runs at their times of day (4 weeks at a run every half
    hour: some 8 a day within the 2-hour window, 200 and more), not a history being read."""
    journal = tmp_path / "j" / "journal.jsonl"
    starts = single_file(journal, 12_000)
    assert journal.stat().st_size > 2 * LOAD_INLINE_BYTES
    log = tmp_path / "exporter.log"
    config = site(tmp_path, journal, interval="2s")
    with ExporterProcess(config, log) as exporter:
        assert metric(exporter, "bigbinf_journal_loading") == 1
        while metric(exporter, "bigbinf_journal_loading") == 1:
            seen = last_start(exporter)
            assert seen != seen or seen <= starts[-1], "a round's result while the history is read"
            time.sleep(0.2)
        wait("a round after the read", lambda: last_start(exporter) > starts[-1], 60)
        baseline = re.search(
            r'bigbinf_throughput_regression_baseline_runs\{[^}]*protocol="copy"[^}]*\} (\S+)', exporter.metrics()
        )
        assert baseline is not None and float(baseline[1]) >= 200, baseline
    text = log.read_text()
    read_at = text.index("the journal is read (")
    assert PUBLISHED.search(text) is not None and PUBLISHED.search(text[:read_at]) is None
    kept = Counter(r.error[:6] for r in read(journal) if r.start_timestamp <= starts[-1])
    assert kept == Counter(f"{i:06d}" for i in range(len(starts)))  # the file's results, each once


@pytest.mark.parametrize("kill_in", ["split", "rebuild"])
def test_a_kill_while_the_journal_is_read_after_metrics_loses_and_doubles_nothing(tmp_path: Path, kill_in: str) -> None:
    journal = tmp_path / "j" / "journal.jsonl"
    starts = single_file(journal, 12_000)
    log = tmp_path / "exporter.log"
    config = site(tmp_path, journal, interval="1h")
    with ExporterProcess(config, log) as exporter:
        # Polled often, every phase seen kept: a timeout says where the start stood.
        seen: list[tuple[float, str]] = []
        began = time.monotonic()

        def reached() -> bool:
            now = phase(journal)
            if not seen or seen[-1][1] != now:
                seen.append((round(time.monotonic() - began, 2), now))
            return now == kill_in

        try:
            PrometheusServer.wait_for(reached, timeout=120, interval=0.05, what=f"the {kill_in}")
        except TimeoutError as exc:
            tail = log.read_text()[-3000:]
            raise AssertionError(f"{exc}; phases seen (s after /metrics): {seen}; log:\n{tail}") from exc
        assert exporter.proc is not None
        os.kill(exporter.proc.pid, signal.SIGKILL)
        exporter.proc.wait()
    assert "the journal is read (" not in log.read_text()  # killed before it was done
    assert ids(journal) == Counter(f"{i:06d}" for i in range(len(starts)))  # readable, each once, mid-way
    with ExporterProcess(config, log) as exporter:
        assert metric(exporter, "bigbinf_journal_loading") == 1  # what is left is read after /metrics too
        wait("the journal read", lambda: metric(exporter, "bigbinf_journal_loading") == 0, 300)
        assert last_start(exporter) == starts[-1]
    assert all(s.sealed for s in segments(journal))
    assert ids(journal) == Counter(f"{i:06d}" for i in range(len(starts)))
    same_as_a_rebuild(journal)


def test_a_torn_line_inside_a_sealed_part_is_moved_aside_and_counted(tmp_path: Path) -> None:
    """A crash mid-append tore a line (no newline; the next append ends it): sealed with
    its day, it is damage in that part, found by the start that rebuilds the checkpoint."""
    journal = tmp_path / "j" / "journal.jsonl"
    starts = single_file(journal, 200)  # four days
    lines = journal.read_bytes().splitlines(keepends=True)
    torn_at = 100  # day 3
    lines[torn_at] = lines[torn_at][: len(lines[torn_at]) // 2] + b"\n"  # torn, ended by the next append
    journal.write_bytes(b"".join(lines))
    Journal(journal).rotate_now()  # sealed with it, no checkpoint yet
    checkpoint.checkpoint_path(journal).unlink(missing_ok=True)
    log = tmp_path / "exporter.log"
    config = site(tmp_path, journal, interval="1h")
    with ExporterProcess(config, log) as exporter:
        wait("the torn part counted", lambda: metric(exporter, "bigbinf_journal_damaged_segments") == 1, 60)
        assert last_start(exporter) == starts[-1]
    (aside,) = damaged(journal)
    text = log.read_text()
    said = re.findall(
        r"journal (\S+): damaged \(1 torn line\): moved aside to (\S+); (\d+) results kept in it, (.*)", text
    )
    assert len(said) == 1, text  # one line: the file, how much is lost
    (part, name, kept, lost) = said[0]
    assert aside.name == name and name.startswith(Path(part).name + DAMAGED)
    assert "1 unreadable lines" in lost and "about 1 results" in lost
    want = Counter(f"{i:06d}" for i in range(len(starts)) if i != torn_at)
    assert ids(journal) == want  # the rest of its day kept, once; only the torn one lost
    # What the part held, less its torn line (a part's day is the split's, not a UTC day
    # of the starts: counted from the part itself).
    with gzip.open(aside, "rt", errors="replace") as part_lines:
        whole = sum(1 for line in part_lines if _parses(line))
    assert int(kept) == whole and whole > 0
    # Read again (a restart, a report): nothing more moved aside, nothing skipped.
    with ExporterProcess(config, log) as exporter:
        assert metric(exporter, "bigbinf_journal_damaged_segments") == 1
    assert len(damaged(journal)) == 1 and ids(journal) == want
    assert "Traceback" not in log.read_text()


def gzip_members(data: bytes) -> list[tuple[int, int, list[bytes]]]:
    """A gzip file's members, read with zlib alone: (offset, end, lines) of each."""
    members, at = [], 0
    while at < len(data):
        inflate = zlib.decompressobj(wbits=31)  # gzip framing; a bad CRC raises
        text = inflate.decompress(data[at:]) + inflate.flush()
        assert inflate.eof, f"member at {at} ends short"
        end = len(data) - len(inflate.unused_data)
        members.append((at, end, text.splitlines(keepends=True)))
        at = end
    return members


def restored_ids(journal: Path) -> Counter[str]:
    """The ids of every result a reader may restore, read without the product's reader:
    each sealed part's members (zlib, its CRC checked) and the plain segments' whole lines;
    quarantined (.damaged-) and temporary (.NAME.XXXX) files are no segment and not read."""
    seen: Counter[str] = Counter()
    for name in os.listdir(journal.parent):
        if not name.startswith(journal.stem + ".2") or DAMAGED in name:
            continue
        data = (journal.parent / name).read_bytes()
        lines = [line for *_, got in gzip_members(data) for line in got] if name.endswith(".gz") else data.splitlines()
        seen.update(json.loads(line)["error"][:6] for line in lines if line.strip())
    return seen


def guardian_of(pid: int) -> list[int]:
    """The exporter's guardian (bigbinf/guardian.py), its child."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children if b"guardian" in Path(f"/proc/{c}/cmdline").read_bytes()]


def test_kills_during_the_quarantine_of_a_damaged_part_restore_every_intact_result_once(tmp_path: Path) -> None:
    """Issue 44 item 6: `serve` (and its guardian) SIGKILLed at random points while it
    quarantines a large damaged part (no checkpoint: the start's rebuild finds the damage),
    each kill on what the one before left, then a clean start."""
    journal = tmp_path / "j" / "journal.jsonl"
    journal.parent.mkdir(parents=True)
    # Two small days, then one day of 1,500 results of 16 KB each (its salvage takes seconds to write).
    t0 = time.time() - 4 * 86400
    day0 = t0 - t0 % 86400
    starts = [day0 + i * HALF_HOUR for i in range(96)] + [day0 + 2 * 86400 + i * 30.0 for i in range(1500)]
    template = Result(
        "copy", "here", "f1m", "download", 0.0, "ok",
        duration_seconds=0.05, file_bytes=1 << 20, files=1, verified=True, error="",
    ).to_json()  # fmt: skip
    template.pop("start_utc", None)
    with open(journal, "w") as f:
        for i, t in enumerate(starts):
            line = {**template, "start_timestamp": t, "error": f"{i:06d}" + os.urandom(8000).hex()}
            f.write(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n")
    Journal(journal).rotate_now()
    checkpoint.checkpoint_path(journal).unlink(missing_ok=True)
    big = max((s.path for s in segments(journal)), key=lambda p: p.stat().st_size)
    data = bytearray(big.read_bytes())
    members = gzip_members(bytes(data))
    assert len(members) > 100  # a member per 64 KiB of lines
    at = len(data) // 2
    data[at : at + 16] = bytes(b ^ 0xFF for b in data[at : at + 16])
    big.write_bytes(bytes(data))
    # The truth, from the intact file's members: the results of those the flip touched are lost.
    in_part = sum(len(lines) for *_, lines in members)
    lost = {json.loads(line)["error"][:6] for s, e, lines in members if s < at + 16 and at < e for line in lines}
    want = Counter(f"{i:06d}" for i in range(len(starts)) if f"{i:06d}" not in lost)
    assert 0 < len(lost) < 40 and in_part == 1500
    original = big.stat().st_ino

    log = tmp_path / "exporter.log"
    config = site(tmp_path, journal, interval="1h")
    exporter = ExporterProcess(config, log)
    rng = random.Random()
    kills: list[tuple[float, str]] = []
    for _ in range(3):
        with open(log, "ab") as out:
            proc = subprocess.Popen(exporter.argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=out)
        try:
            # The quarantine is under way once its salvage's temporary file is there (a new
            # one: a killed start's stays until the start after it has sealed what it may).
            stale = set(leftovers(journal))

            def salvage(p: subprocess.Popen[bytes] = proc, stale: set[Path] = stale) -> bool:
                return bool(set(leftovers(journal)) - stale) or p.poll() is not None

            wait("the salvage written", salvage, 60)
            assert proc.poll() is None, log.read_text()[-3000:]
            delay = rng.uniform(0.0, 0.8)  # the salvage's write takes a second or more
            time.sleep(delay)
            guardians = guardian_of(proc.pid)
            if not set(leftovers(journal)) - stale:  # committed meanwhile: this start ended the quarantine
                proc.terminate()
                proc.wait(30)
                break
            proc.kill()  # the exporter, then its guardian: an abrupt end of both
            for pid in guardians:
                os.kill(pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
        assert big.stat().st_ino == original  # not committed: the damaged part is still what is read
        kills.append((round(delay, 2), "linked" if damaged(journal) else "salvage being written"))
    assert len(kills) >= 2, kills  # (a start that ended the quarantine first was stopped)
    with ExporterProcess(config, log) as exporter:
        wait("the journal read", lambda: metric(exporter, "bigbinf_journal_loading") == 0, 60)
        assert metric(exporter, "bigbinf_journal_damaged_segments") == 1
        assert last_start(exporter) == starts[-1]
    assert restored_ids(journal) == want  # every intact result once, the damaged member's none
    assert len([n for n in os.listdir(journal.parent) if DAMAGED in n]) == 1
    assert not leftovers(journal)  # the killed salvages' temporary files removed
    text = log.read_text()
    said = re.findall(
        rf"journal {re.escape(str(big))}: damaged \(.*\): moved aside to \S+; (\d+) results kept in it, "
        r"(\d+) of the (\d+) results it was sealed with lost",
        text,
    )
    assert said == [(str(in_part - len(lost)), str(len(lost)), str(in_part))], (kills, text[-3000:])
    assert "Traceback" not in text
