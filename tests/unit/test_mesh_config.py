"""A mesh-sized configuration (10 remotes x 20 protocols x 5 datasets x 2 directions)
passes --config.check and plans every series (its speed is in benchmarks/bench_metrics.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bigbinf.config import load_config
from bigbinf.lab.mesh import layout as lab_layout
from bigbinf.service.rounds import series_of

from ..support.mesh import DATASETS, DIRECTIONS, PROTOCOLS, write_mesh_config

ROOT = Path(__file__).resolve().parents[2]


def test_mesh_config_passes_config_check_and_plans_every_series(tmp_path: Path) -> None:
    path = write_mesh_config(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(path), "--config.check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "configuration is valid" in proc.stdout + proc.stderr
    assert "warning" not in proc.stdout + proc.stderr
    config = load_config(path)
    assert config.metrics.payload_histograms is True
    series = series_of(config)
    expected = {
        (protocol, f"site{i:02d}", dataset, direction)
        for i in range(10)
        for protocol in PROTOCOLS
        for dataset in DATASETS
        for direction in DIRECTIONS
    }
    assert len(expected) == 2000
    assert {(s.protocol, s.remote, s.dataset, s.direction) for s in series} == expected
    assert len(series) == 2000


def test_payload_histograms_is_a_checked_boolean(tmp_path: Path) -> None:
    path = write_mesh_config(tmp_path, remotes=1, protocols=1, datasets=1, payload_histograms=False)
    assert load_config(path).metrics.payload_histograms is False
    path.write_text(path.read_text().replace("payload_histograms: false", "payload_histogram: false"))
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(path), "--config.check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "metrics.payload_histogram: unknown key 'payload_histogram'" in proc.stdout + proc.stderr


# ---------------------------------------------------------------- the mesh file (mesh/config.py)


MESH_OK = """
name: m
sites:
  a: {address: 10.0.0.1, data_dir: /srv/a, key: /etc/bigbinf/id, upload_dir: /srv/up}
  b: {address: 10.0.0.2, data_dir: /srv/b, key: /etc/bigbinf/id, bandwidth: 1gbit, upload_dir: /srv/up}
  c: {address: 10.0.0.3, data_dir: /srv/c, key: /etc/bigbinf/id, upload_dir: /srv/up}
datasets: {f: {file: f.bin, size: 1MiB}}
protocols: {http: {}, scp: {directions: [download, upload]}}
tests:
  - {protocols: [http], datasets: [f]}
  - {protocols: [scp], datasets: [f], directions: [upload], pairs: [[b, a]]}
schedule: {interval: 1h, guard: 2s}
"""


def mesh_error(text: str) -> list[str]:
    from bigbinf.mesh.config import MeshError, parse_mesh

    try:
        parse_mesh(text, "m.yaml", lab=lab_layout)
    except MeshError as exc:
        return exc.lines()
    raise AssertionError("the mesh file was accepted")


def test_every_mesh_file_error_is_gathered_with_its_place() -> None:
    text = """
name: m
colour: blue
sites:
  a: {address: 10.0.0.1, data_dir: /d, servers: [sshd], size: 3}
  b: {address: 10.0.0.2, link: {rate: 10mbit}}
datasets: {f: {file: f.bin, size: 1MiB}}
protocols: {http: {}, scp: {}}
tests:
  - {protocols: [http, rsync], datasets: [f, g], directions: [upload], pairs: [[a, c], [b, b]]}
  - {protocols: [http], datasets: [f], pairs: [[b, a]]}
