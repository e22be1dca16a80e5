"""Local container images for the compose stack test, built from Debian's packages.

No image registry can be reached here, so compose.yaml's images are made locally:

- the base: a Debian 12 root file system made with debootstrap against the apt mirror this
  machine's apt uses, with this machine's apt settings and local CA certificates (so apt
  and pip inside a build reach what they reach here), imported with `podman import`;
- the exporter: the repository's Dockerfile on that base (`--build-arg BASE_IMAGE`);
- the monitoring image: Prometheus, Alertmanager and node-exporter from Debian's packages
  (tests/e2e/compose_podman/Containerfile.monitoring).

What is kept between runs, deliberately (docs/benchmarks.md, "The compose stack"):
the root file system's tarball in CACHE_DIR, keyed by the hash of its inputs, and the
images tagged `localhost/bigbinf-e2e-*` (the base and monitoring images by their key, the
exporter as `:cache`, whose layers podman's build reuses: only the layers from the
exporter's code on are rebuilt when the code changed).  Older keys are removed when a new
one is made.  Builds hold a lock, so two runs never build the same thing at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent / "compose_podman"
CONTAINERS_CONF = HERE / "containers.conf"
MONITORING_CONTAINERFILE = HERE / "Containerfile.monitoring"
CACHE_DIR = Path(os.environ.get("BIGBINF_E2E_CACHE", "/var/cache/bigbinf/e2e"))
SUITE = "bookworm"
# What debootstrap adds to minbase: the Dockerfile installs the rest itself.
INCLUDE = ("ca-certificates",)
REPO = "localhost/bigbinf-e2e"
BASE, MONITORING, EXPORTER = f"{REPO}-base", f"{REPO}-monitoring", f"{REPO}-exporter"
# Bumped when what this module does to the root file system changes.
RECIPE = "1"


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def podman(*args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, env=podman_env(), timeout=timeout)
    if check and proc.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def leftovers(project: str, volumes: set[str] = frozenset()) -> dict[str, list[str]]:
    def names(*what: str) -> list[str]:
        return [n for n in podman(*what, "--format", "{{.Name}}").stdout.split() if project in n]

    found = {
        "containers": [n for n in podman("ps", "-a", "--format", "{{.Names}}").stdout.split() if project in n],
        "networks": names("network", "ls"),
        "volumes": [
            v for v in podman("volume", "ls", "--format", "{{.Name}}").stdout.split() if project in v or v in volumes
        ],
        "pods": names("pod", "ls"),
    }
    return {kind: names for kind, names in found.items() if names}


def remove_leftovers(project: str, volumes: set[str]) -> list[tuple[str, str]]:
    """What a failed `down` left (or a killed test session: tests/support/session.py): by
    the project's name, or volumes its containers mounted; (kind, name) of each removed."""
    found = leftovers(project, volumes)
    removed = []
    for kind, argv in (
        ("containers", ("rm", "-f", "-v")),
        ("pods", ("pod", "rm", "-f")),
        ("volumes", ("volume", "rm", "-f")),
        ("networks", ("network", "rm", "-f")),
    ):
        for name in found.get(kind, []):
            if podman(*argv, name, check=False).returncode == 0:
                removed.append((kind.rstrip("s"), name))
    return removed


IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")


def restore_host_networking(ip_forward: str) -> None:
    """Undo what netavark did to the host for the stack's networks: it turns on IPv4
    forwarding, and leaves an empty per-network port-forwarding chain in iptables' nat
    table.  `iptables -X` deletes a chain only when it is empty and nothing jumps to it,
    so a chain in use (another podman network's) is never touched."""
    if IP_FORWARD.read_text() != ip_forward:
        IP_FORWARD.write_text(ip_forward)
    if shutil.which("iptables"):
        listing = subprocess.run(["iptables", "-t", "nat", "-S"], capture_output=True, text=True, timeout=60).stdout
        for line in listing.splitlines():
            if line.startswith("-N NETAVARK-DN-"):
                chain = line.split()[1]
                subprocess.run(["iptables", "-t", "nat", "-X", chain], capture_output=True, timeout=60)


def apt_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 sources or the classic list), as
    scripts/setup.sh finds it."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.exists():
        for line in sources.read_text().splitlines():
            m = re.match(r"URIs:\s*(\S+)", line)
            if m and "security" not in m.group(1):
                return m.group(1)
    classic = Path("/etc/apt/sources.list")
    if classic.exists():
        for line in classic.read_text().splitlines():
            fields = line.split()
            if len(fields) >= 3 and fields[0] == "deb" and fields[2] == SUITE:
                return fields[1]
    raise RuntimeError(
        "no Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list: "
        "the compose stack test builds its base image with debootstrap from apt's mirror"
    )


