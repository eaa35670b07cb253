"""Exact record sets: RecordQueryResolver, the record window, the record table, and AT-RAG's record answers.

Every test builds its own records by hand, so each expected set is written down, not computed by the code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from haystack import Document

from docqa.access import AccessScope, restrict
from docqa.components.answer_grader import AnswerGrader
from docqa.components.clinical_terms import observation_terms, synonym_codes
from docqa.components.cot_answer_generator import CoTAnswerGenerator
from docqa.components.query_rewriter import QueryRewriter
from docqa.components.record_query_resolver import RecordQueryResolver
from docqa.components.record_table_builder import RecordTableBuilder, describe_table
from docqa.components.record_window_retriever import RecordWindowRetriever
from docqa.components.time_scope_resolver import TimeScopeResolver
from docqa.components.topic_assigner import TenantTopicAssigners
from docqa.ingestion.records.clinical_record import numeric_observation
from docqa.ingestion.records.reference_ranges import ReferenceRange, adult_range
from docqa.pipelines.atrag import ATRAGPipeline, TopicMode
from docqa.stores.embedded import EmbeddedDocumentStore
from tests.support.hash_embedder import HashTextEmbedder
from tests.support.scripted_chat import ScriptedChatGenerator

AS_OF = "2020-06-01T00:00:00Z"
SCOPE = AccessScope(tenant="t", principals=frozenset({"clinicians"}))
GROUNDED = r"supported by the documents"
USEFUL = r"answer the question \(Yes or No\)"


def _record(record_id: str, record_type: str, title: str, start: str, *, patient: str = "p1", tenant: str = "t",
            access: tuple[str, ...] = ("clinicians",), end: str | None = None, code: str | None = None,
            **extra: Any) -> Document:
    meta: dict[str, Any] = {"tenant": tenant, "access": list(access), "patient_id": patient,
                            "record_type": record_type, "title": title, "effective_start": start,
                            "effective_start_utc": start, "source": f"hand#{record_id}"}
    if end:
        meta["effective_end"] = meta["effective_end_utc"] = end
    if code:
        meta["code"] = code
    meta.update(extra)
    return Document(id=record_id, content=f"{title} ({start})", meta=meta)


RECORDS = [
    # p1's labs: HbA1c (packaged range, high), glucose (normal), a lab flagged by its own interpretation, one with
    # its own range, an old one.
    _record("a1c-2019", "lab_result", "Hemoglobin A1c/Hemoglobin.total in Blood", "2019-09-01T10:00:00Z",
            code="4548-4", value=7.1, unit="%", reference_range="< 5.6 %", reference_source="default_adult_table",
            interpretation="H", abnormal=True),
    _record("a1c-2018", "lab_result", "Hemoglobin A1c/Hemoglobin.total in Blood", "2018-03-01T10:00:00Z",
            code="4548-4", value=5.4, unit="%", interpretation="N", abnormal=False),
    _record("a1c-2015", "lab_result", "Hemoglobin A1c/Hemoglobin.total in Blood", "2015-03-01T10:00:00Z",
            code="4548-4", value=6.0, unit="%", interpretation="H", abnormal=True),
    _record("glucose-2020", "lab_result", "Glucose", "2020-02-01T10:00:00Z", code="2339-0", value=85.0,
            unit="mg/dL", interpretation="N", abnormal=False, encounter_id="enc-last"),
    _record("potassium-2020", "lab_result", "Potassium", "2020-01-15T10:00:00Z", code="6298-4", value=6.2,
            unit="mmol/L", reference_range="3.5-5 mmol/L", reference_source="record", interpretation="H",
            abnormal=True),
    _record("culture-2019", "lab_result", "Urine culture", "2019-11-11T10:00:00Z", code="630-4",
            value="positive", interpretation="A", abnormal=True),
    # Vitals: a high blood pressure panel and a weight.
    _record("bp-2020", "vital_sign", "Blood Pressure", "2020-02-01T10:00:00Z", code="85354-9", abnormal=True,
            encounter_id="enc-last"),
    _record("weight-2020", "vital_sign", "Body Weight", "2020-02-01T10:00:00Z", code="29463-7", value=80.0,
            unit="kg", encounter_id="enc-last"),
    # Medications: active (no end, status active), stopped with an end date, stopped without one, future-ended.
    _record("metformin", "medication", "24 HR Metformin hydrochloride 500 MG Extended Release Oral Tablet",
            "2011-05-01T10:00:00Z", code="860975", status="active"),
    _record("lisinopril", "medication", "Lisinopril 10 MG Oral Tablet", "2012-06-01T10:00:00Z",
            end="2016-01-01T00:00:00Z", code="314076"),
    _record("amoxicillin", "medication", "Amoxicillin 250 MG Oral Capsule", "2019-12-01T10:00:00Z",
            code="308182", status="stopped"),
    _record("statin", "medication", "Simvastatin 20 MG Oral Tablet", "2010-01-01T10:00:00Z",
            end="2030-01-01T00:00:00Z", code="312961"),
    # Conditions: active diabetes, resolved sinusitis (with an end), a condition after the last visit.
    _record("diabetes", "condition", "Diabetes mellitus type 2 (disorder)", "2011-05-01T10:00:00Z",
            code="44054006", status="active"),
    _record("sinusitis", "condition", "Sinusitis (disorder)", "2019-10-01T10:00:00Z",
            end="2019-10-20T00:00:00Z", code="36971009", status="resolved"),
    _record("fracture", "condition", "Fracture of ankle", "2020-05-20T10:00:00Z", code="16114001",
            status="active"),
    # Visits: the last one before 2020-06-01 is 2020-02-01, whose records share its encounter id.
    _record("enc-first", "encounter", "General examination", "2005-01-01T10:00:00Z", encounter_id="enc-first",
            end="2005-01-01T11:00:00Z"),
    _record("enc-last", "encounter", "General examination", "2020-02-01T10:00:00Z", encounter_id="enc-last",
            end="2020-02-01T11:00:00Z"),
    _record("flu-2020", "immunization", "Influenza  seasonal  injectable", "2020-02-01T10:30:00Z",
            code="140", encounter_id="enc-last"),
    _record("flu-2005", "immunization", "Influenza  seasonal  injectable", "2005-01-01T10:30:00Z",
            code="140", encounter_id="enc-first"),
    _record("appendectomy", "procedure", "Appendectomy", "2008-07-07T10:00:00Z", code="80146002"),
    _record("peanut", "allergy", "Allergy to peanuts", "2001-01-01T00:00:00Z", code="91935009", status="active"),
    _record("plan", "care_plan", "Diabetes self management plan", "2011-05-01T10:00:00Z", code="698360004",
            status="active"),
    _record("survey", "survey", "Tobacco smoking status", "2019-05-01T10:00:00Z", value="Never smoker"),
    # Records of others: another patient, another tenant, a principal the caller lacks.
    _record("other-patient", "lab_result", "Hemoglobin A1c/Hemoglobin.total in Blood", "2019-09-02T10:00:00Z",
            patient="p2", code="4548-4", abnormal=True),
    _record("other-tenant", "lab_result", "Hemoglobin A1c/Hemoglobin.total in Blood", "2019-09-03T10:00:00Z",
            tenant="u", code="4548-4", abnormal=True),
    _record("restricted", "lab_result", "HIV antibody test", "2019-09-04T10:00:00Z", access=("group:restricted",),
            code="7917-8", abnormal=True),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedDocumentStore:
    store = EmbeddedDocumentStore(str(tmp_path_factory.mktemp("records") / "store.sqlite3"))
    store.write_documents(RECORDS)
    return store


def _ask(store: EmbeddedDocumentStore, question: str, patient: str | None = "p1",
         scope: AccessScope = SCOPE, as_of: str = AS_OF) -> tuple[set[str], Any]:
    resolver = RecordQueryResolver(store)
    out = resolver.run(question=question, as_of=as_of, patient_id=patient, filters=restrict(scope, None))
    assert out["filters"] is not None, question
    found = store.filter_documents(filters=restrict(scope, out["filters"]))
    return {d.id for d in found}, out


class TestRecordTypes:
    @pytest.mark.parametrize(("question", "expected"), [
        ("What were the patient's laboratory results in the last year?",
         {"a1c-2019", "glucose-2020", "potassium-2020", "culture-2019"}),
        ("Any labs in the past year?", {"a1c-2019", "glucose-2020", "potassium-2020", "culture-2019"}),
        ("bloodwork within the last 12 months", {"a1c-2019", "glucose-2020", "potassium-2020", "culture-2019"}),
        ("vital signs in 2020", {"bp-2020", "weight-2020"}),
        ("Which vitals were recorded in 2020?", {"bp-2020", "weight-2020"}),
        ("medications prescribed since 2012", {"lisinopril", "amoxicillin"}),
        ("meds before 2011", {"statin"}),
        ("Which diagnoses were made in 2019?", {"sinusitis"}),
        ("procedures before 2010", {"appendectomy"}),
        ("Which vaccines did the patient get in 2020?", {"flu-2020"}),
        ("immunizations since 2000", {"flu-2020", "flu-2005"}),
        ("encounters in 2020", {"enc-last"}),
        ("allergies recorded before 2002", {"peanut"}),
        ("AllergyIntolerance records before 2002", {"peanut"}),
        ("care plans since 2010", {"plan"}),
        ("careplans since 2010", {"plan"}),
        ("MedicationRequest resources since 2012", {"lisinopril", "amoxicillin"}),
        ("questionnaires in 2019", {"survey"}),
    ])
    def test_type_synonyms_select_exactly_that_type(self, store: EmbeddedDocumentStore, question: str,
                                                    expected: set[str]) -> None:
        found, out = _ask(store, question)
        assert found == expected, out["query"].to_dict()
        assert out["query"].exact

    def test_two_types_in_one_question(self, store: EmbeddedDocumentStore) -> None:
        found, out = _ask(store, "labs and vitals in February 2020")
        assert found == {"glucose-2020", "bp-2020", "weight-2020"}
        assert set(out["query"].record_types) == {"lab_result", "vital_sign"}

    def test_observations_cover_every_observation_kind(self, store: EmbeddedDocumentStore) -> None:
        found, _ = _ask(store, "observations between 2019-05-01 and 2019-05-31")
        assert found == {"survey"}


class TestTimeScopes:
    @pytest.mark.parametrize(("question", "expected"), [
        ("HbA1c over the last three years", {"a1c-2019", "a1c-2018"}),
        ("HbA1c since 2015", {"a1c-2019", "a1c-2018", "a1c-2015"}),
        ("HbA1c before 2018", {"a1c-2015"}),
        ("HbA1c between 2015 and 2018", {"a1c-2018", "a1c-2015"}),
        ("HbA1c from March 2015 to March 2018", {"a1c-2018", "a1c-2015"}),
        ("HbA1c in 2018", {"a1c-2018"}),
        ("HbA1c in March 2018", {"a1c-2018"}),
        ("HbA1c on 2018-03-01", {"a1c-2018"}),
        ("HbA1c as of 2016-01-01", {"a1c-2015"}),
        ("HbA1c after 2018", {"a1c-2019"}),
        ("lab results at the last visit", {"glucose-2020"}),
        ("vitals at the most recent visit", {"bp-2020", "weight-2020"}),
        ("immunizations at the first visit", {"flu-2005"}),
    ])
    def test_time_scope_kinds(self, store: EmbeddedDocumentStore, question: str, expected: set[str]) -> None:
        found, out = _ask(store, question)
        assert found == expected, (out["scope"].to_dict(), out["query"].to_dict())

    def test_without_a_time_phrase_the_record_stands_as_of(self, store: EmbeddedDocumentStore) -> None:
        found, out = _ask(store, "Which medications has the patient been prescribed?", as_of="2012-01-01T00:00:00Z")
        assert found == {"metformin", "statin"}
        assert out["scope"].kind == "none"

    def test_date_forms(self) -> None:
        resolver = TimeScopeResolver()
        for question, start, end in [
            ("labs since March 4, 2014", "2014-03-04T00:00:00Z", AS_OF),
            ("labs since 4 March 2014", "2014-03-04T00:00:00Z", AS_OF),
            ("labs between 2010 and 2012", "2010-01-01T00:00:00Z", "2012-12-31T23:59:59Z"),
            ("labs up to 2013", None, "2013-12-31T23:59:59Z"),
            ("labs before 2013-06-01", None, "2013-05-31T23:59:59Z"),
        ]:
            scope = resolver.run(question=question, as_of=AS_OF)["scope"]
            assert (scope.start_utc, scope.end_utc) == (start, end), question


class TestCodesAndNames:
    @pytest.mark.parametrize("name", ["HbA1c", "A1c", "hemoglobin A1c", "glycated hemoglobin"])
    def test_lab_synonyms_name_the_code(self, store: EmbeddedDocumentStore, name: str) -> None:
        found, out = _ask(store, f"{name} values since 2015")
        assert found == {"a1c-2019", "a1c-2018", "a1c-2015"}
        assert out["query"].codes == ["4548-4"]

    def test_loinc_code_in_the_question(self, store: EmbeddedDocumentStore) -> None:
        found, out = _ask(store, "results for 2339-0 in 2020")
        assert found == {"glucose-2020"}
        assert out["scope"].kind == "year"

    def test_medication_name_matches_the_patients_titles(self, store: EmbeddedDocumentStore) -> None:
        found, out = _ask(store, "When was metformin prescribed?")
        assert found == {"metformin"}
        assert out["query"].name_terms == ["metformin"]

    def test_name_of_a_record_the_caller_cannot_read_is_not_matched(self, store: EmbeddedDocumentStore) -> None:
        _, out = _ask(store, "HIV antibody in 2019")
        assert out["query"].titles == [] and "hiv" in out["query"].unmatched_terms

    def test_blood_pressure_names_its_codes(self, store: EmbeddedDocumentStore) -> None:
        found, _ = _ask(store, "blood pressure in 2020")
        assert found == {"bp-2020"}

    def test_packaged_terms_are_consistent(self) -> None:
        terms = observation_terms()
        assert terms["4548-4"].high == 5.6 and "%" in terms["4548-4"].units
        assert all(code in terms for codes in synonym_codes().values() for code in codes)


class TestAbnormal:
    def test_abnormal_labs_by_interpretation_own_range_and_packaged_range(self, store: EmbeddedDocumentStore) -> None:
        found, out = _ask(store, "Which laboratory results were abnormal in the last year?")
        # a1c-2019: packaged range; potassium: its own range; culture: its own interpretation "A".
        assert found == {"a1c-2019", "potassium-2020", "culture-2019"}
        assert out["query"].abnormal_only

    def test_out_of_range_phrase(self, store: EmbeddedDocumentStore) -> None:
        found, _ = _ask(store, "lab values out of range since 2015")
        assert found == {"a1c-2019", "a1c-2015", "potassium-2020", "culture-2019"}

    def test_flags_at_ingestion(self) -> None:
        own = numeric_observation("6298-4", 6.2, "mmol/L", 40, reference=ReferenceRange(3.5, 5.0, "mmol/L"))
        assert (own.interpretation, own.reference_source, own.abnormal) == ("H", "record", True)
        told = numeric_observation("6298-4", 4.0, "mmol/L", 40, interpretation="L")
        assert told.abnormal is True and told.reference_source == "record"
        packaged = numeric_observation("4548-4", 7.1, "%", 40)
        assert (packaged.interpretation, packaged.reference_source) == ("H", "default_adult_table")
        assert numeric_observation("4548-4", 7.1, "%", 12).interpretation is None  # adults only
        assert numeric_observation("4548-4", 7.1, "mmol/mol", 40).interpretation is None  # other unit
        assert adult_range("33914-3", "mL/min/{1.73_m2}") is not None  # both eGFR units Synthea writes


class TestActiveState:
    def test_active_medications_as_of_a_date(self, store: EmbeddedDocumentStore) -> None:
        found, out = _ask(store, "Which medications were active as of 2015-03-01?")
        # metformin: no end, status active; lisinopril: ended 2016; statin: ends 2030; amoxicillin: not started.
        assert found == {"metformin", "lisinopril", "statin"}
        assert out["query"].state and out["query"].notes

    def test_current_medications_exclude_ended_and_stopped(self, store: EmbeddedDocumentStore) -> None:
        found, _ = _ask(store, "What medications is the patient currently taking?")
        # lisinopril ended in 2016; amoxicillin is stopped without an end date.
        assert found == {"metformin", "statin"}

    @pytest.mark.parametrize("question", ["What medications is the patient on?",
                                          "Which meds is the patient still taking?",
                                          "What are the patient's ongoing prescriptions?"])
    def test_ways_of_asking_for_current_medications(self, store: EmbeddedDocumentStore, question: str) -> None:
        assert _ask(store, question)[0] == {"metformin", "statin"}

    def test_was_the_patient_on_during_a_year(self, store: EmbeddedDocumentStore) -> None:
        # Lisinopril ran 2012-2016; metformin and the statin never ended.
        assert _ask(store, "Which medications was the patient on in 2013?")[0] == {"metformin", "lisinopril",
                                                                                   "statin"}

    def test_conditions_active_at_the_last_visit(self, store: EmbeddedDocumentStore) -> None:
        found, out = _ask(store, "Which conditions were active at the last visit?")
        # sinusitis resolved before the visit; the fracture started after it.
        assert found == {"diabetes"}
        assert out["scope"].kind == "last_visit"

    def test_active_during_a_window(self, store: EmbeddedDocumentStore) -> None:
        found, _ = _ask(store, "active conditions in 2019")
        assert found == {"diabetes", "sinusitis"}

    def test_current_allergies_and_care_plans(self, store: EmbeddedDocumentStore) -> None:
        assert _ask(store, "current allergies")[0] == {"peanut"}
        assert _ask(store, "active care plans")[0] == {"plan"}


class TestScopingAndAccess:
    def test_other_patients_tenants_and_principals_never_appear(self, store: EmbeddedDocumentStore) -> None:
        found, _ = _ask(store, "abnormal lab results since 2019")
        assert found == {"a1c-2019", "potassium-2020", "culture-2019"}
        other, _ = _ask(store, "abnormal lab results since 2019", patient="p2")
        assert other == {"other-patient"}

    def test_patient_in_the_question(self, store: EmbeddedDocumentStore) -> None:
        resolver = RecordQueryResolver(store)
        out = resolver.run(question="lab results of patient 0a0b0c0d-0000-4000-8000-000000000001 in 2019",
                           as_of=AS_OF)
        assert out["query"].patient_id == "0a0b0c0d-0000-4000-8000-000000000001"
        assert {"field": "meta.patient_id", "operator": "==",
                "value": "0a0b0c0d-0000-4000-8000-000000000001"} in out["filters"]["conditions"]

    def test_last_visit_of_a_record_the_caller_cannot_read_is_not_used(self, tmp_path: Path) -> None:
        store = EmbeddedDocumentStore(str(tmp_path / "s.sqlite3"))
        store.write_documents([
            _record("seen", "encounter", "Checkup", "2019-01-01T00:00:00Z", encounter_id="seen"),
            _record("hidden", "encounter", "Psychiatry", "2020-01-01T00:00:00Z", encounter_id="hidden",
                    access=("group:restricted",)),
        ])
        _, out = _ask(store, "encounters at the last visit")
        assert out["scope"].encounter_id == "seen"


class TestComponents:
    def test_serialisation_round_trips(self) -> None:
        resolver = RecordQueryResolver(max_title_lookup=10)
        assert RecordQueryResolver.from_dict(resolver.to_dict()).max_title_lookup == 10
        builder = RecordTableBuilder(max_described_rows=3)
        assert RecordTableBuilder.from_dict(builder.to_dict()).max_described_rows == 3
        with pytest.raises(ValueError):
            RecordTableBuilder(max_described_rows=0)

    def test_window_pages_and_summarises_every_match(self, store: EmbeddedDocumentStore) -> None:
        retriever = RecordWindowRetriever(store, top_k=2)
        filters = restrict(SCOPE, {"operator": "AND", "conditions": [
            {"field": "meta.code", "operator": "==", "value": "4548-4"},
            {"field": "meta.patient_id", "operator": "==", "value": "p1"}]})
        first = retriever.run(query="", filters=filters)
        second = retriever.run(query="", filters=filters, offset=2)
        assert [d.id for d in first["documents"]] == ["a1c-2019", "a1c-2018"] and first["truncated"]
        assert [d.id for d in second["documents"]] == ["a1c-2015"]
        assert first["summary"]["count"] == 3 and first["summary"]["abnormal"] == 2
        assert first["summary"]["first_date"].startswith("2015")

    def test_table_rows_in_date_order_with_values_and_flags(self, store: EmbeddedDocumentStore) -> None:
        documents = [d for d in RECORDS if d.meta.get("code") == "4548-4" and d.meta["patient_id"] == "p1"
                     and d.meta["tenant"] == "t"]
        table = RecordTableBuilder().run(documents=documents)["table"]
        assert [r["record_id"] for r in table["rows"]] == ["a1c-2015", "a1c-2018", "a1c-2019"]
        last = table["rows"][-1]
        assert (last["value"], last["unit"], last["flag"], last["reference_range"], last["code"]) == (
            7.1, "%", "high", "< 5.6 %", "4548-4")
        assert table["complete"] and "3 matching records" in table["description"]

    def test_incomplete_table_says_so(self) -> None:
        table = RecordTableBuilder().run(documents=RECORDS[:2], total=5)["table"]
        assert not table["complete"] and "2 of 5" in describe_table(table)


def _pipeline(tmp_path: Path, store: EmbeddedDocumentStore, llm: ScriptedChatGenerator,
              max_scoped_records: int = 500) -> ATRAGPipeline:
    return ATRAGPipeline(
        ranked_retriever=RecordWindowRetriever(store), record_retriever=RecordWindowRetriever(store, top_k=500),
        topic_assigners=TenantTopicAssigners(tmp_path / "topics"), text_embedder=HashTextEmbedder,
        generator=CoTAnswerGenerator(llm), grader=AnswerGrader(llm),
        rewriter=QueryRewriter(llm), top_k=5, max_iterations=2, min_topic_probability=0.5,
        max_scoped_records=max_scoped_records, max_question_chars=2000,
    )


class TestATRAGRecordAnswers:
    def test_answer_carries_the_exact_record_table(self, tmp_path: Path, store: EmbeddedDocumentStore) -> None:
        llm = ScriptedChatGenerator(rules=[(GROUNDED, "Yes"), (USEFUL, "Yes")],
                                    default="Answer: HbA1c rose to 7.1% [3].")
        result = _pipeline(tmp_path, store, llm).run("HbA1c over the last three years", SCOPE, as_of=AS_OF,
                                                     patient_id="p1")
        # Checked against the records it was shown; the result cites the table's records, not prompt numbers.
        assert result.answer == "HbA1c rose to 7.1%." and result.answer_source == "model"
        retrieval = next(s for s in result.steps if s.kind == "retrieval")
        assert retrieval.outputs["topic"]["mode"] == TopicMode.EXACT_RECORDS
        table = next(s for s in result.steps if s.kind == "record_table").outputs["table"]
        assert result.steps[-1].kind == "grounding"
        assert [r["record_id"] for r in table["rows"]] == ["a1c-2018", "a1c-2019"]
        assert [c.document_id for c in result.citations] == ["a1c-2018", "a1c-2019"]
        assert result.citations[1].record["flag"] == "high"
        assert result.to_dict()["citations"][1]["record"]["value"] == 7.1

    def test_unusable_model_answer_falls_back_to_the_table(self, tmp_path: Path,
                                                           store: EmbeddedDocumentStore) -> None:
        llm = ScriptedChatGenerator(rules=[(GROUNDED, "No")], default="Answer: I don't know.")
        result = _pipeline(tmp_path, store, llm).run("Which laboratory results were abnormal in the last year?",
                                                     SCOPE, as_of=AS_OF, patient_id="p1")
        assert result.answer.startswith("3 matching records")
        assert result.steps[-1].outputs["answer_source"] == "record_table"
        assert {c.document_id for c in result.citations} == {"a1c-2019", "potassium-2020", "culture-2019"}

    def test_large_sets_are_paged_not_silently_cut(self, tmp_path: Path, store: EmbeddedDocumentStore) -> None:
        llm = ScriptedChatGenerator(rules=[(GROUNDED, "Yes"), (USEFUL, "Yes")], default="Answer: ok")
        pipeline = _pipeline(tmp_path, store, llm, max_scoped_records=2)
        first = pipeline.run("HbA1c since 2010", SCOPE, as_of=AS_OF, patient_id="p1")
        table = next(s for s in first.steps if s.kind == "record_table").outputs["table"]
        assert (table["total"], table["shown"], table["complete"]) == (3, 2, False)
        assert any("of 3" in note for note in table["notes"])
        rest = pipeline.run("HbA1c since 2010", SCOPE, as_of=AS_OF, patient_id="p1", record_offset=2)
        assert [c.document_id for c in rest.citations] == ["a1c-2015"]

    def test_other_principals_see_none_of_the_records(self, tmp_path: Path, store: EmbeddedDocumentStore) -> None:
        llm = ScriptedChatGenerator(rules=[(GROUNDED, "Yes"), (USEFUL, "Yes")], default="Answer: none")
        outsider = AccessScope(tenant="t", principals=frozenset({"billing"}))
        result = _pipeline(tmp_path, store, llm).run("lab results since 2010", outsider, as_of=AS_OF,
                                                     patient_id="p1")
        # Nothing they may read: answered at once, with no model call and nothing of the records.
        assert result.citations == [] and result.answer_source == "none" and result.totals.llm_calls == 0
        assert result.stop_reason == "no_readable_passage" and [s.kind for s in result.steps] == ["access"]
        other_tenant = AccessScope(tenant="u", principals=frozenset({"clinicians"}))
        result = _pipeline(tmp_path, store, llm).run("lab results since 2010", other_tenant, as_of=AS_OF,
                                                     patient_id="p1")
        assert [c.document_id for c in result.citations] == ["other-tenant"]
