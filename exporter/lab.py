"""A local lab that stands in for a remote site: `lab up | down | status`.

Two network namespaces, `<name>-client` and `<name>-remote`, joined by a veth pair with
addresses from 198.18.0.0/15 (the benchmarking range).  Nothing is added to the root
namespace, so the lab never touches the host's own networking, two labs with different
names coexist, and Prometheus on the host still scrapes the exporter on loopback while the
exporter runs transfers inside `<name>-client`.

The link is made to behave like a WAN link and to be measurable:
- offloads (TSO/GSO/GRO) off, so captured frames are real wire-sized frames;
- IPv6 off and static neighbour entries, so no ND/ARP chatter enters the interface
  counters that tests compare captures against;
- a tbf rate limit (and queue limit) on both ends; delay and loss through netem where the
  kernel has it.  Where it has not, the veth pair is cut in two by a third namespace,
  `<name>-wan`, that routes every packet through a userspace delay line (delayline.py,
  two TUN devices); the client's veth, where captures and counters are read, is the same.

`up` is idempotent; `down` removes every namespace, process and file `up` created.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .config import Config, DatasetConfig, LabConfig, LinkConfig
from . import datasets as dataset_files
from . import labservers
from .labservers import SERVERS
from .process import check_run, in_netns

MARKER = ".bigbinf-lab"  # down removes the state dir only if up created it


@dataclass(frozen=True)
class LabLayout:
    """Every name and path a lab uses, derived from its config alone."""

    config: LabConfig
    # Serve in the current network namespace (a container that is itself the remote
    # site: `lab serve`) instead of in <name>-remote.
    in_place: bool = False

    @property
    def client_ns(self) -> str:
        return f"{self.config.name}-client"

    @property
    def remote_ns(self) -> str:
        return f"{self.config.name}-remote"

    @property
    def client_if(self) -> str:
        return f"{self.config.name}-c"

    @property
    def remote_if(self) -> str:
        return f"{self.config.name}-r"

    # The delay line's namespace and devices (only where netem is missing and the link
    # asks for delay or loss): client <-> wan_client_if [wan] wan_remote_if <-> remote.
    @property
    def wan_ns(self) -> str:
        return f"{self.config.name}-wan"

    @property
    def wan_client_if(self) -> str:
        return f"{self.config.name}-wc"

    @property
    def wan_remote_if(self) -> str:
        return f"{self.config.name}-wr"

    @property
    def tun_to_remote(self) -> str:
        return f"{self.config.name}-da"

    @property
    def tun_to_client(self) -> str:
        return f"{self.config.name}-db"

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.client_ns, self.remote_ns, self.wan_ns)

    @property
    def state_dir(self) -> Path:
        return self.config.state_dir

    @property
    def serve_root(self) -> Path:
        """The tree every lab server serves: data/ (downloads) and upload/."""
        return self.state_dir / "srv"

    @property
    def data_dir(self) -> Path:
        return self.serve_root / "data"

    @property
    def upload_dir(self) -> Path:
        return self.serve_root / "upload"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    def config_file(self, name: str) -> Path:
        return self.state_dir / "etc" / name

    @property
    def checksums(self) -> Path:
        return self.data_dir / dataset_files.MANIFEST

    @property
    def client_key(self) -> Path:
        return self.state_dir / "client_ed25519"

    @property
    def host_key(self) -> Path:
        return self.state_dir / "host_ed25519"

    @property
    def ssh_config(self) -> Path:
        return self.state_dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def sshd_config(self) -> Path:
        return self.config_file("sshd_config")

    @property
    def authorized_keys(self) -> Path:
        return self.state_dir / "authorized_keys"

    def logfile(self, server: str) -> Path:
        return self.state_dir / "log" / f"{server}.log"


class LabError(RuntimeError):
    pass


def namespace_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def _ip(*args: str, what: str) -> str:
    return check_run(["ip", *args], what)


def _in(ns: str, argv: list[str], what: str) -> str:
    return check_run(in_netns(ns, argv), what)


# ---------------------------------------------------------------- network


def _exists(ns: str, ifname: str) -> bool:
    return subprocess.run(["ip", "-n", ns, "link", "show", ifname], capture_output=True).returncode == 0


def _veth(ns_a: str, if_a: str, ns_b: str, if_b: str) -> None:
    _ip("link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b, "netns", ns_b,
        what=f"create the veth pair {if_a}/{if_b}")


def _wire_end(ns: str, ifname: str, address: str | None, prefix_length: int) -> None:
    _in(ns, ["sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"], f"disable IPv6 on {ifname}")
    if address:
        _ip("-n", ns, "addr", "replace", f"{address}/{prefix_length}", "dev", ifname, what=f"address {ifname}")
    _ip("-n", ns, "link", "set", ifname, "up", what=f"bring up {ifname}")
    # Real wire-sized frames: without this the capture sees ~64 KB GSO "packets".
    _in(ns, ["ethtool", "-K", ifname, "tso", "off", "gso", "off", "gro", "off"], f"turn offloads off on {ifname}")


def _neigh(ns: str, ifname: str, address: str, peer_ns: str, peer_if: str) -> None:
    # Static neighbours: no ARP traffic in the interface counters or the captures.
    _ip("-n", ns, "neigh", "replace", address, "lladdr", _mac(peer_ns, peer_if), "dev", ifname,
        "nud", "permanent", what=f"static neighbour on {ifname}")


def _link_up(layout: LabLayout, via_wan: bool) -> None:
    """The client-remote link: one veth pair, or two through the delay line's namespace."""
    cfg = layout.config
    for ns in (layout.client_ns, layout.remote_ns, *((layout.wan_ns,) if via_wan else ())):
        if not namespace_exists(ns):
            _ip("netns", "add", ns, what=f"create namespace {ns}")
        _ip("-n", ns, "link", "set", "lo", "up", what=f"bring up lo in {ns}")
    if via_wan:
        # A direct pair from an earlier `up` goes (deleting one end deletes both).
        for ns, ifname, wan_if in ((layout.client_ns, layout.client_if, layout.wan_client_if),
                                   (layout.remote_ns, layout.remote_if, layout.wan_remote_if)):
            if not _exists(layout.wan_ns, wan_if):
                if _exists(ns, ifname):
                    _ip("-n", ns, "link", "del", ifname, what=f"remove the direct {ifname}")
                _veth(ns, ifname, layout.wan_ns, wan_if)
        client_peer, remote_peer = (layout.wan_ns, layout.wan_client_if), (layout.wan_ns, layout.wan_remote_if)
    else:
        if namespace_exists(layout.wan_ns):  # the delay line of an earlier `up` is not wanted now
            _remove_namespace(layout.wan_ns)
        if not (_exists(layout.client_ns, layout.client_if) and _exists(layout.remote_ns, layout.remote_if)):
            if _exists(layout.client_ns, layout.client_if):
                _ip("-n", layout.client_ns, "link", "del", layout.client_if, what=f"remove {layout.client_if}")
            _veth(layout.client_ns, layout.client_if, layout.remote_ns, layout.remote_if)
        client_peer, remote_peer = (layout.remote_ns, layout.remote_if), (layout.client_ns, layout.client_if)
    _wire_end(layout.client_ns, layout.client_if, cfg.client_address, cfg.prefix_length)
    _wire_end(layout.remote_ns, layout.remote_if, cfg.remote_address, cfg.prefix_length)
    _neigh(layout.client_ns, layout.client_if, cfg.remote_address, *client_peer)
    _neigh(layout.remote_ns, layout.remote_if, cfg.client_address, *remote_peer)
    if via_wan:
        _wan_up(layout)


