"""A test that builds a lab and waits to be interrupted, run by
tests/lab/test_interrupted_session.py in a pytest of its own (not collected by the suite:
its name is not test_*): a lab with its servers and delay line, a capture in it, and a
process beside it on the host (as a Prometheus or an exporter is), that process in a cgroup
of the test's (where the host has cgroup v1's cpu hierarchy), and a tmpfs mounted on a
scratch directory (as tests/lab/test_full_disk.py makes them).  Once all run, it writes
what it made to $BIGBINF_TEST_READY, then waits."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from bigbinf import guardian
from bigbinf.lab import LabLayout
from tests.support import session

CPU = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu hierarchy, where the host mounts it


def test_builds_a_lab_and_waits(make_lab) -> None:
    config = make_lab(link={"rate": "100mbit", "delay": "5ms"}, servers=["sshd", "nginx", "gridftp"])
    layout = LabLayout(config.lab)
    capture = subprocess.Popen(
        ["ip", "netns", "exec", layout.client_ns, "tcpdump", "-q", "-i", layout.client_if, "-w", os.devnull],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    beside = subprocess.Popen(["sleep", "600"])
    group = None
    if (CPU / "cgroup.procs").exists():
        group = session.register_cgroup(CPU / f"bbt-interrupted-{os.getpid()}")
        group.mkdir()
        (group / "cgroup.procs").write_text(str(beside.pid))
    disk = session.register_mount(session.scratch_dir(Path("/var/tmp"), "bbt-interrupted-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    in_lab = [
        int(p)
        for ns in layout.namespaces
        for p in subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    ]
    made = {
        "session": os.environ[session.SESSION],
        "session_dir": str(Path(os.environ[session.REGISTRY]).parent),
        "lab": config.lab.name,
        "state_dir": str(layout.state_dir),
        "namespaces": [ns for ns in layout.namespaces if Path("/run/netns", ns).exists()],
        # each process as guardian.identity: a pid reused meanwhile is not mistaken for it
        "processes": [guardian.identity(p) for p in (os.getpid(), capture.pid, beside.pid, *in_lab)],
        "worker": os.getpid(),
        "cgroups": [str(group)] if group else [],
        "mounts": [str(disk)],
    }
    ready = Path(os.environ["BIGBINF_TEST_READY"])
    ready.with_suffix(".tmp").write_text(json.dumps(made))
    ready.with_suffix(".tmp").rename(ready)
    time.sleep(600)
