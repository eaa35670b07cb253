"""HybridRetriever: reciprocal rank fusion, filters reaching both retrievers, validation, serialization."""

from __future__ import annotations

import pytest
from haystack import Document, component
from haystack.core.errors import PipelineRuntimeError
from haystack.core.serialization import allow_deserialization_module

from docqa.components.embedded_bm25_retriever import EmbeddedBM25Retriever
from docqa.components.embedded_embedding_retriever import EmbeddedEmbeddingRetriever
from docqa.components.hybrid_retriever import HybridRetriever, reciprocal_rank_fusion
from docqa.stores.embedded import EmbeddedDocumentStore


@component
class RecordingRetriever:
    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.calls: list[dict] = []

    @component.output_types(documents=list[Document])
    def run(self, query: str | None = None, query_embedding: list[float] | None = None,
            filters: dict | None = None, top_k: int | None = None):
        self.calls.append({"query": query, "query_embedding": query_embedding, "filters": filters, "top_k": top_k})
        return {"documents": self.documents[:top_k]}


@component
class FixedEmbedder:
    @component.output_types(embedding=list[float])
    def run(self, text: str):
        return {"embedding": [float(len(text)), 1.0]}


def docs(*names: str) -> list[Document]:
    return [Document(id=n, content=n) for n in names]


class TestReciprocalRankFusion:
    def test_scores_add_up_over_lists(self):
        fused = reciprocal_rank_fusion([docs("a", "b", "c"), docs("c", "a")], rrf_k=60, top_k=10)
        scores = {d.id: d.score for d in fused}
        assert scores["a"] == pytest.approx(1 / 61 + 1 / 62)
        assert scores["c"] == pytest.approx(1 / 63 + 1 / 61)
        assert scores["b"] == pytest.approx(1 / 62)
        assert [d.id for d in fused] == ["a", "c", "b"]

    def test_a_document_in_both_lists_beats_a_single_first_place(self):
        fused = reciprocal_rank_fusion([docs("solo", "both"), docs("other", "both")], rrf_k=1, top_k=1)
        assert [d.id for d in fused] == ["both"]

    def test_top_k_and_empty_lists(self):
        assert reciprocal_rank_fusion([[], []], rrf_k=60, top_k=3) == []
        assert len(reciprocal_rank_fusion([docs("a", "b", "c", "d")], rrf_k=60, top_k=2)) == 2


class TestHybridRetriever:
    def test_filters_and_depth_reach_both_retrievers(self):
        bm25, dense = RecordingRetriever(docs("a", "b")), RecordingRetriever(docs("b", "c"))
        hybrid = HybridRetriever(bm25, dense, FixedEmbedder(), top_k=2, candidates=7, rrf_k=60)
        filters = {"field": "meta.tenant", "operator": "==", "value": "t"}
        result = hybrid.run(query="where?", filters=filters)["documents"]
        assert bm25.calls == [{"query": "where?", "query_embedding": None, "filters": filters, "top_k": 7}]
        assert dense.calls == [{"query": None, "query_embedding": [6.0, 1.0], "filters": filters, "top_k": 7}]
        assert [d.id for d in result] == ["b", "a"]

    def test_run_top_k_can_exceed_candidates(self):
        bm25, dense = RecordingRetriever(docs(*"abcdef")), RecordingRetriever(docs(*"fedcba"))
        hybrid = HybridRetriever(bm25, dense, FixedEmbedder(), top_k=2, candidates=3)
        assert len(hybrid.run(query="q", top_k=5)["documents"]) == 5
        assert bm25.calls[-1]["top_k"] == 5

    @pytest.mark.parametrize(
        "kwargs", [{"top_k": 0}, {"top_k": 5, "candidates": 4}, {"rrf_k": 0}, {"text_embedder": object()}]
    )
    def test_rejects_bad_arguments(self, kwargs):
        args = {"bm25_retriever": RecordingRetriever([]), "embedding_retriever": RecordingRetriever([])}
        args["text_embedder"] = kwargs.pop("text_embedder", FixedEmbedder())
        with pytest.raises(ValueError):
            HybridRetriever(**args, **kwargs)

    def test_rejects_empty_query(self):
        bm25 = RecordingRetriever([])
        hybrid = HybridRetriever(bm25, RecordingRetriever([]), FixedEmbedder())
        with pytest.raises(PipelineRuntimeError, match="query must be a non-empty string"):
            hybrid.run(query="  ")
        assert bm25.calls == []

    def test_each_part_is_a_node_of_its_graph(self):
        hybrid = HybridRetriever(RecordingRetriever([]), RecordingRetriever([]), FixedEmbedder())
        assert set(hybrid.pipeline.graph.nodes) == {"request", "bm25_retriever", "text_embedder",
                                                    "embedding_retriever", "fusion"}

    def test_serialization_round_trip_with_embedded_retrievers(self, tmp_path):
        from haystack_integrations.components.embedders.sentence_transformers import (
            SentenceTransformersTextEmbedder,
        )

        store = EmbeddedDocumentStore(path=str(tmp_path / "s.sqlite3"))
        hybrid = HybridRetriever(
            EmbeddedBM25Retriever(document_store=store, top_k=4),
            EmbeddedEmbeddingRetriever(document_store=store, top_k=4),
            SentenceTransformersTextEmbedder(model=str(tmp_path / "model"), local_files_only=True),
            top_k=3,
            candidates=9,
            rrf_k=10,
        )
        data = hybrid.to_dict()
        allow_deserialization_module("docqa.*")
        clone = HybridRetriever.from_dict(data)
        assert clone.to_dict() == data
        assert isinstance(clone.bm25_retriever, EmbeddedBM25Retriever)
        assert clone.bm25_retriever.document_store.path == store.path
        assert (clone.top_k, clone.candidates, clone.rrf_k) == (3, 9, 10)
