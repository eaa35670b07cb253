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

    record_query_resolver -> controller -state-> round_joiner -> round_query -> mode_router
        mode_router -exact_*->  record_retriever -> record_table_builder -> record_round
                    -window_*-> window_retriever (TopicFilteredRetriever over a RecordWindowRetriever)
                    -ranked_*-> ranked_retriever (TopicFilteredRetriever over a HybridRetriever)
        record_round / window_retriever / ranked_retriever -documents-> prompt_joiner -> cot_answer_generator
        record_round.state / mode_router.{window,ranked}_state -> retrieved_joiner -> controller.state
        cot_answer_generator -> answer_grader
        controller <- (retrieved round, generator answer/cited_documents, grader passed/feedback)
        controller -final-> final_joiner -> record_table                      (answer_accepted, max_iterations)
        controller -previous_queries/rewrite_feedback-> query_rewriter -query-> rewrite_router
        controller -pending-> rewrite_router -again/next_query-> round_joiner, round_query   (a new query)
                                             -stopped-> final_joiner                          (no_new_query)

The retrievers are `SuperComponent`s (a topic filter, query embedder, topic assigner and the retriever; the hybrid
retriever's BM25, embedder, dense retriever and fusion), so every retrieval part is its own span and step. Every
retriever takes docqa's access `filters` directly and the round's own filters as `scope_filters`.

The decisions (stop reasons, the exact-record path) are in `ATRAGController`; the loop is bounded by the
controller (`max_iterations`) and again by Haystack's `max_runs_per_component`. Each tenant's topic model is
picked from the tenant of docqa's access filters, never from the caller.

Usage:
    pipeline = build_pipeline("atrag", runtime, max_iterations=3)
    result = pipeline.run("Abnormal lab results within the last year?", scope,
                          as_of="2020-01-01T00:00:00Z", patient_id="ba18818d-...")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from haystack import Document, Pipeline
from haystack.components.joiners import BranchJoiner
from haystack.components.routers import ConditionalRouter

from docqa.components.answer_grader import AnswerGrader
from docqa.components.atrag_controller import ATRAGController, ATRAGRound, RetrievalMode, StopReason
from docqa.components.atrag_retriever import MODE_ROUTES, RecordRound, RoundQuery
from docqa.components.cot_answer_generator import CoTAnswerGenerator
from docqa.components.prompt_templates import load_prompt, prompt_fingerprint
from docqa.components.prompted_llm import inner_step_kinds
from docqa.components.query_rewriter import QueryRewriter
from docqa.components.record_query_resolver import RecordQueryResolver
from docqa.components.record_table_answer import RecordTableAnswer
from docqa.components.record_table_builder import RecordTableBuilder
from docqa.components.record_window_retriever import RecordWindowRetriever
from docqa.components.topic_assigner import TenantTopicAssigners
from docqa.components.topic_filtered_retriever import TopicFilteredRetriever, TopicMode
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines.haystack_strategy import HaystackStrategy
from docqa.pipelines.options import ATRAGInputs, ATRAGOptions
from docqa.pipelines.registry import register
from docqa.runtime import Runtime

__all__ = ["ATRAGPipeline", "RetrievalMode", "StopReason", "TopicMode", "atrag_graph", "build_atrag"]

INPUT_NAMES = tuple(ATRAGInputs.model_fields)
KINDS = {"round_joiner": "routing", "final_joiner": "routing", "rewrite_router": "routing",
         "round_query": "routing", "mode_router": "routing", "prompt_joiner": "routing",
         "retrieved_joiner": "routing", "record_query_resolver": "time_scope", "ranked_retriever": "retrieval",
         "window_retriever": "retrieval", "record_round": "retrieval", "record_retriever": "records",
         "record_table_builder": "records", "cot_answer_generator": "reasoning", "answer_grader": "grading",
         "query_rewriter": "rewrite", "controller": "control", "record_table": "record_table"}
# After a rewrite: nothing new ends the loop with the pending draft, a new query starts the next round.
REWRITE_ROUTES = [
    {"condition": "{{ query is none }}", "output": "pending", "output_name": "stopped", "output_type": ATRAGRound,
     "output_passthrough": True},
    {"condition": "{{ query is not none }}", "output": ["pending", "query"], "output_name": ["again", "next_query"],
     "output_type": [ATRAGRound, str], "output_passthrough": True},
]


def atrag_graph(*, resolver: RecordQueryResolver, ranked_retriever: TopicFilteredRetriever,
                window_retriever: TopicFilteredRetriever, record_retriever: RecordWindowRetriever,
                generator: CoTAnswerGenerator, grader: AnswerGrader, rewriter: QueryRewriter, max_iterations: int,
                table_builder: RecordTableBuilder | None = None,
                record_table: RecordTableAnswer | None = None) -> Pipeline:
    """The AT-RAG graph (see the module docstring); every component runs at most `max_iterations` + 1 times."""
    pipeline = Pipeline(max_runs_per_component=max_iterations + 1)
    pipeline.add_component("record_query_resolver", resolver)
    pipeline.add_component("controller", ATRAGController(max_iterations=max_iterations))
    pipeline.add_component("round_joiner", BranchJoiner(ATRAGRound))
    pipeline.add_component("round_query", RoundQuery())
    pipeline.add_component("mode_router", ConditionalRouter(MODE_ROUTES))
    pipeline.add_component("record_retriever", record_retriever)
    pipeline.add_component("record_table_builder", table_builder or RecordTableBuilder())
    pipeline.add_component("record_round", RecordRound())
    pipeline.add_component("window_retriever", window_retriever)
    pipeline.add_component("ranked_retriever", ranked_retriever)
    pipeline.add_component("prompt_joiner", BranchJoiner(list[Document]))
    pipeline.add_component("retrieved_joiner", BranchJoiner(ATRAGRound))
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
        ("round_joiner.value", "round_query.state"),
        *((f"round_query.{name}", f"mode_router.{name}")
          for name in ("state", "query", "scope_filters", "record_query", "scope", "record_offset", "mode")),
        # Exact records: every record the round's filters select, one page, and their table.
        ("mode_router.exact_query", "record_retriever.query"),
        ("mode_router.exact_scope_filters", "record_retriever.scope_filters"),
        ("mode_router.exact_record_offset", "record_retriever.offset"),
        ("record_retriever.documents", "record_table_builder.documents"),
        ("record_retriever.total", "record_table_builder.total"),
        ("record_retriever.offset", "record_table_builder.offset"),
        ("record_retriever.summary", "record_table_builder.summary"),
        ("mode_router.exact_record_query", "record_table_builder.record_query"),
        ("mode_router.exact_scope", "record_table_builder.scope"),
        ("mode_router.exact_state", "record_round.state"),
        ("record_retriever.documents", "record_round.documents"),
        ("record_retriever.total", "record_round.total"),
        ("record_retriever.truncated", "record_round.truncated"),
        ("record_table_builder.table", "record_round.table"),
        # A time window, or ranked retrieval, each narrowed to the question's topic where that is safe.
        ("mode_router.window_query", "window_retriever.query"),
        ("mode_router.window_scope_filters", "window_retriever.scope_filters"),
        ("mode_router.ranked_query", "ranked_retriever.query"),
        ("mode_router.ranked_scope_filters", "ranked_retriever.scope_filters"),
        ("record_round.prompt_documents", "prompt_joiner.value"),
        ("window_retriever.documents", "prompt_joiner.value"),
        ("ranked_retriever.documents", "prompt_joiner.value"),
        ("record_round.state", "retrieved_joiner.value"),
        ("mode_router.window_state", "retrieved_joiner.value"),
        ("mode_router.ranked_state", "retrieved_joiner.value"),
        ("prompt_joiner.value", "cot_answer_generator.documents"),
        ("retrieved_joiner.value", "controller.state"),
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
        ("rewrite_router.next_query", "round_query.query"),
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
        text_embedder: Callable[[], Any],
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
        """
        :param ranked_retriever: The ranked retriever (the hybrid one) for unscoped questions.
        :param record_retriever: Reads a time window's records (its store also serves the exact record path).
        :param topic_assigners: Each tenant's topic model.
        :param text_embedder: Builds a query embedder (one per topic-filtered retriever: an instance belongs to
            one graph).
        """
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        store = record_retriever.document_store
        if record_resolver is None:
            record_resolver = RecordQueryResolver(store)
        ranked = TopicFilteredRetriever(ranked_retriever, text_embedder(), topic_assigners=topic_assigners,
                                        min_probability=min_topic_probability, top_k=top_k)
        # A time window asks for all its records: any record of the topic in it is enough to narrow.
        window = TopicFilteredRetriever(record_retriever, text_embedder(), topic_assigners=topic_assigners,
                                        min_probability=min_topic_probability, min_documents=1,
                                        top_k=max_scoped_records)
        self.generator, self.grader, self.rewriter = generator, grader, rewriter
        pipeline = atrag_graph(resolver=record_resolver, ranked_retriever=ranked, window_retriever=window,
                               record_retriever=RecordWindowRetriever(store, top_k=max_scoped_records),
                               generator=generator, grader=grader, rewriter=rewriter, max_iterations=max_iterations,
                               table_builder=table_builder)
        super().__init__(
            "atrag", pipeline, models=models, max_question_chars=max_question_chars,
            kinds={**inner_step_kinds(pipeline), **KINDS},
            input_names=INPUT_NAMES,
            # The last grade is the shown answer's: judged unsupported, it is replaced by quoted sentences.
            grounding_inputs={"grounded": "answer_grader.grounded"},
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
        topic_assigners=TenantTopicAssigners(settings.data_dir),
        text_embedder=runtime.text_embedder,
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
