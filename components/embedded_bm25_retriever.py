"""BM25 retrieval from the embedded document store."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.document_stores.types import FilterPolicy, apply_filter_policy

from docqa.stores.embedded import EmbeddedDocumentStore


@component
class EmbeddedBM25Retriever:
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

    def __init__(
        self,
        document_store: EmbeddedDocumentStore,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
    ) -> None:
        if not isinstance(document_store, EmbeddedDocumentStore):
            raise ValueError("document_store must be an EmbeddedDocumentStore")
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        self.document_store = document_store
        self.filters = filters or {}
        self.top_k = top_k
        self.scale_score = scale_score
        self.filter_policy = FilterPolicy.from_str(filter_policy) if isinstance(filter_policy, str) else filter_policy

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
        documents = self.document_store.bm25_retrieval(
            query=query,
            filters=apply_filter_policy(self.filter_policy, self.filters, filters),
            top_k=top_k or self.top_k,
            scale_score=self.scale_score if scale_score is None else scale_score,
        )
        return {"documents": documents}

    @component.output_types(documents=list[Document])
    async def run_async(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
    ) -> dict[str, list[Document]]:
        documents = await self.document_store.bm25_retrieval_async(
            query=query,
            filters=apply_filter_policy(self.filter_policy, self.filters, filters),
            top_k=top_k or self.top_k,
            scale_score=self.scale_score if scale_score is None else scale_score,
        )
        return {"documents": documents}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            document_store=self.document_store.to_dict(),
            filters=self.filters,
            top_k=self.top_k,
            scale_score=self.scale_score,
            filter_policy=self.filter_policy.value,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbeddedBM25Retriever:
        params = dict(data["init_parameters"])
        data = {**data, "init_parameters": params}
        params["document_store"] = EmbeddedDocumentStore.from_dict(params["document_store"])
        if "filter_policy" in params:
            params["filter_policy"] = FilterPolicy.from_str(params["filter_policy"])
        return default_from_dict(cls, data)
