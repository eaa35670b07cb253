"""ConTReGen (context-driven tree-structured retrieval; long-form answers) and ConTRe, its retrieval half alone.

`contregen`: `contre_tree_expander` builds the context tree top-down (retrieve for the question, plan sub-questions,
verify each in two steps, recurse to `max_depth`), in a loop with the hybrid retriever: each of its runs sends
the retriever one query (the question's, then one per sub-question verified as needed) and gets its documents
back with its state, until it emits the tree. Then `contregen_synthesizer` writes the answer bottom-up (leaves
summarise, parents merge, the root answers in cited paragraphs):

    contre_tree_expander (query, filters) --query--> hybrid_retriever (filters) --documents--> contre_tree_expander
    contre_tree_expander --state--> expansion_state (BranchJoiner) --value--> contre_tree_expander
    contre_tree_expander --tree--> contregen_synthesizer (question) --> answer, cited_documents, stop_reason

`contregen_synthesizer` is a graph of its own: `contregen_summaries` (the nodes below the root) ->
`contregen_answer` (the root's prompt, one model call, its reply) -> `contregen_citations` (paragraphs and the
passages each cites).

`contre`: the same loop, then `context_tree_reporter` returns the tree as an outline and all its passages
(no generation), for any generator downstream.

Bounds: depth and breadth (ceilings DOCQA_MAX_TREE_DEPTH/BREADTH), and one LLM call budget per question for the
whole tree (at most DOCQA_MAX_LLM_CALLS_PER_QUESTION, which the LLM client enforces again on every call). Sibling
nodes' model calls run on DOCQA_CONTREGEN_CONCURRENCY threads. Every retrieval is a run of the retriever node (a
step), every node and every summary a tracing span (`docqa.tree_node`, open from the node's verification to its
plan, over its retrieval; `docqa.summary`), so a trace step whose parent links draw the tree, in the audit trail and
in OpenTelemetry alike; the expander's last step and the synthesizer's hold the whole tree.

Usage:
    pipeline = build_pipeline("contregen", runtime, max_depth=2, max_breadth=5, max_llm_calls=48)
    result = pipeline.run("How does Noork's view of the war change?", AccessScope("acme", frozenset({"alice"})))
    result.stop_reason  # "tree_complete" | "llm_budget" | "no_passages"
"""

from __future__ import annotations

from typing import Any

from haystack import Pipeline
from haystack.components.joiners import BranchJoiner

from docqa.components.context_tree import STOP_LLM_BUDGET, STOP_NO_PASSAGES, STOP_TREE_COMPLETE
from docqa.components.context_tree_reporter import ContextTreeReporter
from docqa.components.contre_tree_expander import ConTReTreeExpander, ExpansionState
from docqa.components.contregen_synthesizer import ConTReGenSynthesizer
from docqa.components.prompt_templates import load_prompt, prompt_fingerprint
from docqa.components.prompted_llm import inner_step_kinds
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines.haystack_strategy import HaystackStrategy
from docqa.pipelines.options import ConTReGenOptions, ConTReOptions
from docqa.pipelines.registry import register
from docqa.runtime import Runtime

__all__ = ["STOP_LLM_BUDGET", "STOP_NO_PASSAGES", "STOP_TREE_COMPLETE", "ConTReGenPipeline", "ConTRePipeline",
           "build_contre", "build_contregen", "contre_graph"]

KINDS = {"contre_tree_expander": "tree_expansion", "hybrid_retriever": "retrieval", "expansion_state": "control",
         "contregen_synthesizer": "synthesis", "context_tree_reporter": "report"}


def _expander_summary(expander: ConTReTreeExpander, top_k: int) -> dict[str, Any]:
    return {
        "top_k": top_k, "max_depth": expander.max_depth, "max_breadth": expander.max_breadth,
        "max_llm_calls": expander.max_llm_calls, "concurrency": expander.concurrency,
        "prompts": {"contregen_plan": prompt_fingerprint(expander.plan_template),
                    "contregen_verify": prompt_fingerprint(expander.verify_template),
                    "contregen_relevance": prompt_fingerprint(expander.relevance_template)},
    }


