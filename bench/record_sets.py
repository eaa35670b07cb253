"""Record-set precision and recall of AT-RAG's record answers on every shared Synthea patient, per question kind.

For each patient (9 FHIR bundles, 27 CSV patients) and each question kind, the gold set is computed here from
the source files (FHIR JSON resources, CSV rows) with their own dates, categories, codes, statuses and values,
and the packaged adult ranges for "abnormal" (only when the source carries no range or interpretation of its
own) -- independently of the parsers and of RecordQueryResolver. The question is then asked through the
`atrag` pipeline (with an `as_of` instant and the patient id) and the records
of the answer's record table are compared with the gold set as multisets of
(patient, record type, UTC instant, code, encounter). The answering model is a constant "Yes": the record table
does not depend on it. Two kinds name the patient instead of giving its id ("What were Max Kris's laboratory
results in the last year?"; the name read here from the source file, the gold set that of the id-based kind).
Each patient is asked twice: as of the day after the last encounter and as of the day
after the median encounter. Prints a table; asserts nothing.

With --baseline, every record is also embedded, a topic model fitted, and each question answered the way the
scoped path worked before record queries: the time window's filters (patient, dates, "abnormal"; read by the
current TimeScopeResolver, so with its newer date forms) then the topic filter over the window; its precision
and recall are printed beside ("before P/R").

    nice python bench/record_sets.py [--fhir-only | --csv-only] [--baseline] [-v]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import csv
import json
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dateutil.relativedelta import relativedelta
from haystack.dataclasses import ChatMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from docqa.access import AccessScope, restrict
from docqa.components.clinical_terms import observation_terms
from docqa.components.time_scope_resolver import scope_filters
from docqa.ingestion.records import parse_fhir_bundle, parse_synthea_csv_dir
from docqa.pipelines.registry import build_pipeline
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.topics import refit_topic_model
from docqa_eval.datasets import shared_data_dir

TENANT = "record-sets"
Key = tuple[str, str, str, str, str]
UTC_TEXT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass
class Source:
    """One clinical record as the source file states it."""

    patient: str
    record_type: str
    when: datetime | None
    code: str
    encounter: str
    name: str = ""
    end: datetime | None = None
    status: str = ""
    abnormal: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        when = self.when.strftime(UTC_TEXT) if self.when else ""
        return (self.patient, self.record_type, when, self.code, self.encounter)


def _instant(text: str | None) -> datetime | None:
    if not text:
        return None
    moment = datetime.fromisoformat(text) if len(text) > 10 else datetime.fromisoformat(text + "T00:00:00")
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def _packaged_flag(code: str, value: Any, unit: str | None, birth: datetime | None,
                   when: datetime | None) -> bool | None:
    """Abnormal by the packaged adult table (adults, same unit), compared here with the raw value."""
    term = observation_terms().get(code)
    if term is None or not term.has_range or (unit or "") not in term.units or birth is None or when is None:
        return None
    if (when - birth).days / 365.25 < 18:
        return None
    try:
        number = round(float(value), 2)
    except (TypeError, ValueError):
        return None
    return (term.low is not None and number < term.low) or (term.high is not None and number > term.high)


def _own_flag(resource: dict[str, Any]) -> bool | None:
    """Abnormal by the resource's own interpretation, else its own reference range."""
    for interpretation in resource.get("interpretation") or []:
        for coding in interpretation.get("coding") or []:
            if coding.get("code"):
                return coding["code"].upper() not in ("N", "NORMAL")
    value = (resource.get("valueQuantity") or {}).get("value")
    for reference in resource.get("referenceRange") or []:
        low, high = (reference.get("low") or {}).get("value"), (reference.get("high") or {}).get("value")
        if value is not None and (low is not None or high is not None):
            return (low is not None and value < low) or (high is not None and value > high)
    return None


