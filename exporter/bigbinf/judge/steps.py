"""What to do about a verdict: the concrete next step, with its numbers (docs/metrics.md
says the same per verdict; `advise` adds the sysctl lines: history/advice.py)."""

from __future__ import annotations

from bigbinf.judge.inputs import Inputs
from bigbinf.judge.rules import LOSS_SHARE, Limit
from bigbinf.judge.words import host_name, human_bytes, human_rate
from bigbinf.result import Result

# Programs whose CPU work is ssh's cipher (scp and sftp run over it).
SSH_PROGRAMS = frozenset({"ssh", "sshd", "scp", "sftp", "sftp-server"})


def next_step(limit: Limit, i: Inputs, r: Result) -> str:
    """The concrete next step for a verdict, with its numbers (docs/metrics.md says the
    same per verdict)."""
    host = host_name(limit.side)
    target = f" to at least 2 x BDP = {human_bytes(2 * i.bdp)}" if i.bdp else " to at least the path's BDP"
    capped = r.tcp_buffer_max_bytes is not None and "tcp_buffer_max cap" in limit.evidence
    if limit.reason in ("receive_window", "send_buffer"):
        key = "net.ipv4.tcp_rmem" if limit.reason == "receive_window" else "net.ipv4.tcp_wmem"
        if capped:
            step = f"raise or drop the protocol's tcp_buffer_max ({human_bytes(r.tcp_buffer_max_bytes)}){target}"
        else:
            step = f"raise {key}'s maximum on {host}{target} (`advise` prints the sysctl lines)"
        return step + ("; or more parallel streams, each with its own window" if r.protocol != "iperf3" else "")
    if limit.reason == "congestion":
        probe = f"; the probe saw {i.probe_loss}" if i.probe_loss else ""
        return (
            f"the network: talk to the path's operator ({i.loss_words()}{probe}); a congestion control "
            "that does not take random loss for congestion (bbr) keeps more of the rate meanwhile"
        )
    if limit.reason == "link_capacity":
        if i.loss >= LOSS_SHARE:
            return (
                "the path is full and its bottleneck drops what exceeds the rate: pacing (bbr) or shaping just "
                "below it avoids the retransmissions; more speed needs a faster path"
            )
        return "the path is full: nothing on either host makes this faster; a faster path, or fewer bytes, would"
    if limit.reason == "startup":
        return (
            f"larger files (at least {human_bytes(limit.reach_bytes)}), or many files over one persistent "
            "connection (ssh ControlMaster, GridFTP -pp, HTTP keep-alive, rsync of a whole tree)"
        )
    if limit.reason == "busy_host":
        return (
            "this host's CPUs were wanted elsewhere: run the transfers on a less busy host, at quieter times, or "
            "with fewer programs beside them; the run is left out of the regression test's baselines and "
            "plan-move's model"
        )
    if limit.reason == "shared_path":
        return (
            "the path gave less than its estimate with nothing of this transfer holding it: look for other "
            "traffic on the bottleneck (its operator's counters, the same hours on other days) and re-measure "
            "the path's estimate; more parallel streams take a larger share of a shared bottleneck"
        )
    program = limit.program
    if limit.reason == "cpu" and limit.detail == "starved":
        return (
            f"the remote's programs ({program}) waited for a CPU: lift the CPU quota of their cgroup (cpu.max, "
            "cpu.cfs_quota_us; sshd's children inherit its own) or move the load off the remote; its listings "
            "will be on time again when it has the CPU"
        )
    if limit.reason == "cpu" and limit.detail == "quota":
        return (
            f"{program} was held by its cgroup's CPU quota ({host}): lift the quota (cpu.max, cpu.cfs_quota_us: a "
            "container's or a systemd unit's CPU limit) or run the transfers outside it"
        )
    if limit.reason == "cpu":
        if program in SSH_PROGRAMS:
            return (
                f"ssh's cipher on one core ({host}): HPN-scp (multithreaded AES-CTR, or its NONE cipher for data "
                "already protected), a cheaper cipher (scp -c aes128-gcm@openssh.com where the CPU has AES-NI), "
                "or parallel streams (GridFTP -p N, several transfers at once)"
            )
        return f"{program} used all the CPU it could get ({host}): parallel streams or transfers, or a less busy host"
    if limit.reason == "disk":
        return f"{program} waited on its disk ({host}): faster storage, or several files read or written at once"
    if limit.reason == "application":
        if limit.side == i.receiver_side:
            return (
                f"the receiving program reads slower than the network delivers ({host}): lift its rate limit "
                "(curl --limit-rate, a consumer that does not keep up)"
            )
        steady = i.steady_fit or i.rate
        return (
            f"the sending program sent at {human_rate(steady)} ({host}): a rate limit (nginx limit_rate, "
            "--limit-rate, a QoS policy) or a program that does not keep up; lift it there"
        )
    if not limit.reason and i.stale_estimate:
        return f"re-measure the path's estimate, then judge again: {i.stale_renew}"
    return ""
