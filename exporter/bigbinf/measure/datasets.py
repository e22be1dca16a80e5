"""Dataset files: creating them (lab data, upload sources) and verifying copies.

A dataset is one file, or (count > 1) a directory of `count` files of `size` bytes each
(the many-small-files case).  Content is random so no compression or sparse-file trick
can flatter a protocol.  A sha256sum-format manifest records every file, by path
relative to the directory that holds the dataset ("f5m.bin", "many/part-0001.bin").
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bigbinf.config import DatasetConfig

CHUNK = 4 * 1024 * 1024
MANIFEST = "SHA256SUMS"


def member_names(ds: DatasetConfig) -> list[str]:
    """Relative paths of the dataset's files."""
    if ds.kind == "file":
        return [ds.file]
    width = max(4, len(str(ds.count - 1)))
    return [f"{ds.file}/part-{i:0{width}d}.bin" for i in range(ds.count)]


def total_bytes(ds: DatasetConfig) -> int:
    return ds.size * ds.count


def describe(ds: DatasetConfig) -> str:
    """ "1048576 bytes", or "1000 x 65536 bytes" for a many-files dataset."""
    return f"{ds.count} x {ds.size} bytes" if ds.kind == "tree" else f"{ds.size} bytes"


def read_manifest(path: Path | None) -> dict[str, str]:
    """sha256sum-format file -> {relative path: hex digest}; missing file -> {}."""
    sums: dict[str, str] = {}
    if path is None:
        return sums
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return sums
    for line in lines:
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and len(parts[0]) == 64:
            sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


class DatasetWriteError(OSError):
    """A dataset file (or its manifest) could not be written; names the path and the fix.
    An OSError, so callers that handle file-system failures handle this one too."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def write_manifest(path: Path, sums: dict[str, str]) -> None:
    with _partial(path) as tmp:
        tmp.write_text("".join(f"{h}  {f}\n" for f, h in sorted(sums.items())))


def _create_file(path: Path, size: int, fill: str) -> str:
    digest = hashlib.sha256()
    zero = bytes(min(CHUNK, size))
    with _partial(path) as tmp, open(tmp, "wb") as f:
        left = size
        while left:
            n = min(CHUNK, left)
            block = os.urandom(n) if fill == "random" else zero[:n]
            f.write(block)
            digest.update(block)
            left -= n
    return digest.hexdigest()


@contextlib.contextmanager
def _partial(path: Path) -> Iterator[Path]:
    """Write `path` through `path.partial`, renamed into place only when complete; on
    any failure (a full disk) the partial file is removed, so a half-written file is
    never taken for the dataset, and the error names the path.  The partial file is
    locked (flock) while written: a start removes one left by a killed exporter only if
    no writer holds it (measure/leftovers.py)."""
    tmp = path.with_name(path.name + ".partial")
    lock = -1
    try:
        lock = _locked(tmp)
        yield tmp
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise DatasetWriteError(
            exc.errno,
            f"cannot write {path}: {exc.strerror or exc}; free space on its disk or move "
            "transfer.workdir (or the lab's state_dir) to a larger one",
        ) from exc
    finally:
        if lock >= 0:
            os.close(lock)


def _locked(tmp: Path) -> int:
    """A descriptor holding the flock of `tmp`, the file now at that path (one removed
    while this waited for the lock is created again)."""
    while True:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_ino == os.stat(tmp).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def ensure(root: Path, ds: DatasetConfig) -> bool:
    """Create the dataset under `root` unless it is there with the right sizes and in
    root's manifest.  Returns True if anything was written."""
    manifest = root / MANIFEST
    sums = read_manifest(manifest)
    made = False
    for name in member_names(ds):
        path = root / name
        if path.exists() and path.stat().st_size == ds.size and name in sums:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        sums[name] = _create_file(path, ds.size, ds.create)
        made = True
    if made:
        write_manifest(manifest, sums)
    return made


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Verification:
    ok: bool
    detail: str
    hashed: bool = False  # every file's sha256 matched (not the sizes alone)


def verify_copy(copy: Path, ds: DatasetConfig, sums: dict[str, str]) -> Verification:
    """Is `copy` (a file, or a directory for a many-files dataset) a faithful copy of the
    dataset whose hashes are `sums`?  Checks count, sizes, and sha256 where known."""
    names = member_names(ds)
    if ds.kind == "file":
        pairs = [(copy, names[0])]
    else:
        if not copy.is_dir():
            return Verification(False, f"no directory arrived at {copy}")
        # By name at any depth: some tools (xrdcp --recursive) nest the source directory
        # inside the target.
        found = {p.name: p for p in copy.rglob("*") if p.is_file()}
        if len(found) != ds.count:
            return Verification(False, f"{len(found)} files arrived, expected {ds.count}")
        pairs = [(found.get(Path(n).name, copy / Path(n).name), n) for n in names]
    hashed = 0
    for path, name in pairs:
        if not path.exists():
            return Verification(False, f"no file arrived at {path}")
        # Named as received, relative to what holds the copy: "many/part-0042.bin" says
        # which member of a set is bad, "f5m.bin.<id>" which upload.
        shown = path.relative_to(copy.parent) if path.is_relative_to(copy.parent) else path
        size = path.stat().st_size
        if size != ds.size:
            return Verification(False, f"{shown}: received {size} bytes, expected {ds.size}")
        expected = sums.get(name)
        if expected is not None:
            actual = sha256_file(path)
            if actual != expected:
                return Verification(
                    False, f"{shown}: sha256 {actual[:16]}... differs from the source's {expected[:16]}..."
                )
            hashed += 1
    what = f"{len(pairs)} file" + ("s" if len(pairs) != 1 else "")
    if hashed == len(pairs):
        return Verification(True, f"{what}: sizes and sha256 match", hashed=True)
    return Verification(True, f"{what}: sizes match (sha256 known for {hashed})")
