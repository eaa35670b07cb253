"""Precision and recall of the retrieved record set for 10 time-scoped questions over the shared Synthea
patients, for `atrag` and `standard`. The questions say which records answer them (`select`: record type,
period, "abnormal", last visit), and `docqa.evaluation.records` computes the gold sets from the source files
(FHIR JSON, CSV rows) with their own date, category and encounter fields, independently of the parsers; a
record is identified by (patient, record type, UTC instant, code, encounter), compared as multisets (through
the stored ids of those keys, `gold_record_ids`).

Every record (FHIR bundles and CSV export) is parsed, embedded and written to a fresh embedded store; a topic
model is fitted for the tenant (supervised by record type) and the records re-tagged. Each question names an
`as_of` instant (the day after the patient's last encounter) and its patient:
- `atrag` gets `as_of` and `patient_id` and resolves the window itself;
- `standard` gets the question alone (`std`), and again with the patient as a caller filter (`std+patient`).
The answering model is a constant "Yes" unless --llm is given (then the configured endpoint): retrieval
figures do not depend on it when the first answer is accepted. Prints figures; asserts nothing.

With --write-questions, the same questions are written as a `docqa eval` dataset (JSONL with `patient_id`,
`as_of` and `select`) instead, for every strategy's answers and cited records side by side:

    nice python bench/time_scoped_eval.py [--llm]
    python bench/time_scoped_eval.py --write-questions runs/time_scoped.jsonl
    docqa eval --dataset runs/time_scoped.jsonl --corpus ../shared/data/records --tenant eval-records \\
        --pipelines atrag,standard --out runs/time-scoped
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

from haystack.dataclasses import ChatMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from docqa.access import AccessScope
from docqa.evaluation.metrics import set_precision_recall
from docqa.evaluation.records import (
    UTC_TEXT,
    RecordSelection,
    SourceRecord,
    gold_record_ids,
    instant,
    parse_records,
    record_sources,
    source_records,
)
from docqa.pipelines.registry import build_pipeline
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.topics import refit_topic_model
from docqa_eval.datasets import shared_data_dir

TENANT = "eval"
DAY = timedelta(days=1)

# The questions and which records answer each (`select`, see docqa.evaluation.records); "fhir" or "csv" is the
# pool of patients a question is asked about.
TEMPLATES: list[tuple[str, str, dict[str, Any]]] = [
    ("What are the abnormal lab results of the patient within the last year?", "fhir",
     {"record_type": "lab_result", "within": "P1Y", "abnormal": True}),
    ("When was the last doctor visit and what was the reason behind it?", "fhir", {"last_visit": True}),
    ("Which medications were prescribed in the last two years?", "fhir",
     {"record_type": "medication", "within": "P2Y"}),
    ("What conditions has the patient been diagnosed with since 2010?", "fhir",
     {"record_type": "condition", "since": "2010-01-01"}),
    ("Which immunizations did the patient receive in the last 5 years?", "fhir",
     {"record_type": "immunization", "within": "P5Y"}),
    ("What procedures were performed in the last 3 years?", "fhir", {"record_type": "procedure", "within": "P3Y"}),
    ("What vital signs were recorded in the last 6 months?", "fhir", {"record_type": "vital_sign", "within": "P6M"}),
    ("What are the abnormal lab results within the last two years?", "csv",
     {"record_type": "lab_result", "within": "P2Y", "abnormal": True}),
    ("Which medications were prescribed in the last year?", "csv", {"record_type": "medication", "within": "P1Y"}),
    ("When was the last visit and why?", "csv", {"last_visit": True}),
]


def time_scoped_questions(records_dir: Path, min_gold: int = 2) -> list[dict[str, Any]]:
    """Each template asked about a patient of its pool with at least `min_gold` answering records (a patient not
    yet asked about first), as of the day after that patient's last encounter; `docqa eval` JSONL objects."""
    pools: dict[str, list[SourceRecord]] = {"fhir": [], "csv": []}
    for kind, path in record_sources(records_dir):
        pools[kind] += source_records(path)
    used: set[str] = set()
    out = []
    for number, (text, pool, select) in enumerate(TEMPLATES, 1):
        selection = RecordSelection.from_dict(select)
        records = pools[pool]
        for patient in sorted({r.patient for r in records}, key=lambda p: (p in used, p)):
            mine = [r for r in records if r.patient == patient]
            encounters = [r.when for r in mine if r.record_type == "encounter" and r.when is not None]
            if not encounters:
                continue
            as_of = (max(encounters) + DAY).replace(hour=0, minute=0, second=0, microsecond=0)
            if len(selection.select(mine, as_of)) >= min_gold:
                used.add(patient)
                out.append({"id": f"time-scoped-{number}", "question": text, "patient_id": patient,
                            "as_of": as_of.strftime(UTC_TEXT), "select": select, "source": pool})
                break
        else:
            print(f"{number:>2} no patient has records for: {text}")
    return out


