"""The demo's schedule sized to this host (bigbinf.lab.fit_schedule, scripts/demo.sh):
from the round the journal holds, as --config.check estimates it; the first round alone
where none is measured yet; a round that fits keeps the configured interval."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from bigbinf import lab
from bigbinf.config import load_config
from bigbinf.journal.store import Journal
from bigbinf.lab import fit_schedule
from bigbinf.result import Result
from bigbinf.service.rounds import series_of

ROOT = Path(__file__).resolve().parents[2]
START = 1_780_000_000.0


def demo_copy(tmp_path: Path) -> Path:
    raw = yaml.safe_load((ROOT / "schedules" / "demo.yaml").read_text())
    raw["journal"]["path"] = str(tmp_path / "journal.jsonl")
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def journal_a_round(config_path: Path, each: float, gap: float) -> float:
    """One round of every configured test, each `each` s long, `gap` s between; its length."""
    config = load_config(config_path)
    journal = Journal(config.journal.path)
    at = START
    for key in series_of(config, lab.site):
        journal.append(
            Result(
                key.protocol,
                key.remote,
                key.dataset,
                key.direction,
                start_timestamp=at,
                outcome="ok",
                duration_seconds=each,
                round_id="r1",
            )
        )
        at += each + gap
    return at - gap - START


def interval_of(path: Path) -> str:
    return str(yaml.safe_load(path.read_text())["schedule"]["interval"])


def test_no_round_measured_runs_the_first_alone(tmp_path: Path) -> None:
    config, out = demo_copy(tmp_path), tmp_path / "fitted.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "bigbinf.lab.fit_schedule", str(config), str(out)], capture_output=True, text=True
    )
    assert done.returncode == fit_schedule.NOT_MEASURED, done.stderr
    assert interval_of(out) == fit_schedule.FIRST_ROUND
    assert "no round measured on this host yet" in done.stdout and "asks one every 1 min" in done.stdout
    assert len(done.stdout.splitlines()) == 1


def test_a_round_longer_than_the_interval_sizes_the_schedule(tmp_path: Path) -> None:
    config, out = demo_copy(tmp_path), tmp_path / "fitted.yaml"
    length = journal_a_round(config, each=5.0, gap=1.0)  # 24 tests: 143 s, more than the 1 min asked
    # --config.check's estimate: each test's duration and the set-up measured between two
    # (1 s), 24 times: 144 s, a little longer than the round measured.
    estimated = 24 * (5.0 + 1.0)
    assert length == estimated - 1.0
    status, said = fit_schedule.fit(config, out)
    assert status == 0
    seconds = float(interval_of(out).removesuffix("s"))
    assert seconds % 60 == 0 and seconds >= estimated * 1.25 > seconds - 60  # a quarter to spare, whole minutes
    assert load_config(out).schedule.interval == seconds
    assert f"a round takes about {estimated:.0f} s on this host (by the round measured here)" in said
    assert f"one round every {seconds / 60:.0f} min" in said and "asks one every 1 min" in said


def test_a_round_that_fits_keeps_the_interval(tmp_path: Path) -> None:
    config, out = demo_copy(tmp_path), tmp_path / "fitted.yaml"
    journal_a_round(config, each=0.5, gap=0.5)  # 24 tests: about 24 s
    status, said = fit_schedule.fit(config, out)
    assert status == 0 and load_config(out).schedule.interval == 60.0
    assert said.endswith("one round every 1 min, as configured")


def test_a_cron_schedule_is_left_to_its_operator(tmp_path: Path) -> None:
    raw = yaml.safe_load(demo_copy(tmp_path).read_text())
    raw["schedule"] = {"cron": ["*/5 * * * *"]}
    config = tmp_path / "cron.yaml"
    config.write_text(yaml.safe_dump(raw))
    status, said = fit_schedule.fit(config, tmp_path / "fitted.yaml")
    assert status == 2 and "only an interval schedule" in said and not (tmp_path / "fitted.yaml").exists()
