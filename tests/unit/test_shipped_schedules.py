"""The shipped schedules say what the study and the lab measure (test_config.py checks
that every shipped file loads; this checks what they contain, through the plan)."""

from __future__ import annotations

from pathlib import Path

from bigbinf import lab
from bigbinf.config import load_config
from bigbinf.measure.plan import plan_round

SCHEDULES = Path(__file__).resolve().parents[2] / "schedules"
MiB, GiB = 2**20, 2**30


def test_the_study_schedule_has_the_studys_sizes_set_protocols_times_and_rounds() -> None:
    config = load_config(SCHEDULES / "study.yaml")
    singles = sorted(ds.size for ds in config.datasets.values() if ds.count == 1)
    assert singles == [5 * MiB, 512 * MiB, 1 * GiB, int(1.5 * GiB), 2 * GiB, int(2.4 * GiB)]
    assert [(ds.count, ds.size) for ds in config.datasets.values() if ds.count > 1] == [(1000, MiB)]
    assert sorted(config.schedule.cron) == ["0 13 * * *", "0 3 * * *"]
    assert config.schedule.rounds == 5

    modules = {name: (p.module or name, p.options) for name, p in config.protocols.items()}
    # The study's five...
    assert modules["scp"][0] == "scp" and modules["ftp"][0] == "ftp" and modules["hpn-scp"][0] == "hpnscp"
    assert modules["gridftp"] == ("gridftp", {}) and modules["gridftp-udt"] == ("gridftp", {"udt": True})
    # ...the NCSA study's GridFTP knobs, bbFTP, and the others.
    knobs = [opts for module, opts in modules.values() if module == "gridftp"]
    for knob in ({"parallel": 4}, {"concurrency": 4}, {"pipelining": True}):
        assert knob in knobs
    assert {"bbftp", "sftp", "rsync", "rsyncd", "http", "xrootd", "iperf3"} <= set(modules)

    specs = plan_round(config, lab.site(config))
    many = {s.protocol for s in specs if s.dataset_config.count > 1}
    assert {"scp", "rsync", "rsyncd", "sftp", "ftp", "xrootd", "gridftp", "gridftp-cc4", "gridftp-pp"} <= many
    assert not many & {"http", "iperf3", "gridftp-udt", "bbftp"}  # no directory transfer in these
    assert (
        next(s for s in specs if s.protocol == "gridftp-cc4" and s.dataset_config.count > 1).expectation.min_data_flows
        == 4
    )


def test_the_lab_schedule_shows_many_files_uploads_and_the_rsync_daemon() -> None:
    config = load_config(SCHEDULES / "lab.yaml")
    specs = plan_round(config, lab.site(config))
    many = [s for s in specs if s.dataset_config.count > 1]
    assert many and all(s.dataset_config.count * s.dataset_config.size <= 32 * MiB for s in many)  # quick in a round
    assert {s.protocol for s in specs if s.direction == "upload"} >= {"scp", "gridftp", "rsync"}
    assert {s.protocol for s in specs if s.direction == "upload" and s.dataset_config.count > 1} >= {"scp", "rsync"}
    assert "rsyncd" in {s.protocol for s in specs}


def test_the_demo_stays_small() -> None:
    # The demo runs a round every minute at 200 Mbit/s (~25 MB/s): its downloads must
    # stay far below what a minute can carry, with every protocol.
    config = load_config(SCHEDULES / "demo.yaml")
    moved = sum(s.dataset_config.size * s.dataset_config.count for s in plan_round(config, lab.site(config)))
    assert moved <= 25e6 * 60 * 0.75, moved
