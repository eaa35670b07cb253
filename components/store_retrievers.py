"""The BM25 + dense retriever pair for a document store: docqa's own for the embedded store, elasticsearch-haystack's
for Elasticsearch.

Usage:
    store = build_document_store(settings)
    bm25, dense = build_retrievers(store, settings)
"""

from __future__ import annotations

from typing import Any

from docqa.components.embedded_bm25_retriever import EmbeddedBM25Retriever
from docqa.components.embedded_embedding_retriever import EmbeddedEmbeddingRetriever
from docqa.settings import Settings
from docqa.stores.embedded import EmbeddedDocumentStore


def build_retrievers(store: Any, settings: Settings) -> tuple[Any, Any]:
    """(bm25_retriever, embedding_retriever) for `store`, each returning `settings.retrieval_candidates`."""
    top_k = settings.retrieval_candidates
    if isinstance(store, EmbeddedDocumentStore):
        return EmbeddedBM25Retriever(document_store=store, top_k=top_k), EmbeddedEmbeddingRetriever(
            document_store=store, top_k=top_k
        )
    from haystack_integrations.components.retrievers.elasticsearch import (
        ElasticsearchBM25Retriever,
        ElasticsearchEmbeddingRetriever,
    )

    # Exact terms: fuzzy matching would let near-miss words pull in unrelated passages.
    return ElasticsearchBM25Retriever(
        document_store=store, top_k=top_k, fuzziness="0"
    ), ElasticsearchEmbeddingRetriever(document_store=store, top_k=top_k)
