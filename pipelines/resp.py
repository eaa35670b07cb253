"""ReSP (Retrieve, Summarize, Plan; Jiang et al.): iterative multi-hop QA over two summarised memories.

Iteration 1 retrieves for the question and writes global evidence. The reasoner judges from the memories
alone whether the question can be answered; if not it plans one new sub-question, which is retrieved for and
summarised both for the question (global evidence) and for itself (local pathway). The generator answers from
the memories only.

A `haystack.Pipeline` cycle around one controller (`ReSPController`), which reads each component's report and
sends the next request or finishes with the stop reason:

    resp_controller --query--> hybrid_retriever --documents--> resp_controller
    resp_controller --summary_*--> dual_function_summarizer --memory--> resp_controller
    resp_controller --judge_memory--> resp_judge --sufficient--> resp_controller
    resp_controller --plan_memory, asked, rejected, attempt--> resp_planner --sub_question, accepted--> ...
    resp_controller --answer_memory--> memory_answer_generator --answer
The judge, the planner and the generator are prompted LLM steps (`ChatPromptBuilder` -> model call -> typed
parser, `docqa.components.prompted_llm`): each is one node here, its three inner runs child steps of its step.
The summarizer is one node holding two of them (global evidence, local pathway) and its memory update.
The planner's fourth inner step is its repeat guard (`SubQuestionGuard`: text check -> embedder -> verdict).
    resp_controller --state--> loop_state (BranchJoiner) --value--> resp_controller

Beyond the paper: a planned sub-question that repeats an asked one (normalised text or embedding similarity)
is re-planned once, then the loop stops; the two summaries of an iteration run concurrently (inside the
summarizer's graph); a retrieval that brings no document not already summarised stops the loop; the last
iteration skips the judgement, whose answer could not change what happens next. Every component run is a step
(the controller's and the joiner's are `control` steps whose `decision` says what came next and why).

Usage:
    pipeline = build_pipeline("resp", runtime, top_k=5, max_iterations=3)
    result = pipeline.run("Where was the director of Jaws born?", AccessScope("acme", frozenset({"alice"})))
    result.stop_reason  # "judged_sufficient" | "max_iterations" | "repeated_plan" | "no_plan" | "no_new_evidence"
"""

from __future__ import annotations

from typing import Any

from haystack import Pipeline
from haystack.components.joiners import BranchJoiner

from docqa.components.dual_function_summarizer import DualFunctionSummarizer
from docqa.components.memory_answer_generator import MemoryAnswerGenerator
from docqa.components.prompt_templates import load_prompt, prompt_fingerprint
from docqa.components.prompted_llm import inner_step_kinds
from docqa.components.resp_controller import (
    STOP_JUDGED_SUFFICIENT,
    STOP_MAX_ITERATIONS,
    STOP_NO_NEW_EVIDENCE,
    STOP_NO_PLAN,
    STOP_REPEATED_PLAN,
    ReSPController,
    ReSPLoopState,
)
from docqa.components.resp_reasoner import ReSPJudge, ReSPPlanner
from docqa.components.sub_question_guard import SubQuestionGuard
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines.haystack_strategy import HaystackStrategy
from docqa.pipelines.options import ReSPOptions
from docqa.pipelines.registry import register
from docqa.runtime import Runtime

__all__ = [
    "STOP_JUDGED_SUFFICIENT",
    "STOP_MAX_ITERATIONS",
    "STOP_NO_NEW_EVIDENCE",
    "STOP_NO_PLAN",
    "STOP_REPEATED_PLAN",
    "ReSPPipeline",
    "build_resp",
    "build_resp_graph",
]

MAX_TOP_K = 100
MAX_ITERATIONS = 10

KINDS = {
    "resp_controller": "control",
    "loop_state": "control",
    "hybrid_retriever": "retrieval",
    "dual_function_summarizer": "summary",
    "resp_judge": "judgement",
    "resp_planner": "plan",
    "memory_answer_generator": "generation",
}


