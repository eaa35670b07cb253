"""Control flow of the ReSP graph with a scripted LLM and a filter-honouring keyword retriever."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from haystack.dataclasses import ChatMessage

from docqa.access import AccessScope, restrict
from docqa.components.sub_question_guard import SubQuestionGuard
from docqa.errors import InvalidQuestionError
from docqa.pipelines import resp
from docqa.pipelines.registry import available_pipelines
from docqa.run_control import LLMBudgetExceededError, RunControl, RunStopped
from tests.support.hash_embedder import HashDocumentEmbedder
from tests.support.resp_fakes import (
    GENERATE,
    GLOBAL,
    JUDGE,
    LOCAL,
    PLAN,
    KeywordRetriever,
    build,
    decisions,
    doc,
    steps_of,
)
from tests.support.scripted_chat import ScriptedChatGenerator

SCOPE = AccessScope("acme", frozenset({"alice"}))


def _calls_within(result: Any, step: Any) -> int:
    """The LLM calls recorded on a step and on its inner steps at any depth (a parent opens before its children)."""
    inside = {step.index}
    for other in result.steps:
        if other.parent in inside:
            inside.add(other.index)
    return sum(len(s.outputs.get("llm_calls", [])) for s in result.steps if s.index in inside)


def _prompts(llm: ScriptedChatGenerator, pattern: str) -> list[str]:
    import re

    return [call["prompt"] for call in llm.calls if re.search(pattern, call["prompt"], re.DOTALL)]


class TestOverPlanning:
    """The paper's "Twisted Fortune" case: the first retrieval already answers, so the loop must stop there."""

    def setup_method(self) -> None:
        self.retriever = KeywordRetriever(
            [
                doc("tf", "Twisted Fortune is a 1997 film directed by Lena Hart.", "Twisted Fortune"),
                doc("lh", "Lena Hart is an American film director born in Ohio.", "Lena Hart"),
            ]
        )
        self.llm = ScriptedChatGenerator(
            rules=[
                (JUDGE, '{"answer": "Yes"}'),
                (PLAN, "Where was Lena Hart born?"),
                (GLOBAL, "Twisted Fortune was directed by Lena Hart, an American director. [DONE]"),
                (GENERATE, "American"),
            ]
        )

    def test_stops_on_the_first_yes(self) -> None:
        # Two passages, so that the one saying "American" is among them: an answer no passage backs is not shown.
        result = build(self.llm, self.retriever, top_k=2).run("What nationality is the director of Twisted Fortune?",
                                                              SCOPE)

        assert result.stop_reason == resp.STOP_JUDGED_SUFFICIENT
        assert result.answer == "American"
        assert [call["query"] for call in self.retriever.calls] == [
            "What nationality is the director of Twisted Fortune?"
        ]
        assert steps_of(result, "plan") == []
        assert _prompts(self.llm, PLAN) == []
        assert [s.outputs["verdict"] for s in steps_of(result, "judgement")] == ["yes"]

    def test_records_every_step_in_order(self) -> None:
        pipeline = build(self.llm, self.retriever, top_k=2)
        result = pipeline.run("What nationality is the director of Twisted Fortune?", SCOPE)

        work = [s for s in result.steps if s.kind != "control" and s.parent is None]
        assert [(s.kind, s.name) for s in work] == [
            ("retrieval", "hybrid_retriever"),
            ("summary", "dual_function_summarizer"),
            ("judgement", "resp_judge"),
            ("generation", "memory_answer_generator"),
            ("grounding", "grounding"),
        ]
        # A prompted LLM step's prompt, model call and parser are its child steps; the call is on the middle one.
        # The summarizer's request, its global evidence step (the local one has no sub-question to answer in the
        # first iteration) and its memory update are the summary step's children.
        inner = [(s.kind, s.name, result.steps[s.parent].name) for s in result.steps if s.parent is not None]
        assert inner == [
            ("prompt", "summary_request", "dual_function_summarizer"),
            ("global_evidence", "resp_global_evidence", "dual_function_summarizer"),
            ("prompt", "resp_global_evidence_prompt", "resp_global_evidence"),
            ("llm", "resp_global_evidence_llm", "resp_global_evidence"),
            ("parse", "resp_global_evidence_parser", "resp_global_evidence"),
            ("memory", "memory_update", "dual_function_summarizer"),
            ("prompt", "resp_judge_prompt", "resp_judge"),
            ("llm", "resp_judge_llm", "resp_judge"),
            ("parse", "resp_judge_parser", "resp_judge"),
            ("prompt", "resp_generate_prompt", "memory_answer_generator"),
            ("generation", "resp_generate_llm", "memory_answer_generator"),
            ("parse", "resp_generate_parser", "memory_answer_generator"),
        ]
        # Between them, the controller decides what comes next (its state returns through the loop joiner).
        assert [(d["event"], d["next"]) for d in decisions(result)] == [
            ("start", "retrieve"),
            ("retrieved", "summarize"),
            ("summarized", "judge"),
            ("judged", "answer"),
        ]
        retrieved = work[0].outputs["documents"]
        assert {d["id"] for d in retrieved} == {"tf", "lh"}
        assert all(isinstance(d["score"], float) for d in retrieved)
        assert work[1].outputs["global_evidence"]["summary"].startswith("Twisted Fortune was directed")
        assert result.totals.llm_calls == 3 == len(self.llm.calls)
        calls = {s.name: len(s.outputs.get("llm_calls", [])) for s in result.steps if s.outputs.get("llm_calls")}
        assert calls == {"resp_global_evidence_llm": 1, "resp_judge_llm": 1, "resp_generate_llm": 1}
        assert not any(s.outputs.get("llm_calls") for s in result.steps if s.kind == "control")


