"""What an exporter restores at start, kept beside its journal so a start reads a few
megabytes instead of a year of lines (issue 37).

A checkpoint is a fold of the journal: everything service/restore.py needs, none of it
configuration-dependent (the configuration filters it at restore): each series' last
result and last ok one, the last RECENT_KEEP transfers, each sweep's last run, every
series' ok runs as far back as any regression setting can look (HISTORY_SPAN), and the
move model's thinned runs (runs.RecentRuns, per direction).  For the path baselines'
journal: each remote's last baseline and the last RECENT_KEEP.

It says how much of the journal it holds: the segments it folded (by ID) and how far
into the live file (its inode and byte offset).  Loading it folds whatever came after
(the live file's tail, a segment rotated since), so a checkpoint is never wrong, only
more or less behind; a missing, damaged or older-VERSION one is rebuilt from the whole
journal (once, as slow as a start was before).  Written whole or not at all
(store.replace_durably: temporary file, fsync, rename): `journal.checkpoint.json`
beside `journal.jsonl`.  The exporter saves it every SAVE_EVERY journaled records and
whenever the journal rotates, so a start folds at most that many lines.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bigbinf.fserrors import describe_os_error
from bigbinf.journal import store
from bigbinf.journal.store import (
    BaselineJournal,
    Journal,
    Lines,
    Segment,
    _Records,
    replace_durably,
    segments,
    temporaries,
)
from bigbinf.result import PathBaseline, Result, SeriesKey
from bigbinf.runs import MAX_PER_CELL, RecentRuns, Run, counts_in_baseline, move_runs

log = logging.getLogger(__name__)

VERSION = 4  # 2: the move runs as a compressed blob (parsed only when needed); 3: runs by runs.counts_in_baseline;
# 4: the move runs the model leaves out too, with why, and each run's command digest, a blob per remote
RECENT_KEEP = 1000  # transfers (and baselines) kept for the pages: pages.recent_transfers up to this
SAVE_EVERY = 500  # journaled records between saves: what a start may have to fold
DAY = 86400.0
WEEK = 7 * DAY
# The most a regression test can look back: recent_runs <= 20 ok runs and baseline_weeks
# <= 13 weeks before them, and a day's margin (regression.History._trimmed, config.py).
MAX_RECENT_RUNS = 20
HISTORY_SPAN = 13 * WEEK + DAY
DIRECTIONS = ("download", "upload")


def checkpoint_path(journal: Path) -> Path:
    """journal.jsonl -> journal.checkpoint.json (journal.paths.jsonl -> journal.paths.checkpoint.json)."""
    return journal.with_name(f"{journal.stem}.checkpoint.json")


class Stale(Exception):
    """The checkpoint holds part of a file that is gone unsealed: it must be rebuilt."""


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


def _key(key: SeriesKey) -> str:
    return json.dumps([key.protocol, key.remote, key.dataset, key.direction])


def _unkey(text: str) -> SeriesKey:
    return SeriesKey(*json.loads(text))


class _Fold:
    """The coverage half of a checkpoint: which of the journal it has folded."""

    kind = ""

    def __init__(self, journal: _Records[Any]) -> None:
        self.journal = journal
        self.covered: set[str] = set()  # IDs of the segments folded whole
        self.live_inode: int | None = None
        self.live_offset = 0
        self.seq = 0  # records folded: each one's place in journal order
        self.unsaved = 0
        self.saved_inode: int | None = None  # the checkpoint file as we last loaded or saved it
        self.torn = 0  # lines of the segment being folded that are not JSON (torn)

    @property
    def path(self) -> Path:
        return checkpoint_path(self.journal.path)

    # ------------------------------------------------------------ folding

    def fold(self, record: dict[str, Any]) -> None:
        raise NotImplementedError

    def _fold_lines(self, f: Any, where: Path) -> int:
        """Fold the complete lines of `f` from where it stands; returns the offset after them."""
        offset: int = f.tell()
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # being written, or torn: folded once an append ends it
            offset += len(raw)
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as exc:
                self.torn += 1
                log.debug("%s: not folded (%s)", where, exc)  # read() reports it to whoever reads it
                self.unsaved += 1
                continue
            try:
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
                self.seq += 1
                self.fold(record)
            except (ValueError, TypeError) as exc:
                log.debug("%s: not folded (%s)", where, exc)  # read() reports it to whoever reads it
            self.unsaved += 1
        return offset

    def catch_up(self) -> int:
        """Fold what the journal holds that this does not; returns how many lines it read."""
        before = self.unsaved
        live = self.journal.path
        try:
            live_inode: int | None = os.stat(live).st_ino
        except OSError:  # gone, or unreadable (store.set_aside_unreadable said so): nothing to fold
            live_inode = None
        held = self.live_inode if self.live_offset else None
        todo = [s for s in segments(live) if s.source not in self.covered]
        if held is not None and held != live_inode and not any(not s.sealed and _inode(s.path) == held for s in todo):
            raise Stale("the live file it partly folded is gone (sealed without it)")
        for segment in todo:
            self.torn = 0
            with Lines(segment.path) as f:
                was_live = not segment.sealed and f.inode == held
                if was_live:
                    f.seek(self.live_offset)
                self._fold_lines(f, segment.path)
            if f.damage is not None or (self.torn and segment.sealed):
                # Folded as far as it reads: moved aside, and those results (and only
                # they) stay under its name, so it stays covered.  A torn line in a
                # sealed part is damage too (a plain segment's is sealed with it).
                store.quarantine(segment.path)
            self.covered.add(segment.source)
            if was_live:
                self.live_inode, self.live_offset = None, 0
        if live_inode is not None:
            with store.open_regular(live) as tail:
                if live_inode == self.live_inode:
                    tail.seek(self.live_offset)
                self.live_offset = self._fold_lines(tail, live)
                self.live_inode = os.fstat(tail.fileno()).st_ino
        return self.unsaved - before

    # ------------------------------------------------------------ on disk

    def content(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_content(self, data: dict[str, Any]) -> None:
        raise NotImplementedError

    def unmoved(self) -> list[str]:
        """The damaged parts it folded that could not be moved aside (a full or read-only
        disk), still there: kept in the file so a later start, which reads them no more,
        counts them and tries the move again (store.retry_unmoved)."""
        live = self.journal.path
        return sorted(p.name for p in store.unmoved(live) if p.name != live.name)

    def save(self) -> None:
        on_disk = {s.source for s in segments(self.journal.path)}
        data = {
            "version": VERSION,
            "kind": self.kind,
            "covered": sorted(self.covered & on_disk),
            "unmoved": self.unmoved(),
            "live": {"inode": self.live_inode, "offset": self.live_offset},
            "seq": self.seq,
            "saved": time.time(),
            **self.content(),
        }
        replace_durably(self.path, json.dumps(data, separators=(",", ":")))
        self.saved_inode = os.stat(self.path).st_ino
        self.unsaved = 0
        for leftover in temporaries(self.path):  # a save killed midway (not one in progress elsewhere)
            with contextlib.suppress(OSError):
                if time.time() - leftover.stat().st_mtime > 600:
                    leftover.unlink()

    def keep(self) -> None:
        """save(), or say why not: a checkpoint that cannot be written (a read-only journal
        directory) costs the next start time, never this one its restore.  The damaged
        parts not moved aside are tried again first (a disk that takes this write may take
        their move)."""
        store.retry_unmoved(self.journal.path, self.unmoved())
        try:
            self.save()
        except OSError as exc:
            log.warning("%s: not written (%s): the next start folds the journal again", self.path, exc)

    def load(self) -> bool:
        """Load the checkpoint file; False (self unchanged) if it is missing, damaged or of
        another version or kind."""
        try:
            with store.open_regular(self.path) as f:
                inode = os.fstat(f.fileno()).st_ino
                data = json.loads(f.read())
            if data.get("version") != VERSION or data.get("kind") != self.kind:
                log.info("%s: version %s, not %s: rebuilt from the journal", self.path, data.get("version"), VERSION)
                return False
            self.load_content(data)
            self.covered = set(data["covered"])
            self.live_inode, self.live_offset = data["live"]["inode"], int(data["live"]["offset"])
            self.seq = int(data["seq"])
            unmoved = [str(name) for name in data.get("unmoved", [])]
        except FileNotFoundError:
            return False
        except OSError as exc:  # a failing disk (EIO, EBADMSG): rebuilt, as when damaged
            log.warning(
                "%s: unreadable: rebuilt from the journal (deleting it is always safe)",
                describe_os_error(exc, self.path, "checkpoint"),
            )
            return False
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("%s: unreadable (%s): rebuilt from the journal", self.path, exc)
            return False
        self.saved_inode = inode
        self.unsaved = 0
        # Folded, so no read finds them again: counted (and moved, if the disk takes it now) here.
        store.retry_unmoved(self.journal.path, unmoved)
        if self.unmoved() != sorted(unmoved):  # moved (or gone) since: the file says so, or each start reads them again
            with contextlib.suppress(OSError):
                self.save()
        return True

    def behind(self) -> int:
        """About how many bytes of journal lines bringing this up to date reads (a sealed
        part's by its gzip trailer): what decides whether a start restores
        before /metrics is up or after (service/restore.py)."""
        total = 0
        held = self.live_inode if self.live_offset else None
        sealed = store.sealed_bytes(self.journal.path)
        for segment in segments(self.journal.path):
            if segment.source in self.covered:
                continue
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(segment.path)
                if segment.sealed:
                    total += sealed.get(segment.path.name) or _inflated_size(segment.path, st.st_size)
                else:
                    total += st.st_size - (self.live_offset if st.st_ino == held else 0)
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(self.journal.path)
            total += st.st_size - (self.live_offset if st.st_ino == self.live_inode else 0)
        return total

    def reset(self) -> None:
        self.__init__(self.journal)  # type: ignore[misc]

    def current(self) -> None:
        """Brought up to date: loaded again if another process saved it since (a rotation
        by `once`, say), rebuilt if it cannot be caught up, then caught up; saved if that
        folded anything (so the next start need not fold it again)."""
        with contextlib.suppress(OSError):  # gone, or unreadable: load() says which
            if os.stat(self.path).st_ino != self.saved_inode:
                self.reset()
                self.load()
        try:
            folded = self.catch_up()
        except Stale as exc:
            log.warning("%s: %s: rebuilt from the journal", self.path, exc)
            self.reset()
            folded = self.catch_up()
        if folded:
            self.keep()

    def after_append(self) -> None:
        """The exporter journaled a record: folded at once, saved every SAVE_EVERY."""
        try:
            self.catch_up()
        except Stale:
            self.current()
        if self.unsaved >= SAVE_EVERY:
            self.keep()


class ResultsFold(_Fold):
    kind = "results"

    def __init__(self, journal: _Records[Any]) -> None:
        super().__init__(journal)
        self.latest: dict[str, tuple[int, dict[str, Any]]] = {}  # the exporter's, per series
        self.latest_ok: dict[str, tuple[int, dict[str, Any]]] = {}
        self.recent: deque[tuple[int, dict[str, Any]]] = deque(maxlen=RECENT_KEEP)
        self.sweeps: dict[str, tuple[float, str, list[tuple[int, dict[str, Any]]]]] = {}
        # Each series' ok runs (start, throughput): as loaded (an N x 2 array, sorted) and
        # folded since (a list), merged when saved or asked for.
        self.packed: dict[str, np.ndarray] = {}
        self.history: dict[str, list[tuple[float, float]]] = {}
        self._moves: dict[str, RecentRuns] | None = {direction: RecentRuns() for direction in DIRECTIONS}
        # As loaded, per direction and remote (zlib'd JSON, base64), until first needed:
        # plan-move decodes one remote's, a start that predicts moves all of them.
        self._moves_saved: dict[str, dict[str, str]] = {}

    def fold(self, record: dict[str, Any]) -> None:
        r = Result.from_json(record)
        item = (self.seq, record)
        source, t = r.source, r.start_timestamp
        if source == "exporter":
            key = _key(r.key)
            if key not in self.latest or t >= self.latest[key][1]["start_timestamp"]:
                self.latest[key] = item
            if r.outcome == "ok" and (key not in self.latest_ok or t >= self.latest_ok[key][1]["start_timestamp"]):
                self.latest_ok[key] = item
            if counts_in_baseline(r):  # the regression test's runs: the one predicate
                runs = self.history.setdefault(key, [])
                runs.append((t, r.throughput_bytes_per_second))
                if len(runs) >= 4096:
                    self.packed[key] = self.series(key)
                    self.history[key] = []
        if source in ("exporter", "sweep") and r.outcome != "skipped":
            self.recent.append(item)
        if source == "sweep" and r.sweep_name:
            last = self.sweeps.get(r.sweep_name)
            if last is None or (r.sweep != last[1] and t >= last[0]):
                self.sweeps[r.sweep_name] = (t, r.sweep, [item])
            elif r.sweep == last[1]:
                last[2].append(item)
                if t > last[0]:
                    self.sweeps[r.sweep_name] = (t, r.sweep, last[2])
        for direction, moves in self.moves.items():
            for run in move_runs([r], r.remote, direction):  # those left out too: plan-move says why
                moves.add(r.remote, run)

    @property
    def moves(self) -> dict[str, RecentRuns]:
        """The move model's runs per direction (built from the saved lists when first needed:
        a start without moves.sizes never needs them)."""
        if self._moves is None:
            self._moves = {direction: RecentRuns() for direction in DIRECTIONS}
            for direction, remotes in self._moves_saved.items():
                for remote, blob in remotes.items():
                    _decode_moves(self._moves[direction], remote, blob)
            self._moves_saved = {}
        return self._moves

    def move_basis(self, direction: str, remote: str, history: float) -> list[Run]:
        """One remote's move runs (RecentRuns.basis), decoding only its own if the rest
        are still as loaded (plan-move on a year of history reads a twelfth of them)."""
        if self._moves is not None:
            return self._moves[direction].basis(remote, history)
        one = RecentRuns()
        blob = self._moves_saved.get(direction, {}).get(remote)
        if blob:
            _decode_moves(one, remote, blob)
        return one.basis(remote, history)

    def series(self, key: str) -> np.ndarray:
        """Series `key`'s ok runs, sorted by start, as far back as any setting can use (N x 2)."""
        folded = np.array(self.history.get(key, ()), dtype=float).reshape(-1, 2)
        packed = self.packed.get(key)
        runs = folded if packed is None else np.concatenate([packed, folded])
        runs = runs[np.argsort(runs[:, 0], kind="stable")]
        if len(runs) > MAX_RECENT_RUNS:
            since = runs[-MAX_RECENT_RUNS, 0] - HISTORY_SPAN
            runs = runs[int(np.searchsorted(runs[:, 0], since, side="left")) :]
        return runs

    # ------------------------------------------------------------ what restore reads

    def runs_kept(self, keys: set[SeriesKey]) -> int:
        """How many ok runs of the series `keys` it keeps (what a first start replays, at most)."""
        wanted = {_key(key) for key in keys}
        return sum(len(runs) for key, runs in self.packed.items() if key in wanted) + sum(
            len(runs) for key, runs in self.history.items() if key in wanted
        )

    def runs_after(self, since: Mapping[SeriesKey, float]) -> int:
        """How many ok runs of these series it keeps that start after each one's time (what
        a restart judges past the judged mark; -inf: all of the series' runs)."""
        total = 0
        for key, t in since.items():
            text = _key(key)
            if text in self.packed or text in self.history:
                runs = self.series(text)
                total += len(runs) - int(np.searchsorted(runs[:, 0], t, side="right"))
        return total

    def latest_results(self) -> list[Result]:
        """Each series' last result and last ok one (what ExporterState.restore needs), in journal order."""
        items = dict((*self.latest.values(), *self.latest_ok.values()))
        return [Result.from_json(items[seq]) for seq in sorted(items)]

    def recent_results(self, n: int = RECENT_KEEP, wanted: Callable[[Result], bool] = bool) -> list[Result]:
        """The last `n` transfers that are `wanted` (of the last RECENT_KEEP) and every
        sweep's last run, in journal order."""
        items: dict[int, Result] = {}
        for seq, record in reversed(self.recent):
            if len(items) >= n:
                break
            r = Result.from_json(record)
            if wanted(r):
                items[seq] = r
        for _, _, run in self.sweeps.values():
            items.update((seq, Result.from_json(record)) for seq, record in run if seq not in items)
        return [items[seq] for seq in sorted(items)]

    def sweep_results(self) -> list[Result]:
        items = {seq: record for _, _, run in self.sweeps.values() for seq, record in run}
        return [Result.from_json(items[seq]) for seq in sorted(items)]

    def history_runs(self, recent_runs: int, baseline_weeks: float) -> dict[SeriesKey, list[tuple[float, float]]]:
        """Each series' ok runs (start, throughput) a test with these settings can use."""
        out = {}
        for key in self.history.keys() | self.packed.keys():
            runs = self.series(key)
            if len(runs) > recent_runs:
                since = runs[-recent_runs, 0] - baseline_weeks * WEEK - DAY
                runs = runs[int(np.searchsorted(runs[:, 0], since, side="left")) :]
            out[_unkey(key)] = list(zip(*runs.T.tolist(), strict=True))
        return out

    def move_runs(self, direction: str) -> RecentRuns:
        copy = RecentRuns()
        for remote, cells in self.moves[direction].cells.items():
            for cell, runs in cells.items():
                copy.cells.setdefault(remote, {})[cell] = deque(runs, maxlen=MAX_PER_CELL)
        return copy

    # ------------------------------------------------------------ on disk

    def content(self) -> dict[str, Any]:
        history = {}
        for key in self.history.keys() | self.packed.keys():
            self.packed[key] = runs = self.series(key)
            self.history[key] = []
            history[key] = base64.b64encode(runs.astype("<f8").tobytes()).decode()
        if self._moves is None:
            moves = self._moves_saved  # never needed since loaded: as they were
        else:
            # A blob per direction and remote: most of a checkpoint's bytes, parsed only by a
            # start that predicts moves, or plan-move (one remote's).
            moves = {
                direction: {
                    remote: _encode_moves([list(_run_fields(run)) for cell in cells.values() for run in cell])
                    for remote, cells in recent.cells.items()
                }
                for direction, recent in self._moves.items()
            }
        return {
            "latest": list(self.latest.items()),
            "latest_ok": list(self.latest_ok.items()),
            "recent": list(self.recent),
            "sweeps": {name: [t, run_id, run] for name, (t, run_id, run) in self.sweeps.items()},
            "history": history,
            "moves": moves,
        }

    def load_content(self, data: dict[str, Any]) -> None:
        self.latest = {key: (seq, record) for key, (seq, record) in data["latest"]}
        self.latest_ok = {key: (seq, record) for key, (seq, record) in data["latest_ok"]}
        self.recent = deque(((seq, record) for seq, record in data["recent"]), maxlen=RECENT_KEEP)
        self.sweeps = {
            name: (float(t), str(run_id), [(seq, record) for seq, record in run])
            for name, (t, run_id, run) in data["sweeps"].items()
        }
        self.history = {}
        self.packed = {
            key: np.frombuffer(base64.b64decode(packed), dtype="<f8").reshape(-1, 2)
            for key, packed in data["history"].items()
        }
        moves = data["moves"]
        if not (
            isinstance(moves, dict)
            and all(isinstance(remotes, dict) for remotes in moves.values())
            and all(isinstance(blob, str) for remotes in moves.values() for blob in remotes.values())
        ):
            raise ValueError("moves: not a blob per direction and remote")
        self._moves, self._moves_saved = None, moves


