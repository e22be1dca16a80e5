"""Crontab expressions as cron(8) reads them, for APScheduler 3.x.

APScheduler 3's CronTrigger.from_crontab numbers weekdays from Monday (0 = mon), where
crontab(5) numbers them from Sunday (0 or 7 = sun, 1 = mon): "0 3 * * 0", Sunday 03:00
to every crontab user, would run on Mondays.  The weekday field is therefore rewritten
to names, which both read alike, before APScheduler sees it.
"""

from __future__ import annotations

from datetime import tzinfo

from apscheduler.triggers.cron import CronTrigger

_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _day(text: str) -> int:
    if text.isdigit():
        number = int(text)
        if not 0 <= number <= 7:
            raise ValueError(text)
        return number % 7  # 7 is Sunday too
    return _NAMES.index(text[:3].lower())


def weekdays_as_names(field: str) -> str:
    """crontab(5)'s day-of-week field (numbers from Sunday, names, lists, ranges,
    steps) as a list of names; a field it cannot read is returned as it is, for
    APScheduler to refuse with its own message."""
    days: set[int] = set()
    try:
        for item in field.split(","):
            span, _, step_text = item.partition("/")
            step = int(step_text) if step_text else 1
            if step < 1:
                return field
            if span == "*":
                first, last = 0, 6
            elif "-" in span:
                low, high = span.split("-", 1)
                first, last = _day(low), _day(high)
                if high.isdigit() and int(high) == 7:
                    last = 7  # "1-7": Monday to Sunday
            else:
                first = last = _day(span)
                if step_text:
                    last = 6  # "N/step": from N to the end of the week
            if last < first:
                return field
            days.update(day % 7 for day in range(first, last + 1, step))
    except ValueError:
        return field
    if len(days) == 7:
        return "*"
    return ",".join(_NAMES[day] for day in sorted(days))


def crontab_trigger(expression: str, timezone: tzinfo | str) -> CronTrigger:
    """CronTrigger.from_crontab with crontab(5)'s weekday numbering."""
    fields = expression.split()
    if len(fields) == 5:
        fields[4] = weekdays_as_names(fields[4])
    return CronTrigger.from_crontab(" ".join(fields), timezone=timezone)
