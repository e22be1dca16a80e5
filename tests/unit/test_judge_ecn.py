"""ECN congestion marks without loss (issue 42): a queue on the path marks CE instead of
dropping, the receiver echoes each mark (ECE) until the sender's CWR, and CUBIC or Reno
halve their window once per marked round trip, as on a loss.  The loss bound's p counts
those round trips beside the real losses (bounds.loss, Inputs.ce_rounds), read from the
sender's tcp_info (delivered_ce, ss 6.x); the verdict is congestion on the path, detail
ecn, its evidence the marks, never a loss; a BBR sender, which does not slow for marks,
gets no bound from them.  The numbers are a real run's (the plain site's router, 100 Mbit/s
configured, 20 ms, 0.5% of the packets marked CE at random: benchmarks/verdict_matrix.py
--plain --causes "ECN marks without loss (CUBIC)")."""

from __future__ import annotations

import math

from bigbinf.judge import bounds
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.verdict import judge_limit
from bigbinf.measure.tcp.state import Listing, parse_ss, summarise
from bigbinf.passive.flows import Tracker, result_of
from bigbinf.result import PathBaseline, Result

from ..support import against_truth, evidence
from .test_judge import MiB, download
from .test_passive import SELECTION, sock

ROUTER = PathBaseline(
    "site",
    0.0,
    rtt_min_seconds=0.0204,
    bandwidth_bytes_per_second=12.5e6,
    bandwidth_source="configured",
    mtu_bytes=1500,
)
# An http-cubic download of 8 MiB through the marking router: nothing retransmitted, 534
# segments acknowledged with the ECN echo over a mean window of 15.2 (the router marked
# 29 packets; 35 marked round trips counted), steady at 0.96 MB/s (its average 0.99).
MARKED = {
    "busy_seconds": 8.424,
    "rwnd_limited_seconds": 0.0,
    "sndbuf_limited_seconds": 0.0,
    "app_limited_ratio": 0.0,
    "sender_backlog_ratio": 1.0,
    "sending_samples": 16.0,
    "cwnd_avg_segments": 15.235,
    "cwnd_max_segments": 23.0,
    "delivered_ce_segments": 534.0,
    "delivered_segments": 5796.0,
    "segs_out": 5796.0,
    "retransmits": 0.0,
    "dsack_dups": 0.0,
    "mss_bytes": 1448.0,
    "rtt_avg_seconds": 0.02371,
    "min_rtt_seconds": 0.0206,
    "snd_wnd_median_bytes": 2405376.0,
    "rcvbuf_max_bytes": 131072.0,
    "sndbuf_max_bytes": 156672.0,
    "data_start_seconds": 0.374,
    "data_end_seconds": 7.871,
    "steady_rate_bytes_per_second": 956_203.0,
    "streams": 1.0,
    "stream_busy_max_seconds": 8.424,
}


def _marked(control: str = "cubic", duration: float = 8.44, **kw: float) -> Result:
    return download(
        protocol="http-cubic",
        dataset="f8m",
        file_bytes=8 * MiB,
        duration_seconds=duration,
        tcp_remote={**MARKED, **kw},
        retransmits_sender=int(kw.get("retransmits", 0.0)),
        congestion_control=control,
        remote="site",
    )


# The window each marked round trip echoes over: what 0.99 MB/s (8 MiB in 8.44 s) had in
# flight over the mean round trip of 23.7 ms, 16.3 segments, above the listings' mean of
# 15.2 (Inputs.ce_window).
WINDOW = 8 * MiB / 8.44 * 0.02371 / 1448.0


def _mathis(p: float, mss: float = 1448.0, rtt: float = 0.02371) -> float:
    return mss / rtt * math.sqrt(1.5) / math.sqrt(p)


def test_the_loss_bound_counts_the_round_trips_the_path_marked_ce_in() -> None:
    # 534 segments acknowledged marked over a window of 16.3: 33 marked round trips; p is
    # those per segment sent (nothing lost), and Mathis with it allows 0.99 MB/s.
    i = Inputs.of(_marked(), ROUTER)
    assert i.real_losses == 0
    assert math.isclose(i.ce_rounds, 534.0 / WINDOW)
    bound = bounds.loss(i)
    assert bound is not None and bound.name == "loss" and bound.side == "path"
    assert math.isclose(bound.rate, _mathis(534.0 / WINDOW / 5796.0), rel_tol=1e-9)
    assert bound.meets(i.steady_rate)  # 0.99 MB/s is 100% of it
    assert "33 round trips marked CE" in bound.words and "0 lost" in bound.words