schedule: {cron: ["0 3 * * *"], interval: 1h}
"""
    lines = mesh_error(text)
    assert lines[:2] == [
        "m.yaml: sites.a.size: unknown key 'size'; allowed keys: address, port, user, key, ssh_config, "
        "password_env, data_dir, upload_dir, serve_root, checksums, bandwidth, probe, stats_command, tcp_command, "
        "servers, netns, interface, exporter, node_exporter, prometheus_listen, link",
        "m.yaml: colour: unknown key 'colour'; allowed keys: name, sites, datasets, protocols, tests, schedule, "
        "transfer, capture, metrics, prometheus, lab",
    ]
    assert lines[2:] == [
        "m.yaml: sites.b.data_dir: required unless the mesh has a lab: section",
        "m.yaml: sites.b.link: only a lab mesh shapes access links; remove it or add lab:",
        "m.yaml: tests[0].protocols[1]: no protocol named 'rsync'; defined: http, scp",
        "m.yaml: tests[0].datasets[1]: no dataset named 'g'; defined: f",
        "m.yaml: tests[0].pairs[0][1]: no site named 'c'; defined: a, b",
        "m.yaml: tests[0].pairs[1]: a site cannot test itself; name two sites",
        "m.yaml: tests[0].directions: protocol 'http' does not run uploads; add it to protocols.http.directions",
        "m.yaml: tests[1].protocols[0]: 'http' needs nginx at a, which does not serve it (sites.a.servers: sshd); "
        "add it there or leave that pair out",
        "m.yaml: schedule: give cron or interval, not both",
    ]


def test_a_one_site_mesh_is_one_line_that_says_what_to_do() -> None:
    rest = (
        "datasets: {f: {file: f.bin, size: 1MiB}}\nprotocols: {http: {}}\ntests: [{protocols: [http], datasets: [f]}]\n"
    )
    assert mesh_error("name: m\nsites:\n  a: {address: 10.0.0.1, data_dir: /d}\n" + rest) == [
        "m.yaml: sites: a mesh needs at least 2 sites (it has 1: a); for one site testing remotes, write a "
        "single-site configuration (docs/configuration.md) and run it with --config.file"
    ]
    assert mesh_error("name: m\nsites: {}\n" + rest) == [
        "m.yaml: sites: a mesh needs at least 2 sites; for one site testing remotes, write a single-site "
        "configuration (docs/configuration.md) and run it with --config.file"
    ]


def test_a_host_name_may_end_in_a_dot() -> None:
    from bigbinf.mesh.config import parse_mesh, site_config

    mesh = parse_mesh(MESH_OK.replace("address: 10.0.0.2", "address: dtn.b.example.org."), "m.yaml")
    assert site_config(mesh, "a").remotes["b"].address == "dtn.b.example.org."
    assert mesh_error(MESH_OK.replace("address: 10.0.0.2", "address: dtn..example.org")) == [
        "m.yaml: sites.b.address: 'dtn..example.org' is neither an IP address nor a host name"
    ]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("10.0.0.1", "10.0.0.1"),
        ("dtn.example.org", "DTN.Example.org."),
        ("2001:db8::1", "'2001:DB8:0::1'"),
    ],
)
def test_two_sites_on_one_host_and_port_are_refused_outside_a_lab(first: str, second: str) -> None:
    text = MESH_OK.replace("address: 10.0.0.1", f"address: {first if ':' not in first else repr(first)}")
    text = text.replace("address: 10.0.0.2", f"address: {second}")
    (line,) = mesh_error(text)
    assert line.startswith(f"m.yaml: sites.b.address: {second.strip(chr(39))} port 22 is sites.a's host too: ")
    assert "give each site its own host (or port), or merge the two into one site" in line
    # Another ssh port is another host (a container, say); and in a lab the lab numbers the sites.
    from bigbinf.mesh.config import parse_mesh

    assert parse_mesh(text.replace("data_dir: /srv/b", "port: 2222, data_dir: /srv/b"), "m.yaml")


def test_duplicate_keys_and_yaml_errors_are_mesh_errors() -> None:
    assert mesh_error("sites:\n  a: {}\n  a: {}\n") == [
        "m.yaml: line 3 column 3: duplicate key 'a' (first on line 2): YAML would silently keep only the last; "
        "remove or merge one"
    ]
    assert mesh_error("sites: [\n") == [
        "m.yaml: line 2 column 1: YAML syntax error: expected the node content, but found '<stream end>'"
    ]


def test_a_sites_derived_configuration_error_is_said_once_where_it_is_fixed() -> None:
    # scp needs the key of every site it logs in to: said at that site, not once per site testing it.
    text = MESH_OK.replace(", key: /etc/bigbinf/id, bandwidth", ", bandwidth").replace(
        "tests:\n", "tests:\n  - {protocols: [scp], datasets: [f]}\n"
    )
    text = text.replace("http: {}", "http: {options: {bogus: 1}}")
    assert mesh_error(text) == [
        "m.yaml: protocols.http.options.bogus: unknown option for module 'http'; allowed: none",
        "m.yaml: sites.b.key: required: protocols scp log in with {key}; give the path of the private key "
        "for this remote",
    ]


def test_site_config_is_that_sites_outgoing_tests() -> None:
    from bigbinf.mesh.config import parse_mesh, site_config

    mesh = parse_mesh(MESH_OK, "m.yaml", lab=lab_layout)
    b = site_config(mesh, "b", "m.yaml")
    assert list(b.remotes) == ["a", "c"]  # the other sites, in mesh order
    assert (b.remotes["a"].address, str(b.remotes["a"].data_dir), str(b.remotes["a"].upload_dir)) == (
        "10.0.0.1",
        "/srv/a",
        "/srv/up",
    )
    # Only b's rate is known: a's may be slower, so no bandwidth is claimed for the path.
    assert b.remotes["a"].bandwidth is None
    assert [(t.remote, t.protocol, t.direction) for t in b.schedule.transfers] == [
        ("a", "http", "download"),
        ("c", "http", "download"),
        ("a", "scp", "upload"),
    ]
    transfers = site_config(mesh, "a", lab=lab_layout).schedule.transfers
    assert [(t.remote, t.protocol) for t in transfers] == [("b", "http"), ("c", "http")]


def test_site_config_of_a_lab_mesh_uses_the_labs_names_and_addresses() -> None:
    from bigbinf.mesh.config import MeshError, parse_mesh, site_config

    text = """
