"""iperf3: the memory-to-memory baseline (no file, no disk).

Its JSON gives what a copy command cannot: the sender's retransmits (for a download,
-R, the remote's count, sent back to the client) and, when the client sends, the RTT.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from bigbinf.process import in_netns, run_with_timeout
from bigbinf.protocols.base import Commands, Expectation, Profile, RunContext, RunOutcome, needs, option


@dataclass(frozen=True)
class Iperf3Options:
    congestion: str = option(
        "",
        "TCP congestion control for the test socket (-C)",
        pattern=r"([a-z][a-z0-9_]{0,14})?",
        expect="is not a congestion control name; write e.g. cubic, bbr, reno",
    )
    port: int = option(5201, "the iperf3 server's port")
    streams: int = option(1, "parallel TCP streams (-P)")


def commands(options: Iperf3Options) -> Commands:
    base = ["{binary}", "-c", "{host}", "-p", str(options.port), "-n", "{size}", "-J"]
    if options.congestion:
        base += ["-C", options.congestion]
    if options.streams > 1:
        base += ["-P", str(options.streams)]
    return {("download", "file"): [*base, "-R"], ("upload", "file"): base}


def parse_report(stdout: str) -> dict[str, float]:
    """bytes, seconds, sender retransmits and mean RTT from iperf3 -J output; {} for
    output that is not such a report (the transfer then fails on its byte count)."""
    try:
        end = json.loads(stdout)["end"]
        received, sent = end.get("sum_received", {}), end.get("sum_sent", {})
        # bytes/seconds: the receiver's view (iperf3's headline throughput); bytes_sent:
        # the sender's, which -n bounds (the receiver's count may stop short of it).
        report = {
            "bytes": float(received.get("bytes", 0)),
            "seconds": float(received.get("seconds", 0)),
            "bytes_sent": float(sent.get("bytes", 0)),
        }
        if "retransmits" in sent:
            report["retransmits"] = float(sent["retransmits"])
        rtts = [float(s["sender"]["mean_rtt"]) for s in end.get("streams", []) if s.get("sender", {}).get("mean_rtt")]
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
    if rtts:
        report["mean_rtt_seconds"] = sum(rtts) / len(rtts) / 1e6  # iperf3 reports microseconds
    # JSON allows NaN and Infinity: no such value is a measurement to keep.
    return {name: value for name, value in report.items() if math.isfinite(value)}


def reported_error(stdout: str) -> str:
    """iperf3's own error from its -J output ("" if none): with -J it exits 0 after a
    failed connect and says why only there."""
    try:
        error = json.loads(stdout).get("error", "")
    except (ValueError, AttributeError):
        return ""
    return f"iperf3: {error}" if isinstance(error, str) and error else ""


def run(ctx: RunContext[Iperf3Options]) -> RunOutcome:
    done = run_with_timeout(
        in_netns(ctx.netns, ctx.argv), ctx.timeout_seconds, env=ctx.env, cwd=str(ctx.workdir), capture_stdout=True
    )
    return RunOutcome(**vars(done), reported=parse_report(done.stdout), failure=reported_error(done.stdout))


def expect(options: Iperf3Options) -> Expectation:
    return Expectation(transport="tcp", min_data_flows=options.streams)


PROFILE = Profile(
    name="iperf3",
    description="iperf3 memory-to-memory baseline",
    binary="iperf3",
    commands=commands,
    runner=run,
    options_type=Iperf3Options,
    expect=expect,
    lab_servers=needs("iperf3"),
    produces_file=False,
)
