"""bigbinf-exporter: serve (default), once, advise, lab up|down|status, mesh, and the analysis commands.

Flags follow the Prometheus exporters' style: --config.file, --config.check,
--web.listen-address, --log.level.  `--mesh.file M --site NAME` runs the exporter of one
site of a mesh file instead of a single-site configuration (serve, once, --config.check,
lab up|down|status).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import io
import logging
import os
import signal
import sys
import threading
import time
import zoneinfo
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

# What every command line needs, and nothing more, at module level: the service's
# rounds, server, sweeps and web configuration, the study's, the mesh's and the history's
# commands, the configuration check's extras are imported in the functions that run them
# (a start spent a second of CPU importing what serve needs before a check or --help
# could answer; issues 44, 47).  The lab is here for lab.site (what serve hands the live
# path) and lab.LabError; the mesh's configuration for MeshUsageError and DEFAULT_LISTEN.
from bigbinf import __version__, lab
from bigbinf.config import Config, ConfigError, ConfigIssue, ScheduleConfig, load_config
from bigbinf.credentials import check_secret_files, secret_file_issues, take_passwords
from bigbinf.history import service_config
from bigbinf.journal.store import Journal
from bigbinf.measure.plan import PlanError, host_key_warnings, plan_series
from bigbinf.mesh.config import DEFAULT_LISTEN, MeshConfig, MeshError, exporter_of, load_mesh, outgoing, site_config
from bigbinf.process import measured, own_children
from bigbinf.protocols.hosts import is_ipv6
from bigbinf.result import PathBaseline, Result
from bigbinf.service.schedule import longest_gap_seconds, shortest_gap_seconds

if TYPE_CHECKING:
    from bigbinf.mesh.plan import Durations, RoundPlan, TestKey

DEFAULT_CONFIG = "schedules/lab.yaml"
log = logging.getLogger("bigbinf")


def _common() -> argparse.ArgumentParser:
    # Defaults are SUPPRESSed here so a flag given before or after the subcommand both work.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config.file",
        dest="config_file",
        default=argparse.SUPPRESS,
        help=f"configuration file (default {DEFAULT_CONFIG})",
    )
    common.add_argument(
        "--log.level",
        dest="log_level",
        default=argparse.SUPPRESS,
        choices=["debug", "info", "warn", "error"],
        help="log level (default info)",
    )
    common.add_argument(
        "--mesh.file",
        dest="mesh_file",
        default=argparse.SUPPRESS,
        help="a mesh file (docs/mesh.md) instead of --config.file: with --site, that site's exporter",
    )
    common.add_argument(
        "--site",
        dest="site",
        default=argparse.SUPPRESS,
        help="with --mesh.file: the site whose outgoing tests this exporter runs",
    )
    return common


def build_parser(serving: bool = False) -> argparse.ArgumentParser:
    """The command line's parser; `serving`: without the subcommands that have modules of
    their own (for a command line that _serves)."""
    common = _common()
    parser = argparse.ArgumentParser(
        prog="bigbinf-exporter",
        parents=[common],
        description="Scheduled, packet-captured bulk-transfer measurements for Prometheus.",
    )
    parser.add_argument("--version", action="version", version=f"bigbinf {__version__}")
    parser.add_argument(
        "--config.check",
        dest="config_check",
        action="store_true",
        help="validate the configuration and exit (0 valid, 1 invalid)",
    )
    parser.add_argument(
        "--web.listen-address",
        dest="listen",
        default=None,
        help=f"address:port for /metrics (default {DEFAULT_LISTEN}; a mesh site: its sites.NAME.exporter.listen)",
    )
    parser.add_argument(
        "--web.config.file",
        dest="web_config_file",
        default=None,
        help="exporter-toolkit web configuration: TLS, client certificates, basic auth, headers "
        "(docs/deployment.md); reloaded with the configuration",
    )
    parser.add_argument(
        "--web.config.check",
        dest="web_config_check",
        action="store_true",
        help="validate --web.config.file and exit (0 valid, 1 invalid)",
    )
    parser.add_argument(
        "--web.enable-lifecycle",
        dest="enable_lifecycle",
        action="store_true",
        help="serve POST /-/reload (behind the web configuration's authentication); off: 403",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    once = sub.add_parser("once", parents=[common], help="run one round now, print the results, exit")
    once.set_defaults(func=cmd_once)
    advise = sub.add_parser(
        "advise",
        parents=[common],
        help="per path: what limited the recent transfers, and the sysctl lines that would lift a buffer limit",
    )
    advise.add_argument("--remote", help="only this remote (default: every configured remote)")
    advise.add_argument(
        "--recent", type=_positive_int, default=1, help="judged transfers shown per series, newest (default 1)"
    )
    advise.set_defaults(func=cmd_advise)
    compact = sub.add_parser(
        "journal-compact",
        parents=[common],
        help="split the journal into day segments, apply journal.retention, write its checkpoint, exit "
        "(what a start does; for an old single-file journal before the upgraded exporter starts)",
    )
    compact.set_defaults(func=cmd_journal_compact)
    lab_parser = sub.add_parser("lab", parents=[common], help="the local lab that stands in for a remote site")
    lab_parser.add_argument(
        "action",
        choices=["up", "down", "status", "serve"],
        help="serve: run the remote side's servers in this network namespace "
        "until stopped (a container that is the remote site)",
    )
    lab_parser.set_defaults(func=cmd_lab)
    sweep = sub.add_parser(
        "sweep",
        parents=[common],
        help="run a tuning sweep (config sweeps.NAME) now, print its progress and verdict, exit",
    )
    sweep.add_argument("--sweep", required=True, metavar="NAME", help="the sweep to run (config sweeps.NAME)")
    sweep.set_defaults(func=cmd_sweep)
    if serving:
        return parser
    # Not for a command line that serves (_serves): their modules are the study's, the
    # mesh's and the history's, some 20 that a start would import for nothing.
    from bigbinf.history import planmove, regression_cmd
    from bigbinf.lab import mesh as lab_mesh
    from bigbinf.mesh import cli as mesh_cli
    from bigbinf.study import backfill, importer, report, sweep_report

    regression_cmd.register(sub, [common])  # regression list|accept
    for command in (report, importer, backfill, sweep_report, planmove):  # the study's commands and plan-move
        command.register(sub, [common])  # the shared flags work after these subcommands too
    mesh_cli.register(sub, [common], lab=lab_mesh.layout)  # mesh plan|durations|config|prometheus
    return parser


# The flags a command line that serves may carry (no subcommand, no --help, no --version):
# those that take a value, and those that do not.
_SERVE_VALUE_FLAGS = frozenset(
    ("--config.file", "--log.level", "--mesh.file", "--site", "--web.listen-address", "--web.config.file")
)
_SERVE_SWITCHES = frozenset(("--config.check", "--web.config.check", "--web.enable-lifecycle"))


def _serves(argv: Sequence[str]) -> bool:
    """Whether a command line is made only of the top-level flags (serve, or a check):
    parsed alike with or without the subcommands registered, since no word of it can be
    a subcommand's name (each is a flag or a flag's value).  Anything else (a word of
    its own, -h, an abbreviated flag) gets the whole parser, and its messages."""
    words = iter(argv)
    for word in words:
        name = word.split("=", 1)[0]
        if name in _SERVE_VALUE_FLAGS:
            if "=" not in word and next(words, None) is None:
                return False  # a flag without its value: the whole parser's error
        elif word not in _SERVE_SWITCHES:
            return False
    return True


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(serving=_serves(words))
    args = parser.parse_args(words)
    level = getattr(args, "log_level", "info")
    logging.basicConfig(
        level={"warn": "WARNING"}.get(level, level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if level != "debug":
        logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per job run is noise
    func = getattr(args, "func", None) or cmd_serve
    mesh_cli_run = getattr(args, "command", None) == "mesh"  # the mesh's own commands take both
    mesh_commands = (cmd_serve, cmd_once, cmd_lab)
    if hasattr(args, "mesh_file") and hasattr(args, "config_file") and not mesh_cli_run:
        print("bigbinf-exporter: give --config.file or --mesh.file, not both", file=sys.stderr)
        return 2
    if hasattr(args, "site") and not hasattr(args, "mesh_file") and not mesh_cli_run:
        print("bigbinf-exporter: --site NAME goes with --mesh.file FILE (a mesh site's exporter)", file=sys.stderr)
        return 2
    if hasattr(args, "mesh_file") and func not in mesh_commands and not mesh_cli_run and not args.config_check:
        print(f"bigbinf-exporter: {args.command} takes --config.file, not --mesh.file", file=sys.stderr)
        return 2
    if not hasattr(args, "config_file"):
        if getattr(args, "command", None) in service_config.COMMANDS and not args.config_check:
            # The history's commands read the running exporter's configuration (issue 45).
            try:
                found = service_config.find(DEFAULT_CONFIG, serving_config)
            except service_config.ServiceConfigError as exc:
                print(f"bigbinf-exporter {args.command}: {exc}", file=sys.stderr)
                return 2
            print(found.notice(f"bigbinf-exporter {args.command}"), file=sys.stderr)
            args.config_file = found.path
        else:
            args.config_file = DEFAULT_CONFIG
    if args.web_config_check:
        return cmd_web_check(args)
    try:
        if args.config_check:
            code = cmd_mesh_check(args) if hasattr(args, "mesh_file") else cmd_check(args)
        else:
            code = func(args)
        sys.stdout.flush()  # a reader gone is found here, not at exit (where Python prints a traceback)
        return code
    except BrokenPipeError:
        # The reader closed the pipe (`mesh plan | head`): nothing left to say, and no one to
        # say it to.  Exit as a process that SIGPIPE ended would, quietly.
        _stdout_to_devnull()
        return EXIT_CLOSED_PIPE
    except MeshUsageError as exc:  # before ConfigError: it is one, but a usage error here
        print(f"bigbinf-exporter: {exc.message}", file=sys.stderr)
        return 2
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    except lab.LabError as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def serving_config(argv: list[str]) -> str | None:
    """The configuration file of an exporter command line (its arguments after the
    program) that serves: no subcommand, no check; None otherwise (or unparsable)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            args, _ = build_parser().parse_known_args(argv)
    except SystemExit:
        return None
    if getattr(args, "command", None) or args.config_check or args.web_config_check or hasattr(args, "mesh_file"):
        return None
    return getattr(args, "config_file", DEFAULT_CONFIG)


EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE  # 141: what a shell reports for `yes | head`'s yes


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so that Python's last flush at exit has nowhere to fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, io.UnsupportedOperation):
        pass  # not a real file (a test's capture): nothing to flush at exit


# ---------------------------------------------------------------- a mesh site


class MeshUsageError(MeshError):
    """--mesh.file without a usable --site: said with the sites to choose from.  A
    MeshError (a ConfigError), so a reload that finds its site gone from the mesh file
    fails as for any invalid file and keeps the configuration in force; the command
    line exits 2 with it (main)."""

    def __init__(self, source: str, message: str) -> None:
        self.message = message
        super().__init__(source, [ConfigIssue("", message)])


@dataclass(frozen=True)
class MeshSite:
    """One site's view of a valid mesh file and its durations file, loaded together (one
    load: a reload swaps both or neither).  What service/mesh_runner.py's SiteView asks
    for; made here, the composition root, because the live path never imports
    bigbinf.mesh (its Prometheus files reach the mixin), as it never imports the lab."""

    mesh: MeshConfig
    site: str
    config: Config  # the site's exporter configuration: its outgoing tests
    schedule_interval: float  # the longest round (between two rounds' starts)
    listen: str  # where its exporter listens (sites.NAME.exporter.listen, or its default)
    durations: Durations  # schedule.durations as read with the mesh file

    def rounds(self, after: float) -> Iterator[RoundPlan]:
        """The round in progress at `after`, if any, then the later ones, all from the
        durations read with the mesh file (so every round a load plans is sized alike)."""
        from bigbinf.mesh.plan import next_rounds, round_at  # a mesh site's, not every serve's

        current = round_at(self.mesh, after, self.durations)
        if current is not None:
            yield current
        for plan in next_rounds(self.mesh, after, self.durations):
            if current is None or plan.start > current.start:
                yield plan

    def slot_counts(self, since: float, until: float) -> Iterable[tuple[TestKey, int]]:
        """This site's slots of each test that start after `since` and before `until`."""
        from bigbinf.mesh.plan import site_slot_counts

        return site_slot_counts(self.mesh, self.durations, self.site, since, until).items()


