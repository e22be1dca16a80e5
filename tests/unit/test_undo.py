"""bigbinf.measure.undo: the undo journal on disk (written before, struck off after,
never torn), its replay (logged, a failure kept and counted), and what it refuses to
run.  Replays here run real commands on files the test owns; the tuning kinds against
real kernels are in tests/lab (test_tuning.py, test_leftovers.py)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bigbinf.measure.undo import Undo, UndoError, UndoJournal, journal_path

SOURCE = Path(__file__).resolve().parents[2] / "exporter"


def _upload(target: Path) -> Undo:
    return Undo("upload", "remote lab", f"an upload at {target}", path=str(target))


def _command(words: list[str]) -> Undo:
    return Undo("upload", "remote site", "an upload", words=tuple(words))


def test_the_journal_sits_beside_the_results() -> None:
    assert journal_path(Path("/var/lib/bigbinf/journal.jsonl")) == Path("/var/lib/bigbinf/journal.undo.jsonl")


def test_an_entry_is_on_disk_before_the_change_and_gone_once_undone(tmp_path: Path) -> None:
    # A process that writes an entry down and is killed before undoing it.
    script = textwrap.dedent(
        f"""\
        import os, signal, sys
        sys.path.insert(0, {str(SOURCE)!r})
        from pathlib import Path
        from bigbinf.measure.undo import Undo, UndoJournal
        UndoJournal(Path({str(tmp_path / "undo.jsonl")!r})).add(
            Undo("sysctl", "remote lab", "net.ipv4.tcp_rmem capped at 65536", prefix=("ip", "netns", "exec", "x"),
                 words=("sysctl", "-q", "-w", "net.ipv4.tcp_rmem=4096 131072 6291456")))
        os.kill(os.getpid(), signal.SIGKILL)  # the change would come next
        """
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert done.returncode == -signal.SIGKILL
    journal = UndoJournal(tmp_path / "undo.jsonl")
    (entry,) = journal.pending()
    assert entry.words[3] == "net.ipv4.tcp_rmem=4096 131072 6291456" and entry.id and entry.made > 0
    assert journal.counts() == {"route": 0, "sysctl": 1, "upload": 0}
    journal.done(entry)
    assert not journal.path.exists()  # nothing pending: no file
    assert list(tmp_path.iterdir()) == []  # and no temporary file left either


def test_each_rewrite_is_whole(tmp_path: Path) -> None:
    journal = UndoJournal(tmp_path / "undo.jsonl")
    entries = [journal.add(_upload(tmp_path / f"u{i}")) for i in range(5)]
    journal.done(entries[2])
    lines = journal.path.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [e.id for e in entries if e is not entries[2]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["undo.jsonl"]
    assert journal.path.stat().st_mode & 0o077 == 0  # mkstemp's 0600: its commands run as us


def test_replay_undoes_logs_and_keeps_what_fails(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    upload = tmp_path / "f.bin.0123456789ab"
    upload.write_bytes(b"x")
    flag = tmp_path / "reachable"
    journal = UndoJournal(tmp_path / "undo.jsonl")
    journal.add(_upload(upload))
    # A remote that cannot be reached yet: its cleanup fails, saying why.
    failing = journal.add(
        _command(["sh", "-c", f"test -e {flag} || {{ echo 'ssh: connect: No route to host' >&2; exit 255; }}"])
    )
    with caplog.at_level(logging.WARNING):
        replay = journal.replay()
    assert not upload.exists()
    assert len(replay.undone) == 1 and len(replay.failed) == 1
    assert "exited 255: ssh: connect: No route to host" in replay.failed[0]
    assert [e.id for e in journal.pending()] == [failing.id]
    assert journal.counts() == {"route": 0, "sysctl": 0, "upload": 1}
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "still pending" in errors[0] and "No route to host" in errors[0]
    flag.touch()  # the remote is back: the next replay does it
    assert journal.replay().failed == [] and not journal.path.exists()


def test_what_is_gone_already_is_done(tmp_path: Path) -> None:
    journal = UndoJournal(tmp_path / "undo.jsonl")
    journal.add(_upload(tmp_path / "never-made"))
    # A route deleted since (a stand-in for ip says what the kernel says then) ...
    gone = ("sh", "-c", "echo 'RTNETLINK answers: No such process' >&2; exit 2", "sh")
    journal.add(Undo("route", "this host", "a route", prefix=gone, words=("ip", "route", "del", "198.18.0.2/32")))
    # ... and a namespace `lab down` removed, with what was set in it.
    journal.add(
        Undo(
            "sysctl",
            "remote lab",
            "a cap",
            prefix=("ip", "netns", "exec", "bbt-no-such-namespace"),
            words=("sysctl", "-q", "-w", "net.ipv4.tcp_rmem=1 2 3"),
        )
    )
    assert journal.replay().failed == [] and not journal.path.exists()


def test_a_line_that_does_not_read_is_kept_and_never_run(tmp_path: Path) -> None:
    target = tmp_path / "keep-me"
    target.write_text("x")
    journal = UndoJournal(tmp_path / "undo.jsonl")
    journal.add(_upload(tmp_path / "gone"))
    bad = [
        json.dumps({"kind": "sysctl", "where": "w", "what": "w", "words": ["rm", "-rf", str(target)]}),
        json.dumps({"kind": "upload", "where": "w", "what": "w", "path": str(target), "extra": 1}),
        '{"kind": "upl',  # torn by hand
    ]
    with open(journal.path, "a") as f:
        f.write("\n".join(bad) + "\n")
    replay = journal.replay()
    assert target.exists()
    assert len(replay.failed) == 3 and "not a TCP buffer sysctl" in replay.failed[0]
    assert "unknown fields extra" in replay.failed[1]
    assert journal.path.read_text().splitlines() == bad  # the good entry done, the bad ones kept for a person
    assert journal.counts() == {"route": 1, "sysctl": 1, "upload": 1}  # something is pending, of some kind


def test_a_journal_others_may_write_is_not_replayed(tmp_path: Path) -> None:
    target = tmp_path / "upload"
    target.write_text("x")
    journal = UndoJournal(tmp_path / "undo.jsonl")
    journal.add(_upload(target))
    os.chmod(journal.path, 0o666)
    with pytest.raises(UndoError, match=r"undo\.jsonl: owned by uid \d+ with mode 0666: not replayed .*chmod 600"):
        journal.replay()
    assert target.exists()


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {"kind": "sysctl", "words": ("sysctl", "-q", "-w", "kernel.core_pattern=|/bin/sh")},
            "not a TCP buffer sysctl",
        ),
        ({"kind": "route", "words": ("ip", "route", "flush", "all")}, "not a route command"),
        ({"kind": "route", "words": ("ip", "route", "del", "1.2.3.4/32;", "reboot")}, "not a route command"),
        ({"kind": "reboot", "words": ("true",)}, "kind 'reboot'"),
        ({"kind": "upload", "words": ("rm", "x"), "path": "/x"}, "one of them"),
        ({"kind": "upload", "path": "relative"}, "not absolute"),
    ],
)
def test_entries_are_read_by_type(fields: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Undo(**{"where": "w", "what": "w", **fields})  # type: ignore[arg-type]
