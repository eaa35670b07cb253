"""Resolve the time window and the patient of a question about longitudinal records into retrieval filters."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from dateutil.relativedelta import relativedelta
from haystack import component, default_from_dict, default_to_dict

DATE_FIELD = "meta.effective_start_utc"
UTC_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "eighteen": 18, "twenty-four": 24,
}
_UNITS = {"day": "days", "week": "weeks", "month": "months", "year": "years"}
_AMOUNT = r"(\d{1,3}|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + r")"
_RELATIVE = re.compile(
    r"\b(?:in|within|over|during|for)?\s*(?:the\s+)?(?:last|past|previous|recent)\s+(?:" + _AMOUNT + r"\s+)?"
    r"(day|week|month|year)s?\b",
    re.IGNORECASE,
)
_MONTHS = {name: number for number, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
    ("december", "dec")), start=1) for name in names}
_MONTH = r"(?:" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
# One calendar date in the forms people write: 2015-03-04, 2015-03, March 4, 2015, 4 March 2015, March 2015, 2015.
_DATE = (r"(\d{4}-\d{1,2}-\d{1,2}|\d{4}-\d{1,2}|\d{4}/\d{1,2}/\d{1,2}|"
         + _MONTH + r"\s+\d{1,2}(?:st|nd|rd|th)?,?\s+\d{4}|"
         r"\d{1,2}(?:st|nd|rd|th)?\s+" + _MONTH + r",?\s+\d{4}|" + _MONTH + r",?\s+\d{4}|\d{4})(?![\d-])")
_AS_OF = re.compile(r"\b(?:as\s+of|as\s+at)\s+" + _DATE, re.IGNORECASE)
_BETWEEN = re.compile(r"\b(?:between|from)\s+" + _DATE + r"\s+(?:and|to|until|till|through|-)\s+" + _DATE,
                      re.IGNORECASE)
_SINCE = re.compile(r"\b(?:since|after|from)\s+" + _DATE, re.IGNORECASE)
_BEFORE = re.compile(r"\b(?:before|prior\s+to|until|up\s+to)\s+" + _DATE, re.IGNORECASE)
_ON_DATE = re.compile(r"\b(?:in|during|on|for)\s+" + _DATE, re.IGNORECASE)
_LAST_VISIT = re.compile(
    r"\b(?:last|latest|most\s+recent|previous|recent)\s+(?:doctor(?:'s)?\s+|clinic\s+|hospital\s+)?"
    r"(?:visit|encounter|appointment|admission)\b",
    re.IGNORECASE,
)
_FIRST_VISIT = re.compile(
    r"\b(?:first|earliest|initial)\s+(?:doctor(?:'s)?\s+|clinic\s+|hospital\s+)?"
    r"(?:visit|encounter|appointment|admission)\b",
    re.IGNORECASE,
)
_PATIENT = re.compile(r"\bpatient\s+(?:id\s+)?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b",
                      re.IGNORECASE)
_ABNORMAL = re.compile(r"\b(abnormal|out[- ]of[- ]range)\b", re.IGNORECASE)


# How a question's time window was read; "none" when it names none.
ScopeKind = Literal["none", "relative", "since", "before", "between", "date", "year", "as_of", "last_visit",
                    "first_visit"]


@dataclass
class TimeScope:
    """What was understood: the window kind and bounds (UTC, inclusive), the patient, and the matched phrase."""

    kind: ScopeKind
    phrase: str | None = None
    start_utc: str | None = None
    end_utc: str | None = None
    patient_id: str | None = None
    encounter_id: str | None = None
    abnormal_only: bool = False
    as_of: str | None = None

    @property
    def is_scoped(self) -> bool:
        return self.kind != "none" or self.patient_id is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_as_of(as_of: str | datetime | None) -> datetime:
    """The reference instant: an aware datetime or ISO text (naive is taken as UTC); now when None."""
    if as_of is None:
        return datetime.now(UTC)
    moment = as_of if isinstance(as_of, datetime) else datetime.fromisoformat(str(as_of).strip())
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


@component
class TimeScopeResolver:
    """
    Turns "in the last two years", "within the last year", "last 6 months", "since 2015", "in 2019" and
    "last visit", relative to an explicit `as_of` instant, plus the patient, into filters on
    `meta.patient_id`, `meta.effective_start_utc` (and `meta.encounter_id` for the last visit).

    Deterministic on purpose: dates and patients are never taken from model output. "Last visit" needs a
    document store: the most recent encounter of the patient at or before `as_of`, looked up under the
    caller's access filters.

    Usage example:
    ```python
    resolver = TimeScopeResolver(document_store=store)
    out = resolver.run("Abnormal lab results within the last year?", as_of="2020-06-01T00:00:00Z",
                       patient_id="44ec4447-...", filters=restrict(scope, None))
    out["filters"], out["scope"]
    ```
    """

    def __init__(self, document_store: Any | None = None) -> None:
        """
        :param document_store: Store used to find the last encounter; without one "last visit" is not scoped.
        """
        self.document_store = document_store

    @component.output_types(filters=dict, scope=TimeScope)
    def run(self, question: str, as_of: str | None = None, patient_id: str | None = None,
            filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """
        :param question: The user's question.
        :param as_of: ISO instant the relative phrases count back from; now when None.
        :param patient_id: The patient; else a patient UUID written in the question; else none.
        :param filters: The caller's access filters, applied to the last-visit lookup.
        :returns: `filters` (None when nothing was scoped) and the resolved `scope`.
        :raises ValueError: When `as_of` is not an ISO date-time.
        """
        scope = resolve_time_scope(question, as_of=as_of, patient_id=patient_id, filters=filters,
                                   document_store=self.document_store)
        return {"filters": scope_filters(scope), "scope": scope}

    def to_dict(self) -> dict[str, Any]:
        # The store is a live collaborator wired by the pipeline builder, not configuration.
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TimeScopeResolver:
        return default_from_dict(cls, data)


def resolve_time_scope(question: str, *, as_of: str | None = None, patient_id: str | None = None,
                       filters: dict[str, Any] | None = None, document_store: Any | None = None) -> TimeScope:
    """The time scope and patient of a question (see `TimeScopeResolver`); the visit lookups read
    `document_store` under the caller's access `filters`.

    :raises ValueError: When `as_of` is not an ISO date-time.
    """
    reference = parse_as_of(as_of)
    patient = patient_id or _patient_in(question)
    written_as_of = _AS_OF.search(question)
    span = parse_date_span(written_as_of.group(1)) if written_as_of else None
    if span is not None:
        # "as of 2015-03-01" in the question moves the reference instant to the end of that date.
        reference = span[1]
    scope = TimeScope(kind="none", patient_id=patient, as_of=reference.strftime(UTC_FORMAT),
                      abnormal_only=bool(_ABNORMAL.search(question)))
    _resolve_window(question, reference, scope)
    if scope.kind == "none" and written_as_of is not None and span is not None:
        scope.kind, scope.phrase, scope.end_utc = "as_of", written_as_of.group(0), scope.as_of
    if scope.kind in ("last_visit", "first_visit"):
        _resolve_visit(scope, filters, document_store)
    return scope


def _resolve_visit(scope: TimeScope, filters: dict[str, Any] | None, document_store: Any | None) -> None:
    if document_store is None or scope.patient_id is None:
        scope.kind = "none"
        return
    conditions = [
        {"field": "meta.patient_id", "operator": "==", "value": scope.patient_id},
        {"field": "meta.record_type", "operator": "==", "value": "encounter"},
        {"field": DATE_FIELD, "operator": "<=", "value": scope.as_of},
    ]
    if filters:
        conditions.append(filters)
    encounters = document_store.filter_documents(filters={"operator": "AND", "conditions": conditions})
    if not encounters:
        scope.kind = "none"
        return
    pick = max if scope.kind == "last_visit" else min
    last = pick(encounters, key=lambda d: str(d.meta.get("effective_start_utc") or ""))
    scope.encounter_id = last.meta.get("encounter_id") or last.id
    scope.start_utc = last.meta.get("effective_start_utc")
    scope.end_utc = last.meta.get("effective_end_utc") or scope.start_utc


def _patient_in(question: str) -> str | None:
    match = _PATIENT.search(question)
    return match.group(1).lower() if match else None


def parse_date_span(text: str) -> tuple[datetime, datetime] | None:
    """The first and last second (UTC) of a written date: a day, a month or a year; None when unreadable."""
    text = text.strip().lower().replace(",", " ").replace(".", " ")
    text = re.sub(r"(\d)(st|nd|rd|th)\b", r"\1", text)
    parts = text.replace("/", "-").split()
    try:
        if len(parts) == 1 and "-" in parts[0]:
            numbers = [int(p) for p in parts[0].split("-")]
            if len(numbers) == 3:
                start = datetime(numbers[0], numbers[1], numbers[2], tzinfo=UTC)
                return start, start + relativedelta(days=1, seconds=-1)
            start = datetime(numbers[0], numbers[1], 1, tzinfo=UTC)
            return start, start + relativedelta(months=1, seconds=-1)
        if len(parts) == 1:
            start = datetime(int(parts[0]), 1, 1, tzinfo=UTC)
            return start, start + relativedelta(years=1, seconds=-1)
        words = [p for p in parts if p in _MONTHS]
        numbers = [int(p) for p in parts if p.isdigit()]
        if len(words) != 1:
            return None
        month = _MONTHS[words[0]]
        if len(numbers) == 1:
            start = datetime(numbers[0], month, 1, tzinfo=UTC)
            return start, start + relativedelta(months=1, seconds=-1)
        if len(numbers) == 2:
            day, year = (numbers[0], numbers[1]) if numbers[1] > 31 else (numbers[1], numbers[0])
            start = datetime(year, month, day, tzinfo=UTC)
            return start, start + relativedelta(days=1, seconds=-1)
    except ValueError:
        return None
    return None


def _blank(question: str, match: re.Match[str]) -> str:
    return question[: match.start()] + " " * (match.end() - match.start()) + question[match.end():]


def _resolve_window(question: str, reference: datetime, scope: TimeScope) -> None:
    end = reference.strftime(UTC_FORMAT)
    if match := _AS_OF.search(question):
        question = _blank(question, match)
    for pattern, kind in ((_LAST_VISIT, "last_visit"), (_FIRST_VISIT, "first_visit")):
        if match := pattern.search(question):
            scope.kind, scope.phrase = kind, match.group(0)
            return
    if match := _BETWEEN.search(question):
        first, second = parse_date_span(match.group(1)), parse_date_span(match.group(2))
        if first is not None and second is not None and first[0] <= second[1]:
            scope.kind, scope.phrase = "between", match.group(0)
            scope.start_utc = first[0].strftime(UTC_FORMAT)
            scope.end_utc = min(second[1], reference).strftime(UTC_FORMAT)
            return
    if match := _RELATIVE.search(question):
        amount_text, unit = match.group(1), match.group(2).lower()
        amount = _NUMBERS.get(amount_text.lower(), 0) if amount_text and not amount_text.isdigit() else (
            int(amount_text) if amount_text else 1)
        if amount >= 1:
            start = reference - relativedelta(**{_UNITS[unit]: amount})
            scope.kind, scope.phrase = "relative", match.group(0).strip()
            scope.start_utc, scope.end_utc = start.strftime(UTC_FORMAT), end
            return
    for match in _SINCE.finditer(question):
        span = parse_date_span(match.group(1))
        if span is not None and span[0] <= reference:
            # "since 2012" includes 2012; "after 2012" starts when 2012 is over.
            start = span[1] + relativedelta(seconds=1) if match.group(0).lower().startswith("after") else span[0]
            scope.kind, scope.phrase = "since", match.group(0)
            scope.start_utc, scope.end_utc = start.strftime(UTC_FORMAT), end
            return
    for match in _BEFORE.finditer(question):
        span = parse_date_span(match.group(1))
        if span is not None:
            until = match.group(0).lower().startswith(("until", "up"))
            last = span[1] if until else span[0] - relativedelta(seconds=1)
            scope.kind, scope.phrase = "before", match.group(0)
            scope.end_utc = min(last, reference).strftime(UTC_FORMAT)
            return
    for match in _ON_DATE.finditer(question):
        span = parse_date_span(match.group(1))
        if span is not None and span[0] <= reference and span[0].year >= 1900:
            is_year = re.fullmatch(r"\d{4}", match.group(1).strip()) is not None
            scope.kind, scope.phrase = ("year" if is_year else "date"), match.group(0)
            scope.start_utc = span[0].strftime(UTC_FORMAT)
            scope.end_utc = min(span[1], reference).strftime(UTC_FORMAT)
            return


def scope_filters(scope: TimeScope) -> dict[str, Any] | None:
    """Haystack filters for a resolved scope (None when neither a patient nor a window was found)."""
    conditions: list[dict[str, Any]] = []
    if scope.patient_id:
        conditions.append({"field": "meta.patient_id", "operator": "==", "value": scope.patient_id})
    conditions.extend(window_conditions(scope))
    if conditions and scope.abnormal_only:
        conditions.append({"field": "meta.abnormal", "operator": "==", "value": True})
    if not conditions:
        return None
    return {"operator": "AND", "conditions": conditions}


def window_conditions(scope: TimeScope) -> list[dict[str, Any]]:
    """Filter conditions for the scope's time window: its visit when it names one, else its date range."""
    if scope.kind in ("last_visit", "first_visit") and scope.encounter_id:
        return [{"field": "meta.encounter_id", "operator": "==", "value": scope.encounter_id}]
    if scope.kind == "none":
        return []
    conditions: list[dict[str, Any]] = []
    if scope.start_utc:
        conditions.append({"field": DATE_FIELD, "operator": ">=", "value": scope.start_utc})
    if scope.end_utc:
        conditions.append({"field": DATE_FIELD, "operator": "<=", "value": scope.end_utc})
    return conditions
