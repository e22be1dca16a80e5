"""What bigbinf's rule and dashboard generators share: the site settings, the recording
rules' names and the PromQL that attributes transfers to peak hours and hours of day.

bigbinf.mixin.rules turns these into prometheus/rules/*.yml; bigbinf.mixin.dashboards
reuses the same names and building blocks for grafana/dashboards/*.json, so that a panel
shows what a rule records and counts a transfer in the same period and hour as the rules
do.  Nothing here runs on its own:

    .venv/bin/python -m bigbinf.mixin.rules --help     # the settings below as flags
    .venv/bin/python -m bigbinf.mixin.dashboards

Exporter metric names come from bigbinf.metrics, never from literals here, so renaming a
metric there renames it in the rules, the recording rules' names and the dashboards.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bigbinf import DOCS_URL, metrics

# exporter/bigbinf/mixin/settings.py -> the repository, whose prometheus/ and grafana/
# hold the committed output.  Not the repository when bigbinf is installed from a wheel:
# default_out_dir() then asks for --out-dir.
REPO = Path(__file__).resolve().parents[3]

DURATION_RE = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")
DURATION_UNITS_MS = {
    "ms": 1,
    "s": 1000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
    "y": 31_536_000_000,
}
BASELINE_WINDOW = "7d"


def default_out_dir(given: Path | None, subdir: str) -> Path:
    """--out-dir, else REPO/subdir when REPO is the repository (an editable install).

    Raises ValueError (the caller reports it as a usage error) when neither is there:
    writing into site-packages' parents would put the files where nobody looks.
    """
    if given is not None:
        return given
    top = subdir.split("/", 1)[0]
    if not (REPO / top).is_dir():
        raise ValueError(
            f"--out-dir is required: bigbinf is not installed from its repository ({REPO} has no "
            f"{top}/ directory), so there is no {subdir}/ to write to by default"
        )
    return REPO / subdir


def _opt(default: Any, help_: str) -> Any:
    return dataclasses.field(default=default, metadata={"help": help_})


def flag(field_name: str) -> str:
    """The command-line flag of a Settings field: tz_offset_hours -> --tz-offset."""
    return "--" + field_name.removesuffix("_hours").replace("_", "-")


def duration_ms(text: str) -> int:
    """A Prometheus duration ("1h30m") in milliseconds."""
    return sum(int(n) * DURATION_UNITS_MS[unit] for n, unit in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", text))


@dataclass(frozen=True)
class Settings:
    """Everything a site may want to change; the defaults are what is committed."""

    peak_start: int = _opt(11, "first peak hour, local time (the study: 11h)")
    peak_end: int = _opt(15, "first hour after the peak, local time (the study: 15h); may wrap past midnight")
    tz_offset_hours: float = _opt(
        0.0,
        "local time = UTC + this offset: 2, -3.5, +5:30 or -03:30 (PromQL's hour() is "
        "UTC; a fixed offset: regenerate when daylight saving time changes it)",
    )
    job: str = _opt("bigbinf", "scrape job name of the exporter")
    recent_window: str = _opt(
        "24h",
        "window of the recent means and ratios the alerts watch (a whole day: with the "
        "study's two batches a day, one batch of each; docs/runbook.md)",
    )
    baseline_interval: str = _opt(
        "5m",
        "evaluation interval of the throughput roll-ups and the recent and 7-day means "
        "built on them (need not be fresh: the regression alerts wait an hour)",
    )
    regression_fraction: float = _opt(
        0.7, "alert when the recent per-transfer mean throughput < this x its 7-day baseline (docs/runbook.md)"
    )
    regression_for: str = _opt("1h", "for: of both fixed-ratio regression alerts")
    regressed_for: str = _opt(
        "5m",
        "for: of BigbinfThroughputRegressed (the exporter's regression state is already sticky: it changes only "
        "when a transfer ends, stays open while the drop lasts and closes on recovery or accept; the `for` only "
        "keeps a regression that opens and closes within minutes from paging: docs/runbook.md)",
    )
    failure_ratio: float = _opt(
        0.2, "alert when more than this share of recent transfers did not end ok (skipped ones excluded)"
    )
    failing_for: str = _opt("15m", "for: of BigbinfTransfersFailing")
    stale_multiple: float = _opt(
        2.0,
        "alert when the last success (BigbinfSeriesStale), or a path's last probe (BigbinfPathProbesStale), "
        "is older than this x the schedule interval",
    )
    stale_for: str = _opt("10m", "for: of BigbinfSeriesStale")
    exporter_down_for: str = _opt("5m", "for: of BigbinfExporterDown")
    byte_ratio_max: float = _opt(1.10, "alert above this many wire bytes per file byte")
    byte_ratio_for: str = _opt("30m", "for: of BigbinfByteRatioHigh")
    retransmit_ratio_max: float = _opt(0.01, "alert above this share of retransmitted segments per captured packet")
    retransmits_for: str = _opt("30m", "for: of BigbinfRetransmitsHigh")
    config_reload_for: str = _opt("10m", "for: of BigbinfConfigReloadFailed")
    web_config_refused_for: str = _opt(
        "0m", "for: of BigbinfWebConfigRefused (a refused web config stands until the next reload: no flapping)"
    )
    front_door_weakened_window: str = _opt(
        "1d",
        "BigbinfFrontDoorWeakened fires while TLS, basic auth or required client certificates are off but were on "
        "within this window (a restart with a weakened web config pages once, then falls silent)",
    )
    rounds_overrun_window: str = _opt(
        "6h", "BigbinfRoundsOverrun fires on two or more rounds skipped as round_running within this window"
    )
    undo_pending_for: str = _opt(
        "30m", "for: of BigbinfUndoPending (a killed exporter's next start undoes its changes at once)"
    )
    buffers_for: str = _opt(
        "1h",
        "for: of BigbinfTcpBuffersBelowBdp (a sysctl setting, not a passing state: the path gauges change once "
        "per round)",
    )
    probes_unanswered_for: str = _opt("30m", "for: of BigbinfPathProbesUnanswered")
    probes_stale_for: str = _opt("10m", "for: of BigbinfPathProbesStale")
    mesh_slots_missed_for: str = _opt("5m", "for: of BigbinfMeshSlotsMissed (any slot missed in --recent-window)")
    mesh_overrun_for: str = _opt("5m", "for: of BigbinfMeshSlotOverruns")
    mesh_round_fits_for: str = _opt("5m", "for: of BigbinfMeshRoundDoesNotFit")
    mesh_plans_for: str = _opt(
        "15m", "for: of BigbinfMeshPlansDisagree (sites switch plans at a round's start: a rollout may span one)"
    )
    mesh_clock_for: str = _opt("10m", "for: of BigbinfMeshClockOffset")
    runbook: str = _opt(
        f"{DOCS_URL}/runbook.md",
        "base of each alert's runbook_url: an absolute http(s) URL (Alertmanager's receivers and Grafana link "
        "to it as is); point it at your own copy of docs/runbook.md if you keep one",
    )

    def validate(self) -> list[str]:
        errors = []
        for name in ("peak_start", "peak_end"):
            if not 0 <= getattr(self, name) <= 23:
                errors.append(f"{flag(name)} must be an hour 0-23")
        if self.peak_start == self.peak_end:
            errors.append("--peak-start and --peak-end must differ (the peak is [start, end) local time)")
        if not -12 <= self.tz_offset_hours <= 14:
            errors.append("--tz-offset must be between -12 and 14 hours")
        for f in dataclasses.fields(self):
            if f.name.endswith(("_for", "_window", "_interval")) and not DURATION_RE.match(getattr(self, f.name)):
                errors.append(f"{flag(f.name)}: {getattr(self, f.name)!r} is not a Prometheus duration")
        if (
            DURATION_RE.match(self.baseline_interval)
            and DURATION_RE.match(self.recent_window)
            and not (1000 <= duration_ms(self.baseline_interval) < duration_ms(self.recent_window))
        ):
            # Each evaluation rolls up one interval of tiles; the recent mean sums whole ones.
            errors.append("--baseline-interval must be at least 1s and shorter than --recent-window")
        if DURATION_RE.match(self.recent_window) and duration_ms(self.recent_window) >= duration_ms(BASELINE_WINDOW):
            # The baselines need history from before the window (PERIOD_BASELINE_7D).
            errors.append(f"--recent-window must be shorter than the baselines' {BASELINE_WINDOW}")
        if not 0 < self.regression_fraction < 1:
            errors.append("--regression-fraction must be between 0 and 1")
        if not 0 <= self.failure_ratio < 1:
            errors.append("--failure-ratio must be in [0, 1)")
        if self.stale_multiple <= 0:
            errors.append("--stale-multiple must be positive")
        if not re.fullmatch(r"https?://[^\s/#?]+/[^\s#]*", self.runbook):
            errors.append(
                f"--runbook: {self.runbook!r} is not an absolute http(s) URL (without a #fragment); "
                f"e.g. {DOCS_URL}/runbook.md"
            )
        return errors


# ---------------------------------------------------------------- exporter metrics

_LAST_TRANSFER = metrics.PREFIX + "last_transfer_"
_LAST_RESULT = {
    spec.name.removeprefix(_LAST_TRANSFER): spec.name
    for spec in metrics.LAST_RESULT
    if spec.name.startswith(_LAST_TRANSFER)
}


def last_transfer(gauge: str) -> str:
    """The last-result gauge bigbinf_last_transfer_<gauge> as metrics.LAST_RESULT names it.

    A KeyError at import time, not a rule or panel that silently matches nothing, when
    the exporter no longer publishes the gauge.
    """
    return _LAST_RESULT[gauge]


START = last_transfer("start_timestamp_seconds")
LAST_THROUGHPUT = last_transfer("throughput_bytes_per_second")
THROUGHPUT = metrics.THROUGHPUT_HIST.name

# The path to each remote (labels job, instance, remote), probed once per round.
PATH_KEY = "job, instance, remote"


def path_bdp(selector: str = "") -> str:
    """The BDP of each path, without its `source` label, to match the buffer maxima on
    the remote alone.  The exporter publishes one source per path (configured, else lab,
    else iperf3); were there more, the largest is what a window must hold."""
    return f"max without(source) ({metrics.PATH_BDP.name}{selector})"


def probe_time(selector: str = "", offset: str = "") -> str:
    """UTC time of each path's last probe, whatever its method: one series per path."""
    return f"max without(method) ({metrics.PATH_PROBE_TS.name}{selector}{f' offset {offset}' if offset else ''})"


