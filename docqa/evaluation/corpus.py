"""Passages an evaluation dataset comes with (`docqa eval --corpus FILE`), written into the store once.

FlashRAG's corpus layout, one object a line: `id` and `contents` ("title\\ntext"), or `id`, `text` and an
optional `title`, which is put first the same way. The ids are kept, so a dataset's `supporting` ids score
supporting-passage recall. Passages already stored under their id are not embedded again.
HotpotQA (`{title: [sentences]}`, or a question file's `context`), MuSiQue (a list of `{title, text}`, or a
question file's `paragraphs`) and ODSum stories (`divided_document`, cut into pieces) are read in their own
layouts (see `formats`), with the ids their questions' supporting ids name. Patient records (a FHIR bundle, a
Synthea CSV export folder, or a folder holding them) are parsed as `docqa records` stores them, one document per
record; record questions name their gold records from the same files (see `records`).

Usage:
    written = ensure_corpus(runtime, Path("corpus.jsonl"), tenant="acme", access=["group:eval"])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from haystack import Document

from docqa.access import EVERYONE
from docqa.errors import DocqaError
from docqa.evaluation.datasets import read_jsonl
from docqa.evaluation.formats import detect_corpus_format, detect_format, passages_of

BATCH = 256


def read_corpus(path: Path, *, tenant: str, access: Sequence[str] = (EVERYONE,)) -> list[Document]:
    """The passages of a corpus file, each once, as Documents readable by `access` in `tenant`."""
    if path.is_dir() or _is_fhir_bundle(path):
        from docqa.evaluation.records import parse_records, record_sources

        if not record_sources(path):
            raise DocqaError(f"{path}: no FHIR bundles (.json) or Synthea CSV export (patients.csv) in it")
        return list({d.id: d for d in parse_records(path, tenant=tenant, access=access)}.values())
    if not path.is_file():
        raise DocqaError(f"no such corpus file: {path}")
    layout, raw = _layout_of(path)
    if layout is not None:
        documents = {}
        for passage in passages_of(layout, raw, str(path)):
            documents.setdefault(passage.id, Document(id=passage.id, content=f"{passage.title}\n{passage.text}", meta={
                "title": passage.title, "source": f"{layout}:{passage.title}", "dataset": layout,
                "tenant": tenant, "access": list(access)}))
        return list(documents.values())
    return _read_flashrag(path, tenant=tenant, access=access)


def _is_fhir_bundle(path: Path) -> bool:
    # Read only the start: a bundle says so in its first keys, and a corpus file can be large.
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    with path.open(encoding="utf-8") as handle:
        head = handle.read(4096)
    return '"resourceType"' in head and '"Bundle"' in head


def _layout_of(path: Path) -> tuple[str | None, Any]:
    # A .json corpus is parsed whole (HotpotQA's title map, MuSiQue's list); JSONL is told by its first line.
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DocqaError(f"{path}: not JSON ({exc.msg})") from exc
        layout = detect_corpus_format(raw)
        if layout is None:
            raise DocqaError(f"{path}: not a HotpotQA, MuSiQue or ODSum corpus (FlashRAG corpora are .jsonl)")
        return layout, raw
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        first = json.loads(lines[0]) if lines else None
    except json.JSONDecodeError:
        return None, None  # reported with its line number by the FlashRAG reader
    layout = detect_format(first)
    if layout is None:
        return None, None
    try:
        return layout, [json.loads(line) for line in lines]
    except json.JSONDecodeError as exc:
        raise DocqaError(f"{path}: not JSON lines ({exc.msg})") from exc


def _read_flashrag(path: Path, *, tenant: str, access: Sequence[str]) -> list[Document]:
    documents: dict[str, Document] = {}
    for where, raw in read_jsonl(path):
        text = raw.get("contents") or raw.get("text") if isinstance(raw, dict) else None
        if not isinstance(text, str) or not text.strip() or raw.get("id") in (None, ""):
            raise DocqaError(f"{where}: expected an object with `id` and `contents` (or `text`)")
        title = raw.get("title")
        # FlashRAG's `contents` already start with the title; a separate `text` gets it put first.
        content = f"{title}\n{text}" if isinstance(title, str) and title and "contents" not in raw else text
        doc_id = str(raw["id"])
        documents.setdefault(doc_id, Document(id=doc_id, content=content, meta={
            "title": title or "", "source": f"{path.name}:{doc_id}", "tenant": tenant, "access": list(access)}))
    return list(documents.values())


def ensure_corpus(runtime: Any, path: Path, *, tenant: str, access: Sequence[str] = (EVERYONE,)) -> int:
    """Embed and write the corpus passages not yet stored; returns how many were written."""
    return write_missing(runtime, read_corpus(path, tenant=tenant, access=access))


def write_missing(runtime: Any, corpus: list[Document]) -> int:
    """Embed and write the documents whose ids the store does not hold yet; returns how many were written."""
    from haystack.document_stores.types import DuplicatePolicy

    store = runtime.document_store
    ids = [d.id for d in corpus]
    present = {d.id for d in store.filter_documents({"field": "id", "operator": "in", "value": ids})} if ids else set()
    missing = [d for d in corpus if d.id not in present]
    if missing:
        embedder = runtime.document_embedder()
        if hasattr(embedder, "warm_up"):
            embedder.warm_up()
        for start in range(0, len(missing), BATCH):
            batch = embedder.run(documents=missing[start:start + BATCH])["documents"]
            store.write_documents(batch, policy=DuplicatePolicy.SKIP)
    return len(missing)
