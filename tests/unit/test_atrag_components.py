"""AT-RAG LLM components with a scripted model, the time-scope resolver, and the record-window retriever."""

from __future__ import annotations

from pathlib import Path

import pytest
from haystack import Document
from haystack.core.serialization import allow_deserialization_module
from haystack.document_stores.in_memory import InMemoryDocumentStore

from docqa.components.answer_grader import AnswerGrader, GradeVerdict
from docqa.components.cot_answer_generator import CoTAnswerGenerator, split_reasoning
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.components.query_rewriter import MAX_QUERY_CHARS, QueryRewriter
from docqa.components.record_window_retriever import RecordWindowRetriever
from docqa.components.time_scope_resolver import TimeScopeResolver, scope_filters
from docqa.stores.embedded import EmbeddedDocumentStore
from tests.support.scripted_chat import ScriptedChatGenerator

AS_OF = "2020-06-01T00:00:00Z"
DOCS = [Document(id="a", content="Glucose 120 mg/dL (high)."), Document(id="b", content="Visit for flu.")]


class TestCoTAnswerGenerator:
    def test_splits_reasoning_and_answer_and_maps_citations(self) -> None:
        llm = ScriptedChatGenerator(default="Document [2] mentions the flu visit.\nAnswer: A flu visit [2].")
        out = CoTAnswerGenerator(llm).run(question="Why the visit?", documents=DOCS)
        assert out["reasoning"] == "Document [2] mentions the flu visit."
        assert out["answer"] == "A flu visit [2]."
        assert [d.id for d in out["cited_documents"]] == ["b"]

    def test_unmarked_output_is_the_answer_and_cites_the_context(self) -> None:
        out = CoTAnswerGenerator(ScriptedChatGenerator(default="flu")).run(question="q", documents=DOCS)
        assert (out["reasoning"], out["answer"]) == ("", "flu")
        assert out["cited_documents"] == DOCS

    def test_prompt_is_bounded(self) -> None:
        llm = ScriptedChatGenerator(default="Answer: x")
        many = [Document(id=str(i), content="word " * 500) for i in range(30)]
        out = CoTAnswerGenerator(llm, max_documents=3, max_document_chars=100).run(question="q", documents=many)
        assert len(out["prompt_documents"]) == 3
        assert "[4]" not in llm.calls[0]["prompt"]
        assert len(llm.calls[0]["prompt"]) < 1500

    def test_split_reasoning_uses_the_last_marker(self) -> None:
        assert split_reasoning("Reasoning: a\nAnswer: b\nAnswer: c") == ("a\nAnswer: b", "c")

    def test_round_trip(self) -> None:
        allow_deserialization_module("tests.support.*")
        generator = CoTAnswerGenerator(ScriptedChatGenerator(default="x"), max_documents=4)
        again = CoTAnswerGenerator.from_dict(generator.to_dict())
        assert again.max_documents == 4 and again.prompt_template == generator.prompt_template


