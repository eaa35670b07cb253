"""FHIR R4 bundles (as Synthea writes them) -> one Document per clinically meaningful resource.

Kept: Observation (labs, vitals, surveys ...; value, unit, reference range and interpretation when present),
Condition, MedicationRequest, Encounter (with its reason), Procedure, Immunization, AllergyIntolerance,
CarePlan. Skipped: billing (Claim, ExplanationOfBenefit), directory entries (Organization, Practitioner),
Goal, and DiagnosticReport, whose content is the set of Observations already kept one by one.

An uploaded bundle (`POST /v1/records`, a `.json` item of a job) is parsed in the conversion box
(`read_fhir_bundle_boxed`): a bundle near the 64 MB upload limit took the parsing process about 380 MB above its
size, so its parse runs in a child within the DOCQA_CONVERT_* memory and time limits and the worker holds only the
records handed back.

Usage:
    documents = parse_fhir_bundle(Path("Max_Kris.json"), tenant="acme", access=["group:clinicians"])
    documents = read_fhir_bundle_boxed(raw, name="p1.json", tenant="acme", access=["group:care"], limits=limits)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from haystack import Document

from docqa.conversion.conversion_box import ConversionLimits, run_in_box
from docqa.errors import UnreadableFileError
from docqa.ingestion.records.clinical_record import (
    ClinicalRecord,
    ObservationValue,
    age_in_years,
    numeric_observation,
    observation_record_type,
    patient_name_meta,
    to_document,
)
from docqa.ingestion.records.dates import RecordInstant, parse_instant
from docqa.ingestion.records.reference_ranges import ReferenceRange

SOURCE_SYSTEM = "fhir"
KEPT_RESOURCE_TYPES = (
    "Observation",
    "Condition",
    "MedicationRequest",
    "Encounter",
    "Procedure",
    "Immunization",
    "AllergyIntolerance",
    "CarePlan",
)


def read_fhir_bundle(
    raw: bytes | str, *, name: str, tenant: str = "default", access: Sequence[str] = ("everyone",)
) -> list[Document]:
    """Decode an uploaded bundle and parse it: the one set of checks of the synchronous endpoint and of jobs.

    :param raw: The uploaded bytes.
    :param name: What the messages call the upload (its file name).
    :returns: One Document per kept resource, at least one, all of the bundle's one patient.
    :raises UnreadableFileError: When the upload is not JSON, is nested too deeply, is not a FHIR Bundle with
        exactly one Patient, has a field of the wrong type, or holds no records.
    """
    data = decode_json(raw, name)
    if not isinstance(data, dict):
        raise UnreadableFileError(f"{name}: not a FHIR Bundle")
    documents = parse_fhir_bundle(data, tenant=tenant, access=access, label=name)
    if not documents:
        raise UnreadableFileError(f"{name}: the bundle holds no records")
    return documents


def read_fhir_bundle_boxed(
    raw: bytes | str, *, name: str, tenant: str, access: Sequence[str], limits: ConversionLimits
) -> list[Document]:
    """`read_fhir_bundle` in a child process within `limits` (memory and wall time): the same records and the same
    errors, plus `FileTooLargeError` or `UnreadableFileError` when the parse crosses a limit."""
    return run_in_box(_read_in_box, raw, name, tenant, list(access), limits=limits, name=name)


def _read_in_box(raw: bytes | str, name: str, tenant: str, access: list[str]) -> list[Document]:
    return read_fhir_bundle(raw, name=name, tenant=tenant, access=access)


def decode_json(raw: bytes | str, name: str) -> Any:
    """The decoded JSON; UnreadableFileError for what is not JSON or is too deeply nested to decode."""
    try:
        return json.loads(raw, parse_constant=_reject_constant)
    except RecursionError:
        raise UnreadableFileError(f"{name}: not a FHIR Bundle: its JSON is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, NaN/Infinity, oversized integers
        raise UnreadableFileError(f"{name}: not JSON ({exc})") from exc


def _reject_constant(constant: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and no store or range filter handles them.
    raise ValueError(f"{constant} is not a JSON value")


def parse_fhir_bundle(
    bundle: Path | str | dict[str, Any],
    *,
    tenant: str = "default",
    access: Sequence[str] = ("everyone",),
    label: str | None = None,
) -> list[Document]:
    """Parse a FHIR R4 Bundle (a path or the decoded JSON) into record Documents.

    Every field the parser reads must have its FHIR JSON type (a null field counts as absent). A wrong one
    rejects the whole bundle, naming the resource and field, instead of skipping the resource: the bundle
    replaces the patient's stored records, so a skipped resource would silently delete the record it had before.

    :param bundle: Path of a bundle JSON file, or the bundle itself.
    :param tenant: Tenant stored on every record.
    :param access: Principals allowed to read the records.
    :param label: What error messages call the bundle (default: its file name, else its id, as in the records'
        `source`).
    :returns: One Document per kept resource, in bundle order.
    :raises UnreadableFileError: When the file is not a FHIR Bundle with exactly one Patient, or a field the
        parser reads has the wrong type.
    """
    name, data = _load(bundle)
    label = label or name
    if not isinstance(data, dict) or data.get("resourceType") != "Bundle":
        raise UnreadableFileError(f"{label}: not a FHIR Bundle")
    try:
        resources = _resources(_Json(data, "Bundle", ""))
        patients = [r for r in resources if r.kind == "Patient"]
        if len(patients) != 1:
            raise UnreadableFileError(f"{label}: expected one Patient in the bundle, found {len(patients)}")
        if not patients[0].id:
            raise UnreadableFileError(f"{label}: the bundle's Patient has no id")
        context = _BundleContext(name, patients[0], resources)
        documents: dict[str, Document] = {}
        for resource in resources:
            record = context.record(resource)
            if record is None:
                continue
            if record.source_key in documents:
                # Both would get one document id and the later would silently replace the earlier.
                raise UnreadableFileError(f"{label}: {record.source_key} appears more than once in the bundle")
            documents[record.source_key] = to_document(record, tenant, access)
        names = patients[0].objects("name")
        official = next((n for n in names if n.text("use") == "official"), names[0] if names else None)
        if official is not None:
            given = " ".join(str(g) for g in official.data.get("given") or [] if isinstance(g, str))
            for document in documents.values():
                document.meta.update(patient_name_meta(given, official.text("family")))
    except _WrongType as exc:
        raise UnreadableFileError(f"{label}: {exc}") from None
    return list(documents.values())


def _load(bundle: Path | str | dict[str, Any]) -> tuple[str, Any]:
    if isinstance(bundle, dict):
        data: Any = bundle
        bundle_id = bundle.get("id")
        name = bundle_id if isinstance(bundle_id, str) and bundle_id else "bundle"
    else:
        path = Path(bundle)
        name = path.name
        try:
            data = decode_json(path.read_bytes(), name)
        except OSError as exc:
            raise UnreadableFileError(f"{name}: not a readable JSON file ({type(exc).__name__})") from exc
    return name, data


def _resources(bundle: _Json) -> list[_Resource]:
    resources = []
    for index, entry in enumerate(bundle.objects("entry")):
        if "resource" in entry.data and entry.data["resource"] is None:
            # Not an absent resource but a broken one; skipping it would drop its record unnoticed.
            raise _WrongType(f"Bundle: entry[{index}].resource is null")
        # An entry without a resource (a transaction's DELETE request) is legitimate and holds no record.
        resource = entry.object("resource")
        if resource is None:
            continue
        kind = resource.text("resourceType")
        if not kind:
            raise _WrongType(f"Bundle: entry[{index}].resource has no resourceType")
        resources.append(_Resource(kind, resource.text("id") or "", resource.data))
    return resources


class _WrongType(Exception):
    """A field the parser reads has the wrong JSON type, or one it needs (an id, a resource type) is missing."""


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if value is None:
        return "null"
    return {str: "a string", list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


class _Json:
    """One JSON object of a bundle, read field by field with the types FHIR R4 gives the fields; a null field
    is an absent one.

    `where` names the resource (`Observation/abc`) and `path` the object inside it (`component[1].code`), so a
    wrong type is reported where an admin can find it.
    """

    __slots__ = ("data", "path", "where")

    def __init__(self, data: dict[str, Any], where: str, path: str) -> None:
        self.data, self.where, self.path = data, where, path

    def _field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _wrong(self, key: str, expected: str, value: Any) -> _WrongType:
        return _WrongType(f"{self.where}: {self._field(key)} must be {expected}, not {_json_type(value)}")

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._wrong(key, "a string", value)
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate escape (`\\ud800`): no store can write it
                raise _WrongType(f"{self.where}: {self._field(key)} is not valid Unicode text") from None
        return value

    def number(self, key: str) -> float | None:
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._wrong(key, "a number", value)
        try:
            number = float(value)
        except OverflowError:  # an integer beyond any float
            number = math.inf
        if not math.isfinite(number):
            raise _WrongType(f"{self.where}: {self._field(key)} must be a finite number")
        return number

    def object(self, key: str) -> _Json | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._wrong(key, "an object", value)
        return _Json(value, self.where, self._field(key))

    def objects(self, key: str) -> list[_Json]:
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._wrong(key, "a list", value)
        found = []
        for index, item in enumerate(value):
            # FHIR never has null items in a list of objects; skipping one could drop a bundle entry unnoticed.
            if not isinstance(item, dict):
                raise self._wrong(f"{key}[{index}]", "an object", item)
            found.append(_Json(item, self.where, self._field(f"{key}[{index}]")))
        return found


class _Resource(_Json):
    __slots__ = ("id", "kind")

    def __init__(self, kind: str, resource_id: str, data: dict[str, Any]) -> None:
        super().__init__(data, f"{kind}/{resource_id}" if resource_id else kind, "")
        self.kind, self.id = kind, resource_id


def _concept_text(concept: _Json | None) -> str:
    if concept is None:
        return ""
    text = concept.text("text")
    if text:
        return text
    for coding in concept.objects("coding"):
        display = coding.text("display")
        if display:
            return display
    return ""


def _codes(concept: _Json | None) -> list[str]:
    if concept is None:
        return []
    codes = []
    for coding in concept.objects("coding"):
        code = coding.text("code")
        if code:
            codes.append(f"{coding.text('system') or ''}|{code}")
    return codes


def _first_code(concept: _Json | None) -> str:
    codes = _codes(concept)
    return codes[0].rsplit("|", 1)[-1] if codes else ""


def _ref_id(reference: _Json | None) -> str | None:
    ref = reference.text("reference") if reference is not None else None
    if not ref:
        return None
    return ref.removeprefix("urn:uuid:").rsplit("/", 1)[-1]


def _period(resource: _Json, key: str) -> tuple[RecordInstant | None, RecordInstant | None]:
    period = resource.object(key)
    if period is None:
        return None, None
    return parse_instant(period.text("start")), parse_instant(period.text("end"))


class _BundleContext:
    """What resources need from the rest of the bundle: the patient and display names of referenced resources."""

    def __init__(self, name: str, patient: _Resource, resources: list[_Resource]) -> None:
        self.name = name
        self.patient_id = patient.id
        self.birth = parse_instant(patient.text("birthDate"))
        self.by_id = {r.id: r for r in resources if r.id}

    def _reason_texts(self, resource: _Json) -> list[str]:
        reasons = [_concept_text(c) for c in resource.objects("reasonCode")]
        for ref in resource.objects("reasonReference"):
            target = self.by_id.get(_ref_id(ref) or "")
            reasons.append(_concept_text(target.object("code")) if target else ref.text("display") or "")
        return [r for r in reasons if r]

    def _base(
        self,
        resource: _Resource,
        record_type: str,
        title: str,
        summary: str,
        start: RecordInstant | None,
        end: RecordInstant | None = None,
        codes: list[str] | None = None,
    ) -> ClinicalRecord:
        kind = resource.kind
        encounter = _ref_id(resource.object("encounter")) if kind != "Encounter" else resource.id
        return ClinicalRecord(
            source_system=SOURCE_SYSTEM,
            source_key=f"{kind}/{resource.id}",
            patient_id=self.patient_id,
            record_type=record_type,
            title=title,
            summary=summary,
            start=start,
            end=end,
            source=f"{self.name}#{kind}/{resource.id}",
            resource_type=kind,
            codes=codes or [],
            encounter_id=encounter,
            extra_meta={"status": resource.text("status")},
        )

    def record(self, resource: _Resource) -> ClinicalRecord | None:
        if resource.kind not in KEPT_RESOURCE_TYPES:
            return None
        if not resource.id:
            # Without an id it has no stable document id: neither a re-upload nor a correction could replace it.
            raise _WrongType(f"{resource.where}: a resource without an id")
        method: Callable[[_Resource], ClinicalRecord] = getattr(self, f"_{resource.kind.lower()}")
        return method(resource)

    def _observation(self, r: _Resource) -> ClinicalRecord:
        category = next((c.text("code") for cat in r.objects("category") for c in cat.objects("coding")), None)
        title = _concept_text(r.object("code")) or "Observation"
        start = parse_instant(r.text("effectiveDateTime")) or _period(r, "effectivePeriod")[0]
        observation = self._observation_value(r, _first_code(r.object("code")), start)
        components = r.objects("component")
        if observation is not None:
            summary = f"{title}: {observation.describe()}"
        else:
            parts = [f"{_concept_text(c.object('code'))}: {self._plain_value(c)}" for c in components]
            summary = f"{title}: {'; '.join(parts)}" if parts else title
        record = self._base(r, observation_record_type(category), title, summary, start, codes=_codes(r.object("code")))
        record.observation = observation
        record.extra_meta["category"] = category
        abnormal_parts = [self._observation_value(c, _first_code(c.object("code")), start) for c in components]
        flagged = [p for p in abnormal_parts if p is not None and p.abnormal is not None]
        if observation is None and flagged:
            record.extra_meta["abnormal"] = any(p.abnormal for p in flagged)
        return record

    @staticmethod
    def _plain_value(r: _Json) -> str:
        quantity = r.object("valueQuantity")
        value = quantity.number("value") if quantity is not None else None
        if quantity is not None and value is not None:
            return f"{round(value, 2):g} {quantity.text('unit') or ''}".strip()
        return _concept_text(r.object("valueCodeableConcept")) or r.text("valueString") or ""

    def _observation_value(self, r: _Json, code: str, start: RecordInstant | None) -> ObservationValue | None:
        interpretations = r.objects("interpretation")
        interpretation = _first_code(interpretations[0] if interpretations else None) or None
        reference = _record_range(r)
        quantity = r.object("valueQuantity")
        value = quantity.number("value") if quantity is not None else None
        if quantity is not None and value is not None:
            return numeric_observation(
                code,
                value,
                quantity.text("unit") or quantity.text("code"),
                age_in_years(self.birth, start),
                reference,
                interpretation,
            )
        text = _concept_text(r.object("valueCodeableConcept")) or r.text("valueString")
        if text:
            return ObservationValue(text, interpretation=interpretation)
        return None

    def _condition(self, r: _Resource) -> ClinicalRecord:
        title = _concept_text(r.object("code")) or "Condition"
        start = parse_instant(r.text("onsetDateTime")) or parse_instant(r.text("recordedDate"))
        end = parse_instant(r.text("abatementDateTime"))
        status = _first_code(r.object("clinicalStatus"))
        summary = (
            f"{title}" + (f"; clinical status {status}" if status else "") + (f"; resolved {end.iso}" if end else "")
        )
        record = self._base(r, "condition", title, summary, start, end, _codes(r.object("code")))
        record.extra_meta["status"] = status or None
        return record

    def _medicationrequest(self, r: _Resource) -> ClinicalRecord:
        title = _concept_text(r.object("medicationCodeableConcept")) or "Medication"
        reasons = self._reason_texts(r)
        dosage = "; ".join(text for d in r.objects("dosageInstruction") if (text := d.text("text")))
        summary = f"{title} prescribed (status {r.text('status') or 'unknown'})"
        summary += f" for {', '.join(reasons)}" if reasons else ""
        summary += f"; dosage {dosage}" if dosage else ""
        record = self._base(
            r,
            "medication",
            title,
            summary,
            parse_instant(r.text("authoredOn")),
            codes=_codes(r.object("medicationCodeableConcept")),
        )
        record.extra_meta["reasons"] = reasons
        return record

    def _encounter(self, r: _Resource) -> ClinicalRecord:
        types = r.objects("type")
        title = next((text for t in types if (text := _concept_text(t))), "Encounter")
        encounter_class_coding = r.object("class")
        encounter_class = encounter_class_coding.text("code") if encounter_class_coding is not None else None
        reasons = self._reason_texts(r)
        provider_resource = self.by_id.get(_ref_id(r.object("serviceProvider")) or "")
        provider = provider_resource.text("name") if provider_resource is not None else None
        start, end = _period(r, "period")
        summary = f"{title} ({encounter_class or 'unknown class'} visit)"
        summary += f"; reason: {', '.join(reasons)}" if reasons else "; no reason recorded"
        summary += f"; at {provider}" if provider else ""
        codes = [c for t in types for c in _codes(t)]
        record = self._base(r, "encounter", title, summary, start, end, codes)
        record.extra_meta.update(encounter_class=encounter_class, reasons=reasons, provider=provider)
        return record

    def _procedure(self, r: _Resource) -> ClinicalRecord:
        title = _concept_text(r.object("code")) or "Procedure"
        start, end = _period(r, "performedPeriod")
        start = start or parse_instant(r.text("performedDateTime"))
        reasons = self._reason_texts(r)
        summary = title + (f"; reason: {', '.join(reasons)}" if reasons else "")
        record = self._base(r, "procedure", title, summary, start, end, _codes(r.object("code")))
        record.extra_meta["reasons"] = reasons
        return record

    def _immunization(self, r: _Resource) -> ClinicalRecord:
        title = _concept_text(r.object("vaccineCode")) or "Immunization"
        return self._base(
            r,
            "immunization",
            title,
            f"{title} vaccine administered",
            parse_instant(r.text("occurrenceDateTime")),
            codes=_codes(r.object("vaccineCode")),
        )

    def _allergyintolerance(self, r: _Resource) -> ClinicalRecord:
        title = _concept_text(r.object("code")) or "Allergy"
        start = parse_instant(r.text("onsetDateTime")) or parse_instant(r.text("recordedDate"))
        reactions = [_concept_text(m) for reaction in r.objects("reaction") for m in reaction.objects("manifestation")]
        summary = f"Allergy to {title}" + (f"; reactions: {', '.join(filter(None, reactions))}" if reactions else "")
        return self._base(r, "allergy", title, summary, start, codes=_codes(r.object("code")))

    def _careplan(self, r: _Resource) -> ClinicalRecord:
        categories = r.objects("category")
        title = next((text for c in categories if (text := _concept_text(c))), "Care plan")
        activities = []
        for activity in r.objects("activity"):
            detail = activity.object("detail")
            activities.append(_concept_text(detail.object("code")) if detail is not None else "")
        addresses = []
        for reference in r.objects("addresses"):
            target = self.by_id.get(_ref_id(reference) or "")
            addresses.append(_concept_text(target.object("code")) if target is not None else "")
        start, end = _period(r, "period")
        summary = title
        summary += f"; activities: {', '.join(sorted(set(filter(None, activities))))}" if any(activities) else ""
        summary += f"; addresses: {', '.join(filter(None, addresses))}" if any(addresses) else ""
        codes = [c for cat in categories for c in _codes(cat)]
        return self._base(r, "care_plan", title, summary, start, end, codes)


def _record_range(r: _Json) -> ReferenceRange | None:
    for candidate in r.objects("referenceRange"):
        low, high = candidate.object("low"), candidate.object("high")
        low_value = low.number("value") if low is not None else None
        high_value = high.number("value") if high is not None else None
        unit = (low.text("unit") if low is not None else None) or (high.text("unit") if high is not None else None)
        if low_value is not None or high_value is not None:
            return ReferenceRange(low_value, high_value, unit or "")
    return None
