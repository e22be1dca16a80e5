"""How the judgement says its numbers: sizes, rates and hosts in words."""

from __future__ import annotations


def host_name(side: str) -> str:
    return {"local": "this host", "remote": "the remote"}.get(side, side)


def human_bytes(value: float | None) -> str:
    if value is None:
        return "unknown"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.2f} {unit} ({value:.0f} B)"
    return f"{value:.0f} B"


def human_rate(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value / 1e6:.2f} MB/s ({value * 8 / 1e6:.0f} Mbit/s)"


def human_bits(value: float) -> str:
    """A rate in bytes/s as bits on the wire, kbit/s below 1 Mbit/s (an ACK way's)."""
    bits = value * 8
    return f"{bits / 1e3:.0f} kbit/s" if bits < 1e6 else f"{bits / 1e6:.1f} Mbit/s"
