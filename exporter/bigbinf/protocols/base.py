"""The one runner signature every protocol module implements, and the argv templating.

A protocol module provides a `Profile`: its default argv templates per direction and a
runner.  Runners never build shell strings: a template is a list of argv elements, each
of which may contain {placeholders} filled from the transfer's context.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_type_hints

from bigbinf.process import Completed

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# Every placeholder a command template may use, and what it becomes.
PLACEHOLDERS: Mapping[str, str] = {
    "host": "the remote's address, as it is (for what takes an address alone: ssh's and iperf3's host argument)",
    "url_host": "the remote's address as a URL or a [user@]host:path operand takes it: an IPv6 literal in "
    "brackets (ftp://{url_host}/..., {user}@{url_host}:{remote_path}); a name or IPv4 address as {host}",
    "client": "this host's address towards the remote (the source address the kernel picks)",
    "url_client": "this host's address as a URL takes it: an IPv6 literal in brackets, else as {client}",
    "port": "the remote's port (ssh by default)",
    "user": "the remote's login user",
    "key": "path of the private key for the remote",
    "ssh_config": "path of an ssh_config file for the remote (/dev/null if none: ssh then reads no config file)",
    "remote_path": "absolute path on the remote: the dataset (download) or the upload's destination",
    "remote_name": "the same path relative to the remote's serve_root, for URLs (ftp://{url_host}/{remote_name})",
    "remote_dir": "the directory holding {remote_path}: the remote's data_dir (download) or upload_dir (upload)",
    "file": "the dataset's file (or directory) name",
    "local_path": "path on this host: the download's destination, or the upload's source",
    "local_dir": "the private temporary directory of this transfer",
    "size": "the dataset's size in bytes",
    "binary": "the protocol's binary (its `binary:` setting, or the module's default)",
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


# A value every consumer reads as one word and never as an option: an argv element, a
# remote shell (shlex.quote leaves it as it is), lftp's, sftp's and bbftp's command
# languages, the command strings rsync -e and bbftp -L split on white space, a URL.  Or
# an IPv6 literal in brackets (a URL's or scp's host).
_WORD = re.compile(r"([A-Za-z0-9_@%+=:,./][A-Za-z0-9_@%+=:,./-]*)?")
_BRACKETED = re.compile(r"\[[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?\]")


def render(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """The argv of `template` with its placeholders filled in.  Every value placed must be
    one plain word (config.py validates each setting so; this is the last guard, for a
    value that did not come through it): TemplateError names the placeholder otherwise."""
    for element in template:
        for name in placeholders_in(element):
            value = values.get(name, "")
            if not _WORD.fullmatch(value) and not _BRACKETED.fullmatch(value):
                raise TemplateError(
                    f"{{{name}}} would be {value!r}, which a shell or the tool could read as more than one word "
                    "or as an option; only letters, digits and _ @ % + = : , . / - (not first) are placed"
                )
    return [element.format_map(values) for element in template]


@dataclass(frozen=True)
class NoOptions:
    """The options of a module that has none."""


# A module's options: a frozen dataclass whose fields are declared with option().
OptionsT = TypeVar("OptionsT", bound="DataclassInstance")


@dataclass(frozen=True)
class RunContext(Generic[OptionsT]):
    """Everything a runner needs for one transfer, already resolved."""

    argv: list[str]  # rendered command
    timeout_seconds: float
    workdir: Path  # private temp dir of this transfer
    netns: str | None  # client-side network namespace to run in, if any
    options: OptionsT  # the protocol's validated options (the module's own dataclass)
    env: Mapping[str, str] = field(
        default_factory=dict, repr=False
    )  # extra environment: may hold a secret, never logged
    values: Mapping[str, str] = field(default_factory=dict)  # the placeholder values argv was rendered with
    direction: str = "download"
    kind: str = "file"  # "file" or "tree" (a many-files dataset)
    password: str = field(default="", repr=False)  # from the remote's password_env; never logged


@dataclass(frozen=True)
class RunOutcome(Completed):
    """How the command ended (Completed), plus what the tool itself reported."""

    # What the tool itself reported, where it reports anything (iperf3's JSON): e.g.
    # bytes, seconds, sender retransmits, RTT.  Absent for plain copy commands.
    reported: Mapping[str, float] = field(default_factory=dict)
    # A failure the tool reported although it exited 0 (iperf3 -J puts a connect failure
    # in its JSON "error" and exits 0): the transfer fails with this text.
    failure: str = ""


Runner = Callable[[RunContext[OptionsT]], RunOutcome]
Template = Sequence[str]
# (direction, kind) -> argv template; kind is "file" (one file) or "tree" (a directory).
Commands = Mapping[tuple[str, str], Template]


# A flow is a data flow if it carried at least this much payload: control channels
# (FTP, GridFTP) and handshakes stay below it, any real data stream is far above.
DATA_FLOW_BYTES = 64 * 1024


@dataclass(frozen=True)
class Expectation:
    """What the capture must show for the result to be believed."""

    transport: str = "tcp"  # the transport that must carry the data: "tcp" or "udp"
    min_data_flows: int = 1  # distinct 5-tuples carrying data

    def describe(self) -> str:
        flows = f">= {self.min_data_flows} data flow" + ("s" if self.min_data_flows != 1 else "")
        return f"{self.transport.upper()}, {flows}"


def needs(*servers: str) -> Callable[[Any], tuple[str, ...]]:
    """lab_servers= for a profile whose needs do not depend on its options."""
    return lambda options: servers


def option(default: Any, help_: str, pattern: str | None = None, expect: str = "") -> Any:
    """A field of a module's options dataclass: its default and what it means (the
    help is quoted by config errors and docs/protocols.md).  A text option gives the
    `pattern` its whole value must match (it is placed in the tool's argv) and says what
    it `expect`s when it does not."""
    return field(default=default, metadata={"help": help_, "pattern": pattern, "expect": expect})


def _nothing(options: object) -> tuple[str, ...]:
    return ()


def _any_tcp(options: object) -> Expectation:
    return Expectation()


def _any_ip_version(options: object) -> str:
    return ""


def _as_rendered(argv: list[str], address: str) -> list[str]:
    return argv


@dataclass(frozen=True)
class Profile(Generic[OptionsT]):
    name: str
    description: str
    binary: str  # default executable; a protocol's `binary:` setting overrides it
    commands: Callable[[OptionsT], Commands]  # options -> templates
    runner: Runner[OptionsT]
    # The module's options: a frozen dataclass built with option() (NoOptions if none).
    options_type: type[OptionsT]
    expect: Callable[[OptionsT], Expectation] = _any_tcp
    # What a directory (many-files) transfer must show, where the tool's knobs say more
    # than "some TCP" (GridFTP -cc N: N sessions, each with its own data channel).
    # None: the file expectation's transport and >= 1 data flow, since per-file knobs
    # such as parallel streams need not show with small files.  The plan caps the count
    # by what the dataset can fill (plan._tree_expectation).
    expect_tree: Callable[[OptionsT], Expectation] | None = None
    produces_file: bool = True  # False for memory-to-memory tests (iperf3): nothing to verify
    # The lab servers (lab/servers.py SERVERS) a transfer to the lab needs: without one of
    # them the transfer is skipped with the reason, not failed on a refused connection.
    lab_servers: Callable[[OptionsT], tuple[str, ...]] = _nothing
    # Programs this host needs besides the command's own argv[0] (which is checked by
    # itself): e.g. the local GridFTP server of a third-party transfer.  Without one the
    # transfer is skipped, naming it, at a lab and at a site alike.
    local_binaries: Callable[[OptionsT], tuple[str, ...]] = _nothing
    # kind ("file"/"tree") -> argv template that removes an upload ({remote_path}) from a
    # remote site, so that scheduled uploads do not fill its disk.  A kind missing here
    # needs the protocol's cleanup_command in the config (checked at load).
    cleanup: Mapping[str, list[str]] = field(default_factory=dict)
    # Why the tool reaches a remote over IPv4 only, with these options ("" if IPv6 works
    # too): a transfer to an IPv6 address fails before it runs, saying this (and
    # --config.check refuses an IPv6 address given for such a pairing).
    ipv4_only: Callable[[OptionsT], str] = _any_ip_version
    # The rendered argv for the remote's address as resolved where the transfer runs (a
    # name's too): GridFTP adds -ipv6 for an IPv6 one.  Applied before the command runs,
    # so that the journal's argv is the one that ran.
    for_address: Callable[[list[str], str], list[str]] = _as_rendered
    # Whether the command (and its cleanup) gets the remote's password in its environment,
    # under the name the remote's password_env gives (rsync daemons read RSYNC_PASSWORD);
    # False for a module that writes the password into a file its tool reads (FTP).
    password_in_env: bool = True
    # Files the runner writes into the transfer's directory that hold the password:
    # removed after the transfer and its cleanup, even when transfer.keep_files keeps the rest.
    secret_files: tuple[str, ...] = ()

    @property
    def option_fields(self) -> dict[str, tuple[type, Any, str]]:
        """Option name -> (type, default, help), in declaration order."""
        hints = get_type_hints(self.options_type)
        return {f.name: (hints[f.name], f.default, f.metadata["help"]) for f in dataclasses.fields(self.options_type)}

    @property
    def option_patterns(self) -> dict[str, str | None]:
        return {f.name: f.metadata.get("pattern") for f in dataclasses.fields(self.options_type)}

    @property
    def option_expectations(self) -> dict[str, str]:
        return {f.name: f.metadata.get("expect", "") for f in dataclasses.fields(self.options_type)}

    def option_values(self, given: Mapping[str, Any]) -> OptionsT:
        """The module's options from a config's mapping (already checked): defaults filled in."""
        known = self.option_fields
        return self.options_type(**{name: value for name, value in given.items() if name in known})

    def check_options(self, given: Mapping[str, Any]) -> list[tuple[str, str]]:
        """(option, problem) for every unknown or mistyped option."""
        problems = []
        known = self.option_fields
        for name, value in given.items():
            if name not in known:
                allowed = ", ".join(known) or "none"
                problems.append((name, f"unknown option for module {self.name!r}; allowed: {allowed}"))
                continue
            kind, _default, help_ = known[name]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                problems.append((name, f"expected {kind.__name__} ({help_}), got {value!r}"))
            elif kind is int and isinstance(value, int) and value < 1:
                problems.append((name, f"must be >= 1 ({help_})"))
            elif (
                isinstance(value, str)
                and (pattern := self.option_patterns.get(name))
                and not re.fullmatch(pattern, value)
            ):
                expect = self.option_expectations.get(name) or "not a value this option takes"
                problems.append((name, f"{value!r} {expect} ({help_})"))
        return problems
