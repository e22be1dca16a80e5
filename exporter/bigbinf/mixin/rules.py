"""Generate bigbinf's Prometheus recording and alerting rules.

Prometheus rules cannot take parameters, yet the peak hours, the time zone and the
alert thresholds differ per site.  So the rules are generated from the settings in
bigbinf.mixin.settings (shared with the dashboard generator) and the output for the
defaults is committed as prometheus/rules/*.yml; tests/unit/test_rules.py fails when the
committed files differ from this generator's default output.

    .venv/bin/python -m bigbinf.mixin.rules                 # rewrite prometheus/rules/
    .venv/bin/python -m bigbinf.mixin.rules --tz-offset 2 \\
        --peak-start 11 --peak-end 15 --out-dir /etc/prometheus/rules
    .venv/bin/python -m bigbinf.mixin.rules --check         # exit 1 if the committed files differ

--tz-offset takes hours east of UTC as the report command does: 2, -3.5, +5:30, -03:30
(one parser for both: bigbinf.study.common.parse_tz_offset).  --out-dir defaults to the
repository's prometheus/rules, which only an editable install (pip install -e) has;
otherwise it is required.  Rule names follow `level:metric:operations`;
docs/dashboards.md and docs/runbook.md explain what each one means.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bigbinf import metrics
from bigbinf.mixin.settings import (
    BASELINE_7D_RECENT_MIX,
    BASELINE_WINDOW,
    BYTE_RATIO_RECENT,
    DURATION_UNITS_MS,
    FAILED_RECENT,
    HOUR,
    HOUR_COUNT_ROLLUP,
    HOUR_MEAN_7D,
    HOUR_SUM_ROLLUP,
    LAST_THROUGHPUT,
    MEAN_7D,
    MEAN_RECENT,
    OK,
    OK_PERIOD,
    PATH_KEY,
    PEAK,
    PERIOD_BASELINE_7D,
    PERIOD_COUNT_ROLLUP,
    PERIOD_MEAN_7D,
    PERIOD_MEAN_RECENT,
    PERIOD_SUM_ROLLUP,
    RETRANS_RECENT,
    START,
    THROUGHPUT,
    Settings,
    default_out_dir,
    duration_ms,
    flag,
    hour_label,
    in_peak,
    last_transfer,
    path_bdp,
    probe_time,
    ratio,
    tiles,
    write_or_check,
)
from bigbinf.study.common import parse_tz_offset
from bigbinf.usage import UsageError

# What the output's header, usage and error messages tell people to run.
COMMAND = "python -m bigbinf.mixin.rules"
RULES_SUBDIR = "prometheus/rules"
RECORDING_FILE = "bigbinf-recording.yml"
ALERTING_FILE = "bigbinf-alerts.yml"
# The alerts only a Prometheus that sees every site of a mesh can evaluate (the central one
# the sites forward to: bigbinf.mesh.prometheus gives it this file alone).
MESH_CENTRAL_FILE = "bigbinf-mesh-central.yml"


# ---------------------------------------------------------------- PromQL helpers
#
# The rules' own; the ones the dashboards reuse (tiles, in_peak, hour_label, ratio) are in
# bigbinf.mixin.settings.

# The baselines' roll-ups look this far back, so that every scrape that a tile needs has
# been ingested before the roll-up freezes it (a scrape takes well under a minute).
SETTLE = "1m"
NOT_OK = 'outcome!~"ok|skipped"'  # the "failing": every outcome but ok, skipped excluded


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


def peak_test(hour_expr: str, s: Settings, op: str) -> str:
    return in_peak(hour_expr, s.peak_start, (s.peak_end - s.peak_start) % 24, op)


def by_period(make: Callable[[str], str], s: Settings) -> str:
    """make(keep) for the transfers started in and out of the peak, labelled period."""
    hour = hour_local(START, s)
    peak = make(f"and {peak_test(hour, s, '<')}")
    offpeak = make(f"and {peak_test(hour, s, '>=')}")
    return (
        f'label_replace(\n  {peak},\n  "period", "peak", "", "")\n'
        f"or\n"
        f'label_replace(\n  {offpeak},\n  "period", "offpeak", "", "")'
    )


def by_hour(make: Callable[[str], str], s: Settings) -> str:
    """make(keep) with an hour label: the local hour at which the transfer started."""
    return make(f"* ignoring(hour) group_left(hour) {hour_label(hour_local(START, s))}")


def ok_only(expr: str) -> str:
    # The last-result gauges hold a failed transfer's numbers too (throughput 0).
    return f"{expr} and {last_transfer('success')} == 1"


def utc_offset(s: Settings) -> str:
    return f"UTC{s.tz_offset_hours:+g}"


def anchor(alert: str) -> str:
    """GitHub's anchor for a Markdown heading made of the alert name."""
    return alert.lower()


