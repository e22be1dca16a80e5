"""Nothing outlives the test session, however it ends: the session's marker, its registry,
and the reaper that removes what they name once the session has ended.

    python -m tests.support.session SESSION DIR      (its standard input is the lifeline)

The pytest controller (the only process of a run without xdist) starts a session at
configure (conftest.py):

* every process the session starts carries one environment variable,
  ``BIGBINF_TEST_SESSION=<pid namespace>.<pid>.<start time>`` of the controller (the
  exporter's marker, bigbinf/guardian.py, names an exporter the same way): the xdist
  workers, the Prometheus and Alertmanager servers, exporters, their children;
* what is not a process (a lab's namespaces and /etc/netns entries, a namespace of a
  test's own, a podman compose project, a cgroup, a mount, a scratch directory under /tmp
  or /var/tmp, a system user) is written to the session's registry,
  ``DIR/registry.jsonl``, *before* it is created: a line each, appended (O_APPEND: whole
  lines from any worker).  Labs and lab meshes register themselves: `lab.up` and the
  mesh's `up` claim their state dir first, and the claim is registered (`track_labs`);
* the reaper, started first and without the marker, in a session of its own (a Ctrl-C
  to the terminal's process group does not reach it), blocks reading a pipe whose other
  end only the controller holds.  When the controller has ended, however it ended
  (Ctrl-C, SIGTERM, SIGKILL, a normal exit), the read returns; the reaper ends every
  process carrying the session's marker (the workers too, whatever they were doing), then
  removes whatever the registry names that still exists: the processes in each
  namespace, the namespace, its /etc/netns entry, the lab's state dir (only if the lab's
  marker says it made it), the compose project's containers, pods, volumes and networks,
  each cgroup (its processes moved to the hierarchy's root first), each mount (lazily
  unmounted), each scratch directory, each loop device on a lab's image, each user; then
  it ends what was started meanwhile, and removes the session's directory.  Only what a test's names can be is removed
  (`SCRATCH`, `CGROUPS`, `USERS`): a damaged registry line names nothing else.

A worker killed mid-test (the OOM killer, `kill -9`) leaves its lab until the session
ends; xdist replaces the worker, and the reaper removes the lab at the end.

Names: a name the session gives (`unique_name`) is claimed for the session first
(a directory under NAMES, made or refused atomically, removed by the reaper), so two
suites on one machine never build, nor remove, each other's labs.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bigbinf import guardian

SESSION = "BIGBINF_TEST_SESSION"  # the marker: the controller's identity
REGISTRY = "BIGBINF_TEST_REGISTRY"  # the file every resource is registered in before it is made
ROOT = Path(__file__).resolve().parents[2]
NAMES = Path(tempfile.gettempdir()) / "bigbinf-test-names"  # claims, one directory per name
SWEEP_QUIET_SECONDS = 1.0  # as guardian.LATE_EXEC_SECONDS: a child forked just before executes late


# ---------------------------------------------------------------- what tests call


def register(kind: str, **fields: Any) -> None:
    """Record a resource in the session's registry before it is made (nothing outside a
    session: a support module used on its own)."""
    registry = os.environ.get(REGISTRY)
    if not registry:
        return
    line = json.dumps({"kind": kind, **fields}) + "\n"
    fd = os.open(registry, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def register_netns(name: str) -> str:
    """A namespace a test makes itself (`ip netns add NAME`); returns the name."""
    register("netns", name=name)
    return name


# What the reaper removes beyond labs, only where the suite's names are: a scratch
# directory or mount point is a bbt-*/bbcm-* entry of /tmp or /var/tmp; a cgroup a bbt-*
# group of a cgroup hierarchy; a user a bbu* system user (tests/lab/test_unprivileged.py).
SCRATCH = (Path("/tmp"), Path("/var/tmp"))
SCRATCH_PREFIXES = ("bbt-", "bbcm-")
CGROUPS = Path("/sys/fs/cgroup")
USERS = "bbu"


def _scratch(path: Path) -> bool:
    return path.parent in SCRATCH and path.name.startswith(SCRATCH_PREFIXES)


def scratch_dir(parent: Path, prefix: str, mode: int = 0o755) -> Path:
    """A fresh directory `parent`/`prefix`<8 hex digits> (parent /tmp or /var/tmp, prefix
    bbt-... or bbcm-), registered before it is made: the reaper removes it, and whatever
    is in it, if the test does not."""
    path = parent / f"{prefix}{uuid.uuid4().hex[:8]}"
    if not _scratch(path):
        raise ValueError(f"scratch_dir: {path} is not a bbt-*/bbcm-* entry of /tmp or /var/tmp")
    register("dir", path=str(path))
    path.mkdir(mode=mode)
    return path


def register_mount(point: Path) -> Path:
    """A mount a test makes on `point` (a scratch_dir): the reaper unmounts it (lazily)
    before it removes the directory."""
    if not _scratch(point):
        raise ValueError(f"register_mount: {point} is not a scratch directory (session.scratch_dir)")
    register("mount", path=str(point))
    return point


def register_cgroup(group: Path) -> Path:
    """A cgroup a test makes (a bbt-* group under /sys/fs/cgroup): the reaper moves what
    is left in it to its hierarchy's root and removes it."""
    if not (group.is_relative_to(CGROUPS) and group.name.startswith("bbt-")):
        raise ValueError(f"register_cgroup: {group} is not a bbt-* group under {CGROUPS}")
    register("cgroup", path=str(group))
    return group


