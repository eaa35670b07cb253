"""The baseline pipelines with a scripted LLM over a real embedded store (hash embeddings, no model load)."""

from __future__ import annotations

import pytest
from haystack import Document

from docqa.access import AccessScope
from docqa.components.cited_answer_generator import CitedAnswerGenerator
from docqa.components.hybrid_retriever import HybridRetriever
from docqa.components.prompt_templates import load_prompt
from docqa.components.store_retrievers import build_retrievers
from docqa.errors import InvalidOptionsError, InvalidQuestionError, UnknownPipelineError
from docqa.pipelines.baselines import NoRetrievalPipeline, StandardRAGPipeline
from docqa.pipelines.registry import available_pipelines, build_pipeline
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder
from tests.support.scripted_chat import ScriptedChatGenerator

ALICE = AccessScope("acme", frozenset({"alice"}))


def _doc(doc_id: str, text: str, tenant: str = "acme", access: tuple[str, ...] = ("everyone",)) -> Document:
    return Document(id=doc_id, content=text, meta={"tenant": tenant, "access": list(access), "source": f"{doc_id}.md"})


@pytest.fixture
def store(tmp_path):
    settings = Settings(data_dir=tmp_path)
    store = build_document_store(settings)
    docs = [
        _doc("hotel", "Hotel costs are reimbursed up to 180 euros per night in major cities."),
        _doc("mileage", "Mileage is reimbursed at 0.30 euros per kilometre."),
        _doc("secret", "The hotel budget for the board retreat is 900 euros per night.", access=("board",)),
        _doc("other", "Hotel costs at Globex are reimbursed up to 400 euros.", tenant="globex"),
    ]
    store.write_documents(HashDocumentEmbedder().run(documents=docs)["documents"])
    return store


def _standard(store, llm, top_k: int = 3) -> StandardRAGPipeline:
    settings = Settings()
    bm25, dense = build_retrievers(store, settings)
    retriever = HybridRetriever(bm25, dense, HashTextEmbedder(), top_k=top_k, candidates=10)
    generator = CitedAnswerGenerator(llm, prompt_template=load_prompt("standard_answer"), max_tokens=64)
    return StandardRAGPipeline(retriever, generator, top_k=top_k, max_question_chars=500, model="scripted")


def _named(result, name: str):
    return next(s for s in result.steps if s.name == name)


class TestStandardRAG:
    def test_answers_with_the_documents_the_model_cites(self, store):
        llm = ScriptedChatGenerator(rules=[(r"Question: .*hotel", "Up to 180 euros per night [1].")])
        result = _standard(store, llm).run("What is the hotel limit per night?", ALICE)

        assert result.answer == "Up to 180 euros per night [1]."
        assert [c.document_id for c in result.citations] == ["hotel"]
        assert [(s.kind, s.name, s.parent) for s in result.steps] == [
            ("retrieval", "hybrid_retriever", None), ("component", "request", 0), ("component", "bm25_retriever", 0),
            ("component", "text_embedder", 0), ("component", "embedding_retriever", 0), ("component", "fusion", 0),
            ("generation", "cited_answer_generator", None), ("prompt", "answer_prompt", 6),
            ("generation", "answer_llm", 6), ("parse", "answer_parser", 6), ("grounding", "grounding", None)]
        assert _named(result, "answer_llm").outputs["llm_calls"][0]["response"] == "Up to 180 euros per night [1]."
        assert _named(result, "cited_answer_generator").outputs["citation_mode"] == "explicit"
        assert result.totals.llm_calls == 1
        assert result.config["top_k"] == 3 and len(result.config["config_hash"]) == 64

    def test_prompt_holds_only_documents_the_caller_may_read(self, store):
        llm = ScriptedChatGenerator(default="I do not know.")
        result = _standard(store, llm, top_k=5).run("hotel budget per night", ALICE)

        retrieved = {d["id"] for d in result.steps[0].outputs["documents"]}
        assert retrieved == {"hotel", "mileage"}
        prompt = llm.calls[0]["prompt"]
        assert "900 euros" not in prompt and "Globex" not in prompt
        assert result.steps[0].inputs["filters"]["conditions"][0]["value"] == "acme"

    def test_board_member_sees_the_board_document(self, store):
        llm = ScriptedChatGenerator(default="900 euros [1]")
        board = AccessScope("acme", frozenset({"board"}))
        result = _standard(store, llm, top_k=5).run("board retreat hotel budget", board)
        assert "secret" in {d["id"] for d in result.steps[0].outputs["documents"]}

    def test_without_references_the_passages_stating_the_answer_are_cited(self, store):
        llm = ScriptedChatGenerator(default="0.30 euros")
        result = _standard(store, llm, top_k=2).run("mileage rate per kilometre", ALICE)
        assert _named(result, "cited_answer_generator").outputs["citation_mode"] == "context"
        assert {d["id"] for d in result.steps[0].outputs["documents"]} == {"hotel", "mileage"}
        # The generator proposes every passage it was given; the grounding check cites the one stating 0.30.
        assert [c.document_id for c in result.citations] == ["mileage"]

    def test_out_of_range_references_are_ignored(self, store):
        llm = ScriptedChatGenerator(default="See [7] and [0].")
        result = _standard(store, llm, top_k=2).run("mileage", ALICE)
        assert _named(result, "cited_answer_generator").outputs["citation_mode"] == "context"

    def test_rejects_empty_question_before_any_work(self, store):
        llm = ScriptedChatGenerator(default="x")
        with pytest.raises(InvalidQuestionError):
            _standard(store, llm).run("  ", ALICE)
        assert llm.calls == []


