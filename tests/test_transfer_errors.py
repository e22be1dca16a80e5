"""A transfer that cannot start says why and how to fix it, as a failed result (never an
exception that would take the round's other results down).  No lab is built here."""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml

from exporter.config import parse_config
from exporter.plan import plan_round
from exporter.transfer import run_transfer


def test_lab_not_up_names_the_fix(tmp_path: Path) -> None:
    name = "bbt" + uuid.uuid4().hex[:7]  # a lab that certainly is not up
    raw = {"lab": {"name": name, "state_dir": str(tmp_path / "lab")}, "remotes": {"lab": {"lab": True}},
           "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}}, "protocols": {"scp": {}},
           "transfer": {"workdir": str(tmp_path / "work")}, "journal": {"path": str(tmp_path / "j.jsonl")}}
    config = parse_config(yaml.safe_dump(raw), "lab.yaml")
    result = run_transfer(plan_round(config)[0], config, "test")
    assert result.outcome == "failed"
    assert result.error == (f"the lab is not up (no network namespace {name}-client): run "
                            "`bigbinf-exporter --config.file <this config> lab up`")


def test_missing_key_file_names_the_setting(tmp_path: Path) -> None:
    key = tmp_path / "id_missing"
    raw = {"remotes": {"site": {"address": "127.0.0.1", "data_dir": "/data", "key": str(key)}},
           "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}}, "protocols": {"scp": {}},
           "capture": {"enabled": False},
           "transfer": {"workdir": str(tmp_path / "work")}, "journal": {"path": str(tmp_path / "j.jsonl")}}
    config = parse_config(yaml.safe_dump(raw), "site.yaml")
    result = run_transfer(plan_round(config)[0], config, "test")
    assert result.outcome == "failed"
    assert result.error == f"remotes.site.key: {key} does not exist; give the path of the private key"
