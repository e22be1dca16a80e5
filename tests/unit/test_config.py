"""Configuration validation: every error gathered, each named by file and path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bigbinf.config import ConfigError, load_config, parse_config, parse_duration, parse_size

ROOT = Path(__file__).resolve().parents[2]
SRC = "schedules/t.yaml"
BASE = """
remotes:
  lab: {lab: true}
datasets:
  f1: {file: f1.bin, size: 1MiB}
protocols:
  scp: {}
lab: {name: t1}
"""
KNOWN_PLACEHOLDERS = (
    "{host}, {url_host}, {client}, {url_client}, {port}, {user}, {key}, {ssh_config}, {remote_path}, {remote_name}, "
    "{remote_dir}, {file}, {local_path}, {local_dir}, {size}, {binary}"
)
PROTOCOL_KEYS = (
    "module, binary, options, command, upload_command, cleanup_command, directions, timeout, congestion, tcp_buffer_max"
)
MODULES = "command, scp, hpnscp, sftp, ftp, gridftp, bbftp, rsync, rsyncd, http, xrootd, iperf3"

PLAIN = (
    "is not a plain absolute path: start with '/' and use letters, digits, '_', '.', '+', '-', '/' (it reaches "
    "commands, remote shells and URLs; a symlink with such a name will do)"
)
BAD = [
    (
        "unknown placeholder",
        BASE.replace("scp: {}", 'scp: {command: [scp, -F, "{ssh_config}", "{hots}:{remote_path}", "{local_path}"]}'),
        [f"protocols.scp.command[3]: unknown placeholder {{hots}}; known placeholders: {KNOWN_PLACEHOLDERS}"],
    ),
    (
        "unknown top-level key",
        BASE + "extra: 1\n",
        [
            "extra: unknown key 'extra'; allowed keys: remotes, datasets, protocols, schedule, transfer, capture, "
            "journal, metrics, pages, lab, sweeps, regression, moves, passive"
        ],
    ),
    (
        "unknown nested key",
        BASE.replace("scp: {}", "scp: {tiemout: 5s}"),
        [f"protocols.scp.tiemout: unknown key 'tiemout'; allowed keys: {PROTOCOL_KEYS}"],
    ),
    ("missing section", BASE.replace("protocols:\n  scp: {}\n", ""), ["protocols: required key is missing"]),
    (
        "bad size",
        BASE.replace("1MiB", "1 megabyte"),
        [
            "datasets.f1.size: '1 megabyte' is not a size; write bytes or a number with B, KiB, MiB, GiB, TiB, kB, "
            "MB, GB, TB"
        ],
    ),
    ("boolean size", BASE.replace("1MiB", "true"), ["datasets.f1.size: expected a size such as 64MiB"]),
    (
        "bad duration",
        BASE + "transfer: {timeout: soon}\n",
        ["transfer.timeout: 'soon' is not a duration; write e.g. 500ms, 30s, 10m, 2h"],
    ),
    (
        "bad cron",
        BASE + "schedule: {cron: ['61 * * * *']}\n",
        [
            "schedule.cron[0]: '61 * * * *' is not a cron expression (minute hour day month weekday): Error validating "
            "expression '61': the last value (61) is higher than the maximum value (59)"
        ],
    ),
    (
        "bad direction",
        BASE.replace("scp: {}", "scp: {directions: [sideways]}"),
        ["protocols.scp.directions[0]: 'sideways' is not allowed; input should be 'download' or 'upload'"],
    ),
    (
        "lab remote without lab section",
        BASE.replace("lab: {name: t1}\n", ""),
        ["remotes.lab.lab: lab: true needs a top-level lab: section"],
    ),
    (
        "unknown module",
        BASE.replace("scp: {}", "scp: {module: warp}"),
        [f"protocols.scp.module: unknown module 'warp'; known modules: {MODULES}"],
    ),
    (
        "remote without address",
        BASE.replace("lab: {lab: true}", "site: {user: x, key: /k}"),
        ["remotes.site.address: required unless lab: true", "remotes.site.data_dir: required unless lab: true"],
    ),
    (
        "ssh login without a key",
        BASE.replace("lab: {lab: true}", "site: {address: 198.18.1.2, data_dir: /d}").replace(
            "scp: {}", "scp: {}\n  sftp: {}\n  http: {}"
        ),
        [
            "remotes.site.key: required: protocols scp, sftp log in with {key}; give the path of the private key for "
            "this "
            "remote"
        ],
    ),
    (
        "duplicate key",
        BASE.replace("scp: {}", "scp: {}\n  scp: {timeout: 5s}"),
        [
            "line 8 column 3: duplicate key 'scp' (first on line 7): YAML would silently keep only the last; "
            "remove or merge one"
        ],
    ),
    (
        "zero timeouts",
        BASE.replace("scp: {}", "scp: {timeout: 0s}") + "transfer: {timeout: 0}\nschedule: {interval: 0s}\n",
        [
            "protocols.scp.timeout: must be more than 0, e.g. 30s or 30m",
            "schedule.interval: must be more than 0, e.g. 30s or 30m",
            "transfer.timeout: must be more than 0, e.g. 30s or 30m",
        ],
    ),
    (
        "empty sections",
        BASE.replace("protocols:\n  scp: {}\n", "protocols: {}\n"),
        ["protocols: empty: define at least one, e.g. scp: {}"],
    ),
    (
        "command as a shell string",
        BASE.replace("scp: {}", "scp: {command: 'scp -B host:/f /tmp/f'}"),
        [
            "protocols.scp.command: 'scp -B host:/f /tmp/f' is a shell string; write an argv list, one element per "
            'argument, e.g. [scp, -B, "{user}@{host}:{remote_path}", "{local_path}"] (bigbinf never runs a shell)'
        ],
    ),
    (
        "bad name",
        BASE.replace("  f1:", "  F1 big:"),
        ["datasets.F1 big: 'F1 big' is not a valid name: use lower-case letters, digits, '_', '.', '-' (max 63)"],
    ),
    (
        "bad rate",
        BASE.replace("lab: {name: t1}", "lab: {name: t1, link: {rate: fast}}"),
        ["lab.link.rate: 'fast' is not a tc rate; write e.g. 200mbit, 1gbit"],
    ),
    (
        "bad time zone",
        BASE + "schedule: {timezone: Mars/Olympus}\n",
        ["schedule.timezone: 'Mars/Olympus' is not a time zone name; write e.g. UTC or Africa/Johannesburg"],
    ),
    (
        "yaml syntax",
        "remotes: [\n",
        ["line 2 column 1: YAML syntax error: expected the node content, but found '<stream end>'"],
    ),
    ("not a mapping", "- a\n", ["the file must be a YAML mapping with remotes, datasets and protocols"]),
    (
        "dangling reference",
        BASE + "schedule: {transfers: [{protocol: ftp, remote: lab, dataset: f1}]}\n",
        ["schedule.transfers[0].protocol: no protocol named 'ftp'; defined: scp"],
    ),
    (
        "bad braces",
        BASE.replace("scp: {}", 'scp: {command: [echo, "{oops"]}'),
        [
            "protocols.scp.command[1]: bad braces in '{oops': expected '}' before end of string; write {{ and }} for "
            "literal braces"
        ],
    ),
    (
        "cron and interval",
        BASE + "schedule: {cron: ['0 3 * * *'], interval: 1m}\n",
        ["schedule: give either cron or interval, not both"],
    ),
    (
        "no default upload",
        BASE.replace("scp: {}", "mine: {command: [cp, a, b], directions: [upload]}"),
        ["protocols.mine.upload_command: module 'command' has no default upload command: give upload_command"],
    ),
    (
        "unknown option",
        BASE.replace("scp: {}", "gridftp: {options: {paralel: 4}}"),
        [
            "protocols.gridftp.options.paralel: unknown option for module 'gridftp'; allowed: parallel, concurrency, "
            "pipelining, udt, local_port"
        ],
    ),
    (
        "mistyped option",
        BASE.replace("scp: {}", "gridftp: {options: {parallel: four}}"),
        ["protocols.gridftp.options.parallel: expected int (parallel TCP streams per file (-p)), got 'four'"],
    ),
    (
        "unsafe file name",
        BASE.replace("f1.bin", "../../etc/passwd"),
        [
            "datasets.f1.file: '../../etc/passwd' is not a plain file name: use letters, digits, '_', '.', '+', '-' "
            "(no '/', no leading '.' or '-')"
        ],
    ),
    (
        "bad addresses",
        BASE.replace("lab: {lab: true}", "site: {address: 'dtn.example.org; rm', data_dir: /d, key: /k}").replace(
            "lab: {name: t1}", "lab: {name: t1, client_address: 10.0.0.300}"
        ),
        [
            "remotes.site.address: 'dtn.example.org; rm' is neither an IP address nor a host name",
            "lab.client_address: '10.0.0.300' is not an IP address",
        ],
    ),
    (
        "snaplen above headers",
        BASE + "capture: {snaplen: 1500}\n",
        ["capture.snaplen: input should be less than or equal to 128 (got 1500)"],
    ),
    (
        "explicit transfer the protocol cannot run",
        BASE + "schedule: {transfers: [{protocol: scp, remote: lab, dataset: f1, direction: upload}]}\n",
        ["schedule.transfers[0].direction: protocol 'scp' does not run uploads; add it to its directions"],
    ),
    (
        "upload needs upload_dir",
        BASE.replace("lab: {lab: true}", "site: {address: 198.18.1.2, data_dir: /d, key: /k}").replace(
            "scp: {}", "scp: {directions: [download, upload]}"
        ),
        ["remotes.site.upload_dir: required for uploads (protocols scp upload)"],
    ),
    (
        "upload nothing can remove",
        BASE.replace("lab: {lab: true}", "site: {address: 198.18.1.2, data_dir: /d, upload_dir: /u}").replace(
            "scp: {}", "gridftp: {directions: [upload]}"
        ),
        [
            "protocols.gridftp.cleanup_command: uploads to site would stay there: module 'gridftp' cannot remove a "
            "file "
            "it uploaded; give an argv that removes {remote_path}, or [] to leave uploads"
        ],
    ),
    (
        "upload_dir the remote's shell would misread",
        BASE.replace(
            "lab: {lab: true}", "site: {address: 198.18.1.2, data_dir: /d, upload_dir: '/u/my uploads', key: /k}"
        ),
        ["remotes.site.upload_dir: '/u/my uploads' " + PLAIN],
    ),
    (
        "paths split by rsync and bbftp",
        BASE.replace("lab: {lab: true}", "site: {address: 198.18.1.2, data_dir: '/d d', key: '/my keys/id'}")
        + "transfer: {workdir: '/var/tmp/big binf'}\n",
        [
            "remotes.site.key: '/my keys/id' " + PLAIN,
            "remotes.site.data_dir: '/d d' " + PLAIN,
            "transfer.workdir: '/var/tmp/big binf' " + PLAIN,
        ],
    ),
    (
        # issue 24: lftp ran `!touch ...` in a local shell when the server answered 550.
        "a data_dir that lftp's command language would run",
        BASE.replace(
            "lab: {lab: true}", "site: {address: 198.18.1.2, data_dir: '/srv/x||!touch${IFS}/tmp/marker;#', key: /k}"
        ),
        ["remotes.site.data_dir: '/srv/x||!touch${IFS}/tmp/marker;#' " + PLAIN],
    ),
    (
        # issue 24: ssh read the user of "{user}@{host}" as its option -oProxyCommand and ran it.
        "a user name that ssh would read as an option",
        BASE.replace(
            "lab: {lab: true}",
            "site: {address: 198.18.1.2, data_dir: /d, key: /k, user: '-oProxyCommand=touch /tmp/marker', "
            "stats_command: [ssh, '{user}@{host}']}",
        ),
        [
            "remotes.site.user: '-oProxyCommand=touch /tmp/marker' is not a portable user name: 1-32 letters, "
            "digits, '.', '_', '-', not starting with '-' (it is placed in commands as user@host)"
        ],
    ),
    (
        "names that reach commands",
        BASE.replace(
            "lab: {lab: true}",
            "site: {address: 198.18.1.2, data_dir: /d, key: k/id, netns: '-x', interface: 'eth0;id', "
            "password_env: 'A=B', checksums: \"/s\\nx\"}",
        ).replace("scp: {}", "scp: {binary: '-oscp'}\n  iperf3: {options: {congestion: '-x'}}"),
        [
            "remotes.site.key: 'k/id' " + PLAIN,
            "remotes.site.checksums: '/s\\nx' contains a control character (a newline, a tab, ...); remove it",
            "remotes.site.netns: '-x' is not a network namespace name: 1-63 letters, digits, '_', '.', '-', "
            "starting with a letter, digit or '_'",
            "remotes.site.interface: 'eth0;id' is not an interface name: 1-15 letters, digits, '_', '.', '-', "
            "starting with a letter, digit or '_' (or any)",
            "remotes.site.password_env: 'A=B' is not an environment variable name: letters, digits, '_', not "
            "starting with a digit",
            "protocols.scp.binary: '-oscp' is neither a program name (letters, digits, '_', '.', '+', '-') nor a "
            "plain absolute path",
            "protocols.iperf3.options.congestion: '-x' is not a congestion control name; write e.g. cubic, bbr, "
            "reno (TCP congestion control for the test socket (-C))",
        ],
    ),
    (
        "every error gathered",
        BASE.replace("scp: {}", "scp: {tiemout: 5s, directions: [sideways]}") + "transfer: {timeout: soon}\n",
        [
            "protocols.scp.directions[0]: 'sideways' is not allowed; input should be 'download' or 'upload'",
            f"protocols.scp.tiemout: unknown key 'tiemout'; allowed keys: {PROTOCOL_KEYS}",
            "transfer.timeout: 'soon' is not a duration; write e.g. 500ms, 30s, 10m, 2h",
        ],
    ),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_config_reports_every_error_with_file_and_path(text: str, expected: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, SRC)
    assert info.value.lines() == [f"{SRC}: {line}" for line in expected]


def test_defaults_are_filled_in() -> None:
    config = parse_config(BASE, SRC)
    assert config.schedule.cron == ["0 13 * * *", "0 3 * * *"]  # the study's schedule
    assert config.capture.snaplen == 128
    assert config.datasets["f1"].size == 1024 * 1024
    assert config.protocols["scp"].directions == ["download"]


def test_a_loaded_config_dumped_and_loaded_again_is_the_same_config() -> None:
    # Tools write a loaded config back (model_dump): its port ranges come out as pairs.
    config = parse_config(BASE, SRC)
    again = parse_config(yaml.safe_dump(json.loads(config.model_dump_json())), SRC)
    assert again.passive.services == config.passive.services
    assert again == config


@pytest.mark.parametrize("text,value", [("1MiB", 2**20), ("1.5GiB", 3 * 2**29), ("5MB", 5_000_000), (42, 42)])
def test_sizes(text: object, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text,value", [("500ms", 0.5), ("30s", 30), ("10m", 600), ("2h", 7200), (3, 3.0)])
def test_durations(text: object, value: float) -> None:
    assert parse_duration(text) == value


def test_uploads_to_a_site_need_a_way_to_remove_them_or_an_explicit_no() -> None:
    site = BASE.replace("lab: {lab: true}", "site: {address: 198.18.1.2, data_dir: /d, upload_dir: /u, key: /k}")
    # The module's own cleanup (ssh rm), a user's argv, or [] to leave uploads to the site.
    assert parse_config(site.replace("scp: {}", "scp: {directions: [upload]}"), SRC)
    for own in ("[uberftp, '{host}', rm, '{remote_path}']", "[]"):
        config = parse_config(
            site.replace("scp: {}", f"gridftp: {{directions: [upload], cleanup_command: {own}}}"), SRC
        )
        assert config.protocols["gridftp"].cleanup_command is not None
    # Uploads to the lab are removed from its disk directly: nothing to configure.
    assert parse_config(BASE.replace("scp: {}", "gridftp: {directions: [upload]}"), SRC)


def test_shipped_configs_are_valid() -> None:
    from bigbinf.lab.mesh import layout as lab_layout
    from bigbinf.mesh.config import load_mesh

    shipped = sorted((ROOT / "schedules").glob("*.yaml"))
    meshes = [p for p in shipped if p.name.startswith("mesh-")]  # mesh files (docs/mesh.md)
    assert meshes
    for path in shipped:
        load_mesh(path, lab=lab_layout) if path in meshes else load_config(path)


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read the file: No such file or directory"):
        load_config(tmp_path / "nope.yaml")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bigbinf", *args], capture_output=True, text=True, cwd=ROOT)


def test_config_check_exit_codes(tmp_path: Path) -> None:
    good = _cli("--config.file", "schedules/lab.yaml", "--config.check")
    assert good.returncode == 0, good.stderr
    assert "configuration is valid" in good.stdout
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(BASE + "extra: 1\n")
    bad = _cli("--config.file", str(bad_file), "--config.check")
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        f"{bad_file}: extra: unknown key 'extra'; allowed keys: remotes, datasets, "
        "protocols, schedule, transfer, capture, journal, metrics, pages, lab, sweeps, regression, moves, passive"
    )


def test_lab_servers_the_config_accepts_are_the_labs_servers() -> None:
    from typing import get_args

    from bigbinf.config import LabServerName
    from bigbinf.lab.servers import SERVERS

    assert sorted(get_args(LabServerName)) == sorted(SERVERS)


def test_config_check_warns_when_an_ssh_remote_names_no_known_hosts(tmp_path: Path) -> None:
    site = "site: {address: 198.18.1.2, data_dir: /d, key: /k%s}"
    lines = []
    for name, extra in (("none", ""), ("bare", f", ssh_config: {tmp_path / 'bare'}"), ("pinned", ", ssh_config: X")):
        path = tmp_path / f"{name}.yaml"
        (tmp_path / "bare").write_text("Host *\n  IdentitiesOnly yes\n")
        (tmp_path / "pinned").write_text(f"Host *\n  UserKnownHostsFile {tmp_path / 'known_hosts'}\n")
        path.write_text(BASE.replace("lab: {lab: true}", site % extra.replace("X", str(tmp_path / "pinned"))))
        done = subprocess.run(
            [sys.executable, "-m", "bigbinf", "--config.file", str(path), "--config.check"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**os.environ, "HOME": str(tmp_path)},  # no ~/.ssh/known_hosts to fall back on
        )
        assert done.returncode == 0 and "configuration is valid" in done.stdout, done.stderr
        lines.append(done.stderr.strip())
    none, bare, pinned = lines
    assert none.startswith(f"{tmp_path / 'none.yaml'}: warning: remotes.site.ssh_config: is not set: scp run ssh")
    assert "will fail verification" in none and "UserKnownHostsFile" in none
    assert "names no UserKnownHostsFile and ~/.ssh/known_hosts does not exist" in bare
    assert pinned == ""


def test_upload_dir_is_required_only_where_listed_transfers_upload() -> None:
    # A mesh site's derived config lists its transfers: a peer it only downloads from
    # needs no upload_dir, a peer it uploads to does.
    two_sites = """
