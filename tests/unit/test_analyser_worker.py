"""bigbinf.measure.wire.analyser_worker: the fast analysis in one worker process, through the
real pool (spawned worker, numba in it).  The truth each test holds the worker to is
the in-process pure-Python engine (itself checked against scapy and tshark in
test_analyse.py), the byte offsets of the crafted files, and /proc."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from bigbinf.measure.wire import analyser_worker
from bigbinf.measure.wire.analyse import ENGINE_VARIABLE, EmptyCapture, PcapError, TruncatedCapture, analyse_pcap
from bigbinf.measure.wire.analyser_worker import analyse_in_worker, worker_pid
from tests.support import hung_worker
from tests.unit.test_analyse import CLIENT, FRAME, REMOTE, SCENARIOS, T0, classic_pcap, write


def _children() -> list[tuple[int, str]]:
    """(pid, command) of this process's live children, from /proc (zombies are reaped
    already or about to be: not left behind)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.append((int(entry.name), command))
    return found


@pytest.fixture(autouse=True, scope="module")
def no_process_left_behind() -> Iterator[None]:
    analyser_worker.shutdown()
    before = _children()
    yield
    analyser_worker.shutdown()
    assert _children() == before  # no worker, no resource tracker


@pytest.fixture(autouse=True)
def default_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENGINE_VARIABLE, raising=False)  # auto: the worker


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str, str]]:
    """Every crafted capture of test_analyse.py: common ones the fast path analyses,
    and the rest it hands to the Python path (in the worker too)."""
    directory = tmp_path_factory.mktemp("worker")
    return {
        name: (write(directory / f"{name}.pcap", sc.build(), **sc.options), sc.client, sc.remote)
        for name, sc in SCENARIOS.items()
    }


def test_the_worker_gives_the_python_engines_analysis_on_every_crafted_capture(
    captures: dict[str, tuple[Path, str, str]],
) -> None:
    for name, (path, client, remote) in captures.items():
        assert analyse_in_worker(path, client, remote) == analyse_pcap(path, client, remote, engine="python"), name
    # A link MTU and strict=False go over too (no handshake: the MTU sets the segment size).
    path, client, remote = captures["no_handshake_ipv6"]
    for mtu in (1500, 9000):
        expected = analyse_pcap(path, client, remote, mtu=mtu, strict=False, engine="python")
        assert analyse_in_worker(path, client, remote, mtu=mtu, strict=False) == expected
    pid = worker_pid()
    assert pid != os.getpid() and pid in [child for child, _ in _children()]  # it did run elsewhere


