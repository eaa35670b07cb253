"""ReSP components one by one: memories, summarizer, judge, planner, controller, generator, repeat guard."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from haystack import Document, Pipeline, component
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.utils import Secret

from docqa.components.dual_function_summarizer import DualFunctionSummarizer
from docqa.components.memory_answer_generator import MemoryAnswerGenerator
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.components.resp_controller import ReSPController, ReSPLoopState
from docqa.components.resp_memory import GlobalEvidence, PathwayEntry, ReSPMemory
from docqa.components.resp_reasoner import ReSPJudge, ReSPPlanner
from docqa.components.sub_question_guard import SubQuestionGuard, normalize_question
from docqa.embedding import OnnxDocumentEmbedder, OnnxTextEmbedder
from tests.support.resp_fakes import GLOBAL, JUDGE, LOCAL, PLAN
from tests.support.scripted_chat import ScriptedChatGenerator

DOCS = [Document(id="d1", content="Jaws was directed by Steven Spielberg.", meta={"title": "Jaws"})]


def _memory() -> ReSPMemory:
    return (
        ReSPMemory()
        .with_evidence(GlobalEvidence(1, "Q?", "Jaws was directed by Spielberg.", ("d1",)))
        .with_pathway(PathwayEntry(2, "Who directed Jaws?", True, "Spielberg", ("d1",)))
        .with_pathway(PathwayEntry(3, "When was Jaws released?", False))
    )


class TestReSPMemory:
    def test_text_lists_both_queues(self) -> None:
        text = _memory().as_text()
        assert text.splitlines() == [
            "Global evidence:",
            "- Jaws was directed by Spielberg.",
            "Sub-questions already asked:",
            "- Who directed Jaws? Answer: Spielberg",
            "- When was Jaws released? Answer: not answered by the documents",
        ]

    def test_round_trips_through_dict(self) -> None:
        memory = _memory()
        assert ReSPMemory.from_dict(memory.to_dict()) == memory

    def test_is_passed_between_components_without_copies(self) -> None:
        # Haystack deep-copies every component input; immutable memories and loop states need no copy.
        memory = _memory()
        state = ReSPLoopState(memory=memory, summarized=tuple(DOCS))
        assert copy.deepcopy(memory) is memory and copy.deepcopy(state) is state

    def test_updates_do_not_mutate(self) -> None:
        empty = ReSPMemory()
        empty.with_evidence(GlobalEvidence(1, "Q?", "x"))
        assert empty.is_empty and empty.word_count() == 0


class TestDualFunctionSummarizer:
    def test_global_summary_is_cut_at_done_and_bounded(self) -> None:
        llm = ScriptedChatGenerator(rules=[(GLOBAL, "Passage: " + "word " * 500 + "[DONE] ignored")])
        evidence = DualFunctionSummarizer(llm, max_summary_words=20).run(question="Q?", documents=DOCS)[
            "global_evidence"
        ]
        assert evidence.summary == " ".join(["word"] * 20)
        assert evidence.document_ids == ("d1",)
        assert "Jaws was directed by Steven Spielberg." in llm.calls[0]["prompt"]
        assert llm.calls[0]["generation_kwargs"]["max_tokens"] == 160

    @pytest.mark.parametrize(
        ("reply", "answered", "answer"),
        [
            ("Yes, Steven Spielberg.", True, "Steven Spielberg."),
            ("yes: Spielberg", True, "Spielberg"),
            ("Yes", False, ""),
            ("No", False, ""),
            ("No, but yes Spielberg", False, ""),
            ("Spielberg directed it", False, ""),
            ("", False, ""),
        ],
    )
    def test_local_answer_counts_only_after_a_leading_yes(self, reply: str, answered: bool, answer: str) -> None:
        llm = ScriptedChatGenerator(rules=[(LOCAL, reply)])
        out = DualFunctionSummarizer(llm).run(
            question="Q?", documents=DOCS, memory=ReSPMemory(), sub_question="Who directed Jaws?", iteration=2
        )
        entry = out["pathway_entry"]
        assert (entry.sub_question, entry.answered, entry.answer) == ("Who directed Jaws?", answered, answer)

    def test_no_documents_means_no_llm_call(self) -> None:
        llm = ScriptedChatGenerator(default="should not be used")
        summarizer = DualFunctionSummarizer(llm)
        out = summarizer.run(question="Q?", documents=[], sub_question="S?", iteration=2)
        assert llm.calls == []
        assert out["global_evidence"].summary == "" and out["pathway_entry"].answered is False

    def test_run_without_sub_question_writes_global_evidence_only(self) -> None:
        llm = ScriptedChatGenerator(rules=[(GLOBAL, "Spielberg directed Jaws. [DONE]")])
        out = DualFunctionSummarizer(llm).run(question="Who directed Jaws?", documents=DOCS)
        assert out["pathway_entry"] is None
        assert out["memory"].global_evidence[0].summary == "Spielberg directed Jaws."
        assert len(llm.calls) == 1

    def test_run_with_sub_question_updates_both_queues(self) -> None:
        llm = ScriptedChatGenerator(rules=[(GLOBAL, "Spielberg directed Jaws. [DONE]"), (LOCAL, "Yes, Spielberg")])
        out = DualFunctionSummarizer(llm).run(
            question="Q?", documents=DOCS, memory=_memory(), sub_question="Who made Jaws?", iteration=4
        )
        assert len(out["memory"].global_evidence) == 2 and len(out["memory"].local_pathway) == 3
        assert out["pathway_entry"] == PathwayEntry(4, "Who made Jaws?", True, "Spielberg", ("d1",))

    def test_rejects_invalid_arguments(self) -> None:
        with pytest.raises(ValueError):
            DualFunctionSummarizer(ScriptedChatGenerator(), max_summary_tokens=0)
        with pytest.raises(ValueError):
            DualFunctionSummarizer(ScriptedChatGenerator()).run(question="Q?", documents=DOCS, iteration=0)

    def test_prompts_and_token_caps_are_the_packaged_ones_as_before(self) -> None:
        llm = ScriptedChatGenerator(rules=[(GLOBAL, "Spielberg. [DONE]"), (LOCAL, "Yes, Spielberg")])
        DualFunctionSummarizer(llm, max_summary_tokens=90, max_answer_tokens=20).run(
            question="Q?", documents=DOCS, memory=_memory(), sub_question="Who made Jaws?", iteration=4
        )
        sent = {call["prompt"]: call["generation_kwargs"]["max_tokens"] for call in llm.calls}
        assert sent == {
            render_prompt(load_prompt("resp_global_evidence"), question="Q?", documents=DOCS): 90,
            render_prompt(
                load_prompt("resp_local_pathway"), sub_question="Who made Jaws?", documents=DOCS,
                memory=_memory().as_text(),
            ): 20,
        }

    def test_a_deployer_template_is_used_and_written_by_to_dict(self, tmp_path: Path) -> None:
        (tmp_path / "resp_global_evidence.txt").write_text("GLOBAL {{ question }} {{ documents | length }}")
        llm = ScriptedChatGenerator(default="x [DONE]")
        summarizer = DualFunctionSummarizer(llm, global_template=load_prompt("resp_global_evidence", tmp_path))
        summarizer.run(question="Q?", documents=DOCS)
        assert llm.calls[0]["prompt"] == "GLOBAL Q? 1"
        params = summarizer.to_dict()["init_parameters"]
        assert params["global_template"] == "GLOBAL {{ question }} {{ documents | length }}"
        assert params["local_template"] == load_prompt("resp_local_pathway")
        bounds = (params["max_summary_tokens"], params["max_answer_tokens"], params["max_summary_words"])
        assert bounds == (160, 64, 150)

    def test_runs_as_a_node_whose_optional_inputs_nothing_feeds(self) -> None:
        llm = ScriptedChatGenerator(rules=[(GLOBAL, "Spielberg directed Jaws. [DONE]")])
        pipeline = Pipeline()
        pipeline.add_component("summarizer", DualFunctionSummarizer(llm))
        out = pipeline.run({"summarizer": {"question": "Who directed Jaws?", "documents": DOCS}})["summarizer"]
        assert out["global_evidence"] == GlobalEvidence(1, "Who directed Jaws?", "Spielberg directed Jaws.", ("d1",))
        assert out["pathway_entry"] is None and len(llm.calls) == 1

    def test_its_inner_nodes_are_two_prompted_steps_between_a_request_and_the_memory_update(self) -> None:
        kinds = DualFunctionSummarizer(ScriptedChatGenerator()).step_kinds
        assert kinds == {
            "summary_request": "prompt",
            "resp_global_evidence": "global_evidence",
            "resp_global_evidence_prompt": "prompt",
            "resp_global_evidence_llm": "llm",
            "resp_global_evidence_parser": "parse",
            "resp_local_pathway": "local_pathway",
            "resp_local_pathway_prompt": "prompt",
            "resp_local_pathway_llm": "llm",
            "resp_local_pathway_parser": "parse",
            "memory_update": "memory",
        }


class TestReSPJudge:
    @pytest.mark.parametrize(
        ("reply", "expected"),
        [('{"answer": "Yes"}', (True, "yes")), ("No", (False, "no")), ("hmm", (False, "unreadable"))],
    )
    def test_judge(self, reply: str, expected: tuple[bool, str]) -> None:
        llm = ScriptedChatGenerator(rules=[(JUDGE, reply)])
        out = ReSPJudge(llm).run(question="Q?", memory=_memory())
        assert (out["sufficient"], out["verdict"]) == expected
        assert "Who directed Jaws? Answer: Spielberg" in llm.calls[0]["prompt"]
        assert "response_format" in llm.calls[0]["generation_kwargs"]


class TestReSPPlanner:
    @pytest.mark.parametrize(
        ("reply", "expected"),
        [
            ("When was Spielberg born?", "When was Spielberg born?"),
            ("[Your thought]: When was Spielberg born?\nMore thoughts", "When was Spielberg born?"),
            ('\n\n1. Thought: "Where was Spielberg born?"', "Where was Spielberg born?"),
            ("- Sub-question 2: Who scored Jaws?", "Who scored Jaws?"),
            ("", None),
            ("?\n[Your thought]:", None),
        ],
    )
    def test_plan_is_cleaned_or_refused(self, reply: str, expected: str | None) -> None:
        llm = ScriptedChatGenerator(rules=[(PLAN, reply)])
        out = ReSPPlanner(llm).run(question="Q?", memory=_memory(), asked=["Q?"])
        assert out["sub_question"] == expected
        assert out["accepted"] is (expected is not None)
        assert (out["repeat_check"] is None) is (expected is None)

    def test_plan_is_bounded(self) -> None:
        llm = ScriptedChatGenerator(rules=[(PLAN, "Who " + "very " * 200 + "tall?")])
        plan = ReSPPlanner(llm, max_sub_question_chars=50).run(question="Q?", memory=ReSPMemory())["sub_question"]
        assert plan is not None and len(plan) <= 50
        assert llm.calls[0]["generation_kwargs"]["max_tokens"] == 48

    def test_plan_prompt_lists_asked_questions_and_the_rejected_one(self) -> None:
        llm = ScriptedChatGenerator(rules=[(PLAN, "Who scored Jaws?")])
        ReSPPlanner(llm).run(
            question="Q?", memory=ReSPMemory(), asked=["Q?", "Who directed Jaws?"], rejected="Who made Jaws?"
        )
        prompt = llm.calls[0]["prompt"]
        assert "- Who directed Jaws?" in prompt and '"Who made Jaws?" repeats' in prompt

    def test_a_repeated_plan_is_not_accepted(self) -> None:
        llm = ScriptedChatGenerator(rules=[(PLAN, "who directed jaws")])
        out = ReSPPlanner(llm).run(question="Q?", memory=_memory(), asked=["Q?", "Who directed Jaws?"], attempt=2)
        assert out["sub_question"] == "who directed jaws" and out["accepted"] is False
        assert out["repeat_check"]["matched"] == "Who directed Jaws?"


def _report(controller: ReSPController, state: ReSPLoopState, **report: object) -> dict:
    return controller.run(question="Q?", state=state, **report)  # type: ignore[arg-type]


class TestReSPController:
    """The controller's decisions one report at a time (the whole loop is in test_resp_pipeline.py)."""

    def test_start_retrieves_for_the_question(self) -> None:
        out = ReSPController(max_iterations=2).run(question="Q?")
        assert out["query"] == "Q?" and out["state"].asked == ("Q?",) and out["state"].iteration == 1
        assert "stop_reason" not in out

    def test_no_new_document_stops(self) -> None:
        state = ReSPLoopState(asked=("Q?",), summarized=tuple(DOCS))
        out = _report(ReSPController(), state, documents=DOCS)
        assert out["stop_reason"] == "no_new_evidence" and out["cited_documents"] == DOCS
        assert out["answer_memory"] == state.memory and "state" not in out

    def test_new_documents_are_summarised_and_cited_once(self) -> None:
        new = Document(id="d2", content="Spielberg was born in Cincinnati.")
        state = ReSPLoopState(iteration=2, sub_question="S?", asked=("Q?", "S?"), summarized=tuple(DOCS))
        out = _report(ReSPController(), state, documents=[DOCS[0], new, new])
        assert out["summary_documents"] == [DOCS[0], new, new] and out["summary_sub_question"] == "S?"
        assert out["iteration"] == 2 and [d.id for d in out["state"].summarized] == ["d1", "d2"]

    def test_the_last_iteration_answers_without_judging(self) -> None:
        out = _report(ReSPController(max_iterations=2), ReSPLoopState(iteration=2), memory=_memory())
        assert out["stop_reason"] == "max_iterations" and out["answer_memory"] == _memory()
        assert "judge_memory" not in out
        earlier = _report(ReSPController(max_iterations=2), ReSPLoopState(iteration=1), memory=_memory())
        assert earlier["judge_memory"] == _memory() and "stop_reason" not in earlier

    def test_judgement_stops_or_plans(self) -> None:
        controller = ReSPController()
        assert _report(controller, ReSPLoopState(), sufficient=True)["stop_reason"] == "judged_sufficient"
        out = _report(controller, ReSPLoopState(asked=("Q?",)), sufficient=False)
        assert (out["attempt"], out["rejected"], out["asked"]) == (1, None, ["Q?"])

    @pytest.mark.parametrize(
        ("sub_question", "refusal", "rejected"),
        [(None, "no_plan", None), ("Who directed Jaws?", "repeated_plan", "Who directed Jaws?")],
    )
    def test_a_refused_plan_is_retried_once_then_stops(self, sub_question, refusal, rejected) -> None:
        controller = ReSPController()
        first = _report(controller, ReSPLoopState(attempt=1), sub_question=sub_question, accepted=False)
        assert (first["attempt"], first["rejected"]) == (2, rejected)
        assert first["decision"]["refusal"] == refusal
        second = _report(controller, first["state"], sub_question=sub_question, accepted=False)
        assert second["stop_reason"] == refusal and "attempt" not in second

    def test_an_accepted_plan_starts_the_next_iteration(self) -> None:
        state = ReSPLoopState(asked=("Q?",), attempt=2, rejected="old")
        out = _report(ReSPController(), state, sub_question="S?", accepted=True)
        assert out["query"] == "S?"
        assert (out["state"].iteration, out["state"].asked, out["state"].attempt) == (2, ("Q?", "S?"), 0)

    def test_a_run_without_a_report_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="without a report"):
            _report(ReSPController(), ReSPLoopState())

    def test_its_runs_bound_the_loop(self) -> None:
        assert ReSPController(max_iterations=3).runs_per_question() == 1 + 3 * 5
        with pytest.raises(ValueError):
            ReSPController(max_iterations=0)


