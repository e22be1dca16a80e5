"""The journal: appends after a torn line, wrong-typed lines are skipped with their line
number, and every command taking --journal says what is wrong with the path given."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bigbinf.journal.store import Journal, SkippedLine
from bigbinf.result import Result

REPO = Path(__file__).resolve().parents[2]


def result(i: int, **kw: object) -> Result:
    return Result(
        "scp",
        "uwc",
        "5MiB",
        "download",
        1_700_000_000.0 + i * 60,
        "ok",
        duration_seconds=2.0,
        file_bytes=5 * 2**20,
        wire_bytes_down=5_500_000,
        wire_bytes_up=100_000,
        **kw,
    )


# ---------------------------------------------------------------------------------------
# A torn last line


def test_append_after_a_torn_last_line_keeps_every_result(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.append(result(0))
    with open(path, "a") as f:
        f.write('{"torn')  # power loss mid-write: no newline
    journal.append(result(1))
    journal.append(result(2))

    skipped: list[SkippedLine] = []
    assert list(journal.read(skipped)) == [result(0), result(1), result(2)]
    assert [(s.path, s.line) for s in skipped] == [(path, 2)]
    assert skipped[0].reason.startswith("Invalid control character")  # the JSON string runs into the newline
    lines = path.read_text().split("\n")
    assert lines[1] == '{"torn' and len(lines) == 5 and lines[-1] == ""  # ended once, nothing else added


def test_append_adds_no_newline_where_none_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(path).append(result(0))  # a new file: no leading newline
    Journal(path).append(result(1))  # a complete last line: no blank line
    text = path.read_text()
    assert not text.startswith("\n") and "\n\n" not in text and text.count("\n") == 2
    path.write_text("")  # an empty file
    Journal(path).append(result(2))
    assert path.read_text().count("\n") == 1 and not path.read_text().startswith("\n")


def test_unreadable_lines_are_logged_only_when_the_caller_does_not_collect_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text("not json\n")
    with caplog.at_level(logging.WARNING, logger="bigbinf.journal.store"):
        skipped: list[SkippedLine] = []
        assert list(Journal(path).read(skipped)) == [] and len(skipped) == 1
        assert caplog.records == []  # the caller reports it: said once, not twice
        assert list(Journal(path).read()) == []
        assert [r.getMessage() for r in caplog.records] == [f"{path}:1: skipped: {skipped[0].reason}"]


# ---------------------------------------------------------------------------------------
# Wrong-typed fields


GOOD = result(0).to_json()


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("start_timestamp", "2024-03-01", "field start_timestamp: expected a finite number, got str '2024-03-01'"),
        ("duration_seconds", True, "field duration_seconds: expected a finite number, got bool True"),
        ("duration_seconds", float("nan"), "field duration_seconds: expected a finite number, got float nan"),
        ("file_bytes", "5242880", "field file_bytes: expected a whole number, got str '5242880'"),
        ("file_bytes", 5242880.5, "field file_bytes: expected a whole number, got float 5242880.5"),
        ("verified", 1, "field verified: expected true or false, got int 1"),
        ("protocol", 7, "field protocol: expected a string, got int 7"),
        ("rtt_seconds", "fast", "field rtt_seconds: expected a finite number or null, got str 'fast'"),
        ("retransmits_sender", 1.5, "field retransmits_sender: expected a whole number or null, got float 1.5"),
        (
            "payload_histogram",
            {"down": ["x"]},
            "field payload_histogram: expected an object of lists of whole numbers, got dict {'down': ['x']}",
        ),
        (  # a bool among the whole numbers (an int to type() only as a subclass): still refused
            "payload_histogram",
            {"down": [3, True]},
            "field payload_histogram: expected an object of lists of whole numbers, got dict {'down': [3, True]}",
        ),
    ],
)
def test_wrong_typed_fields_are_value_errors_naming_field_type_and_value(
    field: str, value: object, expected: str
) -> None:
    with pytest.raises(ValueError) as exc:
        Result.from_json({**GOOD, field: value})
    assert str(exc.value) == expected


def test_right_types_load_including_ints_for_floats_and_nulls_for_optionals() -> None:
    loaded = Result.from_json({**GOOD, "duration_seconds": 2, "rtt_seconds": None, "retransmits_sender": 3})
    assert (loaded.duration_seconds, loaded.rtt_seconds, loaded.retransmits_sender) == (2, None, 3)
    assert Result.from_json(GOOD) == result(0)


def test_a_missing_field_is_named() -> None:
    record = {k: v for k, v in GOOD.items() if k not in ("outcome", "remote")}
    with pytest.raises(ValueError, match=r"^missing fields remote, outcome$"):
        Result.from_json(record)


def test_a_field_added_later_is_checked_by_its_annotation() -> None:
    # Fields are added to Result over time (with defaults); the check follows the
    # annotation, so such a field needs no new code to be validated.
    @dataclasses.dataclass(frozen=True)
    class Later(Result):
        tool_retransmits: int | None = None

    assert Later.from_json({**GOOD, "tool_retransmits": 4}).tool_retransmits == 4
    assert Later.from_json(GOOD).tool_retransmits is None
    with pytest.raises(ValueError, match="field tool_retransmits: expected a whole number or null, got str '4'"):
        Later.from_json({**GOOD, "tool_retransmits": "4"})


def test_read_skips_a_wrong_typed_line_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(path).append(result(0))
    with open(path, "a") as f:
        f.write(json.dumps({**GOOD, "start_timestamp": "2024-03-01"}) + "\n")
    Journal(path).append(result(1))
    skipped: list[SkippedLine] = []
    assert list(Journal(path).read(skipped)) == [result(0), result(1)]
    assert [(s.line, s.reason) for s in skipped] == [
        (2, "field start_timestamp: expected a finite number, got str '2024-03-01'")
    ]


# ---------------------------------------------------------------------------------------
# --journal errors of report, import and backfill


def unprivileged(argv: list[str]) -> list[str]:
    """argv run without the capabilities that let root read any file (CAP_DAC_OVERRIDE,
    CAP_DAC_READ_SEARCH), so file permissions apply to root as to anyone else."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs setpriv (util-linux) to drop root's file-access capabilities")
    return [setpriv, "--bounding-set=-dac_override,-dac_read_search", *argv]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "bigbinf", *args]


