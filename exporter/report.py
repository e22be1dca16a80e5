"""The study's analysis from stored results: Table 1, Table 2, Figures 4-8, as HTML/CSV/JSON.

`bigbinf-exporter report` reads results from the journal (or back from a Prometheus that
scraped or was backfilled with them), keeps the ok transfers in the requested range and
writes, into one directory:

    index.html      tables, figures, and what was used and skipped
    table1.csv      peak vs off-peak per protocol: n, means, Shapiro-Wilk, Welch's t-test
    table2.csv      per file size x protocol: mean bytes down/up/total, ratio, time, speed,
                    and speed as the 2015 study computed it (bytes down / capture time)
    skipped.csv     every result not used, and why
    report.json     all of the above plus the parameters, for other tools
    fig4..fig8.png  the study's figures (exporter/figures.py)

The statistics need scipy and the figures matplotlib (the optional extra `report`); both
are imported only when a report is built, so the exporter itself runs without them.
The core, `build_report`, is pure: results in, tables out; the CLI wraps it.

Imported 2015 dumps (Result.source "import") measure other quantities than the exporter
(payload bytes and packet-span time, not frame bytes and wall clock), so every table row
and figure series is per kind of measurement too (measured_by): never pooled.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import html
import json
import math
import re
import stat
import statistics
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from . import metric_names
from .journal import Journal, SkippedLine
from .result import OUTCOMES, Result

DEFAULT_PEAK_HOURS = (11, 15)  # the study's peak: 11h00-15h00 local time
NORMALITY_ALPHA = 0.05  # Shapiro-Wilk p below this: "not normal" (the t-test is then a rougher guide)
SHAPIRO_MIN_N = 3  # scipy.stats.shapiro needs at least 3 values
DEFAULT_STEP_SECONDS = 60.0  # Prometheus source: must stay below the 5 min lookback delta
MAX_POINTS_PER_QUERY = 10_000  # Prometheus refuses query_range answers above 11,000 points per series
SKIPPED_SHOWN_IN_HTML = 500  # the full list is always in skipped.csv / report.json

# Categories of skipped results, in the order the report lists them.
OUT_OF_RANGE = "outside --from/--to"
FILTERED = "filtered out"
NOT_OK = "outcome not ok"
NO_DURATION = "no duration"
NO_FILE_BYTES = "no file size"
UNREADABLE = "unreadable journal line"


class UsageError(Exception):
    """A bad argument or input: reported as one line naming it and the fix, never a traceback."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------------------------------
# Progress (shared with the importer)