def _wan_up(layout: LabLayout) -> None:
    """The middle namespace forwards between its two veths; routes through the delay line
    are added once its devices exist (_delay_line_up)."""
    cfg, ns = layout.config, layout.wan_ns
    for ifname in (layout.wan_client_if, layout.wan_remote_if):
        _wire_end(ns, ifname, None, cfg.prefix_length)
    _neigh(ns, layout.wan_client_if, cfg.client_address, layout.client_ns, layout.client_if)
    _neigh(ns, layout.wan_remote_if, cfg.remote_address, layout.remote_ns, layout.remote_if)
    # Packets re-enter from the TUN devices with the far end's source address: no
    # reverse-path filtering here.  Forwarding is switched on only by _delay_line_up,
    # once every packet is routed through the delay line: until then the namespace
    # carries nothing, rather than an undelayed link.
    for key in ("net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"):
        _in(ns, ["sysctl", "-qw", key], f"set {key} in {ns}")
    _ip("-n", ns, "route", "replace", f"{cfg.client_address}/32", "dev", layout.wan_client_if, what="route to client")
    _ip("-n", ns, "route", "replace", f"{cfg.remote_address}/32", "dev", layout.wan_remote_if, what="route to remote")


DELAY_LINE = "delayline"
# Policy routing in <name>-wan: what enters from one side goes into that side's TUN
# device; what the delay line writes back comes in on the other device and takes the
# main table.  A blackhole behind each: should the delay line die, the link drops
# packets instead of carrying them undelayed.
_WAN_TABLES = ((100, "wan_client_if", "tun_to_remote"), (101, "wan_remote_if", "tun_to_client"))