def build_resp_graph(
    retriever: Any,
    summarizer: DualFunctionSummarizer,
    judge: ReSPJudge,
    planner: ReSPPlanner,
    generator: MemoryAnswerGenerator,
    *,
    max_iterations: int,
) -> Pipeline:
    """The ReSP graph (see the module docstring); its loop is bounded by the controller's runs per question."""
    controller = ReSPController(max_iterations=max_iterations)
    pipeline = Pipeline(max_runs_per_component=controller.runs_per_question())
    # The controller cannot feed itself: its state comes back through a joiner, the usual Haystack loop entry.
    nodes = {
        "resp_controller": controller,
        "loop_state": BranchJoiner(ReSPLoopState),
        "hybrid_retriever": retriever,
        "dual_function_summarizer": summarizer,
        "resp_judge": judge,
        "resp_planner": planner,
        "memory_answer_generator": generator,
    }
    for name, instance in nodes.items():
        pipeline.add_component(name, instance)
    for sender, receiver in (
        ("resp_controller.state", "loop_state.value"),
        ("loop_state.value", "resp_controller.state"),
        ("resp_controller.query", "hybrid_retriever.query"),
        ("hybrid_retriever.documents", "resp_controller.documents"),
        ("resp_controller.summary_documents", "dual_function_summarizer.documents"),
        ("resp_controller.summary_memory", "dual_function_summarizer.memory"),
        ("resp_controller.summary_sub_question", "dual_function_summarizer.sub_question"),
        ("resp_controller.iteration", "dual_function_summarizer.iteration"),
        ("dual_function_summarizer.memory", "resp_controller.memory"),
        ("resp_controller.judge_memory", "resp_judge.memory"),
        ("resp_judge.sufficient", "resp_controller.sufficient"),
        ("resp_controller.plan_memory", "resp_planner.memory"),
        ("resp_controller.asked", "resp_planner.asked"),
        ("resp_controller.rejected", "resp_planner.rejected"),
        ("resp_controller.attempt", "resp_planner.attempt"),
        ("resp_planner.sub_question", "resp_controller.sub_question"),
        ("resp_planner.accepted", "resp_controller.accepted"),
        ("resp_controller.answer_memory", "memory_answer_generator.memory"),
    ):
        pipeline.connect(sender, receiver)
    return pipeline


class ReSPPipeline(HaystackStrategy):
    """ReSP as a docqa strategy: the graph of `build_resp_graph` run through `HaystackStrategy`.

    Outputs: `answer` (generator), `stop_reason` and `cited_documents` (controller).
    """

    def __init__(
        self,
        retriever: Any,
        summarizer: DualFunctionSummarizer,
        judge: ReSPJudge,
        planner: ReSPPlanner,
        generator: MemoryAnswerGenerator,
        *,
        top_k: int,
        max_iterations: int,
        max_question_chars: int,
        models: dict[str, str | None] | None = None,
    ) -> None:
        """
        :param retriever: A component with `run(query, filters) -> {"documents": [...]}` returning `top_k`.
        :param summarizer: Writes both memories from each iteration's documents.
        :param judge: Judges sufficiency from the memories.
        :param planner: Plans sub-questions and refuses repeats.
        :param generator: Answers from the memories.
        :param top_k: Documents retrieved per iteration (the retriever's `top_k`).
        :param max_iterations: The paper's M: retrieval rounds at most.
        :param max_question_chars: Longest question accepted.
        :param models: Model name per role, for the recorded configuration.
        """
        # Options may come from API callers: bound what one question can cost.
        if not 1 <= top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be between 1 and {MAX_TOP_K}")
        if not 1 <= max_iterations <= MAX_ITERATIONS:
            raise ValueError(f"max_iterations must be between 1 and {MAX_ITERATIONS}")
        if getattr(retriever, "top_k", top_k) != top_k:
            raise ValueError(f"the retriever returns {retriever.top_k} documents, not top_k={top_k}")
        guard: SubQuestionGuard = planner.guard
        summary = {
            "top_k": top_k,
            "max_iterations": max_iterations,
            "repeat_similarity": guard.similarity_threshold if guard.document_embedder is not None else None,
            "max_tokens": {
                "global_evidence": summarizer.max_summary_tokens,
                "local_pathway": summarizer.max_answer_tokens,
                "plan": planner.max_plan_tokens,
                "generate": generator.max_tokens,
            },
            "prompts": {
                "resp_global_evidence": prompt_fingerprint(summarizer.global_template),
                "resp_local_pathway": prompt_fingerprint(summarizer.local_template),
                "resp_judge": prompt_fingerprint(judge.judge_template),
                "resp_plan": prompt_fingerprint(planner.plan_template),
                "resp_generate": prompt_fingerprint(generator.prompt_template),
            },
        }
        pipeline = build_resp_graph(retriever, summarizer, judge, planner, generator, max_iterations=max_iterations)
        super().__init__(
            "resp",
            pipeline,
            models=models,
            max_question_chars=max_question_chars,
            kinds={**inner_step_kinds(pipeline), **KINDS},
            summary=summary,
        )
        self.top_k = top_k
        self.max_iterations = max_iterations


