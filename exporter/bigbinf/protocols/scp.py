"""scp (OpenSSH), and HPN-scp: the same templates with another binary."""

from __future__ import annotations

from bigbinf.protocols import command
from bigbinf.protocols.base import Commands, NoOptions, Profile, needs

# -B batch mode (never prompt), -F a per-remote ssh_config that pins the key and
# known_hosts.  Compression stays off: it would flatter the byte ratio.  LogLevel=ERROR,
# not -q: -q also silences ssh's own diagnostics, and every failure (no route, wrong key,
# host key changed, session killed) then reads "Connection closed"; ERROR keeps those
# lines and drops the informational ones.  (No progress meter either way: stdout is not
# a terminal.)
SSH_OPTS = (
    "-F",
    "{ssh_config}",
    "-i",
    "{key}",
    "-o",
    "BatchMode=yes",
    "-o",
    "Compression=no",
    "-o",
    "LogLevel=ERROR",
)
# ssh itself with the remote's settings, for tools that start it (cleanup, rsync, bbftp).
SSH_COMMAND = ("ssh", *SSH_OPTS, "-p", "{port}")
# The same as one string, for tools that take the ssh command as one option value and
# split it on white space themselves without a shell (rsync -e, bbftp -L): paths in it
# must not contain spaces.
SSH_COMMAND_LINE = " ".join(SSH_COMMAND)


# Removes an upload, file or directory, through the remote's shell; upload paths are
# checked at config load to hold no character a shell would interpret.
SSH_CLEANUP = [*SSH_COMMAND, "--", "{user}@{host}", "rm", "-rf", "--", "{remote_path}"]
SSH_CLEANUPS = {"file": SSH_CLEANUP, "tree": SSH_CLEANUP}


def commands(options: NoOptions) -> Commands:
    base = ["{binary}", "-B", *SSH_OPTS, "-P", "{port}"]
    remote = "{user}@{url_host}:{remote_path}"
    return {  # "--": no operand is ever read as an option
        ("download", "file"): [*base, "--", remote, "{local_path}"],
        ("download", "tree"): [*base, "-r", "--", remote, "{local_dir}"],
        ("upload", "file"): [*base, "--", "{local_path}", remote],
        ("upload", "tree"): [*base, "-r", "--", "{local_path}", remote],
    }


PROFILE = Profile(
    name="scp",
    description="OpenSSH scp over the remote's sshd",
    binary="scp",
    commands=commands,
    runner=command.run,
    options_type=NoOptions,
    lab_servers=needs("sshd"),
    cleanup=SSH_CLEANUPS,
)
# HPN-SSH installs its scp as hpnscp; sites point `binary:` at their build.
HPN_PROFILE = Profile(
    name="hpnscp",
    description="HPN-SSH scp (high-performance patches)",
    binary="hpnscp",
    commands=commands,
    runner=command.run,
    options_type=NoOptions,
    lab_servers=needs("sshd"),
    cleanup=SSH_CLEANUPS,
)