class ConstantChatGenerator:
    """Answers "Yes" to everything: the first answer is accepted, so retrieval happens once."""

    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"replies": [ChatMessage.from_assistant("Yes", meta={"model": "constant", "usage": {}})]}


def _retrieved_ids(result: Any) -> list[str]:
    retrievals = [s for s in result.steps if s.kind == "retrieval"]
    return [d["id"] for d in retrievals[-1].outputs["documents"]]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", action="store_true", help="the configured endpoint answers (default: constant Yes)")
    parser.add_argument("--write-questions", type=Path, metavar="JSONL",
                        help="only write the questions as a `docqa eval` dataset and print the command to run it")
    args = parser.parse_args(argv)
    records_dir = shared_data_dir() / "records"
    if not records_dir.is_dir():
        sys.exit(f"shared Synthea data not found at {records_dir}; nothing to measure")
    questions = time_scoped_questions(records_dir)
    if args.write_questions is not None:
        args.write_questions.parent.mkdir(parents=True, exist_ok=True)
        args.write_questions.write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
        print(f"{len(questions)} questions written to {args.write_questions}; run them with\n"
              f"  docqa eval --dataset {args.write_questions} --corpus {records_dir} --tenant eval-records "
              f"--pipelines atrag,standard --out runs/time-scoped")
        return
    import torch

    torch.set_num_threads(1)
    documents = parse_records(records_dir, tenant=TENANT, access=["clinicians"])
    by_patient: dict[str, list[SourceRecord]] = defaultdict(list)
    for record in source_records(records_dir):
        by_patient[record.patient].append(record)
    with tempfile.TemporaryDirectory() as workdir:
        settings = Settings(data_dir=Path(workdir))
        factory = None if args.llm else (lambda role: ConstantChatGenerator())
        runtime = Runtime(settings, chat_generator_factory=factory)
        embedder = runtime.document_embedder()
        embedder.warm_up()
        runtime.document_store.write_documents(embedder.run(documents=documents)["documents"])
        info = refit_topic_model(runtime, TENANT)
        print(f"{len(documents)} records embedded; topic model v{info.version} {info.mode}, {info.n_topics} topics")
        atrag = build_pipeline("atrag", runtime, max_iterations=3 if args.llm else 1)
        standard = build_pipeline("standard", runtime)
        scope = AccessScope(tenant=TENANT, principals=frozenset({"clinicians"}))
        print(f"{'#':>2} {'src':<4} {'gold':>4} | {'atrag P/R':>11} {'topic mode':<26} | {'std P/R':>11} | "
              f"{'std+patient P/R':>15} | question")
        totals = {"atrag": [0.0, 0.0], "std": [0.0, 0.0], "std+patient": [0.0, 0.0]}
        for question in questions:
            patient, as_of_text = question["patient_id"], question["as_of"]
            as_of = instant(as_of_text)
            assert as_of is not None
            gold = gold_record_ids(RecordSelection.from_dict(question["select"]).select(by_patient[patient], as_of),
                                   documents)
            result = atrag.run(question["question"], scope, as_of=as_of_text, patient_id=patient)
            mode = next(s for s in result.steps if s.kind == "retrieval").outputs["topic"]["mode"]
            patient_filter = {"field": "meta.patient_id", "operator": "==", "value": patient}
            rows = {
                "atrag": _retrieved_ids(result),
                "std": _retrieved_ids(standard.run(question["question"], scope)),
                "std+patient": _retrieved_ids(standard.run(question["question"], scope, filters=patient_filter)),
            }
            cells = []
            for name, ids in rows.items():
                precision, recall = set_precision_recall(ids, gold)
                totals[name][0] += precision
                totals[name][1] += recall
                cells.append(f"{precision:.2f}/{recall:.2f}")
            number = question["id"].rsplit("-", 1)[-1]
            print(f"{number:>2} {question['source']:<4} {len(gold):>4} | {cells[0]:>11} {mode:<26} | {cells[1]:>11} | "
                  f"{cells[2]:>15} | {question['question']} (as_of {as_of_text[:10]}, patient {patient[:8]})",
                  flush=True)
        n = len(TEMPLATES)
        print("macro average P/R: " + ", ".join(f"{name} {p / n:.2f}/{r / n:.2f}" for name, (p, r) in totals.items()))


if __name__ == "__main__":
    main()
