"""A local lab that stands in for a remote site: `lab up | down | status | serve`.

Two network namespaces, `<name>-client` and `<name>-remote`, joined by a veth pair with
addresses from 198.18.0.0/15 (the benchmarking range; network.py builds it).  Nothing is
added to the root namespace, so the lab never touches the host's own networking, two labs
with different names coexist, and Prometheus on the host still scrapes the exporter on
loopback while the exporter runs transfers inside `<name>-client`.  The remote namespace
runs one server per protocol (servers.py), all serving the lab's datasets.

`up` is idempotent; `down` removes every namespace, process and file `up` created.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bigbinf.config import Config, DatasetConfig, rate_bytes_per_second
from bigbinf.lab import network
from bigbinf.lab import servers as labservers
from bigbinf.lab.layout import LabError, LabLayout
from bigbinf.lab.servers import SERVERS, write_file
from bigbinf.measure import datasets as dataset_files
from bigbinf.measure.plan import Remote
from bigbinf.process import check_run, in_netns, netns_exists

MARKER = ".bigbinf-lab"  # down removes the state dir only if up created it


# ---------------------------------------------------------------- sshd


def _ssh_files(layout: LabLayout) -> None:
    for key in (layout.client_key, layout.host_key):
        if not key.exists():
            check_run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    f"bigbinf-lab-{layout.config.name}",
                    "-f",
                    str(key),
                ],
                f"generate {key.name}",
            )
    addr = layout.config.remote_address
    write_file(layout.authorized_keys, layout.client_key.with_suffix(".pub").read_text(), 0o600)
    write_file(layout.known_hosts, f"{addr} {layout.host_key.with_suffix('.pub').read_text()}", 0o600)
    write_file(layout.ssh_config, "\n".join(ssh_host_entry(addr, layout.client_key, layout.known_hosts)), 0o600)


def ssh_host_entry(address: str, key: Path, known_hosts: Path) -> list[str]:
    """The ssh_config lines for one lab sshd (a lab mesh writes one per site)."""
    return [
        f"Host {address}",
        f"  IdentityFile {key}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {known_hosts}",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  Compression no",
        "  LogLevel ERROR",
        "",
    ]


def _start_servers(layout: LabLayout, names: list[str], pids: list[int] | None = None) -> list[str]:
    messages = []
    for name in names:
        server = SERVERS[name]
        if not server.installed():
            messages.append(f"{name} is not installed: {server.serves} transfers will be skipped")
            continue
        if layout.in_place and server.side == "client":
            continue  # the client side is the other container's business
        try:
            pid = labservers.start(layout, server)
        except labservers.ServerError as exc:
            raise LabError(str(exc)) from None
        if pids is not None:
            pids.append(pid)
        if name == "sshd" and not layout.in_place:
            wait_ssh_login(
                layout.client_ns,
                layout.ssh_config,
                layout.config.remote_address,
                f"the lab key cannot log in to sshd in {layout.remote_ns}",
                layout.logfile("sshd"),
            )
    return messages


def wait_ssh_login(ns: str, ssh_config: Path, address: str, what: str, log: Path, timeout: float = 15.0) -> None:
    """Wait until `ssh -F ssh_config root@address true` succeeds from namespace ns: sshd
    listening is not enough, the lab key must log in.  Gives up after `timeout` seconds
    with a LabError that starts with `what` and names sshd's log."""
    probe = in_netns(ns, ["ssh", "-F", str(ssh_config), "-o", "ConnectTimeout=2", f"root@{address}", "true"])
    deadline = time.monotonic() + timeout
    while True:
        try:
            proc = subprocess.run(probe, capture_output=True, text=True, timeout=10)
            error = proc.stderr.strip() if proc.returncode else ""
        except subprocess.TimeoutExpired:
            proc, error = None, "ssh did not finish within 10 s (a login that hangs)"
        if proc is not None and proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise LabError(f"{what} ({address}): {error}; see {log}")
        time.sleep(0.2)


# ---------------------------------------------------------------- datasets


