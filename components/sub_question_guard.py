"""Refuses a planned sub-question that repeats one already asked, by normalised text or embedding similarity.

The guard is a `SuperComponent`, so each part of the check is a traced step of its own:

    repeat_request --documents--> repeat_embedder --documents--> repeat_verdict
    repeat_request --decided, known------------------------------> repeat_verdict

`repeat_request` settles what the text alone settles and lists the texts whose embeddings are not cached yet;
`repeat_embedder` (the deployment's document embedder, only when one is configured) embeds them; `repeat_verdict`
compares the candidate with every asked question and remembers the new embeddings.
"""

from __future__ import annotations

import re
import string
import threading
from typing import Any

import numpy as np
from haystack import Document, Pipeline, component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.core.super_component import SuperComponent
from haystack.utils import deserialize_component_inplace

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_MAX_CACHED = 4096
CHECK_KIND = "repeat_check"


def normalize_question(text: str) -> str:
    """Lower case, no punctuation or articles, single spaces (HotpotQA/SQuAD answer normalisation)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def _not_repeated(similarity: float | None = None) -> dict[str, Any]:
    return {"repeated": False, "matched": None, "similarity": similarity, "method": None}


class EmbeddingCache:
    """Unit embeddings per text, bounded, shared by a guard's request and verdict steps (thread-safe)."""

    def __init__(self, max_texts: int = _MAX_CACHED) -> None:
        self.max_texts = max_texts
        self._vectors: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def get(self, texts: list[str]) -> dict[str, np.ndarray]:
        with self._lock:
            return {text: self._vectors[text] for text in texts if text in self._vectors}

    def put(self, vectors: dict[str, np.ndarray]) -> None:
        with self._lock:
            # A long-lived server sees endless distinct questions: bound the cache rather than let it grow.
            if len(self._vectors) + len(vectors) > self.max_texts:
                self._vectors.clear()
            self._vectors.update(vectors)


def _unit(embedding: Any) -> np.ndarray:
    vector = np.asarray(embedding, dtype=np.float32)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


@component
class RepeatRequest:
    """
    The guard's first step: the text check (same words after normalisation, in any order), and what the
    embedding check still needs.

    Usage example:
    ```python
    RepeatRequest().run(candidate="Jaws directed who?", asked=["Who directed Jaws?"])["decided"]["repeated"]  # True
    ```
    """

    step_kind = CHECK_KIND

    def __init__(self, cache: EmbeddingCache | None = None) -> None:
        """
        :param cache: Embeddings already computed; None when the guard checks normalised text only.
        """
        self.cache = cache

    @component.output_types(decided=dict[str, Any] | None, documents=list[Document], known=list[Document])
    def run(self, candidate: str | None, asked: list[str]) -> dict[str, Any]:
        """
        :param candidate: The planned sub-question; None when the plan was unusable.
        :param asked: Queries already retrieved for.
        :returns: `decided`: the check's result when the text settles it (or no embedding can), else None;
            otherwise `documents`: one per text still to embed (absent when there is none, so no embedder runs),
            and `known`: the cached embeddings of the others.
        """
        if candidate is None:
            return {"decided": None, "known": []}
        normalized = normalize_question(candidate)
        words = sorted(normalized.split())
        for previous in asked:
            previous_normalized = normalize_question(previous)
            if normalized == previous_normalized or words == sorted(previous_normalized.split()):
                return {
                    "decided": {"repeated": True, "matched": previous, "similarity": 1.0, "method": "text"},
                    "known": [],
                }
        if self.cache is None or not asked:
            return {"decided": _not_repeated(), "known": []}
        texts = list(dict.fromkeys([candidate, *asked]))
        cached = self.cache.get(texts)
        out: dict[str, Any] = {
            "decided": None,
            "known": [Document(content=text, embedding=vector.tolist()) for text, vector in cached.items()],
        }
        missing = [Document(content=text) for text in texts if text not in cached]
        if missing:
            out["documents"] = missing
        return out

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RepeatRequest:
        return default_from_dict(cls, data)


@component
class RepeatVerdict:
    """
    The guard's last step: the cosine similarity of the candidate to each asked question, and the verdict.

    Usage example:
    ```python
    out = RepeatVerdict(0.92).run(candidate="A?", asked=["B?"], decided=None, known=[],
                                  embedded=[Document(content="A?", embedding=[1, 0]),
                                            Document(content="B?", embedding=[0, 1])])
    out["repeated"], out["similarity"]   # False, 0.0
    ```
    """

    step_kind = CHECK_KIND

    def __init__(self, similarity_threshold: float, cache: EmbeddingCache | None = None) -> None:
        """
        :param similarity_threshold: Cosine similarity from which two questions count as the same.
        :param cache: Where new embeddings are kept for later checks.
        """
        self.similarity_threshold = similarity_threshold
        self.cache = cache

    @component.output_types(
        repeated=bool,
        matched=str | None,
        similarity=float | None,
        method=str | None,
        candidate=str | None,
        accepted=bool,
        repeat_check=dict[str, Any] | None,
    )
    def run(
        self,
        candidate: str | None,
        asked: list[str],
        decided: dict[str, Any] | None,
        known: list[Document],
        embedded: list[Document] | None = None,
    ) -> dict[str, Any]:
        """
        :param candidate: The planned sub-question; None when the plan was unusable.
        :param asked: Queries already retrieved for.
        :param decided: The request's result when the text settled it.
        :param known: Cached embeddings, as documents.
        :param embedded: The texts the request asked for, embedded.
        :returns: `repeated`; the `matched` asked question and the `method` ("text" or "embedding") when
            repeated, else None; `similarity`: the highest one computed (1.0 for a text match, None if none);
            `candidate` as given, whether it is `accepted` (usable and not a repeat), and the check as one
            `repeat_check` dict (None without a candidate).
        """
        if candidate is None:
            return {**_not_repeated(), "candidate": None, "accepted": False, "repeat_check": None}
        check = decided if decided is not None else self._compare(candidate, asked, known, embedded or [])
        return {**check, "candidate": candidate, "accepted": not check["repeated"], "repeat_check": dict(check)}

    def _compare(
        self, candidate: str, asked: list[str], known: list[Document], embedded: list[Document]
    ) -> dict[str, Any]:
        new = {doc.content or "": _unit(doc.embedding) for doc in embedded}
        if self.cache is not None and new:
            self.cache.put(new)
        vectors = {doc.content or "": np.asarray(doc.embedding, dtype=np.float32) for doc in known} | new
        vector = vectors[candidate]
        best, best_similarity = None, -1.0
        for previous in asked:
            similarity = float(np.dot(vector, vectors[previous]))
            if similarity > best_similarity:
                best, best_similarity = previous, similarity
        if best_similarity >= self.similarity_threshold:
            return {"repeated": True, "matched": best, "similarity": best_similarity, "method": "embedding"}
        return _not_repeated(best_similarity)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, similarity_threshold=self.similarity_threshold)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RepeatVerdict:
        return default_from_dict(cls, data)


