"""How a host's address is written where a tool reads it: the one place that brackets.

An IPv6 literal has colons, and so do the places it goes into: a URL's host:port
(RFC 3986 puts an IPv6 literal in brackets: ftp://[2001:db8::1]/f) and the
[user@]host:path operand of scp, rsync and sftp (OpenSSH and rsync take a bracketed
host there, and read a bare one as the host "2001" and the path "db8::1...").  So the
templates say which form each tool takes:

* ``{host}``, ``{client}``: the address as it is, for what takes an address alone:
  ssh's and iperf3's host argument, ``ip``, ``ss``, capture filters, netrc's machine;
* ``{url_host}``, ``{url_client}``: the address as a URL or a host:path operand takes
  it, an IPv6 literal in brackets.

A name or an IPv4 address is the same in both.
"""

from __future__ import annotations

import ipaddress


def is_ipv6(address: str) -> bool:
    """Whether `address` is an IPv6 literal (a zone, "fe80::1%eth0", allowed)."""
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).version == 6
    except ValueError:
        return False


def url_host(address: str) -> str:
    """`address` as the host of a URL or of a [user@]host:path operand: an IPv6 literal in
    brackets ("[2001:db8::1]"), anything else (a name, an IPv4 address, an already
    bracketed literal) as it is."""
    return f"[{address}]" if is_ipv6(address) else address


def url_hostport(address: str, port: int) -> str:
    """host:port with the host as url_host() writes it ("[2001:db8::1]:2811")."""
    return f"{url_host(address)}:{port}"
