"""advise's history (bigbinf/history/advice.py `history`): each series' newest transfers
and each remote's last baseline from the journals' checkpoints, never the whole journal
for a series or remote that has no result at all (issue 45 b3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bigbinf.config import parse_config
from bigbinf.history import advice
from bigbinf.journal.store import Journal
from bigbinf.result import Result, SeriesKey

CONFIG = """
remotes: {lab: {address: 127.0.0.1, data_dir: /d, key: /k/id}, far: {address: 127.0.0.2, data_dir: /d, key: /k/id}}
datasets: {f32m: {file: f.bin, size: 32MiB}}
protocols: {http: {}, xrootd: {}}
journal: {path: JOURNAL}
"""
DAY = 86400.0


def test_a_series_never_run_and_a_remote_never_probed_do_not_read_the_whole_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = parse_config(CONFIG.replace("JOURNAL", str(tmp_path / "j.jsonl")), "test")
    journal = Journal(tmp_path / "j.jsonl")
    now = 1_800_000_000.0
    days = 60
    for d in range(days):  # http to lab once a day for 60 days; xrootd and `far` never
        t = now - (days - d) * DAY
        journal.append(Result("http", "lab", "f32m", "download", t, "ok", duration_seconds=2.0, file_bytes=32 * 2**20))
    reads: list[Any] = []
    real = Journal.read

    def spy(self: Journal, skipped: Any = None, since: float | None = None, until: float | None = None) -> Any:
        reads.append(since)
        return real(self, skipped, since, until)

    monkeypatch.setattr(Journal, "read", spy)
    series = {SeriesKey(p, r, "f32m", "download") for p in ("http", "xrootd") for r in ("lab", "far")}
    baselines, results = advice.history(config, {"lab", "far"}, series)
    assert None not in reads  # never the whole journal
    newest = max(r.start_timestamp for r in results if r.protocol == "http")
    assert newest == now - DAY  # each series' newest transfer all the same
    assert baselines == {}
