"""The round note (service/round_note.py) on a disk that stops taking writes mid-run
(issue 44, break 5): the process that finished a round but could not remove its note
never reads that note as a previous run's round cut short (which ran the transfer again
and journaled the round twice); a new process still does, as after a kill."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import pytest

from bigbinf.result import SeriesKey
from bigbinf.service.round_note import Note, RoundNote


def test_a_note_this_process_could_not_remove_is_its_own_not_a_cut_short_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    journal = tmp_path / "journal.jsonl"
    notes = RoundNote(journal)
    key = SeriesKey("scp", "uwc", "5MiB", "download")
    notes.write(Note("r1", 1_760_000_000.0, (key,)))
    real_unlink = os.unlink

    def read_only(path: object, *args: object, **kwargs: object) -> None:
        if str(path) == str(notes.path):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        real_unlink(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "unlink", read_only)
    with caplog.at_level(logging.WARNING, logger="bigbinf.service.round_note"):
        notes.strike("r1")
        notes.strike("r2")  # a later round whose note could not be written either
        assert notes.path.exists()  # the disk kept it...
        assert notes.read() is None and notes.read() is None  # ...but it is this process's own, finished
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "EROFS" in said[0], said  # said once, not every round
    assert RoundNote(journal).read() == Note("r1", 1_760_000_000.0, (key,))  # a next start's: a round cut short
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert notes.read() is None and not notes.path.exists()  # writable again: removed
