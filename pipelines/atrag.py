"""AT-RAG: topic-filtered retrieval, chain-of-thought answering, and an answer grader driving query rewrites.

Per iteration: retrieve (narrowed to the question's topic, with a recorded fallback) -> reason and answer ->
grade (hallucination, then usefulness) -> on failure rewrite the query and go again, at most
`max_iterations` times; the last answer is returned when none passes. Questions about patient records with a
time phrase ("in the last two years", "since 2015", "last visit") are resolved against an explicit `as_of`
instant into patient and date-range filters, and then every record in the window is retrieved, not a top-k.
When the question also names what it asks for (record types, a code or name, "abnormal", "active ... as of"),
`RecordQueryResolver` turns that into exact metadata filters: the records retrieved are exactly the matching ones
(no topic narrowing, no ranking), and the result carries a record table computed from them (the last step's
`table`, and one citation per record with its table row), which the model's answer summarises.

Usage:
    pipeline = build_pipeline("atrag", runtime, max_iterations=3)
    result = pipeline.run("Abnormal lab results within the last year?", scope,
                          as_of="2020-01-01T00:00:00Z", patient_id="ba18818d-...")
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from haystack import Document

from docqa.access import AccessScope, restrict
from docqa.components.answer_grader import AnswerGrader
from docqa.components.cot_answer_generator import CoTAnswerGenerator
from docqa.components.prompt_templates import load_prompt, prompt_fingerprint
from docqa.components.query_rewriter import QueryRewriter
from docqa.components.record_query_resolver import RecordQueryResolver
from docqa.components.record_table_builder import RecordTableBuilder
from docqa.components.record_window_retriever import RecordWindowRetriever
from docqa.components.time_scope_resolver import TimeScopeResolver, scope_filters
from docqa.components.topic_assigner import TopicAssigner
from docqa.components.topic_filtered_retriever import TopicFilteredRetriever
from docqa.pipelines.base import citations_from_documents, finish, validate_question
from docqa.pipelines.options import ATRAGInputs, ATRAGOptions
from docqa.pipelines.registry import register
from docqa.recording import StepRecorder, document_summary
from docqa.result import Citation, PipelineResult
from docqa.runtime import Runtime

STOP_ACCEPTED = "answer_accepted"
STOP_MAX_ITERATIONS = "max_iterations"
STOP_NO_NEW_QUERY = "no_new_query"
MODE_EXACT_RECORDS = "exact_record_query"
RECORD_SUMMARY_ID = "record-table-summary"
_UNUSABLE_ANSWER = re.compile(r"^\W*(?:i\s+(?:do\s+not|don't|cannot|can't)\s+(?:know|tell|say|answer)|unknown|n/?a|"
                              r"none|no\s+answer|not\s+sure)\W*$", re.IGNORECASE)


def topic_model_dir(data_dir: Path, tenant: str) -> Path:
    """One directory of topic model versions per tenant (a readable, collision-free name)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", tenant)[:40]
    return Path(data_dir) / "topic_models" / f"{readable}-{hashlib.sha256(tenant.encode()).hexdigest()[:8]}"


def _and(*filters: dict[str, Any] | None) -> dict[str, Any] | None:
    present = [f for f in filters if f]
    if not present:
        return None
    return present[0] if len(present) == 1 else {"operator": "AND", "conditions": present}


