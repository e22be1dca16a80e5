"""Each plain-site run's truth (issue 42, item 5): what really happened on the path and at
both ends, from counters the product does not read, taken just before and just after the
transfer (tests/support/plain_site.py run_cause_with_truth):

- the SNMP/netstat MIBs of both namespaces (`ip netns exec NS nstat -asz`: retransmits,
  duplicate SACKs, timeouts, zero-window advertisements, out-of-order queueing);
- every qdisc's drops and overlimits (`tc -s -j qdisc`) and every interface's drops and
  bytes (`ip -s -j link`) in the lab's namespaces;
- the nftables counters the causes put on their rules (a policer's, a router's);
- the delay line's own counters (SIGUSR1: lost, overflow, reordered, paced, forwarded);
- the TCP settings of both ends, read back (tcp_moderate_rcvbuf, tcp_rmem, tcp_wmem, the
  congestion control, a route's window).

A Truth is a flat dict of numbers (and a few words), kept beside the verdict in the
matrix's output and checked against the evidence by tests/support/against_truth.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bigbinf.lab import LabLayout
from bigbinf.lab.network import DELAY_LINE, delay_line_pid
from bigbinf.process import netns_exists

Truth = dict[str, Any]

# The MIB counters a truth keeps (their deltas over the transfer), by short name.
MIB = {
    "retransmits": "TcpRetransSegs",
    "segments_out": "TcpOutSegs",
    "dsack_received": "TcpExtTCPDSACKRecv",  # the peer said a retransmit was a duplicate: spurious
    "dsack_sent": "TcpExtTCPDSACKOldSent",  # ... and this end said so to its peer
    "dsack_ofo_sent": "TcpExtTCPDSACKOfoSent",
    "dsack_undo": "TcpExtTCPDSACKUndo",
    "reorder_seen": "TcpExtTCPSACKReorder",
    "ofo_queued": "TcpExtTCPOFOQueue",  # segments that came out of order at this receiver
    "timeouts": "TcpExtTCPTimeouts",
    "loss_probes": "TcpExtTCPLossProbes",
    "lost_retransmits": "TcpExtTCPLostRetransmit",
    "to_zero_window": "TcpExtTCPToZeroWindowAdv",
    "want_zero_window": "TcpExtTCPWantZeroWindowAdv",
    "from_zero_window": "TcpExtTCPFromZeroWindowAdv",
    # ECN: segments this end's peer acknowledged with the ECN echo (a sender's), and the
    # packets that arrived here CE-marked (a receiver's: the path's marks, as they came).
    "delivered_ce": "TcpExtTCPDeliveredCE",
    "ce_received": "IpExtInCEPkts",
}
SYSCTLS = {
    "moderate_rcvbuf": "net.ipv4.tcp_moderate_rcvbuf",
    "rmem": "net.ipv4.tcp_rmem",
    "wmem": "net.ipv4.tcp_wmem",
    "congestion": "net.ipv4.tcp_congestion_control",
    "mtu_probing": "net.ipv4.tcp_mtu_probing",
    "window_scaling": "net.ipv4.tcp_window_scaling",  # 0: no window above 65535 B, whatever the buffers
    "ecn": "net.ipv4.tcp_ecn",  # 1: requests ECN on its connections, 2: accepts it when asked
}
HEADER_BYTES = 66  # Ethernet, IPv4 and TCP with timestamps: a frame's bytes that carry no payload
FRAMING = 1.05  # a protocol's bytes on the wire per byte of the file, at most (ssh's MACs, HTTP's headers)
DELAY_LINE_COUNTERS = ("forwarded", "lost", "overflow", "reordered", "paced")


def _out(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30).stdout


def _in(ns: str, argv: list[str]) -> str:
    return _out(["ip", "netns", "exec", ns, *argv])


def mib(ns: str) -> dict[str, int]:
    """Absolute MIB counters of namespace `ns` (nstat -a, without touching its history)."""
    found = {}
    for line in _in(ns, ["nstat", "-asz"]).splitlines():
        parts = line.split()
        if len(parts) >= 2 and not line.startswith("#") and parts[1].isdigit():
            found[parts[0]] = int(parts[1])
    return found


def qdiscs(ns: str) -> dict[str, int]:
    """Drops and overlimits summed over every qdisc in `ns`."""
    try:
        rows = json.loads(_in(ns, ["tc", "-s", "-j", "qdisc", "show"]) or "[]")
    except ValueError:
        rows = []
    return {
        "qdisc_drops": sum(int(r.get("drops", 0)) for r in rows),
        "qdisc_overlimits": sum(int(r.get("overlimits", 0)) for r in rows),
    }


def qdiscs_by_device(ns: str) -> dict[str, dict[str, int]]:
    """Per interface of `ns`: its qdiscs' drops, overlimits and bytes sent, summed (a
    router's shaper per way: which way queued)."""
    try:
        rows = json.loads(_in(ns, ["tc", "-s", "-j", "qdisc", "show"]) or "[]")
    except ValueError:
        rows = []
    found: dict[str, dict[str, int]] = {}
    for r in rows:
        dev = found.setdefault(str(r.get("dev", "")), {"drops": 0, "overlimits": 0, "bytes": 0})
        for key in dev:
            dev[key] += int(r.get(key, 0))
    return found


