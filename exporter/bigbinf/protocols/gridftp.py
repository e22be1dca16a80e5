"""GridFTP with globus-url-copy: parallel streams (-p), concurrency (-cc), pipelining
(-pp), and UDT mode.

The capture must confirm the claim: -p N must show at least N data flows, -cc N over a
directory N data flows (one session, control and data channel, per file in flight), and
UDT mode must move the data over UDP.  `globus-url-copy -udt` stays on TCP without
saying so for ftp:// URLs (seen in the lab; see gridftp_udt.py), which is why UDT mode
drives a third-party transfer itself, and why the transport check would turn any silent
fallback into a failed result rather than a mislabelled number.

Pipelining is also a third-party affair: globus-url-copy's help says only third-party
transfers benefit from -pp, and in the lab a two-party `-pp -r` download sent each RETR
only after the previous file's 226 (no command in flight ahead), while the same copy
between the remote's server and one on this host sent 11 RETRs before the first 226.  So
`pipelining: true` copies between the remote's server and the GridFTP server on this
host (`local_port`), like UDT mode.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from bigbinf.protocols import command
from bigbinf.protocols.base import Commands, Expectation, Profile, RunContext, RunOutcome, option
from bigbinf.protocols.hosts import is_ipv6

PORT = 2811
SERVER = "globus-gridftp-server"  # the local end of third-party modes


@dataclass(frozen=True)
class GridftpOptions:
    parallel: int = option(1, "parallel TCP streams per file (-p)")
    concurrency: int = option(1, "files in flight at once (-cc)")
    pipelining: bool = option(
        False, "pipeline many small files (-pp), third-party through a GridFTP server on this host"
    )
    udt: bool = option(False, "UDT (UDP-based) data channel, third-party through a GridFTP server on this host")
    local_port: int = option(2811, "port of the GridFTP server on this host (UDT mode, pipelining)")


def _third_party(options: GridftpOptions) -> bool:
    return options.udt or options.pipelining


def commands(options: GridftpOptions) -> Commands:
    if options.udt:
        return udt_commands(options)
    base = ["{binary}", "-p", str(options.parallel), "-cc", str(options.concurrency)]
    remote = f"ftp://{{url_host}}:{PORT}{{remote_path}}"
    if options.pipelining:
        base.append("-pp")
        # This host's GridFTP server reads or writes {local_path} itself.
        local = f"ftp://{{url_client}}:{options.local_port}{{local_path}}"
    else:
        local = "file://{local_path}"
    return {
        ("download", "file"): [*base, remote, local],
        ("download", "tree"): [*base, "-r", "-cd", remote + "/", local + "/"],
        ("upload", "file"): [*base, local, remote],
        ("upload", "tree"): [*base, "-r", "-cd", local + "/", remote + "/"],
    }


def udt_commands(options: GridftpOptions) -> Commands:
    """Third-party between the remote's server and one on this host (gridftp_udt.py)."""
    local = f"{{url_client}}:{options.local_port}"
    remote = f"{{url_host}}:{PORT}"
    driver = [sys.executable, "-m", "bigbinf.protocols.gridftp_udt"]
    return {
        ("download", "file"): [*driver, remote, "{remote_path}", local, "{local_path}"],
        ("upload", "file"): [*driver, local, "{local_path}", remote, "{remote_path}"],
    }


def run(ctx: RunContext[GridftpOptions]) -> RunOutcome:
    if _third_party(ctx.options) and ctx.direction == "download":
        # The local GridFTP server writes the file as its anonymous user, not as us.
        ctx.workdir.chmod(0o1777)
    return command.run(ctx)


def with_ipv6(argv: list[str], host: str) -> list[str]:
    """globus-url-copy reaches an IPv6 address only when told (-ipv6; without it: "Address
    family for hostname not supported"), and then uses EPSV/EPRT for the data channel.
    Given only for an IPv6 remote, so transfers to IPv4 remotes run as they always have;
    also to a configured command whose program is globus-url-copy itself.  `host` is the
    remote's address as resolved (Profile.for_address): a name that resolves to IPv6
    gets -ipv6 too (issue 36: only literals did), and the journal's argv shows it."""
    if is_ipv6(host) and Path(argv[0]).name == "globus-url-copy" and "-ipv6" not in argv:
        return [argv[0], "-ipv6", *argv[1:]]
    return argv


def expect(options: GridftpOptions) -> Expectation:
    if options.udt:
        return Expectation(transport="udp", min_data_flows=1)
    return Expectation(transport="tcp", min_data_flows=options.parallel)


def expect_tree(options: GridftpOptions) -> Expectation:
    # -cc N runs N sessions at once, each with its own control and data channel (lab:
    # 1000 x 64 KiB with -cc 4 showed 4 control connections open together and 4 data
    # channels of 13-26 MB).  Parallel streams are per file and need not all carry 64 KiB
    # with small files (-p 4 moved the same set on 3), so they add nothing.
    return Expectation(transport="tcp", min_data_flows=options.concurrency)


def ipv4_only(options: GridftpOptions) -> str:
    # Seen in the lab over IPv6: the servers accept SITE SETNETSTACK udt and EPSV/EPRT,
    # then the UDT data channel binds 0.0.0.0 (UDP) and the transfer waits forever.
    return (
        "UDT mode: the GridFTP servers' UDT data channel (globus-xio-udt-driver) binds IPv4 sockets only"
        if options.udt
        else ""
    )


def lab_servers(options: GridftpOptions) -> tuple[str, ...]:
    return ("gridftp", "gridftp-client") if _third_party(options) else ("gridftp",)


def local_binaries(options: GridftpOptions) -> tuple[str, ...]:
    # UDT's driver is this Python, present everywhere: what a site may lack is the GridFTP
    # server on this host that both third-party modes copy to and from.
    return (SERVER,) if _third_party(options) else ()


PROFILE = Profile(
    name="gridftp",
    description="GridFTP with globus-url-copy",
    binary="globus-url-copy",
    commands=commands,
    runner=run,
    options_type=GridftpOptions,
    expect=expect,
    expect_tree=expect_tree,
    lab_servers=lab_servers,
    local_binaries=local_binaries,
    ipv4_only=ipv4_only,
    for_address=with_ipv6,
)
