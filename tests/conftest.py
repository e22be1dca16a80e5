"""Fixtures for tests through the real path: a private lab per test module.

Every lab gets a unique name (so a leftover from a killed run never collides) and is
torn down in a finalizer, which runs even when the test fails.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bigbinf import lab, process
from bigbinf.config import Config, parse_config
from bigbinf.lab import LabLayout
from tests.support import session


def _needs_root_and_tools() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    missing = [
        t
        for t in ("ip", "tc", "tcpdump", "sshd", "ssh", "scp", "ethtool")
        if not shutil.which(t) and not Path("/usr/sbin", t).exists()
    ]
    return f"missing tools: {', '.join(missing)} (run scripts/setup.sh)" if missing else None


# The modules that take longest (seconds of wall clock, mostly waiting on shaped links, on
# Prometheus' evaluation, on a busy host's CPUs), longest first: longest-processing-time
# first, so no worker is left with a long module at the end while the others idle.  Under
# pytest-xdist (`-n N --dist loadfile --no-loadscope-reorder`, scripts/test.sh) each
# module goes whole to a worker in this order (benchmarks/suite_schedule.py replays it).
# Only an order: a module missing here runs as well, after them; a module of a lab or a
# server belongs here (one left out runs last, and the suite ends with it).  Each module's
# time: its tests' times summed from the JUnit XML of a fresh-clone CI run (4 workers,
# 2 cores, load 15-20 from other work, 2026-12-02; docs/benchmarks.md "The test suite").
SLOWEST_FIRST = (
    # 857 s: the images built first on a fresh clone, the first round, Prometheus, an alert
    "tests/e2e/test_compose_stack.py",
    "tests/lab/test_protocols.py",  # 438 s: 70 transfers
    "tests/lab/test_stop.py",  # 423 s (one of its tests failed, after 300 s)
    "tests/lab/test_verdicts_plain_remote.py",  # 403 s
    "tests/lab/test_verdicts_plain_path.py",  # 377 s
    "tests/e2e/test_front_door_breaks.py",  # 315 s
    "tests/lab/test_verdicts_paths.py",  # 237 s: the confusion matrix
    "tests/lab/test_verdicts_plain_host.py",  # 232 s
    "tests/lab/test_sweeps.py",  # 229 s
    "tests/lab/test_verdicts_plain_bounds_hosts.py",  # 218 s
    "tests/lab/test_why_slow.py",  # 215 s
    "tests/lab/test_journal_disks.py",  # 214 s
    "tests/e2e/test_compose.py",  # 203 s: compose config of every service
    "tests/lab/test_mesh_proof.py",  # 198 s
    "tests/lab/test_interrupted_session.py",  # 183 s: four pytest sessions, each a lab, interrupted
    "tests/lab/test_verdicts_plain_bounds_router.py",  # 181 s
    "tests/lab/test_regression_lab.py",  # 178 s
    "tests/e2e/test_rules.py",  # 166 s alone at load 9-13 (not yet timed in CI): promtool, a process per file
    "tests/e2e/test_page_browser.py",  # 174 s
    "tests/lab/test_journal_upgrade.py",  # 152 s at load 8-20 (its branch's run): real serves on old journals
    "tests/lab/test_busy_host.py",  # 174 s
    "tests/lab/test_verdicts_programs.py",  # 171 s
    "tests/e2e/test_mesh_prometheus.py",  # 155 s: three sites' rounds, a central Prometheus
    "tests/e2e/test_web.py",  # 147 s
    # 309 s in a unit run of 2 workers at load 10-12 (2026-12-03), where the listed unit
    # modules took about twice the times given here: about 150 s on this list's scale, and
    # left out it was the suite's last module.  The modules below marked "(unit run)" are
    # placed the same way (half their times in that run).
    "tests/unit/test_judged_mark.py",  # 309 s (unit run): restarts from the judged mark against full re-judges
    "tests/e2e/test_front_door_reload.py",  # 142 s
    "tests/e2e/test_dashboards.py",  # 141 s: rounds until every baseline has minutes of data
    "tests/lab/test_verdicts_buffers.py",  # 141 s
    "tests/lab/test_analyser_worker.py",  # 137 s
    "tests/lab/test_leftovers.py",  # 137 s
    "tests/lab/test_tuning.py",  # 136 s
    "tests/unit/test_journal_damage.py",  # 125 s
    "tests/e2e/test_mesh_slots.py",  # 122 s
    "tests/unit/test_analyse.py",  # 119 s
    "tests/lab/test_capture.py",  # 115 s
    "tests/unit/test_analyser_worker.py",  # 102 s
    "tests/lab/test_verdicts_plain_ecn.py",  # 111 s at load 13: four CUBIC transfers through a CE-marking router
    "tests/lab/test_analyse.py",  # 91 s
    "tests/lab/test_transfer.py",  # 81 s
    "tests/lab/test_passive.py",  # 67-74 s at load 12-23 (its branch's run): transfers run by hand, watched
    "tests/lab/test_remote_view.py",  # 81 s
    "tests/unit/test_regression_state.py",  # 80 s
    "tests/unit/test_rounds.py",  # 79 s
    "tests/unit/test_journal.py",  # 79 s
    "tests/unit/test_mesh_plan.py",  # 75 s
    "tests/unit/test_regression_seasons.py",  # 66 s (unit run)
    "tests/unit/test_journal_chaos.py",  # 73 s
    "tests/lab/test_lab.py",  # 69 s
    "tests/lab/test_unprivileged.py",  # 67 s
    "tests/unit/test_config.py",  # 65 s
    "tests/e2e/test_service.py",  # 62 s
    "tests/lab/test_verdicts_plain_return_path.py",  # 62 s at load 24: two uploads, a slow return path
    "tests/lab/test_full_disk.py",  # 60 s
    "tests/unit/test_report.py",  # 55 s
    "tests/unit/test_hostile_config.py",  # 55 s
    "tests/lab/test_offloads.py",  # 50 s
    "tests/lab/test_mesh_lab.py",  # 50 s
    "tests/lab/test_ipv6.py",  # 49 s
    "tests/lab/test_probe.py",  # 48 s
    "tests/lab/test_moveplan_lab.py",  # 47 s
    "tests/e2e/test_prometheus.py",  # 44 s
    "tests/unit/test_bench_analyse.py",  # 43 s
    "tests/unit/test_sweeps.py",  # 42 s
    "tests/lab/test_errors.py",  # 42 s
    "tests/unit/test_mesh_runner.py",  # 39 s
    "tests/lab/test_mesh_exporter.py",  # 39 s
    "tests/unit/test_httpd.py",  # 38 s
    "tests/lab/test_tcpstate.py",  # 37 s
    "tests/unit/test_guardian.py",  # 37 s
    "tests/unit/test_exposition.py",  # 31 s
    "tests/unit/test_pages.py",  # 31 s
    "tests/unit/test_rules.py",  # 29 s
    "tests/lab/test_hostile_values.py",  # 27 s
    "tests/unit/test_regression_bad_days.py",  # 38 s (unit run)
    "tests/e2e/test_skipped.py",  # 26 s
    "tests/lab/test_iperf3.py",  # 26 s
    "tests/unit/test_verdicts_cache.py",  # 33 s (unit run)
    "tests/unit/test_architecture.py",  # 30 s (unit run)
    "tests/unit/test_journal_segments.py",  # 23 s
    "tests/unit/test_journal_takeback.py",  # 23 s (unit run)
    "tests/unit/test_regression.py",  # 23 s
    "tests/unit/test_importer.py",  # 22 s
    "tests/unit/test_judge_evidence.py",  # 22 s
    "tests/lab/test_serve.py",  # 22 s
    "tests/lab/test_passive_plain.py",  # 22 s alone at load 5-6 (2026-12-03): a plain site, transfers by hand
    "tests/unit/test_mesh_config.py",  # 20 s
    # Lab and server modules under 20 s (alone at load 5-6, 2026-12-03), listed so that none
    # is left for the end: Prometheus and Alertmanager, a node_exporter, labs.
    "tests/e2e/test_alerting.py",  # 16 s
    "tests/e2e/test_demo_graph.py",  # 10 s
    "tests/e2e/test_mesh_clock.py",  # 9 s
    "tests/e2e/test_backfill.py",  # 4 s
    "tests/lab/test_capture_cut_short.py",  # 3 s
    "tests/lab/test_route_window.py",  # 3 s
    "tests/lab/test_remote_names.py",  # 1 s
)


def _slowest_first(item: pytest.Item) -> int:
    path = Path(str(item.path)).relative_to(Path(__file__).resolve().parent.parent).as_posix()
    return SLOWEST_FIRST.index(path) if path in SLOWEST_FIRST else len(SLOWEST_FIRST)


REAPER = pytest.StashKey[session.Session]()


def pytest_configure(config: pytest.Config) -> None:
    """The session's reaper (tests/support/session.py): whatever the session leaves, when
    it ends however it ends, is removed.  Started by the controller (the only process
    without xdist), before the workers, which inherit its marker."""
    if not hasattr(config, "workerinput"):
        config.stash[REAPER] = session.Session()
    session.track_labs()
    session.interrupt_on_sigterm()


def pytest_unconfigure(config: pytest.Config) -> None:
    if REAPER in config.stash:
        config.stash[REAPER].finish()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_slowest_first)  # stable: every other module keeps its order
    reason = _needs_root_and_tools()
    if reason and not os.environ.get("CI"):
        for item in items:
            if "lab" in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))
    # In CI a lab test must run: a skipped lab test would make the suite pass vacuously.


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With BIGBINF_TEST_CPU=DIR, each test's wall time and the CPU time of this worker and
    of the children it waited for (exporters, analysers, promtool) go to DIR/<pid>.jsonl:
    where the suite's time goes on a CPU-bound machine (docs/benchmarks.md).

    Each test starts with the stop's flags clear: an exporter stopped in this worker by an
    earlier test set process.stopping, and every command tracked after it (a stats listing,
    a sysctl read, a transfer) would be ended at once, as in an exporter that is exiting."""
    process.stopping.clear()
    process.measured.clear()
    out_dir = os.environ.get("BIGBINF_TEST_CPU")
    if not out_dir:
        yield
        return
    start = time.monotonic()
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    yield
    own_after, children_after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {
        "test": item.nodeid,
        "wall": round(time.monotonic() - start, 3),
        "self": round(own_after.ru_utime + own_after.ru_stime - own.ru_utime - own.ru_stime, 3),
        "children": round(children_after.ru_utime + children_after.ru_stime - children.ru_utime - children.ru_stime, 3),
    }
    Path(out_dir).mkdir(parents=True, exist_ok=True)  # a directory not made yet is made, not an INTERNALERROR
    with open(Path(out_dir) / f"{os.getpid()}.jsonl", "a") as sink:
        sink.write(json.dumps(record) + "\n")


