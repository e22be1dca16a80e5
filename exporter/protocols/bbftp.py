"""bbFTP (runs where its client is installed; a remote bbftpd is the site's business).

bbftp's -e takes bbftp's own command language, not a shell command line.
"""

from __future__ import annotations

from . import command
from .base import Option, Profile, needs


def commands(options):
    streams = str(options["streams"])
    base = ["{binary}", "-s", "-u", "{user}", "-p", streams]
    return {("download", "file"): [*base, "-e", "get {remote_path} {local_path}", "{host}"],
            ("upload", "file"): [*base, "-e", "put {local_path} {remote_path}", "{host}"]}


PROFILE = Profile(name="bbftp", description="bbFTP (parallel streams over ssh-started bbftpd)", binary="bbftp",
                  commands=commands, runner=command.run, lab_servers=needs("sshd"),
                  options={"streams": Option(int, 1, "parallel TCP streams (-p)")},
                  cleanup={"file": ["{binary}", "-s", "-u", "{user}", "-e", "rm {remote_path}", "{host}"]})
