"""A mesh's Prometheus, for real: three site Prometheus servers and a central one, all
configured by bigbinf.mesh.prometheus.render, and the Mesh dashboard run against the
central one.

Each site's Prometheus scrapes its exporter through the generated file_sd target files,
evaluates bigbinf's rules and forwards everything with remote_write to the central
Prometheus (started with --web.enable-remote-write-receiver).  The "exporters" serve the
real collector of a mesh site (ExporterState(site): the `site` label on every series, the
slot and plan families) over results written here, so the test needs no lab.

Seven days of history: the regression rules' baselines are sums over 7 days of the
throughput roll-ups the rules record (series_period:..._sum/_count:tiled_increase).  Raw
history could not produce them (a roll-up only ever covers the minutes before it is
evaluated), so the roll-ups of a week of transfers, one every 6 hours at each pair's
baseline throughput, are backfilled into each site's TSDB with promtool before it starts,
under the labels the live rules give them; the live rules then compute the 7-day means
and baselines from them, and the site forwards those as it would in production.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from bigbinf.lab.mesh import layout as lab_layout
from bigbinf.mesh.config import MeshConfig, load_mesh
from bigbinf.mesh.prometheus import render
from bigbinf.mixin import rules
from bigbinf.mixin.settings import (
    HOUR_COUNT_ROLLUP,
    HOUR_SUM_ROLLUP,
    LAST_THROUGHPUT,
    PERIOD_BASELINE_7D,
    PERIOD_COUNT_ROLLUP,
    PERIOD_SUM_ROLLUP,
    Settings,
)
from bigbinf.result import Result, SeriesKey
from bigbinf.service.collector import BigbinfCollector, ExporterState, MeshRound
from bigbinf.study.backfill import block_dirs, create_blocks, find_promtool

from ..support.prometheus import PROMETHEUS, PrometheusServer, free_port
from .test_dashboards import substitute, targets

ROOT = Path(__file__).resolve().parents[2]
MESH_JSON = ROOT / "grafana" / "dashboards" / "mesh.json"
SITES = ("alpha", "beta", "gamma")
PROTOCOLS = ("http", "scp")
DATASET, DIRECTION = "f8m", "download"
FILE_BYTES = 8 * 2**20
MB = 1e6
# Each pair's 7-day baseline (bytes/s), distinct per pair; alpha -> beta's latest http
# transfer runs at half of it, every other at its baseline.
SLOW = ("alpha", "beta", "http")
PLAN = "3f9a1c"

needs_prometheus = pytest.mark.skipif(
    not (shutil.which("promtool") and Path(PROMETHEUS).exists()), reason="needs prometheus and promtool"
)


def baseline(site: str, remote: str, protocol: str) -> float:
    return (10 + 10 * SITES.index(site) + 2 * SITES.index(remote) + (protocol == "scp")) * MB


def pairs() -> list[tuple[str, str]]:
    return [(a, b) for a in SITES for b in SITES if a != b]


def write_mesh(
    tmp: Path,
    central_url: str,
    ports: dict[str, int],
    node: dict[str, str] | None = None,
    prometheus: dict[str, Any] | None = None,
    prometheus_listen: dict[str, str] | None = None,
) -> MeshConfig:
    raw: dict[str, Any] = {
        "name": "testmesh",
        "lab": {"name": "bbmt", "state_dir": str(tmp / "lab"), "subnet": "198.19.9.0/24"},
        "sites": {
            site: {
                "servers": ["sshd", "nginx"],
                "exporter": {"listen": f"127.0.0.1:{ports[site]}", "journal": str(tmp / f"{site}.jsonl")},
            }
            for site in SITES
        },
        "datasets": {DATASET: {"file": "f8m.bin", "size": "8MiB"}},
        "protocols": {p: {} for p in PROTOCOLS},
        "tests": [{"protocols": list(PROTOCOLS), "datasets": [DATASET]}],
        "schedule": {"interval": "1h"},
        "prometheus": {
            "remote_write_url": f"{central_url}/api/v1/write",
            "scrape_interval": "1s",
            **(prometheus or {}),
        },
    }
    for site, listen in (node or {}).items():
        raw["sites"][site]["node_exporter"] = listen
    for site, listen in (prometheus_listen or {}).items():
        raw["sites"][site]["prometheus_listen"] = listen
    path = tmp / "mesh.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_mesh(path, lab=lab_layout)


# ---------------------------------------------------------------- the sites' exporters


def result(site: str, remote: str, protocol: str, start: float, throughput: float, overrun: float = 0.0) -> Result:
    return Result(
        protocol,
        remote,
        DATASET,
        DIRECTION,
        start,
        "ok",
        duration_seconds=FILE_BYTES / throughput,
        file_bytes=FILE_BYTES,
        files=1,
        verified=True,
        wire_bytes_down=FILE_BYTES + 300_000,
        wire_bytes_up=100_000,
        payload_bytes_down=FILE_BYTES,
        packets_down=5800,
        packets_up=2900,
        transport="tcp",
        data_flows=1,
        site=site,
        slot_overrun_seconds=overrun,
    )


class SiteExporter:
    """A mesh site's exposition (the real collector, site label and all) over HTTP."""

    def __init__(self, site: str, port: int) -> None:
        self.site, self.port = site, port
        self.state = ExporterState(site)
        keys = [SeriesKey(p, r, DATASET, DIRECTION) for r in SITES if r != site for p in PROTOCOLS]
        self.state.prime(keys, schedule_interval=3600.0)
        now = time.time()
        for key in keys:
            factor = 0.5 if (site, key.remote, key.protocol) == SLOW else 1.0
            self.state.record(
                result(site, key.remote, key.protocol, now - 120, factor * baseline(site, key.remote, key.protocol))
            )
        self.state.record_mesh_round(MeshRound(planned_seconds=900.0, period_seconds=3600.0, fingerprint=PLAN))
        self.registry = CollectorRegistry()
        self.registry.register(BigbinfCollector(self.state))
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = generate_latest(exporter.registry)
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> SiteExporter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- seven days of roll-ups


