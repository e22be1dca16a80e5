"""Tuning sweeps: a grid of settings of one protocol, run interleaved, journaled, judged.

A sweep (config `sweeps.NAME`) is the product of its dimensions: each module option it
lists (GridFTP parallel/concurrency/pipelining, iperf3 streams), the sender's congestion
control and the TCP buffer cap (the protocol options measure/tcp/tuning.py applies and reads
back).  Every setting runs on every dataset, `repetitions` times; the runs are
interleaved, round-robin over the settings with the order rotated each repetition, so
that a slow hour spreads over all settings instead of favouring one.

Each run is an ordinary transfer (measure/transfer.py: capture, verification, read-back
of the congestion control) of a protocol whose options are the setting's.  Its Result is
journaled with source "sweep", the sweep's name, run id and setting, and never recorded
into the scheduled series (ExporterState.record): the series' labels stay bounded, and
the exporter's restore (source "exporter" only) leaves them out.  What is published is
the verdict: per dataset, the best setting's mean throughput and its gain over the
baseline setting (ExporterState.record_sweep), until the sweep runs again.  The full
verdict, with confidence intervals and Welch's t-test, is study/sweep.py's
(`sweep-report`): it needs scipy, which the exporter does not.

A sweep takes the round lock (RoundRunner.exclusive): it never overlaps a round or
another sweep; a round due while a sweep runs is skipped and counted, like any round
that meets a running one.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from bigbinf import process
from bigbinf.config import Config, SweepConfig, TransferSelector, parse_size
from bigbinf.cron import crontab_trigger
from bigbinf.measure.plan import TransferSpec, plan_round
from bigbinf.measure.transfer import run_transfer
from bigbinf.protocols import REGISTRY, module_for
from bigbinf.result import Result
from bigbinf.service.collector import ExporterState, SweepBest
from bigbinf.service.rounds import RoundRunner, run_id

log = logging.getLogger(__name__)

SOURCE = "sweep"  # Result.source of a sweep's runs
CONGESTION = "congestion"
BUFFER = "tcp_buffer_max"


class SweepError(Exception):
    """A sweep that cannot run (unknown name, nothing planned)."""


# ---------------------------------------------------------------- the grid


def _size_label(value: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value % factor == 0:
            return f"{value // factor}{unit}"
    return str(value)


def _value_label(dimension: str, value: Any) -> str:
    if dimension == BUFFER:
        return _size_label(int(value))
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


@dataclass(frozen=True)
class Setting:
    """One point of the grid: (dimension, value) in the sweep's order of dimensions."""

    values: tuple[tuple[str, Any], ...]

    @property
    def label(self) -> str:
        """e.g. "parallel=4,congestion=bbr,tcp_buffer_max=256KiB" ("default" for an empty grid)."""
        return ",".join(f"{k}={_value_label(k, v)}" for k, v in self.values) or "default"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.values)

    @property
    def options(self) -> dict[str, Any]:
        return {k: v for k, v in self.values if k not in (CONGESTION, BUFFER)}


def dimensions(config: Config, name: str) -> dict[str, list[Any]]:
    """The sweep's dimensions in order: its options, then congestion, then tcp_buffer_max."""
    sweep = config.sweeps[name]
    dims: dict[str, list[Any]] = {k: list(v) for k, v in sweep.options.items()}
    if sweep.congestion:
        dims[CONGESTION] = list(sweep.congestion)
    if sweep.tcp_buffer_max:
        dims[BUFFER] = list(sweep.tcp_buffer_max)
    return dims


def settings(config: Config, name: str) -> list[Setting]:
    """Every setting of the grid, in a stable order (the product of the dimensions)."""
    dims = dimensions(config, name)
    return [Setting(tuple(zip(dims, combo, strict=True))) for combo in itertools.product(*dims.values())]


def baseline(config: Config, name: str) -> Setting:
    """The setting the best one is compared with: per dimension, the sweep's `baseline`,
    else the protocol's own value (its configured option or the module's default, its
    congestion, its tcp_buffer_max) where the grid has it, else the first value."""
    sweep = config.sweeps[name]
    proto = config.protocols[sweep.protocol]
    profile = REGISTRY[module_for(sweep.protocol, proto.module)]
    own = dataclasses.asdict(profile.option_values(proto.options))
    own[CONGESTION] = proto.congestion
    own[BUFFER] = proto.tcp_buffer_max
    values = []
    for dim, choices in dimensions(config, name).items():
        if dim in sweep.baseline:
            wanted = sweep.baseline[dim]
            value = parse_size(wanted) if dim == BUFFER else wanted
        else:
            value = own.get(dim)
        values.append((dim, value if value in choices else choices[0]))
    return Setting(tuple(values))


def run_order(n_settings: int, datasets: Sequence[str], repetitions: int) -> list[tuple[int, int, str]]:
    """(repetition, setting index, dataset) in the order they run: each repetition goes
    once round every setting (every dataset in turn for one setting), starting one
    setting further along than the last, so that no setting always runs first or last."""
    order = []
    for rep in range(repetitions):
        for k in range(n_settings):
            index = (k + rep) % n_settings
            for dataset in datasets:
                order.append((rep, index, dataset))
    return order