class TestRepetitivePlanning:
    """The paper's "Rachelle Amy Beinart" case: the planner keeps asking what was already asked."""

    QUESTION = "In which city was the martial arts school of Rachelle Amy Beinart founded?"

    def setup_method(self) -> None:
        self.retriever = KeywordRetriever(
            [
                doc(
                    "rab",
                    "Rachelle Amy Beinart is an actress who trained in taekwondo at the Jhoon Rhee school.",
                    "Rachelle Amy Beinart",
                ),
                doc("jr", "The Jhoon Rhee school of taekwondo was founded in Washington.", "Jhoon Rhee"),
                doc("tk", "Taekwondo is a Korean martial art.", "Taekwondo"),
            ]
        )

    def test_never_retrieves_the_same_sub_question_twice(self) -> None:
        llm = ScriptedChatGenerator(
            rules=[
                (JUDGE, "No"),
                (
                    PLAN,
                    [
                        "Where was the Jhoon Rhee school founded?",
                        "Where was the Jhoon Rhee school founded?",
                        "where was Jhoon Rhee school founded",
                    ],
                ),
                (GLOBAL, "Rachelle Amy Beinart trained in taekwondo. [DONE]"),
                (LOCAL, "Yes, the Jhoon Rhee school."),
                (GENERATE, "Washington"),
            ]
        )
        result = build(llm, self.retriever, max_iterations=6).run(self.QUESTION, SCOPE)

        queries = [call["query"] for call in self.retriever.calls]
        assert queries == [self.QUESTION, "Where was the Jhoon Rhee school founded?"]
        assert result.stop_reason == resp.STOP_REPEATED_PLAN
        last_plans = steps_of(result, "plan")[-2:]
        assert [s.inputs["attempt"] for s in last_plans] == [1, 2]
        assert all(s.outputs["repeat_check"]["repeated"] for s in last_plans)
        # The re-plan quotes the refused sub-question back to the model.
        assert "repeats one already retrieved" in _prompts(llm, PLAN)[-1]
        assert result.answer == "Washington"

    def test_a_replan_that_is_new_continues_the_loop(self) -> None:
        llm = ScriptedChatGenerator(
            rules=[
                (JUDGE, ["No", "Yes"]),
                (PLAN, [self.QUESTION, "Where was the Jhoon Rhee school founded?"]),
                (GLOBAL, "Beinart trained at the Jhoon Rhee school. [DONE]"),
                (LOCAL, "Yes, Washington."),
                (GENERATE, "Washington"),
            ]
        )
        result = build(llm, self.retriever).run(self.QUESTION, SCOPE)

        assert [c["query"] for c in self.retriever.calls] == [self.QUESTION, "Where was the Jhoon Rhee school founded?"]
        plans = steps_of(result, "plan")
        assert [s.outputs["accepted"] for s in plans] == [False, True]
        assert plans[0].outputs["repeat_check"]["method"] == "text"

    def test_a_paraphrase_is_caught_by_the_guard_s_embedder_step(self) -> None:
        # The guard's embeddings are steps of the trace (its embedder is a node of the plan step's graph), not
        # calls hidden inside the plan parser.
        llm = ScriptedChatGenerator(
            rules=[
                (JUDGE, "No"),
                (PLAN, ["Where was the Jhoon Rhee school founded?", "Jhoon Rhee school: where was it founded?"]),
                (GLOBAL, "Rachelle Amy Beinart trained in taekwondo. [DONE]"),
                (LOCAL, "Yes, the Jhoon Rhee school."),
                (GENERATE, "Washington"),
            ]
        )
        guard = SubQuestionGuard(HashDocumentEmbedder(), similarity_threshold=0.7)
        result = build(llm, self.retriever, max_iterations=3, guard=guard).run(self.QUESTION, SCOPE)

        assert [c["query"] for c in self.retriever.calls] == [self.QUESTION, "Where was the Jhoon Rhee school founded?"]
        plans = steps_of(result, "plan")
        assert [s.outputs["accepted"] for s in plans] == [True, False, False]
        assert plans[1].outputs["repeat_check"]["method"] == "embedding"
        assert plans[1].outputs["repeat_check"]["matched"] == "Where was the Jhoon Rhee school founded?"
        parent = {s.index: s.parent for s in result.steps}
        names = {s.index: s.name for s in result.steps}
        embeddings = [s for s in result.steps if s.name == "repeat_embedder"]
        assert embeddings and all(s.kind == "embedding" for s in embeddings)
        assert {(names[parent[s.index]], names[parent[parent[s.index]]]) for s in embeddings} == {
            ("resp_plan_check", "resp_planner")
        }
        # Each text is embedded once, then read from the guard's cache.
        embedded = [d["snippet"] for s in embeddings for d in s.inputs["documents"]]
        assert len(embedded) == len(set(embedded))
        assert result.stop_reason == resp.STOP_REPEATED_PLAN

    def test_an_unusable_plan_is_retried_once_then_stops(self) -> None:
        llm = ScriptedChatGenerator(
            rules=[(JUDGE, "No"), (PLAN, ["", "[Your thought]:"]), (GLOBAL, "x [DONE]")], default="Washington"
        )
        result = build(llm, self.retriever).run(self.QUESTION, SCOPE)

        assert result.stop_reason == resp.STOP_NO_PLAN
        assert len(self.retriever.calls) == 1
        assert len(steps_of(result, "plan")) == 2