def host_files() -> list[Path]:
    """This machine's files that go into the root file system: apt's sources and settings,
    and the local CA certificates (a proxy's, where one intercepts TLS)."""
    apt = Path("/etc/apt")
    files = [p for p in (apt / "sources.list.d").glob("*.sources") if p.is_file()]
    files += [p for p in (apt / "sources.list.d").glob("*.list") if p.is_file()]
    files += [p for p in (apt / "apt.conf.d").iterdir() if p.is_file()]
    files += [p for p in Path("/usr/local/share/ca-certificates").rglob("*.crt") if p.is_file()]
    return sorted(files)


def digest(*parts: str | bytes | Path) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.read_bytes() if isinstance(part, Path) else part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:16]


def rootfs_key(mirror: str) -> str:
    files = host_files()
    return digest(RECIPE, SUITE, mirror, ",".join(INCLUDE), *(str(p) for p in files), *files)


@contextmanager
def build_lock() -> Iterator[None]:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run(argv: Sequence[str], what: str, timeout: float = 1200) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr[-4000:]}")


def make_rootfs(mirror: str, tarball: Path) -> None:
    """debootstrap a minimal bookworm with this machine's apt settings and CAs, and pack it."""
    with tempfile.TemporaryDirectory(prefix="bbt-rootfs-", dir=CACHE_DIR) as tmp:
        rootfs = Path(tmp) / "rootfs"
        run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(INCLUDE)}", SUITE, str(rootfs), mirror],
            "debootstrap",
        )
        # apt inside a build must reach the mirror as apt does here (e.g. an archive snapshot
        # whose Release files have expired needs the same Acquire settings).
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        for src in host_files():
            dest = rootfs / src.relative_to("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
        run(["chroot", str(rootfs), "update-ca-certificates"], "update-ca-certificates in the root file system")
        run(["chroot", str(rootfs), "apt-get", "clean"], "apt-get clean in the root file system")
        for lists in (rootfs / "var/lib/apt/lists").glob("*_*"):
            lists.unlink()
        partial = tarball.with_suffix(".partial")
        run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."], "tar of the root file system")
        partial.rename(tarball)


def image_exists(ref: str) -> bool:
    return podman("image", "exists", ref, check=False).returncode == 0


def remove_other_tags(repo: str, keep: str) -> None:
    """Images of an older key: their inputs changed, nothing will use them again."""
    listing = podman("images", "--format", "{{.Repository}}:{{.Tag}}", repo).stdout.split()
    for ref in listing:
        if ref != keep and ref.startswith(repo + ":"):
            podman("rmi", ref, check=False)


@dataclass
class Images:
    base: str
    monitoring: str
    exporter: str
    timings: dict[str, float] = field(default_factory=dict)


def build(run_tag: str) -> Images:
    """The three images, from the cache where its keys match.  The exporter is tagged
    `run_tag` for this run (the caller removes that tag) and `:cache` for the next run."""
    timings: dict[str, float] = {}
    mirror = apt_mirror()
    with build_lock():
        key = rootfs_key(mirror)
        base = f"{BASE}:{key}"
        if not image_exists(base):
            tarball = CACHE_DIR / f"rootfs-{key}.tar"
            start = time.monotonic()
            if not tarball.exists():
                make_rootfs(mirror, tarball)
                for old in CACHE_DIR.glob("rootfs-*.tar"):
                    if old != tarball:
                        old.unlink()
            timings["debootstrap"] = time.monotonic() - start
            start = time.monotonic()
            podman("import", str(tarball), base)
            timings["import"] = time.monotonic() - start
            remove_other_tags(BASE, base)

        monitoring = f"{MONITORING}:{digest(key, MONITORING_CONTAINERFILE)}"
        if not image_exists(monitoring):
            start = time.monotonic()
            podman(
                "build", "--network", "host", "--build-arg", f"BASE_IMAGE={base}",
                "-f", str(MONITORING_CONTAINERFILE), "-t", monitoring, str(HERE),
                timeout=1800,
            )  # fmt: skip
            timings["monitoring_build"] = time.monotonic() - start
            remove_other_tags(MONITORING, monitoring)

        # The exporter: always built (podman's layer cache makes an unchanged tree a no-op,
        # and a changed one rebuild only from its first changed COPY).
        exporter = f"{EXPORTER}:{run_tag}"
        previous = podman("images", "-q", f"{EXPORTER}:cache").stdout.strip()
        start = time.monotonic()
        podman(
            "build", "--network", "host", "--layers", "--build-arg", f"BASE_IMAGE={base}",
            "-f", str(ROOT / "Dockerfile"), "-t", exporter, "-t", f"{EXPORTER}:cache", str(ROOT),
            timeout=2400,
        )  # fmt: skip
        timings["exporter_build"] = time.monotonic() - start
        current = podman("images", "-q", f"{EXPORTER}:cache").stdout.strip()
        if previous and previous != current:
            podman("rmi", previous, check=False)  # the last run's code: its own layers only
    return Images(base=base, monitoring=monitoring, exporter=exporter, timings=timings)
