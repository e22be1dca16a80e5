"""What the journal's scrub (service/scrub.py) costs: a year of a mesh site's journal (one
result every 15 minutes for each of SERIES series, ~1.7 KB a line, sealed into day parts)
read through once, with no pause (the CPU and the wall time of the reading itself) and at
the scrub's duty (its wall time: DUTY_RATIO + 1 times the reading's, at most a tenth of a
core).  A part damaged in place is found either way (counted).

Usage:
    .venv/bin/python benchmarks/bench_scrub.py [--days 365] [--series 4] [--duty]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import threading
import time
from pathlib import Path

from bigbinf.journal.store import Journal, segments
from bigbinf.result import Result
from bigbinf.service import scrub


def write(journal: Path, days: int, series: int) -> None:
    """An old single file of the results, split into day parts as a start splits one."""
    t0 = time.time() - days * 86400.0
    with open(journal, "w") as f:
        for i in range(days * 96):
            for k in range(series):
                r = Result("scp", f"site{k}", "5GiB", "download", t0 + i * 900.0, "ok", duration_seconds=40.0,
                           file_bytes=5 << 30, files=1, error="x" * 1400)  # fmt: skip
                f.write(json.dumps(r.to_json(), sort_keys=True, separators=(",", ":")) + "\n")
    Journal(journal).rotate_now()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--series", type=int, default=4)
    parser.add_argument("--duty", action="store_true", help="also the scrub at its duty (10x the wall time)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp) / "journal.jsonl"
        began = time.monotonic()
        write(journal, args.days, args.series)
        sealed = [s for s in segments(journal) if s.sealed]
        size = sum(s.path.stat().st_size for s in sealed)
        print(f"{len(sealed)} sealed parts, {size / 1e6:.1f} MB, written in {time.monotonic() - began:.0f} s")
        for duty in [0.0, scrub.DUTY_RATIO] if args.duty else [0.0]:
            cpu, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            done = scrub.scrub([journal], lambda timeout: True, threading.Event(), duty=duty)
            after = resource.getrusage(resource.RUSAGE_SELF)
            used = (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime)
            took = time.monotonic() - wall
            assert done is not None
            print(
                f"duty {duty:g}: {done[0]} parts ({done[1] / 1e6:.1f} MB) read through in {took:.1f} s, "
                f"{used:.1f} CPU-s ({used / took:.0%} of a core), {len(done[2])} damaged"
            )


if __name__ == "__main__":
    main()