def _delay_line_pid(layout: LabLayout) -> int | None:
    try:
        pid = int((layout.run_dir / f"{DELAY_LINE}.pid").read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    return pid if b"exporter.delayline" in cmdline and _alive(str(pid)) else None


def _delay_line_up(layout: LabLayout, link: LinkConfig, timeout: float = 10.0) -> None:
    """Start (or keep) the delay line, then (re)apply its routing: idempotent, so an `up`
    after a failed one completes the link rather than trusting a live process."""
    ns, pidfile = layout.wan_ns, layout.run_dir / f"{DELAY_LINE}.pid"
    params = f"{link.delay:g} {link.loss:g}"
    pid = _delay_line_pid(layout)
    if pid and pidfile.read_text().split()[1:] != params.split():  # other delay or loss: restart it
        os.kill(pid, signal.SIGTERM)
        _wait_gone([str(pid)], 5.0)
        pid = None
    if pid is None:
        _start_delay_line(layout, params, timeout)
    for table, entry_if, tun in _WAN_TABLES:
        entry, device = getattr(layout, entry_if), getattr(layout, tun)
        _in(ns, ["sysctl", "-qw", f"net.ipv4.conf.{device}.rp_filter=0"], f"rp_filter on {device}")
        _ip("-n", ns, "route", "replace", "default", "dev", device, "table", str(table), what=f"route into {device}")
        _ip("-n", ns, "route", "replace", "blackhole", "default", "metric", "1000", "table", str(table),
            what=f"blackhole behind {device}")
        subprocess.run(["ip", "-n", ns, "rule", "del", "priority", str(table)], capture_output=True)
        _ip("-n", ns, "rule", "add", "priority", str(table), "iif", entry, "table", str(table),
            what=f"send {entry}'s packets into {device}")
    _in(ns, ["sysctl", "-qw", "net.ipv4.ip_forward=1"], f"switch on forwarding in {ns}")


def _start_delay_line(layout: LabLayout, params: str, timeout: float) -> None:
    ns, pidfile = layout.wan_ns, layout.run_dir / f"{DELAY_LINE}.pid"
    log_path = layout.logfile(DELAY_LINE)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(in_netns(ns, [sys.executable, "-m", "exporter.delayline", layout.tun_to_remote,
                                              layout.tun_to_client, *params.split()]),
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    pidfile.write_text(f"{proc.pid} {params}\n")
    deadline = time.monotonic() + timeout
    while not all(_exists(ns, t) for t in (layout.tun_to_remote, layout.tun_to_client)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()  # a half-started delay line must not be taken for a running one
            proc.wait()
            pidfile.unlink(missing_ok=True)
            raise LabError(f"the delay line did not start in {ns}; see {log_path}")
        time.sleep(0.05)


def _delay_line_routed(layout: LabLayout) -> bool:
    """Both policy rules in place and forwarding on: every packet goes through the line."""
    rules = subprocess.run(["ip", "-n", layout.wan_ns, "rule", "show"], capture_output=True, text=True).stdout
    forwarding = subprocess.run(["ip", "netns", "exec", layout.wan_ns, "sysctl", "-n", "net.ipv4.ip_forward"],
                                capture_output=True, text=True).stdout.strip()
    return forwarding == "1" and all(f"{table}:" in rules and f"lookup {table}" in rules
                                     for table, _, _ in _WAN_TABLES)


def _mac(ns: str, ifname: str) -> str:
    info = json.loads(_ip("-n", ns, "-j", "link", "show", "dev", ifname, what=f"read {ifname}"))
    return info[0]["address"]


def netem_available() -> bool:
    """Whether this kernel has sch_netem (absent on some cloud kernels)."""
    if Path("/sys/module/sch_netem").exists():
        return True
    return subprocess.run(["modprobe", "-q", "sch_netem"], capture_output=True).returncode == 0 \
        if shutil.which("modprobe") else False


def shape_argv(ifname: str, link: LinkConfig, with_netem: bool) -> list[list[str]]:
    """tc commands that give `ifname` the configured shape (run inside its namespace)."""
    cmds = [["tc", "qdisc", "del", "dev", ifname, "root"]]  # may fail when none: ignored
    tbf = []
    if link.rate:
        tbf = ["tbf", "rate", link.rate, "burst", str(link.burst)]
        tbf += ["limit", str(link.limit)] if link.limit else ["latency", "50ms"]
    wants_netem = link.delay > 0 or link.loss > 0
    if wants_netem and with_netem:
        netem = ["netem", "delay", f"{link.delay * 1000:g}ms", "loss", f"{link.loss:g}%"]
        cmds.append(["tc", "qdisc", "add", "dev", ifname, "root", "handle", "1:", *netem])
        if tbf:
            cmds.append(["tc", "qdisc", "add", "dev", ifname, "parent", "1:1", "handle", "10:", *tbf])
    elif tbf:
        cmds.append(["tc", "qdisc", "add", "dev", ifname, "root", "handle", "1:", *tbf])
    return cmds


def needs_delay_line(link: LinkConfig) -> bool:
    return (link.delay > 0 or link.loss > 0) and not netem_available()


def _shape(layout: LabLayout) -> list[str]:
    link = layout.config.link
    messages = []
    with_netem = netem_available()
    if (link.delay > 0 or link.loss > 0) and not with_netem:
        messages.append(f"netem is not available in this kernel: delay {link.delay * 1000:g}ms and loss "
                        f"{link.loss:g}% each way come from a userspace delay line in {layout.wan_ns}")
    for ns, ifname in ((layout.client_ns, layout.client_if), (layout.remote_ns, layout.remote_if)):
        first, *rest = shape_argv(ifname, link, with_netem)
        subprocess.run(in_netns(ns, first), capture_output=True)
        for argv in rest:
            _in(ns, argv, f"shape {ifname}")
    return messages


# ---------------------------------------------------------------- sshd


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    path.write_text(text)
    path.chmod(mode)


def _ssh_files(layout: LabLayout) -> None:
    for key in (layout.client_key, layout.host_key):
        if not key.exists():
            check_run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"bigbinf-lab-{layout.config.name}",
                       "-f", str(key)], f"generate {key.name}")
    addr = layout.config.remote_address
    _write(layout.authorized_keys, layout.client_key.with_suffix(".pub").read_text())
    _write(layout.known_hosts, f"{addr} {layout.host_key.with_suffix('.pub').read_text()}")
    _write(layout.ssh_config, "\n".join([
        f"Host {addr}", f"  IdentityFile {layout.client_key}", "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {layout.known_hosts}", "  StrictHostKeyChecking yes",
        "  BatchMode yes", "  Compression no", "  LogLevel ERROR", ""]))


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
            _wait_ssh_login(layout)
    return messages


def _wait_ssh_login(layout: LabLayout, timeout: float = 15.0) -> None:
    """sshd listening is not enough: the lab key must log in."""
    probe = in_netns(layout.client_ns, ["ssh", "-F", str(layout.ssh_config), "-o", "ConnectTimeout=2",
                                        f"root@{layout.config.remote_address}", "true"])
    deadline = time.monotonic() + timeout
    while True:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=10)
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise LabError(f"the lab key cannot log in to sshd in {layout.remote_ns}: {proc.stderr.strip()}; "
                           f"see {layout.logfile('sshd')}")
        time.sleep(0.2)