class TestAnswerGrader:
    def test_passes_when_grounded_and_useful(self) -> None:
        llm = ScriptedChatGenerator(rules=[(r"supported by the documents", "Yes"), (r"answer the question", "Yes")])
        out = AnswerGrader(llm).run(question="q", answer="flu [2]", documents=DOCS)
        assert out == {"passed": True, "grounded": True, "useful": True, "feedback": ""}
        assert all(call["generation_kwargs"].get("response_format") for call in llm.calls)

    def test_hallucination_fails_before_usefulness_is_asked(self) -> None:
        llm = ScriptedChatGenerator(rules=[(r"supported by the documents", '{"answer": "No"}')], default="Yes")
        out = AnswerGrader(llm).run(question="q", answer="made up", documents=DOCS)
        assert (out["passed"], out["grounded"], out["useful"]) == (False, False, None)
        assert len(llm.calls) == 1 and "not supported" in out["feedback"]

    def test_not_useful_fails(self) -> None:
        llm = ScriptedChatGenerator(rules=[(r"supported by the documents", "Yes")], default="No")
        out = AnswerGrader(llm).run(question="q", answer="I do not know", documents=DOCS)
        assert (out["passed"], out["useful"]) == (False, False)
        assert "does not address" in out["feedback"]

    def test_unreadable_verdict_fails(self) -> None:
        out = AnswerGrader(ScriptedChatGenerator(default="<<garbage>>")).run(question="q", answer="a", documents=DOCS)
        assert out["passed"] is False and out["grounded"] is None

    def test_empty_answer_fails_without_a_call(self) -> None:
        llm = ScriptedChatGenerator(default="Yes")
        assert AnswerGrader(llm).run(question="q", answer="  ", documents=DOCS)["passed"] is False
        assert llm.calls == []

    def test_prompts_and_calls_are_the_packaged_ones_rendered_as_before(self) -> None:
        llm = ScriptedChatGenerator(default="Yes")
        many = [Document(id=str(i), content="word\nword " * 50) for i in range(25)]
        out = AnswerGrader(llm, max_documents=3, max_document_chars=40).run(question="q?", answer="a", documents=many)
        assert out["passed"] is True
        assert [call["prompt"] for call in llm.calls] == [
            render_prompt(load_prompt("atrag_grade_grounded"), answer="a", documents=many[:3], max_document_chars=40),
            render_prompt(load_prompt("atrag_grade_useful"), question="q?", answer="a"),
        ]
        assert [call["generation_kwargs"]["max_tokens"] for call in llm.calls] == [16, 16]
        assert all(call["generation_kwargs"]["response_format"]["type"] == "json_schema" for call in llm.calls)

    def test_a_deployer_template_is_used_and_round_trips(self, tmp_path: Path) -> None:
        allow_deserialization_module("tests.support.*")
        (tmp_path / "atrag_grade_useful.txt").write_text("USEFUL? {{ question }} / {{ answer }}")
        llm = ScriptedChatGenerator(default="Yes")
        grader = AnswerGrader(llm, useful_template=load_prompt("atrag_grade_useful", tmp_path), max_documents=4)
        grader.run(question="q?", answer="a", documents=DOCS)
        assert llm.calls[1]["prompt"] == "USEFUL? q? / a"
        data = grader.to_dict()
        assert data["init_parameters"]["useful_template"] == "USEFUL? {{ question }} / {{ answer }}"
        again = AnswerGrader.from_dict(grader.to_dict())
        assert (again.useful_template, again.grounded_template, again.max_documents, again.max_document_chars) == (
            grader.useful_template, load_prompt("atrag_grade_grounded"), 4, 600)
        assert again.to_dict() == grader.to_dict()

    def test_its_inner_nodes_are_the_two_judgements_a_router_and_the_verdict(self) -> None:
        grader = AnswerGrader(ScriptedChatGenerator(default="Yes"))
        assert grader.step_kinds == {
            "grade_grounded": "grade_check", "grade_grounded_prompt": "prompt", "grade_grounded_llm": "llm",
            "grade_grounded_parser": "parse", "grade_router": "routing", "grade_useful": "grade_check",
            "grade_useful_prompt": "prompt", "grade_useful_llm": "llm", "grade_useful_parser": "parse",
            "grade_verdict": "grade_verdict"}

    @pytest.mark.parametrize(
        ("grounded", "useful", "expected"),
        [
            (False, None, (False, False, None, "the answer is not supported by the documents")),
            (None, None, (False, None, None, "the grader could not tell whether the answer is supported")),
            (True, None, (False, True, None, "the grader could not tell whether the answer addresses the question")),
            (True, False, (False, True, False, "the answer does not address the question")),
            (True, True, (True, True, True, "")),
        ],
    )
    def test_the_verdict_step(self, grounded, useful, expected) -> None:
        out = GradeVerdict().run(grounded=grounded, useful=useful)
        assert (out["passed"], out["grounded"], out["useful"], out["feedback"]) == expected


class TestQueryRewriter:
    def test_new_query(self) -> None:
        llm = ScriptedChatGenerator(default='{"query": "  glucose   results 2019 "}')
        out = QueryRewriter(llm).run(question="q", previous_queries=["q"], feedback="not supported")
        assert out["query"] == "glucose results 2019"
        assert "not supported" in llm.calls[0]["prompt"]

    @pytest.mark.parametrize("reply", ['{"query": "Q"}', '{"query": ""}', "not json", '{"other": 1}', '{"query": 5}'])
    def test_repeated_empty_or_malformed_gives_none(self, reply: str) -> None:
        out = QueryRewriter(ScriptedChatGenerator(default=reply)).run(question="q", previous_queries=["q"])
        assert out["query"] is None

    def test_long_query_is_trimmed(self) -> None:
        reply = '{"query": "' + "word " * 200 + '"}'
        out = QueryRewriter(ScriptedChatGenerator(default=reply)).run(question="q", previous_queries=["q"])
        assert len(out["query"]) <= MAX_QUERY_CHARS