class TestIterationLimit:
    def setup_method(self) -> None:
        self.retriever = KeywordRetriever([doc(f"d{i}", f"fact{i} about topic{i} alpha", f"T{i}") for i in range(8)])
        counter = iter(range(1, 100))
        self.llm = ScriptedChatGenerator(
            rules=[
                (JUDGE, "No"),
                (PLAN, lambda _prompt: f"What is topic{next(counter)}?"),
                (GLOBAL, "alpha facts [DONE]"),
                (LOCAL, "No"),
                (GENERATE, "unknown"),
            ]
        )

    @pytest.mark.parametrize("max_iterations", [1, 2, 3])
    def test_stops_at_m(self, max_iterations: int) -> None:
        result = build(self.llm, self.retriever, max_iterations=max_iterations, top_k=1).run(
            "Which alpha topic matters?", SCOPE
        )

        assert result.stop_reason == resp.STOP_MAX_ITERATIONS
        assert len(self.retriever.calls) == max_iterations
        # The last iteration's judgement could not change the outcome, so it is skipped.
        assert len(steps_of(result, "judgement")) == max_iterations - 1
        assert len(steps_of(result, "plan")) == max_iterations - 1
        assert [s.name for s in steps_of(result, "generation")] == ["memory_answer_generator", "resp_generate_llm"]

    def test_unreadable_judgements_do_not_loop_past_m(self) -> None:
        llm = ScriptedChatGenerator(
            rules=[(JUDGE, "maybe??"), (PLAN, ["What is topic1?", "What is topic2?"])], default="alpha [DONE]"
        )
        result = build(llm, self.retriever, max_iterations=3, top_k=1).run("Which alpha topic matters?", SCOPE)

        assert result.stop_reason == resp.STOP_MAX_ITERATIONS
        assert [s.outputs["verdict"] for s in steps_of(result, "judgement")] == ["unreadable", "unreadable"]


