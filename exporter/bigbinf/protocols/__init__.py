"""Protocol registry: a plain mapping from module name to profile.

Adding a protocol = one module with a PROFILE, and one line here.
"""

from __future__ import annotations

from typing import Any

from bigbinf.protocols import bbftp, command, ftp, gridftp, http, iperf3, rsync, scp, sftp, xrootd
from bigbinf.protocols.base import PLACEHOLDERS, Expectation, Profile, RunContext, RunOutcome

REGISTRY: dict[str, Profile[Any]] = {
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


def module_for(protocol: str, module: str | None) -> str:
    """The registry key a configured protocol uses: its `module:`, else its own name when
    that is a module (a protocol named scp uses scp), else the plain command runner."""
    return module or (protocol if protocol in REGISTRY else "command")


__all__ = ["PLACEHOLDERS", "REGISTRY", "Expectation", "Profile", "RunContext", "RunOutcome", "module_for"]
