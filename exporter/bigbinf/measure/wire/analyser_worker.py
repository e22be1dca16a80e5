"""The pcap analyser's compiled fast path, run in one long-lived worker process.

Importing numba and loading fastscan.py's machine code maps LLVM into the process that
does it: ~80-145 MB of RSS that stays for the life of the process (docs/benchmarks.md).
The exporter runs for months with an RSS target for everything else (issue 12), so its
live path (transfer.analyse) calls ``analyse_in_worker`` instead of ``analyse_pcap``:
the same arguments, the same ``Analysis``, the same exceptions with the same messages,
computed by ``analyse_pcap(engine="auto")`` in a worker process that imports numba
once and keeps the compiled code for every later capture.  Only the file's path goes
over and only the ``Analysis`` (a few hundred bytes) comes back.

* One worker, started by ``start()`` (the exporter's start) or at the first analysis
  (``once`` and the tests; ``--config.check`` never starts one).  Its first task is the
  warm-up: the fast path compiled (a fresh install: 2-7 s on a quiet host, 21 s beside
  two CPU burners on 2 cores, ~90 s at load 12-15) or loaded from numba's cache (~0.5 s).  Compiling is not analysing:
  an analysis waits for the warm-up without a deadline of its own (a busy host compiles
  slowly, it does not hang) and its deadline starts once the worker is ready.
* "spawn": a fresh interpreter.  Not fork: the exporter has threads (HTTP, scheduler,
  exposition) whose locks a forked child could inherit held.  Not forkserver: that adds
  a second resident helper process, for nothing when one worker lives for months.
* ``engine="python"`` (or ``BIGBINF_ANALYSER=python``), or no numba installed: the
  pure-Python path runs here, in-process; a worker would only add a process.
* Exceptions come back as raised: ``TruncatedCapture`` has an ``offset`` argument, which
  pickle's default for exceptions (``cls(*args)``) would drop and so fail to rebuild
  (and a result that fails to unpickle breaks the pool); every ``PcapError`` class gets
  a reducer that rebuilds it without calling ``__init__``.  An exception that still
  does not survive pickling is replaced by a ``PcapError`` (or ``RuntimeError``) with
  the same text, so the caller's ``except PcapError`` still holds.
* The worker dies (killed, OOM): the pool is broken.  The measurement is not lost: the
  call starts a new worker and retries once; if that fails too, the pure-Python path
  analyses in-process (logged once).  The next call tries a worker again.
* A worker that hangs (a stuck file system, a bug in the scan) is stopped after 60 s
  plus 1 s per 5 MB of capture counted from the warm-up's end, and the analysis fails
  with that reason (``AnalysisTimeout``, a ``PcapError`` naming the file and what timed
  out): the rounds go on, and the capture is kept and analysed again later
  (journal/pending.py).  A warm-up that has not ended in COMPILE_CEILING_SECONDS is taken
  for hung the same way.
* The exporter's stop (``stop``, ``shutdown``) gives an analysis in progress
  SHUTDOWN_GRACE_SECONDS (1 s: a stop ends within 5 s): one that takes longer raises
  ``AnalysisStopped`` (a ``PcapError``), not retried, and the caller keeps the capture
  for the next start (journal/pending.py).
* Nothing is left behind: ``shutdown()`` (the exporter's stop, and atexit) stops the
  worker and multiprocessing's resource tracker; the worker also exits by itself when
  this process dies, however it dies.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import copyreg
import importlib.util
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import shutil
import signal
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from bigbinf.measure.wire.analyse import Analysis, Engine, _engine, analyse_pcap
from bigbinf.measure.wire.pcap import PathLike, PcapError, mapped

__all__ = [
    "AnalysisStopped",
    "AnalysisTimeout",
    "analyse_in_worker",
    "shutdown",
    "start",
    "stop",
    "warm_up",
    "worker_pid",
]


class AnalysisTimeout(PcapError):
    """The worker did not finish in time: it is stopped, the capture has no wire numbers
    yet (the caller keeps it for another try)."""


class AnalysisStopped(PcapError):
    """The exporter stopped while the worker analysed: the capture is analysed at its next start."""


# How long an analysis may take before the worker is taken for hung (a stuck file system,
# a bug in the scan), counted once the warm-up has ended: a fixed allowance, plus
# the file read at 5 MB/s, ten times slower than the pure-Python engine that the worker
# falls back to for captures the fast path does not handle (docs/benchmarks.md).
_START_ALLOWANCE_SECONDS = 60.0
# At shutdown an analysis in progress may finish (the fast path reads ~2 GB/s) before
# the worker is killed; one that needs longer is finished at the next start (issue 36:
# a stop ends within 5 s, whatever the round was doing).
SHUTDOWN_GRACE_SECONDS = 1.0
# The warm-up (compiling, or loading numba's cache) is slow on a busy host, never hung
# in practice: 90 s was seen at load 12-15 on 2 cores.  Beyond this it is taken for hung.
COMPILE_CEILING_SECONDS = 1800.0
# A wait longer than this says what it waits for (the compiling, in the worker's log and
# in the analysis that waits for it); loading numba's cache takes well under it.
SAY_WAIT_SECONDS = 5.0
_SLOWEST_BYTES_PER_SECOND = 5e6

_log = logging.getLogger(__name__)
_lock = threading.Lock()  # guards _pool: the rounds thread analyses, stop() shuts down
# Shutdown and a new worker's start never interleave: a worker spawned while shutdown
# stops the resource tracker would hold the tracker's pipe open, and the tracker (which
# exits on that pipe's end) would never exit.  Taken before _lock, never inside it.
_lifecycle = threading.Lock()
TRACKER_EXIT_SECONDS = 5.0
_pool: ProcessPoolExecutor | None = None
_ready: Future[bool] | None = None  # the running pool's warm-up
# Counts shutdowns: an analysis that began before one (its generation is older) was
# stopped by it, and is not retried in a new worker.
_generation = 0
_stopped = False  # stop() was called (the exporter is stopping), start() not since
_fallback_logged = False
_missing_logged = False
# The worker's initializer and its arguments beyond the log level (a test swaps in one
# that makes every worker die, to see the in-process fallback).
_INITIALIZER: tuple[Callable[..., None], tuple[Any, ...]] | None = None


def analyse_in_worker(
    path: PathLike,
    client_address: str,
    remote_address: str,
    *,
    mtu: int | None = None,
    strict: bool = True,
    engine: Engine | None = None,
) -> Analysis:
    """``analyse_pcap``, with the compiled fast path run in the worker process (see the
    module docstring): the same arguments, result and exceptions."""
    if _engine(engine) == "python" or not _fast_path_installed():
        return analyse_pcap(path, client_address, remote_address, mtu=mtu, strict=strict, engine="python")
    name = os.fspath(path)
    generation = _generation
    if _stopped:
        raise AnalysisStopped(f"{name}: the exporter is stopping: analysed at its next start")
    for attempt in (1, 2):
        failure: BaseException
        pool, ready = _running_pool()
        try:
            future: Future[Analysis] = _submit(pool, _analyse, name, client_address, remote_address, mtu, strict)
        except (RuntimeError, OSError) as e:
            # A dead pool (BrokenProcessPool), one shut down meanwhile (RuntimeError), a
            # worker that could not be started (OSError).
            failure = e
        else:
            try:
                _wait_warm_up(pool, ready, name)
                deadline = _deadline_seconds(name)
                return future.result(timeout=deadline)  # the analysis' own exceptions come back as raised
            except (BrokenProcessPool, CancelledError) as e:  # the worker died (or was stopped) before or under it
                failure = e
            except TimeoutError:
                # Not retried now: the same capture would hang again.  The rounds go on.
                _discard(pool, grace_seconds=0.0)
                raise AnalysisTimeout(
                    f"{name}: the pcap analyser did not finish analysing it within {deadline:.0f} s (60 s + 1 s per "
                    "5 MB of capture, counted once the analyser was compiled) and was stopped: a stuck file system, "
                    "or a capture it cannot read"
                ) from None
        if generation != _generation:  # the exporter is stopping: no retry, no fallback
            raise AnalysisStopped(
                f"{name}: the exporter stopped while the pcap analyser worked on it (more than "
                f"{SHUTDOWN_GRACE_SECONDS:.0f} s left to do)"
            )
        _discard(pool)
        _log.warning("the pcap analyser's worker process failed (%s); attempt %d of 2", failure, attempt)
    global _fallback_logged
    if not _fallback_logged:
        _log.error("the pcap analyser's worker process failed twice; analysing with the pure-Python engine in-process")
        _fallback_logged = True
    return analyse_pcap(name, client_address, remote_address, mtu=mtu, strict=strict, engine="python")


def _wait_warm_up(pool: ProcessPoolExecutor, ready: Future[bool], name: str) -> None:
    """Wait for the worker's warm-up (compiling the fast path, or loading it): no
    analysis deadline runs meanwhile.  A warm-up past COMPILE_CEILING_SECONDS is hung."""
    try:
        try:
            ready.result(timeout=SAY_WAIT_SECONDS)
        except TimeoutError:  # compiling: this wait says what it waits for
            _log.info(
                "%s: waiting for the pcap analyser to finish compiling (about a minute on a busy host, once after "
                "an install) before analysing it",
                name,
            )
            ready.result(timeout=COMPILE_CEILING_SECONDS)
    except TimeoutError:
        _discard(pool, grace_seconds=0.0)
        raise AnalysisTimeout(
            f"{name}: the pcap analyser's worker did not finish compiling (or loading numba's cache) within "
            f"{COMPILE_CEILING_SECONDS:.0f} s and was stopped; set NUMBA_CACHE_DIR to a writable directory "
            "(docs/runbook.md)"
        ) from None


def start() -> None:
    """Start the worker and its warm-up now (the exporter's start), so that the first
    capture finds the analyser compiled; a no-op where analyses run in-process."""
    global _stopped
    _stopped = False
    if _engine(None) == "python" or not _fast_path_installed():
        return
    _running_pool()


def stop(exiting: bool = False) -> None:
    """The exporter's stop: shutdown(), and where the process is `exiting` (the serving
    exporter's own stop, cli.py) no worker is started again until start(): an analysis
    its rounds ask for meanwhile raises AnalysisStopped at once.  Otherwise (an Exporter
    stopped inside a longer-lived process, e.g. a test's) only shutdown(): that process
    goes on analysing.  (Not judged from process.own_children's marker: a test that
    called own_children left it set in its worker for every later test.)"""
    global _stopped
    _stopped = exiting
    shutdown()


def worker_pid() -> int:
    """The worker's process id, starting it if none runs (for tests and diagnostics)."""
    pid: Future[int] = _submit(_running_pool()[0], os.getpid)
    return pid.result()


def shutdown() -> None:
    """Stop the worker (an analysis in progress gets SHUTDOWN_GRACE_SECONDS, then is
    abandoned: the exporter is stopping) and multiprocessing's resource tracker; the
    next analysis starts a new worker.  The exporter's stop calls this, and atexit does."""
    global _generation
    with _lifecycle:
        with _lock:
            pool = _pool
            _generation += 1
        if pool is not None:
            _discard(pool, grace_seconds=SHUTDOWN_GRACE_SECONDS)
        _stop_resource_tracker()


atexit.register(shutdown)


def _fast_path_installed() -> bool:
    """Whether numba is there to import, without importing it here (that is the point)."""
    global _missing_logged
    if importlib.util.find_spec("numba") is not None:
        return True
    if not _missing_logged:
        _log.warning("the compiled pcap analyser is not available (numba is not installed); using the pure-Python one")
        _missing_logged = True
    return False


def _submit(pool: ProcessPoolExecutor, fn: Callable[..., Any], *args: Any) -> Future[Any]:
    """`fn(*args)` submitted to `pool`'s worker, never while shutdown() runs (the executor
    spawns its worker on the first submit); a pool shut down meanwhile raises RuntimeError."""
    with _lifecycle:
        return pool.submit(fn, *args)


def _running_pool() -> tuple[ProcessPoolExecutor, Future[bool]]:
    """The worker's pool and its warm-up (the first task of every new worker)."""
    global _pool, _ready
    # _lifecycle first (as shutdown takes them): the warm-up's submit spawns the worker.
    with _lifecycle, _lock:
        if _pool is None or _ready is None:
            initializer, extra = _INITIALIZER or (_start_worker, ())
            _pool = ProcessPoolExecutor(
                max_workers=1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=initializer,
                initargs=(logging.getLogger().getEffectiveLevel(), *extra),
            )
            try:
                _ready = _pool.submit(_warm)
            except (RuntimeError, OSError) as e:  # the analysis' own submit says it again
                _ready = Future()
                _ready.set_exception(BrokenProcessPool(str(e)))
        return _pool, _ready


def _deadline_seconds(name: str) -> float:
    try:
        size = os.stat(name).st_size
    except OSError:
        size = 0  # the worker reports the missing file itself
    return _START_ALLOWANCE_SECONDS + size / _SLOWEST_BYTES_PER_SECOND


def _discard(pool: ProcessPoolExecutor, grace_seconds: float | None = None) -> None:
    """Forget `pool` and stop its worker.  None: wait for it (a broken pool has already
    lost its worker).  Otherwise the worker is given `grace_seconds` to finish its task
    and exit by itself (its atexit handlers remove the private cache copy), then killed:
    0 for a hung one."""
    global _pool, _ready
    with _lock:
        if _pool is pool:
            _pool = _ready = None
    if grace_seconds is None:
        pool.shutdown(wait=True, cancel_futures=True)
        return
    # The executor offers no way to stop a running task; its worker processes and its
    # management thread are private attributes, read defensively.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)  # asks the worker to exit when idle
    deadline = time.monotonic() + grace_seconds
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(5)
    if manager is not None:
        manager.join(5)


def _stop_resource_tracker(timeout: float = TRACKER_EXIT_SECONDS) -> None:
    """Stop multiprocessing's resource tracker, a helper process that spawn starts and that
    otherwise lives until this one exits (with no worker left it has nothing to track).
    It exits when every holder of its pipe has closed it; should anything still hold it
    (a process spawned meanwhile), it is killed after `timeout` rather than waited for
    forever, as multiprocessing's own stop would."""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    lock = getattr(tracker, "_lock", None)
    if lock is None or not hasattr(tracker, "_fd") or not hasattr(tracker, "_pid"):
        return  # another Python's tracker: left to exit with this process
    with lock:
        fd, pid = tracker._fd, tracker._pid
        if fd is None or pid is None:
            return
        with contextlib.suppress(OSError):
            os.close(fd)
        tracker._fd = None
        tracker._pid = None
        deadline = time.monotonic() + timeout
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    _log.warning("multiprocessing's resource tracker (pid %d) did not exit: killed", pid)
                    os.kill(pid, signal.SIGKILL)  # it ignores SIGTERM and SIGINT
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.02)


# ------------------------------------------------------------------- in the worker


def _start_worker(log_level: int) -> None:
    """The worker's initializer: log like the exporter, leave Ctrl-C to the exporter
    (which stops the worker itself), exit with the exporter, and find numba's cache."""
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)s %(name)s (analyser worker): %(message)s")
    # --log.level debug is for bigbinf's own lines: numba's debug output (every IR node of
    # a compilation) slowed a first compilation past the analysis deadline on a busy host.
    logging.getLogger("numba").setLevel(max(log_level, logging.INFO))
    # A Ctrl-C reaches the whole foreground process group; the exporter then shuts the
    # worker down, and a worker killed by it mid-analysis would break the pool instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        # The worker waits on a pipe whose other end the exporter holds: if the exporter
        # is killed (SIGKILL, OOM) nothing would ever stop the worker.  The sentinel
        # becomes readable when the exporter is gone.
        threading.Thread(target=_exit_with, args=(parent.sentinel,), name="exit-with-parent", daemon=True).start()
    _private_cache_copy()


