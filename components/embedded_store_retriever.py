"""What the retrievers over the embedded document store share: settings, filter policy and serialisation."""

from __future__ import annotations

from typing import Any

from haystack import default_from_dict, default_to_dict
from haystack.document_stores.types import FilterPolicy, apply_filter_policy

from docqa.stores.embedded import EmbeddedDocumentStore


class EmbeddedStoreRetriever:
    """Base of `EmbeddedBM25Retriever` and `EmbeddedEmbeddingRetriever` (not a component itself).

    The two differ only in the store search they call and its query argument; the init checks, the way run-time
    arguments override init ones, and `to_dict`/`from_dict` are the same and live here.

    No `run_async`: the store's async searches are its sync ones in a thread, which is what an `AsyncPipeline`
    does with a sync-only component anyway.

    Usage (in a subclass's `run`):
        documents = self.document_store.bm25_retrieval(query=query, **self._search_arguments(filters, top_k, None))
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

    def _search_arguments(
        self, filters: dict[str, Any] | None, top_k: int | None, scale_score: bool | None
    ) -> dict[str, Any]:
        """The store search's `filters`, `top_k` and `scale_score`: run-time values over the init ones."""
        return {
            "filters": apply_filter_policy(self.filter_policy, self.filters, filters),
            "top_k": top_k or self.top_k,
            "scale_score": self.scale_score if scale_score is None else scale_score,
        }

    def _init_parameters(self) -> dict[str, Any]:
        """Serialisable init parameters; a subclass with more settings extends this."""
        return {
            "document_store": self.document_store.to_dict(),
            "filters": self.filters,
            "top_k": self.top_k,
            "scale_score": self.scale_score,
            "filter_policy": self.filter_policy.value,
        }

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, **self._init_parameters())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        params = dict(data["init_parameters"])
        data = {**data, "init_parameters": params}
        params["document_store"] = EmbeddedDocumentStore.from_dict(params["document_store"])
        if "filter_policy" in params:
            params["filter_policy"] = FilterPolicy.from_str(params["filter_policy"])
        return default_from_dict(cls, data)
