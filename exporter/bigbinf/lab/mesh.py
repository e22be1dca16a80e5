"""A lab mesh: N sites on one bridge, each with its own shaped access link and servers
(`bigbinf-exporter lab up|down|status --mesh.file M`).

    <name>-core:     bridge <name>br, one port <name><i>c per site
    <name>-s-<site>: <name><i>s (the site's address), the other end of its port's veth;
                     every server of the site (servers.py), its exporter's transfers

Each access link is shaped like the single lab's link (network.py): tbf at the site's
end (its egress) and at its bridge port (the egress towards the site), so a site's rate
holds both ways; delay and loss by netem on the same two ends, or, where the kernel has
no netem, by a userspace delay line in `<name>-w-<site>` spliced into that site's link
(it routes: the site's and the other sites' neighbour entries point at its veths).
Offloads off, IPv6 off, static neighbour entries for every other site and static
forwarding entries on the bridge (learning and flooding off): no ARP, no flooded frame,
so a site's captures equal its interface counters.

One client key (the mesh's state dir) logs in at every site's sshd; one known_hosts and
ssh_config name every site.  Nothing is added to the root namespace: each site's
exporter runs there and reaches its site through `ip netns exec` (mesh.config.site_config).

`up` is idempotent; `down` removes every namespace, process and file `up` created, also
after a partial `up` and for sites since dropped from the mesh file: `up` records each
namespace in the state dir before creating it, and `down` removes the recorded ones and
the current mesh's.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

from pydantic import ValidationError

from bigbinf.config import ConfigIssue, DatasetConfig, LabConfig, pydantic_issues
from bigbinf.lab import control, network
from bigbinf.lab import servers as labservers
from bigbinf.lab.layout import LabError
from bigbinf.lab.mesh_layout import MeshLabLayout, MeshSiteLayout, mesh_lab_layout
from bigbinf.lab.servers import SERVERS, write_file
from bigbinf.mesh.config import MeshConfig, MeshError, lab_addresses, test_pairs
from bigbinf.process import check_run, in_netns, netns_exists

# Every server but UDT's local GridFTP end: a mesh site's own gridftp server is that end
# (both would listen on port 2811 at the same address).
MESH_SERVERS = [name for name, server in SERVERS.items() if server.side != "client"]


def layout(mesh: MeshConfig, source: str = "mesh") -> MeshLabLayout:
    """The lab mesh's names and paths (a mesh with a lab: section), in O(sites): the
    mesh.config.LabOf that cli.py hands bigbinf.mesh, which never imports the lab.  A
    site's lab settings that cannot be laid out are a MeshError naming `source`."""
    assert mesh.lab is not None
    addresses = lab_addresses(mesh)
    try:
        return mesh_lab_layout(
            mesh.lab.name,
            mesh.lab.state_dir,
            mesh.lab.subnet,
            [
                (name, addresses[name], site.link, list(site.servers) if site.servers is not None else None, None)
                for name, site in mesh.sites.items()
            ],
        )
    except ValidationError as exc:  # a site's lab settings the mesh schema let through
        issues = [ConfigIssue(f"lab (a site's layout) {i.path}", i.message) for i in pydantic_issues(exc, LabConfig)]
        raise MeshError(source, issues) from None


def _layout(mesh: MeshConfig) -> MeshLabLayout:
    if mesh.lab is None:
        raise LabError("the mesh file has no lab: section: add `lab: {}` (name, state_dir, subnet) to build it locally")
    built = layout(mesh)
    for site in built.sites:
        # Every site is on the bridge's one link: an address outside the subnet has no route.
        if ipaddress.ip_address(site.address) not in built.subnet:
            raise LabError(
                f"sites.{site.site}.address {site.address} is not in lab.subnet {built.subnet}: "
                "remove it (a lab mesh numbers its sites from the subnet) or pick one inside"
            )
    return built


def site_servers(site: MeshSiteLayout) -> list[str]:
    return list(site.config.servers) if site.config.servers is not None else list(MESH_SERVERS)


def site_datasets(mesh: MeshConfig, site: str) -> dict[str, DatasetConfig]:
    """The datasets tests to `site` transfer: what its servers must serve."""
    names: dict[str, None] = {}
    for test in mesh.tests:
        if any(b == site for _, b in test_pairs(mesh, test)):
            names.update(dict.fromkeys(test.datasets))
    return {n: mesh.datasets[n] for n in names}


def _delayed(site: MeshSiteLayout) -> bool:
    return network.needs_delay_line(site.config.link)


def _bridge_side(site: MeshSiteLayout) -> tuple[str, str]:
    """(namespace, device) whose MAC the bridge and the other sites see for this site."""
    return (site.wan_ns, site.wan_remote_if) if _delayed(site) else (site.netns, site.interface)


