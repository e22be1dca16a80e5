"""`advise`: per path, what limited the recent transfers and how to lift a host limit.

The NCSA poster's gain came from TCP buffers sized to the bandwidth-delay product.  A
window must hold the BDP to fill the path; Linux counts skb overhead in the buffer and
advertises only part of it as window (net.ipv4.tcp_adv_win_scale, or the measured
scaling ratio since 6.x), so the buffer maxima are advised at TARGET_FACTOR x BDP, as
ESnet's host tuning guide does.  Autotuning stops at net.ipv4.tcp_rmem/tcp_wmem's
maximum; net.core.rmem_max/wmem_max cap only the buffers an application sets itself
(GridFTP's tcp-bs, iperf3 -w), so those lines matter for such tools only.
"""

from __future__ import annotations

import datetime as dt
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from bigbinf.config import Config
from bigbinf.history.change import describe, what_changed
from bigbinf.history.regression import WEEK
from bigbinf.history.regression_state import RegressionJournal
from bigbinf.journal import checkpoint
from bigbinf.journal.store import BaselineJournal, Journal, baseline_path
from bigbinf.judge.words import human_bytes, human_rate
from bigbinf.measure.path.baseline import buffer_values
from bigbinf.measure.plan import LabSite, Remote, plan_remotes, plan_round
from bigbinf.measure.tcp.state import TcpStateError, read_tcp_settings
from bigbinf.process import in_netns
from bigbinf.result import PathBaseline, Result, SeriesKey

TARGET_FACTOR = 2
ROUND_TO = 1 << 20  # whole MiB: lines a human can read and check
NETWORK_LIMITS = ("link_capacity", "congestion")
HOST_LIMITS = ("receive_window", "send_buffer")
SYSCTL_KEYS = {
    "tcp_rmem": "net.ipv4.tcp_rmem",
    "tcp_wmem": "net.ipv4.tcp_wmem",
    "rmem_max": "net.core.rmem_max",
    "wmem_max": "net.core.wmem_max",
}


class AdviceError(Exception):
    """Bad input to advise (an unknown remote): the message names the fix."""


@dataclass(frozen=True)
class SysctlChange:
    side: str  # local | remote
    kind: str  # a key of SYSCTL_KEYS
    current: float
    wanted: str  # the whole value to write (three numbers for tcp_rmem/tcp_wmem)
    why: str

    @property
    def line(self) -> str:
        return f'sysctl -w {SYSCTL_KEYS[self.kind]}="{self.wanted}"'


def target_buffer(bdp: float) -> int:
    """TARGET_FACTOR x BDP, rounded up to whole MiB."""
    return max(ROUND_TO, math.ceil(TARGET_FACTOR * bdp / ROUND_TO) * ROUND_TO)


def buffer_changes(bdp: float, buffers: dict[str, dict[str, float]], directions: Iterable[str]) -> list[SysctlChange]:
    """The sysctl values below the target on the sides that matter for `directions`:
    the receiver's receive buffers and the sender's send buffers."""
    target = target_buffer(bdp)
    roles: dict[tuple[str, str], str] = {}
    for direction in directions:
        receiver, sender = ("local", "remote") if direction == "download" else ("remote", "local")
        for side, kinds, role in (
            (receiver, ("tcp_rmem", "rmem_max"), "receives"),
            (sender, ("tcp_wmem", "wmem_max"), "sends"),
        ):
            for kind in kinds:
                roles[(side, kind)] = f"{'this host' if side == 'local' else 'the remote'} {role} {direction}s"
    changes = []
    for (side, kind), role in sorted(roles.items()):
        values = buffers.get(side, {})
        current = values.get(kind)
        if current is None or current >= target:
            continue
        if kind in ("tcp_rmem", "tcp_wmem"):
            low, default = int(values.get(f"{kind}_min", 4096)), int(values.get(f"{kind}_default", 131072))
            wanted = f"{low} {default} {target}"
            why = f"{role}: autotuning stops at {current:.0f} B, below {TARGET_FACTOR} x BDP"
        else:
            wanted = str(target)
            why = f"{role}: caps buffers that applications set themselves (GridFTP tcp-bs, iperf3 -w)"
        changes.append(SysctlChange(side, kind, current, wanted, why))
    return changes


