"""The end of AT-RAG: the answer, from the model or, for a record question it could not answer, the record table."""

from __future__ import annotations

import re
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from docqa.components.atrag_controller import ATRAGRound
from docqa.result import Citation

_UNUSABLE_ANSWER = re.compile(r"^\W*(?:i\s+(?:do\s+not|don't|cannot|can't)\s+(?:know|tell|say|answer)|unknown|n/?a|"
                              r"none|no\s+answer|not\s+sure)\W*$", re.IGNORECASE)


@component
class RecordTableAnswer:
    """
    Turns the loop's final round into the result. With a record table (an exact record question), the citations
    are one per record of the table, in table order, each carrying its row, and an empty or evasive model answer
    ("I don't know", "n/a") gives way to the table's description (`answer_source` says which). Without a table,
    the model's answer and the documents it cites pass through. `documents` are the passages the answer was given
    (for the grounding check) and `fallback_answer` the table's description, shown when the model's answer fails it.

    Usage example:
    ```python
    out = RecordTableAnswer().run(result=final_round)
    out["answer"], out["stop_reason"], out["citations"], out["table"], out["answer_source"], out["documents"]
    ```
    """

    step_kind = "record_table"

    def __init__(self, snippet_chars: int = 200) -> None:
        """
        :param snippet_chars: Length of a record citation's snippet.
        """
        if snippet_chars < 1:
            raise ValueError("snippet_chars must be positive")
        self.snippet_chars = snippet_chars

    @component.output_types(answer=str, cited_documents=list[Document], citations=list[Citation] | None,
                            stop_reason=str, table=dict | None, answer_source=str, documents=list[Document],
                            fallback_answer=str | None)
    def run(self, result: ATRAGRound) -> dict[str, Any]:
        """
        :param result: The final round (answer, cited documents, stop reason, table).
        :returns: `answer`, `cited_documents` (none with a table), `citations` (record citations, or None to cite
            the documents),
            `stop_reason`, `table`, `answer_source` (`model` or `record_table`), the prompt's `documents` and
            `fallback_answer` (the table's description, or None without a table).
        """
        out: dict[str, Any] = {"answer": result.answer, "cited_documents": list(result.cited_documents),
                               "citations": None,
                               "stop_reason": "" if result.stop_reason is None else result.stop_reason.value,
                               "table": result.table, "answer_source": "model",
                               "documents": list(result.prompt_documents), "fallback_answer": None}
        if result.table is None:
            return out
        if not usable(result.answer):
            out.update(answer=result.table["description"], answer_source="record_table")
        # The table's records are the citations; the documents behind them need not travel (or be copied) again.
        out.update(citations=record_citations(result.table, self.snippet_chars), cited_documents=[],
                   fallback_answer=result.table["description"])
        return out

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, snippet_chars=self.snippet_chars)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordTableAnswer:
        return default_from_dict(cls, data)


def usable(answer: str) -> bool:
    return bool(answer and answer.strip()) and not _UNUSABLE_ANSWER.match(answer.strip())


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
