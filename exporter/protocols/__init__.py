"""Protocol registry: a plain mapping from module name to profile.

Adding a protocol = one module with a PROFILE, and one line here.
"""

from __future__ import annotations

from . import bbftp, command, ftp, gridftp, http, iperf3, rsync, scp, sftp, xrootd
from .base import PLACEHOLDERS, Expectation, Profile, RunContext, RunOutcome

REGISTRY: dict[str, Profile] = {
    "command": command.PROFILE,
    "scp": scp.PROFILE,
    "hpnscp": scp.HPN_PROFILE,
    "sftp": sftp.PROFILE,
    "ftp": ftp.PROFILE,
    "gridftp": gridftp.PROFILE,
    "bbftp": bbftp.PROFILE,
    "rsync": rsync.PROFILE,
    "rsyncd": rsync.DAEMON_PROFILE,
    "http": http.PROFILE,
    "xrootd": xrootd.PROFILE,
    "iperf3": iperf3.PROFILE,
}

__all__ = ["PLACEHOLDERS", "REGISTRY", "Expectation", "Profile", "RunContext", "RunOutcome"]