T = TypeVar("T")
RECENT_DAYS = (0.25, 2, 30, None)  # the windows advise reads the journal in, widening (None: all of it)


def advise(config: Config, lab: LabSite | None, remote: str | None = None, recent: int = 1) -> str:
    """The advice text for every remote (or one): read from the journals and, live, from
    both ends' sysctls where they can be read."""
    remotes = {r.name: r for r in plan_remotes(config, lab)}
    if remote is not None and remote not in remotes:
        raise AdviceError(f"--remote {remote}: no such remote; configured: {', '.join(remotes) or 'none'}")
    chosen = [remotes[remote]] if remote else list(remotes.values())
    directions: dict[str, set[str]] = {}
    series: set[SeriesKey] = set()
    for spec in plan_round(config, lab):
        directions.setdefault(spec.remote.name, set()).add(spec.direction)
        if remote is None or spec.remote.name == remote:
            series.add(SeriesKey(spec.protocol, spec.remote.name, spec.dataset, spec.direction))
    baselines, results = history(config, {r.name for r in chosen}, series, recent)
    text = "\n\n".join(
        _path_advice(r, baselines.get(r.name), _recent(results, r.name, recent), sorted(directions.get(r.name, ())))
        for r in chosen
    )
    return text + open_regressions_text(config, {r.name for r in chosen})


def open_regressions_text(config: Config, remotes: set[str]) -> str:
    """The open regressions of these remotes' series and what changed when each began
    (issue 35; bigbinf/history/change.py)."""
    open_ = {k: e for k, e in RegressionJournal(config.journal.path).open_regressions().items() if k.remote in remotes}
    if not open_:
        return ""
    # What changed compares the baseline's weeks before each start with the runs since:
    # only that span of the journals is read (issue 37), not `results` (advise's newest).
    span = config.regression.baseline_weeks * WEEK
    since = min(e.since for e in open_.values()) - span
    results = [r for r in Journal(config.journal.path).read(since=since) if r.key in open_]
    probes = list(BaselineJournal(baseline_path(config.journal.path)).read(since=since))
    lines = ["", "", "Open regressions (bigbinf-exporter regression list|accept):"]
    for key in sorted(open_, key=lambda k: (k.protocol, k.remote, k.dataset, k.direction)):
        change = what_changed(key, open_[key].since, span, results, probes)
        start = _when(open_[key].since)
        lines.append(f"  {key.protocol} {key.direction} of {key.dataset} with {key.remote}, since {start}:")
        lines.append(f"    what changed: {describe(change)}")
    return "\n".join(lines)


def history(
    config: Config, remotes: set[str], series: set[SeriesKey] | None = None, per_series: int = 1
) -> tuple[dict[str, PathBaseline], list[Result]]:
    """Each of `remotes`' last path baseline, and the exporter's results: each series'
    newest `per_series` transfers.  Both from the journals' checkpoints (journal/
    checkpoint.py: each series' last result and last ok one, the last transfers, each
    remote's last baseline), so a year of history is not read; only where they lack a
    series' newest runs (per_series beyond them), the journal, widening (RECENT_DAYS).  A
    series or remote the checkpoint has no result of has none in the journal either: it
    never widens the read (a newly configured protocol, a tool never installed, a remote
    never probed would have it read the whole journal)."""
    fold = checkpoint.of(Journal(config.journal.path))
    held = _unique([*fold.latest_results(), *fold.recent_results(wanted=lambda r: r.source == "exporter")])
    held = [r for r in held if r.source == "exporter"]
    known = {r.key for r in held}

    def enough(found: list[Result]) -> bool:
        if series is None:
            return remotes & {k.remote for k in known} <= {r.remote for r in found}
        counts = Counter(r.key for r in found)
        return all(counts[key] >= per_series for key in series if key in known)

    results = (
        held
        if enough(held)
        else _widening(
            lambda since: [r for r in Journal(config.journal.path).read(since=since) if r.source == "exporter"],
            enough,
        )
    )
    baselines: dict[str, PathBaseline] = {}
    for b in checkpoint.baselines_of(BaselineJournal(baseline_path(config.journal.path))).baselines():
        if b.remote in remotes and (
            b.remote not in baselines or b.start_timestamp >= baselines[b.remote].start_timestamp
        ):
            baselines[b.remote] = b
    return baselines, results


