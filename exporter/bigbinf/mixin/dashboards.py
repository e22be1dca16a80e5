"""Generate bigbinf's Grafana dashboards (grafana/dashboards/*.json).

No Grafana server can run where bigbinf is developed, so the dashboards are built from
typed Python with grafana-foundation-sdk pinned to the Grafana 11.6 build
(`pip install 'grafana-foundation-sdk==1769699379!11.6.0'`, in the `test` extra) and the
JSON is committed.  tests/e2e/test_dashboards.py fails when the committed JSON differs from
this output, and runs every panel query against a live Prometheus that scraped a real
exporter.

    .venv/bin/python -m bigbinf.mixin.dashboards            # rewrite grafana/dashboards/
    .venv/bin/python -m bigbinf.mixin.dashboards --check    # exit 1 if the committed JSON is out of date

--out-dir defaults to the repository's grafana/dashboards, which only an editable install
(pip install -e) has; otherwise it is required.  The recording rules' names and the PromQL
that attributes transfers to peak hours and hours of day come from
bigbinf.mixin.settings, as the rules' do, so panels and rules agree.
docs/dashboards.md says what each panel answers.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import barchart, bargauge, heatmap, stat, table, timeseries, xychart
from grafana_foundation_sdk.builders.common import ReduceDataOptions, VizLegendOptions
from grafana_foundation_sdk.builders.dashboard import (
    Dashboard,
    DashboardLink,
    QueryVariable,
    Row,
    TextBoxVariable,
    ThresholdsConfig,
)
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BigValueColorMode,
    BigValueTextMode,
    LegendDisplayMode,
    LegendPlacement,
    VisibilityMode,
    VizOrientation,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    GridPos,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMapping,
    ValueMappingResult,
    VariableModel,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from grafana_foundation_sdk.models.xychart import SeriesMapping, XYShowMode

from bigbinf import metrics
from bigbinf.mixin import settings

# What the usage and error messages tell people to run.
COMMAND = "python -m bigbinf.mixin.dashboards"
DASHBOARDS_SUBDIR = "grafana/dashboards"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="bigbinf-prometheus")  # provisioned with this uid
SERIES = "protocol, remote, dataset, direction"
# Every panel narrows to the dashboard's variables (multi-value: Grafana renders a regex).
SEL = 'remote=~"$remote", protocol=~"$protocol", dataset=~"$dataset", direction=~"$direction"'


def sel(*extra: str) -> str:
    return "{" + ", ".join((SEL, *extra)) + "}"


def eq(label: str, value: str, op: str = "=") -> str:
    return f'{label}{op}"{value}"'


# ---------------------------------------------------------------- PromQL


def start_hour() -> str:
    """Local hour at which each series' last transfer started; $tz_offset is hours east of UTC."""
    return f"hour({settings.START}{sel()} + $tz_offset * 3600)"


def peak(op: str) -> str:
    """Keep the series whose last transfer started in (`<`) or out of (`>=`) the peak."""
    return settings.in_peak(start_hour(), "$peak_start", "(($peak_end - $peak_start + 24) % 24)", op)


def per_transfer_mean(keep: str, by: str = SERIES) -> str:
    """Per-transfer mean throughput over the range of the ok transfers that `keep` selects.

    The rules' tiles: the counters' increase cut into 1-minute tiles, each kept by the
    start time of the series' last transfer at its end (the transfer it counts), so a
    transfer is in the same period and hour here as in the recording rules.
    """

    def total(part: str) -> str:
        counter = f"{settings.THROUGHPUT}_{part}{sel()}"
        return f"sum by ({by}) ({settings.tiles(counter, '$__range', keep)})"

    return settings.ratio(total("sum"), total("count"))


def by_transfer(expr: str, extra: str = "") -> str:
    """One `transfer` label naming the series (a table column / bar per series)."""
    by = f"transfer{', ' + extra if extra else ''}"
    return f'sum by ({by}) (label_join(\n  {expr},\n  "transfer", " ", {quote_labels(SERIES)}))'


def per_transfer_mean_by_period(op: str) -> str:
    return by_transfer(per_transfer_mean(f"and {peak(op)}"))


