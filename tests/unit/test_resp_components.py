"""ReSP components one by one: memories, summarizer, reasoner, generator, repeat guard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from haystack import Document, Pipeline
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.utils import Secret

from docqa.components.dual_function_summarizer import DualFunctionSummarizer
from docqa.components.memory_answer_generator import MemoryAnswerGenerator
from docqa.components.prompt_templates import load_prompt
from docqa.components.resp_memory import GlobalEvidence, PathwayEntry, ReSPMemory
from docqa.components.resp_reasoner import ReSPReasoner
from docqa.components.sub_question_guard import SubQuestionGuard, normalize_question
from tests.support.resp_fakes import GLOBAL, JUDGE, LOCAL, PLAN
from tests.support.scripted_chat import ScriptedChatGenerator

DOCS = [Document(id="d1", content="Jaws was directed by Steven Spielberg.", meta={"title": "Jaws"})]


def _memory() -> ReSPMemory:
    return (ReSPMemory()
            .with_evidence(GlobalEvidence(1, "Q?", "Jaws was directed by Spielberg.", ("d1",)))
            .with_pathway(PathwayEntry(2, "Who directed Jaws?", True, "Spielberg", ("d1",)))
            .with_pathway(PathwayEntry(3, "When was Jaws released?", False)))


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

    def test_updates_do_not_mutate(self) -> None:
        empty = ReSPMemory()
        empty.with_evidence(GlobalEvidence(1, "Q?", "x"))
        assert empty.is_empty and empty.word_count() == 0


class TestDualFunctionSummarizer:
    def test_global_summary_is_cut_at_done_and_bounded(self) -> None:
        llm = ScriptedChatGenerator(rules=[(GLOBAL, "Passage: " + "word " * 500 + "[DONE] ignored")])
        evidence = DualFunctionSummarizer(llm, max_summary_words=20).summarize_global("Q?", DOCS, 1)
        assert evidence.summary == " ".join(["word"] * 20)
        assert evidence.document_ids == ("d1",)
        assert "Jaws was directed by Steven Spielberg." in llm.calls[0]["prompt"]
        assert llm.calls[0]["generation_kwargs"]["max_tokens"] == 160

    @pytest.mark.parametrize(("reply", "answered", "answer"), [
        ("Yes, Steven Spielberg.", True, "Steven Spielberg."),
        ("yes: Spielberg", True, "Spielberg"),
        ("Yes", False, ""),
        ("No", False, ""),
        ("No, but yes Spielberg", False, ""),
        ("Spielberg directed it", False, ""),
        ("", False, ""),
    ])
    def test_local_answer_counts_only_after_a_leading_yes(self, reply: str, answered: bool, answer: str) -> None:
        llm = ScriptedChatGenerator(rules=[(LOCAL, reply)])
        entry = DualFunctionSummarizer(llm).answer_sub_question("Who directed Jaws?", DOCS, ReSPMemory(), 2)
        assert (entry.answered, entry.answer) == (answered, answer)

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
        out = DualFunctionSummarizer(llm).run(question="Q?", documents=DOCS, memory=_memory(),
                                              sub_question="Who made Jaws?", iteration=4)
        assert len(out["memory"].global_evidence) == 2 and len(out["memory"].local_pathway) == 3
        assert out["pathway_entry"] == PathwayEntry(4, "Who made Jaws?", True, "Spielberg", ("d1",))

    def test_rejects_invalid_arguments(self) -> None:
        with pytest.raises(ValueError):
            DualFunctionSummarizer(ScriptedChatGenerator(), max_summary_tokens=0)
        with pytest.raises(ValueError):
            DualFunctionSummarizer(ScriptedChatGenerator()).run(question="Q?", documents=DOCS, iteration=0)

class TestReSPReasoner:
    @pytest.mark.parametrize(("reply", "expected"), [('{"answer": "Yes"}', True), ("No", False), ("hmm", None)])
    def test_judge(self, reply: str, expected: bool | None) -> None:
        llm = ScriptedChatGenerator(rules=[(JUDGE, reply)])
        assert ReSPReasoner(llm).judge("Q?", _memory()) is expected
        assert "Who directed Jaws? Answer: Spielberg" in llm.calls[0]["prompt"]
        assert "response_format" in llm.calls[0]["generation_kwargs"]

    @pytest.mark.parametrize(("reply", "expected"), [
        ("When was Spielberg born?", "When was Spielberg born?"),
        ("[Your thought]: When was Spielberg born?\nMore thoughts", "When was Spielberg born?"),
        ("\n\n1. Thought: \"Where was Spielberg born?\"", "Where was Spielberg born?"),
        ("- Sub-question 2: Who scored Jaws?", "Who scored Jaws?"),
        ("", None),
        ("?\n[Your thought]:", None),
    ])
    def test_plan_is_cleaned_or_refused(self, reply: str, expected: str | None) -> None:
        llm = ScriptedChatGenerator(rules=[(PLAN, reply)])
        assert ReSPReasoner(llm).plan("Q?", _memory(), asked=["Q?"]) == expected

    def test_plan_is_bounded(self) -> None:
        llm = ScriptedChatGenerator(rules=[(PLAN, "Who " + "very " * 200 + "tall?")])
        plan = ReSPReasoner(llm, max_sub_question_chars=50).plan("Q?", ReSPMemory(), asked=["Q?"])
        assert plan is not None and len(plan) <= 50

    def test_plan_prompt_lists_asked_questions_and_the_rejected_one(self) -> None:
        llm = ScriptedChatGenerator(rules=[(PLAN, "Who scored Jaws?")])
        ReSPReasoner(llm).plan("Q?", ReSPMemory(), asked=["Q?", "Who directed Jaws?"], rejected="Who made Jaws?")
        prompt = llm.calls[0]["prompt"]
        assert "- Who directed Jaws?" in prompt and '"Who made Jaws?" repeats' in prompt

    def test_run_plans_only_when_not_sufficient(self) -> None:
        llm = ScriptedChatGenerator(rules=[(JUDGE, ["Yes", "No"]), (PLAN, "Who scored Jaws?")])
        reasoner = ReSPReasoner(llm)
        assert reasoner.run(question="Q?", memory=_memory()) == {"sufficient": True, "verdict": "yes",
                                                                  "sub_question": None}
        assert reasoner.run(question="Q?", memory=_memory()) == {"sufficient": False, "verdict": "no",
                                                                  "sub_question": "Who scored Jaws?"}
        assert len(llm.calls) == 3


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
        return OpenAIChatGenerator(api_key=Secret.from_env_var("DOCQA_UNUSED_KEY"), model="m",
                                   api_base_url="http://127.0.0.1:9/v1")

    pipeline = Pipeline()
    pipeline.add_component("summarizer", DualFunctionSummarizer(chat(), max_answer_tokens=9))
    pipeline.add_component("reasoner", ReSPReasoner(chat(), max_plan_tokens=7))
    pipeline.add_component("generator", MemoryAnswerGenerator(chat(), max_tokens=5))
    pipeline.add_component("guard", SubQuestionGuard(similarity_threshold=0.8))
    restored = Pipeline.loads(pipeline.dumps(), allowed_modules=["docqa.*"])

    assert restored.get_component("summarizer").max_answer_tokens == 9
    assert restored.get_component("summarizer").local_template == load_prompt("resp_local_pathway")
    assert restored.get_component("reasoner").max_plan_tokens == 7
    assert isinstance(restored.get_component("generator").chat_generator, OpenAIChatGenerator)
    assert restored.get_component("guard").similarity_threshold == 0.8


class _TableEmbedder:
    """Embeds by a fixed table; counts calls to check caching."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table
        self.calls = 0

    def run(self, text: str) -> dict[str, Any]:
        self.calls += 1
        return {"embedding": self.table[text]}