class TestNoRetrieval:
    def test_answers_from_the_model_alone(self):
        llm = ScriptedChatGenerator(default="Paris")
        pipeline = NoRetrievalPipeline(llm, prompt_template=load_prompt("no_retrieval_answer"), max_tokens=16,
                                       max_question_chars=100, model="scripted")
        result = pipeline.run("Capital of France?", ALICE)
        assert result.answer == "Paris"
        assert result.citations == []
        assert [s.kind for s in result.steps] == ["generation", "prompt", "generation", "parse", "grounding"]
        assert llm.calls[0]["generation_kwargs"]["max_tokens"] == 16


class TestRegistry:
    def test_baselines_are_registered(self):
        names = {spec.name for spec in available_pipelines()}
        assert {"no_retrieval", "standard"} <= names

    def test_unknown_name_lists_the_available_ones(self, tmp_path):
        runtime = Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda role: ScriptedChatGenerator())
        with pytest.raises(UnknownPipelineError, match=r"available: .*standard"):
            build_pipeline("nope", runtime)

    def test_builder_uses_the_generator_role(self, tmp_path):
        roles: list[str] = []

        def factory(role: str) -> ScriptedChatGenerator:
            roles.append(role)
            return ScriptedChatGenerator(default="ok")

        runtime = Runtime(Settings(data_dir=tmp_path), chat_generator_factory=factory)
        pipeline = build_pipeline("no_retrieval", runtime, max_tokens=8)
        assert pipeline.run("Hi?", ALICE).answer == "ok"
        assert roles == ["generator"]


class TestPromptEcho:
    def test_whole_echoed_prompt_lines_and_question_continuations_are_dropped(self, store):
        def echo(prompt: str) -> str:
            first_line = prompt.splitlines()[0]
            return f"{first_line}\nQuestion: what else?\nAnswer: 0.30 euros per kilometre [1]"

        llm = ScriptedChatGenerator(rules=[(r"mileage", echo)])
        result = _standard(store, llm, top_k=2).run("mileage rate", ALICE)
        assert result.answer == "0.30 euros per kilometre [1]"
        assert _named(result, "cited_answer_generator").outputs["citation_mode"] == "explicit"

    def test_a_reply_that_only_repeats_the_prompt_is_replaced_by_extracted_sentences(self, store):
        llm = ScriptedChatGenerator(rules=[(r"mileage", lambda prompt: prompt.splitlines()[0])])
        result = _standard(store, llm, top_k=2).run("mileage rate", ALICE)
        generation = _named(result, "cited_answer_generator").outputs
        assert generation["answer"] == "" and generation["citation_mode"] == "none"
        assert result.answer_source == "extracted"
        assert result.answer == "Mileage is reimbursed at 0.30 euros per kilometre. [1]"
        assert [c.document_id for c in result.citations] == ["mileage"]


def test_standard_builder_bounds_top_k(tmp_path):
    runtime = Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda role: ScriptedChatGenerator())
    with pytest.raises(InvalidOptionsError, match="top_k must be at most 100"):
        build_pipeline("standard", runtime, top_k=5000)
