"""Which configuration `advise`, `plan-move` and `regression` read without --config.file
(bigbinf/history/service_config.py): the running exporter's, found from its command line
in /proc (a directory laid out as /proc is here), else the packaged service's, else the
default, and the command says which on stderr."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bigbinf.cli import DEFAULT_CONFIG, main, serving_config
from bigbinf.history import service_config


def _process(proc: Path, pid: int, argv: list[str], cwd: Path) -> None:
    entry = proc / str(pid)
    entry.mkdir(parents=True)
    (entry / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    os.symlink(cwd, entry / "cwd")


EXPORTER = "/opt/bigbinf/.venv/bin/bigbinf-exporter"


def test_the_running_exporters_configuration_is_found_from_its_command_line(tmp_path: Path) -> None:
    proc, site = tmp_path / "proc", tmp_path / "site"
    site.mkdir()
    _process(proc, 100, [EXPORTER, "--config.file", "site.yaml", "--web.listen-address", ":9753"], site)
    # Not services: a one-off round, a check, a plan-move, another program, python -m with a subcommand.
    _process(proc, 101, [EXPORTER, "--config.file", "/other.yaml", "once"], site)
    _process(proc, 102, [EXPORTER, "--config.file=/other.yaml", "--config.check"], site)
    _process(proc, 103, [EXPORTER, "plan-move", "--remote", "r", "--size", "1TiB"], site)
    _process(proc, 104, ["/usr/bin/vim", "--config.file", "/other.yaml"], site)
    _process(proc, 105, ["/usr/bin/python3", "-m", "bigbinf", "--config.file", "/other.yaml", "advise"], site)
    found = service_config.find(DEFAULT_CONFIG, serving_config, proc, tmp_path / "none.yaml")
    assert found.path == str(site / "site.yaml") and found.why == "the running exporter's (pid 100)"
    # A second service with the same file (its other pid) is the same configuration.
    _process(proc, 106, ["/usr/bin/python3", "-m", "bigbinf", f"--config.file={site / 'site.yaml'}"], tmp_path)
    assert service_config.find(DEFAULT_CONFIG, serving_config, proc).why == "the running exporter's (pid 100, 106)"
    # Another with another file: which one is the operator's to say.
    _process(proc, 107, [EXPORTER, "--config.file", "/etc/bigbinf/b.yaml"], tmp_path)
    with pytest.raises(service_config.ServiceConfigError) as err:
        service_config.find(DEFAULT_CONFIG, serving_config, proc)
    assert "/etc/bigbinf/b.yaml (pid 107)" in str(err.value) and f"{site / 'site.yaml'} (pid 100, 106)" in str(
        err.value
    )
    assert "name the one to read with --config.file FILE" in str(err.value)


def test_without_a_running_exporter_the_packaged_then_the_default(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    packaged = tmp_path / "site.yaml"
    found = service_config.find(DEFAULT_CONFIG, serving_config, proc, packaged)
    assert found.path == DEFAULT_CONFIG and str(packaged) in found.why
    packaged.write_text("x")
    assert service_config.find(DEFAULT_CONFIG, serving_config, proc, packaged).path == str(packaged)


def test_the_commands_say_which_configuration_they_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    journal = site / "journal.jsonl"
    (site / "site.yaml").write_text(
        "remotes: {demo: {address: 198.18.0.2, data_dir: /data, key: /etc/hostname}}\n"
        "datasets: {f1m: {file: f1m.bin, size: 1MiB}}\nprotocols: {http: {}}\n"
        f"journal: {{path: {journal}}}\n"
    )
    proc = tmp_path / "proc"
    _process(proc, 200, [EXPORTER, "--config.file", "site.yaml"], site)
    monkeypatch.setattr(service_config, "PROC", proc)
    monkeypatch.setattr(service_config, "PACKAGED", tmp_path / "none.yaml")
    assert main(["plan-move", "--remote", "demo", "--size", "1TiB"]) == 1  # nothing measured yet
    err = capsys.readouterr().err
    assert f"bigbinf-exporter plan-move: reading {site / 'site.yaml'}, the running exporter's (pid 200)" in err
    assert "name another with --config.file FILE" in err and f"nothing measured to demo (download) in {journal}" in err
    assert main(["advise"]) == 0
    captured = capsys.readouterr()
    assert "== path demo (198.18.0.2)" in captured.out and "the running exporter's (pid 200)" in captured.err
    assert main(["regression", "list"]) == 0
    assert "the running exporter's (pid 200)" in capsys.readouterr().err
    # Named, it is read without a word.
    assert main(["--config.file", str(site / "site.yaml"), "advise"]) == 0
    assert "reading" not in capsys.readouterr().err
    # Two services: an error naming both, exit 2.
    _process(proc, 201, [EXPORTER, "--config.file", "/etc/bigbinf/other.yaml"], site)
    assert main(["advise"]) == 2
    assert "several exporters run on this host" in capsys.readouterr().err


def test_an_exporter_in_another_mount_namespace_is_said_so_never_read_on_this_hosts_files(tmp_path: Path) -> None:
    """Issue 45 b4: a containerised exporter's --config.file is its own view: this host's
    file at that path (another journal) must not pass for the exporter's."""
    proc, site = tmp_path / "proc", tmp_path / "site"
    site.mkdir()
    _process(proc, 100, [EXPORTER, "--config.file", "/etc/bigbinf/site.yaml"], site)
    (proc / "self" / "ns").mkdir(parents=True)
    os.symlink("mnt:[4026531841]", proc / "self" / "ns" / "mnt")
    (proc / "100" / "ns").mkdir()
    os.symlink("mnt:[4026532999]", proc / "100" / "ns" / "mnt")
    with pytest.raises(service_config.ServiceConfigError) as err:
        service_config.find(DEFAULT_CONFIG, serving_config, proc, tmp_path / "none.yaml")
    text = str(err.value)
    assert "runs in another mount namespace" in text and "/etc/bigbinf/site.yaml" in text
    assert "nsenter -t 100 -m" in text and "--config.file FILE" in text
    # In this process's own namespace: read as before.
    os.unlink(proc / "100" / "ns" / "mnt")
    os.symlink("mnt:[4026531841]", proc / "100" / "ns" / "mnt")
    assert service_config.find(DEFAULT_CONFIG, serving_config, proc).path == "/etc/bigbinf/site.yaml"
