"""Every name and path a lab mesh uses (`lab up --mesh.file M`), derived from the mesh alone.

N site namespaces, `<name>-s-<site>`, each with one veth (`<name><i>s`) whose peer
(`<name><i>c`) is a port of the bridge `<name>br` in `<name>-core`: every site's access
link is its own veth, shaped at both ends (through a delay line's namespace,
`<name>-w-<site>`, where delay or loss needs one).  The kind letter keeps every name
apart: no site name gives `<name>-core`, `<name>-s-x-w` is not `<name>-w-x`, and a single
lab's `<name>-client|remote|wan` has no `-s-`/`-w-` (lab names have no `-`, so two labs
or meshes of different names never share a namespace).  A site's files are under
`<state_dir>/sites/<site>`, apart from the mesh's own (key, ssh_config, known_hosts).

A site is client and server at once: its exporter runs transfers from its namespace,
and its servers serve the others.  Each site is a LabLayout whose client and remote
namespace are the same, so the single lab's servers (servers.py) run in it unchanged.  Nothing here touches the system.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from bigbinf.config import LabConfig, LinkConfig
from bigbinf.lab.layout import LabLayout


class _MeshFiles:
    """The files one lab mesh shares between its sites, in the mesh's state dir: one key
    pair logs in everywhere, one known_hosts and ssh_config name every site."""

    @property
    def _mesh_dir(self) -> Path:
        raise NotImplementedError

    @property
    def client_key(self) -> Path:
        return self._mesh_dir / "client_ed25519"

    @property
    def ssh_config(self) -> Path:
        return self._mesh_dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self._mesh_dir / "known_hosts"

    @property
    def namespaces_file(self) -> Path:
        """Every namespace `up` created (written before creating it): `down` removes these
        too, so a site dropped from the mesh file since is not left behind."""
        return self._mesh_dir / "namespaces"


@dataclass(frozen=True)
class MeshSiteLayout(_MeshFiles, LabLayout):
    """One site of a lab mesh: its namespace is both ends of the single lab's layout."""

    mesh_name: str = ""
    site: str = ""
    index: int = 0
    mesh_state_dir: Path = Path()

    @property
    def _mesh_dir(self) -> Path:
        return self.mesh_state_dir

    @property
    def netns(self) -> str:
        return f"{self.mesh_name}-s-{self.site}"

    @property
    def client_ns(self) -> str:
        return self.netns

    @property
    def remote_ns(self) -> str:
        return self.netns

    @property
    def interface(self) -> str:
        """The site's end of its access link: where its exporter captures."""
        return f"{self.mesh_name}{self.index}s"

    @property
    def client_if(self) -> str:
        return self.interface

    @property
    def remote_if(self) -> str:
        return self.interface

    @property
    def bridge_port(self) -> str:
        """The access link's other end, a port of the core's bridge."""
        return f"{self.mesh_name}{self.index}c"

    @property
    def address(self) -> str:
        return self.config.remote_address

    # Where the kernel has no netem and the link asks for delay or loss, the access link
    # is cut in two by `<name>-w-<site>`, whose userspace delay line (delayline.py) routes
    # every packet: site <-> interface|wan_client_if [w] wan_remote_if|bridge_port <-> core.
    # The single lab's names, so network.delay_line_up runs it unchanged.
    @property
    def wan_ns(self) -> str:
        return f"{self.mesh_name}-w-{self.site}"

    @property
    def wan_client_if(self) -> str:
        """The delay line's side facing the site."""
        return f"{self.mesh_name}{self.index}w"

    @property
    def wan_remote_if(self) -> str:
        """The delay line's side facing the bridge (its peer is bridge_port)."""
        return f"{self.mesh_name}{self.index}v"

    @property
    def tun_to_remote(self) -> str:
        return f"{self.mesh_name}{self.index}da"

    @property
    def tun_to_client(self) -> str:
        return f"{self.mesh_name}{self.index}db"

    @property
    def namespaces(self) -> tuple[str, ...]:
        return (self.netns, self.wan_ns)


@dataclass(frozen=True)
class MeshLabLayout(_MeshFiles):
    """The lab mesh: its core namespace and bridge, and one MeshSiteLayout per site."""

    name: str
    state_dir: Path
    subnet: ipaddress.IPv4Network
    sites: tuple[MeshSiteLayout, ...]

    @property
    def _mesh_dir(self) -> Path:
        return self.state_dir

    @property
    def core_ns(self) -> str:
        return f"{self.name}-core"

    @property
    def bridge(self) -> str:
        return f"{self.name}br"

    @property
    def marker(self) -> str:
        """What the state dir's marker holds (control.claim_state_dir): not a single lab's name."""
        return f"mesh {self.name}"

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace of the mesh as it is now, the sites' before the core."""
        return (*(ns for s in self.sites for ns in s.namespaces), self.core_ns)

    def site(self, name: str) -> MeshSiteLayout:
        return next(s for s in self.sites if s.site == name)


def site_address(subnet: str, index: int) -> str:
    """The lab address of the index-th site (0-based): the subnet's (index + 1)-th host."""
    return str(ipaddress.ip_network(subnet)[index + 1])


def mesh_lab_layout(
    name: str,
    state_dir: Path,
    subnet: str,
    sites: list[tuple[str, str, LinkConfig, list[str] | None, list[str] | None]],
) -> MeshLabLayout:
    """The layout of a lab mesh from (site, address, link, servers, datasets) in mesh order."""
    network = ipaddress.ip_network(subnet)
    assert isinstance(network, ipaddress.IPv4Network)
    layouts = tuple(
        MeshSiteLayout(
            LabConfig(
                name=f"{name}{i}",
                state_dir=state_dir / "sites" / site,
                client_address=address,
                remote_address=address,
                prefix_length=network.prefixlen,
                link=link,
                servers=servers,  # type: ignore[arg-type]  # validated as LabServerName by the mesh
                datasets=datasets,
            ),
            mesh_name=name,
            site=site,
            index=i,
            mesh_state_dir=state_dir,
        )
        for i, (site, address, link, servers, datasets) in enumerate(sites)
    )
    return MeshLabLayout(name, state_dir, network, layouts)
