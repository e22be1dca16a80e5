"""The lab's network: namespaces, veth pairs, shaping (tbf, netem) and the delay line.

The link is made to behave like a WAN link and to be measurable:
- offloads (TSO/GSO/GRO) off, so captured frames are real wire-sized frames;
- IPv6 off and static neighbour entries, so no ND/ARP chatter enters the interface
  counters that tests compare captures against;
- a TCP hash table of each namespace's own (add_namespace), so that `ss` costs
  microseconds there, not milliseconds;
- a tbf rate limit (and queue limit) on both ends; delay and loss through netem where the
  kernel has it.  Where it has not, the veth pair is cut in two by a third namespace,
  `<name>-wan`, that routes every packet through a userspace delay line (delayline.py,
  two TUN devices); the client's veth, where captures and counters are read, is the same.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from bigbinf.config import LinkConfig
from bigbinf.lab.layout import LabError, LabLayout
from bigbinf.process import check_run, in_netns, netns_exists, unmarked_env


def ip(*args: str, what: str) -> str:
    """Run `ip ARGS`; a failure raises with `what` (measure.process.check_run)."""
    return check_run(["ip", *args], what)


def run_in(ns: str, argv: list[str], what: str) -> str:
    """Run argv in namespace ns; a failure raises with `what`."""
    return check_run(in_netns(ns, argv), what)


# A lab namespace gets a TCP hash table of its own, this many buckets (kernel >= 5.19),
# not the host's: `ss` (the TCP state listings and the capture's socket checks) walks
# every bucket of the table it dumps, and a namespace shares the host's by default
# (262,144 buckets on a 24 GiB host: 3.6 ms of kernel time per listing and family, a
# listing every 50 ms of a short transfer on each end).  A few thousand sockets at most
# live in a lab namespace; the chains stay short.
LAB_TCP_HASH_BUCKETS = 8192
_CHILD_EHASH = Path("/proc/sys/net/ipv4/tcp_child_ehash_entries")


def add_namespace(ns: str) -> None:
    """`ip netns add ns`, with its own small TCP hash table where the kernel allows.

    The sysctl sizes the tables of namespaces created while it is set, so it is set for
    the creation and put back, under an exclusive lock on the sysctl's own file (another
    lab coming up at the same moment waits rather than putting back our value).  Killed
    in between, the host keeps the value: later namespaces then get 8,192 buckets too,
    which costs them nothing."""
    try:
        fd = os.open(_CHILD_EHASH, os.O_RDWR)
    except OSError:  # an older kernel: the shared table, as before
        ip("netns", "add", ns, what=f"create namespace {ns}")
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        before = os.pread(fd, 64, 0).strip()
        os.pwrite(fd, str(LAB_TCP_HASH_BUCKETS).encode(), 0)
        try:
            ip("netns", "add", ns, what=f"create namespace {ns}")
        finally:
            os.pwrite(fd, before or b"0", 0)
    finally:
        os.close(fd)  # the lock goes with it


def link_exists(ns: str, ifname: str) -> bool:
    """Whether namespace ns has a device named ifname."""
    return subprocess.run(["ip", "-n", ns, "link", "show", ifname], capture_output=True).returncode == 0


def device_up(ns: str, ifname: str) -> bool:
    """Whether namespace ns has a device named ifname, set up (administratively)."""
    shown = subprocess.run(["ip", "-n", ns, "-j", "link", "show", ifname], capture_output=True, text=True)
    try:
        return shown.returncode == 0 and "UP" in json.loads(shown.stdout)[0].get("flags", [])
    except (ValueError, IndexError, AttributeError):
        return False


def veth(ns_a: str, if_a: str, ns_b: str, if_b: str) -> None:
    """Create the veth pair if_a (in ns_a) / if_b (in ns_b)."""
    ip(
        "link",
        "add",
        if_a,
        "netns",
        ns_a,
        "type",
        "veth",
        "peer",
        "name",
        if_b,
        "netns",
        ns_b,
        what=f"create the veth pair {if_a}/{if_b}",
    )


def wire_end(ns: str, ifname: str, address: str | None, prefix_length: int) -> None:
    """Make one end of a lab link measurable: IPv6 off, the address (if any), up, offloads off."""
    run_in(ns, ["sysctl", "-qw", f"net.ipv6.conf.{ifname}.disable_ipv6=1"], f"disable IPv6 on {ifname}")
    if address:
        ip("-n", ns, "addr", "replace", f"{address}/{prefix_length}", "dev", ifname, what=f"address {ifname}")
    ip("-n", ns, "link", "set", ifname, "up", what=f"bring up {ifname}")
    # Real wire-sized frames: without this the capture sees ~64 KB GSO "packets".
    run_in(ns, ["ethtool", "-K", ifname, "tso", "off", "gso", "off", "gro", "off"], f"turn offloads off on {ifname}")


def neigh(ns: str, ifname: str, address: str, peer_ns: str, peer_if: str) -> None:
    """A permanent neighbour entry on ifname: address is at peer_if's MAC (in peer_ns), so
    no ARP traffic enters the interface counters or the captures."""
    ip(
        "-n",
        ns,
        "neigh",
        "replace",
        address,
        "lladdr",
        mac(peer_ns, peer_if),
        "dev",
        ifname,
        "nud",
        "permanent",
        what=f"static neighbour on {ifname}",
    )


def link_up(layout: LabLayout, via_wan: bool) -> None:
    """The client-remote link: one veth pair, or two through the delay line's namespace."""
    cfg = layout.config
    for ns in (layout.client_ns, layout.remote_ns, *((layout.wan_ns,) if via_wan else ())):
        if not netns_exists(ns):
            add_namespace(ns)
        ip("-n", ns, "link", "set", "lo", "up", what=f"bring up lo in {ns}")
    if via_wan:
        # A direct pair from an earlier `up` goes (deleting one end deletes both).
        for ns, ifname, wan_if in (
            (layout.client_ns, layout.client_if, layout.wan_client_if),
            (layout.remote_ns, layout.remote_if, layout.wan_remote_if),
        ):
            if not link_exists(layout.wan_ns, wan_if):
                if link_exists(ns, ifname):
                    ip("-n", ns, "link", "del", ifname, what=f"remove the direct {ifname}")
                veth(ns, ifname, layout.wan_ns, wan_if)
        client_peer, remote_peer = (layout.wan_ns, layout.wan_client_if), (layout.wan_ns, layout.wan_remote_if)
    else:
        if netns_exists(layout.wan_ns):  # the delay line of an earlier `up` is not wanted now
            remove_namespace(layout.wan_ns)
        if not (link_exists(layout.client_ns, layout.client_if) and link_exists(layout.remote_ns, layout.remote_if)):
            if link_exists(layout.client_ns, layout.client_if):
                ip("-n", layout.client_ns, "link", "del", layout.client_if, what=f"remove {layout.client_if}")
            veth(layout.client_ns, layout.client_if, layout.remote_ns, layout.remote_if)
        client_peer, remote_peer = (layout.remote_ns, layout.remote_if), (layout.client_ns, layout.client_if)
    wire_end(layout.client_ns, layout.client_if, cfg.client_address, cfg.prefix_length)
    wire_end(layout.remote_ns, layout.remote_if, cfg.remote_address, cfg.prefix_length)
    neigh(layout.client_ns, layout.client_if, cfg.remote_address, *client_peer)
    neigh(layout.remote_ns, layout.remote_if, cfg.client_address, *remote_peer)
    if via_wan:
        _wan_up(layout)


