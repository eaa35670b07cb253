"""Time-scoped record questions: the gold record set of a question computed from the source files themselves.

A record question names its patient and an `as_of` instant (the run inputs AT-RAG takes) and says which records
answer it with a `select` object instead of a list of ids:

    {"question": "Which medications were prescribed in the last two years?", "patient_id": "b426...",
     "as_of": "2019-03-02T00:00:00Z", "select": {"record_type": "medication", "within": "P2Y"}}

`select` keys: `record_type` (lab_result, vital_sign, medication, condition, encounter, procedure, immunization,
allergy, care_plan, ...), `within` (an ISO 8601 period back from `as_of`: P6M, P2Y, P1Y6M), `since` (a date),
`abnormal` (outside the packaged adult reference range), `last_visit` (the records of the last encounter before
`as_of`). Every record counted is dated at or before `as_of`.

The gold set is read from the records `--corpus` (a FHIR bundle, a Synthea CSV export folder, or a folder
holding either) with the source files' own date, category, code and encounter fields, independently of the
ingestion parsers; it is then named by the ids of the stored records that have the same (patient, record type,
UTC instant, code, encounter), as many of them as the source holds. A source record no parser produced keeps a
`missing:` id, so it counts against recall. `docqa eval` scores an answer's cited records against it (record
precision/recall).

Usage:
    sources = source_records(Path("../shared/data/records"))
    selection = RecordSelection.from_dict({"record_type": "medication", "within": "P2Y"})
    gold = selection.select([r for r in sources if r.patient == patient], as_of)
    ids = gold_record_ids(gold, documents)                  # documents: the parsed corpus
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dateutil.relativedelta import relativedelta

from docqa.errors import DocqaError

if TYPE_CHECKING:
    from haystack import Document

    from docqa.evaluation.datasets import EvalQuestion

Key = tuple[str, str, str, str, str]
UTC_TEXT = "%Y-%m-%dT%H:%M:%SZ"
MISSING_PREFIX = "missing:"

_FHIR_TYPES = {"Condition": "condition", "MedicationRequest": "medication", "Encounter": "encounter",
               "Procedure": "procedure", "Immunization": "immunization", "AllergyIntolerance": "allergy",
               "CarePlan": "care_plan"}
_CATEGORIES = {"laboratory": "lab_result", "vital-signs": "vital_sign", "vital-sign": "vital_sign",
               "survey": "survey", "social-history": "social_history", "exam": "exam"}
_CSV_TABLES = {"encounters": ("encounter", "START"), "conditions": ("condition", "START"),
               "medications": ("medication", "START"), "procedures": ("procedure", "START"),
               "immunizations": ("immunization", "DATE"), "allergies": ("allergy", "START"),
               "careplans": ("care_plan", "START"), "observations": (None, "DATE")}
# Synthea's quality-of-life scores are computed figures, not observations of the patient.
_CSV_SKIPPED_CODES = frozenset({"QALY", "DALY", "QOLS"})
_PERIOD = re.compile(r"^P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)W)?(?:(\d+)D)?$")
SELECT_KEYS = frozenset({"record_type", "within", "since", "abnormal", "last_visit"})


@dataclass(frozen=True)
class SourceRecord:
    """One clinical record as its source file states it."""

    patient: str
    record_type: str
    when: datetime | None
    code: str
    encounter: str
    abnormal: bool | None = None

    @property
    def key(self) -> Key:
        when = self.when.strftime(UTC_TEXT) if self.when else ""
        return (self.patient, self.record_type, when, self.code, self.encounter)


def instant(text: str | None) -> datetime | None:
    """A FHIR/CSV date or date-time as a UTC instant (a bare date is its midnight UTC); None when empty."""
    if not text:
        return None
    moment = datetime.fromisoformat(text) if len(text) > 10 else datetime.fromisoformat(text + "T00:00:00")
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def _abnormal(code: str, value: Any, unit: str | None, birth: datetime | None, when: datetime | None) -> bool | None:
    from docqa.ingestion.records.reference_ranges import adult_range

    reference = adult_range(code, unit)
    if reference is None or birth is None or when is None or (when - birth).days / 365.25 < 18:
        return None
    try:
        return reference.interpret(round(float(value), 2)) != "N"
    except (TypeError, ValueError):
        return None


def fhir_source_records(path: Path) -> list[SourceRecord]:
    """The records of one FHIR R4 bundle (Observation, Condition, MedicationRequest, Encounter, ...)."""
    resources = [e["resource"] for e in json.loads(path.read_text(encoding="utf-8")).get("entry", [])]
    patient = next((r for r in resources if r.get("resourceType") == "Patient"), None)
    if patient is None:
        raise DocqaError(f"{path}: a FHIR bundle without a Patient resource")
    birth = instant(patient.get("birthDate"))
    out = []
    for r in resources:
        kind = r.get("resourceType")
        if kind == "Observation":
            category = ((r.get("category") or [{}])[0].get("coding") or [{}])[0].get("code")
            record_type = _CATEGORIES.get(category, "observation")
        elif kind in _FHIR_TYPES:
            record_type = _FHIR_TYPES[kind]
        else:
            continue
        concept = {"MedicationRequest": r.get("medicationCodeableConcept"), "Immunization": r.get("vaccineCode"),
                   "Encounter": (r.get("type") or [{}])[0], "CarePlan": (r.get("category") or [{}])[0]}.get(
            kind, r.get("code"))
        code = ((concept or {}).get("coding") or [{}])[0].get("code", "")
        when = instant(r.get("effectiveDateTime") or r.get("onsetDateTime") or r.get("authoredOn")
                       or r.get("occurrenceDateTime") or (r.get("period") or {}).get("start")
                       or (r.get("performedPeriod") or {}).get("start"))
        encounter = r["id"] if kind == "Encounter" else (r.get("encounter") or {}).get("reference", "")
        abnormal = None
        if kind == "Observation" and "valueQuantity" in r:
            quantity = r["valueQuantity"]
            abnormal = _abnormal(code, quantity.get("value"), quantity.get("unit"), birth, when)
        out.append(SourceRecord(patient["id"], record_type, when, code, encounter.removeprefix("urn:uuid:"),
                                abnormal))
    return out


def csv_source_records(directory: Path) -> list[SourceRecord]:
    """The records of a Synthea CSV export (patients.csv and the encounter, condition, ... tables present)."""
    with (directory / "patients.csv").open(encoding="utf-8", newline="") as handle:
        births = {row["Id"]: instant(row["BIRTHDATE"]) for row in csv.DictReader(handle)}
    out = []
    for table, (record_type, date_column) in _CSV_TABLES.items():
        path = directory / f"{table}.csv"
        if not path.is_file():
            continue
        with path.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                if table == "observations" and row["CODE"] in _CSV_SKIPPED_CODES:
                    continue
                when = instant(row[date_column])
                kind = record_type or _CATEGORIES.get(row["CATEGORY"], "observation")
                encounter = row["Id"] if table == "encounters" else row.get("ENCOUNTER", "")
                abnormal = None
                if table == "observations" and row["TYPE"] == "numeric":
                    abnormal = _abnormal(row["CODE"], row["VALUE"], row["UNITS"] or None, births.get(row["PATIENT"]),
                                         when)
                out.append(SourceRecord(row["PATIENT"], kind, when, row["CODE"], encounter, abnormal))
    return out


def record_sources(root: Path) -> list[tuple[str, Path]]:
    """The record files under `root`: ("fhir", bundle) and ("csv", export folder), sorted; empty if none.

    `root` is a FHIR bundle (.json), a Synthea CSV export folder (it holds patients.csv), or a folder holding
    any of them at any depth.
    """
    if root.is_file():
        return [("fhir", root)] if root.suffix.lower() == ".json" else []
    if not root.is_dir():
        return []
    exports = sorted({p.parent for p in root.rglob("patients.csv")})
    bundles = sorted(p for p in root.rglob("*.json") if not any(e in p.parents for e in exports))
    return [*(("csv", e) for e in exports), *(("fhir", b) for b in bundles)]


def source_records(root: Path) -> list[SourceRecord]:
    """Every record of the FHIR bundles and CSV exports under `root` (see `record_sources`)."""
    out: list[SourceRecord] = []
    for kind, path in record_sources(root):
        out += fhir_source_records(path) if kind == "fhir" else csv_source_records(path)
    return out


def parse_records(root: Path, *, tenant: str, access: Sequence[str]) -> list[Document]:
    """The ingestion parsers' documents of the same files, as `docqa ingest`/`docqa records` store them."""
    from docqa.ingestion.records import parse_fhir_bundle, parse_synthea_csv_dir

    documents: list[Document] = []
    for kind, path in record_sources(root):
        parse = parse_fhir_bundle if kind == "fhir" else parse_synthea_csv_dir
        documents += parse(path, tenant=tenant, access=list(access))
    return documents