def test_marks_count_once_per_round_trip_not_per_packet_nor_per_echoed_segment() -> None:
    # The same marks echoed over a window four times larger are a quarter of the round
    # trips (a queue that marked a burst in each): p, and the bound, follow the round trips.
    few = Inputs.of(_marked(cwnd_avg_segments=4 * WINDOW), ROUTER)
    many = Inputs.of(_marked(), ROUTER)
    assert math.isclose(few.ce_rounds * 4, many.ce_rounds)
    lower, higher = bounds.loss(many), bounds.loss(few)
    assert lower is not None and higher is not None
    assert math.isclose(higher.rate / lower.rate, 2.0, rel_tol=1e-9)  # sqrt(4)
    # A single echoed segment is one marked round trip, not a fraction of one.
    assert Inputs.of(_marked(delivered_ce_segments=3.0), ROUTER).ce_rounds == 1.0


def test_ecn_marks_without_loss_are_congestion_on_the_path_named_as_marks() -> None:
    limit = judge_limit(_marked(), ROUTER)
    assert limit is not None
    assert (limit.reason, limit.side, limit.detail) == ("congestion", "path", "ecn"), limit.evidence
    assert "ECN marking (congestion on the path: a queue that marks)" in limit.evidence
    assert "about 33 of 356 round trips marked CE by the path" in limit.evidence
    assert "534 of 5796 segments acknowledged with the receiver's ECN echo" in limit.evidence
    # Its bound beside the rate, and nothing in the words says the opposite of it.
    assert "allows 0.99 MB/s" in limit.evidence and "steady rate was 0.99 MB/s" in limit.evidence
    assert evidence.contradictions(limit.reason, limit.side, limit.evidence) == []
    # Nothing was dropped: no evidence line claims a loss (tests/support/against_truth.py).
    truth = {"dropped": 0, "other_bytes": 0, "path_nft_marked_ce": 29, "local_ce_received": 29, "receiver": "local"}
    assert against_truth.contradicted(limit.evidence, truth, limit.side) == []


def test_the_next_step_for_marks_is_the_marking_queue_never_ecn_itself() -> None:
    limit = judge_limit(_marked(), ROUTER)
    assert limit is not None
    step = limit.next_step
    assert "a queue on the path marks CE" in step and "operator" in step
    assert "tcp_ecn" not in step and "enable ECN" not in step
    assert "net.ipv4.tcp_congestion_control=bbr" in step and "the remote (site)" in step
    # Nor bbr to a sender already on it (its marks are no congestion events anyway: below).
    on_bbr = Inputs.of(_marked("bbr"), ROUTER)
    assert on_bbr.ce_rounds == 0.0


def test_a_bbr_sender_takes_no_bound_from_ce_marks() -> None:
    # BBR (v1) does not slow for CE: the marks are no congestion events, no Mathis bound
    # holds it, and the verdict does not name them.
    i = Inputs.of(_marked("bbr"), ROUTER)
    assert i.ce_rounds == 0.0 and i.congestion == 0.0
    assert bounds.loss(i) is None
    limit = judge_limit(_marked("bbr"), ROUTER)
    assert limit is not None and limit.reason != "congestion"
    assert "marked CE" not in limit.evidence


def test_marks_whose_bound_the_rate_does_not_meet_are_withheld_with_the_bounds() -> None:
    # The same marks on a transfer at 0.3 MB/s, 31% of the 0.96 MB/s they allow: something
    # else held it, not the marks; withheld, the bounds listed.
    slow = {"steady_rate_bytes_per_second": 0.3e6, "busy_seconds": 27.5, "stream_busy_max_seconds": 27.5}
    limit = judge_limit(_marked(duration=28.0, data_end_seconds=27.9, **slow), ROUTER)
    assert limit is not None and limit.reason == ""
    assert limit.evidence.startswith("withheld congestion"), limit.evidence
    # (Named ce_marks where nothing was lost: no bound called a loss where there was none.)
    assert "bounds computed:" in limit.evidence and "ce_marks 0.96 MB/s" in limit.evidence
    truth = {"dropped": 0, "other_bytes": 0, "path_nft_marked_ce": 29, "local_ce_received": 29, "receiver": "local"}
    assert against_truth.contradicted(limit.evidence, truth, "") == []
    # And a single marked round trip in 5796 segments (0.02%, its bound 5.7 MB/s) did not hold it.
    one = judge_limit(_marked(delivered_ce_segments=15.0), ROUTER)
    assert one is not None and one.reason != "congestion"


