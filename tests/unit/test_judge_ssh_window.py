"""ssh's fixed channel window (bounds.ssh_window, rules._ssh_window): scp and sftp on a
tuned long fat path are held at 2 MiB per round trip whatever the TCP buffers, and the
verdict names that window, not a slow reader, a remote throttle or the start.  The figures
are breaker42's (100 Mbit/s at 403 ms, both hosts' tcp_rmem/tcp_wmem at 64 MiB, the path's
capacity not configured: `ss` on both ends showed at most 2.11 MB in flight, cwnd 6 MB, the
peer's window 8-11 MB, sftp-server 0.2-0.6% of a core, ssh 1-3%; http 11.4 MB/s on the
same path)."""

from __future__ import annotations

import dataclasses

import pytest

from bigbinf.judge import bounds
from bigbinf.judge.inputs import Inputs
from bigbinf.judge.verdict import judge_limit
from bigbinf.result import PathBaseline, Result

from ..support import evidence
from .test_judge import SEEN, MiB, download, sender, upload

TUNED = {"tcp_rmem": 67108864.0, "tcp_wmem": 67108864.0, "tcp_rmem_min": 4096.0, "tcp_rmem_default": 131072.0}
XLONG = PathBaseline(
    "xlong",
    0.0,
    rtt_min_seconds=0.401,
    buffers={"local": TUNED, "remote": TUNED},
    congestion_control={"local": "cubic", "remote": "cubic"},
)
RTT = 0.403


def program(seconds: float, runnable: float, io_wait: float = 0.0) -> dict[str, float]:
    return {
        "seconds": seconds,
        "cpu_seconds": seconds * runnable,
        "cpu_share": runnable,
        "runnable_share": runnable,
        "io_wait_share": io_wait,
        "samples": seconds / 1.2,
    }


def window_sender(backlog: float, **kw: float) -> dict[str, float]:
    """The sender's tcp_info as `ss` read it: 2 MiB in flight per 403 ms, the peer's window
    9.5 MB, cwnd 6 MB (4144 segments), flagged app-limited (waiting for the window)."""
    return sender(
        busy_seconds=16.0,
        sender_backlog_ratio=backlog,
        app_limited_sending_ratio=0.89,
        sending_samples=60.0,
        rtt_avg_seconds=RTT,
        snd_wnd_median_bytes=9.5e6,
        cwnd_max_segments=4144.0,
        segs_out=47_000.0,
        **kw,
    )


def scp_download(steady: float = 4.45e6, protocol: str = "scp", backlog: float = 0.23) -> Result:
    # B15: steady 4.45 MB/s, set-up 8.45 s, 25.06 s in all; the remote's sftp-server 0.6%.
    return download(
        protocol=protocol,
        remote="xlong",
        remote_view=SEEN,
        duration_seconds=25.06,
        tcp_remote=window_sender(backlog),
        tcp_local={"data_start_seconds": 8.45, "data_end_seconds": 25.0, "steady_rate_bytes_per_second": steady},
        programs={
            "local ssh": program(25.0, 0.03),
            "local scp": program(25.0, 0.01),
            "remote sshd": program(24.0, 0.02),
            "remote sftp-server": program(16.0, 0.006),
        },
    )


def scp_upload(steady: float = 3.94e6, reader_io_wait: float = 0.0) -> Result:
    # B16: steady 3.94 MB/s; "sftp-server (the remote) waited on storage in 0% of 14
    # samples over 17.7 s and was on a core or queued for one 2%".
    return upload(
        protocol="scp",
        remote="xlong",
        remote_view=SEEN,
        duration_seconds=26.5,
        tcp_local=window_sender(
            0.39, data_start_seconds=8.5, data_end_seconds=26.4, steady_rate_bytes_per_second=steady
        ),
        programs={
            "local ssh": program(26.0, 0.02),
            "local scp": program(26.0, 0.01),
            "remote sshd": program(24.0, 0.01),
            "remote sftp-server": program(17.7, 0.02, reader_io_wait),
        },
    )


def said(r: Result) -> tuple[str, str, str, str]:
    limit = judge_limit(r, XLONG)
    assert limit is not None
    assert evidence.contradictions(limit.reason, limit.side, limit.evidence) == [], limit.evidence
    return limit.reason, limit.side, limit.evidence, limit.next_step


def test_the_ssh_window_bound_is_two_mib_over_the_round_trip() -> None:
    # 2097152 B / 0.403 s = 5,203,851 B/s; met from 70% of it (3.64 MB/s) to 125%.
    b = bounds.ssh_window(Inputs.of(scp_download(), XLONG))
    assert b is not None and b.rate == pytest.approx(2 * MiB / RTT) and b.side == "local"
    assert "ssh's channel window 2.0 MiB" in b.words and "over 403.0 ms allows 5.20 MB/s" in b.words
    assert b.meets(3.83e6) and b.meets(4.68e6) and not b.meets(3.5e6) and not b.meets(6.6e6)
    # Only for a transfer in an OpenSSH channel: not http, not HPN-SSH (its window grows).
    assert (
        bounds.ssh_window(Inputs.of(dataclasses.replace(scp_download(), protocol="http", programs={}), XLONG)) is None
    )
    assert bounds.ssh_window(Inputs.of(scp_download(protocol="hpn-scp"), XLONG)) is None
    hpn = {**scp_download().programs, "local hpnssh": program(25.0, 0.03)}
    assert bounds.ssh_window(Inputs.of(dataclasses.replace(scp_download(), programs=hpn), XLONG)) is None


