"""A journal writer SIGKILLed at random moments of its rotations, sealings and checkpoint
writes, many times over (issue 37), in the style of tests/support/chaos.py: after each
kill every result the writer had been told was journaled is read exactly once, no result
twice, no file trips a reader (every segment listed reads whole), the next start finishes
what was cut short, and the checkpoint on disk equals one rebuilt from the journal.  A
reader reads all the while the writer runs: never an error, never a result twice.

The writer appends a result a day (each append rotates the day before, seals it and
saves the checkpoint), so most of its time is in those operations; the test says how
many kills left one of them cut short (a plain segment, a temporary file).  KILLS kills
(BIGBINF_JOURNAL_KILLS overrides; the benchmark-size run is 200)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bigbinf.journal import checkpoint
from bigbinf.journal.store import Journal, leftovers, read, segments

KILLS = int(os.environ.get("BIGBINF_JOURNAL_KILLS", "25"))

WRITER = r"""
import os, sys
from bigbinf.journal import checkpoint
from bigbinf.journal.store import Journal
from bigbinf.result import Result

path, first, acks = sys.argv[1], int(sys.argv[2]), sys.argv[3]
checkpoint.SAVE_EVERY = 2
journal = Journal(path)
journal.rotate_now()  # as a start does: finishes a sealing cut short
checkpoint.of(journal)  # attached: each append folds into it, saved every 2
ack = os.open(acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
os.write(ack, b"ready\n")
for i in range(first, first + 10_000):
    t = 1_760_000_000.0 + i * 90_000.0  # a day and an hour apart: every append rotates
    journal.append(Result("scp", "uwc", "5MiB", "download", t, "ok", duration_seconds=2.0,
                          file_bytes=5 << 20, files=1, error="x" * 1500))
    os.write(ack, f"{i}\n".encode())
"""


def index_of(t: float) -> int:
    return round((t - 1_760_000_000.0) / 90_000.0)


def test_a_writer_killed_anywhere_loses_no_result_and_leaves_nothing_a_reader_trips_on(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    rng = random.Random(37)
    acked: set[int] = set()
    next_index = 0
    cut_short = 0
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    for kill in range(KILLS):
        acks = tmp_path / f"acks{kill}"
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(next_index), str(acks)], env=env)
        try:
            deadline = time.monotonic() + 60
            while not (acks.exists() and acks.read_text().startswith("ready")):
                assert writer.poll() is None and time.monotonic() < deadline, "the writer did not start"
                time.sleep(0.01)
            kill_at = time.monotonic() + rng.uniform(0.0, 0.4)
            while time.monotonic() < kill_at:  # a reader all the while
                seen = Counter(index_of(r.start_timestamp) for r in read(path))
                assert not [i for i, n in seen.items() if n > 1], f"kill {kill}: read twice while writing"
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait()
        acked |= {int(line) for line in acks.read_text().split()[1:]}
        if leftovers(path) or any(not s.sealed for s in segments(path)):
            cut_short += 1
        skipped: list = []
        seen = Counter(index_of(r.start_timestamp) for r in read(path, skipped=skipped))
        assert skipped == [], f"kill {kill}: {skipped}"
        assert not [i for i, n in seen.items() if n > 1], f"kill {kill}: a result twice"
        assert acked <= set(seen), f"kill {kill}: lost {sorted(acked - set(seen))}"
        # The checkpoint as the next start loads it equals one rebuilt from the journal.
        loaded = checkpoint.of(Journal(path))
        rebuilt = checkpoint.ResultsFold(Journal(path))
        rebuilt.catch_up()
        assert (loaded.seq, loaded.latest) == (rebuilt.seq, rebuilt.latest), kill
        keys = loaded.history.keys() | loaded.packed.keys()
        assert keys == rebuilt.history.keys() | rebuilt.packed.keys()
        assert all((loaded.series(k) == rebuilt.series(k)).all() for k in keys), kill
        next_index = max(seen, default=-1) + 1
    Journal(path).rotate_now()
    assert not leftovers(path) and all(s.sealed for s in segments(path))
    assert sorted(index_of(r.start_timestamp) for r in read(path)) == list(range(next_index))
    print(f"{KILLS} kills, {cut_short} left a rotation or sealing cut short, {len(acked)} results acknowledged")
    assert next_index > KILLS  # it got somewhere between kills
