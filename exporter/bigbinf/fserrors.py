"""One clear line for what a file system refuses: the path, the error and the fix.

A host gives the same few errors whatever the file (the journal, the transfer workdir,
the capture directory): a read-only mount, a full disk, a quota, a permission, an I/O
error.  Each is said in one line naming the file and what to do, never as a traceback."""

from __future__ import annotations

import errno
import os

FIXES = {
    errno.EROFS: "its file system is mounted read-only: remount it read-write (mount -o remount,rw) or configure "
    "a directory on a writable one",
    errno.ENOSPC: "no space left on its file system: free space there (df -h) or configure a directory on another",
    errno.EDQUOT: "the disk quota of this user is used up there: free space or raise the quota (quota -v)",
    errno.EACCES: "permission denied: let the exporter's user write there (ls -ld; chown or chmod) or configure "
    "a directory it owns",
    errno.EPERM: "operation not permitted: let the exporter's user write there (ls -ld; chattr -i, chown) or "
    "configure a directory it owns",
    errno.EIO: "an I/O error from the device: check the disk (dmesg, smartctl) and its file system (fsck)",
    errno.EBADMSG: "the file system finds this file's metadata damaged (a checksum): check the disk (dmesg, "
    "smartctl) and its file system (fsck), or move the file aside",
    errno.ENOENT: "it does not exist: create it or configure a directory that exists",
    errno.ENOTDIR: "a part of the path is not a directory: configure a directory",
    errno.EMFILE: "too many open files in this process: raise its limit (LimitNOFILE=)",
}

# The errors a disk gives (not a bug of ours): said in one line, never with a traceback.
HOST_ERRNOS = frozenset(FIXES) - {errno.ENOENT, errno.ENOTDIR}


def is_host_error(exc: BaseException) -> bool:
    """An OSError the host's file system gave (read-only, full, quota, permission, I/O)."""
    return isinstance(exc, OSError) and exc.errno in HOST_ERRNOS


def describe_os_error(exc: OSError, path: str | os.PathLike[str] | None = None, what: str = "") -> str:
    """`what PATH: ERROR: FIX` in one line (PATH: `path`, else the error's own file name)."""
    where = path if path is not None else exc.filename
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    fix = FIXES.get(exc.errno or 0)
    head = " ".join(filter(None, (what, str(where) if where is not None else "")))
    code = errno.errorcode.get(exc.errno or 0, "")
    text = f"{reason} ({code})" if code else reason
    return f"{head}: {text}" + (f": {fix}" if fix else "") if head else text + (f": {fix}" if fix else "")
