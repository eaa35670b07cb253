"""Retrieval narrowed to the question's topic, falling back to unfiltered retrieval when that is unwise."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_component_inplace
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from docqa.access import tenant_of
from docqa.components.topic_assigner import TenantTopicAssigners, TopicAssigner
from docqa.topics import TOPIC_FIELD, VERSION_FIELD

MODE_TOPIC = "topic_filter"
MODE_UNCERTAIN = "fallback_uncertain_topic"
MODE_TOO_FEW = "fallback_too_few_results"
MODE_NO_MODEL = "no_topic_model"
_WORD = re.compile(r"[a-z][a-z\-]{2,}")


@component
class TopicFilteredRetriever:
    """
    Assigns the question a topic and retrieves only documents tagged with it (same model version); falls back
    to the unfiltered search when the topic probability is below `min_probability` or the filtered search
    returns fewer than `min_documents`. The returned `topic` says which path was taken.

    Topic keywords are computed only from the returned documents, which the caller's filters already
    restricted to what they may read; the topic model's own corpus-wide labels are never exposed.

    With `topic_assigners` (per tenant) instead of one `topic_assigner`, the tenant's model is the one of the
    tenant named in docqa's access `filters` (`docqa.access.tenant_of`); no tenant there means no topic model.

    Usage example:
    ```python
    retriever = TopicFilteredRetriever(retriever=hybrid, topic_assigner=assigner, min_probability=0.5)
    out = retriever.run(query="abnormal lab results", filters=restrict(scope, None), top_k=5)
    out["documents"], out["topic"]["mode"]
    ```
    """

    def __init__(self, retriever: Any, topic_assigner: TopicAssigner | None = None, min_probability: float = 0.5,
                 min_documents: int | None = None, top_k: int = 5,
                 topic_assigners: TenantTopicAssigners | None = None) -> None:
        """
        :param retriever: Any retriever with `run(query, filters, top_k) -> {"documents": [...]}`.
        :param topic_assigner: Assigns the question's topic (one model for every question).
        :param topic_assigners: Or each tenant's assigner, picked by the tenant of the access filters.
        :param min_probability: Below this the topic is uncertain and retrieval is not narrowed.
        :param min_documents: The filtered search must return at least this many; `top_k` when None.
        :param top_k: Default number of documents.
        """
        if not 0.0 <= min_probability <= 1.0:
            raise ValueError("min_probability must be within [0, 1]")
        if min_documents is not None and min_documents < 1:
            raise ValueError("min_documents must be positive")
        if top_k < 1:
            raise ValueError("top_k must be positive")
        if (topic_assigner is None) == (topic_assigners is None):
            raise ValueError("give exactly one of topic_assigner and topic_assigners")
        self.retriever = retriever
        self.topic_assigner = topic_assigner
        self.topic_assigners = topic_assigners
        self.min_probability = min_probability
        self.min_documents = min_documents
        self.top_k = top_k

    @component.output_types(documents=list[Document], topic=dict)
    def run(self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None) -> dict[str, Any]:
        """
        :param query: The (possibly rewritten) question.
        :param filters: The caller's filters (access restriction included); always applied.
        :param top_k: Number of documents; the default when None.
        :returns: `documents` and `topic`: `mode`, `topic_id`, `probability`, `version`, result counts and
            `keywords` from the returned documents of that topic.
        """
        top_k = top_k or self.top_k
        needed = min(self.min_documents or top_k, top_k)
        assigner = self._assigner(filters)
        assignment = assigner.run(query=query)["query_topic"] if assigner is not None else None
        info: dict[str, Any] = {"mode": MODE_NO_MODEL, "topic_id": None, "probability": None, "version": None,
                                "min_probability": self.min_probability, "filtered_count": None}
        if assignment is not None:
            info.update(topic_id=assignment.topic_id, probability=assignment.probability,
                        version=assignment.version)
            if assignment.probability < self.min_probability:
                info["mode"] = MODE_UNCERTAIN
            else:
                narrowed = _and(filters, [
                    {"field": f"meta.{TOPIC_FIELD}", "operator": "==", "value": assignment.topic_id},
                    {"field": f"meta.{VERSION_FIELD}", "operator": "==", "value": assignment.version},
                ])
                documents = self.retriever.run(query=query, filters=narrowed, top_k=top_k)["documents"]
                info["filtered_count"] = len(documents)
                if len(documents) >= needed:
                    info["mode"] = MODE_TOPIC
                    info["keywords"] = topic_keywords(documents, assignment.topic_id)
                    return {"documents": documents, "topic": info}
                info["mode"] = MODE_TOO_FEW
        documents = self.retriever.run(query=query, filters=filters, top_k=top_k)["documents"]
        if assignment is not None:
            info["keywords"] = topic_keywords(documents, assignment.topic_id)
        return {"documents": documents, "topic": info}

    def _assigner(self, filters: dict[str, Any] | None) -> TopicAssigner | None:
        if self.topic_assigner is not None:
            return self.topic_assigner
        tenant = tenant_of(filters)
        return self.topic_assigners.for_tenant(tenant) if tenant and self.topic_assigners is not None else None

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            retriever=component_to_dict(self.retriever, "retriever"),
            topic_assigner=self.topic_assigner.to_dict() if self.topic_assigner is not None else None,
            topic_assigners=self.topic_assigners.to_dict() if self.topic_assigners is not None else None,
            min_probability=self.min_probability,
            min_documents=self.min_documents,
            top_k=self.top_k,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TopicFilteredRetriever:
        params = data["init_parameters"]
        deserialize_component_inplace(params, key="retriever")
        if params.get("topic_assigner") is not None:
            deserialize_component_inplace(params, key="topic_assigner")
        if params.get("topic_assigners") is not None:
            params["topic_assigners"] = TenantTopicAssigners.from_dict(params["topic_assigners"])
        return default_from_dict(cls, data)


def _and(filters: dict[str, Any] | None, conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"operator": "AND", "conditions": [filters, *conditions] if filters else conditions}


def topic_keywords(documents: list[Document], topic_id: int, limit: int = 5) -> list[str]:
    """Most frequent content words of the given documents that carry `topic_id` (empty when none do)."""
    counts: Counter[str] = Counter()
    for doc in documents:
        if doc.meta.get(TOPIC_FIELD) == topic_id:
            counts.update(w for w in _WORD.findall((doc.content or "").lower()) if w not in ENGLISH_STOP_WORDS)
    return [word for word, _ in counts.most_common(limit)]
