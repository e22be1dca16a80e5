"""Import of hand-written 2015 testbed .dump files into the journal."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import io
import itertools
import json
from pathlib import Path

import pytest

from bigbinf.journal.store import Journal
from bigbinf.result import PAYLOAD_BUCKETS
from bigbinf.study import importer
from bigbinf.study.importer import MalformedDump, parse_dump, parse_packets, parse_start, read_packets

UTC = dt.UTC
START = dt.datetime(2015, 8, 21, 13, 0, 1, 123456, tzinfo=UTC).timestamp()

WITH_PACKETS = {
    "batch_id": "b3f1c2",
    "protocol": "hpn-scp",
    "file_size": 5242880,
    "utc_start_time": "2015-08-21 13:00:01.123456",
    "host_from": "SANBI-VM.uwc.ac.za",
    "host_to": "137.158.0.9",
    "bytes_down": 2896,
    "bytes_up": 52,
    "bytes_total": 2948,
    "time": 0.5,
    "stored_packets": True,
    "packets": [
        {"direction": "up", "time": "13:00:01.200000", "length": 0},
        {"direction": "down", "time": "13:00:01.250000", "length": 1448},
        {"direction": "down", "time": "13:00:01.500000", "length": 1448},
        {"direction": "up", "time": "13:00:01.700000", "length": 52},
    ],
}
WITHOUT_PACKETS = {
    "batch_id": 7,
    "protocol": "gridftp-udt",
    "file_size": 2540610608,
    "utc_start_time": "2015-08-22T03:00:05",
    "host_from": "196.24.44.10",
    "host_to": "137.158.0.9",
    "bytes_down": 2636682223,
    "bytes_up": 799058,
    "bytes_total": 2637481281,
    "time": 115.3,
    "stored_packets": False,
}


def write_dump(directory: Path, name: str, content: object) -> Path:
    path = directory / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.fixture()
def dumps(tmp_path: Path) -> Path:
    d = tmp_path / "packet_dumps"
    d.mkdir()
    write_dump(d, "hpn-scp_5MiB.dat_2015-08-21_13:00:01.dump", WITH_PACKETS)
    write_dump(d, "gridftp-udt_file_2.4G_2015-08-22_03:00:05.dump", WITHOUT_PACKETS)
    write_dump(d, "scp_5MiB.dat_2015-08-21_13:01:00.dump", '{"batch_id": "b3f1c2", "protocol": "scp", ')  # torn
    missing = dict(WITHOUT_PACKETS, protocol="ftp")
    del missing["bytes_up"]
    write_dump(d, "ftp_file_2.4G_2015-08-22_03:02:00.dump", missing)
    bad_packet = dict(WITH_PACKETS, protocol="scp", packets=[{"direction": "sideways", "time": "1:2:3", "length": 1}])
    write_dump(d, "scp_5MiB.dat_2015-08-21_13:03:00.dump", bad_packet)
    return d


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bigbinf-exporter")
    importer.register(p.add_subparsers())
    return p


def run(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    return args.func(args)


def test_import_maps_fields_and_reports_malformed(
    tmp_path: Path, dumps: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal_path = tmp_path / "state" / "journal.jsonl"
    assert run(["import", "--journal", str(journal_path), str(dumps)]) == 1  # some were skipped
    err = capsys.readouterr().err
    assert "scp_5MiB.dat_2015-08-21_13:01:00.dump: not JSON" in err
    assert "ftp_file_2.4G_2015-08-22_03:02:00.dump: missing field bytes_up" in err
    assert "scp_5MiB.dat_2015-08-21_13:03:00.dump: packets[0].direction is 'sideways'" in err
    assert "2 imported, 0 already in the journal, 3 malformed (skipped)" in err

    results = {r.protocol: r for r in Journal(journal_path).read()}
    assert set(results) == {"hpn-scp", "gridftp-udt"}
    hpn = results["hpn-scp"]
    assert (hpn.remote, hpn.dataset, hpn.direction, hpn.outcome, hpn.source) == (
        "sanbi-vm.uwc.ac.za",
        "5MiB.dat",
        "download",
        "ok",
        "import",
    )
    assert hpn.start_timestamp == START
    assert (hpn.duration_seconds, hpn.file_bytes, hpn.wire_bytes_down, hpn.wire_bytes_up) == (0.5, 5242880, 2896, 52)
    assert (hpn.verified, hpn.round_id, hpn.remote_address, hpn.client_address) == (
        False,
        "b3f1c2",
        "SANBI-VM.uwc.ac.za",
        "137.158.0.9",
    )
    assert (hpn.packets_down, hpn.packets_up, hpn.payload_bytes_down, hpn.payload_bytes_up) == (2, 2, 2896, 52)
    assert hpn.payload_histogram["down"][PAYLOAD_BUCKETS.index(1448)] == 2
    assert hpn.payload_histogram["up"][PAYLOAD_BUCKETS.index(0)] == 1
    assert hpn.payload_histogram["up"][PAYLOAD_BUCKETS.index(64)] == 1

    sidecar = Path(hpn.packets_path)
    assert sidecar.parent == journal_path.parent / "journal.jsonl.packets"
    assert sidecar.name == "hpn-scp_5MiB.dat_2015-08-21_13:00:01.jsonl"
    assert [json.loads(line) for line in sidecar.read_text().splitlines()] == [
        {"way": "up", "time": 0.0, "length": 0},
        {"way": "down", "time": 0.05, "length": 1448},
        {"way": "down", "time": 0.3, "length": 1448},
        {"way": "up", "time": 0.5, "length": 52},
    ]

    udt = results["gridftp-udt"]
    assert (udt.remote, udt.dataset, udt.round_id, udt.packets_path) == ("196.24.44.10", "file_2.4G", "7", "")
    assert udt.start_timestamp == dt.datetime(2015, 8, 22, 3, 0, 5, tzinfo=UTC).timestamp()
    assert (udt.wire_bytes_total, udt.duration_seconds) == (2637481281, 115.3)
    assert (udt.packets_down, udt.payload_bytes_down) == (0, 0)  # no packet list: unknown, left at 0


def test_importing_again_adds_nothing(tmp_path: Path, dumps: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal_path = tmp_path / "journal.jsonl"
    run(["import", "--journal", str(journal_path), str(dumps)])
    lines = journal_path.read_text()
    sidecars = sorted((tmp_path / "journal.jsonl.packets").iterdir())
    capsys.readouterr()
    # Again, the good files named one by one this time.
    good = [
        str(dumps / "hpn-scp_5MiB.dat_2015-08-21_13:00:01.dump"),
        str(dumps / "gridftp-udt_file_2.4G_2015-08-22_03:00:05.dump"),
    ]
    assert run(["import", "--journal", str(journal_path), *good]) == 0
    assert "0 imported, 2 already in the journal, 0 malformed" in capsys.readouterr().err
    assert journal_path.read_text() == lines
    assert sorted((tmp_path / "journal.jsonl.packets").iterdir()) == sidecars


def test_import_keeps_existing_journal_lines(tmp_path: Path, dumps: Path) -> None:
    journal_path = tmp_path / "journal.jsonl"
    journal_path.write_text('{"not": "a result"}\n')
    run(["import", "--journal", str(journal_path), str(dumps)])
    text = journal_path.read_text().splitlines()
    assert text[0] == '{"not": "a result"}' and len(text) == 3


def test_packet_times_are_relative_and_wrap_past_midnight() -> None:
    packets = parse_packets(
        [
            {"direction": "down", "time": "23:59:59.900000", "length": 10},
            {"direction": "up", "time": "00:00:00.100000", "length": 0},
            {"direction": "down", "time": "00:00:01", "length": 5},
        ]
    )
    assert [(p.way, p.time, p.length) for p in packets] == [("down", 0.0, 10), ("up", 0.2, 0), ("down", 1.1, 5)]


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2015-08-21 13:00:01.123456", START),
        ("2015-08-21T13:00:01.123456Z", START),
        ("2015-08-21T15:00:01.123456+02:00", START),
        (START, START),
    ],
)
def test_start_time_formats(value: object, expected: float) -> None:
    assert parse_start(value, None) == expected


def test_start_time_from_the_name_needs_the_testbed_zone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # test.py named files in the testbed host's local time (SAST, UTC+2), not UTC.
    record = dict(WITHOUT_PACKETS)
    del record["utc_start_time"]
    path = write_dump(tmp_path, "gridftp-udt_file_2.4G_2015-08-22_03:00:05.dump", record)
    with pytest.raises(MalformedDump, match=r"give its zone with --timezone \(the 2015 study ran in Africa"):
        parse_dump(path)
    sast = dt.datetime(2015, 8, 22, 1, 0, 5, tzinfo=UTC).timestamp()
    for zone in ("Africa/Johannesburg", "+2"):
        dump = parse_dump(path, importer.ImportOptions(timezone=zone))
        assert dump.result.start_timestamp == sast
        assert dump.result.import_note == f"start time from the file name, read as {zone} local time"
    with pytest.raises(MalformedDump, match="utc_start_time is missing and the file name has no time"):
        parse_dump(write_dump(tmp_path, "renamed.dump", record), importer.ImportOptions(timezone="UTC"))

    journal_path = tmp_path / "journal.jsonl"
    assert run(["import", "--journal", str(journal_path), str(path)]) == 1
    assert f"skipped {path}: utc_start_time is missing" in capsys.readouterr().err
    assert run(["import", "--journal", str(journal_path), "--timezone", "Africa/Johannesburg", str(path)]) == 0
    assert f"import: {path}: start time from the file name, read as Africa/Johannesburg" in capsys.readouterr().err
    assert [r.start_timestamp for r in Journal(journal_path).read()] == [sast]
    assert run(["import", "--journal", str(journal_path), "--timezone", "Mars/Olympus", str(path)]) == 2
    assert "--timezone 'Mars/Olympus': not a time zone; give a name like Africa/Johannesburg" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"bytes_total": 1}, "bytes_total 1 is not bytes_down + bytes_up"),
        ({"file_size": -5}, "file_size is -5"),
        ({"time": "fast"}, "time is 'fast'"),
        ({"utc_start_time": "yesterday"}, "utc_start_time 'yesterday' is not a date"),
        ({"packets": [{"direction": "down", "time": "25:00:00.0", "length": 1}]}, "packets[0].time"),
        ({"packets": {"direction": "down"}}, "packets is dict"),
    ],
)
def test_malformed_reasons(tmp_path: Path, change: dict[str, object], reason: str) -> None:
    path = write_dump(tmp_path, "scp_f_2015-08-21_13:00:01.dump", {**WITH_PACKETS, **change})
    with pytest.raises(MalformedDump) as exc:
        parse_dump(path)
    assert reason in str(exc.value)


def test_name_without_the_pattern_gets_a_size_label(tmp_path: Path) -> None:
    path = write_dump(tmp_path, "old.dump", WITHOUT_PACKETS)
    assert parse_dump(path).result.dataset == "2.37GiB"


def test_command_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(["import", "--journal", str(tmp_path / "j.jsonl"), str(empty)]) == 2
    assert "no .dump files" in capsys.readouterr().err
    write_dump(empty, "scp_f_2015-08-21_13:00:01.dump", WITH_PACKETS)
    assert run(["import", "--journal", str(empty), str(empty)]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert run(["import", "--journal", str(tmp_path / "j.jsonl"), str(tmp_path / "missing.dump")]) == 1
    err = capsys.readouterr().err
    assert "missing.dump: cannot read" in err and "Traceback" not in err


def test_progress_on_long_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter(range(1000))
    stream = io.StringIO()
    paths = [
        write_dump(tmp_path, f"scp_f{i}_2015-08-21_13:00:{i:02d}.dump", dict(WITHOUT_PACKETS, protocol="scp"))
        for i in range(5)
    ]
    original = importer.Progress

    def fast(*args, **kw):  # a clock that advances a second per call
        return original(*args, **{**kw, "clock": lambda: float(next(ticks))})

    monkeypatch.setattr(importer, "Progress", fast)
    summary = importer.import_dumps(paths, tmp_path / "j.jsonl", stream=stream)
    assert summary.imported == 5
    assert stream.getvalue().splitlines() == [f"imported {i}/5 dumps" for i in range(1, 6)]


def test_imported_dumps_feed_the_report(tmp_path: Path, dumps: Path) -> None:
    pytest.importorskip("scipy")
    pytest.importorskip("matplotlib")
    from bigbinf.study import report, tables
    from tests.unit.test_report import check_png

    journal_path = tmp_path / "journal.jsonl"
    run(["import", "--journal", str(journal_path), str(dumps)])
    rep = tables.build_report(Journal(journal_path).read())
    assert [(r.protocol, r.file_bytes, r.bytes_total, r.time_seconds) for r in rep.table2] == [
        ("hpn-scp", 5242880, 2948.0, 0.5),
        ("gridftp-udt", 2540610608, 2637481281.0, 115.3),
    ]
    report.write_report(rep, tmp_path / "out", progress_stream=io.StringIO())
    assert check_png(tmp_path / "out" / "fig5.png") == 1  # the one dump with packets
    assert [(p.way, p.length) for p in read_packets(Path(rep.used[0].packets_path))][1] == ("down", 1448)


def test_import_onto_a_torn_last_line_loses_nothing(
    tmp_path: Path, dumps: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal_path = tmp_path / "journal.jsonl"
    journal_path.write_text('{"torn')  # the exporter lost power mid-write: no newline
    run(["import", "--journal", str(journal_path), str(dumps)])
    err = capsys.readouterr().err
    assert f"import: {journal_path}:1: skipped: " in err  # the torn line, by number
    assert "2 imported" in err
    skipped: list = []
    assert sorted(r.protocol for r in Journal(journal_path).read(skipped)) == ["gridftp-udt", "hpn-scp"]
    assert [s.line for s in skipped] == [1]
    assert journal_path.read_text().splitlines()[0] == '{"torn'


def test_duplicates_are_named_and_differing_content_is_said(
    tmp_path: Path, dumps: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal_path = tmp_path / "journal.jsonl"
    good = dumps / "hpn-scp_5MiB.dat_2015-08-21_13:00:01.dump"
    assert run(["import", "--journal", str(journal_path), str(good)]) == 0
    before = journal_path.read_text()
    capsys.readouterr()

    assert run(["import", "--journal", str(journal_path), str(good)]) == 0
    assert capsys.readouterr().err.splitlines()[0] == f"import: {good}: already in the journal; not imported again"

    # The same transfer (series, client, start) with other numbers: not imported, and said so.
    changed = write_dump(tmp_path, good.name, dict(WITH_PACKETS, bytes_down=3000, bytes_total=3052, time=0.75))
    assert run(["import", "--journal", str(journal_path), str(changed)]) == 1
    err = capsys.readouterr().err
    assert (
        f"import: {changed}: already in the journal (same series, client and start time) with different "
        "time, bytes_down; kept the journal's copy."
    ) in err
    assert "0 imported, 1 already in the journal (1 with different content, not imported), 0 malformed" in err
    assert journal_path.read_text() == before


def test_two_clients_pulling_the_same_file_in_the_same_second_are_two_transfers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "gridftp-udt_file_2.4G_2015-08-22_03:00:05.dump"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write_dump(tmp_path / "a", name, WITHOUT_PACKETS)
    second = write_dump(tmp_path / "b", name, dict(WITHOUT_PACKETS, host_to="137.158.0.10", time=120.0))
    journal_path = tmp_path / "journal.jsonl"
    assert run(["import", "--journal", str(journal_path), str(first), str(second)]) == 0
    assert "2 imported, 0 already in the journal" in capsys.readouterr().err
    assert sorted((r.client_address, r.duration_seconds) for r in Journal(journal_path).read()) == [
        ("137.158.0.10", 120.0),
        ("137.158.0.9", 115.3),
    ]
    assert run(["import", "--journal", str(journal_path), str(first), str(second)]) == 0
    assert "0 imported, 2 already in the journal" in capsys.readouterr().err


def test_shared_flags_work_after_import(tmp_path: Path, dumps: Path) -> None:
    from bigbinf import cli

    journal_path = tmp_path / "journal.jsonl"
    good = str(dumps / "hpn-scp_5MiB.dat_2015-08-21_13:00:01.dump")
    args = cli.build_parser().parse_args(["import", "--log.level", "error", "--journal", "j", good])
    assert args.log_level == "error"
    assert cli.main(["import", "--journal", str(journal_path), good, "--log.level", "error"]) == 0
    assert [r.protocol for r in Journal(journal_path).read()] == ["hpn-scp"]


# ---------------------------------------------------------------------------------------
# Dumps as the 2015 tool (wraithy/bigbinf protocol_testbed/test.py) really wrote them.


def packets_like_test_py(start: dt.datetime, count: int, gap: float, payload: int = 1448) -> list[dict[str, object]]:
    """tcpdump lines as test.py stored them: time of day only, and newest first, because it
    built the list with `stdout.pop()`.  Every tenth packet is the client's ack."""
    oldest_first = [
        {
            "direction": "up" if i % 10 == 9 else "down",
            "time": (start + dt.timedelta(seconds=i * gap)).strftime("%H:%M:%S.%f"),
            "length": 0 if i % 10 == 9 else payload,
        }
        for i in range(count)
    ]
    return oldest_first[::-1]


