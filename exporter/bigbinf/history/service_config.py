"""Which configuration the commands that read the exporter's history (`advise`,
`plan-move`, `regression`) read when none is named: the running exporter's, as an
operator expects (issue 45).  Without --config.file they take, in this order:

1. the --config.file of the running `bigbinf-exporter` service on this host (a process
   whose command line is the exporter serving, no subcommand: found in /proc, the path
   taken relative to that process's working directory); several running with different
   files is an error that lists them.  One in another mount namespace (a container) names
   a file as it sees it, not this host's file at that path (nor is its journal.path this
   host's): an error that says so and how to run the command in its namespace or name
   a file, never the host's file read as if it were the exporter's;
2. PACKAGED, the packaged service's configuration (packaging/bigbinf-exporter.service);
3. the CLI's default (schedules/lab.yaml, for the repository's lab).

Whichever it is, the command says on stderr which file it read, why, and how to name
another: an answer from the wrong journal ("no path baseline yet" after a demo) must not
pass for the exporter's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGED = Path("/etc/bigbinf/site.yaml")
PROC = Path("/proc")
COMMANDS = ("advise", "plan-move", "regression")  # the commands that read the service's history


class ServiceConfigError(Exception):
    """No one configuration to read: the message says which and how to name one."""


@dataclass(frozen=True)
class Found:
    path: str
    why: str  # e.g. "the running exporter's (pid 1234)"

    def notice(self, command: str) -> str:
        return f"{command}: reading {self.path}, {self.why}; name another with --config.file FILE"


def _exporter_argv(argv: list[str]) -> list[str] | None:
    """The exporter's own arguments of a command line (after `bigbinf-exporter` or
    `python -m bigbinf`), or None if it is not the exporter's."""
    for i, word in enumerate(argv):
        if Path(word).name == "bigbinf-exporter":
            return argv[i + 1 :]
        if word == "-m" and i + 1 < len(argv) and argv[i + 1] in ("bigbinf", "bigbinf.cli"):
            return argv[i + 2 :]
    return None


# A command line's exporter arguments -> its configuration file if it serves (no
# subcommand, not a check), else None: the CLI's own parser (cli.serving_config).
Parse = Callable[[list[str]], "str | None"]


def _mount_namespace(entry: Path) -> str | None:
    try:
        return os.readlink(entry / "ns" / "mnt")
    except OSError:
        return None  # not ours to read: taken as ours


def running(parse: Parse, proc: Path | None = None) -> Iterator[tuple[int, str, bool]]:
    """(pid, absolute config path, whether it is in another mount namespace than this
    process) of every exporter serving on this host."""
    me = os.getpid()
    mine = _mount_namespace((proc or PROC) / "self")
    for entry in (proc or PROC).iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            args = _exporter_argv([a for a in argv if a])
            if args is None:
                continue
            config = parse(args)
            if config is None:
                continue
            cwd = os.readlink(entry / "cwd") if not os.path.isabs(config) else "/"
        except OSError:
            continue  # gone meanwhile, or not ours to read
        theirs = _mount_namespace(entry)
        foreign = mine is not None and theirs is not None and theirs != mine
        yield int(entry.name), os.path.normpath(os.path.join(cwd, config)), foreign


def find(default: str, parse: Parse, proc: Path | None = None, packaged: Path | None = None) -> Found:
    """The configuration a history command reads when none is named (the module's order)."""
    services: dict[str, list[int]] = {}
    foreign: set[str] = set()
    for pid, path, elsewhere in running(parse, proc):
        if elsewhere:
            path = f"{path} (in another mount namespace)"
            foreign.add(path)
        services.setdefault(path, []).append(pid)
    if len(services) == 1 and foreign:
        ((path, pids),) = services.items()
        pid = min(pids)
        named = path.removesuffix(" (in another mount namespace)")
        raise ServiceConfigError(
            f"the running exporter (pid {', '.join(map(str, sorted(pids)))}) runs in another mount namespace (a "
            f"container): its --config.file {named} and the journal it names are its own view, not this host's "
            f"files at those paths; run the command in its namespace (nsenter -t {pid} -m -- bigbinf-exporter "
            f"...), or name the file to read with --config.file FILE"
        )
    if len(services) == 1:
        ((path, pids),) = services.items()
        return Found(path, f"the running exporter's (pid {', '.join(map(str, sorted(pids)))})")
    if len(services) > 1:
        listed = "; ".join(
            f"{path} (pid {', '.join(map(str, sorted(pids)))})" for path, pids in sorted(services.items())
        )
        raise ServiceConfigError(
            f"several exporters run on this host with different configurations: {listed}; "
            "name the one to read with --config.file FILE"
        )
    packaged = packaged or PACKAGED
    if packaged.is_file():
        return Found(str(packaged), "the packaged service's (no exporter runs on this host)")
    return Found(default, f"the default (no exporter runs on this host, and there is no {packaged})")
