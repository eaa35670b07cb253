"""Topic tagging of documents (ingestion) and of questions (query time) with a versioned BERTopic model.

The models themselves (fitting, versions, per-tenant directories, refits) live in `docqa.topics`.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_component_inplace

from docqa.topics import (
    GUIDE_FIELD,
    PROBABILITY_FIELD,
    TOPIC_FIELD,
    VERSION_FIELD,
    FittedTopicModel,
    TopicModelInfo,
    TopicModelStore,
    fit_documents,
    tag_documents,
    topic_model_dir,
)

# The metadata fields are re-exported: ingestion and the retriever read them from here or from docqa.topics.
__all__ = ["GUIDE_FIELD", "PROBABILITY_FIELD", "TOPIC_FIELD", "VERSION_FIELD", "TenantTopicAssigners",
           "TopicAssigner", "TopicAssignment", "TopicModelInfo"]


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
    question its topic, using the latest (or a pinned) version of the topic model stored under `model_dir`.

    Fitting a new version is an explicit action (`fit`). When documents carry a known `record_type`, the
    model is fitted supervised on it, and such documents are tagged with their record type's topic
    (probability 1.0); others get the nearest topic. Without a fitted model, documents pass through untagged
    and questions get no topic.

    Usage example:
    ```python
    assigner = TopicAssigner(model_dir="/data/topic_models/acme", text_embedder=text_embedder)
    assigner.fit(documents_with_embeddings)                      # admin action: writes version N+1
    tagged = assigner.run(documents=new_documents)["documents"]  # ingestion
    assigner.run(query="abnormal lab results last year")["query_topic"]
    ```
    """

    def __init__(self, model_dir: str | Path, text_embedder: Any | None = None,
                 document_embedder: Any | None = None, version: int | None = None,
                 temperature: float = 0.05) -> None:
        """
        :param model_dir: Directory of the versioned topic models (one per tenant).
        :param text_embedder: Embeds questions (`run(text) -> {"embedding": ...}`); needed for `query`.
        :param document_embedder: Embeds documents that arrive without an embedding.
        :param version: Pin a version; the latest when None.
        :param temperature: Softmax temperature over cosine similarities; lower is more decisive.
        """
        if temperature <= 0:
            raise ValueError("temperature must be positive")
        if version is not None and version < 1:
            raise ValueError("versions start at 1")
        self.model_dir = str(model_dir)
        self.text_embedder = text_embedder
        self.document_embedder = document_embedder
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
        """Fit and store a new version on `documents` (embedded if needed) and switch to it.

        :returns: The new version's info.
        :raises ValueError: With too few documents to fit.
        """
        info = fit_documents(self._store, self._with_embeddings(documents))
        self.version = None
        self._model = self._store.load(info.version)
        self._loaded = True
        return info

    @component.output_types(documents=list[Document], query_topic=TopicAssignment | None)
    def run(self, documents: list[Document] | None = None, query: str | None = None) -> dict[str, Any]:
        """
        :param documents: Documents to tag (copies are returned; inputs are not modified).
        :param query: A question to assign a topic to.
        :returns: `documents` (tagged where possible) and `query_topic` (None without a model or query).
        """
        model = self.model
        tagged = self._tag(documents or [], model) if model is not None else list(documents or [])
        topic = None
        if query is not None and model is not None:
            if self.text_embedder is None:
                raise ValueError("assigning a question's topic needs a text_embedder")
            embedding = self.text_embedder.run(text=query)["embedding"]
            topic_id, probability = model.assign(embedding, self.temperature)
            topic = TopicAssignment(topic_id=topic_id, probability=round(probability, 4), version=model.version)
        return {"documents": tagged, "query_topic": topic}

    def _tag(self, documents: list[Document], model: FittedTopicModel) -> list[Document]:
        return tag_documents(model, self._with_embeddings(documents), self.temperature)

    def _with_embeddings(self, documents: list[Document]) -> list[Document]:
        missing = [d for d in documents if d.embedding is None]
        if not missing or self.document_embedder is None:
            return list(documents)
        embedded = {d.id: d for d in self.document_embedder.run(documents=missing)["documents"]}
        return [embedded.get(d.id, d) if d.embedding is None else d for d in documents]

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            model_dir=self.model_dir,
            text_embedder=_serialized(self.text_embedder, "text_embedder"),
            document_embedder=_serialized(self.document_embedder, "document_embedder"),
            version=self.version,
            temperature=self.temperature,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TopicAssigner:
        params = data["init_parameters"]
        for key in ("text_embedder", "document_embedder"):
            if params.get(key) is not None:
                deserialize_component_inplace(params, key=key)
        return default_from_dict(cls, data)


def _serialized(collaborator: Any | None, name: str) -> dict[str, Any] | None:
    return component_to_dict(collaborator, name) if collaborator is not None else None


class TenantTopicAssigners:
    """Each tenant's `TopicAssigner` (its latest model, under `topic_model_dir(root, tenant)`), built on first use.

    Query-time components take this rather than one assigner, and name the tenant from docqa's access filters
    (`docqa.access.tenant_of`), never from the caller.

    Usage example:
    ```python
    assigners = TenantTopicAssigners(settings.data_dir, text_embedder=text_embedder)
    assigners.for_tenant("acme").run(query="abnormal lab results")["query_topic"]
    ```
    """

    def __init__(self, data_dir: str | Path, text_embedder: Any | None = None, temperature: float = 0.05) -> None:
        """
        :param data_dir: docqa's data directory; each tenant's models are under `topic_models/` in it.
        :param text_embedder: Embeds questions.
        :param temperature: Softmax temperature of every tenant's assigner.
        """
        self.data_dir = str(data_dir)
        self.text_embedder = text_embedder
        self.temperature = temperature
        self._assigners: dict[str, TopicAssigner] = {}
        self._lock = threading.Lock()

    def for_tenant(self, tenant: str) -> TopicAssigner:
        with self._lock:
            if tenant not in self._assigners:
                self._assigners[tenant] = TopicAssigner(topic_model_dir(self.data_dir, tenant),
                                                        text_embedder=self.text_embedder,
                                                        temperature=self.temperature)
            return self._assigners[tenant]

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, data_dir=self.data_dir,
                               text_embedder=_serialized(self.text_embedder, "text_embedder"),
                               temperature=self.temperature)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TenantTopicAssigners:
        if data["init_parameters"].get("text_embedder") is not None:
            deserialize_component_inplace(data["init_parameters"], key="text_embedder")
        return default_from_dict(cls, data)
