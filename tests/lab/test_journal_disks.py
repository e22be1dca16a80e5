"""The journal on disks that fail, through the real exporter (`serve`, `once`) (issue 44):
a journal on a tmpfs that fills up and one whose directory is remounted read-only while
rounds run, a damaged day segment with and without a checkpoint, a read-only transfer
workdir.

Independent truths: the exporter's own log lines of the results it published (one per
result, written before it journals), /metrics, the files on the disks.  Needs root (mounts);
every mount is unmounted after the test, whatever happened.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from bigbinf.journal import checkpoint
from bigbinf.journal.store import DAMAGED, Journal, baseline_path, damaged, read, segments, spill_places
from bigbinf.result import Result

from ..support import session
from ..support.exporter import ROOT, ExporterProcess
from ..support.prometheus import PrometheusServer

pytestmark = pytest.mark.lab

# One line per published result (service/rounds.py _log_result), before it is journaled.
PUBLISHED = re.compile(r"copy here/f1m/download: (ok|failed|timeout) ")


@pytest.fixture
def mounts() -> Iterator[Callable[..., Path]]:
    """mount(kind, ...) -> a fresh mount point under /tmp; all unmounted and removed after."""
    made: list[Path] = []

    def mount(*args: str) -> Path:
        point = session.scratch_dir(Path("/tmp"), "bbt-journal-")
        made.append(point)
        session.register_mount(point)
        subprocess.run(["mount", *args, str(point)], check=True)
        return point

    yield mount
    for point in reversed(made):
        subprocess.run(["umount", "-l", str(point)], check=False)
        point.rmdir()


def site(tmp_path: Path, journal: Path, interval: str = "2s", workdir: Path | None = None) -> Path:
    """An exporter measuring one local series (cp of a 1 MiB file, no capture)."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "f1m.bin").write_bytes(os.urandom(1 << 20))
    raw = {
        "remotes": {"here": {"address": "127.0.0.1", "data_dir": str(data), "probe": {"enabled": False}}},
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {"copy": {"command": ["cp", "{remote_path}", "{local_path}"]}},
        "capture": {"enabled": False},
        "transfer": {"workdir": str(workdir or tmp_path / "work")},
        "journal": {"path": str(journal)},
        "schedule": {"interval": interval, "rounds": 1},
    }
    path = tmp_path / "exporter.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def metric(exporter: ExporterProcess, name: str) -> float:
    for line in exporter.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not on /metrics")


def published(log: Path) -> int:
    return len(PUBLISHED.findall(log.read_text()))


def journaled(journal: Path) -> list[float]:
    return [r.start_timestamp for r in read(journal) if r.protocol == "copy"]


def wait(what: str, until: Callable[[], bool], timeout: float = 60) -> None:
    PrometheusServer.wait_for(until, timeout=timeout, what=what)


def test_a_full_journal_disk_keeps_the_results_and_writes_them_in_order_when_space_returns(
    tmp_path: Path, mounts: Callable[..., Path]
) -> None:
    disk = mounts("-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs")
    journal = disk / "journal.jsonl"
    log = tmp_path / "exporter.log"
    with ExporterProcess(site(tmp_path, journal), log) as exporter:
        wait("a result journaled", lambda: len(journaled(journal)) >= 2)
        filler = disk / "filler"
        # The rest of the disk taken: the next appends get ENOSPC.
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True, check=False)
        wait("results kept unwritten", lambda: metric(exporter, "bigbinf_journal_unwritten_results") >= 3)
        kept = int(metric(exporter, "bigbinf_journal_unwritten_results"))
        assert len(journaled(journal)) < published(log)
        text = log.read_text()
        assert f"journal {journal}: No space left on device (ENOSPC): no space left on its file system" in text
        assert "kept in memory" in text and "Traceback" not in text
        filler.unlink()  # space again: written within the retry's 10 s, or at the next append
        wait("the kept results journaled", lambda: metric(exporter, "bigbinf_journal_unwritten_results") == 0)
    # Stopped: every result it published is journaled, once each, in order.
    starts = journaled(journal)
    assert len(starts) == published(log) and len(starts) > kept
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert "results kept while it could not be written are journaled now" in log.read_text()