class TestMemories:
    QUESTION = "Where was the director of Glass Harbor born?"

    def setup_method(self) -> None:
        self.retriever = KeywordRetriever(
            [
                doc(
                    "gh", "Glass Harbor is a film by the director Omar Vance. ZEBRA-7 raw passage text.", "Glass Harbor"
                ),
                doc("ov", "Omar Vance was born in Lisbon in 1950. QUOKKA-9 raw passage text.", "Omar Vance"),
            ]
        )
        self.llm = ScriptedChatGenerator(
            rules=[
                (JUDGE, ["No", "Yes"]),
                (PLAN, "Where was Omar Vance born?"),
                (
                    GLOBAL,
                    [
                        "Response: Glass Harbor was directed by Omar Vance. [DONE] trailing junk",
                        "Omar Vance was born in Lisbon. [DONE]",
                    ],
                ),
                (LOCAL, "Yes, in Lisbon."),
                (GENERATE, "Answer: Lisbon\nbecause the memory says so"),
            ]
        )

    def test_generator_sees_the_memories_not_the_documents(self) -> None:
        result = build(self.llm, self.retriever).run(self.QUESTION, SCOPE)

        [prompt] = _prompts(self.llm, GENERATE)
        assert "Glass Harbor was directed by Omar Vance." in prompt
        assert "Omar Vance was born in Lisbon." in prompt
        assert "Where was Omar Vance born? Answer: in Lisbon." in prompt
        assert "ZEBRA-7" not in prompt and "QUOKKA-9" not in prompt
        assert "trailing junk" not in prompt and "Response:" not in prompt
        assert result.answer == "Lisbon"
        assert result.stop_reason == resp.STOP_JUDGED_SUFFICIENT

    def test_second_iteration_writes_both_memories_and_the_judge_sees_them(self) -> None:
        result = build(self.llm, self.retriever).run(self.QUESTION, SCOPE)

        summaries = steps_of(result, "summary")
        # Iteration 1 writes global evidence only; iteration 2 both memories, one LLM call each.
        assert [_calls_within(result, s) for s in summaries] == [1, 2]
        # Each call is on the model call step of its own prompted step (iteration 2's two ran concurrently).
        memory_steps = ("resp_global_evidence_llm", "resp_local_pathway_llm")
        calls = sorted(s.name for s in result.steps if s.name in memory_steps and s.outputs.get("llm_calls"))
        assert calls == ["resp_global_evidence_llm", "resp_global_evidence_llm", "resp_local_pathway_llm"]
        assert summaries[0].outputs["pathway_entry"] is None
        assert [s.outputs["global_evidence"]["iteration"] for s in summaries] == [1, 2]
        entry = summaries[1].outputs["pathway_entry"]
        assert entry == {
            "iteration": 2,
            "sub_question": "Where was Omar Vance born?",
            "answered": True,
            "answer": "in Lisbon.",
            "document_ids": ["ov"],
        }
        judge_prompt = _prompts(self.llm, JUDGE)[-1]
        assert "Where was Omar Vance born? Answer: in Lisbon." in judge_prompt
        assert "QUOKKA-9" not in judge_prompt
        # "Lisbon" is found in the passage about Omar Vance only: that is the one it cites.
        assert {c.document_id for c in result.citations} == {"ov"}

    def test_no_new_evidence_stops_the_loop(self) -> None:
        llm = ScriptedChatGenerator(
            rules=[
                (JUDGE, "No"),
                (PLAN, "Who directed Glass Harbor film?"),
                (GLOBAL, "Omar Vance directed it. [DONE]"),
            ],
            default="Lisbon",
        )
        result = build(llm, self.retriever).run(self.QUESTION, SCOPE)

        assert result.stop_reason == resp.STOP_NO_NEW_EVIDENCE
        assert len(self.retriever.calls) == 2
        assert [d["new_document_ids"] for d in decisions(result) if d["event"] == "retrieved"] == [["gh"], []]
        assert len(steps_of(result, "summary")) == 1