def mesh_site_of(mesh: MeshConfig, site: str | None, source: str) -> MeshSite:
    from bigbinf.lab import mesh as lab_mesh  # the mesh's modules: a mesh site's, not every serve's
    from bigbinf.mesh.plan import load_durations

    if not site:
        raise MeshUsageError(source, f"--mesh.file {source}: give --site NAME, one of: {', '.join(mesh.sites)}")
    if site not in mesh.sites:
        raise MeshUsageError(source, f"--site {site}: no such site in {source}; defined: {', '.join(mesh.sites)}")
    config = site_config(mesh, site, source, lab=lab_mesh.layout)
    durations = load_durations(mesh)  # MeshError if unreadable: the mesh is unusable here too
    return MeshSite(mesh, site, config, _rounds_gap(mesh), exporter_of(mesh, site).listen, durations)


def load_mesh_site(path: str | Path, site: str | None) -> MeshSite:
    """The exporter's mesh loader (service.mesh_runner.MeshLoader): a MeshError (a
    ConfigError) if the mesh or durations file is invalid or the site is not in it."""
    from bigbinf.lab import mesh as lab_mesh

    return mesh_site_of(load_mesh(path, lab=lab_mesh.layout), site, str(path))


def _rounds_gap(mesh: MeshConfig) -> float:
    """The longest round: an interval schedule's (mesh.plan.longest_period_seconds), or
    the longest gap between two cron starts."""
    from bigbinf.mesh.plan import longest_period_seconds

    longest = longest_period_seconds(mesh)
    if longest is not None:
        return longest
    return longest_gap_seconds(ScheduleConfig(cron=mesh.schedule.cron, timezone=mesh.schedule.timezone))


