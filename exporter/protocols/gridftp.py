"""GridFTP with globus-url-copy: parallel streams (-p), concurrency (-cc), pipelining
(-pp), and UDT mode.

The capture must confirm the claim: -p N must show at least N data flows, and UDT mode
must move the data over UDP.  `globus-url-copy -udt` stays on TCP without saying so for
ftp:// URLs (seen in the lab; see gridftp_udt.py), which is why UDT mode drives a
third-party transfer itself, and why the transport check would turn any silent fallback
into a failed result rather than a mislabelled number.
"""

from __future__ import annotations

import sys

from . import command
from .base import Expectation, Option, Profile, RunContext, RunOutcome

PORT = 2811


def commands(options):
    if options["udt"]:
        return udt_commands(options)
    base = ["{binary}", "-p", str(options["parallel"]), "-cc", str(options["concurrency"])]
    if options["pipelining"]:
        base.append("-pp")
    remote = "ftp://{host}:%d{remote_path}" % PORT
    return {
        ("download", "file"): [*base, remote, "file://{local_path}"],
        ("download", "tree"): [*base, "-r", "-cd", remote + "/", "file://{local_path}/"],
        ("upload", "file"): [*base, "file://{local_path}", remote],
        ("upload", "tree"): [*base, "-r", "-cd", "file://{local_path}/", remote + "/"],
    }


def udt_commands(options):
    """Third-party between the remote's server and one on this host (gridftp_udt.py)."""
    local = "{client}:%d" % options["local_port"]
    remote = "{host}:%d" % PORT
    driver = [sys.executable, "-m", "exporter.protocols.gridftp_udt"]
    return {("download", "file"): [*driver, remote, "{remote_path}", local, "{local_path}"],
            ("upload", "file"): [*driver, local, "{local_path}", remote, "{remote_path}"]}


def run(ctx: RunContext) -> RunOutcome:
    if ctx.options["udt"] and ctx.direction == "download":
        # The local GridFTP server writes the file as its anonymous user, not as us.
        ctx.workdir.chmod(0o1777)
    return command.run(ctx)


def expect(options) -> Expectation:
    if options["udt"]:
        return Expectation(transport="udp", min_data_flows=1)
    return Expectation(transport="tcp", min_data_flows=options["parallel"])


def lab_servers(options) -> tuple[str, ...]:
    return ("gridftp", "gridftp-client") if options["udt"] else ("gridftp",)


OPTIONS = {
    "parallel": Option(int, 1, "parallel TCP streams per file (-p)"),
    "concurrency": Option(int, 1, "files in flight at once (-cc)"),
    "pipelining": Option(bool, False, "pipeline many small files on one connection (-pp)"),
    "udt": Option(bool, False, "UDT (UDP-based) data channel, third-party through a GridFTP server on this host"),
    "local_port": Option(int, 2811, "port of the GridFTP server on this host (UDT mode)"),
}

PROFILE = Profile(name="gridftp", description="GridFTP with globus-url-copy", binary="globus-url-copy",
                  commands=commands, runner=run, options=OPTIONS, expect=expect,
                  lab_servers=lab_servers)