def _unique(results: Iterable[Result]) -> list[Result]:
    """Each result once (a series' last result is among the last transfers too)."""
    seen: dict[tuple[SeriesKey, float, str], Result] = {}
    for r in results:
        seen.setdefault((r.key, r.start_timestamp, r.source), r)
    return list(seen.values())


def _widening(read: Callable[[float | None], list[T]], enough: Callable[[list[T]], bool]) -> list[T]:
    found: list[T] = []
    for days in RECENT_DAYS:
        found = read(None if days is None else time.time() - days * 86400)
        if enough(found):
            break
    return found


def _recent(results: Sequence[Result], remote: str, per_series: int) -> list[Result]:
    """The newest `per_series` judged transfers of each series to `remote`.  Transfers run
    under a protocol's tcp_buffer_max are left out: their buffers were capped on purpose
    (measure/tcp/tuning.py), so a buffer verdict there says nothing about the hosts' sysctls."""
    by_series: dict[tuple[str, str, str], list[Result]] = {}
    for r in results:
        if r.remote == remote and r.limited_by and r.tcp_buffer_max_bytes is None:
            by_series.setdefault((r.protocol, r.dataset, r.direction), []).append(r)
    recent = []
    for key in sorted(by_series):
        recent += sorted(by_series[key], key=lambda r: r.start_timestamp)[-per_series:]
    return recent


def _live_buffers(remote: Remote, baseline: PathBaseline | None) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Both ends' buffer limits as they are now; where a side cannot be read, as the last
    probe read them, and a note says so."""
    buffers: dict[str, dict[str, float]] = {}
    notes = []
    sides = [("local", in_netns(remote.netns, []))]
    if remote.stats_command:
        sides.append(("remote", remote.stats_argv([])))
    for side, prefix in sides:
        try:
            buffers[side] = buffer_values(read_tcp_settings(prefix))
        except TcpStateError as exc:
            if baseline and side in baseline.buffers:
                buffers[side] = baseline.buffers[side]
                notes.append(f"{side}: {exc}; using the values read at {_when(baseline.start_timestamp)}")
            else:
                notes.append(f"{side}: {exc}")
    if not remote.stats_command:
        notes.append(
            f"the remote's buffers cannot be read: give remotes.{remote.name}.stats_command "
            "(e.g. [ssh, -i, KEY, user@host]) to include them"
        )
    return buffers, notes


def _when(timestamp: float) -> str:
    """UTC to the second: the one time format of the exporter's pages, which show this text."""
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _probed_buffers(baseline: PathBaseline) -> tuple[dict[str, dict[str, float]], list[str]]:
    notes = [f"buffers as the path probe read them at {_when(baseline.start_timestamp)} (`advise` reads them live)"]
    if baseline.remote_note:
        notes.append(f"remote: {baseline.remote_note}")
    return dict(baseline.buffers), notes


@dataclass(frozen=True)
class Paths:
    """A config's remotes, resolved, and the directions each is measured in: what
    `path_advice` needs of the plan (a mesh's plan has thousands of transfers: made once
    per configuration, not per page)."""

    remotes: dict[str, Remote]
    directions: dict[str, list[str]]

    @classmethod
    def of(cls, config: Config, lab: LabSite | None) -> Paths:
        directions: dict[str, set[str]] = {}
        for spec in plan_round(config, lab):
            directions.setdefault(spec.remote.name, set()).add(spec.direction)
        return cls(
            {r.name: r for r in plan_remotes(config, lab)},
            {name: sorted(found) for name, found in directions.items()},
        )


def path_advice(paths: Paths, remote: str, baseline: PathBaseline | None, results: Sequence[Result]) -> str:
    """What `advise` says for one path, from what the exporter holds (its recent results,
    the baseline given) instead of the journals, and without reading anything live."""
    if remote not in paths.remotes:
        return f"remote {remote} is no longer configured: no advice"
    mine = [r for r in results if r.source == "exporter"]
    return _path_advice(
        paths.remotes[remote], baseline, _recent(mine, remote, 1), paths.directions.get(remote, []), live=False
    )


