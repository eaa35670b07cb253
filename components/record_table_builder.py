"""The record table of an answer over patient records: computed from the records' metadata, never by a model."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from docqa.components.record_query_resolver import RecordQuery
from docqa.components.time_scope_resolver import TimeScope

COLUMNS = ("date", "end", "patient_id", "type", "name", "code", "value", "unit", "reference_range", "flag",
           "status", "record_id", "source")
_TYPE_LABELS = {
    "lab_result": "lab result", "vital_sign": "vital sign", "survey": "survey answer",
    "social_history": "social history", "exam": "exam finding", "observation": "observation",
    "condition": "condition", "medication": "medication", "encounter": "encounter", "procedure": "procedure",
    "immunization": "immunization", "allergy": "allergy", "care_plan": "care plan",
}
_FLAGS = {"H": "high", "HH": "critically high", "L": "low", "LL": "critically low", "N": "normal", "A": "abnormal",
          "AA": "critically abnormal"}


def record_row(document: Document) -> dict[str, Any]:
    """One table row of a record Document."""
    meta = document.meta or {}
    interpretation = meta.get("interpretation")
    flag = _FLAGS.get(str(interpretation).upper(), str(interpretation)) if interpretation else None
    if flag is None and meta.get("abnormal") is True:
        flag = "abnormal"
    return {
        "date": meta.get("effective_start") or meta.get("effective_start_utc"),
        "end": meta.get("effective_end") or meta.get("effective_end_utc"),
        "patient_id": meta.get("patient_id"),
        "type": _TYPE_LABELS.get(str(meta.get("record_type")), meta.get("record_type")),
        "name": meta.get("title"),
        "code": meta.get("code"),
        "value": meta.get("value"),
        "unit": meta.get("unit"),
        "reference_range": meta.get("reference_range"),
        "reference_source": meta.get("reference_source"),
        "flag": flag,
        "status": meta.get("status"),
        "record_id": document.id,
        "source": meta.get("source"),
    }


@component
class RecordTableBuilder:
    """
    Turns the records that answer a question into a table (date, end, patient, type, name, code, value, unit,
    reference range, flag, status, record id, source) in date order, oldest first so trends read left to right,
    with the total, whether the table shows every matched record, a summary of all of them, and a plain-text
    description that stands as the answer when the model gives nothing usable.

    Usage example:
    ```python
    page = RecordWindowRetriever(store).run(query="", filters=filters)
    table = RecordTableBuilder().run(documents=page["documents"], total=page["total"], offset=page["offset"],
                                     summary=page["summary"])["table"]
    table["rows"][0]["value"], table["complete"], table["description"]
    ```
    """

    def __init__(self, max_described_rows: int = 12) -> None:
        """
        :param max_described_rows: Rows spelled out in `description`; the rest are counted.
        """
        if max_described_rows < 1:
            raise ValueError("max_described_rows must be positive")
        self.max_described_rows = max_described_rows

    @component.output_types(table=dict[str, Any])
    def run(self, documents: list[Document], total: int | None = None, offset: int = 0,
            summary: dict[str, Any] | None = None, record_query: RecordQuery | None = None,
            scope: TimeScope | None = None) -> dict[str, Any]:
        """
        :param documents: The records shown (one page).
        :param total: How many records matched in all; `len(documents)` when None.
        :param offset: How many matched records (newest first) come before this page.
        :param summary: The retriever's summary of every matched record.
        :param record_query: What was asked, kept with the table (`query.record_query`) with its notes.
        :param scope: The question's time scope, kept with the table (`query.scope`).
        :returns: `table`: `columns`, `rows`, `total`, `shown`, `offset`, `complete`, `summary`, `query`,
            `notes` and `description`.
        """
        ordered = sorted(documents, key=lambda d: (str(d.meta.get("effective_start_utc") or ""), d.id))
        rows = [record_row(d) for d in ordered]
        total = len(documents) if total is None else total
        query: dict[str, Any] = {}
        if record_query is not None or scope is not None:
            query = {"record_query": record_query.to_dict() if record_query is not None else {},
                     "scope": scope.to_dict() if scope is not None else {}}
        notes = list(record_query.notes) if record_query is not None else []
        complete = offset == 0 and len(rows) >= total
        if not complete:
            notes.append(f"showing records {offset + 1}-{offset + len(rows)} of {total} (newest first); "
                         "ask with a narrower time window or name, or page on with record_offset")
        table = {
            "columns": list(COLUMNS),
            "rows": rows,
            "total": total,
            "shown": len(rows),
            "offset": offset,
            "complete": complete,
            "summary": summary or {},
            "query": query,
            "notes": notes,
        }
        table["description"] = describe_table(table, self.max_described_rows)
        return {"table": table}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, max_described_rows=self.max_described_rows)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordTableBuilder:
        return default_from_dict(cls, data)


def _value_text(row: dict[str, Any]) -> str:
    value = row.get("value")
    if value is None:
        return ""
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    text = f"{shown} {row['unit']}".strip() if row.get("unit") else shown
    extras = [part for part in (row.get("flag") and row["flag"] != "normal" and row["flag"],
                                row.get("reference_range") and f"ref {row['reference_range']}") if part]
    return text + (f" ({'; '.join(extras)})" if extras else "")


def describe_table(table: dict[str, Any], max_rows: int = 12) -> str:
    """A plain-text account of the table: how many records of which kinds, and the first rows."""
    total, rows = table["total"], table["rows"]
    if total == 0:
        return "No matching records were found."
    summary = table.get("summary") or {}
    kinds = ", ".join(f"{count} {_TYPE_LABELS.get(kind, kind)}{'s' if count != 1 else ''}"
                      for kind, count in (summary.get("by_type") or {}).items()) or f"{total} records"
    span = ""
    if summary.get("first_date") and summary.get("last_date"):
        first, last = summary["first_date"][:10], summary["last_date"][:10]
        span = f" on {first}" if first == last else f" from {first} to {last}"
    abnormal = summary.get("abnormal")
    text = f"{total} matching record{'s' if total != 1 else ''} ({kinds}){span}"
    text += f", {abnormal} flagged abnormal" if abnormal else ""
    lines = []
    for row in rows[:max_rows]:
        value = _value_text(row)
        lines.append(f"{str(row['date'] or 'date unknown')[:10]} {row['name']}" + (f": {value}" if value else ""))
    text += ":\n" + "\n".join(f"- {line}" for line in lines)
    if len(rows) > max_rows:
        text += f"\n- ... and {len(rows) - max_rows} more in the record table"
    if not table.get("complete", True):
        text += f"\n(The table shows {table['shown']} of {total} records.)"
    return text
