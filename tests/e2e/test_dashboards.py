"""Grafana dashboards: generated, consistent, and every query runs against live data.

No Grafana server can run here, so the dashboards are checked by construction (the
committed JSON is exactly what bigbinf.mixin.dashboards produces with the pinned SDK) and by
execution: every panel target, with the dashboard variables substituted the way Grafana
would, runs against a real Prometheus that scraped a real exporter through real lab
rounds, and so does every recording and alerting rule.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from bigbinf import metrics as M
from bigbinf.journal.store import Journal
from bigbinf.mixin import rules
from bigbinf.mixin.settings import HOUR_MEAN_7D, Settings
from bigbinf.result import Result

from ..support.exporter import ExporterProcess
from ..support.prometheus import PrometheusServer, committed_rule_groups, loaded_rule_groups

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "grafana" / "dashboards"
SERIES_VARIABLES = ("remote", "protocol", "dataset", "direction")
DATASOURCE_UID = "bigbinf-prometheus"
SDK_PIN = "grafana-foundation-sdk==1769699379!11.6.0"
REGENERATE = ".venv/bin/python -m bigbinf.mixin.dashboards"

FIG4 = ("bigbinf-time-of-day", "Mean throughput, peak and off-peak (Fig 4)")
PATH_BY_PERIOD = (("bigbinf-path", "Mean RTT, peak and off-peak"), ("bigbinf-path", "Probe loss, peak and off-peak"))
# Targets allowed to return nothing in a lab Prometheus a minute old, and why.
MAY_BE_EMPTY = {
    ("bigbinf-overview", "Firing alerts", "A"): "no alert fires in a healthy lab",
    # The queries run (an error fails them); a regression opening is the lab test's
    # (tests/lab/test_regression_lab.py, which checks the gauges they read).
    **{
        (uid, "Open regressions", ref): "no regression opens in a healthy lab"
        for uid in ("bigbinf-overview", "bigbinf-path")
        for ref in "ABCDE"
    },
    ("bigbinf-time-of-day", "Throughput today, yesterday and a week ago", "B"): "Prometheus is minutes old",
    ("bigbinf-time-of-day", "Throughput today, yesterday and a week ago", "C"): "Prometheus is minutes old",
    # The panels run with the peak set around the test's transfers (peak_hours()), so
    # off-peak holds none; test_peak_and_offpeak_follow_the_peak_hours checks both ways.
    (*FIG4, "B"): "every transfer of the test starts in the peak hours it sets",
    **{(*panel, "B"): "every probe of the test is made in the peak hours it sets" for panel in PATH_BY_PERIOD},
    # The sender kernel's delivery rate is sampled from the socket listings taken while
    # data flows; the lab's 1-2 MiB transfers on an unshaped link end between two.
    **{
        ("bigbinf-path", "Last verdict and the TCP evidence", ref): "no listing falls inside a lab transfer"
        for ref in ("E", "F")
    },
    # The passive watcher's panels (docs/passive.md): the test's exporter runs no production
    # transfers; tests/lab/test_passive.py and tests/unit/test_passive.py check what they read.
    ("bigbinf-path", "Production transfers by verdict", "A"): "no production transfer in the lab",
    ("bigbinf-path", "Production transfers' median steady rate", "A"): "no production transfer in the lab",
}
PANELS_MAY_BE_EMPTY = {
    ("bigbinf-overview", "Firing alerts"),
    ("bigbinf-overview", "Open regressions"),
    ("bigbinf-path", "Open regressions"),
    ("bigbinf-path", "Production transfers by verdict"),  # the passive watcher's: see MAY_BE_EMPTY
    ("bigbinf-path", "Production transfers' median steady rate"),
}
# Instant targets whose latest value may be absent but which must have shown data in the
# test's time range: with no rule met a transfer's verdict is empty (bigbinf/judge/rules.py),
# and beside two CPU burners the last 2 MiB scp download met none once.
SEEN_IN_RANGE = {
    ("bigbinf-path", "Last verdict and the TCP evidence", "A"): "the last transfer's verdict may be empty",
}
# The Mesh dashboard reads a mesh's central Prometheus (site, mesh labels; the sites'
# baselines): tests/e2e/test_mesh_prometheus.py runs every query of it against one.
MESH = "mesh.json"


def generator() -> ModuleType:
    # Imported here, not at the top: without the SDK (a test extra) this test fails with
    # the command that installs it, and the other tests of the file still run.
    try:
        import grafana_foundation_sdk  # noqa: F401
    except ImportError:
        pytest.fail(f"grafana-foundation-sdk is not installed: .venv/bin/pip install '{SDK_PIN}'")
    from bigbinf.mixin import dashboards

    return dashboards


def committed() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def single_site() -> dict[str, dict[str, Any]]:
    """The dashboards of one exporter's Prometheus: all but the Mesh dashboard."""
    return {name: d for name, d in committed().items() if name != MESH}