FIT_CHECK_DAYS = 8  # --config.check of a mesh: the rounds of the coming week and a day


def cmd_mesh_check(args: argparse.Namespace) -> int:
    """--config.check --mesh.file M [--site S]: the whole mesh (every site's configuration
    with it); with --site also that site's secret files and host keys, as cmd_check.  A
    valid mesh whose rounds of the next FIT_CHECK_DAYS days do not all fit fails too, with
    `mesh plan`'s numbers (exit 3, as `mesh plan`)."""
    from bigbinf.lab import mesh as lab_mesh
    from bigbinf.mesh import cli as mesh_cli
    from bigbinf.mesh.plan import check_fit, load_durations

    source = args.mesh_file
    mesh = load_mesh(source, lab=lab_mesh.layout)  # ConfigError: printed by main, exit 1
    durations = load_durations(mesh)
    site = getattr(args, "site", None)
    if site is not None:
        config = mesh_site_of(mesh, site, source).config
        wrong = secret_file_issues(config, this_user=False)
        if wrong:
            print(ConfigError(source, wrong).render(), file=sys.stderr)
            return 1
        warnings = list(host_key_warnings(config))
        warnings += [
            f"{i.path}: {i.message} (the exporter would not start as this user)" for i in secret_file_issues(config)
        ]
        for warning in warnings:
            print(f"{source}: warning: {warning}", file=sys.stderr)
    if args.web_config_file and cmd_web_check(args, quiet=True) != 0:
        return 1
    tests = sum(len(outgoing(mesh, name)) for name in mesh.sites)
    # Valid, but its rounds must fit too: a slot that would run past the next round's
    # start is never run (docs/mesh.md).  A week ahead: weekly cron lines, a DST change.
    check = check_fit(mesh, durations, time.time(), FIT_CHECK_DAYS * 86400)
    if check.late:
        zone = zoneinfo.ZoneInfo(mesh.schedule.timezone)
        for plan in check.first_late:
            when = dt.datetime.fromtimestamp(plan.start, zone).strftime("%Y-%m-%d %H:%M:%S %Z")
            print(f"{source}: round {when} {mesh_cli.verdict(mesh, plan)}", file=sys.stderr)
        print(
            f"{source}: mesh is valid ({len(mesh.sites)} sites, {tests} tests), but {check.late} of the "
            f"{check.rounds} rounds of the next {FIT_CHECK_DAYS} days do NOT fit: their last slots are not run "
            "(`mesh plan --date YYYY-MM-DD` lists them)",
            file=sys.stderr,
        )
        return mesh_cli.EXIT_DOES_NOT_FIT
    print(f"{source}: mesh is valid ({len(mesh.sites)} sites, {tests} tests; the next {check.rounds} rounds fit)")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config_file)
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    # A key others may read is wrong whoever runs the exporter; who owns it depends on
    # the user the check runs as (run it as the service user to check that too).
    wrong = secret_file_issues(config, this_user=False)
    if wrong:
        print(ConfigError(args.config_file, wrong).render(), file=sys.stderr)
        return 1
    if args.web_config_file and cmd_web_check(args, quiet=True) != 0:
        return 1
    # Valid, but bound to fail at run time: said, without failing the check.
    warnings = list(host_key_warnings(config))
    warnings += [
        f"{i.path}: {i.message} (the exporter would not start as this user)" for i in secret_file_issues(config)
    ]
    warnings += round_fit_warnings(config)
    warnings += ipv6_probe_warnings(config)
    for warning in warnings:
        print(f"{args.config_file}: warning: {warning}", file=sys.stderr)
    print(f"{args.config_file}: configuration is valid")
    return 0


