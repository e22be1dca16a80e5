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

from grafana_foundation_sdk.builders import (
    barchart,
    bargauge,
    heatmap,
    stat,
    statetimeline,
    table,
    timeseries,
    xychart,
)
from grafana_foundation_sdk.builders.common import ReduceDataOptions, ScaleDistributionConfig, VizLegendOptions
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
    ScaleDistribution,
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
from bigbinf.result import LIMITS

# What the usage and error messages tell people to run.
COMMAND = "python -m bigbinf.mixin.dashboards"
DASHBOARDS_SUBDIR = "grafana/dashboards"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="bigbinf-prometheus")  # provisioned with this uid
SERIES = "protocol, remote, dataset, direction"
# Every panel narrows to the dashboard's variables (multi-value: Grafana renders a regex).
# `site` is the mesh site a series runs from (a mesh exporter labels every series with it,
# docs/mesh.md), `mesh` the mesh (its sites' Prometheus add it when they forward to a
# central one, bigbinf.mesh.prometheus); a single-site exporter's series have neither, and
# `=~".*"` (All) matches a missing label too.  `mesh` is what the Mesh dashboard's cell
# links pass on (var-mesh), so that two meshes with the same site names stay apart.
SEL = (
    'mesh=~"$mesh", site=~"$site", remote=~"$remote", protocol=~"$protocol", dataset=~"$dataset", '
    'direction=~"$direction"'
)


def sel(*extra: str) -> str:
    return "{" + ", ".join((SEL, *extra)) + "}"


def eq(label: str, value: str, op: str = "=") -> str:
    return f'{label}{op}"{value}"'


# ---------------------------------------------------------------- PromQL


def local_hour(ts_expr: str) -> str:
    """Local hour of a UTC timestamp's value; $tz_offset is hours east of UTC."""
    return f"hour({ts_expr} + $tz_offset * 3600)"


def start_hour() -> str:
    """Local hour at which each series' last transfer started."""
    return local_hour(f"{settings.START}{sel()}")


def peak(op: str, hour: str | None = None) -> str:
    """Keep the series whose last transfer started (or, given `hour`, whose hour is) in
    (`<`) or out of (`>=`) the peak hours of the dashboard's variables."""
    return settings.in_peak(hour or start_hour(), "$peak_start", "(($peak_end - $peak_start + 24) % 24)", op)


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


# What limited a transfer (bigbinf_last_transfer_limited_by{reason}), as one number a
# value mapping can name and colour: its place in result.LIMITS, from 1.
VERDICT_COLOURS = {
    "receive_window": "orange",
    "send_buffer": "yellow",
    "congestion": "red",
    "link_capacity": "green",
    "application": "blue",
    "startup": "light-green",
    "cpu": "purple",
    "disk": "brown",
    "busy_host": "dark-purple",
    "shared_path": "dark-green",
}
VERDICT_MAPPINGS: list[ValueMapping] = [
    ValueMap(
        options={
            str(code): ValueMappingResult(text=reason, color=VERDICT_COLOURS.get(reason, "purple"), index=code - 1)
            for code, reason in enumerate(LIMITS, 1)
        }
    )
]


def verdict_code() -> str:
    """The last transfer's verdict as its code (VERDICT_MAPPINGS); absent without a verdict.

    One term per reason, each only where that reason is the 1: a reason the exporter adds
    to LIMITS later gets its own code here, and a missing 0 series changes nothing."""
    gauge = settings.last_transfer("limited_by")
    return "\nor ".join(
        f"max by ({SERIES}) ({gauge}{sel(eq('reason', reason))} == 1) * 0 + {code}"
        for code, reason in enumerate(LIMITS, 1)
    )


def psel(*extra: str) -> str:
    """The path gauges' selector: they have a remote, not the series' other labels."""
    return "{" + ", ".join(('mesh=~"$mesh"', 'site=~"$site"', 'remote=~"$remote"', *extra)) + "}"


def probe_hour() -> str:
    """Local hour of each path's last probe (the time-of-day split of the path gauges)."""
    return local_hour(settings.probe_time(psel()))


def probe_mean_by_period(gauge: str, op: str) -> str:
    """Per-probe mean of a path gauge over the range, of the probes made in (`<`) or out of
    (`>=`) the peak hours: each probe counts once and goes with the hour it was made at."""
    keep = f"and on({settings.PATH_KEY}) {peak(op, probe_hour())}"
    return f"avg by (remote) ({settings.probes(gauge, '$__range', psel(), keep)})"


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
    chain = [
        # Both empty on a single-site Prometheus (All, which matches series without the
        # label); on a mesh's central Prometheus, the mesh and the site the transfers run from.
        ("mesh", "Mesh"),
        ("site", "Site"),
        ("remote", "Remote"),
        ("protocol", "Protocol"),
        ("dataset", "Dataset"),
        ("direction", "Direction"),
    ]
    variables: list[cogbuilder.Builder[VariableModel]] = []
    for i, (name, label) in enumerate(chain):
        before = ", ".join(f'{n}=~"${n}"' for n, _ in chain[:i])
        variables.append(
            series_variable(
                name,
                label,
                f"label_values({metric}{{{before}}}, {name})" if before else f"label_values({metric}, {name})",
            )
        )
    return variables


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


