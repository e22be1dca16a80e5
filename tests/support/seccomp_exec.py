"""Exec a command under the system call filter of packaging/bigbinf-exporter.service, as
systemd would install it (its last step before exec, after the user and capabilities
are set), for tests that run the exporter as the unit does without systemd:

    python -m tests.support.seccomp_exec -- COMMAND ARGS...

The unit's SystemCallFilter= sets (e.g. @system-service) are expanded with
`systemd-analyze syscall-filter`, the list this machine's systemd would use; every other
system call fails with the unit's SystemCallErrorNumber= (EPERM), or kills the process
(SIGSYS) when the unit sets none.  Loaded with libseccomp (what systemd uses), through
ctypes.  Needs no_new_privs (setpriv --no-new-privs) or CAP_SYS_ADMIN, as seccomp does.
"""

from __future__ import annotations

import ctypes
import errno
import os
import subprocess
import sys

from .systemd import unit_settings

SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_ACT_ALLOW = 0x7FFF0000


def scmp_act_errno(number: int) -> int:
    return 0x00050000 | (number & 0xFFFF)


def syscall_groups() -> dict[str, list[str]]:
    """Every group systemd-analyze knows: its members (system calls and other groups)."""
    # Not the command's environment (it may hold a secret the command is given): systemd's
    # own lists, as systemd would use them.
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    argv = ["systemd-analyze", "syscall-filter"]
    text = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60, env=env).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@"):
            current = line.split()[0]
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    out: set[str] = set()
    for name in names:
        if name.startswith("@"):
            out |= expand(groups[name], groups)
        else:
            out.add(name)
    return out


def unit_filter() -> tuple[set[str], int]:
    """The system calls the unit allows, and the action for the rest."""
    settings = unit_settings()
    allowed: list[str] = []
    for value in settings.get("SystemCallFilter", []):
        if value.startswith("~"):
            raise NotImplementedError("a deny list in the unit: extend seccomp_exec")
        allowed += value.split()
    errno_name = (settings.get("SystemCallErrorNumber") or [""])[-1]
    action = scmp_act_errno(getattr(errno, errno_name)) if errno_name else SCMP_ACT_KILL_PROCESS
    return expand(allowed, syscall_groups()), action


def load(allowed: set[str], default_action: int) -> int:
    """Install the filter in this process (inherited across exec); returns how many calls it allows."""
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(default_action)
    if not ctx:
        raise OSError("seccomp_init failed")
    count = 0
    for name in sorted(allowed):
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:
            continue  # not a system call of this architecture
        if lib.seccomp_rule_add(ctx, SCMP_ACT_ALLOW, number, 0) == 0:
            count += 1
    if lib.seccomp_load(ctx) != 0:
        raise OSError("seccomp_load failed (no_new_privs not set?)")
    return count


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    allowed, action = unit_filter()
    load(allowed, action)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
