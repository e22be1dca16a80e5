#!/usr/bin/env python3
"""Generate bigbinf's Prometheus recording and alerting rules.

Prometheus rules cannot take parameters, yet the peak hours, the time zone and the
alert thresholds differ per site.  So the rules are generated from the settings below
and the output for the defaults is committed as prometheus/rules/*.yml;
tests/test_rules.py fails when the committed files differ from this generator's
default output.

    .venv/bin/python prometheus/generate_rules.py                 # rewrite prometheus/rules/
    .venv/bin/python prometheus/generate_rules.py --tz-offset 2 \\
        --peak-start 11 --peak-end 15 --out-dir /etc/prometheus/rules
    .venv/bin/python prometheus/generate_rules.py --check         # exit 1 if the committed files differ

--tz-offset takes hours east of UTC as the report command does: 2, -3.5, +5:30, -03:30
(its parser, exporter.report.parse_tz_offset, is imported from this repository).  Needs
PyYAML and a Python 3.11 that can import the repository's `exporter` package.  Rule
names follow `level:metric:operations`; docs/dashboards.md and docs/runbook.md explain
what each one means.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import yaml

HERE = Path(__file__).resolve().parent
RULES_DIR = HERE / "rules"
RECORDING_FILE = "bigbinf-recording.yml"
ALERTING_FILE = "bigbinf-alerts.yml"

DURATION_RE = re.compile(r"^([0-9]+(ms|s|m|h|d|w|y))+$")


def _opt(default: Any, help_: str) -> Any:
    return dataclasses.field(default=default, metadata={"help": help_})


@dataclass(frozen=True)
class Settings:
    """Everything a site may want to change; the defaults are what is committed."""

    peak_start: int = _opt(11, "first peak hour, local time (the study: 11h)")
    peak_end: int = _opt(15, "first hour after the peak, local time (the study: 15h); may wrap past midnight")
    tz_offset_hours: float = _opt(0.0, "local time = UTC + this offset: 2, -3.5, +5:30 or -03:30 (PromQL's hour() is "
                                         "UTC; a fixed offset: regenerate when daylight saving time changes it)")
    job: str = _opt("bigbinf", "scrape job name of the exporter")
    recent_window: str = _opt("24h", "window of the recent means and ratios the alerts watch (a whole day: with the "
                                     "study's two batches a day, one batch of each; docs/runbook.md)")
    baseline_interval: str = _opt("5m", "evaluation interval of the throughput roll-ups and the recent and 7-day means "
                                        "built on them (need not be fresh: the regression alerts wait an hour)")
    regression_fraction: float = _opt(0.7, "alert when the recent per-transfer mean throughput < this x its 7-day "
                                           "baseline (docs/runbook.md)")
    regression_for: str = _opt("1h", "for: of both regression alerts")
    failure_ratio: float = _opt(0.2, "alert when more than this share of recent transfers did not end ok (skipped ones "
                                   "excluded)")
    failing_for: str = _opt("15m", "for: of BigbinfTransfersFailing")
    stale_multiple: float = _opt(2.0, "alert when the last success is older than this x the schedule interval")
    stale_for: str = _opt("10m", "for: of BigbinfSeriesStale")
    exporter_down_for: str = _opt("5m", "for: of BigbinfExporterDown")
    byte_ratio_max: float = _opt(1.10, "alert above this many wire bytes per file byte")
    byte_ratio_for: str = _opt("30m", "for: of BigbinfByteRatioHigh")
    retransmit_ratio_max: float = _opt(0.01, "alert above this share of retransmitted segments per captured packet")
    retransmits_for: str = _opt("30m", "for: of BigbinfRetransmitsHigh")
    config_reload_for: str = _opt("10m", "for: of BigbinfConfigReloadFailed")
    runbook: str = _opt("docs/runbook.md", "base of each alert's runbook_url (point it at your repository's copy)")

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
        if DURATION_RE.match(self.baseline_interval) and DURATION_RE.match(self.recent_window) and not (
                1000 <= duration_ms(self.baseline_interval) < duration_ms(self.recent_window)):
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
        return errors


# ---------------------------------------------------------------- PromQL helpers

START = "bigbinf_last_transfer_start_timestamp_seconds"
THROUGHPUT = "bigbinf_transfer_throughput_bytes_per_second"
# Time-of-day means cut the counters into tiles of this length (tile_increase); the
# Time of day dashboard uses the same tiles and the same attribution.
TILE = "1m"
BASELINE_WINDOW = "7d"
# The baselines' roll-ups look this far back, so that every scrape that a tile needs has
# been ingested before the roll-up freezes it (a scrape takes well under a minute).
SETTLE = "1m"
NOT_OK = 'outcome!~"ok|skipped"'  # the issue's "failing": every outcome but ok, skipped excluded
DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000,
                     "y": 31_536_000_000}


def duration_ms(text: str) -> int:
    """A Prometheus duration ("1h30m") in milliseconds."""
    return sum(int(n) * DURATION_UNITS_MS[unit] for n, unit in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", text))


def duration(ms: int) -> str:
    """Milliseconds as a Prometheus duration: 299999 -> 4m59s999ms."""
    parts = []
    for unit in ("d", "h", "m", "s", "ms"):
        n, ms = divmod(ms, DURATION_UNITS_MS[unit])
        if n:
            parts.append(f"{n}{unit}")
    return "".join(parts) or "0s"


def num(value: float) -> str:
    """A float as PromQL writes it: 2.0 -> 2, 0.7 -> 0.7."""
    return f"{value:g}"


def hour_local(ts_expr: str, s: Settings) -> str:
    """Local hour of day (0-23) of each sample's *value* read as a UTC timestamp."""
    shift = round(s.tz_offset_hours * 3600)
    if shift == 0:
        return f"hour({ts_expr})"
    return f"hour({ts_expr} {'+' if shift > 0 else '-'} {abs(shift)})"


