"""AT-RAG's retrieval for one round: exact records with their table, a whole time window, or ranked, each
narrowed to the question's topic where that is safe."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_component_inplace

from docqa.components.atrag_controller import MODE_EXACT, MODE_WINDOW, ATRAGRound
from docqa.components.record_table_builder import RecordTableBuilder
from docqa.components.record_window_retriever import RecordWindowRetriever
from docqa.components.topic_filtered_retriever import TopicFilteredRetriever

MODE_EXACT_RECORDS = "exact_record_query"
RECORD_SUMMARY_ID = "record-table-summary"


@component
class ATRAGRetriever:
    """
    Retrieves for the round's last query under docqa's access `filters` AND the round's own filters:

    - exact records (`state.mode == "exact_records"`): every record the filters select, newest first, one page
      of `record_offset`; no topic narrowing (it could only drop records) and no ranking. The round gets the
      record table (built once), and the prompt documents start with the table's description;
    - a time window: every record of the window, narrowed to the question's topic when any record of it is there;
    - otherwise ranked retrieval narrowed to the topic, with the topic filter's fallbacks.

    Usage example:
    ```python
    retriever = ATRAGRetriever(ranked=TopicFilteredRetriever(...), window=TopicFilteredRetriever(...),
                               records=RecordWindowRetriever(store))
    out = retriever.run(state=first_round, filters=restrict(scope, None))
    out["documents"], out["topic"]["mode"], out["state"].table
    ```
    """

    step_kind = "retrieval"

    def __init__(self, ranked: TopicFilteredRetriever, window: TopicFilteredRetriever, records: RecordWindowRetriever,
                 table_builder: RecordTableBuilder | None = None) -> None:
        """
        :param ranked: Topic-filtered ranked retrieval (top-k) for unscoped questions.
        :param window: Topic-filtered record-window retrieval for time-scoped questions.
        :param records: Exact record retrieval (its `top_k` is the page size).
        :param table_builder: Builds the record table of an exact record question.
        """
        self.ranked = ranked
        self.window = window
        self.records = records
        self.table_builder = table_builder or RecordTableBuilder()

    @component.output_types(documents=list[Document], prompt_documents=list[Document], topic=dict,
                            state=ATRAGRound)
    def run(self, state: ATRAGRound, filters: dict[str, Any], record_offset: int = 0,
            query: str | None = None) -> dict[str, Any]:
        """
        :param state: The round (its last query is searched).
        :param filters: docqa's access filters; always applied.
        :param record_offset: Page of an exact record set (records skipped, newest first).
        :param query: A rewritten query, appended to the round's queries first.
        :returns: `documents` retrieved, `prompt_documents` for the answer, `topic` (which path was taken) and
            the round as `state` (with the query and, for exact records, the table).
        :raises ValueError: A negative `record_offset`.
        """
        if record_offset < 0:
            raise ValueError("record_offset must not be negative")
        if query is not None:
            state = state.replace(queries=[*state.queries, query])
        text = state.queries[-1]
        effective = _and(filters, state.filters)
        if state.mode == MODE_EXACT:
            page = self.records.run(query=text, filters=effective, offset=record_offset)
            documents = page["documents"]
            topic = {"mode": MODE_EXACT_RECORDS, "total": page["total"], "truncated": page["truncated"]}
            table = state.table or self.table_builder.run(
                documents=documents, total=page["total"], offset=page["offset"], summary=page["summary"],
                query={"record_query": state.record_query, "scope": state.scope})["table"]
            return {"documents": documents, "prompt_documents": with_table_summary(documents, table),
                    "topic": topic, "state": state.replace(table=table)}
        retriever = self.window if state.mode == MODE_WINDOW else self.ranked
        retrieved = retriever.run(query=text, filters=effective)
        return {"documents": retrieved["documents"], "prompt_documents": retrieved["documents"],
                "topic": retrieved["topic"], "state": state}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, ranked=component_to_dict(self.ranked, "ranked"),
                               window=component_to_dict(self.window, "window"),
                               records=component_to_dict(self.records, "records"),
                               table_builder=component_to_dict(self.table_builder, "table_builder"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ATRAGRetriever:
        for key in ("ranked", "window", "records", "table_builder"):
            deserialize_component_inplace(data["init_parameters"], key=key)
        return default_from_dict(cls, data)


def _and(*filters: dict[str, Any] | None) -> dict[str, Any] | None:
    present = [f for f in filters if f]
    if not present:
        return None
    return present[0] if len(present) == 1 else {"operator": "AND", "conditions": present}


def with_table_summary(documents: list[Document], table: dict[str, Any]) -> list[Document]:
    """The records, oldest first, after one document stating the table's totals (so a model sees the whole set)."""
    ordered = sorted(documents, key=lambda d: (str(d.meta.get("effective_start_utc") or ""), d.id))
    return [Document(id=RECORD_SUMMARY_ID, content="Record table: " + table["description"],
                     meta={"source": "record table"}), *ordered]
