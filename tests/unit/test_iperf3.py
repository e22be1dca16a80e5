"""iperf3's JSON report, as parse_report reads it.

The stored reports in tests/data were written by iperf3 3.12 (`iperf3 -c 127.0.0.1 -n 1048576
-J`, and the same with -R).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bigbinf.protocols.iperf3 import parse_report

DATA = Path(__file__).parents[1] / "data"
MiB = 1024 * 1024


def test_parse_report_of_an_upload() -> None:
    report = parse_report((DATA / "iperf3-upload.json").read_text())
    assert report["bytes"] == report["bytes_sent"] == MiB
    assert report["seconds"] == 0.001043  # the receiver's measuring time
    assert report["retransmits"] == 0
    assert report["mean_rtt_seconds"] == pytest.approx(19e-6)  # 19 us on loopback


def test_parse_report_drops_values_that_are_no_numbers() -> None:
    report = parse_report('{"end": {"sum_received": {"bytes": NaN, "seconds": 2}, "sum_sent": {"bytes": 8}}}')
    assert report == {"seconds": 2.0, "bytes_sent": 8.0}


def test_parse_report_of_a_download_has_no_rtt() -> None:
    # -R: the server sends; iperf3 reports its retransmits but no RTT to the client.
    report = parse_report((DATA / "iperf3-download.json").read_text())
    assert report["bytes"] == MiB
    assert report["retransmits"] == 0
    assert "mean_rtt_seconds" not in report


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        "not json",
        '{"error": "unable to connect to server"}',
        "[]",
        '{"end": []}',
        '{"end": {"sum_received": {"bytes": "many"}}}',
    ],
)
def test_parse_report_of_garbage_is_empty(stdout: str) -> None:
    assert parse_report(stdout) == {}


def test_the_error_iperf3_reports_with_exit_0_is_the_failure() -> None:
    from bigbinf.protocols.iperf3 import reported_error

    # What iperf3 3.12 -J prints, and exits 0, when nothing listens on the port.
    out = json.dumps(
        {
            "start": {"connected": []},
            "intervals": [],
            "end": {},
            "error": "unable to connect to server: Connection refused",
        }
    )
    assert reported_error(out) == "iperf3: unable to connect to server: Connection refused"
    assert reported_error((DATA / "iperf3-upload.json").read_text()) == ""
    assert reported_error("not json") == reported_error("[1]") == ""
