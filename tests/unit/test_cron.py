"""bigbinf.cron: crontab(5)'s weekdays (0 and 7 are Sunday), whatever APScheduler 3 numbers.
The truth is the calendar: the weekday of the next fire time from a known Wednesday."""

from __future__ import annotations

import datetime as dt

import pytest

from bigbinf.cron import crontab_trigger, weekdays_as_names

WEDNESDAY = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)


def _weekdays(expression: str, fires: int = 7) -> list[str]:
    trigger, when, out = crontab_trigger(expression, "UTC"), WEDNESDAY, []
    for _ in range(fires):
        when = trigger.get_next_fire_time(None, when + dt.timedelta(seconds=1))
        out.append(when.strftime("%a"))
    return out


@pytest.mark.parametrize(
    ("field", "days"),
    [
        ("0", ["Sun"]),
        ("7", ["Sun"]),
        ("1", ["Mon"]),
        ("1-5", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("1-7", ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]),
        ("0,6", ["Sat", "Sun"]),
        ("*/2", ["Sun", "Tue", "Thu", "Sat"]),
        ("sun", ["Sun"]),
        ("mon-fri", ["Mon", "Tue", "Wed", "Thu", "Fri"]),
    ],
)
def test_weekdays_fire_on_the_days_crontab_means(field: str, days: list[str]) -> None:
    fired = set(_weekdays(f"0 3 * * {field}", fires=14))
    assert fired == set(days)


def test_every_day_stays_every_day() -> None:
    assert weekdays_as_names("*") == "*"
    assert weekdays_as_names("0-6") == "*"


def test_a_field_it_cannot_read_is_left_for_apscheduler_to_refuse() -> None:
    assert weekdays_as_names("8") == "8"
    with pytest.raises(ValueError):
        crontab_trigger("0 3 * * 8", "UTC")
