"""The study's tables from results: selection, Table 1 and Table 2, and the Report that holds them.

`build_report` is the pure core of the `report` command: results in, tables out (no
files, no network); bigbinf.study.report reads the results and writes the outputs.

Imported 2015 dumps (Result.source "import") measure other quantities than the exporter
(payload bytes and packet-span time, not frame bytes and wall clock), so every table row
is per kind of measurement too (common.measured_by): never pooled.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bigbinf.journal.store import SkippedLine
from bigbinf.result import LIMITS, Result
from bigbinf.study.common import IMPORTED, group_order, measured_by, series_label
from bigbinf.study.stats import NORMALITY_ALPHA, mean, normal_verdict, sd, shapiro_p, welch

DEFAULT_PEAK_HOURS = (11, 15)  # the study's peak: 11h00-15h00 local time

# Categories of skipped results, in the order the report lists them.
OUT_OF_RANGE = "outside --from/--to"
FILTERED = "filtered out"
NOT_OK = "outcome not ok"
NO_DURATION = "no duration"
NO_FILE_BYTES = "no file size"
UNREADABLE = "unreadable journal line"
SWEEP_RUN = "tuning sweep run"  # Result.source "sweep": not a scheduled series (see `sweep-report`)


# ---------------------------------------------------------------------------------------
# Parameters


@dataclass(frozen=True)
class ReportOptions:
    peak_hours: tuple[float, float] = DEFAULT_PEAK_HOURS
    tz_offset_hours: float = 0.0  # local time = UTC + this; peak hours are local
    start: float | None = None  # UTC epoch seconds, inclusive
    end: float | None = None  # UTC epoch seconds, exclusive
    remotes: tuple[str, ...] = ()  # empty: every remote
    directions: tuple[str, ...] = ()  # empty: both directions


def is_peak(timestamp: float, peak_hours: tuple[float, float], tz_offset_hours: float) -> bool:
    """Whether a UTC epoch falls in the peak hours of the local day."""
    hour = ((timestamp + tz_offset_hours * 3600.0) % 86400.0) / 3600.0
    start, end = peak_hours
    if start < end:
        return start <= hour < end
    return hour >= start or hour < end  # a peak that wraps past midnight


# ---------------------------------------------------------------------------------------
# Selection


@dataclass(frozen=True)
class Skipped:
    what: str  # which result (or journal line)
    category: str  # one of the categories above, for counting
    reason: str  # the detail


def describe(result: Result) -> str:
    return f"{result.protocol} {result.remote} {result.dataset} {result.direction} {result.start_utc}"


def study_speed(result: Result) -> float | None:
    """Speed as the 2015 study computed it: bytes down over the capture time (last minus
    first packet), bytes counted as tcpdump's payload length.  An imported dump holds
    exactly those numbers (bytes_down, time); a new result has them from its capture
    (payload_bytes_down, first/last packet times), or None without a capture."""
    if result.source == IMPORTED:
        return result.wire_bytes_down / result.duration_seconds if result.duration_seconds > 0 else None
    first, last = result.first_packet_timestamp, result.last_packet_timestamp
    if first is None or last is None or last <= first:
        return None
    return result.payload_bytes_down / (last - first)


def _why_skipped(result: Result, opts: ReportOptions) -> tuple[str, str] | None:
    if result.source == "sweep":
        return SWEEP_RUN, f"run of sweep {result.sweep} (setting {result.sweep_label}): see `sweep-report`"
    if opts.start is not None and result.start_timestamp < opts.start:
        return OUT_OF_RANGE, "started before --from"
    if opts.end is not None and result.start_timestamp >= opts.end:
        return OUT_OF_RANGE, "started at or after --to"
    if opts.remotes and result.remote not in opts.remotes:
        return FILTERED, f"remote {result.remote!r} not in --remote"
    if opts.directions and result.direction not in opts.directions:
        return FILTERED, f"direction {result.direction!r} not in --direction"
    if result.outcome != "ok":
        detail = f": {result.error}" if result.error else ""
        return NOT_OK, f"outcome {result.outcome}{detail}"
    if not (0 < result.duration_seconds < math.inf):  # also NaN
        return NO_DURATION, f"duration is {result.duration_seconds}, so speed is undefined"
    if result.file_bytes <= 0:
        return NO_FILE_BYTES, "file size is 0, so the byte ratio is undefined"
    return None


def select(results: Iterable[Result], opts: ReportOptions) -> tuple[list[Result], list[Skipped]]:
    used: list[Result] = []
    skipped: list[Skipped] = []
    for result in results:
        why = _why_skipped(result, opts)
        if why is None:
            used.append(result)
        else:
            skipped.append(Skipped(describe(result), *why))
    used.sort(key=lambda r: r.start_timestamp)
    return used, skipped


# ---------------------------------------------------------------------------------------
# Table 1: peak vs off-peak per protocol


@dataclass(frozen=True)
class Table1Row:
    protocol: str
    direction: str
    source: str  # "exporter" or "import" (see measured_by)
    n_peak: int
    mean_peak: float | None  # mean speed (bytes/s)
    sd_peak: float | None
    shapiro_p_peak: float | None
    n_offpeak: int
    mean_offpeak: float | None
    sd_offpeak: float | None
    shapiro_p_offpeak: float | None
    normal: str  # "yes" if both groups pass Shapiro-Wilk, "no" if one fails, "n/a" if untestable
    t_statistic: float | None  # Welch's t (peak minus off-peak)
    df: float | None  # Welch-Satterthwaite degrees of freedom
    p_value: float | None  # two-sided; None when the test cannot be run (see note)
    note: str = ""

    @property
    def label(self) -> str:
        return series_label(self.protocol, self.direction, self.source)


def table1(used: Sequence[Result], opts: ReportOptions) -> list[Table1Row]:
    groups: dict[tuple[str, str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for result in used:
        peak, offpeak = groups[(result.protocol, result.direction, measured_by(result))]
        target = peak if is_peak(result.start_timestamp, opts.peak_hours, opts.tz_offset_hours) else offpeak
        target.append(result.throughput_bytes_per_second)
    rows = []
    for (protocol, direction, source), (peak, offpeak) in sorted(groups.items(), key=lambda kv: group_order(*kv[0])):
        sp, so = shapiro_p(peak), shapiro_p(offpeak)
        t, df, p, note = welch(peak, offpeak)
        rows.append(
            Table1Row(
                protocol,
                direction,
                source,
                len(peak),
                mean(peak),
                sd(peak),
                sp,
                len(offpeak),
                mean(offpeak),
                sd(offpeak),
                so,
                normal_verdict(sp, so),
                t,
                df,
                p,
                note,
            )
        )
    return rows


# ---------------------------------------------------------------------------------------
# Table 2: per file size x protocol means


@dataclass(frozen=True)
class Table2Row:
    file_bytes: int
    protocol: str
    direction: str
    source: str  # "exporter" or "import" (see measured_by)
    n: int
    bytes_down: float  # mean wire bytes remote -> client
    bytes_up: float
    bytes_total: float
    ratio: float  # mean wire bytes (down + up) per file byte
    ratio_percent: float  # the same as the study printed it: 100 = exactly the file size
    time_seconds: float  # mean duration
    speed_bytes_per_second: float  # mean of the per-transfer speeds
    # Mean of study_speed over the transfers that have it (None if none has): the number
    # to compare with the 2015 study's tables.
    study_speed_bytes_per_second: float | None = None
    # What limited these transfers most often, with how many of the judged ones:
    # "receive_window (3/4)"; "" when none was judged (imports, UDP, older journals).
    limited_by: str = ""

    @property
    def label(self) -> str:
        return series_label(self.protocol, self.direction, self.source)


def most_common_limit(members: Sequence[Result]) -> str:
    verdicts = Counter(r.limited_by for r in members if r.limited_by)
    if not verdicts:
        return ""
    # Ties go to the reason named first in LIMITS, so the column is stable.
    reason, count = max(verdicts.items(), key=lambda kv: (kv[1], -LIMITS.index(kv[0]) if kv[0] in LIMITS else -99))
    return f"{reason} ({count}/{sum(verdicts.values())})"


def table2(used: Sequence[Result]) -> list[Table2Row]:
    groups: dict[tuple[int, str, str, str], list[Result]] = defaultdict(list)
    for result in used:
        groups[(result.file_bytes, result.protocol, result.direction, measured_by(result))].append(result)
    rows = []
    for (size, protocol, direction, source), members in sorted(
        groups.items(), key=lambda kv: (kv[0][0], *group_order(*kv[0][1:]))
    ):
        ratio = statistics.fmean(r.byte_ratio for r in members)
        study = [s for s in map(study_speed, members) if s is not None]
        rows.append(
            Table2Row(
                file_bytes=size,
                protocol=protocol,
                direction=direction,
                source=source,
                n=len(members),
                bytes_down=statistics.fmean(r.wire_bytes_down for r in members),
                bytes_up=statistics.fmean(r.wire_bytes_up for r in members),
                bytes_total=statistics.fmean(r.wire_bytes_total for r in members),
                ratio=ratio,
                ratio_percent=ratio * 100.0,
                time_seconds=statistics.fmean(r.duration_seconds for r in members),
                speed_bytes_per_second=statistics.fmean(r.throughput_bytes_per_second for r in members),
                study_speed_bytes_per_second=statistics.fmean(study) if study else None,
                limited_by=most_common_limit(members),
            )
        )
    return rows


# ---------------------------------------------------------------------------------------
# The report


@dataclass
class Report:
    options: ReportOptions
    used: list[Result]
    skipped: list[Skipped]
    table1: list[Table1Row]
    table2: list[Table2Row]
    source: str = "journal"
    generated_utc: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    figures: list[Any] = field(default_factory=list)  # figures.FigureFile, once written

    def skipped_counts(self) -> dict[str, int]:
        counts = Counter(s.category for s in self.skipped)
        order = [OUT_OF_RANGE, FILTERED, NOT_OK, NO_DURATION, NO_FILE_BYTES, UNREADABLE]
        return {c: counts[c] for c in order if counts[c]}

    def summary(self) -> str:
        parts = ", ".join(f"{n} {c}" for c, n in self.skipped_counts().items())
        return f"used {len(self.used)} results, skipped {len(self.skipped)}" + (f" ({parts})" if parts else "")

    def to_json(self) -> dict[str, Any]:
        opts = self.options
        return {
            "generated_utc": self.generated_utc,
            "source": self.source,
            "parameters": {
                "from_utc": iso_utc(opts.start),
                "to_utc": iso_utc(opts.end),
                "peak_hours_local": list(opts.peak_hours),
                "tz_offset_hours": opts.tz_offset_hours,
                "remotes": list(opts.remotes),
                "directions": list(opts.directions),
                "normality_alpha": NORMALITY_ALPHA,
            },
            "used_count": len(self.used),
            "skipped_count": len(self.skipped),
            "skipped_by_category": self.skipped_counts(),
            "table1": [dataclasses.asdict(row) for row in self.table1],
            "table2": [dataclasses.asdict(row) for row in self.table2],
            "figures": [f.to_json() for f in self.figures],
            "used": [
                {
                    "protocol": r.protocol,
                    "remote": r.remote,
                    "dataset": r.dataset,
                    "direction": r.direction,
                    "start_utc": r.start_utc,
                    "source": r.source,
                }
                for r in self.used
            ],
            "skipped": [dataclasses.asdict(s) for s in self.skipped],
        }


def iso_utc(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat()


def build_report(
    results: Iterable[Result],
    peak_hours: tuple[float, float] = DEFAULT_PEAK_HOURS,
    tz_offset_hours: float = 0.0,
    start: float | None = None,
    end: float | None = None,
    remotes: Sequence[str] = (),
    directions: Sequence[str] = (),
    unreadable: Sequence[SkippedLine] = (),
    source: str = "journal",
) -> Report:
    """Tables 1 and 2 from results: the pure core of `report` (no files, no network)."""
    peak_start, peak_end = peak_hours  # also accepts a list, e.g. from JSON
    opts = ReportOptions((peak_start, peak_end), tz_offset_hours, start, end, tuple(remotes), tuple(directions))
    used, skipped = select(results, opts)
    skipped += [Skipped(f"{line.path}:{line.line}", UNREADABLE, line.reason) for line in unreadable]
    return Report(opts, used, skipped, table1(used, opts), table2(used), source=source)


# ---------------------------------------------------------------------------------------
# Column headings of table1.csv and table2.csv: one per field of Table1Row / Table2Row, in
# field order (the CSV rows are the fields in order); the HTML page shows fewer columns.


TABLE1_HEADINGS = (
    "Protocol",
    "Direction",
    "Source",
    "n peak",
    "Mean speed peak (B/s)",
    "SD peak",
    "Shapiro-Wilk p peak",
    "n off-peak",
    "Mean speed off-peak (B/s)",
    "SD off-peak",
    "Shapiro-Wilk p off-peak",
    "Normal",
    "Welch t",
    "df",
    "p-value",
    "Note",
)
STUDY_SPEED_HEADING = "Speed as the study computed it (bytes down / capture time)"
TABLE2_HEADINGS = (
    "File size (bytes)",
    "Protocol",
    "Direction",
    "Source",
    "n",
    "Bytes down",
    "Bytes up",
    "Bytes total",
    "Ratio",
    "Ratio (%)",
    "Time (s)",
    "Speed (bytes/s)",
    STUDY_SPEED_HEADING,
    "Limited by",
)
