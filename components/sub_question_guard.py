"""Refuses a planned sub-question that repeats one already asked, by normalised text or embedding similarity."""

from __future__ import annotations

import re
import string
import threading
from typing import Any

import numpy as np
from haystack import component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_component_inplace

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_MAX_CACHED = 4096


def normalize_question(text: str) -> str:
    """Lower case, no punctuation or articles, single spaces (HotpotQA/SQuAD answer normalisation)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


@component
class SubQuestionGuard:
    """
    Says whether a candidate sub-question repeats an asked one.

    A repeat is either the same text after normalisation (case, punctuation, articles, word order) or, with a
    text embedder, a cosine similarity at or above `similarity_threshold` (paraphrases such as "Who is X's
    father?" / "Who was the father of X?"). Embeddings are cached per text for the guard's lifetime.

    Usage example:
    ```python
    guard = SubQuestionGuard(text_embedder=SentenceTransformersTextEmbedder(model=...))
    guard.warm_up()
    guard.run(candidate="Who is the father of X?", asked=["Who was X's father?"])["repeated"]
    ```
    """

    def __init__(self, text_embedder: Any | None = None, similarity_threshold: float = 0.92) -> None:
        """
        :param text_embedder: A Haystack text embedder (`run(text=...) -> {"embedding": [...]}`); None checks
            normalised text only.
        :param similarity_threshold: Cosine similarity from which two questions count as the same, in (0, 1].
        """
        if not 0.0 < similarity_threshold <= 1.0:
            raise ValueError("similarity_threshold must be in (0, 1]")
        self.text_embedder = text_embedder
        self.similarity_threshold = similarity_threshold
        self._embeddings: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def warm_up(self) -> None:
        if self.text_embedder is not None and hasattr(self.text_embedder, "warm_up"):
            self.text_embedder.warm_up()

    @component.output_types(repeated=bool, matched=str | None, similarity=float | None, method=str | None)
    def run(self, candidate: str, asked: list[str]) -> dict[str, Any]:
        """
        :param candidate: The planned sub-question.
        :param asked: Queries already retrieved for.
        :returns: `repeated`; the `matched` asked question and the `method` ("text" or "embedding") when
            repeated, else None; `similarity`: the highest one computed (1.0 for a text match, None if none).
        """
        return self.check(candidate, asked)

    def check(self, candidate: str, asked: list[str]) -> dict[str, Any]:
        """What `run` returns, for a component that checks its own candidates (ReSP's plan parser)."""
        normalized = normalize_question(candidate)
        words = sorted(normalized.split())
        for previous in asked:
            previous_normalized = normalize_question(previous)
            if normalized == previous_normalized or words == sorted(previous_normalized.split()):
                return {"repeated": True, "matched": previous, "similarity": 1.0, "method": "text"}
        if self.text_embedder is None or not asked:
            return {"repeated": False, "matched": None, "similarity": None, "method": None}
        vector = self._embed(candidate)
        best, best_similarity = None, -1.0
        for previous in asked:
            similarity = float(np.dot(vector, self._embed(previous)))
            if similarity > best_similarity:
                best, best_similarity = previous, similarity
        if best_similarity >= self.similarity_threshold:
            return {"repeated": True, "matched": best, "similarity": best_similarity, "method": "embedding"}
        return {"repeated": False, "matched": None, "similarity": best_similarity, "method": None}

    def _embed(self, text: str) -> np.ndarray:
        with self._lock:
            cached = self._embeddings.get(text)
        if cached is not None:
            return cached
        vector = np.asarray(self.text_embedder.run(text=text)["embedding"], dtype=np.float32)
        norm = float(np.linalg.norm(vector))
        unit = vector / norm if norm > 0 else vector
        with self._lock:
            # A long-lived server sees endless distinct questions: bound the cache rather than let it grow.
            if len(self._embeddings) >= _MAX_CACHED:
                self._embeddings.clear()
            self._embeddings[text] = unit
        return unit

    def to_dict(self) -> dict[str, Any]:
        embedder = None if self.text_embedder is None else component_to_dict(self.text_embedder, "text_embedder")
        return default_to_dict(self, text_embedder=embedder, similarity_threshold=self.similarity_threshold)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubQuestionGuard:
        if data["init_parameters"].get("text_embedder") is not None:
            deserialize_component_inplace(data["init_parameters"], key="text_embedder")
        return default_from_dict(cls, data)
