"""The judged mark (issue 44): beside the regressions' journal, how far each series' runs
have been judged by the regression test, and what that test carries from run to run that
the regressions' journal does not hold (a suspicion: where it began and where it is
anchored now; the accepted levels' measured changes; the repetitions of a round not yet
taken as one observation).  A restart that trusts it restores each series as the
exporter left it, tests it once and judges only the runs journaled after its mark
(service/rounds.py load_history); one that cannot trust it judges again the runs a
suspicion may span, as it did before there was a mark (`judged_through`).

It is trusted, series by series, only if it is this version's, parses whole, and agrees
with both journals: the series' run at its mark is the one it judged last (a digest of
the last observations the test saw: a journal rewound or replaced fails it), and the
series' last regression event is the one it had seen (an event journaled after the mark
was written: a crash between the two, or an accept while no exporter ran).  Written
whole through a temporary file (fsync, rename): a reader sees an old mark or the new
one, never a torn one; by service/rounds.py at each round's end and at once after an
event (not after every result: MARK_EVERY_RESULTS), so a kill between writes leaves
marks behind the runs judged, whose runs after them a restart judges again.  One
small module: the only code that knows the file's format.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bigbinf.history.regression import SUSPECT_RUNS, History, Track
from bigbinf.history.regression_state import KINDS
from bigbinf.result import SeriesKey

log = logging.getLogger(__name__)

VERSION = 2
# A mark is some 300 bytes a series: a file larger than this is not one (never read whole).
MAX_BYTES = 64 << 20
NAMES = ("protocol", "remote", "dataset", "direction")

LastEvent = tuple[str, float, float]  # kind, at, since


def judged_path(journal: Path) -> Path:
    """Beside the regressions' journal: journal.jsonl -> journal.regressions.judged.json."""
    return journal.with_name(f"{journal.stem}.regressions.judged.json")


@dataclass(frozen=True)
class SeriesMark:
    """One series' judged state: its runs up to `through` are judged."""

    through: float  # the start of its latest run judged
    pending: int  # of its runs up to `through`, those its current round has not yet taken as one observation
    tail: str  # digest of the observations its test last saw (their last ones) and of the pending runs
    suspect: float | None  # Track.suspect
    suspect_began: float | None  # Track.suspect_began
    last_event: LastEvent | None  # its last event in the regressions' journal as the exporter had seen it
    shifts: tuple[tuple[float, float, float], ...] = ()  # Track.accepts measured: (before, at, change; nan)


def tail_digest(history: History, key: Any) -> str:
    """The series' last observations (as many as a suspicion and the recent runs span) and
    its round's pending runs, hashed: equal only when a restart's loaded runs end as the
    judged ones did."""
    k = SUSPECT_RUNS + history.settings.recent_runs
    ts, _, logs = history.runs.get(key, (np.zeros(0), np.zeros(0), np.zeros(0)))
    pending = np.array(history.round_runs.get(key, []), dtype=float).reshape(-1, 2)
    h = hashlib.blake2b(digest_size=12)
    for part in (ts[-k:], logs[-k:], pending):
        h.update(np.ascontiguousarray(part, dtype="<f8").tobytes())
        h.update(b"|")
    return h.hexdigest()


def carried(history: History, key: Any, last_event: LastEvent | None) -> SeriesMark | None:
    """The series' judged state now; None where a restart must judge it again (runs dated
    in the future were left out: which of its runs are judged is not a start time)."""
    through = history.latest.get(key)
    if through is None or key not in history.runs or history.future_dated.get(key):
        return None
    track = history.tracks.get(key, Track())
    return SeriesMark(
        through=through,
        pending=len(history.round_runs.get(key, [])),
        tail=tail_digest(history, key),
        suspect=track.suspect,
        suspect_began=track.suspect_began if track.suspect is not None else None,  # else it says nothing
        last_event=last_event,
        shifts=tuple((b, a, c) for b, a, c in track.accepts if c is not None),
    )


def restore_carried(history: History, key: Any, mark: SeriesMark) -> None:
    """What the mark carries put back on the series' track (its events restored first)."""
    track = history.tracks.setdefault(key, Track())
    track.suspect, track.suspect_began = mark.suspect, mark.suspect_began
    measured = {(b, a): c for b, a, c in mark.shifts}
    track.accepts = [(b, a, measured.get((b, a), c)) for b, a, c in track.accepts]
    history.touched(key)


def resume_series(
    history: History,
    key: Any,
    mark: SeriesMark | None,
    runs: list[tuple[float, float]],
    last_event: LastEvent | None,
) -> tuple[int, str]:
    """The series (its events restored) as its mark left it: its runs up to the mark
    (`runs`: all of them, in time order) loaded with what its test carried.  Returns how
    many of `runs` it judged (those after are to be judged) and "", or why the mark cannot
    be trusted (the history is then not to be used)."""
    if mark is None:
        return 0, f"{key} is not in it"
    if last_event != mark.last_event:
        return 0, f"{key}'s last regression event is not the one it had seen (journaled after it)"
    cut = bisect.bisect_right(runs, (mark.through, math.inf))
    judged = runs[:cut]
    if not judged or judged[-1][0] != mark.through or mark.pending > len(judged):
        return 0, f"{key}'s mark {mark.through!r} is not a run of the journal (rewound or replaced?)"
    restore_carried(history, key, mark)
    loaded = len(judged) - mark.pending
    history.load(key, judged[:loaded])
    if mark.pending:
        history.round_runs[key] = [(t, math.log(x)) for t, x in judged[loaded:] if x > 0 and math.isfinite(x)]
    history.latest[key] = mark.through
    if tail_digest(history, key) != mark.tail:
        return 0, f"{key}'s runs up to its mark are not those it judged (the journal rewound or replaced?)"
    return cut, ""


