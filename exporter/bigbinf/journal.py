"""Append-only JSON-lines journal of results: the durable record behind /metrics.

A result is written and fsync'ed before it is published, so anything a scrape has seen
survives a crash.  Reading is tolerant: a torn last line (power loss mid-write) or a
line damaged by hand is reported with its line number and skipped, never fatal, so one
bad line never costs the rest of the history.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from bigbinf.result import PathBaseline, Result

RecordT = TypeVar("RecordT", Result, PathBaseline)


def baseline_path(journal: Path) -> Path:
    """Where the path baselines are journaled: beside the results' journal
    (journal.jsonl -> journal.paths.jsonl), so tools reading results see only results."""
    return journal.with_name(f"{journal.stem}.paths{journal.suffix or '.jsonl'}")


log = logging.getLogger(__name__)


def replace_durably(path: Path, text: str) -> None:
    """`path` replaced by `text` whole or not at all, durably: written to a temporary file
    beside it (`.NAME.XXXX`, mode 0600), fsynced, renamed over it, and the directory
    fsynced.  A kill leaves the old file whole, and at most a temporary file, which
    `temporaries` finds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    sync_directory(path.parent)


def temporaries(path: Path) -> list[Path]:
    """The temporary files replace_durably left beside `path` when killed mid-write."""
    try:
        return [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]
    except OSError:
        return []


def sync_directory(directory: Path) -> None:
    """fsync a directory: a file created, renamed or removed in it survives a crash."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class SkippedLine:
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: skipped: {self.reason}"


class _Records(Generic[RecordT]):
    """A journal of one kind of record (`record`: its class, with to_json/from_json)."""

    record: type[RecordT]

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, result: RecordT) -> None:
        """Write one result durably (flush + fsync) before anyone publishes it."""
        line = (json.dumps(result.to_json(), sort_keys=True, separators=(",", ":")) + "\n").encode("utf-8")
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a+b") as f:
                # A torn last line (power loss mid-write) has no newline: appending onto it
                # would glue this result to it and lose both.  End it first; read() then
                # reports the torn line alone and keeps this one.
                end = f.seek(0, os.SEEK_END)
                if end:
                    f.seek(end - 1)
                    if f.read(1) != b"\n":
                        line = b"\n" + line
                f.write(line)  # "a" mode: always at the end, whatever was read
                f.flush()
                os.fsync(f.fileno())

    def read(self, skipped: list[SkippedLine] | None = None) -> Iterator[RecordT]:
        """Every readable result in file order.

        Unreadable lines go to `skipped` if given (the caller reports them, so each is
        said once); otherwise each is logged as a warning."""
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for number, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                try:
                    record = json.loads(text)
                    if not isinstance(record, dict):
                        raise ValueError(f"expected a JSON object, got {type(record).__name__}")
                    yield self.record.from_json(record)
                except (ValueError, TypeError) as exc:
                    problem = SkippedLine(self.path, number, str(exc) or type(exc).__name__)
                    if skipped is not None:
                        skipped.append(problem)
                    else:
                        log.warning("%s", problem)


class Journal(_Records[Result]):
    """The results of transfers."""

    record = Result


class BaselineJournal(_Records[PathBaseline]):
    """The path baselines, one per remote per round (baseline_path)."""

    record = PathBaseline
