"""Read a question about patient records into exact metadata filters: which record types, when, which codes or
names, abnormal only, or what was active at an instant."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import import_class_by_name
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from docqa.components.clinical_terms import observation_terms, synonym_codes
from docqa.components.time_scope_resolver import (
    _AS_OF,
    _BEFORE,
    _BETWEEN,
    _FIRST_VISIT,
    _LAST_VISIT,
    _ON_DATE,
    _RELATIVE,
    _SINCE,
    DATE_FIELD,
    TimeScope,
    _patient_in,
    resolve_time_scope,
    window_conditions,
)

END_FIELD = "meta.effective_end_utc"
OBSERVATION_TYPES = ("lab_result", "vital_sign", "survey", "social_history", "exam", "observation")
# Record types that have a state (started, then maybe ended): "active medications", "current conditions".
STATEFUL_TYPES = ("medication", "condition", "allergy", "care_plan")
# Statuses of a record without an end date that say it is over (FHIR MedicationRequest, Condition clinical status,
# CarePlan, AllergyIntolerance). The date it ended is unknown, so such a record is not counted as active at any
# instant: a conservative reading, stated in every state answer.
INACTIVE_STATUSES = ("stopped", "completed", "cancelled", "entered-in-error", "resolved", "inactive", "remission",
                     "revoked", "ended", "refuted")

# Synthea's FHIR resource and CSV table names, the internal record types, and what clinicians call them.
_TYPE_PATTERNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"lab(?:oratory)?[\s_-]*(?:results?|tests?|values?|work|panels?|reports?|findings?|data)?|labs"
     r"|blood\s*work|blood\s+tests?|test\s+results?|diagnostic\s*reports?", ("lab_result",)),
    (r"vital[\s_-]*signs?|vitals?", ("vital_sign",)),
    (r"medication[\s_-]*requests?|medications?|meds|medicines?|drugs?|prescriptions?|prescribed|rx",
     ("medication",)),
    (r"conditions?|diagnos(?:is|es|ed)|problems?|problem\s+list|disorders?|diseases?|illness(?:es)?",
     ("condition",)),
    (r"procedures?|surger(?:y|ies)|operations?", ("procedure",)),
    (r"immuni[sz]ations?|vaccin(?:es?|ations?|ated)|shots?|jabs?", ("immunization",)),
    (r"encounters?|visits?|appointments?|admissions?|hospitali[sz]ations?", ("encounter",)),
    (r"allerg(?:y|ies|ic)|allergy[\s_-]*intolerances?|intolerances?", ("allergy",)),
    (r"care[\s_-]*plans?|treatment\s+plans?", ("care_plan",)),
    (r"surveys?|questionnaires?", ("survey",)),
    (r"social[\s_-]*history", ("social_history",)),
    (r"exam(?:ination)?s?(?:\s+findings?)?", ("exam",)),
    (r"observations?", OBSERVATION_TYPES),
)
_TYPES = [(re.compile(r"\b(?:" + pattern + r")\b", re.IGNORECASE), types) for pattern, types in _TYPE_PATTERNS]
_ABNORMAL = re.compile(r"\b(?:abnormal(?:ly)?|out[\s-]+of[\s-]+(?:the\s+)?(?:normal\s+|reference\s+)?range|"
                       r"flagged|not\s+normal|outside\s+(?:the\s+)?(?:normal\s+|reference\s+)?range)\b",
                       re.IGNORECASE)
_STATE = re.compile(r"\b(?:active|current(?:ly)?|ongoing|still|taking|present|open)\b|"
                    r"\b(?:is|are|was|were)\s+(?:the\s+)?(?:patient|he|she|they)\s+(?:\w+\s+)?on\b", re.IGNORECASE)
_LOINC = re.compile(r"(?<![\d-])(\d{1,5}-\d)(?![\d-])")
_CODE = re.compile(r"\bcode\s+([A-Za-z0-9.\-]{2,20})\b", re.IGNORECASE)
_WORD = re.compile(r"[a-z][a-z0-9\-]{2,}")
_STOP_WORDS = frozenset(ENGLISH_STOP_WORDS) | {
    "patient", "patients", "result", "results", "value", "values", "level", "levels", "record", "records",
    "history", "trend", "trends", "time", "show", "list", "give", "tell", "recorded", "measured", "measurement",
    "measurements", "reading", "readings", "test", "tests", "taken", "given", "received", "had", "has", "did",
    "does", "latest", "recent", "recently", "date", "dates", "year", "years", "month", "months", "week", "weeks",
    "day", "days", "ago", "normal", "high", "low", "range", "blood", "serum", "plasma", "report", "reports",
    "summary", "summarize", "summarise", "chart", "overview", "change", "changes", "changed", "progress", "since",
    "before", "after", "last", "first", "past", "previous", "during", "within", "over", "between", "until", "visit",
    "ever", "far", "now", "today", "new", "started", "start", "stopped", "stop", "documented", "noted", "known",
    "types", "type", "kind", "kinds", "any", "data", "information", "info", "details", "detail", "lab", "labs",
    "doctor", "clinic", "hospital", "prescribed", "diagnosed", "done", "performed", "administered",
    "note", "notes", "order", "ordered", "her", "his", "their", "whom", "when", "what", "which", "who", "how",
    "many", "much", "number", "count", "all", "every", "each", "please", "can", "could", "would", "should",
    "with", "without", "about", "regarding", "related", "relevant",
}
_POSSESSIVE = re.compile(r"'s\b|’s\b")
_NAME_WORD = re.compile(r"[^\W\d_][^\W\d_'’-]*(?:['’-][^\W\d_]+)*")
NAME_FIELD = "meta.patient_name_key"


@dataclass
class RecordQuery:
    """What a record question asks for; `exact` when the filters define the answer set by metadata alone."""

    record_types: list[str] = field(default_factory=list)
    type_phrases: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)
    code_phrases: list[str] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)
    name_terms: list[str] = field(default_factory=list)
    unmatched_terms: list[str] = field(default_factory=list)
    abnormal_only: bool = False
    state: bool = False
    state_from_utc: str | None = None
    state_to_utc: str | None = None
    patient_id: str | None = None
    patient_name: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return bool(self.record_types or self.codes or self.titles or self.state or self.abnormal_only)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "exact": self.exact}


@component
class RecordQueryResolver:
    """
    Deterministic reading of a question over longitudinal records into Haystack metadata filters that select
    exactly the records asked for:

    - a patient: the given id, else an id written in the question, else a name written in it ("Max Kris's labs")
      matched against the names of the patients whose records the caller may read (`meta.patient_name_key`);
    - record types ("lab results", "vitals", "meds", "diagnoses", "vaccines", "care plans", FHIR resource and
      Synthea CSV table names) -> `meta.record_type in [...]`;
    - the time scope, read as `TimeScopeResolver` reads it (`resolve_time_scope`: "in the last year", "since 2012",
      "before March 2015", "between 2010 and 2012", "at the last/first visit", "as of 2015-03-01") ->
      `meta.effective_start_utc` bounds or the visit's `meta.encounter_id`;
    - codes and names: packaged synonyms ("HbA1c", "blood pressure", "LDL") and LOINC codes written in the
      question -> `meta.code in [...]`; other words ("metformin") matched against the titles of the patient's
      own readable records -> `meta.title in [...]`;
    - "abnormal" -> `meta.abnormal == True` (set at ingestion from the record's own reference range or
      interpretation, else the packaged adult ranges);
    - state questions ("active medications as of 2015-03-01", "conditions active at the last visit",
      "current allergies"): started at or before the instant (or window end) and either ended at or after it, or
      without an end date and with a status that is not over (`INACTIVE_STATUSES`).

    Nothing comes from a model. Lookups (the visit, the titles) go through the caller's access `filters`, so a
    record the caller may not read never shapes the query.

    Usage example:
    ```python
    resolver = RecordQueryResolver(document_store=store)
    out = resolver.run("Which lab results were abnormal in the last year?", as_of="2014-01-01",
                       patient_id="44ec4447-...", filters=restrict(scope, None))
    store.filter_documents(filters=restrict(scope, out["filters"]))   # exactly those records
    out["query"].record_types, out["scope"].kind
    ```
    """

    def __init__(self, document_store: Any | None = None, max_title_lookup: int = 50_000) -> None:
        """
        :param document_store: Store for the visit and title lookups; without one, visits are unscoped and
            names are matched only through the packaged synonyms.
        :param max_title_lookup: Upper bound on the records read to match names against titles.
        """
        if max_title_lookup < 1:
            raise ValueError("max_title_lookup must be positive")
        self.document_store = document_store
        self.max_title_lookup = max_title_lookup

    @component.output_types(filters=dict, query=RecordQuery, scope=TimeScope)
    def run(self, question: str, as_of: str | None = None, patient_id: str | None = None,
            filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """
        :param question: The user's question.
        :param as_of: ISO instant relative phrases count back from (now when None).
        :param patient_id: The patient; else a patient id written in the question.
        :param filters: The caller's access filters, applied to every lookup (never added to the output).
        :returns: `filters` (None when nothing was scoped), the `query` understood and the time `scope`.
        :raises ValueError: When `as_of` is not an ISO date-time.
        """
        query = RecordQuery()
        if patient_id is None and _patient_in(question) is None:
            question, patient_id = self._read_patient_name(question, query, filters)
        # Codes first, so that "2093-3" is never read as a date.
        rest = _read_written_codes(question, query)
        scope = resolve_time_scope(rest, as_of=as_of, patient_id=patient_id, filters=filters,
                                   document_store=self.document_store)
        query.patient_id = scope.patient_id
        rest = _without_time_phrases(rest)
        rest = self._read_codes(rest, query)
        rest = _read_types(rest, query)
        query.abnormal_only = scope.abnormal_only or bool(_ABNORMAL.search(question))
        rest = _ABNORMAL.sub(" ", rest)
        query.state = bool(_STATE.search(rest)) and (
            not query.record_types or any(t in STATEFUL_TYPES for t in query.record_types))
        rest = _STATE.sub(" ", rest)
        self._read_names(rest, query, filters)
        return {"filters": record_filters(query, scope), "query": query, "scope": scope}

    @staticmethod
    def _read_codes(text: str, query: RecordQuery) -> str:
        lowered = text.lower()
        for synonym in sorted(synonym_codes(), key=len, reverse=True):
            pattern = re.compile(r"(?<![a-z0-9])" + re.escape(synonym) + r"(?![a-z0-9])")
            if pattern.search(lowered):
                query.code_phrases.append(synonym)
                query.codes.extend(c for c in synonym_codes()[synonym] if c not in query.codes)
                lowered = pattern.sub(" ", lowered)
        return lowered

    def _read_patient_name(self, question: str, query: RecordQuery,
                           filters: dict[str, Any] | None) -> tuple[str, str | None]:
        """A patient named in the question ("Max Kris's lab results"), among the patients whose records the caller
        may read; returns the question without the name and the patient id (None when none or several match)."""
        if self.document_store is None:
            return question, None
        words = [w.lower() for w in _NAME_WORD.findall(_POSSESSIVE.sub("", question))]
        spans = sorted({" ".join(words[i:i + n]) for n in (2, 3, 4) for i in range(len(words) - n + 1)})
        if not spans:
            return question, None
        condition: dict[str, Any] = {"field": NAME_FIELD, "operator": "in", "value": spans}
        found = self.document_store.filter_documents(
            filters={"operator": "AND", "conditions": [condition, filters]} if filters else condition)
        if not found:
            return question, None
        key = max({str(d.meta[NAME_FIELD.removeprefix("meta.")]) for d in found}, key=lambda k: (len(k), k))
        patients = sorted({str(d.meta.get("patient_id")) for d in found
                           if d.meta.get(NAME_FIELD.removeprefix("meta.")) == key})
        query.patient_name = next(str(d.meta.get("patient_name") or key) for d in found
                                  if d.meta.get(NAME_FIELD.removeprefix("meta.")) == key)
        name = re.compile(r"(?<!\w)" + r"\s+".join(re.escape(w) for w in key.split()) + r"(?:'s|’s)?(?!\w)",
                          re.IGNORECASE)
        if len(patients) == 1:
            query.notes.append(f"patient {query.patient_name} read from the question: {patients[0]}")
            return name.sub(" ", question), patients[0]
        query.notes.append(f"{len(patients)} patients you may read are named {query.patient_name} "
                           f"({', '.join(patients[:5])}); their records are shown together: give the patient id to "
                           "choose one")
        return name.sub(" ", question), None

    def _read_names(self, text: str, query: RecordQuery, filters: dict[str, Any] | None) -> None:
        terms = [w for w in _WORD.findall(_POSSESSIVE.sub("", text.lower())) if w not in _STOP_WORDS]
        if query.patient_id:
            terms = [t for t in terms if t not in query.patient_id.lower()]
        terms = list(dict.fromkeys(terms))
        if not terms:
            return
        if self.document_store is None or not query.patient_id:
            query.unmatched_terms = terms
            return
        conditions: list[dict[str, Any]] = [{"field": "meta.patient_id", "operator": "==", "value": query.patient_id}]
        if query.record_types:
            conditions.append({"field": "meta.record_type", "operator": "in", "value": list(query.record_types)})
        if filters:
            conditions.append(filters)
        titles = sorted({str(d.meta.get("title") or "") for d in self.document_store.filter_documents(
            filters={"operator": "AND", "conditions": conditions})[: self.max_title_lookup]} - {""})
        for term in terms:
            word = re.compile(r"(?<![a-z0-9])" + re.escape(term), re.IGNORECASE)
            matched = [t for t in titles if word.search(t)]
            if matched:
                query.name_terms.append(term)
                query.titles.extend(t for t in matched if t not in query.titles)
            else:
                query.unmatched_terms.append(term)

    def to_dict(self) -> dict[str, Any]:
        # The store is written out so a pipeline loaded from YAML looks up visits and titles again (docqa's loader
        # binds it to the deployment's store).
        store = self.document_store.to_dict() if self.document_store is not None else None
        return default_to_dict(self, document_store=store, max_title_lookup=self.max_title_lookup)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordQueryResolver:
        params = data["init_parameters"]
        if isinstance(params.get("document_store"), dict):
            store_class = import_class_by_name(params["document_store"]["type"])
            params["document_store"] = store_class.from_dict(params["document_store"])
        return default_from_dict(cls, data)


def _read_written_codes(question: str, query: RecordQuery) -> str:
    """LOINC codes ("4548-4") and "code X" written in the question, blanked out of the returned text."""
    for match in [*_CODE.finditer(question), *_LOINC.finditer(question)]:
        code = match.group(1)
        if code not in query.codes:
            query.codes.append(code)
            query.code_phrases.append(match.group(0))
    return _LOINC.sub(" ", _CODE.sub(" ", question))


def _without_time_phrases(question: str) -> str:
    text = question
    for pattern in (_AS_OF, _BETWEEN, _LAST_VISIT, _FIRST_VISIT, _RELATIVE, _SINCE, _BEFORE, _ON_DATE):
        text = pattern.sub(" ", text)
    return text


def _read_types(text: str, query: RecordQuery) -> str:
    for pattern, types in _TYPES:
        for match in pattern.finditer(text):
            query.type_phrases.append(match.group(0))
            query.record_types.extend(t for t in types if t not in query.record_types)
        text = pattern.sub(" ", text)
    return text


def record_filters(query: RecordQuery, scope: TimeScope) -> dict[str, Any] | None:
    """Haystack filters selecting exactly the records of `query` in `scope` (None when nothing was scoped).

    Also sets the query's state instant or interval, and its notes, when it is a state question.
    """
    conditions: list[dict[str, Any]] = []
    if scope.patient_id:
        conditions.append({"field": "meta.patient_id", "operator": "==", "value": scope.patient_id})
    elif query.patient_name:  # several readable patients share the name: all of them, never anyone else
        conditions.append({"field": NAME_FIELD, "operator": "==", "value": query.patient_name.lower()})
    if query.record_types:
        conditions.append({"field": "meta.record_type", "operator": "in", "value": list(query.record_types)})
    names: list[dict[str, Any]] = []
    if query.codes:
        names.append({"field": "meta.code", "operator": "in", "value": list(query.codes)})
    if query.titles:
        names.append({"field": "meta.title", "operator": "in", "value": list(query.titles)})
    if names:
        conditions.append(names[0] if len(names) == 1 else {"operator": "OR", "conditions": names})
    if query.state:
        conditions.append(_state_condition(query, scope))
    else:
        conditions.extend(window_conditions(scope))
    if query.abnormal_only:
        conditions.append({"field": "meta.abnormal", "operator": "==", "value": True})
    if not conditions:
        return None
    if scope.kind == "none" and not query.state and scope.as_of:
        # No time phrase: the record as it stood at `as_of` (records without a date are kept).
        conditions.append({"operator": "OR", "conditions": [
            {"field": DATE_FIELD, "operator": "<=", "value": scope.as_of},
            {"field": DATE_FIELD, "operator": "==", "value": None},
        ]})
    return {"operator": "AND", "conditions": conditions}


def _state_condition(query: RecordQuery, scope: TimeScope) -> dict[str, Any]:
    if scope.kind in ("last_visit", "first_visit", "as_of", "none") or not scope.end_utc:
        # At one instant: the visit's start (through its end), or the reference instant.
        query.state_from_utc = scope.start_utc if scope.kind in ("last_visit", "first_visit") else None
        query.state_to_utc = (scope.end_utc if scope.kind in ("last_visit", "first_visit") else None) or scope.as_of
        query.state_from_utc = query.state_from_utc or query.state_to_utc
    else:
        # Over a window: active at some point of it.
        query.state_from_utc, query.state_to_utc = scope.start_utc or scope.end_utc, scope.end_utc
    query.notes.append(
        "active = started by the date and ended on or after it; a record without an end date counts as active "
        f"unless its status says it is over ({', '.join(INACTIVE_STATUSES[:5])}, ...)")
    return {"operator": "AND", "conditions": [
        {"field": DATE_FIELD, "operator": "<=", "value": query.state_to_utc},
        {"operator": "OR", "conditions": [
            {"field": END_FIELD, "operator": ">=", "value": query.state_from_utc},
            {"operator": "AND", "conditions": [
                {"field": END_FIELD, "operator": "==", "value": None},
                {"field": "meta.status", "operator": "not in", "value": list(INACTIVE_STATUSES)},
            ]},
        ]},
    ]}


def observation_name(code: str) -> str | None:
    """The packaged display name of an observation code, if the table knows it."""
    term = observation_terms().get(code)
    return term.name if term else None
