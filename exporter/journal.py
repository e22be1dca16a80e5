"""Append-only JSON-lines journal of results: the durable record behind /metrics.

A result is written and fsync'ed before it is published, so anything a scrape has seen
survives a crash.  Reading is tolerant: a torn last line (power loss mid-write) or a
line damaged by hand is reported with its line number and skipped, never fatal, so one
bad line never costs the rest of the history.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .result import Result

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SkippedLine:
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: skipped: {self.reason}"


class Journal:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, result: Result) -> None:
        """Write one result durably (flush + fsync) before anyone publishes it."""
        line = json.dumps(result.to_json(), sort_keys=True, separators=(",", ":")) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())

    def read(self, skipped: list[SkippedLine] | None = None) -> Iterator[Result]:
        """Every readable result in file order; unreadable lines go to `skipped`."""
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
                    yield Result.from_json(record)
                except (ValueError, TypeError) as exc:
                    problem = SkippedLine(self.path, number, str(exc) or type(exc).__name__)
                    log.warning("%s", problem)
                    if skipped is not None:
                        skipped.append(problem)
