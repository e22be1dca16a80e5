"""The passive watcher's confusion matrix (issue 46, item 5): on the same induced causes
(tests/support/verdicts.py), the scheduled transfer's verdict beside the verdict the
passive watcher gives a transfer of the same file run by hand in the client namespace
(curl, scp, sftp: outside the exporter), each run's truth from counters the product does
not read (tests/support/truth.py: nstat in both namespaces, tc/nft/link counters, the
delay line's).  The table in docs/benchmarks.md ("The passive watcher").

    sudo .venv/bin/python benchmarks/passive_matrix.py [--runs 1] [--burners 2] [--only NAME,...]
        [--markdown] [--record FILE.jsonl]

A row per run: the cause, the hand-run program and direction, the verdict expected (the
scheduled judge's target for the cause), what the scheduled run said, what the passive
result said, and the truth.  Then the confusion matrix of the passive verdicts (expected
against said; "-" withheld) and how often passive and scheduled agreed.  Builds the labs
it needs (unique names, removed at the end, also on Ctrl-C).  Needs root.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import lab_config  # noqa: E402
from tests.support import plain_site, truth, verdicts  # noqa: E402

from bigbinf import lab  # noqa: E402
from bigbinf.config import Config, PassiveConfig  # noqa: E402
from bigbinf.lab import LabLayout  # noqa: E402
from bigbinf.measure.path.baseline import measure_path  # noqa: E402
from bigbinf.measure.tcp.tuning import Side, set_congestion  # noqa: E402
from bigbinf.passive.watcher import PassiveWatcher  # noqa: E402
from bigbinf.result import Result  # noqa: E402

C = verdicts.Cause
RMEM = verdicts.RMEM


def _cubic(which: str) -> Callable[[Config], contextlib.AbstractContextManager[None]]:
    """The data sender's route to its peer through CUBIC (`congctl lock`, as the scheduled
    http-cubic sets it per transfer: measure/tcp/tuning.py; a namespace's default cannot
    be set to an algorithm outside tcp_allowed_congestion_control), so a hand-run curl's
    connection takes it."""

    @contextlib.contextmanager
    def routed(config: Config) -> Iterator[None]:
        layout = LabLayout(config.lab)
        ns, peer = (
            (layout.client_ns, config.lab.remote_address)
            if which == "local"
            else (layout.remote_ns, config.lab.client_address)
        )
        undo = set_congestion(Side(f"namespace {ns}", ("ip", "netns", "exec", ns), peer), "cubic")
        try:
            yield
        finally:
            undo()

    return routed


@dataclass(frozen=True)
class Row:
    """A cause, the scheduled run judged under it, and the hand-run program for the passive one."""

    cause: verdicts.Cause
    program: str  # curl, scp, sftp
    passive_setup: Callable[[Config], contextlib.AbstractContextManager[None]] | None = None
    port: int = 80


ROWS = [
    Row(C("receiver buffer cap (local)", "wan", "http", "f8m", "download", "receive_window", "local",
          verdicts.capped("local", RMEM)), "curl"),
    Row(C("receiver buffer cap (local)", "wan", "scp", "f16m", "download", "receive_window", "local",
          verdicts.capped("local", RMEM)), "scp"),
    Row(C("receiver buffer cap (local)", "wan", "scp", "f16m", "download", "receive_window", "local",
          verdicts.capped("local", RMEM)), "sftp"),
    Row(C("receiver buffer cap (remote)", "wan", "http", "f8m", "upload", "receive_window", "remote",
          verdicts.capped("remote", RMEM)), "curl"),
    Row(C("receiver buffer cap (remote)", "wan", "scp", "f16m", "upload", "receive_window", "remote",
          verdicts.capped("remote", RMEM)), "sftp"),
    Row(C("a remote throttle (nginx limit_rate)", "wan", "http-remote-throttle", "f8m", "download", "application",
          "remote", verdicts.throttled_nginx), "curl", port=verdicts.THROTTLE_PORT),
    Row(C("a local throttle (curl --limit-rate)", "wan", "http-local-throttle", "f8m", "download", "application",
          "local"), "curl --limit-rate 2M"),
    Row(C("a policer", "policed", "http", "f16m", "download", "link_capacity", "path", verdicts.policed), "curl"),
    Row(C("a policer", "policed", "http", "f16m", "upload", "link_capacity", "path",
          lambda config: verdicts.policed(config, "remote")), "curl"),
    Row(C("loss on the data path", "lossy", "http-cubic", "f8m", "upload", "congestion", "path"), "curl",
        _cubic("local")),
    Row(C("loss on the data path", "lossy", "http-cubic", "f2m", "download", "congestion", "path"), "curl",
        _cubic("remote")),
]  # fmt: skip


def hand_run(config: Config, row: Row, tmp: Path) -> list[str]:
    """The command a user would type in the client namespace for the row's transfer."""
    layout = LabLayout(config.lab)
    addr, data, ds = config.lab.remote_address, layout.data_dir, row.cause.dataset
    src = data / f"{ds}.bin"
    up = tmp / f"up-{uuid.uuid4().hex[:6]}.bin"  # the remote shares this file system
    ssh = ["-F", str(layout.ssh_config)]
    if row.program.startswith("curl"):
        limit = row.program.split()[1:]
        if row.cause.direction == "upload":
            return ["curl", "-sS", "--fail", *limit, "-T", str(src), f"http://{addr}/upload/passive-{up.name}"]
        return ["curl", "-sS", "--fail", *limit, "-o", "/dev/null", f"http://{addr}:{row.port}/data/{ds}.bin"]
    if row.program == "scp":
        pair = [f"root@{addr}:{src}", str(tmp / "scp.bin")]
        return [
            "scp",
            "-q",
            "-B",
            *ssh,
            *(pair if row.cause.direction == "download" else [str(src), f"root@{addr}:{up}"]),
        ]
    batch = tmp / "sftp.batch"
    batch.write_text(f"get {src} {tmp / 'sftp.bin'}\n" if row.cause.direction == "download" else f"put {src} {up}\n")
    return ["sftp", "-q", "-b", str(batch), *ssh, f"root@{addr}"]


