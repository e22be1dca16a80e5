"""The journal's scrub (service/scrub.py, issue 44): a sealed part damaged in place after a
start read it is found by reading every part through, moved aside as a start would (the
damaged file kept beside it, its readable results under its name), only while no round
holds the round lock, and a stop ends it between parts.  Truth: gzip's own check of each
file (`gzip -t`) and the results read back."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from bigbinf.journal.store import damaged, read, segments
from bigbinf.service import scrub

from .test_journal_damage import damage, index, journal_of


def gzip_reads(path: Path) -> bool:
    return subprocess.run(["gzip", "-t", str(path)], capture_output=True).returncode == 0


def test_a_part_damaged_in_place_is_found_and_moved_aside_the_rest_untouched(tmp_path: Path) -> None:
    journal = journal_of(tmp_path, days=4)
    parts = [s.path for s in segments(journal) if s.sealed]
    assert len(parts) >= 4 and all(gzip_reads(p) for p in parts)
    victim = parts[1]
    before = {p: p.read_bytes() for p in parts if p != victim}
    damage(victim, "crc")
    assert not gzip_reads(victim)
    done = scrub.scrub([journal], lambda timeout: True, threading.Event(), duty=0.0)
    assert done is not None
    read_through, size, moved = done
    assert read_through == len(parts) and size > 0
    assert len(moved) == 1 and moved == damaged(journal) and not gzip_reads(moved[0])
    assert moved[0].name.startswith(victim.name + ".damaged-")
    assert gzip_reads(victim)  # the salvage under the part's name reads whole
    assert all(p.read_bytes() == data for p, data in before.items())  # the others as they were
    kept = [index(r) for r in read(journal)]
    assert len(kept) == len(set(kept))  # each result once
    # A second scrub finds nothing more.
    again = scrub.scrub([journal], lambda timeout: True, threading.Event(), duty=0.0)
    assert again is not None and again[2] == []


def test_it_reads_only_while_no_round_holds_the_lock_and_a_stop_ends_it(tmp_path: Path) -> None:
    journal = journal_of(tmp_path, days=3)
    damage(next(s.path for s in segments(journal) if s.sealed), "crc")
    stopping = threading.Event()
    asked = []

    def busy(timeout: float) -> bool:  # a round running throughout: never idle, then a stop
        asked.append(timeout)
        if len(asked) == 3:
            stopping.set()
        return False

    assert scrub.scrub([journal], busy, stopping, duty=0.0) is None
    assert len(asked) == 3 and damaged(journal) == []  # nothing read while the round ran


def test_the_scrub_interval_is_a_duration_0_turning_it_off(tmp_path: Path) -> None:
    import pytest
    import yaml

    from bigbinf.config import ConfigError, load_config
    from tests.support.mesh import write_mesh_config

    config = write_mesh_config(tmp_path, 1, 1, 1)
    raw = yaml.safe_load(config.read_text())
    assert load_config(config).journal.scrub_interval == 86400.0  # the documented default
    for value, expected in (("6h", 6 * 3600.0), (0, 0.0)):
        config.write_text(yaml.safe_dump({**raw, "journal": {**raw["journal"], "scrub_interval": value}}))
        assert load_config(config).journal.scrub_interval == expected
    for bad in ("soon", -1, "500d"):
        config.write_text(yaml.safe_dump({**raw, "journal": {**raw["journal"], "scrub_interval": bad}}))
        with pytest.raises(ConfigError, match="scrub_interval"):
            load_config(config)
