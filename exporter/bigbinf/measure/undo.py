"""The undo journal: what bigbinf changed on a host and how to put it back, written down
before the change, so that no way of ending (SIGKILL, the OOM killer, a crash, this
host's reboot) leaves a host changed without the next start knowing it.

One entry per change: a route's congestion control and a TCP buffer cap, on this host or
a remote (measure/tcp/tuning.py), and an upload on the remote (measure/transfer.py).  An
entry is written and fsynced before its change is made, and removed once the change has
been undone.  The file holds only what is pending: it is rewritten whole (a temporary
file, fsynced, renamed over it, the directory fsynced), so it never holds a torn or a
half-removed entry, and it is absent when nothing is pending.

Replay (`UndoJournal.replay`) runs each pending entry's undo: at the exporter's start and
whenever a round, a slot or a sweep takes the round lock (service/rounds.py), on `lab
down` and on `sweep`.  Each undo is logged; one that cannot be done stays pending and is
logged as an error saying where, the command and what it said, and the pending entries
are published as bigbinf_tuning_undo_pending until a later replay succeeds.  An undo
whose target is gone already (a route deleted since, a namespace `lab down` removed, a
file no longer there) is done.

The file is trusted as the configuration is: replayed only when this user (or root) owns
it and no one else may write it.  Entries are read by type; one that does not read is
reported and kept, never run; a route's and a sysctl's commands are checked word by
word against the shapes tuning.py writes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import shlex
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bigbinf.journal.store import replace_durably, sync_directory
from bigbinf.process import run_with_timeout

log = logging.getLogger(__name__)

KINDS = ("route", "sysctl", "upload")
TUNING_TIMEOUT_SECONDS = 15.0
UPLOAD_TIMEOUT_SECONDS = 120.0
# What an undo's error says when there was nothing left to undo, per kind: no such route
# (deleted since); an upload no longer there (HTTP 404, xrootd's kXR_NotFound).  ssh's
# `rm -rf` of a missing file succeeds anyway.
_GONE = {
    "route": re.compile(r"RTNETLINK answers: No such process"),
    "upload": re.compile(r"returned error: 404|\[3011\]"),
}
_WORD = re.compile(r"[\w.:/@%-]+")
_SYSCTL = re.compile(r"net\.ipv4\.tcp_[rw]mem=\d+ \d+ \d+")


class UndoError(Exception):
    """An undo journal that cannot be read or written: the message names it and the fix."""


def journal_path(results: Path) -> Path:
    """The undo journal beside the results' journal (journal.jsonl -> journal.undo.jsonl)."""
    return results.with_name(f"{results.stem}.undo{results.suffix or '.jsonl'}")