def ipv6_probe_warnings(config: Config) -> list[str]:
    """remotes.NAME.probe: ICMP echo is IPv4 only here; an IPv6 remote (an address given as
    one) is probed by TCP connect to probe.port instead (measure/path/probe.py)."""
    return [
        f"remotes.{name}.probe.method: icmp, and {remote.address} is IPv6: ICMP probes are IPv4 only here, so this "
        f"remote's path is probed by TCP connect to port {remote.probe.port or remote.port} instead (its RTT; the "
        "path MTU as the kernel knows it); set probe.method: tcp, with probe.port a port it listens on, to say so"
        for name, remote in config.remotes.items()
        if remote.probe.enabled and remote.probe.method == "icmp" and is_ipv6(remote.address or "")
    ]


def round_fit_warnings(config: Config) -> list[str]:
    """schedule: a round that, by the journal's recent runs on this host, takes longer than
    the schedule's shortest gap between two starts (service/round_fit.py).  Nothing to say
    without a journal (a new install: its first rounds are measured by the exporter,
    bigbinf_round_overrun_seconds)."""
    from bigbinf.service import round_fit  # the check's, not serve's

    try:
        keys = plan_series(config, lab.site(config))
        results = list(Journal(config.journal.path).read()) if config.journal.path.is_file() else []
    except (PlanError, OSError):
        return []
    if not results:
        return []
    estimate = round_fit.estimate(config, keys, results)
    what = "schedule.interval" if config.schedule.interval else "the schedule's shortest gap between two cron starts"
    warning = round_fit.fit_warning(estimate, shortest_gap_seconds(config.schedule), what)
    return [f"schedule: {warning}"] if warning else []


def cmd_web_check(args: argparse.Namespace, quiet: bool = False) -> int:
    from bigbinf.service.webconfig import load_web_config

    if not args.web_config_file:
        print("--web.config.check: give --web.config.file FILE", file=sys.stderr)
        return 1
    try:
        web = load_web_config(args.web_config_file)
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    if not quiet:
        auth = f"basic auth for {len(web.auth.users)} user(s)" if web.auth.enabled else "no basic auth"
        print(f"{args.web_config_file}: web configuration is valid ({web.scheme}, {auth})")
    return 0