@component
class SubQuestionGuard(SuperComponent):
    """
    Says whether a candidate sub-question repeats an asked one.

    A repeat is either the same text after normalisation (case, punctuation, articles, word order) or, with a
    document embedder, a cosine similarity at or above `similarity_threshold` (paraphrases such as "Who is X's
    father?" / "Who was the father of X?"). Each text is embedded alone, as a document of its own, by the graph's
    `repeat_embedder` step; embeddings are cached per text for the guard's lifetime.

    Usage example:
    ```python
    guard = SubQuestionGuard(document_embedder=build_document_embedder(settings))
    guard.warm_up()
    guard.run(candidate="Who is the father of X?", asked=["Who was X's father?"])["repeated"]
    ```
    """

    step_kind = CHECK_KIND

    def __init__(self, document_embedder: Any | None = None, similarity_threshold: float = 0.92) -> None:
        """
        :param document_embedder: A Haystack document embedder (`run(documents) -> {"documents": [...]}` with
            `embedding` set), the deployment's; None checks normalised text only.
        :param similarity_threshold: Cosine similarity from which two questions count as the same, in (0, 1].
        """
        if not 0.0 < similarity_threshold <= 1.0:
            raise ValueError("similarity_threshold must be in (0, 1]")
        self.document_embedder = document_embedder
        self.similarity_threshold = similarity_threshold
        cache = EmbeddingCache() if document_embedder is not None else None
        pipeline = Pipeline()
        pipeline.add_component("repeat_request", RepeatRequest(cache))
        pipeline.add_component("repeat_verdict", RepeatVerdict(similarity_threshold, cache))
        pipeline.connect("repeat_request.decided", "repeat_verdict.decided")
        pipeline.connect("repeat_request.known", "repeat_verdict.known")
        self.step_kinds = {"repeat_request": CHECK_KIND, "repeat_verdict": CHECK_KIND}
        if document_embedder is not None:
            pipeline.add_component("repeat_embedder", document_embedder)
            pipeline.connect("repeat_request.documents", "repeat_embedder.documents")
            pipeline.connect("repeat_embedder.documents", "repeat_verdict.embedded")
            self.step_kinds["repeat_embedder"] = "embedding"
        outputs = ("repeated", "matched", "similarity", "method", "candidate", "accepted", "repeat_check")
        SuperComponent.__init__(
            self,
            pipeline,
            input_mapping={
                "candidate": ["repeat_request.candidate", "repeat_verdict.candidate"],
                "asked": ["repeat_request.asked", "repeat_verdict.asked"],
            },
            output_mapping={f"repeat_verdict.{name}": name for name in outputs},
        )

    def to_dict(self) -> dict[str, Any]:
        embedder = (
            None if self.document_embedder is None else component_to_dict(self.document_embedder, "document_embedder")
        )
        return default_to_dict(self, document_embedder=embedder, similarity_threshold=self.similarity_threshold)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubQuestionGuard:
        params = data["init_parameters"]
        legacy = params.pop("text_embedder", None)
        if legacy is not None and params.get("document_embedder") is None:
            params["document_embedder"] = _as_document_embedder(legacy)
        if params.get("document_embedder") is not None:
            deserialize_component_inplace(params, key="document_embedder")
        return default_from_dict(cls, data)


_ST = "haystack_integrations.components.embedders.sentence_transformers."
# The query embedder types a guard named before its embeddings were a step (`text_embedder`), and the document
# embedder of the same model and settings each stands for (its init parameters are a subset of the latter's).
_DOCUMENT_EMBEDDER_OF = {
    "docqa.embedding.OnnxTextEmbedder": "docqa.embedding.OnnxDocumentEmbedder",
    f"{_ST}sentence_transformers_text_embedder.SentenceTransformersTextEmbedder": (
        f"{_ST}sentence_transformers_document_embedder.SentenceTransformersDocumentEmbedder"
    ),
}


def _as_document_embedder(text_embedder: dict[str, Any]) -> dict[str, Any]:
    """A file exported before the guard embedded with a document embedder: the same model as a document embedder."""
    kind = text_embedder.get("type")
    if kind not in _DOCUMENT_EMBEDDER_OF:
        raise ValueError(f"SubQuestionGuard: text_embedder of type {kind!r} has no document embedder counterpart")
    return {**text_embedder, "type": _DOCUMENT_EMBEDDER_OF[kind]}
