"""Where a transfer's packets go: the remote's address (configs may name hosts) and the
route to it from the transfer's namespace (its source address and MTU).  Asked by the
round's path baseline and by every transfer (routes and capture filters need an IP)."""

from __future__ import annotations

import ipaddress
import re
import socket
import subprocess

from bigbinf.measure.wire.capture import CaptureError
from bigbinf.process import in_netns, owned


def resolve(address: str, netns: str | None = None) -> str:
    """An IP for the remote (configs may name hosts): routes and capture filters need one.

    A name is resolved where the transfer's tools resolve it: inside the remote's `netns`
    (`ip netns exec` gives a namespace its own /etc/netns/NAME/hosts and resolv.conf:
    resolved in the exporter's own namespace, 5 of 5 such names failed, issue 36), by
    `getent ahosts` there (the C library's getaddrinfo, the same first address)."""
    try:
        ipaddress.ip_address(address.split("%", 1)[0])
        return address  # an address already: nothing to look up
    except ValueError:
        pass
    if netns:
        argv = in_netns(netns, ["getent", "ahosts", address])
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CaptureError(f"cannot resolve {address} in network namespace {netns}: {exc}") from None
        words = proc.stdout.split()
        if proc.returncode != 0 or not words:
            why = proc.stderr.strip() or ("no such name" if proc.returncode == 2 else f"getent exit {proc.returncode}")
            raise CaptureError(
                f"cannot resolve {address} in network namespace {netns}: {why} "
                f"(its /etc/netns/{netns}/hosts and resolv.conf, else the host's)"
            )
        return words[0]
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


_ROUTE_WINDOW = re.compile(r"\bwindow (\d+)\b")
_ROUTE_SOURCE = re.compile(r"\bsrc (\S+)")


def route_window(prefix: list[str], address: str, timeout: float = 15.0) -> tuple[float | None, str]:
    """The `window` metric of the route `prefix` (a namespace's or a remote's stats command)
    takes to `address` (bytes; 0.0 where the route has none), and the source address that
    route uses ("" if not printed): `ip -o route get`.  (None, "") where it cannot be read:
    the judge then names no route window (judge/bounds.py: `clamped_window`)."""
    try:
        proc = subprocess.run(  # owned: through ssh it may start the master (process.owned)
            owned([*prefix, "ip", "-o", "route", "get", address]), capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired):
        return None, ""
    if proc.returncode != 0 or not proc.stdout.strip():
        return None, ""
    window = _ROUTE_WINDOW.search(proc.stdout)
    source = _ROUTE_SOURCE.search(proc.stdout)
    return (float(window.group(1)) if window else 0.0), (source.group(1) if source else "")
