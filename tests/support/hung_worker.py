"""An analyser worker whose analyses hang, as on a stuck file system (a FIFO used to stand
in for one; the analyser now refuses a FIFO at once).  Its own small module: the worker
process imports it (by name, "spawn") to run its initializer."""

from __future__ import annotations

import time
from typing import Any

from bigbinf.measure.wire import analyser_worker


def start(log_level: int) -> None:
    """The worker's own initializer, then every analysis the worker runs blocks."""
    analyser_worker._start_worker(log_level)
    # The pool sends the task by name (analyser_worker._analyse): this is what it finds.
    analyser_worker._analyse = _blocked  # type: ignore[assignment]


def _blocked(*args: Any) -> None:
    time.sleep(3600)