def _path_advice(
    remote: Remote,
    baseline: PathBaseline | None,
    recent: list[Result],
    directions: list[str],
    live: bool = True,
) -> str:
    """`live`: read both ends' buffers now (the command); else as the path probe read them
    (the exporter's page, which must not open a session to the remote per view)."""
    where = f" (network namespace {remote.netns})" if remote.netns else ""
    lines = [f"== path {remote.name} ({remote.address})"]
    if baseline is None:
        lines.append("   no path baseline yet: run a round first (`once`, or wait for the schedule)")
        return "\n".join(lines)
    b = baseline
    lines.append(f"   probed {_when(b.start_timestamp)} ({b.probes_sent} {b.method} probes)")
    if b.probes_answered:
        rtts = "/".join(f"{(v or 0) * 1000:.2f}" for v in (b.rtt_min_seconds, b.rtt_avg_seconds, b.rtt_max_seconds))
        lines.append(
            f"   RTT min/avg/max {rtts} ms, mdev {(b.rtt_mdev_seconds or 0) * 1000:.2f} ms, "
            f"loss {b.loss_ratio:.1%}, MTU {b.mtu_bytes or 'unknown'}"
        )
    if b.error:
        lines.append(f"   probe: {b.error}")
    bdp = b.bdp_bytes
    if bdp is None:
        lines.append(
            "   BDP unknown: no bandwidth estimate (give remotes.NAME.bandwidth, or schedule an iperf3 test to "
            "this remote)"
            if b.bandwidth_bytes_per_second is None
            else "   BDP unknown: the probe measured no RTT"
        )
    else:
        lines.append(
            f"   bandwidth {human_rate(b.bandwidth_bytes_per_second)} ({b.bandwidth_source}) x min RTT "
            f"{(b.rtt_min_seconds or 0) * 1000:.2f} ms = BDP {human_bytes(bdp)}; buffers wanted: "
            f"{TARGET_FACTOR} x BDP = {target_buffer(bdp)} B"
        )
    if b.congestion_control:
        lines.append(
            "   congestion control: " + ", ".join(f"{side} {cc}" for side, cc in sorted(b.congestion_control.items()))
        )
    lines.append("   recent transfers:" if recent else "   no judged transfers yet")
    for r in recent:
        # Its own name: `where` names this host's namespace below, whatever the last verdict's side.
        side = f" ({r.limited_side})" if r.limited_side else ""
        lines.append(
            f"     {r.protocol}/{r.dataset}/{r.direction} {_when(r.start_timestamp)}: "
            f"{r.limited_by}{side}: {r.limited_evidence}"
        )
        if r.limited_next_step:
            lines.append(f"       next: {r.limited_next_step}")
    buffers, notes = _live_buffers(remote, b) if live else _probed_buffers(b)
    lines += [f"   note: {n}" for n in notes]
    for side in sorted(buffers):
        values = buffers[side]
        shown = ", ".join(f"{kind} {values[kind]:.0f}" for kind in SYSCTL_KEYS if kind in values)
        lines.append(f"   buffers ({side}): {shown}")
    changes = buffer_changes(bdp, buffers, directions) if bdp else []
    verdicts = [r.limited_by for r in recent]
    host_limited = [v for v in verdicts if v in HOST_LIMITS]
    network_limited = [v for v in verdicts if v in NETWORK_LIMITS]
    for side, header in (("local", f"on this host{where}"), ("remote", "on the remote")):
        mine = [c for c in changes if c.side == side]
        if mine:
            lines.append(f"   to lift the buffer limit {header}:")
            lines += [f"     {c.line}  # {side}: {c.why}" for c in mine]
            lines.append("     (to keep it across reboots, put the same keys in /etc/sysctl.d/90-bigbinf.conf)")
    if verdicts and len(network_limited) == len(verdicts):
        kinds = ", ".join(sorted(set(network_limited)))
        lines.append(
            f"   the network, not the host, is the limit: every recent transfer was limited by {kinds}"
            + (
                "; the buffer lines above will not make them faster now"
                if changes
                else "; the hosts hold 2 x BDP"
                if bdp
                else ""
            )
        )
    elif host_limited and not changes and bdp:
        lines.append(
            "   transfers were window- or buffer-limited although the hosts' maxima reach "
            f"{TARGET_FACTOR} x BDP: the application sets its own socket buffer (capped by net.core.rmem_max/"
            "wmem_max), or the bandwidth estimate is low"
        )
    elif not changes and bdp:
        lines.append(
            f"   the buffers of both ends that could be read hold {TARGET_FACTOR} x BDP: no buffer change needed"
        )
    return "\n".join(lines)