def _period(text: str, where: str) -> relativedelta:
    match = _PERIOD.match(text.strip().upper()) if isinstance(text, str) else None
    if match is None or not any(match.groups()):
        raise DocqaError(f"{where}: `within` must be an ISO 8601 period such as P6M, P2Y or P1Y6M, not {text!r}")
    years, months, weeks, days = (int(g or 0) for g in match.groups())
    return relativedelta(years=years, months=months, weeks=weeks, days=days)


@dataclass(frozen=True)
class RecordSelection:
    """Which of a patient's records answer a question, as of an instant (see the module docstring)."""

    record_type: str | None = None
    within: str | None = None
    since: date | None = None
    abnormal: bool = False
    last_visit: bool = False

    @classmethod
    def from_dict(cls, raw: Any, where: str = "select") -> RecordSelection:
        if not isinstance(raw, dict) or not raw:
            raise DocqaError(f"{where}: `select` must be a non-empty object")
        unknown = sorted(set(raw) - SELECT_KEYS)
        if unknown:
            raise DocqaError(f"{where}: unknown `select` keys {', '.join(unknown)} "
                             f"(expected {', '.join(sorted(SELECT_KEYS))})")
        record_type = raw.get("record_type")
        if record_type is not None and (not isinstance(record_type, str) or not record_type.strip()):
            raise DocqaError(f"{where}: `record_type` must be a non-empty string")
        for flag in ("abnormal", "last_visit"):
            if not isinstance(raw.get(flag, False), bool):
                raise DocqaError(f"{where}: `{flag}` must be true or false")
        within = raw.get("within")
        if within is not None:
            _period(within, where)
        since = None
        if raw.get("since") is not None:
            try:
                since = date.fromisoformat(str(raw["since"]))
            except ValueError as exc:
                raise DocqaError(f"{where}: `since` must be a date (YYYY-MM-DD), not {raw['since']!r}") from exc
        return cls(record_type=record_type, within=within, since=since, abnormal=raw.get("abnormal", False),
                   last_visit=raw.get("last_visit", False))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.record_type is not None:
            out["record_type"] = self.record_type
        if self.within is not None:
            out["within"] = self.within
        if self.since is not None:
            out["since"] = self.since.isoformat()
        if self.abnormal:
            out["abnormal"] = True
        if self.last_visit:
            out["last_visit"] = True
        return out

    def select(self, records: Iterable[SourceRecord], as_of: datetime) -> list[SourceRecord]:
        """The records (of one patient) this selection names as of `as_of`, in their order."""
        dated = [r for r in records if r.when is not None and r.when <= as_of]
        if self.last_visit:
            encounters = [r for r in dated if r.record_type == "encounter"]
            if not encounters:
                return []
            last = max(encounters, key=lambda r: r.when or as_of).encounter
            dated = [r for r in dated if r.encounter == last]
        start = None
        if self.within is not None:
            start = as_of - _period(self.within, "select")
        if self.since is not None:
            since = datetime(self.since.year, self.since.month, self.since.day, tzinfo=UTC)
            start = since if start is None else max(start, since)
        return [r for r in dated
                if (self.record_type is None or r.record_type == self.record_type)
                and (start is None or (r.when is not None and r.when >= start))
                and (not self.abnormal or r.abnormal)]