# A skip whose reason starts with this is a real "does not apply on this machine"
# (e.g. the binary a skip test needs absent is installed); every other skip is a
# missing tool or permission.
NOT_APPLICABLE = "not applicable here: "


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """Under CI a skipped test is a failure: a missing tshark, promtool or Go must not let
    the suite pass without its independent checks."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if NOT_APPLICABLE not in reason:
            report.outcome = "failed"
            report.longrepr = f"skipped under CI (every check must run here): {reason}"


# Lab servers drop privileges (xrootd, ftp), so the lab's tree must be reachable by other
# users: pytest's own temp dirs are 0700.
LAB_ROOT = Path("/var/tmp")


def lab_config(
    tmp: Path,
    name: str,
    link: dict | None = None,
    datasets: dict | None = None,
    protocols: dict | None = None,
    servers: list[str] | None = None,
    **sections: dict,
) -> Config:
    raw = {
        "lab": {
            "name": name,
            "state_dir": str(LAB_ROOT / f"bigbinf-{name}"),
            "link": link or {},
            **({"servers": servers} if servers is not None else {}),
        },
        # Few, quick probes: every round probes the path first (tests of the probe set their own).
        "remotes": {"lab": {"lab": True, "probe": {"count": 3, "interval": "20ms"}}},
        "datasets": datasets or {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": protocols or {"scp": {}},
        # Also reachable by other users: UDT's local GridFTP server writes as nobody.
        "transfer": {"workdir": str(LAB_ROOT / f"bigbinf-{name}" / "work"), "timeout": "2m"},
        "journal": {"path": str(tmp / "journal.jsonl")},
        "schedule": {"interval": "1h"},
    }
    raw.update(sections)
    return parse_config(yaml.safe_dump(raw), f"{tmp}/config.yaml")


def write_config(config_text_or_raw: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(config_text_or_raw))
    return path


@pytest.fixture
def unique_name() -> str:
    return session.unique_name()


class LabFactory:
    """Creates labs with unique names; tears every one of them down at the end."""

    def __init__(self, tmp_factory: pytest.TempPathFactory) -> None:
        self.tmp_factory = tmp_factory
        self.layouts: list[LabLayout] = []

    def __call__(self, **kwargs) -> Config:
        name = session.unique_name()  # claimed: no other session builds or removes it
        tmp = self.tmp_factory.mktemp(name)
        config = lab_config(tmp, name, **kwargs)
        self.layouts.append(LabLayout(config.lab))  # registered before up: a failed up is torn down too
        lab.up(config)
        return config

    def teardown(self) -> None:
        for layout in self.layouts:
            lab.teardown(layout)


@pytest.fixture
def make_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFactory]:
    """make_lab(link=..., datasets=...) -> a Config whose lab is up; torn down after the test."""
    factory = LabFactory(tmp_path_factory)
    yield factory
    factory.teardown()


@pytest.fixture(scope="module")
def make_module_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFactory]:
    """The same, shared by a module's tests (lab set-up costs seconds)."""
    factory = LabFactory(tmp_path_factory)
    yield factory
    factory.teardown()