def in_peak(hour_expr: str, start: object, length: object, op: str) -> str:
    """The hour, rotated so the peak starts at 0, compared with the peak's length.

    `< bool` is 1 in [start, start + length) and 0 outside; `<` keeps only the peak
    series and `>=` only the off-peak ones.  The rotation makes a peak that wraps past
    midnight (22h-06h) one comparison.  start and length may be numbers or PromQL (the
    Time of day dashboard passes its variables).
    """
    return f"(({hour_expr} - {start} + 24) % 24) {op} {length}"


def peak_test(hour_expr: str, s: Settings, op: str) -> str:
    return in_peak(hour_expr, s.peak_start, (s.peak_end - s.peak_start) % 24, op)


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


def ratio(numerator: str, denominator: str) -> str:
    return f"{numerator}\n  / ({denominator} > 0)"


def by_period(make: Callable[[str], str], s: Settings) -> str:
    """make(keep) for the transfers started in and out of the peak, labelled period."""
    hour = hour_local(START, s)
    peak = make(f"and {peak_test(hour, s, '<')}")
    offpeak = make(f"and {peak_test(hour, s, '>=')}")
    return (f'label_replace(\n  {peak},\n  "period", "peak", "", "")\n'
            f"or\n"
            f'label_replace(\n  {offpeak},\n  "period", "offpeak", "", "")')


def by_hour(make: Callable[[str], str], s: Settings) -> str:
    """make(keep) with an hour label: the local hour at which the transfer started."""
    return make(f"* ignoring(hour) group_left(hour) {hour_label(hour_local(START, s))}")


def hour_label(hour_expr: str) -> str:
    # count_values turns the hour (a value) into a label; 0-padded so "09" sorts before "10".
    return f'label_replace(count_values without() ("hour", {hour_expr}), "hour", "0$1", "hour", "([0-9])")'


def ok_only(expr: str) -> str:
    # The last-result gauges hold a failed transfer's numbers too (throughput 0).
    return f"{expr} and bigbinf_last_transfer_success == 1"


def utc_offset(s: Settings) -> str:
    return f"UTC{s.tz_offset_hours:+g}"


def anchor(alert: str) -> str:
    """GitHub's anchor for a Markdown heading made of the alert name."""
    return alert.lower()


# ---------------------------------------------------------------- recording rules

