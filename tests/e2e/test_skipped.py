"""A profile whose binary is absent: `skipped` with the reason in `once` output, in
/metrics, and in the log once per process, however many rounds.

No lab: the binary check comes before any network step, so these run anywhere.  The
truths are the processes' own stdout, stderr and /metrics, as a user sees them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from ..support.exporter import ROOT, ExporterProcess
from ..support.prometheus import PrometheusServer

MISSING = "/nonexistent/bigbinf-test/hpnscp"
REASON = f"{MISSING} is not installed on this host"
SKIP_LOG = f"WARNING bigbinf.service.rounds: hpn-scp skipped: {REASON}"


def _config(tmp: Path, schedule: dict) -> Path:
    raw = {
        # No probes: 198.18.9.2 exists nowhere, and traffic stays on this machine.
        "remotes": {
            "site": {
                "address": "198.18.9.2",
                "data_dir": "/data",
                "key": "/etc/bigbinf/id_ed25519",
                "probe": {"enabled": False},
            }
        },
        "datasets": {"f1m": {"file": "f1m.bin", "size": "1MiB"}},
        "protocols": {"hpn-scp": {"module": "hpnscp", "binary": MISSING}},
        "schedule": schedule,
        "transfer": {"workdir": str(tmp / "work")},
        "journal": {"path": str(tmp / "journal.jsonl")},
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _skipped_total(metrics: str) -> float:
    labels = {"protocol": "hpn-scp", "remote": "site", "dataset": "f1m", "direction": "download", "outcome": "skipped"}
    values = [
        s.value
        for f in text_string_to_metric_families(metrics)
        for s in f.samples
        if s.name == "bigbinf_transfers_total" and s.labels == labels
    ]
    return values[0] if values else 0.0


def test_once_prints_skipped_with_the_reason_and_logs_it_once_over_rounds(tmp_path: Path) -> None:
    path = _config(tmp_path, {"interval": "1h", "rounds": 2})
    proc = subprocess.run(
        [sys.executable, "-m", "bigbinf", "--config.file", str(path), "once"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr  # skipped is not a failure
    lines = proc.stdout.splitlines()
    rows = [line for line in lines[1:] if "hpn-scp (f1m, download)" in line]
    assert len(rows) == 2 and all(row.split()[-2:] == ["skipped", "-"] for row in rows), proc.stdout
    assert lines.count(f"hpn-scp/site/f1m/download: skipped: {REASON}") == 2
    # Two rounds, one process: the reason is news once.
    # The rounds' warnings (a start also ends, and says so, what an exporter killed before
    # it left: with tests in parallel, another test's deliberately orphaned processes).
    warnings = [line.split(" ", 2)[2] for line in proc.stderr.splitlines() if " WARNING " in line]
    assert [w for w in warnings if "ended a leftover process" not in w] == [SKIP_LOG]


def test_a_serving_exporter_counts_every_skip_and_logs_it_once(tmp_path: Path) -> None:
    path = _config(tmp_path, {"interval": "1s", "start_delay": "0s"})
    log = tmp_path / "exporter.log"
    with ExporterProcess(path, log) as exporter:
        PrometheusServer.wait_for(
            lambda: _skipped_total(exporter.metrics()) >= 3,
            timeout=60,
            what="three scheduled rounds to skip the transfer",
        )
        ok = [
            s
            for f in text_string_to_metric_families(exporter.metrics())
            for s in f.samples
            if s.name == "bigbinf_transfers_total" and s.labels.get("outcome") == "ok"
        ]
        assert [s.value for s in ok] == [0.0]
    text = log.read_text()
    # Once in three rounds; other warnings are a start ending what a killed exporter left
    # (another test's deliberately orphaned processes, with tests in parallel).
    warnings = [line for line in text.splitlines() if " WARNING " in line and "ended a leftover process" not in line]
    assert len(warnings) == 1, text
    assert text.count(SKIP_LOG) == 1, text
