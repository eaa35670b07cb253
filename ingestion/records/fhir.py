"""FHIR R4 bundles (as Synthea writes them) -> one Document per clinically meaningful resource.

Kept: Observation (labs, vitals, surveys ...; value, unit, reference range and interpretation when present),
Condition, MedicationRequest, Encounter (with its reason), Procedure, Immunization, AllergyIntolerance,
CarePlan. Skipped: billing (Claim, ExplanationOfBenefit), directory entries (Organization, Practitioner),
Goal, and DiagnosticReport, whose content is the set of Observations already kept one by one.

Usage:
    documents = parse_fhir_bundle(Path("Max_Kris.json"), tenant="acme", access=["group:clinicians"])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from haystack import Document

from docqa.errors import UnreadableFileError
from docqa.ingestion.records.clinical_record import (
    ClinicalRecord,
    ObservationValue,
    age_in_years,
    numeric_observation,
    observation_record_type,
    to_document,
)
from docqa.ingestion.records.dates import RecordInstant, parse_instant
from docqa.ingestion.records.reference_ranges import ReferenceRange

SOURCE_SYSTEM = "fhir"
KEPT_RESOURCE_TYPES = (
    "Observation", "Condition", "MedicationRequest", "Encounter", "Procedure", "Immunization",
    "AllergyIntolerance", "CarePlan",
)


def parse_fhir_bundle(bundle: Path | str | dict[str, Any], *, tenant: str = "default",
                      access: Sequence[str] = ("everyone",)) -> list[Document]:
    """Parse a FHIR R4 Bundle (a path or the decoded JSON) into record Documents.

    :param bundle: Path of a bundle JSON file, or the bundle itself.
    :param tenant: Tenant stored on every record.
    :param access: Principals allowed to read the records.
    :returns: One Document per kept resource, in bundle order.
    :raises UnreadableFileError: When the file is not a FHIR Bundle with exactly one Patient.
    """
    name, data = _load(bundle)
    entries = [e.get("resource") for e in data.get("entry") or [] if isinstance(e, dict)]
    resources = [r for r in entries if isinstance(r, dict) and isinstance(r.get("resourceType"), str)]
    patients = [r for r in resources if r["resourceType"] == "Patient"]
    if len(patients) != 1 or not patients[0].get("id"):
        raise UnreadableFileError(f"{name}: expected one Patient in the bundle, found {len(patients)}")
    context = _BundleContext(name, patients[0], resources)
    documents = []
    for resource in resources:
        record = context.record(resource)
        if record is not None:
            documents.append(to_document(record, tenant, access))
    return documents


def _load(bundle: Path | str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(bundle, dict):
        data, name = bundle, str(bundle.get("id") or "bundle")
    else:
        path = Path(bundle)
        name = path.name
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UnreadableFileError(f"{name}: not a readable JSON file ({type(exc).__name__})") from exc
    if not isinstance(data, dict) or data.get("resourceType") != "Bundle":
        raise UnreadableFileError(f"{name}: not a FHIR Bundle")
    return name, data


def _concept_text(concept: Any) -> str:
    if not isinstance(concept, dict):
        return ""
    if concept.get("text"):
        return str(concept["text"])
    for coding in concept.get("coding") or []:
        if coding.get("display"):
            return str(coding["display"])
    return ""


def _codes(concept: Any) -> list[str]:
    if not isinstance(concept, dict):
        return []
    return [f"{c.get('system', '')}|{c['code']}" for c in concept.get("coding") or [] if c.get("code")]


def _first_code(concept: Any) -> str:
    codes = _codes(concept)
    return codes[0].rsplit("|", 1)[-1] if codes else ""


def _ref_id(reference: Any) -> str | None:
    if not isinstance(reference, dict) or not isinstance(reference.get("reference"), str):
        return None
    ref = reference["reference"]
    return ref.removeprefix("urn:uuid:").rsplit("/", 1)[-1]


def _period(resource: dict[str, Any], key: str) -> tuple[RecordInstant | None, RecordInstant | None]:
    period = resource.get(key) or {}
    return parse_instant(period.get("start")), parse_instant(period.get("end"))


class _BundleContext:
    """What resources need from the rest of the bundle: the patient and display names of referenced resources."""

    def __init__(self, name: str, patient: dict[str, Any], resources: list[dict[str, Any]]) -> None:
        self.name = name
        self.patient_id = str(patient["id"])
        self.birth = parse_instant(patient.get("birthDate"))
        self.by_id = {str(r.get("id")): r for r in resources if r.get("id")}

    def _reason_texts(self, resource: dict[str, Any]) -> list[str]:
        reasons = [_concept_text(c) for c in resource.get("reasonCode") or []]
        for ref in resource.get("reasonReference") or []:
            target = self.by_id.get(_ref_id(ref) or "")
            reasons.append(_concept_text(target.get("code")) if target else str(ref.get("display") or ""))
        return [r for r in reasons if r]

    def _base(self, resource: dict[str, Any], record_type: str, title: str, summary: str,
              start: RecordInstant | None, end: RecordInstant | None = None,
              codes: list[str] | None = None) -> ClinicalRecord:
        kind = resource["resourceType"]
        encounter = _ref_id(resource.get("encounter")) if kind != "Encounter" else str(resource.get("id"))
        return ClinicalRecord(
            source_system=SOURCE_SYSTEM,
            source_key=f"{kind}/{resource.get('id')}",
            patient_id=self.patient_id,
            record_type=record_type,
            title=title,
            summary=summary,
            start=start,
            end=end,
            source=f"{self.name}#{kind}/{resource.get('id')}",
            resource_type=kind,
            codes=codes or [],
            encounter_id=encounter,
            extra_meta={"status": resource.get("status")},
        )

    def record(self, resource: dict[str, Any]) -> ClinicalRecord | None:
        kind = resource["resourceType"]
        if kind not in KEPT_RESOURCE_TYPES or not resource.get("id"):
            return None
        return getattr(self, f"_{kind.lower()}")(resource)

    def _observation(self, r: dict[str, Any]) -> ClinicalRecord:
        category = next((c.get("code") for cat in r.get("category") or [] for c in cat.get("coding") or []), None)
        title = _concept_text(r.get("code")) or "Observation"
        start = parse_instant(r.get("effectiveDateTime")) or _period(r, "effectivePeriod")[0]
        observation = self._observation_value(r, _first_code(r.get("code")), start)
        if observation is not None:
            summary = f"{title}: {observation.describe()}"
        else:
            parts = [
                f"{_concept_text(c.get('code'))}: {self._plain_value(c)}" for c in r.get("component") or []
            ]
            summary = f"{title}: {'; '.join(parts)}" if parts else title
        record = self._base(r, observation_record_type(category), title, summary, start,
                            codes=_codes(r.get("code")))
        record.observation = observation
        record.extra_meta["category"] = category
        abnormal_parts = [self._observation_value(c, _first_code(c.get("code")), start)
                          for c in r.get("component") or []]
        flagged = [p for p in abnormal_parts if p is not None and p.abnormal is not None]
        if observation is None and flagged:
            record.extra_meta["abnormal"] = any(p.abnormal for p in flagged)
        return record

    @staticmethod
    def _plain_value(r: dict[str, Any]) -> str:
        quantity = r.get("valueQuantity")
        if isinstance(quantity, dict) and isinstance(quantity.get("value"), int | float):
            return f"{round(float(quantity['value']), 2):g} {quantity.get('unit') or ''}".strip()
        return _concept_text(r.get("valueCodeableConcept")) or str(r.get("valueString") or "")

    def _observation_value(self, r: dict[str, Any], code: str, start: RecordInstant | None) -> ObservationValue | None:
        interpretation = _first_code((r.get("interpretation") or [None])[0]) or None
        reference = _record_range(r)
        quantity = r.get("valueQuantity")
        if isinstance(quantity, dict) and isinstance(quantity.get("value"), int | float):
            return numeric_observation(code, quantity["value"], quantity.get("unit") or quantity.get("code"),
                                       age_in_years(self.birth, start), reference, interpretation)
        text = _concept_text(r.get("valueCodeableConcept")) or r.get("valueString")
        if text:
            return ObservationValue(str(text), interpretation=interpretation)
        return None

    def _condition(self, r: dict[str, Any]) -> ClinicalRecord:
        title = _concept_text(r.get("code")) or "Condition"
        start = parse_instant(r.get("onsetDateTime")) or parse_instant(r.get("recordedDate"))
        end = parse_instant(r.get("abatementDateTime"))
        status = _first_code(r.get("clinicalStatus"))
        summary = f"{title}" + (f"; clinical status {status}" if status else "") + (
            f"; resolved {end.iso}" if end else "")
        record = self._base(r, "condition", title, summary, start, end, _codes(r.get("code")))
        record.extra_meta["status"] = status or None
        return record

    def _medicationrequest(self, r: dict[str, Any]) -> ClinicalRecord:
        title = _concept_text(r.get("medicationCodeableConcept")) or "Medication"
        reasons = self._reason_texts(r)
        dosage = "; ".join(str(d.get("text")) for d in r.get("dosageInstruction") or [] if d.get("text"))
        summary = f"{title} prescribed (status {r.get('status', 'unknown')})"
        summary += f" for {', '.join(reasons)}" if reasons else ""
        summary += f"; dosage {dosage}" if dosage else ""
        record = self._base(r, "medication", title, summary, parse_instant(r.get("authoredOn")),
                            codes=_codes(r.get("medicationCodeableConcept")))
        record.extra_meta["reasons"] = reasons
        return record

    def _encounter(self, r: dict[str, Any]) -> ClinicalRecord:
        title = next((_concept_text(t) for t in r.get("type") or [] if _concept_text(t)), "Encounter")
        encounter_class = (r.get("class") or {}).get("code")
        reasons = self._reason_texts(r)
        provider = self.by_id.get(_ref_id(r.get("serviceProvider")) or "", {}).get("name")
        start, end = _period(r, "period")
        summary = f"{title} ({encounter_class or 'unknown class'} visit)"
        summary += f"; reason: {', '.join(reasons)}" if reasons else "; no reason recorded"
        summary += f"; at {provider}" if provider else ""
        codes = [c for t in r.get("type") or [] for c in _codes(t)]
        record = self._base(r, "encounter", title, summary, start, end, codes)
        record.extra_meta.update(encounter_class=encounter_class, reasons=reasons, provider=provider)
        return record

    def _procedure(self, r: dict[str, Any]) -> ClinicalRecord:
        title = _concept_text(r.get("code")) or "Procedure"
        start, end = _period(r, "performedPeriod")
        start = start or parse_instant(r.get("performedDateTime"))
        reasons = self._reason_texts(r)
        summary = title + (f"; reason: {', '.join(reasons)}" if reasons else "")
        record = self._base(r, "procedure", title, summary, start, end, _codes(r.get("code")))
        record.extra_meta["reasons"] = reasons
        return record

    def _immunization(self, r: dict[str, Any]) -> ClinicalRecord:
        title = _concept_text(r.get("vaccineCode")) or "Immunization"
        return self._base(r, "immunization", title, f"{title} vaccine administered",
                          parse_instant(r.get("occurrenceDateTime")), codes=_codes(r.get("vaccineCode")))

    def _allergyintolerance(self, r: dict[str, Any]) -> ClinicalRecord:
        title = _concept_text(r.get("code")) or "Allergy"
        start = parse_instant(r.get("onsetDateTime")) or parse_instant(r.get("recordedDate"))
        reactions = [_concept_text(m) for reaction in r.get("reaction") or []
                     for m in reaction.get("manifestation") or []]
        summary = f"Allergy to {title}" + (f"; reactions: {', '.join(filter(None, reactions))}" if reactions else "")
        return self._base(r, "allergy", title, summary, start, codes=_codes(r.get("code")))

    def _careplan(self, r: dict[str, Any]) -> ClinicalRecord:
        categories = [_concept_text(c) for c in r.get("category") or []]
        title = next((c for c in categories if c), "Care plan")
        activities = [_concept_text((a.get("detail") or {}).get("code")) for a in r.get("activity") or []]
        addresses = [_concept_text(self.by_id.get(_ref_id(a) or "", {}).get("code")) for a in r.get("addresses") or []]
        start, end = _period(r, "period")
        summary = title
        summary += f"; activities: {', '.join(sorted(set(filter(None, activities))))}" if any(activities) else ""
        summary += f"; addresses: {', '.join(filter(None, addresses))}" if any(addresses) else ""
        codes = [c for cat in r.get("category") or [] for c in _codes(cat)]
        return self._base(r, "care_plan", title, summary, start, end, codes)


def _record_range(r: dict[str, Any]) -> ReferenceRange | None:
    for candidate in r.get("referenceRange") or []:
        low = (candidate.get("low") or {}).get("value")
        high = (candidate.get("high") or {}).get("value")
        unit = (candidate.get("low") or candidate.get("high") or {}).get("unit") or ""
        if isinstance(low, int | float) or isinstance(high, int | float):
            return ReferenceRange(low, high, unit)
    return None