# ---------------------------------------------------------------- datasets


def _datasets(layout: LabLayout, datasets: dict[str, DatasetConfig]) -> list[str]:
    layout.data_dir.mkdir(parents=True, exist_ok=True)
    made = []
    for name, ds in datasets.items():
        if dataset_files.ensure(layout.data_dir, ds):
            what = f"{ds.count} x {ds.size} bytes" if ds.count > 1 else f"{ds.size} bytes"
            made.append(f"{name} ({ds.file}, {what})")
    return made


# ---------------------------------------------------------------- commands


def _claim_state_dir(layout: LabLayout) -> None:
    """`down` deletes the state dir, so `up` may only use one it creates (or created
    before): never an existing directory such as /var/lib/bigbinf or /var/tmp."""
    state, marker = layout.state_dir, layout.state_dir / MARKER
    if marker.exists():
        return
    if state.exists() and any(state.iterdir()):
        raise LabError(f"lab.state_dir {state} exists and was not made by `lab up` (`lab down` deletes the "
                       "state dir): choose a new directory, e.g. /var/lib/bigbinf/lab")
    state.mkdir(parents=True, exist_ok=True)
    marker.write_text(layout.config.name + "\n")


def _make_dirs(layout: LabLayout) -> None:
    blocked = [p for p in layout.state_dir.resolve().parents if p.exists() and not p.stat().st_mode & 0o001]
    if blocked:
        raise LabError(f"lab.state_dir {layout.state_dir}: {blocked[0]} is not searchable by other users, but the "
                       "lab's servers run as unprivileged users (ftp, xrootd); choose a state_dir under e.g. "
                       "/var/lib or /var/tmp, or chmod o+x the parent")
    # Readable by the unprivileged users servers run as (ftp, xrootd); keys stay 0600.
    for d in (layout.state_dir, layout.serve_root, layout.data_dir, layout.run_dir,
              layout.state_dir / "etc", layout.state_dir / "log"):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
    layout.upload_dir.mkdir(parents=True, exist_ok=True)
    layout.upload_dir.chmod(0o1777)  # servers write uploads as different users