class TestMemoryAnswerGenerator:
    def test_answers_from_memory_with_the_first_line(self) -> None:
        llm = ScriptedChatGenerator(default="\nFinal answer: Steven Spielberg\nExplanation: ...")
        out = MemoryAnswerGenerator(llm).run(question="Who directed Jaws?", memory=_memory())
        assert out["answer"] == "Steven Spielberg"
        assert "Jaws was directed by Spielberg." in llm.calls[0]["prompt"]
        assert llm.calls[0]["generation_kwargs"]["max_tokens"] == 48

    def test_skips_an_echoed_question(self) -> None:
        llm = ScriptedChatGenerator(default="Question: Who directed Jaws?\nAnswer: Spielberg")
        assert MemoryAnswerGenerator(llm).run(question="Who directed Jaws?", memory=_memory())["answer"] == "Spielberg"

    def test_deployer_override_is_used(self, tmp_path: Path) -> None:
        (tmp_path / "resp_generate.txt").write_text("CUSTOM {{ question }} || {{ memory }}")
        llm = ScriptedChatGenerator(default="x")
        generator = MemoryAnswerGenerator(llm, prompt_template=load_prompt("resp_generate", tmp_path))
        generator.run(question="Q?", memory=ReSPMemory())
        assert llm.calls[0]["prompt"] == "CUSTOM Q? || (nothing yet)"


