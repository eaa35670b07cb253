"""Precision and recall of the retrieved record set for 10 time-scoped questions over the shared Synthea
patients, for `atrag` and `standard`. Gold sets are computed here from the source files (FHIR JSON, CSV rows)
with their own date, category and encounter fields, independently of the parsers; a record is identified by
(patient, record type, UTC instant, code, encounter), compared as multisets.

Every record (FHIR bundles and CSV export) is parsed, embedded and written to a fresh embedded store; a topic
model is fitted for the tenant (supervised by record type) and the records re-tagged. Each question names an
`as_of` instant (the day after the patient's last encounter) and its patient:
- `atrag` gets `as_of` and `patient_id` and resolves the window itself;
- `standard` gets the question alone (`std`), and again with the patient as a caller filter (`std+patient`).
The answering model is a constant "Yes" unless --llm is given (then the configured endpoint): retrieval
figures do not depend on it when the first answer is accepted. Prints figures; asserts nothing.

    nice python bench/time_scoped_eval.py [--llm]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import csv
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dateutil.relativedelta import relativedelta
from haystack.dataclasses import ChatMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from docqa.access import AccessScope
from docqa.ingestion.records import parse_fhir_bundle, parse_synthea_csv_dir
from docqa.ingestion.records.reference_ranges import adult_range
from docqa.pipelines.registry import build_pipeline
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.topics import refit_topic_model
from docqa_eval.datasets import shared_data_dir

TENANT = "eval"
Key = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class SourceRecord:
    patient: str
    record_type: str
    when: datetime
    code: str
    encounter: str
    abnormal: bool | None = None

    @property
    def key(self) -> Key:
        return (self.patient, self.record_type, self.when.strftime("%Y-%m-%dT%H:%M:%SZ"), self.code, self.encounter)


def _instant(text: str | None) -> datetime | None:
    if not text:
        return None
    moment = datetime.fromisoformat(text) if len(text) > 10 else datetime.fromisoformat(text + "T00:00:00")
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def _abnormal(code: str, value: Any, unit: str | None, birth: datetime | None, when: datetime) -> bool | None:
    reference = adult_range(code, unit)
    if reference is None or birth is None or (when - birth).days / 365.25 < 18:
        return None
    try:
        return reference.interpret(round(float(value), 2)) != "N"
    except (TypeError, ValueError):
        return None


_FHIR_TYPES = {"Condition": "condition", "MedicationRequest": "medication", "Encounter": "encounter",
               "Procedure": "procedure", "Immunization": "immunization", "AllergyIntolerance": "allergy",
               "CarePlan": "care_plan"}
_CATEGORIES = {"laboratory": "lab_result", "vital-signs": "vital_sign", "vital-sign": "vital_sign",
               "survey": "survey", "social-history": "social_history", "exam": "exam"}


def fhir_source_records(path: Path) -> list[SourceRecord]:
    resources = [e["resource"] for e in json.loads(path.read_text())["entry"]]
    patient = next(r for r in resources if r["resourceType"] == "Patient")
    birth = _instant(patient.get("birthDate"))
    out = []
    for r in resources:
        kind = r["resourceType"]
        if kind == "Observation":
            category = r["category"][0]["coding"][0]["code"]
            record_type = _CATEGORIES.get(category, "observation")
        elif kind in _FHIR_TYPES:
            record_type = _FHIR_TYPES[kind]
        else:
            continue
        concept = {"MedicationRequest": r.get("medicationCodeableConcept"), "Immunization": r.get("vaccineCode"),
                   "Encounter": (r.get("type") or [{}])[0], "CarePlan": (r.get("category") or [{}])[0]}.get(
            kind, r.get("code"))
        code = ((concept or {}).get("coding") or [{}])[0].get("code", "")
        when = _instant(r.get("effectiveDateTime") or r.get("onsetDateTime") or r.get("authoredOn")
                        or r.get("occurrenceDateTime") or (r.get("period") or {}).get("start")
                        or (r.get("performedPeriod") or {}).get("start"))
        encounter = r["id"] if kind == "Encounter" else (r.get("encounter") or {}).get("reference", "")
        abnormal = None
        if kind == "Observation" and "valueQuantity" in r:
            q = r["valueQuantity"]
            abnormal = _abnormal(code, q.get("value"), q.get("unit"), birth, when)
        out.append(SourceRecord(patient["id"], record_type, when, code, encounter.removeprefix("urn:uuid:"),
                                abnormal))
    return out


_CSV_TABLES = {"encounters": ("encounter", "START"), "conditions": ("condition", "START"),
               "medications": ("medication", "START"), "procedures": ("procedure", "START"),
               "immunizations": ("immunization", "DATE"), "allergies": ("allergy", "START"),
               "careplans": ("care_plan", "START"), "observations": (None, "DATE")}


def csv_source_records(directory: Path) -> list[SourceRecord]:
    with (directory / "patients.csv").open(newline="") as handle:
        births = {row["Id"]: _instant(row["BIRTHDATE"]) for row in csv.DictReader(handle)}
    out = []
    for table, (record_type, date_column) in _CSV_TABLES.items():
        with (directory / f"{table}.csv").open(newline="") as handle:
            for row in csv.DictReader(handle):
                if table == "observations" and row["CODE"] in ("QALY", "DALY", "QOLS"):
                    continue
                when = _instant(row[date_column])
                kind = record_type or _CATEGORIES.get(row["CATEGORY"], "observation")
                encounter = row["Id"] if table == "encounters" else row.get("ENCOUNTER", "")
                abnormal = None
                if table == "observations" and row["TYPE"] == "numeric":
                    abnormal = _abnormal(row["CODE"], row["VALUE"], row["UNITS"] or None, births.get(row["PATIENT"]),
                                         when)
                out.append(SourceRecord(row["PATIENT"], kind, when, row["CODE"], encounter, abnormal))
    return out


@dataclass(frozen=True)
class Question:
    text: str
    source: str  # "fhir" or "csv"
    gold: Callable[[list[SourceRecord], datetime], list[SourceRecord]]


def _window(records: list[SourceRecord], as_of: datetime, delta: relativedelta, record_type: str,
            abnormal: bool = False) -> list[SourceRecord]:
    return [r for r in records if r.record_type == record_type and as_of - delta <= r.when <= as_of
            and (not abnormal or r.abnormal)]


def _since(records: list[SourceRecord], as_of: datetime, year: int, record_type: str) -> list[SourceRecord]:
    start = datetime(year, 1, 1, tzinfo=UTC)
    return [r for r in records if r.record_type == record_type and start <= r.when <= as_of]


def _last_visit(records: list[SourceRecord], as_of: datetime) -> list[SourceRecord]:
    encounters = [r for r in records if r.record_type == "encounter" and r.when <= as_of]
    if not encounters:
        return []
    last = max(encounters, key=lambda r: r.when)
    return [r for r in records if r.encounter == last.encounter]


QUESTIONS = [
    Question("What are the abnormal lab results of the patient within the last year?", "fhir",
             lambda rs, t: _window(rs, t, relativedelta(years=1), "lab_result", abnormal=True)),
    Question("When was the last doctor visit and what was the reason behind it?", "fhir", _last_visit),
    Question("Which medications were prescribed in the last two years?", "fhir",
             lambda rs, t: _window(rs, t, relativedelta(years=2), "medication")),
    Question("What conditions has the patient been diagnosed with since 2010?", "fhir",
             lambda rs, t: _since(rs, t, 2010, "condition")),
    Question("Which immunizations did the patient receive in the last 5 years?", "fhir",
             lambda rs, t: _window(rs, t, relativedelta(years=5), "immunization")),
    Question("What procedures were performed in the last 3 years?", "fhir",
             lambda rs, t: _window(rs, t, relativedelta(years=3), "procedure")),
    Question("What vital signs were recorded in the last 6 months?", "fhir",
             lambda rs, t: _window(rs, t, relativedelta(months=6), "vital_sign")),
    Question("What are the abnormal lab results within the last two years?", "csv",
             lambda rs, t: _window(rs, t, relativedelta(years=2), "lab_result", abnormal=True)),
    Question("Which medications were prescribed in the last year?", "csv",
             lambda rs, t: _window(rs, t, relativedelta(years=1), "medication")),
    Question("When was the last visit and why?", "csv", _last_visit),
]


class ConstantChatGenerator:
    """Answers "Yes" to everything: the first answer is accepted, so retrieval happens once."""

    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"replies": [ChatMessage.from_assistant("Yes", meta={"model": "constant", "usage": {}})]}


def _pr(retrieved: Counter[Key], gold: Counter[Key]) -> tuple[float, float]:
    hit = sum((retrieved & gold).values())
    precision = hit / sum(retrieved.values()) if retrieved else 0.0
    recall = hit / sum(gold.values()) if gold else 0.0
    return precision, recall


def _retrieved_ids(result: Any) -> list[str]:
    retrievals = [s for s in result.steps if s.kind == "retrieval"]
    return [d["id"] for d in retrievals[-1].outputs["documents"]]


def main() -> None:
    records_dir = shared_data_dir() / "records"
    if not records_dir.is_dir():
        sys.exit(f"shared Synthea data not found at {records_dir}; nothing to measure")
    import torch

    torch.set_num_threads(1)
    use_llm = "--llm" in sys.argv
    sources = {"fhir": [], "csv": csv_source_records(records_dir / "synthea_csv")}
    documents = parse_synthea_csv_dir(records_dir / "synthea_csv", tenant=TENANT, access=["clinicians"])
    for path in sorted((records_dir / "synthea_fhir_r4").glob("*.json")):
        sources["fhir"].extend(fhir_source_records(path))
        documents.extend(parse_fhir_bundle(path, tenant=TENANT, access=["clinicians"]))
    keys = {d.id: (d.meta["patient_id"], d.meta["record_type"], d.meta.get("effective_start_utc", ""),
                   d.meta.get("code", ""), d.meta.get("encounter_id", "")) for d in documents}
    with tempfile.TemporaryDirectory() as workdir:
        settings = Settings(data_dir=Path(workdir))
        factory = None if use_llm else (lambda role: ConstantChatGenerator())
        runtime = Runtime(settings, chat_generator_factory=factory)
        embedder = runtime.document_embedder()
        embedder.warm_up()
        runtime.document_store.write_documents(embedder.run(documents=documents)["documents"])
        info = refit_topic_model(runtime, TENANT)
        print(f"{len(documents)} records embedded; topic model v{info.version} {info.mode}, {info.n_topics} topics")
        atrag = build_pipeline("atrag", runtime, max_iterations=1 if not use_llm else 3)
        standard = build_pipeline("standard", runtime)
        scope = AccessScope(tenant=TENANT, principals=frozenset({"clinicians"}))
        used: set[str] = set()
        print(f"{'#':>2} {'src':<4} {'gold':>4} | {'atrag P/R':>11} {'topic mode':<26} | {'std P/R':>11} | "
              f"{'std+patient P/R':>15} | question")
        totals = {"atrag": [0.0, 0.0], "std": [0.0, 0.0], "std+patient": [0.0, 0.0]}
        for number, question in enumerate(QUESTIONS, 1):
            records = sources[question.source]
            patients = sorted({r.patient for r in records})
            chosen = None
            for patient in sorted(patients, key=lambda p: (p in used, p)):
                mine = [r for r in records if r.patient == patient]
                encounters = [r.when for r in mine if r.record_type == "encounter"]
                if not encounters:
                    continue
                as_of = (max(encounters) + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
                gold = question.gold(mine, as_of)
                if len(gold) >= 2:
                    chosen = (patient, as_of, gold)
                    break
            if chosen is None:
                print(f"{number:>2} no patient has records for: {question.text}")
                continue
            patient, as_of, gold = chosen
            used.add(patient)
            gold_keys = Counter(r.key for r in gold)
            as_of_text = as_of.strftime("%Y-%m-%dT%H:%M:%SZ")
            result = atrag.run(question.text, scope, as_of=as_of_text, patient_id=patient)
            mode = next(s for s in result.steps if s.kind == "retrieval").outputs["topic"]["mode"]
            patient_filter = {"field": "meta.patient_id", "operator": "==", "value": patient}
            rows = {
                "atrag": _retrieved_ids(result),
                "std": _retrieved_ids(standard.run(question.text, scope)),
                "std+patient": _retrieved_ids(standard.run(question.text, scope, filters=patient_filter)),
            }
            cells = []
            for name, ids in rows.items():
                precision, recall = _pr(Counter(keys[i] for i in ids), gold_keys)
                totals[name][0] += precision
                totals[name][1] += recall
                cells.append(f"{precision:.2f}/{recall:.2f}")
            print(f"{number:>2} {question.source:<4} {len(gold):>4} | {cells[0]:>11} {mode:<26} | {cells[1]:>11} | "
                  f"{cells[2]:>15} | {question.text} (as_of {as_of_text[:10]}, patient {patient[:8]})", flush=True)
        n = len(QUESTIONS)
        print("macro average P/R: " + ", ".join(f"{name} {p / n:.2f}/{r / n:.2f}" for name, (p, r) in totals.items()))


if __name__ == "__main__":
    main()