def test_a_read_only_journal_directory_spills_at_the_stop_and_the_next_start_takes_them_back(
    tmp_path: Path, mounts: Callable[..., Path]
) -> None:
    backing = tmp_path / "backing"
    backing.mkdir()
    point = mounts("--bind", str(backing))
    journal = point / "journal.jsonl"
    log = tmp_path / "exporter.log"
    config = site(tmp_path, journal)
    spill = spill_places(journal)[1]
    try:
        with ExporterProcess(config, log) as exporter:
            wait("a result journaled", lambda: len(journaled(journal)) >= 2)
            subprocess.run(["mount", "-o", "remount,ro,bind", str(point)], check=True)
            wait("results kept unwritten", lambda: metric(exporter, "bigbinf_journal_unwritten_results") >= 2)
            assert "Read-only file system (EROFS)" in log.read_text()
        # The stop (SIGTERM): what it could not journal is in /dev/shm (beside the journal is read-only).
        text = log.read_text()
        stop = r"results could not be journaled before this stop: written to (\S+);"
        pattern = rf"journal {re.escape(str(journal))}: (\d+) {stop}"
        said = re.search(pattern, text)
        assert said is not None, text[-3000:]
        assert Path(said[2]) == spill and spill.is_file()
        assert len(spill.read_text().splitlines()) == int(said[1]) >= 1
        before = journaled(journal)
        assert len(before) + int(said[1]) == published(log)
        subprocess.run(["mount", "-o", "remount,rw,bind", str(point)], check=True)
        site(tmp_path, journal, interval="1h")  # the next start: no round soon, only the take-back
        with ExporterProcess(config, log) as exporter:
            assert metric(exporter, "bigbinf_journal_unwritten_results") == 0
        starts = journaled(journal)
        assert len(starts) == published(log) and len(set(starts)) == len(starts) and starts == sorted(starts)
        assert not spill.exists()
        assert not spill_places(baseline_path(journal))[1].exists()  # the path baselines' taken back too
    finally:
        for place in (spill, spill_places(baseline_path(journal))[1]):
            place.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            spill.parent.rmdir()


