"""Retrieval narrowed to the question's topic, falling back to unfiltered retrieval when that is unwise: a graph of
a topic filter, a query embedder, a topic assigner, the retriever and a check that may send the search round once
more without the topic."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from haystack import Document, Pipeline, component, default_from_dict, default_to_dict, super_component
from haystack.components.joiners import BranchJoiner
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_component_inplace
from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

from docqa.access import tenant_of
from docqa.components.hybrid_retriever import distinct_documents, output_sockets
from docqa.components.topic_assigner import TenantTopicAssigners, TopicAssigner, TopicAssignment
from docqa.topic_models import TOPIC_FIELD, VERSION_FIELD

_WORD = re.compile(r"[a-z][a-z\-]{2,}")


class TopicMode(StrEnum):
    """Which path a retrieval took, as its `topic` output (and the trace) says."""

    TOPIC = "topic_filter"                    # narrowed to the question's topic
    UNCERTAIN = "fallback_uncertain_topic"    # topic probability below the minimum: not narrowed
    TOO_FEW = "fallback_too_few_results"      # narrowed search found too little: searched again unnarrowed
    NO_MODEL = "no_topic_model"               # no topic model for the tenant (or no tenant)
    EXACT_RECORDS = "exact_record_query"      # AT-RAG's exact record questions: metadata alone selects records


@dataclass(frozen=True)
class TopicSearch:
    """One search of `TopicFilteredRetriever`'s graph: what to retrieve with, and what the topic step decided.

    `filters` are the access filters AND the question's own (`base_filters`), AND the topic when narrowed.
    """

    query: str
    top_k: int
    needed: int
    min_probability: float
    base_filters: dict[str, Any] | None = None
    filters: dict[str, Any] | None = None
    tenant: str | None = None
    assignment: TopicAssignment | None = None
    mode: TopicMode = TopicMode.NO_MODEL
    filtered_count: int | None = None
    # What a narrowed search that found too few returned, kept for the result's `candidates`.
    earlier: tuple[Document, ...] = ()

    @property
    def narrowed(self) -> bool:
        return self.mode == TopicMode.TOPIC

    def info(self) -> dict[str, Any]:
        """The `topic` output: the path taken, the assignment and the narrowed search's result count."""
        assignment = self.assignment
        return {"mode": self.mode.value, "topic_id": assignment.topic_id if assignment else None,
                "probability": assignment.probability if assignment else None,
                "version": assignment.version if assignment else None, "min_probability": self.min_probability,
                "filtered_count": self.filtered_count}

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "top_k": self.top_k, "filters": self.filters, **self.info()}


class _TopicModelStep:
    """What `TopicFilter` and `QueryTopicAssigner` share: the topic model(s) they hold, the pick of a tenant's
    model, and their serialisation (a subclass adds its own init parameters in `_settings`)."""

    def __init__(self, topic_assigner: TopicAssigner | None = None,
                 topic_assigners: TenantTopicAssigners | None = None) -> None:
        self.topic_assigner = topic_assigner
        self.topic_assigners = topic_assigners

    def _assigner_for(self, tenant: str | None) -> TopicAssigner | None:
        """The one fixed model, else the tenant's (None without a tenant or per-tenant models)."""
        if self.topic_assigner is not None:
            return self.topic_assigner
        return self.topic_assigners.for_tenant(tenant) if tenant and self.topic_assigners is not None else None

    def _settings(self) -> dict[str, Any]:
        return {}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, **_assigners_to_dict(self.topic_assigner, self.topic_assigners),
                               **self._settings())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        _assigners_from_dict(data["init_parameters"])
        return default_from_dict(cls, data)


