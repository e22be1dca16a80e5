"""The passive watcher's pure parts: which connections, the ss filter, flows grouped into
transfers, a transfer's Result and its verdict, and what never reaches a label or a
baseline.  The real path (ss, the kernel, a lab's transfers) is tests/lab/test_passive.py."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from bigbinf.config import ConfigError, PassiveConfig, validate_config
from bigbinf.measure.tcp.state import SocketInfo, parse_ss
from bigbinf.passive.flows import MAX_SAMPLES, Flow, Tracker, result_of
from bigbinf.passive.select import Selection
from bigbinf.passive.watcher import PassiveCounts
from bigbinf.runs import counts_in_baseline
from bigbinf.service.collector import BigbinfCollector, ExporterState

SELECTION = Selection.from_maps(
    {"archive": ["198.51.100.0/24"], "peer": ["2001:db8::/32"]},
    {"ssh": [(22, 22)], "gridftp": [(2811, 2811), (50000, 50100)]},
)
MiB = 2**20


def sock(
    local: str, peer: str, acked: int = 0, received: int = 0, owner: tuple[str, int] | None = None, **kw: object
) -> SocketInfo:
    return SocketInfo(
        local=local,
        peer=peer,
        state="ESTAB",
        bytes_acked=acked,
        bytes_received=received,
        owners=(owner,) if owner else (),
        **kw,  # type: ignore[arg-type]
    )


def test_the_filter_is_the_kernels_words_peer_networks_and_either_port() -> None:
    assert SELECTION.ss_filter() == ["(", "dst", "198.51.100.0/24", "or", "dst", "2001:db8::/32", ")"]
    words = SELECTION.ss_filter(ports=True)
    assert words[:7] == ["(", "dst", "198.51.100.0/24", "or", "dst", "2001:db8::/32", ")"]
    text = " ".join(words)
    assert "sport = :22 or dport = :22" in text
    assert "( sport >= :50000 and sport <= :50100 )" in text
    assert all(" " not in w for w in words)  # argv words, never a shell string


def test_remote_and_service_of_a_connection() -> None:
    assert SELECTION.remote_of("198.51.100.7:22") == "archive"
    assert SELECTION.remote_of("[::ffff:198.51.100.7]:22") == "archive"
    assert SELECTION.remote_of("[2001:db8::1]:2811") == "peer"
    assert SELECTION.remote_of("203.0.113.1:22") == ""
    assert SELECTION.service_of("10.0.0.1:40000", "198.51.100.7:22") == ("ssh", True)  # this host the client
    assert SELECTION.service_of("10.0.0.1:50050", "198.51.100.7:40000") == ("gridftp", False)  # the server


def _tracker() -> Tracker:
    return Tracker(SELECTION, linger=2.0, max_flows=100)


def test_parallel_streams_of_one_program_are_one_transfer_with_their_count() -> None:
    t = _tracker()
    t.listing(0.0, [])
    control = ("10.0.0.1:40000", "198.51.100.7:2811")
    # Active mode: the server connects from its ephemeral ports to one of the client's (no
    # service port): they belong to the transfer by their program.
    streams = [("10.0.0.1:53517", f"198.51.100.7:{47920 + i}") for i in range(4)]
    owner = ("globus-url-copy", 4242)
    for step in range(1, 6):
        t.listing(
            float(step),
            [sock(*control, acked=500, received=900, owner=owner)]
            + [
                sock(*k, acked=step * 5 * MiB, busy_seconds=step, rwnd_limited_seconds=0.8 * step, owner=owner)
                for k in streams
            ],
        )
    # Another program's connection to the same remote at the same time: its own transfer.
    other = ("10.0.0.1:42000", "198.51.100.7:22")
    t.listing(6.0, [sock(*other, received=30 * MiB, owner=("rsync", 99))])
    t.closed(
        6.1, [sock(*k, acked=26 * MiB, busy_seconds=5.0, rwnd_limited_seconds=4.0, segs_out=20000) for k in streams]
    )
    t.closed(6.2, [sock(*control, acked=600, received=1000)])
    assert t.due(7.0, lost_after=3.0) == []  # linger: a next connection may still join
    t.listing(7.0, [sock(*other, received=30 * MiB, owner=("rsync", 99))])
    due = t.due(8.5, lost_after=3.0)
    assert len(due) == 1 and len(due[0].flows) == 5
    r = result_of(due[0], now_wall=1_000_000.0, now_mono=8.5, baseline=None, min_bytes=10 * MiB)
    assert r is not None
    assert (r.source, r.remote, r.protocol, r.direction) == ("passive", "archive", "gridftp", "upload")
    assert r.data_flows == 4 and r.tcp_local["streams"] == 4
    assert r.file_bytes == 4 * 26 * MiB + 600
    assert r.program == "globus-url-copy" and r.argv == []  # record_commands off
    assert r.duration_seconds == pytest.approx(6.2)  # from the listing before the first that saw it
    assert r.limited_by == "receive_window" and r.limited_side == "remote"
    assert r.limited_next_step
    assert not counts_in_baseline(r)  # never a scheduled series' run
    # The rsync is still open: the stop publishes it as its last listing left it.
    rest = t.flush(9.0)
    assert [len(x.flows) for x in rest] == [1]
    download = result_of(rest[0], 1_000_000.0, 9.0, None, 10 * MiB)
    assert download is not None and download.direction == "download" and download.file_bytes == 30 * MiB
    assert t.flows == {}


def test_a_connection_without_a_service_port_alone_is_dropped() -> None:
    t = _tracker()
    t.listing(0.0, [sock("10.0.0.1:53517", "198.51.100.7:47920", received=50 * MiB, owner=("backup", 3))])
    t.closed(1.0, [sock("10.0.0.1:53517", "198.51.100.7:47920", received=50 * MiB)])
    assert t.due(5.0, lost_after=3.0) == [] and t.flows == {}


def test_a_bigbinf_exporters_own_transfer_is_not_a_passive_one() -> None:
    t = _tracker()
    t.listing(0.0, [sock("10.0.0.1:40000", "198.51.100.7:22", acked=50 * MiB, owner=("scp", 3))])
    t.flows[("10.0.0.1:40000", "198.51.100.7:22")].scheduled = True  # its process carries the guardian's marker
    assert t.flush(1.0) == []


def test_a_flow_below_min_bytes_is_not_a_result() -> None:
    t = _tracker()
    t.listing(0.0, [sock("10.0.0.1:40000", "198.51.100.7:22", acked=MiB, owner=("ssh", 1))])
    (transfer,) = t.flush(1.0)
    assert result_of(transfer, 1.0, 1.0, None, min_bytes=10 * MiB) is None


def test_a_lost_close_event_closes_the_flow_at_its_last_listing() -> None:
    t = _tracker()
    key = ("10.0.0.1:40000", "198.51.100.7:22")
    t.listing(0.0, [sock(*key, acked=20 * MiB, owner=("scp", 5))])
    t.listing(1.0, [])
    assert t.due(2.0, lost_after=3.0) == []
    (transfer,) = t.due(4.5, lost_after=3.0)
    assert transfer.flows[0].closed_at == 1.0


def test_a_transfer_that_closed_before_any_listing_showed_it_is_counted_missed() -> None:
    t = Tracker(SELECTION, linger=2.0, max_flows=100, min_bytes=4 * MiB)
    followed = ("10.0.0.1:40000", "198.51.100.7:22")
    t.listing(0.0, [sock(*followed, acked=MiB, owner=("scp", 5))])
    t.closed(
        1.0,
        [
            sock(*followed, acked=20 * MiB),  # followed: its close, not a miss
            sock("10.0.0.1:40001", "198.51.100.7:22", received=8 * MiB),  # no listing saw it: missed
            sock("10.0.0.1:40002", "198.51.100.7:22", acked=MiB),  # below min_bytes: not a transfer
            sock("10.0.0.1:40003", "198.51.100.7:8443", acked=8 * MiB),  # no watched service's port
            sock("10.0.0.1:40004", "203.0.113.1:22", acked=8 * MiB),  # not a watched remote
        ],
    )
    assert t.missed == 1
    assert t.flows[followed].closed is not None and len(t.flows) == 1  # the missed one is not followed


def test_flows_beyond_max_flows_are_counted_once_and_not_followed() -> None:
    t = Tracker(SELECTION, linger=2.0, max_flows=2)
    sockets = [sock(f"10.0.0.1:{40000 + i}", "198.51.100.7:22", acked=1) for i in range(5)]
    t.listing(0.0, sockets)
    t.listing(1.0, sockets)
    assert len(t.flows) == 2 and t.skipped == 3
    # Listed again but not parsed (the watcher's quick look passes them as unchanged): still skipped, not recounted.
    t.listing(2.0, [], unchanged=[*t.skipped_keys, *t.flows])
    assert t.skipped == 3 and len(t.skipped_keys) == 3
    t.listing(3.0, sockets)
    assert t.skipped == 3


def test_a_flow_keeps_at_most_max_samples_and_none_of_its_idle_listings() -> None:
    f = Flow(("a:1", "198.51.100.7:22"), "archive", "ssh", 0.0, 0.0, None, sock("a:1", "198.51.100.7:22"))
    for i in range(10):
        f.sample(float(i), sock("a:1", "198.51.100.7:22", acked=5))  # idle: nothing moved
    assert len(f.samples) == 1
    for i in range(10 * MAX_SAMPLES):
        f.sample(float(i), sock("a:1", "198.51.100.7:22", acked=10 + i))
    assert len(f.samples) <= MAX_SAMPLES and f.samples[-1][1].bytes_acked == 10 + 10 * MAX_SAMPLES - 1


def test_close_events_parse_with_the_state_parser() -> None:
    text = (
        "UNCONN 0 0 10.0.0.1:40000 198.51.100.7:22\n"
        "\t cubic rto:204 rtt:1.5/0.3 mss:1448 cwnd:10 bytes_acked:20971520 bytes_received:4000 retrans:0/3\n"
    )
    t = _tracker()
    t.listing(0.0, [sock("10.0.0.1:40000", "198.51.100.7:22", acked=MiB, owner=("scp", 7))])
    t.closed(0.5, parse_ss(text))
    flow = t.flows[("10.0.0.1:40000", "198.51.100.7:22")]
    assert flow.closed is not None and flow.closed.bytes_acked == 20 * MiB and flow.closed.owners == (("scp", 7),)


def test_config_is_validated_with_every_error_gathered() -> None:
    base = {
        "remotes": {"r": {"address": "198.18.0.2", "data_dir": "/d", "key": "/k"}},
        "datasets": {"d": {"file": "d.bin", "size": "1MiB"}},
        "protocols": {"scp": {}},
    }
    assert validate_config(base, "x").passive.enabled is False
    bad = {"enabled": True, "services": {"ssh": ["0", "9-1"]}, "remotes": {"a": {"networks": ["300.1.1.1"]}}}
    with pytest.raises(ConfigError) as info:
        validate_config({**base, "passive": bad}, "x.yaml")
    text = info.value.render()
    assert "x.yaml: passive.services.ssh[0]:" in text and "x.yaml: passive.services.ssh[1]:" in text
    assert "x.yaml: passive.remotes.a.networks[0]: '300.1.1.1' is not an IP address" in text
    with pytest.raises(ConfigError, match=r"passive\.remotes: the watcher needs at least one remote"):
        validate_config({**base, "passive": {"enabled": True}}, "x.yaml")
    assert PassiveConfig().record_commands is False


def test_published_labels_are_bounded() -> None:
    counts = PassiveCounts()
    t = _tracker()
    key = ("10.0.0.1:40000", "198.51.100.7:22")
    t.listing(0.0, [sock(*key, acked=20 * MiB, owner=("scp", 5))])
    (transfer,) = t.flush(1.0)
    r = result_of(transfer, 1.0, 1.0, None, 10 * MiB)
    assert r is not None
    counts.add(r)
    state = ExporterState()
    state.record_passive(counts)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BigbinfCollector(state))
    text = generate_latest(registry).decode()
    lines = [line for line in text.splitlines() if line.startswith("bigbinf_passive_") and "{" in line]
    assert lines
    for line in lines:
        assert "40000" not in line and "scp" not in line and "198.51" not in line  # no ports, programs, addresses
    labels = {"remote": "archive", "service": "ssh", "direction": "upload", "verdict": r.limited_by or "none"}
    assert registry.get_sample_value("bigbinf_passive_transfers_total", labels) == 1
    assert (
        registry.get_sample_value(
            "bigbinf_passive_bytes_total", {k: labels[k] for k in ("remote", "service", "direction")}
        )
        == 20 * MiB
    )
    assert (
        registry.get_sample_value(
            "bigbinf_passive_rate_bytes_per_second_count", {"remote": "archive", "service": "ssh"}
        )
        == 1
    )


def test_a_listings_idle_sockets_are_not_parsed_again() -> None:
    from bigbinf.passive.watcher import _changed

    listing = (
        "ESTAB 0 0 10.0.0.1:40000 198.51.100.7:22\n"
        "\t cubic rtt:1/0.5 bytes_acked:100 bytes_received:5000 lastsnd:40 lastrcv:40\n"
        "ESTAB 0 0 10.0.0.1:40001 198.51.100.7:22\n"
        "\t cubic rtt:1/0.5 bytes_acked:20971520 bytes_received:5000\n"
        "ESTAB 0 0 10.0.0.1:40002 198.51.100.7:22\n"
        "\t cubic rtt:1/0.5 bytes_acked:100 bytes_received:5000 notsent:4096\n"
        "ESTAB 0 0 10.0.0.1:40003 198.51.100.7:22\n"
        "\t cubic rtt:1/0.5 bytes_acked:7 bytes_received:7\n"
    )
    t = _tracker()
    t.listing(0.0, [sock(f"10.0.0.1:{40000 + i}", "198.51.100.7:22", acked=100, received=5000) for i in range(3)])
    changed, same = _changed(listing, t.flows)
    assert same == [("10.0.0.1:40000", "198.51.100.7:22")]  # idle, nothing waiting: not parsed
    parsed = {s.key[0] for s in parse_ss(changed)}
    # moved; data waiting to be sent (a zero window's sign); a connection not followed yet
    assert parsed == {"10.0.0.1:40001", "10.0.0.1:40002", "10.0.0.1:40003"}
    t.listing(1.0, parse_ss(changed), unchanged=same)
    assert all(f.lost_at is None for f in t.flows.values())
