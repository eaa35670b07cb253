"""Baselines every strategy is compared against: no retrieval, and standard single-round hybrid RAG."""

from __future__ import annotations

from typing import Any

from docqa.access import AccessScope, restrict
from docqa.components.cited_answer_generator import CitedAnswerGenerator
from docqa.components.prompt_templates import load_prompt, prompt_fingerprint, render_prompt
from docqa.llm.calls import ChatGenerator, generate_text
from docqa.pipelines.base import citations_from_documents, finish, validate_question
from docqa.pipelines.options import NoRetrievalOptions, StandardOptions
from docqa.pipelines.registry import register
from docqa.recording import StepRecorder, document_summary
from docqa.result import PipelineResult
from docqa.runtime import Runtime


class NoRetrievalPipeline:
    """The generator answers from its own parameters: the lower bound for every retrieval strategy."""

    name = "no_retrieval"

    def __init__(self, chat_generator: ChatGenerator, *, prompt_template: str, max_tokens: int,
                 max_question_chars: int, model: str | None) -> None:
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template
        self.max_tokens = max_tokens
        self.max_question_chars = max_question_chars
        self.model = model

    def config(self) -> dict[str, Any]:
        return {
            "pipeline": self.name,
            "models": {"generator": self.model},
            "max_tokens": self.max_tokens,
            "prompts": {"no_retrieval_answer": prompt_fingerprint(self.prompt_template)},
        }

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None) -> PipelineResult:
        question = validate_question(question, self.max_question_chars)
        recorder = StepRecorder()
        with recorder.step("generation", "generator", inputs={"question": question}) as step:
            prompt = render_prompt(self.prompt_template, question=question)
            answer = generate_text(self.chat_generator, prompt, max_tokens=self.max_tokens, purpose="answer")
            step.outputs["answer"] = answer
        return finish(self, question, answer, [], recorder)


class StandardRAGPipeline:
    """Single-round RAG: hybrid retrieval of top-k chunks the caller may read, then a cited answer."""

    name = "standard"

    def __init__(self, retriever: Any, generator: CitedAnswerGenerator, *, top_k: int, max_question_chars: int,
                 model: str | None) -> None:
        self.retriever = retriever
        self.generator = generator
        self.top_k = top_k
        self.max_question_chars = max_question_chars
        self.model = model

    def config(self) -> dict[str, Any]:
        return {
            "pipeline": self.name,
            "models": {"generator": self.model},
            "top_k": self.top_k,
            "max_tokens": self.generator.max_tokens,
            "prompts": {"standard_answer": prompt_fingerprint(self.generator.prompt_template)},
        }

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None) -> PipelineResult:
        question = validate_question(question, self.max_question_chars)
        recorder = StepRecorder()
        effective_filters = restrict(scope, filters)
        retrieval_inputs = {"query": question, "top_k": self.top_k, "filters": effective_filters}
        with recorder.step("retrieval", "hybrid_retriever", inputs=retrieval_inputs) as step:
            documents = self.retriever.run(query=question, filters=effective_filters, top_k=self.top_k)["documents"]
            step.outputs["documents"] = [document_summary(d) for d in documents]
        with recorder.step(
            "generation", "cited_answer_generator",
            inputs={"question": question, "document_ids": [d.id for d in documents]},
        ) as step:
            out = self.generator.run(question=question, documents=documents)
            step.outputs.update(
                answer=out["answer"],
                cited_document_ids=[d.id for d in out["cited_documents"]],
                citation_mode=out["citation_mode"],
            )
        return finish(self, question, out["answer"], citations_from_documents(out["cited_documents"]), recorder)


@register("no_retrieval", "Answer from the model alone (baseline without retrieval).", NoRetrievalOptions)
def build_no_retrieval(runtime: Runtime, max_tokens: int | None = None) -> NoRetrievalPipeline:
    settings = runtime.settings
    return NoRetrievalPipeline(
        runtime.chat_generator("generator"),
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
        runtime.chat_generator("generator"),
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