@component
class TopicFilter(_TopicModelStep):
    """
    The entry of `TopicFilteredRetriever`'s graph: joins docqa's access `filters` with the question's own
    (`scope_filters`) and finds the topic model of the tenant named in the access filters (or the one fixed
    model). With a model, the question goes to the query embedder (`text`) and the search waits for its topic
    (`pending`); without one, the unnarrowed `search` goes straight to the retriever.

    Usage example:
    ```python
    out = TopicFilter(topic_assigners=TenantTopicAssigners(data_dir)).run(query="labs?", filters=access)
    out["text"], out["pending"]          # or out["search"] without a topic model
    ```
    """

    def __init__(self, topic_assigner: TopicAssigner | None = None,
                 topic_assigners: TenantTopicAssigners | None = None, min_probability: float = 0.5,
                 min_documents: int | None = None, top_k: int = 5) -> None:
        """
        :param topic_assigner: One model for every question.
        :param topic_assigners: Or each tenant's, picked by the tenant of the access filters.
        :param min_probability: Below this the topic is uncertain and retrieval is not narrowed.
        :param min_documents: The narrowed search must return at least this many; `top_k` when None.
        :param top_k: Default number of documents.
        """
        # Named base, not super(): @component rebuilds the class, so super()'s implicit class is not this one.
        _TopicModelStep.__init__(self, topic_assigner, topic_assigners)
        self.min_probability = min_probability
        self.min_documents = min_documents
        self.top_k = top_k

    @component.output_types(text=str, pending=TopicSearch, search=TopicSearch)
    def run(self, query: str, filters: dict[str, Any] | None = None, scope_filters: dict[str, Any] | None = None,
            top_k: int | None = None) -> dict[str, Any]:
        """
        :param query: The (possibly rewritten) question.
        :param filters: docqa's access filters; always applied.
        :param scope_filters: The question's own filters (a patient, a time window), AND'ed with them.
        :param top_k: Number of documents; the default when None.
        :returns: `text` and `pending` when the tenant has a topic model, else `search`.
        """
        top_k = top_k or self.top_k
        base = _and(filters, scope_filters)
        search = TopicSearch(query=query, top_k=top_k, needed=min(self.min_documents or top_k, top_k),
                             min_probability=self.min_probability, base_filters=base, filters=base,
                             tenant=tenant_of(filters))
        assigner = self._assigner_for(tenant_of(filters))
        if assigner is None or assigner.model is None:
            return {"search": search}
        return {"text": query, "pending": search}

    def _settings(self) -> dict[str, Any]:
        return {"min_probability": self.min_probability, "min_documents": self.min_documents, "top_k": self.top_k}


@component
class QueryTopicAssigner(_TopicModelStep):
    """
    Assigns the question its topic from its embedding, with the model `TopicFilter` found (the same tenant's),
    and narrows the search to that topic and model version when the probability reaches the minimum.

    Usage example:
    ```python
    out = QueryTopicAssigner(topic_assigners=assigners).run(pending=filter_out["pending"], query_embedding=vector)
    out["search"].mode, out["search"].filters
    ```
    """

    def __init__(self, topic_assigner: TopicAssigner | None = None,
                 topic_assigners: TenantTopicAssigners | None = None) -> None:
        """
        :param topic_assigner: One model for every question.
        :param topic_assigners: Or each tenant's (the tenant is the pending search's).
        """
        _TopicModelStep.__init__(self, topic_assigner, topic_assigners)

    @component.output_types(search=TopicSearch)
    def run(self, pending: TopicSearch, query_embedding: list[float]) -> dict[str, Any]:
        """
        :param pending: The search `TopicFilter` prepared.
        :param query_embedding: The question's embedding.
        :returns: `search`: narrowed to the topic (`topic_filter`), or not (`fallback_uncertain_topic`, or
            `no_topic_model` when the model went away meanwhile).
        """
        assigner = self._assigner_for(pending.tenant)
        assignment = assigner.assign(query_embedding) if assigner is not None else None
        if assignment is None:
            return {"search": pending}
        if assignment.probability < pending.min_probability:
            return {"search": dataclasses.replace(pending, assignment=assignment, mode=TopicMode.UNCERTAIN)}
        narrowed = {"operator": "AND", "conditions": [*([pending.base_filters] if pending.base_filters else []),
                                                      {"field": f"meta.{TOPIC_FIELD}", "operator": "==",
                                                       "value": assignment.topic_id},
                                                      {"field": f"meta.{VERSION_FIELD}", "operator": "==",
                                                       "value": assignment.version}]}
        return {"search": dataclasses.replace(pending, assignment=assignment, mode=TopicMode.TOPIC,
                                              filters=narrowed)}



