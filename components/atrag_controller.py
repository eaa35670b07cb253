"""AT-RAG's loop state and the one component that decides what the loop does next."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from docqa.components.record_query_resolver import RecordQuery
from docqa.components.time_scope_resolver import TimeScope, scope_filters


class StopReason(StrEnum):
    """Why AT-RAG's loop ended (the result's `stop_reason`)."""

    ACCEPTED = "answer_accepted"
    MAX_ITERATIONS = "max_iterations"
    NO_NEW_QUERY = "no_new_query"


class RetrievalMode(StrEnum):
    """How a round retrieves: exactly the records the question names, every record of a time window, or ranked.
    (What the retrieval step's `topic.mode` then says is a `TopicMode`.)"""

    EXACT = "exact_records"
    WINDOW = "record_window"
    RANKED = "ranked"


@dataclass(frozen=True)
class ATRAGRound:
    """What AT-RAG's loop carries from one retrieval to the next, and, once it stops, the draft result.

    `filters` are the question's own (patient, window, record types), always AND'ed with docqa's access filters;
    `record_query` and `scope` are what the resolver understood. Components make a new round with `replace`; Haystack
    copies a round at every hop like any other value.
    """

    queries: tuple[str, ...]
    mode: RetrievalMode
    filters: dict[str, Any] | None = None
    record_query: RecordQuery = field(default_factory=RecordQuery)
    scope: TimeScope = field(default_factory=lambda: TimeScope(kind="none"))
    table: dict[str, Any] | None = None
    answer: str = ""
    cited_documents: tuple[Document, ...] = ()
    stop_reason: StopReason | None = None
    # The passages the answer was given, numbered [1]..[n] in this order (what its citation markers refer to).
    prompt_documents: tuple[Document, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "queries", tuple(self.queries))
        object.__setattr__(self, "mode", RetrievalMode(self.mode))
        object.__setattr__(self, "cited_documents", tuple(self.cited_documents))
        object.__setattr__(self, "prompt_documents", tuple(self.prompt_documents))
        if self.stop_reason is not None:
            object.__setattr__(self, "stop_reason", StopReason(self.stop_reason))

    def replace(self, **changes: Any) -> ATRAGRound:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """What the step trail shows of a round (it passes through several steps): the query, record scope and
        table are shown in full once, by the resolver and record table steps; documents by id."""
        table = self.table
        return {"queries": list(self.queries), "mode": self.mode.value, "filters": self.filters,
                "table": None if table is None else {k: table.get(k) for k in ("total", "shown", "offset")},
                "answer": self.answer, "cited_document_ids": [d.id for d in self.cited_documents],
                "stop_reason": None if self.stop_reason is None else self.stop_reason.value}


def plan_round(question: str, scope: TimeScope, record_query: RecordQuery,
               record_filters: dict[str, Any] | None) -> ATRAGRound:
    """The first round: how to retrieve for a resolved question."""
    # Exact when the question names what it asks for and whose or when: then metadata alone decides.
    exact = record_query.exact and (scope.patient_id is not None or scope.kind != "none")
    if exact:
        mode, filters = RetrievalMode.EXACT, record_filters
    elif scope.kind != "none":
        mode, filters = RetrievalMode.WINDOW, record_filters
    else:
        # Unscoped questions keep ranked retrieval, narrowed only to the patient when one is known.
        mode, filters = RetrievalMode.RANKED, scope_filters(scope)
    return ATRAGRound(queries=(question,), mode=mode, filters=filters, record_query=record_query, scope=scope)


@component
class ATRAGController:
    """
    AT-RAG's decisions, in one place inside the graph. It runs once when the question is resolved and once after
    each grade:

    - resolved (`scope`, `record_query`, `record_filters`): emits the first round as `state` (how to retrieve: exact
      records, a whole time window, or ranked; see `plan_round`);
    - graded (`state`, `answer`, `cited_documents`, `passed`, `feedback`): an accepted answer, or the last
      allowed round, goes to `final` (stop reason `answer_accepted` / `max_iterations`); otherwise it asks the
      rewriter for a new query (`previous_queries`, `rewrite_feedback`) and hands the draft to the router as
      `pending`, which becomes the result (`no_new_query`) when the rewriter has nothing new.

    Usage example:
    ```python
    controller = ATRAGController(max_iterations=3)
    controller.run(question="Labs since 2019?", scope=scope, record_query=query, record_filters=filters)["state"]
    controller.run(question="...", state=r, answer="...", cited_documents=[], passed=False, feedback="...")
    ```
    """

    step_kind = "control"

    def __init__(self, max_iterations: int = 3) -> None:
        """
        :param max_iterations: Rounds of retrieve, answer and grade at most.
        """
        if max_iterations < 1:
            raise ValueError("max_iterations must be at least 1")
        self.max_iterations = max_iterations

    @component.output_types(state=ATRAGRound, final=ATRAGRound, pending=ATRAGRound, previous_queries=list[str],
                            rewrite_feedback=str)
    def run(self, question: str, scope: TimeScope | None = None, record_query: RecordQuery | None = None,
            record_filters: dict | None = None, state: ATRAGRound | None = None,
            answer: str | None = None, cited_documents: list[Document] | None = None, passed: bool | None = None,
            feedback: str | None = None, prompt_documents: list[Document] | None = None) -> dict[str, Any]:
        """
        :param question: The user's question (the first query).
        :param scope: The resolved time scope (once, from the resolver).
        :param record_query: What the question asks for (once, from the resolver).
        :param record_filters: The resolver's filters for it.
        :param state: The round just retrieved (from the retriever).
        :param answer: The round's answer.
        :param cited_documents: The documents it cites.
        :param passed: Whether the answer passed the grade.
        :param feedback: Why it failed.
        :param prompt_documents: The passages the answer was given, in prompt order.
        :returns: `state` (the first round), `final` (a result), or `previous_queries`, `rewrite_feedback`
            and `pending`.
        """
        if state is None:
            if scope is None or record_query is None:
                raise ValueError("the controller needs the resolved scope and record query, or a graded round")
            return {"state": plan_round(question, scope, record_query, record_filters)}
        draft = state.replace(answer=answer or "", cited_documents=tuple(cited_documents or ()),
                              prompt_documents=tuple(prompt_documents or ()))
        if passed:
            return {"final": draft.replace(stop_reason=StopReason.ACCEPTED)}
        if len(state.queries) >= self.max_iterations:
            return {"final": draft.replace(stop_reason=StopReason.MAX_ITERATIONS)}
        return {"previous_queries": list(state.queries), "rewrite_feedback": feedback or "",
                "pending": draft.replace(stop_reason=StopReason.NO_NEW_QUERY)}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, max_iterations=self.max_iterations)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ATRAGController:
        return default_from_dict(cls, data)
