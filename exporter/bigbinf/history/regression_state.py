"""Where the regression states are kept (issue 35): every change of a series' state
(opened, recovered, dismissed, accepted: regression.Event) appended as a JSON line to a journal
beside the results' journal (journal.jsonl -> journal.regressions.jsonl, as the path
baselines are beside it), and read back in order by one function (`read_events`), so
that a restart or a reload restores the open regressions and the accepted levels.

The exporter appends opened and recovered; `bigbinf-exporter regression accept` appends
accepted, and the running exporter takes it up (`RegressionJournal.new_events`) at its
next check (every few seconds, and on every reload).  One small module: the only code
that knows the file's name and format.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bigbinf.fserrors import describe_os_error
from bigbinf.history.regression import ACCEPTED, DISMISSED, OPENED, RECOVERED, Event
from bigbinf.result import SeriesKey

log = logging.getLogger(__name__)

KINDS = (OPENED, RECOVERED, DISMISSED, ACCEPTED)
_said_unreadable: set[str] = set()  # regressions' journals found unreadable: said once a process


def regressions_path(journal: Path) -> Path:
    """Beside the results' journal: journal.jsonl -> journal.regressions.jsonl."""
    return journal.with_name(f"{journal.stem}.regressions{journal.suffix or '.jsonl'}")


def to_json(event: Event) -> dict[str, Any]:
    key: SeriesKey = event.key
    record: dict[str, Any] = {
        "event": event.kind,
        "protocol": key.protocol,
        "remote": key.remote,
        "dataset": key.dataset,
        "direction": key.direction,
        "at": event.at,
        "since": event.since,
    }
    if math.isfinite(event.level_before):
        record["level_before"] = event.level_before
    return record


def from_json(record: Any) -> Event:
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
    kind = record.get("event")
    if kind not in KINDS:
        raise ValueError(f"event {kind!r} is not one of {', '.join(KINDS)}")
    names = ("protocol", "remote", "dataset", "direction")
    if not all(isinstance(record.get(n), str) and record[n] for n in names):
        raise ValueError(f"needs {', '.join(names)} (non-empty strings)")
    numbers = {n: record.get(n) for n in ("at", "since")}
    for n, v in numbers.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"{n} must be a finite number of seconds, got {v!r}")
    level = record.get("level_before", math.nan)
    if isinstance(level, bool) or not isinstance(level, int | float):
        raise ValueError(f"level_before must be a number, got {level!r}")
    key = SeriesKey(*(record[n] for n in names))
    return Event(kind, key, float(record["at"]), float(record["since"]), float(level))


class RegressionJournal:
    """The regression states' journal of one results' journal."""

    def __init__(self, journal: Path) -> None:
        self.path = regressions_path(Path(journal))
        self._lock = threading.Lock()
        self._read_to = 0  # bytes of the file new_events has seen

    def present(self) -> bool:
        """The file is there and reads.  One that does not (EIO, EBADMSG: a failing disk)
        is like a missing one: the first start's replay rebuilds the states from the
        results' journal.  It is moved aside if it can be (a new one is written), and said."""
        try:
            with open(self.path, "rb") as f:
                f.read(1)
        except FileNotFoundError:
            return False
        except OSError as exc:
            self._unreadable(exc)
            return False
        return True

    def _unreadable(self, exc: OSError) -> None:
        aside = self.path.with_name(f"{self.path.name}.damaged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        try:
            os.rename(self.path, aside)
            where = f"moved aside to {aside.name}"
        except FileNotFoundError:
            return
        except OSError as err:
            where = f"left in place ({describe_os_error(err)}); remove it (rm) for a new one to be written"
        if str(self.path) in _said_unreadable:
            return
        _said_unreadable.add(str(self.path))
        log.error(
            "%s: unreadable (%s): read as missing, %s; the regression states are rebuilt from the results' journal",
            self.path,
            describe_os_error(exc),
            where,
        )

    def append(self, events: Iterable[Event]) -> None:
        """Durably (flush + fsync), each event one line; a torn last line is ended first."""
        text = "".join(json.dumps(to_json(e), sort_keys=True, separators=(",", ":")) + "\n" for e in events)
        if not text:
            return
        data = text.encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a+b") as f:
                end = f.seek(0, os.SEEK_END)
                if end:
                    f.seek(end - 1)
                    if f.read(1) != b"\n":
                        data = b"\n" + data
                f.write(data)
                f.flush()
                os.fsync(f.fileno())

    def read_events(self) -> list[Event]:
        """Every readable event in file order (an unreadable line is logged, named by its
        place, and skipped: one bad line never loses the others); remembers where it
        ended for new_events."""
        events, self._read_to = self._read_from(0)
        return events

    def new_events(self) -> list[Event]:
        """The events appended since the last read (another process's `regression accept`)."""
        try:
            size = self.path.stat().st_size
        except OSError:
            return []
        if size <= self._read_to:
            return []
        events, self._read_to = self._read_from(self._read_to)
        return events

    def _read_from(self, offset: int) -> tuple[list[Event], int]:
        try:
            with open(self.path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return [], 0
        except OSError as exc:  # a failing disk: as if missing (present() says so)
            self._unreadable(exc)
            return [], 0
        events: list[Event] = []
        complete = data.rfind(b"\n") + 1  # a line still being written waits for the next read
        line_no = data[:0].count(b"\n")
        for number, raw in enumerate(data[:complete].splitlines(), start=line_no + 1):
            if not raw.strip():
                continue
            try:
                events.append(from_json(json.loads(raw.decode("utf-8", errors="replace"))))
            except (ValueError, TypeError) as exc:
                where = f"{self.path} (byte {offset})" if offset else f"{self.path}:{number}"
                log.warning("%s: skipped: %s", where, exc)
        return events, offset + complete

    def open_regressions(self) -> dict[SeriesKey, Event]:
        """The series whose last opened event has no later closing one: what
        `regression accept` may accept (series -> its opened event)."""
        open_: dict[SeriesKey, Event] = {}
        for event in self.read_events():
            if event.kind == OPENED:
                open_[event.key] = event
            elif open_.get(event.key) is not None and open_[event.key].since == event.since:
                del open_[event.key]
        return open_


def events_of(events: Iterable[Event], keys: Iterable[SeriesKey]) -> Iterator[Event]:
    wanted = set(keys)
    return (e for e in events if e.key in wanted)
