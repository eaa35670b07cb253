"""The AT-RAG graph with a scripted model: grading, bounded rewrites, steps, time-scoped records."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from haystack import Document, component

from docqa.access import AccessScope, restrict, tenant_of
from docqa.components.answer_grader import AnswerGrader
from docqa.components.cot_answer_generator import CoTAnswerGenerator
from docqa.components.query_rewriter import QueryRewriter
from docqa.components.record_window_retriever import RecordWindowRetriever
from docqa.components.topic_assigner import TenantTopicAssigners, TopicAssigner
from docqa.ingestion.records import parse_fhir_bundle
from docqa.ingestion.records.fhir import KEPT_RESOURCE_TYPES
from docqa.pipelines.atrag import ATRAGPipeline, StopReason
from docqa.stores.embedded import EmbeddedDocumentStore
from docqa.stores.filters import StoredRecord, compile_filters
from tests.support.hash_embedder import HashTextEmbedder
from tests.support.scripted_chat import ScriptedChatGenerator

FHIR_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "records" / "synthea_fhir_r4"
SCOPE = AccessScope(tenant="t", principals=frozenset({"alice"}))
GROUNDED = r"supported by the documents"
USEFUL = r"answer the question \(Yes or No\)"
REWRITE = r"Write one better search query"


@component
class ListRetriever:
    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.queries: list[str] = []

    @component.output_types(documents=list[Document])
    def run(self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = 5) -> dict[str, Any]:
        self.queries.append(query)
        predicate = compile_filters(filters) if filters else (lambda _: True)
        return {"documents": [d for d in self.documents if predicate(StoredRecord(id=d.id, meta=d.meta))][:top_k]}


def _pipeline(tmp_path: Path, llm: ScriptedChatGenerator, documents: list[Document] | None = None,
              store: Any | None = None, max_iterations: int = 3) -> tuple[ATRAGPipeline, ListRetriever]:
    ranked = ListRetriever(documents or [
        Document(id="d1", content="Paris is the capital of France.", meta={"tenant": "t", "access": ["alice"]}),
        Document(id="d2", content="Secret plan.", meta={"tenant": "t", "access": ["bob"]}),
    ])
    store = store or EmbeddedDocumentStore(str(tmp_path / "store.sqlite3"))
    pipeline = ATRAGPipeline(
        ranked_retriever=ranked,
        record_retriever=RecordWindowRetriever(store, top_k=500),
        topic_assigners=TenantTopicAssigners(tmp_path / "topics"),
        text_embedder=HashTextEmbedder,
        generator=CoTAnswerGenerator(llm),
        grader=AnswerGrader(llm),
        rewriter=QueryRewriter(llm),
        top_k=5, max_iterations=max_iterations, min_topic_probability=0.5, max_scoped_records=500,
        max_question_chars=2000,
    )
    return pipeline, ranked


def _step(result: Any, kind: str) -> Any:
    return next(s for s in result.steps if s.kind == kind)


class TestGradedLoop:
    def test_accepted_answer_stops_the_loop(self, tmp_path: Path) -> None:
        llm = ScriptedChatGenerator(rules=[(GROUNDED, "Yes"), (USEFUL, "Yes")],
                                    default="[1] says so.\nAnswer: Paris [1].")
        pipeline, _ = _pipeline(tmp_path, llm)
        result = pipeline.run("What is the capital of France?", SCOPE)
        assert (result.answer, result.stop_reason) == ("Paris [1].", StopReason.ACCEPTED)
        # The topic-filtered retriever's parts are steps of their own (no topic model: nothing is embedded), and so
        # are the answer generator's prompt, model call and parser, and the grader's two judgements (each its prompt,
        # model call and parser), the router that asks the second only of a grounded answer, and the verdict.
        assert [(s.kind, s.name) for s in result.steps] == [
            ("time_scope", "record_query_resolver"), ("control", "controller"), ("routing", "round_joiner"),
            ("routing", "round_query"), ("routing", "mode_router"), ("routing", "retrieved_joiner"),
            ("retrieval", "ranked_retriever"), ("component", "topic_filter"), ("component", "search_joiner"),
            ("component", "search"), ("component", "retriever"), ("component", "topic_check"),
            ("routing", "prompt_joiner"), ("reasoning", "cot_answer_generator"), ("prompt", "cot_answer_prompt"),
            ("generation", "cot_answer_llm"), ("parse", "cot_answer_parser"), ("grading", "answer_grader"),
            ("grade_check", "grade_grounded"), ("prompt", "grade_grounded_prompt"), ("llm", "grade_grounded_llm"),
            ("parse", "grade_grounded_parser"), ("routing", "grade_router"), ("grade_check", "grade_useful"),
            ("prompt", "grade_useful_prompt"), ("llm", "grade_useful_llm"), ("parse", "grade_useful_parser"),
            ("grade_verdict", "grade_verdict"), ("control", "controller"), ("routing", "final_joiner"),
            ("record_table", "record_table"),
            ("grounding", "grounding")]
        assert [c.document_id for c in result.citations] == ["d1"]
        assert _step(result, "retrieval").outputs["topic"]["mode"] == "no_topic_model"
        assert _step(result, "reasoning").outputs["reasoning"] == "[1] says so."
        table = next(s for s in result.steps if s.kind == "record_table")
        assert table.outputs["answer_source"] == "model" and table.outputs["table"] is None
        assert result.steps[-1].outputs["answer_source"] == "model" and result.answer_source == "model"
        assert result.totals.llm_calls == 3

    def test_failed_grades_rewrite_until_n_and_return_the_last_answer(self, tmp_path: Path) -> None:
        llm = ScriptedChatGenerator(
            rules=[(REWRITE, ['{"query": "capital city France"}', '{"query": "France capital"}',
                              '{"query": "never used"}']), (GROUNDED, "No")],
            default="Answer: Lyon")
        pipeline, ranked = _pipeline(tmp_path, llm, max_iterations=3)
        result = pipeline.run("What is the capital of France?", SCOPE)
        kinds = [s.kind for s in result.steps]
        assert kinds.count("retrieval") == 3 and kinds.count("grading") == 3 and kinds.count("rewrite") == 2
        assert result.stop_reason == StopReason.MAX_ITERATIONS
        # The last answer is the result; in no passage (and graded ungrounded), it is shown as quoted passages,
        # labelled extracted: the grounding node drops the one-word answer no passage backs.
        grounding = [s for s in result.steps if s.kind == "grounding"][-1]
        assert grounding.inputs["answer"] == "Lyon" and grounding.outputs["reason"] == "unsupported_answer"
        assert result.answer_source == "extracted" and "Lyon" not in result.answer
        assert ranked.queries == ["What is the capital of France?", "capital city France", "France capital"]
        grades = [s.outputs for s in result.steps if s.kind == "grading"]
        assert all(g["passed"] is False and g["grounded"] is False for g in grades)
        # Usefulness is not asked of an unsupported answer: the grader's router sends it straight to the verdict.
        assert [s.name for s in result.steps if s.kind == "grade_check"] == ["grade_grounded"] * 3

    def test_rewriter_repeating_itself_stops_early(self, tmp_path: Path) -> None:
        llm = ScriptedChatGenerator(rules=[(REWRITE, '{"query": "What is the capital of France?"}'), (GROUNDED, "No")],
                                    default="Answer: Lyon")
        pipeline, ranked = _pipeline(tmp_path, llm, max_iterations=5)
        result = pipeline.run("What is the capital of France?", SCOPE)
        assert result.stop_reason == StopReason.NO_NEW_QUERY
        assert len(ranked.queries) == 1

    def test_garbage_from_the_model_terminates(self, tmp_path: Path) -> None:
        pipeline, _ = _pipeline(tmp_path, ScriptedChatGenerator(default="{{{ ]]] \x00"), max_iterations=4)
        result = pipeline.run("What is the capital of France?", SCOPE)
        assert result.stop_reason in (StopReason.NO_NEW_QUERY, StopReason.MAX_ITERATIONS)
        assert len([s for s in result.steps if s.kind == "retrieval"]) <= 4

    def test_only_permitted_documents_are_retrieved(self, tmp_path: Path) -> None:
        llm = ScriptedChatGenerator(rules=[(GROUNDED, "Yes"), (USEFUL, "Yes")], default="Answer: x")
        pipeline, _ = _pipeline(tmp_path, llm)
        result = pipeline.run("What is the plan?", SCOPE)
        retrieved = [d["id"] for d in _step(result, "retrieval").outputs["documents"]]
        assert retrieved == ["d1"]

    def test_config_names_prompts_and_bounds(self, tmp_path: Path) -> None:
        pipeline, _ = _pipeline(tmp_path, ScriptedChatGenerator(default="x"), max_iterations=2)
        config = pipeline.config()
        assert config["max_iterations"] == 2
        assert set(config["prompts"]) == {"atrag_answer", "atrag_grade_grounded", "atrag_grade_useful",
                                          "atrag_rewrite"}

    def test_invalid_iterations(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError):
            _pipeline(tmp_path, ScriptedChatGenerator(default="x"), max_iterations=0)


class TestTenantTopicModels:
    def _fit(self, tmp_path: Path, tenant: str) -> None:
        from docqa.topics import topic_model_dir
        from tests.support.hash_embedder import HashDocumentEmbedder

        words = {"capital": "capital city country france paris", "medication": "tablet oral dose daily"}
        documents = [Document(id=f"{kind}-{i}", content=f"{text} n{i}", meta={"record_type": kind})
                     for kind, text in words.items() for i in range(6)]
        embedded = HashDocumentEmbedder().run(documents=documents)["documents"]
        TopicAssigner(topic_model_dir(tmp_path / "topics", tenant)).fit(embedded)

    def test_the_topic_model_is_the_one_of_the_callers_tenant(self, tmp_path: Path) -> None:
        self._fit(tmp_path, "t")
        llm = ScriptedChatGenerator(rules=[(GROUNDED, "Yes"), (USEFUL, "Yes")], default="Answer: Paris [1].")
        pipeline, _ = _pipeline(tmp_path, llm)
        topic = _step(pipeline.run("What is the capital of France?", SCOPE), "retrieval").outputs["topic"]
        assert topic["mode"] != "no_topic_model" and topic["version"] == 1
        other = AccessScope(tenant="u", principals=frozenset({"alice"}))
        assert _step(pipeline.run("What is the capital of France?", other),
                     "retrieval").outputs["topic"]["mode"] == "no_topic_model"

    def test_filters_naming_another_tenant_never_pick_its_model(self, tmp_path: Path) -> None:
        self._fit(tmp_path, "t")
        llm = ScriptedChatGenerator(rules=[(GROUNDED, "Yes"), (USEFUL, "Yes")], default="Answer: x")
        pipeline, _ = _pipeline(tmp_path, llm)
        other = AccessScope(tenant="u", principals=frozenset({"alice"}))
        result = pipeline.run("What is the capital of France?", other,
                              filters={"field": "meta.tenant", "operator": "==", "value": "t"})
        assert _step(result, "retrieval").outputs["topic"]["mode"] == "no_topic_model"
        assert tenant_of(restrict(other, {"field": "meta.tenant", "operator": "==", "value": "t"})) is None
        assert tenant_of(restrict(other, None)) == "u" and tenant_of(None) is None

    def test_the_tenant_is_read_through_the_ands_a_strategy_adds(self) -> None:
        # A record window AND-s docqa's filters with its own: the tenant's topic model must still be found.
        scope = AccessScope(tenant="t", principals=frozenset({"alice"}))
        window = {"field": "meta.patient_id", "operator": "==", "value": "p1"}
        assert tenant_of({"operator": "AND", "conditions": [restrict(scope, None), window]}) == "t"
        other = restrict(AccessScope(tenant="u", principals=frozenset({"alice"})), None)
        assert tenant_of({"operator": "AND", "conditions": [restrict(scope, None), other]}) is None
        # An OR does not require its members: no tenant is read through it.
        assert tenant_of({"operator": "OR", "conditions": [restrict(scope, None), window]}) is None


def _source_dates(resource: dict[str, Any]) -> str | None:
    for key in ("effectiveDateTime", "onsetDateTime", "authoredOn", "occurrenceDateTime", "recordedDate"):
        if resource.get(key):
            return resource[key]
    for key in ("period", "performedPeriod", "effectivePeriod"):
        if (resource.get(key) or {}).get("start"):
            return resource[key]["start"]
    return None


@pytest.mark.skipif(not FHIR_DIR.is_dir(), reason=f"shared Synthea data not found at {FHIR_DIR}")
class TestTimeScopedRecords:
    def test_retrieved_set_is_exactly_the_patients_records_in_the_window(self, tmp_path: Path) -> None:
        bundles = sorted(FHIR_DIR.glob("*.json"))[:2]
        store = EmbeddedDocumentStore(str(tmp_path / "store.sqlite3"))
        for path in bundles:
            store.write_documents(parse_fhir_bundle(path, tenant="t", access=["alice"]))
        source = json.loads(bundles[0].read_text())
        patient = next(e["resource"]["id"] for e in source["entry"] if e["resource"]["resourceType"] == "Patient")
        as_of = "2015-06-01T00:00:00+00:00"
        start, end = datetime.fromisoformat("2013-06-01T00:00:00+00:00"), datetime.fromisoformat(as_of)
        gold = {
            e["resource"]["id"] for e in source["entry"]
            if e["resource"]["resourceType"] in KEPT_RESOURCE_TYPES and _source_dates(e["resource"])
            and start <= datetime.fromisoformat(_source_dates(e["resource"])) <= end
        }
        assert gold, "the chosen window should hold records"
        llm = ScriptedChatGenerator(rules=[(GROUNDED, "Yes"), (USEFUL, "Yes")], default="Answer: ok")
        pipeline, ranked = _pipeline(tmp_path, llm, store=store)
        result = pipeline.run("What happened to the patient in the last two years?", SCOPE, as_of=as_of,
                              patient_id=patient)
        retrieval = next(s for s in result.steps if s.kind == "retrieval")
        retrieved = {d["source"].rsplit("/", 1)[1] for d in retrieval.outputs["documents"]}
        assert retrieved == gold
        assert ranked.queries == []  # a window is read in full, not ranked
        assert result.steps[0].outputs["scope"]["start_utc"] == "2013-06-01T00:00:00Z"

    def test_records_the_caller_may_not_read_stay_out_of_the_window(self, tmp_path: Path) -> None:
        store = EmbeddedDocumentStore(str(tmp_path / "store.sqlite3"))
        base = {"tenant": "t", "patient_id": "p1", "record_type": "lab_result",
                "effective_start_utc": "2020-01-01T00:00:00Z"}
        store.write_documents([
            Document(id="mine", content="Glucose 90", meta={**base, "access": ["alice"]}),
            Document(id="hidden", content="HIV test", meta={**base, "access": ["group:restricted"]}),
            Document(id="old", content="Glucose 80", meta={**base, "access": ["alice"],
                                                          "effective_start_utc": "2010-01-01T00:00:00Z"}),
        ])
        llm = ScriptedChatGenerator(rules=[(GROUNDED, "Yes"), (USEFUL, "Yes")], default="Answer: ok")
        pipeline, _ = _pipeline(tmp_path, llm, store=store)
        result = pipeline.run("Lab results in the last year?", SCOPE, as_of="2020-06-01T00:00:00Z", patient_id="p1")
        retrieval = next(s for s in result.steps if s.kind == "retrieval")
        assert [d["id"] for d in retrieval.outputs["documents"]] == ["mine"]
        assert "HIV" not in json.dumps([s.to_dict() for s in result.steps])


class TestBuilderAndRefit:
    def _runtime(self, tmp_path: Path, llm: ScriptedChatGenerator) -> Any:
        from docqa.runtime import Runtime
        from docqa.settings import Settings

        store = EmbeddedDocumentStore(str(tmp_path / "store.sqlite3"))
        return Runtime(Settings(data_dir=tmp_path), document_store=store, chat_generator_factory=lambda role: llm)

    def test_registered_builder_answers_a_scoped_question(self, tmp_path: Path) -> None:
        from docqa.pipelines.registry import build_pipeline

        llm = ScriptedChatGenerator(rules=[(GROUNDED, "Yes"), (USEFUL, "Yes")], default="Answer: ok")
        runtime = self._runtime(tmp_path, llm)
        runtime.document_store.write_documents([Document(id="r1", content="Glucose 90", meta={
            "tenant": "t", "access": ["alice"], "patient_id": "p1", "record_type": "lab_result",
            "effective_start_utc": "2020-01-01T00:00:00Z"})])
        pipeline = build_pipeline("atrag", runtime, max_iterations=2, max_prompt_documents=3)
        result = pipeline.run("Lab results since 2019?", SCOPE, as_of="2020-06-01T00:00:00Z", patient_id="p1")
        assert result.stop_reason == StopReason.ACCEPTED
        assert [c.document_id for c in result.citations] == ["r1"]
        assert pipeline.config()["max_iterations"] == 2 and pipeline.generator.max_documents == 3

    def test_refit_fits_a_new_version_and_retags_the_tenant(self, tmp_path: Path) -> None:
        from docqa.topics import refit_topic_model, topic_model_dir
        from tests.support.hash_embedder import HashDocumentEmbedder

        runtime = self._runtime(tmp_path, ScriptedChatGenerator(default="x"))
        words = {"lab_result": "glucose cholesterol serum panel", "medication": "tablet oral dose daily"}
        documents = [Document(id=f"{kind}-{i}", content=f"{text} n{i}", meta={
            "tenant": "t", "access": ["alice"], "record_type": kind}) for kind, text in words.items() for i in range(6)]
        other = Document(id="other", content="glucose", meta={"tenant": "u", "access": ["alice"]})
        runtime.document_store.write_documents(HashDocumentEmbedder().run(documents=[*documents, other])["documents"])
        info = refit_topic_model(runtime, "t")
        assert (info.version, info.mode, info.n_documents) == (1, "supervised", 12)
        assert refit_topic_model(runtime, "t").version == 2
        stored = {d.id: d.meta for d in runtime.document_store.filter_documents()}
        assert {stored[d.id].get("topic_version") for d in documents} == {2}
        assert "topic_id" not in stored["other"]
        assert topic_model_dir(tmp_path, "t") != topic_model_dir(tmp_path, "t/")