OK = "series:bigbinf_last_transfer_throughput_bytes_per_second:ok"
HOUR = "series:bigbinf_last_transfer_start_timestamp_seconds:hour_local"
PEAK = "series:bigbinf_last_transfer_start_timestamp_seconds:peak"
OK_PERIOD = "series_period:bigbinf_last_transfer_throughput_bytes_per_second:ok"
MEAN_RECENT = "series:bigbinf_transfer_throughput_bytes_per_second:mean_recent"
PERIOD_MEAN_RECENT = "series_period:bigbinf_transfer_throughput_bytes_per_second:mean_recent"
BYTE_RATIO_RECENT = "series:bigbinf_transfer_wire_bytes_per_file_byte:ratio_recent"
RETRANS_RECENT = "series:bigbinf_transfer_retransmits_wire_per_packet:ratio_recent"
FAILED_RECENT = "series:bigbinf_transfers_failed:ratio_recent"
PERIOD_SUM_ROLLUP = "series_period:bigbinf_transfer_throughput_bytes_per_second_sum:tiled_increase"
PERIOD_COUNT_ROLLUP = "series_period:bigbinf_transfer_throughput_bytes_per_second_count:tiled_increase"
HOUR_SUM_ROLLUP = "series_hour:bigbinf_transfer_throughput_bytes_per_second_sum:tiled_increase"
HOUR_COUNT_ROLLUP = "series_hour:bigbinf_transfer_throughput_bytes_per_second_count:tiled_increase"
MEAN_7D = "series:bigbinf_transfer_throughput_bytes_per_second:mean7d"
PERIOD_MEAN_7D = "series_period:bigbinf_transfer_throughput_bytes_per_second:mean7d"
HOUR_MEAN_7D = "series_hour:bigbinf_transfer_throughput_bytes_per_second:mean7d"
PERIOD_BASELINE_7D = "series_period:bigbinf_transfer_throughput_bytes_per_second:baseline7d"
BASELINE_7D_RECENT_MIX = "series:bigbinf_transfer_throughput_bytes_per_second:baseline7d_recent_mix"


def series_rules(s: Settings) -> list[dict[str, str]]:
    w = s.recent_window
    return [
        {"record": OK, "expr": ok_only("bigbinf_last_transfer_throughput_bytes_per_second")},
        {"record": HOUR, "expr": hour_local(START, s)},
        {"record": PEAK, "expr": peak_test(HOUR, s, "< bool")},
        {"record": OK_PERIOD, "expr": (
            f'label_replace({OK} and {PEAK} == 1, "period", "peak", "", "")\n'
            f"or\n"
            f'label_replace({OK} and {PEAK} == 0, "period", "offpeak", "", "")')},
        # Windowed ratios of counters are exact: both come from the same scrapes, so
        # increase()'s extrapolation cancels.  With no ok transfer in the window the last
        # ok transfer stands in, so the value does not vanish between batches.
        {"record": BYTE_RATIO_RECENT, "expr": (
            f"sum without(way) (increase(bigbinf_transfer_wire_bytes_total[{w}]))\n"
            f"  / (increase(bigbinf_transfer_file_bytes_total[{w}]) > 0)\n"
            f"or\n"
            f"{ok_only('bigbinf_last_transfer_byte_ratio')}")},
        {"record": RETRANS_RECENT, "expr": (
            f"increase(bigbinf_transfer_retransmits_wire_total[{w}])\n"
            f"  / (sum without(way) (increase(bigbinf_transfer_payload_size_bytes_count[{w}])) > 0)\n"
            f"or\n"
            f"(bigbinf_last_transfer_retransmits_wire / (sum without(way) (bigbinf_last_transfer_packets) > 0)\n"
            f"  and bigbinf_last_transfer_success == 1)")},
        # Share of transfers that did not end ok; skipped ones (binary missing) are not
        # failures and not counted at all.  Any outcome but those two counts, so a new
        # kind of failure cannot slip past.
        {"record": FAILED_RECENT, "expr": (
            f"sum without(outcome) (increase(bigbinf_transfers_total{{{NOT_OK}}}[{w}]))\n"
            f'  / (sum without(outcome) (increase(bigbinf_transfers_total{{outcome!="skipped"}}[{w}])) > 0)\n'
            f"or\n"
            f"(sum without(outcome) (bigbinf_last_transfer_outcome{{{NOT_OK}}})\n"
            f'  unless sum without(outcome) (bigbinf_last_transfer_outcome{{outcome="skipped"}}) == 1)')},
    ]