def _number(value: Any, name: str, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r:.40}")
    return float(value)


def _series_from_json(record: Any, repetitions: int) -> tuple[SeriesKey, SeriesMark]:
    if not isinstance(record, dict):
        raise ValueError(f"a series is a JSON object, got {type(record).__name__}")
    if not all(isinstance(record.get(n), str) and record[n] for n in NAMES):
        raise ValueError(f"a series needs {', '.join(NAMES)} (non-empty strings)")
    key = SeriesKey(*(record[n] for n in NAMES))
    pending = record.get("pending")
    if isinstance(pending, bool) or not isinstance(pending, int) or not 0 <= pending < repetitions:
        raise ValueError(f"{key}: pending must be a whole number from 0 to {repetitions - 1}, got {pending!r:.40}")
    tail = record.get("tail")
    if not isinstance(tail, str) or len(tail) != 24 or any(c not in "0123456789abcdef" for c in tail):
        raise ValueError(f"{key}: tail must be 24 hex digits")
    event = record.get("last_event")
    last: LastEvent | None = None
    if event is not None:
        if not isinstance(event, list) or len(event) != 3 or event[0] not in KINDS:
            raise ValueError(f"{key}: last_event must be [kind, at, since]")
        last = (event[0], _number(event[1], "at") or 0.0, _number(event[2], "since") or 0.0)
    shifts = record.get("shifts", [])
    if not isinstance(shifts, list) or not all(isinstance(s, list) and len(s) == 3 for s in shifts):
        raise ValueError(f"{key}: shifts must be a list of [before, at, change]")
    mark = SeriesMark(
        through=_number(record.get("through"), f"{key}: through") or 0.0,
        pending=pending,
        tail=tail,
        suspect=_number(record.get("suspect"), f"{key}: suspect", optional=True),
        suspect_began=_number(record.get("suspect_began"), f"{key}: suspect_began", optional=True),
        last_event=last,
        shifts=tuple(
            (
                _number(b, f"{key}: shift before") or 0.0,
                _number(a, f"{key}: shift at") or 0.0,
                math.nan if c is None else (_number(c, f"{key}: shift change") or 0.0),
            )
            for b, a, c in shifts
        ),
    )
    return key, mark


def _names(key: SeriesKey) -> tuple[str, ...]:
    return tuple(getattr(key, n) for n in NAMES)


def _series_to_json(key: SeriesKey, mark: SeriesMark) -> dict[str, Any]:
    return {
        **{n: getattr(key, n) for n in NAMES},
        "through": mark.through,
        "pending": mark.pending,
        "tail": mark.tail,
        "suspect": mark.suspect,
        "suspect_began": mark.suspect_began,
        "last_event": list(mark.last_event) if mark.last_event is not None else None,
        "shifts": [[b, a, c if math.isfinite(c) else None] for b, a, c in mark.shifts],
    }


class JudgedMark:
    """The judged mark of one results' journal."""

    def __init__(self, journal: Path) -> None:
        self.path = judged_path(Path(journal))
        self._through = -math.inf  # the last judged_through written by this process

    def _load(self) -> Any:
        with open(self.path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise ValueError(f"larger than {MAX_BYTES >> 20} MiB")
        return json.loads(data.decode("utf-8"))

    def through(self) -> float | None:
        """The start of the latest run any series had judged (this version's mark or an
        older one); None if no exporter has said or it does not read."""
        try:
            value = self._load().get("judged_through")
        except (OSError, ValueError, AttributeError):
            return None
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return float(value) if ok else None

    def read(self, repetitions: int) -> tuple[dict[SeriesKey, SeriesMark] | None, str]:
        """Each series' mark, or None and why the file cannot be trusted (the caller says it)."""
        try:
            record = self._load()
        except FileNotFoundError:
            return None, "missing"
        except OSError as exc:
            return None, f"unreadable ({exc.strerror or exc})"
        except (ValueError, UnicodeDecodeError) as exc:
            return None, f"not a judged mark ({exc})"
        if not isinstance(record, dict):
            return None, f"not a judged mark (a JSON {type(record).__name__}, not an object)"
        version = record.get("version")
        if version != VERSION:
            return None, f"version {version!r:.20}, not {VERSION} (written by another exporter version)"
        series = record.get("series")
        if not isinstance(series, list):
            return None, "no list of series"
        marks: dict[SeriesKey, SeriesMark] = {}
        try:
            for item in series:
                key, mark = _series_from_json(item, repetitions)
                marks[key] = mark
        except ValueError as exc:
            return None, f"a series that does not read ({exc})"
        return marks, ""

    def write(self, through: float, series: Mapping[SeriesKey, SeriesMark], back: bool = False) -> None:
        """Every series' mark, replaced whole (temporary file, fsync, rename).
        `judged_through`, the latest run judged, never goes back unless `back` (a mark a
        run dated in the future set: a restart that falls back on it would take every run
        before that date as judged)."""
        if through > self._through or (back and through < self._through):
            self._through = through
        record = {
            "version": VERSION,
            "judged_through": self._through if math.isfinite(self._through) else None,
            "series": [_series_to_json(k, m) for k, m in sorted(series.items(), key=lambda i: _names(i[0]))],
        }
        data = json.dumps(record, separators=(",", ":"), allow_nan=False).encode()
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("%s: cannot write (%s): a restart judges again the runs since the last mark", self.path, exc)
