"""`bigbinf-exporter regression list|accept` (issue 35): the open regressions of the
configured series, and an operator's acceptance of one's level as the series' new
level.  An accept is journaled (history/regression_state.py); the running exporter takes it
up within seconds (or at its next reload) and a restart keeps it: the series' alert
resolves, its runs since the regression's start become its baseline, and a later drop
from that level opens a new regression."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from bigbinf.config import Config, ConfigError, load_config
from bigbinf.history.regression import ACCEPTED, Event
from bigbinf.history.regression_state import RegressionJournal
from bigbinf.result import SeriesKey

SERIES_FORMAT = "PROTOCOL/REMOTE/DATASET/DIRECTION"


def register(subparsers: Any, parents: Sequence[argparse.ArgumentParser] = ()) -> None:
    p = subparsers.add_parser(
        "regression",
        parents=list(parents),
        help="list the open throughput regressions, or accept one's level as the series' new level",
        description="list: the open regressions (from the journal beside journal.path). accept --series S: the "
        "series' open regression closes and its level becomes the baseline (docs/runbook.md, "
        "BigbinfThroughputRegressed); journaled, so the running exporter takes it up and a restart keeps it.",
    )
    p.add_argument("action", choices=["list", "accept"])
    p.add_argument("--series", metavar=SERIES_FORMAT, help="accept: the series (as `regression list` prints it)")
    p.set_defaults(func=run)


def series_name(key: SeriesKey) -> str:
    return f"{key.protocol}/{key.remote}/{key.dataset}/{key.direction}"


def configured(config: Config, key: SeriesKey) -> bool:
    """The configuration still measures the series (its protocol, remote and dataset, in
    that direction, scheduled): else the exporter has forgotten it, and no alert or gauge
    shows its regression."""
    protocol = config.protocols.get(key.protocol)
    if protocol is None or key.remote not in config.remotes or key.dataset not in config.datasets:
        return False
    if key.direction not in protocol.directions:
        return False
    transfers = config.schedule.transfers
    return transfers is None or any(
        (t.protocol, t.remote, t.dataset, t.direction) == (key.protocol, key.remote, key.dataset, key.direction)
        for t in transfers
    )


NOT_CONFIGURED = "  (not configured now: the exporter no longer measures it, no alert or gauge shows it)"


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def run(args: argparse.Namespace, out: TextIO | None = None, now: float | None = None) -> int:
    out = out or sys.stdout
    try:
        config = load_config(args.config_file)
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    journal = RegressionJournal(config.journal.path)
    open_ = journal.open_regressions()
    if args.action == "list":
        if args.series:
            print("regression list: takes no --series", file=sys.stderr)
            return 2
        if not open_:
            print(f"no open regression ({journal.path})", file=out)
        for key in sorted(open_, key=series_name):
            e = open_[key]
            print(
                f"{series_name(key)}  since {_clock(e.since)}  level before {e.level_before / 1e6:.3g} MB/s"
                + ("" if configured(config, key) else NOT_CONFIGURED),
                file=out,
            )
        return 0
    if not args.series:
        print(f"regression accept: give --series {SERIES_FORMAT} (see `regression list`)", file=sys.stderr)
        return 2
    parts = args.series.split("/")
    if len(parts) != 4 or not all(parts):
        print(f"regression accept: --series {args.series!r}: expected {SERIES_FORMAT}", file=sys.stderr)
        return 2
    key = SeriesKey(*parts)
    if key not in open_:
        listed = ", ".join(sorted(series_name(k) for k in open_)) or "none"
        print(
            f"regression accept: --series {args.series}: no open regression of that series in {journal.path} "
            f"(open: {listed})",
            file=sys.stderr,
        )
        return 1
    at = time.time() if now is None else now
    journal.append([Event(ACCEPTED, key, at, open_[key].since)])
    print(
        f"accepted: {series_name(key)}: its level since {_clock(open_[key].since)} is its baseline from now on "
        "(the running exporter takes it up within seconds)",
        file=out,
    )
    return 0