class ATRAGPipeline:
    """The AT-RAG driver loop; collaborators are components, topic models are per tenant."""

    name = "atrag"

    def __init__(
        self,
        *,
        ranked_retriever: Any,
        record_retriever: RecordWindowRetriever,
        topic_assigner_for: Callable[[str], TopicAssigner],
        time_resolver: TimeScopeResolver,
        generator: CoTAnswerGenerator,
        grader: AnswerGrader,
        rewriter: QueryRewriter,
        top_k: int,
        max_iterations: int,
        min_topic_probability: float,
        max_scoped_records: int,
        max_question_chars: int,
        models: dict[str, str | None] | None = None,
        record_resolver: RecordQueryResolver | None = None,
        table_builder: RecordTableBuilder | None = None,
    ) -> None:
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        self.ranked_retriever = ranked_retriever
        self.record_retriever = record_retriever
        self.topic_assigner_for = topic_assigner_for
        self.time_resolver = time_resolver
        self.generator = generator
        self.grader = grader
        self.rewriter = rewriter
        self.top_k = top_k
        self.max_iterations = max_iterations
        self.min_topic_probability = min_topic_probability
        self.max_scoped_records = max_scoped_records
        self.max_question_chars = max_question_chars
        self.models = models or {}
        if record_resolver is None:
            record_resolver = RecordQueryResolver(time_resolver.document_store)
            record_resolver.time_resolver = time_resolver
        self.record_resolver = record_resolver
        self.table_builder = table_builder or RecordTableBuilder()
        self._retrievers: dict[tuple[str, bool], TopicFilteredRetriever] = {}
        self._lock = threading.Lock()

    def config(self) -> dict[str, Any]:
        return {
            "pipeline": self.name,
            "models": self.models,
            "top_k": self.top_k,
            "max_iterations": self.max_iterations,
            "min_topic_probability": self.min_topic_probability,
            "max_scoped_records": self.max_scoped_records,
            "prompts": {
                "atrag_answer": prompt_fingerprint(self.generator.prompt_template),
                "atrag_grade_grounded": prompt_fingerprint(self.grader.grounded_template),
                "atrag_grade_useful": prompt_fingerprint(self.grader.useful_template),
                "atrag_rewrite": prompt_fingerprint(self.rewriter.prompt_template),
            },
        }

    def _topic_retriever(self, tenant: str, scoped: bool) -> TopicFilteredRetriever:
        with self._lock:
            key = (tenant, scoped)
            if key not in self._retrievers:
                # A time window asks for all its records: any record of the topic in it is enough to narrow.
                self._retrievers[key] = TopicFilteredRetriever(
                    retriever=self.record_retriever if scoped else self.ranked_retriever,
                    topic_assigner=self.topic_assigner_for(tenant),
                    min_probability=self.min_topic_probability,
                    min_documents=1 if scoped else None,
                    top_k=self.max_scoped_records if scoped else self.top_k,
                )
            return self._retrievers[key]

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None, *,
            as_of: str | None = None, patient_id: str | None = None, record_offset: int = 0) -> PipelineResult:
        """Answer `question` for `scope`; `as_of` (ISO, default now) anchors relative time phrases.

        `record_offset` pages through an exact record set larger than `max_scoped_records` (newest first).
        """
        question = validate_question(question, self.max_question_chars)
        if record_offset < 0:
            raise ValueError("record_offset must not be negative")
        recorder = StepRecorder()
        with recorder.step("time_scope", "record_query_resolver",
                           inputs={"question": question, "as_of": as_of, "patient_id": patient_id}) as step:
            resolved = self.record_resolver.run(question=question, as_of=as_of, patient_id=patient_id,
                                                filters=restrict(scope, filters))
            time_scope, record_query = resolved["scope"], resolved["query"]
            # Exact when the question names what it asks for and whose or when: then metadata alone decides.
            exact = record_query.exact and (time_scope.patient_id is not None or time_scope.kind != "none")
            step.outputs.update(scope=time_scope.to_dict(), record_query=record_query.to_dict(),
                                filters=resolved["filters"], exact=exact)
        scoped = exact or time_scope.kind != "none"
        # Unscoped questions keep ranked retrieval, narrowed only to the patient when one is known.
        query_filters = resolved["filters"] if scoped else scope_filters(time_scope)
        effective = restrict(scope, _and(filters, query_filters))
        retriever = self._topic_retriever(scope.tenant, scoped)
        top_k = self.max_scoped_records if scoped else self.top_k
        queries = [question]
        answer, cited, stop_reason, table = "", [], STOP_MAX_ITERATIONS, None
        for iteration in range(1, self.max_iterations + 1):
            query = queries[-1]
            with recorder.step("retrieval", "record_window_retriever" if exact else "topic_filtered_retriever",
                               inputs={"query": query, "iteration": iteration, "filters": effective, "top_k": top_k,
                                       "record_window": scoped, "exact": exact, "record_offset": record_offset,
                                       }) as step:
                if exact:
                    # The filters select exactly the records asked for: a topic filter could only drop some.
                    page = self.record_retriever.run(query=query, filters=effective, top_k=top_k,
                                                     offset=record_offset)
                    documents = page["documents"]
                    topic = {"mode": MODE_EXACT_RECORDS, "total": page["total"], "truncated": page["truncated"]}
                    if table is None:
                        table = self.table_builder.run(
                            documents=documents, total=page["total"], offset=page["offset"],
                            summary=page["summary"],
                            query={"record_query": record_query.to_dict(), "scope": time_scope.to_dict()},
                        )["table"]
                else:
                    retrieved = retriever.run(query=query, filters=effective, top_k=top_k)
                    documents, topic = retrieved["documents"], retrieved["topic"]
                step.outputs.update(topic=topic, documents=[document_summary(d) for d in documents])
            prompt_documents = _with_table_summary(documents, table) if table is not None else documents
            with recorder.step("reasoning", "cot_answer_generator",
                               inputs={"question": question, "iteration": iteration}) as step:
                generated = self.generator.run(question=question, documents=prompt_documents)
                answer, cited = generated["answer"], generated["cited_documents"]
                step.outputs.update(reasoning=generated["reasoning"], answer=answer,
                                    prompt_document_ids=[d.id for d in generated["prompt_documents"]],
                                    cited_document_ids=[d.id for d in cited])
            with recorder.step("grading", "answer_grader", inputs={"iteration": iteration, "answer": answer}) as step:
                grade = self.grader.run(question=question, answer=answer, documents=generated["prompt_documents"])
                step.outputs.update(grade)
            if grade["passed"]:
                stop_reason = STOP_ACCEPTED
                break
            if iteration == self.max_iterations:
                break
            with recorder.step("rewrite", "query_rewriter",
                               inputs={"previous_queries": list(queries), "feedback": grade["feedback"]}) as step:
                rewritten = self.rewriter.run(question=question, previous_queries=queries, feedback=grade["feedback"])
                step.outputs.update(rewritten)
            if rewritten["query"] is None:
                stop_reason = STOP_NO_NEW_QUERY
                break
            queries.append(rewritten["query"])
        if table is None:
            return finish(self, question, answer, citations_from_documents(cited), recorder, stop_reason=stop_reason)
        with recorder.step("record_table", "record_table_builder",
                           inputs={"total": table["total"], "offset": table["offset"]}) as step:
            model_answer = answer
            if not _usable(answer):
                answer = table["description"]
            step.outputs.update(table=table, answer_source="model" if answer == model_answer else "record_table")
        return finish(self, question, answer, record_citations(table), recorder, stop_reason=stop_reason)