def register_loop(image: Path) -> Path:
    """A loop device a test attaches to `image` (a file in a lab's state dir): the reaper
    detaches every loop device backed by it (its file removed with the lab or not)."""
    register("loop", image=str(image))
    return image


def register_user(name: str) -> str:
    """A system user (and its group) a test adds, named bbu...: the reaper deletes it."""
    if not name.startswith(USERS):
        raise ValueError(f"register_user: {name} does not start with {USERS!r}")
    register("user", name=name)
    return name


def unique_name(prefix: str = "bbt", digits: int = 7) -> str:
    """`prefix` and `digits` random hex digits that no other session has claimed and that no
    namespace or lab state dir has: claimed for this session (the reaper frees it)."""
    if not NAMES.is_dir():
        NAMES.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):  # every user's sessions claim names here (as in /tmp)
            NAMES.chmod(0o1777)
    while True:
        name = prefix + uuid.uuid4().hex[:digits]
        if any(ns == name or ns.startswith(name + "-") for ns in _namespaces()):
            continue
        if Path("/var/tmp", f"bigbinf-{name}").exists():
            continue
        try:
            (NAMES / name).mkdir()
        except FileExistsError:
            continue
        register("claim", path=str(NAMES / name))
        return name


def track_labs() -> None:
    """Register every lab and lab mesh this process builds: both claim their state dir
    first (bigbinf.lab.control.claim_state_dir), and the claim is registered before it is
    made, so a lab killed half-built is removed too."""
    from bigbinf.lab import control

    original = control.claim_state_dir
    if getattr(original, "registers", False):
        return

    @functools.wraps(original)
    def claim_state_dir(state: Path, owner: str, example: str) -> None:
        name = owner.removeprefix("mesh ")
        register("lab", name=name, owner=owner, state_dir=str(state))
        original(state, owner, example)

    claim_state_dir.registers = True  # type: ignore[attr-defined]
    control.claim_state_dir = claim_state_dir  # type: ignore[assignment]


def interrupt_on_sigterm() -> None:
    """SIGTERM as Ctrl-C: pytest then runs the finalizers it can (the reaper does the rest)."""

    def interrupted(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)


