"""Sources test helpers: a runtime over one in-memory store and one counting hash embedder (tests only)."""

from __future__ import annotations

from typing import Any

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