def _usable(answer: str) -> bool:
    return bool(answer and answer.strip()) and not _UNUSABLE_ANSWER.match(answer.strip())


def _with_table_summary(documents: list[Document], table: dict[str, Any]) -> list[Document]:
    """The records, oldest first, after one document stating the table's totals (so a model sees the whole set)."""
    ordered = sorted(documents, key=lambda d: (str(d.meta.get("effective_start_utc") or ""), d.id))
    return [Document(id=RECORD_SUMMARY_ID, content="Record table: " + table["description"],
                     meta={"source": "record table"}), *ordered]


def record_citations(table: dict[str, Any], snippet_chars: int = 200) -> list[Citation]:
    """One citation per record of the table, in table order, each carrying its row."""
    citations = []
    for row in table["rows"]:
        value = f"{row['value']} {row.get('unit') or ''}".strip() if row.get("value") is not None else ""
        snippet = "; ".join(str(part) for part in (
            str(row.get("date") or "")[:10], row.get("type"), row.get("name"), value, row.get("flag")) if part)
        citations.append(Citation(document_id=row["record_id"], source=row.get("source"),
                                  snippet=snippet[:snippet_chars], record=row))
    return citations


@register("atrag", "AT-RAG: topic-filtered retrieval, chain-of-thought answer, graded with bounded query rewrites; "
                   "time-scoped questions over patient records.", ATRAGOptions, ATRAGInputs)
def build_atrag(runtime: Runtime, top_k: int | None = None, max_iterations: int = 3,
                min_topic_probability: float = 0.5, max_scoped_records: int = 200,
                max_tokens: int | None = None, max_prompt_documents: int = 20,
                max_document_chars: int = 600) -> ATRAGPipeline:
    settings = runtime.settings
    top_k = top_k or settings.top_k
    prompts_dir = settings.prompts_dir
    assigners: dict[str, TopicAssigner] = {}

    def topic_assigner_for(tenant: str) -> TopicAssigner:
        if tenant not in assigners:
            assigners[tenant] = TopicAssigner(topic_model_dir(settings.data_dir, tenant),
                                              text_embedder=runtime.text_embedder())
        return assigners[tenant]

    return ATRAGPipeline(
        ranked_retriever=runtime.retriever(top_k),
        record_retriever=RecordWindowRetriever(runtime.document_store, top_k=max_scoped_records),
        topic_assigner_for=topic_assigner_for,
        time_resolver=TimeScopeResolver(runtime.document_store),
        generator=CoTAnswerGenerator(runtime.chat_generator("generator"),
                                     prompt_template=load_prompt("atrag_answer", prompts_dir),
                                     max_tokens=max_tokens or settings.llm_max_tokens,
                                     max_documents=max_prompt_documents, max_document_chars=max_document_chars),
        grader=AnswerGrader(runtime.chat_generator("grader"),
                            grounded_template=load_prompt("atrag_grade_grounded", prompts_dir),
                            useful_template=load_prompt("atrag_grade_useful", prompts_dir),
                            max_documents=max_prompt_documents, max_document_chars=max_document_chars),
        rewriter=QueryRewriter(runtime.chat_generator("planner"),
                               prompt_template=load_prompt("atrag_rewrite", prompts_dir)),
        top_k=top_k,
        max_iterations=max_iterations,
        min_topic_probability=min_topic_probability,
        max_scoped_records=max_scoped_records,
        max_question_chars=settings.max_question_chars,
        models={role: settings.endpoint_for(role).model for role in ("generator", "grader", "planner")},
    )
