"""Secret files checked at start and at every reload, as ssh checks its identity files.

A remote's `key` (and the identity files of its `ssh_config`) must be readable by the
user the exporter runs as and by nobody else: ssh itself refuses a private key that
group or others may read ("UNPROTECTED PRIVATE KEY FILE"), and would fail every round
with an error buried in a result.  Here it is one clear error at start, naming the file,
its mode and the fix.  Lab remotes are left out: `lab up` (root) writes their keys.  A
key that does not exist yet is not a leak: the transfers that need it fail with ssh's
own error, as before.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
from pathlib import Path

from bigbinf.config import Config, ConfigError, ConfigIssue


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def secret_file_problem(path: Path, this_user: bool = True) -> str | None:
    """What is wrong with `path` as a private key of this process's user, or None.
    this_user=False checks only what is wrong whoever runs the exporter (the mode)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None  # not a leak: the transfers say it (a key may be provisioned after the config)
    except PermissionError:
        if not this_user:
            return None
        return f"{path}: cannot be read by {_user(os.geteuid())} (a directory above it is closed to this user)"
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: not a regular file"
    me = os.geteuid()
    if st.st_mode & 0o077:
        return (
            f"{path}: permissions {stat.S_IMODE(st.st_mode):04o} are too open: a private key must not be "
            f"accessible by others (ssh refuses it too); chmod 600 {path}"
        )
    if not this_user:
        return None
    if st.st_uid != me:
        return (
            f"{path}: owned by {_user(st.st_uid)}, but the exporter runs as {_user(me)}; "
            f"chown {_user(me)} {path} (ssh requires the key to be the user's own)"
        )
    if not os.access(path, os.R_OK):
        return f"{path}: not readable by {_user(me)}; chmod 600 {path}"
    return None


def _identity_files(ssh_config: Path) -> list[Path]:
    """IdentityFile lines of an ssh_config (what can be checked without ssh's own parser)."""
    try:
        text = ssh_config.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    found = []
    for line in text.splitlines():
        match = re.match(r"\s*IdentityFile\s*=?\s*\"?([^\"\s]+)\"?", line, re.I)
        if match and "%" not in match.group(1):
            found.append(Path(os.path.expanduser(match.group(1))))
    return found


def secret_file_issues(config: Config, this_user: bool = True) -> list[ConfigIssue]:
    issues = []
    for name, remote in config.remotes.items():
        if remote.lab:
            continue
        if remote.key is not None and (problem := secret_file_problem(remote.key, this_user)):
            issues.append(ConfigIssue(f"remotes.{name}.key", problem))
        if remote.ssh_config is not None:
            for identity in _identity_files(remote.ssh_config):
                if identity.exists() and (problem := secret_file_problem(identity, this_user)):
                    issues.append(ConfigIssue(f"remotes.{name}.ssh_config", f"IdentityFile {problem}"))
    return issues


def check_secret_files(config: Config, source: str) -> None:
    """ConfigError naming every secret file with a problem (start and reload)."""
    issues = secret_file_issues(config)
    if issues:
        raise ConfigError(source, issues)


# ---------------------------------------------------------------- passwords

# Each remote's password (the variable its password_env names), once taken out of this
# process's environment: held here, handed only to the process that needs it.
_passwords: dict[str, str] = {}


def take_passwords(config: Config) -> None:
    """Move the variables the remotes' password_env name out of os.environ (so that no
    child inherits them: not a capture, a probe, an ssh stats command, nor a transfer
    that reads its password from a file) into this module.  Called at start and at
    every reload, before anything runs."""
    for remote in config.remotes.values():
        if remote.password_env:
            password(remote.password_env)


def password(variable: str | None) -> str:
    """The password in `variable` ("" if none): taken out of os.environ at the first ask."""
    if not variable:
        return ""
    if variable in os.environ:
        _passwords[variable] = os.environ.pop(variable)
    return _passwords.get(variable, "")


def taken_passwords() -> list[str]:
    """Every password taken so far: what a page must never show (service/pages.py)."""
    return [value for value in _passwords.values() if value]
