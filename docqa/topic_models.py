"""Versioned topic models of a tenant: fitting, storing, loading, and tagging documents with them.

A model directory holds one subdirectory per version (`v0001`, `v0002`, ...); each is written to a temporary
directory and renamed into place, so a reader never sees half a version. Fitting never loads an embedding
model: BERTopic gets our vectors. Strategies by corpus:
- every document carries a known label (e.g. `record_type`): supervised BERTopic, one topic per label;
- a few hundred documents or more: UMAP + HDBSCAN (semi-supervised by the labels some documents carry);
- smaller corpora, or HDBSCAN finding fewer than two topics: PCA + k-means, which always yields topics.
Query and document assignment use the nearest topic embedding (cosine), softmax-normalised into a probability,
so the same rule tags documents at ingestion and questions at query time.

This module is the model store only (it imports no component, pipeline or ingestion code); refits, their
scheduling and status are administration, in `docqa.topics`.

Usage:
    store = TopicModelStore(topic_model_dir(settings.data_dir, tenant))
    info = store.fit_new_version(texts, embeddings, labels=record_types)
    model = store.load()            # latest version
    model.assign(query_embedding)   # (topic_id, probability)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from filelock import FileLock

if TYPE_CHECKING:
    from haystack import Document

MIN_DOCUMENTS = 8
HDBSCAN_MIN_DOCUMENTS = 150
INFO_FILE = "docqa_topics.json"
SEED = 42
# Document metadata written by tagging; `record_type` guides (supervises) the fit when documents carry it.
TOPIC_FIELD = "topic_id"
PROBABILITY_FIELD = "topic_probability"
VERSION_FIELD = "topic_version"
GUIDE_FIELD = "record_type"


def topic_model_dir(data_dir: Path | str, tenant: str) -> Path:
    """One directory of topic model versions per tenant (a readable, collision-free name)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", tenant)[:40]
    return Path(data_dir) / "topic_models" / f"{readable}-{hashlib.sha256(tenant.encode()).hexdigest()[:8]}"


