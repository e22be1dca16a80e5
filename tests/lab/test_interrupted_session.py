"""An interrupted test session leaves nothing behind (tests/support/session.py): a pytest
of its own builds a lab (tests/support/interrupted_lab.py) and is then interrupted as a
person or a machine does it: Ctrl-C (SIGINT to the terminal's process group), SIGTERM to
pytest, SIGKILL of pytest, SIGKILL of the xdist worker running the test.  Once that
session's reaper has finished, none of its namespaces (`ip netns list`), /etc/netns
entries, state dir, processes (by the session's marker, and each by its identity), cgroup
or mount (and its directory) is left; and the compose project the podman test registers is removed, pod, container,
network and volume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bigbinf import guardian
from tests.support import session

from ..e2e.podman_images import leftovers, podman, remove_leftovers
from ..support.exporter import ROOT

pytestmark = pytest.mark.lab

INNER = "tests/support/interrupted_lab.py"
BUILD_TIMEOUT = 300  # s: a lab with three servers and a delay line, and pytest's start, on a loaded 2-core host
REAP_TIMEOUT = 180  # s: the reaper's grace periods, namespaces removed one by one
GONE_TIMEOUT = 30  # s: for a process killed last to exit (a busy host schedules it late)


def _wait(what: str, done, timeout: float, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s; the inner session said:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)


def _running(identity: str) -> bool:
    """Whether the process named by a guardian.identity still runs (a zombie runs nothing:
    one killed last is reaped by init a moment later)."""
    _, pid, start = identity.split(".")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return False
    return fields[0] != "Z" and fields[19] == start


def _left(made: dict) -> dict[str, list[str]]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    namespaces = [line.split()[0] for line in listed.splitlines() if line.startswith(made["lab"] + "-")]
    left = {
        "namespaces": namespaces,
        "/etc/netns": [ns for ns in made["namespaces"] if Path("/etc/netns", ns).exists()],
        "state dir": [made["state_dir"]] if Path(made["state_dir"]).exists() else [],
        "marked processes": [guardian.describe(p) for p in session.marked(made["session"])],
        "processes": [p for p in made["processes"] if _running(p)],
        "name claim": [made["lab"]] if (session.NAMES / made["lab"]).exists() else [],
        "cgroups": [group for group in made["cgroups"] if Path(group).exists()],
        "mounts or their directories": [point for point in made["mounts"] if Path(point).exists()],
    }
    return {what: found for what, found in left.items() if found}


@pytest.mark.parametrize(
    "how",
    ["SIGINT to the process group", "SIGTERM to pytest", "SIGKILL of pytest", "SIGKILL of the worker"],
)
def test_an_interrupted_session_leaves_nothing(how: str, tmp_path: Path) -> None:
    ready, log = tmp_path / "ready.json", tmp_path / "inner.log"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "1", INNER]
    with open(log, "wb") as sink:
        inner = subprocess.Popen(
            argv,
            cwd=ROOT,
            env={**os.environ, "BIGBINF_TEST_READY": str(ready)},
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a process group of its own, as a terminal gives it
        )
    try:
        _wait(
            "the inner session's lab up", lambda: ready.exists() or inner.poll() is not None, BUILD_TIMEOUT, inner, log
        )
        assert ready.exists(), f"the inner session ended before its lab was up:\n{log.read_text()[-4000:]}"
        made = json.loads(ready.read_text())
        assert made["namespaces"] and len(made["processes"]) >= 5, made  # the lab really ran
        assert all(os.path.ismount(p) for p in made["mounts"]), made  # and its mount is there
        assert made["session"] != os.environ[session.SESSION]  # a session of its own
        if how == "SIGINT to the process group":
            os.killpg(inner.pid, signal.SIGINT)
        elif how == "SIGTERM to pytest":
            inner.send_signal(signal.SIGTERM)
        elif how == "SIGKILL of pytest":
            inner.kill()
        else:
            os.kill(made["worker"], signal.SIGKILL)
        inner.wait(REAP_TIMEOUT)
        _wait("the inner session's reaper", lambda: not Path(made["session_dir"]).exists(), REAP_TIMEOUT, inner, log)
        # What the reaper ended last (SIGKILL after its grace) exits a moment after it does.
        deadline = time.monotonic() + GONE_TIMEOUT
        while _left(made) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _left(made) == {}, f"after {how}: {_left(made)}; the inner session said:\n{log.read_text()[-4000:]}"
    finally:
        if inner.poll() is None:
            os.killpg(inner.pid, signal.SIGKILL)
            inner.wait()


def test_a_registered_compose_project_is_removed(tmp_path: Path) -> None:
    """What the compose test registers (tests/e2e/test_compose_stack.py) is what the reaper
    removes: the project's pod, container, network and volume, as podman lists them."""
    if not shutil.which("podman"):
        pytest.skip("needs podman (scripts/setup.sh --test)")
    project = session.unique_name("bbt", 8)
    registry = tmp_path / "registry.jsonl"
    registry.write_text(json.dumps({"kind": "podman", "project": project, "volumes": [], "images": []}) + "\n")
    rootfs = tmp_path / "rootfs"  # a container needs no image to exist: an empty root of its own
    rootfs.mkdir()
    try:
        podman("network", "create", f"{project}_monitoring")
        podman("volume", "create", f"{project}_exporter-state")
        podman("pod", "create", "--infra=false", "--name", f"pod_{project}")
        podman("create", "--name", f"{project}_alert-webhook_1", "--rootfs", str(rootfs), "/webhook")
        made = leftovers(project)
        assert set(made) == {"containers", "networks", "volumes", "pods"}, made
        done = session.reap("0.0.0", registry)  # a session of no process: only what is registered
        assert leftovers(project) == {}
        assert sorted(line.split()[2] for line in done) == ["container", "network", "pod", "volume"], done
    finally:
        remove_leftovers(project, set())


