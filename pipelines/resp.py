"""ReSP (Retrieve, Summarize, Plan; Jiang et al.): iterative multi-hop QA over two summarised memories.

Iteration 1 retrieves for the question and writes global evidence. The reasoner judges from the memories
alone whether the question can be answered; if not it plans one new sub-question, which is retrieved for and
summarised both for the question (global evidence) and for itself (local pathway). The generator answers from
the memories only. A small driver loop rather than a `haystack.Pipeline` cycle: every branch records its own
step and stop reason, which a router/joiner cycle would obscure.

Beyond the paper: a planned sub-question that repeats an asked one (normalised text or embedding similarity)
is re-planned once, then the loop stops; the two summaries of an iteration run concurrently; a retrieval that
brings no document not already summarised stops the loop; the last iteration skips the judgement, whose
answer could not change what happens next.

Usage:
    pipeline = build_pipeline("resp", runtime, top_k=5, max_iterations=3)
    result = pipeline.run("Where was the director of Jaws born?", AccessScope("acme", frozenset({"alice"})))
    result.stop_reason  # "judged_sufficient" | "max_iterations" | "repeated_plan" | "no_plan" | "no_new_evidence"
"""

from __future__ import annotations

from typing import Any

from haystack import Document

from docqa.access import AccessScope, restrict
from docqa.components.dual_function_summarizer import DualFunctionSummarizer
from docqa.components.memory_answer_generator import MemoryAnswerGenerator
from docqa.components.prompt_templates import load_prompt, prompt_fingerprint
from docqa.components.resp_memory import ReSPMemory
from docqa.components.resp_reasoner import ReSPReasoner
from docqa.components.sub_question_guard import SubQuestionGuard
from docqa.pipelines.base import citations_from_documents, finish, validate_question
from docqa.pipelines.options import ReSPOptions
from docqa.pipelines.registry import register
from docqa.recording import StepRecorder, document_summary, run_concurrently
from docqa.result import PipelineResult
from docqa.runtime import Runtime

STOP_JUDGED_SUFFICIENT = "judged_sufficient"
STOP_MAX_ITERATIONS = "max_iterations"
STOP_REPEATED_PLAN = "repeated_plan"
STOP_NO_PLAN = "no_plan"
STOP_NO_NEW_EVIDENCE = "no_new_evidence"

MAX_TOP_K = 100
MAX_ITERATIONS = 10

# Re-planning after a refused plan happens once: a model that repeats itself twice is unlikely to stop.
_PLAN_ATTEMPTS = 2