@contextlib.contextmanager
def watching(config: Config, baseline: Any) -> Iterator[list[Result]]:
    layout = LabLayout(config.lab)
    passive = PassiveConfig.model_validate(
        {
            "enabled": True,
            "netns": layout.client_ns,
            "remotes": {"lab": {"networks": [f"{config.lab.remote_address}/32"]}},
            "services": {"ssh": [22], "http": [80, verdicts.THROTTLE_PORT]},
            "interval": "0.2s",
            "min_bytes": "1MiB",
        }
    )
    got: list[Result] = []
    watcher = PassiveWatcher(passive, got.append, baseline_of=lambda remote: baseline if remote == "lab" else None)
    watcher.start()
    try:
        yield got
    finally:
        watcher.stop()


def passive_run(config: Config, row: Row, tmp: Path) -> tuple[Result | None, truth.Truth, str]:
    """The row's cause induced, the path probed as a round does, a hand-run transfer
    watched: its passive result (None: none came) and its truth."""
    layout = LabLayout(config.lab)
    (spec,) = [
        s
        for s in verdicts.lab_specs(config)
        if (s.protocol, s.dataset, s.direction) == (row.cause.protocol, row.cause.dataset, row.cause.direction)
    ]
    setups = [s for s in (row.cause.setup, row.passive_setup) if s is not None]
    with contextlib.ExitStack() as stack:
        for setup in setups:
            stack.enter_context(setup(config))
        baseline = measure_path(spec.remote)
        argv = hand_run(config, row, tmp)
        with watching(config, baseline) as got:
            before = truth.snapshot(layout)
            done = subprocess.run(["ip", "netns", "exec", layout.client_ns, *argv], capture_output=True, timeout=120)
            after = truth.snapshot(layout)
            deadline = time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)
        # The truth read while the cause still stands (its settings are part of it).
        link = verdicts.LABS[row.cause.lab]["link"]
        rate = plain_site.parse_rate(link.get("rate", "")) or (
            verdicts.POLICER_BYTES_PER_SECOND if row.cause.lab == "policed" else None
        )
        rtt = 2 * float(link["delay"].removesuffix("ms")) / 1000 if link.get("delay") else None
        size = int(row.cause.dataset[1:-1]) * 2**20
        t = truth.truth(
            layout, before, after, row.cause.direction, size,
            (config.lab.client_address, config.lab.remote_address), {"rate": rate, "rtt": rtt},
        )  # fmt: skip
    error = "" if done.returncode == 0 else done.stderr.decode(errors="replace").strip()[-200:]
    biggest = max(got, key=lambda r: r.file_bytes, default=None)
    return biggest, t, error