def backfill_rollups(site: str, instance: str, storage: Path, tmp: Path, now: float) -> None:
    """A transfer every 6 hours for 7 days (00h, 06h, 12h, 18h UTC: 12h in the rules' default
    peak, the others off-peak) as the roll-ups (per period, per hour) would have recorded it,
    per series."""
    settings = Settings()
    lines = []
    first = (math.floor((now - 7 * 86400) / 21600) + 1) * 21600
    times = list(range(int(first), int(now - 3 * 3600), 21600))
    rollups = [(PERIOD_SUM_ROLLUP, "period"), (PERIOD_COUNT_ROLLUP, "period")]
    rollups += [(HOUR_SUM_ROLLUP, "hour"), (HOUR_COUNT_ROLLUP, "hour")]
    for name, by in rollups:
        lines.append(f"# TYPE {name} gauge")
        for remote in (r for r in SITES if r != site):
            for protocol in PROTOCOLS:
                for t in times:
                    hour = time.gmtime(t).tm_hour
                    period = "peak" if settings.peak_start <= hour < settings.peak_end else "offpeak"
                    labels = {
                        "dataset": DATASET,
                        "direction": DIRECTION,
                        "instance": instance,
                        "job": "bigbinf",
                        "protocol": protocol,
                        "remote": remote,
                        "site": site,
                    }
                    # The hour label as the rules write it: the local (here UTC) hour, 0-padded.
                    labels[by] = period if by == "period" else f"{hour:02d}"
                    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                    value = baseline(site, remote, protocol) if "_sum:" in name else 1.0
                    lines.append(f"{name}{{{text}}} {value!r} {t}")
    # promtool wants each series' samples together and in time order: they are.
    om = tmp / f"{site}-rollups.om"
    om.write_text("\n".join(lines) + "\n# EOF\n")
    create_blocks(om, storage, find_promtool(None), "24h")
    assert block_dirs(storage)


# ---------------------------------------------------------------- the mesh


@dataclass
class Mesh:
    central: PrometheusServer
    sites: dict[str, PrometheusServer]
    exporters: dict[str, SiteExporter]
    mesh: MeshConfig
    out: Path


