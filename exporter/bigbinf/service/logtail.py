"""The exporter's own log, its last lines kept in memory for the /log page (service/pages.py
renders them, redacted as a transfer's log lines are).

A logging handler on the root logger beside whatever else logs (stderr, a journal): it
keeps the last LINES records, formatted once as they come (UTC, no microseconds, as every
page shows time), so the page costs a join.  Installed once per process; an exporter
started again in the same process (the tests) shares it.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections import deque

LINES = 500


class LogTail(logging.Handler):
    def __init__(self, lines: int = LINES) -> None:
        super().__init__(logging.INFO)
        self._lines: deque[tuple[str, str]] = deque(maxlen=lines)  # (level, line)
        self._tail_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            when = dt.datetime.fromtimestamp(record.created, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            text = f"{when} {record.levelname} {record.name}: {record.getMessage()}"
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
        except Exception:  # a log call's bad arguments must not break the caller
            self.handleError(record)
            return
        with self._tail_lock:
            self._lines.append((record.levelname, text))

    def lines(self) -> list[tuple[str, str]]:
        """(level, line), oldest first."""
        with self._tail_lock:
            return list(self._lines)


_installed: LogTail | None = None
_install_lock = threading.Lock()


def install() -> LogTail:
    """The process's tail, on the root logger (once)."""
    global _installed
    with _install_lock:
        if _installed is None:
            _installed = LogTail()
            logging.getLogger().addHandler(_installed)
        return _installed
