"""rsync over ssh, and from an rsync daemon (modules named like the served dirs)."""

from __future__ import annotations

from bigbinf.protocols import command
from bigbinf.protocols.base import Commands, NoOptions, Profile, needs
from bigbinf.protocols.scp import SSH_CLEANUPS, SSH_COMMAND_LINE

# rsync splits the -e value itself (no shell is involved); paths must not contain spaces.
RSH = SSH_COMMAND_LINE


def _commands(remote: str, extra: list[str]) -> Commands:
    base = ["{binary}", "-a", "--whole-file", *extra]
    return {  # "--": no operand is ever read as an option
        ("download", "file"): [*base, "--", remote, "{local_path}"],
        ("download", "tree"): [*base, "--", remote + "/", "{local_path}/"],
        ("upload", "file"): [*base, "--", "{local_path}", remote],
        ("upload", "tree"): [*base, "--", "{local_path}/", remote + "/"],
    }


PROFILE = Profile(
    name="rsync",
    description="rsync over ssh",
    binary="rsync",
    commands=lambda options: _commands("{user}@{url_host}:{remote_path}", ["-e", RSH]),
    runner=command.run,
    options_type=NoOptions,
    lab_servers=needs("sshd"),
    cleanup=SSH_CLEANUPS,
)
DAEMON_PROFILE = Profile(
    name="rsyncd",
    description="rsync from an rsync daemon",
    binary="rsync",
    commands=lambda options: _commands("rsync://{url_host}/{remote_name}", []),
    runner=command.run,
    options_type=NoOptions,
    lab_servers=needs("rsyncd"),
)
