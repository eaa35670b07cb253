"""Collaborators for ReSP unit tests: a keyword retriever honouring access filters, a scripted-LLM factory."""

from __future__ import annotations

import re
from typing import Any

from haystack import Document, component

from docqa.components.dual_function_summarizer import DualFunctionSummarizer
from docqa.components.memory_answer_generator import MemoryAnswerGenerator
from docqa.components.resp_reasoner import ReSPJudge, ReSPPlanner
from docqa.components.sub_question_guard import SubQuestionGuard
from docqa.pipelines.resp import ReSPPipeline
from docqa.stores.filters import StoredRecord, compile_filters

# Regexes that tell the packaged ReSP prompts apart.
JUDGE = r"completely and accurately respond to the question"
LOCAL = r"respond completely and accurately to the question"
PLAN = r"\[Your thought\]"
GLOBAL = r"professional writer"
GENERATE = r"Only give me the answer"


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2}


@component
class KeywordRetriever:
    """Ranks documents by shared words with the query, after applying the filters like the embedded store."""

    def __init__(self, documents: list[Document], top_k: int = 5) -> None:
        self.documents = documents
        self.top_k = top_k
        self.calls: list[dict[str, Any]] = []

    @component.output_types(documents=list[Document])
    def run(self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None) -> dict[str, Any]:
        top_k = top_k or self.top_k
        self.calls.append({"query": query, "filters": filters, "top_k": top_k})
        allowed = compile_filters(filters) if filters else (lambda _record: True)
        visible = [d for d in self.documents if allowed(StoredRecord(id=d.id, meta=d.meta))]
        scored = [(len(_words(query) & _words(d.content or "")), d) for d in visible]
        ranked = [Document(id=d.id, content=d.content, meta=d.meta, score=float(s))
                  for s, d in sorted(scored, key=lambda pair: -pair[0]) if s > 0]
        return {"documents": ranked[:top_k]}


def doc(doc_id: str, content: str, title: str, tenant: str = "acme",
        access: tuple[str, ...] = ("everyone",)) -> Document:
    return Document(id=doc_id, content=content, meta={"title": title, "tenant": tenant, "access": list(access)})


def build(llm: Any, retriever: KeywordRetriever, *, max_iterations: int = 3, top_k: int = 1,
          guard: SubQuestionGuard | None = None) -> ReSPPipeline:
    retriever.top_k = top_k  # like the runtime's retrievers, built for the pipeline's top_k
    return ReSPPipeline(
        retriever,
        DualFunctionSummarizer(llm),
        ReSPJudge(llm),
        ReSPPlanner(llm, guard or SubQuestionGuard()),
        MemoryAnswerGenerator(llm),
        top_k=top_k,
        max_iterations=max_iterations,
        max_question_chars=500,
        models={"reasoner": "scripted", "summarizer": "scripted", "generator": "scripted"},
    )


def steps_of(result: Any, kind: str) -> list[Any]:
    return [step for step in result.steps if step.kind == kind]


def decisions(result: Any) -> list[dict[str, Any]]:
    """The controller's decisions, in order (its `control` steps' `decision` output)."""
    return [step.outputs["decision"] for step in result.steps if step.name == "resp_controller"]