def test_components_survive_a_pipeline_yaml_round_trip() -> None:
    def chat() -> OpenAIChatGenerator:
        return OpenAIChatGenerator(
            api_key=Secret.from_env_var("DOCQA_UNUSED_KEY"), model="m", api_base_url="http://127.0.0.1:9/v1"
        )

    pipeline = Pipeline()
    pipeline.add_component("summarizer", DualFunctionSummarizer(chat(), max_answer_tokens=9))
    pipeline.add_component("judge", ReSPJudge(chat(), judge_template="J {{ question }}"))
    pipeline.add_component(
        "planner", ReSPPlanner(chat(), SubQuestionGuard(similarity_threshold=0.7), max_plan_tokens=7)
    )
    pipeline.add_component("controller", ReSPController(max_iterations=4))
    pipeline.add_component("generator", MemoryAnswerGenerator(chat(), max_tokens=5))
    pipeline.add_component("guard", SubQuestionGuard(similarity_threshold=0.8))
    restored = Pipeline.loads(pipeline.dumps(), allowed_modules=["docqa.*"])

    assert restored.get_component("summarizer").max_answer_tokens == 9
    assert restored.get_component("summarizer").local_template == load_prompt("resp_local_pathway")
    assert restored.get_component("judge").judge_template == "J {{ question }}"
    assert restored.get_component("planner").max_plan_tokens == 7
    assert restored.get_component("planner").guard.similarity_threshold == 0.7
    assert restored.get_component("controller").max_iterations == 4
    assert isinstance(restored.get_component("generator").chat_generator, OpenAIChatGenerator)
    assert restored.get_component("guard").similarity_threshold == 0.8


