"""The `report` command: the study's analysis from stored results, as HTML/CSV/JSON.

`bigbinf-exporter report` reads results from the journal (or back from a Prometheus that
scraped or was backfilled with them, bigbinf.study.readback), keeps the ok transfers in
the requested range and writes, into one directory:

    index.html      tables, figures, and what was used and skipped (bigbinf.study.html)
    table1.csv      peak vs off-peak per protocol: n, means, Shapiro-Wilk, Welch's t-test
    table2.csv      per file size x protocol: mean bytes down/up/total, ratio, time, speed,
                    and speed as the 2015 study computed it (bytes down / capture time)
    skipped.csv     every result not used, and why
    report.json     all of the above plus the parameters, for other tools
    fig4..fig8.png  the study's figures (bigbinf.study.figures)

The statistics need scipy and the figures matplotlib (the optional extra `report`); both
are imported only when a report is built, so the exporter itself runs without them.
The tables come from bigbinf.study.tables.build_report, which is pure; this module wraps
it: arguments, reading, writing.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import re
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TextIO

from bigbinf.journal.store import Journal, SkippedLine
from bigbinf.result import Result
from bigbinf.study.common import Progress, check_journal, journal_read_error, parse_tz_offset, require_extras
from bigbinf.study.html import render_html
from bigbinf.study.readback import DEFAULT_STEP_SECONDS, read_prometheus
from bigbinf.study.tables import TABLE1_HEADINGS, TABLE2_HEADINGS, Report, build_report
from bigbinf.usage import UsageError, parse_when

# ---------------------------------------------------------------------------------------
# Arguments (--from/--to and --tz-offset: common, since other commands parse them too)


def parse_peak(text: str) -> tuple[float, float]:
    """'11-15' -> (11, 15): peak is local hour in [11, 15).  '22-6' wraps past midnight."""
    match = re.fullmatch(r"\s*(\d{1,2}(?:\.\d+)?)\s*-\s*(\d{1,2}(?:\.\d+)?)\s*", text)
    if not match:
        raise UsageError(f"--peak {text!r}: expected START-END in hours, e.g. --peak 11-15")
    start, end = float(match.group(1)), float(match.group(2))
    if not (0 <= start <= 24 and 0 <= end <= 24) or start == end:
        raise UsageError(f"--peak {text!r}: hours must be 0-24 and differ, e.g. --peak 11-15")
    return (start, end)


# ---------------------------------------------------------------------------------------
# Writing: CSV, JSON (and, through html, HTML)


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


def write_report(
    report: Report, out_dir: Path, with_figures: bool = True, progress_stream: TextIO | None = None
) -> list[Path]:
    """Every output file of the report into out_dir; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if with_figures:
        # Imported only when figures are wanted: figures imports matplotlib, the optional extra
        # `report`, and `report --no-figures` must run without it.
        from bigbinf.study import figures

        report.figures = figures.write_all(report, out_dir, progress_stream=progress_stream)
        written += [f.file for f in report.figures]
    written += write_tables(report, out_dir)
    index = out_dir / "index.html"
    index.write_text(render_html(report), encoding="utf-8")
    written.append(index)
    return written


# ---------------------------------------------------------------------------------------
# CLI


def register(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    # parents: the CLI's shared flags (--log.level ...), so they also work after `report`.
    p = subparsers.add_parser(
        "report",
        parents=list(parents),
        help="the study's tables and figures from stored results",
        description="Write Table 1 (peak vs off-peak, Welch's t-test), Table 2 (per file size and protocol), "
        "Figures 4-8 and an HTML page from the journal or from Prometheus.",
    )
    p.add_argument("--journal", metavar="PATH", help="journal to read (needed with --source journal)")
    p.add_argument(
        "--source",
        nargs="+",
        default=["journal"],
        metavar="SOURCE",
        help="where results come from: 'journal' (default) or 'prometheus URL'",
    )
    p.add_argument(
        "--from",
        dest="start",
        metavar="WHEN",
        help="first start time included: YYYY-MM-DD or ISO 8601; local time per --tz-offset unless it "
        "has an offset (default: the beginning; required with --source prometheus)",
    )
    p.add_argument(
        "--to",
        dest="end",
        metavar="WHEN",
        help="start times before this are included; a bare date includes that whole day (default: now)",
    )
    p.add_argument("--peak", default="11-15", metavar="START-END", help="peak hours, local time (default 11-15)")
    p.add_argument(
        "--tz-offset",
        default="0",
        metavar="HOURS",
        help="local time as hours east of UTC, e.g. +2 for South Africa (default 0)",
    )
    p.add_argument("--remote", action="append", default=[], metavar="NAME", help="only this remote (repeatable)")
    p.add_argument(
        "--direction",
        action="append",
        default=[],
        choices=("download", "upload"),
        help="only this direction (repeatable; default both, shown as separate rows)",
    )
    p.add_argument(
        "--step",
        type=float,
        default=DEFAULT_STEP_SECONDS,
        metavar="SECONDS",
        help="Prometheus source: query resolution (default 60; keep it below 300)",
    )
    p.add_argument("--no-figures", action="store_true", help="tables only (no matplotlib needed)")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for index.html, CSV, JSON and PNGs")
    p.set_defaults(func=run)


def _load(
    args: argparse.Namespace, start: float | None, end: float | None, unreadable: list[SkippedLine]
) -> tuple[Iterable[Result], str]:
    source = args.source
    if source == ["journal"]:
        if not args.journal:
            raise UsageError("--journal PATH is required with --source journal (the default)")
        path = Path(args.journal)
        check_journal(path)
        progress = Progress("read", "journal results")
        # Only the segments of --from/--to are opened (bigbinf/journal/store.py).
        return progress.counted(Journal(path).read(unreadable, since=start, until=end)), f"journal {path}"
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
        require_extras("report", figures=not args.no_figures)
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
            raise UsageError(
                f"--out {out}: cannot write ({exc.strerror or exc}); choose a writable directory", 1
            ) from None
    except UsageError as exc:
        print(f"bigbinf-exporter report: error: {exc}", file=sys.stderr)
        return exc.code
    print(f"report: {report.summary()}; wrote {out / 'index.html'}", file=sys.stderr)
    return 0
