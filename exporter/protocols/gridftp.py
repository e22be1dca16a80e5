"""GridFTP with globus-url-copy: parallel streams (-p), concurrency (-cc), pipelining
(-pp), and UDT mode.

The capture must confirm the claim: -p N must show at least N data flows, and UDT mode
must move the data over UDP.  `globus-url-copy -udt` between a client and one server
stays on TCP without saying so (seen in the lab), which is exactly what the transport
check turns into a failed result rather than a silently mislabelled number.
"""

from __future__ import annotations

from . import command
from .base import Expectation, Option, Profile

PORT = 2811


def commands(options):
    base = ["{binary}", "-p", str(options["parallel"]), "-cc", str(options["concurrency"])]
    if options["pipelining"]:
        base.append("-pp")
    if options["udt"]:
        base.append("-udt")
    remote = "ftp://{host}:%d{remote_path}" % PORT
    return {
        ("download", "file"): [*base, remote, "file://{local_path}"],
        ("download", "tree"): [*base, "-r", "-cd", remote + "/", "file://{local_path}/"],
        ("upload", "file"): [*base, "file://{local_path}", remote],
        ("upload", "tree"): [*base, "-r", "-cd", "file://{local_path}/", remote + "/"],
    }


def expect(options) -> Expectation:
    if options["udt"]:
        return Expectation(transport="udp", min_data_flows=1)
    return Expectation(transport="tcp", min_data_flows=options["parallel"])


OPTIONS = {
    "parallel": Option(int, 1, "parallel TCP streams per file (-p)"),
    "concurrency": Option(int, 1, "files in flight at once (-cc)"),
    "pipelining": Option(bool, False, "pipeline many small files on one connection (-pp)"),
    "udt": Option(bool, False, "UDT (UDP-based) data channel"),
}

PROFILE = Profile(name="gridftp", description="GridFTP with globus-url-copy", binary="globus-url-copy",
                  commands=commands, runner=command.run, options=OPTIONS, expect=expect)
