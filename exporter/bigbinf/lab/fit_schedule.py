"""A copy of a configuration whose schedule fits this host (scripts/demo.sh):

    python -m bigbinf.lab.fit_schedule CONFIG OUT

The round is estimated from the journal as `--config.check` does (round_fit.estimate:
the longest of each test's recent runs and the set-up between them, and the rounds
measured); OUT is CONFIG with `schedule.interval` at least that, with a quarter to spare,
in whole minutes (round_fit.fitted_interval), and one line on standard output says so.
Where the journal holds no round yet (a new install), OUT's interval is FIRST_ROUND: the
first round runs alone, and its caller sizes the schedule again once it has ended (exit
status 3).  A schedule that fits already is kept as it is.  Only an interval schedule
is sized (a cron schedule is the operator's: exit status 2 with the reason).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from bigbinf import lab
from bigbinf.config import ConfigError, load_config
from bigbinf.journal.store import Journal
from bigbinf.service import round_fit
from bigbinf.service.rounds import series_of

FIRST_ROUND = "1h"  # the first round's gap: no start meets it, however long it takes
NOT_MEASURED = 3


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds % 60 == 0 else f"{seconds:.0f} s"


def fit(config_path: Path, out: Path) -> tuple[int, str]:
    """(exit status, the line to say); OUT written unless the status is 2."""
    config = load_config(config_path)
    raw = yaml.safe_load(config_path.read_text()) or {}
    asked = config.schedule.interval
    if asked is None or not isinstance(raw.get("schedule"), dict):
        return 2, f"{config_path}: schedule: only an interval schedule is sized to this host (this one is cron)"
    keys = series_of(config, lab.site)
    results = list(Journal(config.journal.path).read()) if config.journal.path.is_file() else []
    estimate = round_fit.estimate(config, keys, results)
    interval = round_fit.fitted_interval(estimate, asked)
    if interval is None:
        raw["schedule"]["interval"] = FIRST_ROUND
        said = (
            f"no round measured on this host yet: the first runs alone (the next start in {FIRST_ROUND}), "
            f"then the schedule is sized from it ({config_path} asks one every {_minutes(asked)})"
        )
        status = NOT_MEASURED
    else:
        raw["schedule"]["interval"] = f"{interval:.0f}s"
        longest = max(estimate.seconds, max(estimate.measured_rounds, default=0.0))
        rounds = len(estimate.measured_rounds)
        measured = (
            f"the last {rounds} rounds here" if rounds > 1 else "the round measured here" if rounds else "the journal"
        )
        said = (
            f"a round takes about {longest:.0f} s on this host (by {measured}): one round every {_minutes(interval)}"
            + (f" ({config_path} asks one every {_minutes(asked)})" if interval != asked else ", as configured")
        )
        status = 0
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_config(out)  # what was written loads, or this says why
    return status, said


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m bigbinf.lab.fit_schedule CONFIG OUT", file=sys.stderr)
        return 2
    try:
        status, said = fit(Path(argv[0]), Path(argv[1]))
    except ConfigError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    print(said, flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