def ensure_datasets(layout: LabLayout, datasets: dict[str, DatasetConfig]) -> list[str]:
    """Create the datasets missing from the layout's data_dir; returns the ones made."""
    layout.data_dir.mkdir(parents=True, exist_ok=True)
    made = []
    for name, ds in datasets.items():
        if dataset_files.ensure(layout.data_dir, ds):
            made.append(f"{name} ({ds.file}, {dataset_files.describe(ds)})")
    return made


# ---------------------------------------------------------------- commands


def _marker_owner(text: str) -> str:
    return f"the lab mesh {text[5:]}" if text.startswith("mesh ") else f"the lab {text}"


def owns_state_dir(state: Path, owner: str) -> bool:
    """Whether `lab up` made state for this owner (its marker holds `owner`): only then may
    `down` delete it."""
    try:
        return (state / MARKER).read_text().strip() == owner
    except OSError:
        return False


def claim_state_dir(state: Path, owner: str, example: str) -> None:
    """`down` deletes the state dir, so `up` may only use one it creates (or created before
    for the same owner): never an existing directory such as /var/lib/bigbinf or /var/tmp,
    nor another lab's.  owner: the marker's text, the lab's name ("mesh NAME" for a lab
    mesh); example: a directory the error suggests instead."""
    marker = state / MARKER
    if marker.exists():
        other = marker.read_text().strip()
        if other == owner:
            return
        raise LabError(
            f"lab.state_dir {state} belongs to {_marker_owner(other)} (its {MARKER} says so), not to "
            f"{_marker_owner(owner)}: two labs cannot share a state dir (`lab down` of either deletes it); "
            f"give {_marker_owner(owner)} its own state_dir, e.g. {example}"
        )
    if state.exists() and any(state.iterdir()):
        raise LabError(
            f"lab.state_dir {state} exists and was not made by `lab up` (`lab down` deletes the "
            f"state dir): choose a new directory, e.g. {example}"
        )
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o755)  # the servers run as other users (ftp, xrootd) below it
    marker.write_text(owner + "\n")


def make_dirs(layout: LabLayout) -> None:
    """The layout's state, serve, data, run, etc and log directories, readable by the
    servers' users; refuses a state_dir other users cannot reach."""
    blocked = [p for p in layout.state_dir.resolve().parents if p.exists() and not p.stat().st_mode & 0o001]
    if blocked:
        raise LabError(
            f"lab.state_dir {layout.state_dir}: {blocked[0]} is not searchable by other users, but the "
            "lab's servers run as unprivileged users (ftp, xrootd); choose a state_dir under e.g. "
            "/var/lib or /var/tmp, or chmod o+x the parent"
        )
    # Readable by the unprivileged users servers run as (ftp, xrootd); keys stay 0600.
    for d in (
        layout.state_dir,
        layout.serve_root,
        layout.data_dir,
        layout.run_dir,
        layout.state_dir / "etc",
        layout.state_dir / "log",
    ):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
    layout.upload_dir.mkdir(parents=True, exist_ok=True)
    layout.upload_dir.chmod(0o1777)  # servers write uploads as different users


def servers_status(
    layout: LabLayout, servers: list[str], datasets: dict[str, DatasetConfig], skipped: str
) -> list[tuple[str, bool | None, str]]:
    """(component, up?, detail) for each server and dataset of a lab (or a mesh site); up
    is None for a server that is not installed (a note, not a failure): its protocol's
    transfers then `skipped` says what."""
    out: list[tuple[str, bool | None, str]] = []
    for name in servers:
        server = SERVERS[name]
        if not server.installed():
            out.append((name, None, f"not installed ({server.serves} {skipped})"))
            continue
        pid = labservers.running_pid(layout, server)
        good = pid is not None and labservers.listening(layout, server)
        detail = (
            f"pid {pid}, port {server.port} ({server.serves})"
            if good
            else f"not running (log {layout.logfile(name + '.stdout')})"
        )
        out.append((name, good, detail))
    sums = dataset_files.read_manifest(layout.checksums)
    for name, ds in datasets.items():
        good = all((layout.data_dir / m).exists() and m in sums for m in dataset_files.member_names(ds))
        out.append(("dataset", good, f"{name}: {layout.data_dir / ds.file} ({dataset_files.describe(ds)})"))
    return out


