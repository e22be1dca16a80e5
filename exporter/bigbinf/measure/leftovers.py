"""A transfer's files on this host, named so that a start can tell those of an exporter
that ended (killed mid-transfer) from those of one that runs.

Each transfer works in its own directory under transfer.workdir and captures into a file
of the same name under capture.directory: `bigbinf-<owner>-<random>` and
`bigbinf-<owner>-<random>.pcap`, where the owner is the exporter's identity
(bigbinf/guardian.py: pid namespace, pid, start time).  Both are removed when the
transfer ends; a killed exporter leaves them.  `reap` removes those whose owner no longer
runs: never a running exporter's (a mesh's exporters on one host may share a workdir),
and, where transfer.keep_files asks to keep the received copies, no directory.  Names of
the old form (`bigbinf-<random>`, before owners were named) are removed once older than
any transfer may last.  An upload's source half written when its exporter was killed
(`sources/NAME.partial`) is removed unless a writer holds its lock (measure/datasets.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from bigbinf import guardian
from bigbinf.config import Config, capture_directory
from bigbinf.process import owner

PREFIX = "bigbinf-"
_OWNED = re.compile(rf"{PREFIX}(\d+\.\d+\.\d+)-\w+(\.pcap)?")
_UNOWNED = re.compile(rf"{PREFIX}\w{{8}}(\.pcap)?")  # mkdtemp's 8 random characters
_OLD_NAME_GRACE_SECONDS = 3600.0  # beyond the longest timeout, before an unowned name is taken for left


def new_workdir(config: Config) -> Path:
    """A private directory for one transfer, named after this exporter."""
    config.transfer.workdir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{owner()}-", dir=config.transfer.workdir))


def _left(name: str, mtime: float, oldest: float) -> bool:
    """Whether a transfer's file or directory of this name was left by an ended run."""
    owned = _OWNED.fullmatch(name)
    if owned:
        return owned.group(1) != owner() and not guardian.alive(owned.group(1))
    return bool(_UNOWNED.fullmatch(name)) and mtime < oldest


def reap(config: Config) -> list[str]:
    """Remove what transfers of ended exporters left in transfer.workdir and
    capture.directory; returns a line per file or directory removed."""
    longest = max([config.transfer.timeout, *(p.timeout or 0.0 for p in config.protocols.values())])
    oldest = time.time() - longest - _OLD_NAME_GRACE_SECONDS
    removed = []
    places = [(capture_directory(config), False)]
    if not config.transfer.keep_files:
        places.insert(0, (config.transfer.workdir, True))
    for directory, dirs in places:
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue  # not there yet: nothing left
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir != dirs or not _left(entry.name, st.st_mtime, oldest):
                continue
            with contextlib.suppress(OSError):
                if is_dir:
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
                removed.append(entry.path)
    removed += _reap_partial_sources(config.transfer.workdir / "sources")
    return removed


def _reap_partial_sources(sources: Path) -> list[str]:
    removed = []
    for partial in sources.glob("*.partial"):
        with contextlib.suppress(OSError), open(partial, "rb") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # being written now
            if os.fstat(f.fileno()).st_ino == os.stat(partial).st_ino:
                partial.unlink()
                removed.append(f"{partial} (an upload's source, half written)")
    return removed