# ---------------------------------------------------------------- network


def _recorded(layout: MeshLabLayout) -> list[str]:
    try:
        return layout.namespaces_file.read_text().split()
    except OSError:
        return []


def _ns(layout: MeshLabLayout, ns: str) -> None:
    if ns not in _recorded(layout):  # before it exists: a failing `up` leaves nothing unrecorded
        with layout.namespaces_file.open("a") as record:
            record.write(ns + "\n")
    if not netns_exists(ns):
        network.add_namespace(ns)
    network.ip("-n", ns, "link", "set", "lo", "up", what=f"bring up lo in {ns}")


def _core_up(layout: MeshLabLayout) -> None:
    ns, br = layout.core_ns, layout.bridge
    _ns(layout, ns)
    if not network.link_exists(ns, br):
        network.ip("-n", ns, "link", "add", br, "type", "bridge", what=f"create the bridge {br}")
    # The bridge has no address: IPv6 off keeps its link-local chatter off the ports.
    network.run_in(ns, ["sysctl", "-qw", f"net.ipv6.conf.{br}.disable_ipv6=1"], f"disable IPv6 on {br}")
    network.ip("-n", ns, "link", "set", br, "up", what=f"bring up {br}")


def _pair(ns_a: str, if_a: str, ns_b: str, if_b: str) -> None:
    """The veth if_a/if_b, replacing a leftover end (deleting one end deletes both)."""
    if network.link_exists(ns_a, if_a) and network.link_exists(ns_b, if_b):
        return
    for ns, ifname in ((ns_a, if_a), (ns_b, if_b)):
        if network.link_exists(ns, ifname):
            network.ip("-n", ns, "link", "del", ifname, what=f"remove the leftover {ifname}")
    network.veth(ns_a, if_a, ns_b, if_b)


def _access_link(layout: MeshLabLayout, site: MeshSiteLayout) -> None:
    core, prefix = layout.core_ns, layout.subnet.prefixlen
    _ns(layout, site.netns)
    if _delayed(site):
        _ns(layout, site.wan_ns)
        # A direct pair from an earlier `up` is cut: its ends are recreated towards -w-<site>.
        if not network.link_exists(site.wan_ns, site.wan_client_if) and network.link_exists(site.netns, site.interface):
            network.ip("-n", site.netns, "link", "del", site.interface, what=f"remove the direct {site.interface}")
        _pair(site.netns, site.interface, site.wan_ns, site.wan_client_if)
        _pair(core, site.bridge_port, site.wan_ns, site.wan_remote_if)
    else:
        if netns_exists(site.wan_ns):  # the delay line of an earlier `up` is not wanted now
            network.remove_namespace(site.wan_ns)
        _pair(site.netns, site.interface, core, site.bridge_port)
    network.wire_end(site.netns, site.interface, site.address, prefix)
    network.wire_end(core, site.bridge_port, None, prefix)
    network.ip("-n", core, "link", "set", site.bridge_port, "master", layout.bridge, what="attach to the bridge")
    # Static forwarding entries only (_forwarding): nothing learnt, no unknown unicast
    # flooded into the other sites' links (their captures would see it).
    check_run(
        ["bridge", "-n", core, "link", "set", "dev", site.bridge_port, "learning", "off", "flood", "off"],
        f"turn learning and flooding off on {site.bridge_port}",
    )
    if _delayed(site):
        ns = site.wan_ns
        for ifname in (site.wan_client_if, site.wan_remote_if):
            network.wire_end(ns, ifname, None, prefix)
        # As the single lab's <name>-wan (network._wan_up): packets come back from the TUN
        # devices with the far end's source address, so no reverse-path filter; forwarding
        # is switched on by delay_line_up once every packet goes through the line.
        for key in ("net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"):
            network.run_in(ns, ["sysctl", "-qw", key], f"set {key} in {ns}")
        network.ip(
            "-n", ns, "route", "replace", f"{site.address}/32", "dev", site.wan_client_if, what="route to the site"
        )
        network.ip(
            "-n", ns, "route", "replace", str(layout.subnet), "dev", site.wan_remote_if, what="route to the bridge"
        )


def _neighbours(layout: MeshLabLayout, site: MeshSiteLayout) -> None:
    """Static neighbours: towards every other site, the MAC its next hop really has."""
    for other in layout.sites:
        if other is site:
            continue
        if _delayed(site):  # the site's own delay line routes everything it sends
            network.neigh(site.netns, site.interface, other.address, site.wan_ns, site.wan_client_if)
            network.neigh(site.wan_ns, site.wan_remote_if, other.address, *_bridge_side(other))
        else:
            network.neigh(site.netns, site.interface, other.address, *_bridge_side(other))
    if _delayed(site):
        network.neigh(site.wan_ns, site.wan_client_if, site.address, site.netns, site.interface)


