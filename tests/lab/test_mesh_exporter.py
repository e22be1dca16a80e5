"""One mesh site's exporter on the real path: a 2-site lab mesh, the exporter of `alpha`
(service/mesh_runner.py) running its slots of the plan with real transfers and captures.

A slot too short for its transfer (a budget of 2 s for 8 MiB over a 10 Mbit/s link) must
be recorded as overrun in the journal and on /metrics, and alpha's next test must wait
for it rather than overlap it: checked against the captures' own packet times.  beta's
test (beta -> alpha) is in the same plan but is never run by alpha's exporter.  Every
sample /metrics serves over HTTP carries site="alpha".
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from bigbinf import cli
from bigbinf.journal.store import Journal
from bigbinf.lab import mesh as labmesh
from bigbinf.mesh.config import exporter_of, load_mesh
from bigbinf.result import Result
from bigbinf.service.server import Exporter
from tests.support import session

from ..conftest import LAB_ROOT
from ..support.prometheus import free_port

pytestmark = pytest.mark.lab

INTERVAL = 60  # seconds between round starts


def _mesh_file(tmp: Path, name: str) -> Path:
    raw: dict[str, Any] = {
        "name": name,
        "lab": {
            "name": name,
            "state_dir": str(LAB_ROOT / f"bigbinf-{name}"),
            "subnet": f"198.19.{uuid.uuid4().int % 200 + 20}.0/24",
        },
        "sites": {
            site: {
                "link": {"rate": "10mbit"},
                "servers": ["nginx"],
                "probe": {"count": 3, "interval": "20ms", "mtu": False},
                "exporter": {"listen": f"127.0.0.1:{free_port()}", "journal": str(tmp / site / "journal.jsonl")},
            }
            for site in ("alpha", "beta")
        },
        "datasets": {"f8m": {"file": "f8m.bin", "size": "8MiB"}, "f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {"http": {}},
        "tests": [
            # ~6.7 s of traffic in a 2 s slot: an overrun.
            {"protocols": ["http"], "datasets": ["f8m"], "pairs": [["alpha", "beta"]], "budget": "2s"},
            # Planned to start 1 s (the guard) after that slot: it must wait instead.
            {"protocols": ["http"], "datasets": ["f1m"], "pairs": [["alpha", "beta"]], "budget": "20s"},
            # beta's own test: no exporter runs it here, and alpha's must not.
            {"protocols": ["http"], "datasets": ["f1m"], "pairs": [["beta", "alpha"]], "budget": "5s"},
        ],
        "schedule": {"interval": f"{INTERVAL}s", "guard": "1s"},
        "transfer": {"workdir": str(LAB_ROOT / f"bigbinf-{name}" / "work"), "timeout": "1m"},
    }
    path = tmp / "mesh.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _slotted(path: Path) -> list[Result]:
    return [r for r in Journal(path).read() if r.slot_start_timestamp is not None] if path.exists() else []


def test_an_overrun_slot_is_recorded_and_the_next_waits_for_it(tmp_path: Path) -> None:
    name = session.unique_name("bbx", 5)
    mesh_path = _mesh_file(tmp_path, name)
    mesh = load_mesh(mesh_path, lab=labmesh.layout)
    journal, listen = exporter_of(mesh, "alpha").journal, exporter_of(mesh, "alpha").listen
    exporter: Exporter | None = None
    try:
        labmesh.up(mesh)
        # Rounds start every INTERVAL s from UTC midnight.  An exporter started once this
        # round's slots have all begun joins at the next round, whole: started earlier it
        # would leave out the slots already begun and run the later ones of this round.
        while not 10 <= time.time() % INTERVAL <= INTERVAL - 10:
            time.sleep(0.5)
        exporter = Exporter(None, listen, mesh_file=mesh_path, site="alpha", mesh_loader=cli.load_mesh_site)
        exporter.start()
        deadline = time.monotonic() + INTERVAL + 90
        while len(_slotted(journal)) < 2 and time.monotonic() < deadline:
            time.sleep(1)
        results = _slotted(journal)
        assert [(r.site, r.remote, r.dataset) for r in results] == [("alpha", "beta", "f8m"), ("alpha", "beta", "f1m")]
        assert all(r.outcome == "ok" for r in results), [r.error for r in results]
        big, small = results
        assert big.round_id == small.round_id
        assert small.slot_start_timestamp == pytest.approx(big.slot_end_timestamp + 1.0)  # the guard

        # The first overran its slot, by its traffic's end (the capture's last packet included).
        assert big.last_packet_timestamp is not None and big.slot_end_timestamp is not None
        traffic_end = max(big.start_timestamp + big.duration_seconds, big.last_packet_timestamp)
        assert big.slot_overrun_seconds == pytest.approx(traffic_end - big.slot_end_timestamp)
        assert big.slot_overrun_seconds > 2.0
        # The second waited for it: planned to start during the first's traffic, it started
        # after the first's last packet, and ended within its own slot.
        assert small.slot_start_timestamp < big.last_packet_timestamp
        assert small.first_packet_timestamp is not None
        assert small.start_timestamp >= big.start_timestamp + big.duration_seconds
        assert small.first_packet_timestamp > big.last_packet_timestamp
        assert small.slot_overrun_seconds == 0.0

        series = 'dataset="{}",direction="download",protocol="http",remote="beta",site="alpha"'  # labels sorted
        done = 'bigbinf_transfers_total{dataset="f1m",direction="download",outcome="ok",protocol="http",'
        done += 'remote="beta",site="alpha"} 1.0'
        samples: list[str] = []
        for _ in range(20):  # the journal is written first; the rendering follows within moments
            with urllib.request.urlopen(f"http://{listen}/metrics", timeout=10) as response:
                samples = [line for line in response.read().decode().splitlines() if not line.startswith("#")]
            if done in samples:
                break
            time.sleep(0.5)
        assert done in samples
        assert all('site="alpha"' in line for line in samples if line)
        assert f"bigbinf_mesh_slot_overruns_total{{{series.format('f8m')}}} 1.0" in samples
        assert f"bigbinf_mesh_slot_overruns_total{{{series.format('f1m')}}} 0.0" in samples
        missed = 'dataset="f1m",direction="download",protocol="http",reason="{}",remote="beta",site="alpha"'
        for reason in ("late_start", "lock_held", "round_does_not_fit", "not_configured", "error"):
            assert f"bigbinf_mesh_slots_missed_total{{{missed.format(reason)}}} 0.0" in samples
        # A first start counts its site's slots of the round in progress that began before
        # it (issue 36): the f1m slot of that one round at most, where the start fell in it.
        down = f"bigbinf_mesh_slots_missed_total{{{missed.format('exporter_down')}}} "
        assert any(line in (down + "0.0", down + "1.0") for line in samples), [s for s in samples if down in s]
        assert any(line.startswith("bigbinf_mesh_plan_info{") for line in samples)
        assert not any('remote="alpha"' in line for line in samples)  # beta's test is not alpha's
    finally:
        if exporter is not None:
            exporter.stop()
        labmesh.down(mesh)
