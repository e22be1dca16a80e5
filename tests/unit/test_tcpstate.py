"""TCP state from ss: parsing real listings (tests/unit/data/tcpstate, recorded in the lab),
the summary's arithmetic on hand-made listings, and the watch and sysctl commands run as
real subprocesses through fake prefixes (no root, no mocks)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bigbinf.measure.tcp.state import (
    SYSCTL_KEYS,
    VALUE_KEYS,
    Listing,
    SocketInfo,
    TcpStateError,
    TcpWatch,
    _split_own,
    parse_ss,
    read_tcp_settings,
    summarise,
)

DATA = Path(__file__).parent / "data" / "tcpstate"


def _load(name: str) -> list[SocketInfo]:
    return parse_ss((DATA / name).read_text())


def _by_port(sockets: list[SocketInfo], port: str) -> SocketInfo:
    (found,) = [s for s in sockets if s.local.endswith(f":{port}") or s.peer.endswith(f":{port}")]
    return found


# ---------------------------------------------------------------- parse_ss


def test_download_sender_listing_in_base_units() -> None:
    sockets = _load("download_sender_bbr.txt")
    assert [s.key for s in sockets] == [
        ("198.18.0.2:5201", "198.18.0.1:34102"),
        ("198.18.0.2:5201", "198.18.0.1:34100"),
    ]
    data = sockets[0]
    assert data == SocketInfo(
        local="198.18.0.2:5201",
        peer="198.18.0.1:34102",
        congestion_control="bbr",
        cwnd=832,
        ssthresh=494,
        mss=1448,
        rtt_seconds=pytest.approx(0.02391),
        min_rtt_seconds=pytest.approx(0.020201),
        delivery_rate_bytes_per_second=188723040 / 8,  # printed in bits per second
        busy_seconds=1.748,
        bytes_acked=39051112,
        bytes_received=37,
        segs_out=27369,
        rcv_space=14480,
        rcvbuf_bytes=131072,
        sndbuf_bytes=4194304,
        rcv_queue_bytes=0,
        state="ESTAB",
        notsent_bytes=3231680,  # written by iperf3, not yet sent: the network is the limit
        snd_wnd_bytes=2330624,  # the receiver's advertised window
        pmtu=1500,
        advmss=1448,
        wscale=(10, 10),
        delivered=26970,  # tcpi_delivered (no delivered_ce printed: none echoed CE)
    )
    # The control connection: a few bytes, app-limited, no ssthresh printed yet.
    control = sockets[1]
    assert (control.congestion_control, control.app_limited, control.ssthresh) == ("bbr", True, None)
    assert (control.bytes_acked, control.bytes_received, control.busy_seconds) == (4, 179, 0.084)


def test_window_scaling_not_negotiated_is_no_wscale_beside_a_session_that_has_it() -> None:
    # Recorded by a breaker (issue 42): a middlebox stripped the window-scale option from
    # the http download's SYNs; the stats session to the remote, opened before, kept it.
    download, stats = _load("unscaled_receiver_wan80.txt")
    assert (download.wscale, download.mss, download.rcvbuf_bytes) == (None, 1448, 371923)
    assert stats.wscale == (10, 10)
    # Its summary: one data stream read without wscale, none with it.
    values = summarise([], [[download]], []).values
    assert (values["wscale_streams"], values["unscaled_streams"]) == (0.0, 1.0)
    both = summarise([], [[download, stats]], []).values
    assert both["wscale_streams"] == (1.0 if stats.moved_bytes >= 65536 else 0.0)


def test_receiver_listing() -> None:
    data = _by_port(_load("download_receiver.txt"), "34102")
    assert data.bytes_received == 39568048 and data.bytes_acked == 38
    assert (data.rcvbuf_bytes, data.rcv_space, data.rcv_queue_bytes) == (3730544, 637120, 0)
    assert data.app_limited  # a receiver only sends acks and the request: always app-limited


def test_rwnd_limited_reno_sender_and_its_capped_receiver() -> None:
    sender = _by_port(_load("rwnd_limited_sender_reno.txt"), "37534")
    assert sender.congestion_control == "reno"
    assert (sender.busy_seconds, sender.rwnd_limited_seconds, sender.sndbuf_limited_seconds) == (1.904, 1.5, 0.0)
    assert sender.delivery_rate_bytes_per_second == 57914872 / 8
    receiver = _by_port(_load("rwnd_limited_receiver.txt"), "37534")
    assert receiver.rcvbuf_bytes == 262144  # the client's tcp_rmem max


def test_sndbuf_limited_cubic_sender() -> None:
    sender = _by_port(_load("sndbuf_limited_sender_cubic.txt"), "37562")
    assert sender.congestion_control == "cubic"
    assert (sender.sndbuf_limited_seconds, sender.rwnd_limited_seconds, sender.busy_seconds) == (1.54, 0.0, 1.904)
    assert sender.sndbuf_bytes == 131072  # the remote's tcp_wmem max
    assert sender.app_limited  # the kernel flags a send-buffer-limited socket app-limited too


def test_lossy_sender_listing_and_its_close_event() -> None:
    sample = _by_port(_load("loss_sender_cubic.txt"), "50296")
    assert (sample.retransmits_total, sample.ssthresh, sample.cwnd) == (13, 9, 10)
    assert sample.rwnd_limited_seconds == 0.016
    closed = _load("loss_sender_close_events.txt")
    assert [s.state for s in closed] == ["UNCONN", "UNCONN"]
    event = _by_port(closed, "50296")
    # Close events carry tcp_info but neither skmem nor the congestion control name.
    assert (event.congestion_control, event.rcvbuf_bytes, event.sndbuf_bytes) == ("", None, None)
    assert (event.retransmits_total, event.bytes_acked, event.busy_seconds) == (144, 20971521, 16.468)
    assert event.min_rtt_seconds == pytest.approx(0.010)


@pytest.mark.parametrize(
    ("name", "port", "rate_bits"),
    [
        ("wan_human_units.txt", "39246", 554e3),  # kbps
        ("wan_human_units.txt", "39248", 191e6),  # Mbps
        ("loopback_human_units.txt", "54634", 16.4e9),  # Gbps
        ("loopback_human_units.txt", "54640", 122e6),
        ("loopback_numeric.txt", "54634", 16384000000),  # -n: plain bps
    ],
)
def test_delivery_rate_units_become_bytes_per_second(name: str, port: str, rate_bits: float) -> None:
    sockets = _load(name)
    # The side that sends: the client's socket on loopback, the remote's over the WAN.
    client = next(s for s in sockets if s.local.endswith(f":{port}") or s.peer.endswith(f":{port}"))
    assert client.delivery_rate_bytes_per_second == pytest.approx(rate_bits / 8)


def test_human_and_numeric_listings_agree_on_everything_but_rate_rounding() -> None:
    human = {s.key: s for s in _load("loopback_human_units.txt")}
    numeric = {s.key: s for s in _load("loopback_numeric.txt")}
    assert set(human) <= set(numeric)
    for key, s in human.items():
        assert (s.congestion_control, s.mss, s.rcvbuf_bytes) == (
            numeric[key].congestion_control,
            numeric[key].mss,
            numeric[key].rcvbuf_bytes,
        )


def test_socket_with_no_bytes_received_token_and_a_slow_reader() -> None:
    sockets = _load("slow_reader.txt")
    sender = next(s for s in sockets if s.local == "127.0.0.1:5401")
    receiver = next(s for s in sockets if s.local == "127.0.0.1:38234")
    assert sender.bytes_received == 0  # ss prints no bytes_received:0
    assert sender.rwnd_limited_seconds == sender.busy_seconds == 1.368  # 100.0%
    assert sender.retransmits_total == 1
    assert (receiver.rcv_queue_bytes, receiver.rcvbuf_bytes) == (131008, 131072)  # not read: full


def test_time_wait_sockets_have_no_info() -> None:
    sockets = _load("closing_states_all.txt")
    states = [s.state for s in sockets]
    assert states.count("TIME-WAIT") == 8 and states.count("FIN-WAIT-1") == 1
    assert all(not s.has_info and s.mss is None for s in sockets if s.state == "TIME-WAIT")
    closing = next(s for s in sockets if s.state == "FIN-WAIT-1")
    assert closing.has_info and closing.congestion_control == "bbr" and closing.bytes_acked == 441


def test_ssh_session_listing_names_its_own_connection() -> None:
    text = (DATA / "ssh_session_listing.txt").read_text()
    own, rest = _split_own(text)
    assert own == ("198.18.0.1", "44116")
    assert [s.peer for s in parse_ss(rest)] == ["198.18.0.1:44116"]
    assert [s.peer for s in parse_ss(text)] == ["198.18.0.1:44116"]  # the line is no socket either


def test_header_missing_state_column_oneline_crlf_and_junk() -> None:
    line, info = (DATA / "download_sender_bbr.txt").read_text().splitlines()[:2]
    expected = parse_ss(f"{line}\n{info}\n")
    header = "State  Recv-Q Send-Q Local Address:Port  Peer Address:Port Process\n"
    assert parse_ss(f"{header}{line}\n{info}\n") == expected
    no_state = parse_ss(f"{line.removeprefix('ESTAB').lstrip()}\n{info}\n")  # `ss ... state established`
    assert no_state == [SocketInfo(**{**vars(expected[0]), "state": ""})]
    assert parse_ss(f"{line} {info.strip()}\n") == expected  # ss -O: one line per socket
    assert parse_ss(f"{line}\r\n{info}\r\n") == expected  # through a pty
    junk = f"Cannot open netlink socket: Protocol not supported\n{line}\n{info} cwnd:x rtt:/ retrans:3 future:1\n"
    (parsed,) = parse_ss(junk)
    assert parsed.cwnd == 832 and parsed.rtt_seconds == expected[0].rtt_seconds  # malformed repeats ignored
    assert parse_ss("") == [] and parse_ss("\n\t\n") == []


# ---------------------------------------------------------------- summarise

MiB = 1 << 20
A, B, CTL, OLD = "10.0.0.1:40001", "10.0.0.1:40002", "10.0.0.1:40000", "10.0.0.1:22"
LOCAL = "10.0.0.2:5000"


def _s(peer: str, **fields: object) -> SocketInfo:
    return SocketInfo(local=LOCAL, peer=peer, **fields)  # type: ignore[arg-type]


def test_summary_of_two_parallel_streams() -> None:
    baseline = [_s(OLD, bytes_acked=10 * MiB, retransmits_total=7, cwnd=999)]
    listings = [
        # 1: both streams sending
        [
            baseline[0],
            _s(CTL, bytes_acked=100, congestion_control="bbr", retransmits_total=1),
            _s(
                A,
                bytes_acked=1 * MiB,
                delivery_rate_bytes_per_second=10e6,
                cwnd=20,
                rtt_seconds=0.02,
                min_rtt_seconds=0.010,
                congestion_control="cubic",
                sndbuf_bytes=100_000,
                rcvbuf_bytes=50_000,
                mss=1448,
                snd_wnd_bytes=100_000,
            ),
            _s(
                B,
                bytes_acked=2 * MiB,
                delivery_rate_bytes_per_second=5e6,
                cwnd=30,
                ssthresh=25,
                rtt_seconds=0.04,
                min_rtt_seconds=0.011,
                congestion_control="cubic",
                app_limited=True,
                sndbuf_bytes=200_000,
                mss=1448,
                snd_wnd_bytes=50_000,
            ),
        ],
        # 2: only A's acked bytes grew: B's stale rate does not count
        [
            _s(
                A,
                bytes_acked=3 * MiB,
                delivery_rate_bytes_per_second=12e6,
                cwnd=40,
                rtt_seconds=0.03,
                congestion_control="cubic",
                mss=1448,
            ),
            _s(
                B,
                bytes_acked=2 * MiB,
                delivery_rate_bytes_per_second=5e6,
                cwnd=10,
                ssthresh=8,
                rtt_seconds=0.05,
                congestion_control="cubic",
                app_limited=True,
                mss=1448,
                backoff=3,
                notsent_bytes=4096,
            ),
        ],
        # 3: nothing sending any more (the end)
        [_s(A, bytes_acked=3 * MiB, delivery_rate_bytes_per_second=1e6, congestion_control="cubic", mss=1448)],
    ]
    closed = [
        _s(
            A,
            bytes_acked=3 * MiB + 1,
            busy_seconds=2.0,
            rwnd_limited_seconds=0.5,
            retransmits_total=3,
            segs_out=2200,
            bytes_received=40,
            cwnd=35,
            rtt_seconds=0.03,
            mss=1448,
            dsack_dups=2,
            reord_seen=4,
        ),
        _s(
            B,
            bytes_acked=2 * MiB + 1,
            busy_seconds=1.0,
            sndbuf_limited_seconds=0.25,
            retransmits_total=2,
            segs_out=1500,
            mss=1448,
        ),
        _s(OLD, bytes_acked=11 * MiB, retransmits_total=9),  # pre-existing: its close changes nothing
    ]
    summary = summarise(baseline, listings, closed)
    assert (summary.sockets, summary.samples) == (3, 3)  # A, B and the control connection
    assert summary.retransmits == 3 + 2 + 1  # every socket of the transfer, control included
    assert summary.congestion_control == "cubic"  # A's: it moved the most (merged from its listing)
    assert list(summary.values) == [k for k in VALUE_KEYS if k in summary.values]
    assert summary.values == {
        "cwnd_max_segments": 40,
        "cwnd_avg_segments": 27,  # A 20, 40 and its close 35; B 30, 10
        "ssthresh_min_segments": 8,
        "ssthresh_avg_segments": 16.5,  # B's 25 and 8, the ones printed
        "rtt_avg_seconds": pytest.approx((0.02 + 0.04 + 0.03 + 0.05 + 0.03) / 5),  # 4 samples + A's close
        "min_rtt_seconds": 0.010,
        # listing 1: 10e6 + 5e6, listing 2: 12e6 (B stalled), listing 3: nothing sent
        "delivery_rate_median_bytes_per_second": pytest.approx(13.5e6),
        "delivery_rate_max_bytes_per_second": 15e6,
        "busy_seconds": 3.0,
        "rwnd_limited_seconds": 0.5,
        "sndbuf_limited_seconds": 0.25,
        "retransmits": 5,  # data sockets only
        "dsack_dups": 2,  # A's: 2 of its 3 retransmissions had arrived already
        "reord_seen": 4,
        "delivered_segments": 0,  # none printed (ECN: delivered_ce, tests/unit/test_judge_ecn.py)
        "delivered_ce_segments": 0,
        "backoff_max": 3,
        # While sending, summed over the streams sending (listing 1: A's and B's; listing
        # 2: A's alone, which ss left out: none known)
        "snd_wnd_median_bytes": 150_000,
        "snd_wnd_max_bytes": 150_000,
        # ss leaves out a zero window: A in listings 2 and 3, B in 2 (both had one in 1),
        # but only B in listing 2 had data waiting (notsent) that the window held back
        "zero_window_samples": 1,
        "segs_out": 3700,
        "bytes_acked": 5 * MiB + 2,
        "bytes_received": 40,
        "rcvbuf_max_bytes": 50_000,
        "sndbuf_max_bytes": 200_000,
        "rcvbuf_min_bytes": 50_000,
        "sndbuf_min_bytes": 100_000,
        "app_limited_ratio": 2 / 5,  # B flagged in two of the five samples listed
        "app_limited_sending_ratio": 1 / 3,  # in one of the three sending (its stale one not counted)
        "sender_backlog_ratio": 0.0,  # no listing showed unsent data
        "sending_samples": 2,  # listings 1 and 2 saw data move; 3 (the end) did not
        "mss_bytes": 1448,
        # Each stream on its own: A busy 2 s (a quarter of it limited by the window), B 1 s.
        "streams": 2,
        "stream_busy_min_seconds": 1.0,
        "stream_busy_max_seconds": 2.0,
        "stream_rwnd_share_min": 0.0,
        "stream_rwnd_share_max": 0.25,
        # Hand-made sockets with mss and no wscale: read, not negotiated.
        "wscale_streams": 0,
        "unscaled_streams": 2,
    }


def test_delivery_rate_only_from_listings_in_which_data_moved() -> None:
    # scp: the first listings see ssh's handshakes, a few kB at a slow, app-limited rate.
    rates = [(3_000, 50e3), (9_000, 80e3), (2 * MiB, 20e6), (5 * MiB, 24e6), (5 * MiB + 40_000, 23e6)]
    listings = [[_s(A, bytes_acked=acked, delivery_rate_bytes_per_second=rate)] for acked, rate in rates]
    values = summarise([], listings, []).values
    assert values["delivery_rate_median_bytes_per_second"] == 22e6  # of 20e6 and 24e6 only
    assert values["delivery_rate_max_bytes_per_second"] == 24e6


def test_app_limited_share_only_from_listings_in_which_the_sender_sent() -> None:
    # scp through a link below ssh's window: ssh's socket flagged app-limited through its
    # login and after the last data (idle), never while sending with a backlog.  Over all
    # listings that read 54-60% "app-limited (waiting for the window)"; while sending, 0.
    acked = [3_000, 6_000, 9_000, 2 * MiB, 5 * MiB, 8 * MiB, 8 * MiB, 8 * MiB]
    flagged = [True, True, True, False, False, True, True, True]
    listings = [
        [_s(A, bytes_acked=a, app_limited=f, notsent_bytes=0 if f else 400_000)]
        for a, f in zip(acked, flagged, strict=True)
    ]
    values = summarise([], listings, []).values
    assert values["sending_samples"] == 3  # the listings in which data moved
    assert values["sender_backlog_ratio"] == pytest.approx(2 / 3)
    assert values["app_limited_sending_ratio"] == pytest.approx(1 / 3)  # of those three: not of all eight
    # Over every listing (the application rules' evidence: a throttle's idle listings): 6 of 8.
    assert values["app_limited_ratio"] == pytest.approx(6 / 8)


def test_close_event_overrides_samples_and_keeps_what_only_listings_know() -> None:
    listing = [_s(A, bytes_acked=MiB, congestion_control="bbr", rcvbuf_bytes=4096, sndbuf_bytes=8192, cwnd=50)]
    closed = [_s(A, bytes_acked=4 * MiB, retransmits_total=12, cwnd=5, state="UNCONN")]
    summary = summarise([], [listing], closed)
    assert summary.congestion_control == "bbr"
    assert summary.values["bytes_acked"] == 4 * MiB and summary.retransmits == 12
    assert summary.values["cwnd_max_segments"] == 50  # the largest seen, sample or close
    assert summary.values["sndbuf_max_bytes"] == 8192


def test_socket_seen_only_in_a_close_event_counts() -> None:
    # A short connection that lived between two listings (a file of a many-files transfer).
    closed = [_s(A, bytes_received=MiB, retransmits_total=1, rtt_seconds=0.01)]
    summary = summarise([], [[]], closed)
    assert (summary.sockets, summary.retransmits, summary.samples) == (1, 1, 1)
    assert summary.values["bytes_received"] == MiB and summary.values["rtt_avg_seconds"] == 0.01
    assert "delivery_rate_median_bytes_per_second" not in summary.values  # no listing saw it send


def test_receiver_side_queue_fill_and_no_sender_values() -> None:
    listings = [
        [
            _s(
                A,
                bytes_received=1 * MiB,
                bytes_acked=38,
                rcv_queue_bytes=900,
                rcvbuf_bytes=1000,
                app_limited=True,
                cwnd=10,
                delivery_rate_bytes_per_second=60e3,
            )
        ],
        [_s(A, bytes_received=2 * MiB, bytes_acked=38, rcv_queue_bytes=500, rcvbuf_bytes=1000, app_limited=True)],
        # nothing arrived since: an empty queue then says nothing about the reader
        [_s(A, bytes_received=2 * MiB, bytes_acked=38, rcv_queue_bytes=0, rcvbuf_bytes=1000, app_limited=True)],
    ]
    values = summarise([], listings, []).values
    assert values["rcv_queue_ratio_avg"] == pytest.approx(0.7)
    assert values["rcvbuf_max_bytes"] == 1000
    # The receiving socket's own tiny sends make no sender figures.
    for key in ("cwnd_max_segments", "delivery_rate_median_bytes_per_second", "app_limited_ratio"):
        assert key not in values


def test_time_wait_line_does_not_erase_what_was_known() -> None:
    listings = [[_s(A, bytes_acked=MiB, retransmits_total=4, cwnd=9)], [_s(A, state="TIME-WAIT", has_info=False)]]
    summary = summarise([], listings, [])
    assert summary.retransmits == 4 and summary.values["bytes_acked"] == MiB


def test_no_data_socket_no_values() -> None:
    summary = summarise([], [[_s(CTL, bytes_acked=300, congestion_control="reno", retransmits_total=1)]], [])
    assert (summary.sockets, summary.retransmits, summary.congestion_control, summary.values) == (1, 1, "reno", {})
    empty = summarise([_s(OLD, bytes_acked=MiB)], [[_s(OLD, bytes_acked=2 * MiB)]], [])
    assert (empty.sockets, empty.retransmits, empty.congestion_control, empty.values) == (0, 0, "", {})


def test_real_listing_and_close_events_summarised() -> None:
    summary = summarise([], [_load("download_sender_bbr.txt")], _load("download_sender_close_events.txt"))
    assert (summary.sockets, summary.samples, summary.congestion_control) == (2, 1, "bbr")
    assert summary.values["bytes_acked"] == 70110712  # from the close event
    assert summary.values["busy_seconds"] == 3.076
    assert summary.values["delivery_rate_median_bytes_per_second"] == 188723040 / 8
    assert summary.values["sndbuf_max_bytes"] == 4194304  # only the listing has skmem
    assert summary.values["cwnd_max_segments"] == 832


# ---------------------------------------------------------------- TcpWatch through fake prefixes

# A stand-in for a remote: runs `ss` words from canned listings (one per call, the last
# repeated), `stdbuf -oL ss ...-E...` by printing canned events and waiting to be killed,
# and, when named ssh, the remote shell's `printenv SSH_CONNECTION ;` first.
FAKE = textwrap.dedent(
    """\
    #!{python}
    import os, shlex, sys, threading, time
    state = sys.argv[1]
    words = sys.argv[2:]
    lifeline = words[:2] == ["sh", "-c"]
    if lifeline:  # a watcher through ssh: a script (one quoted word) and its argument
        script, target = shlex.split(words[2])[0], words[4]
        events = script.split("</dev/null; ", 1)[1].split(' "$1"', 1)[0]
        words = ["printenv", "SSH_CONNECTION", ";", *shlex.split(events), target]
        # EOF on stdin ends it, as the script's reader does.
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(143)), daemon=True).start()
    if words[:3] == ["printenv", "SSH_CONNECTION", ";"]:
        n = len(os.listdir(os.path.join(state, "sessions")))
        open(os.path.join(state, "sessions", str(n)), "w").close()
        print(f"10.0.0.1 {{50000 + n}} 10.0.0.2 22", flush=True)
        words = words[3:]
    if words[0] == "timeout":
        with open(os.path.join(state, "lifetime"), "w") as f:
            f.write(words[3])
        words = words[4:]
    if words[0] == "stdbuf":
        if os.path.exists(os.path.join(state, "no-stdbuf")):
            sys.stderr.write("sh: stdbuf: not found\\n")
            sys.exit(127)
        words = words[2:]
    assert words[0] == "ss", words
    if "-tinmEH" in words:
        sys.stdout.write(open(os.path.join(state, "events")).read())
        sys.stdout.flush()
        time.sleep(3600)
    listings = sorted(f for f in os.listdir(state) if f.startswith("listing"))
    done = os.path.join(state, "taken")
    taken = len(open(done).read()) if os.path.exists(done) else 0
    with open(done, "a") as f:
        f.write("x")
    if taken and os.path.exists(os.path.join(state, "hang")):
        time.sleep(3600)
    sys.stdout.write(open(os.path.join(state, listings[min(taken, len(listings) - 1)])).read())
    """
)


def _fake_remote(tmp: Path, listings: list[str], events: str, name: str = "fake-remote") -> list[str]:
    state = tmp / "state"
    (state / "sessions").mkdir(parents=True)
    for i, text in enumerate(listings):
        (state / f"listing{i:03d}").write_text(text)
    (state / "events").write_text(events)
    program = tmp / name
    program.write_text(FAKE.format(python=sys.executable))
    program.chmod(0o755)
    return [str(program), str(state)]


def _fixture_text(name: str) -> str:
    return (DATA / name).read_text()


def test_watch_excludes_what_was_there_and_merges_close_events(tmp_path: Path) -> None:
    old = "ESTAB 0 0 198.18.0.2:22 198.18.0.1:9999\n\t bbr rtt:1/1 bytes_acked:999999999 retrans:0/77\n"
    listing = _fixture_text("download_sender_bbr.txt")
    prefix = _fake_remote(tmp_path, [old, old + listing], _fixture_text("download_sender_close_events.txt"))
    start = time.monotonic()
    with TcpWatch(prefix, "198.18.0.1", interval=0.1) as watch:
        time.sleep(0.35)
    summary = watch.stop()
    assert time.monotonic() - start < 3
    assert summary is not None, watch.error
    assert watch.problems == [] and watch.error == ""
    assert summary.sockets == 2  # the pre-existing 198.18.0.1:9999 is left out
    # At least the last one at stop (~3 in 0.35 s on a quiet machine; a busy one starts
    # the fake remote more slowly), and every one taken after the first is counted.
    assert summary.samples >= 1
    assert summary.samples == len((tmp_path / "state" / "taken").read_text()) - 1  # all but the first
    assert summary.retransmits == 0 and summary.congestion_control == "bbr"
    assert summary.values["bytes_acked"] == 70110712  # the close event's, not the listing's
    assert watch.stop() is summary  # stop() again: the same summary


def test_watch_through_ssh_leaves_out_its_own_sessions(tmp_path: Path) -> None:
    # Each session's own connection is in the listing it made (here: a socket whose peer
    # port is the one the fake's SSH_CONNECTION names), and must not count.
    def session(n: int) -> str:
        return f"ESTAB 0 0 10.0.0.2:22 10.0.0.1:{50000 + n}\n\t cubic rtt:1/1 bytes_acked:3000 retrans:0/1\n"

    data = f"ESTAB 0 0 10.0.0.2:22 10.0.0.1:40000\n\t cubic rtt:20/1 bytes_acked:{10 * MiB} retrans:0/4\n"
    # Session 0: the first listing; 1: the watcher; 2, 3...: the samples.
    listings = [session(0)] + [data + session(1) + session(n) for n in range(2, 40)]
    prefix = _fake_remote(tmp_path, listings, session(0).replace("ESTAB", "UNCONN"), name="ssh")
    watch = TcpWatch(prefix, "10.0.0.1", interval=0.1)
    assert watch.list_argv[2:5] == ["printenv", "SSH_CONNECTION", ";"]
    with watch:
        time.sleep(0.3)
    summary = watch.stop()
    assert summary is not None, watch.error
    assert (summary.sockets, summary.retransmits) == (1, 4)


def test_watch_without_close_events_keeps_the_listings(tmp_path: Path) -> None:
    prefix = _fake_remote(tmp_path, ["", _fixture_text("loss_sender_cubic.txt")], "")
    (tmp_path / "state" / "no-stdbuf").touch()
    with TcpWatch(prefix, "198.18.0.1", interval=0.1) as watch:
        time.sleep(0.3)
    summary = watch.stop()
    assert summary is not None, watch.error
    assert summary.retransmits == 13  # the last listing's count
    assert len(watch.problems) == 1 and "exited 127: sh: stdbuf: not found" in watch.problems[0]


def test_failing_remote_gives_none_and_says_why_quickly() -> None:
    login = [sys.executable, "-c", "import sys; sys.stderr.write('Permission denied (publickey).\\n'); sys.exit(255)"]
    start = time.monotonic()
    with TcpWatch(login, "198.18.0.1", interval=0.2) as watch:
        pass
    assert watch.stop() is None
    assert time.monotonic() - start < 2
    assert watch.error.startswith("stats command ")
    assert watch.error.endswith("ss -tinmH dst 198.18.0.1 exited 255: Permission denied (publickey).")


def test_missing_program_and_hanging_remote() -> None:
    with TcpWatch(["/nonexistent/ssh", "user@host"], "198.18.0.1") as watch:
        pass
    assert watch.stop() is None
    assert "/nonexistent/ssh" in watch.error and "could not start" in watch.error

    hang = TcpWatch([sys.executable, "-c", "import time; time.sleep(60)"], "198.18.0.1", interval=0.1)
    hang.start_timeout = 0.5
    start = time.monotonic()
    with hang:
        pass
    assert hang.stop() is None
    assert time.monotonic() - start < 3
    assert "did not finish in 0.5s" in hang.error


def test_remote_that_stops_answering_is_given_up_on(tmp_path: Path) -> None:
    prefix = _fake_remote(tmp_path, [""], "")
    (tmp_path / "state" / "hang").touch()  # every listing after the first
    watch = TcpWatch(prefix, "198.18.0.1", interval=0.1)
    watch.timeout = 0.5
    with watch:
        time.sleep(0.2)
        start = time.monotonic()
    assert watch.stop() is None
    assert time.monotonic() - start < 2  # no last listing after one that timed out
    assert watch.error.startswith("stats command ") and watch.error.endswith("did not finish in 0.5s")
    # Evidence in itself: only the first listing came back, the next was given up after
    # its timeout, and more were due meanwhile.
    view = watch.listing_view()
    assert view["listings_received"] == 1 and view["listings_expected"] >= 3, view
    assert view["listing_late_max_seconds"] >= 0.5, view
    assert "listing_seconds_median" not in view  # none answered after the first


def test_a_remote_that_never_answers_is_counted_too() -> None:
    hang = TcpWatch([sys.executable, "-c", "import time; time.sleep(60)"], "198.18.0.1", interval=0.1)
    hang.start_timeout = 0.5
    with hang:
        time.sleep(0.3)
    view = hang.listing_view()
    assert view["listings_received"] == 0 and view["listings_expected"] >= 1
    assert view["listing_late_max_seconds"] >= 0.5  # the first listing's own wait


# ---------------------------------------------------------------- the remote's programs through its stats command

# An "ssh" whose remote is this host: it runs the words it is given as ssh's server
# does, joined into one command line for a shell (globs, `;` and quoting included), in
# a session whose SSH_CONNECTION names a port no socket has.
FAKE_SSH = textwrap.dedent(
    """\
    #!/bin/sh
    shift
    SSH_CONNECTION="127.0.0.1 1 127.0.0.1 22" exec sh -c "$*"
    """
)

# A server as sshd is laid out: the process holding the connection hands the work to a
# child that holds no socket (here `sleep`), and waits.
SERVER = textwrap.dedent(
    """\
    import socket, subprocess, sys
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    print(listener.getsockname()[1], flush=True)
    conn, _ = listener.accept()
    listener.close()
    worker = subprocess.Popen(["sleep", "30"])
    while conn.recv(65536):
        pass
    worker.kill()
    """
)


def test_the_remote_programs_are_the_socket_owners_and_their_children(tmp_path: Path) -> None:
    ssh = tmp_path / "ssh"
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with TcpWatch([str(ssh), "host"], "127.0.0.1", interval=0.1) as watch:
            client = socket.create_connection(("127.0.0.1", port))
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                client.sendall(b"x" * 200_000)  # a data flow: its owners are asked for
                names = {life.name: life for life in watch.program_lives() if life.samples >= 2}
                if "sleep" in names and (not V1_CPU_STAT or names["sleep"].throttled_share() is not None):
                    break
                time.sleep(0.05)
            client.close()
        watch.stop()
    finally:
        server.kill()
        server.wait()
    lives = watch.program_lives()
    by_pid = {life.pid: life for life in lives}
    # The server (socket owner), this test (the client end, also to 127.0.0.1), and the
    # server's child found through the tree: sampled at least twice.
    assert server.pid in by_pid, [(life.pid, life.name) for life in lives]
    (worker,) = [life for life in lives if life.name == "sleep"]
    assert worker.samples >= 2
    assert worker.cgroups_known and worker.cgroup_dirs  # this host's /proc/PID/cgroup, read through the "remote"
    if V1_CPU_STAT:  # and its group's cpu.stat, read twice by later listings: not throttled
        assert worker.throttled_share() == 0.0
    view = watch.listing_view()
    assert view["listings_received"] >= 4 and view["listings_expected"] >= view["listings_received"], view


# The test's own group's cpu.stat where the kernel mounts cgroup v1's cpu (v2's root has no
# throttling count): then the throttling is read through the fake remote too.
V1_CPU_STAT = "throttled_time" in (
    Path("/sys/fs/cgroup/cpu/cpu.stat").read_text() if Path("/sys/fs/cgroup/cpu/cpu.stat").exists() else ""
)


def test_watch_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        TcpWatch([], "198.18.0.1", interval=0)


# ---------------------------------------------------------------- read_tcp_settings


def _printing(stdout: str, exit_code: int = 0, stderr: str = "") -> list[str]:
    """A prefix that prints `stdout` when given exactly the sysctl words read_tcp_settings
    appends (and fails otherwise, so the words are checked too)."""
    expected = ["sysctl", "-n", *SYSCTL_KEYS]
    code = (
        "import sys\n"
        f"if sys.argv[1:] != {expected!r}: sys.exit('unexpected words: ' + repr(sys.argv[1:]))\n"
        f"sys.stdout.write({stdout!r}); sys.stderr.write({stderr!r}); sys.exit({exit_code})\n"
    )
    return [sys.executable, "-c", code]


def test_settings_parsed() -> None:
    out = "4096\t131072\t6291456\n4096\t16384\t4194304\n212992\n212992\ncubic\n"
    settings = read_tcp_settings(_printing(out))
    assert settings.tcp_rmem == (4096, 131072, 6291456)
    assert settings.tcp_wmem == (4096, 16384, 4194304)
    assert (settings.rmem_max, settings.wmem_max, settings.congestion_control) == (212992, 212992, "cubic")


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        (
            _printing("4096\t131072\t6291456\n", 255, "sysctl: cannot stat /proc/sys/net/core/rmem_max: No such file"),
            "exited 255: sysctl: cannot stat /proc/sys/net/core/rmem_max",
        ),
        (_printing("4096 131072\n4096 16384 4194304\n1\n2\ncubic\n"), "'4096 131072' is not three numbers"),
        (_printing("a b c\n1 2 3\n1\n2\ncubic\n"), "printed no settings"),
        (_printing("1 2 3\n1 2 3\n1\n2\n"), "4 lines for 5 keys"),
        (_printing("1 2 3\n1 2 3\n1\n2\nNo such thing!\n"), "is not a congestion control name"),
        (["/nonexistent/ssh", "host"], "could not start"),
    ],
)
def test_settings_errors_say_which_command_and_why(prefix: list[str], message: str) -> None:
    with pytest.raises(TcpStateError, match=r"^settings command ") as err:
        read_tcp_settings(prefix)
    assert message in str(err.value)


def test_settings_timeout() -> None:
    start = time.monotonic()
    with pytest.raises(TcpStateError, match=r"did not finish in 0\.3s"):
        read_tcp_settings([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.3)
    assert time.monotonic() - start < 3


@pytest.mark.skipif(not shutil.which("sysctl"), reason="no sysctl on PATH")
def test_settings_of_this_host_match_proc() -> None:
    settings = read_tcp_settings([])
    proc = Path("/proc/sys/net")
    assert settings.tcp_rmem == tuple(int(v) for v in (proc / "ipv4/tcp_rmem").read_text().split())
    assert settings.tcp_wmem == tuple(int(v) for v in (proc / "ipv4/tcp_wmem").read_text().split())
    assert settings.rmem_max == int((proc / "core/rmem_max").read_text())
    assert settings.congestion_control == (proc / "ipv4/tcp_congestion_control").read_text().strip()
    assert subprocess.run(["sysctl", "-n", "net.core.wmem_max"], capture_output=True, text=True).stdout.strip() == str(
        settings.wmem_max
    )


def test_an_ipv6_peer_is_given_to_ss_as_an_address_not_host_and_port() -> None:
    # "dst 2001:db8::1" makes ss read "2001:db8:" as the host and "1" as the port.
    watch = TcpWatch([], "2001:db8::1")
    assert watch.list_argv[-2:] == ["dst", "2001:db8::1/128"]
    done = subprocess.run(["ss", "-tinmH", "dst", "::1/128"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # the form this ss accepts


def test_progress_from_timed_listings_gives_the_steady_rate_past_slow_start() -> None:
    # 8 MB: slow start for the first 0.4 s (1 MB), then 10 MB/s; data from 0.3 s (ssh's
    # login before it), the last growth at 1.1 s.  The steady rate is the slope of the half
    # of the data that moved last, not the whole transfer's average.
    at_bytes = [(0.1, 2_000), (0.2, 6_000), (0.3, 200_000), (0.4, 1_000_000), (0.6, 3_000_000),
                (0.8, 5_000_000), (1.0, 7_000_000), (1.1, 8_000_000), (1.3, 8_000_000)]  # fmt: skip
    listings = [Listing(at, [_s(A, bytes_acked=acked)]) for at, acked in at_bytes]
    values = summarise([], listings, []).values
    assert values["data_start_seconds"] == 0.3  # the first listing past DATA_FLOW_BYTES
    assert values["data_end_seconds"] == 1.1  # the last one in which bytes moved
    # Half of 8 MB first reached at 0.8 s (5 MB): (8 - 5) MB over 0.3 s.
    assert values["steady_rate_bytes_per_second"] == pytest.approx(10e6)
    # Untimed listings (plain lists) give no progress values at all.
    assert "steady_rate_bytes_per_second" not in summarise([], [x.sockets for x in listings], []).values


def test_no_progress_when_most_bytes_moved_on_sockets_no_listing_saw() -> None:
    # One connection per file, each closed between two listings: the listings saw 1 MB of
    # the 10 MB, so their series is not the transfer's progress.
    seen = [Listing(0.5, [_s(A, bytes_acked=MiB)])]
    files = [_s(f"10.0.0.2:{5000 + i}", bytes_acked=MiB) for i in range(9)]
    values = summarise([], seen, [_s(A, bytes_acked=MiB), *files]).values
    assert "steady_rate_bytes_per_second" not in values and "data_start_seconds" not in values


def test_a_senders_backlog_is_the_share_of_its_samples_with_unsent_data() -> None:
    # ss prints notsent only when there is some: two of the four listings in which the
    # sender sent had a backlog.
    listings = [
        [_s(A, bytes_acked=acked, notsent_bytes=notsent)]
        for acked, notsent in ((MiB, 65536), (2 * MiB, 0), (3 * MiB, 8192), (4 * MiB, 0), (4 * MiB, 0))
    ]
    assert summarise([], listings, []).values["sender_backlog_ratio"] == 0.5
    (parsed,) = parse_ss(
        "ESTAB 0 0 10.0.0.1:5001 10.0.0.2:22\n\t bbr rto:204 mss:1448 cwnd:10 bytes_acked:100 notsent:4344\n"
    )
    assert parsed.notsent_bytes == 4344
    # A real BBR sender filling a 200 Mbit/s link: a backlog in every listing.
    real = summarise([], [_load("download_sender_bbr.txt")], []).values
    assert real["sender_backlog_ratio"] == 1.0


# ---------------------------------------------------------------- the monitor's own sessions left out

SINK = textwrap.dedent(
    """\
    import socket, threading
    listener = socket.socket()
    listener.bind(("127.0.0.2", 0))
    listener.listen(4)
    print(listener.getsockname()[1], flush=True)
    def drain(conn):
        while conn.recv(65536):
            pass
        conn.close()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()
    """
)


def test_the_sockets_another_watch_names_as_its_own_sessions_are_left_out() -> None:
    # This host's watch lists its sockets to the peer (127.0.0.2): the transfer's and, on
    # a site, the remote watch's own ssh sessions, which the remote watch names by their
    # local end (SSH_CONNECTION).  Here a 1 MiB "transfer" and a 300 kB "stats session";
    # the truth is what each client wrote.
    server = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        watch = TcpWatch([], "127.0.0.2", interval=0.05)
        watch.start()
        transfer = socket.create_connection(("127.0.0.2", port), source_address=("127.0.0.1", 0))
        session = socket.create_connection(("127.0.0.2", port), source_address=("127.0.0.1", 0))
        session.sendall(b"s" * 300_000)
        transfer.sendall(b"t" * MiB)
        own = ("127.0.0.1", str(session.getsockname()[1]))
        # Closed before the stop: their close events carry the final counts.
        transfer.close()
        session.close()
        time.sleep(0.5)
        watch.leave_out({own})
        summary = watch.stop()
    finally:
        server.kill()
        server.wait()
    assert summary is not None and summary.sockets == 1, summary
    assert summary.values["bytes_acked"] == MiB + 2  # the kernel counts the SYN and the FIN as a byte each
