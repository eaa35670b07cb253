"""Ingestion test helpers: an embedder that records what it embedded (tests only)."""

from __future__ import annotations

from typing import Any

from haystack import Document

from tests.support.hash_embedder import HashDocumentEmbedder


class CountingEmbedder:
    """The hash document embedder, plus the ids of every document it was asked to embed."""

    def __init__(self) -> None:
        self.embedded: list[str] = []
        self._inner = HashDocumentEmbedder()

    def warm_up(self) -> None:
        """Nothing to load."""

    def run(self, documents: list[Document]) -> dict[str, Any]:
        self.embedded.extend(doc.id for doc in documents)
        return self._inner.run(documents=documents)
