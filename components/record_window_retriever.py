"""Every record matching a resolved scope (patient, time window), newest first: no ranking, no top-k guessing."""

from __future__ import annotations

from collections import Counter
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import import_class_by_name

DATE_KEY = "effective_start_utc"


@component
class RecordWindowRetriever:
    """
    For time-scoped questions over patient records: returns all documents matching the filters, newest first,
    at most `top_k` per page (`truncated` says when more matched, `offset` pages on, and `summary` describes
    every matched record, shown or not). The query is accepted for interface compatibility
    with ranked retrievers and ignored: "abnormal labs in the last year" asks for all of them.

    Usage example:
    ```python
    retriever = RecordWindowRetriever(document_store=store, top_k=200)
    retriever.run(query="...", filters=restrict(scope, window_filters))["documents"]
    retriever.run(query="", filters=restrict(scope, None), scope_filters=window_filters)["documents"]  # the same
    ```
    """

    def __init__(self, document_store: Any, top_k: int = 200) -> None:
        """
        :param document_store: Any Haystack document store.
        :param top_k: Upper bound on returned records.
        """
        if top_k < 1:
            raise ValueError("top_k must be positive")
        self.document_store = document_store
        self.top_k = top_k

    @component.output_types(documents=list[Document], total=int, truncated=bool, offset=int, summary=dict[str, Any])
    def run(self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None,
            offset: int = 0, scope_filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """
        :param query: Ignored; required all the same, so that in a graph the retriever runs only when asked.
        :param filters: Scope and access filters; required, since unfiltered would mean every record.
        :param scope_filters: The question's own filters (patient, window, record types), AND'ed with `filters`.
        :param top_k: Upper bound (a page size); the default when None.
        :param offset: Records to skip (newest first) before the page: 0 for the first page, `top_k` for the next.
        :returns: `documents` (one page, newest first), the `total` that matched, whether more matched than the
            page holds (`truncated`), the `offset`, and a `summary` of every matched record (counts by type and
            name, abnormal count, first and last date), so an answer over a long list can say what it left out.
        :raises ValueError: Without filters, or with a negative offset.
        """
        if not filters:
            raise ValueError("a record window needs filters")
        if scope_filters:
            filters = {"operator": "AND", "conditions": [filters, scope_filters]}
        if offset < 0:
            raise ValueError("offset must not be negative")
        limit = top_k or self.top_k
        matched = self.document_store.filter_documents(filters=filters)
        matched.sort(key=lambda d: (str(d.meta.get(DATE_KEY) or ""), d.id), reverse=True)
        page = matched[offset: offset + limit]
        return {"documents": page, "total": len(matched), "truncated": len(page) < len(matched),
                "offset": offset, "summary": summarize_records(matched)}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, document_store=self.document_store.to_dict(),
                               top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordWindowRetriever:
        params = data["init_parameters"]
        store_class = import_class_by_name(params["document_store"]["type"])
        params["document_store"] = store_class.from_dict(params["document_store"])
        return default_from_dict(cls, data)


def summarize_records(documents: list[Document], top_names: int = 20) -> dict[str, Any]:
    """Counts by record type and by name, the abnormal count and the date span of a list of records."""
    by_type: Counter[str] = Counter(str(d.meta.get("record_type") or "unknown") for d in documents)
    by_name: Counter[str] = Counter(str(d.meta.get("title") or "untitled") for d in documents)
    dates = sorted(str(d.meta[DATE_KEY]) for d in documents if d.meta.get(DATE_KEY))
    return {
        "count": len(documents),
        "by_type": dict(by_type.most_common()),
        "by_name": dict(by_name.most_common(top_names)),
        "distinct_names": len(by_name),
        "abnormal": sum(1 for d in documents if d.meta.get("abnormal") is True),
        "first_date": dates[0] if dates else None,
        "last_date": dates[-1] if dates else None,
    }