class BaselinesFold(_Fold):
    kind = "baselines"

    def __init__(self, journal: _Records[Any]) -> None:
        super().__init__(journal)
        self.latest: dict[str, tuple[int, dict[str, Any]]] = {}  # per remote
        self.recent: deque[tuple[int, dict[str, Any]]] = deque(maxlen=RECENT_KEEP)

    def fold(self, record: dict[str, Any]) -> None:
        b = PathBaseline.from_json(record)
        item = (self.seq, record)
        last = self.latest.get(b.remote)
        if last is None or b.start_timestamp >= last[1]["start_timestamp"]:
            self.latest[b.remote] = item
        self.recent.append(item)

    def baselines(self) -> list[PathBaseline]:
        """Each remote's last baseline and the last RECENT_KEEP, in journal order."""
        items = dict(self.recent)
        items.update(self.latest.values())
        return [PathBaseline.from_json(items[seq]) for seq in sorted(items)]

    def content(self) -> dict[str, Any]:
        return {"latest": list(self.latest.items()), "recent": list(self.recent)}

    def load_content(self, data: dict[str, Any]) -> None:
        self.latest = {remote: (seq, record) for remote, (seq, record) in data["latest"]}
        self.recent = deque(((seq, record) for seq, record in data["recent"]), maxlen=RECENT_KEEP)


