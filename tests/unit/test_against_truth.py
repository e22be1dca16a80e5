"""Evidence held to the truth (tests/support/against_truth.py): each kind of claim is
found where the truth says otherwise, and left alone where the truth bears it out or the
words deny it.  The evidence lines are the judge's own words, from the runs issue 42 reports."""

from __future__ import annotations

from typing import Any

from tests.support.against_truth import contradicted

QUIET: dict[str, Any] = {  # an upload that lost nothing, alone on its path, 100 Mbit/s x 80 ms
    "direction": "upload",
    "receiver": "remote",
    "sender": "local",
    "transfer_bytes": 8 << 20,
    "dropped": 0,
    "other_bytes": 120_000,
    "bdp_bytes": 1_000_000,
    "remote_rmem_max": 6291456,
    "remote_rmem_default": 131072,
    "remote_moderate_rcvbuf": 1,
    "local_wmem_max": 4194304,
    "local_rmem_max": 6291456,
    "local_moderate_rcvbuf": 1,
}
BOTTLENECK = (
    "the sender was in flight 98% of the data phase; 412 retransmitted of 23021 segments (1.79%, the sender's "
    "kernel): the bottleneck drops what exceeds its rate (a policer, a short queue)"
)
HOLES = "412 retransmitted of 23021 segments (1.79%, the sender's kernel): 1.3 segments lost per window of up to 41"
SHARED = (
    "network-limited 97% of the data phase with a backlog in 88% of its samples, with no retransmission "
    "counted, limited by the path (another flow on the bottleneck, cross traffic, or an estimate no longer "
    "the path's)"
)


def with_(**changes: Any) -> dict[str, Any]:
    return {**QUIET, **changes}


def test_loss_claimed_where_nothing_was_dropped_is_contradicted() -> None:
    assert len(contradicted(BOTTLENECK, QUIET)) == 1
    assert len(contradicted(HOLES, QUIET)) == 1
    assert contradicted("a loss of 0.41% bounds the rate at 2.1 MB/s", QUIET)
    assert contradicted("the delay line dropped 20 packets", QUIET)


def test_loss_claimed_where_the_path_dropped_is_borne_out() -> None:
    assert contradicted(BOTTLENECK, with_(dropped=311)) == []
    assert contradicted(HOLES, with_(dropped=311)) == []


def test_words_that_deny_loss_claim_none() -> None:
    for text in (
        "no loss, no window: the path's capacity",
        "412 retransmitted, 409 of them spurious (duplicate SACKs): 0 lost",
        "412 retransmitted of 23021 segments, all spurious: the receiver saw them twice",
        "0.0% of 10 probes lost",
        "slow start and set-up cost 0.80 s of the 2.10 s; the time lost below the steady rate",
        "with neither loss nor a window",
    ):
        assert contradicted(text, QUIET) == [], text


def test_another_flow_claimed_where_none_crossed_the_link_is_contradicted() -> None:
    found = contradicted(SHARED, QUIET)
    assert len(found) == 2 and all("another flow claimed" in f for f in found), found  # the flow, the cross traffic
    assert contradicted(SHARED, with_(other_bytes=40_000_000)) == []
    assert contradicted("no other flow crossed the bottleneck", QUIET) == []


def test_a_window_the_setting_allows_to_grow_is_contradicted() -> None:
    words = "the remote's receive buffer 131.07 kB (131072 B) over 82 ms allows 1.60 MB/s; the steady rate 1.55 MB/s"
    # Autotuning on and a 6 MB maximum: the buffer would have grown past 4 BDPs.
    assert any("allows 4x the BDP" in f for f in contradicted(words, QUIET))
    # Autotuning off at the 131072 B default (the cause of issue 42): borne out.
    assert contradicted(words, with_(remote_moderate_rcvbuf=0)) == []
    # A cap below the BDP: borne out.
    assert contradicted(words, with_(remote_rmem_max=262144)) == []
    # Window scaling off on either end (issue 42, breaker b42 A'): no window above 64 KiB.
    assert contradicted(words, with_(local_window_scaling=0, remote_window_scaling=1)) == []


def test_a_route_window_claimed_where_the_route_has_none_is_contradicted() -> None:
    # The words the judge gave to a stripped window-scale option (breaker b42, A).
    words = "its window was clamped apart from its buffer (a route's `window` metric)"
    found = contradicted(words, with_(remote_route_window=0, local_route_window=0), "remote")
    assert len(found) == 1 and "route window claimed where remote's route has none" in found[0], found
    assert contradicted(words, with_(remote_route_window=65535, local_route_window=0), "remote") == []
    # A route's window clamps it whatever the buffer.
    assert contradicted(words, with_(remote_route_window=65535)) == []


def test_a_buffer_larger_than_its_maximum_is_contradicted() -> None:
    words = "the remote's receive buffer 1.05 MB (1048576 B) over 82 ms allows 12.8 MB/s"
    assert any("where remote's rmem_max is 262144" in f for f in contradicted(words, with_(remote_rmem_max=262144)))


def test_a_window_on_the_side_that_does_not_receive_is_contradicted() -> None:
    words = "this host's receive buffer 131.07 kB (131072 B) over 82 ms allows 1.60 MB/s"
    found = contradicted(words, with_(remote_moderate_rcvbuf=0))
    assert len(found) == 1 and "not the receiver" in found[0], found
    # Without a side in the words, the verdict's side.
    assert contradicted("the receive window over 82 ms", with_(remote_moderate_rcvbuf=0), side="local")
    assert contradicted("the receive window over 82 ms", with_(remote_moderate_rcvbuf=0), side="remote") == []


def test_a_send_buffer_with_room_on_the_sender_is_contradicted() -> None:
    words = "limited by its send buffer 41% of the time (the BDP 1.00 MB)"
    assert contradicted(words, with_(local_wmem_max=262144)) == []
    assert contradicted(words, with_(local_wmem_max=16 << 20))


def test_marked_round_trips_claimed_are_held_to_the_packets_the_path_marked() -> None:
    said = (
        "ECN marking (congestion on the path: a queue that marks): about {n} of 412 round trips marked CE by the path"
    )
    truth: dict[str, Any] = {"path_nft_marked_ce": 36, "receiver": "local", "local_ce_received": 36}
    assert contradicted(said.format(n=77), truth) == []  # the estimate's spread: 2.14x (a CI run)
    assert contradicted(said.format(n=100), truth) != []  # no estimate of 36 marks
    assert contradicted(said.format(n=3), {**truth, "path_nft_marked_ce": 0, "local_ce_received": 0}) != []
