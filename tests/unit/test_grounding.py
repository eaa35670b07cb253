"""The grounding check: what is shown as the answer is backed by the passages it cites, in every strategy."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from haystack import Document, Pipeline, component
from haystack.dataclasses import ChatMessage, StreamingChunk
from haystack.document_stores.types import DuplicatePolicy

from docqa.access import AccessScope
from docqa.checkable_facts import FactIndex, gives_kind, question_kind, sentence_facts
from docqa.components.grounding_checker import GroundingChecker, split_answer
from docqa.pipelines.registry import build_pipeline
from docqa.pipelines.yaml_strategies import load_strategy
from docqa.result import PipelineResult
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.token_stream import stream_answer_tokens
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.yaml_strategy_files import bm25_rag_yaml

ALICE = AccessScope("acme", frozenset({"alice"}))
QUESTION = "What is the hotel limit per year?"
TRAVEL = (
    "Travel policy: the hotel limit is EUR 5,000 per year, approved by Jane Smith in March 2021. "
    "Hotels above the limit need written approval from the finance director."
)
MEALS = "Meals abroad are reimbursed with a daily allowance of 45 euros per day of travel."


def _doc(doc_id: str, text: str, access: tuple[str, ...] = ("everyone",)) -> Document:
    return Document(id=doc_id, content=text, meta={"tenant": "acme", "access": list(access), "source": f"{doc_id}.md"})


def _check(answer: str, documents: list[Document], question: str = QUESTION, **inputs: Any) -> dict[str, Any]:
    return GroundingChecker().run(question=question, answer=answer, documents=documents, **inputs)


TRAVEL_DOC, MEALS_DOC = _doc("travel", TRAVEL), _doc("meals", MEALS)


class TestFacts:
    @pytest.mark.parametrize("written", ["EUR 5,000", "€5000", "5000 euros", "5 000 EUR", "EUR 5.000,00"])
    def test_amounts_in_other_formatting_are_the_same_value(self, written):
        facts = sentence_facts(f"The limit is {written} per year.")
        assert [f.kind for f in facts] == ["number"] and FactIndex.of(TRAVEL).supports(facts[0])

    @pytest.mark.parametrize("written", ["March 2021", "2021-03", "03/2021", "Mar. 2021", "in 2021"])
    def test_dates_in_other_formatting_are_the_same_date(self, written):
        index = FactIndex.of(TRAVEL)
        assert all(index.supports(f) for f in sentence_facts(f"It was approved {written}."))

    def test_a_different_amount_a_cut_number_and_another_month_are_not(self):
        index = FactIndex.of(TRAVEL)
        for sentence in ("The limit is EUR 20,000.", "The limit is EUR 50,00", "It was approved in April 2021."):
            assert not all(index.supports(f) for f in sentence_facts(sentence)), sentence

    def test_names_are_capitalised_words_past_the_first_outside_common_words(self):
        facts = sentence_facts("However, the Travel policy was approved on Monday by Jane Smith and John Carter.")
        assert [f.text for f in facts if f.kind == "name"] == ["Travel", "Jane", "Smith", "John", "Carter"]
        index = FactIndex.of(TRAVEL)
        assert [f.text for f in facts if not index.supports(f)] == ["John", "Carter"]


class TestChecker:
    def test_a_correct_answer_with_other_number_formatting_is_kept_unchanged(self):
        out = _check("The hotel limit is €5000 per year, set in 2021-03 [1].", [TRAVEL_DOC, MEALS_DOC])
        assert out["answer"] == "The hotel limit is €5000 per year, set in 2021-03 [1]."
        assert (out["answer_source"], out["answer_note"], out["reason"]) == ("model", None, None)
        assert [d.id for d in out["cited_documents"]] == ["travel"]
        assert out["verdicts"] == [{"sentence": out["answer"], "verdict": "kept", "reason": None, "cites": [1]}]

    def test_a_wrong_number_falls_back_to_the_extracted_answer_naming_the_reason(self):
        out = _check("The hotel limit is EUR 20,000 per year [1].", [TRAVEL_DOC])
        assert out["answer_source"] == "extracted" and out["reason"] == "unsupported_number"
        assert "EUR 5,000" in out["answer"] and "20,000" not in out["answer"]
        assert "unsupported_number" in out["answer_note"] and "not generated" in out["answer_note"]
        assert out["verdicts"][0]["verdict"] == "dropped" and out["verdicts"][0]["unsupported"] == ["20,000"]

    def test_an_invented_name_is_unsupported_but_a_name_from_the_question_is_fine(self):
        out = _check("The hotel limit was set by John Carter.", [TRAVEL_DOC])
        assert (out["answer_source"], out["reason"]) == ("extracted", "unsupported_name")
        asked = _check("John Carter set no hotel limit.", [TRAVEL_DOC], question="Did John Carter set a limit?")
        assert asked["answer_source"] == "model"

    def test_a_later_unsupported_sentence_is_dropped_and_the_rest_kept(self):
        out = _check("The hotel limit is EUR 5,000 per year [1]. Meals cost 99 euros [2].", [TRAVEL_DOC, MEALS_DOC])
        assert out["answer"] == "The hotel limit is EUR 5,000 per year [1]."
        assert out["answer_source"] == "model" and out["reason"] == "unsupported_number"
        assert [d.id for d in out["cited_documents"]] == ["travel"]
        assert "unsupported_number" in out["answer_note"]
        assert [v["verdict"] for v in out["verdicts"]] == ["kept", "dropped"]

    def test_the_question_asked_back_before_an_answer_is_not_an_answer(self):
        # A small model's "<the question>?" then a stray word (seen on a MuSiQue question: "... started when?\nstaan").
        out = _check("What is the hotel limit per year?\nstaan", [TRAVEL_DOC])
        assert (out["answer_source"], out["reason"]) == ("extracted", "repeats_question")
        assert "EUR 5,000" in out["answer"] and "staan" not in out["answer"]
        assert out["verdicts"][0] == {"sentence": "What is the hotel limit per year?", "verdict": "dropped",
                                      "reason": "repeats_question", "cites": []}
        later = _check("The hotel limit is EUR 5,000 per year [1]. What is the hotel limit?", [TRAVEL_DOC])
        assert later["answer"] == "The hotel limit is EUR 5,000 per year [1]." and later["answer_source"] == "model"

    def test_an_answer_written_with_the_questions_words_is_not_the_question_again(self):
        out = _check("Yes, the hotel limit is per year.", [TRAVEL_DOC], question="Is the hotel limit per year?")
        assert out["answer_source"] == "model" and out["reason"] is None
        other = _check("Who approved it? Jane Smith approved it in March 2021.", [TRAVEL_DOC])
        assert other["reason"] is None and other["answer"].startswith("Who approved it?")

    def test_a_reply_reciting_a_prompt_instruction_is_replaced_whole(self):
        # ReSP's planning instruction, paraphrased at its start and then copied (trace 413a58e4, HotpotQA).
        reply = ("You are a computer programmer. Please understand the information gap between the currently "
                 "known information and the target question.")
        out = _check(reply, [TRAVEL_DOC])
        assert (out["answer_source"], out["reason"]) == ("extracted", "echo")
        assert "computer programmer" not in out["answer"] and "EUR 5,000" in out["answer"]
        assert out["verdicts"] == [{"sentence": reply, "verdict": "dropped", "reason": "echo"}]
        # Words an instruction also uses, but not eight of them in a row, are an answer.
        kept = _check("The documents do not contain the hotel limit for 2030.", [TRAVEL_DOC],
                      question="What is the hotel limit for 2030?")
        assert kept["answer_source"] == "model"

    def test_a_reply_copying_out_the_numbered_passages_is_an_echo(self):
        # The prompt lists "[1] <passage>"; a small model continues it, a word changed here and there (seen with
        # HotpotQA's "[1] Scott Andrew Buchholz Scott Andrew Buchholz (born ...", the title being "Scott Buchholz").
        copy = ("[1] Travel policy policy: the hotel limit is EUR 5,000 per year, approved by Jane Smith in March "
                "2021. Hotels above the limit need written approval from the finance director.")
        out = _check(copy, [TRAVEL_DOC, MEALS_DOC])
        assert (out["answer_source"], out["reason"]) == ("extracted", "echo")
        # One sentence quoted, or a quote with its marker after it, is an answer.
        quote = "[1] the hotel limit is EUR 5,000 per year, approved by Jane Smith in March 2021."
        assert _check(quote, [TRAVEL_DOC])["answer_source"] == "model"
        cited = ("Travel policy: the hotel limit is EUR 5,000 per year, approved by Jane Smith in March 2021. "
                 "Hotels above the limit need written approval from the finance director [1].")
        assert _check(cited, [TRAVEL_DOC])["answer_source"] == "model"
        # Words of the passage in the model's own order are not a copy.
        own = "[1] Jane Smith approved it in March 2021. The limit per year is EUR 5,000 for hotels."
        assert _check(own, [TRAVEL_DOC])["answer_source"] == "model"

    def test_a_short_answer_with_no_word_of_the_passages_is_unsupported(self):
        # A small model's one stray word (seen on MuSiQue: "mendatang" for a snowfall question).
        out = _check("mendatang", [TRAVEL_DOC], question="What needs written approval?")
        assert (out["answer_source"], out["reason"]) == ("extracted", "unsupported_answer")
        assert out["verdicts"][-1] == {"sentence": "mendatang", "verdict": "dropped", "reason": "unsupported_answer"}
        # A word of the passages in another form, or of the question, backs it; a long answer is checked by facts.
        assert _check("written approvals", [TRAVEL_DOC], question="What needs it?")["answer_source"] == "model"
        assert _check("Hotels, mostly.", [TRAVEL_DOC], question="What needs written approval?")["reason"] is None
        long = "The finance director decides this for every team in the company every single year."
        assert _check(long, [TRAVEL_DOC], question="What happens each year?")["answer_source"] == "model"

    def test_a_reply_of_markers_only_is_no_answer(self):
        out = _check("[1] [2].", [TRAVEL_DOC, MEALS_DOC])
        assert (out["answer_source"], out["reason"]) == ("extracted", "empty")
        assert "EUR 5,000" in out["answer"]

    def test_a_marker_without_a_passage_is_removed(self):
        out = _check("The hotel limit is EUR 5,000 per year [2].", [TRAVEL_DOC])
        assert out["answer"] == "The hotel limit is EUR 5,000 per year."
        assert (out["answer_source"], out["reason"]) == ("model", "unknown_citation")
        assert [d.id for d in out["cited_documents"]] == ["travel"]  # where its support was found
        assert out["verdicts"][0]["removed_markers"] == [2]

    def test_the_right_fact_cited_to_the_wrong_passage_is_a_wrong_citation(self):
        out = _check("The hotel limit is EUR 5,000 per year [2].", [TRAVEL_DOC, MEALS_DOC])
        assert (out["answer_source"], out["reason"]) == ("extracted", "wrong_citation")
        assert out["cited_documents"][0].id == "travel"

    def test_markers_are_renumbered_to_the_citations_listed(self):
        out = _check("Meals get 45 euros [2]. The hotel limit is EUR 5,000 [1][2].", [TRAVEL_DOC, MEALS_DOC])
        assert out["answer_source"] == "model"
        assert out["answer"] == "Meals get 45 euros [1]. The hotel limit is EUR 5,000 [2][1]."
        assert [d.id for d in out["cited_documents"]] == ["meals", "travel"]

    def test_a_reply_cut_by_the_token_limit_ends_at_its_last_complete_sentence(self):
        text = "The hotel limit is EUR 5,000 per year [1]. Above it, the finance director must approve in wri"
        out = _check(text, [TRAVEL_DOC], finish_reason="length")
        assert out["answer"] == "The hotel limit is EUR 5,000 per year [1]."
        assert (out["answer_source"], out["reason"]) == ("model", "truncated")
        # Without a finish reason, a fragment after complete sentences is cut as well; a one-line answer is not.
        assert _check(text, [TRAVEL_DOC])["answer"] == out["answer"]
        assert _check("EUR 5,000", [TRAVEL_DOC])["answer"] == "EUR 5,000"

    def test_a_truncated_number_falls_back(self):
        out = _check("The hotel limit is EUR 50,00", [TRAVEL_DOC], finish_reason="length")
        assert (out["answer_source"], out["reason"]) == ("extracted", "truncated")
        unknown = _check("The hotel limit is EUR 50,00", [TRAVEL_DOC])
        assert (unknown["answer_source"], unknown["reason"]) == ("extracted", "unsupported_number")

    def test_no_passage_says_so_naming_the_principals(self):
        out = _check("EUR 5,000", [], principals=["alice", "everyone"])
        assert out["answer"] == "No passage that alice or everyone may read matches the question."
        assert (out["answer_source"], out["reason"], out["cited_documents"]) == ("none", "no_readable_passage", [])

    def test_without_required_passages_only_markers_and_truncation_are_checked(self):
        out = GroundingChecker(require_passages=False).run(question="Capital of France?", answer="Paris [1].")
        assert (out["answer"], out["answer_source"], out["reason"]) == ("Paris.", "model", "unknown_citation")

    def test_a_record_table_answer_passes_through_and_is_the_fallback(self):
        table = "2 HbA1c results since 2018."
        kept = _check(table, [TRAVEL_DOC], answer_source="record_table", fallback_answer=table)
        assert (kept["answer"], kept["answer_source"]) == (table, "record_table")
        replaced = _check("HbA1c was 9.9 %.", [_doc("a", "HbA1c 6.1 %")], fallback_answer=table)
        assert (replaced["answer"], replaced["answer_source"]) == (table, "record_table")

    def test_sentences_split_after_markers_but_not_in_abbreviations_or_numbers(self):
        parts = [s.text for s in split_answer("Dr. Smith paid EUR 5.5 e.g. for hotels [1]. Then 2. [2]\nNext one")]
        assert parts == ["Dr. Smith paid EUR 5.5 e.g. for hotels [1].", "Then 2. [2]", "Next one"]

    def test_serialises_and_runs_in_a_pipeline(self):
        checker = GroundingChecker.from_dict(GroundingChecker(require_passages=False).to_dict())
        assert checker.require_passages is False
        pipeline = Pipeline()
        pipeline.add_component("grounding", GroundingChecker())
        loaded = Pipeline.loads(pipeline.dumps(), allowed_modules=["docqa.*"])
        out = loaded.run({"grounding": {"question": QUESTION, "answer": "EUR 5,000 [1].", "documents": [TRAVEL_DOC]}})
        assert out["grounding"]["answer_source"] == "model"


# A question of each kind about the travel passage: a right answer written differently from the passage, and an
# answer whose facts are all supported but which does not give what is asked (as a copied passage opening does).
KINDS = [
    (
        "yes_no",
        "Is the hotel limit EUR 5,000 per year?",
        "Yes: €5000 per year [{n}].",
        "The hotel limit is set by the travel policy [{n}].",
    ),
    (
        "name",
        "Who approved the hotel limit?",
        "It was approved by J. Smith [{n}].",
        "The hotel limit was approved by the finance director [{n}].",
    ),
    (
        "date",
        "When was the hotel limit approved?",
        "It was approved in 2021-03 [{n}].",
        "It was approved by Jane Smith [{n}].",
    ),
    (
        "number",
        "How much is the hotel limit per year?",
        "5 000 EUR [{n}].",
        "The limit is set by the travel policy [{n}].",
    ),
]


class TestAnswerKind:
    @pytest.mark.parametrize(("kind", "question", "right", "wrong"), KINDS, ids=[k[0] for k in KINDS])
    def test_a_right_answer_of_the_asked_kind_stays_the_models(self, kind, question, right, wrong):
        answer = right.format(n=1)
        out = _check(answer, [TRAVEL_DOC, MEALS_DOC], question=question)
        assert (out["answer"], out["answer_source"], out["answer_note"], out["reason"]) == (answer, "model", None, None)
        assert out["verdicts"][-1] == {
            "sentence": answer,
            "verdict": "kept",
            "reason": None,
            "answers": kind,
            "expected": out["verdicts"][-1]["expected"],
        }

    @pytest.mark.parametrize(("kind", "question", "right", "wrong"), KINDS, ids=[k[0] for k in KINDS])
    def test_a_supported_answer_of_another_kind_is_replaced_by_the_extracted_one(self, kind, question, right, wrong):
        out = _check(wrong.format(n=1), [TRAVEL_DOC, MEALS_DOC], question=question)
        assert (out["answer_source"], out["reason"]) == ("extracted", "not_an_answer")
        assert "EUR 5,000" in out["answer"] and out["answer"] != wrong.format(n=1)
        assert out["answer_note"].startswith("No answer from the model (not_an_answer: ")
        # Its facts passed: the sentence is kept by the fact check, the answer dropped by the kind check.
        assert [v["verdict"] for v in out["verdicts"]] == ["kept", "dropped"]
        assert out["verdicts"][-1]["reason"] == "not_an_answer" and out["verdicts"][-1]["answers"] == kind

    @pytest.mark.parametrize(
        ("question", "kind"),
        [
            ("Are both magazines British publications?", "yes_no"),
            ("Isn't the limit too low?", "yes_no"),
            ("Did Jane Smith approve it?", "yes_no"),
            ("Which band was formed first, The Exies or Circus Diablo?", None),
            ("Is the limit EUR 5,000 or EUR 20,000?", None),
            ("Who was born first, Mark King or Nick Hexum?", None),
            ("Is the hotel larger or smaller than the office?", None),
            # Two prepositions joined by "or" offer no choice of answer.
            ("Who directed the film shot in or around Leland, North Carolina in 1986?", "name"),
            ("Do Lafzon Ki Kahani, is a 2016 film, a remake of Always, released in which year?", None),
            ("Who wrote the song?", "name"),
            ("To whom was it sent?", "name"),
            ("Whose album came out in 1999?", "name"),
            ("When did the war end?", "date"),
            ("In which year was it built?", "date"),
            ("What year was it?", "date"),
            ("When the team moved, who led it?", None),
            ("How many times was he selected?", "number"),
            ("How much does a night cost?", "number"),
            ("What is the hotel limit?", None),
            ("Where is it?", None),
        ],
    )
    def test_the_kind_a_question_asks_for(self, question, kind):
        assert question_kind(question) == kind

    @pytest.mark.parametrize(
        ("kind", "question", "answer"),
        [
            ("yes_no", "Is the limit above EUR 5,000?", "No, it is EUR 5,000 exactly."),
            ("yes_no", "Is the limit above EUR 5,000?", "The limit is not above EUR 5,000."),
            ("yes_no", "Are Nolan and Kalathil both film directors?", "Both are film directors [1][2]."),
            ("name", "Who is his godfather?", "Telemann."),
            ("name", "Who wrote the song?", "Jack Owens wrote it."),
            ("date", "When does monsoon season happen in New Delhi?", "In the middle of the summer."),
            ("date", "When did Maryland make anglicanism its established religion?", "With the Toleration Act."),
            ("date", "When was the band formed?", "In the late 1990s."),
            ("number", "How many times was he selected for the Pro Bowl?", "He was a two-time Pro Bowler."),
            ("number", "How much does a night cost?", "Nothing: it is free, twice a year."),
            ("number", "How many of the stores are in Florida?", "One of the stores [2]."),
            ("date", "When was Acme founded?", "unknown"),
            ("name", "Who founded Acme?", "The passages do not say."),
        ],
    )
    def test_answers_of_the_asked_kind_written_as_people_write_them(self, kind, question, answer):
        assert question_kind(question) == kind and gives_kind(kind, question, [answer])

    @pytest.mark.parametrize(
        ("question", "answer"),
        [
            ("Is the hotel limit EUR 5,000 per year?", "The hotel limit is EUR 5,000 per year [1]. So yes."),
            ("Who approved the hotel limit in the Travel policy?", "The Travel policy approved it [1]."),
            ("When was the EUR 5,000 hotel limit approved?", "The EUR 5,000 limit was approved [1]."),
            ("How many euros is the EUR 5,000 hotel limit?", "The EUR 5,000 hotel limit is per year [1]."),
            ("How many hotels need approval?", "The Travel policy is one of the oldest policies [1]."),
        ],
        ids=["yes_in_a_later_sentence", "name_from_the_question", "date_from_the_question", "number_from_the_question",
             "one_of_a_group_is_no_count"],
    )
    def test_what_the_question_holds_or_a_later_sentence_says_does_not_count(self, question, answer):
        out = _check(answer, [TRAVEL_DOC], question=question)
        assert (out["answer_source"], out["reason"]) == ("extracted", "not_an_answer")

    def test_without_passages_no_kind_is_required(self):
        out = GroundingChecker(require_passages=False).run(
            question="Is Paris the capital of France?", answer="Paris is the capital."
        )
        assert (out["answer"], out["answer_source"], out["reason"]) == ("Paris is the capital.", "model", None)
        assert [v["verdict"] for v in out["verdicts"]] == ["kept"]


# ---- every strategy that writes text --------------------------------------------------------------------------

AGENT = r"Reply with JSON"
GROUNDED, USEFUL = r"supported by the documents", r"answer the question \(Yes or No\)"
JUDGE, PLAN, GENERATE = (
    r"completely and accurately respond to the question",
    r"\[Your thought\]",
    r"Only give me the answer",
)
TREE_PLAN, RELEVANCE = r"You plan the research", r"Which of the numbered passages"
STRATEGIES = ["standard", "resp", "atrag", "mspr", "contregen", "yaml"]
BM25_RAG = bm25_rag_yaml(top_k=2)
Answer = str | Callable[[list[str]], str]


class HashRuntime(Runtime):
    def text_embedder(self) -> Any:
        return HashTextEmbedder()


def _numbered(prompt: str) -> list[str]:
    """The passages a prompt numbers `[n] text`, in order."""
    return [text for _, text in sorted((int(n), t) for n, t in re.findall(r"^\[(\d+)\] (.*)$", prompt, re.M))]


class Ask:
    """One strategy over the travel and meals passages, its final answer scripted (a text, or a function of the
    passages the answer is given, numbered as the generator numbers them)."""

    def __init__(
        self,
        tmp_path,
        strategy: str,
        documents: list[Document] | None = None,
        llm_class: type[ScriptedChatGenerator] = ScriptedChatGenerator,
    ) -> None:
        self.settings = Settings(data_dir=tmp_path, top_k=2, retrieval_candidates=5)
        self.strategy = strategy
        self.documents = documents if documents is not None else [TRAVEL_DOC, MEALS_DOC]
        self.llm_class = llm_class

    def run(
        self, answer: Answer, scope: AccessScope = ALICE, question: str = QUESTION
    ) -> tuple[PipelineResult, ScriptedChatGenerator]:
        observed: list[str] = []  # what mspr and resp were given, in the order of their citations

        def final(prompt: str) -> str:
            return answer(_numbered(prompt) or observed) if callable(answer) else answer

        def seen(prompt: str) -> str:
            found = sorted((prompt.find(text[:40]), text) for text in (TRAVEL, MEALS) if text[:40] in prompt)
            observed.extend(text for _, text in found if text not in observed)
            return "Short summary."

        def agent(prompt: str) -> str:
            seen(prompt)
            if "What the searches found" not in prompt:
                return json.dumps({"thought": "t", "action": "search_primary", "action_input": question})
            return json.dumps({"thought": "t", "action": "answer", "action_input": final("")})

        rules: list[tuple[str, Any]] = {
            "standard": [],
            "yaml": [],
            "resp": [(JUDGE, "Yes"), (GENERATE, final), (r"professional writer|respond completely", seen)],
            "atrag": [(GROUNDED, "Yes"), (USEFUL, "Yes"), (r"Reasoning:\s*$", lambda p: "Answer: " + final(p))],
            "mspr": [(AGENT, agent), (r"Do the new passages|Is the proposed answer", "Yes")],
            "contregen": [
                (TREE_PLAN, '{"sub_questions": []}'),
                (RELEVANCE, lambda p: json.dumps({"relevant": list(range(1, len(_numbered(p)) + 1))})),
            ],
        }[self.strategy]
        llm = self.llm_class(rules=[*rules, (r".", final)])
        runtime = HashRuntime(self.settings, chat_generator_factory=lambda role: llm)
        runtime.document_store.write_documents(
            HashDocumentEmbedder().run(documents=self.documents)["documents"], policy=DuplicatePolicy.OVERWRITE
        )
        if self.strategy == "yaml":
            pipeline = load_strategy(BM25_RAG, name="bm25_rag", source="bm25_rag.yaml", runtime=runtime)
        else:
            pipeline = build_pipeline(self.strategy, runtime)
        return pipeline.run(question, scope), llm


def _grounding(result: PipelineResult) -> dict[str, Any]:
    steps = [s for s in result.steps if s.kind == "grounding"]
    assert len(steps) == 1, [s.kind for s in result.steps]
    return steps[0].outputs


def _cite(target: str, text: str) -> Callable[[list[str]], str]:
    """An answer citing the passage that contains `target` (by its number in the generator's numbering)."""

    def answer(passages: list[str]) -> str:
        number = next(i for i, passage in enumerate(passages, 1) if target in passage)
        return text.format(n=number)

    return answer


@pytest.mark.parametrize("strategy", STRATEGIES)
class TestEveryStrategy:
    def test_a_wrong_number_is_replaced_by_the_extracted_answer(self, tmp_path, strategy):
        result, _ = Ask(tmp_path, strategy).run("The hotel limit is EUR 20,000 per year.")
        assert result.answer_source == "extracted" and "20,000" not in result.answer
        assert "EUR 5,000" in result.answer and "unsupported_number" in result.answer_note
        verdicts = _grounding(result)["verdicts"]
        assert verdicts[0]["verdict"] == "dropped" and verdicts[0]["reason"] == "unsupported_number"

    def test_an_invented_name_is_replaced(self, tmp_path, strategy):
        result, _ = Ask(tmp_path, strategy).run("The hotel limit per year was set by John Carter.")
        assert result.answer_source == "extracted" and "Carter" not in result.answer
        assert _grounding(result)["reason"] == "unsupported_name"

    def test_a_marker_without_a_passage_is_removed(self, tmp_path, strategy):
        result, _ = Ask(tmp_path, strategy).run("The hotel limit is EUR 5,000 per year [7].")
        assert (result.answer, result.answer_source) == ("The hotel limit is EUR 5,000 per year.", "model")
        assert [c.document_id for c in result.citations] == ["travel"]
        assert _grounding(result)["verdicts"][0]["removed_markers"] == [7]

    def test_the_right_fact_cited_to_the_wrong_passage_is_replaced(self, tmp_path, strategy):
        result, _ = Ask(tmp_path, strategy).run(_cite("daily allowance", "The hotel limit is EUR 5,000 [{n}]."))
        assert result.answer_source == "extracted" and _grounding(result)["reason"] == "wrong_citation"
        assert result.citations[0].document_id == "travel"

    def test_a_truncated_number_is_never_shown(self, tmp_path, strategy):
        result, _ = Ask(tmp_path, strategy).run("The hotel limit is EUR 50,00")
        assert result.answer_source == "extracted" and "50,00" not in result.answer

    def test_a_correct_answer_in_other_formatting_is_the_models_unchanged(self, tmp_path, strategy):
        result, _ = Ask(tmp_path, strategy).run(_cite("hotel limit", "The hotel limit is €5000 per year [{n}]."))
        assert (result.answer, result.answer_source, result.answer_note) == (
            "The hotel limit is €5000 per year [1].",
            "model",
            None,
        )
        assert [c.document_id for c in result.citations] == ["travel"]
        assert _grounding(result)["verdicts"][0]["verdict"] == "kept"

    def test_no_readable_passage_answers_at_once_without_the_model(self, tmp_path, strategy):
        hidden = [_doc("travel", TRAVEL, access=("group:board",))]
        result, llm = Ask(tmp_path, strategy, documents=hidden).run("EUR 5,000")
        assert llm.calls == [] and result.totals.llm_calls == 0
        assert result.answer == "No passage that alice or everyone may read matches the question."
        assert result.answer_source == "none" and result.citations == []
        assert result.steps  # a trace: the access check


@pytest.mark.parametrize("strategy", ["standard", "resp", "atrag"])
@pytest.mark.parametrize(("kind", "question", "right", "wrong"), KINDS, ids=[k[0] for k in KINDS])
class TestAnswerKindInStrategies:
    def test_a_right_answer_of_the_asked_kind_stays_the_models(self, tmp_path, strategy, kind, question, right, wrong):
        result, _ = Ask(tmp_path, strategy).run(_cite("hotel limit", right), question=question)
        assert (result.answer, result.answer_source, result.answer_note) == (right.format(n=1), "model", None)
        assert [c.document_id for c in result.citations] == ["travel"]
        verdict = _grounding(result)["verdicts"][-1]
        assert (verdict["verdict"], verdict["answers"]) == ("kept", kind)

    def test_a_supported_answer_of_another_kind_is_replaced(self, tmp_path, strategy, kind, question, right, wrong):
        result, _ = Ask(tmp_path, strategy).run(_cite("hotel limit", wrong), question=question)
        assert result.answer_source == "extracted" and "not_an_answer" in result.answer_note
        assert result.answer != wrong.format(n=1) and "EUR 5,000" in result.answer
        grounding = _grounding(result)
        assert grounding["reason"] == "not_an_answer"
        assert grounding["verdicts"][-1]["verdict"] == "dropped" and grounding["verdicts"][-1]["answers"] == kind


class EchoingStream(ScriptedChatGenerator):
    """Streams in 16-character pieces when a call streams (only answer calls do), and such a reply starts by
    repeating the whole prompt, as small base models do; other calls answer as scripted."""

    @component.output_types(replies=list[ChatMessage])
    def run(
        self,
        messages: list[ChatMessage],
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: Callable[[StreamingChunk], None] | None = None,
    ) -> dict[str, Any]:
        reply = super().run(messages, generation_kwargs)["replies"][0]
        if streaming_callback is None:
            return {"replies": [reply]}
        text = f"{messages[-1].text}\n{reply.text}"
        for start in range(0, len(text), 16):
            streaming_callback(StreamingChunk(content=text[start : start + 16]))
        return {"replies": [ChatMessage.from_assistant(text, meta=reply.meta)]}

    @component.output_types(replies=list[ChatMessage])
    async def run_async(
        self,
        messages: list[ChatMessage],
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: Callable[[StreamingChunk], None] | None = None,
    ) -> dict[str, Any]:
        return self.run(messages, generation_kwargs, streaming_callback)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_prompt_echo_at_the_start_of_a_stream_is_never_streamed(tmp_path, strategy):
    tokens: list[tuple[str, int]] = []
    with stream_answer_tokens(lambda text, call: tokens.append((text, call))):
        result, llm = Ask(tmp_path, strategy, llm_class=EchoingStream).run(
            _cite("hotel limit", "The hotel limit is €5000 per year [{n}].")
        )
    assert (result.answer, result.answer_source) == ("The hotel limit is €5000 per year [1].", "model")
    streamed = "".join(text for text, _ in tokens)
    # Nothing of the prompt reaches the stream: not its instructions, the question, or the passages it numbers.
    prompts = [call["prompt"] for call in llm.calls]
    instructions = {
        line.strip()
        for prompt in prompts
        for line in prompt.splitlines()
        if len(line.strip()) > 20 and not line.startswith("[") and QUESTION not in line
    }
    assert not any(line in streamed for line in instructions)
    assert QUESTION not in streamed and TRAVEL not in streamed and MEALS not in streamed
    if strategy == "mspr":
        assert tokens == []  # its answer is an agent action (JSON), which never streams
    else:
        # The answer call's stream is the reply after the echo, exactly (its own passage numbering).
        last = max(call for _, call in tokens)
        shown = "".join(text for text, call in tokens if call == last)
        assert re.fullmatch(r"The hotel limit is €5000 per year \[\d\]\.", shown), streamed


def test_no_retrieval_checks_markers_but_has_no_passages_to_check_facts_against(tmp_path):
    runtime = HashRuntime(
        Settings(data_dir=tmp_path),
        chat_generator_factory=lambda role: ScriptedChatGenerator(default="Paris is the capital [1]."),
    )
    result = build_pipeline("no_retrieval", runtime).run("Capital of France?", ALICE)
    assert (result.answer, result.answer_source) == ("Paris is the capital.", "model")
    assert _grounding(result)["reason"] == "unknown_citation"


def test_a_finish_reason_length_cuts_the_standard_answer(tmp_path):
    class Cut(ScriptedChatGenerator):
        """Every reply stopped by the token limit."""

        @component.output_types(replies=list[ChatMessage])
        def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
            reply = super().run(messages, generation_kwargs)["replies"][0]
            return {"replies": [ChatMessage.from_assistant(reply.text, meta={**reply.meta, "finish_reason": "length"})]}

        @component.output_types(replies=list[ChatMessage])
        async def run_async(
            self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None
        ) -> dict[str, Any]:
            return self.run(messages, generation_kwargs)

    llm = Cut(default="The hotel limit is EUR 5,000 per year [1]. Late approval needs the finance dir")
    runtime = HashRuntime(Settings(data_dir=tmp_path, top_k=1), chat_generator_factory=lambda role: llm)
    runtime.document_store.write_documents(HashDocumentEmbedder().run(documents=[TRAVEL_DOC])["documents"])
    result = build_pipeline("standard", runtime).run(QUESTION, ALICE)
    assert (result.answer, result.answer_source) == ("The hotel limit is EUR 5,000 per year [1].", "model")
    assert _grounding(result)["verdicts"][-1] == {
        "sentence": "Late approval needs the finance dir",
        "verdict": "dropped",
        "reason": "truncated",
        "cites": [],
    }


def test_the_cli_names_who_asked_and_how_to_ask_as_someone_else(tmp_path, capsys):
    from docqa.cli import _print_result

    hidden = [_doc("travel", TRAVEL, access=("group:board",))]
    result, _ = Ask(tmp_path, "standard", documents=hidden).run("EUR 5,000", AccessScope("acme"))
    _print_result(result, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "No passage that everyone may read matches the question."
    assert "--principal" in lines[1] and not any(line.startswith("Extracted:") for line in lines)


def test_the_cli_shows_a_no_passage_answer_from_the_grounding_node_once_and_not_as_extracted(tmp_path, capsys):
    """AT-RAG's patient filter leaves its retrieval empty although the caller may read passages: the answer is the
    grounding node's, not the count's, and still reads as a no-passage answer, not as a quote."""
    from docqa.cli import _print_result

    llm = ScriptedChatGenerator(default="The hotel limit is EUR 5,000 per year [1].")
    runtime = HashRuntime(Settings(data_dir=tmp_path, top_k=2), chat_generator_factory=lambda role: llm)
    runtime.document_store.write_documents(HashDocumentEmbedder().run(documents=[TRAVEL_DOC])["documents"])
    result = build_pipeline("atrag", runtime).run(QUESTION, ALICE, patient_id="nobody", as_of="2020-01-01")
    assert (result.answer_source, _grounding(result)["reason"]) == ("none", "no_readable_passage")
    _print_result(result, as_json=False)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "No passage that alice or everyone may read matches the question."
    assert "--principal" in lines[1] and not any(line.startswith("Extracted:") for line in lines)


SONG = _doc("song", "In Search of a Song is a 1971 country album.")


def _two_rounds(tmp_path, documents: list[Document], answer: str) -> PipelineResult:
    """AT-RAG over `documents`, one passage a round: the question's round finds the first, the rewrite the second
    (a query about the song); every answer is `answer` and judged unsupported, so the last round's stands."""
    rewrite = json.dumps({"query": "In Search of a Song country album 1971"})
    llm = ScriptedChatGenerator(
        rules=[(r"Write one better search query", rewrite), (GROUNDED, "No"), (r"Reasoning:\s*$", f"Answer: {answer}")]
    )
    runtime = HashRuntime(Settings(data_dir=tmp_path, top_k=1), chat_generator_factory=lambda role: llm)
    runtime.document_store.write_documents(HashDocumentEmbedder().run(documents=documents)["documents"])
    return build_pipeline("atrag", runtime, max_iterations=2).run(QUESTION, ALICE)


def _prompted(result: PipelineResult) -> list[list[str]]:
    """The passages each round's answer was given, by id."""
    return [[d["id"] for d in s.inputs["documents"]] for s in result.steps if s.name == "cot_answer_generator"]


def test_when_the_last_round_gives_nothing_to_quote_the_runs_earlier_passages_are_quoted(tmp_path):
    """AT-RAG's last round may retrieve only unrelated passages; the passage an earlier round found is quoted."""
    result = _two_rounds(tmp_path, [_doc("travel", TRAVEL), SONG], "")
    assert _prompted(result) == [["travel"], ["song"]]
    assert result.answer_source == "extracted"
    assert "EUR 5,000" in result.answer and [c.document_id for c in result.citations] == ["travel"]
    # "only repeated the prompt", not "gave no answer": the grader's and rewriter's calls did reply (see
    # `unusable_reason`); either way the note says the sentences are quoted.
    assert result.answer_note.startswith("No answer from the model (the model only repeated the question or prompt)")
    assert result.answer_note.endswith("quoted from the retrieved passages, not generated.")
    # The grounding node quotes the run's passages itself: every round's retrieval reached its `retrieved` input.
    checked = result.steps[-1]
    assert checked.kind == "grounding" and [d["id"] for d in checked.outputs["cited_documents"]] == ["travel"]
    assert {d["id"] for group in checked.inputs["retrieved"] for d in group} >= {"travel", "song"}


def test_no_passage_in_the_whole_run_stays_no_answer(tmp_path):
    result = _two_rounds(tmp_path, [SONG], "")
    assert (result.answer_source, result.answer, result.citations) == ("none", "", [])


def test_an_extracted_answer_quotes_every_round_only_when_the_run_retrieved_more_than_the_node_was_given(tmp_path):
    song = _doc("song", "In Search of a Song is a 1971 country album with a hotel song.")
    for retrieved, expected in (([song], ["song"]), ([_doc("travel", TRAVEL), song], ["travel"])):
        result = _two_rounds(tmp_path / str(len(retrieved)), retrieved, "In Search of a Song is a 1972 album [1].")
        assert _prompted(result)[-1] == ["song"] and _grounding(result)["reason"] == "unsupported_number"
        # Either way the grounding node's quote is the answer: from what it was given when the run retrieved
        # nothing more, else from every round's passages.
        assert result.steps[-1].kind == "grounding" and result.answer_source == "extracted"
        assert [c.document_id for c in result.citations] == expected
        if expected == ["travel"]:
            assert "EUR 5,000" in result.answer


@component
class _Found:
    @component.output_types(documents=list[Document], query=str)
    def run(self, query: str) -> dict[str, Any]:
        return {"documents": [Document(id="d1", content="Hotels up to EUR 5,000.", meta={"source": "t.md"})],
                "query": query}


@component
class _Answer:
    @component.output_types(answer=str, draft=str)
    def run(self, query: str, documents: list[Document]) -> dict[str, Any]:
        return {"answer": "No idea.", "draft": "No idea."}


@component
class _After:
    @component.output_types(documents=list[Document])
    def run(self, draft: str) -> dict[str, Any]:
        return {"documents": []}


def test_the_grounding_node_hears_every_retrieval_before_the_answer_and_nothing_after_it():
    """A graph without `candidates` outputs (a YAML strategy's plain retriever) feeds its Document outputs to
    `retrieved`; a node only the answer leads to is never wired (it would wait for the answer it follows)."""
    from docqa.pipelines.grounding import attach_grounding

    pipeline = Pipeline()
    for name, instance in (("found", _Found()), ("answer", _Answer()), ("after", _After())):
        pipeline.add_component(name, instance)
    pipeline.connect("found.documents", "answer.documents")
    pipeline.connect("found.query", "answer.query")
    pipeline.connect("answer.draft", "after.draft")
    assert attach_grounding(pipeline) == "grounding"
    senders = {edge[0] for edge in pipeline.graph.in_edges("grounding", data=True)
               if edge[2]["to_socket"].name == "retrieved"}
    assert senders == {"found"}
    out = pipeline.run({"found": {"query": "Hotel limit?"}, "grounding": {"question": "What is the hotel limit?"}})
    assert out["grounding"]["answer_source"] == "extracted" and "EUR 5,000" in out["grounding"]["answer"]


def test_a_graders_unsupported_verdict_replaces_an_answer_the_checks_would_keep():
    docs = [Document(id="d1", content="Hotels are reimbursed up to EUR 5,000 per trip.", meta={"source": "t.md"})]
    kept = GroundingChecker().run(question="What is the hotel limit?", answer="Up to EUR 5,000 [1].", documents=docs)
    assert kept["answer_source"] == "model"
    judged = GroundingChecker().run(question="What is the hotel limit?", answer="Up to EUR 5,000 [1].",
                                    documents=docs, grounded=False)
    assert (judged["answer_source"], judged["reason"]) == ("extracted", "ungrounded")
    assert judged["verdicts"][-1] == {"sentence": "Up to EUR 5,000 [1].", "verdict": "dropped", "reason": "ungrounded"}
