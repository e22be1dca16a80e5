"""Which runs a judgement from history stands on: the move model's runs (`Run`,
`runs_to`, thinned per cell in `RecentRuns`) and the regression test's
(`counts_in_baseline`).

Below both the journal's checkpoint, which folds these runs into what a start restores,
and the judgements in history/ that read them (history/moveplan.py, history/regression.py):
it imports only the Result and the judge's busy-host predicate.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bigbinf.judge.verdict import leaves_out_of_baselines
from bigbinf.result import Result

HOUR = 3600.0


@dataclass(frozen=True)
class Run:
    """One ok transfer to the remote, as the model sees it."""

    protocol: str
    setting: str  # "" for the protocol as configured; a sweep's setting label
    bytes: int
    files: int
    seconds: float
    timestamp: float
    source: str  # exporter | sweep
    command: str = ""  # a digest of the run's argv ("" not journaled): equal settings merge
    left_out: str = ""  # why the model leaves it out (left_out_of_moves); "": a run it uses

    @property
    def option(self) -> str:
        return f"{self.protocol} ({self.setting})" if self.setting else self.protocol


# What differs between two runs of one command: each transfer's private directory
# (measure/leftovers.py's new_workdir: bigbinf-OWNER-XXXXXXXX, or mkdtemp's 8 characters)
# and an upload's unique remote name (FILE.<12 hex digits>, measure/transfer.py).
_PER_RUN = (
    (re.compile(r"bigbinf-(?:\d+\.\d+\.\d+-)?\w{8}"), "bigbinf-RUN"),
    (re.compile(r"\.[0-9a-f]{12}(?=$|[/\s])"), ".UPLOAD"),
)


def command_digest(argv: Sequence[str]) -> str:
    """A digest of a run's command, equal for two runs of the same command (the parts
    that differ per run replaced first)."""
    if not argv:
        return ""
    text = "\0".join(argv)
    for pattern, same in _PER_RUN:
        text = pattern.sub(same, text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def runs_to(results: Iterable[Result], remote: str, direction: str = "download") -> list[Run]:
    """The ok runs to `remote` in `direction` that the model can use (move_runs less those
    it leaves out)."""
    return [run for run in move_runs(results, remote, direction) if not run.left_out]


def move_runs(results: Iterable[Result], remote: str, direction: str = "download") -> list[Run]:
    """Every transfer to `remote` in `direction` the model could stand on, each with why it
    leaves it out ("" if it does not): the exporter's own and tuning sweeps' (not imported
    2015 results: another measure of time).  A skipped one (never run: its tool is not
    installed here) is left out as NOT_INSTALLED, so that plan-move says so rather than
    "never measured"; any other skip is no run at all."""
    return [
        Run(
            r.protocol,
            r.sweep_label if r.source == "sweep" else "",
            r.file_bytes,
            max(r.files, 1),
            r.duration_seconds,
            r.start_timestamp,
            r.source,
            command_digest(r.argv),
            left_out_of_moves(r),
        )
        for r in results
        if r.remote == remote
        and r.direction == direction
        and r.source in ("exporter", "sweep")
        and (r.outcome != "skipped" or "not installed" in r.error)
    ]


NOT_INSTALLED = "not installed"  # a skipped run's: never ran, its tool is missing on this host
# left_out_of_moves's answers, in the order it asks
LEFT_OUT = (NOT_INSTALLED, "failed", "unproven", "busy host", "no duration")


def left_out_of_moves(r: Result) -> str:
    """Why the move model leaves a run out ("" if it does not): not ok; unproven (no bytes
    it can prove moved, Result.unproven); a busy host limited
    it, by its verdict or, never judged, by the host state it recorded
    (judge.leaves_out_of_baselines: a run this host's CPU held says nothing of the move);
    no bytes or no time to fit."""
    if r.outcome == "skipped":
        return NOT_INSTALLED
    if r.outcome != "ok":
        return "failed"
    if r.unproven:  # no bytes it can prove moved: no run of the move
        return "unproven"
    if leaves_out_of_baselines(r):
        return "busy host"
    if not (r.file_bytes > 0 and r.duration_seconds > 0):
        return "no duration"
    return ""


# The exporter keeps at most this many runs per option, size, file count and UTC hour of
# day (the latest): a month of a minute schedule stays a few thousand runs per option,
# every hour and size still there, and a prediction after each result stays cheap.
MAX_PER_CELL = 40


class RecentRuns:
    """Each remote's recent runs for the model, thinned per cell (MAX_PER_CELL): those it
    uses and, in cells of their own, those it leaves out (so plan-move can say what it
    left out, and a busy week does not push the runs it uses out of their cells)."""

    def __init__(self) -> None:
        self.cells: dict[str, dict[tuple[str, str, int, int, int, str], deque[Run]]] = {}

    def add(self, remote: str, run: Run) -> None:
        hour = int(run.timestamp // HOUR) % 24
        cell = (run.protocol, run.setting, run.bytes, run.files, hour, run.left_out)
        self.cells.setdefault(remote, {}).setdefault(cell, deque(maxlen=MAX_PER_CELL)).append(run)

    def remotes(self) -> list[str]:
        return list(self.cells)

    def runs(self, remote: str, history: float) -> list[Run]:
        """The remote's runs the model uses, of the last `history` seconds before its latest."""
        return [run for run in self.basis(remote, history) if not run.left_out]

    def basis(self, remote: str, history: float) -> list[Run]:
        """The remote's runs of the last `history` seconds before its latest, those left out too."""
        every = [run for cell in self.cells.get(remote, {}).values() for run in cell]
        if not every:
            return []
        since = max(run.timestamp for run in every) - history
        return [run for run in every if run.timestamp >= since]


def counts_in_baseline(result: Result) -> bool:
    """Whether a result is one of the series' runs for the regression test (recent, then
    baseline): the one predicate every caller (service/rounds.py, backfill, the checkpoint)
    asks; a run a busy host limited (judge.leaves_out_of_baselines) is left out, and one
    that proves no bytes moved (Result.unproven).  The caller picks
    the source (the exporter's own runs, or an import's); a passive result never counts."""
    x = result.throughput_bytes_per_second
    return (
        result.source != "passive"  # this host's own transfers (bigbinf/passive/): never a scheduled series' run
        and result.outcome == "ok"
        and x > 0
        and math.isfinite(x)
        and not result.unproven  # a run that proves no bytes moved measured nothing (measure/transfer.py)
        and not leaves_out_of_baselines(result)
    )