def per_transfer_mean_by_hour() -> str:
    keep = f"* ignoring(hour) group_left(hour) {settings.hour_label(start_hour())}"
    return by_transfer(per_transfer_mean(keep, f"{SERIES}, hour"), "hour")


def quote_labels(labels: str) -> str:
    return ", ".join(f'"{x.strip()}"' for x in labels.split(","))


def range_ratio(num: str, den: str, by: str) -> str:
    """Exact mean over the dashboard range: ratio of two counters' increases (same scrapes)."""
    return f"sum by ({by}) (increase({num}[$__range]))\n  / (sum by ({by}) (increase({den}[$__range])) > 0)"


def outcome_code() -> str:
    """The last outcome as one number a value mapping can name and colour: ok 0, skipped 1, failed 2, timeout 3."""
    parts = [
        f"{weight}sum without(outcome) ({settings.last_transfer('outcome')}{sel(eq('outcome', name))})"
        for weight, name in (("", "skipped"), ("2 * ", "failed"), ("3 * ", "timeout"))
    ]
    return "\n+ ".join(parts)


def largest_dataset() -> str:
    size = f"{settings.last_transfer('file_bytes')}{sel()}"
    return f"(max by (dataset) ({size}) == scalar(max({size})))"


# ---------------------------------------------------------------- building blocks


def query(
    expr: str, legend: str = "", ref: str = "A", instant: bool = False, fmt: PromQueryFormat | None = None
) -> Dataquery:
    q = Dataquery().expr(expr).ref_id(ref).datasource(DATASOURCE)
    q = q.instant() if instant else q.range()
    if legend:
        q = q.legend_format(legend)
    if fmt is not None:
        q = q.format(fmt)
    return q


def merge_and_rename(names: dict[str, str], exclude: Sequence[str] = ("Time",)) -> list[DataTransformerConfig]:
    """Instant table queries -> one table with readable columns, in the given order."""
    order = {name: i for i, name in enumerate(names.values())}
    return [
        DataTransformerConfig(id_val="merge", options={}),
        DataTransformerConfig(
            id_val="organize",
            options={
                "excludeByName": dict.fromkeys(exclude, True),
                "renameByName": names,
                "indexByName": order,
            },
        ),
    ]


def unit_override(name: str, unit: str) -> tuple[str, list[DynamicConfigValue]]:
    return name, [DynamicConfigValue(id_val="unit", value=unit)]


OUTCOME_MAPPINGS: list[ValueMapping] = [
    ValueMap(
        options={
            "0": ValueMappingResult(text="ok", color="green", index=0),
            "1": ValueMappingResult(text="skipped", color="blue", index=1),
            "2": ValueMappingResult(text="failed", color="red", index=2),
            "3": ValueMappingResult(text="timeout", color="orange", index=3),
        }
    )
]


def thresholds(*steps: tuple[float | None, str]) -> ThresholdsConfig:
    return ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([Threshold(value=v, color=c) for v, c in steps])


def legend_list() -> VizLegendOptions:
    return VizLegendOptions().show_legend(True).display_mode(LegendDisplayMode.LIST).placement(LegendPlacement.BOTTOM)


def legend_table() -> VizLegendOptions:
    return (
        VizLegendOptions()
        .display_mode(LegendDisplayMode.TABLE)
        .placement(LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["lastNotNull", "mean", "max"])
    )


LEGEND_SERIES = "{{protocol}} {{dataset}} {{direction}} {{remote}}"


class Placeable(Protocol):
    """What Grid needs of a panel builder: every panel type's builder has these, but the
    SDK gives them no common base class that declares them."""

    def grid_pos(self, grid_pos: GridPos, /) -> Self: ...
    def id(self, id_val: int, /) -> Self: ...
    def datasource(self, datasource: DataSourceRef, /) -> Self: ...


# The panel's own builder type, so that Dashboard.with_panel still accepts the result.
P = TypeVar("P", bound=Placeable)