def textbox(name: str, label: str, value: str, description: str) -> TextBoxVariable:
    return (
        TextBoxVariable(name)
        .label(label)
        .default_value(value)
        .current(VariableOption(selected=True, text=value, value=value))
        .description(description)
    )


def time_of_day_variables(d: Dashboard) -> None:
    """Peak hours and UTC offset, defaulting to the rules' committed settings."""
    s = settings.Settings()
    d.with_variable(
        textbox("peak_start", "Peak from (h)", str(s.peak_start), "First peak hour, local time (the study: 11h).")
    )
    d.with_variable(
        textbox(
            "peak_end", "Peak until (h)", str(s.peak_end), "First hour after the peak, local time (the study: 15h)."
        )
    )
    d.with_variable(
        textbox(
            "tz_offset",
            "UTC offset (h)",
            f"{s.tz_offset_hours:g}",
            "Local time = UTC + this many hours, as a decimal: 2, -5, 5.5 for +5:30 (PromQL's hour() is UTC).",
        )
    )


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
    # Every series label: downloads and uploads, two remotes, or (on a mesh's central
    # Prometheus) two sites, are different rows.
    by = "site, dataset, protocol, direction, remote"
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
    names = {"site": "site", "dataset": "dataset", "protocol": "protocol", "direction": "direction", "remote": "remote"}
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

    d.with_row(g.row("Open regressions"))
    d.with_panel(g.place(open_regressions(), 24, 6))

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


def verdict_query(metric: str, ref: str) -> Dataquery:
    """One column of the regression verdicts' table: `metric` per series (a `transfer` label)."""
    return query(by_transfer(f"{metric}{sel()}"), ref=ref, instant=True, fmt=PromQueryFormat.TABLE)


def open_regressions() -> table.Panel:
    """The open regressions (issue 35) of the series the variables select: since when,
    the level before, the ratio now with its interval; for Overview and Path."""
    open_ = f"{metrics.REGRESSED.name}{sel()} == 1"
    columns = {
        "A": (f"{metrics.REGRESSION_SINCE.name}{sel()} * 1000", "since"),
        "B": (f"{metrics.REGRESSION_LEVEL_BEFORE.name}{sel()}", "level before"),
        "C": (f"{metrics.REGRESSION_RATIO.name}{sel()} and {open_}", "ratio now"),
        "D": (f"{metrics.REGRESSION_RATIO_LOWER.name}{sel()} and {open_}", "CI low"),
        "E": (f"{metrics.REGRESSION_RATIO_UPPER.name}{sel()} and {open_}", "CI high"),
    }
    panel = (
        table.Panel()
        .title("Open regressions")
        .description(
            'Regressions the exporter holds open (BigbinfThroughputRegressed fires for each; docs/runbook.md, "A '
            'regression is a state"): since = the start of its first slow transfer; level before = the median '
            "of the baseline it was found against; ratio now = the last transfers against that level, with its "
            "confidence interval.  It closes when the series recovers or an operator accepts the new level "
            "(bigbinf-exporter regression accept)."
        )
    )
    for ref, (expr, _) in columns.items():
        panel = panel.with_target(query(by_transfer(expr), ref=ref, instant=True, fmt=PromQueryFormat.TABLE))
    names = {"transfer": "transfer", **{f"Value #{ref}": name for ref, (_, name) in columns.items()}}
    return (
        panel.transformations(merge_and_rename(names))
        .override_by_name(*unit_override("since", "dateTimeAsIso"))
        .override_by_name(*unit_override("level before", "Bps"))
        .override_by_name(*unit_override("ratio now", "percentunit"))
        .override_by_name(*unit_override("CI low", "percentunit"))
        .override_by_name(*unit_override("CI high", "percentunit"))
        .no_value("No open regression")
    )


