"""AT-RAG's retrieval nodes around the graph's mode router: the round's query and filters going in, and the round
of an exact record question coming out with its record table."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from docqa.components.atrag_controller import ATRAGRound, RetrievalMode
from docqa.components.record_query_resolver import RecordQuery
from docqa.components.time_scope_resolver import TimeScope
from docqa.components.topic_filtered_retriever import TopicMode

RECORD_SUMMARY_ID = "record-table-summary"


@component
class RoundQuery:
    """
    Starts a round's retrieval: appends a rewritten `query` to the round's queries, and hands the round's last
    query, its own filters (patient, window, record types; docqa's access filters are added by each retriever),
    its record query and time scope and its retrieval `mode` to the graph's mode router.

    Usage example:
    ```python
    out = RoundQuery().run(state=first_round)
    out["query"], out["scope_filters"], out["mode"]          # the router picks the retriever on `mode`
    RoundQuery().run(state=pending_round, query="rewritten question")["state"].queries[-1]
    ```
    """

    step_kind = "routing"

    @component.output_types(state=ATRAGRound, query=str, scope_filters=dict[str, Any] | None, record_query=RecordQuery,
                            scope=TimeScope, record_offset=int, mode=str)
    def run(self, state: ATRAGRound, query: str | None = None, record_offset: int = 0) -> dict[str, Any]:
        """
        :param state: The round (its last query is searched).
        :param query: A rewritten query, appended to the round's queries first.
        :param record_offset: Page of an exact record set (records skipped, newest first).
        :returns: The round as `state`, its last `query`, `scope_filters`, `record_query`, `scope`,
            `record_offset` and `mode`.
        :raises ValueError: A negative `record_offset`.
        """
        if record_offset < 0:
            raise ValueError("record_offset must not be negative")
        if query is not None:
            state = state.replace(queries=(*state.queries, query))
        return {"state": state, "query": state.queries[-1], "scope_filters": state.filters,
                "record_query": state.record_query, "scope": state.scope, "record_offset": record_offset,
                "mode": state.mode.value}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoundQuery:
        return default_from_dict(cls, data)


# The mode router of AT-RAG's graph: one retriever per mode, each given the round's query and own filters.
MODE_ROUTES = [
    {"condition": "{{ mode == '" + mode.value + "' }}", "output": outputs,
     "output_name": [f"{prefix}_{name}" for name in outputs], "output_type": types, "output_passthrough": True}
    for mode, prefix, outputs, types in (
        (RetrievalMode.EXACT, "exact", ["state", "query", "scope_filters", "record_query", "scope", "record_offset"],
         [ATRAGRound, str, dict[str, Any] | None, RecordQuery, TimeScope, int]),
        (RetrievalMode.WINDOW, "window", ["state", "query", "scope_filters"], [ATRAGRound, str, dict[str, Any] | None]),
        (RetrievalMode.RANKED, "ranked", ["state", "query", "scope_filters"], [ATRAGRound, str, dict[str, Any] | None]),
    )
]


@component
class RecordRound:
    """
    Ends the retrieval of an exact record question: the round keeps the record table built for its first page
    (later rounds, after a rewrite, retrieve the same records), and the answer's passages are one document stating
    the table's totals followed by the records, oldest first, so a model sees the whole set. `topic` says the
    records were selected by metadata alone (mode `exact_record_query`: no topic narrowing, no ranking).

    Usage example:
    ```python
    page = record_retriever.run(filters=access, scope_filters=round.filters)
    table = record_table_builder.run(documents=page["documents"], total=page["total"], ...)["table"]
    out = RecordRound().run(state=round, documents=page["documents"], table=table, total=page["total"],
                            truncated=page["truncated"])
    out["prompt_documents"][0].content, out["state"].table, out["topic"]["mode"]
    ```
    """

    step_kind = "retrieval"

    @component.output_types(documents=list[Document], prompt_documents=list[Document], topic=dict,
                            state=ATRAGRound)
    def run(self, state: ATRAGRound, documents: list[Document], table: dict[str, Any], total: int,
            truncated: bool) -> dict[str, Any]:
        """
        :param state: The round.
        :param documents: The page of records retrieved.
        :param table: Their record table.
        :param total: How many records matched.
        :param truncated: Whether more matched than the page holds.
        :returns: The `documents`, the answer's `prompt_documents`, the `topic` (which path was taken) and the
            round as `state` (with its table).
        """
        table = state.table or table
        return {"documents": documents, "prompt_documents": with_table_summary(documents, table),
                "topic": {"mode": TopicMode.EXACT_RECORDS.value, "total": total, "truncated": truncated},
                "state": state.replace(table=table)}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordRound:
        return default_from_dict(cls, data)


def with_table_summary(documents: list[Document], table: dict[str, Any]) -> list[Document]:
    """The records, oldest first, after one document stating the table's totals (so a model sees the whole set)."""
    ordered = sorted(documents, key=lambda d: (str(d.meta.get("effective_start_utc") or ""), d.id))
    return [Document(id=RECORD_SUMMARY_ID, content="Record table: " + table["description"],
                     meta={"source": "record table"}), *ordered]