@dataclass
class Grid:
    """Places panels left to right, wrapping at 24 columns, and numbers them."""

    x: int = 0
    y: int = 0
    row_h: int = 0
    next_id: int = 1

    def place(self, panel: P, w: int, h: int) -> P:
        if self.x + w > 24:
            self.newline()
        panel.grid_pos(GridPos(h=h, w=w, x=self.x, y=self.y)).id(self.next_id).datasource(DATASOURCE)
        self.next_id += 1
        self.x += w
        self.row_h = max(self.row_h, h)
        return panel

    def newline(self) -> None:
        if self.x:
            self.y += self.row_h
        self.x, self.row_h = 0, 0

    def row(self, title: str) -> Row:
        self.newline()
        row = Row(title).grid_pos(GridPos(h=1, w=24, x=0, y=self.y)).id(self.next_id)
        self.next_id += 1
        self.y += 1
        return row


def series_variable(name: str, label: str, query_text: str) -> QueryVariable:
    return (
        QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query_text)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(VariableOption(selected=True, text="All", value="$__all"))
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
    )


def series_variables() -> list[cogbuilder.Builder[VariableModel]]:
    # Chained: each list only offers values that exist for the choices before it.
    metric = metrics.TRANSFERS_TOTAL.name
    return [
        series_variable("remote", "Remote", f"label_values({metric}, remote)"),
        series_variable("protocol", "Protocol", f'label_values({metric}{{remote=~"$remote"}}, protocol)'),
        series_variable(
            "dataset", "Dataset", f'label_values({metric}{{remote=~"$remote", protocol=~"$protocol"}}, dataset)'
        ),
        series_variable(
            "direction",
            "Direction",
            f'label_values({metric}{{remote=~"$remote", protocol=~"$protocol", dataset=~"$dataset"}}, direction)',
        ),
    ]


def base(uid: str, title: str, description: str, time_from: str = "now-7d") -> Dashboard:
    d = (
        Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["bigbinf"])
        .editable()
        .time(time_from, "now")
        .refresh("1m")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .link(
            DashboardLink("bigbinf dashboards")
            .type(DashboardLinkType.DASHBOARDS)
            .tags(["bigbinf"])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .variables(series_variables())
    )
    return d


# ---------------------------------------------------------------- dashboards


