"""AT-RAG: topic-filtered retrieval, chain-of-thought answering, and an answer grader driving query rewrites.

A `haystack.Pipeline` run through `HaystackStrategy`. Per round: retrieve (narrowed to the question's topic,
with a recorded fallback) -> reason and answer -> grade (hallucination, then usefulness) -> on failure rewrite
the query and go again, at most `max_iterations` rounds; the last answer is returned when none passes. Questions
about patient records with a time phrase ("in the last two years", "since 2015", "last visit") are resolved
against an explicit `as_of` instant into patient and date-range filters, and then every record in the window is
retrieved, not a top-k. When the question also names what it asks for (record types, a code or name,
"abnormal", "active ... as of"), the filters select exactly the matching records (no topic narrowing, no
ranking), and the result carries a record table computed from them (the last step's `table`, and one citation
per record with its table row), which the model's answer summarises.

Graph (`docqa pipelines export atrag` prints it as YAML):

    record_query_resolver -> controller -state-> round_joiner -> retriever -> cot_answer_generator -> answer_grader
        controller <- (retriever.state, generator answer/cited_documents, grader passed/feedback)
        controller -final-> final_joiner -> record_table                      (answer_accepted, max_iterations)
        controller -previous_queries/rewrite_feedback-> query_rewriter -query-> rewrite_router
        controller -pending-> rewrite_router -again/next_query-> round_joiner, retriever   (a new query)
                                             -stopped-> final_joiner                        (no_new_query)

The decisions (stop reasons, the exact-record path) are in `ATRAGController`; the loop is bounded by the
controller (`max_iterations`) and again by Haystack's `max_runs_per_component`. Each tenant's topic model is
picked from the tenant of docqa's access filters, never from the caller.

Usage:
    pipeline = build_pipeline("atrag", runtime, max_iterations=3)
    result = pipeline.run("Abnormal lab results within the last year?", scope,
                          as_of="2020-01-01T00:00:00Z", patient_id="ba18818d-...")
"""

from __future__ import annotations

from typing import Any

from haystack import Pipeline
from haystack.components.joiners import BranchJoiner
from haystack.components.routers import ConditionalRouter

from docqa.components.answer_grader import AnswerGrader
from docqa.components.atrag_controller import (
    STOP_ACCEPTED,
    STOP_MAX_ITERATIONS,
    STOP_NO_NEW_QUERY,
    ATRAGController,
    ATRAGRound,
)
from docqa.components.atrag_retriever import MODE_EXACT_RECORDS, ATRAGRetriever
from docqa.components.cot_answer_generator import CoTAnswerGenerator
from docqa.components.prompt_templates import load_prompt, prompt_fingerprint
from docqa.components.query_rewriter import QueryRewriter
from docqa.components.record_query_resolver import RecordQueryResolver
from docqa.components.record_table_answer import RecordTableAnswer
from docqa.components.record_table_builder import RecordTableBuilder
from docqa.components.record_window_retriever import RecordWindowRetriever
from docqa.components.time_scope_resolver import TimeScopeResolver
from docqa.components.topic_assigner import TenantTopicAssigners
from docqa.components.topic_filtered_retriever import TopicFilteredRetriever
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines.haystack_strategy import HaystackStrategy
from docqa.pipelines.options import ATRAGInputs, ATRAGOptions
from docqa.pipelines.registry import register
from docqa.runtime import Runtime

__all__ = ["MODE_EXACT_RECORDS", "STOP_ACCEPTED", "STOP_MAX_ITERATIONS", "STOP_NO_NEW_QUERY", "ATRAGPipeline",
           "build_atrag"]

INPUT_NAMES = tuple(ATRAGInputs.model_fields)
KINDS = {"round_joiner": "routing", "final_joiner": "routing", "rewrite_router": "routing",
         "record_query_resolver": "time_scope", "retriever": "retrieval", "cot_answer_generator": "reasoning",
         "answer_grader": "grading", "query_rewriter": "rewrite", "controller": "control",
         "record_table": "record_table"}
# After a rewrite: nothing new ends the loop with the pending draft, a new query starts the next round.
REWRITE_ROUTES = [
    {"condition": "{{ query is none }}", "output": "pending", "output_name": "stopped", "output_type": ATRAGRound,
     "output_passthrough": True},
    {"condition": "{{ query is not none }}", "output": ["pending", "query"], "output_name": ["again", "next_query"],
     "output_type": [ATRAGRound, str], "output_passthrough": True},
]