@component
class TopicSearchStep:
    """
    Hands a `TopicSearch` to the retriever (`query`, `filters`, `top_k`) and on to `TopicCheck` (`search`).

    Usage example:
    ```python
    TopicSearchStep().run(search=search)   # {"query": ..., "filters": ..., "top_k": ..., "search": search}
    ```
    """

    @component.output_types(query=str, filters=dict[str, Any] | None, top_k=int, search=TopicSearch)
    def run(self, search: TopicSearch) -> dict[str, Any]:
        """
        :param search: The search to run.
        :returns: Its `query`, `filters` and `top_k`, and the `search` itself.
        """
        return {"query": search.query, "filters": search.filters, "top_k": search.top_k, "search": search}


@component
class TopicCheck:
    """
    Checks a narrowed search's result: fewer than the needed documents sends the search round once more without
    the topic (`retry`, mode `fallback_too_few_results`); otherwise the `documents` and the `topic` info (with
    keywords from the returned documents of the question's topic) are the result.

    Topic keywords are computed only from the returned documents, which the caller's filters already
    restricted to what they may read; the topic model's own corpus-wide labels are never exposed.

    Usage example:
    ```python
    out = TopicCheck().run(search=search, documents=documents)
    out.get("retry") or (out["documents"], out["topic"]["mode"])
    ```
    """

    @component.output_types(documents=list[Document], topic=dict, candidates=list[Document], retry=TopicSearch)
    def run(self, search: TopicSearch, documents: list[Document],
            candidates: list[Document] | None = None) -> dict[str, Any]:
        """
        :param search: The search that was run.
        :param documents: What it returned.
        :param candidates: Everything the retriever found before ranking (its `documents` when not given).
        :returns: `retry` (the unnarrowed search) or `documents`, `topic` and `candidates` (every search's).
        """
        found = documents if candidates is None else candidates
        if search.narrowed and len(documents) < search.needed:
            return {"retry": dataclasses.replace(search, filters=search.base_filters, mode=TopicMode.TOO_FEW,
                                                 filtered_count=len(documents), earlier=tuple(found))}
        if search.narrowed:
            search = dataclasses.replace(search, filtered_count=len(documents))
        info = search.info()
        if search.assignment is not None:
            info["keywords"] = topic_keywords(documents, search.assignment.topic_id)
        return {"documents": documents, "topic": info, "candidates": distinct_documents(list(search.earlier), found)}


