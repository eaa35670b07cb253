"""Resolve the time window and the patient of a question about longitudinal records into retrieval filters."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

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
_SINCE = re.compile(r"\bsince\s+(\d{4})(?:-(\d{2}))?(?:-(\d{2}))?\b", re.IGNORECASE)
_IN_YEAR = re.compile(r"\b(?:in|during)\s+(\d{4})\b", re.IGNORECASE)
_LAST_VISIT = re.compile(
    r"\b(?:last|latest|most\s+recent|previous)\s+(?:doctor(?:'s)?\s+|clinic\s+|hospital\s+)?"
    r"(?:visit|encounter|appointment|admission)\b",
    re.IGNORECASE,
)
_PATIENT = re.compile(r"\bpatient\s+(?:id\s+)?([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\b",
                      re.IGNORECASE)
_ABNORMAL = re.compile(r"\b(abnormal|out[- ]of[- ]range)\b", re.IGNORECASE)


@dataclass
class TimeScope:
    """What was understood: the window kind and bounds (UTC, inclusive), the patient, and the matched phrase."""

    kind: str  # "none", "relative", "since", "year", "last_visit"
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
        reference = parse_as_of(as_of)
        patient = patient_id or _patient_in(question)
        scope = TimeScope(kind="none", patient_id=patient, as_of=reference.strftime(UTC_FORMAT),
                          abnormal_only=bool(_ABNORMAL.search(question)))
        _resolve_window(question, reference, scope)
        if scope.kind == "last_visit":
            self._resolve_last_visit(scope, filters)
        return {"filters": scope_filters(scope), "scope": scope}

    def _resolve_last_visit(self, scope: TimeScope, filters: dict[str, Any] | None) -> None:
        if self.document_store is None or scope.patient_id is None:
            scope.kind = "none"
            return
        conditions = [
            {"field": "meta.patient_id", "operator": "==", "value": scope.patient_id},
            {"field": "meta.record_type", "operator": "==", "value": "encounter"},
            {"field": DATE_FIELD, "operator": "<=", "value": scope.as_of},
        ]
        if filters:
            conditions.append(filters)
        encounters = self.document_store.filter_documents(filters={"operator": "AND", "conditions": conditions})
        if not encounters:
            scope.kind = "none"
            return
        last = max(encounters, key=lambda d: str(d.meta.get("effective_start_utc") or ""))
        scope.encounter_id = last.meta.get("encounter_id") or last.id
        scope.start_utc = last.meta.get("effective_start_utc")
        scope.end_utc = last.meta.get("effective_end_utc") or scope.start_utc

    def to_dict(self) -> dict[str, Any]:
        # The store is a live collaborator wired by the pipeline builder, not configuration.
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TimeScopeResolver:
        return default_from_dict(cls, data)


def _patient_in(question: str) -> str | None:
    match = _PATIENT.search(question)
    return match.group(1).lower() if match else None


def _resolve_window(question: str, reference: datetime, scope: TimeScope) -> None:
    end = reference.strftime(UTC_FORMAT)
    if match := _LAST_VISIT.search(question):
        scope.kind, scope.phrase = "last_visit", match.group(0)
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
    if match := _SINCE.search(question):
        year, month, day = int(match.group(1)), int(match.group(2) or 1), int(match.group(3) or 1)
        try:
            start = datetime(year, month, day, tzinfo=UTC)
        except ValueError:
            return
        scope.kind, scope.phrase = "since", match.group(0)
        scope.start_utc, scope.end_utc = start.strftime(UTC_FORMAT), end
        return
    if match := _IN_YEAR.search(question):
        year = int(match.group(1))
        if 1900 <= year <= reference.year:
            scope.kind, scope.phrase = "year", match.group(0)
            scope.start_utc = f"{year}-01-01T00:00:00Z"
            scope.end_utc = min(f"{year}-12-31T23:59:59Z", end)


def scope_filters(scope: TimeScope) -> dict[str, Any] | None:
    """Haystack filters for a resolved scope (None when neither a patient nor a window was found)."""
    conditions: list[dict[str, Any]] = []
    if scope.patient_id:
        conditions.append({"field": "meta.patient_id", "operator": "==", "value": scope.patient_id})
    if scope.kind == "last_visit" and scope.encounter_id:
        conditions.append({"field": "meta.encounter_id", "operator": "==", "value": scope.encounter_id})
    elif scope.start_utc and scope.end_utc:
        conditions.append({"field": DATE_FIELD, "operator": ">=", "value": scope.start_utc})
        conditions.append({"field": DATE_FIELD, "operator": "<=", "value": scope.end_utc})
    if conditions and scope.abnormal_only:
        conditions.append({"field": "meta.abnormal", "operator": "==", "value": True})
    if not conditions:
        return None
    return {"operator": "AND", "conditions": conditions}
