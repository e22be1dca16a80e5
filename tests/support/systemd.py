"""packaging/bigbinf-exporter.service read as systemd reads its [Service] settings."""

from __future__ import annotations

import re

from .exporter import ROOT

UNIT = ROOT / "packaging" / "bigbinf-exporter.service"
SYSUSERS = ROOT / "packaging" / "bigbinf-exporter.sysusers"


def unit_settings() -> dict[str, list[str]]:
    """The [Service] settings of the unit (continuation lines joined)."""
    text = re.sub(r"\\\n\s*", " ", UNIT.read_text())
    settings: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif line and not line.startswith("#") and "=" in line and section == "[Service]":
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def unit_capabilities() -> list[str]:
    [ambient] = unit_settings()["AmbientCapabilities"]
    return ambient.split()