def test_errors_come_back_with_the_same_class_message_and_offset(
    captures: dict[str, tuple[Path, str, str]], tmp_path: Path
) -> None:
    pid = worker_pid()
    whole = captures["basic"][0].read_bytes()
    cut = tmp_path / "killed.pcap"
    cut.write_bytes(whole[:-10])  # inside the last record: a 54-byte ACK
    last_record = len(whole) - (16 + 54)
    good = (T0, 0, 64, FRAME)
    damaged = tmp_path / "damaged.pcap"  # beyond the snap length and past the end: framing lost
    damaged.write_bytes(classic_pcap([good, (T0, 0, 200, FRAME * 3)], snaplen=128)[:-10])
    skipped = tmp_path / "skipped.pcap"  # beyond the snap length, framing intact: skipped, counted
    skipped.write_bytes(classic_pcap([good, (T0, 0, 200, FRAME * 3), good], snaplen=128))

    def both(path: Path, **options: Any) -> tuple[PcapError, PcapError]:
        with pytest.raises(PcapError) as here:
            analyse_pcap(path, CLIENT, REMOTE, engine="python", **options)
        with pytest.raises(PcapError) as there:
            analyse_in_worker(path, CLIENT, REMOTE, **options)
        assert type(there.value) is type(here.value)
        assert str(there.value) == str(here.value)  # what transfer.py puts in the result
        return here.value, there.value

    here, there = both(cut)
    assert isinstance(there, TruncatedCapture) and isinstance(here, TruncatedCapture)
    assert there.offset == here.offset == last_record
    assert f"{cut}: the record at byte {last_record} runs past the end of the file" in str(there)
    _, there = both(damaged)
    assert f"{damaged}: damaged record at byte {24 + 16 + 64}: captured length 192 exceeds" in str(there)
    skipped_here = analyse_pcap(skipped, CLIENT, REMOTE, engine="python")
    assert analyse_in_worker(skipped, CLIENT, REMOTE) == skipped_here
    assert (skipped_here.damaged_records, skipped_here.damaged_at) == (1, 24 + 16 + 64)
    fifo = tmp_path / "capture.fifo"
    os.mkfifo(fifo)
    with ThreadPoolExecutor(max_workers=1) as pool:  # a hang would fail the test, not stall it
        future = pool.submit(analyse_in_worker, fifo, CLIENT, REMOTE)
        try:
            error = future.exception(timeout=30)
        finally:
            if not future.done():
                with open(fifo, "wb"):
                    pass
    assert isinstance(error, PcapError) and "not a regular file but a FIFO (named pipe)" in str(error)
    empty = tmp_path / "empty.pcap"
    empty.write_bytes(b"")
    _, there = both(empty)
    assert isinstance(there, EmptyCapture)
    _, there = both(tmp_path / "nowhere.pcap")
    assert "cannot read the capture" in str(there)
    _, there = both(captures["basic"][0], mtu=20)
    assert "MTU 20 is not a link MTU" in str(there)
    # Lenient, the cut file counts up to the cut, as in-process.
    assert analyse_in_worker(cut, CLIENT, REMOTE, strict=False) == analyse_pcap(
        cut, CLIENT, REMOTE, strict=False, engine="python"
    )
    assert worker_pid() == pid  # errors are answers: the worker lives on


