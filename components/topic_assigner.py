"""Topic tagging of documents (ingestion) and of questions (query time) with a versioned BERTopic model.

The models themselves (fitting, versions, per-tenant directories) live in `docqa.topic_models`.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from docqa.topic_models import (
    FittedTopicModel,
    TopicModelInfo,
    TopicModelStore,
    fit_documents,
    tag_documents,
    topic_model_dir,
)

__all__ = ["TenantTopicAssigners", "TopicAssigner", "TopicAssignment"]


@dataclass(frozen=True)
class TopicAssignment:
    """The topic of a question: id, probability and the model version that assigned it."""

    topic_id: int
    probability: float
    version: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@component
class TopicAssigner:
    """
    Tags documents with `meta.topic_id`, `meta.topic_probability` and `meta.topic_version`, and assigns a
    question its topic from its embedding, using the latest (or a pinned) version of the topic model stored
    under `model_dir`.

    Fitting a new version is an explicit action (`fit`). When documents carry a known `record_type`, the
    model is fitted supervised on it, and such documents are tagged with their record type's topic
    (probability 1.0); others get the nearest topic by their embedding (documents are embedded before they are
    tagged; one without an embedding or a known record type passes untagged). Without a fitted model, documents
    pass through untagged and questions get no topic. Nothing is embedded here: the graph's embedders do it.

    Usage example:
    ```python
    assigner = TopicAssigner(model_dir="/data/topic_models/acme")
    assigner.fit(documents_with_embeddings)                      # admin action: writes version N+1
    tagged = assigner.run(documents=embedded_documents)["documents"]  # ingestion
    assigner.run(query_embedding=text_embedder.run(text="abnormal lab results")["embedding"])["query_topic"]
    ```
    """

    def __init__(self, model_dir: str | Path, version: int | None = None, temperature: float = 0.05) -> None:
        """
        :param model_dir: Directory of the versioned topic models (one per tenant).
        :param version: Pin a version; the latest when None.
        :param temperature: Softmax temperature over cosine similarities; lower is more decisive.
        """
        if temperature <= 0:
            raise ValueError("temperature must be positive")
        if version is not None and version < 1:
            raise ValueError("versions start at 1")
        self.model_dir = str(model_dir)
        self.version = version
        self.temperature = temperature
        self._store = TopicModelStore(model_dir)
        self._model: FittedTopicModel | None = None
        self._loaded = False

    def warm_up(self) -> None:
        # Unpinned assigners follow the latest version, so an admin refit reaches running servers.
        wanted = self.version if self.version is not None else self._store.latest_version()
        current = self._model.version if self._model is not None else None
        if not self._loaded or current != wanted:
            self._model = self._store.load(wanted) if wanted is not None else None
            self._loaded = True

    @property
    def model(self) -> FittedTopicModel | None:
        self.warm_up()
        return self._model

    def fit(self, documents: list[Document]) -> TopicModelInfo:
        """Fit and store a new version on the documents that carry an embedding, and switch to it.

        :returns: The new version's info.
        :raises ValueError: With too few documents to fit.
        """
        info = fit_documents(self._store, documents)
        self.version = None
        self._model = self._store.load(info.version)
        self._loaded = True
        return info

    def assign(self, query_embedding: list[float]) -> TopicAssignment | None:
        """The topic of a question's embedding under the current model (None without a model)."""
        model = self.model
        if model is None:
            return None
        topic_id, probability = model.assign(query_embedding, self.temperature)
        return TopicAssignment(topic_id=topic_id, probability=round(probability, 4), version=model.version)

    @component.output_types(documents=list[Document], query_topic=TopicAssignment | None)
    def run(self, documents: list[Document] | None = None,
            query_embedding: list[float] | None = None) -> dict[str, Any]:
        """
        :param documents: Documents to tag (copies are returned; inputs are not modified).
        :param query_embedding: A question's embedding to assign a topic to.
        :returns: `documents` (tagged where possible) and `query_topic` (None without a model or embedding).
        """
        model = self.model
        tagged = tag_documents(model, list(documents or []), self.temperature) if model is not None else list(
            documents or [])
        topic = self.assign(query_embedding) if query_embedding is not None else None
        return {"documents": tagged, "query_topic": topic}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, model_dir=self.model_dir, version=self.version, temperature=self.temperature)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TopicAssigner:
        return default_from_dict(cls, data)


class TenantTopicAssigners:
    """Each tenant's `TopicAssigner` (its latest model, under `topic_model_dir(root, tenant)`), built on first use.

    Query-time components take this rather than one assigner, and name the tenant from docqa's access filters
    (`docqa.access.tenant_of`), never from the caller.

    Usage example:
    ```python
    assigners = TenantTopicAssigners(settings.data_dir)
    assigners.for_tenant("acme").assign(query_embedding)
    ```
    """

    def __init__(self, data_dir: str | Path, temperature: float = 0.05) -> None:
        """
        :param data_dir: docqa's data directory; each tenant's models are under `topic_models/` in it.
        :param temperature: Softmax temperature of every tenant's assigner.
        """
        self.data_dir = str(data_dir)
        self.temperature = temperature
        self._assigners: dict[str, TopicAssigner] = {}
        self._lock = threading.Lock()

    def for_tenant(self, tenant: str) -> TopicAssigner:
        with self._lock:
            if tenant not in self._assigners:
                self._assigners[tenant] = TopicAssigner(topic_model_dir(self.data_dir, tenant),
                                                        temperature=self.temperature)
            return self._assigners[tenant]

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, data_dir=self.data_dir, temperature=self.temperature)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TenantTopicAssigners:
        return default_from_dict(cls, data)