COMMANDS = {
    "report": lambda journal, tmp: ["report", "--journal", journal, "--no-figures", "--out", str(tmp / "out")],
    "backfill": lambda journal, tmp: ["backfill", "--journal", journal, "--out", str(tmp / "blocks")],
    "import": lambda journal, tmp: ["import", "--journal", journal, str(tmp / "scp_f_2015-08-21_13:00:01.dump")],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unreadable_journal_is_named_as_unreadable(tmp_path: Path, command: str) -> None:
    journal = tmp_path / "journal.jsonl"
    Journal(journal).append(result(0))
    journal.chmod(0o000)
    (tmp_path / "scp_f_2015-08-21_13:00:01.dump").write_text("{}")
    proc = subprocess.run(
        unprivileged(cli(*COMMANDS[command](str(journal), tmp_path))),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == (
        f"bigbinf-exporter {command}: error: --journal {journal}: cannot read (Permission denied); "
        "check the file's permissions, or run as a user who can read it\n"
    )
    assert journal.stat().st_size > 0 and not (tmp_path / "blocks").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_directory_as_journal_is_named_as_a_directory(tmp_path: Path, command: str) -> None:
    directory = tmp_path / "state"
    directory.mkdir()
    (tmp_path / "scp_f_2015-08-21_13:00:01.dump").write_text("{}")
    proc = subprocess.run(
        cli(*COMMANDS[command](str(directory), tmp_path)), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        f"bigbinf-exporter {command}: error: --journal {directory}: is a directory; give the "
        f"journal file itself, e.g. --journal {directory / 'journal.jsonl'}\n"
    )
    assert list(directory.iterdir()) == []


def test_tool_reports_must_be_numbers() -> None:
    reported = {"bytes": 10.0, "seconds": 2}
    assert Result.from_json({**GOOD, "reported": reported}).reported == reported
    with pytest.raises(ValueError, match=r"^field reported: expected an object of finite numbers, got dict"):
        Result.from_json({**GOOD, "reported": {"bytes": "10"}})