# ---------------------------------------------------------------- recording rules' names
#
# level:metric:operations.  The metric part is the exporter metric the rule is computed
# from, or for ratios the quotient's name with the exporter's prefix.


def _record(level: str, metric: str, operations: str) -> str:
    return f"{level}:{metric}:{operations}"


OK = _record("series", LAST_THROUGHPUT, "ok")
HOUR = _record("series", START, "hour_local")
PEAK = _record("series", START, "peak")
OK_PERIOD = _record("series_period", LAST_THROUGHPUT, "ok")
MEAN_RECENT = _record("series", THROUGHPUT, "mean_recent")
PERIOD_MEAN_RECENT = _record("series_period", THROUGHPUT, "mean_recent")
BYTE_RATIO_RECENT = _record("series", metrics.PREFIX + "transfer_wire_bytes_per_file_byte", "ratio_recent")
RETRANS_RECENT = _record("series", metrics.PREFIX + "transfer_retransmits_wire_per_packet", "ratio_recent")
FAILED_RECENT = _record("series", metrics.PREFIX + "transfers_failed", "ratio_recent")
PERIOD_SUM_ROLLUP = _record("series_period", f"{THROUGHPUT}_sum", "tiled_increase")
PERIOD_COUNT_ROLLUP = _record("series_period", f"{THROUGHPUT}_count", "tiled_increase")
HOUR_SUM_ROLLUP = _record("series_hour", f"{THROUGHPUT}_sum", "tiled_increase")
HOUR_COUNT_ROLLUP = _record("series_hour", f"{THROUGHPUT}_count", "tiled_increase")
MEAN_7D = _record("series", THROUGHPUT, "mean7d")
PERIOD_MEAN_7D = _record("series_period", THROUGHPUT, "mean7d")
HOUR_MEAN_7D = _record("series_hour", THROUGHPUT, "mean7d")
PERIOD_BASELINE_7D = _record("series_period", THROUGHPUT, "baseline7d")
BASELINE_7D_RECENT_MIX = _record("series", THROUGHPUT, "baseline7d_recent_mix")

