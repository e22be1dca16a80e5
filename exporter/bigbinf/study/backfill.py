"""Backfill: the journal's history as Prometheus TSDB blocks.

The live exporter publishes each series' last result as gauges (metrics.LAST_RESULT)
and Prometheus records them only from the moment it scrapes.  History from before that
(an earlier journal, imported 2015 dumps) is written here as OpenMetrics, one sample per
gauge per result at the result's start time, and turned into blocks by
`promtool tsdb create-blocks-from openmetrics`.  Moved into Prometheus' data directory,
the blocks make that history appear in queries and dashboards as if it had been scraped.

Why start time: the live gauges change when a transfer ends, but its identity (and the
start_timestamp gauge's value) is the start; putting the sample there makes
`bigbinf_last_transfer_start_timestamp_seconds == timestamp()` hold for backfilled data.
Prometheus stores milliseconds, so sample times are the start time rounded down to the
millisecond (never after the start, so a query at the start time sees the sample).
"""

from __future__ import annotations

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from bigbinf import metrics
from bigbinf.history.regression import History, RegressionSettings
from bigbinf.journal.store import Journal, SkippedLine
from bigbinf.metrics import Extra, last_result_samples, regression_samples
from bigbinf.result import Result, SeriesKey
from bigbinf.runs import counts_in_baseline
from bigbinf.study.common import IMPORTED, ORIGIN_LABEL, Progress, check_journal, journal_read_error
from bigbinf.usage import UsageError, parse_when

Value = float | int | bool


# The gauges one result sets come from metrics.last_result_samples, the same function
# the live exporter publishes with, so backfilled history cannot drift from live data.
LAST_SUCCESS = metrics.LAST_SUCCESS.name
GAUGES = tuple(spec.name for spec in metrics.LAST_RESULT if spec.name != LAST_SUCCESS)


class BackfillError(Exception):
    """promtool missing or failing: reported as one line with the fix."""


# ---------------------------------------------------------------------------------------
# OpenMetrics