class _NoEmbeddingModelWarning(logging.Filter):
    """BERTopic warns on every save/load that no embedding model is attached: that is the point here.

    A filter rather than a level, because every BERTopic instance resets its logger's level.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "without explicitly defining an embedding model" not in record.getMessage()


logging.getLogger("BERTopic").addFilter(_NoEmbeddingModelWarning())


@dataclass
class TopicModelInfo:
    """What a version is: how it was fitted and how its topics relate to known labels."""

    version: int
    mode: str  # "supervised", "clustered", "small_corpus"
    n_documents: int
    n_topics: int
    fit_seconds: float
    created_at: float
    label_to_topic: dict[str, int] = field(default_factory=dict)
    topic_sizes: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class FittedTopicModel:
    """A loaded version: topic embeddings for assignment, and the BERTopic model for keywords (admin use)."""

    def __init__(self, info: TopicModelInfo, topic_ids: list[int], topic_embeddings: np.ndarray,
                 bertopic: Any | None = None) -> None:
        if len(topic_ids) != len(topic_embeddings) or not topic_ids:
            raise ValueError("a topic model needs one embedding per topic and at least one topic")
        self.info = info
        self.topic_ids = topic_ids
        norms = np.linalg.norm(topic_embeddings, axis=1, keepdims=True)
        self._unit = topic_embeddings / np.where(norms == 0, 1.0, norms)
        self.bertopic = bertopic

    @property
    def version(self) -> int:
        return self.info.version

    def assign_many(self, embeddings: np.ndarray, temperature: float) -> list[tuple[int, float]]:
        """Nearest topic and its softmax probability (over cosine similarities / temperature) per row."""
        matrix = np.atleast_2d(np.asarray(embeddings, dtype=np.float32))
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        similarities = (matrix / np.where(norms == 0, 1.0, norms)) @ self._unit.T
        logits = similarities / temperature
        logits -= logits.max(axis=1, keepdims=True)
        probabilities = np.exp(logits)
        probabilities /= probabilities.sum(axis=1, keepdims=True)
        best = probabilities.argmax(axis=1)
        return [(self.topic_ids[i], float(probabilities[row, i])) for row, i in enumerate(best)]

    def assign(self, embedding: list[float] | np.ndarray, temperature: float) -> tuple[int, float]:
        return self.assign_many(np.asarray(embedding), temperature)[0]


def _bertopic_for(n: int, labels: list[str | None] | None) -> tuple[Any, str, list[int] | None]:
    from bertopic import BERTopic
    from bertopic.dimensionality import BaseDimensionalityReduction
    from bertopic.vectorizers import ClassTfidfTransformer
    from sklearn.feature_extraction.text import CountVectorizer

    vectorizer = CountVectorizer(stop_words="english", min_df=1)
    ctfidf = ClassTfidfTransformer(reduce_frequent_words=True)
    known = [label for label in (labels or []) if label]
    names = sorted(set(known))
    if labels is not None and len(known) == n and len(names) >= 2:
        from sklearn.linear_model import LogisticRegression

        y = [names.index(label) for label in labels]  # type: ignore[arg-type]
        model = BERTopic(embedding_model=None, umap_model=BaseDimensionalityReduction(),
                         hdbscan_model=LogisticRegression(max_iter=1000, random_state=SEED),
                         vectorizer_model=vectorizer, ctfidf_model=ctfidf)
        return model, "supervised", y
    y = [names.index(label) if label else -1 for label in labels] if labels and names else None
    if n >= HDBSCAN_MIN_DOCUMENTS:
        from hdbscan import HDBSCAN
        from umap import UMAP

        umap_model = UMAP(n_neighbors=min(15, n - 1), n_components=5, min_dist=0.0, metric="cosine",
                          random_state=SEED, n_jobs=1)
        cluster = HDBSCAN(min_cluster_size=max(5, n // 100), metric="euclidean", cluster_selection_method="eom",
                          prediction_data=True)
        model = BERTopic(embedding_model=None, umap_model=umap_model, hdbscan_model=cluster,
                         vectorizer_model=vectorizer, ctfidf_model=ctfidf)
        return model, "clustered", y
    return _small_corpus_model(n, vectorizer, ctfidf), "small_corpus", None


def _small_corpus_model(n: int, vectorizer: Any, ctfidf: Any) -> Any:
    from bertopic import BERTopic
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA

    clusters = max(2, min(20, round(math.sqrt(n / 2))))
    return BERTopic(embedding_model=None, umap_model=PCA(n_components=min(5, n - 1), random_state=SEED),
                    hdbscan_model=KMeans(n_clusters=clusters, n_init=10, random_state=SEED),
                    vectorizer_model=vectorizer, ctfidf_model=ctfidf)


def fit_bertopic(texts: list[str], embeddings: np.ndarray,
                 labels: list[str | None] | None = None) -> tuple[Any, str, list[int]]:
    """Fit BERTopic on precomputed embeddings; returns the model, the strategy used and each text's topic."""
    n = len(texts)
    if n < MIN_DOCUMENTS:
        raise ValueError(f"a topic model needs at least {MIN_DOCUMENTS} documents, got {n}")
    if embeddings.shape[0] != n:
        raise ValueError("one embedding per text is required")
    model, mode, y = _bertopic_for(n, labels)
    topics, _ = model.fit_transform(texts, embeddings=embeddings, y=y)
    real = {t for t in topics if t != -1}
    if mode == "clustered" and len(real) < 2:
        from bertopic.vectorizers import ClassTfidfTransformer
        from sklearn.feature_extraction.text import CountVectorizer

        model = _small_corpus_model(n, CountVectorizer(stop_words="english"),
                                    ClassTfidfTransformer(reduce_frequent_words=True))
        mode = "small_corpus"
        topics, _ = model.fit_transform(texts, embeddings=embeddings)
    return model, mode, [int(t) for t in topics]


def _topic_table(model: Any) -> tuple[list[int], np.ndarray]:
    ids = sorted(int(t) for t in model.get_topics())
    embeddings = np.asarray(model.topic_embeddings_, dtype=np.float32)
    offset = int(getattr(model, "_outliers", 0))
    rows = [(t, embeddings[t + offset]) for t in ids if t != -1]
    return [t for t, _ in rows], np.vstack([e for _, e in rows])