@dataclass(frozen=True)
class Undo:
    """One pending undo: run `words` through `prefix` (quoted for a remote shell when
    `quote`), or remove `path` (an upload to the lab, whose disk is ours)."""

    kind: str  # route, sysctl, upload
    where: str  # "this host (namespace X)", "remote lab": for messages
    what: str  # what was changed, for messages
    prefix: tuple[str, ...] = ()
    quote: bool = False
    words: tuple[str, ...] = ()
    path: str = ""
    env: str = ""  # the name of an environment variable the command needs (a remote's password_env)
    made: float = 0.0
    id: str = ""

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise ValueError(problem)

    def _problem(self) -> str:
        if self.kind not in KINDS:
            return f"kind {self.kind!r} is not one of {', '.join(KINDS)}"
        if bool(self.words) == bool(self.path):
            return "an entry undoes by a command or by removing a path, one of them"
        for name in ("where", "what", "path", "env", "id"):
            if not isinstance(getattr(self, name), str):
                return f"{name} is not a string"
        if not all(isinstance(w, str) for w in (*self.prefix, *self.words)):
            return "a command word is not a string"
        if self.kind == "sysctl" and (
            len(self.words) != 4 or self.words[:3] != ("sysctl", "-q", "-w") or not _SYSCTL.fullmatch(self.words[3])
        ):
            return f"not a TCP buffer sysctl: {shlex.join(self.words)}"
        if self.kind == "route" and (
            self.words[:3] not in (("ip", "route", "del"), ("ip", "route", "replace"))
            or not all(_WORD.fullmatch(w) for w in self.words)
        ):
            return f"not a route command: {shlex.join(self.words)}"
        if self.path and not os.path.isabs(self.path):
            return f"path {self.path!r} is not absolute"
        return ""

    @property
    def argv(self) -> list[str]:
        words = [shlex.quote(w) for w in self.words] if self.quote else list(self.words)
        return [*self.prefix, *words]

    def describe(self) -> str:
        done_by = f"remove {self.path}" if self.path else shlex.join(self.words)
        return f"{self.where}: {self.what} (undo: {done_by})"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Undo:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(record) - fields
        if unknown:
            raise ValueError(f"unknown fields {', '.join(sorted(unknown))}")
        for name in ("prefix", "words"):
            if name in record:
                if not isinstance(record[name], list):
                    raise ValueError(f"{name} is not a list")
                record = {**record, name: tuple(record[name])}
        if not isinstance(record.get("quote", False), bool) or not isinstance(record.get("made", 0.0), int | float):
            raise ValueError("quote or made has the wrong type")
        return cls(**record)


@dataclass(frozen=True)
class Replay:
    """What one replay did: each undone entry and each that stays pending, described."""

    undone: list[str]
    failed: list[str]


_locks: dict[Path, threading.Lock] = {}
_locks_lock = threading.Lock()