def _exit_with(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(0)


def _private_cache_copy() -> None:
    """numba uses a cache directory only if it can write to it (it tries a temporary
    file there), even to load: with a read-only NUMBA_CACHE_DIR (an image's cache run as
    another user, or a read-only root) it would compile again in every worker.  A
    private copy in a temporary directory keeps the image's compiled code usable; if
    even that fails numba compiles without a cache (fastscan._compiled), slower to start
    but correct."""
    cache = os.environ.get("NUMBA_CACHE_DIR")
    if not cache or not os.path.isdir(cache) or os.access(cache, os.W_OK | os.X_OK):
        return
    try:
        copy = tempfile.mkdtemp(prefix="bigbinf-numba-")
        shutil.copytree(cache, copy, dirs_exist_ok=True)
    except OSError as e:
        _log.warning("numba's cache %s is read-only and cannot be copied (%s): compiling the analyser", cache, e)
        return
    atexit.register(shutil.rmtree, copy, ignore_errors=True)
    os.environ["NUMBA_CACHE_DIR"] = copy  # read when numba is imported, after this
    _log.info("numba's cache %s is read-only: using a private copy in %s", cache, copy)


def _warm() -> bool:
    """The worker's first task: the fast path compiled or loaded (warm_up); False if it
    could not be (each analysis then finds out for itself, and says so).  Loading numba's
    cache takes well under a second on a quiet host; a warm-up still going after
    SAY_WAIT_SECONDS is most likely compiling, and says so (issue 47: 66 s of silence on a
    busy host), and then when it is ready."""
    started = time.monotonic()
    timer = threading.Timer(
        SAY_WAIT_SECONDS,
        _log.info,
        (
            "compiling the pcap analyser, about a minute on a busy host (numba, once after an install; or loading "
            "numba's cache of it, slow on a busy host)",
        ),
    )
    timer.daemon = True
    timer.start()
    try:
        warm_up()
    except Exception as e:
        _log.warning("the pcap analyser's warm-up failed (%s): each analysis compiles what it needs", e)
        return False
    finally:
        timer.cancel()
    _log.info("the pcap analyser is ready (compiled or loaded in %.1f s)", time.monotonic() - started)
    return True


def _analyse(name: str, client_address: str, remote_address: str, mtu: int | None, strict: bool) -> Analysis:
    """The task the worker runs: the analysis, its exception made to survive pickling."""
    try:
        return analyse_pcap(name, client_address, remote_address, mtu=mtu, strict=strict, engine="auto")
    except Exception as e:
        if _survives_pickling(e):
            raise
        stand_in = PcapError(str(e)) if isinstance(e, PcapError) else RuntimeError(f"{type(e).__name__}: {e}")
        raise stand_in from None


def _survives_pickling(e: BaseException) -> bool:
    try:
        copy = pickle.loads(pickle.dumps(e))
    except Exception:
        return False
    return type(copy) is type(e) and str(copy) == str(e)


# ------------------------------------------------- exceptions across the boundary


def _rebuild_exception(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> BaseException:
    exc = cls.__new__(cls, *args)  # sets .args; __init__ is not called (it may want more)
    exc.__dict__.update(state)
    return exc


def _reduce_exception(exc: BaseException) -> tuple[Any, ...]:
    return _rebuild_exception, (type(exc), exc.args, dict(exc.__dict__))


def _register_reducers(cls: type[BaseException]) -> None:
    # copyreg's table is what every pickler (multiprocessing's too) consults first; it
    # is per class, so every subclass is registered too.
    copyreg.pickle(cls, _reduce_exception)
    for sub in cls.__subclasses__():
        _register_reducers(sub)


_register_reducers(PcapError)


# ---------------------------------------------------------------- build-time warm-up


def _tiny_capture(path: Path, flows: int) -> None:
    """A classic pcap of `flows` TCP connections between 198.18.0.1 and 198.18.0.2 (two
    data segments each, one of them resent): what the fast path handles, with enough
    flows to grow its flow table, so every compiled function runs once."""
    records = []
    for index in range(flows):
        for seq, delay in ((1000, 0), (2000, 1), (1000, 200_000)):
            ip = struct.pack(
                "!BBHHHBBH4s4s",
                0x45,
                0,
                20 + 20 + 1000,
                0,
                0x4000,
                64,
                6,
                0,
                bytes([198, 18, 0, 2]),
                bytes([198, 18, 0, 1]),
            )
            tcp = struct.pack("!HHIIBBHHH", 5001, 40000 + index, seq, 1, 0x50, 0x18, 502, 0, 0)
            frame = b"\x02\x00\x00\x00\x00\x01\x02\x00\x00\x00\x00\x02\x08\x00" + ip + tcp + bytes(1000)
            records.append(struct.pack("<IIII", 1_700_000_000, index * 1000 + delay, 128, len(frame)) + frame[:128])
    path.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, 1) + b"".join(records))


