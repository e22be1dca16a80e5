"""bigbinf.mesh.prometheus without a Prometheus: what it renders from the mesh file, and
how `mesh prometheus` reports a bad --rules-dir or --out (one line naming the flag, exit
2, no traceback).  tests/e2e/test_mesh_prometheus.py runs the output for real."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bigbinf.lab.mesh import layout as lab_layout
from bigbinf.mesh import cli
from bigbinf.mesh.config import MeshConfig, parse_mesh
from bigbinf.mesh.prometheus import all_exporters, render, site_config

MESH = """
name: m
sites:
  a: {address: a.example.org, data_dir: /srv/a, exporter: {listen: "127.0.0.1:9753"}}
  b: {address: 10.0.0.2, data_dir: /srv/b, exporter: {listen: "0.0.0.0:9754"}}
  c: {address: 10.0.0.3, data_dir: /srv/c, exporter: {listen: "dtn-c.example.org:9755"}}
  d: {address: 10.0.0.4, data_dir: /srv/d, exporter: {listen: "localhost:9756"}}
datasets: {f: {file: f.bin, size: 1MiB}}
protocols: {http: {}}
tests: [{protocols: [http], datasets: [f]}]
"""

LAB_MESH = """
name: l
lab: {name: bbt, state_dir: /tmp/bbt, subnet: 198.19.9.0/24}
sites:
  a: {exporter: {listen: "127.0.0.1:9753"}}
  b: {exporter: {listen: "0.0.0.0:9754"}}
datasets: {f: {file: f.bin, size: 1MiB}}
protocols: {http: {}}
tests: [{protocols: [http], datasets: [f]}]
"""


def mesh(extra: str = "") -> MeshConfig:
    return parse_mesh(MESH + extra, "m.yaml")


def test_central_targets_never_point_at_the_central_hosts_own_loopback() -> None:
    # Own hosts: loopback and wildcard binds at the site's address, the port kept.
    assert all_exporters(mesh()) == [
        {
            "labels": {"mesh": "m"},
            "targets": ["a.example.org:9753", "10.0.0.2:9754", "dtn-c.example.org:9755", "10.0.0.4:9756"],
        }
    ]
    # A lab mesh: the exporters run in the root namespace beside the central Prometheus,
    # which does not reach the sites' namespace addresses: loopback stays loopback.
    lab = parse_mesh(LAB_MESH, "l.yaml", lab=lab_layout)
    assert all_exporters(lab)[0]["targets"] == ["127.0.0.1:9753", "127.0.0.1:9754"]


def test_remote_write_auth_tls_headers_and_alertmanagers_come_from_the_mesh_file() -> None:
    plain = site_config(mesh(), "a")
    assert "alerting" not in plain
    assert set(plain["remote_write"][0]) == {"url", "name", "queue_config", "metadata_config"}
    doc = site_config(
        mesh(
            """
prometheus:
  remote_write_url: https://mimir.example.org/api/v1/push
  remote_write_headers: {X-Scope-OrgID: bigbinf}
  remote_write_basic_auth: {username: site, password_file: /etc/prometheus/central.password}
  remote_write_tls: {ca_file: /etc/prometheus/ca.pem, cert_file: /etc/prometheus/site.pem,
                     key_file: /etc/prometheus/site.key}
  alertmanagers: ["am1.example.org:9093", "am2.example.org:9093"]
"""
        ),
        "a",
    )
    rw = doc["remote_write"][0]
    assert rw["url"] == "https://mimir.example.org/api/v1/push"
    assert rw["headers"] == {"X-Scope-OrgID": "bigbinf"}
    assert rw["basic_auth"] == {"username": "site", "password_file": "/etc/prometheus/central.password"}
    assert rw["tls_config"] == {
        "ca_file": "/etc/prometheus/ca.pem",
        "cert_file": "/etc/prometheus/site.pem",
        "key_file": "/etc/prometheus/site.key",
    }
    assert doc["alerting"] == {
        "alertmanagers": [{"static_configs": [{"targets": ["am1.example.org:9093", "am2.example.org:9093"]}]}]
    }


def test_secrets_are_never_inline_and_reserved_headers_are_refused() -> None:
    from bigbinf.mesh.config import MeshError

    for bad in (
        "prometheus: {remote_write_basic_auth: {username: u, password: secret}}",
        "prometheus: {remote_write_headers: {Authorization: Bearer x}}",
        "prometheus: {alertmanagers: [am.example.org]}",
    ):
        with pytest.raises(MeshError):
            mesh(bad + "\n")


def run_cli(tmp_path: Path, *flags: str) -> int:
    path = tmp_path / "mesh.yaml"
    path.write_text(MESH)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["mesh", "prometheus", "--mesh.file", str(path), *flags])
    return int(args.func(args))


def test_a_missing_or_empty_rules_dir_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert run_cli(tmp_path, "--out", str(out), "--rules-dir", str(tmp_path / "nowhere")) == 2
    err = capsys.readouterr().err
    assert f"--rules-dir {tmp_path / 'nowhere'}: no such directory" in err and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    assert run_cli(tmp_path, "--out", str(out), "--rules-dir", str(tmp_path / "empty")) == 2
    err = capsys.readouterr().err
    assert "no rule files (*.yml)" in err and "python -m bigbinf.mixin.rules --out-dir" in err
    assert not out.exists()  # nothing half-written
    with pytest.raises(cli.UsageError, match="--rules-dir"):
        render(mesh(), out, rules_dir=tmp_path / "empty")


def test_an_out_dir_that_cannot_be_created_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "out"  # a file in the way: no directory can be made there, even by root
    assert run_cli(tmp_path, "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert f"--out {out}: cannot write" in err and "give a directory you can write to" in err
    assert "Traceback" not in err


def test_a_client_certificate_without_its_key_is_refused() -> None:
    half = mesh("prometheus: {remote_write_tls: {cert_file: /etc/prometheus/site.pem}}\n")
    with pytest.raises(cli.UsageError, match="cert_file and key_file together"):
        site_config(half, "a")


def test_an_ipv6_site_address_is_bracketed() -> None:
    six = parse_mesh(MESH.replace("address: 10.0.0.2", 'address: "2001:db8::2"'), "m.yaml")
    assert all_exporters(six)[0]["targets"][1] == "[2001:db8::2]:9754"


def test_each_prometheus_scrapes_itself_where_the_mesh_file_says_it_listens(tmp_path: Path) -> None:
    """Several Prometheus servers on one host (a lab mesh): each its own port, in its
    self-scrape target and in the header that says how to start it."""
    text = MESH.replace("address: 10.0.0.2", "address: 10.0.0.2, prometheus_listen: '127.0.0.1:9192'")
    out = tmp_path / "out"
    render(parse_mesh(text + "prometheus: {central_listen: 'localhost:9190'}\n", "m.yaml"), out)
    import json

    def target(site: str) -> list[str]:
        groups = json.loads((out / "sites" / site / "targets" / "prometheus.json").read_text())
        return [t for g in groups for t in g["targets"]]

    assert target("a") == ["localhost:9090"] and target("b") == ["127.0.0.1:9192"]
    assert "--web.listen-address=127.0.0.1:9192" in (out / "sites" / "b" / "prometheus.yml").read_text()
    central = (out / "central" / "prometheus.yml").read_text()
    assert "--web.listen-address=localhost:9190" in central and "- localhost:9190" in central