def _check_top_k(retriever: Any, top_k: int) -> None:
    if getattr(retriever, "top_k", top_k) != top_k:
        raise ValueError(f"the retriever returns {retriever.top_k} documents, not top_k={top_k}")


def contre_graph(retriever: Any, expander: ConTReTreeExpander) -> Pipeline:
    """The tree expansion loop (see the module docstring), bounded by the expander's runs per question; its `tree`
    output is left for the caller to connect."""
    pipeline = Pipeline(max_runs_per_component=expander.runs_per_question())
    pipeline.add_component("contre_tree_expander", expander)
    pipeline.add_component("hybrid_retriever", retriever)
    # The expander cannot feed itself: its state comes back through a joiner, the usual Haystack loop entry.
    pipeline.add_component("expansion_state", BranchJoiner(ExpansionState))
    for sender, receiver in (
        ("contre_tree_expander.query", "hybrid_retriever.query"),
        ("hybrid_retriever.documents", "contre_tree_expander.documents"),
        ("contre_tree_expander.state", "expansion_state.value"),
        ("expansion_state.value", "contre_tree_expander.state"),
    ):
        pipeline.connect(sender, receiver)
    return pipeline


class ConTReGenPipeline(HaystackStrategy):
    """ConTReGen as a docqa strategy. Outputs: `answer`, `cited_documents` (grounding, checked against every passage
    of the tree in its `[n]` numbering), `stop_reason` (synthesizer)."""

    def __init__(self, retriever: Any, expander: ConTReTreeExpander, synthesizer: ConTReGenSynthesizer, *,
                 top_k: int, max_question_chars: int, models: dict[str, str | None] | None = None) -> None:
        """
        :param retriever: A component with `run(query, filters) -> {"documents": [...]}` returning `top_k`.
        :param expander: Builds the tree, in a loop with `retriever`.
        :param synthesizer: Writes the answer from the tree.
        """
        _check_top_k(retriever, top_k)
        pipeline = contre_graph(retriever, expander)
        pipeline.add_component("contregen_synthesizer", synthesizer)
        pipeline.connect("contre_tree_expander.tree", "contregen_synthesizer.tree")
        summary = _expander_summary(expander, top_k)
        summary["max_tokens"] = {"plan": expander.plan_tokens, "summary": synthesizer.summary_tokens,
                                 "answer": synthesizer.answer_tokens}
        summary["prompts"] |= {"contregen_summarize": prompt_fingerprint(synthesizer.summary_template),
                               "contregen_answer": prompt_fingerprint(synthesizer.answer_template)}
        super().__init__("contregen", pipeline, models=models, max_question_chars=max_question_chars,
                         kinds={**inner_step_kinds(pipeline), **KINDS}, summary=summary)


class ConTRePipeline(HaystackStrategy):
    """ConTRe alone: the tree's outline as `answer`, all its passages as `cited_documents`, and `stop_reason`."""

    def __init__(self, retriever: Any, expander: ConTReTreeExpander, *, top_k: int, max_question_chars: int,
                 models: dict[str, str | None] | None = None) -> None:
        """
        :param retriever: A component with `run(query, filters) -> {"documents": [...]}` returning `top_k`.
        :param expander: Builds the tree, in a loop with `retriever`.
        """
        _check_top_k(retriever, top_k)
        pipeline = contre_graph(retriever, expander)
        pipeline.add_component("context_tree_reporter", ContextTreeReporter())
        pipeline.connect("contre_tree_expander.tree", "context_tree_reporter.tree")
        # Nothing is generated (the answer is the tree's outline), so there is no text to check for grounding.
        super().__init__("contre", pipeline, models=models, max_question_chars=max_question_chars, kinds=KINDS,
                         summary=_expander_summary(expander, top_k), grounding=False)


