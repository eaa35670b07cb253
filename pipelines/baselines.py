"""Baselines every strategy is compared against: no retrieval, and standard single-round hybrid RAG.

Each is a `haystack.Pipeline` run through `HaystackStrategy`; `docqa pipelines export NAME` prints its YAML.
Hybrid retrieval stays docqa's `HybridRetriever` component for now: Haystack's
`DocumentJoiner(join_mode="reciprocal_rank_fusion")` fixes k at 61 with 0-based ranks (the same order as
`rrf_k=60`, but `DOCQA_RRF_K` could not be honoured) and rescales the fused scores by 61/n, which would change
every citation score; one component also keeps the single `retrieval` step of today's traces.
"""

from __future__ import annotations

from typing import Any

from haystack import Pipeline

from docqa.components.answer_generator import AnswerGenerator
from docqa.components.cited_answer_generator import CitedAnswerGenerator
from docqa.components.prompt_templates import load_prompt, prompt_fingerprint
from docqa.components.prompted_llm import inner_step_kinds
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines.haystack_strategy import HaystackStrategy
from docqa.pipelines.options import NoRetrievalOptions, StandardOptions
from docqa.pipelines.registry import register
from docqa.runtime import Runtime


class NoRetrievalPipeline(HaystackStrategy):
    """The generator answers from its own parameters: the lower bound for every retrieval strategy.

    Graph: `generator` (AnswerGenerator: `answer_prompt` -> `answer_llm` -> `answer_parser`) -> `grounding`
    (GroundingChecker without passages: its markers and a reply cut by the token limit are checked; its facts
    have nothing to be checked against).
    """

    def __init__(self, chat_generator: Any, *, prompt_template: str, max_tokens: int,
                 max_question_chars: int, model: str | None) -> None:
        pipeline = Pipeline()
        pipeline.add_component(
            "generator", AnswerGenerator(chat_generator, prompt_template=prompt_template, max_tokens=max_tokens)
        )
        super().__init__(
            "no_retrieval", pipeline, models={"generator": model}, max_question_chars=max_question_chars,
            kinds={**inner_step_kinds(pipeline), "generator": "generation"}, require_passages=False,
            summary={"max_tokens": max_tokens,
                     "prompts": {"no_retrieval_answer": prompt_fingerprint(prompt_template)}},
        )


class StandardRAGPipeline(HaystackStrategy):
    """Single-round RAG: hybrid retrieval of top-k chunks the caller may read, then a cited answer.

    Graph: `hybrid_retriever` (query, filters) -> `cited_answer_generator` (question, documents; `answer_prompt` ->
    `answer_llm` -> `answer_parser`) -> `grounding` (answer, the retrieved documents).
    """

    def __init__(self, retriever: Any, generator: CitedAnswerGenerator, *, top_k: int, max_question_chars: int,
                 model: str | None) -> None:
        if getattr(retriever, "top_k", top_k) != top_k:
            raise ValueError(f"the retriever returns {retriever.top_k} documents, not top_k={top_k}")
        pipeline = Pipeline()
        pipeline.add_component("hybrid_retriever", retriever)
        pipeline.add_component("cited_answer_generator", generator)
        pipeline.connect("hybrid_retriever.documents", "cited_answer_generator.documents")
        super().__init__(
            "standard", pipeline, models={"generator": model}, max_question_chars=max_question_chars,
            kinds={**inner_step_kinds(pipeline), "hybrid_retriever": "retrieval",
                   "cited_answer_generator": "generation"},
            summary={"top_k": top_k, "max_tokens": generator.max_tokens,
                     "prompts": {"standard_answer": prompt_fingerprint(generator.prompt_template)}},
        )


@register("no_retrieval", "Answer from the model alone (baseline without retrieval).", NoRetrievalOptions)
def build_no_retrieval(runtime: Runtime, max_tokens: int | None = None) -> NoRetrievalPipeline:
    settings = runtime.settings
    return NoRetrievalPipeline(
        RoleChatGenerator("generator", runtime.chat_generator("generator")),
        prompt_template=load_prompt("no_retrieval_answer", settings.prompts_dir),
        max_tokens=max_tokens or settings.llm_max_tokens,
        max_question_chars=settings.max_question_chars,
        model=settings.endpoint_for("generator").model,
    )


@register("standard", "Single-round hybrid retrieval (BM25 + dense, RRF) and a cited answer.", StandardOptions)
def build_standard(runtime: Runtime, top_k: int | None = None, max_tokens: int | None = None) -> StandardRAGPipeline:
    settings = runtime.settings
    top_k = top_k or settings.top_k
    generator = CitedAnswerGenerator(
        RoleChatGenerator("generator", runtime.chat_generator("generator")),
        prompt_template=load_prompt("standard_answer", settings.prompts_dir),
        max_tokens=max_tokens or settings.llm_max_tokens,
    )
    return StandardRAGPipeline(
        runtime.retriever(top_k),
        generator,
        top_k=top_k,
        max_question_chars=settings.max_question_chars,
        model=settings.endpoint_for("generator").model,
    )
