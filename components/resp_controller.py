"""ReSP's controller: the one component of the ReSP graph that decides what happens next, and why it stops.

Every other component of the graph does one job (retrieve, summarise, judge, plan, answer) and reports back
here; the controller reads which report arrived and sends exactly one request on, or finishes. Its decisions:
- after a retrieval: stop (`no_new_evidence`) when no document is new, else summarise;
- after the summaries: stop (`max_iterations`) at the last iteration, whose judgement could not change what
  happens next, else judge;
- after the judgement: stop (`judged_sufficient`) on "yes", else plan;
- after a plan: retrieve for an accepted sub-question; re-plan once after a repeated or unusable plan, quoting
  a repeated one back; then stop (`repeated_plan` or `no_plan`).
Finishing sends the memories to the answer generator and emits `stop_reason` and `cited_documents` (every
document summarised, in retrieval order).

The loop's state (`ReSPLoopState`) travels with the requests and comes back through the graph's `loop_state`
joiner, so one controller instance serves concurrent runs.

Usage example:
```python
controller = ReSPController(max_iterations=3)
out = controller.run(question="Where was the director of Jaws born?")   # the first request: retrieve
out["query"], out["state"]
```
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from docqa.components.resp_memory import ReSPMemory

STOP_JUDGED_SUFFICIENT = "judged_sufficient"
STOP_MAX_ITERATIONS = "max_iterations"
STOP_REPEATED_PLAN = "repeated_plan"
STOP_NO_PLAN = "no_plan"
STOP_NO_NEW_EVIDENCE = "no_new_evidence"

# Re-planning after a refused plan happens once: a model that repeats itself twice is unlikely to stop.
PLAN_ATTEMPTS = 2


@dataclass(frozen=True)
class ReSPLoopState:
    """What the controller remembers between its runs of one question. Immutable."""

    iteration: int = 1
    sub_question: str | None = None
    asked: tuple[str, ...] = ()
    memory: ReSPMemory = field(default_factory=ReSPMemory)
    summarized: tuple[Document, ...] = ()
    attempt: int = 0
    rejected: str | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> ReSPLoopState:
        # Haystack deep-copies every component input and output; the state is never mutated (each step replaces
        # it) and its documents are only read, so copying them at every hop would only cost time.
        return self

    def to_dict(self) -> dict[str, Any]:
        """Compact form for the trace: the memories are in the summary steps, the documents in the retrievals."""
        return {"iteration": self.iteration, "sub_question": self.sub_question, "asked": list(self.asked),
                "summarized_ids": [doc.id for doc in self.summarized], "attempt": self.attempt,
                "rejected": self.rejected}


@component
class ReSPController:
    """
    Routes ReSP's loop: one report in (documents, memory, judgement or plan), one request out, or the finish.

    Usage example:
    ```python
    pipeline.add_component("resp_controller", ReSPController(max_iterations=3))
    pipeline.connect("resp_controller.query", "hybrid_retriever.query")
    pipeline.connect("hybrid_retriever.documents", "resp_controller.documents")
    ```
    """

    step_kind = "control"

    def __init__(self, max_iterations: int = 3, plan_attempts: int = PLAN_ATTEMPTS) -> None:
        """
        :param max_iterations: The paper's M: retrieval rounds at most.
        :param plan_attempts: Plans tried per iteration before a refused plan stops the loop.
        """
        if max_iterations < 1 or plan_attempts < 1:
            raise ValueError("max_iterations and plan_attempts must be at least 1")
        self.max_iterations = max_iterations
        self.plan_attempts = plan_attempts

    def runs_per_question(self) -> int:
        """Controller runs one question needs at most: the start, then per iteration one run after the
        retrieval, the summaries, the judgement and each plan attempt (the pipeline's `max_runs_per_component`)."""
        return 1 + self.max_iterations * (3 + self.plan_attempts)

    @component.output_types(
        query=str,
        summary_documents=list[Document],
        summary_memory=ReSPMemory,
        summary_sub_question=str | None,
        iteration=int,
        judge_memory=ReSPMemory,
        plan_memory=ReSPMemory,
        asked=list[str],
        rejected=str | None,
        attempt=int,
        answer_memory=ReSPMemory,
        stop_reason=str,
        cited_documents=list[Document],
        state=ReSPLoopState,
        decision=dict[str, Any],
    )
    def run(
        self,
        question: str,
        state: ReSPLoopState | None = None,
        documents: list[Document] | None = None,
        memory: ReSPMemory | None = None,
        sufficient: bool | None = None,
        sub_question: str | None = None,
        accepted: bool | None = None,
    ) -> dict[str, Any]:
        """
        :param question: The overarching question.
        :param state: The loop state sent with the previous request; None on the first run.
        :param documents: A retrieval's documents.
        :param memory: The memories after an iteration's summaries.
        :param sufficient: The judgement: whether the memories answer the question.
        :param sub_question: The planned sub-question (None when the plan was unusable); read with `accepted`.
        :param accepted: Whether the plan was accepted (not a repeat, not empty).
        :returns: One request (retrieve: `query`; summarise: `summary_*`, `iteration`; judge: `judge_memory`;
            plan: `plan_memory`, `asked`, `rejected`, `attempt`) with `state`, or the finish (`answer_memory`,
            `stop_reason`, `cited_documents`); always a `decision` saying which and why.
        :raises ValueError: a run with a state but no report (a mis-wired graph).
        """
        if state is None:
            return self._retrieve(ReSPLoopState(asked=(question,)), question, {"event": "start"})
        if documents is not None:
            return self._after_retrieval(state, documents)
        if memory is not None:
            return self._after_summaries(replace(state, memory=memory))
        if sufficient is not None:
            decision = {"event": "judged", "iteration": state.iteration, "sufficient": sufficient}
            if sufficient:
                return self._finish(state, STOP_JUDGED_SUFFICIENT, decision)
            return self._plan(replace(state, attempt=1, rejected=None), decision)
        if accepted is not None:
            return self._after_plan(state, sub_question, accepted)
        raise ValueError("the ReSP controller ran without a report; check the graph's connections")

    def _after_retrieval(self, state: ReSPLoopState, documents: list[Document]) -> dict[str, Any]:
        seen = {doc.id for doc in state.summarized}
        new = [doc for doc in documents if doc.id not in seen]
        decision = {"event": "retrieved", "iteration": state.iteration, "new_document_ids": [doc.id for doc in new]}
        if not new:
            return self._finish(state, STOP_NO_NEW_EVIDENCE, decision)
        unique = list({doc.id: doc for doc in new}.values())
        state = replace(state, summarized=(*state.summarized, *unique))
        return {"summary_documents": documents, "summary_memory": state.memory,
                "summary_sub_question": state.sub_question, "iteration": state.iteration, "state": state,
                "decision": {**decision, "next": "summarize"}}

    def _after_summaries(self, state: ReSPLoopState) -> dict[str, Any]:
        decision = {"event": "summarized", "iteration": state.iteration}
        if state.iteration >= self.max_iterations:
            # The last iteration's judgement could not change what happens next: answer now.
            return self._finish(state, STOP_MAX_ITERATIONS, decision)
        return {"judge_memory": state.memory, "state": state, "decision": {**decision, "next": "judge"}}

    def _after_plan(self, state: ReSPLoopState, sub_question: str | None, accepted: bool) -> dict[str, Any]:
        decision: dict[str, Any] = {"event": "planned", "iteration": state.iteration, "attempt": state.attempt,
                                    "accepted": accepted}
        if accepted and sub_question is not None:
            state = replace(state, iteration=state.iteration + 1, sub_question=sub_question,
                            asked=(*state.asked, sub_question), attempt=0, rejected=None)
            return self._retrieve(state, sub_question, decision)
        refusal = STOP_NO_PLAN if sub_question is None else STOP_REPEATED_PLAN
        rejected = state.rejected if sub_question is None else sub_question
        decision["refusal"] = refusal
        if state.attempt >= self.plan_attempts:
            return self._finish(state, refusal, decision)
        return self._plan(replace(state, attempt=state.attempt + 1, rejected=rejected), decision)

    @staticmethod
    def _retrieve(state: ReSPLoopState, query: str, decision: dict[str, Any]) -> dict[str, Any]:
        return {"query": query, "state": state, "decision": {**decision, "next": "retrieve"}}

    @staticmethod
    def _plan(state: ReSPLoopState, decision: dict[str, Any]) -> dict[str, Any]:
        return {"plan_memory": state.memory, "asked": list(state.asked), "rejected": state.rejected,
                "attempt": state.attempt, "state": state, "decision": {**decision, "next": "plan"}}

    @staticmethod
    def _finish(state: ReSPLoopState, reason: str, decision: dict[str, Any]) -> dict[str, Any]:
        return {"answer_memory": state.memory, "stop_reason": reason, "cited_documents": list(state.summarized),
                "decision": {**decision, "next": "answer", "stop_reason": reason}}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, max_iterations=self.max_iterations, plan_attempts=self.plan_attempts)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReSPController:
        return default_from_dict(cls, data)