def _forwarding(layout: MeshLabLayout) -> None:
    for site in layout.sites:
        check_run(
            [
                "bridge",
                "-n",
                layout.core_ns,
                "fdb",
                "replace",
                network.mac(*_bridge_side(site)),
                "dev",
                site.bridge_port,
                "master",
                "static",
            ],
            f"static forwarding entry for {site.site} on {site.bridge_port}",
        )


def _shape(layout: MeshLabLayout, site: MeshSiteLayout, with_netem: bool) -> list[str]:
    link = site.config.link
    messages = []
    if _delayed(site):
        messages.append(
            f"netem is not available in this kernel: {site.site}'s delay {link.delay * 1000:g}ms and loss "
            f"{link.loss:g}% each way come from a userspace delay line in {site.wan_ns}"
        )
    for ns, ifname in ((site.netns, site.interface), (layout.core_ns, site.bridge_port)):
        first, *rest = network.shape_argv(ifname, link, with_netem)
        subprocess.run(in_netns(ns, first), capture_output=True)  # no qdisc yet: fails, fine
        for argv in rest:
            network.run_in(ns, argv, f"shape {ifname}")
    return messages


# ---------------------------------------------------------------- ssh, datasets, servers


def _keygen(key: Path, comment: str) -> None:
    check_run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)], f"generate {key}")


def _ssh_files(layout: MeshLabLayout) -> None:
    """One client key authorized at every site; known_hosts and ssh_config name every site."""
    for key in (layout.client_key, *(s.host_key for s in layout.sites)):
        if not key.exists():
            _keygen(key, f"bigbinf-lab-{layout.name}")
    client_pub = layout.client_key.with_suffix(".pub").read_text()
    known, entries = [], []
    for site in layout.sites:
        write_file(site.authorized_keys, client_pub, 0o600)
        known.append(f"{site.address} {site.host_key.with_suffix('.pub').read_text()}")
        entries += control.ssh_host_entry(site.address, layout.client_key, layout.known_hosts)
    write_file(layout.known_hosts, "".join(known), 0o600)
    write_file(layout.ssh_config, "\n".join(entries), 0o600)


def _start_servers(site: MeshSiteLayout) -> list[str]:
    messages = []
    for name in site_servers(site):
        server = SERVERS[name]
        if server.side == "client":
            messages.append(f"{site.site}: {name} is not needed in a mesh (the site's gridftp is that end): skipped")
            continue
        if not server.installed():
            messages.append(f"{site.site}: {name} is not installed: {server.serves} transfers to it will fail")
            continue
        try:
            labservers.start(site, server)
        except labservers.ServerError as exc:
            raise LabError(f"{site.site}: {exc}") from None
    return messages


def _runs_sshd(site: MeshSiteLayout) -> bool:
    return "sshd" in site_servers(site) and SERVERS["sshd"].installed()


def _wait_ssh_login(layout: MeshLabLayout, src: MeshSiteLayout, dst: MeshSiteLayout) -> None:
    """sshd listening is not enough: the mesh key must log in, from another site."""
    control.wait_ssh_login(
        src.netns,
        layout.ssh_config,
        dst.address,
        f"the mesh key cannot log in from {src.site} to {dst.site}'s sshd",
        dst.logfile("sshd"),
    )


# ---------------------------------------------------------------- commands


def up(mesh: MeshConfig) -> list[str]:
    """Create (or complete) the lab mesh; returns human-readable messages."""
    layout = _layout(mesh)
    control.require_root()
    control.claim_state_dir(layout.state_dir, layout.marker, "/var/lib/bigbinf/mesh-lab")
    (layout.state_dir / "sites").mkdir(exist_ok=True)
    (layout.state_dir / "sites").chmod(0o755)  # the servers' users (ftp, xrootd) pass through
    for site in layout.sites:
        control.make_dirs(site)
    messages: list[str] = []
    _core_up(layout)
    for site in layout.sites:
        _access_link(layout, site)
    for site in layout.sites:  # every MAC exists now
        _neighbours(layout, site)
    _forwarding(layout)
    with_netem = network.netem_available()
    for site in layout.sites:
        messages += _shape(layout, site, with_netem)
        if _delayed(site):
            network.delay_line_up(site, site.config.link)
    _ssh_files(layout)
    made = []
    for site in layout.sites:
        made += [f"{site.site}: {m}" for m in control.ensure_datasets(site, site_datasets(mesh, site.site))]
        messages += _start_servers(site)
    # Each sshd from the site before it (a ring): every site's client and every sshd is
    # exercised once; the key, known_hosts and ssh_config are the same files for all pairs.
    for i, dst in enumerate(layout.sites):
        if _runs_sshd(dst):
            _wait_ssh_login(layout, layout.sites[i - 1], dst)
    if made:
        messages.append("created datasets: " + ", ".join(made))
    messages.append(
        f"lab mesh {layout.name} is up on {layout.bridge} in {layout.core_ns}: "
        + ", ".join(f"{s.site} {s.address} in {s.netns} ({s.config.link.rate or 'unshaped'})" for s in layout.sites)
    )
    return messages