def lab_servers(config: Config) -> list[str]:
    assert config.lab is not None
    return list(config.lab.servers) if config.lab.servers is not None else list(SERVERS)


def missing_server(config: Config, needed: tuple[str, ...]) -> str | None:
    """Why the lab cannot serve a transfer that needs these servers, or None when it can."""
    running = lab_servers(config)
    for name in needed:
        if name not in running:
            return f"the lab does not run {name} (lab.servers: {', '.join(running) or 'none'})"
        if not SERVERS[name].installed():
            return f"the lab's {name} server ({SERVERS[name].binary}) is not installed on this host"
    return None


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
    _claim_state_dir(layout)
    _make_dirs(layout)
    messages = []
    via_wan = needs_delay_line(config.lab.link)
    _link_up(layout, via_wan)
    messages += _shape(layout)
    if via_wan:
        _delay_line_up(layout, config.lab.link)
    _ssh_files(layout)
    made = _datasets(layout, lab_datasets(config))
    messages += _start_servers(layout, lab_servers(config))
    if made:
        messages.append("created datasets: " + ", ".join(made))
    messages.append(f"lab {config.lab.name} is up: client {config.lab.client_address} in {layout.client_ns}, "
                    f"remote {config.lab.remote_address} in {layout.remote_ns}")
    return messages


def serve(config: Config, stop: "threading.Event") -> None:
    """Run the lab's remote side in this network namespace until `stop` is set: for a
    container that is the remote site (compose.yaml).  Writes `<state_dir>/ready` once
    every server listens; stops every server it started on the way out."""
    if config.lab is None:
        raise LabError("the configuration has no lab: section")
    require_root()
    layout = LabLayout(config.lab, in_place=True)
    ready = layout.state_dir / "ready"
    ready.unlink(missing_ok=True)
    _claim_state_dir(layout)
    _make_dirs(layout)
    _ssh_files(layout)
    _datasets(layout, lab_datasets(config))
    pids = []
    try:
        for message in _start_servers(layout, lab_servers(config), pids):
            print(message, flush=True)
        ready.write_text("ready\n")
        print(f"lab {config.lab.name}: serving on {config.lab.remote_address} "
              f"({', '.join(n for n in lab_servers(config) if SERVERS[n].installed())})", flush=True)
        while not stop.wait(0.5):  # wake up: signal handlers run only between waits
            pass
    finally:
        ready.unlink(missing_ok=True)
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        _wait_gone([str(p) for p in pids], 5.0)