def overview() -> Dashboard:
    g = Grid()
    d = base(
        "bigbinf-overview",
        "bigbinf / Overview",
        "Latest result per series, the study's Table 2 over the time range, and firing alerts.",
    )
    d.with_row(g.row("Last transfer of each series"))
    d.with_panel(
        g.place(
            stat.Panel()
            .title("Throughput")
            .description("File bytes / duration of the last transfer (0 if it failed).")
            .with_target(query(f"{settings.LAST_THROUGHPUT}{sel()}", LEGEND_SERIES, instant=True))
            .unit("Bps")
            .color_mode(BigValueColorMode.NONE)
            .text_mode(BigValueTextMode.VALUE_AND_NAME)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            6,
            6,
        )
    )
    d.with_panel(
        g.place(
            stat.Panel()
            .title("Outcome")
            .description("How the last transfer ended: ok, skipped, failed or timeout.")
            .with_target(query(outcome_code(), LEGEND_SERIES, instant=True))
            .mappings(OUTCOME_MAPPINGS)
            .color_mode(BigValueColorMode.BACKGROUND)
            .text_mode(BigValueTextMode.VALUE_AND_NAME)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            6,
            6,
        )
    )
    d.with_panel(
        g.place(
            stat.Panel()
            .title("Byte ratio")
            .description("Wire bytes (down + up) per file byte of the last transfer.")
            .with_target(query(f"{settings.last_transfer('byte_ratio')}{sel()}", LEGEND_SERIES, instant=True))
            .decimals(3)
            .thresholds(thresholds((None, "green"), (1.1, "orange")))
            .color_mode(BigValueColorMode.VALUE)
            .text_mode(BigValueTextMode.VALUE_AND_NAME)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            6,
            6,
        )
    )
    d.with_panel(
        g.place(
            stat.Panel()
            .title("Retransmits")
            .description(
                "Retransmitted TCP segments seen in the capture of the last transfer: for downloads the receiver's "
                "view (a trend signal), for uploads the sender's."
            )
            .with_target(query(f"{settings.last_transfer('retransmits_wire')}{sel()}", LEGEND_SERIES, instant=True))
            .decimals(0)
            .color_mode(BigValueColorMode.NONE)
            .text_mode(BigValueTextMode.VALUE_AND_NAME)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            6,
            6,
        )
    )

    d.with_row(g.row("Table 2: means per dataset and protocol over the time range"))
    # Every series label: downloads and uploads, or two remotes, are different rows.
    by = "dataset, protocol, direction, remote"
    ok_count = f"{metrics.DURATION_HIST.name}_count{sel()}"
    wire = metrics.WIRE_BYTES_TOTAL.name
    not_ok = metrics.TRANSFERS_TOTAL.name + sel(eq("outcome", "ok|skipped", "!~"))
    columns = [
        ("A", f"round(sum by ({by}) (increase({ok_count}[$__range])))", "ok transfers"),
        ("B", f"round(sum by ({by}) (increase({not_ok}[$__range])))", "failed"),
        ("C", range_ratio(wire + sel('way="down"'), ok_count, by), "bytes down"),
        ("D", range_ratio(wire + sel('way="up"'), ok_count, by), "bytes up"),
        ("E", range_ratio(wire + sel(), ok_count, by), "bytes total"),
        ("F", range_ratio(wire + sel(), metrics.FILE_BYTES_TOTAL.name + sel(), by), "ratio"),
        ("G", range_ratio(f"{metrics.DURATION_HIST.name}_sum{sel()}", ok_count, by), "time"),
        ("H", range_ratio(f"{settings.THROUGHPUT}_sum{sel()}", f"{settings.THROUGHPUT}_count{sel()}", by), "speed"),
    ]
    t2 = (
        table.Panel()
        .title("Means per dataset and protocol (the study's Table 2)")
        .description(
            "Per-transfer means of the ok transfers in the time range, from counters (exact); "
            "failed counts every outcome but ok and skipped."
        )
    )
    for ref, expr, _ in columns:
        t2 = t2.with_target(query(expr, ref=ref, instant=True, fmt=PromQueryFormat.TABLE))
    names = {"dataset": "dataset", "protocol": "protocol", "direction": "direction", "remote": "remote"}
    names.update({f"Value #{ref}": name for ref, _, name in columns})
    t2 = t2.transformations(merge_and_rename(names))
    for name, unit in (
        ("bytes down", "bytes"),
        ("bytes up", "bytes"),
        ("bytes total", "bytes"),
        ("time", "s"),
        ("speed", "Bps"),
    ):
        t2 = t2.override_by_name(*unit_override(name, unit))
    t2 = t2.override_by_name("ratio", [DynamicConfigValue(id_val="decimals", value=3)])
    d.with_panel(g.place(t2, 24, 8))

    d.with_row(g.row("Alerts"))
    d.with_panel(
        g.place(
            table.Panel()
            .title("Firing alerts")
            .description("bigbinf alerts Prometheus is firing now; see docs/runbook.md.")
            .with_target(
                query('ALERTS{alertname=~"Bigbinf.*", alertstate="firing"}', instant=True, fmt=PromQueryFormat.TABLE)
            )
            .transformations(
                [
                    DataTransformerConfig(
                        id_val="organize",
                        options={"excludeByName": {"Time": True, "Value": True, "__name__": True, "alertstate": True}},
                    )
                ]
            )
            .no_value("No bigbinf alert is firing"),
            24,
            6,
        )
    )
    return d