def time_of_day() -> Dashboard:
    g = Grid()
    d = base(
        "bigbinf-time-of-day",
        "bigbinf / Time of day",
        "Peak against off-peak (the study's Fig 4), throughput by hour of day, and today against "
        "yesterday and last week.  Peak hours and the time zone are the variables on the right.",
    )
    time_of_day_variables(d)

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

    d.with_row(g.row("Regression test (BigbinfThroughputRegressed)"))
    verdict = {
        "Value #A": "ratio",
        "Value #B": "CI low",
        "Value #C": "CI high",
        "Value #D": "q-value",
        "Value #E": "regressed",
        "Value #F": "baseline runs",
    }
    d.with_panel(
        g.place(
            table.Panel()
            .title("Regression verdicts: recent / baseline median at the same time of day")
            .description(
                "The exporter's significance test per series (docs/runbook.md, BigbinfThroughputRegressed): the last "
                "regression.recent_runs ok transfers against the baseline weeks before them at the same times of "
                "day.  Ratio: recent over baseline median (Hodges-Lehmann), with its confidence interval; q: the "
                "Mann-Whitney p-value corrected for the exporter's many series (Benjamini-Hochberg); regressed 1: a "
                "regression is open (it opened significant and a material drop, and stays open until the series "
                "recovers or an operator accepts the new level; the ratio is then against the level before it).  "
                "Series the test cannot decide for are not listed (the fixed-ratio alerts cover them)."
            )
            .with_target(verdict_query(metrics.REGRESSION_RATIO.name, "A"))
            .with_target(verdict_query(metrics.REGRESSION_RATIO_LOWER.name, "B"))
            .with_target(verdict_query(metrics.REGRESSION_RATIO_UPPER.name, "C"))
            .with_target(verdict_query(metrics.REGRESSION_Q.name, "D"))
            .with_target(verdict_query(metrics.REGRESSED.name, "E"))
            .with_target(verdict_query(metrics.REGRESSION_BASELINE_RUNS.name, "F"))
            .transformations(merge_and_rename({"transfer": "transfer", **verdict}))
            .override_by_name(*unit_override("ratio", "percentunit"))
            .override_by_name(*unit_override("CI low", "percentunit"))
            .override_by_name(*unit_override("CI high", "percentunit"))
            .override_by_name(*unit_override("q-value", "sci")),
            12,
            9,
        )
    )
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Recent / baseline ratio with its confidence interval")
            .description(
                "The regression test's ratio over time (it changes when a transfer of the series ends), with its "
                "confidence interval dashed; below 1 - regression.material_drop with a small q-value opens a "
                "regression (BigbinfThroughputRegressed), which stays open until the series recovers or is accepted."
            )
            .with_target(query(f"{metrics.REGRESSION_RATIO.name}{sel()}", legend + " ratio"))
            .with_target(query(f"{metrics.REGRESSION_RATIO_LOWER.name}{sel()}", legend + " CI low", "B"))
            .with_target(query(f"{metrics.REGRESSION_RATIO_UPPER.name}{sel()}", legend + " CI high", "C"))
            .override_by_regexp(
                ".* CI (low|high)",
                [DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})],
            )
            .unit("percentunit")
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_table()),
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
                "Packets the capture lost (the kernel dropped them before the capture tool read them, or the tool "
                "was stopped before it read them); non-zero means the transfer failed with its wire numbers absent."
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


def passive_row(d: Dashboard, g: Grid) -> None:
    """This host's own transfers with each remote, judged by the passive watcher
    (docs/passive.md): what held them, and their rates per service."""
    d.with_row(g.row("Production transfers (passive watcher)"))
    flows = metrics.PASSIVE_FLOWS_TOTAL.name
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Production transfers by verdict")
            .description(
                "This host's own transfers with the remote (users' scp, rsync, GridFTP, HTTP: the passive watcher, "
                "docs/passive.md) per hour, by what the judge found held them; none: not judged (a download's "
                "sender is the remote, whose kernel is not read).  Mostly receive_window, send_buffer, application, "
                "cpu or disk: BigbinfPassiveHeldBySite; the exporter's /passive page has each one's evidence."
            )
            .with_target(query(f"sum by (remote, verdict) (increase({flows}{psel()}[1h]))", "{{remote}} {{verdict}}"))
            .unit("short")
            .min(0)
            .legend(legend_table()),
            12,
            8,
        )
    )
    buckets = f"{metrics.PASSIVE_RATE_HIST.name}_bucket{psel()}"
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Production transfers' median steady rate")
            .description(
                "Median steady rate (the listings' fit over the last half of the data) of the production "
                "transfers with the remote per service, over 6 hours: beside the scheduled series' throughput, "
                "whether the users' transfers get what the path gives."
            )
            .with_target(
                query(
                    f"histogram_quantile(0.5, sum by (remote, service, le) (increase({buckets}[6h])))",
                    "{{remote}} {{service}}",
                )
            )
            .unit("Bps")
            .min(0)
            .legend(legend_table()),
            12,
            8,
        )
    )