@dataclass(frozen=True)
class Target:
    dashboard: str
    panel: str
    ref: str
    expr: str
    instant: bool


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold their panels


def targets(dashboard: dict[str, Any]) -> list[Target]:
    return [
        Target(dashboard["uid"], p["title"], t["refId"], t["expr"], bool(t.get("instant")))
        for p in panels(dashboard)
        if p["type"] != "row"
        for t in p.get("targets", [])
    ]


# ---------------------------------------------------------------- by construction


def test_committed_dashboards_are_the_generator_output() -> None:
    rendered = generator().render()
    on_disk = {p.name: p.read_text() for p in sorted(DASHBOARDS.glob("*.json"))}
    assert sorted(on_disk) == sorted(rendered), f"dashboards added or removed: run {REGENERATE}"
    stale = [name for name in rendered if on_disk[name] != rendered[name]]
    assert stale == [], f"out of date, run {REGENERATE}: {stale}"


def test_sdk_is_the_grafana_11_6_build() -> None:
    from importlib.metadata import version

    generator()
    assert version("grafana-foundation-sdk") == SDK_PIN.split("==")[1]
    for dashboard in committed().values():
        assert dashboard["schemaVersion"] == 41  # Grafana 11.6's dashboard schema


def test_dashboards_are_consistent() -> None:
    dashboards = committed()
    assert set(dashboards) == {
        MESH,
        "overview.json",
        "path.json",
        "protocols.json",
        "time-of-day.json",
        "transfer-detail.json",
    }
    uids = [d["uid"] for d in dashboards.values()]
    assert len(set(uids)) == len(uids)
    for name, d in dashboards.items():
        variables = {v["name"]: v for v in d["templating"]["list"]}
        # The Mesh dashboard: one mesh, protocol, dataset and direction (a grid cell is one
        # series, the plan panels one mesh's); its pairs are the grid, not a remote
        # variable.  The others: mesh and site (All on a single-site Prometheus, whose
        # series have neither label) and the series' labels, any number of each.
        series = () if name == MESH else ("mesh", "site", *SERIES_VARIABLES)
        single = ("mesh", "protocol", "dataset", "direction") if name == MESH else ()
        assert set(series) | set(single) <= set(variables), name
        for var in (*series, *single):
            v = variables[var]
            assert v["type"] == "query" and v["datasource"]["uid"] == DATASOURCE_UID
            if var in series:
                assert v["multi"] and v["includeAll"] and v["allValue"] == ".*"
            else:
                assert not v.get("multi") and not v.get("includeAll"), (name, var)
        ids = [p["id"] for p in panels(d)]
        assert len(set(ids)) == len(ids) and 0 not in ids, name
        exprs = " ".join(t.expr for t in targets(d))
        for var in (*series, *single):
            assert f"${var}" in exprs, f"{name}: no panel uses ${var}"
        for p in panels(d):
            pos = p["gridPos"]
            assert pos["x"] + pos["w"] <= 24, (name, p["title"])
            if p["type"] == "row":
                continue
            assert p["datasource"]["uid"] == DATASOURCE_UID, (name, p["title"])
            assert p.get("targets"), (name, p["title"])
            for t in p["targets"]:
                assert t["datasource"]["uid"] == DATASOURCE_UID