def throughput_rules(s: Settings) -> list[dict[str, str]]:
    """Per-transfer mean throughputs, whole-day, per period and per hour, all from the
    same roll-ups of the histogram's _sum and _count, so every regression alert compares
    a per-transfer mean with a per-transfer mean of the same transfers' kind."""
    w, b = s.recent_window, BASELINE_WINDOW
    total, count = f"{THROUGHPUT}_sum", f"{THROUGHPUT}_count"
    # Each evaluation rolls up the tiles that closed since the previous one: the window
    # is the group's interval less 1 ms, because a subquery's range includes its start.
    # Seven days of 1-minute tiles in one subquery would be 10080 steps per series at
    # every evaluation (and more samples than promtool's unit tests allow); seven days of
    # roll-ups are 2016 samples at the default 5m.  An evaluation Prometheus misses (a
    # restart) leaves its tiles out: the means lose those transfers, nothing more.
    roll = duration(duration_ms(s.baseline_interval) - 1)

    def rollup(counter: str) -> Callable[[str], str]:
        return lambda keep: tiles(counter, roll, keep, SETTLE)

    def over(window: str, name: str, without: str = "") -> str:
        summed = f"sum_over_time({name}[{window}])"
        return f"sum without({without}) ({summed})" if without else summed

    def mean(window: str, sums: str, counts: str, without: str = "") -> str:
        return ratio(over(window, sums, without), over(window, counts, without))

    count_recent, count_7d = over(w, PERIOD_COUNT_ROLLUP), over(b, PERIOD_COUNT_ROLLUP)  # ok transfers per period

    return [
        {"record": PERIOD_SUM_ROLLUP, "expr": by_period(rollup(total), s)},
        {"record": PERIOD_COUNT_ROLLUP, "expr": by_period(rollup(count), s)},
        {"record": HOUR_SUM_ROLLUP, "expr": by_hour(rollup(total), s)},
        {"record": HOUR_COUNT_ROLLUP, "expr": by_hour(rollup(count), s)},
        # Recent window: with no ok transfer in it the last ok transfer stands in (for its
        # own period), so the value does not vanish between batches.
        {"record": MEAN_RECENT, "expr": (
            f"{mean(w, PERIOD_SUM_ROLLUP, PERIOD_COUNT_ROLLUP, 'period')}\nor\n{OK}")},
        {"record": PERIOD_MEAN_RECENT, "expr": f"{mean(w, PERIOD_SUM_ROLLUP, PERIOD_COUNT_ROLLUP)}\nor\n{OK_PERIOD}"},
        # Baselines: BigbinfThroughputRegression's, BigbinfThroughputRegressionTimeOfDay's,
        # and the hour-of-day profile.
        {"record": MEAN_7D, "expr": mean(b, PERIOD_SUM_ROLLUP, PERIOD_COUNT_ROLLUP, "period")},
        {"record": PERIOD_MEAN_7D, "expr": mean(b, PERIOD_SUM_ROLLUP, PERIOD_COUNT_ROLLUP)},
        {"record": HOUR_MEAN_7D, "expr": mean(b, HOUR_SUM_ROLLUP, HOUR_COUNT_ROLLUP)},
        # BigbinfThroughputRegression's baseline: what the 7 days predict for the recent
        # window's own mix of peak and off-peak transfers, so that a window holding more
        # (or only) transfers of the slow period than the 7 days do cannot fire it
        # (docs/runbook.md, "The whole-day baseline").  Per period: the period's 7-day
        # mean where the period has ok transfers from before the recent window, else
        # (hours the series has not run at before) the series' all-day 7-day mean.  A
        # period without roll-ups in the window (the series' last start has been in the
        # other period all along) counts 0 transfers there.
        {"record": PERIOD_BASELINE_7D, "expr": (
            f"{PERIOD_MEAN_7D}\n"
            f"  and ({count_7d} > ({count_recent} or {count_7d} * 0))\n"
            f"or\n"
            f"({count_7d} * 0 + ignoring(period) group_left() {MEAN_7D})")},
        # Weighted by the recent window's ok transfers per period; with none in the window
        # (the last ok transfer stands in, as in mean_recent), the last ok transfer's period.
        {"record": BASELINE_7D_RECENT_MIX, "expr": (
            f"sum without(period) ({count_recent} * {PERIOD_BASELINE_7D})\n"
            f"  / (sum without(period) ({count_recent} and {PERIOD_BASELINE_7D}) > 0)\n"
            f"or\n"
            f"sum without(period) ({PERIOD_BASELINE_7D} and {OK_PERIOD})\n"
            f"or\n"
            f"{MEAN_7D}")},
    ]


