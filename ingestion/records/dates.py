"""Record dates: keep the source's ISO text with its offset and derive a sortable UTC form for range filters.

`meta.effective_start` keeps what the record said (e.g. `2012-02-08T02:43:19+00:00`, or `2023-01-27` for a
day); `meta.effective_start_utc` is always `YYYY-MM-DDTHH:MM:SSZ`, so it compares correctly both as a string
and as an ISO date in any store's range filters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime

UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class RecordInstant:
    """One parsed date: the ISO text with its time zone (or a plain day) and the sortable UTC form."""

    iso: str
    utc: str
    precision: str  # "second" or "day"

    @property
    def moment(self) -> datetime:
        return datetime.strptime(self.utc, UTC_FORMAT).replace(tzinfo=UTC)


def to_utc_string(moment: datetime) -> str:
    """The sortable UTC form of an aware datetime (naive datetimes are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime(UTC_FORMAT)


def parse_instant(text: str | None) -> RecordInstant | None:
    """Parse a FHIR/Synthea date or date-time; None for empty or unreadable text (never raises).

    A day without a time is kept as a day and placed at 00:00 UTC for range filtering.
    """
    if not text or not isinstance(text, str):
        return None
    text = text.strip()
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return RecordInstant(iso=day.isoformat(), utc=f"{day.isoformat()}T00:00:00Z", precision="day")
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return RecordInstant(iso=moment.isoformat(), utc=to_utc_string(moment), precision="second")
