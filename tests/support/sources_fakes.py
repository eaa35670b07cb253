"""Sources test helpers: a runtime over one in-memory store and one counting hash embedder (tests only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from haystack.document_stores.in_memory import InMemoryDocumentStore
from sqlalchemy import select

from docqa.audit.models import AuditEvent
from docqa.db import session_factory
from docqa.runtime import Runtime
from docqa.settings import Settings
from tests.support.ingestion_fakes import CountingEmbedder


class SharedRuntime(Runtime):
    """Every instance shares the class's store and embedder, so a test sees what each sync wrote and embedded."""

    store: Any = None
    embedder: Any = None

    @classmethod
    def reset(cls) -> None:
        cls.store = InMemoryDocumentStore()
        cls.embedder = CountingEmbedder()

    def document_embedder(self) -> Any:
        return SharedRuntime.embedder

    @property
    def document_store(self) -> Any:
        return SharedRuntime.store


def sources_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    """Settings of a sources test, also in the environment (the CLI reads them there): a fresh `SharedRuntime`
    for every runtime docqa builds, small chunks, and `env` (`DOCQA_...` names) on top."""
    SharedRuntime.reset()
    monkeypatch.setattr("docqa.runtime.Runtime", SharedRuntime)
    for name, value in {"DOCQA_DATA_DIR": str(tmp_path / "data"), "DOCQA_CHUNK_WORDS": "20",
                        "DOCQA_CHUNK_OVERLAP_WORDS": "5", **env}.items():
        monkeypatch.setenv(name, value)
    return Settings()


def stored_by_document(tenant: str = "default") -> dict[str, list[Any]]:
    """Stored chunks grouped by their document (`source_id`)."""
    grouped: dict[str, list[Any]] = {}
    for doc in SharedRuntime.store.filter_documents(
            filters={"field": "meta.tenant", "operator": "==", "value": tenant}):
        grouped.setdefault(doc.meta["source_id"], []).append(doc)
    return grouped


def audit_events(settings: Settings, action: str) -> list[AuditEvent]:
    with session_factory(settings)() as session:
        return list(session.scalars(select(AuditEvent).where(AuditEvent.action == action)
                                    .order_by(AuditEvent.seq)).all())
