"""An owner for a guardian under test: an exporter identity that no other test shares and
that no exporter's start reaps (bigbinf/guardian.py: `reap` ends the processes of owners
that no longer run, and the lab tier starts exporters beside the unit tests)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator

from bigbinf import guardian


@contextlib.contextmanager
def live_owner() -> Iterator[str]:
    """The identity of a process that runs for the block: a marker naming it is left alone
    by every start, and only this test's processes carry it."""
    holder = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        yield guardian.identity(holder.pid)
    finally:
        holder.kill()
        holder.wait()