def known_series() -> set[str]:
    names = {"up", "ALERTS"}
    for spec in M.ALL_WITH_MESH:
        if spec.type == "histogram":
            names |= {spec.name + s for s in ("_bucket", "_sum", "_count")}
        else:
            names.add(spec.name)
    for group in rules.recording(Settings())["groups"]:
        names |= {r["record"] for r in group["rules"]}
    return names


def referenced(expr: str) -> set[str]:
    return set(re.findall(r"\b(?:[a-z_]+:[a-z0-9_]+:[a-z0-9_]+|bigbinf_[a-z0-9_]+)\b", expr))


def test_dashboards_use_only_metrics_that_exist() -> None:
    known = known_series()
    unknown = {
        (t.dashboard, t.panel, name)
        for d in committed().values()
        for t in targets(d)
        for name in referenced(t.expr)
        if name not in known
    }
    assert unknown == set()


def test_provisioning_points_at_the_dashboards() -> None:
    grafana = ROOT / "grafana" / "provisioning"
    ds = yaml.safe_load((grafana / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert [d["uid"] for d in ds] == [DATASOURCE_UID]
    providers = yaml.safe_load((grafana / "dashboards" / "bigbinf.yml").read_text())["providers"]
    assert [p["options"]["path"] for p in providers] == ["/var/lib/grafana/dashboards/bigbinf"]
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert "./grafana/dashboards:/var/lib/grafana/dashboards/bigbinf:ro" in mounts


# ---------------------------------------------------------------- by execution

ROUNDS = 2
# Builtins as Grafana fills them for a short dashboard range.
BUILTINS = {"__range": "10m", "__rate_interval": "1m", "__interval": "15s"}
# The lab's exporter is no mesh site: its series have no mesh or site label, which All matches.
CHOICES = {
    "one series": {
        "mesh": ".*",
        "site": ".*",
        "remote": "lab",
        "protocol": "scp",
        "dataset": "f2m",
        "direction": "download",
    },
    "All": dict.fromkeys(("mesh", "site", *SERIES_VARIABLES), ".*"),
}


@dataclass
class Live:
    prom: PrometheusServer
    start: float
    at: float  # evaluation time for instant queries (see live())


def substitute(expr: str, dashboard: dict[str, Any], choice: dict[str, str]) -> str:
    values = dict(BUILTINS, **choice)
    for v in dashboard["templating"]["list"]:
        if v["type"] in ("textbox", "constant"):
            values.setdefault(v["name"], v["query"])

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name.isdigit():
            return m.group(0)  # a regex back-reference ("0$1"): Grafana leaves unknown names alone
        if name not in values:
            raise AssertionError(f"{dashboard['uid']}: unknown variable ${name} in {expr}")
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


@pytest.fixture(scope="module")
def live(make_module_lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A lab, the exporter running rounds every 4 s, and Prometheus with the rules."""
    tmp = tmp_path_factory.mktemp("dashboards")
    config = make_module_lab(
        datasets={"f1m": {"file": "f1m.bin", "size": "1MiB"}, "f2m": {"file": "f2m.bin", "size": "2MiB"}},
        protocols={"scp": {}, "sftp": {}},
    )
    raw = json.loads(config.model_dump_json())
    raw["schedule"] = {"interval": "4s", "jitter": 0}
    # A bottleneck estimate for the path, so that it has a BDP (the Path dashboard); the
    # lab's link is not shaped here, which would give one too (source lab).
    raw["remotes"]["lab"]["bandwidth"] = "200mbit"
    # Three weeks of history at this time of day, so that the regression test has a
    # baseline for every series (the Time of day dashboard's verdicts), and the moves the
    # Path dashboard predicts.
    raw["moves"] = {"sizes": ["1GiB", "40TiB"]}
    seed_history(Path(raw["journal"]["path"]), config)
    (tmp / "exporter.yaml").write_text(yaml.safe_dump(raw))
    # The shipped throughput group is evaluated every 5m; a test cannot wait that long.
    settings = Settings(baseline_interval="1s")
    (tmp / "prom" / "rules").mkdir(parents=True)
    for name, text in rules.render(settings).items():
        (tmp / "prom" / "rules" / name).write_text(text)
    exporter = ExporterProcess(tmp / "exporter.yaml", tmp / "exporter.log")
    prom_config = yaml.safe_dump(
        {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["rules/*.yml"],
            "scrape_configs": [{"job_name": "bigbinf", "static_configs": [{"targets": [exporter.address]}]}],
        }
    )
    with ExitStack() as stack:
        prom = stack.enter_context(PrometheusServer(prom_config, tmp / "prom"))
        start = time.time()
        stack.callback(exporter.stop)  # also if it never comes up
        stack.enter_context(exporter)
        # The baselines start a minute or two in: the first tile with a sample a minute
        # before it, then the roll-up one minute later.
        prom.wait_for(
            lambda: prom.query(
                f"min(bigbinf_transfer_duration_seconds_count) >= {ROUNDS} and on() count({HOUR_MEAN_7D}) >= 4"
                f" and on() count({M.MOVE_PREDICTED_LOWER.name}) >= 2"
            ),
            timeout=240,
            interval=1,
            what=f"{ROUNDS} ok rounds of every series, their baselines and the moves' predictions",
        )
        # Time-of-day panels sum whole minutes ending at minute boundaries: evaluate just
        # after the next boundary, when the samples so far are still within the lookback.
        at = math.floor(time.time() / 60) * 60 + 61
        yield Live(prom, start, at)


def seed_history(journal_path: Path, config: Any) -> None:
    """Ok results of every series three times a day for 21 days, around this time of day:
    a baseline for the regression test, and a line through the two sizes that the lab's
    own runs cannot tip over.  Those are 1-2 MiB on an unshaped link, mostly set-up time,
    which beside busy CPUs varies by a second either way: at 30 MB/s the seeded sizes were
    0.035 s apart and a few slow 1 MiB runs gave both protocols a line falling with size
    (no prediction at all); at 2 MB/s they are 0.52 s apart, so a handful of lab runs
    would have to invert the sizes by over 5 s on average."""
    journal = Journal(journal_path)
    now = time.time()
    for day in range(21, 0, -1):
        for k in range(3):
            for protocol in config.protocols:
                for name, dataset in config.datasets.items():
                    rate = 2e6 * (1 + 0.02 * ((day * 7 + k) % 5 - 2))
                    journal.append(
                        Result(
                            protocol,
                            "lab",
                            name,
                            "download",
                            now - day * 86400 + 600 * k,
                            "ok",
                            duration_seconds=0.3 + dataset.size / rate,
                            file_bytes=dataset.size,
                            files=1,
                        )
                    )


def run(live: Live, expr: str, instant: bool) -> list[dict[str, Any]]:
    if instant:
        return live.prom.query(expr, time=live.at)
    return live.prom.query_range(expr, start=live.start, end=live.at, step=2)


# A negative, fractional offset, so that the split is also a test of $tz_offset.
TZ_OFFSET = -3.5


def local_hour(ts: float) -> int:
    return int((ts + TZ_OFFSET * 3600) % 86400 // 3600)


def peak_hours(live: Live) -> tuple[dict[str, str], dict[str, str]]:
    """Time-of-day variables with the peak around every transfer of the test (from an
    hour before the lab started to an hour after the evaluation time), and the reverse:
    the peak everywhere else, so that every transfer is off-peak."""
    first, after = local_hour(live.start - 3600), local_hour(live.at + 3600)
    tz = {"tz_offset": str(TZ_OFFSET)}
    return (
        {**tz, "peak_start": str(first), "peak_end": str(after)},
        {**tz, "peak_start": str(after), "peak_end": str(first)},
    )


@pytest.mark.lab
@pytest.mark.prometheus
def test_variables_offer_the_lab_series(live: Live) -> None:
    for dashboard in single_site().values():
        for v in dashboard["templating"]["list"]:
            if v["name"] not in SERIES_VARIABLES:
                continue
            m = re.fullmatch(r"label_values\((.+), (\w+)\)", v["query"])
            assert m, v["query"]
            match = substitute(m.group(1), dashboard, CHOICES["All"])
            values = live.prom.api(f"label/{m.group(2)}/values", **{"match[]": match})
            assert CHOICES["one series"][v["name"]] in values, (dashboard["uid"], v["name"], values)


@pytest.mark.lab
@pytest.mark.prometheus
@pytest.mark.parametrize("choice", sorted(CHOICES))
def test_every_panel_query_runs_and_shows_data(live: Live, choice: str) -> None:
    empty_targets, empty_panels, shown = [], [], {}
    for dashboard in single_site().values():
        for t in targets(dashboard):
            expr = substitute(t.expr, dashboard, {**CHOICES[choice], **peak_hours(live)[0]})
            result = run(live, expr, t.instant)  # raises on any PromQL or server error
            if not result and t.instant and (t.dashboard, t.panel, t.ref) in SEEN_IN_RANGE:
                result = run(live, expr, instant=False)
            key = (t.dashboard, t.panel)
            shown[key] = shown.get(key, False) or bool(result)
            if not result and (t.dashboard, t.panel, t.ref) not in MAY_BE_EMPTY:
                empty_targets.append((t.dashboard, t.panel, t.ref, expr))
    empty_panels = [k for k, v in shown.items() if not v and k not in PANELS_MAY_BE_EMPTY]
    assert empty_targets == []
    assert empty_panels == []


@pytest.mark.lab
@pytest.mark.prometheus
def test_table_2_and_fingerprint_hold_real_numbers(live: Live) -> None:
    overview = json.loads((DASHBOARDS / "overview.json").read_text())
    table = next(p for p in panels(overview) if p["title"].endswith("(the study's Table 2)"))
    by_ref = {t["refId"]: t["expr"] for t in table["targets"]}
    one = CHOICES["one series"]
    n = live.prom.query(substitute(by_ref["A"], overview, one), time=live.at)
    assert float(n[0]["value"][1]) >= ROUNDS
    ratio = live.prom.query(substitute(by_ref["F"], overview, one), time=live.at)
    assert 1.0 < float(ratio[0]["value"][1]) < 1.2  # wire overhead of scp on a 1500-MTU link
    detail = json.loads((DASHBOARDS / "transfer-detail.json").read_text())
    down = next(p for p in panels(detail) if p["title"].startswith("Packets by payload size, down"))
    buckets = live.prom.query(substitute(down["targets"][0]["expr"], detail, one), time=live.at)
    counts = {b["metric"]["le"]: float(b["value"][1]) for b in buckets}
    # Cumulative buckets: full-size segments dominate a download's down direction.
    assert counts["+Inf"] > 0 and counts["1448"] - counts["1400"] > counts["1400"] / 2


@pytest.mark.lab
@pytest.mark.prometheus
def test_every_rule_evaluates_on_live_data(live: Live) -> None:
    groups = live.prom.api("rules")["groups"]
    live_rules = [r for g in groups for r in g["rules"]]
    assert loaded_rule_groups(live.prom) == committed_rule_groups()
    assert [(r["name"], r["lastError"]) for r in live_rules if r["health"] != "ok"] == []
    for r in live_rules:
        live.prom.query(r["query"], time=live.at)  # raises on any PromQL or server error
        if r["type"] == "recording":
            # Prometheus recorded every rule once transfers ran (ratios are 0, not absent).
            # The recorded series, not the expression again: a roll-up evaluated every
            # second has data only in the second after each tile closes.
            assert live.prom.query(f"count_over_time({r['name']}[10m])"), r["name"]
    alerts = {r["name"]: r for r in live_rules if r["type"] == "alerting"}
    assert alerts["BigbinfExporterDown"]["state"] == "inactive"
    assert alerts["BigbinfTransfersFailing"]["state"] == "inactive"
    # The lab answers its probes, and its path (a few Mbit/s, milliseconds) has a BDP far
    # below any kernel's default autotuning maxima.
    assert alerts["BigbinfPathProbesUnanswered"]["state"] == "inactive"
    assert alerts["BigbinfTcpBuffersBelowBdp"]["state"] == "inactive"


@pytest.mark.lab
@pytest.mark.prometheus
def test_peak_and_offpeak_follow_the_peak_hours(live: Live) -> None:
    """Fig 4 splits by the variables: with the peak around the test's transfers they are
    all peak and none off-peak; with the peak elsewhere, the other way round, with the
    same per-transfer means.  The hours of the by-hour panel are the local start hours."""
    dashboard = json.loads((DASHBOARDS / "time-of-day.json").read_text())
    by_ref = {t.ref: t.expr for t in targets(dashboard) if (t.dashboard, t.panel) == FIG4}
    around, elsewhere = peak_hours(live)

    def means(ref: str, variables: dict[str, str]) -> dict[str, float]:
        expr = substitute(by_ref[ref], dashboard, {**CHOICES["All"], **variables})
        return {r["metric"]["transfer"]: float(r["value"][1]) for r in live.prom.query(expr, time=live.at)}

    # `live.at` lies up to two minutes ahead and the lab's rounds go on: a transfer whose
    # samples land between two queries changes one mean.  Both ways are read back to back,
    # again if a round landed between them; equal once no round did.
    for _ in range(5):
        peak, offpeak = means("A", around), means("B", elsewhere)
        if offpeak == peak:
            break
    assert len(peak) == 4 and all(v > 0 for v in peak.values()), peak  # 2 protocols x 2 datasets
    assert means("B", around) == {}
    assert means("A", elsewhere) == {}
    assert offpeak == peak

    by_hour = next(t for t in targets(dashboard) if t.panel.startswith("Mean throughput by hour of day"))
    rows = live.prom.query(substitute(by_hour.expr, dashboard, {**CHOICES["All"], **around}), time=live.at)
    hours = {int(r["metric"]["hour"]) for r in rows}
    started = {local_hour(t) for t in range(int(live.start), int(live.at) + 1, 60)} | {local_hour(live.at)}
    assert hours and hours <= started


@pytest.mark.lab
@pytest.mark.prometheus
def test_path_peak_and_offpeak_follow_the_peak_hours(live: Live) -> None:
    """The Path dashboard splits the probes by the same variables, by the local time each
    probe was made: with the peak around the test's probes they are all peak, with the
    peak elsewhere all off-peak, with the same per-probe means."""
    dashboard = json.loads((DASHBOARDS / "path.json").read_text())
    around, elsewhere = peak_hours(live)

    def means(expr: str, variables: dict[str, str]) -> dict[str, float]:
        expr = substitute(expr, dashboard, {**CHOICES["All"], **variables})
        return {r["metric"]["remote"]: float(r["value"][1]) for r in live.prom.query(expr, time=live.at)}

    for panel in PATH_BY_PERIOD:
        peak_expr, offpeak_expr = (
            next(t.expr for t in targets(dashboard) if (t.dashboard, t.panel, t.ref) == (*panel, ref))
            for ref in ("A", "B")
        )
        peak = means(peak_expr, around)
        assert set(peak) == {"lab"}, (panel, peak)
        assert means(offpeak_expr, around) == {}, panel
        assert means(peak_expr, elsewhere) == {}, panel
        assert means(offpeak_expr, elsewhere) == peak, panel
