"""Analyses finished later (journal/pending.py, RoundRunner.finish_pending): a transfer
whose capture's analysis timed out or was cut by a stop is journaled once analysed,
with the capture's numbers (held to the pure-Python analyser on the same file), under
its own round id and start; one that times out MAX_ATTEMPTS times is journaled failed
saying what timed out; the round's note does not run it again meanwhile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bigbinf.journal import pending as pending_module
from bigbinf.journal.pending import MAX_ATTEMPTS, PendingAnalysis
from bigbinf.measure.wire.analyse import ENGINE_VARIABLE, analyse_pcap
from bigbinf.measure.wire.analyser_worker import AnalysisTimeout
from bigbinf.result import PathBaseline, Result
from bigbinf.service import rounds as rounds_module
from bigbinf.service.collector import ExporterState
from bigbinf.service.round_note import Note
from bigbinf.service.rounds import RoundRunner

from .test_analyse import CLIENT, REMOTE, handshake, seg, write
from .test_rounds import MAKE_FILE, _config

ROUND = "20261127T230000Z-abcdef"


@pytest.fixture(autouse=True)
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENGINE_VARIABLE, "python")  # the same numbers; no worker to start here


def _entry(runner: RoundRunner, tmp_path: Path, **kw: object) -> tuple[PendingAnalysis, Path]:
    """A pending analysis of a crafted capture, put in the runner's store as a transfer would."""
    # A handshake and 100 segments of 1000 bytes down, each ACKed: one data flow.
    flow = handshake()
    for i in range(100):
        flow += [
            (0.03 + i * 0.001, seg(True, 5001 + i * 1000, 1001, "PA", 1000)),
            (0.0305 + i * 0.001, seg(False, 1001, 6001 + i * 1000)),
        ]
    source = write(tmp_path / "capture.pcap", flow)
    measured = Result(
        "cmd",
        "here",
        "f1k",
        "download",
        1_800_000_000.0,
        "ok",
        round_id=ROUND,
        duration_seconds=2.0,
        file_bytes=100_000,
        wire_measured=False,
    )
    store = runner.pending
    pcap = store.adopt(source)
    values: dict[str, object] = {
        "result": measured,
        "pcap": str(pcap),
        "client_address": CLIENT,
        "remote_address": REMOTE,
        "mtu": None,
        "capture_packets": None,
        "capture_tool": "pcapdump",
        "transport": "tcp",
        "min_data_flows": 1,
        "keep_directory": "",
        "baseline": PathBaseline("here", 1_800_000_000.0),
        "reason": "the exporter stopped while the pcap analyser worked on it",
        **kw,
    }
    entry = PendingAnalysis(**values)  # type: ignore[arg-type]
    store.put(entry)
    return entry, pcap


def _runner(tmp_path: Path) -> RoundRunner:
    return RoundRunner(_config(tmp_path, {"cmd": MAKE_FILE}), ExporterState())


def test_a_pending_analysis_is_journaled_with_the_captures_numbers(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    entry, pcap = _entry(runner, tmp_path)
    truth = analyse_pcap(pcap, CLIENT, REMOTE, engine="python")
    # The round it belongs to was cut by the stop: its note names the series, which is
    # pending, so the next start does not run it again.
    runner.note.write(Note(ROUND, entry.result.start_timestamp, (entry.result.key,)))
    left = runner.unfinished()
    assert left is not None and left[1] == []
    (result,) = runner.finish_pending()
    (journaled,) = list(runner.journal.read())
    assert journaled == result
    assert (result.round_id, result.start_timestamp, result.outcome) == (ROUND, 1_800_000_000.0, "ok")
    assert result.wire_measured
    assert result.payload_bytes_down == truth.payload_bytes["down"] == 100_000
    assert result.packets_up == truth.packets["up"]
    assert not list(runner.pending.path.iterdir())  # record and capture gone
    assert runner.finish_pending() == []  # each once


def test_a_capture_that_shows_the_wrong_transport_fails_late_as_it_would_have_now(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    _entry(runner, tmp_path, transport="udp")
    (result,) = runner.finish_pending()
    assert result.outcome == "failed"
    assert "transport: expected UDP, >= 1 data flow; the capture saw TCP with 1 data flow" in result.error


def test_kept_captures_go_where_capture_keep_keeps_them(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    keep = tmp_path / "pcaps"
    _entry(runner, tmp_path, keep_directory=str(keep))
    (result,) = runner.finish_pending()
    assert Path(result.pcap_path).parent == keep and Path(result.pcap_path).stat().st_size > 0


def test_an_analysis_that_keeps_timing_out_is_journaled_failed_saying_what_timed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = _runner(tmp_path)
    _, pcap = _entry(runner, tmp_path)

    def hangs(entry: PendingAnalysis) -> Result:
        raise AnalysisTimeout(f"{entry.pcap}: the pcap analyser did not finish analysing it within 61 s")

    monkeypatch.setattr(rounds_module, "analyse_pending", hangs)
    for attempt in range(2, MAX_ATTEMPTS + 1):
        assert runner.finish_pending() == []  # kept for another try
        record = json.loads(pcap.with_suffix(".json").read_text())
        assert record["attempts"] == attempt and pcap.exists()
    (result,) = runner.finish_pending()
    assert result.outcome == "failed" and not result.wire_measured
    assert result.error == f"analysis: {pcap}: the pcap analyser did not finish analysing it within 61 s (3 attempts)"
    assert list(runner.journal.read()) == [result]
    assert not pcap.exists() and not list(runner.pending.path.iterdir())
    assert Path(result.pcap_path).parent == tmp_path / "pcaps"  # kept, to be analysed by hand


def test_journaled_then_killed_before_the_entry_went_is_not_journaled_twice(tmp_path: Path) -> None:
    runner = _runner(tmp_path)
    _entry(runner, tmp_path)
    (result,) = runner.finish_pending()
    again, _ = _entry(runner, tmp_path)  # the same transfer's entry, as a kill would leave it
    assert again.result.start_timestamp == result.start_timestamp
    assert runner.finish_pending() == []
    assert len(list(runner.journal.read())) == 1


def test_an_unreadable_record_and_a_capture_without_one_are_removed(tmp_path: Path) -> None:
    store = pending_module.PendingStore(tmp_path / "journal.jsonl")
    store.path.mkdir()
    (store.path / "a.json").write_text("{not json")
    (store.path / "a.pcap").write_bytes(b"x")
    (store.path / "b.pcap").write_bytes(b"x")
    assert list(store.entries()) == []
    assert list(store.path.iterdir()) == []
