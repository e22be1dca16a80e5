"""A protocol's congestion and tcp_buffer_max: the config's checks, the route and sysctl
words, and the check against what the kernel's tcp_info says (measure/tcp/tuning.py).  The
lab proof is tests/lab/test_tuning.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from bigbinf.config import ConfigError, congestion_unavailable, parse_config
from bigbinf.measure.tcp.state import TcpSummary
from bigbinf.measure.tcp.tuning import (
    ROUTE_PROTO,
    Side,
    TuningError,
    capped,
    check,
    route_replacement,
    set_buffer_max,
    set_congestion,
)

SRC = "t.yaml"
SITE = {"address": "192.0.2.7", "data_dir": "/data", "key": "/k", "upload_dir": "/up"}
STATS = ["ssh", "stats@{host}"]
TCP = ["ssh", "root@{host}"]


def _issues(remote: dict, protocol: dict, lab: bool = False) -> list[str]:
    raw = {
        "remotes": {"site": remote},
        "datasets": {"f": {"file": "f.bin", "size": "1MiB"}},
        "protocols": {"scp": protocol},
    }
    if lab:
        raw["lab"] = {"name": "x"}
    try:
        parse_config(yaml.safe_dump(raw), SRC)
    except ConfigError as exc:
        return exc.lines()
    return []


def _available() -> list[str]:
    return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()


def test_an_available_algorithm_for_uploads_needs_nothing_of_the_remote() -> None:
    algorithm = _available()[0]
    assert _issues(SITE, {"directions": ["upload"], "congestion": algorithm}) == []


def test_an_algorithm_the_kernel_lacks_is_refused_with_the_fix() -> None:
    lines = _issues(SITE, {"directions": ["upload"], "congestion": "nosuchcc"})
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"{SRC}: protocols.scp.congestion: 'nosuchcc' is not available in this kernel")
    assert ", ".join(_available()) in lines[0]


def test_a_loadable_module_is_named_with_modprobe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "tcp_available_congestion_control").write_text("reno cubic\n")
    assert congestion_unavailable("cubic", proc) == ""
    modules = tmp_path / "lib" / "modules"
    release = os.uname().release
    (modules / release / "kernel" / "net" / "ipv4").mkdir(parents=True)
    (modules / release / "kernel" / "net" / "ipv4" / "tcp_vegas.ko.xz").write_bytes(b"")
    real_path = Path

    def fake_path(*parts: str) -> Path:
        if parts and str(parts[0]) == "/lib/modules":
            return real_path(modules, *parts[1:])
        return real_path(*parts)

    monkeypatch.setattr("bigbinf.config.Path", fake_path)
    problem = congestion_unavailable("vegas", proc)
    assert "'vegas' is not loaded in this kernel (available: reno, cubic)" in problem
    assert "`modprobe tcp_vegas`" in problem


def test_a_bad_name_is_refused() -> None:
    lines = _issues(SITE, {"directions": ["upload"], "congestion": "Cubic; rm"})
    assert lines == [
        f"{SRC}: protocols.scp.congestion: 'Cubic; rm' is not a congestion control name; write e.g. cubic, bbr, reno"
    ]


def test_a_download_from_a_site_needs_its_tcp_and_stats_commands() -> None:
    algorithm = _available()[0]
    lines = _issues(SITE, {"congestion": algorithm})
    assert [line.split(": required")[0] for line in lines] == [
        f"{SRC}: remotes.site.tcp_command",
        f"{SRC}: remotes.site.stats_command",
    ]
    assert f"protocol scp downloads with congestion: {algorithm} (the remote sends)" in lines[0]
    assert _issues({**SITE, "tcp_command": TCP, "stats_command": STATS}, {"congestion": algorithm}) == []


def test_buffer_caps_need_a_namespace_here_and_a_tcp_command_there() -> None:
    lines = _issues(SITE, {"directions": ["upload"], "tcp_buffer_max": "4MiB"})
    assert sorted(line.split(": required")[0] for line in lines) == [
        f"{SRC}: remotes.site.netns",
        f"{SRC}: remotes.site.stats_command",
        f"{SRC}: remotes.site.tcp_command",
    ]
    ok = {**SITE, "tcp_command": TCP, "stats_command": STATS, "netns": "ns1"}
    assert _issues(ok, {"directions": ["upload"], "tcp_buffer_max": "4MiB"}) == []
    assert _issues(ok, {"tcp_buffer_max": 100}) == [
        f"{SRC}: protocols.scp.tcp_buffer_max: input should be greater than or equal to 4096 (got 100)"
    ]


def test_a_lab_remote_needs_neither_and_may_not_have_a_tcp_command() -> None:
    algorithm = _available()[0]
    assert _issues({"lab": True}, {"congestion": algorithm, "tcp_buffer_max": "1MiB"}, lab=True) == []
    lines = _issues({"lab": True, "tcp_command": TCP}, {}, lab=True)
    assert lines == [
        f"{SRC}: remotes.site.tcp_command: a lab remote is read and set in its namespace already: remove tcp_command"
    ]


def test_iperf3s_own_option_and_the_protocols_exclude_each_other() -> None:
    algorithm = _available()[0]
    lines = _issues(
        SITE, {"module": "iperf3", "directions": ["upload"], "congestion": algorithm, "options": {"congestion": "reno"}}
    )
    assert len(lines) == 1 and lines[0].startswith(f"{SRC}: protocols.scp.options.congestion: give either"), lines


def test_udt_mode_refuses_tcp_tuning() -> None:
    algorithm = _available()[0]
    gridftp = {"module": "gridftp", "directions": ["upload"], "options": {"udt": True}}
    lines = _issues(SITE, {**gridftp, "congestion": algorithm, "tcp_buffer_max": "1MiB"})
    udt = [line for line in lines if "udt: true moves the data over UDP" in line]
    assert len(udt) == 1 and udt[0].startswith(f"{SRC}: protocols.scp.congestion:"), lines
    assert "remove congestion and tcp_buffer_max" in udt[0]
    assert not [line for line in _issues(SITE, gridftp) if "UDP" in line]  # UDT alone is fine


# ---------------------------------------------------------------- the words


def test_a_new_host_route_copies_the_path_and_is_marked() -> None:
    got = "198.18.0.2 via 198.18.0.254 dev bb-c src 198.18.0.1 uid 0 cache"
    words, table = route_replacement(got, "", "198.18.0.2", "cubic")
    assert table == "main"
    assert words == [
        "198.18.0.2/32",
        "via",
        "198.18.0.254",
        "dev",
        "bb-c",
        "src",
        "198.18.0.1",
        "table",
        "main",
        "proto",
        ROUTE_PROTO,
        "congctl",
        "lock",
        "cubic",
    ]


def test_an_existing_host_route_keeps_its_attributes_and_table() -> None:
    got = "198.18.0.2 dev t0 table 100 src 198.18.0.1 uid 0 cache"
    existing = "198.18.0.2 dev t0 proto static scope link metric 5 congctl reno linkdown"
    words, table = route_replacement(got, existing, "198.18.0.2", "bbr")
    assert table == "100"
    assert words == [
        *["198.18.0.2", "dev", "t0", "proto", "static", "scope", "link", "metric", "5"],
        "table",
        "100",
        "congctl",
        "lock",
        "bbr",
    ]


def test_caps_lower_the_triple_only_where_it_is_above() -> None:
    assert capped((4096, 131072, 6291456), 1 << 20) == (4096, 131072, 1 << 20)
    assert capped((4096, 131072, 6291456), 65536) == (4096, 65536, 65536)


def test_words_for_a_remote_shell_are_quoted_and_local_ones_are_not() -> None:
    assert Side("x", ("ssh", "root@h"), "p").through_shell
    assert not Side("x", ("ip", "netns", "exec", "ns"), "p").through_shell
    assert not Side("x", ("/usr/sbin/ip", "netns", "exec", "ns"), "p").through_shell
    assert not Side("x", (), "p").through_shell
    # A site's tcp_command run from a namespace of its own: the words still reach ssh.
    assert Side("x", ("ip", "netns", "exec", "ns", "ssh", "root@h"), "p").through_shell


def test_a_route_set_before_a_failing_step_is_taken_back(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    gets = iter(["198.18.0.2 dev veth0 src 198.18.0.1 uid 0 cache", None])  # the read-back fails

    def run(self: Side, argv: list[str]) -> str:
        calls.append(list(argv))
        if argv[:4] == ["ip", "-o", "route", "get"]:
            line = next(gets)
            if line is None:
                raise TuningError("here: ip route get: timed out")
            return line
        return ""

    monkeypatch.setattr(Side, "run", run)
    with pytest.raises(TuningError, match="timed out"):
        set_congestion(Side("here", (), "198.18.0.2"), "cubic")
    assert [c[:3] for c in calls if c[1] == "route"] == [["ip", "route", "replace"], ["ip", "route", "del"]]


def test_a_buffer_cap_whose_write_fails_is_written_back(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def run(self: Side, argv: list[str]) -> str:
        calls.append(list(argv))
        if argv[:2] == ["sysctl", "-n"]:
            return "4096 131072 6291456"
        if "net.ipv4.tcp_rmem=4096 131072 262144" in argv:
            raise TuningError("remote: sysctl did not finish in 15s")  # it may have been applied
        return ""

    monkeypatch.setattr(Side, "run", run)
    with pytest.raises(TuningError):
        set_buffer_max(Side("remote", ("ssh", "root@h"), "p"), "tcp_rmem", 262144)
    assert calls[-1] == ["sysctl", "-q", "-w", "net.ipv4.tcp_rmem=4096 131072 6291456"]


def test_a_side_that_cannot_be_set_says_why() -> None:
    with pytest.raises(TuningError, match=r"remote r: remotes\.r has no tcp_command"):
        Side("remote r", (), "p", missing="remotes.r has no tcp_command").run(["true"])


# ---------------------------------------------------------------- the kernel's word


def _summary(*algorithms: str, **values: float) -> TcpSummary:
    return TcpSummary(1, 1, 0, algorithms[0] if algorithms else "", tuple(sorted(algorithms)), dict(values))


def test_the_senders_algorithm_must_be_the_one_asked() -> None:
    assert check("cubic", None, _summary("cubic"), None, "this host") == []
    assert check("cubic", None, _summary("bbr"), None, "this host") == [
        "congestion: asked for cubic on the sender (this host); the kernel's tcp_info says its data sockets used bbr"
    ]
    assert check("cubic", None, _summary("bbr", "cubic"), None, "x")[0].endswith("used bbr, cubic")
    assert "nothing confirms it" in check("cubic", None, None, None, "remote lab")[0]
    assert check("", None, _summary("bbr"), None, "x") == []


def test_buffers_above_the_cap_are_named() -> None:
    sender, receiver = _summary("bbr", sndbuf_max_bytes=1 << 20), _summary(rcvbuf_max_bytes=2 << 20)
    assert check("", 1 << 20, sender, receiver, "x") == [
        "tcp_buffer_max: asked for at most 1048576 bytes; the receiver's receive buffer (skmem rb) reached "
        "2097152 bytes"
    ]
    assert check("", 4 << 20, sender, receiver, "x") == []


def test_an_ipv6_peer_gets_a_host_route_of_128_bits() -> None:
    words, _ = route_replacement("2001:db8::2 dev eth0 src 2001:db8::1 metric 256", "", "2001:db8::2", "bbr")
    assert words[:1] == ["2001:db8::2/128"]


def test_advise_leaves_out_transfers_capped_on_purpose() -> None:
    from bigbinf.history.advice import _recent
    from bigbinf.result import Result

    def judged(start: float, cap: int | None) -> Result:
        return Result(
            "http", "lab", "f", "download", start, "ok", limited_by="receive_window", tcp_buffer_max_bytes=cap
        )

    plain, capped_result = judged(1.0, None), judged(2.0, 256 * 1024)
    assert _recent([plain, capped_result], "lab", 5) == [plain]


@pytest.mark.parametrize(
    ("stats", "said"),
    [
        (["ssh", "-n", "stats@{host}"], "-n"),
        (["ip", "netns", "exec", "ns", "ssh", "-qf", "stats@{host}"], "-f"),
        (["ssh", "-o", "StdinNull=yes", "stats@{host}"], "-o StdinNull=yes"),
        (["ssh", "-oForkAfterAuthentication yes", "stats@{host}"], "-o ForkAfterAuthentication yes"),
    ],
)
def test_a_stats_command_must_leave_ssh_its_standard_input(stats: list[str], said: str) -> None:
    (line,) = _issues({**SITE, "stats_command": stats}, {})
    assert line.startswith(f"{SRC}: remotes.site.stats_command: {said} closes ssh's standard input")
    assert line.endswith(": remove it")


@pytest.mark.parametrize(
    "stats",
    [
        ["ssh", "-i", "/keys/n", "-l", "nobody", "-F", "/f", "stats@{host}"],  # arguments that hold n and f
        ["ssh", "-o", "StdinNull=no", "-p", "22", "stats@{host}"],
        ["ssh", "stats@{host}", "-n"],  # after the destination: a word for the remote
        ["/opt/bin/stats-helper", "-n"],  # not ssh
    ],
)
def test_options_that_only_look_alike_are_fine(stats: list[str]) -> None:
    assert _issues({**SITE, "stats_command": stats}, {}) == []