def lab_servers(config: Config) -> list[str]:
    assert config.lab is not None
    return list(config.lab.servers) if config.lab.servers is not None else list(SERVERS)


def missing_server(config: Config, needed: tuple[str, ...]) -> str:
    """Why the lab cannot serve a transfer that needs these servers; "" when it can."""
    running = lab_servers(config)
    for name in needed:
        if name not in running:
            return f"the lab does not run {name} (lab.servers: {', '.join(running) or 'none'})"
        if not SERVERS[name].installed():
            return f"the lab's {name} server ({SERVERS[name].binary}) is not installed on this host"
    return ""


@dataclass(frozen=True)
class LabSite:
    """The lab as the live path sees it (measure.plan.LabSite): a remote site whose
    address, key, namespace and directories are the lab's, and whose servers are known."""

    config: Config

    def remote(self, name: str, password_env: str | None) -> Remote:
        assert self.config.lab is not None  # site() gives a LabSite only for a config with a lab
        layout = LabLayout(self.config.lab)
        return Remote(
            name=name,
            address=self.config.lab.remote_address,
            port=22,
            user="root",
            key=layout.client_key,
            ssh_config=layout.ssh_config,
            data_dir=layout.data_dir,
            upload_dir=layout.upload_dir,
            serve_root=layout.serve_root,
            checksums=layout.checksums,
            netns=layout.client_ns,
            interface=layout.client_if,
            password_env=password_env,
            local_fs=True,
            # The lab's own remote: its sockets and sysctls are read in its namespace.
            stats_command=("ip", "netns", "exec", layout.remote_ns),
            # ... and its routes and sysctls set there (a protocol's congestion, tcp_buffer_max).
            tcp_command=("ip", "netns", "exec", layout.remote_ns),
            # The delay line, where the link has one: its waits for a CPU are this host's.
            path_pid_file=layout.run_dir / f"{network.DELAY_LINE}.pid",
            **_lab_bandwidth(self.config.lab.link.rate),
        )

    def unavailable(self, servers: tuple[str, ...]) -> str:
        return missing_server(self.config, servers)


def _lab_bandwidth(rate: str | None) -> dict[str, Any]:
    if rate is None:  # an unshaped veth: no bottleneck worth naming
        return {}
    return {"bandwidth_bytes_per_second": rate_bytes_per_second(rate), "bandwidth_source": "lab"}


def site(config: Config) -> LabSite | None:
    """The lab a config's `lab: true` remotes stand for (None without a lab: section):
    what cli.py hands the live path, which never imports the lab."""
    return LabSite(config) if config.lab is not None else None


def lab_datasets(config: Config) -> dict[str, DatasetConfig]:
    assert config.lab is not None
    names = config.lab.datasets or list(config.datasets)
    return {n: config.datasets[n] for n in names}


def require_root() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, tc, tcpdump): run it with sudo")


def up(config: Config) -> list[str]:
    """Create (or complete) the lab; returns human-readable messages."""
    if config.lab is None:
        raise LabError("the configuration has no lab: section")
    require_root()
    layout = LabLayout(config.lab)
    claim_state_dir(layout.state_dir, config.lab.name, "/var/lib/bigbinf/lab")
    make_dirs(layout)
    messages = []
    via_wan = network.needs_delay_line(config.lab.link)
    network.link_up(layout, via_wan)
    messages += network.shape(layout)
    if via_wan:
        network.delay_line_up(layout, config.lab.link)
    _ssh_files(layout)
    made = ensure_datasets(layout, lab_datasets(config))
    messages += _start_servers(layout, lab_servers(config))
    if made:
        messages.append("created datasets: " + ", ".join(made))
    messages.append(
        f"lab {config.lab.name} is up: client {config.lab.client_address} in {layout.client_ns}, "
        f"remote {config.lab.remote_address} in {layout.remote_ns}"
    )
    return messages