def veth_counters(config: Config) -> dict[str, int]:
    """Kernel byte counters of the client's veth: rx = down (remote -> client), tx = up."""
    layout = LabLayout(config.lab)
    out = subprocess.run(
        ["ip", "-n", layout.client_ns, "-j", "-s", "link", "show", layout.client_if],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    stats = json.loads(out)[0]["stats64"]
    return {
        "down": stats["rx"]["bytes"],
        "up": stats["tx"]["bytes"],
        "packets_down": stats["rx"]["packets"],
        "packets_up": stats["tx"]["packets"],
    }


def quiet_veth_counters(config: Config, settle: float = 0.5, timeout: float = 15.0) -> dict[str, int]:
    """veth_counters once they have not moved for `settle` seconds: the last packets of
    connections made before (an sshd's banner and FIN after a connect probe, 20 ms late
    through a delay line, later on a busy machine) must not fall into a transfer's window."""
    last, deadline = veth_counters(config), time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(settle)
        now = veth_counters(config)
        if now == last:
            break
        last = now
    return last


def nstat_retrans(ns: str) -> int:
    """The namespace's kernel count of retransmitted TCP segments (TcpRetransSegs)."""
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "nstat", "-asz", "TcpRetransSegs"], capture_output=True, text=True, check=True
    ).stdout
    return int(next(line.split()[1] for line in out.splitlines() if line.startswith("TcpRetransSegs")))
