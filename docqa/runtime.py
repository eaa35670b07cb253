"""Shared collaborators for pipelines, built lazily from settings: store, embedders, retrievers, LLM clients.

Usage:
    runtime = Runtime(get_settings())
    pipeline = build_pipeline("standard", runtime)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from docqa.llm.calls import ChatGenerator
from docqa.settings import Settings


class Runtime:
    """One per process (or per test). Heavy objects are built on first use and reused."""

    def __init__(
        self,
        settings: Settings,
        *,
        document_store: Any | None = None,
        chat_generator_factory: Callable[[str], ChatGenerator] | None = None,
    ) -> None:
        self.settings = settings
        self._document_store = document_store
        self._chat_generator_factory = chat_generator_factory
        self._chat_generators: dict[str, ChatGenerator] = {}
        self._lock = threading.RLock()

    @property
    def document_store(self) -> Any:
        with self._lock:
            if self._document_store is None:
                from docqa.stores.factory import build_document_store

                self._document_store = build_document_store(self.settings)
            return self._document_store

    def text_embedder(self) -> Any:
        from docqa.embedding import build_text_embedder

        return build_text_embedder(self.settings)

    def document_embedder(self) -> Any:
        from docqa.embedding import build_document_embedder

        return build_document_embedder(self.settings)

    def retriever(self, top_k: int | None = None) -> Any:
        """A fresh hybrid retriever (a Haystack component instance belongs to one pipeline only)."""
        from docqa.components.hybrid_retriever import HybridRetriever
        from docqa.components.store_retrievers import build_retrievers

        bm25, dense = build_retrievers(self.document_store, self.settings)
        return HybridRetriever(
            bm25_retriever=bm25,
            embedding_retriever=dense,
            text_embedder=self.text_embedder(),
            top_k=top_k or self.settings.top_k,
            candidates=max(self.settings.retrieval_candidates, top_k or self.settings.top_k),
            rrf_k=self.settings.rrf_k,
        )

    def chat_generator(self, role: str) -> ChatGenerator:
        with self._lock:
            if role not in self._chat_generators:
                if self._chat_generator_factory is not None:
                    self._chat_generators[role] = self._chat_generator_factory(role)
                else:
                    from docqa.llm.client import build_chat_generator

                    self._chat_generators[role] = build_chat_generator(self.settings, role)
            return self._chat_generators[role]

    def models_by_role(self) -> dict[str, str | None]:
        from docqa.settings import LLM_ROLES

        return {role: self.settings.endpoint_for(role).model for role in LLM_ROLES}