# ---------------------------------------------------------------- recording rules
#
# Their names are in bigbinf.mixin.settings: the dashboards show them too.


def series_rules(s: Settings) -> list[dict[str, str]]:
    w = s.recent_window
    transfers, outcome = metrics.TRANSFERS_TOTAL.name, last_transfer("outcome")
    return [
        {"record": OK, "expr": ok_only(LAST_THROUGHPUT)},
        {"record": HOUR, "expr": hour_local(START, s)},
        {"record": PEAK, "expr": peak_test(HOUR, s, "< bool")},
        {
            "record": OK_PERIOD,
            "expr": (
                f'label_replace({OK} and {PEAK} == 1, "period", "peak", "", "")\n'
                f"or\n"
                f'label_replace({OK} and {PEAK} == 0, "period", "offpeak", "", "")'
            ),
        },
        # Windowed ratios of counters are exact: both come from the same scrapes, so
        # increase()'s extrapolation cancels.  With no ok transfer in the window the last
        # ok transfer stands in, so the value does not vanish between batches.
        {
            "record": BYTE_RATIO_RECENT,
            "expr": (
                f"sum without(way) (increase({metrics.WIRE_BYTES_TOTAL.name}[{w}]))\n"
                f"  / (increase({metrics.FILE_BYTES_TOTAL.name}[{w}]) > 0)\n"
                f"or\n"
                f"{ok_only(last_transfer('byte_ratio'))}"
            ),
        },
        {
            "record": RETRANS_RECENT,
            "expr": (
                f"increase({metrics.RETRANSMITS_TOTAL.name}[{w}])\n"
                f"  / (sum without(way) (increase({metrics.PAYLOAD_SIZE_HIST.name}_count[{w}])) > 0)\n"
                f"or\n"
                f"({last_transfer('retransmits_wire')} / (sum without(way) ({last_transfer('packets')}) > 0)\n"
                f"  and {last_transfer('success')} == 1)"
            ),
        },
        # Share of transfers that did not end ok; skipped ones (binary missing) are not
        # failures and not counted at all.  Any outcome but those two counts, so a new
        # kind of failure cannot slip past.
        {
            "record": FAILED_RECENT,
            "expr": (
                f"sum without(outcome) (increase({transfers}{{{NOT_OK}}}[{w}]))\n"
                f'  / (sum without(outcome) (increase({transfers}{{outcome!="skipped"}}[{w}])) > 0)\n'
                f"or\n"
                f"(sum without(outcome) ({outcome}{{{NOT_OK}}})\n"
                f'  unless sum without(outcome) ({outcome}{{outcome="skipped"}}) == 1)'
            ),
        },
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
        {"record": MEAN_RECENT, "expr": (f"{mean(w, PERIOD_SUM_ROLLUP, PERIOD_COUNT_ROLLUP, 'period')}\nor\n{OK}")},
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
        {
            "record": PERIOD_BASELINE_7D,
            "expr": (
                f"{PERIOD_MEAN_7D}\n"
                f"  and ({count_7d} > ({count_recent} or {count_7d} * 0))\n"
                f"or\n"
                f"({count_7d} * 0 + ignoring(period) group_left() {MEAN_7D})"
            ),
        },
        # Weighted by the recent window's ok transfers per period; with none in the window
        # (the last ok transfer stands in, as in mean_recent), the last ok transfer's period.
        {
            "record": BASELINE_7D_RECENT_MIX,
            "expr": (
                f"sum without(period) ({count_recent} * {PERIOD_BASELINE_7D})\n"
                f"  / (sum without(period) ({count_recent} and {PERIOD_BASELINE_7D}) > 0)\n"
                f"or\n"
                f"sum without(period) ({PERIOD_BASELINE_7D} and {OK_PERIOD})\n"
                f"or\n"
                f"{MEAN_7D}"
            ),
        },
    ]


def recording(s: Settings) -> dict[str, Any]:
    return {
        "groups": [
            {"name": "bigbinf.series", "rules": series_rules(s)},
            {"name": "bigbinf.throughput", "interval": s.baseline_interval, "rules": throughput_rules(s)},
        ]
    }


# ---------------------------------------------------------------- alerting rules

SERIES_TEXT = "{{ $labels.protocol }} {{ $labels.direction }} of {{ $labels.dataset }} with {{ $labels.remote }}"
# The path's BDP and its source, looked up when the alert is sent: $value is the buffer.
BDP_TEXT = (
    "{{ range query (printf "
    f'"{metrics.PATH_BDP.name}{{job=%q, instance=%q, remote=%q}}" $labels.job $labels.instance $labels.remote) }}}}'
    " ({{ .Value | humanize1024 }}B, bandwidth source {{ .Labels.source }}){{ end }}"
)


