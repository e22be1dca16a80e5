"""The verdict's confusion matrix (issue 23): every induced cause of tests/support/verdicts.py,
RUNS times each, through the real path, and what the verdict said; the table in
docs/benchmarks.md ("Why was it slow? The confusion matrix").

    sudo .venv/bin/python benchmarks/verdict_matrix.py [--runs 3] [--only NAME[,NAME]] [--markdown]

Builds the labs the causes need (unique names, removed at the end, also on Ctrl-C), runs
the causes one lab at a time and prints, per cause and protocol, the verdicts seen and how
many runs were right (verdict and side), then the overall hit rate and every evidence line
that contradicted its own verdict.  Needs root.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the causes are the tests' own (tests/support/verdicts.py)

from tests.conftest import lab_config  # noqa: E402
from tests.support import verdicts  # noqa: E402

from bigbinf import lab  # noqa: E402
from bigbinf.config import Config  # noqa: E402
from bigbinf.lab import LabLayout  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=verdicts.RUNS)
    parser.add_argument("--only", default="", help="causes whose name contains one of these (comma-separated)")
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown")
    args = parser.parse_args()
    only = [o for o in args.only.split(",") if o]
    causes = [c for c in verdicts.CAUSES if not only or any(o in c.name for o in only)]
    layouts: list[LabLayout] = []

    def make_lab(**kwargs: object) -> Config:
        name = "bbv" + uuid.uuid4().hex[:6]
        config = lab_config(Path(tempfile.mkdtemp(prefix="bigbinf-verdicts-")), name, **kwargs)  # type: ignore[arg-type]
        layouts.append(LabLayout(config.lab))
        lab.up(config)
        return config

    outcomes: list[verdicts.Outcome] = []
    start = time.monotonic()
    try:
        for name in dict.fromkeys(c.lab for c in causes):
            config = verdicts.matrix_lab(make_lab, name, causes)
            for cause in (c for c in causes if c.lab == name):
                outcome = verdicts.Outcome(cause)
                for _ in range(args.runs):
                    outcome.results.append(verdicts.run_cause(config, cause))
                outcomes.append(outcome)
                seen = Counter(f"{r.limited_by or '-'}/{r.limited_side or '-'}" for r in outcome.results)
                right = sum(outcome.right(r) for r in outcome.results)
                print(f"{cause.name}, {cause.protocol} {cause.direction}: {right}/{args.runs} right; {dict(seen)}",
                      file=sys.stderr, flush=True)  # fmt: skip
            lab.teardown(layouts.pop())
    finally:
        for layout in layouts:
            lab.teardown(layout)
    _print(outcomes, args.runs, args.markdown)
    right, runs = verdicts.hit_rate(outcomes)
    contradicting = [(o.cause, r) for o in outcomes for r in o.results if verdicts.contradictions(r)]
    print(f"\n{right} of {runs} runs right ({right / max(runs, 1):.1%}); {len(contradicting)} evidence lines "
          f"contradict their verdict; {time.monotonic() - start:.0f} s")  # fmt: skip
    for cause, r in contradicting:
        print(f"  {cause.name}, {cause.protocol}: {verdicts.contradictions(r)}: {r.limited_evidence}")
    failed = [(o.cause, r) for o in outcomes for r in o.results if r.outcome != "ok"]
    for cause, r in failed:
        print(f"  {cause.name}, {cause.protocol}: {r.outcome}: {r.error}")
    return 0 if right >= 0.95 * runs and not contradicting and not failed else 1


def _print(outcomes: list[verdicts.Outcome], runs: int, markdown: bool) -> None:
    rows = [("cause", "protocol", "direction", "expected", "right", "verdicts seen (verdict/side: runs)")]
    for o in outcomes:
        seen = Counter(f"{r.limited_by or '-'}/{r.limited_side or '-'}" for r in o.results)
        rows.append(
            (
                o.cause.name,
                o.cause.protocol,
                o.cause.direction,
                f"{o.cause.expected}/{o.cause.side}",
                f"{sum(o.right(r) for r in o.results)}/{runs}",
                ", ".join(f"{v}: {n}" for v, n in seen.most_common()),
            )
        )
    if markdown:
        print("| " + " | ".join(rows[0]) + " |")
        print("|" + "---|" * len(rows[0]))
        for row in rows[1:]:
            print("| " + " | ".join(row) + " |")
        return
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
