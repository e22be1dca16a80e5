"""A configuration and journals for the exporter's pages (service/pages.py): an ok
transfer judged with its evidence, a failed one with its command's stderr tail, a sweep's
run, a path baseline, a kept pcap; and hostile text where the config and the journal
allow it.  Shared by tests/unit/test_pages.py, tests/e2e/test_page_browser.py and
benchmarks/bench_pages.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

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


def seed(tmp: Path, series: int = 1, per_series: int = 0, start: float = 1_780_000_000.0) -> Seeded:
    """`series` extra datasets (each a series of the http protocol) with `per_series`
    ok results each, beside the three named results."""
    journal = tmp / "journal.jsonl"
    key = tmp / "id_site"  # bbftp logs in with a key: a private one, as ssh wants it (never used)
    key.write_text("not a key\n")
    key.chmod(0o600)
    datasets = {"a": {"file": "a.bin", "size": "1MiB"}}
    datasets |= {f"d{i}": {"file": f"d{i}.bin", "size": "1MiB"} for i in range(series)}
    raw = {
        # No probes and a round an hour away: nothing leaves this machine.
        "remotes": {
            "site": {"address": "198.18.9.2", "data_dir": "/data", "key": str(key), "probe": {"enabled": False}}
        },
        "datasets": datasets,
        "protocols": {
            "http": {},
            "bbftp": {},  # the sweep's protocol (an option to vary: streams)
            # A command element may hold any text: it must show as text on /config.
            "mine": {
                "command": ["mycopy", f"--title={HOSTILE}", f"--password={SECRET}", "{remote_path}", "{local_path}"],
            },
        },
        "schedule": {"interval": "1h"},
        "journal": {"path": str(journal)},
        "capture": {"keep": True},
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
    results = [ok, failed, hostile]
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
                    limited_by="congestion",
                    limited_evidence="cwnd-limited",
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
    (tmp / "journal.paths.jsonl").write_text(json.dumps(baseline.to_json()) + "\n")
    return Seeded(config, journal, pcap, ok, failed, hostile)
