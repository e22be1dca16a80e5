"""Where a transfer's packets go: the remote's address (configs may name hosts) and the
route to it from the transfer's namespace (its source address and MTU).  Asked by the
round's path baseline and by every transfer (routes and capture filters need an IP)."""

from __future__ import annotations

import re
import socket
import subprocess

from bigbinf.measure.wire.capture import CaptureError
from bigbinf.process import in_netns


def resolve(address: str) -> str:
    """An IP for the remote (configs may name hosts): routes and capture filters need one."""
    try:
        return str(socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)[0][4][0])
    except socket.gaierror as exc:
        raise CaptureError(f"cannot resolve {address}: {exc.strerror}") from None


def route_to(remote_address: str, netns: str | None) -> tuple[str, int | None]:
    """(local source address, MTU) of the route the kernel uses to reach the remote:
    `ip route get` (its `mtu` where the route or a learnt path MTU has one), else the
    MTU of the interface it leaves by; None if neither says."""
    argv = in_netns(netns, ["ip", "-o", "route", "get", remote_address])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    match = re.search(r"\bsrc (\S+)", proc.stdout)
    if proc.returncode != 0 or not match:
        raise CaptureError(
            f"no route to {remote_address}"
            + (f" in namespace {netns}" if netns else "")
            + f": {proc.stderr.strip() or proc.stdout.strip()}"
        )
    mtu = re.search(r"\bmtu (?:lock )?(\d+)", proc.stdout)
    if mtu:
        return match.group(1), int(mtu.group(1))
    dev = re.search(r"\bdev (\S+)", proc.stdout)
    if not dev:
        return match.group(1), None
    link = subprocess.run(
        in_netns(netns, ["ip", "-o", "link", "show", "dev", dev.group(1)]), capture_output=True, text=True, timeout=10
    )
    mtu = re.search(r"\bmtu (\d+)", link.stdout)
    return match.group(1), int(mtu.group(1)) if mtu else None
