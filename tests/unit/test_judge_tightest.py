"""The tightest met bound holds the rate, and ssh's window holds only a sender with nothing
unsent: breaker-ssh-1's results (tests/unit/data/breaker_ssh: the Results of its real runs
on a plain remote, 100 ms, BBR, the path's capacity unknown), re-judged with the round's
buffers as they were read (tcp_wmem 4 MiB here, tcp_rmem 32 MiB there; its 3 MiB causes).

- A 130 Mbit/s tbf below ssh's window (15.5 MB/s of data against 2 MiB / 105 ms = 19.9):
  main named application/ssh_window (7 of 9); the sender had unsent data in 80-100% of its
  listings (in flight 1.62 MB of the 2.10 MB window: the link held it).
- A 3 MiB send buffer just above the window: main named send_buffer (5 of 6), its bound
  29.9-30.4 MB/s met at 55-61% inside the buffers' 40%, while the lower ssh_window bound
  was met at 84-92% with the whole window in flight (rates as with a 4 MiB buffer).
- A remote starved of CPU is not named over a met receive window whose receiver kept up
  (fresh-clone CI at load 14: "its own listings came up to 3.9 s late" beside an 80,896 B
  window over 82.1 ms allowing 0.99 MB/s, steady 0.95)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bigbinf.judge.verdict import judge_limit
from bigbinf.result import PathBaseline, Result

from ..support import evidence

DATA = Path(__file__).parent / "data" / "breaker_ssh"


# The kernel's app-limited flag in the samples in which the sender sent, as the breaker's
# own `ss -tin` every 0.2 s read it (flagged, samples): the stored Results' share counts
# every listing of the socket, ssh's idle login and tail too (measure/tcp/state.py now
# counts the sending samples, as the backlog's).
FLAGGED_WHILE_SENDING = {
    "bk130-scp_f64m_upload-bbk7961a45-run1": (0, 19),
    "bk130-scp_f64m_upload-bbk7961a45-run2": (0, 20),
    "bk130-scp_f64m_download-bbk5ce5978-run1": (1, 18),
    "bk130-scp_f64m_download-bbk5ce5978-run2": (2, 19),
    "bk130-sftp_f64m_upload-bbk4e31f01-run1": (0, 18),
    "bk130-sftp_f64m_upload-bbk4e31f01-run2": (0, 19),
    "bk130-sftp_f64m_download-bbkf52a72c-run1": (2, 21),
    "bk400-scp_f64m_download-bbk34f3fc4-run1": (17, 17),
    "bk400-scp_f64m_download-bbk34f3fc4-run2": (16, 16),
    "bk400-scp_f64m_download-bbk34f3fc4-run3": (16, 16),
    "bk400-scp_f64m_upload-bbk70ac3f5-run2": (16, 17),
    "bk400-scp_f64m_upload-bbk70ac3f5-run3": (15, 16),
    "bk400-scp_f64m_upload-bbk5501c00-run1": (15, 16),
    "bk400-scp_f64m_upload-bbk2a068c0-run1": (16, 17),
}


def result(name: str) -> Result:
    r = Result.from_json(json.loads((DATA / f"{name}.json").read_text()))
    flagged, samples = FLAGGED_WHILE_SENDING[name]
    side = "tcp_local" if r.direction == "upload" else "tcp_remote"
    return dataclasses.replace(r, **{side: {**getattr(r, side), "app_limited_sending_ratio": flagged / samples}})


def baseline(r: Result, local_wmem: float = 4194304.0, remote_wmem: float = 4194304.0) -> PathBaseline:
    rtt = min(t["min_rtt_seconds"] for t in (r.tcp_local, r.tcp_remote) if t.get("min_rtt_seconds"))
    return PathBaseline(
        r.remote,
        0.0,
        rtt_min_seconds=rtt,
        mtu_bytes=1500,
        buffers={
            "local": {"tcp_rmem": 6291456.0, "tcp_wmem": local_wmem, "tcp_moderate_rcvbuf": 1.0},
            "remote": {"tcp_rmem": 33554432.0, "tcp_wmem": remote_wmem, "tcp_moderate_rcvbuf": 1.0},
        },
        congestion_control={"local": "bbr", "remote": "bbr"},
    )


def judged(r: Result, b: PathBaseline) -> tuple[str, str, str, str]:
    limit = judge_limit(r, b)
    assert limit is not None
    assert evidence.contradictions(limit.reason, limit.side, limit.evidence) == [], limit.evidence
    return limit.reason, limit.side, limit.detail, limit.evidence


LINK_BELOW_WINDOW = [
    "bk130-scp_f64m_upload-bbk7961a45-run1",
    "bk130-scp_f64m_upload-bbk7961a45-run2",
    "bk130-scp_f64m_download-bbk5ce5978-run1",
    "bk130-scp_f64m_download-bbk5ce5978-run2",
    "bk130-sftp_f64m_upload-bbk4e31f01-run1",
    "bk130-sftp_f64m_upload-bbk4e31f01-run2",
    "bk130-sftp_f64m_download-bbkf52a72c-run1",
]


@pytest.mark.parametrize("name", LINK_BELOW_WINDOW)
def test_a_link_below_ssh_s_window_with_a_standing_backlog_is_not_the_window(name: str) -> None:
    r = result(name)
    assert r.limited_by == "application"  # main's verdict, ssh_window
    assert r.sender_tcp["sender_backlog_ratio"] >= 0.8
    reason, _, detail, words = judged(r, baseline(r))
    assert detail != "ssh_window" and reason != "application", words
    assert "ssh's channel window 2.0 MiB (OpenSSH" not in words.split("bounds computed")[0]


WINDOW_WITH_A_3MIB_BUFFER = [
    ("bk400-scp_f64m_upload-bbk70ac3f5-run2", "local"),
    ("bk400-scp_f64m_upload-bbk70ac3f5-run3", "local"),
    ("bk400-scp_f64m_download-bbk34f3fc4-run1", "remote"),
    ("bk400-scp_f64m_download-bbk34f3fc4-run2", "remote"),
    ("bk400-scp_f64m_download-bbk34f3fc4-run3", "remote"),
]


@pytest.mark.parametrize(("name", "sender"), WINDOW_WITH_A_3MIB_BUFFER)
def test_a_send_buffer_met_above_ssh_s_met_window_yields_to_the_window(name: str, sender: str) -> None:
    r = result(name)
    assert r.limited_by == "send_buffer"  # main's verdict
    b = baseline(r, **{f"{sender}_wmem": 3145728.0})
    reason, side, detail, words = judged(r, b)
    assert (reason, side, detail) == ("application", "local", "ssh_window"), words
    # The higher bound is said, met too, but not the limit.
    assert "send buffer 3.15 MB (3145728 B) (at its tcp_wmem maximum" in words
    assert "met the rate too" in words and "the lower bound holds it" in words
    limit = judge_limit(r, b)
    assert limit is not None and "tcp_wmem" not in limit.next_step and "HPN-SSH" in limit.next_step


def test_the_window_alone_is_still_the_window_and_a_tcp_window_below_it_is_tcp_s() -> None:
    control = result("bk400-scp_f64m_upload-bbk5501c00-run1")  # 4 MiB buffers: the window alone
    assert judged(control, baseline(control))[:3] == ("application", "local", "ssh_window")
    # The remote's tcp_rmem at 3 MiB: its advertised 1.96 MB window below ssh's 2.10 MB.
    capped = result("bk400-scp_f64m_upload-bbk2a068c0-run1")
    b = baseline(capped)
    b = dataclasses.replace(b, buffers={**b.buffers, "remote": {**b.buffers["remote"], "tcp_rmem": 3145728.0}})
    assert judged(capped, b)[:2] == ("receive_window", "remote")


def starved(queue: float) -> Result:
    """The remote's tcp_rmem 3 MiB upload (receive_window, its bound met), its listings up
    to 6 s late on a machine it shares with this host (its sshd queued 30% of its life)."""
    r = result("bk400-scp_f64m_upload-bbk2a068c0-run1")
    programs = {k: dict(v) for k, v in r.programs.items()}
    for k, v in programs.items():
        if k.startswith("remote "):
            v["run_queue_seconds"] = 0.3 * v["seconds"]
    return dataclasses.replace(
        r,
        programs=programs,
        remote_view={**r.remote_view, "listing_late_max_seconds": 6.0},
        host_busy={"load1": 14.0},
        tcp_remote={**r.tcp_remote, "rcv_queue_ratio_avg": queue},
    )


def test_late_listings_do_not_outrank_a_met_window_whose_receiver_kept_up() -> None:
    r = starved(queue=0.01)
    b = baseline(r)
    b = dataclasses.replace(b, buffers={**b.buffers, "remote": {**b.buffers["remote"], "tcp_rmem": 3145728.0}})
    reason, side, _, words = judged(r, b)
    assert (reason, side) == ("receive_window", "remote"), words
    # A receiver whose queue stood full is no buffer's: the starved remote stands.
    reason, side, detail, words = judged(starved(queue=0.6), b)
    assert (reason, side, detail) == ("cpu", "remote", "starved"), words