class UndoJournal:
    """The pending undos of one exporter (one per results' journal, see journal_path)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with _locks_lock:
            self._lock = _locks.setdefault(path.resolve() if path.is_absolute() else path.absolute(), threading.Lock())

    @classmethod
    def beside(cls, results: Path) -> UndoJournal:
        return cls(journal_path(results))

    # ------------------------------------------------------------ reading and writing

    def _read(self) -> tuple[list[Undo], list[str], list[str]]:
        """(the entries, one problem per line that does not read, those lines)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return [], [], []
        except (OSError, UnicodeDecodeError) as exc:
            raise UndoError(f"undo journal {self.path}: cannot read ({exc}); check its permissions") from None
        entries, problems, bad = [], [], []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError(f"expected a JSON object, got {type(record).__name__}")
                entries.append(Undo.from_json(record))
            except (ValueError, TypeError) as exc:
                problems.append(f"{self.path}:{number}: {exc}")
                bad.append(line)
        return entries, problems, bad

    def _write(self, entries: Sequence[Undo], kept: Sequence[str] = ()) -> None:
        """Replace the file with `entries` (and `kept`: lines that did not read, left for a
        person to look at) atomically and durably; remove it when both are empty."""
        lines = [json.dumps(e.to_json(), sort_keys=True, separators=(",", ":")) for e in entries] + list(kept)
        if lines:
            replace_durably(self.path, "\n".join(lines) + "\n")
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
            sync_directory(self.path.parent)

    def _rewrite(self, change: Callable[[list[Undo]], list[Undo]]) -> None:
        with self._lock:
            entries, _, kept = self._read()
            try:
                self._write(change(entries), kept)
            except OSError as exc:
                raise UndoError(
                    f"undo journal {self.path}: cannot write ({exc.strerror}); free space on its disk or fix "
                    "its directory's permissions (journal.path's directory)"
                ) from None

    # ------------------------------------------------------------ the journal's use

    def add(self, undo: Undo) -> Undo:
        """Write `undo` down durably (before its change is made); returns it with its id."""
        entry = dataclasses.replace(undo, id=undo.id or uuid.uuid4().hex, made=undo.made or time.time())
        self._rewrite(lambda entries: [*entries, entry])
        return entry

    def done(self, entry: Undo) -> None:
        """`entry` has been undone (or its change was never made): remove it."""
        self._rewrite(lambda entries: [e for e in entries if e.id != entry.id])

    def pending(self) -> list[Undo]:
        with self._lock:
            return self._read()[0]

    def counts(self) -> dict[str, int]:
        """Pending entries per kind (every kind present, 0 where none): the metric.  An
        unreadable journal counts as one pending entry of each kind: something is."""
        try:
            entries, problems, _ = self._read()
        except UndoError:
            return dict.fromkeys(KINDS, 1)
        counts = dict.fromkeys(KINDS, 0)
        for e in entries:
            counts[e.kind] += 1
        if problems:
            counts = {kind: max(n, 1) for kind, n in counts.items()}
        return counts

    def replay(self, only: Callable[[Undo], bool] | None = None) -> Replay:
        """Undo every pending entry (those `only` accepts), in reverse order of making:
        logged each, removed once undone; one that fails stays pending (logged as an
        error).  Nothing runs when the file is not to be trusted (UndoError)."""
        if not self.path.exists():
            return Replay([], [])
        with self._lock:
            self._check_trusted()
            entries, problems, _ = self._read()
        for problem in problems:
            log.error("undo journal: an entry that does not read is kept, not run: %s", problem)
        undone, failed = [], []
        for entry in sorted(entries, key=lambda e: e.made, reverse=True):
            if only is not None and not only(entry):
                continue
            error = run(entry)
            if error:
                log.error("undo failed, still pending (retried at the next round): %s: %s", entry.describe(), error)
                failed.append(f"{entry.describe()}: {error}")
                continue
            log.warning("undone what an earlier run left changed: %s", entry.describe())
            self.done(entry)
            undone.append(entry.describe())
        return Replay(undone, failed + problems)

    def _check_trusted(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return
        me = os.geteuid()
        if st.st_uid not in (me, 0) or st.st_mode & 0o022 or not stat.S_ISREG(st.st_mode):
            raise UndoError(
                f"undo journal {self.path}: owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):04o}: "
                f"not replayed (its commands would run as this user); make it this user's, writable by no one "
                f"else (chown {me} {self.path}; chmod 600 {self.path}), or remove it after undoing its entries "
                "by hand"
            )


def run(entry: Undo) -> str:
    """Run one entry's undo; "" when done (or nothing was left to undo), else the error."""
    if entry.path:
        return _remove(Path(entry.path))
    netns = _netns_of(entry.prefix)
    if netns is not None and not os.path.exists(os.path.join("/run/netns", netns)):
        return ""  # the namespace is gone, and with it what was set there
    env = {entry.env: os.environ[entry.env]} if entry.env and entry.env in os.environ else None
    timeout = UPLOAD_TIMEOUT_SECONDS if entry.kind == "upload" else TUNING_TIMEOUT_SECONDS
    try:
        # cwd "/": no directory of its own that a kill mid-replay would leave behind
        done = run_with_timeout(entry.argv, timeout, env=env, cwd="/")
    except OSError as exc:
        return f"cannot run {entry.argv[0]}: {exc.strerror or exc}"
    if done.returncode == 0:
        return ""
    said = " ".join(done.stderr_tail.split())[-300:]
    if done.timed_out:
        return f"`{shlex.join(entry.argv)}` did not finish in {timeout:g}s"
    gone = _GONE.get(entry.kind)
    if gone is not None and gone.search(said):
        return ""
    return f"`{shlex.join(entry.argv)}` exited {done.returncode}: {said}"


def _remove(path: Path) -> str:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"cannot remove {path}: {exc.strerror}"
    return ""


def _netns_of(prefix: Sequence[str]) -> str | None:
    """The namespace of an `ip netns exec NS ...` prefix (None for any other)."""
    words = list(prefix)
    if len(words) >= 4 and os.path.basename(words[0]) == "ip" and words[1:3] == ["netns", "exec"]:
        return words[3]
    return None
