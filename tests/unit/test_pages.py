"""The exporter's pages (service/pages.py, service/routes.py, service/recent.py): escaping,
units, redaction, ids, the pcap's directory, the ring's bound, and the routes of an
exporter built from a seeded journal (not listening: its handlers are called).
tests/e2e/test_page_browser.py loads the same pages in Chromium."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import os
import re
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bigbinf.history.regression import Verdict
from bigbinf.result import LIMITS, PathBaseline, Result
from bigbinf.service import logtail, pages
from bigbinf.service.httpd import HttpServer, Request, Response, Route
from bigbinf.service.recent import RecentTransfers, transfer_id, valid_id
from bigbinf.service.routes import routes
from bigbinf.service.server import JOB_ID, Exporter
from bigbinf.service.webconfig import WebConfig

from ..support.pages import HOSTILE, SECRET, STDERR_CAUSE, Seeded, seed
from ..support.prometheus import free_port


def result(start: float, outcome: str = "ok", **kw: object) -> Result:
    return Result("http", "site", "a", "download", start, outcome, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- pure pieces


def test_units_are_human_and_decimal() -> None:
    assert pages.human_rate(12.5e6) == "12.50 MB/s (100.0 Mbit/s)"
    assert pages.human_bytes(1_100_000) == "1.10 MB"
    assert pages.human_bytes(512) == "512 B"
    assert pages.human_seconds(0.0123) == "12.3 ms"
    assert pages.human_seconds(150) == "2 min 30 s"
    assert pages.human_rate(None) == "-"
    r = result(0, retransmits_wire=3, retransmits_sender=2, retransmits_sender_source="kernel")
    assert pages.retransmits(r) == "wire 3, sender 2 (kernel)"
    assert pages.retransmits(result(0, wire_measured=False)) == "wire -, sender -"


def test_every_value_is_escaped_on_every_page() -> None:
    r = result(1e9, "failed", error=HOSTILE, limited_by=HOSTILE, argv=[HOSTILE], tcp_remote_note=HOSTILE)
    front = pages.front_page(pages.Front(HOSTILE, HOSTILE, HOSTILE, None, [("1-abc", r)], 10)).decode()
    view = pages.TransferView("1-abc", r, None, HOSTILE, None)
    one = pages.transfer_page(view).decode()
    config = pages.config_page({"x": HOSTILE}, HOSTILE, None, HOSTILE, ()).decode()
    for page in (front, one, config):
        assert "<script>" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_secrets_are_redacted_by_name_by_value_and_inline() -> None:
    data = {
        "remotes": {"s": {"password_env": "SITE_PASSWORD", "key": "/k"}},
        "protocols": {"p": {"options": {"api_token": "t0k", "Password": "p", "nested": {"secret": [1]}}}},
        "cmd": ["x", "--password=abc", f"--banner={SECRET}", "token:xyz"],
    }
    shown = pages.redact(data, [SECRET])
    assert shown["remotes"]["s"] == {"password_env": "SITE_PASSWORD", "key": "/k"}  # a variable's name, a path
    assert shown["protocols"]["p"]["options"] == {
        "api_token": pages.REDACTED,
        "Password": pages.REDACTED,
        "nested": {"secret": pages.REDACTED},
    }
    assert shown["cmd"] == ["x", "--password=<redacted>", "--banner=<redacted>", "token:<redacted>"]
    assert SECRET not in repr(shown) and "abc" not in repr(shown) and "xyz" not in repr(shown)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("1780000010000-0123456789", True),
        ("0-abcdefabcd", True),
        ("1780000010000-012345678", False),  # short digest
        ("1780000010000-0123456789/", False),
        ("1780000010000-ABCDEFABCD", False),
        ("../../etc/passwd", False),
        ("1780000010000-0123456789%00", False),
        ("1780000010000-0123456789\n", False),
        ("12345678901234567-0123456789", False),
        ("", False),
    ],
)
def test_transfer_ids_are_validated_strictly(text: str, ok: bool) -> None:
    assert valid_id(text) is ok


def test_an_id_is_stable_and_tells_series_and_runs_apart() -> None:
    a, b = result(1780000010.5), result(1780000010.5, "failed")
    assert transfer_id(a) == transfer_id(b)  # the same transfer, journaled: the same id after a restart
    assert valid_id(transfer_id(a))
    other = Result("http", "site", "b", "download", 1780000010.5, "ok")
    assert transfer_id(other) != transfer_id(a)
    assert transfer_id(result(1780000010.5, source="sweep", sweep="s1")) != transfer_id(a)


def test_a_pcap_is_served_only_from_inside_its_directory(tmp_path: Path) -> None:
    kept = tmp_path / "pcaps"
    kept.mkdir()
    inside = kept / "a.pcap"
    inside.write_bytes(b"x")
    outside = tmp_path / "secret"
    outside.write_bytes(b"s")
    (kept / "link.pcap").symlink_to(outside)
    (kept / "sub").mkdir()
    assert pages.inside(str(inside), kept) == inside.resolve()
    for path in (
        str(outside),
        str(kept / ".." / "secret"),
        str(kept / "link.pcap"),  # a symlink out of it
        str(kept / "sub"),  # not a file
        str(kept),
        str(kept / "missing.pcap"),
        "/etc/passwd",
        "",
    ):
        assert pages.inside(path, kept) is None, path
    assert pages.inside(str(inside), tmp_path / "nowhere") is None


def test_the_ring_keeps_the_last_n_and_forgets_their_ids() -> None:
    ring = RecentTransfers(5)
    results = [result(1000.0 + i) for i in range(8)]
    for r in results:
        ring.add(r)
    ring.add(result(2000.0, "skipped"))  # nothing ran: not a transfer to look at
    held = ring.transfers()
    assert [r for _, r in held] == results[:2:-1]  # newest first, the last 5
    assert ring.get(transfer_id(results[0])) is None
    assert ring.get(transfer_id(results[-1])) == results[-1]
    ring.resize(2)
    assert [r for _, r in ring.transfers()] == [results[-1], results[-2]]
    assert ring.get(transfer_id(results[-3])) is None


def test_the_baseline_of_a_transfer_is_its_rounds_probe() -> None:
    ring = RecentTransfers(10)
    early, late, other = PathBaseline("site", 100.0), PathBaseline("site", 200.0), PathBaseline("elsewhere", 150.0)
    for b in (early, late, other):
        ring.add_baseline(b)
    assert ring.baseline_for(result(150.0)) == early
    assert ring.baseline_for(result(250.0)) == late
    assert ring.baseline_for(result(50.0)) is None


def test_a_sweeps_new_run_replaces_its_last() -> None:
    ring = RecentTransfers(3)
    first = [result(float(i), source="sweep", sweep_name="s", sweep="run1", sweep_label="x") for i in range(4)]
    for r in first:
        ring.add(r)
    assert len(ring.sweeps()["s"]) == 4  # a sweep's run is kept whole, beyond the ring
    second = result(10.0, source="sweep", sweep_name="s", sweep="run2", sweep_label="x")
    ring.add(second)
    assert ring.sweeps()["s"] == (second,)


def test_the_sweeps_interval_is_students_t() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 10, 11, 30, 99):
        assert pages.t95(df) == pytest.approx(float(stats.t.ppf(0.975, df)), rel=2e-3)
    speeds = [5e6, 5.5e6, 6e6]
    runs = [
        result(float(i), source="sweep", sweep_label="a", duration_seconds=(1 << 20) / s, file_bytes=1 << 20)
        for i, s in enumerate(speeds)
    ]
    (ranked,) = pages.ranking(runs)
    low, high = stats.t.interval(0.95, 2, loc=statistics.fmean(speeds), scale=stats.sem(speeds))
    assert ranked.low == pytest.approx(low, rel=1e-3) and ranked.high == pytest.approx(high, rel=1e-3)


def test_a_prefix_route_answers_below_it_and_an_exact_route_wins() -> None:
    exact = Route("/transfer/x", ("GET",), lambda request: Response(200, b"exact"))
    prefix = Route("/transfer/", ("GET",), lambda request: Response(200, b"prefix"), prefix=True)
    plain = Route("/config", ("GET",), lambda request: Response(200, b"config"))
    server = HttpServer("127.0.0.1", 0, [exact, prefix, plain], lambda: WebConfig())
    try:
        assert server.route_for("/transfer/x") is exact
        assert server.route_for("/transfer/1-2/pcap") is prefix
        assert server.route_for("/transfer") is None
        assert server.route_for("/config/x") is None  # not a prefix route
        assert server.route_for("/config") is plain
    finally:
        server.sock.close()


# ---------------------------------------------------------------- the routes of a seeded exporter


@pytest.fixture
def seeded(tmp_path: Path) -> Iterator[tuple[Seeded, dict[str, Route], Exporter]]:
    s = seed(tmp_path)
    exporter = Exporter(s.config, listen="127.0.0.1:0")
    yield s, {r.path: r for r in routes(exporter)}, exporter


def get(table: dict[str, Route], path: str) -> Response:
    route = table.get(path) or table["/transfer/"]
    response = route.handler(Request("GET", path, "", {}))
    assert route.blocking  # never rendered in the server's event loop
    return response


def text(response: Response) -> str:
    assert isinstance(response.body, bytes)
    return response.body.decode()


def test_the_front_page_lists_the_journaled_transfers_with_their_verdicts(
    seeded: tuple[Seeded, dict[str, Route], Exporter],
) -> None:
    s, table, _ = seeded
    response = get(table, "/")
    page = text(response)
    assert response.status == 200 and dict(response.headers)["Content-Security-Policy"].startswith("default-src 'none'")
    ids = re.findall(r"href='transfer/([^']+)'", page)
    assert len(ids) == 13  # the sweep's 6 runs (newest, first) and the 7 scheduled transfers
    assert ids[-7:-1] == [transfer_id(r) for r in (s.busy, s.udp, s.hostile, s.failed, s.ok, s.unjudged)]
    # The verdict as a coloured tag with its side, the evidence's first clause beside it,
    # the whole evidence and the next step one click away.
    tag = f"<span class='tag' style='background:{pages.VERDICT_COLOURS['receive_window']}'>receive_window</span>"
    assert f"<details><summary>{tag} <span class='side'>local</span> rwnd_limited 81% of busy time</summary>" in page
    assert "receive window 64 kB under the BDP 1.2 MB\nnext step: raise net.ipv4.tcp_rmem" in page
    # 1 MiB in 2 s over the baseline's 12.5 MB/s: 4% of the path.
    assert "<td class='n'>0.52 MB/s (4.2 Mbit/s)</td><td class='n'>4%</td>" in page
    # Not judged: what was seen; UDT: no TCP state.
    assert "not judged</span> no limit found: 180 kB in flight of a 1.2 MB BDP</summary>" in page
    # UDT: the judge's "not judged: no TCP state (...)" said once, beside its tag.
    udt = "no TCP state (the data went over UDP: UDT has no kernel TCP state to read)"
    assert f"not judged</span> {udt}</td>" in page and page.count("no TCP state") == 1
    assert "0.52 MB/s (4.2 Mbit/s)" in page  # 1 MiB in 2 s
    assert "wire 3, sender 2 (kernel)" in page
    assert STDERR_CAUSE in page
    assert "&lt;script&gt;" in page and "<script>" not in page
    assert "<svg" in page and "href='metrics'" in page


def test_a_failed_transfers_page_shows_its_cause_and_command(seeded: tuple[Seeded, dict[str, Route], Exporter]) -> None:
    s, table, _ = seeded
    page = text(get(table, f"/transfer/{transfer_id(s.failed)}"))
    assert f"<p class='cause'><b>failed</b>: curl exited 7: {STDERR_CAUSE}</p>" in page
    assert "curl --fail -o /var/tmp/bigbinf/a.bin http://198.18.9.2/a.bin" in page
    assert "download the pcap" not in page


def test_an_ok_transfers_page_has_baseline_tcp_advice_and_its_pcap(
    seeded: tuple[Seeded, dict[str, Route], Exporter],
) -> None:
    s, table, _ = seeded
    key = transfer_id(s.ok)
    page = text(get(table, f"/transfer/{key}"))
    assert "10.0 ms/11.0 ms/15.0 ms" in page  # the baseline probed before it
    assert "<td>rwnd_limited_seconds</td><td class='n'>1.6</td><td class='n'>1.6</td>" in page
    assert "== path site (198.18.9.2)" in page and "BDP 125.00 kB" in page  # advise's own text
    assert "buffers as the path probe read them" in page
    assert f"href='{key}/pcap'" in page
    pcap = get(table, f"/transfer/{key}/pcap")
    assert pcap.status == 200 and pcap.body == s.pcap.read_bytes()
    assert pcap.content_type == "application/vnd.tcpdump.pcap"
    assert dict(pcap.headers)["Content-Disposition"] == 'attachment; filename="http_site_a_download.pcap"'


def test_a_pcap_outside_the_kept_directory_is_never_served(
    seeded: tuple[Seeded, dict[str, Route], Exporter], tmp_path: Path
) -> None:
    s, table, exporter = seeded
    outside = tmp_path / "secret.pcap"
    outside.write_bytes(b"not yours")
    for path in (str(outside), str(s.pcap.parent / ".." / "secret.pcap"), "/etc/passwd"):
        forged = result(s.ok.start_timestamp + 1000 + len(path), pcap_path=path)
        exporter.recent.add(forged)
        key = transfer_id(forged)
        assert get(table, f"/transfer/{key}/pcap").status == 404, path
        assert "not where this exporter keeps captures" in text(get(table, f"/transfer/{key}"))
    os.symlink(outside, s.pcap.parent / "link.pcap")
    forged = result(s.ok.start_timestamp + 5000, pcap_path=str(s.pcap.parent / "link.pcap"))
    exporter.recent.add(forged)
    assert get(table, f"/transfer/{transfer_id(forged)}/pcap").status == 404


@pytest.mark.parametrize(
    "path",
    [
        "/transfer/",
        "/transfer/..",
        "/transfer/../config",
        "/transfer/1-0123456789",  # well formed, not held
        "/transfer/%2e%2e%2fetc%2fpasswd",
        "/transfer/1-0123456789/pcap/x",
        "/transfer/1-0123456789/other",
    ],
)
def test_anything_else_under_transfer_is_404(seeded: tuple[Seeded, dict[str, Route], Exporter], path: str) -> None:
    _, table, _ = seeded
    assert get(table, path).status == 404


def test_config_page_shows_the_config_as_text_with_secrets_redacted(
    seeded: tuple[Seeded, dict[str, Route], Exporter],
) -> None:
    s, table, _ = seeded
    page = text(get(table, "/config"))
    assert "--title=&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>" not in page
    assert SECRET not in page
    assert "--password=&lt;redacted&gt;" in page
    assert f"<th scope='row'>file</th><td>{s.config}</td>" in page
    assert "recent_transfers: 100" in page


def test_sweeps_page_ranks_settings_with_intervals(seeded: tuple[Seeded, dict[str, Route], Exporter]) -> None:
    _, table, _ = seeded
    page = text(get(table, "/sweeps"))
    bbr, cubic = page.index("streams=4"), page.index("streams=1")
    assert bbr < cubic  # ranked by mean: streams=4 at 8 MB/s first
    assert "(baseline)" in page[cubic : cubic + 40]
    assert page.count("3 of 3") == 2 and page.count("<line") == 2  # each mean's interval drawn


# ---------------------------------------------------------------- what is slow, and why (issue 38)


def test_a_series_below_its_usual_level_or_in_an_open_regression_is_marked(tmp_path: Path) -> None:
    s = seed(tmp_path, regressed=True)
    exporter = Exporter(s.config, listen="127.0.0.1:0")
    assert [pages.regression_open(v) for v in exporter.regressions().values()] == [True]  # the test's own verdict
    page = text(get({r.path: r for r in routes(exporter)}, "/"))
    row = re.search(r"<tr class='slow'><td>http site/b download</td>.*?</tr>", page)
    assert row is not None, "the regressed series is marked"
    assert "below usual (51% of its median)" in row.group(0) and "regression open" in row.group(0)
    assert "<td class='n'>8%</td>" in row.group(0)  # 1.0 MB/s of the path's 12.5 MB/s
    assert page.count("<tr class='slow'>") == 1  # no other series is marked
    assert "1 of 6 series marked" in page
    assert "<td class='n'>Next</td>" not in page and "<thead><tr><th></th>" not in page  # no empty header row
    # Its start, the level before and what changed (issue 35), from the seed's runs: 81 at
    # 2.0 MB/s (+-4%, median 2.0) before, three at 1.00-1.02 MB/s from start + 50 on.
    assert "<h2>Open regressions (1)</h2>" in page
    opened = re.search(r"<tr><td>http site/b download</td><td>([^<]*)</td>(.*?)</tr>", page)
    assert opened is not None, "the open regression's row"
    assert opened.group(1) == "2026-05-28 20:27:30 UTC" == pages.utc(1_780_000_000.0 + 50)  # seed(start=...)
    assert opened.group(2).startswith("<td class='n'>2.00 MB/s (16.0 Mbit/s)</td><td class='n'>51% [")
    assert "median throughput MB/s 2 -&gt; 1.01" in opened.group(2)
    assert "verdicts congestion 81 of 81 -&gt; congestion 3 of 3" in opened.group(2)


def test_open_regressions_are_listed_escaped_even_when_the_test_cannot_decide() -> None:
    """Every open regression, whether or not its runs are among the last shown, each value
    escaped; a closed series is not listed, and with none open there is no section."""
    open_one = Verdict(None, math.nan, True, since=1_780_000_050.0, level_before=2e6)
    closed = Verdict(None, math.nan, False)
    front = pages.Front("", "", "in 1 h", None, (), 10, regressions={"<b>x</b> site/a download": open_one, "y": closed})
    page = pages.front_page(front).decode()
    assert "<h2>Open regressions (1)</h2>" in page and "<b>x</b>" not in page
    assert (
        "<tr><td>&lt;b&gt;x&lt;/b&gt; site/a download</td><td>2026-05-28 20:27:30 UTC</td>"
        "<td class='n'>2.00 MB/s (16.0 Mbit/s)</td><td class='n'>the test cannot decide now</td>"
        "<td>not read from the journal yet</td></tr>"
    ) in page
    assert "<td>y</td>" not in page
    assert "Open regressions" not in pages.front_page(dataclasses.replace(front, regressions={"y": closed})).decode()


def test_the_regression_state_is_read_in_one_place() -> None:
    class Later:  # i35's state with a start: whatever it is, regression_open is where it is read
        regressed = True

    assert pages.regression_open(Later()) and not pages.regression_open(None)
    assert not pages.regression_open(object())


def test_an_unknown_verdict_gets_the_neutral_colour_and_still_shows() -> None:
    r = result(1e9, duration_seconds=1.0, file_bytes=1 << 20, limited_by="memory_bandwidth", limited_evidence="x; y")
    shown = pages.cause(r)
    assert f"style='background:{pages.VERDICT_OTHER}'>memory_bandwidth</span>" in shown
    assert "<summary>" in shown and "<div>x; y</div>" in shown
    for name in pages.VERDICT_COLOURS:
        assert name in LIMITS  # every coloured name is a verdict
    assert all(pages.verdict_colour(name) != pages.VERDICT_OTHER for name in LIMITS)


def test_the_sparkline_draws_every_run_in_its_verdicts_colour() -> None:
    runs = [
        result(1e9, duration_seconds=1.0, file_bytes=1 << 20, limited_by="congestion"),
        result(1e9 + 60, "failed", error="boom"),
        result(1e9 + 120, duration_seconds=2.0, file_bytes=1 << 20),
    ]
    svg = pages.sparkline(runs)
    fills = re.findall(r"<circle [^>]*fill='([^']+)'", svg)
    assert fills == [pages.VERDICT_COLOURS["congestion"], pages.FAILED_COLOUR, pages.UNJUDGED_COLOUR]
    assert "<title>2001-09-09 01:47:40 UTC: failed</title>" in svg
    assert svg.count("<polyline") == 1


def test_one_time_format_on_every_page(seeded: tuple[Seeded, dict[str, Route], Exporter]) -> None:
    """UTC to the second, never an ISO offset or microseconds."""
    s, table, _ = seeded
    for path in ("/", "/sweeps", "/log", f"/transfer/{transfer_id(s.ok)}", f"/transfer/{transfer_id(s.udp)}"):
        page = text(get(table, path))
        assert not re.search(r"\d{2}:\d{2}:\d{2}\.\d|\+00:00|\dT\d{2}:", page), path
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", pages.utc(1_780_000_000.5))


def test_the_log_page_shows_the_last_lines_redacted() -> None:
    tail = logtail.LogTail(lines=3)
    log = logging.getLogger("bbt-logtail")
    log.addHandler(tail)
    log.setLevel(logging.INFO)
    try:
        for i in range(5):
            log.info("line %d", i)
        log.warning("ran mycopy --password=%s %s", "hunter", SECRET)
    finally:
        log.removeHandler(tail)
    lines = tail.lines()
    assert [line.split(": ", 1)[1] for _, line in lines] == [
        "line 3",
        "line 4",
        f"ran mycopy --password=hunter {SECRET}",
    ]
    page = pages.log_page(lines, [SECRET]).decode()
    assert SECRET not in page and "hunter" not in page and "--password=&lt;redacted&gt; &lt;redacted&gt;" in page
    assert "<span class='log-WARNING'>" in page and re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC WARNING", page)


def test_the_sweeps_page_says_how_to_configure_one() -> None:
    page = pages.sweeps_page({}).decode()
    assert "No sweep is configured" in page and "sweeps:" in page and "options: {parallel: [1, 4, 8]}" in page
    assert "No sweep has run (config" not in page
    assert "Configured: streams; none has run yet" in pages.sweeps_page({}, ["streams"]).decode()


def test_the_passive_page_lists_the_last_passive_transfers_with_their_evidence(
    seeded: tuple[Seeded, dict[str, Route], Exporter],
) -> None:
    _, table, exporter = seeded
    assert "The passive watcher is off" in text(get(table, "/passive"))
    exporter.passive_recent.append(
        Result(
            "gridftp", "site", "passive", "upload", 1_763_000_000.0, "ok", duration_seconds=4.0, file_bytes=64 << 20,
            data_flows=4, source="passive", program="<globus-url-copy>", limited_by="receive_window",
            limited_side="remote", limited_evidence="the sender was limited by the receive window 80% of its busy time",
            limited_next_step="on the remote (site): raise net.ipv4.tcp_rmem",
        )
    )  # fmt: skip
    page = text(get(table, "/passive"))
    assert "&lt;globus-url-copy&gt;" in page and "<globus-url-copy>" not in page  # escaped
    assert "receive window 80%" in page and "raise net.ipv4.tcp_rmem" in page and ">4<" in page
    assert "href='passive'" in text(get(table, "/"))  # in every page's navigation


def test_the_next_round_is_the_first_round_the_log_says(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """With schedule.start_delay the first round comes before the schedule's: the front
    page and the log say its time (the demo's "next round at" was the schedule's)."""
    s = seed(tmp_path)
    raw = yaml.safe_load(s.config.read_text())
    raw["schedule"] = {"interval": "1h", "start_delay": "20m"}  # neither comes while the test runs
    s.config.write_text(yaml.safe_dump(raw))
    exporter = Exporter(s.config, listen=f"127.0.0.1:{free_port()}")
    caplog.set_level(logging.INFO, logger="bigbinf")
    before = time.time()
    exporter.start()
    try:
        shown = exporter.next_round()
        job = exporter.scheduler.get_job(JOB_ID)
        scheduled = job.next_run_time.timestamp()
    finally:
        exporter.stop()
    when = dt.datetime.strptime(shown, "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=dt.UTC).timestamp()
    assert before + 1200 - 1 <= when <= time.time() + 1200  # the first round's, not the hour's
    assert f"next round at {shown}" in caplog.text
    # The schedule's own first start is a whole interval after that first round (issue 47:
    # it came 20 s less after, and a busy host's first round met it).
    assert when + 3600 - 1 <= scheduled <= when + 3600 + 1


def test_the_first_round_runs_however_late_a_busy_host_starts_the_scheduler(tmp_path: Path) -> None:
    """schedule.start_delay's one-off first round has no misfire grace: apscheduler's
    default (1 s) dropped it when a start at load 30 ran the scheduler 1.98 s late, and
    the next round came an interval later (tests/lab/test_stop.py met it, issue 47)."""
    s = seed(tmp_path)
    raw = yaml.safe_load(s.config.read_text())
    raw["schedule"] = {"interval": "1h", "start_delay": "20m"}
    s.config.write_text(yaml.safe_dump(raw))
    exporter = Exporter(s.config, listen=f"127.0.0.1:{free_port()}")
    exporter.start()
    try:
        first = exporter.scheduler.get_job("first-round")
        assert first is not None and first.misfire_grace_time is None
    finally:
        exporter.stop()


# ---------------------------------------------------------------- at a glance (issue 47)


def front_of(tmp_path: Path, query: str = "", **kw: object) -> tuple[Seeded, str]:
    tmp_path.mkdir(exist_ok=True)
    s = seed(tmp_path, **kw)  # type: ignore[arg-type]
    exporter = Exporter(s.config, listen="127.0.0.1:0")
    table = {r.path: r for r in routes(exporter)}
    response = table["/"].handler(Request("GET", "/", query, {}))
    return s, text(response)


def series_names(page: str) -> list[str]:
    """The series table's first cells, in the page's order."""
    section = page[page.index("<h2>Series in the last transfers</h2>") :]
    section = section[: section.index("</table>")]
    return re.findall(r"<tr(?: class='slow')?><td>([^<]+)</td>", section)


def test_the_fastest_is_the_best_median_of_the_runs_that_count(tmp_path: Path) -> None:
    """site/a download: gridftp-udt at 2.10 MB/s; not the busy_host run of `mine` at 10.5
    MB/s (this host's CPU held it), nor the sweep's bbftp runs at 5-8 MB/s (a setting's),
    nor iperf3 at 10.5 MB/s (memory to memory: the ceiling, shown beside)."""
    _, page = front_of(tmp_path)
    assert page.count("&#9733; fastest of") == 1
    row = re.search(r"<tr><td>([^<]+)</td>(?:(?!</tr>).)*&#9733; fastest of site/a download", page)
    assert row is not None and row.group(1) == "gridftp-udt site/a download"
    # The summary: the protocol, its median, its n, how many competed, the next.
    assert (
        "<td>site/a download</td><td><span class='best'>&#9733; gridftp-udt</span></td>"
        "<td class='n'>2.10 MB/s (16.8 Mbit/s)</td><td class='n'>1</td><td class='n'>3</td>"
        "<td>mine 1.05 MB/s (8.4 Mbit/s): the fastest is 2.00x it</td>"
        "<td>iperf3 10.49 MB/s (83.9 Mbit/s), 1 run</td>"
    ) in page
    # `mine`'s median is of its one counted run, the application-limited one (1 MiB in 1 s).
    assert "<td class='n'>1.05 MB/s (8.4 Mbit/s), 1 run</td>" in page
    assert "bbftp site/a download" in page and "<td class='n'>none counted</td>" in page  # the sweep's: none counted
    # A remote and size one protocol has: no fastest (site/d0: http only).
    assert "fastest of site/d0" not in page


def test_the_sort_links_reorder_the_series(tmp_path: Path) -> None:
    _, default = front_of(tmp_path, series=2, per_series=3)
    _, by_median = front_of(tmp_path / "m", "sort=throughput", series=2, per_series=3)
    _, by_name = front_of(tmp_path / "n", "sort=series", series=2, per_series=3)
    _, odd = front_of(tmp_path / "o", "sort=%3Cscript%3E", series=2, per_series=3)
    names = series_names(by_name)
    assert names == sorted(names) and len(names) == 7
    # By median: iperf3 10.5, gridftp-udt 2.10, mine 1.05, the d series' 1 MiB in 1, 2, 3 s (0.52), http a 0.44;
    # no median last.
    assert series_names(by_median) == [
        "iperf3 site/a download",
        "gridftp-udt site/a download",
        "mine site/a download",
        "http site/d0 download",
        "http site/d1 download",
        "http site/a download",
        "bbftp site/a download",
    ]
    # By remote and size (the default): site/a's by median (its ceiling, iperf3, above its
    # fastest), then site/d0, site/d1.
    assert series_names(default)[:5] == [
        "iperf3 site/a download",
        "gridftp-udt site/a download",
        "mine site/a download",
        "http site/a download",
        "bbftp site/a download",
    ]
    assert series_names(odd) == series_names(default) and "script" not in odd.split("<h2>Series")[1][:400]
    assert "<a href='?sort=throughput'>by median throughput</a>" in default
    assert "<b>by median throughput</b>" in by_median and "<a href='?sort=throughput'>" in by_median  # the header's


def test_a_busy_host_says_so_in_a_headline(tmp_path: Path) -> None:
    _, quiet = front_of(tmp_path, series=3, per_series=10)
    _, busy = front_of(tmp_path / "busy", series=3, per_series=10, busy=True)
    assert "class='headline'" not in quiet  # one busy run of 42 ok ones
    line = re.search(r"<p class='headline'>(.*?)</p>", busy)
    assert line is not None
    words = re.sub(r"<[^>]+>", "", line.group(1))
    assert words.startswith("This host is busy: these numbers are this host's, not the path's.")
    # The d series' 30 runs and mine's one, of 42 ok ones with the sweep's and iperf3's.
    assert "CPU held 31 of the last 42 ok transfers (all judged busy_host; load average up to 23.5)" in words
    assert "less busy host" in words


def test_a_page_shows_no_code_names() -> None:
    """A journaled next step that names a function (the judge's, before issue 47) reads
    in an operator's words; config keys and sysctls stay."""
    step = (
        "run the transfers on a less busy host; the run is left out of the regression test's baselines and "
        "plan-move's model (judge.verdict.leaves_out_of_baselines)"
    )
    r = result(
        1e9, duration_seconds=1.0, file_bytes=1, limited_by="busy_host", limited_evidence="x", limited_next_step=step
    )
    page = pages.transfer_page(pages.TransferView("1-0123456789", r, None, "", None)).decode()
    shown = pages.cause(r)
    for text in (page, shown):
        assert "plan-move&#x27;s model" in text and "leaves_out_of_baselines" not in text and "judge." not in text
    kept = "raise capture.buffer (capture.buffer) or net.ipv4.tcp_rmem (net.ipv4.tcp_rmem)"
    assert pages.operator_words(kept) == kept
    # The judge's own next steps, every verdict: no dotted name that is this exporter's code.
    from bigbinf.judge import steps
    from bigbinf.judge.inputs import Inputs
    from bigbinf.judge.rules import Limit

    for reason in LIMITS:
        said = steps.next_step(Limit(reason, "e", side="local"), Inputs.of(r, None), r)
        assert pages.operator_words(said) == said, (reason, said)


def test_every_verdict_has_a_colour_in_the_legend_and_the_docs() -> None:
    legend = pages.legend()
    doc = (Path(__file__).resolve().parents[2] / "docs" / "pages.md").read_text()
    colours = doc[doc.index("Verdict colours") :].split("\n\n")[0]
    for name in LIMITS:
        colour = pages.VERDICT_COLOURS[name]
        assert f"style='background:{colour}'>{name}</span>" in legend
        assert f"`{name}`" in colours, name
        word = pages.COLOUR_WORDS[colour]
        assert re.search(rf"`{name}`[^;]*?{word}", colours), (name, word)


def test_runs_whose_programs_waited_for_a_cpu_count_as_held_by_the_host() -> None:
    """Not only busy_host verdicts: a run the path limited while this host's programs,
    capture or delay line waited for a CPU a tenth of it or more was held too; less, not."""
    waited = [
        (f"{i}-0123456789", result(1e9 + i, duration_seconds=1, file_bytes=1, limited_by="congestion", host_busy=busy))
        for i, busy in enumerate(({"capture": 0.3}, {"delay_line": 0.1}, {"transfer_programs": 0.09}))
    ]
    judged = ("9-0123456789", result(1e9 + 9, duration_seconds=1.0, file_bytes=1, limited_by="busy_host"))
    front = pages.Front("", "", "in 1 h", None, (*waited, judged), 10)
    page = pages.front_page(front).decode()
    assert "CPU held 3 of the last 4 ok transfers (1 judged busy_host, the others with their programs" in page
    assert "load average" not in page  # none was measured
    half = pages.front_page(dataclasses.replace(front, transfers=(waited[2], judged))).decode()
    assert "class='headline'" not in half  # 1 of 2: not most (the one with 9% waiting was not held)
