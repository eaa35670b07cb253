"""Collaborators for ReSP unit tests: a keyword retriever honouring access filters, a scripted-LLM factory."""

from __future__ import annotations

import re
from typing import Any

from haystack import Document

from docqa.components.dual_function_summarizer import DualFunctionSummarizer
from docqa.components.memory_answer_generator import MemoryAnswerGenerator
from docqa.components.resp_reasoner import ReSPReasoner
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


class KeywordRetriever:
    """Ranks documents by shared words with the query, after applying the filters like the embedded store."""

    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.calls: list[dict[str, Any]] = []

    def run(self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None) -> dict[str, Any]:
        self.calls.append({"query": query, "filters": filters, "top_k": top_k})
        allowed = compile_filters(filters) if filters else (lambda _record: True)
        visible = [d for d in self.documents if allowed(StoredRecord(id=d.id, meta=d.meta))]
        scored = [(len(_words(query) & _words(d.content or "")), d) for d in visible]
        ranked = [Document(id=d.id, content=d.content, meta=d.meta, score=float(s))
                  for s, d in sorted(scored, key=lambda pair: -pair[0]) if s > 0]
        return {"documents": ranked[: top_k or 5]}


def doc(doc_id: str, content: str, title: str, tenant: str = "acme",
        access: tuple[str, ...] = ("everyone",)) -> Document:
    return Document(id=doc_id, content=content, meta={"title": title, "tenant": tenant, "access": list(access)})


def build(llm: Any, retriever: KeywordRetriever, *, max_iterations: int = 3, top_k: int = 1,
          guard: SubQuestionGuard | None = None) -> ReSPPipeline:
    return ReSPPipeline(
        retriever,
        DualFunctionSummarizer(llm),
        ReSPReasoner(llm),
        MemoryAnswerGenerator(llm),
        guard or SubQuestionGuard(),
        top_k=top_k,
        max_iterations=max_iterations,
        max_question_chars=500,
        models={"reasoner": "scripted", "summarizer": "scripted", "generator": "scripted"},
    )


def steps_of(result: Any, kind: str) -> list[Any]:
    return [step for step in result.steps if step.kind == kind]
