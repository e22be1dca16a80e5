"""The `once` table (cli.format_table): its Retrans columns show the sender kernel's count
and the wire's, each named; a bbr upload's 2,841 kernel retransmits were shown as the
wire's 8 under one "Retrans" column."""

from __future__ import annotations

import re

from bigbinf.cli import format_table
from bigbinf.result import Result


def _result(**fields: object) -> Result:
    base: dict[str, object] = {
        "protocol": "scp",
        "remote": "lab",
        "dataset": "f64m",
        "direction": "upload",
        "start_timestamp": 1.0,
        "outcome": "ok",
        "duration_seconds": 3.0,
        "file_bytes": 64 << 20,
        "wire_measured": True,
        "wire_bytes_down": 1_000_000,
        "wire_bytes_up": 70_000_000,
        "retransmits_wire": 8,
        "retransmits_sender": 2841,
        "retransmits_sender_source": "kernel",
        "verified": True,
    }
    return Result(**{**base, **fields})  # type: ignore[arg-type]


def _rows(text: str) -> list[dict[str, str]]:
    """The table's rows by column name (columns are two or more spaces apart)."""
    lines = [line for line in text.splitlines() if "  " in line]
    header = re.split(r"\s{2,}", lines[0].strip())
    return [dict(zip(header, re.split(r"\s{2,}", line.strip()), strict=True)) for line in lines[1:]]


def test_both_retransmit_counts_are_shown_and_named() -> None:
    rows = _rows(
        format_table(
            [
                _result(),
                # A download from a remote that cannot be asked: no sender count, not 0.
                _result(
                    direction="download", retransmits_sender=None, retransmits_sender_source="", retransmits_wire=3
                ),
                # iperf3's own count where the kernel's was not read.
                _result(protocol="iperf3", retransmits_sender=12, retransmits_sender_source="iperf3"),
                # A capture without wire numbers: the wire's count is not measured, not 0.
                _result(outcome="failed", wire_measured=False, retransmits_wire=0, retransmits_sender=5),
            ]
        )
    )
    assert [(r["Retrans (sender kernel)"], r["Retrans (wire)"]) for r in rows] == [
        ("2841", "8"),
        ("-", "3"),
        ("12 (iperf3)", "8"),
        ("5", "-"),
    ]
    assert "Retrans" not in rows[0]  # no unnamed count
