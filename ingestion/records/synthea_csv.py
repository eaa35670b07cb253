"""Synthea CSV export (a directory of `patients.csv`, `encounters.csv`, ...) -> one Document per record.

Kept tables: encounters, conditions, medications, observations, procedures, immunizations, allergies,
careplans. Billing, payer, supply and directory tables are not clinical records. Observation rows for
Synthea's simulation metrics (QALY, DALY, QOLS) are skipped: they are not measurements of the patient.

Rows without an `Id` column get a key from their own fields plus an occurrence counter, so identical rows stay
distinct and re-parsing the same export yields the same ids.

Usage:
    documents = parse_synthea_csv_dir(Path("synthea_csv"), tenant="acme", access=["group:clinicians"])
"""

from __future__ import annotations

import csv
import hashlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from haystack import Document

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

SOURCE_SYSTEM = "synthea_csv"
SIMULATION_METRIC_CODES = frozenset({"QALY", "DALY", "QOLS"})
CLINICAL_TABLES = (
    "encounters", "conditions", "medications", "observations", "procedures", "immunizations", "allergies",
    "careplans",
)

Row = dict[str, str]


def parse_synthea_csv_dir(directory: Path | str, *, tenant: str = "default",
                          access: Sequence[str] = ("everyone",),
                          patient_ids: set[str] | None = None) -> list[Document]:
    """Parse the clinical tables of a Synthea CSV export into record Documents.

    :param directory: Folder holding the export's CSV files (`patients.csv` is required).
    :param tenant: Tenant stored on every record.
    :param access: Principals allowed to read the records.
    :param patient_ids: Only these patients (all when None).
    :returns: Documents of every kept table present, table by table in file order.
    :raises UnreadableFileError: When `patients.csv` is missing or a table lacks its key columns.
    """
    directory = Path(directory)
    patients_file = directory / "patients.csv"
    if not patients_file.is_file():
        raise UnreadableFileError(f"{directory}: no patients.csv; not a Synthea CSV export")
    patient_rows = list(_rows(patients_file))
    births = {row["Id"]: parse_instant(row.get("BIRTHDATE")) for row in patient_rows}
    names = {row["Id"]: patient_name_meta(row.get("FIRST"), row.get("LAST")) for row in patient_rows}
    organizations = {}
    if (directory / "organizations.csv").is_file():
        organizations = {row["Id"]: row.get("NAME", "") for row in _rows(directory / "organizations.csv")}
    parser = _TableParser(births, organizations)
    documents: list[Document] = []
    for table in CLINICAL_TABLES:
        path = directory / f"{table}.csv"
        if not path.is_file():
            continue
        seen: Counter[str] = Counter()
        for row in _rows(path):
            patient = row.get("PATIENT", "")
            if not patient or (patient_ids is not None and patient not in patient_ids):
                continue
            record = parser.parse(table, row, path.name, seen)
            if record is not None:
                document = to_document(record, tenant, access)
                document.meta.update(names.get(patient, {}))
                documents.append(document)
    return documents


def _rows(path: Path) -> Iterator[Row]:
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            yield from csv.DictReader(handle)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UnreadableFileError(f"{path.name}: unreadable CSV ({type(exc).__name__}: {exc})") from exc


def _row_key(table: str, row: Row, seen: Counter[str]) -> str:
    if row.get("Id"):
        return f"{table}/{row['Id']}"
    digest = hashlib.sha256("\x1f".join(f"{k}={v}" for k, v in sorted(row.items())).encode()).hexdigest()[:24]
    seen[digest] += 1
    return f"{table}/{digest}/{seen[digest]}"


def _spaces(text: str | None) -> str:
    # The export replaces commas inside descriptions with double spaces.
    return " ".join((text or "").split())


