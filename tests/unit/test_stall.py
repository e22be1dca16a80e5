"""A timeout says what stopped the transfer (measure/stall.py), never a bare timeout."""

from __future__ import annotations

from bigbinf.measure.stall import stall_words
from bigbinf.result import PathBaseline

PATH1280 = PathBaseline("site", 0.0, mtu_bytes=1280, rtt_min_seconds=0.04)
PATH1500 = PathBaseline("site", 0.0, mtu_bytes=1500, rtt_min_seconds=0.04)


def test_a_path_mtu_black_hole_is_named_with_its_fix() -> None:
    # 1448-byte segments (1500-byte packets) on a path the probe measured at 1280: the
    # sender backed off 6 times after 40 kB.
    sender = {"bytes_acked": 40_000.0, "mss_bytes": 1448.0, "backoff_max": 6.0, "retransmits": 9.0}
    said = stall_words(sender, {}, PATH1280, 1500, "this host")
    assert said.startswith("a path MTU black hole: the round's probe measured the path's MTU at 1280 B")
    assert "1500-byte packets" in said
    assert "TCPMSS --clamp-mss-to-pmtu" in said and "net.ipv4.tcp_mtu_probing=1" in said
    assert "in 6 consecutive retransmission timeouts" in said


def test_no_data_after_the_handshake_on_a_black_hole() -> None:
    # ssh's key exchange never got through: no socket moved DATA_FLOW_BYTES, so the
    # listings have no data socket; this host's route MTU (1500) is above the path's.
    said = stall_words({}, {}, PATH1280, 1500, "this host")
    assert "a path MTU black hole" in said and "no data after the handshake" in said


def test_a_path_whose_mtu_is_the_hosts_is_no_black_hole() -> None:
    sender = {"bytes_acked": 40_000.0, "mss_bytes": 1448.0, "backoff_max": 6.0, "retransmits": 9.0}
    said = stall_words(sender, {}, PATH1500, 1500, "this host")
    assert "black hole" not in said
    assert said == (
        "stalled: 40000 B moved, then none; the sender (this host) in 6 consecutive retransmission timeouts (backoff)"
    )


def test_a_zero_window_held_is_named() -> None:
    sender = {"bytes_acked": 8e6, "mss_bytes": 1448.0, "zero_window_samples": 40.0, "data_end_seconds": 3.2}
    said = stall_words(sender, {"bytes_received": 8e6}, PATH1500, 1500, "the remote")
    assert said == (
        "stalled: 8000000 B moved, the last at 3.2 s, then none; the receiver's window held at zero in 40 of the "
        "sender's samples (its reader stopped)"
    )


def test_a_slow_path_that_kept_moving_is_not_called_a_black_hole() -> None:
    # Data kept moving, no retransmission: the MTU is not why, whatever the probe said.
    said = stall_words({"bytes_acked": 9e8, "mss_bytes": 1448.0}, {}, PATH1280, 1500, "this host")
    assert "black hole" not in said and said.startswith("stalled: 900000000 B moved")
