"""A configuration and journals for the exporter's pages (service/pages.py): an ok
transfer judged with its evidence, one not judged with what was seen, a UDT one (UDP: no
TCP state), a failed one with its command's stderr tail, the fastest run of its remote and
size but one this host's CPU held (busy_host), a sweep's run, a path baseline, a kept
pcap; with `regressed`, a series of four weeks whose last three runs are half its usual
throughput (an open regression); with `busy`, a page most of whose runs are busy_host;
and hostile text where the config and the journal allow it.  Shared by
tests/unit/test_pages.py, tests/e2e/test_page_browser.py and benchmarks/bench_pages.py."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from bigbinf.judge.verdict import NO_TCP_STATE
from bigbinf.result import PathBaseline, Result

HOSTILE = "<script>alert(1)</script>"
SECRET = "hunter2-do-not-show"
STDERR_CAUSE = "curl: (7) Failed to connect to 198.18.9.2 port 80: Connection refused"


@dataclass(frozen=True)
class Seeded:
    config: Path
    journal: Path
    pcap: Path  # the kept capture of the ok transfer
    ok: Result
    failed: Result
    hostile: Result  # a custom command's run whose evidence holds HOSTILE
    unjudged: Result  # ok, no verdict, its evidence as seen
    udp: Result  # gridftp over UDT: not judged, no TCP state
    busy: Result  # the fastest run of site/a, but one this host's CPU held (busy_host): not counted
    regressed: str  # the series name (pages.series) in an open regression, "" without


UNJUDGED_EVIDENCE = "no limit found: 180 kB in flight of a 1.2 MB BDP; 28% of the path"
DAY = 86400.0


BUSY_HOST = {"transfer_programs": 0.45, "capture": 0.2, "load1": 23.5}
BUSY_STEP = (
    "this host's CPUs were wanted elsewhere: run the transfers on a less busy host; the run is left out of "
    "the regression test's baselines and plan-move's model (judge.verdict.leaves_out_of_baselines)"
)


def seed(
    tmp: Path,
    series: int = 1,
    per_series: int = 0,
    start: float = 1_780_000_000.0,
    regressed: bool = False,
    busy: bool = False,
) -> Seeded:
    """`series` extra datasets (each a series of the http protocol) with `per_series`
    ok results each, beside the named results; with `busy`, those are runs this host's
    CPU held (busy_host), most of the page's."""
    journal = tmp / "journal.jsonl"
    key = tmp / "id_site"  # bbftp logs in with a key: a private one, as ssh wants it (never used)
    key.write_text("not a key\n")
    key.chmod(0o600)
    datasets = {"a": {"file": "a.bin", "size": "1MiB"}}
    datasets |= {f"d{i}": {"file": f"d{i}.bin", "size": "1MiB"} for i in range(series)}
    if regressed:
        datasets["b"] = {"file": "b.bin", "size": "1MiB"}
    raw = {
        # No probes and a round an hour away: nothing leaves this machine.
        "remotes": {
            "site": {"address": "198.18.9.2", "data_dir": "/data", "key": str(key), "probe": {"enabled": False}}
        },
        "datasets": datasets,
        "protocols": {
            "http": {},
            "bbftp": {},  # the sweep's protocol (an option to vary: streams)
            "gridftp-udt": {"module": "gridftp", "options": {"udt": True}},
            "iperf3": {},  # memory to memory: the path's ceiling, never the fastest
            # A command element may hold any text: it must show as text on /config.
            "mine": {
                "command": ["mycopy", f"--title={HOSTILE}", f"--password={SECRET}", "{remote_path}", "{local_path}"],
            },
        },
        "schedule": {"interval": "1h"},
        "journal": {"path": str(journal)},
        "capture": {"keep": True},
        # With the regression's four weeks: a front page of the newest 30, not 100.
        "pages": {"recent_transfers": 30 if regressed else 100},
        "sweeps": {
            "streams": {"protocol": "bbftp", "remote": "site", "datasets": ["a"], "options": {"streams": [1, 4]}}
        },
    }
    config = tmp / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    pcaps = tmp / "pcaps"
    pcaps.mkdir(mode=0o700, exist_ok=True)
    pcap = pcaps / "http_site_a_download.pcap"
    pcap.write_bytes(b"\xd4\xc3\xb2\xa1" + bytes(20))  # a pcap's global header: enough to download

    common = {"remote_address": "198.18.9.2", "client_address": "198.18.9.1", "round_id": "r1", "files": 1}
    ok = Result(
        "http",
        "site",
        "a",
        "download",
        start + 10,
        "ok",
        duration_seconds=2.0,
        file_bytes=1 << 20,
        verified=True,
        wire_bytes_down=1_100_000,
        wire_bytes_up=40_000,
        packets_down=760,
        packets_up=380,
        retransmits_wire=3,
        retransmits_sender=2,
        retransmits_sender_source="kernel",
        transport="tcp",
        data_flows=1,
        limited_by="receive_window",
        limited_side="local",
        limited_evidence="rwnd_limited 81% of busy time; receive window 64 kB under the BDP 1.2 MB",
        limited_next_step="raise net.ipv4.tcp_rmem's maximum on this host",
        tcp_local={"rwnd_limited_seconds": 1.6, "busy_seconds": 2.0},
        tcp_remote={"rwnd_limited_seconds": 1.6, "snd_cwnd": 120.0},
        pcap_path=str(pcap),
        argv=["curl", "--fail", "-o", "/var/tmp/bigbinf/a.bin", "http://198.18.9.2/a.bin"],
        **common,
    )
    failed = Result(
        "http",
        "site",
        "a",
        "download",
        start + 20,
        "failed",
        error=f"curl exited 7: {STDERR_CAUSE}",
        duration_seconds=0.01,
        file_bytes=1 << 20,
        wire_measured=False,
        argv=["curl", "--fail", "-o", "/var/tmp/bigbinf/a.bin", "http://198.18.9.2/a.bin"],
        **common,
    )
    hostile = Result(
        "mine",
        "site",
        "a",
        "download",
        start + 30,
        "ok",
        duration_seconds=1.0,
        file_bytes=1 << 20,
        limited_by="application",
        limited_side="local",
        limited_evidence=f"the tool said {HOSTILE}",
        argv=["mycopy", f"--title={HOSTILE}", "--password=***", "/data/a.bin", "/var/tmp/bigbinf/a.bin"],
        **common,
    )
    unjudged = Result(
        "http",
        "site",
        "a",
        "download",
        start + 5,
        "ok",
        duration_seconds=3.0,
        file_bytes=1 << 20,
        transport="tcp",
        limited_evidence=UNJUDGED_EVIDENCE,
        **common,
    )
    udp = Result(
        "gridftp-udt",
        "site",
        "a",
        "download",
        start + 35,
        "ok",
        duration_seconds=0.5,
        file_bytes=1 << 20,
        transport="udp",
        data_flows=1,
        limited_evidence=NO_TCP_STATE,  # as the judge journals it
        **common,
    )
    busy_run = Result(
        "mine",
        "site",
        "a",
        "download",
        start + 38,
        "ok",
        duration_seconds=0.1,
        file_bytes=1 << 20,
        transport="tcp",
        limited_by="busy_host",
        limited_side="local",
        limited_evidence="this host was busy: waiting for a CPU, the transfer's programs 45% of the 0.1 s transfer",
        limited_next_step=BUSY_STEP,
        host_busy=BUSY_HOST,
        **common,
    )
    ceiling = Result(
        "iperf3",
        "site",
        "a",
        "download",
        start + 3,
        "ok",
        duration_seconds=0.1,
        file_bytes=1 << 20,
        transport="tcp",
        limited_by="link_capacity",
        limited_side="path",
        limited_evidence="the path is full",
        reported={"bytes": float(1 << 20), "seconds": 0.1},
        **common,
    )
    results = [ceiling, ok, failed, hostile, unjudged, udp, busy_run]
    name = ""
    if regressed:
        # 27 days of three runs a day at this time of day near 2.0 MB/s, then three at
        # half that: an open regression (bigbinf/history/regression.py's defaults).
        name = "http site/b download"
        for d in range(27, 0, -1):
            for k in range(3):
                rate = 2.0e6 * (1 + 0.02 * ((d * 3 + k) % 5 - 2))
                results.append(
                    Result(
                        "http",
                        "site",
                        "b",
                        "download",
                        start - d * DAY + k * 600,
                        "ok",
                        duration_seconds=(1 << 20) / rate,
                        file_bytes=1 << 20,
                        limited_by="congestion",
                        limited_side="path",
                        limited_evidence="cwnd-limited 90% of busy time",
                        **common,
                    )
                )
        for k in range(3):
            results.append(
                Result(
                    "http",
                    "site",
                    "b",
                    "download",
                    start + 50 + k * 10,
                    "ok",
                    duration_seconds=(1 << 20) / (1.0e6 * (1 + 0.01 * k)),
                    file_bytes=1 << 20,
                    limited_by="congestion",
                    limited_side="path",
                    limited_evidence="cwnd-limited 95% of busy time; 4% of packets retransmitted",
                    **common,
                )
            )
    for i in range(series):
        for k in range(per_series):
            results.append(
                Result(
                    "http",
                    "site",
                    f"d{i}",
                    "download",
                    start + 40 + k,
                    "ok",
                    duration_seconds=1.0 + k % 3,
                    file_bytes=1 << 20,
                    limited_by="busy_host" if busy else "congestion",
                    limited_evidence="this host was busy" if busy else "cwnd-limited",
                    host_busy=BUSY_HOST if busy else {},
                    **common,
                )
            )
    for rep in range(3):
        for label, speed in (("streams=1", 5e6), ("streams=4", 8e6)):
            results.append(
                Result(
                    "bbftp",
                    "site",
                    "a",
                    "download",
                    start + 100 + rep * 10 + (label == "streams=4"),
                    "ok",
                    duration_seconds=(1 << 20) / (speed + rep * 1e5),
                    file_bytes=1 << 20,
                    source="sweep",
                    sweep_name="streams",
                    sweep="streams-run1",
                    sweep_label=label,
                    sweep_setting={"streams": int(label.split("=")[1]), "baseline": "streams=1"},
                    sweep_repetition=rep + 1,
                )
            )
    with journal.open("w") as f:
        for r in sorted(results, key=lambda r: r.start_timestamp):
            f.write(json.dumps(r.to_json()) + "\n")
    baseline = PathBaseline(
        "site",
        start,
        address="198.18.9.2",
        probes_sent=20,
        probes_answered=20,
        rtt_min_seconds=0.010,
        rtt_avg_seconds=0.011,
        rtt_max_seconds=0.015,
        rtt_mdev_seconds=0.001,
        mtu_bytes=1500,
        bandwidth_bytes_per_second=12.5e6,
        bandwidth_source="configured",
        buffers={"local": {"tcp_rmem": 6291456.0, "tcp_wmem": 4194304.0, "rmem_max": 212992.0, "wmem_max": 212992.0}},
    )
    older = dataclasses.replace(baseline, start_timestamp=start - 40 * DAY)  # before the regression's weeks
    (tmp / "journal.paths.jsonl").write_text(json.dumps(older.to_json()) + "\n" + json.dumps(baseline.to_json()) + "\n")
    return Seeded(config, journal, pcap, ok, failed, hostile, unjudged, udp, busy_run, name)
