"""Hostile strings against the real tools and servers of the lab (issue 24): the second
guard, each module's quoting for its tool's own language, with the first guard (config
validation, render) stepped around on purpose.  lftp reads the FTP module's script
against the lab's vsftpd (which answers 550 for a missing directory: what made lftp run
`||!command` before), sftp its batch file against the lab's sshd; no marker appears and
the transfer fails on the missing path, while a dataset whose name uses every character
a name may hold moves intact through scp, sftp, lftp (FTP, a directory) and rsync.
tests/unit/test_hostile_config.py covers every setting through a stand-in for the tools."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bigbinf import lab as lab_module
from bigbinf.config import Config
from bigbinf.measure.plan import TransferSpec, plan_round
from bigbinf.measure.transfer import placeholder_values, run_transfer
from bigbinf.protocols import ftp, sftp
from bigbinf.protocols.base import RunContext, render

pytestmark = pytest.mark.lab

ODD_FILE = "a_b.c+d-e"  # every character a dataset name may hold besides letters and digits
BOTH = ["download", "upload"]


@pytest.fixture(scope="module")
def lab(make_module_lab) -> Config:
    return make_module_lab(
        link={"rate": "1gbit", "burst": "128KiB"},
        datasets={
            "odd": {"file": ODD_FILE + ".bin", "size": "256KiB"},
            "tree": {"file": ODD_FILE, "size": "96KiB", "count": 3},
        },
        protocols={"scp": {"directions": BOTH}, "sftp": {"directions": BOTH}, "ftp": {}, "rsync": {}},
        servers=["sshd", "vsftpd"],
    )


def _spec(config: Config, protocol: str, dataset: str, direction: str = "download") -> TransferSpec:
    for spec in plan_round(config, lab_module.site(config)):
        if (spec.protocol, spec.dataset, spec.direction) == (protocol, dataset, direction):
            return spec
    raise AssertionError(f"no transfer {protocol}/{dataset}/{direction}")


@pytest.mark.parametrize(
    ("protocol", "dataset", "direction"),
    [
        ("scp", "odd", "download"),
        ("scp", "tree", "upload"),
        ("sftp", "odd", "upload"),
        ("sftp", "tree", "download"),
        ("ftp", "tree", "download"),
        ("ftp", "odd", "download"),
        ("rsync", "tree", "download"),
    ],
)
def test_names_with_every_allowed_character_move_intact(
    lab: Config, protocol: str, dataset: str, direction: str
) -> None:
    result = run_transfer(_spec(lab, protocol, dataset, direction), lab, "hostile")
    assert result.outcome == "ok" and result.verified, result.error


HOSTILE = [
    "x||!touch {m};#",
    'x" || !touch {m}; echo "',
    'x\\" ; !touch {m} #',
    "x;!touch {m}",
    "x`touch {m}`$(touch {m})",
    "-x --help ; !touch {m}",
]


def _context(config: Config, spec: TransferSpec, workdir: Path, **values: str) -> RunContext:
    workdir.mkdir(parents=True, exist_ok=True)
    base = placeholder_values(spec, workdir, None, "", lab_module.site(config).remote("lab", None).address)
    base = {**base, **values}
    return RunContext(
        argv=render(
            spec.template,
            {
                k: v
                for k, v in base.items()
                if k in ("binary", "local_dir", "host", "url_host", "port", "ssh_config", "key", "user")
            },
        ),
        timeout_seconds=60,
        workdir=workdir,
        netns=spec.remote.netns,
        options=spec.options,
        values=base,
        direction=spec.direction,
        kind=spec.kind,
    )


@pytest.mark.parametrize("hostile", HOSTILE)
def test_lftp_reads_hostile_paths_as_paths(lab: Config, tmp_path: Path, hostile: str) -> None:
    """The FTP module's lftp script with a remote directory name that went past every
    check: vsftpd answers 550 for it, lftp fails the mirror, and runs nothing."""
    marker = tmp_path / "marker"
    spec = _spec(lab, "ftp", "tree")
    context = _context(lab, spec, tmp_path / "work", remote_name="data/" + hostile.format(m=marker))
    outcome = ftp.run(context)
    assert outcome.returncode != 0 and not outcome.timed_out
    assert not list(tmp_path.glob("marker*")), outcome.stderr_tail
    script = (tmp_path / "work" / ftp.LFTP_SCRIPT).read_text()
    assert "mirror --parallel=1 -- " in script
    # The same script's mirror of a real directory works: the quoting is read as quoting.
    context = _context(lab, spec, tmp_path / "ok")
    assert ftp.run(context).returncode == 0
    assert len(list((tmp_path / "ok" / ODD_FILE).iterdir())) == 3


@pytest.mark.parametrize("hostile", [h for h in HOSTILE if "\n" not in h])
def test_sftp_reads_hostile_paths_as_paths(lab: Config, tmp_path: Path, hostile: str) -> None:
    marker = tmp_path / "marker"
    spec = _spec(lab, "sftp", "odd")
    remote = str(spec.remote.data_dir / hostile.format(m=marker))
    context = _context(lab, spec, tmp_path / "work", remote_path=remote)
    outcome = sftp.PROFILE.runner(dataclasses.replace(context))
    assert outcome.returncode != 0 and not outcome.timed_out
    assert not list(tmp_path.glob("marker*")), outcome.stderr_tail