def test_registered_cgroups_mounts_scratch_dirs_and_users_are_removed(tmp_path: Path) -> None:
    """What a test makes beside labs and registers (a cgroup with a process in it, a tmpfs
    on a scratch directory, a ControlPath directory with a file, a loop device on a lab's
    disk image, a system user) is what
    the reaper removes, as the kernel and the user database list them; a line naming
    anything outside the suite's names is left alone."""
    registry = tmp_path / "registry.jsonl"
    os.environ[session.REGISTRY], saved = str(registry), os.environ.get(session.REGISTRY)
    decoy = tmp_path / "not-a-scratch-dir"  # a damaged or hostile line: not the suite's name
    decoy.mkdir()
    sleeper, user = None, "bbu" + os.urandom(4).hex()
    state = Path("/var/tmp") / f"bigbinf-{session.unique_name()}"  # where a lab's disk image is
    state.mkdir()
    try:
        control = session.scratch_dir(Path("/tmp"), "bbcm-", 0o700)
        (control / "socket-left").write_text("")
        disk = session.register_mount(session.scratch_dir(Path("/var/tmp"), "bbt-reap-"))
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
        session.register("dir", path=str(decoy))
        cpu = Path("/sys/fs/cgroup/cpu")
        group = session.register_cgroup(cpu / f"bbt-reap-{os.getpid()}") if (cpu / "cgroup.procs").exists() else None
        if group:
            group.mkdir()
            sleeper = subprocess.Popen(["sleep", "60"])
            (group / "cgroup.procs").write_text(str(sleeper.pid))
        image = session.register_loop(state / "disk.img")
        with open(image, "wb") as f:
            f.truncate(1 << 20)
        loop = subprocess.run(["losetup", "--find", "--show", str(image)], check=True, capture_output=True, text=True)
        session.register_user(user)
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True)
        done = session.reap("0.0.0", registry)  # a session of no process: only what is registered
        assert not os.path.ismount(disk) and not disk.exists() and not control.exists(), done
        assert decoy.is_dir(), done
        attached = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True).stdout
        assert attached == "" and f"detached {loop.stdout.strip()} ({image})" in done, (attached, done)
        assert subprocess.run(["id", user], capture_output=True).returncode != 0, done
        if group:
            assert not group.exists(), done
            assert sleeper is not None and sleeper.poll() is None  # not ended: moved to the root
            assert str(sleeper.pid) in (cpu / "cgroup.procs").read_text().split()
    finally:
        if saved is None:
            os.environ.pop(session.REGISTRY, None)
        else:
            os.environ[session.REGISTRY] = saved
        if sleeper is not None:
            sleeper.kill()
            sleeper.wait()
        session.reap("0.0.0", registry)  # whatever an assertion above left
        shutil.rmtree(state, ignore_errors=True)
