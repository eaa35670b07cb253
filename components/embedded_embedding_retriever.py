"""Dense (embedding) retrieval from the embedded document store."""

from __future__ import annotations

from typing import Any

from haystack import Document, component
from haystack.document_stores.types import FilterPolicy

from docqa.components.embedded_store_retriever import EmbeddedStoreRetriever
from docqa.stores.embedded import EmbeddedDocumentStore


@component
class EmbeddedEmbeddingRetriever(EmbeddedStoreRetriever):
    """Nearest neighbours of a query embedding (exact search), with Haystack filters applied before ranking.

    Usage:
        retriever = EmbeddedEmbeddingRetriever(document_store=store, top_k=5)
        retriever.run(query_embedding=embedder.run("capital of France")["embedding"])["documents"]

    :param document_store: the `EmbeddedDocumentStore` to search.
    :param filters: filters applied on every run (combined with run-time filters by `filter_policy`).
    :param top_k: maximum number of documents returned.
    :param scale_score: map similarities into (0, 1) as Haystack's in-memory store does.
    :param return_embedding: include document embeddings in the results.
    :param filter_policy: `REPLACE` (run-time filters win) or `MERGE` (both apply).
    """

    def __init__(
        self,
        document_store: EmbeddedDocumentStore,
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
        filter_policy: FilterPolicy = FilterPolicy.REPLACE,
    ) -> None:
        # Named base, not super(): @component rebuilds the class, so super()'s implicit class is not this one.
        EmbeddedStoreRetriever.__init__(self, document_store, filters, top_k, scale_score, filter_policy)
        self.return_embedding = return_embedding

    @component.output_types(documents=list[Document])
    def run(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int | None = None,
        scale_score: bool | None = None,
        return_embedding: bool | None = None,
    ) -> dict[str, list[Document]]:
        """Retrieve the documents closest to `query_embedding`.

        :param query_embedding: the query vector (same model as the documents).
        :param filters: run-time filters (combined with the init filters by `filter_policy`).
        :param top_k: overrides the init `top_k`.
        :param scale_score: overrides the init `scale_score`.
        :param return_embedding: overrides the init `return_embedding`.
        :returns: `{"documents": [...]}` best first, each with `score` set.
        """
        documents = self.document_store.embedding_retrieval(
            query_embedding=query_embedding,
            **self._search_arguments(filters, top_k, scale_score),
            return_embedding=self.return_embedding if return_embedding is None else return_embedding,
        )
        return {"documents": documents}

    def _init_parameters(self) -> dict[str, Any]:
        return {**EmbeddedStoreRetriever._init_parameters(self), "return_embedding": self.return_embedding}