class Progress:
    """Progress lines on stderr for long runs ("imported 120/500 dumps").

    At most one line per `interval` seconds, so neither a terminal nor a log is flooded;
    runs shorter than the interval print nothing but their final summary.
    """

    def __init__(self, verb: str, noun: str, total: int | None = None, stream: TextIO | None = None,
                 interval: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
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
# Parameters


@dataclass(frozen=True)
class ReportOptions:
    peak_hours: tuple[float, float] = DEFAULT_PEAK_HOURS
    tz_offset_hours: float = 0.0  # local time = UTC + this; peak hours are local
    start: float | None = None  # UTC epoch seconds, inclusive
    end: float | None = None  # UTC epoch seconds, exclusive
    remotes: tuple[str, ...] = ()  # empty: every remote
    directions: tuple[str, ...] = ()  # empty: both directions


def parse_peak(text: str) -> tuple[float, float]:
    """'11-15' -> (11, 15): peak is local hour in [11, 15).  '22-6' wraps past midnight."""
    match = re.fullmatch(r"\s*(\d{1,2}(?:\.\d+)?)\s*-\s*(\d{1,2}(?:\.\d+)?)\s*", text)
    if not match:
        raise UsageError(f"--peak {text!r}: expected START-END in hours, e.g. --peak 11-15")
    start, end = float(match.group(1)), float(match.group(2))
    if not (0 <= start <= 24 and 0 <= end <= 24) or start == end:
        raise UsageError(f"--peak {text!r}: hours must be 0-24 and differ, e.g. --peak 11-15")
    return (start, end)


def parse_tz_offset(text: str) -> float:
    """'+2', '-5', '+5:30', '5.5' -> hours east of UTC."""
    match = re.fullmatch(r"\s*([+-]?)(\d{1,2})(?::(\d{2})|(\.\d+))?\s*", text)
    if not match:
        raise UsageError(f"--tz-offset {text!r}: expected hours east of UTC, e.g. --tz-offset +2 or +5:30")
    sign = -1.0 if match.group(1) == "-" else 1.0
    hours = float(match.group(2)) + (float(match.group(3)) / 60 if match.group(3) else 0.0)
    hours += float(match.group(4)) if match.group(4) else 0.0
    if hours > 14:
        raise UsageError(f"--tz-offset {text!r}: UTC offsets lie between -14 and +14 hours")
    return sign * hours


def parse_when(text: str, tz_offset_hours: float, option: str, end_of_day: bool = False) -> float:
    """A --from/--to value as UTC epoch seconds.

    Dates and times without an offset are local time (the --tz-offset), like the peak
    hours.  A bare date given to --to means the end of that day, so `--to 2024-03-31`
    includes the 31st.
    """
    text = text.strip()
    if text == "now":
        return time.time()
    local = dt.timezone(dt.timedelta(hours=tz_offset_hours))
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            day = dt.datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=local)
            return (day + dt.timedelta(days=1 if end_of_day else 0)).timestamp()
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{option} {text!r}: not a date; use YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS][+HH:MM] or now") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=local)
    return when.timestamp()


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


IMPORTED = "import"  # Result.source of a 2015 dump brought in by `import`
EXPORTER = "exporter"


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


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _sd(values: Sequence[float]) -> float | None:
    return statistics.stdev(values) if len(values) >= 2 else None


def shapiro_p(values: Sequence[float]) -> float | None:
    """Shapiro-Wilk p-value, or None where the test does not apply (n < 3, all equal)."""
    from scipy import stats  # optional extra `report`

    if len(values) < SHAPIRO_MIN_N or max(values) == min(values):
        return None
    with warnings.catch_warnings():
        # scipy warns that p may be inaccurate for n > 5000; the report still shows it.
        warnings.simplefilter("ignore")
        return float(stats.shapiro(values).pvalue)


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float | None, float | None, float | None, str]:
    """Welch's t-test (unequal variances): (t, df, two-sided p, note)."""
    from scipy import stats  # optional extra `report`

    if len(a) < 2 or len(b) < 2:
        return None, None, None, "t-test needs at least 2 transfers both in and outside the peak"
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return None, None, None, "t-test undefined: every speed in both groups is identical"
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    test = stats.ttest_ind(a, b, equal_var=False)
    return float(test.statistic), df, float(test.pvalue), ""


def _normal_verdict(*ps: float | None) -> str:
    if any(p is None for p in ps):
        return "n/a"
    return "yes" if all(p >= NORMALITY_ALPHA for p in ps if p is not None) else "no"


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
        rows.append(Table1Row(protocol, direction, source, len(peak), _mean(peak), _sd(peak), sp,
                              len(offpeak), _mean(offpeak), _sd(offpeak), so,
                              _normal_verdict(sp, so), t, df, p, note))
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

    @property
    def label(self) -> str:
        return series_label(self.protocol, self.direction, self.source)


