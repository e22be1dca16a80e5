"""What to do about a verdict: the concrete next step, with its numbers (docs/metrics.md
says the same per verdict; `advise` adds the sysctl lines: history/advice.py)."""

from __future__ import annotations

from bigbinf.judge import bounds
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.rules import LOSS_SHARE, Limit
from bigbinf.judge.words import host_name, human_bytes, human_rate
from bigbinf.result import Result

# Programs whose CPU work is ssh's cipher (scp and sftp run over it).
SSH_PROGRAMS = frozenset({"ssh", "sshd", "scp", "sftp", "sftp-server"})


def named_host(side: str, i: Inputs) -> str:
    """A side in words with the remote's configured name: "the remote (site)"."""
    if side == "remote" and i.remote:
        return f"the remote ({i.remote})"
    return host_name(side)


def sender_paces(i: Inputs) -> bool:
    """Whether the sender already uses bbr (it paces, and does not take loss for congestion)."""
    return i.congestion_control == "bbr"


def _bbr(i: Inputs) -> str:
    """The step to bbr on the sender, naming its host and the setting; "" where it is in use."""
    if sender_paces(i):
        return ""
    now = f" (it uses {i.congestion_control})" if i.congestion_control else ""
    return (
        f"on the sender, {named_host(i.sender_side, i)}{now}: sysctl net.ipv4.tcp_congestion_control=bbr "
        "(or the protocol's `congestion: bbr`)"
    )


def _buffer_step(limit: Limit, i: Inputs, r: Result) -> str:
    """The buffer setting to change and where, never one already in use: autotuning off is
    turned on; a maximum below the target is raised to it; one already at or above it is
    not the cap (the program's own SO_RCVBUF/SO_SNDBUF, net.core.rmem_max/wmem_max is)."""
    host = named_host(limit.side, i)
    receive = limit.reason == "receive_window"
    kind = "tcp_rmem" if receive else "tcp_wmem"
    if receive and bounds.unscaled(i):
        # No window above 65535 B without scaling: no buffer, route or program setting helps.
        off = bounds.scaling_off(i)
        if off:
            return (
                f"on {named_host(off, i)}: sysctl -w net.ipv4.tcp_window_scaling=1 (it is 0 there: no window "
                "scaling, no window above 64 KiB); new connections negotiate it"
            )
        return (
            "the path: find the device between the sites that strips the window-scale option from the SYNs (a "
            "firewall, TCP normaliser or load balancer rewriting TCP options) and make it pass the option; "
            "`ss -ti` on the sender then shows wscale; no buffer setting on either host lifts a 64 KiB window"
        )
    settings = i.buffers.get(limit.side, {})
    if receive and settings.get("tcp_moderate_rcvbuf") == 0:
        return (
            f"on {host}: sysctl net.ipv4.tcp_moderate_rcvbuf=1 (receive autotuning is off there: its buffer "
            f"stays at tcp_rmem's default {human_bytes(settings.get('tcp_rmem_default'))})"
        )
    bdp, rtt = bdp_seen(i)
    target = 2 * bdp if bdp else None
    at = f" at the {rtt * 1000:.1f} ms round trip it saw" if rtt else ""
    goal = f"at least 2 x BDP{at} = {human_bytes(target)}" if target else "at least the path's BDP"
    if receive and bounds.clamped_window(i):
        metric = bounds.route_window(i)
        if metric > 0:
            # The window is clamped apart from the buffer, and its route's window metric was read.
            return (
                f"on {host}: its route to this host holds the window it advertises (`window` "
                f"{human_bytes(metric)}); `ip route change <that route> window N` with N {goal}, or drop the "
                f"metric; {kind} is not what holds it"
            )
        # Clamped, with nothing read that says by what: name where to look, claim nothing.
        return (
            f"on {host}: the window it advertises is held below its buffer, and {kind} is not what holds it: look "
            "for a `window` metric on its route to the other end (`ip route get <its address>` there) or a program's "
            "TCP_WINDOW_CLAMP, and lift it"
        )
    buffer = i.receiver.get("rcvbuf_max_bytes") if receive else i.sender.get("sndbuf_max_bytes")
    if buffer and bounds.locked(i, kind, buffer, limit.side):
        option = "SO_RCVBUF" if receive else "SO_SNDBUF"
        knob = "rcvbuf=" if receive else "sndbuf="
        return (
            f"on {host}: the program set its own buffer ({option}, {human_bytes(buffer)} as the kernel keeps it: "
            f"twice the value set): raise it in the program's configuration there (nginx `{knob}` on its listen, "
            f"a -w or buffer option) to {goal}, or drop it so autotuning sizes it; {kind}'s maximum there "
            f"({human_bytes(settings.get(kind))}) is not what holds it"
        )
    if r.tcp_buffer_max_bytes is not None and "tcp_buffer_max cap" in limit.evidence:
        return f"raise or drop the protocol's tcp_buffer_max ({human_bytes(r.tcp_buffer_max_bytes)}) to {goal}"
    now = settings.get(kind)
    if target and now and now >= target:
        core = "net.core.rmem_max" if receive else "net.core.wmem_max"
        # Not `locked` (a buffer seen held below what the sysctls give): the program's own
        # buffer is a place to look, not a finding.
        return (
            f"{kind}'s maximum on {host} is {human_bytes(now)}, already 2 x BDP{at} or more: it is not what holds the "
            f"window; look at what the program there asks (SO_RCVBUF/SO_SNDBUF: a -w or buffer option, capped by "
            f"{core}, {human_bytes(settings.get(core.rpartition('.')[2]))})"
        )
    low = int(settings.get(f"{kind}_min", 4096))
    default = int(settings.get(f"{kind}_default", 131072 if receive else 16384))
    size = f"{target:.0f}" if target else "N (at least the path's BDP)"
    return f"on {host}: sysctl -w net.ipv4.{kind}='{low} {default} {size}' (its maximum to 2 x BDP{at})"


