"""Time-scoped record questions for `docqa eval`: `select` read from the dataset, the gold set computed from the
source records (a hand-written FHIR bundle), named by the stored record ids, and `--option` parsing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from docqa.errors import DocqaError
from docqa.evaluation.cli import parse_options
from docqa.evaluation.corpus import read_corpus
from docqa.evaluation.datasets import load_dataset
from docqa.evaluation.metrics import set_precision_recall
from docqa.evaluation.records import (
    MISSING_PREFIX,
    RecordSelection,
    SourceRecord,
    document_key,
    gold_record_ids,
    record_sources,
    source_records,
    with_record_sets,
)

AS_OF = datetime(2019, 3, 2, tzinfo=UTC)


def _entry(resource: dict) -> dict:
    return {"fullUrl": f"urn:uuid:{resource['id']}", "resource": resource}


def _encounter(rid: str, start: str) -> dict:
    return {"resourceType": "Encounter", "id": rid, "status": "finished", "class": {"code": "AMB"},
            "type": [{"coding": [{"system": "http://snomed.info/sct", "code": "185349003",
                                  "display": "Encounter for check up"}]}],
            "subject": {"reference": "urn:uuid:p1"}, "period": {"start": start, "end": start}}


def _glucose(rid: str, encounter: str, when: str, value: float) -> dict:
    return {"resourceType": "Observation", "id": rid, "status": "final",
            "category": [{"coding": [{"code": "laboratory"}]}],
            "code": {"coding": [{"system": "http://loinc.org", "code": "2339-0", "display": "Glucose"}]},
            "subject": {"reference": "urn:uuid:p1"}, "encounter": {"reference": f"urn:uuid:{encounter}"},
            "effectiveDateTime": when, "valueQuantity": {"value": value, "unit": "mg/dL"}}


def _medication(rid: str, encounter: str, when: str) -> dict:
    return {"resourceType": "MedicationRequest", "id": rid, "status": "stopped", "intent": "order",
            "medicationCodeableConcept": {"coding": [{"code": "310798", "display": "Hydrochlorothiazide 25 MG"}]},
            "subject": {"reference": "urn:uuid:p1"}, "encounter": {"reference": f"urn:uuid:{encounter}"},
            "authoredOn": when}


def _condition(rid: str, encounter: str, when: str) -> dict:
    return {"resourceType": "Condition", "id": rid,
            "code": {"coding": [{"code": "38341003", "display": "Hypertension"}]},
            "subject": {"reference": "urn:uuid:p1"}, "encounter": {"reference": f"urn:uuid:{encounter}"},
            "onsetDateTime": when}


@pytest.fixture
def records_dir(tmp_path: Path) -> Path:
    # One adult patient: visits in 2009, 2017, 2018 and 2019, each with its own records.
    resources = [
        {"resourceType": "Patient", "id": "p1", "birthDate": "1960-01-01", "gender": "female",
         "name": [{"given": ["Ann"], "family": "Roe"}]},
        _encounter("e0", "2009-06-01T10:00:00+00:00"),
        _condition("c0", "e0", "2009-06-01T10:00:00+00:00"),
        _encounter("e1", "2017-01-10T10:00:00+00:00"),
        _medication("m1", "e1", "2017-01-10T10:00:00+00:00"),
        _condition("c1", "e1", "2017-01-10T10:00:00+00:00"),
        _encounter("e2", "2018-06-01T10:00:00+00:00"),
        _medication("m2", "e2", "2018-06-01T10:00:00+00:00"),
        _glucose("o1", "e2", "2018-06-01T10:00:00+00:00", 140.0),   # abnormal (70-99 mg/dL)
        _glucose("o2", "e2", "2018-06-01T10:30:00+00:00", 85.0),    # normal
        _encounter("e3", "2019-03-01T09:00:00+00:00"),
        _glucose("o3", "e3", "2019-03-01T09:00:00+00:00", 60.0),    # abnormal, at the last visit
        _medication("m9", "e3", "2019-04-01T09:00:00+00:00"),       # after as_of: never counted
    ]
    folder = tmp_path / "records" / "fhir"
    folder.mkdir(parents=True)
    (folder / "p1.json").write_text(json.dumps({"resourceType": "Bundle", "type": "transaction",
                                                "entry": [_entry(r) for r in resources]}))
    return tmp_path / "records"


def _select(records: list[SourceRecord], **raw) -> list[tuple[str, str]]:
    chosen = RecordSelection.from_dict(raw).select(records, AS_OF)
    return sorted((r.record_type, r.when.strftime("%Y-%m-%d %H:%M")) for r in chosen)


def test_selections_count_back_from_as_of(records_dir: Path):
    records = source_records(records_dir)
    assert record_sources(records_dir) == [("fhir", records_dir / "fhir" / "p1.json")]
    # 2019-03-02 minus one year is 2018-03-02: the 2018 prescription only; the 2019-04 one is after as_of.
    assert _select(records, record_type="medication", within="P1Y") == [("medication", "2018-06-01 10:00")]
    assert _select(records, record_type="medication", within="P2Y6M") == [
        ("medication", "2017-01-10 10:00"), ("medication", "2018-06-01 10:00")]
    assert _select(records, record_type="condition", since="2010-01-01") == [("condition", "2017-01-10 10:00")]
    assert _select(records, record_type="lab_result", within="P2Y", abnormal=True) == [
        ("lab_result", "2018-06-01 10:00"), ("lab_result", "2019-03-01 09:00")]
    # The last visit before as_of is e3: the encounter and its glucose (its later prescription is not yet).
    assert _select(records, last_visit=True) == [("encounter", "2019-03-01 09:00"), ("lab_result", "2019-03-01 09:00")]
    assert _select(records, record_type="medication", within="P1M") == []


@pytest.mark.parametrize(("raw", "message"), [
    ({"record_type": "medication", "window": "P1Y"}, "unknown `select` keys window"),
    ({"within": "two years"}, "ISO 8601 period"),
    ({"within": "P"}, "ISO 8601 period"),
    ({"since": "2010/01/01"}, "must be a date"),
    ({"abnormal": "yes"}, "`abnormal` must be true or false"),
    ({}, "non-empty object"),
])
def test_bad_selections_are_refused(raw, message):
    with pytest.raises(DocqaError, match=message):
        RecordSelection.from_dict(raw)


def test_gold_ids_are_the_stored_records_and_missing_ones_count_against_recall(records_dir: Path):
    documents = read_corpus(records_dir, tenant="acme", access=["clinicians"])
    by_key = {document_key(d): d.id for d in documents}
    expected = RecordSelection.from_dict({"record_type": "lab_result", "abnormal": True}).select(
        source_records(records_dir), AS_OF)
    gold = gold_record_ids(expected, documents)
    assert sorted(gold) == sorted(by_key[r.key] for r in expected) and len(gold) == 2
    # A source record no document stands for keeps an id of its own: returning everything stored still misses it.
    ghost = SourceRecord("p1", "lab_result", AS_OF, "2339-0", "e3")
    with_ghost = gold_record_ids([*expected, ghost], documents)
    assert len(with_ghost) == 3 and sum(i.startswith(MISSING_PREFIX) for i in with_ghost) == 1
    assert set_precision_recall([d.id for d in documents if d.id in gold], with_ghost) == (1.0, pytest.approx(2 / 3))
    # The same key twice in the source is two gold records, however many documents have it.
    assert len(gold_record_ids([expected[0], expected[0]], documents)) == 2


def test_dataset_select_questions_get_their_records_from_the_corpus(records_dir: Path, tmp_path: Path):
    dataset = tmp_path / "q.jsonl"
    dataset.write_text(json.dumps({"id": "meds", "question": "Which medications were prescribed in the last year?",
                                   "patient_id": "p1", "as_of": "2019-03-02T00:00:00Z",
                                   "select": {"record_type": "medication", "within": "P1Y"}}) + "\n"
                       + json.dumps({"id": "plain", "question": "Who?", "answer": "Ann"}) + "\n")
    meds, plain = load_dataset(dataset)
    assert meds.record_selection == {"record_type": "medication", "within": "P1Y"} and meds.record_ids is None
    assert meds.run_inputs == {"as_of": "2019-03-02T00:00:00Z", "patient_id": "p1"}
    documents = read_corpus(records_dir, tenant="acme")
    resolved, untouched = with_record_sets([meds, plain], records_dir, documents)
    (prescription,) = [d for d in documents if d.meta["record_type"] == "medication"
                       and d.meta["effective_start_utc"] == "2018-06-01T10:00:00Z"]
    assert resolved.record_ids == (prescription.id,)
    assert untouched == plain
    with pytest.raises(DocqaError, match="need --corpus"):
        with_record_sets([meds], None, documents)


def test_select_needs_its_patient_and_instant(tmp_path: Path):
    dataset = tmp_path / "q.jsonl"
    dataset.write_text(json.dumps({"question": "Which medications?", "patient_id": "p1",
                                   "select": {"record_type": "medication"}}) + "\n")
    with pytest.raises(DocqaError, match="needs `as_of` and `patient_id`"):
        load_dataset(dataset)


def test_options_by_strategy_and_shared():
    assert parse_options(["contregen.max_llm_calls=8", "max_iterations=2", "mspr.sources=[\"web\"]",
                          "contregen.max_depth=1"], ["standard", "contregen", "mspr"]) == {
        "contregen": {"max_llm_calls": 8, "max_depth": 1}, "": {"max_iterations": 2}, "mspr": {"sources": ["web"]}}
    assert parse_options(["resp.note=plain text"], ["resp"]) == {"resp": {"note": "plain text"}}
    for bad in ("contregen.max_llm_calls", ".x=1", "atrag.top_k=3"):
        with pytest.raises(DocqaError, match="--option"):
            parse_options([bad], ["contregen"])


def test_a_synthea_csv_export_is_read_with_its_own_columns(tmp_path: Path):
    export = tmp_path / "csv"
    export.mkdir()
    (export / "patients.csv").write_text("Id,BIRTHDATE\np2,1950-05-05\n")
    (export / "encounters.csv").write_text("Id,START,PATIENT,CODE\n"
                                           "v1,2018-01-01T08:00:00Z,p2,185349003\nv2,2019-02-01T08:00:00Z,p2,185349003\n")
    (export / "medications.csv").write_text("START,PATIENT,ENCOUNTER,CODE\n2018-01-01T08:00:00Z,p2,v1,310798\n")
    (export / "observations.csv").write_text(
        "DATE,PATIENT,ENCOUNTER,CATEGORY,CODE,VALUE,UNITS,TYPE\n"
        "2019-02-01T08:00:00Z,p2,v2,laboratory,2339-0,130,mg/dL,numeric\n"   # abnormal
        "2019-02-01T08:00:00Z,p2,v2,laboratory,2339-0,90,mg/dL,numeric\n"    # normal
        "2019-02-01T08:00:00Z,p2,v2,,QALY,40,a,numeric\n")                   # a simulation figure: skipped
    records = source_records(tmp_path)
    assert record_sources(tmp_path) == [("csv", export)]
    assert sorted(r.record_type for r in records) == ["encounter", "encounter", "lab_result", "lab_result",
                                                      "medication"]
    assert _select(records, record_type="lab_result", abnormal=True) == [("lab_result", "2019-02-01 08:00")]
    assert _select(records, record_type="medication", within="P1Y") == []  # 2018-01-01 is before 2018-03-02
    assert _select(records, last_visit=True) == [("encounter", "2019-02-01 08:00"), ("lab_result", "2019-02-01 08:00"),
                                                 ("lab_result", "2019-02-01 08:00")]
    (medication,) = [r for r in records if r.record_type == "medication"]
    assert medication.key == ("p2", "medication", "2018-01-01T08:00:00Z", "310798", "v1")


def test_record_questions_are_summarised_by_their_records_not_by_answer_scores():
    from docqa.evaluation.report import summarize
    from docqa.evaluation.runner import EvalRecord

    records = [
        EvalRecord("atrag", "r1", "Which medications?", [], record_precision=1.0, record_recall=0.5, wall_s=2.0),
        EvalRecord("atrag", "r2", "Which labs?", [], record_precision=0.5, record_recall=1.0, wall_s=4.0),
        EvalRecord("standard", "r1", "Which medications?", [], record_precision=0.2, record_recall=0.25),
        EvalRecord("standard", "q1", "Who?", ["Ann"], em=1.0, f1=1.0, rouge_l=1.0),
        EvalRecord("standard", "q2", "When?", ["1901"], error="RuntimeError: boom"),
    ]
    atrag, standard = summarize(records)
    assert atrag["em"] is None and atrag["f1"] is None and atrag["rouge_l"] is None
    assert atrag["record_precision"] == 0.75 and atrag["record_recall"] == 0.75 and atrag["wall_p50_s"] == 3.0
    # EM over the two questions with answers (the failed one counts 0), records over the one record question.
    assert standard["n"] == 3 and standard["em"] == 0.5 and standard["errors"] == 1
    assert (standard["record_precision"], standard["record_recall"]) == (0.2, 0.25)


def test_a_tree_strategys_passages_and_nodes_are_scored():
    from docqa.evaluation.datasets import EvalQuestion
    from docqa.evaluation.runner import EvalRecord, score
    from docqa.result import PipelineResult, Step

    # ConTReGen's shape: a search per node in a loop with the tree expansion, whose last round holds the passages
    # judged relevant, one node per sub-question.
    result = PipelineResult("contregen", "Who?", "Ann [1]", steps=[
        Step(0, "tree_expansion", "contre_tree_expander", outputs={"query": "Who?"}),
        Step(1, "tree_node", "contre_node 0", parent=0),
        Step(2, "retrieval", "hybrid_retriever", outputs={"documents": [{"id": "d1"}, {"id": "d9"}]}),
        Step(3, "tree_expansion", "contre_tree_expander", outputs={"query": "Whose?"}),
        Step(4, "tree_node", "contre_node 0.1", parent=1),
        Step(5, "retrieval", "hybrid_retriever", outputs={"documents": [{"id": "d3"}]}),
        Step(6, "tree_expansion", "contre_tree_expander", outputs={"documents": [{"id": "d1"}, {"id": "d3"}]}),
        Step(7, "synthesis", "contregen_synthesizer",
             outputs={"llm_calls": [{"prompt": "first draft"}, {"prompt": "write the answer now"}]}),
    ])
    record = EvalRecord("contregen", "q", "Who?", ["Ann"])
    score(record, result, EvalQuestion("q", "Who?", ("Ann",), supporting_ids=("d1", "d2")), None)
    assert record.retrieved_ids == ["d1", "d3"] and record.support_recall == 0.5
    assert record.iterations == 2 and record.words_to_generator == 4 and record.em == 1.0
