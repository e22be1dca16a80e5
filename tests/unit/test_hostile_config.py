"""Hostile strings in every string setting of the config and of the mesh file (issue 24).

Each one is either refused by the config's validation (what --config.check runs) with
the setting named, or the configuration runs and no command it makes runs anything
else: every transfer's argv of every protocol module, its cleanup, and the remote's
stats and tcp commands are run through tests/support/recording_stub.py (linked as ssh,
scp, sftp, rsync, lftp, curl, bbftp, ... first on PATH), which does with each string
what the real tool would do that could run a command (a ProxyCommand, the remote's
shell, lftp's own language through the real lftp, sftp's `!`, bbftp's command list),
so an injection creates the marker file.  (An element of an argv template is the author's
own argv, run as written: for those, it must stay one argument.)  hypothesis draws the strings (it shrinks a
failure to the shortest string that still gets through); the two reported injections
are reproduced first as plain tests."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args, get_origin
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from bigbinf import config as config_module
from bigbinf.config import Config, ConfigError, validate_config
from bigbinf.lab.mesh import layout as lab_layout
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import placeholder_values
from bigbinf.mesh.config import MeshConfig, MeshError, parse_mesh, site_config
from bigbinf.passive.watcher import PassiveWatcher
from bigbinf.process import Completed
from bigbinf.protocols import command, iperf3
from bigbinf.protocols.base import RunContext, TemplateError, render

from ..support.recording_stub import Stub


def base_config(tmp: Path) -> dict[str, Any]:
    """Every protocol module, both directions, files and trees, a custom command with a
    cleanup, stats and tcp commands over ssh: everything a string can reach."""
    (tmp / "sums").write_text("")
    both = {"directions": ["download", "upload"]}
    return {
        "remotes": {
            "site": {
                "address": "127.0.0.1",
                "port": 2222,
                "user": "bench",
                "key": "/etc/bigbinf/id",
                "ssh_config": "/etc/bigbinf/ssh_config",
                "data_dir": "/srv/data",
                "upload_dir": "/srv/upload",
                "serve_root": "/srv",
                "checksums": str(tmp / "sums"),
                "interface": "any",
                "password_env": "BB_HOSTILE_PW",
                "bandwidth": "1gbit",
                "stats_command": ["ssh", "-F", "{ssh_config}", "{user}@{host}"],
                "tcp_command": ["ssh", "-i", "{key}", "root@{host}"],
                "probe": {"enabled": False},
            }
        },
        "datasets": {"f1": {"file": "f1.bin", "size": "1KiB"}, "t1": {"file": "t1", "size": "1KiB", "count": 2}},
        "protocols": {
            "scp": both,
            "sftp": both,
            "ftp": both,
            "rsync": both,
            "rsyncd": {},
            "http": {**both, "cleanup_command": ["ssh", "{user}@{host}", "rm", "-rf", "--", "{remote_path}"]},
            "xrootd": {"directions": ["download"]},
            "bbftp": {**both, "cleanup_command": ["ssh", "{user}@{host}", "rm", "-rf", "--", "{remote_path}"]},
            "gridftp": {"directions": ["download"]},
            "iperf3": {"options": {"congestion": "cubic"}},
            "hpn": {"module": "scp", "binary": "hpnscp"},
            "custom": {
                "command": ["curl", "-o", "{local_path}", "http://{host}/{remote_name}"],
                "upload_command": ["curl", "-T", "{local_path}", "http://{host}/{remote_name}"],
                "cleanup_command": ["ssh", "{user}@{host}", "rm", "--", "{remote_path}"],
                **both,
            },
        },
        "schedule": {"interval": "1h", "timezone": "UTC"},
        "transfer": {"workdir": str(tmp / "work"), "timeout": "30s"},
        "capture": {"enabled": False, "directory": str(tmp / "captures")},
        "journal": {"path": str(tmp / "journal.jsonl")},
        # The passive watcher: its strings reach ss's argv (run_everything records them).
        "passive": {
            "enabled": True,
            "netns": "bbh-client",
            "remotes": {"archive": {"networks": ["198.51.100.0/24"]}},
            "services": {"ssh": ["22", "50000-51000"]},
        },
    }


# Every string setting (dotted path, list indices as [i]; "<key>" renames a mapping's key).
FIELDS = [
    "remotes.site.address", "remotes.site.user", "remotes.site.key", "remotes.site.ssh_config",
    "remotes.site.data_dir", "remotes.site.upload_dir", "remotes.site.serve_root", "remotes.site.checksums",
    "remotes.site.netns", "remotes.site.interface", "remotes.site.password_env", "remotes.site.bandwidth",
    "remotes.site.return_bandwidth",
    "remotes.site.stats_command[0]", "remotes.site.stats_command[3]", "remotes.site.tcp_command[3]",
    "remotes.site.probe.method", "remotes.<key>",
    "datasets.f1.file", "datasets.t1.file", "datasets.f1.size", "datasets.f1.create", "datasets.<key>",
    "protocols.custom.command[0]", "protocols.custom.command[2]", "protocols.custom.command[3]",
    "protocols.custom.upload_command[3]", "protocols.custom.cleanup_command[3]", "protocols.custom.cleanup_command[1]",
    "protocols.custom.module", "protocols.hpn.binary", "protocols.iperf3.options.congestion",
    "protocols.iperf3.options.<key>", "lab.remote_address", "sweeps.s1.options.<key>", "sweeps.s1.options.x[0]",
    "sweeps.s1.baseline.<key>", "sweeps.s1.baseline.congestion",
    "protocols.scp.congestion", "protocols.scp.timeout", "protocols.scp.directions[0]", "protocols.<key>",
    "schedule.cron[0]", "schedule.timezone", "schedule.interval", "schedule.jitter",
    "schedule.transfers[0].protocol", "schedule.transfers[0].remote", "schedule.transfers[0].dataset",
    "schedule.transfers[0].direction",
    "transfer.workdir", "transfer.timeout", "capture.directory", "capture.tool", "journal.path",
    "lab.name", "lab.state_dir", "lab.client_address", "lab.link.rate", "lab.servers[0]", "lab.datasets[0]",
    "sweeps.s1.protocol", "sweeps.s1.remote", "sweeps.s1.datasets[0]", "sweeps.s1.congestion[0]",
    "sweeps.s1.schedule[0]", "sweeps.s1.direction", "moves.direction", "sweeps.<key>",
    "passive.netns", "passive.remotes.<key>", "passive.remotes.archive.networks[0]", "passive.services.<key>",
    "passive.services.ssh[1]",
]  # fmt: skip
MESH_FIELDS = [
    "name", "sites.a.address", "sites.a.user", "sites.a.key", "sites.a.ssh_config", "sites.a.password_env",
    "sites.a.data_dir", "sites.a.upload_dir", "sites.a.serve_root", "sites.a.checksums", "sites.a.bandwidth",
    "sites.a.stats_command[0]", "sites.a.stats_command[3]", "sites.a.tcp_command[3]", "sites.a.netns",
    "sites.a.interface", "sites.a.exporter.listen", "sites.a.exporter.journal", "sites.a.node_exporter",
    "sites.a.servers[0]", "sites.<key>", "tests[0].protocols[0]", "tests[0].datasets[0]",
    "tests[0].directions[0]", "tests[0].pairs[0][0]", "schedule.cron[0]", "schedule.timezone",
    "schedule.durations", "prometheus.remote_write_url", "prometheus.remote_write_headers.X-Org",
    "prometheus.remote_write_basic_auth.username", "prometheus.remote_write_basic_auth.password_file",
    "prometheus.remote_write_tls.ca_file", "prometheus.alertmanagers[0]", "lab.name", "lab.state_dir",
    "lab.subnet", "protocols.custom.command[3]", "datasets.f1.file", "transfer.workdir", "sites.a.probe.method",
    "sites.a.link.rate", "tests[0].pairs", "prometheus.remote_write_headers.<key>",
    "prometheus.remote_write_tls.cert_file", "prometheus.remote_write_tls.key_file", "sites.a.prometheus_listen",
    "prometheus.central_listen",
]  # fmt: skip

PAYLOADS = ["$(touch {m})", "`touch {m}`", ";touch {m}", "|touch {m}", "||!touch {m}", "\ntouch {m}\n",
            "-oProxyCommand=touch {m}", "&&touch {m}", "'; touch {m}; '", '"; touch {m}; "', "!touch {m}",
            " -oProxyCommand=touch${{IFS}}{m}", ">{m}", "\" || !touch {m};#", "\\\"; !touch {m}"]  # fmt: skip


def hostile(marker: Path) -> st.SearchStrategy[str]:
    payload = st.sampled_from([p.format(m=marker) for p in PAYLOADS])
    return st.one_of(
        payload,
        st.builds(
            lambda a, p, b: a + p + b,
            st.sampled_from(["", "/srv/x", "-", "--", "bench", "x|", "/"]),
            payload,
            st.sampled_from(["", "#", ";", "/y", "\n", " x"]),
        ),
        st.text(max_size=30),
    )


def _marked(marker: Path) -> bool:
    """Whether an injection ran: the marker, or a file named after it (`touch M@host`)."""
    return any(marker.parent.glob(marker.name + "*"))


def _place(raw: dict[str, Any], path: str, value: str) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    node: Any = raw
    for i, part in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        key: Any = int(part[1:-1]) if part.startswith("[") else part
        if isinstance(node, dict) and key not in node:
            node[key] = [] if nxt.startswith("[") else {}
        node = node[key]
    last = parts[-1]
    if last == "<key>":
        node[value] = node.pop(next(iter(node))) if node else ["x"]
    elif last.startswith("["):
        index = int(last[1:-1])
        while len(node) <= index:
            node.append("x")
        node[index] = value
    else:
        node[last] = value
    return raw


def _named(issues: list[str], path: str, value: str) -> bool:
    """Whether one of the errors names the setting (or, for a key, the key)."""
    if path.endswith("<key>"):
        return any(value in line or repr(value) in line or path.split(".<key>")[0] in line for line in issues)
    generic = re.sub(r"\[\d+\]", "", path)
    return any(generic.split(".")[0] in line for line in issues) and any(
        re.sub(r"\[\d+\]", "", line).find(generic.rsplit(".", 1)[-1]) >= 0 or generic in line for line in issues
    )


def _completed(argv: Any, *args: Any, **kwargs: Any) -> Completed:
    _STUB[0].run(list(argv))
    return Completed(returncode=0, timed_out=False, duration_seconds=0.0, start_timestamp=0.0, stderr_tail="")


_STUB: list[Stub] = []


def run_everything(config: Config, tmp: Path, marker: Path) -> Path:
    """Every command the configuration makes, as the product makes them, through the stub
    (in place of running them); returns the record of what ran."""
    record = tmp / "record.jsonl"
    _STUB[:] = [Stub(record, marker, tmp / "stub")]
    with (
        mock.patch.object(command, "run_with_timeout", _completed),
        mock.patch.object(iperf3, "run_with_timeout", _completed),
    ):
        specs = plan_round(config)
        for spec in specs:
            workdir = tmp / "runs" / uuid.uuid4().hex[:8]
            workdir.mkdir(parents=True)
            source = workdir / "source" / spec.dataset_config.file
            values = placeholder_values(spec, workdir, source, "up.1", "127.0.0.1")
            try:
                argv = render(spec.template, values)
                cleanup = render(spec.cleanup, values) if spec.cleanup else []
            except TemplateError:
                continue  # refused at the last guard: the transfer fails, nothing runs
            context: RunContext[Any] = RunContext(
                argv=argv, timeout_seconds=60, workdir=workdir, netns=None, options=spec.options,
                values=values, direction=spec.direction, kind=spec.kind, password='p"w\\;!x',
            )  # fmt: skip
            spec.profile.runner(context)
            if cleanup:
                _STUB[0].run(cleanup)
        if config.passive.enabled:  # the watcher's listings and close events, as it builds them
            watcher = PassiveWatcher(config.passive, lambda _r: None)
            for argv in (watcher.list_argv, watcher.owners_argv, watcher.events_argv):
                _STUB[0].run(argv)
        for remote in {spec.remote.name: spec.remote for spec in specs}.values():
            for prefix in (remote.stats_command, remote.tcp_command):
                if prefix:
                    _STUB[0].run([*prefix, "ss", "-tinmH", "dst", "127.0.0.1"])
    return record


def check(raw: dict[str, Any], path: str, value: str, tmp: Path, marker: Path) -> str:
    """'refused' (with the setting named) or 'ran' (no marker); asserts either."""
    try:
        config = validate_config(raw, "hostile.yaml")
    except ConfigError as exc:
        lines = exc.lines()
        assert _named(lines, path, value), (path, value, lines)
        return "refused"
    record = run_everything(config, tmp, marker)
    if TEMPLATE.search(path):
        # An element of an argv template is the config author's own argv, run as written
        # (a command may well be `touch`): what must hold is that it stays one argument.
        argvs = [json.loads(line)["argv"] for line in record.read_text().splitlines()]
        assert _one_argument(value, argvs), (path, value)
        return "ran"
    assert not _marked(marker), (path, value, record.read_text()[-3000:])
    return "ran"


def _one_argument(value: str, argvs: list[list[str]]) -> bool:
    """A template's value that reached a command reached it whole, as one argument.  (Not
    "every argv with the value inside an element has it as an element": a short value
    such as "0" sits inside other arguments, e.g. an address, by coincidence.)"""
    seen = any(value in e for argv in argvs for e in argv)
    return not value or not seen or any(value in argv for argv in argvs)


TEMPLATE = re.compile(r"(command|stats_command|tcp_command|cleanup_command|upload_command)\[\d+\]$")


# ---------------------------------------------------------------- the two reported injections


def test_a_data_dir_written_for_lftps_language_is_refused_and_never_run(
    tmp_path: Path,
) -> None:
    """issue 24: `data_dir: "/srv/x||!touch${IFS}/tmp/marker;#"` on an FTP remote made lftp
    run the command in a local shell when the server answered 550 (here: could not
    connect).  Refused now; and run as the product would before, lftp ran it."""
    marker = tmp_path / "marker"
    raw = base_config(tmp_path)
    raw["remotes"]["site"]["data_dir"] = f"/srv/x||!touch${{IFS}}{marker};#"
    raw["protocols"] = {"ftp": {}}
    raw["datasets"] = {"t1": raw["datasets"]["t1"]}
    assert check(raw, "remotes.site.data_dir", raw["remotes"]["site"]["data_dir"], tmp_path, marker) == "refused"
    assert not _marked(marker)


def test_a_user_that_ssh_reads_as_an_option_is_refused_and_never_run(tmp_path: Path) -> None:
    """issue 24: `user: "-oProxyCommand=touch /tmp/marker"` with a stats_command of
    [ssh, ..., "{user}@{host}"]: ssh read the user as an option and ran it."""
    marker = tmp_path / "marker"
    raw = base_config(tmp_path)
    raw["remotes"]["site"]["user"] = f"-oProxyCommand=touch {marker}"
    raw["protocols"] = {"scp": {}}
    assert check(raw, "remotes.site.user", raw["remotes"]["site"]["user"], tmp_path, marker) == "refused"
    # The last guard: a value that did not come through validation is never placed.
    with pytest.raises(TemplateError, match=r"\{user\} would be"):
        render(["ssh", "{user}@{host}"], {"user": raw["remotes"]["site"]["user"], "host": "127.0.0.1"})


def test_the_real_ssh_runs_a_proxycommand_user_but_not_a_rendered_one(tmp_path: Path) -> None:
    """The injection is real: ssh runs the ProxyCommand of a user that starts with '-'
    (no server needed), and render() refuses to place such a user."""
    marker = tmp_path / "marker"
    user = f"-oProxyCommand=touch {marker}"
    ssh = shutil.which("ssh", path="/usr/bin:/bin")  # the real one, whatever the stubs did to PATH
    assert ssh
    argv = [ssh, "-o", "BatchMode=yes", "-F", "/dev/null", f"{user}@127.0.0.1", "true"]
    subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert _marked(marker)  # what the old code let through: ssh ran `touch MARKER@127.0.0.1`
    for made in tmp_path.glob("marker*"):
        made.unlink()
    with pytest.raises(TemplateError):
        render(["ssh", "-o", "BatchMode=yes", "{user}@{host}", "true"], {"user": user, "host": "127.0.0.1"})


def test_lftp_quoting_keeps_every_string_one_word(tmp_path: Path) -> None:
    """ftp.lftp_quote against the real lftp: `echo` of the quoted string prints it back."""
    from bigbinf.protocols.ftp import lftp_quote

    marker = tmp_path / "marker"
    for raw in [p.format(m=marker) for p in PAYLOADS if "\n" not in p] + ["a\\b", 'x"y', "x'y", "~/x", "a b"]:
        echo = ["/usr/bin/lftp", "--norc", "-c", "echo " + lftp_quote(raw)]
        out = subprocess.run(echo, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert out.stdout.rstrip("\n") == raw or raw.startswith("-"), (raw, out.stdout, out.stderr)
    assert not _marked(marker)


# ---------------------------------------------------------------- every field, random strings


def _fields_of(model: type[BaseModel], prefix: str = "") -> Iterator[str]:
    """Every setting of `model` that can hold a string, as a generic path (mapping keys: *)."""
    for name, field in model.model_fields.items():
        yield from _fields_of_annotation(field.annotation, f"{prefix}{name}")


def _fields_of_annotation(annotation: Any, path: str) -> Iterator[str]:
    annotation = config_module._unwrap(annotation)
    origin = get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from _fields_of(annotation, path + ".")
    elif origin is dict:
        _key, value = get_args(annotation)
        yield f"{path}.<key>"
        yield from _fields_of_annotation(value, f"{path}.*")
    elif origin is list:
        yield from _fields_of_annotation(get_args(annotation)[0], path + "[]")
    elif origin is not None and type(None) in get_args(annotation):
        for arg in get_args(annotation):
            yield from _fields_of_annotation(arg, path)
    elif annotation in (str, Path) or get_origin(annotation) is not None or annotation is Any:
        yield path


def _generic(path: str) -> str:
    """A FIELDS path as _fields_of names it: indices [], mapping keys *."""
    path = re.sub(r"\[\d+\]", "[]", path)
    return re.sub(
        r"^(remotes|datasets|protocols|sweeps|sites|passive\.remotes|passive\.services)\.[^.\[<]+|\.(options|baseline|remote_write_headers)\.(?!<key>)[^.\[]+",
        lambda m: f"{m.group(1)}.*" if m.group(1) else f".{m.group(2)}.*",
        path,
    )


# The mesh file's protocols, datasets, capture and transfer sections are config.py's own
# models (covered by FIELDS); only what is the mesh's own is listed in MESH_FIELDS.
SHARED_WITH_CONFIG = ("datasets", "protocols", "capture", "transfer", "metrics")


@pytest.mark.parametrize(("model", "fields"), [(Config, FIELDS), (MeshConfig, MESH_FIELDS)], ids=["config", "mesh"])
def test_the_hostile_fields_cover_every_string_setting(model: type[BaseModel], fields: list[str]) -> None:
    """A new string setting must join the property tests below."""
    covered = {_generic(f) for f in fields}
    missing = [
        path
        for path in _fields_of(model)
        if path not in covered and not (model is MeshConfig and path.split(".")[0] in SHARED_WITH_CONFIG)
    ]
    assert missing == []


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_hostile_string_in_any_setting_is_refused_or_runs_nothing(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    tmp = tmp_path_factory.mktemp("hostile")
    marker = tmp / "marker"
    raw = base_config(tmp)
    raw["lab"] = {"name": "bbh", "state_dir": str(tmp / "lab")}
    raw["sweeps"] = {"s1": {"protocol": "scp", "remote": "site", "datasets": ["f1"], "congestion": ["reno", "bbr"]}}
    raw["schedule"]["transfers"] = [{"protocol": p, "remote": "site", "dataset": "f1"} for p in raw["protocols"]]
    path = data.draw(st.sampled_from(FIELDS), label="setting")
    value = data.draw(hostile(marker), label="value")
    if path.startswith("schedule.cron"):
        raw["schedule"].pop("interval")  # one or the other
    check(_place(raw, path, value), path, value, tmp, marker)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_hostile_string_in_any_mesh_setting_is_refused_or_runs_nothing(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    tmp = tmp_path_factory.mktemp("hostile-mesh")
    marker = tmp / "marker"
    base = base_config(tmp)
    site = {k: v for k, v in base["remotes"]["site"].items() if k not in ("probe",)}
    raw = {
        "name": "m",
        "sites": {"a": dict(site), "b": {**site, "address": "127.0.0.2"}},
        "datasets": base["datasets"],
        "protocols": {"scp": {}, "sftp": {}, "ftp": {}, "rsync": {}, "custom": base["protocols"]["custom"]},
        "tests": [
            {"protocols": ["scp", "sftp", "ftp", "rsync", "custom"], "datasets": ["f1", "t1"], "pairs": [["b", "a"]]}
        ],
        "transfer": base["transfer"],
        "capture": base["capture"],
        "schedule": {"cron": ["0 3 * * *"], "timezone": "UTC"},
        "prometheus": {
            "remote_write_url": "http://127.0.0.1:9090/api/v1/write",
            "remote_write_headers": {"X-Org": "bigbinf"},
            "remote_write_basic_auth": {"username": "site", "password_file": "/etc/bigbinf/rw"},
            "remote_write_tls": {"ca_file": "/etc/bigbinf/ca.crt"},
            "alertmanagers": ["127.0.0.1:9093"],
        },
    }
    raw["sites"]["a"]["exporter"] = {"listen": "127.0.0.1:9753", "journal": str(tmp / "a.jsonl")}
    raw["sites"]["a"]["node_exporter"] = "127.0.0.1:9100"
    path = data.draw(st.sampled_from(MESH_FIELDS), label="setting")
    value = data.draw(hostile(marker), label="value")
    if path.startswith("lab."):
        # A `lab:` section makes the sites lab namespaces, whose addresses must lie in
        # lab.subnet (198.19.0.0/24 by default): else a harmless lab.name is refused for
        # the addresses, which is right but names another setting.
        raw["sites"]["a"]["address"], raw["sites"]["b"]["address"] = "198.19.0.2", "198.19.0.3"
    raw = _place(raw, path, value)
    try:
        mesh = parse_mesh(yaml.safe_dump(raw), "mesh.yaml")
    except MeshError as exc:
        assert _named(exc.lines(), path, value), (path, value, exc.lines())
        return
    # A lab setting that passed (a lab name such as 'a') makes a lab mesh, whose sites the
    # lab lays out (names and paths only: nothing is built here).
    record = run_everything(site_config(mesh, "b", "mesh.yaml", lab=lab_layout), tmp, marker)
    if TEMPLATE.search(path):  # the author's own argv (see check)
        argvs = [json.loads(line)["argv"] for line in record.read_text().splitlines()]
        assert _one_argument(value, argvs), (path, value)
        return
    assert not _marked(marker), (path, value)


def test_a_run_through_the_stubs_records_every_tool(tmp_path: Path) -> None:
    """The harness itself: a valid configuration's commands all reach the stubs (else the
    property test above would pass by running nothing)."""
    config = validate_config(base_config(tmp_path), "ok.yaml")
    record = run_everything(config, tmp_path, tmp_path / "marker")
    tools = {line.split('"tool": "', 1)[1].split('"', 1)[0] for line in record.read_text().splitlines()}
    assert {"ssh", "scp", "sftp", "rsync", "lftp", "curl", "bbftp", "globus-url-copy", "xrdcp", "iperf3"} <= tools
    assert "hpnscp" in tools  # the binary setting