def _said(r: Result | None) -> str:
    if r is None:
        return "(no result)"
    return f"{r.limited_by}/{r.limited_side}" if r.limited_by else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--burners", type=int, default=0)
    parser.add_argument("--only", default="", help="rows whose cause name contains one of these (comma-separated)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--record", type=Path)
    args = parser.parse_args()
    only = [o for o in args.only.split(",") if o]
    rows = [r for r in ROWS if not only or any(o in r.cause.name for o in only)]
    layouts: list[LabLayout] = []

    def make_lab(**kwargs: object) -> Config:
        config = lab_config(Path(tempfile.mkdtemp(prefix="bigbinf-pm-")), "bpm" + uuid.uuid4().hex[:6], **kwargs)  # type: ignore[arg-type]
        layouts.append(LabLayout(config.lab))
        lab.up(config)
        return config

    lines: list[dict[str, Any]] = []
    start = time.monotonic()
    with plain_site.burners(args.burners):
        try:
            for name in dict.fromkeys(r.cause.lab for r in rows):
                here = [r for r in rows if r.cause.lab == name]
                config = verdicts.matrix_lab(make_lab, name, [r.cause for r in here])
                tmp = Path(tempfile.mkdtemp(prefix="bigbinf-pm-"))
                subprocess.run(["chmod", "0777", str(tmp)], check=True)
                for row in here:
                    for _ in range(args.runs):
                        try:
                            scheduled = verdicts.run_cause(config, row.cause)
                            passive, t, error = passive_run(config, row, tmp)
                        except Exception as exc:  # one row's failure is said, never the others' loss
                            print(f"{row.cause.name} / {row.program}: failed: {exc!r}", file=sys.stderr, flush=True)
                            continue
                        line = {
                            "cause": row.cause.name, "program": row.program, "direction": row.cause.direction,
                            "expected": f"{row.cause.expected}/{row.cause.side}", "scheduled": _said(scheduled),
                            "passive": _said(passive), "passive_bytes": passive.file_bytes if passive else None,
                            "passive_evidence": passive.limited_evidence if passive else error,
                            "scheduled_evidence": scheduled.limited_evidence, "truth": truth.summary(t),
                            "truth_raw": t,
                        }  # fmt: skip
                        lines.append(line)
                        print(f"{line['cause']} / {row.program} {line['direction']}: expected {line['expected']}, "
                              f"scheduled {line['scheduled']}, passive {line['passive']} "
                              f"({line['passive_bytes']} B): {line['passive_evidence']}\n    truth: {line['truth']}",
                              file=sys.stderr, flush=True)  # fmt: skip
                lab.teardown(layouts.pop())
        finally:
            for layout in layouts:
                lab.teardown(layout)
            if args.record:
                args.record.write_text("".join(json.dumps(x, default=str) + "\n" for x in lines))
    _print(lines, args.markdown)
    print(f"{len(lines)} runs in {time.monotonic() - start:.0f} s, burners {args.burners}", file=sys.stderr)
    return 0


def _print(lines: list[dict[str, Any]], markdown: bool) -> None:
    sep = " | " if markdown else "  "
    head = ["cause", "program", "direction", "expected", "scheduled", "passive", "agree"]
    if markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for x in lines:
        cells = [x["cause"], x["program"], x["direction"], x["expected"], x["scheduled"], x["passive"],
                 "yes" if x["scheduled"] == x["passive"] else "no"]  # fmt: skip
        print(("| " if markdown else "") + sep.join(cells) + (" |" if markdown else ""))
    confusion = Counter((x["expected"], x["passive"]) for x in lines)
    said = sorted({s for _, s in confusion})
    print("\nPassive verdicts, expected (rows) against said (columns):")
    print(("| expected | " + " | ".join(said) + " |\n|" + "---|" * (len(said) + 1)) if markdown else "  ".join(said))
    for expected in sorted({e for e, _ in confusion}):
        cells = [str(confusion[(expected, s)]) for s in said]
        print(("| " + expected + " | " + " | ".join(cells) + " |") if markdown else f"{expected}: {'  '.join(cells)}")
    agree = sum(x["scheduled"] == x["passive"] for x in lines)
    right = sum(x["passive"] == x["expected"] for x in lines)
    withheld = sum(x["passive"] == "-" for x in lines)
    print(f"\npassive = scheduled in {agree}/{len(lines)}; passive right {right}/{len(lines)}, withheld {withheld}")


if __name__ == "__main__":
    raise SystemExit(main())