def dump_like_test_py(protocol: str, start: dt.datetime, count: int, gap: float, time: float) -> dict[str, object]:
    packets = packets_like_test_py(start, count, gap)
    down = sum(int(p["length"]) for p in packets if p["direction"] == "down")  # type: ignore[call-overload]
    return {
        "batch_id": "2015-10-02",
        "protocol": protocol,
        "file_size": down,
        "utc_start_time": (start - dt.timedelta(hours=2)).isoformat(sep=" "),  # local SAST minus 2 h
        "host_from": "SANBI-VM.uwc.ac.za",
        "host_to": "137.158.0.9",
        "bytes_down": down,
        "bytes_up": 0,
        "bytes_total": down,
        "time": time,
        "stored_packets": True,
        "packets": packets,
    }


@pytest.fixture()
def dumps_2015(tmp_path: Path) -> Path:
    d = tmp_path / "dumps_2015"
    d.mkdir()
    # scp at 13:00, 2 s: `time` agrees with the packet span (the tool's own rounding aside).
    write_dump(
        d,
        "scp_5MiB.dat_2015-10-02_13:00:00.dump",
        dump_like_test_py("scp", dt.datetime(2015, 10, 2, 13, 0, 0), 201, 0.01, 2.000_183),
    )
    # "ftp" (sftp) across midnight, 5.85 s: the tool's `time` is 86,399.999817 s.
    write_dump(
        d,
        "ftp_5MiB.dat_2015-10-02_23:59:57.dump",
        dump_like_test_py("ftp", dt.datetime(2015, 10, 2, 23, 59, 57, 150_000), 586, 0.01, 86399.999817),
    )
    write_dump(
        d,
        "hpn-scp_5MiB.dat_2015-10-03_03:00:00.dump",
        dump_like_test_py("hpn-scp", dt.datetime(2015, 10, 3, 3, 0, 0), 101, 0.02, 2.0),
    )
    return d