def links(ns: str) -> dict[str, dict[str, int]]:
    """Per interface of `ns`: bytes and drops each way (the kernel's counters)."""
    try:
        rows = json.loads(_out(["ip", "-n", ns, "-s", "-j", "link", "show"]) or "[]")
    except ValueError:
        rows = []
    found = {}
    for r in rows:
        stats = r.get("stats64", {})
        rx, tx = stats.get("rx", {}), stats.get("tx", {})
        found[r["ifname"]] = {
            "rx_bytes": int(rx.get("bytes", 0)),
            "tx_bytes": int(tx.get("bytes", 0)),
            "packets": int(rx.get("packets", 0)) + int(tx.get("packets", 0)),
            "mtu": int(r.get("mtu", 0)),
            "dropped": int(rx.get("dropped", 0)) + int(tx.get("dropped", 0)),
        }
    return found


def nft_counters(ns: str) -> dict[str, int]:
    """Packets counted by nftables rules in `ns`: those of rules that drop, those of rules
    that mark CE (set the IP header's ECN field), and the rest."""
    try:
        rows = json.loads(_in(ns, ["nft", "-j", "list", "ruleset"]) or "{}").get("nftables", [])
    except ValueError:
        rows = []
    dropped = counted = marked = 0
    for row in rows:
        exprs = row.get("rule", {}).get("expr", []) if isinstance(row, dict) else []
        packets = sum(int(e["counter"].get("packets", 0)) for e in exprs if isinstance(e, dict) and "counter" in e)
        if any(isinstance(e, dict) and "drop" in e for e in exprs):
            dropped += packets
        elif any(isinstance(e, dict) and _sets_ce(e) for e in exprs):
            marked += packets
        else:
            counted += packets
    return {"nft_dropped": dropped, "nft_counted": counted, "nft_marked_ce": marked}


def _sets_ce(expr: dict[str, Any]) -> bool:
    """Whether an nftables expression (JSON) sets the IP header's ECN field to CE."""
    mangle = expr.get("mangle")
    if not isinstance(mangle, dict) or mangle.get("value") != "ce":
        return False
    return mangle.get("key", {}).get("payload", {}).get("field") == "ecn"


def delay_line(layout: LabLayout, timeout: float = 15.0) -> dict[str, int]:
    """The delay line's own counters (it prints them to its log on SIGUSR1); {} without one."""
    pid = delay_line_pid(layout)
    if pid is None:
        return {}
    log = layout.logfile(DELAY_LINE)
    before = log.read_text().count("delayline: ") if log.exists() else 0
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [ln for ln in log.read_text().splitlines() if ln.startswith("delayline: ")]
        if len(lines) > before:
            pairs = (item.split() for item in lines[-1].removeprefix("delayline: ").split(", "))
            return {f"delay_line_{k}": int(v) for k, v in pairs}
        time.sleep(0.05)
    raise AssertionError(f"the delay line (pid {pid}) did not print its counters in {timeout:.0f} s; see {log}")


def settings(ns: str) -> dict[str, Any]:
    """The TCP settings of namespace `ns`, read back: numbers where they are numbers."""
    found: dict[str, Any] = {}
    for short, key in SYSCTLS.items():
        value = _in(ns, ["sysctl", "-n", key]).split()
        if short in ("rmem", "wmem") and len(value) == 3:
            found[f"{short}_max"] = int(value[2])
            found[f"{short}_default"] = int(value[1])
        elif value:
            found[short] = int(value[0]) if value[0].isdigit() else value[0]
    return found


def route_window(ns: str, peer: str) -> int:
    """The `window` metric on `ns`'s route to `peer` (0: none)."""
    words = _in(ns, ["ip", "route", "get", peer]).split()
    return int(words[words.index("window") + 1]) if "window" in words else 0