@pytest.mark.parametrize("steady", [3.85e6, 4.45e6, 4.68e6])
def test_an_scp_download_held_by_the_ssh_window_names_the_window_not_the_remote(steady: float) -> None:
    # Before the bound: application on the remote, "its program sent no faster (a
    # throttle...)", next step an nginx limit_rate there (7 of 12), or startup (5 of 12).
    reason, side, words, step = said(scp_download(steady))
    assert (reason, side) == ("application", "local"), words
    assert f"allows 5.20 MB/s (42 Mbit/s); the transfer's steady rate was {steady / 1e6:.2f} MB/s" in words
    assert "sent no faster" not in words and "throttle" not in words
    assert "no program busy" in words and "the TCP bounds well above it (receive_window 23.57 MB/s" in words
    assert "HPN-SSH" in step and "GridFTP or HTTP" in step and "not the TCP buffers" in step
    assert "limit_rate" not in step and "tcp_rmem" not in step and "larger files" not in step


def test_an_scp_download_with_a_backlog_held_by_the_ssh_window_is_not_startup() -> None:
    # ssh's socket with unsent data in most samples, its kernel flagging it app-limited
    # (89%: waiting for its program, the window): before the bound nothing met the steady
    # rate and startup was named, "files of at least 406 MB would average within 10%" (5
    # of 12): a larger file would still run at 4.5 MB/s.
    reason, side, words, step = said(scp_download(backlog=0.6))
    assert (reason, side) == ("application", "local"), words
    assert "ssh's channel window 2.0 MiB" in words and "larger files" not in step


def test_a_standing_backlog_the_kernel_never_flagged_app_limited_is_not_the_ssh_window() -> None:
    # ssh writes at most its window and TCP sends all it is given: a sender the window
    # holds waits for its program (the kernel's app-limited flag).  Unsent data in 85% of
    # the samples, flagged in 5% of them, is TCP holding what ssh wrote (breaker-ssh-1: a
    # link below the window, 80-100% and 0-11%; the window alone, 0-50% and 94-100%).
    r = scp_download(backlog=0.85)
    held = dataclasses.replace(r, tcp_remote={**r.tcp_remote, "app_limited_sending_ratio": 0.05})
    reason, _, words, _ = said(held)
    assert reason != "application" and "ssh's channel window (application)" not in words, words


def test_an_scp_upload_held_by_the_ssh_window_does_not_blame_the_idle_reader() -> None:
    # Before: application on the remote, "the remote's reader ... kept the sender waiting"
    # beside its own figures (sftp-server 0% on storage, 2% on a core), next step "lift
    # its rate limit (curl --limit-rate ...)".
    reason, side, words, step = said(scp_upload())
    assert (reason, side) == ("application", "local"), words
    assert "ssh's channel window 2.0 MiB" in words and "the transfer's steady rate was 3.94 MB/s" in words
    assert "kept the sender waiting" not in words
    assert "HPN-SSH" in step and "--limit-rate" not in step


def test_a_slow_reader_through_ssh_is_still_the_reader() -> None:
    # The reader on storage 90% of its life: its disk, not the window, whatever the rate.
    reason, side, words, _ = said(scp_upload(reader_io_wait=0.9))
    assert (reason, side) == ("disk", "remote"), words
    # A reader well below the window (2.0 MB/s: 38% of 5.20): the window is not met, and
    # the reader is named as before.
    reason, side, words, _ = said(scp_upload(steady=2.0e6))
    assert (reason, side) == ("application", "remote"), words
    assert "kept the sender waiting" in words and "ssh's channel window" not in words.split("bounds computed")[0]


def test_a_tcp_bound_near_the_rate_is_not_ssh_s_window() -> None:
    # The peer's window 2.5 MB (6.20 MB/s over 403 ms, 1.4x the rate): a TCP bound within
    # reach of the rate, so the window is not named as the only limit.
    r = scp_download()
    narrow = dataclasses.replace(r, tcp_remote={**r.tcp_remote, "snd_wnd_median_bytes": 2.5e6})
    limit = judge_limit(narrow, XLONG)
    assert limit is not None and "ssh's channel window 2.0 MiB (OpenSSH" not in limit.evidence.split(";")[0]


def test_a_start_that_cost_more_than_the_window_names_the_window_too() -> None:
    # The path's capacity configured (12.5 MB/s): the window cost 64 MiB / 4.45 MB/s less
    # 64 MiB / 12.5 MB/s = 9.71 s, the start (8.45 s of ssh's round trips) 9.98 s: startup,
    # as the rules order it, with the steady phase's limit named as ssh's window.
    path = dataclasses.replace(XLONG, bandwidth_bytes_per_second=12.5e6, bandwidth_source="configured")
    limit = judge_limit(scp_download(), path)
    assert limit is not None and limit.reason == "startup", limit
    assert "its steady phase was limited by ssh's channel window (application)" in limit.evidence
