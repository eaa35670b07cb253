"""Times given to the audit read side (`since`, `until`, `at`), normalised to UTC once, where they are parsed.

A time with a large offset near the ends of the calendar (`0001-01-01T00:00:00+14:00`,
`9999-12-31T23:59:59-14:00`) has no UTC equivalent in Python's range: it is refused with a message instead of
raising `OverflowError` deep in a query.

Usage:
    as_utc(datetime(2026, 3, 3, 11, tzinfo=timezone(timedelta(hours=1))))   # 2026-03-03 10:00 UTC
    since: UtcTime | None = None     # a FastAPI query parameter: out of range -> 422 with the message
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator


class TimeOutOfRange(ValueError):
    """A time that cannot be expressed in UTC between years 1 and 9999."""


def as_utc(value: datetime) -> datetime:
    """`value` in UTC; a naive value is taken as UTC already. Raises `TimeOutOfRange` past the calendar's ends."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise TimeOutOfRange(
            f"{value.isoformat()} is out of range: in UTC it falls before 0001-01-01 or after 9999-12-31"
        ) from None


# The parsing layer of every audit endpoint's time parameters: pydantic turns the ValueError into a 422.
UtcTime = Annotated[datetime, AfterValidator(as_utc)]


def zoned_as_utc(value: datetime) -> datetime:
    """`value` in UTC, refusing a time without a zone (where guessing UTC could flip an access decision)."""
    if value.tzinfo is None:
        raise ValueError("give the time with a time zone, e.g. 2026-03-03T10:00:00Z")
    return as_utc(value)


ZonedUtcTime = Annotated[datetime, AfterValidator(zoned_as_utc)]