def protocols() -> Dashboard:
    g = Grid()
    d = base(
        "bigbinf-protocols",
        "bigbinf / Protocols",
        "Protocol against protocol: throughput over time, by file size (the study's Fig 8) and "
        "the time for the largest file (Fig 6).",
    )
    d.with_row(g.row("Throughput over time"))
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Throughput per transfer")
            .description(
                "Throughput of each series' last ok transfer, and its 7-day per-transfer mean (dashed).  "
                "BigbinfThroughputRegression compares the recent mean with the 7-day means of the recent "
                'transfers\' own periods: Time of day dashboard, "Whole day: recent mean and its 7-day baseline".'
            )
            .with_target(
                query(
                    f"{settings.LAST_THROUGHPUT}{sel()}\n  and {settings.last_transfer('success')}{sel()} == 1",
                    LEGEND_SERIES,
                )
            )
            .with_target(query(f"{settings.MEAN_7D}{sel()}", LEGEND_SERIES + " 7-day mean", ref="B"))
            .override_by_regexp(
                ".*7-day mean",
                [DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})],
            )
            .unit("Bps")
            .min(0)
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_table()),
            24,
            9,
        )
    )

    d.with_row(g.row("By file size (Fig 8)"))
    # Downloads and uploads (and remotes) are separate lines, never averaged together.
    by = "protocol, dataset, direction, remote"
    ok_count = f"{metrics.DURATION_HIST.name}_count{sel()}"
    size = range_ratio(metrics.FILE_BYTES_TOTAL.name + sel(), ok_count, by)
    speed = range_ratio(f"{settings.THROUGHPUT}_sum{sel()}", f"{settings.THROUGHPUT}_count{sel()}", by)
    ratio = range_ratio(metrics.WIRE_BYTES_TOTAL.name + sel(), metrics.FILE_BYTES_TOTAL.name + sel(), by)
    for title, expr, name, unit in (
        ("Throughput vs file size", speed, "throughput", "Bps"),
        ("Byte ratio vs file size", ratio, "byte ratio", "none"),
    ):
        # One frame per protocol, x = file size (first number field), y = the measure.
        panel = (
            xychart.Panel()
            .title(title + " (Fig 8)")
            .description(
                "Per-transfer mean over the time range, one line per protocol, direction and remote, "
                "one point per dataset."
            )
            .with_target(query(size, ref="A", instant=True, fmt=PromQueryFormat.TABLE))
            .with_target(query(expr, ref="B", instant=True, fmt=PromQueryFormat.TABLE))
            .transformations(
                [
                    *merge_and_rename(
                        {
                            "protocol": "protocol",
                            "direction": "direction",
                            "remote": "remote",
                            "Value #A": "file size",
                            "Value #B": name,
                        },
                        exclude=("Time", "dataset"),
                    ),
                    DataTransformerConfig(
                        id_val="partitionByValues",
                        options={"fields": ["protocol", "direction", "remote"], "keepFields": False},
                    ),
                ]
            )
            .mapping(SeriesMapping.AUTO)
            .show(XYShowMode.POINTS_AND_LINES)
            .point_size(xychart.XychartFieldConfigPointSize().fixed(8))
            .legend(legend_list())
            .override_by_name(*unit_override("file size", "bytes"))
            .override_by_name(*unit_override(name, unit))
        )
        d.with_panel(g.place(panel, 12, 9))

    d.with_row(g.row("Time for the largest file (Fig 6)"))
    duration = range_ratio(f"{metrics.DURATION_HIST.name}_sum{sel()}", ok_count, SERIES)
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Time per transfer, largest dataset")
            .description("Wall-clock time of each last transfer of the largest dataset selected.")
            .with_target(
                query(
                    f"{settings.last_transfer('duration_seconds')}{sel()}\n"
                    f"  and {settings.last_transfer('success')}{sel()} == 1\n"
                    f"  and on(dataset) {largest_dataset()}",
                    LEGEND_SERIES,
                )
            )
            .unit("s")
            .min(0)
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_table()),
            16,
            8,
        )
    )
    d.with_panel(
        g.place(
            bargauge.Panel()
            .title("Mean time, largest dataset")
            .description("Mean wall-clock time of the ok transfers of the largest dataset in the time range.")
            .with_target(query(f"({duration})\n  and on(dataset) {largest_dataset()}", LEGEND_SERIES, instant=True))
            .unit("s")
            .min(0)
            .orientation(VizOrientation.HORIZONTAL)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            8,
            8,
        )
    )
    return d