def spec_for(config: Config, name: str, setting: Setting, dataset: str, lab: Any = None) -> TransferSpec:
    """The transfer of one run: the sweep's protocol with the setting's options, congestion
    and buffer cap, planned like any scheduled transfer (measure/plan.py)."""
    sweep = config.sweeps[name]
    proto = config.protocols[sweep.protocol]
    values = setting.as_dict()
    update: dict[str, Any] = {"options": {**proto.options, **setting.options}}
    if CONGESTION in values:
        update["congestion"] = values[CONGESTION]
    if BUFFER in values:
        update["tcp_buffer_max"] = values[BUFFER]
    tuned = proto.model_copy(update=update)
    selector = TransferSelector(
        protocol=sweep.protocol, remote=sweep.remote, dataset=dataset, direction=sweep.direction
    )
    planned = config.model_copy(
        update={
            "protocols": {**config.protocols, sweep.protocol: tuned},
            "schedule": config.schedule.model_copy(update={"transfers": [selector]}),
        }
    )
    specs = plan_round(planned, lab)
    if len(specs) != 1:
        raise SweepError(f"sweeps.{name}: {sweep.protocol} cannot {sweep.direction} dataset {dataset}")
    return specs[0]


# ---------------------------------------------------------------- the verdict the exporter publishes


def retransmit_rate(r: Result) -> float | None:
    """Retransmitted segments per data segment sent: the sender's count where known (the
    kernel's or iperf3's), else the capture's; None if nothing was sent."""
    segments = r.packets_down if r.direction == "download" else r.packets_up
    retransmits = r.retransmits_sender if r.retransmits_sender is not None else r.retransmits_wire
    return retransmits / segments if segments > 0 else None


def bests(results: Iterable[Result], config: Config | None = None) -> list[SweepBest]:
    """Per sweep run and dataset: the setting with the highest mean throughput over its ok
    runs, and its gain over the baseline setting (the run's journaled baseline label)."""
    by_run: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        if r.source == SOURCE and r.sweep:
            by_run[(r.sweep_name, r.sweep)].append(r)
    out = []
    for (name, sweep_run), runs in by_run.items():
        base = _baseline_label(runs, config, name)
        for dataset in sorted({r.dataset for r in runs}):
            means = _means([r for r in runs if r.dataset == dataset])
            if not means:
                continue
            label, best = max(means.items(), key=lambda item: (item[1], item[0]))
            gain = best / means[base] if base in means and means[base] > 0 else None
            ended = max(r.start_timestamp for r in runs if r.dataset == dataset)
            out.append(SweepBest(name, sweep_run, dataset, label, best, gain, ended))
    return out


def _means(runs: Iterable[Result]) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for r in runs:
        if r.outcome == "ok":
            values[r.sweep_label].append(r.throughput_bytes_per_second)
    return {label: statistics.fmean(v) for label, v in values.items()}


BASELINE_KEY = "baseline"  # in a run's sweep_setting: the label of the run's baseline setting


def _baseline_label(runs: Sequence[Result], config: Config | None, name: str) -> str:
    for r in runs:
        label = r.sweep_setting.get(BASELINE_KEY)
        if isinstance(label, str):
            return label
    if config is not None and name in config.sweeps:
        return baseline(config, name).label
    return ""


def latest_bests(results: Iterable[Result], sweeps: Iterable[str]) -> dict[str, list[SweepBest]]:
    """The last run of each named sweep, from a journal: what the exporter publishes at
    start, until the sweep runs again."""
    wanted = set(sweeps)
    last: dict[str, tuple[float, str]] = {}
    kept: list[Result] = []
    for r in results:
        if r.source != SOURCE or r.sweep_name not in wanted:
            continue
        kept.append(r)
        if r.sweep_name not in last or r.start_timestamp >= last[r.sweep_name][0]:
            last[r.sweep_name] = (r.start_timestamp, r.sweep)
    latest_runs = {run_id for _, run_id in last.values()}
    out: dict[str, list[SweepBest]] = defaultdict(list)
    for b in bests(r for r in kept if r.sweep in latest_runs):
        out[b.sweep].append(b)
    return dict(out)


# ---------------------------------------------------------------- running


@dataclass(frozen=True)
class SweepRun:
    name: str
    sweep_id: str
    results: tuple[Result, ...]
    bests: tuple[SweepBest, ...]


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