lab: {name: bbt, state_dir: /tmp/bbt, subnet: 198.19.9.0/24}
sites:
  alpha: {link: {rate: 100mbit}}
  beta: {link: {rate: 50mbit}}
datasets: {f: {file: f.bin, size: 1MiB}}
protocols: {http: {}}
tests: [{protocols: [http], datasets: [f]}]
"""
    mesh = parse_mesh(text, "lab.yaml", lab=lab_layout)
    beta = site_config(mesh, "alpha", lab=lab_layout).remotes["beta"]
    layout = lab_layout(mesh)  # its namespace names are lab/mesh_layout.py's
    assert (beta.address, beta.netns, beta.bandwidth) == ("198.19.9.2", layout.site("alpha").netns, "6250000bps")
    assert beta.stats_command == ["ip", "netns", "exec", layout.site("beta").netns]
    assert beta.data_dir == layout.site("beta").data_dir and str(beta.data_dir).startswith("/tmp/bbt/")
    try:
        site_config(mesh, "gamma", "lab.yaml", lab=lab_layout)
    except MeshError as exc:
        assert exc.lines() == ["lab.yaml: sites: no site named 'gamma'; defined: alpha, beta"]
    else:
        raise AssertionError("an unknown site was accepted")


MESH_DOC = ROOT / "docs" / "mesh.md"


def test_the_docs_mesh_file_example_is_a_valid_mesh() -> None:
    import re

    from bigbinf.mesh.config import parse_mesh

    section = MESH_DOC.read_text().split("\n## The mesh file\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```yaml[ \t]*\n(.*?)^```[ \t]*$", section, re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1, "docs/mesh.md, The mesh file: one ```yaml example"
    mesh = parse_mesh(blocks[0], "docs/mesh.md", lab=lab_layout)
    assert list(mesh.sites) == ["alpha", "beta", "gamma"] and mesh.schedule.repetitions == 2


def test_the_docs_list_every_mesh_file_key() -> None:
    from pydantic import BaseModel

    from bigbinf.mesh import config as M

    text = MESH_DOC.read_text()
    models: list[type[BaseModel]] = [
        M.MeshConfig,
        M.SiteConfig,
        M.SiteExporterConfig,
        M.MeshTest,
        M.MeshSchedule,
        M.MeshLabConfig,
        M.MeshPrometheusConfig,
    ]
    missing = [f"{m.__name__}.{name}" for m in models for name in m.model_fields if f"| `{name}` |" not in text]
    assert missing == []


# ---------------------------------------------------------------- lab meshes


LAB = """
lab: {name: bbt, state_dir: /tmp/bbt, subnet: 198.19.9.0/29}
sites:
  alpha: {link: {rate: 100mbit}}
  beta: {link: {rate: 50mbit}}
  gamma: {}