def _encode_moves(runs: list[list[Any]]) -> str:
    return base64.b64encode(zlib.compress(json.dumps(runs, separators=(",", ":")).encode(), 1)).decode()


def _decode_moves(into: RecentRuns, remote: str, blob: str) -> None:
    for fields in json.loads(zlib.decompress(base64.b64decode(blob))):
        into.add(remote, Run(*fields))


def _run_fields(run: Run) -> Iterator[Any]:
    yield from (run.protocol, run.setting, run.bytes, run.files, run.seconds, run.timestamp, run.source)
    yield from (run.command, run.left_out)


def _inflated_size(part: Path, size: int) -> int:
    """A gzip part's lines' bytes, from its last member's trailer (ISIZE), for a part whose
    sealing recorded none (store.sealed_bytes): a part sealed before, mostly one member (one
    written in several is counted by its last: a lower bound)."""
    try:
        with store.open_regular(part) as f:
            f.seek(max(0, size - 4))
            return max(size, int.from_bytes(f.read(4), "little"))
    except OSError:
        return size


def _fold_type(journal: _Records[Any]) -> type[_Fold]:
    return BaselinesFold if isinstance(journal, BaselineJournal) else ResultsFold


def of(journal: Journal) -> ResultsFold:
    """The journal's checkpoint, current: kept on the journal object (its appends fold into
    it and save it every SAVE_EVERY)."""
    fold = _attached(journal)
    assert isinstance(fold, ResultsFold)
    return fold