class TopicModelStore:
    """Versioned topic models under one directory (one per tenant in docqa)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    def versions(self) -> list[int]:
        if not self.root.is_dir():
            return []
        found = []
        for child in self.root.iterdir():
            if child.name.startswith("v") and child.name[1:].isdigit() and (child / INFO_FILE).is_file():
                found.append(int(child.name[1:]))
        return sorted(found)

    def latest_version(self) -> int | None:
        versions = self.versions()
        return versions[-1] if versions else None

    def path_of(self, version: int) -> Path:
        return self.root / f"v{version:04d}"

    def fit_new_version(self, texts: list[str], embeddings: np.ndarray,
                        labels: list[str | None] | None = None) -> tuple[TopicModelInfo, list[int]]:
        """Fit and persist a new version (never overwrites one); returns its info and each text's topic."""
        start = time.perf_counter()
        model, mode, topics = fit_bertopic(texts, np.asarray(embeddings, dtype=np.float32), labels)
        seconds = time.perf_counter() - start
        label_to_topic: dict[str, int] = {}
        if labels:
            by_label: dict[str, Counter[int]] = {}
            for label, topic in zip(labels, topics, strict=True):
                if label and topic != -1:
                    by_label.setdefault(label, Counter())[topic] += 1
            label_to_topic = {label: counts.most_common(1)[0][0] for label, counts in by_label.items()}
        ids, _ = _topic_table(model)
        sizes = Counter(topics)
        self.root.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self.root / ".lock")):
            version = (self.latest_version() or 0) + 1
            info = TopicModelInfo(
                version=version, mode=mode, n_documents=len(texts), n_topics=len(ids),
                fit_seconds=round(seconds, 3), created_at=time.time(), label_to_topic=label_to_topic,
                topic_sizes={str(t): sizes[t] for t in sorted(sizes)},
            )
            staging = Path(tempfile.mkdtemp(prefix=".fitting-", dir=self.root))
            try:
                model.save(str(staging / "bertopic"), serialization="safetensors", save_ctfidf=True,
                           save_embedding_model=False)
                (staging / INFO_FILE).write_text(json.dumps(info.to_dict(), indent=2))
                staging.rename(self.path_of(version))
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return info, topics

    def load(self, version: int | None = None) -> FittedTopicModel | None:
        """A stored version (the latest when None); None when nothing has been fitted yet."""
        version = version if version is not None else self.latest_version()
        if version is None:
            return None
        path = self.path_of(version)
        if not (path / INFO_FILE).is_file():
            raise FileNotFoundError(f"no topic model version {version} under {self.root}")
        from bertopic import BERTopic

        info = TopicModelInfo(**json.loads((path / INFO_FILE).read_text()))
        model = BERTopic.load(str(path / "bertopic"), embedding_model=None)
        ids, embeddings = _topic_table(model)
        return FittedTopicModel(info, ids, embeddings, model)


# ---- tagging and fitting documents ------------------------------------------------------------------------------


def fit_documents(store: TopicModelStore, documents: list[Document]) -> TopicModelInfo:
    """Fit and store a new version on the documents that have content and an embedding; supervised by
    `record_type` when documents carry it.

    :raises ValueError: too few usable documents.
    """
    usable = [d for d in documents if d.embedding is not None and d.content]
    labels = [d.meta.get(GUIDE_FIELD) for d in usable]
    info, _ = store.fit_new_version(
        [d.content or "" for d in usable],
        np.asarray([d.embedding for d in usable], dtype=np.float32),
        labels=labels if any(labels) else None,
    )
    return info


def tag_documents(model: FittedTopicModel, documents: list[Document], temperature: float) -> list[Document]:
    """Copies of `documents` tagged with their topic: their record type's topic (probability 1.0) when the model
    knows it, else the nearest topic by embedding; documents without either are returned untagged."""
    guides = model.info.label_to_topic
    unguided = [d for d in documents if d.meta.get(GUIDE_FIELD) not in guides and d.embedding is not None]
    assigned = dict(zip((d.id for d in unguided),
                        model.assign_many(np.asarray([d.embedding for d in unguided]), temperature)
                        if unguided else [], strict=True))
    out = []
    for doc in documents:
        guide = doc.meta.get(GUIDE_FIELD)
        if guide in guides:
            topic, probability = guides[guide], 1.0
        elif doc.id in assigned:
            topic, probability = assigned[doc.id]
        else:
            out.append(doc)
            continue
        meta = {**doc.meta, TOPIC_FIELD: topic, PROBABILITY_FIELD: round(probability, 4), VERSION_FIELD: model.version}
        out.append(dataclasses.replace(doc, meta=meta))
    return out