def serve(config: Config, stop: threading.Event) -> None:
    """Run the lab's remote side in this network namespace until `stop` is set: for a
    container that is the remote site (compose.yaml).  Writes `<state_dir>/ready` once
    every server listens; stops every server it started on the way out."""
    if config.lab is None:
        raise LabError("the configuration has no lab: section")
    require_root()
    layout = LabLayout(config.lab, in_place=True)
    ready = layout.state_dir / "ready"
    ready.unlink(missing_ok=True)
    claim_state_dir(layout.state_dir, config.lab.name, "/var/lib/bigbinf/lab")
    make_dirs(layout)
    _ssh_files(layout)
    ensure_datasets(layout, lab_datasets(config))
    pids: list[int] = []
    try:
        for message in _start_servers(layout, lab_servers(config), pids):
            print(message, flush=True)
        ready.write_text("ready\n")
        print(
            f"lab {config.lab.name}: serving on {config.lab.remote_address} "
            f"({', '.join(n for n in lab_servers(config) if SERVERS[n].installed())})",
            flush=True,
        )
        while not stop.wait(0.5):  # wake up: signal handlers run only between waits
            pass
    finally:
        ready.unlink(missing_ok=True)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        network.wait_gone([str(p) for p in pids], 5.0)


def down(config: Config) -> list[str]:
    if config.lab is None:
        raise LabError("the configuration has no lab: section")
    require_root()
    return teardown(LabLayout(config.lab))


def teardown(layout: LabLayout) -> list[str]:
    messages = []
    for ns in layout.namespaces:
        if netns_exists(ns):
            messages += network.remove_namespace(ns)
    for ns in (layout.client_ns, layout.remote_ns):
        hosts_dir = labservers.netns_hosts(ns).parent
        if hosts_dir.exists():
            shutil.rmtree(hosts_dir, ignore_errors=True)
            messages.append(f"removed {hosts_dir}")
    if owns_state_dir(layout.state_dir, layout.config.name):
        shutil.rmtree(layout.state_dir, ignore_errors=True)
        messages.append(f"removed {layout.state_dir}")
    return messages or [f"lab {layout.config.name} was not up"]


def status(config: Config) -> tuple[bool, list[str]]:
    """(everything up?, one line per component)."""
    if config.lab is None:
        raise LabError("the configuration has no lab: section")
    layout = LabLayout(config.lab)
    lines = []
    ok = True

    def report(name: str, good: bool, detail: str) -> None:
        nonlocal ok
        ok = ok and good
        lines.append(f"{name:<12} {'up' if good else 'DOWN':<5} {detail}")

    for ns in (layout.client_ns, layout.remote_ns):
        report("namespace", netns_exists(ns), ns)
    if netns_exists(layout.client_ns):
        link = subprocess.run(
            ["ip", "-n", layout.client_ns, "-br", "addr", "show", layout.client_if], capture_output=True, text=True
        ).stdout.strip()
        report("veth", "UP" in link, link or layout.client_if)
        qdisc = (
            subprocess.run(
                ["tc", "-n", layout.client_ns, "qdisc", "show", "dev", layout.client_if], capture_output=True, text=True
            )
            .stdout.strip()
            .splitlines()
        )
        lines.append(f"{'shape':<12} {'':<5} {'; '.join(qdisc) or 'none'}")
    for name, good, detail in servers_status(layout, lab_servers(config), lab_datasets(config), "will be skipped"):
        if good is None:
            lines.append(f"{name:<12} {'':<5} {detail}")
        else:
            report(name, good, detail)
    shape = config.lab.link
    if network.needs_delay_line(shape):
        pid = network.delay_line_pid(layout)
        routed = pid is not None and network.delay_line_routed(layout)
        report(
            "delay line",
            routed,
            f"pid {pid}, {shape.delay * 1000:g}ms and {shape.loss:g}% loss each way in {layout.wan_ns}"
            if routed
            else f"running (pid {pid}) but not routed: run `lab up` again"
            if pid
            else f"not running (log {layout.logfile(network.DELAY_LINE)})",
        )
    elif not network.netem_available():
        lines.append(f"{'netem':<12} {'':<5} not available in this kernel: delay/loss would use a userspace delay line")
    return ok, lines
