"""When rounds run: APScheduler 3.x triggers from the schedule section, and how long a
series may go without a result before it is stale."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.interval import IntervalTrigger

from bigbinf.config import ScheduleConfig
from bigbinf.cron import crontab_trigger


def make_trigger(schedule: ScheduleConfig, after: dt.datetime | None = None) -> BaseTrigger:
    """The schedule's trigger.  `after`: a one-off first round's time (schedule.start_delay):
    an interval then counts from it, not from now, so the first two rounds are a whole
    interval apart (issue 47: 20 s less, and a busy host's second start met the first round)."""
    jitter = int(schedule.jitter) or None
    if schedule.interval:
        first = after + dt.timedelta(seconds=schedule.interval) if after is not None else None
        return IntervalTrigger(seconds=schedule.interval, timezone=schedule.timezone, jitter=jitter, start_date=first)
    crons = [crontab_trigger(expr, schedule.timezone) for expr in schedule.cron]
    return OrTrigger(crons, jitter=jitter) if len(crons) > 1 or jitter else crons[0]


def gap_after(schedule: ScheduleConfig, start: float) -> float:
    """Seconds from a round that started at `start` (UTC epoch) to the next scheduled start:
    the interval, or the next cron time's distance (without jitter).  A round longer than
    this meets the next start and makes it skip (bigbinf_round_overrun_seconds)."""
    if schedule.interval:
        return float(schedule.interval)
    trigger = OrTrigger([crontab_trigger(expr, schedule.timezone) for expr in schedule.cron])
    after = dt.datetime.fromtimestamp(start + 1, dt.UTC)
    when = trigger.get_next_fire_time(None, after)
    return (when.timestamp() - start) if when is not None else float("inf")


def shortest_gap_seconds(schedule: ScheduleConfig) -> float:
    """The shortest time between two scheduled starts (without jitter): what a round must
    fit in not to meet the next one.  For cron schedules over a year from a fixed date."""
    if schedule.interval:
        return float(schedule.interval)
    return min(_cron_gaps(schedule), default=float("inf"))


def longest_gap_seconds(schedule: ScheduleConfig) -> float:
    """The longest time between two scheduled starts, plus the jitter (what "stale"
    means for a series).  For cron schedules: the largest gap between consecutive fire
    times over a year from a fixed date, so the value does not depend on today."""
    if schedule.interval:
        return schedule.interval + schedule.jitter
    return max(_cron_gaps(schedule), default=0.0) + schedule.jitter


def _cron_gaps(schedule: ScheduleConfig) -> Iterator[float]:
    """Seconds between consecutive cron fire times over 400 days from a fixed date (at
    most 2,000 of them), so the answer does not depend on today."""
    trigger = OrTrigger([crontab_trigger(expr, schedule.timezone) for expr in schedule.cron])
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    previous = None
    when = trigger.get_next_fire_time(None, start)
    for _ in range(2000):
        if when is None or when > start + dt.timedelta(days=400):
            return
        if previous is not None:
            yield (when - previous).total_seconds()
        previous = when
        when = trigger.get_next_fire_time(when, when + dt.timedelta(microseconds=1))
