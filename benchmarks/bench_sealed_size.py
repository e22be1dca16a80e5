"""What the gzip members per 64 KiB cost a journal's size: each sealed day part beside its
lines recompressed as one gzip member (level 6, as sealing wrote before the members),
summed over a journal's parts (issue 44).

Usage:
    .venv/bin/python benchmarks/bench_sealed_size.py JOURNAL_DIR    # e.g. bench_journal.py --upgrade --keep's
"""

from __future__ import annotations

import argparse
import gzip
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path, help="a journal's directory (its journal.*.jsonl.gz parts)")
    args = parser.parse_args()
    sealed = one_member = lines = parts = 0
    cpu = time.process_time()
    for part in sorted(args.directory.glob("journal.*.jsonl.gz")):
        raw = part.read_bytes()
        text = gzip.decompress(raw)  # every member
        sealed += len(raw)
        one_member += len(gzip.compress(text, compresslevel=6, mtime=0))
        lines += text.count(b"\n")
        parts += 1
    print(
        f"{parts} parts, {lines} lines: sealed {sealed / 2**20:.1f} MiB, one member each {one_member / 2**20:.1f} MiB, "
        f"{sealed / one_member:.3f}x ({time.process_time() - cpu:.0f} CPU-s)"
    )


if __name__ == "__main__":
    main()