def _wan_up(layout: LabLayout) -> None:
    """The middle namespace forwards between its two veths; routes through the delay line
    are added once its devices exist (_delay_line_up)."""
    cfg, ns = layout.config, layout.wan_ns
    for ifname in (layout.wan_client_if, layout.wan_remote_if):
        wire_end(ns, ifname, None, cfg.prefix_length)
    neigh(ns, layout.wan_client_if, cfg.client_address, layout.client_ns, layout.client_if)
    neigh(ns, layout.wan_remote_if, cfg.remote_address, layout.remote_ns, layout.remote_if)
    # Packets re-enter from the TUN devices with the far end's source address: no
    # reverse-path filtering here.  Forwarding is switched on only by _delay_line_up,
    # once every packet is routed through the delay line: until then the namespace
    # carries nothing, rather than an undelayed link.
    for key in ("net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"):
        run_in(ns, ["sysctl", "-qw", key], f"set {key} in {ns}")
    ip("-n", ns, "route", "replace", f"{cfg.client_address}/32", "dev", layout.wan_client_if, what="route to client")
    ip("-n", ns, "route", "replace", f"{cfg.remote_address}/32", "dev", layout.wan_remote_if, what="route to remote")


DELAY_LINE = "delayline"
# Policy routing in <name>-wan: what enters from one side goes into that side's TUN
# device; what the delay line writes back comes in on the other device and takes the
# main table.  A blackhole behind each: should the delay line die, the link drops
# packets instead of carrying them undelayed.
_WAN_TABLES = ((100, "wan_client_if", "tun_to_remote"), (101, "wan_remote_if", "tun_to_client"))