def baselines_of(journal: BaselineJournal) -> BaselinesFold:
    fold = _attached(journal)
    assert isinstance(fold, BaselinesFold)
    return fold


def unfolded(journal: _Records[Any]) -> int:
    """How many bytes of the journal's lines its checkpoint has not folded (_Fold.behind;
    all of them without a loadable checkpoint).  A loaded checkpoint stays on the journal
    (of() brings it up to date then)."""
    fold: _Fold | None = journal.fold
    if fold is None:
        fold = _fold_type(journal)(journal)
        if fold.load():
            journal.fold = fold
    return fold.behind()


def _attached(journal: _Records[Any]) -> _Fold:
    fold: _Fold | None = journal.fold
    if fold is None:
        fold = _fold_type(journal)(journal)
        fold.load()
        journal.fold = fold
    fold.current()
    return fold


# ---------------------------------------------------------------- rotation (store.py)


def rotated(journal: _Records[Any], plain: Segment) -> None:
    """The live file was renamed to `plain` (or `plain` is about to be sealed): the
    checkpoint on disk, if there is one, folds the rest of it and notes it whole, so the
    sealed parts need not be read again.  Without a checkpoint: nothing (the next start
    rebuilds it)."""
    fold = journal.fold
    if fold is None:
        fold = _fold_type(journal)(journal)
        if not fold.load():
            return
    fold.current()
    fold.keep()  # current() saves only when it folded lines; the coverage changed too


store.ROTATED.append(rotated)