def test_a_few_marked_round_trips_whose_bound_meets_the_rate_are_named_below_the_loss_share() -> None:
    # A queue that marks in bursts: 5 marked round trips in 5796 segments (0.09%, under the
    # 0.1% a loss needs), their bound 2.6 MB/s, the steady rate 2.18 MB/s (84% of it).
    fast = {"steady_rate_bytes_per_second": 2.18e6, "cwnd_avg_segments": 35.7, "delivered_ce_segments": 178.5}
    limit = judge_limit(_marked(duration=4.4, data_end_seconds=4.2, busy_seconds=4.2, **fast), ROUTER)
    assert limit is not None and (limit.reason, limit.detail) == ("congestion", "ecn"), limit.evidence
    assert "about 5 of" in limit.evidence


def test_two_marked_round_trips_are_no_sawtooth_whatever_their_bound() -> None:
    # A breaker's link (100 Mbit/s, its capacity unknown) with 2 CE marks in a CUBIC
    # transfer: the rate was the link's, the same without the marks, and 85% of the bound
    # the two marks give; the response function is a sawtooth's mean, and two events make
    # none: not congestion.  Five make one (the test above).
    unknown = PathBaseline("site", 0.0, rtt_min_seconds=0.0204, mtu_bytes=1500)
    two = {"delivered_ce_segments": 2 * MARKED["cwnd_avg_segments"]}
    bound = bounds.loss(Inputs.of(_marked(**two), unknown))
    assert bound is not None and round(Inputs.of(_marked(**two), unknown).ce_rounds) == 2
    steady = 0.85 * bound.rate
    assert bound.meets(steady)
    took = 8 * MiB / steady
    fast = {"steady_rate_bytes_per_second": steady, "busy_seconds": took, "data_end_seconds": took}
    limit = judge_limit(_marked(duration=took + 0.4, **two, **fast), unknown)
    assert limit is None or limit.reason != "congestion", limit.evidence


def test_losses_and_marks_add_up_as_congestion_events() -> None:
    i = Inputs.of(_marked(retransmits=20.0), ROUTER)
    assert i.real_losses == 20
    assert math.isclose(i.congestion_events, 20 + 534.0 / WINDOW)
    bound = bounds.loss(i)
    assert bound is not None and "20 lost and 33 round trips marked CE" in bound.words
    # Fewer losses than marked round trips: ECN marking, the losses said beside the marks.
    limit = judge_limit(_marked(retransmits=20.0), ROUTER)
    assert limit is not None and (limit.reason, limit.detail) == ("congestion", "ecn"), limit.evidence
    assert "20 retransmitted of 5796 segments" in limit.evidence
    # More losses than marks: the path drops; congestion from the losses, its bound counting both.
    limit = judge_limit(_marked(retransmits=60.0), ROUTER)
    assert limit is not None and (limit.reason, limit.detail) == ("congestion", ""), limit.evidence
    assert "ECN marking" not in limit.evidence and "60 lost and 33 round trips marked CE" in limit.evidence


# A real `ss -tinH` line of a CUBIC sender through the marking router (iproute2 6.1, Linux 6.18).
SS_MARKED = """\
ESTAB 0      131768 10.242.1.1:34812 10.242.2.1:5242
\t cubic wscale:10,10 rto:204 rtt:2.991/0.683 mss:1448 pmtu:1500 rcvmss:536 advmss:1448 cwnd:24 ssthresh:23 \
bytes_sent:17355357 bytes_acked:17320606 segs_out:11989 segs_in:4060 data_segs_out:11987 send 92950853bps lastsnd:4 \
lastrcv:1500 lastack:4 pacing_rate 111531696bps delivery_rate 98100208bps delivered:11964 delivered_ce:647 \
busy:1484ms unacked:24 reord_seen:1 rcv_space:14480 rcv_ssthresh:64088 notsent:97016 minrtt:0.01 snd_wnd:1593344
"""


