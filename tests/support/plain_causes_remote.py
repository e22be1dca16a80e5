"""Plain-site causes on the remote side (tests/support/plain_site.py)."""

from __future__ import annotations

from .plain_site import PlainCause

CAUSES: list[PlainCause] = []