def path() -> Dashboard:
    g = Grid()
    d = base(
        "bigbinf-path",
        "bigbinf / Path",
        "The path to each remote, probed once per round: RTT, loss, MTU, bandwidth and BDP, peak against "
        "off-peak; what limited each transfer, with the kernel's evidence; both hosts' TCP buffer maxima "
        "against the BDP.  The path panels follow the Remote variable only.",
    )
    time_of_day_variables(d)
    rtt, loss = metrics.PATH_RTT.name, metrics.PATH_LOSS.name
    remote_legend = "{{remote}}"

    d.with_row(g.row("Open regressions"))
    d.with_panel(g.place(open_regressions(), 24, 6))

    d.with_row(g.row("Round-trip time and loss"))
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Path RTT")
            .description(
                "Minimum, mean and maximum round-trip time of each round's probe train (ICMP echo, or TCP connect "
                "where ICMP is filtered).  The minimum is the path's propagation delay and goes into the BDP; a "
                "mean or maximum far above it is queueing."
            )
            .with_target(query(f"{rtt}{psel(eq('stat', 'min|avg|max', '=~'))}", "{{remote}} {{stat}}"))
            .override_by_regexp(
                ".* (min|max)",
                [DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})],
            )
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
            .title("Probe loss")
            .description(
                "Share of each round's probes that got no answer; 100% means the remote answered none "
                "(BigbinfPathProbesUnanswered)."
            )
            .with_target(query(f"{loss}{psel()}", remote_legend))
            .unit("percentunit")
            .min(0)
            .max(1)
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_table()),
            7,
            8,
        )
    )
    d.with_panel(
        g.place(
            stat.Panel()
            .title("Last probe")
            .description(
                "How long ago each path was last probed (any method).  Probes run once per round: older than "
                "twice the schedule interval, BigbinfPathProbesStale fires."
            )
            .with_target(query(f"time() - {settings.probe_time(psel())}", remote_legend, instant=True))
            .unit("s")
            .color_mode(BigValueColorMode.NONE)
            .text_mode(BigValueTextMode.VALUE_AND_NAME)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            5,
            8,
        )
    )

    d.with_row(g.row("MTU, bandwidth and bandwidth-delay product"))
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Path MTU")
            .description(
                "Largest IP packet with DF set that reached the remote and was answered (1500 on Ethernet; less "
                "behind a tunnel).  Absent where it is unknown (TCP probes)."
            )
            .with_target(query(f"{metrics.PATH_MTU.name}{psel()}", remote_legend))
            .unit("bytes")
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_list()),
            8,
            8,
        )
    )
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Bandwidth estimate")
            .description(
                "The path's bottleneck estimate and where it comes from: configured (remotes.NAME.bandwidth), lab "
                "(the lab's shaped rate) or iperf3 (the last ok iperf3 test: a lower bound, capped by the buffers "
                "it ran with)."
            )
            .with_target(query(f"{metrics.PATH_BANDWIDTH.name}{psel()}", "{{remote}} {{source}}"))
            .unit("Bps")
            .min(0)
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_list()),
            8,
            8,
        )
    )
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Bandwidth-delay product")
            .description(
                "Bandwidth estimate x minimum probe RTT: the bytes in flight that fill the path, so what one TCP "
                "connection's window (and both hosts' buffers) must hold."
            )
            .with_target(query(f"{metrics.PATH_BDP.name}{psel()}", "{{remote}} {{source}}"))
            .unit("bytes")
            .min(0)
            .show_points(VisibilityMode.ALWAYS)
            .legend(legend_list()),
            8,
            8,
        )
    )

    d.with_row(g.row("Peak against off-peak"))
    for title, gauge, unit, what in (
        ("Mean RTT, peak and off-peak", f"{rtt}{psel(eq('stat', 'avg'))}", "s", "mean RTT of the probe trains"),
        ("Probe loss, peak and off-peak", f"{loss}{psel()}", "percentunit", "loss of the probe trains"),
    ):
        d.with_panel(
            g.place(
                barchart.Panel()
                .title(title)
                .description(
                    f"Per-probe {what} made in peak or off-peak hours (the variables) in the time range: each "
                    "round's probe counts once, by the local time it was made.  Higher at peak is congestion "
                    "on a shared path."
                )
                .with_target(query(probe_mean_by_period(gauge, "<"), instant=True, fmt=PromQueryFormat.TABLE))
                .with_target(query(probe_mean_by_period(gauge, ">="), ref="B", instant=True, fmt=PromQueryFormat.TABLE))
                .transformations(merge_and_rename({"remote": "remote", "Value #A": "peak", "Value #B": "off-peak"}))
                .x_field("remote")
                .unit(unit)
                .show_value(VisibilityMode.AUTO)
                .legend(legend_list()),
                12,
                8,
            )
        )

    d.with_row(g.row("What limited each transfer"))
    d.with_panel(
        g.place(
            statetimeline.Panel()
            .title("Verdict per transfer series")
            .description(
                "What limited each series' last transfer, over time (bigbinf_last_transfer_limited_by == 1): "
                "receive_window or send_buffer (a host's buffers: see below), congestion (loss on the path), "
                "link_capacity (the path was full: nothing to tune), startup (set-up and slow start took much "
                "of a short transfer), cpu (a program short of CPU), disk (a program waiting on storage), "
                "application (a program that sent or read no faster: a throttle).  bigbinf_last_transfer_"
                "limited_side says on which host, and the journal and `once` say the evidence and the next step "
                "(docs/metrics.md, Why was it slow?).  Gaps: no verdict (failed or UDP transfers, nothing named)."
            )
            .with_target(query(verdict_code(), LEGEND_SERIES))
            .mappings(VERDICT_MAPPINGS)
            .show_value(VisibilityMode.AUTO)
            .merge_values(True)
            .legend(legend_list()),
            24,
            9,
        )
    )
    tcp_limited = settings.last_transfer("tcp_limited_seconds")

    def limited(limit: str) -> str:
        return f"max by ({SERIES}) ({tcp_limited}{sel(eq('limit', limit))})"

    rate = settings.last_transfer("tcp_delivery_rate_bytes_per_second")
    columns = [
        ("A", verdict_code(), "verdict"),
        ("B", limited("busy"), "busy"),
        ("C", settings.ratio(limited("rwnd"), limited("busy")), "receive-window-limited"),
        ("D", settings.ratio(limited("sndbuf"), limited("busy")), "send-buffer-limited"),
        ("E", f"max by ({SERIES}) ({rate}{sel()})", "delivery rate"),
        (
            "F",
            f"max by ({SERIES}) (\n  {rate}{sel()}\n  / on({settings.PATH_KEY}) group_left()\n"
            f"  max without(source) ({metrics.PATH_BANDWIDTH.name}{psel()}))",
            "of path bandwidth",
        ),
        ("G", f"max by ({SERIES}) ({settings.last_transfer('tcp_min_rtt_seconds')}{sel()})", "min RTT (kernel)"),
        ("H", f"max by ({SERIES}) ({settings.LAST_THROUGHPUT}{sel()})", "throughput"),
    ]
    evidence = (
        table.Panel()
        .title("Last verdict and the TCP evidence")
        .description(
            "Per series, the last transfer's verdict and the sender kernel's numbers it was judged by: time with "
            "data in flight (busy), the shares of it limited by the receive window and by the send buffer "
            "(30% or more gives that verdict), the median delivery rate and its share of the path's bandwidth "
            "estimate (90% or more: link_capacity), the smallest RTT the connection saw, and the file throughput.  "
            "Empty cells: the sender is the remote and cannot be asked."
        )
    )
    for ref, expr, _ in columns:
        evidence = evidence.with_target(query(expr, ref=ref, instant=True, fmt=PromQueryFormat.TABLE))
    names = {label: label for label in ("protocol", "remote", "dataset", "direction")}
    names.update({f"Value #{ref}": name for ref, _, name in columns})
    evidence = evidence.transformations(merge_and_rename(names))
    evidence = evidence.override_by_name(
        "verdict",
        [
            DynamicConfigValue(id_val="mappings", value=VERDICT_MAPPINGS),
            DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}),
        ],
    )
    for name, unit in (
        ("busy", "s"),
        ("receive-window-limited", "percentunit"),
        ("send-buffer-limited", "percentunit"),
        ("delivery rate", "Bps"),
        ("of path bandwidth", "percentunit"),
        ("min RTT (kernel)", "s"),
        ("throughput", "Bps"),
    ):
        evidence = evidence.override_by_name(*unit_override(name, unit))
    d.with_panel(g.place(evidence, 24, 8))

    passive_row(d, g)

    d.with_row(g.row("TCP buffers against the BDP"))
    buffers = f"{metrics.TCP_BUFFER_MAX.name}{psel()}"
    bdp = settings.path_bdp(psel())
    d.with_panel(
        g.place(
            timeseries.Panel()
            .title("Buffer maxima and the BDP")
            .description(
                "Both hosts' TCP buffer maxima (side local: this host, remote: the remote where it can be asked): "
                "tcp_rmem and tcp_wmem are the autotuning maxima every connection is held to, rmem_max and "
                "wmem_max the caps on buffers a program sets itself.  The BDP (thick) is what a window must hold: "
                "an autotuning maximum below it fires BigbinfTcpBuffersBelowBdp.  Log scale."
            )
            .with_target(query(buffers, "{{remote}} {{side}} {{kind}}"))
            .with_target(query(bdp, "{{remote}} BDP", ref="B"))
            .override_by_regexp(".* BDP", [DynamicConfigValue(id_val="custom.lineWidth", value=4)])
            .unit("bytes")
            .scale_distribution(ScaleDistributionConfig().type(ScaleDistribution.LOG).log(2))
            .legend(legend_table()),
            24,
            9,
        )
    )
    by = "remote, side, kind"
    headroom = (
        table.Panel()
        .title("Buffer maxima against the BDP, now")
        .description(
            "Each host's maxima and the path's BDP.  Below 1 x the BDP (red) one connection cannot fill the path "
            "(BigbinfTcpBuffersBelowBdp, for tcp_rmem and tcp_wmem); below 2 x (orange) a receive buffer still "
            "falls short, as the window it advertises is only part of it.  `bigbinf-exporter advise --remote R` "
            "prints the sysctl lines."
        )
        .with_target(query(f"max by ({by}) ({buffers})", ref="A", instant=True, fmt=PromQueryFormat.TABLE))
        .with_target(
            query(
                f"max by ({by}) (\n  {buffers} * 0\n  + on({settings.PATH_KEY}) group_left()\n  {bdp})",
                ref="B",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            )
        )
        .with_target(
            query(
                f"max by ({by}) (\n  {buffers}\n  / on({settings.PATH_KEY}) group_left()\n  ({bdp} > 0))",
                ref="C",
                instant=True,
                fmt=PromQueryFormat.TABLE,
            )
        )
        .transformations(
            merge_and_rename(
                {
                    "remote": "remote",
                    "side": "side",
                    "kind": "kind",
                    "Value #A": "maximum",
                    "Value #B": "BDP",
                    "Value #C": "x BDP",
                }
            )
        )
        .override_by_name(*unit_override("maximum", "bytes"))
        .override_by_name(*unit_override("BDP", "bytes"))
        .override_by_name(
            "x BDP",
            [
                DynamicConfigValue(id_val="decimals", value=2),
                DynamicConfigValue(
                    id_val="thresholds", value=thresholds((None, "red"), (1, "orange"), (2, "green")).build()
                ),
                DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}),
            ],
        )
    )
    d.with_panel(g.place(headroom, 16, 8))
    d.with_panel(
        g.place(
            table.Panel()
            .title("Congestion control")
            .description(
                "Each host's default congestion control (net.ipv4.tcp_congestion_control): cubic backs off on "
                "every loss, bbr paces at the measured bottleneck; on a lossy long path that matters as much as "
                "the buffers."
            )
            .with_target(
                query(
                    f"max by (remote, side, algorithm) ({metrics.TCP_CONGESTION_CONTROL.name}{psel()} == 1)",
                    instant=True,
                    fmt=PromQueryFormat.TABLE,
                )
            )
            .transformations(
                [DataTransformerConfig(id_val="organize", options={"excludeByName": {"Time": True, "Value": True}})]
            ),
            8,
            8,
        )
    )

    d.with_row(g.row("Moving data: predicted durations (plan-move)"))
    d.with_panel(
        g.place(
            bargauge.Panel()
            .title("Predicted move to $remote")
            .description(
                "How long moving each of the configured sizes (config moves.sizes) to or from the remote would take: "
                "the recommended protocol and setting at its best start hour, with the 90% prediction interval, from "
                "the transfers measured to it (plan-move's model, docs/report.md).  One panel per remote; "
                "`bigbinf-exporter plan-move --remote R --size S` gives every option and start hour."
            )
            .repeat("remote")
            .repeat_direction("h")
            .max_per_row(4)
            .with_target(query(f"{metrics.MOVE_PREDICTED_LOWER.name}{psel()}", "{{size}} fastest (5%)", "A", True))
            .with_target(query(f"{metrics.MOVE_PREDICTED.name}{psel()}", "{{size}} predicted", "B", True))
            .with_target(query(f"{metrics.MOVE_PREDICTED_UPPER.name}{psel()}", "{{size}} slowest (95%)", "C", True))
            .unit("s")
            .min(0)
            .orientation(VizOrientation.HORIZONTAL)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            12,
            8,
        )
    )
    return d


