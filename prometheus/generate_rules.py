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

Only PyYAML is needed (any Python 3.11 with it will do).  Rule names follow `level:metric:operations`; docs/dashboards.md
and docs/runbook.md explain what each one means.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    tz_offset_hours: float = _opt(0.0, "local time = UTC + this many hours (PromQL's hour() is UTC)")
    job: str = _opt("bigbinf", "scrape job name of the exporter")
    recent_window: str = _opt("12h", "window of the recent means the alerts watch (the study: two batches a day)")
    baseline_interval: str = _opt("5m", "evaluation interval of the 7-day baselines (costly, need not be fresh)")
    regression_fraction: float = _opt(0.7, "alert when recent throughput < this x the 7-day median")
    regression_for: str = _opt("1h", "for: of both regression alerts")
    failure_ratio: float = _opt(0.2, "alert when more than this share of recent transfers failed or timed out")
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
        if not 0 < self.regression_fraction < 1:
            errors.append("--regression-fraction must be between 0 and 1")
        if not 0 <= self.failure_ratio < 1:
            errors.append("--failure-ratio must be in [0, 1)")
        if self.stale_multiple <= 0:
            errors.append("--stale-multiple must be positive")
        return errors


# ---------------------------------------------------------------- PromQL helpers


def num(value: float) -> str:
    """A float as PromQL writes it: 2.0 -> 2, 0.7 -> 0.7."""
    return f"{value:g}"


def hour_local(ts_expr: str, s: Settings) -> str:
    """Local hour of day (0-23) of each sample's *value* read as a UTC timestamp."""
    shift = round(s.tz_offset_hours * 3600)
    if shift == 0:
        return f"hour({ts_expr})"
    return f"hour({ts_expr} {'+' if shift > 0 else '-'} {abs(shift)})"


def in_peak_bool(hour_expr: str, s: Settings) -> str:
    """1 when the hour lies in [peak_start, peak_end), else 0; wraps past midnight."""
    length = (s.peak_end - s.peak_start) % 24
    # Rotating the clock so the peak starts at 0 makes a window like 22h-06h one comparison.
    return f"(({hour_expr} - {s.peak_start} + 24) % 24) < bool {length}"


def ok_only(expr: str) -> str:
    # The last-result gauges hold a failed transfer's numbers too (throughput 0).
    return f"{expr} and bigbinf_last_transfer_success == 1"


def anchor(alert: str) -> str:
    """GitHub's anchor for a Markdown heading made of the alert name."""
    return alert.lower()


# ---------------------------------------------------------------- recording rules

OK = "series:bigbinf_last_transfer_throughput_bytes_per_second:ok"
HOUR = "series:bigbinf_last_transfer_start_timestamp_seconds:hour_local"
PEAK = "series:bigbinf_last_transfer_start_timestamp_seconds:peak"
OK_PERIOD = "series_period:bigbinf_last_transfer_throughput_bytes_per_second:ok"
OK_HOUR = "series_hour:bigbinf_last_transfer_throughput_bytes_per_second:ok"
MEAN_RECENT = "series:bigbinf_transfer_throughput_bytes_per_second:mean_recent"
BYTE_RATIO_RECENT = "series:bigbinf_transfer_wire_bytes_per_file_byte:ratio_recent"
RETRANS_RECENT = "series:bigbinf_transfer_retransmits_wire_per_packet:ratio_recent"
FAILED_RECENT = "series:bigbinf_transfers_failed:ratio_recent"
MEAN_7D = "series:bigbinf_transfer_throughput_bytes_per_second:mean7d"
MEDIAN_7D = "series:bigbinf_transfer_throughput_bytes_per_second:median7d"
MEDIAN_7D_PERIOD = "series_period:bigbinf_transfer_throughput_bytes_per_second:median7d"


