"""Analyses finished later: a measured transfer is published late rather than lost.

A transfer whose command ran and whose capture was written is a measurement, even when
its capture could not be analysed in time: the analyser timed out (a stuck file system,
a busy host), or the exporter was stopped while it worked (issue 36: a stop ends within
5 s, an analysis of a large capture may take longer).  Its capture is then moved into
``<journal>.pending/`` (beside the journal: the capture directory may be a private /tmp
that a restart empties) with what its result needs besides the capture's numbers: the
result judged on everything else, the analysis' inputs and the checks that need the wire.
The rounds (service/rounds.py) finish each entry under the round lock, at the next start
and before every round: analysed, judged, journaled, published with the transfer's own
start time and round id.  An entry that times out again is tried again, MAX_ATTEMPTS in
all; then it is journaled failed with the reason, its capture kept.

The files: ``ID.json`` (this module's record, written last and durably: an entry without
one is not an entry) and ``ID.pcap``.  A pcap without its record (a kill between the two)
is removed at the next finish.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bigbinf.journal.store import replace_durably
from bigbinf.result import PathBaseline, Result, SeriesKey

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # analyses of one entry that time out before it is journaled failed


@dataclass(frozen=True)
class PendingAnalysis:
    """A transfer's result waiting for its capture's analysis."""

    result: Result  # judged on everything but the capture (no wire numbers yet)
    pcap: str  # the capture, in the pending directory
    client_address: str
    remote_address: str
    mtu: int | None
    capture_packets: int | None  # what the capture tool says it wrote (a cut-short check)
    capture_tool: str
    transport: str  # what the capture must show (protocols.base.Expectation)
    min_data_flows: int
    keep_directory: str  # capture.keep's directory, or "" to remove the capture once analysed
    baseline: PathBaseline | None  # the round's probe of the path, to judge the limit
    reason: str  # why it was deferred (the analyser's error)
    attempts: int = 1  # analyses tried so far

    def to_json(self) -> dict[str, Any]:
        fields = {k: v for k, v in self.__dict__.items() if k not in ("result", "baseline")}
        return {
            **fields,
            "result": self.result.to_json(),
            "baseline": self.baseline.to_json() if self.baseline else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PendingAnalysis:
        baseline = data.get("baseline")
        return cls(
            **{k: v for k, v in data.items() if k not in ("result", "baseline")},
            result=Result.from_json(data["result"]),
            baseline=PathBaseline.from_json(baseline) if baseline else None,
        )


def directory(journal: Path) -> Path:
    return journal.with_name(journal.name + ".pending")


class PendingStore:
    """The pending analyses of one journal."""

    def __init__(self, journal: Path) -> None:
        self.path = directory(journal)

    def adopt(self, pcap: Path) -> Path:
        """Move a capture into the store (before its record is written: `put`)."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)  # captures show who talked to whom
        target = self.path / f"{uuid.uuid4().hex}.pcap"
        shutil.move(pcap, target)
        return target

    def put(self, entry: PendingAnalysis) -> None:
        replace_durably(Path(entry.pcap).with_suffix(".json"), json.dumps(entry.to_json(), sort_keys=True))

    def entries(self) -> Iterator[tuple[Path, PendingAnalysis]]:
        """Each readable entry (oldest transfer first); an unreadable record is logged
        and its entry removed, a pcap without a record removed."""
        if not self.path.is_dir():
            return
        found = []
        for record in sorted(self.path.glob("*.json")):
            try:
                entry = PendingAnalysis.from_json(json.loads(record.read_text()))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                log.error("%s: unreadable pending analysis (%s): removed", record, exc)
                self.remove(record)
                continue
            found.append((record, entry))
        records = {r.with_suffix(".pcap") for r, _ in found}
        for orphan in self.path.glob("*.pcap"):
            if orphan not in records and not orphan.with_suffix(".json").exists():
                log.warning("%s: a capture without its pending record (a kill between the two): removed", orphan)
                orphan.unlink(missing_ok=True)
        yield from sorted(found, key=lambda pair: pair[1].result.start_timestamp)

    def retry(self, record: Path, entry: PendingAnalysis, reason: str) -> None:
        replace_durably(record, json.dumps(replace(entry, attempts=entry.attempts + 1, reason=reason).to_json()))

    def remove(self, record: Path) -> None:
        """The entry's record, then its capture (unless moved away already)."""
        with contextlib.suppress(OSError):
            os.unlink(record)
        with contextlib.suppress(OSError):
            os.unlink(record.with_suffix(".pcap"))

    def series_of(self, round_id: str) -> set[SeriesKey]:
        """The series of a round's entries (each journaled once finished)."""
        return {e.result.key for _, e in self.entries() if e.result.round_id == round_id}