class SweepRunner:
    """Runs sweeps of the runner's current config under its round lock; journals each run
    (source "sweep"), then publishes the verdict."""

    def __init__(self, runner: RoundRunner, progress: TextIO | None = None) -> None:
        self.runner = runner
        self.progress = progress

    @property
    def state(self) -> ExporterState:
        return self.runner.state

    def run(self, name: str, wait: float | None = None) -> SweepRun | None:
        """Run sweep `name` now; None if the round lock was not free within `wait` seconds
        (None: wait for the running round) or the exporter is stopping."""
        config = self.runner.config
        if name not in config.sweeps:
            raise SweepError(f"no sweep named {name!r}; configured: {', '.join(config.sweeps) or 'none'}")
        if not self.runner.exclusive(wait):
            log.warning("sweep %s not started: a round or another sweep is running", name)
            return None
        try:
            return self._run(config, name)
        finally:
            self.runner.release()

    def _run(self, config: Config, name: str) -> SweepRun:
        sweep: SweepConfig = config.sweeps[name]
        grid = settings(config, name)
        base = baseline(config, name)
        lab = self.runner.lab(config)
        order = run_order(len(grid), sweep.datasets, sweep.repetitions)
        specs = {(i, d): spec_for(config, name, s, d, lab) for i, s in enumerate(grid) for d in sweep.datasets}
        sweep_id = f"{name}-{run_id()}"
        self._say(
            f"sweep {name} ({sweep_id}): {len(grid)} settings x {len(sweep.datasets)} datasets x "
            f"{sweep.repetitions} repetitions = {len(order)} runs; baseline {base.label}"
        )
        paths = self.runner.probe_paths([next(iter(specs.values()))])
        results: list[Result] = []
        start = time.monotonic()
        for number, (rep, index, dataset) in enumerate(order, start=1):
            if self.runner.stopping.is_set():
                break
            setting = grid[index]
            spec = specs[(index, dataset)]
            self.runner.recent.running(f"sweep {sweep_id}: {spec.label} ({setting.label})")
            try:
                result = run_transfer(spec, config, sweep_id, paths.get(spec.remote.name))
            finally:
                self.runner.recent.running(None)
                process.measured.clear()  # a sweep's run is journaled below or not at all: no stop waits for it
            if self.runner.stopping.is_set():
                break  # killed by our own shutdown: not a measurement
            result = dataclasses.replace(
                result,
                source=SOURCE,
                sweep_name=name,
                sweep=sweep_id,
                sweep_setting={**setting.as_dict(), BASELINE_KEY: base.label},
                sweep_label=setting.label,
                sweep_repetition=rep + 1,
            )
            self._journal(result)
            results.append(result)
            elapsed = time.monotonic() - start
            eta = elapsed / number * (len(order) - number)
            outcome = f"{result.throughput_bytes_per_second / 1e6:.2f} MB/s" if result.outcome == "ok" else ""
            self._say(
                f"[{number}/{len(order)}] setting {index + 1} of {len(grid)} ({setting.label}), {dataset}, "
                f"repetition {rep + 1}/{sweep.repetitions}: {result.outcome} {outcome}"
                f"{' (' + result.error + ')' if result.error else ''}; ETA {_duration(eta)}"
            )
        found = bests(results, config)
        if results and not self.runner.stopping.is_set():
            self.state.record_sweep(name, found)
            self.runner.note_moves(results)  # a sweep's settings are options for the moves too
        for b in found:
            gain = f"{b.gain_ratio:.2f}x the baseline" if b.gain_ratio is not None else "baseline has no ok run"
            self._say(
                f"sweep {name}, {b.dataset}: best {b.setting} at {b.throughput_bytes_per_second / 1e6:.2f} MB/s, {gain}"
            )
        return SweepRun(name, sweep_id, tuple(results), tuple(found))

    def _journal(self, result: Result) -> None:
        try:
            self.runner.journal.append(result)
        except OSError as exc:
            self.runner.not_journaled(self.runner.journal, exc, "sweep run")
        self.runner.journal_health()
        self.runner.recent.add(result)

    def _say(self, line: str) -> None:
        if self.progress is not None:  # the `sweep` command: the terminal, once
            print(line, file=self.progress, flush=True)
        else:  # the exporter: its log
            log.info("%s", line)


def restore(state: ExporterState, results: Iterable[Result], config: Config) -> int:
    """Publish each configured sweep's last run from the journal (at start)."""
    found = latest_bests(results, config.sweeps)
    for name, found_bests in found.items():
        state.record_sweep(name, found_bests)
    return len(found)


# ---------------------------------------------------------------- scheduling (service/server.py)

JOB_PREFIX = "sweep:"


def _scheduled(sweeper: SweepRunner, name: str) -> None:
    try:
        sweeper.run(name, wait=None)  # waits for a running round, then holds the lock
    except Exception:  # a bug must not kill the scheduler thread silently
        log.exception("sweep %s failed", name)


def schedule_all(scheduler: Any, sweeper: SweepRunner, config: Config) -> list[str]:
    """(Re)schedule every sweep that has a `schedule` (cron, in schedule.timezone) on the
    exporter's scheduler, replacing the jobs of the previous configuration."""
    from apscheduler.triggers.combining import OrTrigger

    for job in scheduler.get_jobs():
        if str(job.id).startswith(JOB_PREFIX):
            scheduler.remove_job(job.id)
    scheduled = []
    for name, sweep in config.sweeps.items():
        if not sweep.schedule:
            continue
        crons = [crontab_trigger(expr, config.schedule.timezone) for expr in sweep.schedule]
        scheduler.add_job(
            _scheduled,
            OrTrigger(crons) if len(crons) > 1 else crons[0],
            args=(sweeper, name),
            id=JOB_PREFIX + name,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=3600,
        )
        scheduled.append(name)
    return scheduled
