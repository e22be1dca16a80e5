"""The journal's scrub through the real exporter (service/scrub.py, issue 44): a sealed
part damaged in place while the exporter runs (after its start read the journal) is found
without a restart, moved aside, counted by bigbinf_journal_damaged_segments and said in
the log.  Truth: gzip's own check of the files (`gzip -t`) and the results read back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from bigbinf.journal.store import damaged, segments

from ..support.exporter import ExporterProcess
from ..unit.test_journal_damage import damage
from .test_journal_disks import metric, site, wait
from .test_journal_upgrade import ids, single_file

pytestmark = pytest.mark.lab


def gzip_reads(path: Path) -> bool:
    return subprocess.run(["gzip", "-t", str(path)], capture_output=True).returncode == 0


def test_a_part_damaged_in_place_while_it_runs_is_found_by_the_scrub(tmp_path: Path) -> None:
    journal = tmp_path / "j" / "journal.jsonl"
    starts = single_file(journal, 400)  # 8 days: split into day parts at the start
    config = site(tmp_path, journal, interval="1h")
    raw = yaml.safe_load(config.read_text())
    raw["journal"]["scrub_interval"] = "2s"
    config.write_text(yaml.safe_dump(raw))
    log = tmp_path / "exporter.log"
    with ExporterProcess(config, log) as exporter:
        wait("the journal read", lambda: metric(exporter, "bigbinf_journal_loading") == 0, 120)
        parts = [s.path for s in segments(journal) if s.sealed]
        assert len(parts) >= 7 and all(gzip_reads(p) for p in parts)
        assert metric(exporter, "bigbinf_journal_damaged_segments") == 0
        victim = parts[3]
        damage(victim, "crc")
        assert not gzip_reads(victim)
        wait("the scrub to find it", lambda: metric(exporter, "bigbinf_journal_damaged_segments") == 1, 60)
        (aside,) = damaged(journal)
        assert aside.name.startswith(victim.name + ".damaged-") and not gzip_reads(aside)
        assert gzip_reads(victim)  # its readable results, under its name
        text = log.read_text()
        assert f"journal {victim}: damaged (" in text and "journal scrub: " in text
    kept = ids(journal)
    # Each result once; lost: what the damaged member held, less than its day's 48.
    assert max(kept.values()) == 1 and 0 < len(starts) - len(kept) < 48