def hour_matrix() -> list[DataTransformerConfig]:
    """Rows of (transfer, hour, value) -> one row per hour, one column per transfer."""
    return [
        DataTransformerConfig(
            id_val="groupingToMatrix", options={"columnField": "transfer", "rowField": "hour", "valueField": "Value"}
        ),
        DataTransformerConfig(id_val="sortBy", options={"sort": [{"field": "hour\\transfer"}]}),
    ]


def time_of_day() -> Dashboard:
    g = Grid()
    d = base(
        "bigbinf-time-of-day",
        "bigbinf / Time of day",
        "Peak against off-peak (the study's Fig 4), throughput by hour of day, and today against "
        "yesterday and last week.  Peak hours and the time zone are the variables on the right.",
    )
    d.with_variable(
        TextBoxVariable("peak_start")
        .label("Peak from (h)")
        .default_value("11")
        .current(VariableOption(selected=True, text="11", value="11"))
        .description("First peak hour, local time (the study: 11h).")
    )
    d.with_variable(
        TextBoxVariable("peak_end")
        .label("Peak until (h)")
        .default_value("15")
        .current(VariableOption(selected=True, text="15", value="15"))
        .description("First hour after the peak, local time (the study: 15h).")
    )
    d.with_variable(
        TextBoxVariable("tz_offset")
        .label("UTC offset (h)")
        .default_value("0")
        .current(VariableOption(selected=True, text="0", value="0"))
        .description("Local time = UTC + this many hours, as a decimal: 2, -5, 5.5 for +5:30 (PromQL's hour() is UTC).")
    )

    legend = "{{protocol}} {{dataset}} {{direction}} {{remote}}"
    d.with_row(g.row("Peak against off-peak (Fig 4)"))
    d.with_panel(
        g.place(
            barchart.Panel()
            .title("Mean throughput, peak and off-peak (Fig 4)")
            .description(
                "Per-transfer mean of the ok transfers that started in peak or off-peak hours, in the time range "
                "(exact, from counters; the recording rules' attribution)."
            )
            .with_target(query(per_transfer_mean_by_period("<"), ref="A", instant=True, fmt=PromQueryFormat.TABLE))
            .with_target(query(per_transfer_mean_by_period(">="), ref="B", instant=True, fmt=PromQueryFormat.TABLE))
            .transformations(merge_and_rename({"transfer": "transfer", "Value #A": "peak", "Value #B": "off-peak"}))
            .x_field("transfer")
            .unit("Bps")
            .show_value(VisibilityMode.AUTO)
            .x_tick_label_rotation(-30)
            .legend(legend_list()),
            24,
            9,
        )
    )

    d.with_row(g.row("Regression alert inputs"))
    d.with_panel(
        g.place(
            bargauge.Panel()
            .title("Per period: recent and 7-day means (alert inputs)")
            .description(
                "What BigbinfThroughputRegressionTimeOfDay compares: the per-transfer mean of the recent window "
                "against 0.7 x the 7-day one, per period (recording rules; peak hours as generated)."
            )
            .with_target(query(f"{settings.PERIOD_MEAN_RECENT}{sel()}", legend + " {{period}} recent", instant=True))
            .with_target(
                query(f"{settings.PERIOD_MEAN_7D}{sel()}", legend + " {{period}} 7-day", ref="B", instant=True)
            )
            .unit("Bps")
            .min(0)
            .orientation(VizOrientation.HORIZONTAL)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            12,
            9,
        )
    )
    d.with_panel(
        g.place(
            bargauge.Panel()
            .title("Whole day: recent mean and its 7-day baseline (alert inputs)")
            .description(
                "What BigbinfThroughputRegression compares: the per-transfer mean of the recent window against "
                "0.7 x its baseline, the 7-day means of the window's transfers' own periods weighted by how many of "
                "each it holds (a period new to the series: the all-day mean).  The plain all-day 7-day mean beside "
                "them shows how far the window's mix of peak and off-peak moves the plain comparison "
                '(docs/runbook.md, "The whole-day baseline").'
            )
            .with_target(query(f"{settings.MEAN_RECENT}{sel()}", legend + " recent", instant=True))
            .with_target(
                query(
                    f"{settings.BASELINE_7D_RECENT_MIX}{sel()}",
                    legend + " 7-day baseline, recent mix",
                    ref="B",
                    instant=True,
                )
            )
            .with_target(query(f"{settings.MEAN_7D}{sel()}", legend + " 7-day all-day mean", ref="C", instant=True))
            .unit("Bps")
            .min(0)
            .orientation(VizOrientation.HORIZONTAL)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            12,
            9,
        )
    )

    d.with_row(g.row("Hour of day"))
    d.with_panel(
        g.place(
            barchart.Panel()
            .title("Mean throughput by hour of day, time range")
            .description(
                "Per-transfer mean of the ok transfers by the local hour they started, over the time range "
                "(use days or weeks).  The same statistic as the 7-day profile beside it."
            )
            .with_target(query(per_transfer_mean_by_hour(), instant=True, fmt=PromQueryFormat.TABLE))
            .transformations(hour_matrix())
            .unit("Bps")
            .show_value(VisibilityMode.NEVER)
            .legend(legend_list()),
            12,
            9,
        )
    )
    d.with_panel(
        g.place(
            barchart.Panel()
            .title("Hour-of-day profile, last 7 days")
            .description(
                "The recording rule series_hour:...:mean7d: per-transfer mean by local start hour over 7 days "
                "(the hours and offset the rules were generated with)."
            )
            .with_target(
                query(
                    by_transfer(f"avg without(job, instance) ({settings.HOUR_MEAN_7D}{sel()})", "hour"),
                    instant=True,
                    fmt=PromQueryFormat.TABLE,
                )
            )
            .transformations(hour_matrix())
            .unit("Bps")
            .show_value(VisibilityMode.NEVER)
            .legend(legend_list()),
            12,
            9,
        )
    )

    d.with_row(g.row("Today, yesterday, last week"))
    ok = f"{settings.OK}{sel()}"
    by = "protocol, dataset, direction, remote"
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Throughput today, yesterday and a week ago")
            .description(
                "Last ok transfer's throughput over the last 24h, with the same hours one day and seven days earlier."
            )
            .time_from("24h")
            .with_target(query(f"avg by ({by}) ({ok})", legend + " today"))
            .with_target(query(f"avg by ({by}) ({ok} offset 1d)", legend + " yesterday", ref="B"))
            .with_target(query(f"avg by ({by}) ({ok} offset 7d)", legend + " last week", ref="C"))
            .override_by_regexp(
                ".* yesterday",
                [DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})],
            )
            .override_by_regexp(
                ".* last week", [DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dot", "dash": [0, 10]})]
            )
            .unit("Bps")
            .min(0)
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_table()),
            24,
            9,
        )
    )
    return d


