"""The test session's own bookkeeping (tests/support/session.py; the real path, a session
interrupted four ways with a lab up, is tests/lab/test_interrupted_session.py): a name is
never one another session has claimed or a namespace has, and the registry keeps whole
lines in the order they were written."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support import session


def test_a_claimed_name_is_never_given_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "NAMES", tmp_path / "names")
    monkeypatch.setenv(session.REGISTRY, str(tmp_path / "registry.jsonl"))
    taken, free = uuid.UUID("a" * 32), uuid.UUID("b" * 32)
    (tmp_path / "names").mkdir()
    (tmp_path / "names" / ("bbt" + taken.hex[:7])).mkdir()  # another session's
    offered = iter([taken, taken, free])
    monkeypatch.setattr(session, "uuid", SimpleNamespace(uuid4=lambda: next(offered)))
    name = session.unique_name()
    assert name == "bbt" + free.hex[:7]
    assert (tmp_path / "names" / name).is_dir()
    lines = [json.loads(line) for line in (tmp_path / "registry.jsonl").read_text().splitlines()]
    assert lines == [{"kind": "claim", "path": str(tmp_path / "names" / name)}]  # the reaper frees it


def test_the_registry_holds_each_entry_once_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = tmp_path / "registry.jsonl"
    monkeypatch.setenv(session.REGISTRY, str(registry))
    session.register_netns("bbtaaaa-x")
    session.register("lab", name="bbtb", owner="bbtb", state_dir="/var/tmp/bigbinf-bbtb")
    session.register_netns("bbtaaaa-x")
    with open(registry, "a") as f:
        f.write('{"kind": "netns", "name": "bbtc"')  # a line cut short by a kill
    assert list(session.entries(registry)) == [
        {"kind": "netns", "name": "bbtaaaa-x"},
        {"kind": "lab", "name": "bbtb", "owner": "bbtb", "state_dir": "/var/tmp/bigbinf-bbtb"},
    ]


def test_outside_a_session_nothing_is_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(session.REGISTRY, raising=False)
    session.register_netns("bbtnone")  # a support module used on its own
    assert list(tmp_path.iterdir()) == []