remotes:
  a: {address: a.example.org, data_dir: /data, key: /k}
  b: {address: b.example.org, data_dir: /data, key: /k}
datasets:
  f1: {file: f1.bin, size: 1MiB}
protocols:
  scp: {directions: [download, upload]}
schedule:
  transfers:
    - {protocol: scp, remote: a, dataset: f1, direction: upload}
    - {protocol: scp, remote: b, dataset: f1, direction: download}
"""
    with pytest.raises(ConfigError) as caught:
        parse_config(two_sites, SRC)
    assert [i.path for i in caught.value.issues] == ["remotes.a.upload_dir"]
    assert parse_config(two_sites.replace("key: /k}\n  b", "key: /k, upload_dir: /up}\n  b"), SRC)
    # Without a list, every remote may be uploaded to.
    unlisted = two_sites.split("schedule:")[0]
    with pytest.raises(ConfigError) as caught:
        parse_config(unlisted, SRC)
    assert [i.path for i in caught.value.issues] == ["remotes.a.upload_dir", "remotes.b.upload_dir"]


def test_an_ipv6_remote_for_an_ipv4_only_protocol_is_refused() -> None:
    # bbftp's client and GridFTP's UDT data channel open IPv4 sockets only.
    text = """
remotes:
  site: {address: "2001:db8::2", data_dir: /d, key: /k}
  v4: {address: "192.0.2.1", data_dir: /d, key: /k}
