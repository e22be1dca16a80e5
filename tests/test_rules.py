"""Prometheus rules and Alertmanager config: generated, valid, unit-tested, documented.

promtool and amtool come with Debian's prometheus and prometheus-alertmanager packages
(scripts/setup.sh installs them).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from exporter import metric_names as M

ROOT = Path(__file__).resolve().parents[1]
PROM = ROOT / "prometheus"
RUNBOOK = ROOT / "docs" / "runbook.md"
# Metrics the rules use that the exporter does not publish (none today; the set documents the check).
PENDING_METRICS: set[str] = set()


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: run scripts/setup.sh")
    return path


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bigbinf_generate_rules", PROM / "generate_rules.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def rule_files() -> list[Path]:
    return sorted((PROM / "rules").glob("*.yml"))


def all_rules() -> list[dict[str, Any]]:
    return [rule for path in rule_files() for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"]]


def alerting_rules() -> list[dict[str, Any]]:
    return [r for r in all_rules() if "alert" in r]


def recording_rules() -> list[dict[str, Any]]:
    return [r for r in all_rules() if "record" in r]


def unit_tests() -> list[dict[str, Any]]:
    return [t for path in sorted((PROM / "tests").glob("*.yml")) for t in yaml.safe_load(path.read_text())["tests"]]


def test_committed_rules_are_the_generator_defaults() -> None:
    rendered = generator().render(generator().Settings())
    assert sorted(p.name for p in rule_files()) == sorted(rendered)
    stale = [name for name, text in rendered.items() if (PROM / "rules" / name).read_text() != text]
    assert stale == [], f"run python3 prometheus/generate_rules.py: {stale} differ"


def test_generator_settings_change_the_rules(tmp_path: Path) -> None:
    gen = generator()
    assert gen.main(["--out-dir", str(tmp_path), "--tz-offset", "2", "--peak-start", "22", "--peak-end", "6",
                     "--regression-fraction", "0.5", "--exporter-down-for", "30s"]) == 0
    recording = (tmp_path / gen.RECORDING_FILE).read_text()
    assert "hour(bigbinf_last_transfer_start_timestamp_seconds + 7200)" in recording
    assert "- 22 + 24) % 24) < bool 8" in recording  # 22h-06h wraps past midnight
    alerts = yaml.safe_load((tmp_path / gen.ALERTING_FILE).read_text())["groups"][0]["rules"]
    by_name = {a["alert"]: a for a in alerts}
    assert by_name["BigbinfExporterDown"]["for"] == "30s"
    assert " < 0.5 * " in by_name["BigbinfThroughputRegression"]["expr"]
    subprocess.run([tool("promtool"), "check", "rules", *tmp_path.glob("*.yml")], check=True, capture_output=True)
    assert gen.main(["--out-dir", str(tmp_path), "--peak-start", "25"]) == 2
    assert gen.main(["--check"]) == 0  # the committed files are current


def test_promtool_checks_config_and_rules() -> None:
    for config in (PROM / "prometheus.yml", PROM / "prometheus-compose.yml"):
        proc = subprocess.run([tool("promtool"), "check", "config", str(config)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([tool("promtool"), "check", "rules", *map(str, rule_files())],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_unit_tests_pass() -> None:
    tests = sorted((PROM / "tests").glob("*.yml"))
    proc = subprocess.run([tool("promtool"), "test", "rules", *map(str, tests)], capture_output=True, text=True)
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
    tested = {case["expr"].strip() for t in unit_tests() for case in t.get("promql_expr_test", [])}
    assert {r["record"] for r in recording_rules()} - tested == set()


def test_recording_rule_names_follow_level_metric_operations() -> None:
    for rule in recording_rules():
        level, metric, ops = rule["record"].split(":")
        assert re.fullmatch(r"[a-z_]+", level) and re.fullmatch(r"bigbinf_[a-z0-9_]+", metric), rule["record"]
        assert re.fullmatch(r"[a-z0-9_]+", ops), rule["record"]


def known_metrics() -> set[str]:
    names = {"up"} | PENDING_METRICS | {r["record"] for r in recording_rules()}
    for spec in M.ALL:
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
        assert url.startswith("docs/runbook.md#"), name
        assert url.split("#", 1)[1] in anchors, f"{name}: no heading for {url} in docs/runbook.md"


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