class ReSPPipeline:
    """The ReSP driver loop over injected components (see the module docstring)."""

    name = "resp"

    def __init__(
        self,
        retriever: Any,
        summarizer: DualFunctionSummarizer,
        reasoner: ReSPReasoner,
        generator: MemoryAnswerGenerator,
        guard: SubQuestionGuard,
        *,
        top_k: int,
        max_iterations: int,
        max_question_chars: int,
        models: dict[str, str | None] | None = None,
    ) -> None:
        """
        :param retriever: A component with `run(query, filters, top_k) -> {"documents": [...]}`.
        :param summarizer: Writes both memories from each iteration's documents.
        :param reasoner: Judges sufficiency and plans sub-questions.
        :param generator: Answers from the memories.
        :param guard: Refuses repeated sub-questions.
        :param top_k: Documents retrieved per iteration.
        :param max_iterations: The paper's M: retrieval rounds at most.
        :param max_question_chars: Longest question accepted.
        :param models: Model name per role, for the recorded configuration.
        """
        # Options may come from API callers: bound what one question can cost.
        if not 1 <= top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be between 1 and {MAX_TOP_K}")
        if not 1 <= max_iterations <= MAX_ITERATIONS:
            raise ValueError(f"max_iterations must be between 1 and {MAX_ITERATIONS}")
        self.retriever = retriever
        self.summarizer = summarizer
        self.reasoner = reasoner
        self.generator = generator
        self.guard = guard
        self.top_k = top_k
        self.max_iterations = max_iterations
        self.max_question_chars = max_question_chars
        self.models = models or {}
        self._warmed_up = False

    def config(self) -> dict[str, Any]:
        return {
            "pipeline": self.name,
            "models": self.models,
            "top_k": self.top_k,
            "max_iterations": self.max_iterations,
            "repeat_similarity": self.guard.similarity_threshold if self.guard.text_embedder is not None else None,
            "max_tokens": {
                "global_evidence": self.summarizer.max_summary_tokens,
                "local_pathway": self.summarizer.max_answer_tokens,
                "plan": self.reasoner.max_plan_tokens,
                "generate": self.generator.max_tokens,
            },
            "prompts": {
                "resp_global_evidence": prompt_fingerprint(self.summarizer.global_template),
                "resp_local_pathway": prompt_fingerprint(self.summarizer.local_template),
                "resp_judge": prompt_fingerprint(self.reasoner.judge_template),
                "resp_plan": prompt_fingerprint(self.reasoner.plan_template),
                "resp_generate": prompt_fingerprint(self.generator.prompt_template),
            },
        }

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None) -> PipelineResult:
        question = validate_question(question, self.max_question_chars)
        if not self._warmed_up:
            self.guard.warm_up()
            self._warmed_up = True
        recorder = StepRecorder()
        effective_filters = restrict(scope, filters)
        memory = ReSPMemory()
        asked = [question]
        summarized: dict[str, Document] = {}
        sub_question: str | None = None
        stop_reason = STOP_MAX_ITERATIONS
        for iteration in range(1, self.max_iterations + 1):
            query = sub_question or question
            documents = self._retrieve(recorder, query, effective_filters, iteration, summarized)
            if not any(doc.id not in summarized for doc in documents):
                stop_reason = STOP_NO_NEW_EVIDENCE
                break
            summarized.update((doc.id, doc) for doc in documents)
            memory = self._summarize(recorder, question, sub_question, documents, memory, iteration)
            if iteration == self.max_iterations:
                break
            if self._judge(recorder, question, memory, iteration):
                stop_reason = STOP_JUDGED_SUFFICIENT
                break
            sub_question, refusal = self._plan(recorder, question, memory, asked, iteration)
            if sub_question is None:
                stop_reason = refusal or STOP_NO_PLAN
                break
            asked.append(sub_question)
        answer = self._generate(recorder, question, memory, stop_reason)
        citations = citations_from_documents(list(summarized.values()))
        return finish(self, question, answer, citations, recorder, stop_reason=stop_reason)

    def _retrieve(self, recorder: StepRecorder, query: str, filters: dict[str, Any], iteration: int,
                  summarized: dict[str, Document]) -> list[Document]:
        inputs = {"query": query, "top_k": self.top_k, "filters": filters, "iteration": iteration}
        with recorder.step("retrieval", "hybrid_retriever", inputs=inputs) as step:
            documents = self.retriever.run(query=query, filters=filters, top_k=self.top_k)["documents"]
            step.outputs["documents"] = [document_summary(doc) for doc in documents]
            step.outputs["new_document_ids"] = [doc.id for doc in documents if doc.id not in summarized]
            step.outputs["words"] = sum(len((doc.content or "").split()) for doc in documents)
        return documents

    def _summarize(self, recorder: StepRecorder, question: str, sub_question: str | None,
                   documents: list[Document], memory: ReSPMemory, iteration: int) -> ReSPMemory:
        ids = [doc.id for doc in documents]

        def global_evidence() -> Any:
            inputs = {"question": question, "document_ids": ids, "iteration": iteration}
            with recorder.step("summary", "global_evidence", inputs=inputs) as step:
                evidence = self.summarizer.summarize_global(question, documents, iteration)
                step.outputs["global_evidence"] = evidence
            return evidence

        def local_pathway() -> Any:
            inputs = {"sub_question": sub_question, "document_ids": ids, "iteration": iteration}
            with recorder.step("summary", "local_pathway", inputs=inputs) as step:
                entry = self.summarizer.answer_sub_question(sub_question or question, documents, memory, iteration)
                step.outputs["pathway_entry"] = entry
            return entry

        # Iteration 1 retrieves for the question itself: there is no sub-question to answer yet.
        if sub_question is None:
            return memory.with_evidence(global_evidence())
        evidence, entry = run_concurrently(global_evidence, local_pathway)
        return memory.with_evidence(evidence).with_pathway(entry)

    def _judge(self, recorder: StepRecorder, question: str, memory: ReSPMemory, iteration: int) -> bool:
        with recorder.step("judgement", "resp_reasoner.judge",
                           inputs={"question": question, "memory": memory, "iteration": iteration}) as step:
            verdict = self.reasoner.judge(question, memory)
            step.outputs["verdict"] = {True: "yes", False: "no", None: "unreadable"}[verdict]
            step.outputs["sufficient"] = verdict is True
        return verdict is True

    def _plan(self, recorder: StepRecorder, question: str, memory: ReSPMemory, asked: list[str],
              iteration: int) -> tuple[str | None, str | None]:
        """The accepted sub-question, or None and the reason the last attempt was refused."""
        rejected: str | None = None
        refusal: str | None = None
        for attempt in range(1, _PLAN_ATTEMPTS + 1):
            inputs = {"question": question, "asked": list(asked), "rejected": rejected, "iteration": iteration,
                      "attempt": attempt}
            with recorder.step("plan", "resp_reasoner.plan", inputs=inputs) as step:
                candidate = self.reasoner.plan(question, memory, asked, rejected=rejected)
                step.outputs["sub_question"] = candidate
                if candidate is None:
                    refusal = STOP_NO_PLAN
                else:
                    check = self.guard.run(candidate=candidate, asked=asked)
                    step.outputs["repeat_check"] = check
                    if not check["repeated"]:
                        step.outputs["accepted"] = True
                        return candidate, None
                    refusal = STOP_REPEATED_PLAN
                    rejected = candidate
                step.outputs["accepted"] = False
                step.outputs["refusal"] = refusal
        return None, refusal

    def _generate(self, recorder: StepRecorder, question: str, memory: ReSPMemory, stop_reason: str) -> str:
        inputs = {"question": question, "memory": memory, "memory_words": memory.word_count(),
                  "stop_reason": stop_reason}
        with recorder.step("generation", "memory_answer_generator", inputs=inputs) as step:
            answer = self.generator.run(question=question, memory=memory)["answer"]
            step.outputs["answer"] = answer
        return answer