def _expander(runtime: Runtime, max_depth: int | None, max_breadth: int | None,
              max_llm_calls: int | None) -> ConTReTreeExpander:
    settings = runtime.settings
    prompts = settings.prompts_dir
    return ConTReTreeExpander(
        RoleChatGenerator("planner", runtime.chat_generator("planner")),
        max_depth=max_depth or settings.contregen_max_depth,
        max_breadth=max_breadth or settings.contregen_max_breadth,
        max_llm_calls=max_llm_calls or settings.max_llm_calls_per_question,
        concurrency=settings.contregen_concurrency,
        max_passage_chars=settings.max_document_chars,
        plan_template=load_prompt("contregen_plan", prompts),
        verify_template=load_prompt("contregen_verify", prompts),
        relevance_template=load_prompt("contregen_relevance", prompts),
    )


@register("contre", "ConTRe: the context tree of verified sub-questions and its passages, without an answer.",
          ConTReOptions)
def build_contre(runtime: Runtime, top_k: int | None = None, max_depth: int | None = None,
                 max_breadth: int | None = None, max_llm_calls: int | None = None) -> ConTRePipeline:
    """
    :param runtime: Shared collaborators; the "planner" role plans and verifies.
    :param top_k: Passages retrieved per node (settings.top_k by default).
    :param max_depth: Levels of sub-questions (DOCQA_CONTREGEN_MAX_DEPTH by default).
    :param max_breadth: Sub-questions per plan (DOCQA_CONTREGEN_MAX_BREADTH by default).
    :param max_llm_calls: The tree's call budget (DOCQA_MAX_LLM_CALLS_PER_QUESTION by default).
    """
    settings = runtime.settings
    top_k = top_k or settings.top_k
    return ConTRePipeline(
        runtime.retriever(top_k),
        _expander(runtime, max_depth, max_breadth, max_llm_calls),
        top_k=top_k, max_question_chars=settings.max_question_chars,
        models={"planner": settings.endpoint_for("planner").model},
    )


@register("contregen", "ConTReGen: a tree of verified sub-questions, summarised bottom-up into a long cited answer.",
          ConTReGenOptions)
def build_contregen(runtime: Runtime, top_k: int | None = None, max_depth: int | None = None,
                    max_breadth: int | None = None, max_llm_calls: int | None = None,
                    summary_tokens: int = 200, answer_tokens: int = 512) -> ConTReGenPipeline:
    """
    :param runtime: Shared collaborators; "planner" plans and verifies, "summarizer" summarises and answers.
    :param top_k: Passages retrieved per node (settings.top_k by default).
    :param max_depth: Levels of sub-questions (DOCQA_CONTREGEN_MAX_DEPTH by default).
    :param max_breadth: Sub-questions per plan (DOCQA_CONTREGEN_MAX_BREADTH by default).
    :param max_llm_calls: The call budget of expansion and synthesis together (the per-question limit by default).
    :param summary_tokens: Token cap of each node summary.
    :param answer_tokens: Token cap of the final answer.
    """
    settings = runtime.settings
    top_k = top_k or settings.top_k
    synthesizer = ConTReGenSynthesizer(
        RoleChatGenerator("summarizer", runtime.chat_generator("summarizer")),
        summary_tokens=summary_tokens,
        answer_tokens=answer_tokens,
        concurrency=settings.contregen_concurrency,
        max_passage_chars=settings.max_document_chars,
        summary_template=load_prompt("contregen_summarize", settings.prompts_dir),
        answer_template=load_prompt("contregen_answer", settings.prompts_dir),
    )
    return ConTReGenPipeline(
        runtime.retriever(top_k), _expander(runtime, max_depth, max_breadth, max_llm_calls), synthesizer,
        top_k=top_k, max_question_chars=settings.max_question_chars,
        models={role: settings.endpoint_for(role).model for role in ("planner", "summarizer")},
    )