SERIES_KEY = "job, instance, protocol, remote, dataset, direction"
# The regression test's numbers of the alert's series, looked up when the alert is sent.
SERIES_SELECTOR = "{job=%q, instance=%q, protocol=%q, remote=%q, dataset=%q, direction=%q}"
SERIES_ARGS = "$labels.job $labels.instance $labels.protocol $labels.remote $labels.dataset $labels.direction"


def series_value(metric: str, format_: str) -> str:
    """A template that prints `metric` of the alert's series (formatted by `format_`)."""
    return (
        f'{{{{ range query (printf "{metric}{SERIES_SELECTOR}" {SERIES_ARGS}) }}}}'
        f"{{{{ .Value | {format_} }}}}{{{{ end }}}}"
    )


def series_value_when(metric: str, when: str, format_: str) -> str:
    """series_value of a regression change gauge's `when` side."""
    selector = SERIES_SELECTOR[:-1] + ", when=%q}"
    return (
        f'{{{{ range query (printf "{metric}{selector}" {SERIES_ARGS} "{when}") }}}}'
        f"{{{{ .Value | {format_} }}}}{{{{ end }}}}"
    )


def before_after(metric: str, format_: str, unit: str = "") -> str:
    before, after = series_value_when(metric, "before", format_), series_value_when(metric, "after", format_)
    return f"{before}{unit} -> {after}{unit}"


# What changed when the open regression began (only where the exporter published it).
WHAT_CHANGED = (
    f'{{{{ range query (printf "{metrics.REGRESSION_CHANGE_INFO.name}{SERIES_SELECTOR}" {SERIES_ARGS}) }}}}'
    " What changed at its start: the transfers were mostly limited by {{ .Labels.limited_by_before }} before it, "
    "by {{ .Labels.limited_by_after }} since; path RTT "
    + before_after(metrics.REGRESSION_CHANGE_RTT.name, "humanizeDuration")
    + ", bandwidth estimate "
    + before_after(metrics.REGRESSION_CHANGE_BANDWIDTH.name, "humanize1024", "B/s")
    + ", retransmissions "
    + before_after(metrics.REGRESSION_CHANGE_RETRANSMITS.name, "humanizePercentage")
    + " (bigbinf-exporter advise says more).{{ end }}"
)


# Which regression detector fired (label `detector`): the significance test, or the
# fixed-ratio fallback where the test cannot decide.
SIGNIFICANCE, FIXED_RATIO = "significance", "fixed_ratio"
# The fallback's condition: the test cannot decide for the series (issue 35).  The exporter
# publishes bigbinf_throughput_regressed exactly where the test decides (the series is
# tested) or a regression of it is open; it is absent where the series is too young, has
# too few runs at a recent run's time of day, or the test is disabled: there the fallback
# stands in.  Nor for a week after an accept: its 7-day means still hold the level the
# operator has just said is gone.
TOO_YOUNG = (
    f"\nunless on({SERIES_KEY})\n  {metrics.REGRESSED.name}"
    f"\nunless on({SERIES_KEY})\n  time() - {metrics.REGRESSION_ACCEPTED.name} < {duration_ms(BASELINE_WINDOW) // 1000}"
)
FALLBACK_NOTE = (
    " Fixed-ratio fallback: the significance test (BigbinfThroughputRegressed) cannot decide for the series "
    "(too young, too few runs at a recent run's time of day, or disabled); it takes over once it can."
)