@register("resp", "ReSP: iterative retrieve-summarize-plan over global evidence and local pathway memories.",
          ReSPOptions)
def build_resp(
    runtime: Runtime,
    top_k: int | None = None,
    max_iterations: int | None = None,
    summary_tokens: int = 160,
    answer_tokens: int = 48,
) -> ReSPPipeline:
    """
    :param runtime: Shared collaborators; roles "summarizer", "reasoner" and "generator" may use different models.
    :param top_k: Documents per retrieval (settings.top_k by default).
    :param max_iterations: The paper's M (settings.resp_max_iterations by default).
    :param summary_tokens: Token cap of a global evidence summary.
    :param answer_tokens: Token cap of the final answer ("only give me the answer").
    """
    settings = runtime.settings
    top_k = top_k or settings.top_k
    prompts = settings.prompts_dir
    summarizer = DualFunctionSummarizer(
        runtime.chat_generator("summarizer"),
        global_template=load_prompt("resp_global_evidence", prompts),
        local_template=load_prompt("resp_local_pathway", prompts),
        max_summary_tokens=summary_tokens,
    )
    reasoner = ReSPReasoner(
        runtime.chat_generator("reasoner"),
        judge_template=load_prompt("resp_judge", prompts),
        plan_template=load_prompt("resp_plan", prompts),
    )
    generator = MemoryAnswerGenerator(
        runtime.chat_generator("generator"),
        prompt_template=load_prompt("resp_generate", prompts),
        max_tokens=answer_tokens,
    )
    retriever = runtime.retriever(top_k)
    # The retriever's query embedder already holds the model: share it rather than load a second copy.
    embedder = getattr(retriever, "text_embedder", None) or runtime.text_embedder()
    guard = SubQuestionGuard(embedder, similarity_threshold=settings.resp_repeat_similarity)
    return ReSPPipeline(
        retriever,
        summarizer,
        reasoner,
        generator,
        guard,
        top_k=top_k,
        max_iterations=max_iterations or settings.resp_max_iterations,
        max_question_chars=settings.max_question_chars,
        models={role: settings.endpoint_for(role).model for role in ("reasoner", "summarizer", "generator")},
    )