def bdp_seen(i: Inputs) -> tuple[float | None, float | None]:
    """The path's BDP at the round trip the transfer saw (bounds.round_trip: the one its
    window's bound stands on), and that round trip (None where it is no longer than the
    path's minimum, or unknown).  A buffer sized from the probe's minimum is too small for
    a path whose round trip grew (a 512 KiB tcp_rmem at 84 ms where the probe saw 21 ms:
    2 x BDP at 21 ms is 526 kB, 0.4% above it, and lifts nothing)."""
    if not i.bdp:
        return None, None
    rtt = bounds.round_trip(i)
    if rtt and i.rtt and rtt > i.rtt:
        return i.bdp * rtt / i.rtt, rtt
    return i.bdp, None


def _ssh_window_step(i: Inputs) -> str:
    """ssh's fixed channel window held the rate: a window that grows (HPN-SSH), or a
    protocol without one; the TCP buffers, which allow more, are not the limit."""
    window = bounds.ssh_window(i)
    rtt = f" over the {window.inputs['rtt_seconds'] * 1000:.0f} ms round trip" if window else ""
    tcp = [b for b in (bounds.receive_window(i), bounds.send_buffer(i)) if b]
    allow = f" ({bounds.listed(tcp).removeprefix('bounds computed: ')})" if tcp else ""
    return (
        f"ssh's fixed 2 MiB channel window{rtt} holds {i.protocol or 'the transfer'}, not the TCP buffers, which "
        f"allow more{allow}: HPN-SSH on both ends (hpnscp here, its sshd on the remote: its dynamic window grows "
        "with the TCP buffers), or a protocol without a fixed window on this path (GridFTP or HTTP with the hosts' "
        "tuned buffers, parallel streams: GridFTP -p N); no TCP buffer setting on either host lifts it"
    )


def _ecn_step(i: Inputs) -> str:
    """A queue on the path marks CE (ECN) and the sender halves at each marked round trip:
    the path's congestion, told by marks instead of drops.  Nothing on the hosts is wrong:
    ECN is already on (turning it off would turn the marks into drops, and the halvings
    with them), and the marking queue is the operator's."""
    marks = i.ce_words()
    bbr = _bbr(i)
    meanwhile = (
        f"; a congestion control that does not halve at each mark keeps more of the rate meanwhile (it takes a "
        f"larger share of that queue from other flows): {bbr}"
        if bbr
        else ""
    )
    return (
        f"the network: a queue on the path marks CE ({marks}): the path is congested there, or its AQM marks "
        "below the link's capacity (a marking threshold set low, a shaper's queue that marks); ask the path's "
        "operator which queue marks and give it more capacity or a higher threshold.  ECN itself is working: "
        f"turned off, that queue would discard the packets it now marks, and the rate would be no higher{meanwhile}"
    )


def next_step(limit: Limit, i: Inputs, r: Result) -> str:
    """The concrete next step for a verdict, with its numbers (docs/metrics.md says the
    same per verdict): the host and the setting to change there, never what is in use."""
    host = named_host(limit.side, i)
    if limit.reason in ("receive_window", "send_buffer"):
        step = _buffer_step(limit, i, r)
        return step + ("; or more parallel streams, each with its own window" if r.protocol != "iperf3" else "")
    if limit.reason == "congestion" and limit.detail == "ecn":
        return _ecn_step(i)
    if limit.reason == "congestion":
        probe = f"; the probe saw {i.probe_loss}" if i.probe_loss else ""
        bbr = _bbr(i)
        meanwhile = (
            f"; a congestion control that does not take random loss for congestion keeps more of the rate "
            f"meanwhile: {bbr}"
            if bbr
            else ""
        )
        return f"the network: talk to the path's operator ({i.loss_words()}{probe}){meanwhile}"
    if limit.reason == "link_capacity" and limit.detail == "packet_rate":
        return (
            "the MSS is clamped below what the path's MTU allows: find the clamp on the path (a router's TCPMSS "
            "--set-mss rule, a route's advmss, a tunnel's MTU) and lift it; each packet carries too little"
        )
    if limit.reason == "link_capacity" and limit.detail == "ack_clock":
        receiver = named_host(i.receiver_side, i)
        return (
            "the return path (the ACKs' way, toward the sender) is full: its capacity, not the data path's, holds "
            "the rate; ask the path's operator for more capacity that way (an asymmetric link, a shaper on the "
            f"return direction), or send fewer ACKs: on {receiver}, net.ipv4.tcp_comp_sack_nr and "
            "tcp_comp_sack_delay_ns (Linux 4.19+) compress SACKs, GRO on its interface (`ethtool -K IF gro on`) "
            "acknowledges more data per ACK"
        )
    if limit.reason == "link_capacity":
        if i.loss >= LOSS_SHARE:
            bbr = _bbr(i)
            pace = f"pacing ({bbr})" if bbr else "the sender already paces (bbr): shaping just below the rate"
            return (
                f"the path is full and its bottleneck drops what exceeds the rate: {pace} avoids the "
                "retransmissions; more speed needs a faster path"
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
    if limit.reason == "application" and limit.detail == "ssh_window":
        return _ssh_window_step(i)
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