def delay_line_control(layout: LabLayout) -> Path:
    """The delay line's router settings (delayline.py --control: reordering, a packet
    rate), read on SIGHUP; the lab writes none, a test's cause may."""
    return layout.run_dir / f"{DELAY_LINE}.control.json"


def delay_line_pid(layout: LabLayout) -> int | None:
    try:
        pid = int((layout.run_dir / f"{DELAY_LINE}.pid").read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError, IndexError):
        return None
    # exporter.delayline: the module's name in a lab brought up before the package was bigbinf.
    started_by_us = b"bigbinf.lab.delayline" in cmdline or b"exporter.delayline" in cmdline
    return pid if started_by_us and alive(str(pid)) else None


def delay_line_up(layout: LabLayout, link: LinkConfig, timeout: float = 10.0) -> None:
    """Start (or keep) the delay line, then (re)apply its routing: idempotent, so an `up`
    after a failed one completes the link rather than trusting a live process."""
    ns, pidfile = layout.wan_ns, layout.run_dir / f"{DELAY_LINE}.pid"
    params = f"{link.delay:g} {link.loss:g}"
    pid = delay_line_pid(layout)
    if pid and pidfile.read_text().split()[1:] != params.split():  # other delay or loss: restart it
        os.kill(pid, signal.SIGTERM)
        wait_gone([str(pid)], 5.0)
        pid = None
    if pid is None:
        _start_delay_line(layout, params, timeout)
    for table, entry_if, tun in _WAN_TABLES:
        entry, device = getattr(layout, entry_if), getattr(layout, tun)
        run_in(ns, ["sysctl", "-qw", f"net.ipv4.conf.{device}.rp_filter=0"], f"rp_filter on {device}")
        ip("-n", ns, "route", "replace", "default", "dev", device, "table", str(table), what=f"route into {device}")
        ip(
            "-n",
            ns,
            "route",
            "replace",
            "blackhole",
            "default",
            "metric",
            "1000",
            "table",
            str(table),
            what=f"blackhole behind {device}",
        )
        subprocess.run(["ip", "-n", ns, "rule", "del", "priority", str(table)], capture_output=True)
        ip(
            "-n",
            ns,
            "rule",
            "add",
            "priority",
            str(table),
            "iif",
            entry,
            "table",
            str(table),
            what=f"send {entry}'s packets into {device}",
        )
    run_in(ns, ["sysctl", "-qw", "net.ipv4.ip_forward=1"], f"switch on forwarding in {ns}")


