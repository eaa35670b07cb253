"""BM25 retrieval from the embedded document store."""

from __future__ import annotations

from typing import Any

from haystack import Document, component

from docqa.components.embedded_store_retriever import EmbeddedStoreRetriever


@component
class EmbeddedBM25Retriever(EmbeddedStoreRetriever):
    """Keyword retrieval (BM25, OR over the query terms) with Haystack filters applied before ranking.

    Usage:
        retriever = EmbeddedBM25Retriever(document_store=store, top_k=5)
        retriever.run(query="capital of France", filters=scope.to_filters())["documents"]

    :param document_store: the `EmbeddedDocumentStore` to search.
    :param filters: filters applied on every run (combined with run-time filters by `filter_policy`).
    :param top_k: maximum number of documents returned.
    :param scale_score: map scores into (0, 1) as Haystack's in-memory store does.
    :param filter_policy: `REPLACE` (run-time filters win) or `MERGE` (both apply).
    """

    @component.output_types(documents=list[Document])
    def run(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve documents for `query`.

        :param query: the search text.
        :param filters: run-time filters (combined with the init filters by `filter_policy`).
        :param top_k: overrides the init `top_k`.
        :param scale_score: overrides the init `scale_score`.
        :returns: `{"documents": [...]}` best first, each with `score` set.
        """
        arguments = self._search_arguments(filters, top_k, scale_score)
        return {"documents": self.document_store.bm25_retrieval(query=query, **arguments)}