def table2(used: Sequence[Result]) -> list[Table2Row]:
    groups: dict[tuple[int, str, str, str], list[Result]] = defaultdict(list)
    for result in used:
        groups[(result.file_bytes, result.protocol, result.direction, measured_by(result))].append(result)
    rows = []
    for (size, protocol, direction, source), members in sorted(
            groups.items(), key=lambda kv: (kv[0][0], *group_order(*kv[0][1:]))):
        ratio = statistics.fmean(r.byte_ratio for r in members)
        study = [s for s in map(study_speed, members) if s is not None]
        rows.append(Table2Row(
            file_bytes=size, protocol=protocol, direction=direction, source=source, n=len(members),
            bytes_down=statistics.fmean(r.wire_bytes_down for r in members),
            bytes_up=statistics.fmean(r.wire_bytes_up for r in members),
            bytes_total=statistics.fmean(r.wire_bytes_total for r in members),
            ratio=ratio, ratio_percent=ratio * 100.0,
            time_seconds=statistics.fmean(r.duration_seconds for r in members),
            speed_bytes_per_second=statistics.fmean(r.throughput_bytes_per_second for r in members),
            study_speed_bytes_per_second=statistics.fmean(study) if study else None,
        ))
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
    generated_utc: str = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
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
                "from_utc": _iso(opts.start), "to_utc": _iso(opts.end),
                "peak_hours_local": list(opts.peak_hours), "tz_offset_hours": opts.tz_offset_hours,
                "remotes": list(opts.remotes), "directions": list(opts.directions),
                "normality_alpha": NORMALITY_ALPHA,
            },
            "used_count": len(self.used),
            "skipped_count": len(self.skipped),
            "skipped_by_category": self.skipped_counts(),
            "table1": [dataclasses.asdict(row) for row in self.table1],
            "table2": [dataclasses.asdict(row) for row in self.table2],
            "figures": [f.to_json() for f in self.figures],
            "used": [{"protocol": r.protocol, "remote": r.remote, "dataset": r.dataset, "direction": r.direction,
                      "start_utc": r.start_utc, "source": r.source} for r in self.used],
            "skipped": [dataclasses.asdict(s) for s in self.skipped],
        }


def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return dt.datetime.fromtimestamp(timestamp, dt.timezone.utc).isoformat()


def build_report(results: Iterable[Result], peak_hours: tuple[float, float] = DEFAULT_PEAK_HOURS,
                 tz_offset_hours: float = 0.0, start: float | None = None, end: float | None = None,
                 remotes: Sequence[str] = (), directions: Sequence[str] = (),
                 unreadable: Sequence[SkippedLine] = (), source: str = "journal") -> Report:
    """Tables 1 and 2 from results: the pure core of `report` (no files, no network)."""
    opts = ReportOptions(tuple(peak_hours), tz_offset_hours, start, end, tuple(remotes), tuple(directions))
    used, skipped = select(results, opts)
    skipped += [Skipped(f"{line.path}:{line.line}", UNREADABLE, line.reason) for line in unreadable]
    return Report(opts, used, skipped, table1(used, opts), table2(used), source=source)


# ---------------------------------------------------------------------------------------
# Writing: CSV, JSON, HTML


TABLE1_HEADINGS = ("Protocol", "Direction", "Source", "n peak", "Mean speed peak (B/s)", "SD peak",
                   "Shapiro-Wilk p peak", "n off-peak", "Mean speed off-peak (B/s)", "SD off-peak",
                   "Shapiro-Wilk p off-peak", "Normal", "Welch t", "df", "p-value", "Note")
STUDY_SPEED_HEADING = "Speed as the study computed it (bytes down / capture time)"
TABLE2_HEADINGS = ("File size (bytes)", "Protocol", "Direction", "Source", "n", "Bytes down", "Bytes up",
                   "Bytes total", "Ratio", "Ratio (%)", "Time (s)", "Speed (bytes/s)", STUDY_SPEED_HEADING)


