"""bbFTP in ssh mode: bbftp starts `bbftpd -s` on the remote through ssh, so the remote
needs sshd and the bbftpd binary, and no daemon of its own.

The client's options, as read in IN2P3's client source (bbftpc/bbftp.c, its getopt
string and ssh set-up; bbftpc/connecttoserver.c, connectviassh) and its man page
(doc/bbftp.1):

* `-L "ssh command"` replaces the default `ssh -q`.  bbftp splits the string itself on
  white space (quotes and backslashes are honoured, no shell) and execvp()s it with
  `-x -a -oFallBackToRsh no -l USER HOST "bbftpd -s"` appended: this is where the
  remote's ssh_config, key and port go, or bbftp would use ~/.ssh and port 22.
  (`-w` sets the control port of a standalone bbftpd and is meaningless in ssh mode.)
* `-E "command"` is what ssh starts on the remote; the default, `bbftpd -s` (bbftpd on
  the remote's PATH), is what the lab and most sites need.  A site whose bbftpd lives
  elsewhere gives its own `command` with `-E` (docs/protocols.md).
* `-s` selects ssh mode.  Not `-S`: that also adds `-oStrictHostKeyChecking no`, which
  would throw away the known_hosts that the ssh_config pins.
* `-p N` parallel TCP data streams; `-r N` tries per command (default 5: a failed
  transfer would be retried silently inside one measurement, so 1).
* `-e "cmd; cmd"` bbftp's own command language (`get R L`, `put L R`, `rm R`), not a
  shell command line; dataset file names are plain (checked at config load).
"""

from __future__ import annotations

from dataclasses import dataclass

from bigbinf.protocols import command
from bigbinf.protocols.base import Commands, Expectation, Profile, needs, option
from bigbinf.protocols.scp import SSH_COMMAND_LINE

BASE = ["{binary}", "-s", "-r", "1", "-u", "{user}", "-L", SSH_COMMAND_LINE]


@dataclass(frozen=True)
class BbftpOptions:
    streams: int = option(1, "parallel TCP streams (-p)")


def commands(options: BbftpOptions) -> Commands:
    base = [*BASE, "-p", str(options.streams)]
    return {
        ("download", "file"): [*base, "-e", "get {remote_path} {local_path}", "{host}"],
        ("upload", "file"): [*base, "-e", "put {local_path} {remote_path}", "{host}"],
    }


PROFILE = Profile(
    name="bbftp",
    description="bbFTP (parallel streams over ssh-started bbftpd)",
    binary="bbftp",
    commands=commands,
    runner=command.run,
    options_type=BbftpOptions,
    # Each stream is its own TCP connection: -p N must show N data flows.
    expect=lambda options: Expectation(transport="tcp", min_data_flows=options.streams),
    # sshd starts bbftpd per transfer: the lab needs both (lab/servers.py).
    lab_servers=needs("sshd", "bbftpd"),
    cleanup={"file": [*BASE, "-e", "rm {remote_path}", "{host}"]},
    ipv4_only=lambda options: (
        "its client connects to the bbftpd that ssh started with an IPv4 socket (AF_INET, "
        "bbftpc/connecttoserver.c connectviassh)"
    ),
)