# ---------------------------------------------------------------- the mesh
#
# Run against a mesh's central Prometheus, which every site's Prometheus forwards to
# (bigbinf.mesh.prometheus): `site` is the site a transfer runs from (the exporter's own
# label), `remote` the site it goes to, `mesh` the mesh (the sites' external label).

MESH_SEL = 'mesh="$mesh", protocol="$protocol", dataset="$dataset", direction="$direction"'
PAIR = "site, remote"  # one grid cell: (from, to)
FROM = "from"  # the grid's first column: the row's site
TIME_OF_DAY_UID = "bigbinf-time-of-day"


def msel(*extra: str) -> str:
    return "{" + ", ".join((MESH_SEL, *extra)) + "}"


def mesh_variables() -> list[cogbuilder.Builder[VariableModel]]:
    """One mesh (several may share a central Prometheus, with the same site names), then
    one protocol, dataset and direction: single values, so that a grid cell is one series,
    not several mixed, and the plan panels speak of one mesh."""
    metric = metrics.TRANSFERS_TOTAL.name
    chain = [("mesh", "Mesh"), ("protocol", "Protocol"), ("dataset", "Dataset"), ("direction", "Direction")]
    variables: list[cogbuilder.Builder[VariableModel]] = []
    for i, (name, label) in enumerate(chain):
        before = ", ".join(f'{n}="${n}"' for n, _ in chain[:i])
        variables.append(
            QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query(f"label_values({metric}{{{before}}}, {name})" if before else f"label_values({metric}, {name})")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
        )
    return variables