def test_dumps_as_test_py_wrote_them(tmp_path: Path, dumps_2015: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal_path = tmp_path / "journal.jsonl"
    assert run(["import", "--journal", str(journal_path), str(dumps_2015)]) == 0
    err = capsys.readouterr().err
    results = {r.imported_protocol: r for r in Journal(journal_path).read()}

    # 3. The study's names mapped to this product's, the original kept.
    assert {name: r.protocol for name, r in results.items()} == {"scp": "scp", "ftp": "sftp", "hpn-scp": "hpn-scp"}

    # 1. Packets stored oldest first, times since the first packet, none negative, and the
    # midnight crossing unwrapped: the span is the transfer's 5.85 s, not a day.
    for name, r in results.items():
        raw = json.loads(next(dumps_2015.glob(f"{name}_*.dump")).read_text())["packets"]
        stored = list(read_packets(Path(r.packets_path)))
        assert [(p.way, p.length) for p in stored] == [(p["direction"], p["length"]) for p in reversed(raw)]
        assert stored[0].time == 0.0
        assert all(b.time >= a.time for a, b in itertools.pairwise(stored)), name
    sftp = results["ftp"]
    span = list(read_packets(Path(sftp.packets_path)))[-1].time
    assert span == pytest.approx(5.85, abs=1e-6)

    # 2. The tool's bogus `time` is replaced by the span, said on the terminal and in the record.
    assert sftp.duration_seconds == pytest.approx(5.85, abs=1e-6)
    assert sftp.throughput_bytes_per_second == pytest.approx(sftp.wire_bytes_down / 5.85)  # not 388 B/s
    note = "time 86399.999817 s disagrees with the packet span 5.850000 s; took the span"
    assert sftp.import_note == note
    assert f"import: {dumps_2015 / 'ftp_5MiB.dat_2015-10-02_23:59:57.dump'}: {note}" in err
    # Where they agree within a second, the dump's own `time` stands, and nothing is said.
    assert (results["scp"].duration_seconds, results["scp"].import_note) == (2.000_183, "")
    assert err.count("took the span") == 1


def test_unknown_protocols_are_refused_unless_mapped(
    tmp_path: Path, dumps_2015: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = write_dump(
        dumps_2015,
        "warp-drive_5MiB.dat_2015-10-03_13:00:00.dump",
        dump_like_test_py("warp-drive", dt.datetime(2015, 10, 3, 13, 0, 0), 11, 0.1, 1.0),
    )
    journal_path = tmp_path / "journal.jsonl"
    assert run(["import", "--journal", str(journal_path), str(dumps_2015)]) == 1
    err = capsys.readouterr().err
    assert (
        f"import: skipped {odd}: protocol 'warp-drive' is not one the 2015 testbed had "
        "(ftp, gridftp, gridftp-udt, hpn-scp, scp); say which protocol it is with --protocol-map warp-drive=PROTOCOL"
    ) in err
    assert "3 imported, 0 already in the journal, 1 malformed" in err

    # Mapped on the command line: imported under the given name; a 2015 name can be remapped too.
    argv = ["import", "--journal", str(journal_path), "--protocol-map", "warp-drive=bbftp", str(odd)]
    assert run(argv) == 0
    r = [r for r in Journal(journal_path).read() if r.imported_protocol == "warp-drive"]
    assert [(x.protocol, x.imported_protocol) for x in r] == [("bbftp", "warp-drive")]
    options = importer.parse_options(["ftp=ftp"], None)
    assert parse_dump(dumps_2015 / "ftp_5MiB.dat_2015-10-02_23:59:57.dump", options).result.protocol == "ftp"

    for bad, says in (("warp-drive", "expected OLD=NEW"), ("x=two words", "'two words' is not a protocol name")):
        assert run(["import", "--journal", str(journal_path), "--protocol-map", bad, str(odd)]) == 2
        assert f"--protocol-map '{bad}': {says}" in capsys.readouterr().err


def test_a_dump_imported_before_names_were_mapped_is_found_and_its_difference_said(
    tmp_path: Path, dumps_2015: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A journal line written by the importer before this mapping: protocol "ftp", no original.
    path = dumps_2015 / "ftp_5MiB.dat_2015-10-02_23:59:57.dump"
    journal_path = tmp_path / "journal.jsonl"
    old = dataclasses.replace(parse_dump(path).result, protocol="ftp", imported_protocol="", import_note="")
    Journal(journal_path).append(old)
    assert run(["import", "--journal", str(journal_path), str(path)]) == 1
    err = capsys.readouterr().err
    assert "already in the journal (same series, client and start time) with different protocol" in err
    assert len(list(Journal(journal_path).read())) == 1


def test_packet_order_is_read_from_the_data() -> None:
    newest_first = [
        {"direction": "down", "time": "00:00:01", "length": 5},
        {"direction": "up", "time": "00:00:00.100000", "length": 0},
        {"direction": "down", "time": "23:59:59.900000", "length": 10},
    ]
    assert [(p.way, p.time, p.length) for p in parse_packets(newest_first)] == [
        ("down", 0.0, 10),
        ("up", 0.2, 0),
        ("down", 1.1, 5),
    ]
    # A small step back (timestamps from two CPUs) does not change the order read.
    jitter = [
        {"direction": "down", "time": t, "length": 1}
        for t in ("10:00:00.000", "10:00:00.002", "10:00:00.001", "10:00:03")
    ]
    assert [p.time for p in parse_packets(jitter)] == [0.0, 0.002, 0.001, 3.0]
    shuffled = [{"direction": "down", "time": t, "length": 1} for t in ("10:00:00", "10:00:05", "10:00:01", "10:00:09")]
    with pytest.raises(MalformedDump, match=r"packet times go 13\.000 s forwards and 4\.000 s backwards"):
        parse_packets(shuffled)


def test_a_truncated_dump_says_where_it_ends(tmp_path: Path) -> None:
    path = write_dump(tmp_path, "scp_f_2015-08-21_13:00:01.dump", '{"batch_id": "b3f1c2", "protocol": "sc')
    with pytest.raises(MalformedDump) as exc:
        parse_dump(path)
    assert str(exc.value) == (
        "not JSON (Unterminated string starting at line 1 column 36; the file ends early (truncated?))"
    )


def test_table2_of_dumps_as_test_py_wrote_them_agrees_with_a_hand_computation(tmp_path: Path, dumps_2015: Path) -> None:
    pytest.importorskip("scipy")
    from bigbinf.study import tables

    journal_path = tmp_path / "journal.jsonl"
    run(["import", "--journal", str(journal_path), str(dumps_2015)])
    rows = {r.protocol: r for r in tables.build_report(Journal(journal_path).read()).table2}
    assert set(rows) == {"scp", "sftp", "hpn-scp"}  # the study's "ftp" is compared with sftp
    for name, time in (("ftp", 5.85), ("scp", 2.000_183), ("hpn-scp", 2.0)):
        record = json.loads(next(dumps_2015.glob(f"{name}_*.dump")).read_text())
        row = rows[importer.PROTOCOLS_2015[name]]
        assert row.time_seconds == pytest.approx(time, abs=1e-6)
        # The study's speed: bytes_down / time, with the span where `time` was wrong.
        assert row.study_speed_bytes_per_second == pytest.approx(record["bytes_down"] / time)