# ---------------------------------------------------------------- PromQL building blocks

# Time-of-day means cut the counters into tiles of this length (tile_increase); the
# Time of day dashboard uses the same tiles and the same attribution.
TILE = "1m"


def in_peak(hour_expr: str, start: object, length: object, op: str) -> str:
    """The hour, rotated so the peak starts at 0, compared with the peak's length.

    `< bool` is 1 in [start, start + length) and 0 outside; `<` keeps only the peak
    series and `>=` only the off-peak ones.  The rotation makes a peak that wraps past
    midnight (22h-06h) one comparison.  start and length may be numbers or PromQL (the
    Time of day dashboard passes its variables).
    """
    return f"(({hour_expr} - {start} + 24) % 24) {op} {length}"


def tile_increase(counter: str, tile: str = TILE) -> str:
    """Increase of a counter in the tile ending at the evaluation time, exactly.

    Evaluated at steps of one tile (a subquery [range:1m]), x - x offset 1m telescopes:
    the tiles cover the range with no gap or overlap and nothing is extrapolated.  After
    a reset (exporter restart) the tile counts from 0, where bigbinf's counters start.
    Without a sample a tile earlier (Prometheus was down, or first saw the exporter
    with its counters already up) the tile is left out: counting the whole counter would
    attribute every earlier transfer to that one minute.  `sum without()` drops the metric
    name the `and` branch keeps, so every tile of a series has the same label set.
    """
    prev = f"{counter} offset {tile}"
    return f"sum without() ({counter} - {prev} >= 0 or ({counter} and {prev}))"


