"""A lab mesh's names cannot clash (bigbinf.lab.mesh_layout): with each other, with the
core namespace, with a single lab of the same name, or with the mesh's own files, for
site names chosen to collide with the obvious schemes.  No root: names only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bigbinf.config import LabConfig
from bigbinf.lab.layout import LabLayout
from bigbinf.lab.mesh import layout as lab_layout
from bigbinf.lab.mesh_layout import MeshLabLayout
from bigbinf.lab.servers import netns_hosts
from bigbinf.mesh.config import parse_mesh

SITES = ["core", "x", "x-w", "client", "remote", "wan", "ssh_config", "known_hosts", "namespaces", "sites"]


def _layout(name: str, state_dir: Path) -> MeshLabLayout:
    raw: dict[str, Any] = {
        "name": "m",
        "lab": {"name": name, "state_dir": str(state_dir)},
        "sites": {site: {} for site in SITES},
        "datasets": {"d": {"file": "d.bin", "size": "1MiB"}},
        "protocols": {"http": {}},
        "tests": [{"protocols": ["http"], "datasets": ["d"]}],
        "schedule": {"interval": "1h"},
    }
    return lab_layout(parse_mesh(yaml.safe_dump(raw), "m.yaml", lab=lab_layout))


def test_namespaces_never_clash() -> None:
    layout = _layout("bigbinf", Path("/var/lib/bigbinf/lab"))
    names = [*(ns for s in layout.sites for ns in s.namespaces), layout.core_ns]
    assert len(set(names)) == len(names), sorted(names)
    assert list(layout.namespaces) == names
    assert names.count(layout.core_ns) == 1
    # ... nor with a single lab of the same name (nor its /etc/netns directories)
    single = LabLayout(LabConfig(name="bigbinf")).namespaces
    assert set(names).isdisjoint(single)
    assert {netns_hosts(ns).parent for ns in names}.isdisjoint(netns_hosts(ns).parent for ns in single)
    # ... nor with another mesh whose name is a prefix of this one's
    other = _layout("bigbin", Path("/tmp/other"))
    assert set(names).isdisjoint(other.namespaces)


def test_interfaces_never_clash_in_a_namespace() -> None:
    layout = _layout("bigbinf", Path("/var/lib/bigbinf/lab"))
    core = [layout.bridge, *(s.bridge_port for s in layout.sites)]
    assert len(set(core)) == len(core)
    for site in layout.sites:
        wan = [site.wan_client_if, site.wan_remote_if, site.tun_to_remote, site.tun_to_client]
        assert len(set(wan)) == len(wan) and site.interface not in wan
        assert all(len(ifname) <= 15 for ifname in (site.interface, *wan, site.bridge_port))


def test_state_paths_never_clash() -> None:
    state = Path("/var/lib/bigbinf/mesh-lab")
    layout = _layout("bigbinf", state)
    shared = [layout.client_key, layout.ssh_config, layout.known_hosts, layout.namespaces_file]
    sites = [s.state_dir for s in layout.sites]
    assert len(set(sites)) == len(sites)
    for site_dir in sites:
        assert site_dir.parent == state / "sites"
        assert not any(f == site_dir or site_dir in f.parents for f in shared)
    for site in layout.sites:  # the mesh's shared files are the site's
        assert (site.client_key, site.ssh_config, site.known_hosts) == tuple(shared[:3])
        assert site.host_key.parent == site.state_dir and site.data_dir.is_relative_to(site.state_dir)