def document_key(document: Document) -> Key:
    """A stored record's (patient, record type, UTC instant, code, encounter), from the parsers' meta."""
    meta = document.meta
    return (str(meta.get("patient_id", "")), str(meta.get("record_type", "")),
            str(meta.get("effective_start_utc") or ""), str(meta.get("code") or ""),
            str(meta.get("encounter_id") or ""))


def gold_record_ids(expected: Iterable[SourceRecord], documents: Iterable[Document]) -> tuple[str, ...]:
    """The stored ids of the expected records: per key as many as the source holds (`missing:` ids for those no
    document has), so set precision/recall over ids is the multiset precision/recall over keys."""
    by_key: dict[Key, list[str]] = defaultdict(list)
    for doc in documents:
        by_key[document_key(doc)].append(doc.id)
    ids: list[str] = []
    for key, count in Counter(r.key for r in expected).items():
        found = sorted(by_key.get(key, ()))[:count]
        ids += found + [f"{MISSING_PREFIX}{'|'.join(key)}#{n}" for n in range(len(found), count)]
    return tuple(ids)


def with_record_sets(questions: list[EvalQuestion], root: Path | None,
                     documents: Sequence[Document]) -> list[EvalQuestion]:
    """Record questions with their gold record ids, computed from the source files under `root` (the records
    corpus) and named by the stored `documents`; other questions unchanged."""
    pending = [q for q in questions if q.record_selection is not None]
    if not pending:
        return questions
    if root is None or not record_sources(root):
        raise DocqaError("record questions (`select`) need --corpus naming the patient records they ask about "
                         "(FHIR bundles or a Synthea CSV export)")
    by_patient: dict[str, list[SourceRecord]] = defaultdict(list)
    for record in source_records(root):
        by_patient[record.patient].append(record)
    out = []
    for question in questions:
        if question.record_selection is not None:
            selection = RecordSelection.from_dict(question.record_selection, f"question {question.id}")
            as_of = instant(str(question.run_inputs["as_of"]))
            if as_of is None:
                raise DocqaError(f"question {question.id}: a record question needs `as_of`")
            expected = selection.select(by_patient.get(str(question.run_inputs["patient_id"]), []), as_of)
            question = replace(question, record_ids=gold_record_ids(expected, documents))
        out.append(question)
    return out