@super_component
class TopicFilteredRetriever:
    """
    Assigns the question a topic and retrieves only documents tagged with it (same model version); falls back
    to the unfiltered search when the topic probability is below `min_probability` or the filtered search
    returns fewer than `min_documents`. The returned `topic` says which path was taken.

    A `SuperComponent` over `topic_filter -> query_embedder -> topic_assigner -> search_joiner -> search ->
    retriever -> topic_check` (`topic_check.retry -> search_joiner`: the fallback is the same retriever run
    once more), so each part is its own span. Without a topic model nothing is embedded.

    With `topic_assigners` (per tenant) instead of one `topic_assigner`, the tenant's model is the one of the
    tenant named in docqa's access `filters` (`docqa.access.tenant_of`); no tenant there means no topic model.

    Usage example:
    ```python
    retriever = TopicFilteredRetriever(retriever=hybrid, text_embedder=embedder, topic_assigners=assigners,
                                       min_probability=0.5)
    out = retriever.run(query="abnormal lab results", filters=restrict(scope, None), top_k=5)
    out["documents"], out["topic"]["mode"]
    ```
    """

    def __init__(self, retriever: Any, text_embedder: Any, topic_assigner: TopicAssigner | None = None,
                 min_probability: float = 0.5, min_documents: int | None = None, top_k: int = 5,
                 topic_assigners: TenantTopicAssigners | None = None) -> None:
        """
        :param retriever: A retriever component with `run(query, filters, top_k) -> {"documents": [...]}`.
        :param text_embedder: Embeds the question for its topic (`run(text) -> {"embedding"}`).
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
        self.text_embedder = text_embedder
        # Named base, not super(): @component rebuilds the class, so super()'s implicit class is not this one.
        _TopicModelStep.__init__(self, topic_assigner, topic_assigners)
        self.min_probability = min_probability
        self.min_documents = min_documents
        self.top_k = top_k
        # The retriever runs at most twice: narrowed, then (too few results) without the topic.
        pipeline = Pipeline(max_runs_per_component=2)
        pipeline.add_component("topic_filter", TopicFilter(topic_assigner, topic_assigners, min_probability,
                                                           min_documents, top_k))
        pipeline.add_component("query_embedder", text_embedder)
        pipeline.add_component("topic_assigner", QueryTopicAssigner(topic_assigner, topic_assigners))
        pipeline.add_component("search_joiner", BranchJoiner(TopicSearch))
        pipeline.add_component("search", TopicSearchStep())
        pipeline.add_component("retriever", retriever)
        pipeline.add_component("topic_check", TopicCheck())
        for sender, receiver in (
            ("topic_filter.text", "query_embedder.text"),
            ("topic_filter.pending", "topic_assigner.pending"),
            ("query_embedder.embedding", "topic_assigner.query_embedding"),
            ("topic_filter.search", "search_joiner.value"),
            ("topic_assigner.search", "search_joiner.value"),
            ("topic_check.retry", "search_joiner.value"),
            ("search_joiner.value", "search.search"),
            ("search.query", "retriever.query"),
            ("search.filters", "retriever.filters"),
            ("search.top_k", "retriever.top_k"),
            ("search.search", "topic_check.search"),
            ("retriever.documents", "topic_check.documents"),
        ):
            pipeline.connect(sender, receiver)
        if "candidates" in output_sockets(retriever):
            pipeline.connect("retriever.candidates", "topic_check.candidates")
        self.pipeline = pipeline
        self.input_mapping = {"query": ["topic_filter.query"], "filters": ["topic_filter.filters"],
                              "scope_filters": ["topic_filter.scope_filters"], "top_k": ["topic_filter.top_k"]}
        self.output_mapping = {"topic_check.documents": "documents", "topic_check.topic": "topic",
                               "topic_check.candidates": "candidates"}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            retriever=component_to_dict(self.retriever, "retriever"),
            text_embedder=component_to_dict(self.text_embedder, "text_embedder"),
            **_assigners_to_dict(self.topic_assigner, self.topic_assigners),
            min_probability=self.min_probability,
            min_documents=self.min_documents,
            top_k=self.top_k,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TopicFilteredRetriever:
        data = {**data, "init_parameters": dict(data["init_parameters"])}
        params = data["init_parameters"]
        deserialize_component_inplace(params, key="retriever")
        deserialize_component_inplace(params, key="text_embedder")
        _assigners_from_dict(params)
        return default_from_dict(cls, data)


def _assigners_to_dict(
    topic_assigner: TopicAssigner | None, topic_assigners: TenantTopicAssigners | None
) -> dict[str, Any]:
    # Every topic step that holds a model serialises it alike; `_assigners_from_dict` reads it back.
    return {"topic_assigner": topic_assigner.to_dict() if topic_assigner is not None else None,
            "topic_assigners": topic_assigners.to_dict() if topic_assigners is not None else None}


def _assigners_from_dict(params: dict[str, Any]) -> None:
    if params.get("topic_assigner") is not None:
        deserialize_component_inplace(params, key="topic_assigner")
    if params.get("topic_assigners") is not None:
        params["topic_assigners"] = TenantTopicAssigners.from_dict(params["topic_assigners"])


def _and(*filters: dict[str, Any] | None) -> dict[str, Any] | None:
    present = [f for f in filters if f]
    if not present:
        return None
    return present[0] if len(present) == 1 else {"operator": "AND", "conditions": present}


def topic_keywords(documents: list[Document], topic_id: int, limit: int = 5) -> list[str]:
    """Most frequent content words of the given documents that carry `topic_id` (empty when none do)."""
    counts: Counter[str] = Counter()
    for doc in documents:
        if doc.meta.get(TOPIC_FIELD) == topic_id:
            counts.update(w for w in _WORD.findall((doc.content or "").lower()) if w not in ENGLISH_STOP_WORDS)
    return [word for word, _ in counts.most_common(limit)]