class TestAccessControl:
    def test_every_retrieval_carries_the_callers_filters(self) -> None:
        retriever = KeywordRetriever(
            [
                doc("pub", "Nova Bridge spans the river Kel.", "Nova Bridge"),
                doc("secret", "Nova Bridge secret budget memo about river Kel.", "Memo", access=("finance",)),
                doc("other", "Nova Bridge river Kel tenant two copy.", "Copy", tenant="globex"),
            ]
        )
        llm = ScriptedChatGenerator(
            rules=[
                (JUDGE, "No"),
                (PLAN, ["Which river does Nova Bridge span?"]),
                (GLOBAL, "Nova Bridge spans the Kel. [DONE]"),
            ],
            default="Kel",
        )
        extra = {"field": "meta.title", "operator": "!=", "value": "Excluded"}
        pipeline = build(llm, retriever, max_iterations=2, top_k=3)
        result = pipeline.run("What does Nova Bridge span?", SCOPE, filters=extra)

        expected = restrict(SCOPE, extra)
        assert len(retriever.calls) == 2
        assert all(call["filters"] == expected for call in retriever.calls)
        retrieved = {d["id"] for s in steps_of(result, "retrieval") for d in s.outputs["documents"]}
        assert retrieved == {"pub"}
        assert {c.document_id for c in result.citations} == {"pub"}


class _BarrierChat:
    """Iteration 2's two summaries must be in flight at once to pass the barrier; sequential calls break it."""

    def __init__(self) -> None:
        self.inner = ScriptedChatGenerator(
            rules=[
                (JUDGE, "No"),
                (PLAN, "Who built Nova Bridge?"),
                (LOCAL, "Yes, Ada Stone."),
                (GLOBAL, "Summary. [DONE]"),
            ],
            default="Ada Stone",
        )
        self.barrier = threading.Barrier(2, timeout=20)
        self.global_calls = 0
        self.waited = 0
        self._lock = threading.Lock()

    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        prompt = messages[-1].text or ""
        with self._lock:
            if "professional writer" in prompt:
                self.global_calls += 1
            wait = ("professional writer" in prompt and self.global_calls == 2) or "respond completely" in prompt
        if wait:
            self.barrier.wait()
            with self._lock:
                self.waited += 1
        return self.inner.run(messages=messages, generation_kwargs=generation_kwargs)


def test_global_and_local_summaries_of_one_iteration_run_concurrently() -> None:
    retriever = KeywordRetriever(
        [
            doc("a", "Nova Bridge was built by Ada Stone.", "Nova Bridge"),
            doc("b", "Who built it? Ada Stone built Nova Bridge in 1901.", "Ada Stone"),
        ]
    )
    llm = _BarrierChat()
    result = build(llm, retriever, max_iterations=2).run(
        "Who was the builder of the Nova Bridge over the river?", SCOPE
    )

    assert llm.waited == 2
    assert not llm.barrier.broken
    assert [_calls_within(result, s) for s in steps_of(result, "summary")] == [1, 2]