_SKMEM = re.compile(r"skmem:\(r\d+,rb(\d+),t\d+,tb(\d+)")


def listener_buffers(ns: str) -> tuple[list[int], list[int]]:
    """The receive and send buffers (skmem rb, tb) of `ns`'s listening TCP sockets, as the
    kernel keeps them: a program that set SO_RCVBUF/SO_SNDBUF on its listener (nginx's
    `listen ... rcvbuf= sndbuf=`) hands them to every connection it accepts."""
    out = _in(ns, ["ss", "-Hltm"])
    found = [(int(m.group(1)), int(m.group(2))) for m in _SKMEM.finditer(out)]
    return sorted({rb for rb, _ in found}), sorted({tb for _, tb in found})


def snapshot(layout: LabLayout) -> dict[str, Any]:
    """Every counter above, as they stand now (absolute)."""
    snap: dict[str, Any] = {"at": time.monotonic()}
    for side, ns in (("local", layout.client_ns), ("remote", layout.remote_ns), ("path", layout.wan_ns)):
        if not netns_exists(ns):
            continue
        snap[f"{side}_mib"] = mib(ns) if side != "path" else {}
        snap[f"{side}_qdisc"] = qdiscs(ns)
        snap[f"{side}_links"] = links(ns)
        snap[f"{side}_nft"] = nft_counters(ns)
    if netns_exists(layout.wan_ns):
        snap["path_ways"] = qdiscs_by_device(layout.wan_ns)
    snap["delay_line"] = delay_line(layout)
    return snap


def _delta(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items()}


def truth(
    layout: LabLayout,
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    direction: str,
    transfer_bytes: int,
    peer_addresses: tuple[str, str],
    path: Mapping[str, float | None],
) -> Truth:
    """What happened between `before` and `after` (two snapshots), for a transfer of
    `transfer_bytes` in `direction`; `path`: what the lab's link is (rate in bytes/s, RTT
    in seconds, None where not shaped)."""
    t: Truth = {
        "direction": direction,
        "receiver": "local" if direction == "download" else "remote",
        "sender": "remote" if direction == "download" else "local",
        "seconds": round(after["at"] - before["at"], 3),
        "transfer_bytes": transfer_bytes,
    }
    # The file over the transfer's whole time (set-up included): at most what held it.
    t["rate"] = round(transfer_bytes / t["seconds"]) if t["seconds"] > 0 else None
    dropped = 0
    for side in ("local", "remote", "path"):
        if f"{side}_qdisc" not in after:
            continue
        counters = _delta(after[f"{side}_mib"], before.get(f"{side}_mib", {}))
        for short, name in MIB.items():
            if side != "path":
                t[f"{side}_{short}"] = counters.get(name, 0)
        q = _delta(after[f"{side}_qdisc"], before.get(f"{side}_qdisc", {}))
        n = _delta(after[f"{side}_nft"], before.get(f"{side}_nft", {}))
        link_drops = sum(
            v["dropped"] - before.get(f"{side}_links", {}).get(name, {}).get("dropped", 0)
            for name, v in after[f"{side}_links"].items()
        )
        t[f"{side}_qdisc_drops"], t[f"{side}_qdisc_overlimits"] = q["qdisc_drops"], q["qdisc_overlimits"]
        t[f"{side}_nft_dropped"], t[f"{side}_nft_counted"] = n["nft_dropped"], n["nft_counted"]
        t[f"{side}_nft_marked_ce"] = n.get("nft_marked_ce", 0)
        t[f"{side}_link_drops"] = link_drops
        dropped += q["qdisc_drops"] + n["nft_dropped"] + link_drops
    # The router's shapers per way: the data's way out (toward the receiver) and the return
    # way (the ACKs', toward the sender): which way queued (overlimits) and what it sent.
    toward = {"local": layout.wan_client_if, "remote": layout.wan_remote_if}
    for way, end in (("data_way", t["receiver"]), ("return_way", t["sender"])):
        dev = toward[end]
        got = _delta(after.get("path_ways", {}).get(dev, {}), before.get("path_ways", {}).get(dev, {}))
        for key in ("drops", "overlimits", "bytes"):
            t[f"{way}_qdisc_{key}"] = got.get(key, 0)
    line = _delta(after.get("delay_line", {}), before.get("delay_line", {}))
    t.update(line)
    dropped += line.get("delay_line_lost", 0) + line.get("delay_line_overflow", 0)
    t["dropped"] = dropped  # packets any part of the lab dropped, either way
    # The smallest MTU on the way (the router's links, where there is a router; the hosts' veths).
    t["path_mtu"] = min(
        v["mtu"] for side in ("local", "remote", "path") for n, v in after.get(f"{side}_links", {}).items() if n != "lo"
    )
    # What crossed the remote's interface besides the transfer's own bytes (less every
    # packet's headers, and a protocol's framing: ssh's MACs, HTTP's): another flow (the
    # monitor's own ssh listings add a few hundred kB to a MB).
    rem = layout.remote_if
    crossed, packets = (
        sum(after["remote_links"][rem][k] - before["remote_links"][rem][k] for k in keys)
        for keys in (("rx_bytes", "tx_bytes"), ("packets",))
    )
    t["crossed_bytes"], t["crossed_packets"] = crossed, packets
    t["other_bytes"] = max(0, round(crossed - HEADER_BYTES * packets - FRAMING * transfer_bytes))
    sender = t["sender"]
    t["real_retransmits"] = max(0, t[f"{sender}_retransmits"] - t[f"{sender}_dsack_received"])
    for side, ns in (("local", layout.client_ns), ("remote", layout.remote_ns)):
        for k, v in settings(ns).items():
            t[f"{side}_{k}"] = v
    for side, ns in (("local", layout.client_ns), ("remote", layout.remote_ns)):
        # Listeners whose buffers are not the sysctl's default: a program set them.
        rbs, tbs = listener_buffers(ns)
        t[f"{side}_listen_rcvbufs"] = [b for b in rbs if b != t.get(f"{side}_rmem_default")]
        t[f"{side}_listen_sndbufs"] = [b for b in tbs if b != t.get(f"{side}_wmem_default")]
    t["local_route_window"] = route_window(layout.client_ns, peer_addresses[1])
    t["remote_route_window"] = route_window(layout.remote_ns, peer_addresses[0])
    rate, rtt = path.get("rate"), path.get("rtt")
    t["path_rate"], t["path_rtt"] = rate, rtt
    t["bdp_bytes"] = round(rate * rtt) if rate and rtt else None
    return t