@component
class _TableEmbedder:
    """A document embedder by a fixed table; records the texts it embeds, to check caching."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.embedded: list[str] = []

    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        self.embedded.extend(doc.content for doc in documents)
        return {"documents": [replace(doc, embedding=self.table[doc.content]) for doc in documents]}


class TestSubQuestionGuard:
    def test_normalisation(self) -> None:
        assert normalize_question("  Who is THE father of X? ") == "who is father of x"

    @pytest.mark.parametrize("candidate", ["who directed jaws", "Who  directed Jaws ?", "Jaws directed who?"])
    def test_text_repeats(self, candidate: str) -> None:
        out = SubQuestionGuard().run(candidate=candidate, asked=["Q?", "Who directed Jaws?"])
        check = {"repeated": True, "matched": "Who directed Jaws?", "similarity": 1.0, "method": "text"}
        assert out == {**check, "candidate": candidate, "accepted": False, "repeat_check": check}

    def test_a_text_repeat_embeds_nothing(self) -> None:
        embedder = _TableEmbedder({})
        out = SubQuestionGuard(embedder).run(candidate="Jaws directed who?", asked=["Who directed Jaws?"])
        assert out["method"] == "text" and embedder.embedded == []

    def test_without_embedder_paraphrases_pass(self) -> None:
        out = SubQuestionGuard().run(candidate="Who was the director of Jaws?", asked=["Who directed Jaws?"])
        assert out["repeated"] is False and out["similarity"] is None and out["accepted"] is True

    def test_without_a_candidate_nothing_is_checked(self) -> None:
        embedder = _TableEmbedder({})
        out = SubQuestionGuard(embedder).run(candidate=None, asked=["Who directed Jaws?"])
        assert (out["accepted"], out["repeat_check"], out["candidate"]) == (False, None, None)
        assert embedder.embedded == []

    def test_embedding_similarity_catches_paraphrases(self) -> None:
        embedder = _TableEmbedder(
            {
                "Who was the director of Jaws?": [1.0, 0.1, 0.0],
                "Who directed Jaws?": [0.9, 0.1, 0.0],
                "When was Jaws released?": [0.0, 0.0, 1.0],
            }
        )
        guard = SubQuestionGuard(embedder, similarity_threshold=0.95)
        out = guard.run(
            candidate="Who was the director of Jaws?", asked=["When was Jaws released?", "Who directed Jaws?"]
        )
        assert out["repeated"] is True and out["method"] == "embedding" and out["accepted"] is False
        assert out["matched"] == "Who directed Jaws?"
        assert out["similarity"] == pytest.approx(
            float(np.dot([1, 0.1, 0], [0.9, 0.1, 0]) / (np.linalg.norm([1, 0.1, 0]) * np.linalg.norm([0.9, 0.1, 0])))
        )
        assert out["repeat_check"] == {key: out[key] for key in ("repeated", "matched", "similarity", "method")}
        fresh = guard.run(candidate="When was Jaws released?", asked=["Who directed Jaws?"])
        assert fresh["repeated"] is False and fresh["similarity"] < 0.95
        # Every text was embedded once: later checks read the cache.
        embedded = list(embedder.embedded)
        assert sorted(embedded) == sorted(embedder.table)
        again = guard.run(candidate="Who was the director of Jaws?", asked=["Who directed Jaws?"])
        assert embedder.embedded == embedded and again["similarity"] == out["similarity"]

    def test_distinct_question_passes(self) -> None:
        embedder = _TableEmbedder({"A?": [1.0, 0.0], "B?": [0.0, 1.0]})
        out = SubQuestionGuard(embedder).run(candidate="A?", asked=["B?"])
        assert out["repeated"] is False and out["similarity"] == pytest.approx(0.0)

    def test_a_file_naming_the_query_embedder_loads_it_as_the_document_embedder(self, tmp_path: Path) -> None:
        # Files exported before the guard's embeddings were a step of their own name its query embedder.
        text = OnnxTextEmbedder(model="/models/minilm", cache_dir=str(tmp_path), quantize=True, threads=2)

        def file_with(embedder: dict[str, Any]) -> dict[str, Any]:
            guard = {
                "type": "docqa.components.sub_question_guard.SubQuestionGuard",
                "init_parameters": {"text_embedder": embedder, "similarity_threshold": 0.9},
            }
            return {"components": {"guard": guard}, "connections": []}

        loaded = Pipeline.from_dict(file_with(text.to_dict()), allowed_modules=["docqa.*"]).get_component("guard")
        embedder = loaded.document_embedder
        assert isinstance(embedder, OnnxDocumentEmbedder)
        assert (embedder.model, embedder.quantize, embedder.threads) == ("/models/minilm", True, 2)
        assert loaded.similarity_threshold == 0.9
        remote = {"type": "docqa.Remote", "init_parameters": {}}
        with pytest.raises(Exception, match="no document embedder counterpart"):
            Pipeline.from_dict(file_with(remote), allowed_modules=["docqa.*"])

    def test_threshold_is_validated(self) -> None:
        with pytest.raises(ValueError):
            SubQuestionGuard(similarity_threshold=0.0)
