"""sftp (OpenSSH): non-interactive through a batch file written for each transfer."""

from __future__ import annotations

from bigbinf.protocols import command
from bigbinf.protocols.base import Commands, NoOptions, Profile, RunContext, RunOutcome, needs
from bigbinf.protocols.scp import SSH_CLEANUPS, SSH_OPTS

BATCH = "sftp.batch"


def commands(options: NoOptions) -> Commands:
    # No -q: it hides ssh's diagnostics (scp.SSH_OPTS says why).
    argv = ["{binary}", "-b", "{local_dir}/" + BATCH, *SSH_OPTS, "-P", "{port}", "--", "{user}@{url_host}"]
    return {(d, k): argv for d in ("download", "upload") for k in ("file", "tree")}


def sftp_quote(value: str) -> str:
    """`value` as one argument of sftp's batch language (double quotes, `\\` and `"` escaped)."""
    if any(ord(c) < 32 or c == "\x7f" for c in value):
        raise ValueError(f"{value!r}: a control character cannot be quoted for sftp")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _batch(ctx: RunContext[NoOptions]) -> str:
    v = ctx.values
    recursive = "-r " if ctx.kind == "tree" else ""
    if ctx.direction == "download":
        target = v["local_dir"] if ctx.kind == "tree" else v["local_path"]
        return f"get {recursive}{sftp_quote(v['remote_path'])} {sftp_quote(target)}\n"
    return f"put {recursive}{sftp_quote(v['local_path'])} {sftp_quote(v['remote_path'])}\n"


def run(ctx: RunContext[NoOptions]) -> RunOutcome:
    (ctx.workdir / BATCH).write_text(_batch(ctx))
    return command.run(ctx)


PROFILE = Profile(
    name="sftp",
    description="OpenSSH sftp (batch mode)",
    binary="sftp",
    commands=commands,
    runner=run,
    options_type=NoOptions,
    lab_servers=needs("sshd"),
    cleanup=SSH_CLEANUPS,
)