datasets: {f: {file: f.bin, size: 1MiB}}
protocols:
  bbftp: {}
  udt: {module: gridftp, options: {udt: true}}
  gridftp: {}
  iperf3: {}
"""
    with pytest.raises(ConfigError) as error:
        parse_config(text, "t.yaml")
    lines = error.value.lines()
    assert [line.split(": ", 2)[1] for line in lines] == ["remotes.site.address", "remotes.site.address"]
    assert lines[0].startswith(
        "t.yaml: remotes.site.address: 2001:db8::2 is IPv6, and protocol bbftp reaches a remote over IPv4 only ("
    )
    assert lines[1].startswith(
        "t.yaml: remotes.site.address: 2001:db8::2 is IPv6, and protocol udt reaches a remote over IPv4 only (UDT mode"
    )
    assert lines[0].endswith("give an IPv4 address, or leave bbftp out of this remote's transfers (schedule.transfers)")
    # Left out of that remote's transfers: accepted.
    parse_config(
        text
        + "schedule: {transfers: [{protocol: bbftp, remote: v4, dataset: f},"
        + " {protocol: gridftp, remote: site, dataset: f}]}\n",
        "t.yaml",
    )


def test_a_capture_buffer_that_would_drop_packets_is_refused() -> None:
    # 64 KiB was accepted, and a real capture at it dropped 3,018 packets (published as ok).
    base = "remotes: {site: {address: 192.0.2.1, data_dir: /d, key: /k, bandwidth: BW}}\n"
    base += "datasets: {f: {file: f.bin, size: 1MiB}}\nprotocols: {http: {}}\n"
    with pytest.raises(ConfigError) as error:
        parse_config(base.replace("BW", "1gbit") + "capture: {buffer: 65536}\n", "t.yaml")
    assert error.value.lines() == [
        "t.yaml: capture.buffer: 65536 bytes is below 4MiB: a smaller ring drops packets whenever the capture waits "
        "for a CPU (256KiB did at 200 Mbit/s with the CPUs busy), and a capture with drops has no wire numbers; "
        "leave it out (32MiB) or give at least 4MiB"
    ]
    # A path faster than the ring can hold 0.1 s of: 40 Gbit/s is ~500,000 frames a second.
    with pytest.raises(ConfigError) as error:
        parse_config(base.replace("BW", "40gbit"), "t.yaml")  # the default 32 MiB
    assert error.value.lines() == [
        "t.yaml: capture.buffer: 33554432 bytes holds less than 0.1 s of the frames of a 40gbit path "
        "(remotes.site.bandwidth): the kernel drops packets whenever the capture waits that long for a CPU, and a "
        "capture with drops has no wire numbers; set capture.buffer to at least 96MiB"
    ]
    assert (
        parse_config(base.replace("BW", "40gbit") + "capture: {buffer: 96MiB}\n", "t.yaml").capture.buffer == 96 << 20
    )
    assert parse_config(base.replace("BW", "10gbit"), "t.yaml").capture.buffer == 32 << 20  # 24 MiB is enough


def test_a_fully_qualified_host_name_may_end_in_a_dot() -> None:
    site = "site: {address: dtn.example.org., data_dir: /d, key: /k}"
    config = parse_config(BASE.replace("lab: {lab: true}", site), SRC)
    assert config.remotes["site"].address == "dtn.example.org."
    for bad in ("dtn.example.org..", ".", "dtn..example.org."):
        with pytest.raises(ConfigError, match="is neither an IP address nor a host name"):
            parse_config(BASE.replace("lab: {lab: true}", site.replace("dtn.example.org.", repr(bad))), SRC)