_FHIR_TYPES = {"Condition": "condition", "MedicationRequest": "medication", "Encounter": "encounter",
               "Procedure": "procedure", "Immunization": "immunization", "AllergyIntolerance": "allergy",
               "CarePlan": "care_plan"}
_CATEGORIES = {"laboratory": "lab_result", "vital-signs": "vital_sign", "vital-sign": "vital_sign",
               "survey": "survey", "social-history": "social_history", "exam": "exam"}


def fhir_sources(path: Path) -> list[Source]:
    resources = [e["resource"] for e in json.loads(path.read_text())["entry"]]
    patient = next(r for r in resources if r["resourceType"] == "Patient")
    birth = _instant(patient.get("birthDate"))
    out = []
    for r in resources:
        kind = r["resourceType"]
        if kind == "Observation":
            record_type = _CATEGORIES.get(r["category"][0]["coding"][0]["code"], "observation")
        elif kind in _FHIR_TYPES:
            record_type = _FHIR_TYPES[kind]
        else:
            continue
        concept = {"MedicationRequest": r.get("medicationCodeableConcept"), "Immunization": r.get("vaccineCode"),
                   "Encounter": (r.get("type") or [{}])[0], "CarePlan": (r.get("category") or [{}])[0]}.get(
            kind, r.get("code")) or {}
        code = (concept.get("coding") or [{}])[0].get("code", "")
        name = concept.get("text") or (concept.get("coding") or [{}])[0].get("display", "")
        period = r.get("period") or r.get("performedPeriod") or {}
        when = _instant(r.get("effectiveDateTime") or r.get("onsetDateTime") or r.get("authoredOn")
                        or r.get("occurrenceDateTime") or period.get("start"))
        end = _instant(r.get("abatementDateTime") or period.get("end"))
        status = r.get("status") or ((r.get("clinicalStatus") or {}).get("coding") or [{}])[0].get("code", "")
        encounter = r["id"] if kind == "Encounter" else (r.get("encounter") or {}).get("reference", "")
        abnormal = None
        if kind == "Observation":
            abnormal = _own_flag(r)
            if abnormal is None and "valueQuantity" in r:
                quantity = r["valueQuantity"]
                abnormal = _packaged_flag(code, quantity.get("value"), quantity.get("unit") or quantity.get("code"),
                                          birth, when)
            if abnormal is None and r.get("component"):
                flags = [_packaged_flag(((c.get("code") or {}).get("coding") or [{}])[0].get("code", ""),
                                        (c.get("valueQuantity") or {}).get("value"),
                                        (c.get("valueQuantity") or {}).get("unit"), birth, when)
                         for c in r["component"]]
                known = [f for f in flags if f is not None]
                abnormal = any(known) if known else None
        out.append(Source(patient["id"], record_type, when, code, encounter.removeprefix("urn:uuid:"), name, end,
                          status, abnormal))
    return out


_CSV_TABLES = {"encounters": ("encounter", "START"), "conditions": ("condition", "START"),
               "medications": ("medication", "START"), "procedures": ("procedure", "START"),
               "immunizations": ("immunization", "DATE"), "allergies": ("allergy", "START"),
               "careplans": ("care_plan", "START"), "observations": (None, "DATE")}


def csv_sources(directory: Path) -> list[Source]:
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
                    abnormal = _packaged_flag(row["CODE"], row["VALUE"], row["UNITS"] or None,
                                              births.get(row["PATIENT"]), when)
                out.append(Source(row["PATIENT"], kind, when, row["CODE"], encounter,
                                  " ".join(row["DESCRIPTION"].split()), _instant(row.get("STOP")), "", abnormal))
    return out


# ---- question kinds: the question text and its gold set, both from the patient's source records and as_of ----

_OVER = {"stopped", "completed", "cancelled", "entered-in-error", "resolved", "inactive", "remission", "revoked",
         "ended", "refuted"}


