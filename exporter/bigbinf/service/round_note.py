"""A round in progress, written down (`<journal>.round.json`): its id, its start and its
transfers, before its first transfer, and struck off once its last is journaled.  An
exporter killed mid-round leaves it, and the next start finishes that round (the round
runner's `resume`): the transfers not yet journaled under its id, each once.

Written whole or not at all (journal.store.replace_durably); only a note for finishing a round,
so one that cannot be written is a warning, and one that does not read is removed (and
said so), never trusted.  The rounds this process struck off are remembered too: a note
it could not remove (a read-only disk) is its own, stale, never a previous run's round
to finish again (a transfer run twice, a round journaled twice).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from bigbinf.fserrors import describe_os_error
from bigbinf.journal.store import replace_durably
from bigbinf.result import SeriesKey

log = logging.getLogger(__name__)


def note_path(journal: Path) -> Path:
    """Where a round in progress is written down (journal.jsonl -> journal.round.json)."""
    return journal.with_name(f"{journal.stem}.round.json")


@dataclass(frozen=True)
class Note:
    round_id: str
    started: float  # UTC epoch seconds
    series: tuple[SeriesKey, ...]


REMEMBERED = 64  # struck rounds kept in memory: a note older than the schedule's gap is dropped anyway


class RoundNote:
    def __init__(self, journal: Path) -> None:
        self.path = note_path(journal)
        self.struck: dict[str, None] = {}  # the rounds this process finished, oldest first
        self._said = False  # "cannot remove": said once, not every round

    def write(self, note: Note) -> None:
        record = {
            "round_id": note.round_id,
            "started": note.started,
            "series": [dataclasses.astuple(k) for k in note.series],
        }
        try:
            replace_durably(self.path, json.dumps(record))
        except OSError as exc:
            log.warning(
                "round %s: cannot write %s (%s): were the exporter killed, its next start would not finish this round",
                note.round_id,
                self.path,
                exc,
            )

    def strike(self, round_id: str) -> None:
        """The round `round_id` is over: its note goes (a later round's stays)."""
        note = self.read()
        self.struck[round_id] = None
        while len(self.struck) > REMEMBERED:
            del self.struck[next(iter(self.struck))]
        if note is not None and note.round_id == round_id:
            self._remove()

    def _remove(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            if not self._said:
                log.warning(
                    "cannot remove the round note %s (%s): this exporter remembers the rounds it finished",
                    self.path,
                    describe_os_error(exc),
                )
                self._said = True
        else:
            self._said = False

    def drop(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()

    def read(self) -> Note | None:
        """The note of a round not finished, or None: none written, one of a round this
        process finished (a note it could not remove), or one that does not read (removed)."""
        note = self._read()
        if note is not None and note.round_id in self.struck:
            self._remove()  # the disk may take it now
            return None
        return note

    def _read(self) -> Note | None:
        try:
            record = json.loads(self.path.read_text(encoding="utf-8"))
            round_id, started, series = record["round_id"], record["started"], record["series"]
            if not (
                isinstance(round_id, str)
                and isinstance(started, int | float)
                and isinstance(series, list)
                and all(isinstance(k, list) and len(k) == 4 and all(isinstance(w, str) for w in k) for k in series)
            ):
                raise ValueError("not a round's id, start and series")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            log.warning("%s does not read as a round in progress (%s): removed", self.path, exc)
            self.drop()
            return None
        return Note(round_id, float(started), tuple(SeriesKey(*k) for k in series))