def series_results(n: int, t0: float) -> list[Result]:
    return [
        Result(
            "copy",
            "here",
            "f1m",
            "download",
            t0 + i * 1800.0,
            "ok",
            duration_seconds=0.05,
            file_bytes=1 << 20,
            files=1,
            verified=True,
            error=f"{i:05d}" + "x" * 300,
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("with_checkpoint", [True, False])
def test_the_exporter_starts_on_a_journal_with_a_damaged_segment(tmp_path: Path, with_checkpoint: bool) -> None:
    journal = tmp_path / "j" / "journal.jsonl"
    written = Journal(journal)
    t0 = time.time() - 6 * 86400
    for r in series_results(6 * 48, t0):
        written.append(r)
    written.rotate_now()
    if with_checkpoint:
        checkpoint.of(Journal(journal))
    else:
        checkpoint.checkpoint_path(journal).unlink(missing_ok=True)
    victim = [s for s in segments(journal) if s.sealed][2].path
    data = bytearray(victim.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 16] = os.urandom(16)
    victim.write_bytes(bytes(data))
    log = tmp_path / "exporter.log"
    config = site(tmp_path, journal, interval="1h")
    compact = ""
    with ExporterProcess(config, log) as exporter:
        if with_checkpoint:  # the start read no part: found by the first reader of it (journal-compact reads all)
            done = subprocess.run(
                [sys.executable, "-m", "bigbinf", "--config.file", str(config), "journal-compact"],
                cwd=ROOT, check=True, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            compact = done.stdout + done.stderr
            assert "damaged, moved aside" in done.stdout
        wait("the damaged segment counted", lambda: metric(exporter, "bigbinf_journal_damaged_segments") == 1, 30)
    (aside,) = damaged(journal)
    assert aside.name.startswith(victim.name + DAMAGED)
    starts = Counter(journaled(journal))
    assert max(starts.values()) == 1 and 0 < len(starts) < 6 * 48
    text = log.read_text()
    assert "Traceback" not in text + compact and f"restored 1 results from {journal}" in text  # the series' last
    said = re.findall(
        rf"journal {re.escape(str(victim))}: damaged \(.*\): moved aside to .* results kept in it, .*lost",
        text + compact,
    )
    assert len(said) == 1, text + compact  # one line: the file, and how much is lost
    # A restart keeps the count (from the file); removing the file ends it.
    with ExporterProcess(config, log) as exporter:
        assert metric(exporter, "bigbinf_journal_damaged_segments") == 1
        assert Counter(journaled(journal)) == starts
        aside.unlink()
        wait("the count to fall", lambda: metric(exporter, "bigbinf_journal_damaged_segments") == 0, 30)


def test_a_read_only_workdir_is_one_line_per_transfer_without_a_traceback(
    tmp_path: Path, mounts: Callable[..., Path]
) -> None:
    backing = tmp_path / "work"
    backing.mkdir()
    point = mounts("--bind", str(backing))
    subprocess.run(["mount", "-o", "remount,ro,bind", str(point)], check=True)
    config = site(tmp_path, tmp_path / "j" / "journal.jsonl", workdir=point)
    done = subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(config), "once"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "internal error" not in output, output
    line = f"transfer.workdir {point}: Read-only file system (EROFS): its file system is mounted read-only"
    assert line in output, output
    [r] = list(read(tmp_path / "j" / "journal.jsonl"))
    assert r.outcome == "failed" and r.error.startswith(line)
    assert json.dumps(r.to_json())  # journaled whole


def test_a_start_restores_no_result_whose_member_fails_its_crc_and_says_the_true_loss(tmp_path: Path) -> None:
    """Issue 44 breaks 3, 4 through `serve`: the newest day part's second gzip member has a
    result altered (a stored block: one digit of its duration) so that it still parses;
    only its CRC says so.  The start (no checkpoint: it rebuilds from the parts) restores
    none of that member's results: the series' last result is the first member's last,
    and the one line gives the loss from the count recorded at sealing."""
    journal = tmp_path / "j" / "journal.jsonl"
    written = Journal(journal)
    for r in series_results(3 * 48, time.time() - 4 * 86400):
        written.append(r)
    written.rotate_now()
    journal.write_bytes(b"")  # today's results dropped: the newest ones are the newest part's
    checkpoint.checkpoint_path(journal).unlink(missing_ok=True)
    in_parts = len(journaled(journal))
    victim = [s for s in segments(journal) if s.sealed][-1].path
    lines = gzip.decompress(victim.read_bytes()).splitlines(keepends=True)
    first, second = lines[: len(lines) // 2], lines[len(lines) // 2 :]
    data = bytearray(b"".join(gzip.compress(b"".join(batch), compresslevel=0, mtime=0) for batch in (first, second)))
    at = data.rindex(b'"duration_seconds":0.05') + len(b'"duration_seconds":0.0')
    data[at] = ord("9")  # the newest result's 0.05 s -> 0.09 s: a measurement that never was
    victim.write_bytes(bytes(data))
    log = tmp_path / "exporter.log"
    with ExporterProcess(site(tmp_path, journal, interval="1h"), log) as exporter:
        wait("the damaged part counted", lambda: metric(exporter, "bigbinf_journal_damaged_segments") == 1, 60)
        newest_intact = json.loads(first[-1])["start_timestamp"]
        shown = re.search(r'bigbinf_last_transfer_start_timestamp_seconds\{[^}]*protocol="copy"[^}]*\} (\S+)',
                          exporter.metrics())  # fmt: skip
        assert shown is not None and float(shown[1]) == newest_intact
    assert all(r.duration_seconds == 0.05 for r in read(journal))
    assert len(journaled(journal)) == in_parts - len(second)
    text = log.read_text()
    said = re.findall(rf"journal {re.escape(str(victim))}: damaged \(BadGzip: CRC check failed .*", text)
    assert len(said) == 1, text[-3000:]
    assert (
        f"{len(first)} results kept in it, {len(second)} of the {len(lines)} results it was sealed with lost" in said[0]
    )
    assert f"{len(second)} lines that inflate to results but fail their CRC, not restored" in said[0]


def test_a_damaged_segment_that_cannot_be_moved_aside_stays_counted_across_restarts(
    tmp_path: Path, mounts: Callable[..., Path]
) -> None:
    """The part itself on a read-only bind mount (the directory takes writes: the checkpoint
    is saved, folding it): each start counts it and says its loss, until it can be moved."""
    backing = tmp_path / "backing"
    backing.mkdir()
    point = mounts("--bind", str(backing))
    journal = point / "journal.jsonl"
    written = Journal(journal)
    for r in series_results(3 * 48, time.time() - 3 * 86400):
        written.append(r)
    written.rotate_now()
    checkpoint.checkpoint_path(journal).unlink(missing_ok=True)
    victim = [s for s in segments(journal) if s.sealed][1].path
    with gzip.open(victim, "rb") as f:
        held = Counter(Result.from_json(json.loads(line)).start_timestamp for line in f)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 16] = os.urandom(16)
    victim.write_bytes(bytes(data))
    log = tmp_path / "exporter.log"
    config = site(tmp_path, journal, interval="1h")
    subprocess.run(["mount", "--bind", str(victim), str(victim)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(victim)], check=True)
        logs = []
        for _ in range(2):  # the first start rebuilds the checkpoint (reading the part), the second loads it
            with ExporterProcess(config, log, start_timeout=180) as exporter:
                wait("the damaged part counted", lambda: metric(exporter, "bigbinf_journal_damaged_segments") == 1)
            logs.append(log.read_text()[sum(map(len, logs)) :])
        saved = json.loads(checkpoint.checkpoint_path(journal).read_text())
        assert saved["unmoved"] == [victim.name] and victim.name.split(".")[2] in saved["covered"]
        assert not damaged(journal)
        starts = Counter(journaled(journal))
        kept = sum(1 for t in held if t in starts)
        assert max(starts.values()) == 1 and 0 < kept < len(held)
        said = (
            rf"journal {re.escape(str(victim))}: damaged \(.*\); not moved aside \(.*\): read as far as it can be, "
            rf"each time; {kept} results read of it, {len(held) - kept} of the {len(held)} results it was sealed "
            "with lost"
        )
        for text in logs:  # each start says it, with the loss
            assert re.search(said, text), text[-3000:]
    finally:
        subprocess.run(["umount", str(victim)], check=False)
    # Movable again: the next start moves it aside (counted from the file aside from then on).
    with ExporterProcess(config, log, start_timeout=180) as exporter:
        wait("the damaged part counted", lambda: metric(exporter, "bigbinf_journal_damaged_segments") == 1)
    (aside,) = damaged(journal)
    assert aside.name.startswith(victim.name + DAMAGED)
    assert Counter(journaled(journal)) == starts and "Traceback" not in log.read_text()