def _escape(text: str) -> str:
    """A label value or HELP text: OpenMetrics escapes the same three characters in both."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: Value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))  # shortest text that reads back as the same float64


def timestamp_ms(start: float) -> int:
    return math.floor(start * 1000)


def format_timestamp(ms: int) -> str:
    return f"{ms // 1000}.{ms % 1000:03d}"  # OpenMetrics timestamps are seconds


def _labels(key: SeriesKey, extra: Sequence[tuple[str, str]], target: Sequence[tuple[str, str]] = ()) -> str:
    pairs = [
        *target,
        ("protocol", key.protocol),
        ("remote", key.remote),
        ("dataset", key.dataset),
        ("direction", key.direction),
        *extra,
    ]
    return "{" + ",".join(f'{name}="{_escape(value)}"' for name, value in pairs) + "}"


def by_series(results: Iterable[Result], left_out: list[Result] | None = None) -> dict[SeriesKey, list[Result]]:
    """Each series' results in time order, one per millisecond and origin (a sample is
    unique per series and timestamp: the journal's later line wins, and the earlier one
    goes to `left_out`, so that the caller can say so)."""
    unique: dict[tuple[SeriesKey, int, Extra], Result] = {}
    for result in results:
        slot = (result.key, timestamp_ms(result.start_timestamp), _origin(result))
        if slot in unique and left_out is not None:
            left_out.append(unique[slot])
        unique[slot] = result
    series: dict[SeriesKey, list[Result]] = defaultdict(list)
    for (key, _ms, _), result in sorted(unique.items(), key=lambda kv: (_key_order(kv[0][0]), kv[0][1], kv[0][2])):
        series[key].append(result)
    return series


def _key_order(key: SeriesKey) -> tuple[str, str, str, str]:
    return (key.protocol, key.remote, key.dataset, key.direction)


def _origin(result: Result) -> Extra:
    """origin="import" on imported 2015 results: they measure other things than the live
    exporter (payload bytes, packet-span time), and `report --source prometheus` keeps them
    apart by this label.  The live exporter never publishes imported results, so no live
    series gains or loses the label."""
    return ((ORIGIN_LABEL, IMPORTED),) if result.source == IMPORTED else ()


def regression_rows(
    series: dict[SeriesKey, list[Result]], settings: RegressionSettings
) -> dict[str, dict[tuple[SeriesKey, Extra], list[tuple[int, float]]]]:
    """The regression test's gauges (metrics.REGRESSION) through history: the journal
    walked in time order as the exporter would have recorded it, each series' verdict
    written at each of its ok results (milliseconds, value), its q-value across the
    series tested at that moment.  Imported results are their own family of series
    (origin label), tested and corrected for many series among themselves, never
    pooled with the exporter's.  A sweep's runs are not here (run() leaves them out)."""
    rows: dict[str, dict[tuple[SeriesKey, Extra], list[tuple[int, float]]]] = {
        spec.name: defaultdict(list) for spec in metrics.REGRESSION
    }
    histories: dict[Extra, History] = {}
    ordered = sorted((r for results in series.values() for r in results), key=lambda r: r.start_timestamp)
    for r in ordered:
        if not counts_in_baseline(r):
            continue
        origin = _origin(r)
        history = histories.setdefault(origin, History(settings))
        if not history.add(r.key, r.start_timestamp, r.throughput_bytes_per_second):
            continue
        verdict = history.verdicts().get(r.key)
        if verdict is None or verdict.test is None:  # too young to test
            continue
        for name, value in regression_samples(verdict):
            rows[name][(r.key, origin)].append((timestamp_ms(r.start_timestamp), value))
    return rows


def openmetrics_lines(
    series: dict[SeriesKey, list[Result]],
    target: Sequence[tuple[str, str]] = (),
    regression: RegressionSettings | None = None,
) -> Iterator[str]:
    """OpenMetrics text: each family once, each series' samples together and in time
    order (promtool's parser and the format require both), then `# EOF`."""
    specs = {spec.name: spec for spec in metrics.LAST_RESULT}
    by_result = {id(r): list(last_result_samples(r)) for results in series.values() for r in results}
    for name in GAUGES:
        yield f"# HELP {name} {_escape(specs[name].help)}\n"
        yield f"# TYPE {name} gauge\n"
        # Group per extra-label combination first, so every series stays contiguous.
        for key, results in series.items():
            rows: dict[Extra, list[str]] = defaultdict(list)
            for result in results:
                stamp = format_timestamp(timestamp_ms(result.start_timestamp))
                for _, extra, value in (smp for smp in by_result[id(result)] if smp[0] == name):
                    rows[extra + _origin(result)].append(f"{format_value(value)} {stamp}")
            for extra, samples in rows.items():
                labels = _labels(key, extra, target)
                for sample in samples:
                    yield f"{name}{labels} {sample}\n"
    yield f"# HELP {LAST_SUCCESS} {_escape(specs[LAST_SUCCESS].help)}\n"
    yield f"# TYPE {LAST_SUCCESS} gauge\n"
    for key, results in series.items():
        last_ok: dict[Extra, float] = {}  # per origin: an import's success is not the exporter's
        success_rows: dict[Extra, list[str]] = defaultdict(list)
        for result in results:
            origin = _origin(result)
            if result.outcome == "ok":
                last_ok[origin] = result.start_timestamp
            if origin in last_ok:  # the live gauge is absent until a series' first success
                stamp = format_timestamp(timestamp_ms(result.start_timestamp))
                success_rows[origin].append(f"{format_value(last_ok[origin])} {stamp}")
        for extra, samples in success_rows.items():
            labels = _labels(key, extra, target)
            for sample in samples:
                yield f"{LAST_SUCCESS}{labels} {sample}\n"
    verdicts = regression_rows(series, regression or RegressionSettings())
    for spec in metrics.REGRESSION:
        yield f"# HELP {spec.name} {_escape(spec.help)}\n"
        yield f"# TYPE {spec.name} gauge\n"
        for (key, origin), timed in verdicts[spec.name].items():
            labels = _labels(key, origin, target)
            for ms, value in timed:
                yield f"{spec.name}{labels} {format_value(value)} {format_timestamp(ms)}\n"
    yield "# EOF\n"


def write_openmetrics(
    results: Iterable[Result],
    path: Path,
    target: Sequence[tuple[str, str]] = (),
    regression: RegressionSettings | None = None,
) -> tuple[int, int, int]:
    """Write the file; returns (results written, series, results left out because a later
    one of the same series started in the same millisecond)."""
    left_out: list[Result] = []
    series = by_series(results, left_out)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(openmetrics_lines(series, target, regression))
    return sum(len(v) for v in series.values()), len(series), len(left_out)


# ---------------------------------------------------------------------------------------
# promtool


def find_promtool(given: str | None) -> str:
    exe = shutil.which(given) if given else shutil.which("promtool")
    if not exe:
        where = f"--promtool {given}" if given else "promtool on PATH"
        raise BackfillError(
            f"{where} not found: install Prometheus' promtool (Debian: apt install prometheus) or pass --promtool PATH"
        )
    return exe


def create_blocks(openmetrics: Path, out_dir: Path, promtool: str, max_block_duration: str | None = None) -> str:
    """Run promtool; returns its listing of the blocks created."""
    argv = [promtool, "tsdb", "create-blocks-from", "openmetrics"]
    if max_block_duration:
        argv.append(f"--max-block-duration={max_block_duration}")
    argv += [str(openmetrics), str(out_dir)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise BackfillError(
            f"promtool failed (exit {proc.returncode}) on {openmetrics}: {detail[-1] if detail else 'no output'}"
        )
    return proc.stdout


def block_dirs(out_dir: Path) -> list[Path]:
    """The block directories in out_dir (a block is a directory holding meta.json)."""
    return sorted(p for p in out_dir.iterdir() if (p / "meta.json").is_file()) if out_dir.is_dir() else []


# ---------------------------------------------------------------------------------------
# CLI


def register(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    # parents: the CLI's shared flags (--log.level ...), so they also work after `backfill`.
    p = subparsers.add_parser(
        "backfill",
        parents=list(parents),
        help="write the journal as Prometheus TSDB blocks (promtool)",
        description="Write the journal's results as OpenMetrics (the last-result gauges at each result's start "
        "time) and create TSDB blocks from it with promtool; move the blocks into Prometheus' data "
        "directory to see the history (see docs/report.md).",
    )
    p.add_argument("--journal", required=True, metavar="PATH", help="journal to read")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the new blocks (created if missing)")
    p.add_argument("--from", dest="start", metavar="WHEN", help="only results started at or after (UTC unless offset)")
    p.add_argument("--to", dest="end", metavar="WHEN", help="only results started before (UTC unless offset)")
    p.add_argument("--openmetrics", metavar="FILE", help="also keep the OpenMetrics file here")
    p.add_argument("--promtool", metavar="PATH", help="promtool binary (default: promtool on PATH)")
    p.add_argument(
        "--job",
        metavar="NAME",
        help="job label to give the history, e.g. bigbinf: with --instance, the same labels Prometheus "
        "adds to the live series, so history and live data are one series on the dashboards",
    )
    p.add_argument("--instance", metavar="HOST:PORT", help="instance label to give the history (see --job)")
    p.add_argument(
        "--max-block-duration",
        metavar="DURATION",
        help="passed to promtool, e.g. 24h for long histories (default: promtool's 2h)",
    )
    p.set_defaults(func=run)


def _read(
    journal_path: Path, start: float | None, end: float | None, stream: TextIO
) -> tuple[list[Result], list[SkippedLine]]:
    unreadable: list[SkippedLine] = []
    progress = Progress("read", "journal results", stream=stream)
    results = [
        r
        for r in progress.counted(Journal(journal_path).read(unreadable, since=start, until=end))
        if (start is None or r.start_timestamp >= start)
        and (end is None or r.start_timestamp < end)
        # A tuning sweep's runs are not the scheduled series' history (the live exporter
        # never publishes them as series either): their verdict is sweep-report's.  The
        # passive watcher's are this host's own transfers, not a series' (docs/passive.md).
        and r.source not in ("sweep", "passive")
    ]
    return results, unreadable


def _regression_settings(args: argparse.Namespace) -> RegressionSettings:
    """The regression test's settings: the configuration's (its regression section and
    schedule time zone) when --config.file is given, else the defaults (UTC)."""
    if not getattr(args, "config_file", None):
        return RegressionSettings()
    from bigbinf.config import ConfigError, load_config
    from bigbinf.history.regression import settings_of

    try:
        return settings_of(load_config(args.config_file))
    except ConfigError as exc:
        raise UsageError(f"--config.file {args.config_file}: {exc.render()}", 1) from None


def run(args: argparse.Namespace, stream: TextIO | None = None) -> int:
    stream = stream if stream is not None else sys.stderr
    journal_path, out_dir = Path(args.journal), Path(args.out)
    try:
        start = parse_when(args.start, 0.0, "--from") if args.start else None
        end = parse_when(args.end, 0.0, "--to", end_of_day=True) if args.end else None
        check_journal(journal_path)
        promtool = find_promtool(args.promtool)
        try:
            results, unreadable = _read(journal_path, start, end, stream)
        except OSError as exc:
            raise journal_read_error(journal_path, exc) from None
        for line in unreadable:  # the journal leaves reporting them to us: once each
            print(f"backfill: {line}", file=stream)
        if not results:
            raise UsageError(
                f"--journal {journal_path}: no results to backfill" + (" in --from/--to" if start or end else ""), 1
            )
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(
                f"--out {out_dir}: cannot create ({exc.strerror or exc}); choose a directory you can write", 1
            ) from None
        with tempfile.TemporaryDirectory(prefix="bigbinf-backfill-") as tmp:
            # Outside out_dir: out_dir's contents are meant to be moved into the data dir.
            om = Path(args.openmetrics) if args.openmetrics else Path(tmp) / "backfill.om"
            target = [(name, value) for name, value in (("job", args.job), ("instance", args.instance)) if value]
            try:
                written, series, left_out = write_openmetrics(results, om, target, _regression_settings(args))
            except OSError as exc:
                where = f"--openmetrics {om}" if args.openmetrics else f"temporary file {om} (set TMPDIR elsewhere)"
                raise UsageError(f"{where}: cannot write ({exc.strerror or exc}); choose a writable path", 1) from None
            before = set(block_dirs(out_dir))
            create_blocks(om, out_dir, promtool, args.max_block_duration)
        created = [b for b in block_dirs(out_dir) if b not in before]
    except (UsageError, BackfillError) as exc:
        print(f"bigbinf-exporter backfill: error: {exc}", file=stream)
        return getattr(exc, "code", 1)
    except OSError as exc:  # the journal, --out and --openmetrics have their own messages above
        print(f"bigbinf-exporter backfill: error: {exc.filename or out_dir}: {exc.strerror or exc}", file=stream)
        return 1
    if left_out:
        print(
            f"backfill: {left_out} results left out: each started in the same millisecond as a later journal line "
            "of its series (e.g. two 2015 clients' dumps of one transfer), and Prometheus keeps one sample per "
            "series and time",
            file=stream,
        )
    print(
        f"backfill: {written} results of {series} series, {len(unreadable)} unreadable journal lines skipped; "
        f"created {len(created)} blocks in {out_dir}. Move them into Prometheus' data directory "
        f"(--storage.tsdb.path); see docs/report.md.",
        file=stream,
    )
    return 0
