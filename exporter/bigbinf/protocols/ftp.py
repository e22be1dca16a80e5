"""FTP: curl for single files, lftp's mirror for directories.

A password (the remote's password_env) goes only into files in the transfer's private
directory (mode 0600), never into argv, where `ps` would show it, nor into any process's
environment: curl reads a netrc file, lftp a script of its own command language that
logs in with `user`.  Both are removed after the transfer and its cleanup, even with
transfer.keep_files.  Without a password, the login is anonymous.

Every value in a script is quoted for lftp's command language (double quotes, with `\\`
and `"` escaped: `;`, `||`, `!` and `#` inside them are text, not commands) and follows
`--`; the values are plain words already (config.py checks them, base.render again),
so the quoting is the second of two guards.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from bigbinf.protocols import command
from bigbinf.protocols.base import Commands, NoOptions, Profile, RunContext, RunOutcome, needs

NETRC = ".netrc"
LFTP_SCRIPT = "lftp.script"
LFTP_CLEANUP = "lftp-cleanup.script"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def commands(options: NoOptions) -> Commands:
    url = "ftp://{url_host}/{remote_name}"
    curl = ["{binary}", "-sS", "--fail", "--netrc-optional", "--netrc-file", "{local_dir}/" + NETRC]
    lftp = ["lftp", "--norc", "-f", "{local_dir}/" + LFTP_SCRIPT]
    return {
        ("download", "file"): [*curl, "-o", "{local_path}", "--", url],
        ("upload", "file"): [*curl, "-T", "{local_path}", "--", url],
        ("download", "tree"): lftp,
        ("upload", "tree"): lftp,
    }


# DELE before curl lists "/" (to /dev/null); lftp's rm -r for a directory.  Both log in
# like the transfer did (the netrc file and the scripts are still in the transfer's directory).
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
        "--",
        "ftp://{url_host}/",
    ],
    "tree": ["lftp", "--norc", "-f", "{local_dir}/" + LFTP_CLEANUP],
}


def lftp_quote(value: str) -> str:
    """`value` as one word of lftp's command language."""
    if _CONTROL.search(value):
        raise ValueError("a control character cannot be quoted for lftp")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def netrc_quote(value: str) -> str:
    """`value` as one netrc token as curl (7.84 and later) reads it."""
    if _CONTROL.search(value):
        raise ValueError("a control character cannot be quoted for curl's netrc")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def lftp_script(ctx: RunContext[NoOptions], commands: list[str]) -> str:
    v = ctx.values
    login = [f"user {lftp_quote(v['user'])} {lftp_quote(ctx.password)}"] if ctx.password else []
    return "\n".join(
        ["set cmd:fail-exit yes", f"open {lftp_quote('ftp://' + v['url_host'])}", *login, *commands, "quit"]
    )


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def run(ctx: RunContext[NoOptions]) -> RunOutcome:
    v = ctx.values
    try:
        netrc = (
            f"machine {v['host']} login {netrc_quote(v['user'])} password {netrc_quote(ctx.password)}\n"
            if ctx.password
            else ""
        )
        remote, local = lftp_quote("/" + v["remote_name"]), lftp_quote(v["local_path"])
        mirror = f"mirror --parallel=1 -- {remote} {local}"
        if ctx.direction == "upload":
            mirror = f"mirror -R --parallel=1 -- {local} {remote}"
        transfer = lftp_script(ctx, [mirror])
        cleanup = lftp_script(ctx, [f"rm -r -- {remote}"])
    except ValueError as exc:
        return RunOutcome(returncode=1, timed_out=False, duration_seconds=0.0, start_timestamp=0.0,
                          stderr_tail=f"ftp: the password or a path {exc}")  # fmt: skip
    _write_private(ctx.workdir / NETRC, netrc)
    _write_private(ctx.workdir / LFTP_SCRIPT, transfer)
    _write_private(ctx.workdir / LFTP_CLEANUP, cleanup)
    return command.run(dataclasses.replace(ctx, env={}))


PROFILE = Profile(
    name="ftp",
    description="FTP (curl; lftp mirror for directories)",
    binary="curl",
    commands=commands,
    runner=run,
    options_type=NoOptions,
    lab_servers=needs("vsftpd"),
    cleanup=CLEANUP,
    password_in_env=False,
    secret_files=(NETRC, LFTP_SCRIPT, LFTP_CLEANUP),
)