def series_rules(s: Settings) -> list[dict[str, str]]:
    w = s.recent_window
    return [
        {"record": OK, "expr": ok_only("bigbinf_last_transfer_throughput_bytes_per_second")},
        {"record": HOUR, "expr": hour_local("bigbinf_last_transfer_start_timestamp_seconds", s)},
        {"record": PEAK, "expr": in_peak_bool(HOUR, s)},
        {"record": OK_PERIOD, "expr": (
            f'label_replace({OK} and {PEAK} == 1, "period", "peak", "", "")\n'
            f"or\n"
            f'label_replace({OK} and {PEAK} == 0, "period", "offpeak", "", "")')},
        # count_values turns the hour (a value) into a label; 0-padded so "09" sorts before "10".
        {"record": OK_HOUR, "expr": (
            f"{OK}\n"
            f"  * ignoring(hour) group_left(hour)\n"
            f'label_replace(count_values without() ("hour", {HOUR}), "hour", "0$1", "hour", "([0-9])")')},
        # Windowed ratios of counters are exact: _sum and _count come from the same scrapes,
        # so increase()'s extrapolation cancels.  With no ok transfer in the window the
        # last ok transfer stands in, so the value does not vanish between batches.
        {"record": MEAN_RECENT, "expr": (
            f"increase(bigbinf_transfer_throughput_bytes_per_second_sum[{w}])\n"
            f"  / (increase(bigbinf_transfer_throughput_bytes_per_second_count[{w}]) > 0)\n"
            f"or\n"
            f"{OK}")},
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
        # Share of failed or timed-out transfers; skipped ones (binary missing) are not failures.
        {"record": FAILED_RECENT, "expr": (
            f'sum without(outcome) (increase(bigbinf_transfers_total{{outcome=~"failed|timeout"}}[{w}]))\n'
            f'  / (sum without(outcome) (increase(bigbinf_transfers_total{{outcome!="skipped"}}[{w}])) > 0)\n'
            f"or\n"
            f'(sum without(outcome) (bigbinf_last_transfer_outcome{{outcome=~"failed|timeout"}})\n'
            f'  unless sum without(outcome) (bigbinf_last_transfer_outcome{{outcome="skipped"}}) == 1)')},
    ]


def baseline_rules() -> list[dict[str, str]]:
    return [
        # Exact mean of every ok transfer of the last 7 days.
        {"record": MEAN_7D, "expr": (
            "increase(bigbinf_transfer_throughput_bytes_per_second_sum[7d])\n"
            "  / (increase(bigbinf_transfer_throughput_bytes_per_second_count[7d]) > 0)")},
        # Median of the last-ok value over 7 days: robust to outliers; each transfer
        # weighs as long as it stayed the latest (regular schedules make that even).
        {"record": MEDIAN_7D, "expr": f"quantile_over_time(0.5, {OK}[7d])"},
        {"record": MEDIAN_7D_PERIOD, "expr": f"quantile_over_time(0.5, {OK_PERIOD}[7d])"},
    ]


def recording(s: Settings) -> dict[str, Any]:
    return {"groups": [
        {"name": "bigbinf.series", "rules": series_rules(s)},
        {"name": "bigbinf.baselines", "interval": s.baseline_interval, "rules": baseline_rules()},
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
              f"{{{{ $value | humanizePercentage }}}} of the transfers of the last {s.recent_window} failed "
              f"or timed out (or the last one did); skipped transfers are not counted."),
        alert(s, "BigbinfThroughputRegression",
              f"{MEAN_RECENT} < {num(s.regression_fraction)} * {MEDIAN_7D}", s.regression_for, "warning",
              f"Throughput regressed: {SERIES_TEXT}",
              f"Mean throughput of the last {s.recent_window} is {{{{ $value | humanize1024 }}}}B/s, "
              f"below {pct}% of the series' 7-day median."),
        alert(s, "BigbinfThroughputRegressionTimeOfDay",
              f"{OK_PERIOD} < {num(s.regression_fraction)} * {MEDIAN_7D_PERIOD}", s.regression_for, "warning",
              f"Throughput regressed for its time of day ({{{{ $labels.period }}}}): {SERIES_TEXT}",
              f"The last {{{{ $labels.period }}}} transfer ran at {{{{ $value | humanize1024 }}}}B/s, below {pct}% "
              f"of the 7-day {{{{ $labels.period }}}} median (peak = {s.peak_start:02d}h-{s.peak_end:02d}h "
              f"at UTC{s.tz_offset_hours:+g})."),
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
            f"UTC{s.tz_offset_hours:+g}).\n")


def render(s: Settings) -> dict[str, str]:
    """File name -> content."""
    def dump(doc: dict[str, Any]) -> str:
        return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100000, allow_unicode=True)

    return {
        RECORDING_FILE: header(s, "recording rules") + dump(recording(s)),
        ALERTING_FILE: header(s, "alerting rules") + dump(alerting(s)),
    }


def parse_args(argv: list[str] | None) -> tuple[Settings, Path, bool]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    defaults = Settings()
    for f in dataclasses.fields(Settings):
        parser.add_argument(flag(f.name), dest=f.name, type=type(f.default), default=f.default,
                            metavar=type(f.default).__name__.upper(), help=f.metadata["help"])
    parser.add_argument("--out-dir", type=Path, default=RULES_DIR)
    parser.add_argument("--check", action="store_true", help="compare with --out-dir instead of writing")
    args = parser.parse_args(argv)
    settings = Settings(**{f.name: getattr(args, f.name) for f in dataclasses.fields(defaults)})
    return settings, args.out_dir, args.check


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