def test_a_killed_worker_is_replaced_and_the_analysis_still_comes_out(
    captures: dict[str, tuple[Path, str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    path, client, remote = captures["random"]
    expected = analyse_pcap(path, client, remote, engine="python")
    pid = worker_pid()
    os.kill(pid, signal.SIGKILL)  # as the OOM killer would
    with caplog.at_level(logging.WARNING, logger=analyser_worker.__name__):
        assert analyse_in_worker(path, client, remote) == expected
    assert "the pcap analyser's worker process failed" in caplog.text
    assert "attempt 1 of 2" in caplog.text and "attempt 2" not in caplog.text  # one restart did it
    replacement = worker_pid()
    assert replacement != pid
    assert not Path(f"/proc/{pid}").exists()  # the dead one was reaped


def test_a_hung_worker_is_stopped_and_the_next_analysis_gets_a_new_one(
    captures: dict[str, tuple[Path, str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker whose analysis blocks, as a read from a stuck file system does.
    path, client, remote = captures["basic"]
    analyser_worker.shutdown()
    with monkeypatch.context() as stuck:
        stuck.setattr(analyser_worker, "_INITIALIZER", (hung_worker.start, ()))
        # The short allowance only for the stuck worker: the next analysis starts a new
        # one (numba loaded again), which on a busy machine can itself take seconds.
        pid = worker_pid()  # the stuck worker (only its analyses block)
        stuck.setattr(analyser_worker, "_START_ALLOWANCE_SECONDS", 2.0)
        with pytest.raises(
            analyser_worker.AnalysisTimeout,
            match=r"did not finish analysing it within 2 s .* counted once the analyser was compiled\) and was stopped",
        ):
            analyse_in_worker(path, client, remote)
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped, not left blocked
    assert analyse_in_worker(path, client, remote) == analyse_pcap(path, client, remote, engine="python")
    assert worker_pid() != pid


def test_a_slow_compile_is_not_counted_against_the_analysis(
    captures: dict[str, tuple[Path, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 36: at load 12-15 compiling took 90 s and the 60 s deadline failed a verified
    # transfer.  Here the warm-up takes 4 s longer than an allowance of 1 s: the analysis
    # waits for it and comes out.
    path, client, remote = captures["basic"]
    analyser_worker.shutdown()
    monkeypatch.setattr(analyser_worker, "_INITIALIZER", (hung_worker.start_slow_warm_up, ()))
    monkeypatch.setattr(analyser_worker, "_START_ALLOWANCE_SECONDS", 1.0)
    try:
        analyser_worker.start()  # the exporter's start: the warm-up begins before any capture
        assert analyse_in_worker(path, client, remote) == analyse_pcap(path, client, remote, engine="python")
    finally:
        analyser_worker.shutdown()


def test_a_compile_and_the_wait_for_it_say_what_they_wait_for(
    captures: dict[str, tuple[Path, str, str]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # Issue 47: 66 s of silence between the first transfer's start and its result while
    # numba compiled.  The worker says it is compiling once the warm-up has taken longer
    # than SAY_WAIT_SECONDS, and when it is done; the analysis waiting for it says so too.
    path, client, remote = captures["basic"]
    analyser_worker.shutdown()
    monkeypatch.setattr(analyser_worker, "_INITIALIZER", (hung_worker.start_slow_compile, ()))
    monkeypatch.setattr(analyser_worker, "SAY_WAIT_SECONDS", 0.5)
    caplog.set_level(logging.INFO)  # the worker logs at the level of the exporter's root logger
    try:
        analyser_worker.start()
        assert analyse_in_worker(path, client, remote) == analyse_pcap(path, client, remote, engine="python")
    finally:
        analyser_worker.shutdown()
    waited = [r.getMessage() for r in caplog.records if "waiting for the pcap analyser" in r.getMessage()]
    assert waited == [
        f"{path}: waiting for the pcap analyser to finish compiling (about a minute on a busy host, once after an "
        "install) before analysing it"
    ]
    worker = capfd.readouterr().err  # the worker logs to the stderr it shares with the exporter
    compiling = worker.index("compiling the pcap analyser, about a minute on a busy host")
    ready = re.search(r"the pcap analyser is ready \(compiled or loaded in ([\d.]+) s\)", worker)
    assert ready and ready.start() > compiling and float(ready.group(1)) >= 1.5, worker


def test_a_stop_mid_analysis_says_so_and_starts_no_other_worker(
    captures: dict[str, tuple[Path, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The exporter's stop while an analysis has more than the grace left: AnalysisStopped
    # (the caller keeps the capture for the next start), not a retry in a new worker.
    path, client, remote = captures["basic"]
    analyser_worker.shutdown()
    monkeypatch.setattr(analyser_worker, "_INITIALIZER", (hung_worker.start_slow_analysis, ()))
    pid = worker_pid()
    outcome: list[BaseException | object] = []

    def analyse() -> None:
        try:
            outcome.append(analyse_in_worker(path, client, remote))
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=analyse)
    thread.start()
    time.sleep(0.5)  # the analysis is submitted (the worker is up: worker_pid answered)
    analyser_worker.shutdown()
    thread.join(60)
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], analyser_worker.AnalysisStopped), outcome
    assert "the exporter stopped while the pcap analyser worked on it" in str(outcome[0])
    assert not Path(f"/proc/{pid}").exists()
    assert analyser_worker._pool is None  # no new worker was started for a retry


def test_when_no_worker_survives_the_python_engine_answers_in_process(
    captures: dict[str, tuple[Path, str, str]], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path, client, remote = captures["basic"]
    expected = analyse_pcap(path, client, remote, engine="python")
    analyser_worker.shutdown()
    # Every worker exits in its initializer (os._exit(log level)): both attempts fail.
    monkeypatch.setattr(analyser_worker, "_INITIALIZER", (os._exit, ()))
    monkeypatch.setattr(analyser_worker, "_fallback_logged", False)
    try:
        with caplog.at_level(logging.WARNING, logger=analyser_worker.__name__):
            assert analyse_in_worker(path, client, remote) == expected
            assert analyse_in_worker(path, client, remote) == expected
    finally:
        analyser_worker.shutdown()
    assert caplog.text.count("attempt 2 of 2") == 2
    assert caplog.text.count("failed twice; analysing with the pure-Python engine in-process") == 1  # once


def test_the_python_engine_never_starts_a_worker(
    captures: dict[str, tuple[Path, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, client, remote = captures["random"]
    expected = analyse_pcap(path, client, remote, engine="python")

    def no_worker() -> None:
        raise AssertionError("a worker was asked for")

    monkeypatch.setattr(analyser_worker, "_running_pool", no_worker)
    assert analyse_in_worker(path, client, remote, engine="python") == expected
    monkeypatch.setenv(ENGINE_VARIABLE, "python")
    assert analyse_in_worker(path, client, remote) == expected
    with pytest.raises(AssertionError, match="a worker was asked for"):
        analyse_in_worker(path, client, remote, engine="auto")  # the argument wins
    monkeypatch.setenv(ENGINE_VARIABLE, "numba")
    with pytest.raises(PcapError, match="BIGBINF_ANALYSER='numba' is not an analyser engine"):
        analyse_in_worker(path, client, remote)


def test_without_numba_the_python_engine_runs_in_process(
    captures: dict[str, tuple[Path, str, str]], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path, client, remote = captures["random"]
    expected = analyse_pcap(path, client, remote, engine="python")
    real_find_spec = analyser_worker.importlib.util.find_spec

    def numba_missing(name: str, *args: Any) -> Any:
        return None if name == "numba" else real_find_spec(name, *args)

    def no_worker() -> None:
        raise AssertionError("a worker was asked for")

    monkeypatch.setattr(analyser_worker.importlib.util, "find_spec", numba_missing)
    monkeypatch.setattr(analyser_worker, "_running_pool", no_worker)
    monkeypatch.setattr(analyser_worker, "_missing_logged", False)
    with caplog.at_level(logging.WARNING, logger=analyser_worker.__name__):
        assert analyse_in_worker(path, client, remote) == expected
    assert "numba is not installed" in caplog.text


# The exporter's RSS, measured in a fresh interpreter (this one has numba loaded by the
# other analyser tests): after its imports, then after one analysis, either through the
# worker or in-process.  What is mapped (/proc/self/maps) says whether LLVM came in.
RSS_PROBE = """
import json, sys, time
from bigbinf.measure import transfer  # the live path's imports, as in the exporter
from bigbinf.measure.wire.analyse import analyse_pcap
from bigbinf.measure.wire.analyser_worker import analyse_in_worker, shutdown

def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

way, path, client, remote = sys.argv[1:]
before = rss_kib()
started = time.monotonic()
if way == "worker":
    analysis = analyse_in_worker(path, client, remote)
else:
    analysis = analyse_pcap(path, client, remote, engine="auto")
first = time.monotonic() - started
after = rss_kib()
maps = open("/proc/self/maps").read()
print(json.dumps({
    "before_kib": before, "after_kib": after, "first_call_s": round(first, 3), "records": analysis.records,
    "numba_imported": "numba" in sys.modules, "llvm_mapped": "llvmlite" in maps,
    "analysis": repr(analysis),
}))
shutdown()
"""


def exporter_rss(way: str, path: Path, client: str, remote: str) -> dict[str, Any]:
    """One analysis in a fresh process, through the worker ("worker") or in-process
    ("in-process"); its RSS before and after, and what it loaded."""
    out = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, way, str(path), client, remote],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != ENGINE_VARIABLE},
    ).stdout
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


def report_rss(label: str, worker: dict[str, Any], in_process: dict[str, Any]) -> None:
    for way, numbers in (("through the worker", worker), ("in-process", in_process)):
        print(
            f"{label}: {numbers['records']} records, exporter RSS {numbers['before_kib'] / 1024:.1f} MiB before, "
            f"{numbers['after_kib'] / 1024:.1f} MiB after an analysis {way} (first call {numbers['first_call_s']} s)"
        )


def check_rss(label: str, path: Path, client: str, remote: str) -> None:
    worker = exporter_rss("worker", path, client, remote)
    in_process = exporter_rss("in-process", path, client, remote)
    report_rss(label, worker, in_process)
    assert worker["analysis"] == in_process["analysis"]
    # Through the worker the exporter never loads numba or maps LLVM; in-process it
    # does (so the check can tell), and that is what its RSS grows by.
    assert not worker["numba_imported"] and not worker["llvm_mapped"]
    assert in_process["numba_imported"] and in_process["llvm_mapped"]
    assert worker["after_kib"] - worker["before_kib"] < in_process["after_kib"] - in_process["before_kib"]


def test_the_exporters_rss_does_not_carry_numba(captures: dict[str, tuple[Path, str, str]]) -> None:
    check_rss("crafted many_flows", *captures["many_flows"])


def test_the_image_build_warm_up_compiles_the_fast_path(tmp_path: Path) -> None:
    # What the Dockerfile runs, into an empty cache directory: numba writes the
    # compiled functions there, and a second process finds them (no compilation).
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "NUMBA_CPU_NAME": "generic"}
    command = [sys.executable, "-m", "bigbinf.measure.wire.analyser_worker", "--warm-up"]
    out = subprocess.run(command, capture_output=True, text=True, check=True, env=env, timeout=300).stdout
    assert "pcap analyser compiled: 120 records analysed" in out  # 40 flows x 3 segments
    cached = {p.name.split("-")[0] for p in (tmp_path / "cache").rglob("*.nbi")}
    assert {"fastscan.scan", "fastscan.rehash"} <= cached
    started = time.monotonic()
    subprocess.run(command, capture_output=True, text=True, check=True, env=env, timeout=300)
    print(f"warm-up from the cache: {time.monotonic() - started:.2f} s")  # reported, not asserted


def test_shutdown_is_bounded_when_a_process_still_holds_the_resource_tracker(monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker spawned while shutdown ran (a mesh slot's analysis racing the exporter's
    # stop) held the tracker's pipe, and the tracker's stop waited for it forever (seen
    # in CI).  Here a worker the module no longer knows of holds the pipe the same way.
    from multiprocessing import resource_tracker

    orphan = worker_pid()
    tracker = resource_tracker._resource_tracker._pid
    assert tracker is not None
    monkeypatch.setattr(analyser_worker, "_pool", None)  # forgotten: shutdown does not stop it
    monkeypatch.setattr(analyser_worker, "TRACKER_EXIT_SECONDS", 1.0)
    try:
        done = threading.Thread(target=analyser_worker._stop_resource_tracker, args=(1.0,), daemon=True)
        started = time.monotonic()
        done.start()
        done.join(20)
        assert not done.is_alive(), "the resource tracker's stop waited for the process holding its pipe"
        assert time.monotonic() - started < 10
        assert not Path(f"/proc/{tracker}").exists()  # killed and reaped
    finally:
        os.kill(orphan, signal.SIGKILL)  # reaped by its executor's manager thread


def test_only_an_exiting_exporters_stop_refuses_later_analyses(captures: dict[str, tuple[Path, str, str]]) -> None:
    # An Exporter stopped inside a process that goes on (a test's, a pytest worker where an
    # earlier test ran process.own_children) must leave that process analysing; the serving
    # exporter's own stop (exiting) refuses at once until the next start (a CI run saw seven
    # later tests' transfers fail "the exporter is stopping" in one worker).
    path, client, remote = captures["basic"]
    expected = analyse_pcap(path, client, remote, engine="python")
    try:
        analyser_worker.stop()
        assert analyse_in_worker(path, client, remote) == expected
        analyser_worker.stop(exiting=True)
        with pytest.raises(analyser_worker.AnalysisStopped, match="the exporter is stopping"):
            analyse_in_worker(path, client, remote)
        analyser_worker.start()
        assert analyse_in_worker(path, client, remote) == expected
    finally:
        analyser_worker.start()  # not left refusing for the tests after this one
        analyser_worker.shutdown()