def recording(s: Settings) -> dict[str, Any]:
    return {"groups": [
        {"name": "bigbinf.series", "rules": series_rules(s)},
        {"name": "bigbinf.throughput", "interval": s.baseline_interval, "rules": throughput_rules(s)},
    ]}


# ---------------------------------------------------------------- alerting rules

SERIES_TEXT = "{{ $labels.protocol }} {{ $labels.direction }} of {{ $labels.dataset }} with {{ $labels.remote }}"


def alert(s: Settings, name: str, expr: str, for_: str, severity: str, summary: str,
          description: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ not in ("0s", "0m"):
        rule["for"] = for_
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "description": description,
                           "runbook_url": f"{s.runbook}#{anchor(name)}"}
    return rule


def alerts(s: Settings) -> list[dict[str, Any]]:
    pct = num(s.regression_fraction * 100)
    up = f'up{{job="{s.job}"}}'
    return [
        alert(s, "BigbinfExporterDown", f"{up} == 0 or absent({up})", s.exporter_down_for, "critical",
              "bigbinf exporter down: {{ $labels.job }} {{ $labels.instance }}",
              f"Prometheus has not scraped job {s.job} ({{{{ $labels.instance }}}}) successfully for "
              f"{s.exporter_down_for}: no transfers are measured or published."),
        alert(s, "BigbinfSeriesStale", (
            "time() - (\n"
            "  bigbinf_last_success_timestamp_seconds\n"
            "  or (bigbinf_schedule_interval_seconds * 0\n"
            "      + on(job, instance) group_left() bigbinf_config_last_reload_success_timestamp_seconds)\n"
            f") > {num(s.stale_multiple)} * bigbinf_schedule_interval_seconds\n"
            # A protocol whose binary is not installed here is skipped every round: that
            # is reported by its outcome, not a stale series to page about.
            "unless on(job, instance, protocol, remote, dataset, direction)\n"
            '  bigbinf_last_transfer_outcome{outcome="skipped"} == 1'),
              s.stale_for, "warning",
              f"No successful transfer for {SERIES_TEXT}",
              f"The last successful transfer started {{{{ $value | humanizeDuration }}}} ago, more than "
              f"{num(s.stale_multiple)} times the schedule interval (series whose last outcome is skipped are left out)."),
        alert(s, "BigbinfTransfersFailing", f"{FAILED_RECENT} > {num(s.failure_ratio)}", s.failing_for,
              "warning",
              f"Transfers failing: {SERIES_TEXT}",
              f"{{{{ $value | humanizePercentage }}}} of the transfers of the last {s.recent_window} did not end ok "
              f"(failed, timed out; or the last one did not); skipped transfers are not counted."),
        # Both regression alerts compare a per-transfer mean with a per-transfer mean of
        # the same series; the time-of-day one also keeps the period apart, so it is the
        # primary one and Alertmanager inhibits the whole-day one while it fires.  The
        # whole-day baseline is the 7-day means of the recent transfers' own periods, so
        # the recent window's mix of peak and off-peak cannot fire it (docs/runbook.md,
        # "Which regression alert is primary", "The whole-day baseline").
        alert(s, "BigbinfThroughputRegression",
              f"{MEAN_RECENT} < {num(s.regression_fraction)} * {BASELINE_7D_RECENT_MIX}", s.regression_for, "warning",
              f"Throughput regressed: {SERIES_TEXT}",
              f"Mean throughput of the ok transfers of the last {s.recent_window} (or of the last ok transfer, "
              f"if none ran in it) is {{{{ $value | humanize1024 }}}}B/s, below {pct}% of the series' 7-day mean "
              f"for the same mix of peak and off-peak transfers (peak = transfers started "
              f"{s.peak_start:02d}h-{s.peak_end:02d}h at {utc_offset(s)})."),
        alert(s, "BigbinfThroughputRegressionTimeOfDay",
              f"{PERIOD_MEAN_RECENT} < {num(s.regression_fraction)} * {PERIOD_MEAN_7D}", s.regression_for, "warning",
              f"Throughput regressed for its time of day ({{{{ $labels.period }}}}): {SERIES_TEXT}",
              f"Mean throughput of the ok {{{{ $labels.period }}}} transfers of the last {s.recent_window} (or of "
              f"the last ok transfer, if none ran in it) is {{{{ $value | humanize1024 }}}}B/s, below {pct}% of "
              f"their 7-day mean (peak = transfers started "
              f"{s.peak_start:02d}h-{s.peak_end:02d}h at {utc_offset(s)})."),
        alert(s, "BigbinfByteRatioHigh", f"{BYTE_RATIO_RECENT} > {num(s.byte_ratio_max)}", s.byte_ratio_for,
              "warning",
              f"Wire overhead high: {SERIES_TEXT}",
              f"{{{{ $value | printf \"%.3f\" }}}} wire bytes per file byte over the last {s.recent_window} "
              f"(threshold {num(s.byte_ratio_max)})."),
        alert(s, "BigbinfRetransmitsHigh", f"{RETRANS_RECENT} > {num(s.retransmit_ratio_max)}",
              s.retransmits_for, "warning",
              f"Retransmits high: {SERIES_TEXT}",
              f"{{{{ $value | humanizePercentage }}}} of the captured packets of the last {s.recent_window} "
              f"were TCP retransmissions (threshold {num(s.retransmit_ratio_max * 100)}%)."),
        alert(s, "BigbinfConfigReloadFailed", "bigbinf_config_last_reload_successful == 0", s.config_reload_for,
              "warning",
              "bigbinf {{ $labels.instance }} rejected its configuration",
              "The last configuration load or reload failed; the previous configuration is still in force."),
    ]


