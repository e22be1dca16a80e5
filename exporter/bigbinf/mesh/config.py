"""The mesh file: every site, the tests between them and their schedule, in one YAML file
that every site's exporter reads (as perfSONAR's pSConfig describes a mesh in one file).

Validated as the single-site configuration is (config.py): defaults filled in, unknown
keys rejected, every error gathered as `FILE: dotted.path: message`.  A site's exporter
runs from `site_config(mesh, site)`: an ordinary Config whose remotes are the other sites
it tests and whose transfers are its outgoing tests, so the live path is the same as for
a single-site exporter.

A lab mesh's names and paths (namespaces, interfaces, the sites' trees, the lab's key)
are the lab's to say: the composition root (cli.py) hands this module the lab's layout
function (`LabOf`, bigbinf.lab.mesh.layout) as a value, as it hands the live path the
single lab (measure.plan.LabSite).  So the lab imports the mesh (it builds a mesh's
sites), never the other way round.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from bigbinf.config import (
    CaptureConfig,
    Config,
    ConfigError,
    ConfigIssue,
    DatasetConfig,
    Direction,
    Duration,
    EnvName,
    InterfaceName,
    LabServerName,
    LinkConfig,
    LocalPath,
    MetricsConfig,
    Name,
    NetnsName,
    PlainPath,
    PositiveDuration,
    ProbeConfig,
    ProtocolConfig,
    TemplateElement,
    TransferConfig,
    UserName,
    _check_cron,
    _check_host,
    _check_lab_name,
    _check_no_control,
    _check_nonzero_rate,
    _check_rate,
    _check_timezone,
    mapping,
    pydantic_issues,
    read_config_text,
    read_yaml,
    validate_config,
)
from bigbinf.protocols import REGISTRY, module_for


class _Strict(BaseModel):
    # As config.py's: unknown keys refused, values frozen.  Not imported from there: ruff
    # sees only this file, so an imported base is not known to be a pydantic model, and
    # RUF012 would flag every list default (which pydantic copies per instance).
    model_config = ConfigDict(extra="forbid", frozen=True)


_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")

# Interface names are limited to 15 bytes: <name><index><s|c|w|v|da|db>, index up to 2 digits.
_check_mesh_lab_name = functools.partial(_check_lab_name, max_length=9)

# The lab's addresses: the benchmarking range (RFC 2544), never routed, so a lab cannot
# collide with (or reach) a real network.
LAB_RANGE = ipaddress.IPv4Network("198.18.0.0/15")


def _check_subnet(value: str) -> str:
    try:
        network = ipaddress.ip_network(value)
    except ValueError:
        try:
            loose = ipaddress.ip_network(value, strict=False)
        except ValueError:
            raise ValueError(f"{value!r} is not an IPv4 subnet; write e.g. 198.19.0.0/24") from None
        raise ValueError(f"{value!r} has host bits set; write its network address, {loose.with_prefixlen}") from None
    if not isinstance(network, ipaddress.IPv4Network) or network.prefixlen > 29:
        raise ValueError(f"{value!r}: give an IPv4 subnet of /29 or larger, e.g. 198.19.0.0/24")
    if not network.subnet_of(LAB_RANGE):
        raise ValueError(
            f"{value!r} is outside {LAB_RANGE}, the benchmarking range a lab must use; "
            "choose a subnet inside it, e.g. 198.19.0.0/24"
        )
    return value


def _check_write_url(value: str) -> str:
    url = urllib.parse.urlsplit(value)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL with a host; write e.g. http://central:9090/api/v1/write")
    return value


def _check_scrape_interval(value: float) -> float:
    if value < 1:
        raise ValueError(f"{value:g} s is too short a scrape interval; give 1s or more (15s is usual)")
    return value


def _check_listen(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not host:port; write e.g. dtn.example.org:9753")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if bare not in ("0.0.0.0", "::", "*"):
        try:
            _check_host(bare)
        except ValueError:
            raise ValueError(f"{value!r}: {host!r} is neither an address nor a host name") from None
    return value


Listen = Annotated[str, AfterValidator(_check_listen)]


class SiteExporterConfig(_Strict):
    """Where a site's exporter listens (its Prometheus scrapes it there) and journals, as
    written; unset: the defaults of exporter_of (per site in a lab mesh).  Read them with
    exporter_of(mesh, site), never from here."""

    listen: Listen | None = None
    journal: LocalPath | None = None


class SiteConfig(_Strict):
    """A site: how the others reach it (as a remote), what it serves, and its own exporter."""

    address: Annotated[str, AfterValidator(_check_host)] | None = None  # lab: from lab.subnet
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    user: UserName = "root"
    # The private key the other sites' exporters log in here with: the same path on every
    # exporter host (docs/deployment.md); lab: the lab's key.
    key: PlainPath | None = None
    ssh_config: PlainPath | None = None
    password_env: EnvName | None = None
    data_dir: PlainPath | None = None  # lab: the site's own served tree
    upload_dir: PlainPath | None = None
    serve_root: PlainPath | None = None
    checksums: LocalPath | None = None
    bandwidth: Annotated[str, AfterValidator(_check_rate), AfterValidator(_check_nonzero_rate)] | None = None
    probe: ProbeConfig = ProbeConfig()
    stats_command: list[TemplateElement] | None = None
    tcp_command: list[TemplateElement] | None = None
    servers: list[LabServerName] | None = None  # what it serves; default: every server
    # This site's own exporter: where it runs transfers from, and captures.
    netns: NetnsName | None = None
    interface: InterfaceName = "any"
    exporter: SiteExporterConfig = SiteExporterConfig()
    node_exporter: Listen | None = None  # scraped by the site's Prometheus too (mesh prometheus)
    # Where the site's Prometheus listens (its --web.listen-address): its self-scrape target.
    prometheus_listen: Listen = "localhost:9090"
    link: LinkConfig = LinkConfig()  # lab only: the site's access link (rate, delay)


class MeshTest(_Strict):
    """protocols x datasets x directions, between the listed pairs (from, to) or all pairs."""

    protocols: Annotated[list[Name], Field(min_length=1)]
    datasets: Annotated[list[Name], Field(min_length=1)]
    directions: Annotated[list[Direction], Field(min_length=1)] = ["download"]
    pairs: Literal["all"] | list[Annotated[list[Name], Field(min_length=2, max_length=2)]] = "all"
    budget: PositiveDuration | None = None  # the slot of each of these tests; default: measured


class MeshSchedule(_Strict):
    # Each start opens a round that must end before the next start (mesh plan says whether it does).
    cron: list[Annotated[str, AfterValidator(_check_cron)]] = ["0 3 * * *", "0 13 * * *"]
    interval: PositiveDuration | None = None  # instead of cron: rounds every interval from local midnight
    timezone: Annotated[str, AfterValidator(_check_timezone)] = "UTC"
    guard: Duration = 5.0  # between two slots that share a site: clock offsets, connection teardown
    repetitions: Annotated[int, Field(ge=1, le=100)] = 1  # times each test runs per round
    budget: PositiveDuration = 600.0  # a test's slot when it has no budget, no measured duration, no rate
    headroom: Annotated[float, Field(ge=1.0, le=100.0)] = 1.5  # slot = typical duration x headroom
    # Recent durations (written by `mesh durations` from the journals), the same file at every site.
    durations: LocalPath | None = None


class MeshLabConfig(_Strict):
    name: Annotated[str, AfterValidator(_check_mesh_lab_name)] = "bbmesh"
    state_dir: PlainPath = Path("/var/lib/bigbinf/mesh-lab")
    subnet: Annotated[str, AfterValidator(_check_subnet)] = "198.19.0.0/24"


def _check_remote_write_headers(value: dict[str, str]) -> dict[str, str]:
    # Prometheus refuses these in remote_write.headers (it sets them itself, or basic_auth does).
    reserved = {"authorization", "host", "content-encoding", "content-type", "user-agent", "connection", "keep-alive"}
    reserved |= {"proxy-authenticate", "proxy-authorization", "www-authenticate", "retry-after"}
    reserved |= {"x-prometheus-remote-write-version"}
    for name, text in value.items():
        if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name) or _CONTROL_CHARS.search(text):
            raise ValueError(f"{name!r}: a header name is a token and its value has no control characters")
    bad = [k for k in value if k.lower() in reserved]
    if bad:
        raise ValueError(f"Prometheus sets {', '.join(bad)} itself; use remote_write_basic_auth for credentials")
    return value


class MeshBasicAuth(_Strict):
    """remote_write basic auth: the password only by file (on each site's host), never inline."""

    username: Annotated[str, Field(min_length=1), AfterValidator(_check_no_control)]
    password_file: LocalPath


class MeshTLS(_Strict):
    """remote_write TLS, as Prometheus's tls_config: files on each site's host."""

    ca_file: LocalPath | None = None
    cert_file: LocalPath | None = None
    key_file: LocalPath | None = None
    insecure_skip_verify: bool = False


class MeshPrometheusConfig(_Strict):
    """For the generated Prometheus files (mesh prometheus): each site's forwards here."""

    remote_write_url: Annotated[str, AfterValidator(_check_write_url)] = "http://127.0.0.1:9090/api/v1/write"
    scrape_interval: Annotated[PositiveDuration, AfterValidator(_check_scrape_interval)] = 15.0
    # e.g. {X-Scope-OrgID: bigbinf} (Mimir), {THANOS-TENANT: bigbinf} (Thanos Receive)
    remote_write_headers: Annotated[dict[str, str], AfterValidator(_check_remote_write_headers)] = {}
    remote_write_basic_auth: MeshBasicAuth | None = None
    remote_write_tls: MeshTLS | None = None
    alertmanagers: list[Listen] = []  # host:port, in every site's alerting: (the sites' rules alert)
    # Where the central Prometheus listens (its --web.listen-address): its self-scrape target.
    central_listen: Listen = "localhost:9090"


class MeshConfig(_Strict):
    name: Name = "mesh"
    sites: Annotated[dict[Name, SiteConfig], Field(min_length=2)]
    datasets: dict[Name, DatasetConfig]
    protocols: dict[Name, ProtocolConfig]
    tests: Annotated[list[MeshTest], Field(min_length=1)]
    schedule: MeshSchedule = MeshSchedule()
    transfer: TransferConfig = TransferConfig()
    capture: CaptureConfig = CaptureConfig()
    metrics: MetricsConfig = MetricsConfig()
    prometheus: MeshPrometheusConfig = MeshPrometheusConfig()
    lab: MeshLabConfig | None = None  # every site is a namespace of a local lab (lab up --mesh.file)


class MeshError(ConfigError):
    """A mesh file that cannot be used: every issue with its place."""


# ---------------------------------------------------------------- tests


def test_pairs(mesh: MeshConfig, test: MeshTest) -> list[tuple[str, str]]:
    """The (from, to) pairs of a test, in mesh order: every ordered pair of distinct sites for "all"."""
    if test.pairs == "all":
        return [(a, b) for a in mesh.sites for b in mesh.sites if a != b]
    return [(a, b) for a, b in test.pairs]


# Not a pytest test, whatever its name (kept: bigbinf.lab.mesh imports it by this name).
test_pairs.__test__ = False  # type: ignore[attr-defined]


def outgoing(mesh: MeshConfig, site: str) -> list[tuple[str, str, str, str]]:
    """(to, protocol, dataset, direction) of every test `site` runs, in mesh order, once each."""
    seen: dict[tuple[str, str, str, str], None] = {}
    for test in mesh.tests:
        # "all": only this site's own pairs (test_pairs' order), not every pair of the mesh.
        pairs = [(site, b) for b in mesh.sites if b != site] if test.pairs == "all" else test_pairs(mesh, test)
        for a, b in pairs:
            if a != site:
                continue
            for protocol in test.protocols:
                for dataset in test.datasets:
                    for direction in test.directions:
                        seen.setdefault((b, protocol, dataset, direction), None)
    return list(seen)


# ---------------------------------------------------------------- validation


def _needed_servers(name: str, proto: Mapping[str, Any]) -> tuple[str, ...]:
    profile = REGISTRY.get(module_for(name, proto.get("module")))
    if profile is None or profile.check_options(mapping(proto, "options")):
        return ()
    servers = profile.lab_servers(profile.option_values(mapping(proto, "options")))
    return tuple(s for s in servers if s != "gridftp-client")


def _cross_issues(raw: Mapping[str, Any]) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    sites, datasets, protocols = mapping(raw, "sites"), mapping(raw, "datasets"), mapping(raw, "protocols")
    lab = raw.get("lab") is not None
    if isinstance(raw.get("sites"), dict) and len(sites) < 2:
        only = f" (it has {len(sites)}: {', '.join(sites)})" if sites else ""
        issues.append(
            ConfigIssue(
                "sites",
                f"a mesh needs at least 2 sites{only}; for one site testing remotes, write a single-site "
                "configuration (docs/configuration.md) and run it with --config.file",
            )
        )
    for name, site in sites.items():
        if not isinstance(site, dict):
            continue
        if not lab:
            for key in ("address", "data_dir"):
                if not site.get(key):
                    issues.append(ConfigIssue(f"sites.{name}.{key}", "required unless the mesh has a lab: section"))
            if site.get("link") not in (None, {}):
                issues.append(
                    ConfigIssue(f"sites.{name}.link", "only a lab mesh shapes access links; remove it or add lab:")
                )
    if lab:
        issues += _lab_address_issues(sites, mapping(raw, "lab").get("subnet", MeshLabConfig().subnet))
    for i, test in enumerate(raw.get("tests") or []):
        if not isinstance(test, dict):
            continue
        where = f"tests[{i}]"
        for key, known in (("protocols", protocols), ("datasets", datasets)):
            for j, value in enumerate(test.get(key) or []):
                if value not in known:
                    issues.append(
                        ConfigIssue(
                            f"{where}.{key}[{j}]",
                            f"no {key[:-1]} named {value!r}; defined: {', '.join(known) or 'none'}",
                        )
                    )
        pairs = test.get("pairs", "all")
        for j, pair in enumerate(pairs if isinstance(pairs, list) else []):
            if not isinstance(pair, list) or len(pair) != 2:
                continue
            for k, site_name in enumerate(pair):
                if site_name not in sites:
                    issues.append(
                        ConfigIssue(
                            f"{where}.pairs[{j}][{k}]", f"no site named {site_name!r}; defined: {', '.join(sites)}"
                        )
                    )
            if pair[0] == pair[1]:
                issues.append(ConfigIssue(f"{where}.pairs[{j}]", "a site cannot test itself; name two sites"))
        ends = [p[1] for p in pairs if isinstance(p, list) and len(p) == 2] if isinstance(pairs, list) else list(sites)
        for j, protocol in enumerate(test.get("protocols") or []):
            proto = protocols.get(protocol)
            if not isinstance(proto, dict):
                continue
            for direction in test.get("directions") or ["download"]:
                if direction not in (proto.get("directions") or ["download"]):
                    issues.append(
                        ConfigIssue(
                            f"{where}.directions",
                            f"protocol {protocol!r} does not run {direction}s; "
                            f"add it to protocols.{protocol}.directions",
                        )
                    )
            for server in _needed_servers(protocol, proto):
                for end in dict.fromkeys(ends):
                    site = sites.get(end)
                    served = site.get("servers") if isinstance(site, dict) else None
                    if isinstance(served, list) and server not in served:
                        issues.append(
                            ConfigIssue(
                                f"{where}.protocols[{j}]",
                                f"{protocol!r} needs {server} at {end}, which does not serve it "
                                f"(sites.{end}.servers: {', '.join(served) or 'none'}); add it there or "
                                "leave that pair out",
                            )
                        )
    return issues


def _lab_address_issues(sites: Mapping[str, Any], subnet: Any) -> list[ConfigIssue]:
    """A lab mesh's addresses: each given one an IPv4 host of lab.subnet, none twice."""
    try:
        network = ipaddress.ip_network(subnet)
    except (TypeError, ValueError):
        return []  # reported by the schema check
    if not isinstance(network, ipaddress.IPv4Network):
        return []
    issues = []
    hosts = network.num_addresses - 2
    if len(sites) > min(hosts, 99):
        issues.append(
            ConfigIssue("lab.subnet", f"{len(sites)} sites need more addresses than {subnet} has (at most 99)")
        )
    given: dict[str, ipaddress.IPv4Address | None] = {}
    for name, site in sites.items():
        value = site.get("address") if isinstance(site, dict) else None
        if value is None:
            given[name] = None
            continue
        try:
            address = ipaddress.IPv4Address(value if isinstance(value, str) else "")
        except ValueError:
            issues.append(
                ConfigIssue(f"sites.{name}.address", f"{value!r} is not an IPv4 address; a lab site needs one")
            )
            continue
        if address not in network:
            issues.append(
                ConfigIssue(f"sites.{name}.address", f"{value} is outside lab.subnet {network}; give one inside it")
            )
        elif address in (network.network_address, network.broadcast_address):
            which = "network" if address == network.network_address else "broadcast"
            issues.append(
                ConfigIssue(f"sites.{name}.address", f"{value} is lab.subnet's {which} address; give a host address")
            )
        else:
            given[name] = address
    if len(sites) > min(hosts, 99) or len(given) < len(sites):
        return issues  # automatic numbering needs every given address sound
    owner: dict[ipaddress.IPv4Address, str] = {}
    for name, address in zip(given, _number(network, list(given.values())), strict=True):
        if address in owner:
            issues.append(
                ConfigIssue(
                    f"sites.{name}.address",
                    f"{address} is sites.{owner[address]}'s address too; give each site its own",
                )
            )
        else:
            owner[address] = name
    return issues


def _number(network: ipaddress.IPv4Network, given: list[ipaddress.IPv4Address | None]) -> list[ipaddress.IPv4Address]:
    """Every site's lab address in file order: its own if given, else the next host of the
    subnet (from its first) that no site gives explicitly and no earlier site was given."""
    taken = {a for a in given if a is not None}
    hosts = network.hosts()
    numbered = []
    for address in given:
        if address is None:
            address = next(h for h in hosts if h not in taken)  # counted in _lab_address_issues
            taken.add(address)
        numbered.append(address)
    return numbered


def _schedule_issues(raw: Mapping[str, Any]) -> list[ConfigIssue]:
    schedule = mapping(raw, "schedule")
    if "cron" in schedule and schedule.get("interval") is not None:
        # Both would be silently resolved (interval wins): say it instead.
        return [ConfigIssue("schedule", "give cron or interval, not both")]
    return []


# A remote's keys that come from that site's own section (remote_of): an issue with one is
# the remote site's to fix, said once, not once per site that tests it.
_REMOTE_SITE_KEYS = frozenset(
    (
        "address", "port", "user", "key", "ssh_config", "password_env", "data_dir", "upload_dir",
        "serve_root", "checksums", "bandwidth", "probe", "stats_command", "tcp_command",
    )
)  # fmt: skip


_MESH_SECTIONS = frozenset(("protocols", "datasets", "transfer", "capture", "metrics"))


def _site_issue(mesh: MeshConfig, site: str, issue: ConfigIssue) -> ConfigIssue:
    """An issue of `site`'s derived configuration, placed where the mesh file can fix it."""
    parts = issue.path.split(".", 2)
    if parts[0] in _MESH_SECTIONS or parts[0] == "sites":  # already placed in the mesh file
        return issue
    if mesh.lab is None and len(parts) >= 3 and parts[0] == "remotes" and parts[1] in mesh.sites:
        key = parts[2].split(".")[0].split("[")[0]
        if key in _REMOTE_SITE_KEYS:
            return ConfigIssue(f"sites.{parts[1]}.{parts[2]}", issue.message)
    return ConfigIssue(f"sites.{site} (its exporter's configuration) {issue.path}", issue.message)


def parse_mesh(text: str, source: str, lab: LabOf | None = None) -> MeshConfig:
    """The mesh file's text, validated; `lab` lays out a lab mesh's sites (required for a
    mesh with a lab: section, whose sites' configurations are validated too)."""
    try:
        raw = read_yaml(text, source, "sites, datasets, protocols and tests")
    except ConfigError as exc:  # a YAML error is a mesh error too (callers catch MeshError)
        raise MeshError(source, exc.issues) from None
    issues = _cross_issues(raw) + _schedule_issues(raw)
    mesh = None
    try:
        mesh = MeshConfig.model_validate(raw)
    except ValidationError as exc:
        # Too few sites is said once, in one line, by _cross_issues (not with the input dumped).
        found = pydantic_issues(exc, MeshConfig)
        issues = [i for i in found if not (i.path == "sites" and "at least 2" in i.message)] + issues
    if mesh is not None and not issues:
        issues = _exporter_issues(mesh) + _host_issues(mesh)
    if mesh is not None and not issues:
        # Every site's own configuration must be valid too (the single-site checks: keys,
        # cleanup commands, congestion...): said with the site it is for.
        layout = _lab_of(mesh, source, lab)
        for site in (s for s in mesh.sites if outgoing(mesh, s)):
            try:
                site_config(mesh, site, source, layout=layout)
            except ConfigError as exc:
                issues += [_site_issue(mesh, site, i) for i in exc.issues]
        issues = list(dict.fromkeys(issues))  # a remote's issue comes once from every site testing it
    if issues or mesh is None:
        raise MeshError(source, issues)
    return mesh


def load_mesh(path: str | Path, lab: LabOf | None = None) -> MeshConfig:
    source = str(path)
    try:
        text = read_config_text(path, source)
    except ConfigError as exc:
        raise MeshError(source, exc.issues) from None
    mesh = parse_mesh(text, source, lab)
    durations = mesh.schedule.durations
    if durations is not None and not durations.is_absolute():
        # Distributed beside the mesh file: relative to it, not to wherever the exporter starts.
        schedule = mesh.schedule.model_copy(update={"durations": Path(path).parent / durations})
        mesh = mesh.model_copy(update={"schedule": schedule})
    return mesh


# ---------------------------------------------------------------- one site's view


def lab_addresses(mesh: MeshConfig) -> dict[str, str]:
    """Every site's lab address, in mesh order: its `address` if given, else the next free
    host of lab.subnet (in file order, skipping the addresses sites give explicitly)."""
    assert mesh.lab is not None
    network = ipaddress.IPv4Network(mesh.lab.subnet)
    given = [ipaddress.IPv4Address(s.address) if s.address else None for s in mesh.sites.values()]
    return {name: str(a) for name, a in zip(mesh.sites, _number(network, given), strict=True)}


class LabMeshSite(Protocol):
    """One site of a lab mesh as the lab names it (bigbinf.lab.mesh_layout.MeshSiteLayout)."""

    @property
    def address(self) -> str: ...
    @property
    def netns(self) -> str: ...
    @property
    def interface(self) -> str:
        """The site's end of its access link: where its exporter captures."""
        ...

    @property
    def data_dir(self) -> Path: ...
    @property
    def upload_dir(self) -> Path: ...
    @property
    def serve_root(self) -> Path: ...
    @property
    def checksums(self) -> Path: ...


class LabMesh(Protocol):
    """A lab mesh's names and paths (bigbinf.lab.mesh_layout.MeshLabLayout): the one key
    that logs in everywhere, the ssh_config naming every site, and each site's names."""

    @property
    def client_key(self) -> Path: ...
    @property
    def ssh_config(self) -> Path: ...
    def site(self, name: str) -> LabMeshSite: ...


# Lays out a lab mesh (bigbinf.lab.mesh.layout): (mesh, source) -> its LabMesh, or a
# MeshError naming the source when a site's lab settings cannot be laid out.  Built once
# per load, in O(sites): pass the result to remote_of / site_config rather than per remote.
LabOf = Callable[[MeshConfig, str], LabMesh]


class NoLabGiven(ValueError):
    """A lab mesh's sites were asked for without the lab that lays them out (a caller's
    mistake, not the mesh file's): pass lab=bigbinf.lab.mesh.layout."""


def _lab_of(mesh: MeshConfig, source: str, lab: LabOf | None) -> LabMesh | None:
    if mesh.lab is None:
        return None
    if lab is None:
        raise NoLabGiven(f"{source}: a lab mesh's sites are laid out by the lab: pass lab=bigbinf.lab.mesh.layout")
    return lab(mesh, source)


# A lab mesh's exporters all run on the lab's host: each its own port and journal.
LAB_EXPORTER_PORT = 9761
DEFAULT_LISTEN = "127.0.0.1:9753"
DEFAULT_JOURNAL = Path("/var/lib/bigbinf/journal.jsonl")


@dataclass(frozen=True)
class SiteExporter:
    """Where a site's exporter listens and journals, defaults resolved (exporter_of)."""

    listen: str
    journal: Path


def exporter_of(mesh: MeshConfig, site: str) -> SiteExporter:
    """Site `site`'s exporter: sites.NAME.exporter, with the defaults for what it leaves out:
    127.0.0.1:9753 and /var/lib/bigbinf/journal.jsonl, or in a lab mesh (every exporter on
    one host) per site: 127.0.0.1:(9761 + the site's index) and
    /var/lib/bigbinf/<mesh name>/<site>/journal.jsonl (outside lab.state_dir, which
    `lab down` deletes)."""
    given = mesh.sites[site].exporter
    if mesh.lab is None:
        listen, journal = DEFAULT_LISTEN, DEFAULT_JOURNAL
    else:
        index = list(mesh.sites).index(site)
        listen = f"127.0.0.1:{LAB_EXPORTER_PORT + index}"
        journal = Path("/var/lib/bigbinf") / mesh.name / site / "journal.jsonl"
    return SiteExporter(given.listen or listen, given.journal or journal)


_WILDCARDS = frozenset(("0.0.0.0", "::", "[::]", "*", ""))


def _exporter_issues(mesh: MeshConfig) -> list[ConfigIssue]:
    """A lab mesh's exporters share one host: no two may listen on one port or share a journal."""
    if mesh.lab is None:
        return []  # real sites' exporters run on their own hosts
    issues = []
    listens: list[tuple[str, str, str]] = []  # (site, host, port)
    journals: dict[Path, str] = {}
    for name in mesh.sites:
        exporter = exporter_of(mesh, name)
        host, _, port = exporter.listen.rpartition(":")
        for other, other_host, other_port in listens:
            if port == other_port and (host == other_host or host in _WILDCARDS or other_host in _WILDCARDS):
                issues.append(
                    ConfigIssue(
                        f"sites.{name}.exporter.listen",
                        f"{exporter.listen}: sites.{other}'s exporter listens there too (a lab mesh's exporters "
                        "share one host); give each its own port",
                    )
                )
                break
        listens.append((name, host, port))
        journal = Path(os.path.normpath(exporter.journal))
        if journal in journals:
            issues.append(
                ConfigIssue(
                    f"sites.{name}.exporter.journal",
                    f"{exporter.journal}: sites.{journals[journal]}'s exporter journals there too; "
                    "give each its own journal",
                )
            )
        else:
            journals[journal] = name
    return issues


def _host(address: str) -> str:
    """An address as one host: an IP address in its canonical form, a name in lower case
    without its final dot (DNS names are case-insensitive; `a.example.org.` is `a.example.org`)."""
    try:
        return ipaddress.ip_address(address).compressed
    except ValueError:
        return address.lower().removesuffix(".")


def _host_issues(mesh: MeshConfig) -> list[ConfigIssue]:
    """Outside a lab no two sites may be one host: the same address and ssh port would be
    planned as two sites whose tests the plan runs side by side on one machine."""
    if mesh.lab is not None:
        return []  # the lab numbers its sites itself (_lab_address_issues)
    issues: list[ConfigIssue] = []
    owners: dict[tuple[str, int], str] = {}
    for name, site in mesh.sites.items():
        if site.address is None:
            continue  # reported as required
        host = (_host(site.address), site.port)
        if host in owners:
            issues.append(
                ConfigIssue(
                    f"sites.{name}.address",
                    f"{site.address} port {site.port} is sites.{owners[host]}'s host too: two sites would share "
                    "one machine, and the plan would run their tests side by side; give each site its own host "
                    "(or port), or merge the two into one site",
                )
            )
        else:
            owners[host] = name
    return issues


def _rate(site: SiteConfig, lab: bool) -> str | None:
    return site.bandwidth or (site.link.rate if lab else None)


def path_bandwidth(mesh: MeshConfig, a: str, b: str) -> float | None:
    """Bytes/s of the slower of the two sites' access links (bandwidth, or the lab's rate);
    None unless both are known (one known end says nothing of the other's)."""
    rates = [_rate(mesh.sites[s], mesh.lab is not None) for s in (a, b)]
    if not all(rates):
        return None
    return min(_rate_bytes(r) for r in rates if r)


@functools.lru_cache(maxsize=1024)  # a mesh has few rates and many paths (planning asks per test)
def _rate_bytes(rate: str) -> float:
    from bigbinf.config import rate_bytes_per_second

    return rate_bytes_per_second(rate)


def remote_of(mesh: MeshConfig, src: str, dst: str, layout: LabMesh | None = None) -> dict[str, Any]:
    """`dst` as a remote of `src`'s exporter (a RemoteConfig mapping).  In a lab mesh,
    `layout` is the lab's (LabOf), which names the sites' namespaces and trees."""
    site, own = mesh.sites[dst], mesh.sites[src]
    remote: dict[str, Any] = {
        "port": site.port,
        "user": site.user,
        "probe": site.probe.model_dump(),
        "interface": own.interface,
    }
    for key in ("address", "key", "ssh_config", "password_env", "data_dir", "upload_dir", "serve_root", "checksums"):
        value = getattr(site, key)
        if value is not None:
            remote[key] = str(value) if isinstance(value, Path) else value
    for key in ("stats_command", "tcp_command"):
        if getattr(site, key) is not None:
            remote[key] = list(getattr(site, key))
    if own.netns:
        remote["netns"] = own.netns
    rate = path_bandwidth(mesh, src, dst)
    if rate:
        remote["bandwidth"] = f"{round(rate)}bps"
    if mesh.lab is not None:
        if layout is None:
            raise NoLabGiven(f"sites.{dst}: a lab mesh's sites are laid out by the lab: pass its layout")
        there, here = layout.site(dst), layout.site(src)
        remote.update(
            {
                "address": there.address,
                "port": 22,
                "user": "root",
                "key": str(layout.client_key),
                "ssh_config": str(layout.ssh_config),
                "data_dir": str(there.data_dir),
                "upload_dir": str(there.upload_dir),
                "serve_root": str(there.serve_root),
                "checksums": str(there.checksums),
                "netns": here.netns,
                "interface": here.interface,
                # The other site's sockets and sysctls, read and set in its namespace.
                "stats_command": ["ip", "netns", "exec", there.netns],
                "tcp_command": ["ip", "netns", "exec", there.netns],
            }
        )
    return remote


def site_config(
    mesh: MeshConfig, site: str, source: str = "mesh", lab: LabOf | None = None, layout: LabMesh | None = None
) -> Config:
    """The exporter configuration of `site`: its outgoing tests, the sites they go to as
    remotes.  A lab mesh's sites are laid out by `lab` (or give the `layout` it made)."""
    if site not in mesh.sites:
        raise MeshError(source, [ConfigIssue("sites", f"no site named {site!r}; defined: {', '.join(mesh.sites)}")])
    if layout is None:
        layout = _lab_of(mesh, source, lab)  # once for every remote, not once per remote
    tests = outgoing(mesh, site)
    remotes = {dst: remote_of(mesh, site, dst, layout) for dst in dict.fromkeys(t[0] for t in tests)}
    used_protocols = dict.fromkeys(t[1] for t in tests)
    used_datasets = dict.fromkeys(t[2] for t in tests)
    raw: dict[str, Any] = {
        "remotes": remotes,
        "datasets": {n: mesh.datasets[n].model_dump(mode="json") for n in used_datasets},
        "protocols": {n: mesh.protocols[n].model_dump(mode="json", exclude_defaults=True) for n in used_protocols},
        "schedule": {
            "timezone": mesh.schedule.timezone,
            "transfers": [
                {"protocol": p, "remote": r, "dataset": d, "direction": direction} for r, p, d, direction in tests
            ],
        },
        "transfer": mesh.transfer.model_dump(mode="json"),
        "capture": mesh.capture.model_dump(mode="json", exclude_none=True),
        "metrics": mesh.metrics.model_dump(mode="json"),
        "journal": {"path": str(exporter_of(mesh, site).journal)},
    }
    if not tests:
        raise MeshError(source, [ConfigIssue(f"sites.{site}", "no test starts at this site: nothing to run")])
    return validate_config(raw, f"{source} (site {site})")
