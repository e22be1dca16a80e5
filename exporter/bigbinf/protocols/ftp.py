"""FTP: curl for single files, lftp's mirror for directories.

A password (the remote's password_env) goes into a netrc file in the transfer's private
directory, never into argv, where `ps` would show it.  Without one, the login is
anonymous.
"""

from __future__ import annotations

import os

from bigbinf.protocols import command
from bigbinf.protocols.base import Commands, NoOptions, Profile, RunContext, RunOutcome, needs

NETRC = ".netrc"


def commands(options: NoOptions) -> Commands:
    url = "ftp://{url_host}/{remote_name}"
    curl = ["{binary}", "-sS", "--fail", "--netrc-optional", "--netrc-file", "{local_dir}/" + NETRC]
    lftp = ["lftp", "-e"]
    return {
        ("download", "file"): [*curl, "-o", "{local_path}", url],
        ("upload", "file"): [*curl, "-T", "{local_path}", url],
        ("download", "tree"): [
            *lftp,
            "set cmd:fail-exit yes; mirror --parallel=1 /{remote_name} {local_path}; quit",
            "ftp://{url_host}",
        ],
        ("upload", "tree"): [
            *lftp,
            "set cmd:fail-exit yes; mirror -R --parallel=1 {local_path} /{remote_name}; quit",
            "ftp://{url_host}",
        ],
    }


# DELE before curl lists "/" (to /dev/null); lftp's rm -r for a directory.  Both log in
# like the transfer did (the netrc file is still in the transfer's directory).
CLEANUP = {
    "file": [
        "curl",
        "-sS",
        "--fail",
        "--netrc-optional",
        "--netrc-file",
        "{local_dir}/" + NETRC,
        "-o",
        "/dev/null",
        "-Q",
        "DELE /{remote_name}",
        "ftp://{url_host}/",
    ],
    "tree": ["lftp", "-e", "set cmd:fail-exit yes; rm -r /{remote_name}; quit", "ftp://{url_host}"],
}


def run(ctx: RunContext[NoOptions]) -> RunOutcome:
    password = ctx.password
    netrc = ctx.workdir / NETRC
    fd = os.open(netrc, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        if password:
            f.write(f"machine {ctx.values['host']} login {ctx.values['user']} password {password}\n")
    return command.run(ctx)


PROFILE = Profile(
    name="ftp",
    description="FTP (curl; lftp mirror for directories)",
    binary="curl",
    commands=commands,
    runner=run,
    options_type=NoOptions,
    lab_servers=needs("vsftpd"),
    cleanup=CLEANUP,
)