@register(
    "resp", "ReSP: iterative retrieve-summarize-plan over global evidence and local pathway memories.", ReSPOptions
)
def build_resp(
    runtime: Runtime,
    top_k: int | None = None,
    max_iterations: int | None = None,
    summary_tokens: int = 160,
    answer_tokens: int = 48,
) -> ReSPPipeline:
    """
    :param runtime: Shared collaborators; roles "summarizer", "reasoner" and "generator" may use different models
        (each wrapped in a `RoleChatGenerator`, so the exported YAML names roles, never endpoints).
    :param top_k: Documents per retrieval (settings.top_k by default).
    :param max_iterations: The paper's M (settings.resp_max_iterations by default).
    :param summary_tokens: Token cap of a global evidence summary.
    :param answer_tokens: Token cap of the final answer ("only give me the answer").
    """
    settings = runtime.settings
    top_k = top_k or settings.top_k
    prompts = settings.prompts_dir
    summarizer = DualFunctionSummarizer(
        RoleChatGenerator("summarizer", runtime.chat_generator("summarizer")),
        global_template=load_prompt("resp_global_evidence", prompts),
        local_template=load_prompt("resp_local_pathway", prompts),
        max_summary_tokens=summary_tokens,
    )
    judge = ReSPJudge(
        RoleChatGenerator("reasoner", runtime.chat_generator("reasoner")),
        judge_template=load_prompt("resp_judge", prompts),
    )
    retriever = runtime.retriever(top_k)
    # The guard's embeddings are steps of the plan: its own embedder node (a component instance belongs to one
    # graph), the deployment's document embedder; it shares the query embedder's model (one ONNX session or
    # sentence-transformers model per process) and embeds a text as it does (alone with int8; texts embedded
    # together agree to float rounding otherwise).
    planner = ReSPPlanner(
        RoleChatGenerator("reasoner", runtime.chat_generator("reasoner")),
        guard=SubQuestionGuard(runtime.document_embedder(), similarity_threshold=settings.resp_repeat_similarity),
        plan_template=load_prompt("resp_plan", prompts),
    )
    generator = MemoryAnswerGenerator(
        RoleChatGenerator("generator", runtime.chat_generator("generator")),
        prompt_template=load_prompt("resp_generate", prompts),
        max_tokens=answer_tokens,
    )
    return ReSPPipeline(
        retriever,
        summarizer,
        judge,
        planner,
        generator,
        top_k=top_k,
        max_iterations=max_iterations or settings.resp_max_iterations,
        max_question_chars=settings.max_question_chars,
        models={role: settings.endpoint_for(role).model for role in ("reasoner", "summarizer", "generator")},
    )
