"""Hybrid retrieval: BM25 and dense candidates fused by reciprocal rank fusion, as a graph of its parts."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from haystack import Document, Pipeline, component, default_from_dict, default_to_dict, super_component
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_component_inplace


@component
class HybridSearchRequest:
    """
    The entry of `HybridRetriever`'s graph: checks the query and says how deep each retriever searches
    (`max(candidates, top_k)`) and how many fused documents come out.

    Usage example:
    ```python
    HybridSearchRequest(top_k=5, candidates=20).run(query="who founded it?")  # {"query": ..., "depth": 20, ...}
    ```
    """

    def __init__(self, top_k: int = 5, candidates: int = 20) -> None:
        """
        :param top_k: Fused documents returned by default.
        :param candidates: Documents requested from each retriever (at least `top_k`).
        """
        self.top_k = top_k
        self.candidates = candidates

    @component.output_types(query=str, text=str, depth=int, top_k=int)
    def run(self, query: str, top_k: int | None = None) -> dict[str, Any]:
        """
        :param query: The search text.
        :param top_k: Overrides the init `top_k`.
        :returns: The `query` (for BM25) and `text` (for the embedder), the retrievers' `depth` and the fused `top_k`.
        :raises ValueError: An empty query.
        """
        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        limit = top_k or self.top_k
        return {"query": query, "text": query, "depth": max(self.candidates, limit), "top_k": limit}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, top_k=self.top_k, candidates=self.candidates)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HybridSearchRequest:
        return default_from_dict(cls, data)


@component
class RankFusion:
    """
    Reciprocal rank fusion of a keyword and a dense ranking: a document's score is `sum(1 / (rrf_k + rank))` over
    the lists it appears in (rank from 1); ties keep the order of first appearance. `candidates` are every document
    of both rankings (keyword first, then the dense ones not in it), for an answer quoted from all that was found.

    Usage example:
    ```python
    RankFusion(rrf_k=60).run(keyword=bm25_docs, dense=dense_docs, top_k=5)["documents"]
    ```
    """

    def __init__(self, rrf_k: int = 60) -> None:
        """
        :param rrf_k: RRF damping constant; 60 is the value from the original RRF paper.
        """
        self.rrf_k = rrf_k

    @component.output_types(documents=list[Document], candidates=list[Document])
    def run(self, keyword: list[Document], dense: list[Document], top_k: int) -> dict[str, Any]:
        """
        :param keyword: The keyword ranking, best first.
        :param dense: The embedding ranking, best first.
        :param top_k: Fused documents returned.
        :returns: `documents` best first, `score` = fused RRF score; `candidates`, both rankings' documents once each.
        """
        return {"documents": reciprocal_rank_fusion([keyword, dense], rrf_k=self.rrf_k, top_k=top_k),
                "candidates": distinct_documents(keyword, dense)}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, rrf_k=self.rrf_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankFusion:
        return default_from_dict(cls, data)


@super_component
class HybridRetriever:
    """Runs a keyword and an embedding retriever with the same filters and fuses their rankings (RRF).

    A `SuperComponent`: its graph is `request -> bm25_retriever`, `request -> text_embedder ->
    embedding_retriever`, both `-> fusion` (`RankFusion`), so a trace shows each part as its own span. Each
    document's fused score is `sum(1 / (rrf_k + rank))` over the lists it appears in (rank from 1); documents are
    returned best first with that score. Filters go into both retrievers, so access control applies before ranking
    in each of them, never after fusion.

    Usage:
        retriever = HybridRetriever(
            bm25_retriever=EmbeddedBM25Retriever(document_store=store),
            embedding_retriever=EmbeddedEmbeddingRetriever(document_store=store),
            text_embedder=build_text_embedder(settings),
            top_k=5,
        )
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
            if not hasattr(part, "__haystack_input__"):
                raise ValueError(f"{name} must be a Haystack component")
        self.bm25_retriever = bm25_retriever
        self.embedding_retriever = embedding_retriever
        self.text_embedder = text_embedder
        self.top_k = top_k
        self.candidates = candidates
        self.rrf_k = rrf_k
        pipeline = Pipeline()
        pipeline.add_component("request", HybridSearchRequest(top_k=top_k, candidates=candidates))
        pipeline.add_component("bm25_retriever", bm25_retriever)
        pipeline.add_component("text_embedder", text_embedder)
        pipeline.add_component("embedding_retriever", embedding_retriever)
        pipeline.add_component("fusion", RankFusion(rrf_k=rrf_k))
        for sender, receiver in (
            ("request.query", "bm25_retriever.query"),
            ("request.depth", "bm25_retriever.top_k"),
            ("request.text", "text_embedder.text"),
            ("text_embedder.embedding", "embedding_retriever.query_embedding"),
            ("request.depth", "embedding_retriever.top_k"),
            ("bm25_retriever.documents", "fusion.keyword"),
            ("embedding_retriever.documents", "fusion.dense"),
            ("request.top_k", "fusion.top_k"),
        ):
            pipeline.connect(sender, receiver)
        self.pipeline = pipeline
        self.input_mapping = {"query": ["request.query"],
                              "filters": ["bm25_retriever.filters", "embedding_retriever.filters"],
                              "top_k": ["request.top_k"]}
        self.output_mapping = {"fusion.documents": "documents", "fusion.candidates": "candidates"}

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
        data = {**data, "init_parameters": dict(data["init_parameters"])}
        for key in ("bm25_retriever", "embedding_retriever", "text_embedder"):
            deserialize_component_inplace(data["init_parameters"], key=key)
        return default_from_dict(cls, data)


def output_sockets(instance: Any) -> dict[str, Any]:
    """A component's output sockets by name (none for an object that is not a component)."""
    sockets = getattr(instance, "__haystack_output__", None)
    return dict(sockets._sockets_dict) if sockets is not None else {}


def distinct_documents(*lists: list[Document]) -> list[Document]:
    """The documents of `lists` once each (by id), in order of first appearance."""
    seen: dict[str, Document] = {}
    for documents in lists:
        for doc in documents:
            seen.setdefault(doc.id, doc)
    return list(seen.values())


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
