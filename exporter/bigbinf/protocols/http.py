"""HTTP with curl: GET for downloads, PUT (WebDAV) for uploads.  No directories: HTTP
has no standard listing to mirror."""

from __future__ import annotations

from bigbinf.protocols import command
from bigbinf.protocols.base import Commands, NoOptions, Profile, needs


def commands(options: NoOptions) -> Commands:
    url = "http://{url_host}/{remote_name}"
    curl = ["{binary}", "-sS", "--fail"]
    return {
        ("download", "file"): [*curl, "-o", "{local_path}", "--", url],
        ("upload", "file"): [*curl, "-T", "{local_path}", "--", url],
    }


# WebDAV DELETE; the server must allow it where it allows PUT.
CLEANUP = {"file": ["curl", "-sS", "--fail", "-X", "DELETE", "--", "http://{url_host}/{remote_name}"]}

PROFILE = Profile(
    name="http",
    description="HTTP GET/PUT with curl",
    binary="curl",
    commands=commands,
    runner=command.run,
    options_type=NoOptions,
    lab_servers=needs("nginx"),
    cleanup=CLEANUP,
)