def last_period() -> str:
    """Each series' last transfer (ok or not) as a `period` label, peak or offpeak, as the
    recording rules attribute it (their PEAK: the peak hours they were generated with)."""
    peak = f"{settings.PEAK}{msel()}"
    return (
        f'label_replace({peak} == 1, "period", "peak", "", "")\n'
        f'  or label_replace({peak} == 0, "period", "offpeak", "", "")'
    )


def pair_baseline() -> str:
    """The 7-day baseline of each series' last transfer: the regression rules'
    PERIOD_BASELINE_7D (the 7-day per-transfer mean of the period the transfer started in,
    else the all-day one) for that transfer's own period."""
    return f"{settings.PERIOD_BASELINE_7D}{msel()}\n  and ({last_period()})"


def pair_matrix() -> list[DataTransformerConfig]:
    """Rows of (site, remote, value) -> one row per `from` site, one column per `to` site."""
    return [
        DataTransformerConfig(
            id_val="groupingToMatrix", options={"columnField": "remote", "rowField": "site", "valueField": "Value"}
        ),
        DataTransformerConfig(id_val="organize", options={"renameByName": {"site\\remote": FROM}}),
        DataTransformerConfig(id_val="sortBy", options={"sort": [{"field": FROM}]}),
    ]


def time_of_day_link() -> DynamicConfigValue:
    """A cell's link: the Time of day dashboard for its pair (row = site, column = remote)
    in the chosen mesh (its `mesh` variable: two meshes may share site names) and the
    chosen protocol, dataset and direction, keeping the time range."""
    url = (
        f'/d/{TIME_OF_DAY_UID}?var-mesh=${{mesh}}&var-site=${{__data.fields["{FROM}"]}}&var-remote=${{__field.name}}'
        "&var-protocol=${protocol}&var-dataset=${dataset}&var-direction=${direction}&${__url_time_range}"
    )
    return DynamicConfigValue(
        id_val="links",
        value=[{"title": f'Time of day: ${{__data.fields["{FROM}"]}} → ${{__field.name}}', "url": url}],
    )