def test_generated_configs_are_valid(tmp_path: Path) -> None:
    """promtool accepts every generated prometheus.yml (and the rules it loads); the
    exporter jobs carry no target labels, site least of all; file_sd files are well formed."""
    if not shutil.which("promtool"):
        pytest.skip("needs promtool")
    # alpha also has a node_exporter, bound to every address: scraped on loopback.
    ports = {s: 9753 + i for i, s in enumerate(SITES)}
    mesh = write_mesh(tmp_path, "http://central.example.org:9090", ports, node={"alpha": "0.0.0.0:9100"})
    written = render(mesh, tmp_path / "out")
    out = tmp_path / "out"
    configs = [out / "sites" / s / "prometheus.yml" for s in SITES] + [out / "central" / "prometheus.yml"]
    assert set(configs) <= set(written)
    for config in configs:
        proc = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    for site in SITES:
        doc = yaml.safe_load((out / "sites" / site / "prometheus.yml").read_text())
        assert doc["global"]["external_labels"] == {"site": site, "mesh": "testmesh"}
        jobs = ["bigbinf", "node", "prometheus"] if site == "alpha" else ["bigbinf", "prometheus"]
        assert [j["job_name"] for j in doc["scrape_configs"]] == jobs
        assert all("relabel_configs" not in j and "static_configs" not in j for j in doc["scrape_configs"])
        assert doc["remote_write"][0]["url"] == "http://central.example.org:9090/api/v1/write"
        groups = json.loads((out / "sites" / site / "targets" / "bigbinf.json").read_text())
        assert groups == [{"labels": {}, "targets": [f"127.0.0.1:{9753 + SITES.index(site)}"]}]
        assert sorted(p.name for p in (out / "sites" / site / "rules").glob("*.yml")) == sorted(
            set(rules.render(Settings())) - {rules.MESH_CENTRAL_FILE}
        )
    node = json.loads((out / "sites" / "alpha" / "targets" / "node.json").read_text())
    assert node == [{"labels": {}, "targets": ["127.0.0.1:9100"]}]
    central = yaml.safe_load((out / "central" / "prometheus.yml").read_text())
    assert "remote_write" not in central
    # The central Prometheus evaluates only the mesh-wide alert: the sites evaluate the rest.
    assert central["rule_files"] == ["rules/*.yml"]
    assert [p.name for p in (out / "central" / "rules").glob("*.yml")] == [rules.MESH_CENTRAL_FILE]
    # A lab mesh: the exporters run in the root namespace, beside the central Prometheus,
    # which cannot reach the sites' namespace addresses; their loopback binds stay as they
    # are.  (Sites on their own hosts get their address instead: tests/unit/
    # test_mesh_prometheus_render.py.)
    assert json.loads((out / "targets" / "all-exporters.json").read_text()) == [
        {"labels": {"mesh": "testmesh"}, "targets": [f"127.0.0.1:{9753 + i}" for i in range(3)]}
    ]
    # Stable output: a second run writes the same bytes.
    before = {p: p.read_bytes() for p in written}
    render(mesh, out)
    assert {p: p.read_bytes() for p in written} == before