def down(config: Config) -> list[str]:
    if config.lab is None:
        raise LabError("the configuration has no lab: section")
    require_root()
    return teardown(LabLayout(config.lab))


def teardown(layout: LabLayout) -> list[str]:
    messages = []
    for ns in layout.namespaces:
        if namespace_exists(ns):
            messages += _remove_namespace(ns)
    for ns in (layout.client_ns, layout.remote_ns):
        hosts_dir = labservers.netns_hosts(ns).parent
        if hosts_dir.exists():
            shutil.rmtree(hosts_dir, ignore_errors=True)
            messages.append(f"removed {hosts_dir}")
    if (layout.state_dir / MARKER).exists():
        shutil.rmtree(layout.state_dir, ignore_errors=True)
        messages.append(f"removed {layout.state_dir}")
    return messages or [f"lab {layout.config.name} was not up"]


def _remove_namespace(ns: str) -> list[str]:
    # Every process in the lab's namespaces is ours (servers, stray transfers, the delay
    # line): stop them by PID before the namespace goes, so none survives holding it.
    messages = []
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(int(pid), sig)
            except (ProcessLookupError, ValueError):
                pass
        if sig == signal.SIGTERM and pids:
            _wait_gone(pids, 3.0)
    if pids:
        messages.append(f"stopped {len(pids)} process(es) in {ns}")
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    messages.append(f"deleted namespace {ns}")
    return messages


def _alive(pid: str) -> bool:
    """Running, not a zombie (a server started by this very process, e.g. in tests, stays
    a zombie until reaped; it is gone all the same)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)


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
        report("namespace", namespace_exists(ns), ns)
    if namespace_exists(layout.client_ns):
        link = subprocess.run(["ip", "-n", layout.client_ns, "-br", "addr", "show", layout.client_if],
                              capture_output=True, text=True).stdout.strip()
        report("veth", "UP" in link, link or layout.client_if)
        qdisc = subprocess.run(["tc", "-n", layout.client_ns, "qdisc", "show", "dev", layout.client_if],
                               capture_output=True, text=True).stdout.strip().splitlines()
        lines.append(f"{'shape':<12} {'':<5} {'; '.join(qdisc) or 'none'}")
    for name in lab_servers(config):
        server = SERVERS[name]
        if not server.installed():
            lines.append(f"{name:<12} {'':<5} not installed ({server.serves} will be skipped)")
            continue
        pid = labservers.running_pid(layout, server)
        good = pid is not None and labservers.listening(layout, server)
        report(name, good, f"pid {pid}, port {server.port} ({server.serves})" if good
               else f"not running (log {layout.logfile(name + '.stdout')})")
    sums = dataset_files.read_manifest(layout.checksums)
    for name, ds in lab_datasets(config).items():
        members = dataset_files.member_names(ds)
        good = all((layout.data_dir / m).exists() and m in sums for m in members)
        what = f"{ds.count} x {ds.size} bytes" if ds.count > 1 else f"{ds.size} bytes"
        report("dataset", good, f"{name}: {layout.data_dir / ds.file} ({what})")
    link = config.lab.link
    if needs_delay_line(link):
        pid = _delay_line_pid(layout)
        routed = pid is not None and _delay_line_routed(layout)
        report("delay line", routed,
               f"pid {pid}, {link.delay * 1000:g}ms and {link.loss:g}% loss each way in {layout.wan_ns}" if routed
               else f"running (pid {pid}) but not routed: run `lab up` again" if pid
               else f"not running (log {layout.logfile(DELAY_LINE)})")
    elif not netem_available():
        lines.append(f"{'netem':<12} {'':<5} not available in this kernel: delay/loss would use a userspace delay line")
    return ok, lines
