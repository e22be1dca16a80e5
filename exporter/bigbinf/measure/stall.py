"""Why a transfer stopped making progress, from what its TCP listings saw (measure/tcp/state.py)
and the round's path baseline: the words a timeout's error carries instead of a bare
"killed after the timeout".

A path-MTU black hole: the round's probe measured the path's MTU below the packets the
hosts send (this host's route MTU, or the sender's MSS plus headers), and the transfer
stalled with retransmission timeouts: full-sized segments die on the way and the ICMP
"fragmentation needed" that would shrink them never arrives.  Otherwise what was seen:
no data after the handshake, the receiver's window held at zero, repeated timeouts."""

from __future__ import annotations

from collections.abc import Mapping

from bigbinf.result import PathBaseline

IP_TCP_HEADERS = 40  # the IP and TCP headers an MSS leaves out of a packet (options aside)
HANDSHAKE_BYTES = 16 * 1024  # below this, only set-up moved (an ssh banner and key exchange)
BACKOFF_SEEN = 2  # consecutive retransmission timeouts: the sender was backing off


def stall_words(
    sender: Mapping[str, float],
    receiver: Mapping[str, float],
    baseline: PathBaseline | None,
    route_mtu: int | None,
    sender_side: str,
) -> str:
    """What the listings saw of a transfer that was killed ("" where they saw nothing)."""
    said: list[str] = []
    moved = max(sender.get("bytes_acked", 0.0), receiver.get("bytes_received", 0.0))
    backoff = sender.get("backoff_max", 0.0)
    retransmits = sender.get("retransmits", 0.0)
    if not sender and not receiver:
        said.append("no data after the handshake (no socket of the transfer moved data)")
    elif moved < HANDSHAKE_BYTES:
        said.append(f"no data after the handshake ({moved:.0f} B moved)")
    else:
        end = sender.get("data_end_seconds", receiver.get("data_end_seconds"))
        when = f", the last at {end:.1f} s" if end is not None else ""
        said.append(f"{moved:.0f} B moved{when}, then none")
    zero = sender.get("zero_window_samples", 0.0)
    if zero:
        said.append(f"the receiver's window held at zero in {zero:.0f} of the sender's samples (its reader stopped)")
    if backoff >= BACKOFF_SEEN:
        said.append(f"the sender ({sender_side}) in {backoff:.0f} consecutive retransmission timeouts (backoff)")
    elif retransmits:
        said.append(f"{retransmits:.0f} retransmissions")
    # Stopped with timeouts, or never past the set-up: a black hole's marks (a slow path
    # that kept moving data is not one, whatever the MTU).
    stuck = backoff >= BACKOFF_SEEN or retransmits > 0 or moved < HANDSHAKE_BYTES
    blackhole = _black_hole(sender, baseline, route_mtu) if stuck else ""
    if blackhole:
        return f"{blackhole}; seen: {'; '.join(said)}"
    return "stalled: " + "; ".join(said)


def _black_hole(sender: Mapping[str, float], baseline: PathBaseline | None, route_mtu: int | None) -> str:
    """Words naming a path-MTU black hole and its fix, where the path's measured MTU is
    below the packets the hosts send ("" where it is not, or not known)."""
    path_mtu = baseline.mtu_bytes if baseline else None
    mss = sender.get("mss_bytes")
    sent = [v for v in (route_mtu, mss + IP_TCP_HEADERS if mss else None) if v]
    if not path_mtu or not sent or max(sent) <= path_mtu:
        return ""
    return (
        f"a path MTU black hole: the round's probe measured the path's MTU at {path_mtu} B, but the hosts send "
        f"{max(sent):.0f}-byte packets and no ICMP fragmentation-needed reached them, so every full-sized segment "
        "was lost and the transfer stopped making progress; fix: clamp the MSS to the path's MTU on the router "
        "(iptables -t mangle -A FORWARD -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu) or let TCP "
        "probe it on both hosts (sysctl net.ipv4.tcp_mtu_probing=1), or let the ICMP through"
    )
