"""scp (OpenSSH).  Also HPN-scp: the same templates with the HPN binary's path in config."""

from __future__ import annotations

from . import command
from .base import Profile

# -B batch mode (never prompt), -q no progress meter, -F a per-remote ssh_config that
# pins the key and known_hosts.  Compression stays off: it would flatter the byte ratio.
SSH_OPTS = ["-F", "{ssh_config}", "-i", "{key}", "-P", "{port}", "-o", "BatchMode=yes", "-o", "Compression=no"]

PROFILE = Profile(
    name="scp",
    description="OpenSSH scp over the remote's sshd",
    commands={
        "download": ["scp", "-B", "-q", *SSH_OPTS, "{user}@{host}:{remote_path}", "{local_path}"],
    },
    runner=command.run,
)
