"""The path baseline of one remote: probes, bottleneck estimate and both ends' TCP limits.

Run once per remote at the start of each round, before and outside the transfers'
captures, so its probes never count as transfer bytes.  Like a transfer it never
raises: what could not be measured is absent, and `error` / `remote_note` say why.
"""

from __future__ import annotations

import time
from dataclasses import replace

from bigbinf.measure.path.probe import probe_path
from bigbinf.measure.path.route import resolve, route_window
from bigbinf.measure.plan import Remote
from bigbinf.measure.tcp.state import HostTcpSettings, TcpStateError, read_optional_settings, read_tcp_settings
from bigbinf.measure.wire.capture import CaptureError
from bigbinf.process import in_netns
from bigbinf.result import PathBaseline

SIDES = ("local", "remote")
BUFFER_KINDS = ("tcp_rmem", "tcp_wmem", "rmem_max", "wmem_max")


def measure_path(remote: Remote, measured_bandwidth: float | None = None) -> PathBaseline:
    """Probe the path to `remote`.  `measured_bandwidth` (bytes/s, e.g. the last iperf3
    test to it) is the bottleneck estimate where the configuration gives none."""
    start = time.time()
    bandwidth, source = remote.bandwidth_bytes_per_second, remote.bandwidth_source
    if bandwidth is None and measured_bandwidth:
        bandwidth, source = measured_bandwidth, "iperf3"
    buffers: dict[str, dict[str, float]] = {}
    congestion: dict[str, str] = {}
    notes: dict[str, str] = {}
    for side, prefix in (("local", in_netns(remote.netns, [])), ("remote", remote.stats_argv([]))):
        if side == "remote" and not remote.stats_command:
            continue  # not configured: not a problem to report every round (advise says so)
        try:
            settings = read_tcp_settings(prefix)
        except TcpStateError as exc:
            notes[side] = str(exc)
            continue
        # Whether its receive buffer grows at all (a receiver with autotuning off keeps
        # tcp_rmem's default): read beside the limits, through the same command.
        buffers[side] = {**buffer_values(settings), **read_optional_settings(prefix)}
        congestion[side] = settings.congestion_control
    baseline = PathBaseline(
        remote=remote.name,
        start_timestamp=start,
        method=remote.probe.method,
        bandwidth_bytes_per_second=bandwidth,
        bandwidth_source=source if bandwidth else "",
        return_bandwidth_bytes_per_second=remote.return_bandwidth_bytes_per_second,
        buffers=buffers,
        congestion_control=congestion,
        error=notes.get("local", ""),
        remote_note=notes.get("remote", ""),
    )
    if not remote.probe.enabled:
        return baseline
    try:
        address = resolve(remote.address, remote.netns)
    except CaptureError as exc:
        return replace(baseline, error=_join(str(exc), baseline.error))
    buffers = _with_route_windows(buffers, remote, address)
    outcome = probe_path(address, remote.probe, remote.netns)
    return replace(
        baseline,
        address=address,
        method=outcome.method,
        probes_sent=outcome.sent,
        probes_answered=outcome.answered,
        rtt_min_seconds=outcome.rtt_min_seconds,
        rtt_avg_seconds=outcome.rtt_avg_seconds,
        rtt_max_seconds=outcome.rtt_max_seconds,
        rtt_mdev_seconds=outcome.rtt_mdev_seconds,
        mtu_bytes=outcome.mtu_bytes,
        buffers=buffers,
        error=_join(outcome.error, baseline.error),
    )


def _with_route_windows(
    buffers: dict[str, dict[str, float]], remote: Remote, address: str
) -> dict[str, dict[str, float]]:
    """Both ends' route windows toward each other (`route_window`: a `window` metric caps
    the window a host advertises apart from its buffer), beside the TCP settings read there:
    this host's route to the remote, and the remote's back to the source address that route
    uses (through its stats command).  Only where read: the judge names a route window
    only where one was read, never from a clamped window alone."""
    found = {side: dict(values) for side, values in buffers.items()}
    window, source = route_window(in_netns(remote.netns, []), address)
    if window is not None and "local" in found:
        found["local"]["route_window"] = window
    if source and "remote" in found and remote.stats_command:
        back, _ = route_window(remote.stats_argv([]), source)
        if back is not None:
            found["remote"]["route_window"] = back
    return found


def _join(*problems: str) -> str:
    return "; ".join(p for p in problems if p)


def buffer_values(settings: HostTcpSettings) -> dict[str, float]:
    """A host's limits as journaled: the four maxima BUFFER_KINDS, and the min and
    default of tcp_rmem/tcp_wmem (advice prints whole sysctl lines)."""
    values: dict[str, float] = {"rmem_max": settings.rmem_max, "wmem_max": settings.wmem_max}
    for kind, triple in (("tcp_rmem", settings.tcp_rmem), ("tcp_wmem", settings.tcp_wmem)):
        values[f"{kind}_min"], values[f"{kind}_default"], values[kind] = triple
    return values