def alerting(s: Settings) -> dict[str, Any]:
    return {"groups": [{"name": "bigbinf.alerts", "rules": alerts(s)}]}


# ---------------------------------------------------------------- output


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Multi-line PromQL reads best as a literal block.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def flag(field_name: str) -> str:
    return "--" + field_name.removesuffix("_hours").replace("_", "-")


def header(s: Settings, what: str) -> str:
    changed = [f"{flag(f.name)}={getattr(s, f.name)}" for f in dataclasses.fields(s)
               if getattr(s, f.name) != f.default]
    return (f"# bigbinf {what}: GENERATED by prometheus/generate_rules.py; do not edit by hand.\n"
            f"# Settings: {' '.join(changed) or 'defaults'} (peak {s.peak_start:02d}h-{s.peak_end:02d}h, "
            f"{utc_offset(s)}).\n")


def render(s: Settings) -> dict[str, str]:
    """File name -> content."""
    def dump(doc: dict[str, Any]) -> str:
        return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100000, allow_unicode=True)

    return {
        RECORDING_FILE: header(s, "recording rules") + dump(recording(s)),
        ALERTING_FILE: header(s, "alerting rules") + dump(alerting(s)),
    }


def tz_offset(text: str) -> float:
    """--tz-offset as the report command reads it (one parser for both)."""
    if str(HERE.parent) not in sys.path:
        sys.path.insert(0, str(HERE.parent))  # the repository's exporter package, installed or not
    from exporter.report import UsageError, parse_tz_offset

    try:
        return parse_tz_offset(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None) -> tuple[Settings, Path, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    defaults = Settings()
    for f in dataclasses.fields(Settings):
        kind = tz_offset if f.name == "tz_offset_hours" else type(f.default)
        parser.add_argument(flag(f.name), dest=f.name, type=kind, default=f.default,
                            metavar="HOURS" if kind is tz_offset else type(f.default).__name__.upper(),
                            help=f.metadata["help"])
    parser.add_argument("--out-dir", type=Path, default=RULES_DIR)
    parser.add_argument("--check", action="store_true", help="compare with --out-dir instead of writing")
    args = parser.parse_args(joined_negative_offsets(sys.argv[1:] if argv is None else argv))
    settings = Settings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(defaults)})
    return settings, args.out_dir, args.check


def joined_negative_offsets(argv: list[str]) -> list[str]:
    """`--tz-offset -03:30` -> `--tz-offset=-03:30`: argparse reads "-03:30" (not a plain
    negative number) as an option and would refuse the value."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--tz-offset" and arg.startswith("-"):
            out[-1] = f"--tz-offset={arg}"
        else:
            out.append(arg)
    return out


def main(argv: list[str] | None = None) -> int:
    settings, out_dir, check = parse_args(argv)
    errors = settings.validate()
    if errors:
        print("\n".join(f"generate_rules: {e}" for e in errors), file=sys.stderr)
        return 2
    stale = []
    for name, text in render(settings).items():
        path = out_dir / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print("generate_rules: out of date (run prometheus/generate_rules.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