class _TableParser:
    def __init__(self, births: dict[str, RecordInstant | None], organizations: dict[str, str]) -> None:
        self.births = births
        self.organizations = organizations
        # Per table: the record type, the title of a row without a description, and its summary sentence (from
        # the row, its title and its end); title, dates and keys are read the same way for every table.
        self._kinds: dict[str, tuple[str, str, Callable[[Row, str, RecordInstant | None], str]]] = {
            "encounters": ("encounter", "Encounter", self._encounter),
            "conditions": ("condition", "Condition", self._condition),
            "medications": ("medication", "Medication", self._medication),
            "procedures": ("procedure", "Procedure", self._procedure),
            "immunizations": ("immunization", "Immunization", self._immunization),
            "allergies": ("allergy", "Allergy", self._allergy),
            "careplans": ("care_plan", "Care plan", self._careplan),
        }

    def parse(self, table: str, row: Row, file_name: str, seen: Counter[str]) -> ClinicalRecord | None:
        if table == "observations":
            return self._observation(row, file_name, seen)
        record_type, untitled, summary = self._kinds[table]
        title = _spaces(row.get("DESCRIPTION")) or untitled
        if table == "immunizations":  # given on one date
            start, end = parse_instant(row.get("DATE")), None
        else:
            start, end = parse_instant(row.get("START")), parse_instant(row.get("STOP"))
        return self._record(table, row, file_name, seen, record_type, title, summary(row, title, end), start, end)

    def _record(self, table: str, row: Row, file_name: str, seen: Counter[str], record_type: str, title: str,
                summary: str, start: RecordInstant | None, end: RecordInstant | None) -> ClinicalRecord:
        key = _row_key(table, row, seen)
        code = row.get("CODE", "")
        system = row.get("SYSTEM", "") or _DEFAULT_SYSTEMS.get(table, "")
        encounter = row.get("ENCOUNTER") or (row.get("Id") if table == "encounters" else None)
        return ClinicalRecord(
            source_system=SOURCE_SYSTEM,
            source_key=key,
            patient_id=row["PATIENT"],
            record_type=record_type,
            title=title,
            summary=summary,
            start=start,
            end=end,
            source=f"{file_name}#{key.split('/', 1)[1]}",
            resource_type=table,
            codes=[f"{system}|{code}"] if code else [],
            encounter_id=encounter or None,
        )

    def _observation(self, row: Row, file_name: str, seen: Counter[str]) -> ClinicalRecord | None:
        code = row.get("CODE", "")
        if code in SIMULATION_METRIC_CODES:
            return None
        title = _spaces(row.get("DESCRIPTION")) or "Observation"
        start = parse_instant(row.get("DATE"))
        unit = row.get("UNITS") or None
        raw = row.get("VALUE", "")
        observation: ObservationValue | None = None
        if row.get("TYPE") == "numeric":
            try:
                observation = numeric_observation(code, float(raw), unit,
                                                  age_in_years(self.births.get(row["PATIENT"]), start))
            except ValueError:
                observation = None
        if observation is None and raw:
            observation = ObservationValue(_spaces(raw), unit=unit if unit not in ("null",) else None)
        summary = f"{title}: {observation.describe()}" if observation else title
        record = self._record("observations", row, file_name, seen, observation_record_type(row.get("CATEGORY")),
                              title, summary, start, None)
        record.observation = observation
        record.extra_meta["category"] = row.get("CATEGORY") or None
        return record

    def _encounter(self, row: Row, title: str, end: RecordInstant | None) -> str:
        reason = _spaces(row.get("REASONDESCRIPTION"))
        place = self.organizations.get(row.get("ORGANIZATION", ""), "")
        summary = f"{title} ({row.get('ENCOUNTERCLASS') or 'unknown class'} visit)"
        summary += f"; reason: {reason}" if reason else "; no reason recorded"
        return summary + (f"; at {place}" if place else "")

    def _condition(self, row: Row, title: str, end: RecordInstant | None) -> str:
        return title + (f"; resolved {end.iso}" if end else "; active")

    def _medication(self, row: Row, title: str, end: RecordInstant | None) -> str:
        reason = _spaces(row.get("REASONDESCRIPTION"))
        summary = f"{title} prescribed" + (f" for {reason}" if reason else "")
        return summary + (f"; stopped {end.iso}" if end else "; ongoing")

    def _procedure(self, row: Row, title: str, end: RecordInstant | None) -> str:
        reason = _spaces(row.get("REASONDESCRIPTION"))
        return title + (f"; reason: {reason}" if reason else "")

    def _immunization(self, row: Row, title: str, end: RecordInstant | None) -> str:
        return f"{title} vaccine administered"

    def _allergy(self, row: Row, title: str, end: RecordInstant | None) -> str:
        reactions = [_spaces(row.get(f"DESCRIPTION{i}")) for i in (1, 2) if row.get(f"DESCRIPTION{i}")]
        summary = f"Allergy to {title} ({row.get('CATEGORY') or 'unspecified'})"
        return summary + (f"; reactions: {', '.join(reactions)}" if reactions else "")

    def _careplan(self, row: Row, title: str, end: RecordInstant | None) -> str:
        reason = _spaces(row.get("REASONDESCRIPTION"))
        return title + (f"; addresses: {reason}" if reason else "")


_DEFAULT_SYSTEMS = {
    "encounters": "http://snomed.info/sct",
    "conditions": "http://snomed.info/sct",
    "procedures": "http://snomed.info/sct",
    "careplans": "http://snomed.info/sct",
    "medications": "http://www.nlm.nih.gov/research/umls/rxnorm",
    "immunizations": "http://hl7.org/fhir/sid/cvx",
    "observations": "http://loinc.org",
}