def cmd_lab(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        raise lab.LabError(
            f"lab {args.action} must run as root (network namespaces, servers, tc); "
            "the exporter itself runs unprivileged (docs/deployment.md)"
        )
    if hasattr(args, "mesh_file"):
        from bigbinf.lab import mesh as lab_mesh

        if args.action == "serve":
            raise lab.LabError(
                "lab serve runs one lab's remote side (--config.file); lab up --mesh.file starts a mesh's"
            )
        mesh = load_mesh(args.mesh_file, lab=lab_mesh.layout)

        def mesh_down() -> list[str]:
            configs = [site_config(mesh, name, args.mesh_file, lab=lab_mesh.layout) for name in mesh.sites]
            return [line for config in configs for line in _settle(config)] + lab_mesh.down(mesh)

        return _lab_action(args.action, lambda: lab_mesh.up(mesh), mesh_down, lambda: lab_mesh.status(mesh))
    config = load_config(args.config_file)
    if args.action == "serve":
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        try:
            lab.serve(config, stop)
        except RuntimeError as exc:
            raise lab.LabError(str(exc)) from None
        return 0
    return _lab_action(
        args.action, lambda: lab.up(config), lambda: [*_settle(config), *lab.down(config)], lambda: lab.status(config)
    )


def _settle(config: Config) -> list[str]:
    """What an ended exporter left changed, undone (before `lab down` takes the namespaces
    away with the settings in them; a remote's stay otherwise): one line per undo."""
    from bigbinf.service.collector import ExporterState
    from bigbinf.service.rounds import RoundRunner

    replay = RoundRunner(config, ExporterState(), lab=lab.site).settle_now()
    if replay is None:
        return [f"an exporter or sweep holds the round lock of {config.journal.path}: its undo journal is its own"]
    return [f"undone: {line}" for line in replay.undone] + [f"NOT undone: {line}" for line in replay.failed]


def _lab_action(
    action: str,
    up: Callable[[], list[str]],
    down: Callable[[], list[str]],
    status: Callable[[], tuple[bool, list[str]]],
) -> int:
    """lab up|down|status of a single lab or of a lab mesh: their messages, or the status lines."""
    try:
        if action == "status":
            ok, lines = status()
            print("\n".join(lines))
            return 0 if ok else 1
        messages = up() if action == "up" else down()
    except RuntimeError as exc:
        raise lab.LabError(str(exc)) from None
    print("\n".join(messages))
    return 0


TABLE_COLUMNS = (
    "File Size (bytes)",
    "Protocol",
    "Bytes Down",
    "Bytes Up",
    "Bytes Total",
    "Ratio (%)",
    "Time (s)",
    "Speed (bytes/s)",
    # Two truths that differ by design (docs/protocols.md, "Retransmits"): the sender's
    # kernel counts every segment it resent; the capture sees only those that reached
    # it, and calls what a reordering path delays "out of order", not "retransmitted".
    "Retrans (sender kernel)",
    "Retrans (wire)",
    "Verified",
    "Outcome",
    "Limited by",
)


_LEFT_ALIGNED = frozenset(("Protocol", "Outcome", "Limited by"))


def _wire_cell(r: Result, value: object) -> str:
    """ "-" where the capture could not be read whole: not measured is not 0."""
    return str(value) if r.wire_measured else "-"


def _sender_retransmits_cell(r: Result) -> str:
    """The sender's own count ("-" where the sender could not be asked: a download from a
    remote without a stats_command), with where it came from when not the kernel's sockets."""
    if r.retransmits_sender is None:
        return "-"
    source = r.retransmits_sender_source
    return str(r.retransmits_sender) + (f" ({source})" if source and source != "kernel" else "")


def format_table(results: Sequence[Result]) -> str:
    """Rows like the study's Table 2 (one per transfer), then the errors."""
    rows = [TABLE_COLUMNS]
    for r in results:
        rows.append(
            (
                str(r.file_bytes),
                f"{r.protocol} ({r.dataset}, {r.direction})",
                _wire_cell(r, r.wire_bytes_down),
                _wire_cell(r, r.wire_bytes_up),
                _wire_cell(r, r.wire_bytes_total),
                _wire_cell(r, f"{r.byte_ratio * 100:.1f}"),
                f"{r.duration_seconds:.2f}",
                f"{r.throughput_bytes_per_second:.1f}",
                _sender_retransmits_cell(r),
                _wire_cell(r, r.retransmits_wire),
                "yes" if r.verified else "no",
                r.outcome,
                r.limited_by or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_COLUMNS))]
    lines = [
        "  ".join(
            cell.rjust(w) if TABLE_COLUMNS[i] not in _LEFT_ALIGNED else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    for r in results:
        if r.error:
            lines.append(f"{r.protocol}/{r.remote}/{r.dataset}/{r.direction}: {r.outcome}: {r.error}")
    for r in results:
        if r.limited_evidence:
            where = f" ({r.limited_side})" if r.limited_side else ""
            said = f"limited by {r.limited_by}{where}: " if r.limited_by else "not judged: "
            lines.append(f"{r.protocol}/{r.remote}/{r.dataset}/{r.direction}: {said}{r.limited_evidence}")
            if r.limited_next_step:
                lines.append(f"    next: {r.limited_next_step}")
    return "\n".join(lines)


def format_paths(paths: Sequence[PathBaseline]) -> str:
    """One line per probed path, before the transfers' table."""
    lines = []
    for b in paths:
        if not b.probes_sent:
            lines.append(f"path {b.remote}: not probed" + (f" ({b.error})" if b.error else ""))
            continue
        rtt = (
            "rtt min/avg/max/mdev "
            + "/".join(
                f"{(v or 0) * 1000:.2f}"
                for v in (b.rtt_min_seconds, b.rtt_avg_seconds, b.rtt_max_seconds, b.rtt_mdev_seconds)
            )
            + " ms"
            if b.probes_answered
            else "no answer"
        )
        bdp = f"BDP {b.bdp_bytes:.0f} B ({b.bandwidth_source})" if b.bdp_bytes else "BDP unknown"
        lines.append(
            f"path {b.remote}: {rtt}, loss {b.loss_ratio:.1%} of {b.probes_sent} {b.method} probes, "
            f"MTU {b.mtu_bytes or 'unknown'}, {bdp}" + (f" ({b.error})" if b.error else "")
        )
    return "\n".join(lines)


def cmd_once(args: argparse.Namespace) -> int:
    from bigbinf.service.collector import ExporterState
    from bigbinf.service.restore import restore
    from bigbinf.service.rounds import RoundRunner

    if hasattr(args, "mesh_file"):
        # A mesh site's outgoing tests once, now, one after another, outside the slot plan.
        view = load_mesh_site(args.mesh_file, getattr(args, "site", None))
        config, source = view.config, args.mesh_file
        print(
            f"once: warning: runs {view.site}'s tests now, outside the mesh's slot plan: they may overlap other "
            "sites' tests (for trying a site; the results are journaled but never size slots)",
            file=sys.stderr,
        )
    else:
        config, source = load_config(args.config_file), args.config_file
    check_secret_files(config, source)
    own_children()  # nothing this command starts outlives it
    take_passwords(config)  # out of the environment before anything runs
    runner = RoundRunner(config, ExporterState(), lab=lab.site)
    restore(runner.state, runner, config, lab.site)  # judged from what the running exporter knows
    runner.site = getattr(args, "site", "") if hasattr(args, "mesh_file") else ""
    try:
        ran = runner.run_round()
    finally:
        runner.spill_unwritten()  # what the journal could not take: to a second place, said where
    if ran is None:
        print("once: not started: a tuning sweep (or a round) is running against this journal", file=sys.stderr)
        return 1
    results = ran
    paths = format_paths(list(runner.state.snapshot().paths.values()))
    print(f"{paths}\n\n{format_table(results)}" if paths else format_table(results))
    return 1 if any(r.outcome in ("failed", "timeout") for r in results) else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from bigbinf.service.collector import ExporterState
    from bigbinf.service.restore import restore
    from bigbinf.service.rounds import RoundRunner
    from bigbinf.service.sweeps import SweepError, SweepRunner

    config = load_config(args.config_file)
    check_secret_files(config, args.config_file)
    own_children()
    take_passwords(config)  # out of the environment before anything runs
    runner = RoundRunner(config, ExporterState(), lab=lab.site)
    restore(runner.state, runner, config, lab.site)  # judged from what the running exporter knows
    try:
        run = SweepRunner(runner, progress=sys.stderr).run(args.sweep, wait=0)
    except SweepError as exc:
        print(f"sweep: {exc}", file=sys.stderr)
        return 2
    if run is None:
        print(f"sweep: not started: a round or another sweep is running against {config.journal.path}", file=sys.stderr)
        return 1
    print(f"sweep {run.name}: {len(run.results)} runs journaled as {run.sweep_id} in {config.journal.path}")
    return 1 if not run.results or all(r.outcome != "ok" for r in run.results) else 0


def cmd_journal_compact(args: argparse.Namespace) -> int:
    from bigbinf.fserrors import describe_os_error
    from bigbinf.journal import checkpoint
    from bigbinf.journal.store import BaselineJournal, Journal, baseline_path, check, segments, unmoved

    config = load_config(args.config_file)
    results = Journal(config.journal.path, config.journal.retention)
    baselines = BaselineJournal(baseline_path(config.journal.path), config.journal.retention)
    moved, problems = [], []
    for journal in (results, baselines):
        aside = journal.set_aside_unreadable()  # an unreadable live file: a new one (logged)
        moved += [aside] if aside is not None else []
        try:
            journal.rotate_now()
        except OSError as exc:  # a read-only, full or failing disk: said in one line, the rest still done
            problems.append(describe_os_error(exc, journal.path, "journal"))
        moved += check(journal.path)  # every part read through: a damaged one moved aside (logged)
    folds = {results.path: checkpoint.of(results), baselines.path: checkpoint.baselines_of(baselines)}
    for path, fold in folds.items():
        written = "checkpoint current" if fold.unsaved == 0 else f"checkpoint {fold.path} not written (see the log)"
        print(f"{path}: {len(segments(path))} closed segments, {written}")
        if fold.unsaved:
            problems.append(f"checkpoint {fold.path}: not written; the next start folds the journal again")
    for aside in moved:
        print(f"{aside}: damaged, moved aside (its readable results kept in the journal; see the log line)")
    for journal in (results, baselines):
        for part in unmoved(journal.path):
            problems.append(
                f"{part}: damaged, not moved aside (see the log line): free space or remount it rw, run again"
            )
    for problem in problems:
        print(f"journal-compact: {problem}", file=sys.stderr)
    return 1 if problems else 0


def cmd_advise(args: argparse.Namespace) -> int:
    from bigbinf.history.advice import AdviceError, advise

    config = load_config(args.config_file)
    try:
        print(advise(config, lab.site(config), args.remote, args.recent))
    except AdviceError as exc:
        print(f"advise: {exc}", file=sys.stderr)
        return 2
    return 0


# How long a stop (SIGTERM) may take, the round it cut included (issue 36: within 5 s).
STOP_SECONDS = 4.0
# And one that came after a transfer's command had ended by itself (its data moved): what
# finishes its result (the capture's drain and stop, the watchers' last listings, an
# upload's removal, the journal) is bounded step by step, and a busy host takes longer
# over it than STOP_SECONDS.  Past this, it is left as a kill leaves it.
MEASURED_STOP_SECONDS = 30.0


def cmd_serve(args: argparse.Namespace) -> int:
    from bigbinf.service.server import Exporter, ListenError

    if hasattr(args, "mesh_file"):
        # Loaded once: the listen address and the configuration come from the same load
        # (a clear error before anything starts).
        view = load_mesh_site(args.mesh_file, getattr(args, "site", None))
        exporter = Exporter(
            None,
            args.listen or view.listen,
            lab=lab.site,
            web_config_path=args.web_config_file,
            enable_lifecycle=args.enable_lifecycle,
            mesh_file=args.mesh_file,
            site=view.site,
            mesh_loader=load_mesh_site,
            mesh=view,
        )
    else:
        exporter = Exporter(
            args.config_file,
            args.listen or DEFAULT_LISTEN,
            lab=lab.site,
            web_config_path=args.web_config_file,
            enable_lifecycle=args.enable_lifecycle,
        )
    try:
        exporter.bind()
    except ListenError as exc:
        print(exc, file=sys.stderr)
        return 1
    own_children()  # nothing the exporter starts outlives it, however it ends
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    # SIGHUP reloads in a thread: the handler must return quickly.
    signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=exporter.reload, daemon=True).start())
    exporter.start()
    # Python runs signal handlers only in the main thread between bytecodes; an unbounded
    # wait would hold SIGHUP back until shutdown, so wake up regularly.
    while not stop.wait(0.5):
        pass
    log.info("shutting down")
    stopped_at = time.monotonic()
    exporter.stop(exiting=True)
    # The round the stop cut journals what it measured, or keeps it for the next start
    # (service/rounds.py); its last steps (a remote's last listing, an upload's removal)
    # get what is left of STOP_SECONDS, or of MEASURED_STOP_SECONDS where a transfer's
    # data had moved (process.measured).  Past that, what remains is left as a kill
    # leaves it, for the next start to finish (the round's note, the undo journal), and
    # the exporter exits: a stop ends within seconds (issue 36).
    bound = STOP_SECONDS
    idle = exporter.runner.wait_idle(bound - (time.monotonic() - stopped_at))
    if not idle and measured.is_set():
        log.info("a transfer had ended before the stop: waiting for its result to be journaled or kept")
        bound = MEASURED_STOP_SECONDS
        idle = exporter.runner.wait_idle(bound - (time.monotonic() - stopped_at))
    # What the journal could not take (its disk full or read-only) goes to a second place,
    # for the next start to journal (journal/store.py spill): said how many and where.
    exporter.runner.spill_unwritten()
    # The judged mark for what was judged since its last write (RoundRunner.write_mark):
    # the next start replays nothing of it.
    exporter.runner.write_mark()
    if not idle:
        log.warning("the round in progress did not end within %.0f s of the stop: the next start finishes it", bound)
        logging.shutdown()
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
