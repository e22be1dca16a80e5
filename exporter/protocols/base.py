"""The one runner signature every protocol module implements, and the argv templating.

A protocol module provides a `Profile`: its default argv templates per direction and a
runner.  Runners never build shell strings: a template is a list of argv elements, each
of which may contain {placeholders} filled from the transfer's context.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Every placeholder a command template may use, and what it becomes.
PLACEHOLDERS: Mapping[str, str] = {
    "host": "the remote's address",
    "port": "the remote's port (ssh by default)",
    "user": "the remote's login user",
    "key": "path of the private key for the remote",
    "ssh_config": "path of an ssh_config file for the remote (empty string if none)",
    "remote_path": "absolute path of the dataset's file on the remote",
    "remote_dir": "the remote's data directory",
    "file": "the dataset's file name",
    "local_path": "path of the file on this host (destination of a download, source of an upload)",
    "local_dir": "the private temporary directory of this transfer",
    "size": "the dataset's size in bytes",
}


class TemplateError(ValueError):
    pass


def placeholders_in(element: str) -> list[str]:
    """Names of the {placeholders} in one argv element; raises TemplateError on bad braces."""
    try:
        parsed = list(string.Formatter().parse(element))
    except ValueError as exc:
        raise TemplateError(f"bad braces in {element!r}: {exc}; write {{{{ and }}}} for literal braces") from None
    names = []
    for _literal, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion:
            raise TemplateError(f"placeholder {{{name}}} may not have a format spec or conversion")
        names.append(name)
    return names


def check_template_element(element: str) -> str:
    for name in placeholders_in(element):
        if name not in PLACEHOLDERS:
            known = ", ".join("{" + k + "}" for k in PLACEHOLDERS)
            raise TemplateError(f"unknown placeholder {{{name}}}; known placeholders: {known}")
    return element


def render(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    return [element.format_map(values) for element in template]


@dataclass(frozen=True)
class RunContext:
    """Everything a runner needs for one transfer, already resolved."""

    argv: list[str]  # rendered command
    timeout_seconds: float
    workdir: Path  # private temp dir of this transfer
    netns: str | None  # client-side network namespace to run in, if any
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment (secrets: never logged)


@dataclass(frozen=True)
class RunOutcome:
    returncode: int | None  # None when killed at the timeout
    timed_out: bool
    duration_seconds: float
    start_timestamp: float
    stderr_tail: str


Runner = Callable[[RunContext], RunOutcome]


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    commands: Mapping[str, Sequence[str]]  # direction -> default argv template
    runner: Runner
    # Executable that must exist for the profile to run; None means "the argv's first element".
    binary: str | None = None