def atrag_graph(*, resolver: RecordQueryResolver, retriever: ATRAGRetriever, generator: CoTAnswerGenerator,
                grader: AnswerGrader, rewriter: QueryRewriter, max_iterations: int,
                record_table: RecordTableAnswer | None = None) -> Pipeline:
    """The AT-RAG graph (see the module docstring); every component runs at most `max_iterations` + 1 times."""
    pipeline = Pipeline(max_runs_per_component=max_iterations + 1)
    pipeline.add_component("record_query_resolver", resolver)
    pipeline.add_component("controller", ATRAGController(max_iterations=max_iterations))
    pipeline.add_component("round_joiner", BranchJoiner(ATRAGRound))
    pipeline.add_component("retriever", retriever)
    pipeline.add_component("cot_answer_generator", generator)
    pipeline.add_component("answer_grader", grader)
    pipeline.add_component("query_rewriter", rewriter)
    pipeline.add_component("rewrite_router", ConditionalRouter(REWRITE_ROUTES))
    pipeline.add_component("final_joiner", BranchJoiner(ATRAGRound))
    pipeline.add_component("record_table", record_table or RecordTableAnswer())
    for sender, receiver in (
        ("record_query_resolver.scope", "controller.scope"),
        ("record_query_resolver.query", "controller.record_query"),
        ("record_query_resolver.filters", "controller.record_filters"),
        ("controller.state", "round_joiner.value"),
        ("round_joiner.value", "retriever.state"),
        ("retriever.prompt_documents", "cot_answer_generator.documents"),
        ("retriever.state", "controller.state"),
        ("cot_answer_generator.answer", "answer_grader.answer"),
        ("cot_answer_generator.prompt_documents", "answer_grader.documents"),
        ("cot_answer_generator.answer", "controller.answer"),
        ("cot_answer_generator.cited_documents", "controller.cited_documents"),
        ("cot_answer_generator.prompt_documents", "controller.prompt_documents"),
        ("answer_grader.passed", "controller.passed"),
        ("answer_grader.feedback", "controller.feedback"),
        ("controller.previous_queries", "query_rewriter.previous_queries"),
        ("controller.rewrite_feedback", "query_rewriter.feedback"),
        ("controller.pending", "rewrite_router.pending"),
        ("query_rewriter.query", "rewrite_router.query"),
        ("rewrite_router.again", "round_joiner.value"),
        ("rewrite_router.next_query", "retriever.query"),
        ("rewrite_router.stopped", "final_joiner.value"),
        ("controller.final", "final_joiner.value"),
        ("final_joiner.value", "record_table.result"),
    ):
        pipeline.connect(sender, receiver)
    return pipeline


class ATRAGPipeline(HaystackStrategy):
    """AT-RAG as a Haystack graph; collaborators are components, topic models are per tenant."""

    def __init__(
        self,
        *,
        ranked_retriever: Any,
        record_retriever: RecordWindowRetriever,
        topic_assigners: TenantTopicAssigners,
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
        if record_resolver is None:
            record_resolver = RecordQueryResolver(time_resolver.document_store)
            record_resolver.time_resolver = time_resolver
        retriever = ATRAGRetriever(
            ranked=TopicFilteredRetriever(ranked_retriever, topic_assigners=topic_assigners,
                                          min_probability=min_topic_probability, top_k=top_k),
            # A time window asks for all its records: any record of the topic in it is enough to narrow.
            window=TopicFilteredRetriever(record_retriever, topic_assigners=topic_assigners,
                                          min_probability=min_topic_probability, min_documents=1,
                                          top_k=max_scoped_records),
            records=RecordWindowRetriever(record_retriever.document_store, top_k=max_scoped_records),
            table_builder=table_builder,
        )
        self.generator, self.grader, self.rewriter = generator, grader, rewriter
        pipeline = atrag_graph(resolver=record_resolver, retriever=retriever, generator=generator, grader=grader,
                               rewriter=rewriter, max_iterations=max_iterations)
        super().__init__(
            "atrag", pipeline, models=models, max_question_chars=max_question_chars, kinds=KINDS,
            input_names=INPUT_NAMES,
            summary={
                "top_k": top_k,
                "max_iterations": max_iterations,
                "min_topic_probability": min_topic_probability,
                "max_scoped_records": max_scoped_records,
                "prompts": {
                    "atrag_answer": prompt_fingerprint(generator.prompt_template),
                    "atrag_grade_grounded": prompt_fingerprint(grader.grounded_template),
                    "atrag_grade_useful": prompt_fingerprint(grader.useful_template),
                    "atrag_rewrite": prompt_fingerprint(rewriter.prompt_template),
                },
            },
        )


@register("atrag", "AT-RAG: topic-filtered retrieval, chain-of-thought answer, graded with bounded query rewrites; "
                   "time-scoped questions over patient records.", ATRAGOptions, ATRAGInputs)
def build_atrag(runtime: Runtime, top_k: int | None = None, max_iterations: int = 3,
                min_topic_probability: float = 0.5, max_scoped_records: int = 200,
                max_tokens: int | None = None, max_prompt_documents: int = 20,
                max_document_chars: int = 600) -> ATRAGPipeline:
    settings = runtime.settings
    top_k = top_k or settings.top_k
    prompts_dir = settings.prompts_dir

    def llm(role: str) -> RoleChatGenerator:
        # A role, not an endpoint: the exported YAML names no URL or key, and a loaded copy uses the same models.
        return RoleChatGenerator(role, runtime.chat_generator(role))

    return ATRAGPipeline(
        ranked_retriever=runtime.retriever(top_k),
        record_retriever=RecordWindowRetriever(runtime.document_store, top_k=max_scoped_records),
        topic_assigners=TenantTopicAssigners(settings.data_dir, text_embedder=runtime.text_embedder()),
        time_resolver=TimeScopeResolver(runtime.document_store),
        generator=CoTAnswerGenerator(llm("generator"), prompt_template=load_prompt("atrag_answer", prompts_dir),
                                     max_tokens=max_tokens or settings.llm_max_tokens,
                                     max_documents=max_prompt_documents, max_document_chars=max_document_chars),
        grader=AnswerGrader(llm("grader"), grounded_template=load_prompt("atrag_grade_grounded", prompts_dir),
                            useful_template=load_prompt("atrag_grade_useful", prompts_dir),
                            max_documents=max_prompt_documents, max_document_chars=max_document_chars),
        rewriter=QueryRewriter(llm("planner"), prompt_template=load_prompt("atrag_rewrite", prompts_dir)),
        top_k=top_k,
        max_iterations=max_iterations,
        min_topic_probability=min_topic_probability,
        max_scoped_records=max_scoped_records,
        max_question_chars=settings.max_question_chars,
        models={role: settings.endpoint_for(role).model for role in ("generator", "grader", "planner")},
    )