def test_ss_gives_the_segments_delivered_and_those_echoed_ce() -> None:
    (s,) = parse_ss(SS_MARKED)
    assert (s.delivered, s.delivered_ce, s.cwnd) == (11964, 647, 24)
    values = summarise([], [Listing(1.0, [s])], []).values
    assert values["delivered_segments"] == 11964.0 and values["delivered_ce_segments"] == 647.0
    assert values["cwnd_avg_segments"] == 24.0


def test_marks_claimed_where_the_path_marked_none_are_contradicted() -> None:
    limit = judge_limit(_marked(), ROUTER)
    assert limit is not None
    unmarked = {"dropped": 0, "other_bytes": 0, "path_nft_marked_ce": 0, "local_ce_received": 0, "receiver": "local"}
    found = against_truth.contradicted(limit.evidence, unmarked, limit.side)
    assert any("CE marks claimed" in f for f in found), found


def test_a_passive_upload_through_a_marking_queue_is_judged_by_the_same_bound() -> None:
    # The passive watcher's flows are summarised (summarise) and judged (with_limit) as a
    # scheduled transfer is: the same marks, from this host's own sender sockets.
    t = Tracker(SELECTION, linger=0.5, max_flows=10)
    t.listing(0.0, [])
    key = ("10.0.0.1:40000", "198.51.100.7:22")
    rate, rtt, window = 0.96e6, 0.0237, 15
    info = {"congestion_control": "cubic", "mss": 1448, "cwnd": window, "rtt_seconds": rtt, "min_rtt_seconds": 0.0206,
            "snd_wnd_bytes": 2_000_000, "notsent_bytes": 100_000}  # fmt: skip
    for step in range(1, 17):
        at = step * 0.5
        sent = int(rate * at)
        t.listing(at, [sock(*key, acked=sent, busy_seconds=at, segs_out=sent // 1448,
                            delivered=sent // 1448, delivered_ce=int(sent / 1448 * 0.092), **info)])  # fmt: skip
    sent = int(rate * 8.2)
    closing = {**info, "notsent_bytes": 0, "busy_seconds": 8.2, "segs_out": sent // 1448}
    t.closed(8.2, [sock(*key, acked=sent, delivered=sent // 1448, delivered_ce=int(sent / 1448 * 0.092), **closing)])
    (due,) = t.due(9.0, lost_after=3.0)
    baseline = PathBaseline("archive", 0.0, rtt_min_seconds=0.0204, bandwidth_bytes_per_second=12.5e6,
                            bandwidth_source="configured", mtu_bytes=1500)  # fmt: skip
    r = result_of(due, now_wall=1_000_000.0, now_mono=9.0, baseline=baseline, min_bytes=1 << 20)
    assert r is not None and r.direction == "upload"
    assert r.tcp_local["delivered_ce_segments"] > 0
    assert (r.limited_by, r.limited_side) == ("congestion", "path"), r.limited_evidence
    assert "round trips marked CE by the path" in r.limited_evidence


def test_the_marked_window_is_never_less_than_what_the_rate_had_in_flight() -> None:
    # A CI run's listings (1,287 segments echoed, a listed mean window of 14 segments, 1.40
    # MB/s over 21.8 ms: 21 segments in flight) and its router's 35 marked packets: over the
    # listed window, 91 marked round trips (2.6 per packet the path marked, each needs one);
    # over what the rate had in flight, 61.
    seen = {"cwnd_avg_segments": 14.0, "delivered_ce_segments": 1287.0, "delivered_segments": 5796.0,
            "rtt_avg_seconds": 0.0218, "steady_rate_bytes_per_second": 1.40e6}  # fmt: skip
    i = Inputs.of(_marked(duration=8 * MiB / 1.40e6 + 0.4, **seen), ROUTER)
    assert math.isclose(i.ce_window, i.steady_rate * 0.0218 / 1448.0) and i.ce_window > 20
    assert i.ce_rounds <= against_truth.CE_ROUNDS_OVER * 35
