"""What a command says of a bad argument (`UsageError`: one line naming it and the fix,
exit 2, never a traceback) and the one parser of a time given on the command line
(`parse_when`: --from, --to, --by).

Shared by the study's commands (study/) and the judgements from history (history/planmove.py):
it imports nothing of bigbinf.
"""

from __future__ import annotations

import datetime as dt
import re
import time


class UsageError(Exception):
    """A bad argument or input: reported as one line naming it and the fix, never a traceback."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def parse_when(text: str, tz_offset_hours: float, option: str, end_of_day: bool = False) -> float:
    """A --from/--to value as UTC epoch seconds.

    Dates and times without an offset are local time (the --tz-offset), like the peak
    hours.  A bare date given to --to means the end of that day, so `--to 2024-03-31`
    includes the 31st.
    """
    text = text.strip()
    if text == "now":
        return time.time()
    local = dt.timezone(dt.timedelta(hours=tz_offset_hours))
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            day = dt.datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=local)
            return (day + dt.timedelta(days=1 if end_of_day else 0)).timestamp()
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{option} {text!r}: not a date; use YYYY-MM-DD, YYYY-MM-DDTHH:MM[:SS][+HH:MM] or now"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=local)
    return when.timestamp()