def _write_csv(path: Path, headings: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    # Empty cells (not "n/a") for values that do not exist, so spreadsheets read numbers.
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(headings)
        for row in rows:
            writer.writerow(["" if v is None else v for v in row])


def _fields(row: Any) -> list[Any]:
    return [getattr(row, f.name) for f in dataclasses.fields(row)]


def write_tables(report: Report, out_dir: Path) -> list[Path]:
    paths = [out_dir / "table1.csv", out_dir / "table2.csv", out_dir / "skipped.csv", out_dir / "report.json"]
    _write_csv(paths[0], TABLE1_HEADINGS, (_fields(r) for r in report.table1))
    _write_csv(paths[1], TABLE2_HEADINGS, (_fields(r) for r in report.table2))
    _write_csv(paths[2], ("Result", "Category", "Reason"), ((s.what, s.category, s.reason) for s in report.skipped))
    paths[3].write_text(json.dumps(_finite(report.to_json()), indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return paths


def _finite(value: Any) -> Any:
    """NaN/inf (a journal edited by hand) as null: strict JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _num(value: float | int | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _p(value: float | None) -> str:
    return "n/a" if value is None else (f"{value:.3g}" if value >= 0.001 else f"{value:.2e}")


def _html_table(headings: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headings)
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>"


IMPORT_NOTE = ("Protocols marked (2015 import) are the 2015 testbed's own numbers: TCP/UDP payload bytes and the time "
               "from first to last packet, not frame bytes and wall-clock time like new results, so they are kept "
               "in rows of their own and never pooled with new results.")


def render_html(report: Report) -> str:
    opts = report.options
    e = html.escape
    t1 = _html_table(
        ("Protocol", "n peak", "Mean peak (B/s)", "SD peak", "Shapiro p peak", "n off-peak",
         "Mean off-peak (B/s)", "SD off-peak", "Shapiro p off-peak", "Normal", "Welch t", "df", "p-value", "Note"),
        ([r.label, str(r.n_peak), _num(r.mean_peak), _num(r.sd_peak), _p(r.shapiro_p_peak), str(r.n_offpeak),
          _num(r.mean_offpeak), _num(r.sd_offpeak), _p(r.shapiro_p_offpeak), r.normal, _num(r.t_statistic, 3),
          _num(r.df, 1), _p(r.p_value), r.note] for r in report.table1))
    t2 = _html_table(
        ("File size (bytes)", "Protocol", "n", "Bytes down", "Bytes up", "Bytes total", "Ratio (%)", "Time (s)",
         "Speed (bytes/s)", STUDY_SPEED_HEADING.replace(")", ", B/s)")),
        ([_num(r.file_bytes), r.label, str(r.n), _num(r.bytes_down), _num(r.bytes_up), _num(r.bytes_total),
          _num(r.ratio_percent), _num(r.time_seconds), _num(r.speed_bytes_per_second),
          _num(r.study_speed_bytes_per_second)] for r in report.table2))
    figures = "\n".join(
        f'<figure><img src="{e(f.file.name)}" alt="{e(f.title)}"><figcaption><b>{e(f.title)}.</b> '
        f"{e(f.caption)}</figcaption></figure>" for f in report.figures)
    counts = "".join(f"<li>{n} {e(c)}</li>" for c, n in report.skipped_counts().items())
    listed = [s for s in report.skipped if s.category != OUT_OF_RANGE][:SKIPPED_SHOWN_IN_HTML]
    skipped_table = _html_table(("Result", "Category", "Reason"), ([s.what, s.category, s.reason] for s in listed))
    more = len([s for s in report.skipped if s.category != OUT_OF_RANGE]) - len(listed)
    peak = f"{opts.peak_hours[0]:g}h00-{opts.peak_hours[1]:g}h00 at UTC{opts.tz_offset_hours:+g}"
    imports = e(IMPORT_NOTE) + " " if any(measured_by(r) == IMPORTED for r in report.used) else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>bigbinf report</title>
<style>
body {{ font-family: sans-serif; margin: 2em; max-width: 80em; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #bbb; padding: 0.2em 0.5em; text-align: right; }}
th {{ background: #eee; }} td:first-child, th:first-child {{ text-align: left; }}
figure {{ margin: 2em 0; }} img {{ max-width: 100%; }}
</style></head>
<body>
<h1>Transfer performance report</h1>
<p>Source: {e(report.source)}. Range: {e(_iso(opts.start) or "beginning")} to {e(_iso(opts.end) or "end")} (UTC).
Peak hours: {e(peak)}. Generated {e(report.generated_utc)}.</p>
<p><b>Used {len(report.used)} results; skipped {len(report.skipped)}.</b></p>
<ul>{counts}</ul>
<p>Downloads: <a href="table1.csv">table1.csv</a>, <a href="table2.csv">table2.csv</a>,
<a href="skipped.csv">skipped.csv</a>, <a href="report.json">report.json</a>.</p>
<h2>Table 1: is the peak slower than off-peak?</h2>
<p>Mean speed (file bytes / duration) of transfers started in and outside the peak hours, the Shapiro-Wilk
normality p-value of each group (normal: p &ge; {NORMALITY_ALPHA} in both), and the two-sided p-value of Welch's
t-test with the null hypothesis that the mean speeds are the same. A small p-value (below 0.05) means the peak
does make a difference. {imports}</p>
{t1}
<h2>Table 2: per file size and protocol</h2>
<p>Means over the transfers of each file size and protocol. In rows of new measurements, bytes are link-layer
frame bytes captured on the client and time is the transfer command's wall clock. {imports}The ratio is bytes
total / file size (100% = exactly the file size); speed is file bytes / time. The last column is speed as the
2015 study computed it: payload bytes down / time from first to last packet (n/a without a capture), for
comparison with the study's tables.</p>
{t2}
<h2>Figures</h2>
{figures}
<h2>Skipped results</h2>
<p>Results outside the range are only counted; every skipped result is in skipped.csv.</p>
{skipped_table}
{f"<p>... and {more} more in skipped.csv.</p>" if more > 0 else ""}
</body></html>
"""


def write_report(report: Report, out_dir: Path, with_figures: bool = True,
                 progress_stream: TextIO | None = None) -> list[Path]:
    """Every output file of the report into out_dir; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if with_figures:
        from . import figures  # matplotlib: optional extra `report`

        report.figures = figures.write_all(report, out_dir, progress_stream=progress_stream)
        written += [f.file for f in report.figures]
    written += write_tables(report, out_dir)
    index = out_dir / "index.html"
    index.write_text(render_html(report), encoding="utf-8")
    written.append(index)
    return written


# ---------------------------------------------------------------------------------------
# Source: a Prometheus that scraped (or was backfilled with) the last-result gauges


LAST = metric_names.PREFIX + "last_transfer_"
START_METRIC = LAST + "start_timestamp_seconds"
# Gauge -> Result field, for the gauges without an extra label.
PLAIN_GAUGES = {
    LAST + "duration_seconds": "duration_seconds",
    LAST + "file_bytes": "file_bytes",
    LAST + "retransmits_wire": "retransmits_wire",
    LAST + "verified": "verified",
    LAST + "capture_dropped_packets": "capture_dropped",
    LAST + "success": "success",
}
WAY_GAUGES = {LAST + "wire_bytes": "wire_bytes", LAST + "payload_bytes": "payload_bytes", LAST + "packets": "packets"}
OUTCOME_GAUGE = LAST + "outcome"
ORIGIN_LABEL = "origin"  # set by backfill on imported results: origin="import"
SeriesId = tuple[tuple[str, str], ...]  # every label but __name__ (and way/outcome): one target's series


def _http_json(url: str, params: dict[str, Any], timeout: float) -> Any:
    query = urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{query}", timeout=timeout) as r:
            body = json.load(r)
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace")
        raise UsageError(f"--source prometheus {url}: HTTP {exc.code}: {detail}", 1) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UsageError(f"--source prometheus {url}: cannot query ({reason}); check the URL and that Prometheus is up",
                         1) from None
    if body.get("status") != "success":
        raise UsageError(f"--source prometheus {url}: {body.get('error', body)}", 1)
    return body["data"]["result"]


def _series_id(metric: dict[str, str], drop: tuple[str, ...] = ()) -> SeriesId:
    return tuple(sorted((k, v) for k, v in metric.items() if k != "__name__" and k not in drop))


def _windows(start: float, end: float, step: float) -> list[tuple[float, float]]:
    """Split [start, end] so no query_range answer exceeds Prometheus' points limit."""
    span = step * MAX_POINTS_PER_QUERY
    windows, t = [], start
    while t <= end:
        windows.append((t, min(end, t + span - step)))
        t += span
    return windows


def read_prometheus(url: str, start: float, end: float, step: float = DEFAULT_STEP_SECONDS,
                    timeout: float = 60.0, stream: TextIO | None = None) -> list[Result]:
    """Results back from Prometheus: one per distinct start timestamp of each series.

    query_range over the last-result gauges at `step`: a result is visible from its
    scrape (or backfilled sample) on, so each distinct value of
    bigbinf_last_transfer_start_timestamp_seconds is one result, and the other gauges
    are read at the first step that shows it (same scrape, so they belong together).
    Two results of one series less than `step` apart would be seen as one.  The query
    runs a day past `end` (not past now), since a result is published when the
    transfer ends, after its start.
    """
    query_end = min(time.time(), end + 86400.0)
    windows = _windows(start, max(start, query_end), step)
    names = [START_METRIC, OUTCOME_GAUGE, *PLAIN_GAUGES, *WAY_GAUGES]
    progress = Progress("queried", "Prometheus ranges", len(windows) * len(names), stream=stream)
    last_seen: dict[SeriesId, float] = {}  # the start value each series showed last
    found: dict[tuple[SeriesId, float], dict[str, Any]] = {}  # (series, step time) -> fields
    done = 0
    for w_start, w_end in windows:
        params = {"start": f"{w_start:.3f}", "end": f"{w_end:.3f}", "step": f"{step:g}"}
        needed: dict[tuple[SeriesId, float], dict[str, Any]] = {}
        for series in _http_json(url, {"query": START_METRIC, **params}, timeout):
            sid = _series_id(series["metric"])
            for t, value in series["values"]:
                value = float(value)
                if last_seen.get(sid) != value:
                    last_seen[sid] = value
                    needed[(sid, float(t))] = {"labels": series["metric"], "start": value}
        done += 1
        progress.update(done)
        for name in names[1:]:
            if needed:
                _collect(name, _http_json(url, {"query": name, **params}, timeout), needed)
            done += 1
            progress.update(done)
        found.update(needed)
    results = []
    for fields in found.values():
        try:
            results.append(_result_from_fields(fields))
        except ValueError as exc:  # e.g. a NaN gauge written by hand: one result, not the report
            where = ",".join(f'{k}="{v}"' for k, v in sorted(fields["labels"].items()) if k != "__name__")
            print(f"report: skipped the result of {{{where}}} started at {fields['start']!r} in {url}: {exc}",
                  file=stream if stream is not None else sys.stderr)
    return _dedupe(results)


def _collect(name: str, answer: list[dict[str, Any]], needed: dict[tuple[SeriesId, float], dict[str, Any]]) -> None:
    extra = "way" if name in WAY_GAUGES else "outcome" if name == OUTCOME_GAUGE else None
    for series in answer:
        sid = _series_id(series["metric"], drop=(extra,) if extra else ())
        for t, value in series["values"]:
            fields = needed.get((sid, float(t)))
            if fields is None:
                continue
            if name == OUTCOME_GAUGE:
                if float(value) == 1.0:
                    fields["outcome"] = series["metric"].get("outcome", "")
            elif extra == "way":
                fields[f"{WAY_GAUGES[name]}_{series['metric'].get('way', '')}"] = float(value)
            else:
                fields[PLAIN_GAUGES[name]] = float(value)


def _result_from_fields(fields: dict[str, Any]) -> Result:
    labels = fields["labels"]
    outcome = fields.get("outcome")
    error = ""
    if outcome not in OUTCOMES:
        if "success" in fields:
            outcome = "ok" if fields["success"] == 1.0 else "failed"
        else:
            outcome, error = "failed", "outcome not recorded in Prometheus"

    def whole(name: str) -> int:
        return int(round(fields.get(name, 0.0)))

    return Result(
        protocol=labels.get("protocol", ""), remote=labels.get("remote", ""), dataset=labels.get("dataset", ""),
        direction=labels.get("direction", "download"), start_timestamp=fields["start"], outcome=outcome,
        error=error, duration_seconds=fields.get("duration_seconds", 0.0), file_bytes=whole("file_bytes"),
        verified=fields.get("verified", 0.0) == 1.0, wire_bytes_down=whole("wire_bytes_down"),
        wire_bytes_up=whole("wire_bytes_up"), payload_bytes_down=whole("payload_bytes_down"),
        payload_bytes_up=whole("payload_bytes_up"), packets_down=whole("packets_down"), packets_up=whole("packets_up"),
        retransmits_wire=whole("retransmits_wire"), capture_dropped=whole("capture_dropped"),
        # backfill labels imported 2015 results origin="import" so they stay apart here too
        source=IMPORTED if labels.get(ORIGIN_LABEL) == IMPORTED else "prometheus",
    )


def _dedupe(results: Iterable[Result]) -> list[Result]:
    """One result per series and start time, whatever job/instance scraped it (HA pairs,
    backfilled copies of results also scraped live)."""
    unique: dict[tuple[Any, float], Result] = {}
    for result in results:
        unique.setdefault((result.key, result.start_timestamp), result)
    return sorted(unique.values(), key=lambda r: r.start_timestamp)


# ---------------------------------------------------------------------------------------
# CLI


def register(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    # parents: the CLI's shared flags (--log.level ...), so they also work after `report`.
    p = subparsers.add_parser(
        "report", parents=list(parents), help="the study's tables and figures from stored results",
        description="Write Table 1 (peak vs off-peak, Welch's t-test), Table 2 (per file size and protocol), "
                    "Figures 4-8 and an HTML page from the journal or from Prometheus.")
    p.add_argument("--journal", metavar="PATH", help="journal to read (needed with --source journal)")
    p.add_argument("--source", nargs="+", default=["journal"], metavar="SOURCE",
                   help="where results come from: 'journal' (default) or 'prometheus URL'")
    p.add_argument("--from", dest="start", metavar="WHEN",
                   help="first start time included: YYYY-MM-DD or ISO 8601; local time per --tz-offset unless it "
                        "has an offset (default: the beginning; required with --source prometheus)")
    p.add_argument("--to", dest="end", metavar="WHEN",
                   help="start times before this are included; a bare date includes that whole day (default: now)")
    p.add_argument("--peak", default="11-15", metavar="START-END", help="peak hours, local time (default 11-15)")
    p.add_argument("--tz-offset", default="0", metavar="HOURS",
                   help="local time as hours east of UTC, e.g. +2 for South Africa (default 0)")
    p.add_argument("--remote", action="append", default=[], metavar="NAME", help="only this remote (repeatable)")
    p.add_argument("--direction", action="append", default=[], choices=("download", "upload"),
                   help="only this direction (repeatable; default both, shown as separate rows)")
    p.add_argument("--step", type=float, default=DEFAULT_STEP_SECONDS, metavar="SECONDS",
                   help="Prometheus source: query resolution (default 60; keep it below 300)")
    p.add_argument("--no-figures", action="store_true", help="tables only (no matplotlib needed)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for index.html, CSV, JSON and PNGs")
    p.set_defaults(func=run)


def check_journal(path: Path, must_exist: bool = True) -> None:
    """UsageError unless --journal names a file this process can read: one message per way
    it can go wrong, each naming the path and the fix (shared by report, import, backfill)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        if not must_exist:
            return
        raise UsageError(f"--journal {path}: no such file; give the exporter's journal path "
                         "(journal.path in its configuration)", 1) from None
    except OSError as exc:  # e.g. a parent directory this user may not enter
        raise UsageError(f"--journal {path}: cannot read ({exc.strerror or exc}); check the permissions of the "
                         "file and its directories, or run as a user who can read it", 1) from None
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"--journal {path}: is a directory; give the journal file itself, "
                         f"e.g. --journal {path / 'journal.jsonl'}")
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise UsageError(f"--journal {path}: cannot read ({exc.strerror or exc}); check the file's permissions, "
                         "or run as a user who can read it", 1) from None


def journal_read_error(path: Path, exc: OSError) -> UsageError:
    """A read that failed after check_journal passed (I/O error, file replaced)."""
    return UsageError(f"--journal {path}: cannot read ({exc.strerror or exc}); check the file and its permissions", 1)


def _load(args: argparse.Namespace, start: float | None, end: float | None,
          unreadable: list[SkippedLine]) -> tuple[Iterable[Result], str]:
    source = args.source
    if source == ["journal"]:
        if not args.journal:
            raise UsageError("--journal PATH is required with --source journal (the default)")
        path = Path(args.journal)
        check_journal(path)
        progress = Progress("read", "journal results")
        return progress.counted(Journal(path).read(unreadable)), f"journal {path}"
    if len(source) == 2 and source[0] == "prometheus":
        url = source[1]
        if not re.match(r"https?://", url):
            raise UsageError(f"--source prometheus {url!r}: expected an http:// or https:// URL")
        if start is None:
            raise UsageError("--source prometheus needs --from (Prometheus cannot cheaply say where its data begins)")
        if not 0 < args.step <= 300:
            raise UsageError(f"--step {args.step:g}: must be above 0 and at most 300 s (Prometheus' lookback)")
        return read_prometheus(url, start, end if end is not None else time.time(), args.step), f"prometheus {url}"
    raise UsageError(f"--source {' '.join(source)!r}: expected 'journal' or 'prometheus URL'")


def run(args: argparse.Namespace) -> int:
    try:
        peak = parse_peak(args.peak)
        tz = parse_tz_offset(args.tz_offset)
        start = parse_when(args.start, tz, "--from") if args.start else None
        end = parse_when(args.end, tz, "--to", end_of_day=True) if args.end else None
        if start is not None and end is not None and start >= end:
            raise UsageError(f"--from {args.start} is not before --to {args.end}")
        _require_extras(figures=not args.no_figures)
        unreadable: list[SkippedLine] = []
        results, source = _load(args, start, end, unreadable)
        try:
            report = build_report(results, peak, tz, start, end, args.remote, args.direction, unreadable, source)
        except OSError as exc:  # the journal is read lazily, inside build_report
            raise journal_read_error(Path(args.journal or ""), exc) from None
        for line in unreadable:  # the journal leaves reporting them to us: once each
            print(f"report: {line}", file=sys.stderr)
        out = Path(args.out)
        try:
            write_report(report, out, with_figures=not args.no_figures)
        except OSError as exc:
            raise UsageError(f"--out {out}: cannot write ({exc.strerror or exc}); choose a writable directory", 1) \
                from None
    except UsageError as exc:
        print(f"bigbinf-exporter report: error: {exc}", file=sys.stderr)
        return exc.code
    print(f"report: {report.summary()}; wrote {out / 'index.html'}", file=sys.stderr)
    return 0


def _require_extras(figures: bool) -> None:
    missing = []
    for module in ("scipy", "matplotlib") if figures else ("scipy",):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise UsageError(f"report needs {' and '.join(missing)}: pip install 'bigbinf[report]'")