datasets: {f: {file: f.bin, size: 1MiB}}
protocols: {http: {}}
tests: [{protocols: [http], datasets: [f]}]
"""


def lab_mesh(**sites: str) -> str:
    text = LAB
    for name, value in sites.items():
        text = text.replace(f"  {name}: {{", f"  {name}: {{{value}, ", 1).replace(", }", "}")
    return text


def test_lab_site_addresses_are_checked_at_load() -> None:
    # Each of these reached the lab layout unchecked (a host name even leaked pydantic's
    # ValidationError out of parse_mesh).
    assert mesh_error(lab_mesh(alpha="address: dtn.example.org")) == [
        "m.yaml: sites.alpha.address: 'dtn.example.org' is not an IPv4 address; a lab site needs one"
    ]
    assert mesh_error(
        lab_mesh(alpha="address: 198.19.10.1", beta="address: 198.19.9.0", gamma="address: 198.19.9.7")
    ) == [
        "m.yaml: sites.alpha.address: 198.19.10.1 is outside lab.subnet 198.19.9.0/29; give one inside it",
        "m.yaml: sites.beta.address: 198.19.9.0 is lab.subnet's network address; give a host address",
        "m.yaml: sites.gamma.address: 198.19.9.7 is lab.subnet's broadcast address; give a host address",
    ]
    assert mesh_error(lab_mesh(alpha="address: 198.19.9.5", gamma="address: 198.19.9.5")) == [
        "m.yaml: sites.gamma.address: 198.19.9.5 is sites.alpha's address too; give each site its own"
    ]


def test_lab_automatic_addresses_skip_the_explicit_ones() -> None:
    from bigbinf.mesh.config import lab_addresses, parse_mesh

    # beta gives .1, the first automatic address: alpha and gamma take the next free hosts.
    mesh = parse_mesh(lab_mesh(beta="address: 198.19.9.1"), "m.yaml", lab=lab_layout)
    assert lab_addresses(mesh) == {"alpha": "198.19.9.2", "beta": "198.19.9.1", "gamma": "198.19.9.3"}
    assert [s.address for s in lab_layout(mesh).sites] == ["198.19.9.2", "198.19.9.1", "198.19.9.3"]
    mesh = parse_mesh(lab_mesh(gamma="address: 198.19.9.2"), "m.yaml", lab=lab_layout)
    assert lab_addresses(mesh) == {"alpha": "198.19.9.1", "beta": "198.19.9.3", "gamma": "198.19.9.2"}


def test_lab_subnet_must_be_in_the_benchmarking_range() -> None:
    assert mesh_error(LAB.replace("198.19.9.0/29", "10.0.0.0/24")) == [
        "m.yaml: lab.subnet: '10.0.0.0/24' is outside 198.18.0.0/15, the benchmarking range a lab must use; "
        "choose a subnet inside it, e.g. 198.19.0.0/24"
    ]
    assert mesh_error(LAB.replace("198.19.9.0/29", "198.19.9.1/24")) == [
        "m.yaml: lab.subnet: '198.19.9.1/24' has host bits set; write its network address, 198.19.9.0/24"
    ]
    assert mesh_error(LAB.replace("198.19.9.0/29", "bogus")) == [
        "m.yaml: lab.subnet: 'bogus' is not an IPv4 subnet; write e.g. 198.19.0.0/24"
    ]


def test_lab_name_is_checked_as_the_single_labs_with_its_own_length() -> None:
    assert mesh_error(LAB.replace("name: bbt", "name: bbtoolongxx")) == [
        "m.yaml: lab.name: 'bbtoolongxx' is not a valid lab name: 1-9 lower-case letters/digits, starting with a letter"
    ]


def test_lab_exporters_default_to_their_own_port_and_journal() -> None:
    from bigbinf.mesh.config import exporter_of, parse_mesh, site_config

    mesh = parse_mesh(lab_mesh(gamma="exporter: {listen: '127.0.0.1:9900'}"), "m.yaml", lab=lab_layout)
    assert [(exporter_of(mesh, s).listen, str(exporter_of(mesh, s).journal)) for s in mesh.sites] == [
        ("127.0.0.1:9761", "/var/lib/bigbinf/mesh/alpha/journal.jsonl"),
        ("127.0.0.1:9762", "/var/lib/bigbinf/mesh/beta/journal.jsonl"),
        ("127.0.0.1:9900", "/var/lib/bigbinf/mesh/gamma/journal.jsonl"),
    ]
    assert str(site_config(mesh, "beta", lab=lab_layout).journal.path) == "/var/lib/bigbinf/mesh/beta/journal.jsonl"
    real = parse_mesh(MESH_OK, "m.yaml", lab=lab_layout)  # sites on their own hosts: the single-site defaults
    assert {(exporter_of(real, s).listen, str(exporter_of(real, s).journal)) for s in real.sites} == {
        ("127.0.0.1:9753", "/var/lib/bigbinf/journal.jsonl")
    }


def test_lab_exporters_may_not_share_a_port_or_a_journal() -> None:
    text = lab_mesh(
        alpha="exporter: {listen: '0.0.0.0:9762'}",
        gamma="exporter: {journal: /var/lib/bigbinf/mesh/beta/journal.jsonl}",
    )
    assert mesh_error(text) == [
        "m.yaml: sites.beta.exporter.listen: 127.0.0.1:9762: sites.alpha's exporter listens there too "
        "(a lab mesh's exporters share one host); give each its own port",
        "m.yaml: sites.gamma.exporter.journal: /var/lib/bigbinf/mesh/beta/journal.jsonl: sites.beta's exporter "
        "journals there too; give each its own journal",
    ]


def test_lab_bandwidth_only_where_both_rates_are_known() -> None:
    from bigbinf.mesh.config import parse_mesh, site_config

    remotes = site_config(parse_mesh(LAB, "m.yaml", lab=lab_layout), "alpha", lab=lab_layout).remotes
    assert (remotes["beta"].bandwidth, remotes["gamma"].bandwidth) == ("6250000bps", None)


def test_a_lab_mesh_builds_its_layout_once() -> None:
    import bigbinf.mesh.config as M

    calls = []

    def counting(*args: Any, **kw: Any) -> Any:
        calls.append(1)
        return lab_layout(*args, **kw)

    text = LAB.replace("/29", "/24").replace("  gamma: {}\n", "".join(f"  s{i}: {{}}\n" for i in range(8)))
    mesh = M.parse_mesh(text, "m.yaml", lab=counting)
    assert len(mesh.sites) == 10 and len(calls) == 1  # not once per remote (90 of them)
    calls.clear()
    M.site_config(mesh, "alpha", lab=counting)
    assert len(calls) == 1


def test_a_lab_mesh_needs_the_lab_that_lays_it_out() -> None:
    """mesh/ never imports lab/: a caller that forgets to hand it the lab is told so."""
    import bigbinf.mesh.config as M

    with pytest.raises(M.NoLabGiven, match=r"pass lab=bigbinf\.lab\.mesh\.layout"):
        M.parse_mesh(LAB, "m.yaml")
    mesh = M.parse_mesh(LAB, "m.yaml", lab=lab_layout)
    with pytest.raises(M.NoLabGiven):
        M.site_config(mesh, "alpha")


def test_prometheus_settings_are_checked() -> None:
    text = MESH_OK + "prometheus: {remote_write_url: 'central:9090/api/v1/write', scrape_interval: 500ms}\n"
    assert mesh_error(text) == [
        "m.yaml: prometheus.remote_write_url: 'central:9090/api/v1/write' is not an http(s) URL with a host; "
        "write e.g. http://central:9090/api/v1/write",
        "m.yaml: prometheus.scrape_interval: 0.5 s is too short a scrape interval; give 1s or more (15s is usual)",
    ]