# A site's state on the Mesh dashboard: a number the table maps to words and colours.
SITE_STATES = {0: ("measuring", "green"), 1: ("no results for 2 rounds", "orange"), 2: ("not reporting", "red")}


def site_state() -> str:
    """Per site of the chosen mesh seen in the time range: 2 while its exporter is not
    reporting (its Prometheus scrapes it and gets nothing, up == 0, or the site forwards
    nothing at all: no fresh `up`), else 1 while its last transfer started more than two
    rounds ago, else 0.  A site that stopped is a row saying so, not a blank one."""
    up = f'up{{job="{settings.Settings().job}", mesh="$mesh"}}'
    start = f'{settings.START}{{mesh="$mesh"}}'
    period = f'{metrics.ROUND_PERIOD.name}{{mesh="$mesh"}}'
    return (
        f"(max by (site) (last_over_time({up}[$__range])) * 0 + 2\n"
        f"  unless on(site) (max by (site) ({up}) == 1))\n"
        f"or\n"
        f"((time() - max by (site) ({start})) > 2 * max by (site) ({period})) * 0 + 1\n"
        f"or\n"
        f"max by (site) ({up}) * 0"
    )


def site_states() -> table.Panel:
    start = f'{settings.START}{{mesh="$mesh"}}'
    columns = [
        ("A", site_state(), "state"),
        ("B", f"time() - max by (site) (last_over_time({start}[$__range]))", "last transfer started"),
    ]
    panel = (
        table.Panel()
        .title("Sites")
        .description(
            "Every site of the chosen mesh seen in the time range: measuring; no results for 2 rounds (its exporter "
            "answers, but its last transfer started more than two rounds ago: every slot missed, see below); or not "
            'reporting (its exporter is down, or its Prometheus forwards nothing).  "last transfer started": how '
            "long ago, also for a site no longer reporting."
        )
    )
    for ref, expr, _ in columns:
        panel = panel.with_target(query(expr, ref=ref, instant=True, fmt=PromQueryFormat.TABLE))
    names = {"site": "site"}
    names.update({f"Value #{ref}": name for ref, _, name in columns})
    mapping = {
        "type": "value",
        "options": {
            str(code): {"text": text, "color": colour, "index": code} for code, (text, colour) in SITE_STATES.items()
        },
    }
    return (
        panel.transformations(merge_and_rename(names))
        .override_by_name(*unit_override("last transfer started", "s"))
        .override_by_name(
            "state",
            [
                DynamicConfigValue(id_val="mappings", value=[mapping]),
                DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}),
            ],
        )
        .no_value("No site of this mesh in the time range")
    )


