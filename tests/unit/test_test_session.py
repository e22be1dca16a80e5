"""The test session's own bookkeeping (tests/support/session.py; the real path, a session
interrupted four ways with a lab up, is tests/lab/test_interrupted_session.py): a name is
never one another session has claimed or a namespace has, and the registry keeps whole
lines in the order they were written."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
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


def test_a_claimed_labs_state_dir_is_removed_even_without_its_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker killed in its teardown's rmtree may have removed the marker first: the
    # state dir of a name this session claimed is still the session's.  Another's, with no
    # marker saying a lab made it, is not touched.
    registry = tmp_path / "registry.jsonl"
    monkeypatch.setenv(session.REGISTRY, str(registry))
    ours, theirs = session.unique_name(), session.unique_name()
    dirs = {name: Path("/var/tmp", f"bigbinf-{name}") for name in (ours, theirs)}
    try:
        for name, state in dirs.items():
            state.mkdir()
            (state / "run").mkdir()
            (state / "run" / "left.pid").write_text("1\n")
            session.register("lab", name=name, owner=name, state_dir=str(state))
        os.rmdir(session.NAMES / theirs)  # not this session's claim
        lines = [line for line in registry.read_text().splitlines() if theirs not in line or '"lab"' in line]
        registry.write_text("\n".join(lines) + "\n")
        done = session.reap("0.0.0", registry)
        assert not dirs[ours].exists() and f"removed {dirs[ours]}" in done
        assert dirs[theirs].is_dir(), done
    finally:
        for state in dirs.values():
            shutil.rmtree(state, ignore_errors=True)
        for name in (ours, theirs):
            with contextlib.suppress(OSError):
                os.rmdir(session.NAMES / name)
