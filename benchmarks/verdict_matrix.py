"""The verdict's confusion matrix (issue 23): every induced cause of tests/support/verdicts.py,
RUNS times each, through the real path, and what the verdict said; the table in
docs/benchmarks.md ("Why was it slow? The confusion matrix").

    sudo .venv/bin/python benchmarks/verdict_matrix.py [--runs 3] [--only NAME[,NAME]] [--markdown]
    sudo .venv/bin/python benchmarks/verdict_matrix.py --plain [--burners 2] [--runs 3] [--markdown]
        [--causes NAME,...] [--record FILE.jsonl]

--plain runs the causes of tests/support/plain_causes*.py against a plain remote (issue 34,
item 5: its own sshd with the distribution's sftp subsystem, nginx, iperf3, stats and
sysctls over ssh through a ControlMaster, not `lab: true`; tests/support/plain_site.py)
and prints the confusion matrix too; --burners N runs it all beside N CPU burners;
--causes runs only the causes of those exact names.  Each run's truth (tests/support/truth.py:
counters the product does not read) is printed beside its verdict, and the evidence held to
it (tests/support/against_truth.py): the summary counts the evidence lines the truth
contradicts (loss where nothing was lost, another flow where there was none, a window the
setting says otherwise).  --record writes every run (verdict, evidence, truth) as JSON lines.

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
from tests.support import plain_site, truth, verdicts  # noqa: E402
from tests.support.plain_causes import CAUSES as PLAIN_CAUSES  # noqa: E402

from bigbinf import lab  # noqa: E402
from bigbinf.config import Config  # noqa: E402
from bigbinf.lab import LabLayout  # noqa: E402
from bigbinf.result import PathBaseline, Result  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=verdicts.RUNS)
    parser.add_argument("--only", default="", help="causes whose name contains one of these (comma-separated)")
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown")
    parser.add_argument("--plain", action="store_true", help="the plain-remote matrix (issue 34, item 5)")
    parser.add_argument("--burners", type=int, default=0, help="CPU burners beside the whole run")
    parser.add_argument("--causes", default="", help="--plain: only the causes of these exact names (comma-separated)")
    parser.add_argument("--record", type=Path, help="--plain: every run with its truth, as JSON lines")
    args = parser.parse_args()
    if args.burners < 0 or args.runs < 1:
        parser.error("--burners must be 0 or more and --runs 1 or more")
    with plain_site.burners(args.burners):
        return plain(args) if args.plain else lab_matrix(args)


def lab_matrix(args: argparse.Namespace) -> int:
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


def _said(r: Result) -> str:
    """What a run said: its verdict and side ('-' = withheld), or that it failed."""
    return f"{r.limited_by or '-'}/{r.limited_side or '-'}" if r.outcome == "ok" else f"({r.outcome})"


def _needed(cause: object) -> str:
    return "(failed, naming it)" if getattr(cause, "error", "") else f"{cause.expected}/{cause.side}"  # type: ignore[attr-defined]


def _print(outcomes: list[verdicts.Outcome], runs: int, markdown: bool) -> None:
    rows = [("cause", "protocol", "direction", "expected", "right", "verdicts seen (verdict/side: runs)")]
    for o in outcomes:
        seen = Counter(_said(r) for r in o.results)
        rows.append(
            (
                o.cause.name,
                o.cause.protocol,
                o.cause.direction,
                _needed(o.cause),
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


def plain(args: argparse.Namespace) -> int:
    """The plain-remote matrix: per site, its causes RUNS times each, each run's truth
    beside it; the per-cause table, the confusion matrix (expected against said),
    precision (of the verdicts given, the share right), the share withheld, and the
    evidence lines the truth contradicts."""
    only = [o for o in args.only.split(",") if o]
    exact = [n.strip() for n in args.causes.split(",") if n.strip()]
    unknown = sorted(set(exact) - {c.name for c in PLAIN_CAUSES})
    if unknown:
        names = "\n  ".join(sorted({c.name for c in PLAIN_CAUSES}))
        print(f"--causes: no cause named {', '.join(map(repr, unknown))}; the causes are:\n  {names}", file=sys.stderr)
        return 2
    causes = [
        c for c in PLAIN_CAUSES if (not only or any(o in c.name for o in only)) and (not exact or c.name in exact)
    ]
    layouts: list[LabLayout] = []

    def make_lab(**kwargs: object) -> Config:
        name = "bbp" + uuid.uuid4().hex[:6]
        config = lab_config(Path(tempfile.mkdtemp(prefix="bigbinf-plain-")), name, **kwargs)  # type: ignore[arg-type]
        layouts.append(LabLayout(config.lab))
        lab.up(config)
        return config

    outcomes: list[plain_site.PlainOutcome] = []
    records: list[dict[str, object]] = []
    start = time.monotonic()
    try:
        for name in dict.fromkeys(c.site for c in causes):
            here = [c for c in causes if c.site == name]
            tmp = Path(tempfile.mkdtemp(prefix="bigbinf-plain-"))
            with plain_site.plain_site(make_lab, name, {c.dataset for c in here} | {"f8m"}, tmp) as site:
                for cause in here:
                    outcome = plain_site.PlainOutcome(cause)  # type: ignore[arg-type]
                    for _ in range(args.runs):
                        baselines: list[PathBaseline] = []
                        r, t = plain_site.run_cause_with_truth(site, cause, baselines)
                        outcome.results.append(r)
                        outcome.truths.append(t)
                        against = outcome.contradicted()[-1]
                        print(f"  {cause.name}, {cause.protocol} {cause.direction}: {r.outcome} "
                              f"{r.limited_by or '-'}/{r.limited_side or '-'}: {r.limited_evidence}"
                              f"{' ' + r.error if r.error else ''}\n    truth: {truth.summary(t)}"
                              + "".join(f"\n    CONTRADICTED: {c}" for c in against),
                              file=sys.stderr, flush=True)  # fmt: skip
                        records.append({
                            "cause": cause.name, "protocol": cause.protocol, "direction": cause.direction,
                            "expected": cause.expected, "side": cause.side, "error_expected": cause.error,
                            "outcome": r.outcome, "error": r.error, "limited_by": r.limited_by,
                            "limited_side": r.limited_side, "evidence": r.limited_evidence,
                            "next_step": r.limited_next_step, "right": outcome.right(r),
                            "contradicted": against, "truth": t, "one_way": r.one_way,
                            "sender_tcp": r.sender_tcp, "congestion_control": r.congestion_control,
                            "rate": r.throughput_bytes_per_second, "duration": r.duration_seconds,
                            # The whole Result and the baseline it was judged with: re-judged
                            # offline with judge_limit(Result.from_json(..), PathBaseline.from_json(..)).
                            "result": r.to_json(), "baseline": baselines[0].to_json(),
                        })  # fmt: skip
                    outcomes.append(outcome)
            lab.teardown(layouts.pop())
    finally:
        for layout in layouts:
            lab.teardown(layout)
        if args.record:
            truth.write(args.record, records)
    _print(outcomes, args.runs, args.markdown)  # type: ignore[arg-type]
    _print_confusion(outcomes, args.markdown)  # type: ignore[arg-type]
    # Causes that must fail (a stall) are counted apart: their right answer is an error.
    results = [(o, r) for o in outcomes for r in o.results if not o.cause.error]  # type: ignore[attr-defined]
    failing = [(o, r) for o in outcomes for r in o.results if o.cause.error]  # type: ignore[attr-defined]
    judged = [(o, r) for o, r in results if r.limited_by]
    right = sum(o.right(r) for o, r in judged)
    contradicting = [(o.cause, r) for o, r in results if verdicts.contradictions(r)]
    against = [(o.cause, r, c) for o in outcomes for r, c in zip(o.results, o.contradicted(), strict=True) if c]
    lines = sum(len(c) for _, _, c in against)
    print(
        f"\n{len(results) + len(failing)} runs of {len(outcomes)} causes, {args.burners} CPU burners: "
        f"{len(judged)} of {len(results)} judged (withheld {1 - len(judged) / max(len(results), 1):.1%}), "
        f"{right} of them right (precision {right / max(len(judged), 1):.1%}); "
        f"{sum(o.right(r) for o, r in failing)} of {len(failing)} stalls failed naming their cause; "
        f"{len(contradicting)} evidence lines contradict their verdict; {lines} claims in {len(against)} runs' "
        f"evidence the truth contradicts; {time.monotonic() - start:.0f} s"
    )
    for cause, r in contradicting:
        print(f"  {cause.name}, {cause.protocol}: {verdicts.contradictions(r)}: {r.limited_evidence}")
    for cause, _, claims in against:
        print(f"  against the truth: {cause.name}, {cause.protocol} {cause.direction}: {claims}")
    for o, r in results:
        if r.outcome != "ok":
            print(f"  {o.cause.name}, {o.cause.protocol}: {r.outcome}: {r.error}")
    for o, r in failing:
        if not o.right(r):
            print(f"  stall not named: {o.cause.name}, {o.cause.protocol}: {r.outcome}: {r.error}")
    for o, r in judged:
        if not o.right(r):
            print(f"  wrong: {o.cause.name}, {o.cause.protocol} {o.cause.direction}: {r.limited_by}/{r.limited_side}: "
                  f"{r.limited_evidence}")  # fmt: skip
    ok = (
        right >= 0.95 * len(judged)
        and len(judged) >= 0.9 * len(results)
        and not contradicting
        and not against
        and all(o.right(r) for o, r in failing)
    )
    return 0 if ok else 1


def _print_confusion(outcomes: list[verdicts.Outcome], markdown: bool) -> None:
    """Rows: the verdict/side each cause needs; columns: what was said ('-' = withheld)."""
    said = sorted({_said(r) for o in outcomes for r in o.results})
    rows: dict[str, Counter[str]] = {}
    for o in outcomes:
        row = rows.setdefault(_needed(o.cause), Counter())
        row.update(_said(r) for r in o.results)
    table = [("expected \\ said", *said)] + [
        (expected, *(str(row.get(s, 0) or "") for s in said)) for expected, row in sorted(rows.items())
    ]
    print()
    if markdown:
        print("| " + " | ".join(table[0]) + " |")
        print("|" + "---|" * len(table[0]))
        for line in table[1:]:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())


if __name__ == "__main__":
    sys.exit(main())
