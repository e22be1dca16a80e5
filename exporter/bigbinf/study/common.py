"""What the study's modules share: errors, argument parsing, progress, journal checks, labels.

Used by the `report`, `import` and `backfill` commands, the figures and the rule generator,
so it imports no other study module: anything here can be imported from anywhere in
bigbinf.study without a cycle.
"""

from __future__ import annotations

import importlib.util
import re
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from bigbinf.journal.store import segments
from bigbinf.result import Result
from bigbinf.usage import UsageError


def require_extras(command: str, figures: bool) -> None:
    """Say before any work that the optional extra `report` is missing: the statistics
    need scipy, the figures matplotlib (find_spec only looks; they import them when they
    run), so a missing one is a line naming the fix, not a traceback halfway through."""
    wanted = ("scipy", "matplotlib") if figures else ("scipy",)
    missing = [module for module in wanted if importlib.util.find_spec(module) is None]
    if missing:
        raise UsageError(f"{command} needs {' and '.join(missing)}: pip install 'bigbinf[report]'")


def parse_tz_offset(text: str, option: str = "--tz-offset") -> float:
    """'+2', '-5', '+5:30', '5.5' -> hours east of UTC; errors name `option`."""
    match = re.fullmatch(r"\s*([+-]?)(\d{1,2})(?::(\d{2})|(\.\d+))?\s*", text)
    if not match:
        raise UsageError(f"{option} {text!r}: expected hours east of UTC, e.g. {option} +2 or +5:30")
    sign = -1.0 if match.group(1) == "-" else 1.0
    hours = float(match.group(2)) + (float(match.group(3)) / 60 if match.group(3) else 0.0)
    hours += float(match.group(4)) if match.group(4) else 0.0
    if hours > 14:
        raise UsageError(f"{option} {text!r}: UTC offsets lie between -14 and +14 hours")
    return sign * hours


def check_journal(path: Path, must_exist: bool = True) -> None:
    """UsageError unless --journal names a file this process can read: one message per way
    it can go wrong, each naming the path and the fix (shared by report, import, backfill)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        if not must_exist or segments(path):  # all of it in closed day segments (bigbinf/journal/store.py)
            return
        raise UsageError(
            f"--journal {path}: no such file; give the exporter's journal path (journal.path in its configuration)", 1
        ) from None
    except OSError as exc:  # e.g. a parent directory this user may not enter
        raise UsageError(
            f"--journal {path}: cannot read ({exc.strerror or exc}); check the permissions of the "
            "file and its directories, or run as a user who can read it",
            1,
        ) from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(
            f"--journal {path}: is a directory; give the journal file itself, e.g. --journal {path / 'journal.jsonl'}"
        )
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise UsageError(
            f"--journal {path}: cannot read ({exc.strerror or exc}); check the file's permissions, "
            "or run as a user who can read it",
            1,
        ) from None


def journal_read_error(path: Path, exc: OSError) -> UsageError:
    """A read that failed after check_journal passed (I/O error, file replaced)."""
    return UsageError(f"--journal {path}: cannot read ({exc.strerror or exc}); check the file and its permissions", 1)


# ---------------------------------------------------------------------------------------
# Progress


class Progress:
    """Progress lines on stderr for long runs ("imported 120/500 dumps").

    At most one line per `interval` seconds, so neither a terminal nor a log is flooded;
    runs shorter than the interval print nothing but their final summary.
    """

    def __init__(
        self,
        verb: str,
        noun: str,
        total: int | None = None,
        stream: TextIO | None = None,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.verb, self.noun, self.total = verb, noun, total
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.clock = clock
        self._last = clock()

    def update(self, done: int) -> None:
        now = self.clock()
        if now - self._last < self.interval:
            return
        self._last = now
        of_total = f"/{self.total}" if self.total is not None else ""
        print(f"{self.verb} {done}{of_total} {self.noun}", file=self.stream, flush=True)

    def counted(self, items: Iterable[Any]) -> Iterator[Any]:
        """Yield items unchanged, reporting progress as they pass."""
        for number, item in enumerate(items, start=1):
            self.update(number)
            yield item


# ---------------------------------------------------------------------------------------
# Kinds of measurement: the exporter's own, and 2015 dumps brought in by `import`


IMPORTED = "import"  # Result.source of a 2015 dump brought in by `import`
EXPORTER = "exporter"
ORIGIN_LABEL = "origin"  # set by backfill on imported results: origin="import"


def measured_by(result: Result) -> str:
    """Which kind of measurement a result is: "import" (a 2015 dump: payload bytes, packet-span
    time) or "exporter" (frame bytes, wall-clock time; also when read back from Prometheus).
    The two measure different things, so no table row or figure series pools them."""
    return IMPORTED if result.source == IMPORTED else EXPORTER


def series_label(protocol: str, direction: str, source: str = EXPORTER) -> str:
    """How a row/legend names a protocol: the study only downloaded, so uploads are marked,
    and imported 2015 results are marked so they are never read as new measurements."""
    marks = [m for m, on in (("upload", direction != "download"), ("2015 import", source == IMPORTED)) if on]
    return f"{protocol} ({', '.join(marks)})" if marks else protocol


def group_order(protocol: str, direction: str, source: str) -> tuple[str, bool, bool]:
    """Rows and legends: by protocol, downloads first, new measurements before imports."""
    return (protocol, direction != "download", source == IMPORTED)


# Said wherever imported results are shown (HTML page, figure captions): they are not comparable.
IMPORT_NOTE = (
    "Protocols marked (2015 import) are the 2015 testbed's own numbers: TCP/UDP payload bytes and the time "
    "from first to last packet, not frame bytes and wall-clock time like new results, so they are kept "
    "in rows of their own and never pooled with new results."
)


def format_p(value: float | None, digits: int = 3, plain_from: float = 0.001) -> str:
    """A p-value for people: "n/a" when the test could not run, else `digits` significant
    digits, in scientific notation (digits - 1 decimals) below `plain_from`.

    The tables show 3 digits and tiny p-values as 1.23e-05; Figure 4's tick labels are
    shorter (digits=2, plain_from=0: 2 significant digits throughout)."""
    if value is None:
        return "n/a"
    return f"{value:.{digits}g}" if value >= plain_from else f"{value:.{digits - 1}e}"
