"""Plain-site causes on the path side (tests/support/plain_site.py)."""

from __future__ import annotations

from .plain_site import PlainCause, iperf3_rate

CAUSES: list[PlainCause] = [
    # A plain shaped link, its capacity known from an iperf3 test: the link is full.
    PlainCause("a plain shaped link (iperf3 estimate)", "shaped", "http", "f32m", "download", "link_capacity", "path",
               estimate=iperf3_rate),
]  # fmt: skip