class TestRunBounds:
    QUESTION = "Where was the director of Glass Harbor born?"

    def setup_method(self) -> None:
        self.retriever = KeywordRetriever(
            [
                doc("gh", "Glass Harbor is a film by the director Omar Vance.", "Glass Harbor"),
                doc("ov", "Omar Vance was born in Lisbon in 1950.", "Omar Vance"),
            ]
        )

    def test_the_llm_budget_stops_the_graph_and_the_run_answers_with_what_it_retrieved(self) -> None:
        llm = ScriptedChatGenerator(rules=[(JUDGE, "No"), (PLAN, "Where was Omar Vance born?")], default="x [DONE]")
        run = RunControl(max_llm_calls=2, max_completion_tokens=2048, max_prompt_chars=100_000)
        with run.active():
            result = build(llm, self.retriever).run(self.QUESTION, SCOPE)
        assert len(llm.calls) == 2  # summary and judgement; the plan was refused before reaching the model
        assert len(self.retriever.calls) == 1
        assert result.stop_reason == "llm_budget"
        assert result.answer_source == "extracted"
        assert result.answer == "is a film by the director Omar Vance. [1]"  # the title prefix is left out
        assert [c.document_id for c in result.citations] == ["gh"]
        assert "LLM call budget ran out" in (result.answer_note or "")
        planner = next(s for s in result.steps if s.error)
        assert planner.error.startswith("LLMBudgetExceededError") and planner.llm.calls == 0
        assert [s.name for s in result.steps[-2:]] == ["llm_budget", "answer_fallback"]
        assert "more than 2 LLM calls" in result.steps[-2].outputs["reason"]

    def test_a_budget_that_refuses_the_first_call_is_an_error(self) -> None:
        llm = ScriptedChatGenerator(default="x [DONE]")
        run = RunControl(max_llm_calls=2, max_completion_tokens=2048, max_prompt_chars=10)
        with run.active(), pytest.raises(LLMBudgetExceededError, match="exceeds the server limit of 10"):
            build(llm, self.retriever).run(self.QUESTION, SCOPE)
        assert llm.calls == []

    def test_a_stopped_run_starts_no_further_step(self) -> None:
        run = RunControl(max_llm_calls=64, max_completion_tokens=2048, max_prompt_chars=100_000)

        def judge_then_cancel(_prompt: str) -> str:
            run.stop("cancelled")
            return "No"

        llm = ScriptedChatGenerator(
            rules=[(JUDGE, judge_then_cancel), (PLAN, "Where was Omar Vance born?")], default="x [DONE]"
        )
        with run.active(), pytest.raises(RunStopped):
            build(llm, self.retriever).run(self.QUESTION, SCOPE)
        assert len(llm.calls) == 2 and len(self.retriever.calls) == 1


def test_invalid_question_is_rejected_before_any_call() -> None:
    retriever = KeywordRetriever([])
    llm = ScriptedChatGenerator(default="x")
    with pytest.raises(InvalidQuestionError):
        build(llm, retriever).run("   ", SCOPE)
    assert retriever.calls == [] and llm.calls == []


def test_resp_is_registered() -> None:
    assert "resp" in {spec.name for spec in available_pipelines()}


def test_config_names_limits_and_prompt_fingerprints() -> None:
    pipeline = build(ScriptedChatGenerator(default="x"), KeywordRetriever([]), max_iterations=4, top_k=7)
    config = pipeline.config()
    assert config["max_iterations"] == 4 and config["top_k"] == 7
    assert set(config["prompts"]) == {
        "resp_global_evidence",
        "resp_local_pathway",
        "resp_judge",
        "resp_plan",
        "resp_generate",
    }


@pytest.mark.parametrize(("top_k", "max_iterations"), [(0, 3), (101, 3), (5, 0), (5, 11)])
def test_costs_are_bounded(top_k: int, max_iterations: int) -> None:
    with pytest.raises(ValueError):
        build(ScriptedChatGenerator(), KeywordRetriever([]), top_k=top_k, max_iterations=max_iterations)