def alert(
    s: Settings,
    name: str,
    expr: str,
    for_: str,
    severity: str,
    summary: str,
    description: str,
    detector: str = "",
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ not in ("0s", "0m"):
        rule["for"] = for_
    rule["labels"] = {"severity": severity, **({"detector": detector} if detector else {})}
    rule["annotations"] = {"summary": summary, "description": description, "runbook_url": f"{s.runbook}#{anchor(name)}"}
    return rule


def schedule_gap(interval: str) -> str:
    """The gap between a series' starts as its schedule runs on this host: the interval
    (`interval`, a per-series gauge), or, where the last round ran past the next start
    and starts were skipped, the whole intervals that round took (a start that meets a
    running round is skipped: service/server.py).  The interval alone where the exporter
    publishes no overrun (before its first round; a mesh site, whose slots are planned)."""
    overrun = metrics.ROUND_OVERRUN.name
    return (
        f"(\n    ceil(({interval} + on(job, instance) group_left() {overrun}) / {interval}) * {interval}\n"
        f"    or {interval}\n  )"
    )


# The passive watcher's verdicts a site can act on itself (a window, a buffer, a program,
# a CPU, a disk), and the alert's window and least number of judged transfers in it.
SITE_FIXABLE = ("receive_window", "send_buffer", "application", "cpu", "disk")
PASSIVE_WINDOW = "6h"
PASSIVE_MIN_TRANSFERS = 3
PASSIVE_SHARE = 0.5


def passive_held_by_site() -> str:
    """More than PASSIVE_SHARE of a remote's judged passive transfers in the window held
    by a verdict of SITE_FIXABLE, over at least PASSIVE_MIN_TRANSFERS of them."""
    counter = metrics.PASSIVE_FLOWS_TOTAL.name
    by = "job, instance, remote"
    judged = f'sum by ({by}) (increase({counter}{{verdict!="none"}}[{PASSIVE_WINDOW}]))'
    fixable = f'sum by ({by}) (increase({counter}{{verdict=~"{"|".join(SITE_FIXABLE)}"}}[{PASSIVE_WINDOW}]))'
    return f"(\n  {fixable}\n/\n  {judged}\n) > {num(PASSIVE_SHARE)}\nand\n{judged} >= {PASSIVE_MIN_TRANSFERS}"


def alerts(s: Settings) -> list[dict[str, Any]]:
    pct = num(s.regression_fraction * 100)
    up = f'up{{job="{s.job}"}}'
    interval = metrics.SCHEDULE_INTERVAL.name
    return [
        alert(
            s,
            "BigbinfExporterDown",
            f"{up} == 0 or absent({up})",
            s.exporter_down_for,
            "critical",
            "bigbinf exporter down: {{ $labels.job }} {{ $labels.instance }}",
            f"Prometheus has not scraped job {s.job} ({{{{ $labels.instance }}}}) successfully for "
            f"{s.exporter_down_for}: no transfers are measured or published.",
        ),
        alert(
            s,
            "BigbinfSeriesStale",
            (
                "time() - (\n"
                f"  {metrics.LAST_SUCCESS.name}\n"
                f"  or ({interval} * 0\n"
                f"      + on(job, instance) group_left() {metrics.CONFIG_RELOAD_TS.name})\n"
                f") > {num(s.stale_multiple)} * {schedule_gap(interval)}\n"
                # A protocol whose binary is not installed here is skipped every round: that
                # is reported by its outcome, not a stale series to page about.
                "unless on(job, instance, protocol, remote, dataset, direction)\n"
                f'  {last_transfer("outcome")}{{outcome="skipped"}} == 1'
            ),
            s.stale_for,
            "warning",
            f"Stale: {SERIES_TEXT} has not succeeded within {num(s.stale_multiple)} times the gap between its starts",
            f"No ok transfer for {{{{ $value | humanizeDuration }}}} (since the last ok one, or since the "
            f"configuration was loaded if none since): more than {num(s.stale_multiple)} times the gap between "
            f"the series' starts as its schedule runs on this host (schedule.interval; where rounds overran and "
            f"starts were skipped, the whole intervals the last round took, {metrics.ROUND_OVERRUN.name}).  Series "
            f"whose last outcome is skipped are left out.",
        ),
        alert(
            s,
            "BigbinfTransfersFailing",
            f"{FAILED_RECENT} > {num(s.failure_ratio)}",
            s.failing_for,
            "warning",
            f"Transfers failing: {SERIES_TEXT}",
            f"{{{{ $value | humanizePercentage }}}} of the transfers of the last {s.recent_window} did not end ok "
            f"(failed, timed out; or the last one did not); skipped transfers are not counted.",
        ),
        # Both regression alerts compare a per-transfer mean with a per-transfer mean of
        # the same series; the time-of-day one also keeps the period apart, so it is the
        # primary one and Alertmanager inhibits the whole-day one while it fires.  The
        # whole-day baseline is the 7-day means of the recent transfers' own periods, so
        # the recent window's mix of peak and off-peak cannot fire it (docs/runbook.md,
        # "Which regression alert is primary", "The whole-day baseline").
        # The significance test's verdict (bigbinf/history/regression.py, computed by the
        # exporter from its journal): the primary regression alert wherever the series is
        # old enough to be tested.  $value is the ratio.
        alert(
            s,
            "BigbinfThroughputRegressed",
            f"{metrics.REGRESSED.name} == 1",
            s.regressed_for,
            "warning",
            f"Throughput regressed (significant): {SERIES_TEXT}",
            "A regression of the series is open since "
            + series_value(metrics.REGRESSION_SINCE.name, "humanizeTimestamp")
            + ": it opened significant (Mann-Whitney, false discovery rate regression.fdr across the exporter's "
            "series) and a drop of at least regression.material_drop, and it stays open until the recent transfers "
            "are back near the level before it ("
            + series_value(metrics.REGRESSION_LEVEL_BEFORE.name, "humanize1024")
            + "B/s) or an operator accepts the new level (bigbinf-exporter regression accept). The last ok "
            "transfers ran at "
            + series_value(metrics.REGRESSION_RATIO.name, "humanizePercentage")
            + " of it (confidence interval "
            + series_value(metrics.REGRESSION_RATIO_LOWER.name, "humanizePercentage")
            + "-"
            + series_value(metrics.REGRESSION_RATIO_UPPER.name, "humanizePercentage")
            + ", over "
            + series_value(metrics.REGRESSION_BASELINE_RUNS.name, 'printf "%.0f"')
            + " baseline transfers at their times of day)."
            + WHAT_CHANGED,
            SIGNIFICANCE,
        ),
        # The fixed-ratio fallback where the significance test cannot decide (TOO_YOUNG).
        alert(
            s,
            "BigbinfThroughputRegression",
            f"{MEAN_RECENT} < {num(s.regression_fraction)} * {BASELINE_7D_RECENT_MIX}{TOO_YOUNG}",
            s.regression_for,
            "warning",
            f"Throughput regressed: {SERIES_TEXT}",
            f"Mean throughput of the ok transfers of the last {s.recent_window} (or of the last ok transfer, "
            f"if none ran in it) is {{{{ $value | humanize1024 }}}}B/s, below {pct}% of the series' 7-day mean "
            f"for the same mix of peak and off-peak transfers (peak = transfers started "
            f"{s.peak_start:02d}h-{s.peak_end:02d}h at {utc_offset(s)}).{FALLBACK_NOTE}",
            FIXED_RATIO,
        ),
        alert(
            s,
            "BigbinfThroughputRegressionTimeOfDay",
            f"{PERIOD_MEAN_RECENT} < {num(s.regression_fraction)} * {PERIOD_MEAN_7D}{TOO_YOUNG}",
            s.regression_for,
            "warning",
            f"Throughput regressed for its time of day ({{{{ $labels.period }}}}): {SERIES_TEXT}",
            f"Mean throughput of the ok {{{{ $labels.period }}}} transfers of the last {s.recent_window} (or of "
            f"the last ok transfer, if none ran in it) is {{{{ $value | humanize1024 }}}}B/s, below {pct}% of "
            f"their 7-day mean (peak = transfers started "
            f"{s.peak_start:02d}h-{s.peak_end:02d}h at {utc_offset(s)}).{FALLBACK_NOTE}",
            FIXED_RATIO,
        ),
        alert(
            s,
            "BigbinfByteRatioHigh",
            f"{BYTE_RATIO_RECENT} > {num(s.byte_ratio_max)}",
            s.byte_ratio_for,
            "warning",
            f"Wire overhead high: {SERIES_TEXT}",
            f'{{{{ $value | printf "%.3f" }}}} wire bytes per file byte over the last {s.recent_window} '
            f"(threshold {num(s.byte_ratio_max)}).",
        ),
        alert(
            s,
            "BigbinfRetransmitsHigh",
            f"{RETRANS_RECENT} > {num(s.retransmit_ratio_max)}",
            s.retransmits_for,
            "warning",
            f"Retransmits high: {SERIES_TEXT}",
            f"{{{{ $value | humanizePercentage }}}} of the captured packets of the last {s.recent_window} "
            f"were TCP retransmissions (threshold {num(s.retransmit_ratio_max * 100)}%).",
        ),
        # The path alerts: per remote (job, instance, remote), from the probes each round
        # makes before its transfers (docs/runbook.md).
        alert(
            s,
            "BigbinfTcpBuffersBelowBdp",
            (
                f'{metrics.TCP_BUFFER_MAX.name}{{kind=~"tcp_rmem|tcp_wmem"}}\n'
                f"  < on({PATH_KEY}) group_left()\n"
                f"  {path_bdp()}"
            ),
            s.buffers_for,
            "warning",
            "TCP {{ $labels.kind }} maximum of the {{ $labels.side }} host below the BDP to {{ $labels.remote }}",
            "The {{ $labels.side }} host's net.ipv4.{{ $labels.kind }} maximum (its third field: the most TCP "
            f'autotuning gives a connection\'s {{{{ if eq $labels.kind "tcp_rmem" }}}}receive'
            f"{{{{ else }}}}send{{{{ end }}}} buffer) is {{{{ $value | humanize1024 }}}}B, below the "
            f"bandwidth-delay product of the path to {{{{ $labels.remote }}}}{BDP_TEXT}: one TCP connection cannot "
            f'keep the path full in {{{{ if eq (eq $labels.side "local") (eq $labels.kind "tcp_rmem") }}}}'
            "downloads{{ else }}uploads{{ end }}.  `bigbinf-exporter advise --remote {{ $labels.remote }}` prints "
            "the sysctl lines that raise it.",
        ),
        alert(
            s,
            "BigbinfPathProbesUnanswered",
            f"{metrics.PATH_LOSS.name} == 1",
            s.probes_unanswered_for,
            "warning",
            "Path probes unanswered: {{ $labels.remote }}",
            f"No probe of the last probe train to {{{{ $labels.remote }}}} was answered, and none since, for "
            f"{s.probes_unanswered_for} (each round's loss stands until the next round's): the path or the remote "
            f"is down, or the probes are filtered.  The path's RTT, MTU and BDP are not measured meanwhile.",
        ),
        alert(
            s,
            "BigbinfPathProbesStale",
            (
                f"time() - {probe_time()}\n"
                f"  > on({PATH_KEY}) group_left()\n"
                f"  {num(s.stale_multiple)} * max by({PATH_KEY}) ({schedule_gap(interval)})"
            ),
            s.probes_stale_for,
            "warning",
            "Path to {{ $labels.remote }} not probed",
            f"The last probe of the path to {{{{ $labels.remote }}}} was {{{{ $value | humanizeDuration }}}} ago, "
            f"more than {num(s.stale_multiple)} times the longest gap between its series' starts as their schedule "
            f"runs on this host (where rounds overran, the whole intervals the last round took): the path gauges "
            f"(RTT, loss, MTU, BDP, TCP buffers) are stale.",
        ),
        alert(
            s,
            "BigbinfConfigReloadFailed",
            # A refused web config fails the whole reload: BigbinfWebConfigRefused says so, once.
            f"{metrics.CONFIG_RELOAD_OK.name} == 0\nunless on(job, instance) {metrics.WEB_CONFIG_RELOAD_OK.name} == 0",
            s.config_reload_for,
            "warning",
            "bigbinf {{ $labels.instance }} rejected its configuration",
            "The last configuration load or reload failed; the previous configuration is still in force.",
        ),
        alert(
            s,
            "BigbinfWebConfigRefused",
            f"{metrics.WEB_CONFIG_RELOAD_OK.name} == 0",
            s.web_config_refused_for,
            "critical",
            "bigbinf {{ $labels.instance }} refused its web configuration",
            "The last reload refused --web.config.file: it is invalid, unreadable or gone, or it would remove TLS, "
            "basic auth or client certificate verification that the running exporter has (the exporter's log and "
            "the reload's answer say which).  The running web configuration is kept, but the file on disk is what "
            "the next restart serves.",
        ),
        alert(
            s,
            "BigbinfFrontDoorWeakened",
            "\nor\n".join(
                f"label_replace(max_over_time({spec.name}[{s.front_door_weakened_window}]) > {spec.name}, "
                f'"weakened", "{what}", "", "")'
                for spec, what in (
                    (metrics.WEB_TLS_ENABLED, "tls"),
                    (metrics.WEB_BASIC_AUTH_ENABLED, "basic_auth"),
                    (metrics.WEB_CLIENT_CERT_REQUIRED, "client_cert"),
                )
            ),
            "0m",
            "critical",
            "bigbinf {{ $labels.instance }}: {{ $labels.weakened }} is off, it was on within "
            + s.front_door_weakened_window,
            "The exporter's front door is weaker than it was: {{ $labels.weakened }} (TLS, basic auth or required "
            "client certificates) is off now and was on within the last " + s.front_door_weakened_window + ".  "
            "A reload never does this, a restart with a changed (or emptied) --web.config.file does.  If it was "
            "meant, this alert falls silent " + s.front_door_weakened_window + " after the restart; if not, "
            "restore the web config and restart.",
        ),
        alert(
            s,
            "BigbinfRoundsOverrun",
            f'increase({metrics.ROUNDS_SKIPPED_TOTAL.name}{{reason="round_running"}}[{s.rounds_overrun_window}]) > 1.5',
            "0m",
            "warning",
            "bigbinf {{ $labels.instance }}: rounds take longer than their interval",
            f'{{{{ $value | printf "%.0f" }}}} scheduled rounds were skipped in the last {s.rounds_overrun_window} '
            "because the round before was still running: on this host a round takes longer than the schedule "
            f"leaves it ({metrics.ROUND_OVERRUN.name}: by how much the last one ran past the next start).  Series "
            "go stale meanwhile.  `bigbinf-exporter --config.check` estimates a round from the journal; "
            "lengthen schedule.interval, or drop tests or shorten datasets.",
        ),
        alert(
            s,
            "BigbinfUndoPending",
            f"{metrics.UNDO_PENDING.name} > 0",
            s.undo_pending_for,
            "warning",
            "bigbinf {{ $labels.instance }} has not undone a change ({{ $labels.kind }})",
            "{{ $value }} change(s) of kind {{ $labels.kind }} that bigbinf made are not undone (its undo journal): "
            "a congestion control route or a TCP buffer cap still set on a host, or an upload still on a remote.  "
            "Each replay that failed is logged with the host, the command and its error.",
        ),
        alert(
            s,
            "BigbinfJournalNotDurable",
            f"{metrics.JOURNAL_UNWRITTEN.name} > 0",
            "0m",
            "critical",
            "bigbinf {{ $labels.instance }} cannot write its journal",
            '{{ $value | printf "%.0f" }} transfer results are published but not journaled: the journal\'s disk is '
            "full, read-only or failing (the exporter logs the path, the error and the fix).  They are kept in "
            "memory and written once the disk takes writes again; a stop meanwhile writes them beside the journal or "
            "in /dev/shm, and a crash or a reboot loses them.",
        ),
        alert(
            s,
            "BigbinfJournalBaselinesNotDurable",
            f"{metrics.JOURNAL_UNWRITTEN_BASELINES.name} > 0",
            "0m",
            "warning",
            "bigbinf {{ $labels.instance }} cannot write its path baselines' journal",
            '{{ $value | printf "%.0f" }} path baselines (one per remote per round: the route, the window, the RTT a '
            "round measured before its transfers) are not journaled: the disk of journal.paths.jsonl is full, "
            "read-only or failing.  Kept in memory and written once it takes writes again, as the results are "
            "(BigbinfJournalNotDurable); a crash or a reboot meanwhile loses them.",
        ),
        alert(
            s,
            "BigbinfPassiveHeldBySite",
            passive_held_by_site(),
            "0m",
            "warning",
            "bigbinf {{ $labels.instance }}: production transfers with {{ $labels.remote }} are held by this site",
            "{{ $value | humanizePercentage }} of the judged production transfers with {{ $labels.remote }} in the "
            f"last {PASSIVE_WINDOW} (the passive watcher's, at least {PASSIVE_MIN_TRANSFERS}) were held by something "
            "a site can fix: a receive window or send buffer, a program, a CPU or a disk.  The exporter's /passive "
            "page lists them with the evidence and the next step.",
        ),
        alert(
            s,
            "BigbinfJournalDamaged",
            f"{metrics.JOURNAL_DAMAGED.name} > 0",
            "0m",
            "warning",
            "bigbinf {{ $labels.instance }}: a journal segment is damaged",
            '{{ $value | printf "%.0f" }} damaged journal segments were moved aside (<segment>.damaged-<time>, '
            "beside the journal): their readable results are kept in the journal, the rest is lost (the exporter "
            "logged the file and how much).  Check the disk; then remove or archive the .damaged- files.",
        ),
    ]


# A mesh site's series: its exporter's own `site` label (docs/mesh.md), with job and instance.
SITE_KEY = "job, instance, site"
SITE_TEXT = "{{ $labels.site }} ({{ $labels.instance }})"


def mesh_alerts(s: Settings) -> list[dict[str, Any]]:
    """A mesh site's slots: evaluated at each site's own Prometheus (or any that scrapes the
    site's exporter and node_exporter), like every other bigbinf alert."""
    w = s.recent_window
    per_series = "protocol, remote, dataset, direction"
    guard = metrics.GUARD.name
    half_guard = f"on() group_left() (max({guard}) / 2)"
    return [
        alert(
            s,
            "BigbinfMeshSlotsMissed",
            (
                f"sum without({per_series}) (\n"
                f'  increase({metrics.SLOTS_MISSED_TOTAL.name}{{reason!="{metrics.MISSED_NO_FIT}"}}[{w}])\n'
                ") > 0"
            ),
            s.mesh_slots_missed_for,
            "warning",
            f"Mesh slots not run at {SITE_TEXT}: {{{{ $labels.reason }}}}",
            f'{{{{ $value | printf "%.0f" }}}} of the site\'s slots in the last {w} were not run '
            "(reason {{ $labels.reason }}): their tests were not measured.  exporter_down: the exporter was not "
            "running (counted when it started again); late_start: the previous transfer overran; lock_held: a "
            "tuning sweep or a once/sweep process held the round lock.",
        ),
        alert(
            s,
            "BigbinfMeshSlotOverruns",
            (f"{metrics.LAST_SLOT_OVERRUN.name}\n  > on({SITE_KEY}) group_left()\n  {guard}"),
            s.mesh_overrun_for,
            "warning",
            f"Mesh slot overrun longer than the guard: {SERIES_TEXT} from {{{{ $labels.site }}}}",
            "The last transfer of the series went on {{ $value | humanizeDuration }} past the end of its slot, "
            "more than the mesh's guard gap: it may have overlapped the next test of either of its sites (whose "
            "exporter does not wait for it), and the site's own next slot started late or not at all.",
        ),
        alert(
            s,
            "BigbinfMeshRoundDoesNotFit",
            f"{metrics.ROUND_FITS.name} == 0",
            s.mesh_round_fits_for,
            "warning",
            f"Mesh round does not fit its period at {SITE_TEXT}",
            "The current round's slots end "
            f'{{{{ with query (printf "{metrics.ROUND_PLANNED.name}{{instance=%q}}" $labels.instance) }}}}'
            "{{ . | first | value | humanizeDuration }}{{ end }} after its start, and the guard must follow them "
            "before the next round starts, "
            f'{{{{ with query (printf "{metrics.ROUND_PERIOD.name}{{instance=%q}}" $labels.instance) }}}}'
            "{{ . | first | value | humanizeDuration }}{{ end }} after it: the slots that would run past the next "
            "round's start are not run (counted missed, round_does_not_fit).  "
            "`bigbinf-exporter mesh plan` shows them and what to change.",
        ),
        alert(
            s,
            "BigbinfMeshClockOffset",
            (f"abs(node_timex_offset_seconds) > {half_guard}\nor\nnode_timex_maxerror_seconds > {half_guard}"),
            s.mesh_clock_for,
            "warning",
            "Mesh site clock may be off by more than half the guard: {{ $labels.instance }}",
            "The kernel's NTP state on {{ $labels.instance }} (node_exporter's timex collector) puts its clock up "
            "to {{ $value | humanizeDuration }} off (its offset, or its maximum error: 16s when not synchronised), "
            "more than half the mesh's guard gap: the site's slots start on this clock, so its tests can overlap "
            "other sites' (and their byte ratios and throughputs mislead).",
        ),
    ]


def mesh_central_alerts(s: Settings) -> list[dict[str, Any]]:
    """Only a Prometheus that receives every site of a mesh sees them all: the central one."""
    plan = metrics.PLAN_INFO.name
    return [
        alert(
            s,
            "BigbinfMeshPlansDisagree",
            f"count by (mesh) (count by (mesh, fingerprint) ({plan})) > 1",
            s.mesh_plans_for,
            "warning",
            "Mesh {{ $labels.mesh }}: its sites run {{ $value }} different slot plans",
            "The sites of mesh {{ $labels.mesh }} publish {{ $value }} plan fingerprints:"
            f'{{{{ range query (printf "max by (site, fingerprint) ({plan}{{mesh=%q}})" $labels.mesh) }}}}'
            " {{ .Labels.site }} {{ .Labels.fingerprint }};{{ end }} a site with an older mesh or durations file "
            "computes other slots, and its tests can overlap the others'.",
        ),
    ]


def alerting(s: Settings) -> dict[str, Any]:
    return {
        "groups": [
            {"name": "bigbinf.alerts", "rules": alerts(s)},
            {"name": "bigbinf.mesh", "rules": mesh_alerts(s)},
        ]
    }


def mesh_central(s: Settings) -> dict[str, Any]:
    return {"groups": [{"name": "bigbinf.mesh.central", "rules": mesh_central_alerts(s)}]}


# ---------------------------------------------------------------- output


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Multi-line PromQL reads best as a literal block.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def header(s: Settings, what: str) -> str:
    changed = [f"{flag(f.name)}={getattr(s, f.name)}" for f in dataclasses.fields(s) if getattr(s, f.name) != f.default]
    return (
        f"# bigbinf {what}: GENERATED by {COMMAND}; do not edit by hand.\n"
        f"# Settings: {' '.join(changed) or 'defaults'} (peak {s.peak_start:02d}h-{s.peak_end:02d}h, "
        f"{utc_offset(s)}).\n"
    )


def render(s: Settings) -> dict[str, str]:
    """File name -> content."""

    def dump(doc: dict[str, Any]) -> str:
        return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100000, allow_unicode=True)

    return {
        RECORDING_FILE: header(s, "recording rules") + dump(recording(s)),
        ALERTING_FILE: header(s, "alerting rules") + dump(alerting(s)),
        MESH_CENTRAL_FILE: header(s, "mesh-wide alerting rules (for a mesh's central Prometheus only)")
        + dump(mesh_central(s)),
    }