def summary(t: Truth) -> str:
    """The truth in one line: what the matrix prints beside a verdict."""
    s, r = t["sender"], t["receiver"]
    parts = [
        f"{(t['rate'] or 0) / 1e6:.2f} MB/s overall",
        f"dropped {t['dropped']}",
        f"{s} retransmits {t[f'{s}_retransmits']} (dsack {t[f'{s}_dsack_received']})",
        f"timeouts {t[f'{s}_timeouts']}",
        f"{r} zero-window {t[f'{r}_to_zero_window']}",
        f"other bytes {t['other_bytes']}",
        f"path MTU {t['path_mtu']}",
        f"overlimits {sum(t.get(f'{x}_qdisc_overlimits', 0) for x in ('local', 'remote', 'path'))}",
    ]
    if t.get("return_way_qdisc_overlimits") or t.get("data_way_qdisc_overlimits"):
        parts.append(
            f"router's shaper: return way (ACKs) overlimits {t.get('return_way_qdisc_overlimits')} sent "
            f"{t.get('return_way_qdisc_bytes')} B, data way overlimits {t.get('data_way_qdisc_overlimits')}"
        )
    if t.get("path_nft_marked_ce") or t.get(f"{s}_delivered_ce") or t.get(f"{r}_ce_received"):
        parts.append(
            f"CE marked by the router {t.get('path_nft_marked_ce', 0)} packets, {r} received CE "
            f"{t.get(f'{r}_ce_received', 0)}, {s} delivered CE {t.get(f'{s}_delivered_ce', 0)} of segments out "
            f"{t.get(f'{s}_segments_out', 0)}; tcp_ecn {s} {t.get(f'{s}_ecn')} {r} {t.get(f'{r}_ecn')}"
        )
    for k in ("delay_line_lost", "delay_line_reordered", "delay_line_paced", "path_nft_dropped", "path_nft_counted"):
        if t.get(k):
            parts.append(f"{k.replace('_', ' ')} {t[k]}")
    parts.append(
        f"{r} moderate_rcvbuf {t.get(f'{r}_moderate_rcvbuf')} rmem max {t.get(f'{r}_rmem_max')}, "
        f"{s} wmem max {t.get(f'{s}_wmem_max')} {t.get(f'{s}_congestion')}"
    )
    for side in ("local", "remote"):
        if t.get(f"{side}_route_window"):
            parts.append(f"{side} route window {t[f'{side}_route_window']}")
    return "; ".join(parts)


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
