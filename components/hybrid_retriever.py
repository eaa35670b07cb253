"""Hybrid retrieval: BM25 and dense candidates fused by reciprocal rank fusion."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict


@component
class HybridRetriever:
    """Runs a keyword and an embedding retriever with the same filters and fuses their rankings (RRF).

    Each document's fused score is `sum(1 / (rrf_k + rank))` over the lists it appears in (rank from 1);
    documents are returned best first with that score. Filters go into both retrievers, so access control
    applies before ranking in each of them, never after fusion.

    Usage:
        retriever = HybridRetriever(
            bm25_retriever=EmbeddedBM25Retriever(document_store=store),
            embedding_retriever=EmbeddedEmbeddingRetriever(document_store=store),
            text_embedder=build_text_embedder(settings),
            top_k=5,
        )
        retriever.warm_up()
        retriever.run(query="who founded it?", filters=restrict(scope, None))["documents"]

    :param bm25_retriever: component with `run(query, filters, top_k) -> {"documents"}`.
    :param embedding_retriever: component with `run(query_embedding, filters, top_k) -> {"documents"}`.
    :param text_embedder: component with `run(text) -> {"embedding"}`.
    :param top_k: number of fused documents returned.
    :param candidates: documents requested from each retriever (at least `top_k`).
    :param rrf_k: RRF damping constant; 60 is the value from the original RRF paper.
    """

    def __init__(
        self,
        bm25_retriever: Any,
        embedding_retriever: Any,
        text_embedder: Any,
        top_k: int = 5,
        candidates: int = 20,
        rrf_k: int = 60,
    ) -> None:
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        if candidates < top_k:
            raise ValueError("candidates must be at least top_k")
        if rrf_k < 1:
            raise ValueError("rrf_k must be at least 1")
        for name, part in (
            ("bm25_retriever", bm25_retriever),
            ("embedding_retriever", embedding_retriever),
            ("text_embedder", text_embedder),
        ):
            if not callable(getattr(part, "run", None)):
                raise ValueError(f"{name} must be a component with a run() method")
        self.bm25_retriever = bm25_retriever
        self.embedding_retriever = embedding_retriever
        self.text_embedder = text_embedder
        self.top_k = top_k
        self.candidates = candidates
        self.rrf_k = rrf_k

    def warm_up(self) -> None:
        for part in (self.text_embedder, self.bm25_retriever, self.embedding_retriever):
            if hasattr(part, "warm_up"):
                part.warm_up()

    @component.output_types(documents=list[Document])
    def run(self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None) -> dict[str, Any]:
        """Retrieve and fuse.

        :param query: the question or search text.
        :param filters: Haystack filters applied inside both retrievers (e.g. the caller's access scope).
        :param top_k: overrides the init `top_k`.
        :returns: `{"documents": [...]}` best first, `score` = fused RRF score.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        limit = top_k or self.top_k
        depth = max(self.candidates, limit)
        self.warm_up()
        keyword = self.bm25_retriever.run(query=query, filters=filters, top_k=depth)["documents"]
        embedding = self.text_embedder.run(text=query)["embedding"]
        dense = self.embedding_retriever.run(query_embedding=embedding, filters=filters, top_k=depth)["documents"]
        return {"documents": reciprocal_rank_fusion([keyword, dense], rrf_k=self.rrf_k, top_k=limit)}

    @component.output_types(documents=list[Document])
    async def run_async(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None
    ) -> dict[str, Any]:
        return await asyncio.to_thread(self.run, query, filters, top_k)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            bm25_retriever=component_to_dict(self.bm25_retriever, "bm25_retriever"),
            embedding_retriever=component_to_dict(self.embedding_retriever, "embedding_retriever"),
            text_embedder=component_to_dict(self.text_embedder, "text_embedder"),
            top_k=self.top_k,
            candidates=self.candidates,
            rrf_k=self.rrf_k,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HybridRetriever:
        return default_from_dict(cls, data)


def reciprocal_rank_fusion(rankings: list[list[Document]], *, rrf_k: int, top_k: int) -> list[Document]:
    """Fuse ranked lists by document id; ties keep the order of first appearance."""
    scores: dict[str, float] = {}
    first_seen: dict[str, Document] = {}
    for ranking in rankings:
        for rank, doc in enumerate(ranking, start=1):
            scores[doc.id] = scores.get(doc.id, 0.0) + 1.0 / (rrf_k + rank)
            first_seen.setdefault(doc.id, doc)
    best = sorted(scores, key=lambda doc_id: -scores[doc_id])[:top_k]
    return [replace(first_seen[doc_id], score=scores[doc_id]) for doc_id in best]