def tz_offset(text: str) -> float:
    """--tz-offset as the report command reads it (one parser for both)."""
    try:
        return parse_tz_offset(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_args(argv: list[str] | None) -> tuple[Settings, Path, bool]:
    parser = argparse.ArgumentParser(
        prog=COMMAND, description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    defaults = Settings()
    for f in dataclasses.fields(Settings):
        kind = tz_offset if f.name == "tz_offset_hours" else type(f.default)
        parser.add_argument(
            flag(f.name),
            dest=f.name,
            type=kind,
            default=f.default,
            metavar="HOURS" if kind is tz_offset else type(f.default).__name__.upper(),
            help=f.metadata["help"],
        )
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help=f"directory of the rule files (default: the repository's {RULES_SUBDIR}, "
        f"when bigbinf is installed from it)",
    )
    parser.add_argument("--check", action="store_true", help="compare with --out-dir instead of writing")
    args = parser.parse_args(joined_negative_offsets(sys.argv[1:] if argv is None else argv))
    settings = Settings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(defaults)})
    try:
        out_dir = default_out_dir(args.out_dir, RULES_SUBDIR)
    except ValueError as exc:
        parser.error(str(exc))  # exits 2, as for any other bad flag
    return settings, out_dir, args.check


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
        print("\n".join(f"{COMMAND}: {e}" for e in errors), file=sys.stderr)
        return 2
    return write_or_check(render(settings), out_dir, check, COMMAND)


if __name__ == "__main__":
    sys.exit(main())
