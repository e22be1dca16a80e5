"""A transfer that cannot start says why and how to fix it, as a failed result (never an
exception that would take the round's other results down).  No lab is built here."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import os
import uuid
from pathlib import Path

import pytest
import yaml

from bigbinf import lab
from bigbinf.config import parse_config
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer, unproven
from bigbinf.protocols.base import RunOutcome
from bigbinf.result import Result
from bigbinf.runs import counts_in_baseline, runs_to


def test_lab_not_up_names_the_fix(tmp_path: Path) -> None:
    name = "bbt" + uuid.uuid4().hex[:7]  # a lab that certainly is not up
    raw = {
        "lab": {"name": name, "state_dir": str(tmp_path / "lab")},
        "remotes": {"lab": {"lab": True}},
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {"scp": {}},
        "transfer": {"workdir": str(tmp_path / "work")},
        "journal": {"path": str(tmp_path / "j.jsonl")},
    }
    config = parse_config(yaml.safe_dump(raw), "lab.yaml")
    result = run_transfer(plan_round(config, lab.site(config))[0], config, "test")
    assert result.outcome == "failed"
    assert result.error == (
        f"the lab is not up (no network namespace {name}-client): run "
        "`bigbinf-exporter --config.file <this config> lab up`"
    )


def test_missing_key_file_names_the_setting(tmp_path: Path) -> None:
    key = tmp_path / "id_missing"
    raw = {
        "remotes": {"site": {"address": "127.0.0.1", "data_dir": "/data", "key": str(key)}},
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {"scp": {}},
        "capture": {"enabled": False},
        "transfer": {"workdir": str(tmp_path / "work")},
        "journal": {"path": str(tmp_path / "j.jsonl")},
    }
    config = parse_config(yaml.safe_dump(raw), "site.yaml")
    result = run_transfer(plan_round(config, lab.site(config))[0], config, "test")
    assert result.outcome == "failed"
    assert result.error == f"remotes.site.key: {key} does not exist; give the path of the private key"


def test_an_unexpected_error_after_the_addresses_are_known_keeps_them(tmp_path: Path) -> None:
    # A bug in a runner must not lose what was already resolved: the failed result still
    # says which hosts were measured (the same as a capture-start failure does).
    raw = {
        "remotes": {"here": {"address": "127.0.0.1", "data_dir": str(tmp_path)}},
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {"copy": {"command": ["true"]}},
        "capture": {"enabled": False},
        "transfer": {"workdir": str(tmp_path / "work")},
        "journal": {"path": str(tmp_path / "j.jsonl")},
    }
    config = parse_config(yaml.safe_dump(raw), "site.yaml")
    spec = plan_round(config)[0]

    def broken(ctx: object) -> RunOutcome:
        raise KeyError("bug")

    spec = dataclasses.replace(spec, profile=dataclasses.replace(spec.profile, runner=broken))
    result = run_transfer(spec, config, "test")
    assert result.outcome == "failed"
    assert result.error == "internal error: KeyError: 'bug'"
    assert (result.client_address, result.remote_address) == ("127.0.0.1", "127.0.0.1")

    # What a disk refuses is no bug: one line naming the configured directory, the error and the fix.
    def full(ctx: object) -> RunOutcome:
        raise OSError(28, "No space left on device", str(tmp_path / "work" / "bigbinf-x" / "f1m.bin"))

    spec = dataclasses.replace(spec, profile=dataclasses.replace(spec.profile, runner=full))
    result = run_transfer(spec, config, "test")
    assert result.outcome == "failed"
    assert result.error == (
        f"transfer.workdir {tmp_path / 'work'}: No space left on device (ENOSPC): no space left on its file "
        "system: free space there (df -h) or configure a directory on another"
    )


def test_an_upload_that_moved_nothing_it_can_prove_is_unproven_and_no_baseline_run(tmp_path: Path) -> None:
    # Capture off and an upload (nothing here to verify): a command that moved nothing
    # (`true`) exits 0 at once, which read as an ok 2.4 GB/s before.
    raw = {
        "remotes": {"here": {"address": "127.0.0.1", "data_dir": str(tmp_path), "upload_dir": str(tmp_path / "up")}},
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {
            "copy": {"command": ["true"], "upload_command": ["true"], "cleanup_command": [], "directions": ["upload"]}
        },
        "capture": {"enabled": False},
        "transfer": {"workdir": str(tmp_path / "work")},
        "journal": {"path": str(tmp_path / "j.jsonl")},
    }
    config = parse_config(yaml.safe_dump(raw), "site.yaml")
    result = run_transfer(plan_round(config)[0], config, "test")
    assert (result.direction, result.outcome, result.verified, result.wire_measured) == ("upload", "ok", False, False)
    assert result.unproven == "unproven: no capture and no verification"
    assert "unproven: no capture and no verification: its throughput is no measurement" in result.error
    assert not counts_in_baseline(result)
    assert runs_to([result], "here", "upload") == []
    # The same with the bytes proven (a capture that saw them, or a verification): measured.
    proven = dataclasses.replace(result, wire_measured=True, payload_bytes_up=1 << 20, unproven="")
    assert unproven(proven) == "" and counts_in_baseline(proven)
    assert unproven(dataclasses.replace(proven, payload_bytes_up=0, verified=True)) == ""
    nothing_on_the_wire = dataclasses.replace(proven, payload_bytes_up=0)
    assert unproven(nothing_on_the_wire) == "unproven: no bytes on the wire and no verification"
    # Journaled with its flag, and read back with it (a restart keeps it out of the baselines).
    assert Result.from_json(result.to_json()).unproven == result.unproven


def test_a_download_whose_file_only_has_the_size_is_unproven(tmp_path: Path) -> None:
    # Capture off, no sha256 known: a command that moved nothing but left a file of the
    # right size (`truncate -s`) matched the size alone, and read as an ok 9-16 MB/s
    # (breaker44).  The size is no proof that bytes moved; a sha256 that matched is.
    data = tmp_path / "data"
    data.mkdir()
    (data / "f1m.bin").write_bytes(os.urandom(1 << 20))
    raw = {
        "remotes": {"here": {"address": "127.0.0.1", "data_dir": str(data)}},
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {
            "fake": {"command": ["truncate", "-s", "1048576", "{local_path}"], "directions": ["download"]},
            "copy": {"command": ["cp", "{remote_path}", "{local_path}"], "directions": ["download"]},
        },
        "capture": {"enabled": False},
        "transfer": {"workdir": str(tmp_path / "work")},
        "journal": {"path": str(tmp_path / "j.jsonl")},
    }
    config = parse_config(yaml.safe_dump(raw), "site.yaml")
    specs = {s.protocol: s for s in plan_round(config)}
    fake = run_transfer(specs["fake"], config, "test")
    assert (fake.outcome, fake.verified, fake.wire_measured) == ("ok", True, False), fake.error
    assert fake.unproven == "unproven: no capture and only the size verified (no sha256 known)"
    assert not (tmp_path / "work-captures").exists()  # capture off: nothing made for it
    assert not counts_in_baseline(fake)
    # Where the remote's checksums are known, the same size is checked by its sha256: the
    # fake fails, a real copy is proven.
    (data / "SHA256SUMS").write_text(f"{hashlib.sha256((data / 'f1m.bin').read_bytes()).hexdigest()}  f1m.bin\n")
    raw["remotes"]["here"]["checksums"] = str(data / "SHA256SUMS")
    config = parse_config(yaml.safe_dump(raw), "site.yaml")
    specs = {s.protocol: s for s in plan_round(config)}
    assert run_transfer(specs["fake"], config, "test").outcome == "failed"
    copied = run_transfer(specs["copy"], config, "test")
    assert (copied.outcome, copied.verified, copied.unproven) == ("ok", True, ""), copied.error


def test_a_full_workdir_at_the_start_of_a_transfer_is_said_of_the_setting_with_its_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # breaker44: a full workdir disk gave the raw "[Errno 28] No space left on device:
    # '.../work-captures'" (and named the capture directory with capture off).
    from bigbinf.measure import transfer

    raw = {
        "remotes": {"here": {"address": "127.0.0.1", "data_dir": str(tmp_path)}},
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {"copy": {"command": ["true"], "directions": ["download"]}},
        "capture": {"enabled": False},
        "transfer": {"workdir": str(tmp_path / "work")},
        "journal": {"path": str(tmp_path / "j.jsonl")},
    }
    config = parse_config(yaml.safe_dump(raw), "site.yaml")

    def full(spec: object, config: object, workdir: Path, capture_dir: Path) -> str:
        raise OSError(errno.ENOSPC, "No space left on device", str(workdir))

    monkeypatch.setattr(transfer, "space_shortfall", full)
    result = run_transfer(plan_round(config)[0], config, "test")
    assert result.outcome == "failed"
    assert result.error.startswith(f"transfer.workdir {tmp_path / 'work'}: No space left on device (ENOSPC)"), (
        result.error
    )
    assert "[Errno" not in result.error and "captures" not in result.error
