"""A busy data-transfer node (issue 36): beside two CPU burners, one per core, and with no
compiled analyser (an empty numba cache: a fresh install), the exporter's first round
is all ok, every transfer with its wire numbers.  Compiling is not analysing: the
analyser compiles at the exporter's start, and no capture's deadline runs meanwhile.

The truth: the journal's outcomes and wire numbers, the numba cache filled by this run
(it compiled rather than loaded), and the lab's client interface counters against the
bytes the captures saw.  How long the compile took beside the burners is printed (the
exporter logs it), not asserted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bigbinf.config import Config

from ..conftest import veth_counters
from ..support import chaos
from ..support.chaos import Chaos

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def site(make_module_lab) -> Config:
    return make_module_lab(link=chaos.LINK, datasets=chaos.DATASETS, protocols=chaos.PROTOCOLS, servers=chaos.SERVERS)


@contextmanager
def burners() -> Iterator[list[int]]:
    """A busy loop pinned to each CPU this process may use (two on the CI machine),
    killed on the way out whatever happened."""
    procs = [
        subprocess.Popen(["taskset", "-c", str(cpu), "sh", "-c", "while :; do :; done"], start_new_session=True)
        for cpu in sorted(os.sched_getaffinity(0))[:2]
    ]
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def test_the_first_round_beside_two_cpu_burners_without_a_compiled_analyser_is_all_ok(
    site: Config, tmp_path: Path
) -> None:
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    run = Chaos(site, tmp_path, list(chaos.LEAN), env={"NUMBA_CACHE_DIR": str(cache)})
    try:
        before = veth_counters(site)
        with burners():
            proc, seconds = run.run_round(timeout=1200)
            run.stop(proc)
        after = veth_counters(site)
        results = run.results()
        log = run.log.read_text(errors="replace")
        ready = re.findall(r"the pcap analyser is ready \(compiled or loaded in ([\d.]+) s\)", log)
        print(f"round: {seconds:.1f} s beside two burners; analyser ready after {ready} s")
        for r in results:
            print(f"{r.protocol} {r.direction}: {r.outcome} {r.duration_seconds:.2f} s {r.error}")
        assert len(results) == len(chaos.LEAN)
        assert [(r.protocol, r.direction, r.outcome, r.error) for r in results if r.outcome != "ok"] == []
        assert all(r.wire_measured for r in results)
        assert ready, "the analyser's warm-up did not say it was ready"
        assert list(cache.rglob("*.nbi")), "numba's cache is empty: the analyser did not compile into it"
        assert "did not finish" not in log and "Traceback" not in log
        # The captures saw at most what crossed the client's interface (each way), and the
        # transfers' data at least: the lab's link carries nothing else but the probes'.
        down = sum(r.wire_bytes_down for r in results)
        up = sum(r.wire_bytes_up for r in results)
        assert 0 < down <= after["down"] - before["down"]
        assert 0 < up <= after["up"] - before["up"]
    finally:
        run.cleanup()
