"""Every verdict the rules can give, checked against its own evidence (issue 34, item 4):
a broad synthetic set of transfers (both directions, paths from 1 ms to 400 ms and from
1 Mbit/s to 10 Gbit/s, estimates right, absent or stale, senders asked or not, windows,
buffers, loss, idleness, programs on either host, the remote seen or not, busy hosts),
each judged, and each number in the evidence read back from its words and checked against
the rule that chose the verdict (tests/support/evidence.py).  The lab's verdict matrix
runs the same check on real transfers (tests/support/verdicts.py)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bigbinf.judge import vetoes
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.verdict import judge_limit, rules_verdict
from bigbinf.result import LIMIT_SIDES, LIMITS, PathBaseline, Result

from ..support import evidence


def _maybe(rng: random.Random, p: float = 0.5) -> bool:
    return rng.random() < p


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return float(low * (high / low) ** rng.random())


def transfer(rng: random.Random) -> tuple[Result, PathBaseline | None]:
    """One synthetic transfer and its path baseline, every part drawn independently so
    that combinations the lab never made are judged too."""
    direction = rng.choice(["download", "upload"])
    protocol = rng.choice(["http", "scp", "sftp", "iperf3", "gridftp"])
    rtt = _log_uniform(rng, 0.001, 0.4)
    bandwidth = _log_uniform(rng, 1.25e5, 1.25e9)
    baseline = None
    if _maybe(rng, 0.85):
        kind = rng.choice(["tcp_rmem", "tcp_wmem"])
        side = rng.choice(["local", "remote"])
        baseline = PathBaseline(
            "r",
            0.0,
            rtt_min_seconds=rtt,
            probes_sent=10,
            probes_answered=rng.choice([10, 10, 9]),
            bandwidth_bytes_per_second=bandwidth if _maybe(rng, 0.8) else None,
            bandwidth_source=rng.choice(["configured", "lab", "iperf3"]),
            buffers={
                side: {
                    kind: _log_uniform(rng, 6.4e4, 6.4e7),
                    **({"tcp_moderate_rcvbuf": 0.0} if _maybe(rng, 0.2) else {}),
                }
            }
            if _maybe(rng)
            else {},
            mtu_bytes=rng.choice([None, 1500, 9000, 1280]),
        )
    # The transfer's own rate: mostly at or below the path, now and then above (a stale estimate).
    rate = bandwidth * rng.choice([_log_uniform(rng, 0.01, 1.0), rng.uniform(0.85, 1.0), rng.uniform(1.0, 3.0)])
    file_bytes = int(_log_uniform(rng, 6.4e4, 4e9))
    duration = max(0.05, file_bytes / rate)
    span = duration * rng.uniform(0.3, 1.0)
    start = rng.uniform(0.0, duration - span)
    segs = max(10.0, file_bytes / 1448)
    sender: dict[str, float] = {}
    if _maybe(rng, 0.85):
        busy = span * rng.choice([rng.uniform(0.05, 0.6), rng.uniform(0.6, 1.0)])
        sender = {
            "busy_seconds": busy,
            "rwnd_limited_seconds": busy * rng.choice([0.0, rng.uniform(0, 1)]),
            "sndbuf_limited_seconds": busy * rng.choice([0.0, rng.uniform(0, 1)]),
            "segs_out": segs,
            "mss_bytes": rng.choice([1448.0, 8948.0, 524.0]),
        }
        for key, value in (
            ("sender_backlog_ratio", rng.random()),
            ("app_limited_ratio", rng.choice([0.0, rng.random()])),
            ("cwnd_max_segments", _log_uniform(rng, 4, 20000)),
            ("sending_samples", float(rng.choice([1, 2, 5, 40, 400]))),
            ("sndbuf_max_bytes", _log_uniform(rng, 6.4e4, 6.4e7)),
            # The round trip it saw: the path's, or above it by a queue.
            ("rtt_avg_seconds", rtt * rng.choice([1.0, 1.05, 1.5, 3.0])),
            # The window its receiver advertised: near what the rate needs, or far off.
            ("snd_wnd_median_bytes", rate * rtt * rng.choice([1.0, 1.1, _log_uniform(rng, 0.1, 10)])),
            ("zero_window_samples", float(rng.choice([0, 0, 1, 10, 100]))),
        ):
            if _maybe(rng, 0.8):
                sender[key] = value
        if _maybe(rng, 0.15):
            streams = rng.choice([2, 4, 8])
            low = rng.random()
            sender.update(
                streams=float(streams),
                stream_busy_max_seconds=busy / streams * rng.uniform(1, 2),
                stream_busy_min_seconds=busy / streams * rng.uniform(0.2, 1),
                stream_rwnd_share_min=low,
                stream_rwnd_share_max=rng.uniform(low, 1),
            )
    receiver: dict[str, float] = {}
    if _maybe(rng, 0.6):
        receiver["rcv_queue_ratio_avg"] = rng.choice([0.0, rng.random()])
    if _maybe(rng, 0.5):
        receiver["rcvbuf_max_bytes"] = _log_uniform(rng, 6.4e4, 6.4e7)
    progress: dict[str, float] = {}
    if _maybe(rng, 0.8):
        progress = {"data_start_seconds": start, "data_end_seconds": start + span * rng.choice([0.0, 1.0, 1.0])}
        if _maybe(rng, 0.8):
            progress["steady_rate_bytes_per_second"] = rate * rng.choice([1.0, rng.uniform(0.5, 3.0)])
    # Progress is timed on the side whose listings were timed: ours, or the remote's.
    local, remote = (receiver, sender) if direction == "download" else (sender, receiver)
    if _maybe(rng):
        local = {**local, **progress}
    else:
        remote = {**remote, **progress}
    programs: dict[str, dict[str, float]] = {}
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        side = rng.choice(["local", "remote"])
        name = rng.choice(["ssh", "sshd", "curl", "nginx", "scp", "globus-url-copy"])
        runnable = rng.random()
        programs[f"{side} {name}"] = {
            "seconds": duration * rng.uniform(0.1, 1.0),
            "cpu_seconds": duration * runnable * rng.random(),
            "cpu_share": runnable * rng.random(),
            "runnable_share": runnable,
            "io_wait_share": rng.choice([0.0, rng.random() * (1 - runnable)]),
            "samples": float(rng.randint(1, 400)),
            "run_queue_seconds": duration * rng.choice([0.0, rng.uniform(0, 0.5)]),
            "run_queue_seconds_before_data": start * rng.choice([0.0, rng.random()]),
        }
    remote_view: dict[str, float] = {}
    if _maybe(rng, 0.7):
        expected = float(rng.randint(0, 400))
        for key, value in (
            ("listings_expected", expected),
            ("listings_received", float(rng.randint(0, int(expected)))),
            ("listing_late_max_seconds", rng.choice([0.05, rng.uniform(0, duration)])),
            ("programs_seen", float(rng.choice([0, 1, 3]))),
            ("cpu_throttled_share", rng.choice([0.0, rng.random()])),
        ):
            if _maybe(rng, 0.8):
                remote_view[key] = value
    host_busy: dict[str, float] = {}
    if _maybe(rng, 0.5):
        host_busy = {k: rng.choice([0.0, rng.uniform(0, 0.5)]) for k in ("transfer_programs", "capture", "delay_line")}
        host_busy["load1"] = rng.uniform(0, 30)
    payload = file_bytes
    wire = int(payload * rng.choice([1.0, 1.05]))
    retransmits = rng.choice([0, 0, int(segs * _log_uniform(rng, 1e-5, 0.3))])
    if sender and retransmits and _maybe(rng, 0.3):
        # Spurious retransmissions (reordering): the receiver had some or all of them.
        sender["dsack_dups"] = float(rng.choice([retransmits, int(retransmits * rng.random())]))
    result = Result(
        protocol=protocol,
        remote="r",
        dataset="d",
        direction=direction,
        start_timestamp=0.0,
        outcome="ok",
        duration_seconds=duration,
        file_bytes=file_bytes,
        transport="tcp",
        wire_measured=_maybe(rng, 0.9),
        wire_bytes_down=wire if direction == "download" else 0,
        payload_bytes_down=payload if direction == "download" else 0,
        wire_bytes_up=wire if direction == "upload" else 0,
        payload_bytes_up=payload if direction == "upload" else 0,
        packets_down=int(segs) if direction == "download" else 0,
        packets_up=int(segs) if direction == "upload" else 0,
        retransmits_wire=retransmits,
        retransmits_sender=retransmits if sender and _maybe(rng, 0.8) else None,
        tcp_local=local,
        tcp_remote=remote,
        tcp_buffer_max_bytes=rng.choice([None, None, int(_log_uniform(rng, 6.4e4, 1.6e7))]),
        programs=programs,
        remote_view=remote_view,
        host_busy=host_busy,
    )
    return result, baseline


def check(result: Result, baseline: PathBaseline | None) -> str:
    """The verdict given, after asserting its evidence agrees with it; "" for none."""
    limit = judge_limit(result, baseline)
    if limit is None:
        return ""
    assert limit.reason in ("", *LIMITS) and limit.side in ("", *LIMIT_SIDES), limit
    if not limit.reason:
        assert limit.evidence, "an empty verdict says what was seen"
        if limit.evidence.startswith("no limit found"):
            # Withheld: it says which bounds were computed against the rate.
            assert "no bound met the steady rate" in limit.evidence, limit.evidence
            assert "bounds computed: " in limit.evidence or "no bound could be computed" in limit.evidence
        return ""
    i = Inputs.of(result, baseline)
    said = evidence.contradictions(limit.reason, limit.side, limit.evidence, vetoes.slow_start_seconds(i))
    assert said == [], (said, limit.evidence)
    # The rules themselves never give what the last check would withhold.
    raw = rules_verdict(i)
    assert vetoes.contradiction(raw.reason, raw.side, i) == "" if raw.reason else True, raw
    assert limit.next_step, f"{limit.reason}: no next step"
    return limit.reason


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_no_verdict_s_evidence_contradicts_it(rng: random.Random) -> None:
    check(*transfer(rng))


def test_the_walk_reaches_every_verdict_and_none_contradicts_itself() -> None:
    """A fixed walk of 6,000 transfers (seeded: the same every run) gives every reason of
    result.LIMITS, so the check above is not vacuous for any of them."""
    rng = random.Random(34)
    seen = Counter(check(*transfer(rng)) for _ in range(6000))
    assert set(LIMITS) <= set(seen), f"never given: {sorted(set(LIMITS) - set(seen))}; given: {dict(seen)}"


def test_the_evidence_check_finds_what_it_looks_for() -> None:
    # A check that cannot fail proves nothing: the defects issue 34 quoted, word for word.
    assert evidence.contradictions(
        "application", "remote", "the sender had unsent data in 0% of its samples; app-limited in 0% of the samples"
    )
    assert evidence.contradictions(
        "link_capacity", "path", "steady rate 6.25 MB/s (6.56 MB/s on the wire: 232% of the path's 2.83 MB/s, iperf3)"
    )
    assert evidence.contradictions("receive_window", "local", "the sender was limited by the receive window 4% of ...")
    assert evidence.contradictions(
        "startup", "path", "but the ramp-up to it (slow start) 9.80 s cost 9.9 s", slow_start_most=0.13
    )
    assert evidence.contradictions("congestion", "path", "0 retransmitted of 4000 segments (0.00%, the wire)")
    assert evidence.contradictions("shared_path", "path", "steady rate 24 MB/s (25 MB/s on the wire: 96% of the path's")
    assert not evidence.contradictions(
        "link_capacity", "path", "steady rate 24.00 MB/s (25.20 MB/s on the wire: 96% of the path's 26 MB/s, lab)"
    )
