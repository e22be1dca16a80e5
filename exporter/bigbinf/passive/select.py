"""Which of this host's connections the passive watcher follows, and the `ss` filter that
has the kernel choose them (sock_diag filters in the kernel: a host's other sockets are
never copied to user space, so they cost next to nothing).

A connection is followed when its peer is in one of the remotes' networks (the kernel
filters by those) and one of its two ports is in a service's ranges: this host as the
client (the peer's port is the service's) or as the server (its own port is); or its
program also holds such a connection to the same remote (flows.py: GridFTP's data
channels).  The service class and the remote are
labels of what it publishes; its ports never are."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bigbinf.config import PassiveConfig

UNKNOWN = "other"  # the service of a connection whose ports no range holds


@dataclass(frozen=True)
class Selection:
    """The remotes' networks and the services' port ranges, from passive: in the config."""

    remotes: tuple[tuple[str, tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]], ...]
    services: tuple[tuple[str, tuple[tuple[int, int], ...]], ...]

    @classmethod
    def of(cls, config: PassiveConfig) -> Selection:
        return cls.from_maps({name: r.networks for name, r in config.remotes.items()}, config.services)

    @classmethod
    def from_maps(
        cls, remotes: Mapping[str, Sequence[str]], services: Mapping[str, Sequence[tuple[int, int]]]
    ) -> Selection:
        return cls(
            tuple((name, tuple(ipaddress.ip_network(n, strict=False) for n in nets)) for name, nets in remotes.items()),
            tuple((name, tuple(ranges)) for name, ranges in services.items()),
        )

    def ss_filter(self, ports: bool = False) -> list[str]:
        """The words of ss's filter expression (argv words, never a shell string): the
        peer in one of the networks, and with `ports` either port in one of the ranges.
        The watcher filters by network only: a GridFTP transfer's data channels carry no
        service port (in active mode the server connects from an ephemeral port to one of
        the client's), and belong to it by their program (flows.py)."""
        nets = [str(n) for _, networks in self.remotes for n in networks]
        words_ports: list[str] = []
        for _, ranges in self.services if ports else ():
            for low, high in ranges:
                for end in ("sport", "dport"):
                    if words_ports:
                        words_ports.append("or")
                    if low == high:
                        words_ports += [end, "=", f":{low}"]
                    else:
                        words_ports += ["(", end, ">=", f":{low}", "and", end, "<=", f":{high}", ")"]
        words = ["("]
        for i, net in enumerate(nets):
            words += (["or"] if i else []) + ["dst", net]
        words.append(")")
        if words_ports:
            words += ["and", "(", *words_ports, ")"]
        return words

    def remote_of(self, peer: str) -> str:
        """The remote whose networks hold the peer's address ("" if none: the filter let
        it through only if ss's and ours disagree)."""
        address = _address(peer)
        if address is None:
            return ""
        for name, networks in self.remotes:
            if any(address.version == n.version and address in n for n in networks):
                return name
        return ""

    def service_of(self, local: str, peer: str) -> tuple[str, bool]:
        """The service class of a connection and whether this host is its client (the
        peer's port is the service's); a peer's port is looked at first."""
        peer_port, local_port = _port(peer), _port(local)
        for port, client in ((peer_port, True), (local_port, False)):
            for name, ranges in self.services:
                if any(low <= port <= high for low, high in ranges):
                    return name, client
        return UNKNOWN, True


def _address(endpoint: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    host = endpoint.rpartition(":")[0].strip("[]").split("%")[0]
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _port(endpoint: str) -> int:
    port = endpoint.rpartition(":")[2]
    return int(port) if port.isdigit() else 0