class TestSubQuestionGuard:
    def test_normalisation(self) -> None:
        assert normalize_question("  Who is THE father of X? ") == "who is father of x"

    @pytest.mark.parametrize("candidate", ["who directed jaws", "Who  directed Jaws ?", "Jaws directed who?"])
    def test_text_repeats(self, candidate: str) -> None:
        out = SubQuestionGuard().run(candidate=candidate, asked=["Q?", "Who directed Jaws?"])
        assert out == {"repeated": True, "matched": "Who directed Jaws?", "similarity": 1.0, "method": "text"}

    def test_without_embedder_paraphrases_pass(self) -> None:
        out = SubQuestionGuard().run(candidate="Who was the director of Jaws?", asked=["Who directed Jaws?"])
        assert out["repeated"] is False and out["similarity"] is None

    def test_embedding_similarity_catches_paraphrases(self) -> None:
        embedder = _TableEmbedder({
            "Who was the director of Jaws?": [1.0, 0.1, 0.0],
            "Who directed Jaws?": [0.9, 0.1, 0.0],
            "When was Jaws released?": [0.0, 0.0, 1.0],
        })
        guard = SubQuestionGuard(embedder, similarity_threshold=0.95)
        out = guard.run(candidate="Who was the director of Jaws?",
                        asked=["When was Jaws released?", "Who directed Jaws?"])
        assert out["repeated"] is True and out["method"] == "embedding"
        assert out["matched"] == "Who directed Jaws?"
        assert out["similarity"] == pytest.approx(float(np.dot([1, .1, 0], [.9, .1, 0]) /
                                                        (np.linalg.norm([1, .1, 0]) * np.linalg.norm([.9, .1, 0]))))
        fresh = guard.run(candidate="When was Jaws released?", asked=["Who directed Jaws?"])
        assert fresh["repeated"] is False and fresh["similarity"] < 0.95
        calls = embedder.calls
        guard.run(candidate="Who was the director of Jaws?", asked=["Who directed Jaws?"])
        assert embedder.calls == calls

    def test_distinct_question_passes(self) -> None:
        embedder = _TableEmbedder({"A?": [1.0, 0.0], "B?": [0.0, 1.0]})
        out = SubQuestionGuard(embedder).run(candidate="A?", asked=["B?"])
        assert out["repeated"] is False and out["similarity"] == pytest.approx(0.0)

    def test_threshold_is_validated(self) -> None:
        with pytest.raises(ValueError):
            SubQuestionGuard(similarity_threshold=0.0)