class TestTimeScopeResolver:
    @pytest.mark.parametrize(("question", "start"), [
        ("abnormal lab results within the last year", "2019-06-01T00:00:00Z"),
        ("what happened in the last two years", "2018-06-01T00:00:00Z"),
        ("medications over the last 6 months", "2019-12-01T00:00:00Z"),
        ("conditions diagnosed since 2015", "2015-01-01T00:00:00Z"),
        ("visits in the past 3 weeks", "2020-05-11T00:00:00Z"),
    ])
    def test_windows_relative_to_as_of(self, question: str, start: str) -> None:
        scope = TimeScopeResolver().run(question=question, as_of=AS_OF, patient_id="p1")["scope"]
        assert (scope.start_utc, scope.end_utc, scope.patient_id) == (start, AS_OF, "p1")

    def test_filters_cover_patient_window_and_abnormal(self) -> None:
        out = TimeScopeResolver().run(question="abnormal results in the last year", as_of="2020-06-01T02:00:00+02:00",
                                      patient_id="p1")
        conditions = out["filters"]["conditions"]
        assert {"field": "meta.patient_id", "operator": "==", "value": "p1"} in conditions
        assert {"field": "meta.effective_start_utc", "operator": "<=", "value": AS_OF} in conditions
        assert {"field": "meta.abnormal", "operator": "==", "value": True} in conditions

    def test_year_and_patient_from_question(self) -> None:
        question = "What happened to patient ba18818d-faef-44cd-9744-b12d8973d402 in 2019?"
        scope = TimeScopeResolver().run(question=question, as_of=AS_OF)["scope"]
        assert scope.patient_id == "ba18818d-faef-44cd-9744-b12d8973d402"
        assert (scope.start_utc, scope.end_utc) == ("2019-01-01T00:00:00Z", "2019-12-31T23:59:59Z")

    def test_no_time_phrase_and_no_patient_means_no_filters(self) -> None:
        out = TimeScopeResolver().run(question="What is diabetes?", as_of=AS_OF)
        assert out["filters"] is None and out["scope"].kind == "none"

    def test_last_visit_uses_latest_permitted_encounter_before_as_of(self, tmp_path: Path) -> None:
        store = EmbeddedDocumentStore(str(tmp_path / "store.sqlite3"))
        store.write_documents([
            _encounter("e1", "2019-01-01T10:00:00Z", ["everyone"]),
            _encounter("e2", "2020-03-01T10:00:00Z", ["everyone"]),
            _encounter("e3", "2020-04-01T10:00:00Z", ["group:secret"]),
            _encounter("e4", "2021-01-01T10:00:00Z", ["everyone"]),
        ])
        access = {"field": "meta.access", "operator": "in", "value": ["everyone"]}
        out = TimeScopeResolver(store).run(question="When was the last doctor visit and why?", as_of=AS_OF,
                                           patient_id="p1", filters=access)
        assert out["scope"].kind == "last_visit" and out["scope"].encounter_id == "e2"
        assert {"field": "meta.encounter_id", "operator": "==", "value": "e2"} in out["filters"]["conditions"]

    def test_last_visit_without_store_is_unscoped(self) -> None:
        scope = TimeScopeResolver().run(question="last visit?", as_of=AS_OF, patient_id="p1")["scope"]
        assert scope.kind == "none"
        assert scope_filters(scope) == {"operator": "AND", "conditions": [
            {"field": "meta.patient_id", "operator": "==", "value": "p1"}]}

    def test_bad_as_of_is_rejected(self) -> None:
        with pytest.raises(ValueError):
            TimeScopeResolver().run(question="last year", as_of="yesterday")


def _encounter(encounter_id: str, when: str, access: list[str]) -> Document:
    return Document(id=encounter_id, content=f"Encounter {encounter_id}", meta={
        "tenant": "t", "access": access, "patient_id": "p1", "record_type": "encounter",
        "encounter_id": encounter_id, "effective_start_utc": when})