def transfer_detail() -> Dashboard:
    g = Grid()
    d = base(
        "bigbinf-transfer-detail",
        "bigbinf / Transfer detail",
        "What the capture saw: the payload-size fingerprint (the study's Fig 5), packets, retransmits and duration.",
    )
    d.with_row(g.row("Payload-size fingerprint (Fig 5)"))
    for way, arrow in (("down", "remote → client"), ("up", "client → remote")):
        d.with_panel(
            g.place(
                bargauge.Panel()
                .title(f"Packets by payload size, {way} ({arrow})")
                .description(
                    "Captured packets of the ok transfers in the time range, by TCP/UDP payload size bucket "
                    "(0 = pure ACKs; 1448/1460 = full 1500-MTU segments)."
                )
                .with_target(
                    query(
                        f"sum by (le) (increase({metrics.PAYLOAD_SIZE_HIST.name}_bucket"
                        f"{sel(eq('way', way))}[$__range]))",
                        "{{le}}",
                        instant=True,
                        fmt=PromQueryFormat.HEATMAP,
                    )
                )
                .unit("none")
                .min(0)
                .orientation(VizOrientation.HORIZONTAL)
                .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
                12,
                10,
            )
        )
    d.with_panel(
        g.place(
            heatmap.Panel()
            .title("Payload sizes over time, down")
            .description("The same fingerprint per time slot: each transfer is a column.")
            .with_target(
                query(
                    f"sum by (le) (increase({metrics.PAYLOAD_SIZE_HIST.name}_bucket{sel(eq('way', 'down'))}"
                    f"[$__rate_interval]))",
                    "{{le}}",
                    fmt=PromQueryFormat.HEATMAP,
                )
            )
            .calculate(False)
            .unit("none"),
            24,
            8,
        )
    )

    d.with_row(g.row("Per transfer"))
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Packets")
            .description("Packets captured during each last transfer, per way.")
            .with_target(query(f"{settings.last_transfer('packets')}{sel()}", LEGEND_SERIES + " {{way}}"))
            .min(0)
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_table()),
            12,
            8,
        )
    )
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Duration")
            .description("Wall-clock duration of each last transfer.")
            .with_target(query(f"{settings.last_transfer('duration_seconds')}{sel()}", LEGEND_SERIES))
            .unit("s")
            .min(0)
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_table()),
            12,
            8,
        )
    )
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Retransmits")
            .description(
                "Retransmitted TCP segments seen in each last transfer's capture: for downloads the receiver's "
                "view (a trend signal), for uploads the sender's."
            )
            .with_target(query(f"{settings.last_transfer('retransmits_wire')}{sel()}", LEGEND_SERIES))
            .min(0)
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_table()),
            12,
            8,
        )
    )
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Retransmit ratio, recent window")
            .description(
                "Retransmitted segments per captured packet over the recording rules' recent window "
                "(what BigbinfRetransmitsHigh watches)."
            )
            .with_target(query(f"{settings.RETRANS_RECENT}{sel()}", LEGEND_SERIES))
            .unit("percentunit")
            .min(0)
            .legend(legend_table()),
            12,
            8,
        )
    )
    d.with_panel(
        g.place(
            stat.Panel()
            .title("Mean duration over the range")
            .description("Per-transfer mean of the ok transfers.")
            .with_target(
                query(
                    range_ratio(
                        f"{metrics.DURATION_HIST.name}_sum{sel()}", f"{metrics.DURATION_HIST.name}_count{sel()}", SERIES
                    ),
                    LEGEND_SERIES,
                    instant=True,
                )
            )
            .unit("s")
            .color_mode(BigValueColorMode.NONE)
            .text_mode(BigValueTextMode.VALUE_AND_NAME)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            12,
            6,
        )
    )
    d.with_panel(
        g.place(
            stat.Panel()
            .title("Capture drops, last transfer")
            .description(
                "Packets the kernel dropped before tcpdump read them; non-zero means the wire numbers are low."
            )
            .with_target(
                query(f"{settings.last_transfer('capture_dropped_packets')}{sel()}", LEGEND_SERIES, instant=True)
            )
            .thresholds(thresholds((None, "green"), (1, "red")))
            .color_mode(BigValueColorMode.BACKGROUND)
            .text_mode(BigValueTextMode.VALUE_AND_NAME)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            12,
            6,
        )
    )
    return d


DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "overview.json": overview,
    "protocols.json": protocols,
    "time-of-day.json": time_of_day,
    "transfer-detail.json": transfer_detail,
}


def render() -> dict[str, str]:
    """File name -> JSON text (stable: sorted keys, fixed indentation)."""
    return {
        name: json.dumps(make().build(), cls=JSONEncoder, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        for name, make in DASHBOARDS.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="Generate grafana/dashboards/*.json")
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=None,
        help=f"directory of the dashboard JSON (default: the repository's {DASHBOARDS_SUBDIR}, "
        f"when bigbinf is installed from it)",
    )
    parser.add_argument("--check", action="store_true", help="compare with --out-dir instead of writing")
    args = parser.parse_args(argv)
    try:
        out_dir = settings.default_out_dir(args.out_dir, DASHBOARDS_SUBDIR)
    except ValueError as exc:
        parser.error(str(exc))  # exits 2, as for any other bad flag
    return settings.write_or_check(render(), out_dir, args.check, COMMAND)


if __name__ == "__main__":
    sys.exit(main())
