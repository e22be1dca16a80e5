"""Prometheus rules and Alertmanager config: generated, valid, unit-tested, documented.

promtool and amtool come with Debian's prometheus and prometheus-alertmanager packages
(scripts/setup.sh installs them).
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from bigbinf import DOCS_URL
from bigbinf import metrics as M
from bigbinf.mixin import rules, settings
from bigbinf.mixin.settings import Settings
from bigbinf.study.common import parse_tz_offset

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "prometheus"
RUNBOOK = ROOT / "docs" / "runbook.md"
# Metrics the rules use that the exporter does not publish (none today; the set documents the check).
PENDING_METRICS: set[str] = set()


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run scripts/setup.sh")
    return path


def rule_files() -> list[Path]:
    return sorted((PROM / "rules").glob("*.yml"))


def all_rules() -> list[dict[str, Any]]:
    return [
        rule for path in rule_files() for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]
    ]


def alerting_rules() -> list[dict[str, Any]]:
    return [r for r in all_rules() if "alert" in r]


def recording_rules() -> list[dict[str, Any]]:
    return [r for r in all_rules() if "record" in r]


def unit_tests() -> list[dict[str, Any]]:
    return [t for path in sorted((PROM / "tests").glob("*.yml")) for t in yaml.safe_load(path.read_text())["tests"]]


def test_committed_rules_are_the_generator_defaults() -> None:
    rendered = rules.render(settings.Settings())
    assert sorted(p.name for p in rule_files()) == sorted(rendered)
    stale = [name for name, text in rendered.items() if (PROM / "rules" / name).read_text() != text]
    assert stale == [], f"run .venv/bin/python -m bigbinf.mixin.rules: {stale} differ"


def test_generator_settings_change_the_rules(tmp_path: Path) -> None:
    assert (
        rules.main(
            [
                "--out-dir",
                str(tmp_path),
                "--tz-offset",
                "2",
                "--peak-start",
                "22",
                "--peak-end",
                "6",
                "--regression-fraction",
                "0.5",
                "--exporter-down-for",
                "30s",
                "--buffers-for",
                "2h",
                "--stale-multiple",
                "3",
            ]
        )
        == 0
    )
    recording = (tmp_path / rules.RECORDING_FILE).read_text()
    assert "hour(bigbinf_last_transfer_start_timestamp_seconds + 7200)" in recording
    assert "- 22 + 24) % 24) < bool 8" in recording  # 22h-06h wraps past midnight
    alerts = yaml.safe_load((tmp_path / rules.ALERTING_FILE).read_text())["groups"][0]["rules"]
    by_name = {a["alert"]: a for a in alerts}
    assert by_name["BigbinfExporterDown"]["for"] == "30s"
    assert " < 0.5 * " in by_name["BigbinfThroughputRegression"]["expr"]
    assert by_name["BigbinfTcpBuffersBelowBdp"]["for"] == "2h"
    assert "  3 * max by(job, instance, remote) ((\n    ceil(" in by_name["BigbinfPathProbesStale"]["expr"]
    assert ") > 3 * (\n    ceil(" in by_name["BigbinfSeriesStale"]["expr"]
    subprocess.run([tool("promtool"), "check", "rules", *tmp_path.glob("*.yml")], check=True, capture_output=True)
    assert rules.main(["--out-dir", str(tmp_path), "--peak-start", "25"]) == 2
    assert rules.main(["--out-dir", str(tmp_path), "--baseline-interval", "24h"]) == 2  # not shorter than the window
    assert rules.main(["--out-dir", str(tmp_path), "--baseline-interval", "500ms"]) == 2
    assert rules.main(["--out-dir", str(tmp_path), "--recent-window", "7d"]) == 2  # not shorter than the baselines'
    assert rules.main(["--check"]) == 0  # the committed files are current


def test_out_dir_is_required_outside_the_repository(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Installed from a wheel: the directory above the package holds no prometheus/.
    monkeypatch.setattr(settings, "REPO", tmp_path)
    with pytest.raises(SystemExit) as exc:
        rules.main(["--check"])
    assert exc.value.code == 2
    assert "--out-dir is required" in capsys.readouterr().err
    assert rules.main(["--out-dir", str(tmp_path / "rules")]) == 0
    assert sorted(p.name for p in (tmp_path / "rules").iterdir()) == sorted(p.name for p in rule_files())


@pytest.mark.parametrize(
    "given, hours, shift",
    [
        ("+5:30", 5.5, "+ 19800"),
        ("-03:30", -3.5, "- 12600"),
        ("-3.5", -3.5, "- 12600"),
        ("-5", -5, "- 18000"),
    ],
)
def test_tz_offset_takes_the_report_commands_forms(tmp_path: Path, given: str, hours: float, shift: str) -> None:
    # Both "--tz-offset -03:30" (argparse alone would take "-03:30" for an option) and "=".
    for argv in (["--tz-offset", given], [f"--tz-offset={given}"]):
        parsed, _, _ = rules.parse_args(argv)
        assert parsed.tz_offset_hours == hours
    assert rules.main(["--out-dir", str(tmp_path), "--tz-offset", given]) == 0
    recording = (tmp_path / rules.RECORDING_FILE).read_text()
    assert f"hour(bigbinf_last_transfer_start_timestamp_seconds {shift})" in recording
    assert f"UTC{hours:+g}" in recording.splitlines()[1]


@pytest.mark.parametrize("given", ["5:7", "two", "+15", "--check"])
def test_tz_offset_rejects_what_the_report_command_rejects(given: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        rules.parse_args(["--tz-offset", given])
    assert exc.value.code == 2
    assert "--tz-offset" in capsys.readouterr().err


# Hand-picked instants (UTC) around the edges of a 22h-06h peak that wraps past midnight,
# for a negative whole and a negative fractional offset, and of the default 11h-15h peak
# for +5:30: (UTC time, local hour, peak?).  test_tz_cases_agree_with_the_calendar checks
# the hours against Python's datetime, so the expectations are not the rules' own logic.
DAY = int(dt.datetime(2024, 1, 15, tzinfo=dt.UTC).timestamp())
TZ_CASES: dict[str, tuple[list[str], list[tuple[str, int, bool]]]] = {
    "-5": (
        ["--peak-start", "22", "--peak-end", "6"],
        [
            ("02:30:00", 21, False),
            ("03:00:00", 22, True),
            ("05:00:00", 0, True),
            ("10:59:59", 5, True),
            ("11:00:00", 6, False),
        ],
    ),
    "-03:30": (
        ["--peak-start", "22", "--peak-end", "6"],
        [
            ("01:29:59", 21, False),
            ("01:30:00", 22, True),
            ("03:30:00", 0, True),
            ("09:29:59", 5, True),
            ("09:30:00", 6, False),
        ],
    ),
    "+5:30": (
        [],
        [
            ("05:29:59", 10, False),
            ("05:30:00", 11, True),
            ("09:29:59", 14, True),
            ("09:30:00", 15, False),
            ("20:00:00", 1, False),
        ],
    ),
}


def utc(clock: str) -> int:
    h, m, sec = map(int, clock.split(":"))
    return DAY + h * 3600 + m * 60 + sec


@pytest.mark.parametrize("offset", sorted(TZ_CASES))
def test_tz_cases_agree_with_the_calendar(offset: str) -> None:
    zone = dt.timezone(dt.timedelta(hours=parse_tz_offset(offset)))
    for clock, hour, _ in TZ_CASES[offset][1]:
        assert dt.datetime.fromtimestamp(utc(clock), zone).hour == hour, (offset, clock)


@pytest.mark.parametrize("offset", sorted(TZ_CASES))
def test_generated_rules_place_starts_in_local_hours_and_peak(tmp_path: Path, offset: str) -> None:
    """Rules generated for an offset, run by promtool: the local hour, the peak flag and
    the period of each start, and the per-period means of transfers started at the edges."""
    extra, cases = TZ_CASES[offset]
    rules_dir = tmp_path / "rules"
    assert rules.main(["--out-dir", str(rules_dir), "--tz-offset", offset, *extra]) == 0
    labels = 'job="bigbinf",instance="e:9753",protocol="scp",remote="lab",direction="download"'
    inputs, hours, peaks, periods = [], [], [], []
    for i, (clock, hour, peak) in enumerate(cases):
        series = f'{{{labels},dataset="d{i}"}}'
        inputs += [
            {"series": f"bigbinf_last_transfer_start_timestamp_seconds{series}", "values": f"{utc(clock)}x20"},
            {"series": f"bigbinf_last_transfer_throughput_bytes_per_second{series}", "values": f"{i + 1}x20"},
            {"series": f"bigbinf_last_transfer_success{series}", "values": "1x20"},
        ]
        hours.append({"labels": f"{settings.HOUR}{series}", "value": hour})
        peaks.append({"labels": f"{settings.PEAK}{series}", "value": int(peak)})
        period = "peak" if peak else "offpeak"
        periods.append({"labels": f'{settings.OK_PERIOD}{{{labels},dataset="d{i}",period="{period}"}}', "value": i + 1})
    # One more series: a transfer started at each edge instant, one a minute, each at its
    # own throughput; the 7-day means per period must put each where its start belongs.
    t = f'{{{labels},dataset="tiles"}}'
    starts = " ".join(str(utc(clock)) for clock, _, _ in cases)
    inputs += [
        {"series": f"bigbinf_last_transfer_start_timestamp_seconds{t}", "values": f"_ {starts} {utc(cases[-1][0])}x14"},
        {
            "series": f"bigbinf_transfer_throughput_bytes_per_second_count{t}",
            "values": f"0 {' '.join(str(i + 1) for i in range(len(cases)))} {len(cases)}x14",
        },
        {
            "series": f"bigbinf_transfer_throughput_bytes_per_second_sum{t}",
            "values": "0 "
            + " ".join(str(sum(10**j for j in range(i + 1))) for i in range(len(cases)))
            + f" {sum(10**j for j in range(len(cases)))}x14",
        },
    ]
    # Transfer i runs at 10**i B/s, so each period's mean names exactly which transfers it holds.
    by_period = {p: [10**i for i, c in enumerate(cases) if c[2] == (p == "peak")] for p in ("peak", "offpeak")}
    means = [
        {"labels": f'{settings.PERIOD_MEAN_7D}{{{labels},dataset="tiles",period="{p}"}}', "value": sum(v) / len(v)}
        for p, v in by_period.items()
    ]
    test = {
        "rule_files": [str(rules_dir / rules.RECORDING_FILE)],
        "evaluation_interval": "5m",  # the throughput group's: promtool ignores group intervals
        "group_eval_order": ["bigbinf.series", "bigbinf.throughput"],
        "tests": [
            {
                "interval": "1m",
                "input_series": inputs,
                "promql_expr_test": [
                    {"expr": f'{settings.HOUR}{{dataset=~"d.*"}}', "eval_time": "10m", "exp_samples": hours},
                    {"expr": f'{settings.PEAK}{{dataset=~"d.*"}}', "eval_time": "10m", "exp_samples": peaks},
                    {"expr": settings.OK_PERIOD, "eval_time": "10m", "exp_samples": periods},
                    {"expr": settings.PERIOD_MEAN_7D, "eval_time": "15m", "exp_samples": means},
                ],
            }
        ],
    }
    path = tmp_path / "tz.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    proc = subprocess.run([tool("promtool"), "test", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_checks_config_and_rules() -> None:
    for config in (PROM / "prometheus.yml", PROM / "prometheus-compose.yml"):
        proc = subprocess.run([tool("promtool"), "check", "config", str(config)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([tool("promtool"), "check", "rules", *map(str, rule_files())], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_alert_has_a_not_yet_and_a_firing_case() -> None:
    quiet, firing = set(), set()
    for t in unit_tests():
        for case in t.get("alert_rule_test", []):
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    names = {r["alert"] for r in alerting_rules()}
    assert names - quiet == set(), "alerts without a must-not-fire case"
    assert names - firing == set(), "alerts without a firing case"


def test_every_recording_rule_is_unit_tested() -> None:
    # A test may narrow the rule to some series: `name{dataset="f64m"}`.
    tested = {
        re.sub(r"\{.*\}$", "", case["expr"].strip()) for t in unit_tests() for case in t.get("promql_expr_test", [])
    }
    assert {r["record"] for r in recording_rules()} - tested == set()


def test_unit_tests_of_the_throughput_group_run_at_its_interval() -> None:
    """promtool evaluates every group at the test file's evaluation_interval, ignoring the
    group's own; the roll-ups add the tiles of one group interval per evaluation, so a
    file testing them (or the alerts built on them) at another interval tests nothing real."""
    groups = {g["name"]: g for path in rule_files() for g in yaml.safe_load(path.read_text())["groups"]}
    throughput = groups["bigbinf.throughput"]
    names = {r["record"] for r in throughput["rules"]}
    uses = {r["alert"] for r in alerting_rules() if any(n in r["expr"] for n in names)}
    assert uses == {"BigbinfThroughputRegression", "BigbinfThroughputRegressionTimeOfDay"}
    checked = 0
    for path in sorted((PROM / "tests").glob("*.yml")):
        doc = yaml.safe_load(path.read_text())
        exprs = [c["expr"] for t in doc["tests"] for c in t.get("promql_expr_test", [])]
        alerts = [c["alertname"] for t in doc["tests"] for c in t.get("alert_rule_test", [])]
        if any(n in e for n in names for e in exprs) or set(alerts) & uses:
            assert doc["evaluation_interval"] == throughput["interval"], path.name
            checked += 1
    assert checked >= 2


def test_recording_rule_names_follow_level_metric_operations() -> None:
    for rule in recording_rules():
        level, metric, ops = rule["record"].split(":")
        assert re.fullmatch(r"[a-z_]+", level) and re.fullmatch(r"bigbinf_[a-z0-9_]+", metric), rule["record"]
        assert re.fullmatch(r"[a-z0-9_]+", ops), rule["record"]


def known_metrics() -> set[str]:
    names = {"up"} | PENDING_METRICS | {r["record"] for r in recording_rules()}
    for spec in M.ALL_WITH_MESH:  # a mesh site's metrics too (its alerts and dashboards use them)
        suffixes = ("_bucket", "_sum", "_count") if spec.type == "histogram" else ("",)
        names |= {spec.name + s for s in suffixes}
    return names


def test_rules_use_only_metrics_that_exist() -> None:
    known = known_metrics()
    for rule in all_rules():
        used = set(re.findall(r"\b(?:[a-z_]+:[a-z0-9_]+:[a-z0-9_]+|bigbinf_[a-z0-9_]+)\b", rule["expr"]))
        assert used - known == set(), rule.get("alert") or rule.get("record")


def runbook_anchors() -> set[str]:
    # GitHub's heading anchors: lower case, punctuation dropped, spaces to dashes.
    headings = re.findall(r"^#+\s+(.+?)\s*$", RUNBOOK.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_alert_is_labelled_annotated_and_in_the_runbook() -> None:
    anchors = runbook_anchors()
    for rule in alerting_rules():
        name = rule["alert"]
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"], name
        url = annotations["runbook_url"]
        assert url.startswith(f"{DOCS_URL}/runbook.md#"), name  # absolute: receivers link to it as is
        assert url.split("#", 1)[1] in anchors, f"{name}: no heading for {url} in docs/runbook.md"


def test_runbook_base_is_an_absolute_url_and_configurable(tmp_path: Path) -> None:
    assert Settings().runbook.startswith("https://") and DOCS_URL.startswith("https://")
    assert any("--runbook" in e for e in Settings(runbook="docs/runbook.md").validate())
    assert any("--runbook" in e for e in Settings(runbook="https://x.example/runbook.md#a").validate())
    base = "https://git.example.org/ops/bigbinf/blob/main/docs/runbook.md"
    assert Settings(runbook=base).validate() == []
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf.mixin.rules", "--runbook", base, "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    urls = [
        r["annotations"]["runbook_url"]
        for f in tmp_path.glob("*.yml")
        for g in yaml.safe_load(f.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    ]
    assert urls and all(u.startswith(base + "#") for u in urls)
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf.mixin.rules", "--runbook", "docs/runbook.md", "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and "absolute http(s) URL" in proc.stderr


def test_alertmanager_config_is_valid_and_routes_to_a_webhook() -> None:
    config = PROM / "alertmanager.yml"
    proc = subprocess.run([tool("amtool"), "check-config", str(config)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    raw = yaml.safe_load(config.read_text())
    receivers = {r["name"]: r for r in raw["receivers"]}
    assert receivers[raw["route"]["receiver"]]["webhook_configs"]
    # Inhibitions name alerts that exist.
    names = {r["alert"] for r in alerting_rules()}
    for rule in raw.get("inhibit_rules", []):
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            m = re.fullmatch(r'alertname="(\w+)"', matcher)
            if m:
                assert m.group(1) in names, matcher
