"""One clinical record (an observation, condition, medication, encounter ...) and its Document form.

Both parsers (FHIR bundles, Synthea CSV) produce `ClinicalRecord`s; `to_document` gives each a deterministic
id (`sha256(tenant, patient, source system, source key)`), so re-ingesting a patient overwrites the same ids,
and the metadata retrieval filters on: `patient_id`, `record_type`, `effective_start(_utc)`,
`effective_end(_utc)`, `codes`, `encounter_id`, observation values and abnormal flags, `tenant`, `access`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from haystack import Document

from docqa.access import validate_access_meta
from docqa.ingestion.records.dates import RecordInstant
from docqa.ingestion.records.reference_ranges import ReferenceRange, adult_range

RECORD_TYPE_LABELS: dict[str, str] = {
    "lab_result": "Lab result",
    "vital_sign": "Vital sign",
    "survey": "Survey answer",
    "social_history": "Social history",
    "exam": "Exam finding",
    "observation": "Observation",
    "condition": "Condition",
    "medication": "Medication",
    "encounter": "Encounter",
    "procedure": "Procedure",
    "immunization": "Immunization",
    "allergy": "Allergy",
    "care_plan": "Care plan",
}
RECORD_TYPES: tuple[str, ...] = tuple(RECORD_TYPE_LABELS)

_OBSERVATION_CATEGORIES = {
    "laboratory": "lab_result",
    "vital-signs": "vital_sign",
    "vital-sign": "vital_sign",
    "survey": "survey",
    "social-history": "social_history",
    "exam": "exam",
}
_SEPARATOR = "\x1f"
ADULT_AGE_YEARS = 18


def observation_record_type(category: str | None) -> str:
    return _OBSERVATION_CATEGORIES.get((category or "").strip().lower(), "observation")


@dataclass
class ObservationValue:
    """A measured value and how it compares with a reference range (from the record, else the adult table)."""

    value: float | str
    unit: str | None = None
    reference: ReferenceRange | None = None
    reference_source: str | None = None
    interpretation: str | None = None  # "H", "L", "N", or a code the record itself carried

    @property
    def abnormal(self) -> bool | None:
        if self.interpretation is None:
            return None
        return self.interpretation.upper() not in ("N", "NORMAL")

    def describe(self) -> str:
        shown = f"{self.value:g}" if isinstance(self.value, float) else str(self.value)
        text = f"{shown} {self.unit}".strip() if self.unit else shown
        if self.reference is not None:
            verdict = {"H": "high", "L": "low", "N": "normal"}.get((self.interpretation or "").upper(), "")
            text += f" (reference {self.reference.text()}{'; ' + verdict if verdict else ''})"
        elif self.interpretation:
            text += f" (interpretation {self.interpretation})"
        return text


def numeric_observation(code: str, value: float, unit: str | None, age_years: float | None,
                        reference: ReferenceRange | None = None,
                        interpretation: str | None = None) -> ObservationValue:
    """A numeric value flagged against the record's own range/interpretation, else the adult table."""
    value = round(float(value), 2)
    if reference is not None or interpretation is not None:
        if interpretation is None and reference is not None:
            interpretation = reference.interpret(value)
        return ObservationValue(value, unit, reference, "record", interpretation)
    table = adult_range(code, unit)
    if table is None or age_years is None or age_years < ADULT_AGE_YEARS:
        return ObservationValue(value, unit)
    return ObservationValue(value, unit, table, "default_adult_table", table.interpret(value))


@dataclass
class ClinicalRecord:
    """The parser-neutral form of one record; `summary` is the human-readable sentence without the date."""

    source_system: str
    source_key: str
    patient_id: str
    record_type: str
    title: str
    summary: str
    start: RecordInstant | None
    source: str
    resource_type: str
    end: RecordInstant | None = None
    codes: list[str] = field(default_factory=list)
    encounter_id: str | None = None
    observation: ObservationValue | None = None
    extra_meta: dict[str, Any] = field(default_factory=dict)


def patient_name_meta(given: str | None, family: str | None) -> dict[str, str]:
    """`patient_name` (as written, without Synthea's numeric suffixes: "Max917" -> "Max") and `patient_name_key`
    (lowercase, single spaces) for finding a patient by name; empty when the source names nobody."""
    words = [re.sub(r"\d+$", "", word) for part in (given, family) for word in (part or "").split()]
    name = " ".join(word for word in words if word)
    return {"patient_name": name, "patient_name_key": name.lower()} if name else {}


def record_id(tenant: str, patient_id: str, source_system: str, source_key: str) -> str:
    parts = (tenant, "record", patient_id, source_system, source_key)
    return hashlib.sha256(_SEPARATOR.join(parts).encode("utf-8")).hexdigest()


def to_document(record: ClinicalRecord, tenant: str, access: Sequence[str]) -> Document:
    """The Document of one record; raises `ValueError` without access-control metadata."""
    label = RECORD_TYPE_LABELS.get(record.record_type, record.record_type)
    when = record.start.iso if record.start else "date unknown"
    if record.end is not None:
        when += f" to {record.end.iso}"
    meta: dict[str, Any] = {
        "tenant": tenant,
        "access": sorted(set(access)),
        "patient_id": record.patient_id,
        "record_type": record.record_type,
        "resource_type": record.resource_type,
        "title": record.title,
        "source": record.source,
        "source_system": record.source_system,
        "codes": list(record.codes),
    }
    validate_access_meta(meta)
    if record.codes:
        meta["code"] = record.codes[0].rsplit("|", 1)[-1]
    if record.encounter_id:
        meta["encounter_id"] = record.encounter_id
    for prefix, instant in (("effective_start", record.start), ("effective_end", record.end)):
        if instant is not None:
            meta[prefix] = instant.iso
            meta[f"{prefix}_utc"] = instant.utc
    obs = record.observation
    if obs is not None:
        meta["value"] = obs.value
        if obs.unit:
            meta["unit"] = obs.unit
        if obs.reference is not None:
            meta["reference_range"] = obs.reference.text()
            meta["reference_source"] = obs.reference_source
            if obs.reference.low is not None:
                meta["reference_low"] = obs.reference.low
            if obs.reference.high is not None:
                meta["reference_high"] = obs.reference.high
        if obs.interpretation is not None:
            meta["interpretation"] = obs.interpretation
            meta["abnormal"] = bool(obs.abnormal)
    meta.update({k: v for k, v in record.extra_meta.items() if v not in (None, "", [])})
    content = f"{label} ({when}): {record.summary}"
    return Document(
        id=record_id(tenant, record.patient_id, record.source_system, record.source_key),
        content=content,
        meta=meta,
    )


def age_in_years(birth: RecordInstant | None, at: RecordInstant | None) -> float | None:
    if birth is None or at is None:
        return None
    return (at.moment - birth.moment).days / 365.25