class Session:
    """The controller's side: the lifeline's end and the reaper."""

    def __init__(self) -> None:
        self.id = guardian.identity()
        self.dir = Path(tempfile.mkdtemp(prefix=f"bigbinf-tests-{os.getpid()}-"))
        read_end, self.lifeline = os.pipe()  # neither end is inherited by the session's children
        env = {k: v for k, v in os.environ.items() if k not in (SESSION, REGISTRY, guardian.MARKER)}
        self.reaper = subprocess.Popen(
            [sys.executable, "-m", "tests.support.session", self.id, str(self.dir)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        os.close(read_end)
        (self.dir / "reaper.pid").write_text(f"{self.reaper.pid}\n")
        os.environ[SESSION] = self.id
        os.environ[REGISTRY] = str(self.dir / "registry.jsonl")

    def finish(self, timeout: float = 300.0) -> None:
        """Close the lifeline and wait for the reaper (so pytest ends once all is gone)."""
        os.close(self.lifeline)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.reaper.wait(timeout)


# ---------------------------------------------------------------- the reaper


def _namespaces() -> list[str]:
    try:
        return os.listdir("/run/netns")
    except OSError:
        return []


# Daemons a session may start that serve every user of the host, not the session: podman's
# DNS server for its networks, started on demand by whichever podman needs it first (another
# suite's compose stack may be using it) and gone by itself once its last network is.
SHARED = {b"aardvark-dns"}


def marked(session: str) -> list[int]:
    """Every process but this one that carries the session's marker (not SHARED ones)."""
    key = f"{SESSION}={session}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            ours = key in Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
            if ours and Path(f"/proc/{name}/comm").read_bytes().strip() not in SHARED:
                found.append(int(name))
    return found


def sweep(session: str) -> list[str]:
    """End the session's processes until none has appeared for a while; their command lines."""
    ended: list[str] = []
    quiet_since = began = time.monotonic()
    while time.monotonic() - quiet_since < SWEEP_QUIET_SECONDS and time.monotonic() - began < 30:
        pids = marked(session)
        if pids:
            ended += [guardian.describe(p) for p in pids]
            guardian.end(pids)
            quiet_since = time.monotonic()
        else:
            time.sleep(0.05)
    return ended


def entries(registry: Path) -> Iterator[dict[str, Any]]:
    try:
        lines = registry.read_text().splitlines()
    except OSError:
        return
    seen = set()
    for line in lines:
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            key = json.dumps(entry, sort_keys=True)
            if isinstance(entry, dict) and key not in seen:
                seen.add(key)
                yield entry


def remove_netns(ns: str) -> list[str]:
    from bigbinf.lab import network

    done = network.remove_namespace(ns) if os.path.exists(f"/run/netns/{ns}") else []
    hosts = Path("/etc/netns", ns)
    if hosts.exists():
        shutil.rmtree(hosts, ignore_errors=True)
        done.append(f"removed {hosts}")
    return done


def remove_lab(name: str, owner: str, state_dir: Path, claimed: bool) -> list[str]:
    """A lab's or a lab mesh's namespaces, their /etc/netns entries, and the state dir if
    its marker says the lab made it (or, of a name the session claimed, if it is where the
    suite puts that name's).  The namespaces of a name the session claimed are
    every NAME-something (a mesh site's delay line too); of another, those `up` names: a
    lab's three, a mesh's core and those its state dir records."""
    from bigbinf.lab import control

    existing = {*_namespaces(), *(os.listdir("/etc/netns") if Path("/etc/netns").is_dir() else ())}
    if claimed:
        names = {ns for ns in existing if ns.startswith(name + "-")}
    elif owner.startswith("mesh "):
        recorded = (state_dir / "namespaces").read_text().split() if control.owns_state_dir(state_dir, owner) else []
        names = {f"{name}-core", *(ns for ns in recorded if ns.startswith(name + "-"))} & existing
    else:
        names = {f"{name}-client", f"{name}-remote", f"{name}-wan"} & existing
    done = []
    for ns in sorted(names, key=lambda ns: ns.endswith("-core")):  # a mesh's sites before its core
        done += remove_netns(ns)
    # A name the session claimed has a state dir no other session makes (unique_name gives
    # no name whose /var/tmp/bigbinf-NAME exists): removed even without its marker, which a
    # teardown cut short mid-way (a worker killed in its rmtree) may have removed first.
    ours = claimed and state_dir == Path("/var/tmp", f"bigbinf-{name}")
    if state_dir.exists() and (ours or control.owns_state_dir(state_dir, owner)):
        shutil.rmtree(state_dir, ignore_errors=True)
        done.append(f"removed {state_dir}")
    return done


def remove_podman(entry: dict[str, Any]) -> list[str]:
    from tests.e2e import podman_images

    done = [
        f"removed podman {kind} {name}"
        for kind, name in podman_images.remove_leftovers(entry["project"], set(entry.get("volumes", ())))
    ]
    for image in entry.get("images", ()):
        if podman_images.podman("rmi", image, check=False).returncode == 0:
            done.append(f"removed podman image {image}")
    if "ip_forward" in entry:
        podman_images.restore_host_networking(entry["ip_forward"])
    return done


def remove_cgroup(group: Path) -> list[str]:
    """A test's cgroup: its processes back to the hierarchy's root (the group's parent
    chain ends at the mount, whose cgroup.procs takes any pid), then the group."""
    if not group.is_dir():
        return []
    root = group.parent
    while root.parent != CGROUPS and root != CGROUPS:
        root = root.parent
    for _ in range(50):  # a process forked meanwhile lands in the group: until it is empty
        with contextlib.suppress(OSError):
            procs = (group / "cgroup.procs").read_text().split()
            if not procs:
                break
            for pid in procs:
                with contextlib.suppress(OSError):  # exited meanwhile
                    (root / "cgroup.procs").write_text(pid)
        time.sleep(0.02)
    os.rmdir(group)
    return [f"removed cgroup {group}"]


def remove_mount(point: Path) -> list[str]:
    """Each mount on `point` (lazily: a process still in it does not keep it)."""
    done = []
    while os.path.ismount(point):
        if subprocess.run(["umount", "-l", str(point)], capture_output=True).returncode != 0:
            return [*done, f"failed to unmount {point}"]
        done.append(f"unmounted {point}")
    return done


def remove_dir(path: Path) -> list[str]:
    if not path.exists() or os.path.ismount(path):  # never what is still mounted
        return []
    shutil.rmtree(path, ignore_errors=True)
    return [f"removed {path}"]


def remove_loop(image: str) -> list[str]:
    """Every loop device whose backing file is `image` (the kernel names a removed one
    "IMAGE (deleted)"): detached (lazily where it is still mounted)."""
    listed = subprocess.run(
        ["losetup", "--list", "--noheadings", "--raw", "--output", "NAME,BACK-FILE"], capture_output=True, text=True
    ).stdout
    done = []
    for line in listed.splitlines():
        name, _, back = line.partition(" ")
        ours = back.replace("\\x20", " ") in (image, f"{image} (deleted)")  # --raw escapes spaces
        if ours and subprocess.run(["losetup", "-d", name], capture_output=True).returncode == 0:
            done.append(f"detached {name} ({image})")
    return done


def remove_user(name: str) -> list[str]:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return []
    done = subprocess.run(["userdel", name], capture_output=True, timeout=60).returncode == 0
    return [f"deleted user {name}" if done else f"failed to delete user {name}"]


def reap(session: str, registry: Path) -> list[str]:
    """End the session's processes and remove what its registry names; what was done."""
    done = [f"ended {cmd}" for cmd in sweep(session)]
    found = list(entries(registry))
    claimed = {Path(e["path"]).name for e in found if e.get("kind") == "claim"}
    for entry in found:  # the compose stack's containers first: their processes hold its networks
        with contextlib.suppress(Exception):
            if entry.get("kind") == "podman":
                done += remove_podman(entry)
    for entry in found:
        kind = entry.get("kind")
        try:
            if kind == "lab":
                done += remove_lab(entry["name"], entry["owner"], Path(entry["state_dir"]), entry["name"] in claimed)
            elif kind == "netns":
                done += remove_netns(entry["name"])
        except Exception as exc:  # one that fails does not keep the rest
            done.append(f"failed to remove {entry}: {exc}")
    # Then what the session's processes held: cgroups, mounts (before the directories
    # they are on), scratch directories, users.  Only where the suite's names are.
    for kind, remove, fits in (
        ("cgroup", remove_cgroup, lambda p: p.is_relative_to(CGROUPS) and p.name.startswith("bbt-")),
        ("mount", remove_mount, _scratch),
        ("dir", remove_dir, _scratch),
    ):
        for entry in found:
            if entry.get("kind") == kind and fits(Path(entry["path"])):
                try:
                    done += remove(Path(entry["path"]))
                except Exception as exc:
                    done.append(f"failed to remove {entry}: {exc}")
    for entry in found:
        if entry.get("kind") == "loop" and str(entry.get("image", "")).startswith("/var/tmp/bigbinf-bbt"):
            try:
                done += remove_loop(entry["image"])
            except Exception as exc:
                done.append(f"failed to remove {entry}: {exc}")
    for entry in found:
        if entry.get("kind") == "user" and str(entry.get("name", "")).startswith(USERS):
            try:
                done += remove_user(entry["name"])
            except Exception as exc:
                done.append(f"failed to remove {entry}: {exc}")
    done += [f"ended {cmd}" for cmd in sweep(session)]
    for entry in found:
        if entry.get("kind") == "claim":
            with contextlib.suppress(OSError):
                os.rmdir(entry["path"])
    return done


def wait_for_end(session: str, lifeline: int = 0) -> None:
    """Until the lifeline reaches EOF or the controller no longer runs (a child forked
    from it may hold a copy of the lifeline)."""
    while guardian.alive(session):
        with contextlib.suppress(InterruptedError):
            ready, _, _ = select.select([lifeline], [], [], 1.0)
            if ready and not os.read(lifeline, 65536):
                return


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.support.session SESSION DIR (stdin: the lifeline)", file=sys.stderr)
        return 2
    session, directory = argv[0], Path(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    wait_for_end(session)
    done = reap(session, directory / "registry.jsonl")
    shutil.rmtree(directory, ignore_errors=True)
    if done:
        shown = "".join(f"\n  {line}" for line in done[:40])
        more = f"\n  ... and {len(done) - 40} more" if len(done) > 40 else ""
        print(f"bigbinf tests: the session ended; removed what it left:{shown}{more}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