def down(mesh: MeshConfig) -> list[str]:
    layout = _layout(mesh)
    control.require_root()
    return teardown(layout)


def teardown(layout: MeshLabLayout) -> list[str]:
    messages = []
    # The current mesh's namespaces and those `up` recorded (sites dropped from the mesh
    # file since, a renamed site): the sites first (their processes, delay lines), then
    # the core and its bridge.  The record is only read from a state dir of this mesh,
    # and only this mesh's names are taken from it.
    owned = control.owns_state_dir(layout.state_dir, layout.marker)
    recorded = [ns for ns in _recorded(layout) if ns.startswith(f"{layout.name}-")] if owned else []
    names = list(dict.fromkeys((*layout.namespaces, *recorded)))
    names.sort(key=lambda ns: ns == layout.core_ns)
    for ns in names:
        if netns_exists(ns):
            messages += network.remove_namespace(ns)
    for ns in names:
        hosts_dir = labservers.netns_hosts(ns).parent
        if hosts_dir.exists():
            shutil.rmtree(hosts_dir, ignore_errors=True)
            messages.append(f"removed {hosts_dir}")
    if owned:
        shutil.rmtree(layout.state_dir, ignore_errors=True)
        messages.append(f"removed {layout.state_dir}")
    return messages or [f"lab mesh {layout.name} was not up"]


def status(mesh: MeshConfig) -> tuple[bool, list[str]]:
    """(everything up?, one line per component)."""
    layout = _layout(mesh)
    lines: list[str] = []
    ok = True

    def report(name: str, good: bool, detail: str) -> None:
        nonlocal ok
        ok = ok and good
        lines.append(f"{name:<12} {'up' if good else 'DOWN':<5} {detail}")

    def link_state(ns: str, ifname: str) -> str:
        return subprocess.run(
            ["ip", "-n", ns, "-br", "link", "show", ifname], capture_output=True, text=True
        ).stdout.strip()

    core = netns_exists(layout.core_ns)
    report("namespace", core, layout.core_ns)
    bridge = link_state(layout.core_ns, layout.bridge) if core else ""
    report("bridge", " UP " in f"{bridge} ", bridge or layout.bridge)
    for site in layout.sites:
        lines.append(f"-- site {site.site} ({site.address})")
        report("namespace", netns_exists(site.netns), site.netns)
        if netns_exists(site.netns):
            veth = subprocess.run(
                ["ip", "-n", site.netns, "-br", "addr", "show", site.interface], capture_output=True, text=True
            ).stdout.strip()
            report("veth", "UP" in veth and site.address in veth, veth or site.interface)
            for ns, ifname in ((site.netns, site.interface), (layout.core_ns, site.bridge_port)):
                qdisc = subprocess.run(
                    ["tc", "-n", ns, "qdisc", "show", "dev", ifname], capture_output=True, text=True
                ).stdout.strip()
                lines.append(f"{'shape':<12} {'':<5} {ifname}: {'; '.join(qdisc.splitlines()) or 'none'}")
        port = link_state(layout.core_ns, site.bridge_port) if core else ""
        report("bridge port", f"master {layout.bridge}" in _port_master(layout, site), port or site.bridge_port)
        if _delayed(site):
            link = site.config.link
            pid = network.delay_line_pid(site)
            routed = pid is not None and network.delay_line_routed(site)
            report(
                "delay line",
                routed,
                f"pid {pid}, {link.delay * 1000:g}ms and {link.loss:g}% loss each way in {site.wan_ns}"
                if routed
                else f"running (pid {pid}) but not routed: run `lab up` again"
                if pid
                else f"not running (log {site.logfile(network.DELAY_LINE)})",
            )
        servers = [n for n in site_servers(site) if SERVERS[n].side != "client"]
        datasets = site_datasets(mesh, site.site)
        for name, good, detail in control.servers_status(site, servers, datasets, "transfers to it will fail"):
            if good is None:
                lines.append(f"{name:<12} {'':<5} {detail}")
            else:
                report(name, good, detail)
    return ok, lines


def _port_master(layout: MeshLabLayout, site: MeshSiteLayout) -> str:
    if not netns_exists(layout.core_ns):
        return ""
    return subprocess.run(
        ["ip", "-n", layout.core_ns, "link", "show", site.bridge_port], capture_output=True, text=True
    ).stdout
