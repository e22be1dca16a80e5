"""iperf3, the memory-to-memory baseline, in the lab: its own numbers kept beside ours and
checked against the wire and the kernels."""

from __future__ import annotations

import pytest

from bigbinf import lab
from bigbinf.lab import LabLayout
from bigbinf.measure.plan import plan_round
from bigbinf.measure.transfer import run_transfer

from ..conftest import nstat_retrans, veth_counters

MiB = 1024 * 1024


@pytest.mark.lab
def test_iperf3_both_ways_keeps_its_own_numbers_beside_ours(make_lab) -> None:
    # A short tbf queue: real drops, so retransmit counts are not trivially 0.
    config = make_lab(
        link={"rate": "200mbit", "burst": "32KiB", "limit": "64KiB"},
        datasets={"f8m": {"file": "f8m.bin", "size": "8MiB"}},
        protocols={"iperf3": {"directions": ["download", "upload"]}},
    )
    client_ns = LabLayout(config.lab).client_ns
    download, upload = plan_round(config, lab.site(config))
    assert (download.direction, upload.direction) == ("download", "upload")

    before = veth_counters(config)
    down = run_transfer(download, config, "test")
    after = veth_counters(config)
    assert down.outcome == "ok", down.error
    assert down.reported["bytes_sent"] == 8 * MiB and not down.verified  # no file to verify
    assert down.payload_bytes_down >= down.reported["bytes"] == 8 * MiB  # the data came down the wire
    assert down.wire_bytes_down == after["down"] - before["down"]
    assert (down.transport, down.data_flows) == ("tcp", 1)
    # The remote sends; the lab's remote is asked in its namespace: its kernel's count, with
    # iperf3's own (its data stream only) beside it.
    assert down.retransmits_sender_source == "kernel"
    assert down.retransmits_sender is not None and down.retransmits_sender >= down.reported["retransmits"]

    sent_before = nstat_retrans(client_ns)
    up = run_transfer(upload, config, "test")
    sent = nstat_retrans(client_ns) - sent_before
    assert up.outcome == "ok", up.error
    assert up.reported["bytes_sent"] == 8 * MiB
    # iperf3 ends the test when the sender has written -n bytes: what was still in flight
    # is missing from the receiver's count, never more than was sent.
    assert 0 < up.reported["bytes"] <= 8 * MiB
    # Everything the receiver counted crossed the wire (the capture is at the sender, so
    # retransmissions are in it too).
    assert up.payload_bytes_up >= up.reported["bytes"]
    # This host sent: the kernel's count of the transfer's sockets is the truth, and
    # iperf3's own count (its data stream only) stays beside it.
    assert up.retransmits_sender_source == "kernel"
    assert up.retransmits_sender == sent > 0
    assert 0 < up.reported["retransmits"] <= up.retransmits_sender
    # The client sent, so iperf3 measured the RTT; it is at least the link's queueing-free
    # minimum and well under the tbf latency bound.
    assert up.rtt_seconds is not None and 0 < up.rtt_seconds < 0.5


@pytest.mark.lab
def test_iperf3_that_moved_less_than_asked_is_failed(make_lab) -> None:
    # A command whose -n is not the dataset's size: iperf3's own count of what it sent is
    # the only check a memory-to-memory test has, so it decides the outcome.
    config = make_lab(
        datasets={"f8m": {"file": "f8m.bin", "size": "8MiB"}},
        protocols={"iperf3": {"command": ["{binary}", "-c", "{host}", "-n", "1M", "-J", "-R"]}},
    )
    result = run_transfer(plan_round(config, lab.site(config))[0], config, "test")
    assert result.outcome == "failed"
    assert result.error == f"verification: iperf3 reported {MiB} bytes sent of {8 * MiB}"
    assert not result.verified
