"""xrootd with xrdcp (root://host//absolute/path)."""

from __future__ import annotations

from bigbinf.protocols import command
from bigbinf.protocols.base import Commands, NoOptions, Profile, needs


def commands(options: NoOptions) -> Commands:
    base = ["{binary}", "--force", "--silent"]
    url = "root://{url_host}/{remote_path}"
    return {
        ("download", "file"): [*base, url, "{local_path}"],
        ("download", "tree"): [*base, "--recursive", url, "{local_dir}"],
        ("upload", "file"): [*base, "{local_path}", url],
        # xrdcp copies a directory only into an existing target: --path creates it.
        ("upload", "tree"): [*base, "--recursive", "--path", "{local_path}", url + "/"],
    }


# xrdfs has no recursive rm: a directory upload needs the protocol's cleanup_command.
CLEANUP = {"file": ["xrdfs", "{url_host}", "rm", "{remote_path}"]}

PROFILE = Profile(
    name="xrootd",
    description="xrootd with xrdcp",
    binary="xrdcp",
    commands=commands,
    runner=command.run,
    options_type=NoOptions,
    lab_servers=needs("xrootd"),
    cleanup=CLEANUP,
)