def warm_up() -> Analysis:
    """Compile the fast path (or load it from numba's cache) by analysing a tiny crafted
    capture; fails if the fast path did not run.  The image build runs this
    (``python -m bigbinf.measure.wire.analyser_worker --warm-up``) so that numba's cache
    holds the machine code before the first worker starts."""
    from bigbinf.measure.wire import analyse as analyse_module
    from bigbinf.measure.wire import fastscan

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, "warm-up.pcap")
        _tiny_capture(path, 40)
        with mapped(str(path)) as buf:
            if analyse_module._fast_tally(str(path), buf, "198.18.0.1", "198.18.0.2", None, None) is None:
                raise RuntimeError("the compiled pcap analyser did not handle the warm-up capture")
        analysis = analyse_pcap(path, "198.18.0.1", "198.18.0.2", engine="auto")
    missing = [name for name in ("scan", "rehash") if not getattr(getattr(fastscan, name), "signatures", None)]
    if missing:
        raise RuntimeError(f"the warm-up did not compile {', '.join(missing)}")
    return analysis


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bigbinf.measure.wire.analyser_worker")
    parser.add_argument("--warm-up", action="store_true", help="compile the fast path into numba's cache")
    args = parser.parse_args(argv)
    if not args.warm_up:
        parser.error("nothing to do: give --warm-up")
    analysis = warm_up()
    print(f"pcap analyser compiled: {analysis.records} records analysed; cache {os.environ.get('NUMBA_CACHE_DIR', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
