"""The journal's scrub: every sealed part read through, in the running exporter, so
damage a disk does to a part in place (a bad sector, flipped bytes) is found within
journal.scrub_interval rather than at the next checkpoint rebuild.  A start with a good
checkpoint reads only what the checkpoint does not cover, and nothing else reads old parts.

A damaged part is quarantined as every reader does (store.quarantine: moved aside, its
readable results kept under its name, one error line with what was lost), and the gauge
bigbinf_journal_damaged_segments counts it from then on (BigbinfJournalDamaged).  The
results a checkpoint folded from the part before its damage stay what the exporter
serves: they were read whole.

It never competes with a measurement: each part is read only while no round, slot or
sweep holds the round lock (a day's part reads in milliseconds, so one starting meanwhile
meets at most that), and the scrub sleeps DUTY_RATIO times as long as it read, so it
takes at most a tenth of one core and of the disk however large the journal."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..journal import store

log = logging.getLogger(__name__)

DUTY_RATIO = 9.0  # sleep 9x the time each part took: at most 10% of a core
IDLE_POLL_SECONDS = 1.0  # how often a scrub waiting for a round to end looks again
FIRST_AFTER_SECONDS = 3600.0  # the first scrub after a start: not in its first, busiest hour


def scrub(
    journals: list[Path],
    idle: Callable[[float], bool],
    stopping: threading.Event,
    duty: float = DUTY_RATIO,
) -> tuple[int, int, list[Path]] | None:
    """Read every sealed part of each journal through; (parts read, bytes read, where the
    damaged ones were moved aside), or None if stopped midway.  `idle(timeout)`: whether
    no round holds the round lock (False: one did, looked at again after `timeout` seconds)."""
    parts, size, moved = 0, 0, []
    for journal in journals:
        for segment in store.segments(journal):
            if not segment.sealed:
                continue
            while not idle(IDLE_POLL_SECONDS):
                if stopping.is_set():
                    return None
            if stopping.is_set():
                return None
            began = time.monotonic()
            try:
                read = segment.path.stat().st_size
                aside = store.check_part(segment.path)
            except FileNotFoundError:
                continue  # removed past retention since listed
            except OSError as exc:  # this process's want (descriptors, memory): the next scrub reads it
                log.warning("journal scrub: cannot read %s (%s): read at the next scrub", segment.path, exc)
                continue
            parts, size = parts + 1, size + read
            if aside is not None:
                moved.append(aside)
            if stopping.wait(duty * (time.monotonic() - began)):
                return None
    return parts, size, moved


def scrub_and_say(journals: list[Path], idle: Callable[[float], bool], stopping: threading.Event) -> None:
    """One scheduled scrub, said in one line (each damaged part in its own error line)."""
    began = time.monotonic()
    done = scrub(journals, idle, stopping)
    if done is None:
        return
    parts, size, moved = done
    said = f"{len(moved)} damaged, moved aside (the lines above)" if moved else "none damaged"
    (log.warning if moved else log.info)(
        "journal scrub: %d sealed parts read through (%.1f MB) in %.0f s: %s",
        parts,
        size / 1e6,
        time.monotonic() - began,
        said,
    )
