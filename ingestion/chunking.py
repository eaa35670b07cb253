"""Cleaning and word-window chunking with deterministic chunk ids and access-control metadata.

A chunk id is `sha256(tenant, source id, chunk index)`, so re-ingesting a source overwrites its chunks in place
instead of duplicating them. Every chunk carries the metadata retrieval filters on (`tenant`, `access`) and
what re-ingestion compares (`source_id`, `content_hash` of the whole cleaned source text).

Usage:
    chunks = build_chunks(text, ChunkSpec(source_id="handbook.pdf", source="/docs/handbook.pdf",
                          title="Handbook", tenant="acme", access=["group:hr"]), chunk_words=200, overlap_words=30)
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from haystack import Document

from docqa.access import validate_access_meta

_SEPARATOR = "\x1f"  # cannot occur in a tenant or source id typed by a person, so the id parts never blur
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SPACES = re.compile(r"[ \t\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n+")


@dataclass(frozen=True)
class ChunkSpec:
    """Where chunks come from and who may read them; `extra_meta` is copied onto every chunk."""

    source_id: str
    source: str
    title: str
    tenant: str
    access: Sequence[str]
    extra_meta: dict[str, Any] = field(default_factory=dict)


def clean_text(text: str) -> str:
    """Normalize Unicode, drop control characters, collapse runs of spaces and blank lines."""
    text = unicodedata.normalize("NFC", text).replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub(" ", text)
    text = _SPACES.sub(" ", text)
    lines = "\n".join(line.strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", lines).strip()


def split_words(text: str, chunk_words: int, overlap_words: int) -> list[str]:
    """Windows of `chunk_words` words, each starting `chunk_words - overlap_words` after the previous one."""
    if chunk_words < 1:
        raise ValueError("chunk_words must be at least 1")
    if not 0 <= overlap_words < chunk_words:
        raise ValueError("overlap_words must be at least 0 and smaller than chunk_words")
    words = text.split()
    if not words:
        return []
    step = chunk_words - overlap_words
    windows = []
    for start in range(0, len(words), step):
        windows.append(" ".join(words[start : start + chunk_words]))
        if start + chunk_words >= len(words):
            break
    return windows


def chunk_id(tenant: str, source_id: str, index: int) -> str:
    return hashlib.sha256(_SEPARATOR.join((tenant, source_id, str(index))).encode("utf-8")).hexdigest()


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build_chunks(
    text: str, spec: ChunkSpec, *, chunk_words: int, overlap_words: int, ingested_at: str | None = None
) -> list[Document]:
    """Clean and split one source into chunk Documents; raises `ValueError` without access metadata or text."""
    cleaned = clean_text(text)
    windows = split_words(cleaned, chunk_words, overlap_words)
    if not windows:
        raise ValueError("no text left after cleaning")
    base_meta: dict[str, Any] = {
        **spec.extra_meta,
        "source": spec.source,
        "source_id": spec.source_id,
        "title": spec.title,
        "tenant": spec.tenant,
        "access": sorted(set(spec.access)),
        "content_hash": content_hash(cleaned),
        "ingested_at": ingested_at or datetime.now(UTC).isoformat(timespec="seconds"),
    }
    validate_access_meta(base_meta)
    return [
        Document(
            id=chunk_id(spec.tenant, spec.source_id, index),
            content=window,
            meta={**base_meta, "chunk_index": index},
        )
        for index, window in enumerate(windows)
    ]