def pair_grid(title: str, description: str, expr: str, unit: str, coloured: bool = False) -> table.Panel:
    """A site x site grid of one number per pair; every cell links to the pair's Time of
    day dashboard.  The number fields are the cells (the `from` column is text), so the
    links and the colouring (by the panel's thresholds) go on them only."""
    cells = [time_of_day_link()]
    if coloured:
        cells.append(DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"}))
    return (
        table.Panel()
        .title(title)
        .description(description)
        .with_target(query(f"max by ({PAIR}) (\n  {expr}\n)", instant=True, fmt=PromQueryFormat.TABLE))
        .transformations(pair_matrix())
        .unit(unit)
        .override_by_field_type("number", cells)
        .no_value("No transfer of this protocol, dataset and direction")
    )


def mesh() -> Dashboard:
    g = Grid()
    s = settings.Settings()
    d = (
        Dashboard("bigbinf / Mesh")
        .uid("bigbinf-mesh")
        .description(
            "Every pair of sites of a mesh, on the central Prometheus the sites forward to: the latest throughput "
            "from each site (rows) to each other (columns) against the pair's own 7-day baseline, and whether the "
            "sites keep to the mesh plan."
        )
        .tags(["bigbinf"])
        .editable()
        .time("now-7d", "now")
        .refresh("1m")
        .timezone("browser")
        .link(
            DashboardLink("bigbinf dashboards")
            .type(DashboardLinkType.DASHBOARDS)
            .tags(["bigbinf"])
            .as_dropdown(True)
            .keep_time(True)
        )
        .variables(mesh_variables())
    )
    last = f"{settings.LAST_THROUGHPUT}{msel()}"
    d.with_row(g.row("Sites"))
    d.with_panel(g.place(site_states(), 24, 6))
    # `max by`: one series per cell once mesh, protocol, dataset and direction are fixed
    # (job and instance of the one exporter at the site); max, not sum, should a site's
    # series come twice (an exporter scraped by two jobs).
    #
    # Grafana colours a table cell by that cell's own value only, so the grid that is
    # coloured holds the ratio (latest / baseline) and two grids beside it hold the numbers
    # it is made of; one grid of throughputs coloured by ratio is not expressible.
    d.with_row(g.row("Latest throughput against each pair's 7-day baseline (rows: from, columns: to)"))
    ratio_grid = pair_grid(
        "Latest throughput / 7-day baseline",
        f"Throughput of each pair's last transfer (0 if it failed) over the pair's 7-day per-transfer mean for the "
        f"same period of the day (the regression rules' baseline, evaluated at the site).  Red below "
        f"{s.regression_fraction:g} (BigbinfThroughputRegression's threshold), orange below 0.9.  Empty: no "
        "baseline yet.  Click a cell for the pair's Time of day dashboard.",
        f"{last}\n  / ignoring(period)\n  ({pair_baseline()})",
        "percentunit",
        coloured=True,
    )
    ratio_grid = ratio_grid.thresholds(thresholds((None, "red"), (s.regression_fraction, "orange"), (0.9, "green")))
    d.with_panel(g.place(ratio_grid, 24, 8))
    d.with_panel(
        g.place(
            pair_grid(
                "Latest throughput",
                "File bytes / duration of each pair's last transfer (0 if it failed).",
                last,
                "Bps",
            ),
            12,
            8,
        )
    )
    d.with_panel(
        g.place(
            pair_grid(
                "7-day baseline",
                "The pair's 7-day per-transfer mean throughput for the period of the day its last transfer "
                "started in (series_period:...:baseline7d, recorded at the site).",
                pair_baseline(),
                "Bps",
            ),
            12,
            8,
        )
    )

    d.with_row(g.row("Keeping to the plan"))
    in_mesh = '{mesh="$mesh"}'  # the one mesh chosen: its sites' plans, not another mesh's
    columns = [
        ("A", f"round(sum by (site) (increase({metrics.SLOT_OVERRUNS_TOTAL.name}{in_mesh}[$__range])))", "overruns"),
        ("B", f"round(sum by (site) (increase({metrics.SLOTS_MISSED_TOTAL.name}{in_mesh}[$__range])))", "missed slots"),
        ("C", f"max by (site) ({metrics.LAST_SLOT_OVERRUN.name}{in_mesh})", "longest last overrun"),
    ]
    slots = (
        table.Panel()
        .title("Slot overruns and missed slots per site")
        .description(
            "Over the time range, every protocol and dataset: transfers whose traffic went on past the end of their "
            "slot (the site's next slot waited), slots not run for any reason (the exporter down, a late start "
            "after an overrun, a round that does not fit, the round lock held: bigbinf_mesh_slots_missed_total's "
            "reason label), and the longest overrun among the series' last transfers.  Non-zero: see "
            "docs/runbook.md, the mesh alerts."
        )
    )
    for ref, expr, _ in columns:
        slots = slots.with_target(query(expr, ref=ref, instant=True, fmt=PromQueryFormat.TABLE))
    names = {"site": "site"}
    names.update({f"Value #{ref}": name for ref, _, name in columns})
    slots = (
        slots.transformations(merge_and_rename(names))
        .override_by_name(*unit_override("longest last overrun", "s"))
        .thresholds(thresholds((None, "green"), (1, "orange")))
        .override_by_name("overruns", [DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"})])
        .override_by_name(
            "missed slots", [DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-text"})]
        )
    )
    d.with_panel(g.place(slots, 12, 8))
    plan = metrics.PLAN_INFO.name
    d.with_panel(
        g.place(
            stat.Panel()
            .title("Plans in use")
            .description(
                "Distinct mesh plan fingerprints the chosen mesh's sites publish now (other meshes on the same "
                "Prometheus are not counted): 1 when every site computed the same slots from the same mesh file, "
                "durations and date; more, and the sites disagree (a site with an older mesh file or durations "
                "file): their slots may collide."
            )
            .with_target(query(f"count(count by (fingerprint) ({plan}{in_mesh}))", instant=True))
            .thresholds(thresholds((None, "green"), (2, "red")))
            .color_mode(BigValueColorMode.BACKGROUND)
            .reduce_options(ReduceDataOptions().calcs(["lastNotNull"])),
            4,
            8,
        )
    )
    d.with_panel(
        g.place(
            table.Panel()
            .title("Plan fingerprint per site")
            .description("The plan each site runs now; a site whose fingerprint differs from the others' disagrees.")
            .with_target(
                query(f"max by (site, fingerprint) ({plan}{in_mesh})", instant=True, fmt=PromQueryFormat.TABLE)
            )
            .transformations(
                [DataTransformerConfig(id_val="organize", options={"excludeByName": {"Time": True, "Value": True}})]
            ),
            8,
            8,
        )
    )
    return d


DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "mesh.json": mesh,
    "overview.json": overview,
    "path.json": path,
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
