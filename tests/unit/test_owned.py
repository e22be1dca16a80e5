"""process.owned: what an exporter starts ends with it even when its guardian is killed
too (issue 36).  The truth is /proc: a real process SIGKILLed, its child looked for; and
ssh's own reading of the options (`ssh -G`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bigbinf import guardian, process
from bigbinf.measure.path.route import route_window
from bigbinf.measure.tcp.tuning import Side

SOURCE = Path(__file__).resolve().parents[2] / "exporter"

# An "exporter": marked as own_children marks it (without a guardian), it starts a
# command through owned() from a thread that waits for it, as a round does.
EXPORTER = textwrap.dedent(
    """\
    import os, subprocess, sys, threading, time
    sys.path.insert(0, {source!r})
    from bigbinf import guardian, process
    os.environ[guardian.MARKER] = process.owner()
    def run():
        proc = subprocess.Popen(process.owned(["sleep", "600"]), start_new_session=True)
        print(proc.pid, flush=True)
        proc.wait()
    threading.Thread(target=run).start()
    time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(process._setpriv() is None, reason="setpriv --pdeathsig (util-linux 2.33+) is not installed")
def test_a_command_ends_with_its_exporter_killed_without_a_guardian(tmp_path: Path) -> None:
    script = tmp_path / "exporter.py"
    script.write_text(EXPORTER.format(source=str(SOURCE)))
    env = {k: v for k, v in os.environ.items() if k != guardian.MARKER}
    exporter = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    child = 0
    try:
        assert exporter.stdout is not None
        child = int(exporter.stdout.readline())
        # setpriv executes the command in its own place: the same pid (once it has).
        deadline = time.monotonic() + 30
        while Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
            assert time.monotonic() < deadline and _alive(child)
            time.sleep(0.01)
        exporter.send_signal(signal.SIGKILL)
        exporter.wait()
        # The kernel delivers the parent-death signal as the parent dies: a bound only so
        # that a failure ends (not a timing claim).
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child)
    finally:
        exporter.kill()
        exporter.wait()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)


def test_outside_an_exporter_and_for_a_missing_program_argv_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(guardian.MARKER, raising=False)
    assert process.owned(["sleep", "1"]) == ["sleep", "1"]
    monkeypatch.setenv(guardian.MARKER, process.owner())
    assert process.owned(["no-such-program-bbt", "1"]) == ["no-such-program-bbt", "1"]  # Popen says it is missing


def test_an_ssh_master_persists_at_most_two_seconds_whatever_the_command_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(guardian.MARKER, process.owner())
    master = [
        "ip",
        "netns",
        "exec",
        "x",
        "ssh",
        "-o",
        "ControlMaster=auto",
        "-o",
        "ControlPath=/tmp/bbt/%C",
        "-o",
        "ControlPersist=30",
        "root@198.18.0.2",
        "ss",
    ]
    bounded = process._persist_bounded(master)
    assert bounded == [*master[:5], "-o", "ControlPersist=2", *master[5:]]
    # As ssh reads it: the first value of an option wins.
    settings = subprocess.run(["ssh", "-G", *bounded[5:-1]], capture_output=True, text=True, check=True).stdout
    assert "controlpersist 2" in settings.splitlines()
    # A command without a master is left alone.
    plain = ["ssh", "-o", "ControlPath=none", "root@198.18.0.2", "ss"]
    assert process._persist_bounded(plain) == plain


def test_tuning_and_the_route_window_through_ssh_bound_the_master_they_may_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A remote's tcp_command (tuning) and its stats command (the route window) through ssh
    # may be a round's first session, and so start the master the others share: through
    # owned too, or it keeps the site's ControlPersist (issue 47: 30 s, past an exporter
    # killed with its guardian).  The truth is the argv the "ssh" was given, and ssh's own
    # reading of the options (-G, the real ssh).
    monkeypatch.setenv(guardian.MARKER, process.owner())
    real, said, fake = shutil.which("ssh"), tmp_path / "argv", tmp_path / "ssh"
    assert real is not None
    fake.write_text(
        f'#!/bin/sh\nfor a; do [ "$a" = -G ] && exec {real} "$@"; done\nprintf "%s\\n" "$@" > {said}\necho 0\n'
    )
    fake.chmod(0o755)
    ssh = [str(fake), "-o", "ControlMaster=auto", "-o", f"ControlPath={tmp_path}/%C", "-o", "ControlPersist=30"]
    ssh.append("root@198.18.0.2")
    for name, call in (
        ("route_window", lambda: route_window(ssh, "198.18.0.1")),
        ("tuning", lambda: Side("remote site", tuple(ssh), "198.18.0.1").run(["sysctl", "-n", "net.ipv4.tcp_rmem"])),
    ):
        said.unlink(missing_ok=True)
        call()
        words = said.read_text().splitlines()
        assert words[:2] == ["-o", "ControlPersist=2"], name
        settings = subprocess.run([real, "-G", *words[:-1]], capture_output=True, text=True, check=True).stdout
        assert "controlpersist 2" in settings.splitlines(), name
