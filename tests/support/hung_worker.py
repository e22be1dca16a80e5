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


SLOW_WARM_UP_SECONDS = 4.0


def start_slow_warm_up(log_level: int) -> None:
    """A worker whose warm-up (compiling the fast path) takes SLOW_WARM_UP_SECONDS longer,
    as on a busy host without numba's cache; its analyses run as usual."""
    analyser_worker._start_worker(log_level)
    warm = analyser_worker._warm

    def slow() -> bool:
        time.sleep(SLOW_WARM_UP_SECONDS)
        return warm()

    analyser_worker._warm = slow  # type: ignore[assignment]


def start_slow_analysis(log_level: int) -> None:
    """A worker whose analyses each take 30 s (a large capture on a slow disk)."""
    analyser_worker._start_worker(log_level)
    analyse = analyser_worker._analyse

    def slow(*args: Any) -> Any:
        time.sleep(30)
        return analyse(*args)

    analyser_worker._analyse = slow  # type: ignore[assignment]


def start_slow_compile(log_level: int) -> None:
    """A worker whose compiling (inside the warm-up) takes 1.5 s longer, with a wait said
    after 0.5 s (analyser_worker.SAY_WAIT_SECONDS, 5 s in the exporter)."""
    analyser_worker._start_worker(log_level)
    analyser_worker.SAY_WAIT_SECONDS = 0.5
    compile_ = analyser_worker.warm_up

    def slow() -> Any:
        time.sleep(1.5)
        return compile_()

    analyser_worker.warm_up = slow  # type: ignore[assignment]
