"""Protocol registry: a plain mapping from module name to profile.

Adding a protocol = one module with a PROFILE, and one line here.
"""

from __future__ import annotations

from . import command, scp
from .base import PLACEHOLDERS, Profile, RunContext, RunOutcome

REGISTRY: dict[str, Profile] = {
    "command": command.PROFILE,
    "scp": scp.PROFILE,
}

__all__ = ["PLACEHOLDERS", "REGISTRY", "Profile", "RunContext", "RunOutcome"]