def test_remote_write_auth_tls_tenant_and_alertmanagers_need_no_hand_edits(tmp_path: Path) -> None:
    """Every optional key of the mesh file's prometheus: section set at once: promtool
    accepts each site's prometheus.yml (the password and certificate files exist here, as
    they must where Prometheus runs), and the secrets are there only as file paths."""
    if not shutil.which("promtool"):
        pytest.skip("needs promtool")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    files = {name: secrets / name for name in ("central.password", "ca.pem", "site.pem", "site.key")}
    for path in files.values():
        path.write_text("placeholder\n")
    prometheus = {
        "remote_write_headers": {"X-Scope-OrgID": "bigbinf", "THANOS-TENANT": "bigbinf"},
        "remote_write_basic_auth": {"username": "site", "password_file": str(files["central.password"])},
        "remote_write_tls": {
            "ca_file": str(files["ca.pem"]),
            "cert_file": str(files["site.pem"]),
            "key_file": str(files["site.key"]),
            "insecure_skip_verify": False,
        },
        "alertmanagers": ["am1.example.org:9093", "am2.example.org:9093"],
    }
    ports = {s: 9753 + i for i, s in enumerate(SITES)}
    mesh = write_mesh(tmp_path, "https://mimir.example.org", ports, prometheus=prometheus)
    out = tmp_path / "out"
    render(mesh, out)
    for site in SITES:
        config = out / "sites" / site / "prometheus.yml"
        proc = subprocess.run(["promtool", "check", "config", str(config)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = yaml.safe_load(config.read_text())
        rw = doc["remote_write"][0]
        assert rw["headers"] == prometheus["remote_write_headers"]
        assert rw["basic_auth"] == {"username": "site", "password_file": str(files["central.password"])}
        assert rw["tls_config"] == {
            k: str(files[n]) for k, n in (("ca_file", "ca.pem"), ("cert_file", "site.pem"), ("key_file", "site.key"))
        }
        assert doc["alerting"]["alertmanagers"] == [{"static_configs": [{"targets": prometheus["alertmanagers"]}]}]
        assert "placeholder" not in config.read_text()


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    if not (shutil.which("promtool") and Path(PROMETHEUS).exists()):
        pytest.skip("needs prometheus and promtool")
    tmp = tmp_path_factory.mktemp("mesh-prometheus")
    out = tmp / "out"
    central = PrometheusServer("", out / "central", extra_args=["--web.enable-remote-write-receiver"])
    ports = {site: free_port() for site in SITES}
    sites = {site: PrometheusServer("", out / "sites" / site) for site in SITES}
    # Every Prometheus on this one host: each its own port, from the mesh file.
    mesh = write_mesh(
        tmp,
        central.url,
        ports,
        prometheus={"central_listen": f"127.0.0.1:{central.port}"},
        prometheus_listen={site: f"127.0.0.1:{prom.port}" for site, prom in sites.items()},
    )
    # The shipped throughput group is evaluated every 5m; a test cannot wait that long.
    (tmp / "rules").mkdir()
    for name, text in rules.render(Settings(baseline_interval="1s")).items():
        (tmp / "rules" / name).write_text(text)
    render(mesh, out, rules_dir=tmp / "rules")
    now = time.time()
    for site, prom in [*sites.items(), ("central", central)]:
        prom.config_text = prom.config.read_text()  # the generated file, as written
        if site != "central":
            backfill_rollups(site, f"127.0.0.1:{ports[site]}", prom.storage, tmp, now)
    with ExitStack() as stack:
        exporters = {site: stack.enter_context(SiteExporter(site, ports[site])) for site in SITES}
        stack.enter_context(central)
        for prom in sites.values():
            stack.enter_context(prom)
        yield Mesh(central, sites, exporters, mesh, out)


def by_site(prom: PrometheusServer, expr: str) -> dict[str, float]:
    return {r["metric"].get("site", ""): float(r["value"][1]) for r in prom.query(f"count by (site) ({expr})")}


@pytest.mark.prometheus
@needs_prometheus
def test_every_sites_series_arrive_with_their_site(live: Mesh) -> None:
    central = live.central
    per_pair = len(PROTOCOLS)  # series per (site, remote): one dataset, one direction
    want = {site: (len(SITES) - 1) * per_pair for site in SITES}
    central.wait_for(
        lambda: (
            by_site(central, LAST_THROUGHPUT) == want
            and by_site(central, PERIOD_BASELINE_7D) == {s: 2 * n for s, n in want.items()}
        ),
        timeout=90,
        what="every site's series and baselines on the central Prometheus",
    )
    # Scraped by each site's own Prometheus (job bigbinf through file_sd), forwarded with
    # the site's external labels.
    up = central.query('up{job="bigbinf"}')
    assert sorted((r["metric"]["site"], r["metric"]["mesh"], r["value"][1]) for r in up) == [
        (s, "testmesh", "1") for s in SITES
    ]
    # Each site's Prometheus scrapes itself; the central one too (no site: it is no site's).
    assert by_site(central, 'up{job="prometheus"}') == {**dict.fromkeys(SITES, 1.0), "": 1.0}
    # No exported_site: the exporter's own site label and the external label agree.
    assert central.query('count({exported_site!=""})') == []
    # Every recording rule's output arrives from every site: the live roll-ups (and what is
    # built on the hour ones) only from the second minute, when a tile has a sample a
    # minute before it and has settled.
    # The recorded series, not the expression again: a roll-up evaluated every second has
    # data only in the second after each tile closes (as in test_dashboards).
    names = [r["record"] for g in rules.recording(Settings())["groups"] for r in g["rules"]]
    missing: list[str] = []

    def arrived() -> bool:
        missing[:] = [n for n in names if set(by_site(central, f"count_over_time({n}[10m])")) != set(SITES)]
        return not missing

    try:
        central.wait_for(arrived, timeout=240, interval=2, what="every recording rule's output from every site")
    except TimeoutError as exc:
        raise AssertionError(f"not from every site: {missing}") from exc
    # The rules keep `site` themselves (without(...), never by(...)): at each site, before
    # any external label is added, no recorded series lacks it.
    for site, prom in live.sites.items():
        assert prom.query('count({__name__=~"series.*:.+", site=""})') == [], site
        assert by_site(prom, '{__name__=~"series.*:.+"}') and set(by_site(prom, '{__name__=~"series.*:.+"}')) == {site}
    # Counts for the report.
    totals = by_site(central, '{__name__=~"bigbinf_.+|series.*:.+"}')
    print("series per site on the central Prometheus:", totals)
    assert set(totals) == set(SITES)


def mesh_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(MESH_JSON.read_text())
    return dashboard


CHOICE = {"mesh": "testmesh", "protocol": "http", "dataset": DATASET, "direction": DIRECTION}


def grid_cells(prom: PrometheusServer, expr: str) -> dict[tuple[str, str], float]:
    return {(r["metric"]["site"], r["metric"]["remote"]): float(r["value"][1]) for r in prom.query(expr)}


@pytest.mark.prometheus
@needs_prometheus
def test_mesh_dashboard_runs_on_the_central_prometheus(live: Mesh) -> None:
    central = live.central
    dashboard = mesh_dashboard()
    test_every_sites_series_arrive_with_their_site(live)  # everything has arrived
    panels = {p["title"]: p for p in dashboard["panels"] if p["type"] != "row"}
    ratio = panels["Latest throughput / 7-day baseline"]
    ratio_expr = substitute(ratio["targets"][0]["expr"], dashboard, CHOICE)
    # ... and the sites' recording rules' outputs it needs (evaluated at each site, then
    # forwarded: a rule interval and a remote_write batch later, later on a busy machine).
    central.wait_for(
        lambda: set(grid_cells(central, ratio_expr)) == set(pairs()), timeout=60, what="every pair's ratio cell"
    )
    # Variables: the values the central Prometheus offers.
    for v in dashboard["templating"]["list"]:
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", v["query"])
        assert m, v["query"]
        values = central.api(f"label/{m.group(2)}/values", **{"match[]": substitute(m.group(1), dashboard, CHOICE)})
        assert CHOICE[v["name"]] in values, (v["name"], values)

    # A slot overrun at gamma and a missed slot at beta, while Prometheus watches.
    time.sleep(3)
    gamma = live.exporters["gamma"]
    gamma.state.record(result("gamma", "alpha", "http", time.time(), baseline("gamma", "alpha", "http"), 2.5))
    live.exporters["beta"].state.record_slot_missed(SeriesKey("scp", "alpha", DATASET, DIRECTION), "late_start")
    overruns = "bigbinf_mesh_slot_overruns_total"
    central.wait_for(
        lambda: central.query(f'sum({overruns}{{site="gamma"}}) == 1'), timeout=60, what="the overrun to arrive"
    )
    time.sleep(3)

    runs, now = 0, time.time()
    for t in targets(dashboard):
        expr = substitute(t.expr, dashboard, CHOICE)
        answer = central.query(expr, time=now) if t.instant else central.query_range(expr, now - 600, now, 5)
        assert answer, (t.panel, t.ref, expr)
        runs += 1
    print(f"{runs} Mesh dashboard queries returned data on the central Prometheus")
    assert runs == 10

    cells = grid_cells(central, ratio_expr)
    assert set(cells) == set(pairs())  # one cell per (from, to) pair
    steps = ratio["fieldConfig"]["defaults"]["thresholds"]["steps"]
    red_below, green_from = steps[1]["value"], steps[2]["value"]
    assert [s["color"] for s in steps] == ["red", "orange", "green"]
    assert cells[SLOW[:2]] == pytest.approx(0.5) and cells[SLOW[:2]] < red_below
    assert all(v == pytest.approx(1.0) and v >= green_from for k, v in cells.items() if k != SLOW[:2]), cells
    latest = grid_cells(central, substitute(panels["Latest throughput"]["targets"][0]["expr"], dashboard, CHOICE))
    base = grid_cells(central, substitute(panels["7-day baseline"]["targets"][0]["expr"], dashboard, CHOICE))
    assert base == pytest.approx({(a, b): baseline(a, b, "http") for a, b in pairs()})
    assert latest[SLOW[:2]] == pytest.approx(0.5 * base[SLOW[:2]])
    # Each cell links to the pair's Time of day dashboard, which has the variables it sets.
    link = next(
        prop["value"][0]["url"]
        for o in ratio["fieldConfig"]["overrides"]
        for prop in o["properties"]
        if prop["id"] == "links"
    )
    time_of_day = json.loads((MESH_JSON.parent / "time-of-day.json").read_text())
    assert link.startswith(f"/d/{time_of_day['uid']}?")
    names = {v["name"] for v in time_of_day["templating"]["list"]}
    assert set(re.findall(r"var-(\w+)=", link)) <= names
    # The mesh too: two meshes on one central Prometheus may share site names.
    assert "var-mesh=${mesh}" in link and "mesh" in names
    # The Time of day dashboard narrowed to that pair, on the central Prometheus.
    # The values the link would set for the (alpha, beta) cell, mesh and all.
    pair = {"mesh": "testmesh", "site": "alpha", "remote": "beta", "protocol": "http"}
    pair |= {"dataset": DATASET, "direction": DIRECTION}
    tod = next(t for t in targets(time_of_day) if t.panel.startswith("Whole day: recent mean"))
    got = central.query(substitute(tod.expr, time_of_day, pair))
    assert [(r["metric"]["site"], r["metric"]["remote"]) for r in got] == [("alpha", "beta")]
    assert central.query(substitute(tod.expr, time_of_day, {**pair, "mesh": "othermesh"})) == []

    # Keeping to the plan: gamma's overrun, beta's missed slot; every site on one plan.
    slots = panels["Slot overruns and missed slots per site"]
    exprs = {t["refId"]: substitute(t["expr"], dashboard, CHOICE) for t in slots["targets"]}
    per_site = {r["metric"]["site"]: float(r["value"][1]) for r in central.query(exprs["A"])}
    assert per_site == {"alpha": 0.0, "beta": 0.0, "gamma": 1.0}
    missed = {r["metric"]["site"]: float(r["value"][1]) for r in central.query(exprs["B"])}
    assert missed == {"alpha": 0.0, "beta": 1.0, "gamma": 0.0}
    plans = substitute(panels["Plans in use"]["targets"][0]["expr"], dashboard, CHOICE)
    assert float(central.query(plans)[0]["value"][1]) == 1
    # Only the chosen mesh's sites count: another mesh's plans are not this one's.
    assert (
        central.query(substitute(panels["Plans in use"]["targets"][0]["expr"], dashboard, {**CHOICE, "mesh": "x"}))
        == []
    )
    # A site on another plan: two fingerprints, the stat's red.
    gamma.state.record_mesh_round(MeshRound(planned_seconds=900.0, period_seconds=3600.0, fingerprint="0ther"))
    red_from = panels["Plans in use"]["fieldConfig"]["defaults"]["thresholds"]["steps"][1]["value"]
    central.wait_for(lambda: float(central.query(plans)[0]["value"][1]) >= red_from, timeout=60, what="the second plan")

    # Sites: every one measuring; then beta's last transfers three hours old (its exporter
    # answers, its slots all missed) and gamma's exporter gone: each says so, neither blank.
    sites = panels["Sites"]
    exprs = {t["refId"]: substitute(t["expr"], dashboard, CHOICE) for t in sites["targets"]}
    mapping = next(
        prop["value"][0]["options"]
        for o in sites["fieldConfig"]["overrides"]
        if o["matcher"]["options"] == "state"
        for prop in o["properties"]
        if prop["id"] == "mappings"
    )

    def states() -> dict[str, str]:
        return {r["metric"]["site"]: mapping[r["value"][1]]["text"] for r in central.query(exprs["A"])}

    assert states() == dict.fromkeys(SITES, "measuring")
    old = time.time() - 3 * 3600
    beta = live.exporters["beta"].state
    for remote in ("alpha", "gamma"):
        for protocol in PROTOCOLS:
            beta.record(result("beta", remote, protocol, old, baseline("beta", remote, protocol)))
    gamma.__exit__(None, None, None)  # the site's Prometheus scrapes nothing from now on: up 0
    want = {"alpha": "measuring", "beta": "no results for 2 rounds", "gamma": "not reporting"}
    central.wait_for(lambda: states() == want, timeout=90, what=f"the sites' states {want}")
    ages = {r["metric"]["site"]: float(r["value"][1]) for r in central.query(exprs["B"])}
    assert set(ages) == set(SITES) and ages["beta"] >= 3 * 3600 and ages["gamma"] < 3600