def _in(r: Source, start: datetime | None, end: datetime) -> bool:
    return r.when is not None and (start is None or start <= r.when) and r.when <= end


def _active(r: Source, first: datetime, last: datetime) -> bool:
    if r.when is None or r.when > last:
        return False
    if r.end is not None:
        return r.end >= first
    return r.status.lower() not in _OVER


def _last_encounter(rs: list[Source], as_of: datetime) -> Source | None:
    encounters = [r for r in rs if r.record_type == "encounter" and r.when and r.when <= as_of]
    return max(encounters, key=lambda r: r.when) if encounters else None


Gold = Callable[[list[Source], datetime], tuple[str, list[Source]] | None]


def _labs_last_year(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    return ("What were the patient's laboratory results in the last year?",
            [r for r in rs if r.record_type == "lab_result" and _in(r, t - relativedelta(years=1), t)])


def _abnormal_labs(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    return ("Which laboratory results were abnormal in the last year?",
            [r for r in rs if r.record_type == "lab_result" and _in(r, t - relativedelta(years=1), t) and r.abnormal])


def _abnormal_vitals(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    return ("Which vital signs were out of range in the last two years?",
            [r for r in rs if r.record_type == "vital_sign" and _in(r, t - relativedelta(years=2), t) and r.abnormal])


def _vitals_6_months(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    return ("What vital signs were recorded in the last 6 months?",
            [r for r in rs if r.record_type == "vital_sign" and _in(r, t - relativedelta(months=6), t)])


def _medications_since(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    year = t.year - 5
    return (f"Which medications were prescribed since {year}?",
            [r for r in rs if r.record_type == "medication" and _in(r, datetime(year, 1, 1, tzinfo=UTC), t)])


def _hba1c_trend(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    return ("HbA1c over the last three years",
            [r for r in rs if r.code == "4548-4" and _in(r, t - relativedelta(years=3), t)])


def _cholesterol_since(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    year = t.year - 4
    return (f"Total cholesterol values since {year}",
            [r for r in rs if r.code == "2093-3" and _in(r, datetime(year, 1, 1, tzinfo=UTC), t)])


def _conditions_at_last_visit(rs: list[Source], t: datetime) -> tuple[str, list[Source]] | None:
    visit = _last_encounter(rs, t)
    if visit is None:
        return None
    first, last = visit.when, visit.end or visit.when
    return ("Which conditions were active at the last visit?",
            [r for r in rs if r.record_type == "condition" and _active(r, first, last)])


def _medications_active_as_of(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    day = (t - relativedelta(years=1)).date()
    moment = datetime(day.year, day.month, day.day, 23, 59, 59, tzinfo=UTC)
    return (f"Which medications were active as of {day.isoformat()}?",
            [r for r in rs if r.record_type == "medication" and _active(r, moment, moment)])


def _current_care_plans(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    return ("What care plans are currently active?",
            [r for r in rs if r.record_type == "care_plan" and _active(r, t, t)])


def _allergies(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    return (f"Which allergies were recorded before {t.year + 1}?",
            [r for r in rs if r.record_type == "allergy" and _in(r, None, t)])


def _immunizations_before(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    year = t.year - 3
    end = datetime(year, 1, 1, tzinfo=UTC) - timedelta(seconds=1)
    return (f"Which immunizations did the patient receive before {year}?",
            [r for r in rs if r.record_type == "immunization" and _in(r, None, end)])


def _procedures_between(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    first, last = t.year - 6, t.year - 2
    return (f"What procedures were performed between {first} and {last}?",
            [r for r in rs if r.record_type == "procedure"
             and _in(r, datetime(first, 1, 1, tzinfo=UTC), datetime(last, 12, 31, 23, 59, 59, tzinfo=UTC))])


def _encounters_in_year(rs: list[Source], t: datetime) -> tuple[str, list[Source]]:
    year = t.year - 1
    return (f"Which encounters did the patient have in {year}?",
            [r for r in rs if r.record_type == "encounter"
             and _in(r, datetime(year, 1, 1, tzinfo=UTC), datetime(year, 12, 31, 23, 59, 59, tzinfo=UTC))])


def _labs_at_last_visit(rs: list[Source], t: datetime) -> tuple[str, list[Source]] | None:
    visit = _last_encounter(rs, t)
    if visit is None:
        return None
    return ("What lab results were recorded at the last visit?",
            [r for r in rs if r.record_type == "lab_result" and r.encounter == visit.encounter])


def _medication_by_name(rs: list[Source], t: datetime) -> tuple[str, list[Source]] | None:
    names = Counter(r.name for r in rs if r.record_type == "medication" and _in(r, None, t))
    for name, _ in names.most_common():
        word = next((w for w in re.findall(r"[A-Za-z]{6,}", name)), None)
        if word:
            pattern = re.compile(r"(?<![a-z0-9])" + re.escape(word.lower()))
            return (f"When was {word.lower()} prescribed?",
                    [r for r in rs if r.record_type == "medication" and _in(r, None, t)
                     and pattern.search(r.name.lower())])
    return None


KINDS: dict[str, Gold] = {
    "labs, last year": _labs_last_year,
    "abnormal labs, last year": _abnormal_labs,
    "abnormal vitals, 2 years": _abnormal_vitals,
    "vitals, last 6 months": _vitals_6_months,
    "medications since YEAR": _medications_since,
    "HbA1c trend, 3 years": _hba1c_trend,
    "cholesterol since YEAR": _cholesterol_since,
    "conditions active, last visit": _conditions_at_last_visit,
    "medications active as of DATE": _medications_active_as_of,
    "care plans active now": _current_care_plans,
    "allergies before YEAR": _allergies,
    "immunizations before YEAR": _immunizations_before,
    "procedures between Y1 and Y2": _procedures_between,
    "encounters in YEAR": _encounters_in_year,
    "labs at the last visit": _labs_at_last_visit,
    "medication by name": _medication_by_name,
}


def _plain(name: str) -> str:
    """A Synthea name part without its numeric suffix ("Max917" -> "Max")."""
    return " ".join(re.sub(r"\d+$", "", word) for word in name.split())


def patient_names(records_dir: Path) -> dict[str, str]:
    """Each shared patient's name as its source file writes it (FHIR official name, CSV FIRST and LAST)."""
    names = {}
    for path in sorted((records_dir / "synthea_fhir_r4").glob("*.json")):
        for entry in json.loads(path.read_text())["entry"]:
            if entry["resource"]["resourceType"] == "Patient":
                official = next(n for n in entry["resource"]["name"] if n.get("use") == "official")
                names[entry["resource"]["id"]] = _plain(" ".join([*official["given"], official["family"]]))
    with (records_dir / "synthea_csv" / "patients.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            names[row["Id"]] = _plain(f"{row['FIRST']} {row['LAST']}")
    return names


# Kinds asked by the patient's name instead of the patient id (the same gold sets as their id-based kinds).
BY_NAME: dict[str, tuple[str, Gold]] = {
    "labs by patient name, last year": ("What were {name}'s laboratory results in the last year?", _labs_last_year),
    "conditions by name, last visit": ("Which conditions were active at {name}'s last visit?",
                                       _conditions_at_last_visit),
}


class ConstantChatGenerator:
    """Answers "Yes" to everything: the first answer is accepted and the record table stands as computed."""

    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"replies": [ChatMessage.from_assistant("Yes", meta={"model": "constant", "usage": {}})]}


def _baseline_ids(pipeline: Any, question: str, scope: AccessScope, as_of: str, patient: str) -> list[str]:
    """The scoped path before record queries: window filters from the time scope, then the topic filter."""
    resolved = pipeline.time_resolver.run(question=question, as_of=as_of, patient_id=patient,
                                          filters=restrict(scope, None))
    time_scope = resolved["scope"]
    scoped = time_scope.kind != "none"
    retriever = pipeline._topic_retriever(scope.tenant, scoped)
    top_k = pipeline.max_scoped_records if scoped else pipeline.top_k
    documents = retriever.run(query=question, filters=restrict(scope, scope_filters(time_scope)), top_k=top_k)
    return [d.id for d in documents["documents"]]


def main() -> None:
    records_dir = shared_data_dir() / "records"
    if not records_dir.is_dir():
        sys.exit(f"shared Synthea data not found at {records_dir}; nothing to measure")
    verbose = "-v" in sys.argv
    sources: list[Source] = []
    documents = []
    if "--fhir-only" not in sys.argv:
        sources += csv_sources(records_dir / "synthea_csv")
        documents += parse_synthea_csv_dir(records_dir / "synthea_csv", tenant=TENANT, access=["clinicians"])
    if "--csv-only" not in sys.argv:
        for path in sorted((records_dir / "synthea_fhir_r4").glob("*.json")):
            sources += fhir_sources(path)
            documents += parse_fhir_bundle(path, tenant=TENANT, access=["clinicians"])
    keys = {d.id: (d.meta["patient_id"], d.meta["record_type"], d.meta.get("effective_start_utc", ""),
                   d.meta.get("code", ""), d.meta.get("encounter_id", "")) for d in documents}
    by_patient: dict[str, list[Source]] = defaultdict(list)
    for source in sources:
        by_patient[source.patient].append(source)
    # Decoys: the same records under another tenant and under a principal the caller lacks must never appear.
    decoys = [d.__class__(id=f"decoy-{d.id}", content=d.content, meta={**d.meta, "tenant": "other"})
              for d in documents[:2000]]
    with tempfile.TemporaryDirectory() as workdir:
        runtime = Runtime(Settings(data_dir=Path(workdir)), chat_generator_factory=lambda role: ConstantChatGenerator())
        baseline = "--baseline" in sys.argv
        if baseline:
            embedder = runtime.document_embedder()
            embedder.warm_up()
            documents = embedder.run(documents=documents)["documents"]
        runtime.document_store.write_documents(documents + decoys)
        if baseline:
            info = refit_topic_model(runtime, TENANT)
            print(f"topic model v{info.version} ({info.mode}, {info.n_topics} topics) for the baseline")
        pipeline = build_pipeline("atrag", runtime, max_iterations=1, max_scoped_records=1000)
        scope = AccessScope(tenant=TENANT, principals=frozenset({"clinicians"}))
        print(f"{len(documents)} records of {len(by_patient)} patients (+{len(decoys)} decoys of another tenant)")
        names = patient_names(records_dir)
        kinds: dict[str, Gold] = {**KINDS, **{kind: gold for kind, (_, gold) in BY_NAME.items()}}
        totals: dict[str, list[int]] = {kind: [0, 0, 0, 0, 0] for kind in kinds}  # hit, retrieved, gold, asked, exact
        before: dict[str, list[int]] = {kind: [0, 0] for kind in kinds}  # baseline hit, retrieved
        latencies = []
        trends = [0, 0]  # trend tables asked, in date order with a value and unit on every row
        for patient, records in sorted(by_patient.items()):
            last = _last_encounter(records, datetime.max.replace(tzinfo=UTC))
            if last is None:
                continue
            encounters = sorted(r.when for r in records if r.record_type == "encounter" and r.when)
            instants = [last.when + timedelta(days=1), encounters[len(encounters) // 2] + timedelta(days=1)]
            for as_of, (kind, gold_of) in [(moment.replace(hour=0, minute=0, second=0, microsecond=0), item)
                                            for moment in dict.fromkeys(instants) for item in kinds.items()]:
                made = gold_of(records, as_of)
                if made is None or (kind in BY_NAME and patient not in names):
                    continue
                question, gold = made
                asked_for = patient
                if kind in BY_NAME:
                    # Only the name says whose records: the resolver finds the patient among the readable ones.
                    question, asked_for = BY_NAME[kind][0].format(name=names[patient]), None
                started = time.perf_counter()
                result = pipeline.run(question, scope, as_of=as_of.strftime(UTC_TEXT), patient_id=asked_for)
                latencies.append(time.perf_counter() - started)
                # The record table step, wherever it is (the grounding step follows it).
                table = next((s.outputs.get("table") for s in reversed(result.steps) if s.kind == "record_table"), None)
                ids = [row["record_id"] for row in table["rows"]] if table else []
                if kind in ("HbA1c trend, 3 years", "cholesterol since YEAR") and table and table["rows"]:
                    dates = [_instant(row["date"]) for row in table["rows"]]
                    trends[0] += 1
                    trends[1] += int(dates == sorted(dates) and all(row["value"] is not None and row["unit"]
                                                                    for row in table["rows"]))
                retrieved = Counter(keys.get(i, ("foreign", i, "", "", "")) for i in ids)
                wanted = Counter(r.key for r in gold)
                hit = sum((retrieved & wanted).values())
                row = totals[kind]
                row[0] += hit
                row[1] += sum(retrieved.values())
                row[2] += sum(wanted.values())
                row[3] += 1
                row[4] += int(retrieved == wanted)
                if baseline and kind not in BY_NAME:
                    old = _baseline_ids(pipeline, question, scope, as_of.strftime(UTC_TEXT), patient)
                    old_retrieved = Counter(keys.get(i, ("foreign", i, "", "", "")) for i in old)
                    before[kind][0] += sum((old_retrieved & wanted).values())
                    before[kind][1] += sum(old_retrieved.values())
                if verbose and retrieved != wanted:
                    print(f"  miss {kind} {patient[:8]} as_of {as_of.date()}: {question!r} "
                          f"extra {list((retrieved - wanted).elements())[:3]} "
                          f"missing {list((wanted - retrieved).elements())[:3]}")
    print(f"\n{'question kind':<32} {'asked':>5} {'exact':>5} {'gold':>6} {'returned':>8} {'precision':>9} "
          f"{'recall':>6}" + (f" | {'before P':>8} {'before R':>8}" if "--baseline" in sys.argv else ""))
    all_hit = all_retrieved = all_gold = 0
    for kind, (hit, retrieved, gold, asked, exact) in totals.items():
        precision = hit / retrieved if retrieved else (1.0 if not gold else 0.0)
        recall = hit / gold if gold else 1.0
        all_hit, all_retrieved, all_gold = all_hit + hit, all_retrieved + retrieved, all_gold + gold
        old = ""
        if "--baseline" in sys.argv:
            old_hit, old_retrieved = before[kind]
            old_precision = old_hit / old_retrieved if old_retrieved else 0.0
            old = f" | {old_precision:>8.3f} {old_hit / gold if gold else 1.0:>8.3f}"
        print(f"{kind:<32} {asked:>5} {exact:>5} {gold:>6} {retrieved:>8} {precision:>9.3f} {recall:>6.3f}{old}")
    print(f"{'all kinds (micro)':<32} {'':>5} {'':>5} {all_gold:>6} {all_retrieved:>8} "
          f"{all_hit / max(all_retrieved, 1):>9.3f} {all_hit / max(all_gold, 1):>6.3f}")
    print(f"trend tables (HbA1c, cholesterol): {trends[1]} of {trends[0]} in date order with a value and unit "
          "on every row")
    latencies.sort()
    if latencies:
        print(f"\nlatency per question (constant model): p50 {latencies[len(latencies) // 2] * 1000:.0f} ms, "
              f"p95 {latencies[int(len(latencies) * 0.95)] * 1000:.0f} ms over {len(latencies)} questions")


if __name__ == "__main__":
    main()
