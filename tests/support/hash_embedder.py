"""A deterministic bag-of-words embedder for unit tests: no model download, no torch (tests only).

Usage:
    embedder = HashTextEmbedder(); embedder.run(text="glucose result")["embedding"]   # 64 floats
    HashDocumentEmbedder().run(documents=docs)["documents"]                          # copies with .embedding
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from typing import Any

import numpy as np
from haystack import Document, component

DIMENSIONS = 64


def hash_vector(text: str) -> list[float]:
    vector = np.zeros(DIMENSIONS, dtype=np.float32)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        vector[zlib.crc32(word.encode()) % DIMENSIONS] += 1.0
    norm = float(np.linalg.norm(vector)) or 1.0
    return (vector / norm).tolist()


@component
class HashTextEmbedder:
    def __init__(self) -> None:
        self.calls = 0

    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, Any]:
        self.calls += 1
        return {"embedding": hash_vector(text)}


@component
class HashDocumentEmbedder:
    @component.output_types(documents=list[Document])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        return {"documents": [dataclasses.replace(d, embedding=hash_vector(d.content or "")) for d in documents]}