def _start_delay_line(layout: LabLayout, params: str, timeout: float) -> None:
    ns, pidfile = layout.wan_ns, layout.run_dir / f"{DELAY_LINE}.pid"
    log_path = layout.logfile(DELAY_LINE)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            in_netns(
                ns,
                [
                    sys.executable,
                    "-m",
                    "bigbinf.lab.delayline",
                    "--control",
                    str(delay_line_control(layout)),
                    layout.tun_to_remote,
                    layout.tun_to_client,
                    *params.split(),
                ],
            ),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=unmarked_env(),  # the lab's, not an exporter's to end with it
        )
    pidfile.write_text(f"{proc.pid} {params}\n")
    deadline = time.monotonic() + timeout
    # Up, not only there: the line creates each device, then sets it up (a route into a
    # device that is not up yet fails: seen beside two CPU burners).
    while not all(device_up(ns, t) for t in (layout.tun_to_remote, layout.tun_to_client)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()  # a half-started delay line must not be taken for a running one
            proc.wait()
            pidfile.unlink(missing_ok=True)
            raise LabError(f"the delay line did not start in {ns}; see {log_path}")
        time.sleep(0.05)


def delay_line_routed(layout: LabLayout) -> bool:
    """Both policy rules in place and forwarding on: every packet goes through the line."""
    rules = subprocess.run(["ip", "-n", layout.wan_ns, "rule", "show"], capture_output=True, text=True).stdout
    forwarding = subprocess.run(
        ["ip", "netns", "exec", layout.wan_ns, "sysctl", "-n", "net.ipv4.ip_forward"], capture_output=True, text=True
    ).stdout.strip()
    return forwarding == "1" and all(f"{table}:" in rules and f"lookup {table}" in rules for table, _, _ in _WAN_TABLES)


def mac(ns: str, ifname: str) -> str:
    """The MAC address of ifname in namespace ns."""
    info = json.loads(ip("-n", ns, "-j", "link", "show", "dev", ifname, what=f"read {ifname}"))
    return str(info[0]["address"])


def netem_available() -> bool:
    """Whether this kernel has sch_netem (absent on some cloud kernels)."""
    if Path("/sys/module/sch_netem").exists():
        return True
    return (
        subprocess.run(["modprobe", "-q", "sch_netem"], capture_output=True).returncode == 0
        if shutil.which("modprobe")
        else False
    )


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


def shape(layout: LabLayout) -> list[str]:
    link = layout.config.link
    messages = []
    with_netem = netem_available()
    if (link.delay > 0 or link.loss > 0) and not with_netem:
        messages.append(
            f"netem is not available in this kernel: delay {link.delay * 1000:g}ms and loss "
            f"{link.loss:g}% each way come from a userspace delay line in {layout.wan_ns}"
        )
    for ns, ifname in ((layout.client_ns, layout.client_if), (layout.remote_ns, layout.remote_if)):
        first, *rest = shape_argv(ifname, link, with_netem)
        subprocess.run(in_netns(ns, first), capture_output=True)
        for argv in rest:
            run_in(ns, argv, f"shape {ifname}")
    return messages


def remove_namespace(ns: str) -> list[str]:
    # Every process in the lab's namespaces is ours (servers, stray transfers, the delay
    # line): stop them by PID before the namespace goes, so none survives holding it.
    messages = []
    pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), sig)
        if sig == signal.SIGTERM and pids:
            wait_gone(pids, 3.0)
    if pids:
        messages.append(f"stopped {len(pids)} process(es) in {ns}")
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    messages.append(f"deleted namespace {ns}")
    return messages


def alive(pid: str) -> bool:
    """Running, not a zombie (a server started by this very process, e.g. in tests, stays
    a zombie until reaped; it is gone all the same)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_gone(pids: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