def tiles(counter: str, window: str, keep: str = "", offset: str = "") -> str:
    """Sum of a counter's tiles over `window`, each tile kept only where `keep` holds.

    `keep` looks at bigbinf_last_transfer_start_timestamp_seconds of the same scrape as
    the counter, so a tile's transfers are attributed to the start time of the series'
    last transfer, the one counted in it (as the recorded PEAK does).  Transfers of one
    series that end in the same minute all go with the last one's start.
    """
    inner = tile_increase(counter) + (f"\n    {keep}" if keep else "")
    return f"sum_over_time(({inner})[{window}:{TILE}]{f' offset {offset}' if offset else ''})"


def new_probe(gauge: str, selector: str = "", tile: str = TILE) -> str:
    """A path gauge, kept only where the path was probed again in the tile ending at the
    evaluation time.

    Evaluated at steps of one tile (a subquery [range:1m]), each probe counts once, in
    the tile it landed in, however long its values stay the latest: means over such a
    subquery are per probe, as the transfers' are per transfer, and a probe followed by
    a long gap (the exporter was down) weighs no more than the others.  Probes less than
    a tile apart count once per tile (the last).  A tile without a probe time a tile
    earlier is left out, as tile_increase leaves out a tile without a sample."""
    return f"{gauge}\n  and on({PATH_KEY}) ({probe_time(selector)} != {probe_time(selector, tile)})"


def probes(gauge: str, window: str, selector: str = "", keep: str = "") -> str:
    """Per-probe mean of a path gauge over `window`, of the probes `keep` selects (a
    filter on the probe time, e.g. in_peak of its hour)."""
    inner = new_probe(gauge, selector) + (f"\n    {keep}" if keep else "")
    return f"avg_over_time(({inner})[{window}:{TILE}])"


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n  / ({denominator} > 0)"


def hour_label(hour_expr: str) -> str:
    # count_values turns the hour (a value) into a label; 0-padded so "09" sorts before "10".
    return f'label_replace(count_values without() ("hour", {hour_expr}), "hour", "0$1", "hour", "([0-9])")'


def write_or_check(files: dict[str, str], out_dir: Path, check: bool, command: str) -> int:
    """Write the generated files into out_dir, or (check) compare them with what is there:
    1 and the stale paths on stderr when they differ, as both generators report it."""
    stale = []
    for name, text in files.items():
        path = out_dir / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print(f"{command}: out of date (run {command}): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0
