"""Every record matching a resolved scope (patient, time window), newest first: no ranking, no top-k guessing."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import import_class_by_name

DATE_KEY = "effective_start_utc"


@component
class RecordWindowRetriever:
    """
    For time-scoped questions over patient records: returns all documents matching the filters, newest first,
    at most `top_k` (`truncated` says when more matched). The query is accepted for interface compatibility
    with ranked retrievers and ignored: "abnormal labs in the last year" asks for all of them.

    Usage example:
    ```python
    retriever = RecordWindowRetriever(document_store=store, top_k=200)
    retriever.run(query="...", filters=restrict(scope, window_filters))["documents"]
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

    @component.output_types(documents=list[Document], total=int, truncated=bool)
    def run(self, query: str = "", filters: dict[str, Any] | None = None, top_k: int | None = None) -> dict[str, Any]:
        """
        :param query: Ignored.
        :param filters: Scope and access filters; required, since unfiltered would mean every record.
        :param top_k: Upper bound; the default when None.
        :returns: `documents`, the `total` that matched and whether the list was `truncated`.
        :raises ValueError: Without filters.
        """
        if not filters:
            raise ValueError("a record window needs filters")
        limit = top_k or self.top_k
        matched = self.document_store.filter_documents(filters=filters)
        matched.sort(key=lambda d: (str(d.meta.get(DATE_KEY) or ""), d.id), reverse=True)
        return {"documents": matched[:limit], "total": len(matched), "truncated": len(matched) > limit}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, document_store=self.document_store.to_dict(),
                               top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordWindowRetriever:
        params = data["init_parameters"]
        store_class = import_class_by_name(params["document_store"]["type"])
        params["document_store"] = store_class.from_dict(params["document_store"])
        return default_from_dict(cls, data)
