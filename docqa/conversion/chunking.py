"""Cleaning and word-window chunking with deterministic chunk ids and access-control metadata.

A chunk id is `sha256(tenant, source id, chunk index)`, so re-ingesting a source overwrites its chunks in place
instead of duplicating them. Every chunk carries the metadata retrieval filters on (`tenant`, `access`) and
what re-ingestion compares (`source_id`, `content_hash` of the whole cleaned source text).

A converted file's sections (pages, slides, sheets, mail parts) are chunked one by one (`build_section_chunks`), so
no chunk spans two places and each carries its place (`page`, `slide`, `sheet` with `row_start`/`row_end`,
`attachment`, and the readable `location`) and `ocr` when its text was recognised from a scan. A table is chunked by
rows, its header repeated at the top of every chunk, so a value is never separated from its column's name.

Usage:
    chunks = build_chunks(text, ChunkSpec(source_id="handbook.pdf", source="/docs/handbook.pdf",
                          title="Handbook", tenant="acme", access=["group:hr"]), chunk_words=200, overlap_words=30)
    chunks = build_section_chunks(converted.sections, spec, chunk_words=200, overlap_words=30)
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
from docqa.conversion.sections import Section, Table, location_label, location_meta

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
    return build_section_chunks([Section(text)], spec, chunk_words=chunk_words, overlap_words=overlap_words,
                                ingested_at=ingested_at)


def build_section_chunks(
    sections: Sequence[Section], spec: ChunkSpec, *, chunk_words: int, overlap_words: int,
    ingested_at: str | None = None,
) -> list[Document]:
    """Chunk Documents of one source's sections, in order, each section on its own; raises `ValueError` without
    access metadata or text."""
    pieces: list[tuple[str, dict[str, Any]]] = []
    for section in sections:
        place = location_meta(section.location)
        if section.ocr:
            place["ocr"] = True
        if section.table is not None:
            for first, last, content in table_windows(section.table, chunk_words):
                pieces.append((content, {**place, "row_start": first, "row_end": last}))
        else:
            pieces += [(window, place) for window in split_words(clean_text(section.text), chunk_words,
                                                                 overlap_words)]
    if not pieces:
        raise ValueError("no text left after cleaning")
    for _, meta in pieces:
        label = location_label(meta)
        if label:
            meta["location"] = label
    base_meta: dict[str, Any] = {
        **spec.extra_meta,
        "source": spec.source,
        "source_id": spec.source_id,
        "title": spec.title,
        "tenant": spec.tenant,
        "access": sorted(set(spec.access)),
        "content_hash": content_hash(_hashed_text(sections, pieces)),
        "ingested_at": ingested_at or datetime.now(UTC).isoformat(timespec="seconds"),
    }
    validate_access_meta(base_meta)
    return [
        Document(
            id=chunk_id(spec.tenant, spec.source_id, index),
            content=content,
            meta={**base_meta, **meta, "chunk_index": index},
        )
        for index, (content, meta) in enumerate(pieces)
    ]


def _hashed_text(sections: Sequence[Section], pieces: Sequence[tuple[str, dict[str, Any]]]) -> str:
    # A file without places hashes as its cleaned text always did (an unchanged one is not re-embedded); with
    # places, they count: the same words moved to another page or row are a changed document.
    if len(sections) == 1 and not pieces[0][1]:
        return clean_text(sections[0].text)
    return _SEPARATOR.join(f"{meta.get('location', '')}{_SEPARATOR}{content}" for content, meta in pieces)


# A table chunk holds `chunk_words` x this many characters: numbers and pipes cost an embedding model more tokens
# per character than prose does, and at 200 words this is about what MiniLM's 256 tokens hold.
TABLE_CHARS_PER_WORD = 3


def table_windows(table: Table, chunk_words: int) -> list[tuple[int, int, str]]:
    """(first row, last row, Markdown) per chunk of a table: the sheet's name and header, then as many rows as fit
    in `chunk_words * TABLE_CHARS_PER_WORD` characters (at least one)."""
    head = f"Sheet: {table.sheet}\n{table.header_lines()}" if table.sheet else table.header_lines()
    budget = max(chunk_words * TABLE_CHARS_PER_WORD - len(head), 1)
    windows: list[tuple[int, int, str]] = []
    lines: list[str] = []
    first = last = 0
    used = 0
    for number, cells in table.rows:
        line = table.row_line(cells)
        if lines and used + len(line) + 1 > budget:
            windows.append((first, last, "\n".join([head, *lines])))
            lines, used = [], 0
        if not lines:
            first = number
        lines.append(line)
        last = number
        used += len(line) + 1
    if lines:
        windows.append((first, last, "\n".join([head, *lines])))
    return windows