class TestRecordWindowRetriever:
    def test_all_matches_newest_first_with_bound(self) -> None:
        store = InMemoryDocumentStore()
        store.write_documents([_encounter(f"e{i}", f"20{10 + i}-01-01T00:00:00Z", ["everyone"]) for i in range(5)])
        retriever = RecordWindowRetriever(store, top_k=3)
        out = retriever.run(query="", filters={"field": "meta.patient_id", "operator": "==", "value": "p1"})
        assert [d.id for d in out["documents"]] == ["e4", "e3", "e2"]
        assert (out["total"], out["truncated"]) == (5, True)
        window = {"field": "meta.effective_start_utc", "operator": ">=", "value": "2013-01-01T00:00:00Z"}
        scoped = retriever.run(query="", filters={"field": "meta.patient_id", "operator": "==", "value": "p1"},
                               scope_filters=window)
        assert [d.id for d in scoped["documents"]] == ["e4", "e3"] and scoped["total"] == 2

    def test_unfiltered_is_refused(self) -> None:
        with pytest.raises(ValueError):
            RecordWindowRetriever(InMemoryDocumentStore()).run(query="x")

    def test_round_trip(self) -> None:
        retriever = RecordWindowRetriever(InMemoryDocumentStore(), top_k=7)
        assert RecordWindowRetriever.from_dict(retriever.to_dict()).top_k == 7


class TestATRAGController:
    def _resolved(self, store: EmbeddedDocumentStore, question: str, patient: str | None = "p1") -> dict:
        from docqa.components.record_query_resolver import RecordQueryResolver

        out = RecordQueryResolver(store).run(question=question, as_of=AS_OF, patient_id=patient)
        return {"scope": out["scope"], "record_query": out["query"], "record_filters": out["filters"]}

    @pytest.mark.parametrize(("question", "patient", "mode"), [
        ("Lab results since 2019?", "p1", "exact_records"),       # names what (labs) and when: exact
        ("What happened in the last two years?", "p1", "record_window"),
        ("What is the capital of France?", None, "ranked"),
    ])
    def test_the_first_round_says_how_to_retrieve(self, tmp_path: Path, question: str, patient: str | None,
                                                  mode: str) -> None:
        from docqa.components.atrag_controller import ATRAGController
        from docqa.components.record_query_resolver import RecordQuery
        from docqa.components.time_scope_resolver import TimeScope

        store = EmbeddedDocumentStore(str(tmp_path / "store.sqlite3"))
        state = ATRAGController().run(question=question, **self._resolved(store, question, patient))["state"]
        assert (state.mode, state.queries) == (mode, (question,))
        assert isinstance(state.record_query, RecordQuery) and isinstance(state.scope, TimeScope)
        assert (state.filters is None) == (mode == "ranked")

    def test_graded_rounds_stop_or_ask_for_a_rewrite(self) -> None:
        import copy

        from docqa.components.atrag_controller import ATRAGController, ATRAGRound

        controller = ATRAGController(max_iterations=2)
        first = ATRAGRound(queries=["q"], mode="ranked")
        accepted = controller.run(question="q", state=first, answer="a", cited_documents=DOCS, passed=True)
        assert set(accepted) == {"final"} and accepted["final"].stop_reason == "answer_accepted"
        assert list(accepted["final"].cited_documents) == DOCS
        retry = controller.run(question="q", state=first, answer="a", passed=False, feedback="unsupported")
        assert (retry["previous_queries"], retry["rewrite_feedback"]) == (["q"], "unsupported")
        assert retry["pending"].stop_reason == "no_new_query" and "final" not in retry
        last = controller.run(question="q", state=first.replace(queries=["q", "q2"]), answer="b", passed=False)
        assert last["final"].stop_reason == "max_iterations" and last["final"].answer == "b"
        copied = copy.deepcopy(accepted["final"])  # Haystack copies a round at every hop: a real copy
        assert copied == accepted["final"] and copied is not accepted["final"]
        assert copied.scope is not accepted["final"].scope and copied.record_query is not first.record_query
        assert ATRAGController.from_dict(controller.to_dict()).max_iterations == 2
        with pytest.raises(ValueError):
            ATRAGController(max_iterations=0)
        with pytest.raises(ValueError):
            controller.run(question="q")
