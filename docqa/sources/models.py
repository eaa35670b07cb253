"""Source definitions and their sync state in the SQL database (tables `sources` and `source_entries`).

A `SyncSource` row is one source as configured (`docqa sources add`): its type, its type's settings (`config`,
never a secret: credentials are named environment variables), who may read its documents, its schedule, the
outcome of its last run and the lease of the sync running it (`lock_owner`, `lock_until`).

A `SourceEntry` row is one item of the source as docqa last stored it: `key` within the source, the document's
`document_id` (its `source_id` in the store), the `fingerprint` that says whether it changed (content hash, Git
blob id, ETag, message UID), a cheap `quick` check (mtime and size) and the `access` list it was stored with.
While its new version is on the ingestion queue the entry holds `pending_*` (the job item, fingerprint and
access) and takes them over only once the item is written, so an interrupted sync loses nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from docqa.db import Base

RUN_NEVER = "never"
RUN_RUNNING = "running"
RUN_SUCCEEDED = "succeeded"
RUN_COMPLETED_WITH_ERRORS = "completed_with_errors"
RUN_FAILED = "failed"

ENTRY_SYNCED = "synced"
ENTRY_FAILED = "failed"


def _now() -> datetime:
    return datetime.now(UTC)


class SyncSource(Base):
    __tablename__ = "sources"
    __table_args__ = (UniqueConstraint("tenant", "name", name="uq_sources_tenant_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str] = mapped_column(String(64))
    type: Mapped[str] = mapped_column(String(16))
    config: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    allow: Mapped[list[str]] = mapped_column(JSON, default=list)
    acl_map: Mapped[str | None] = mapped_column(Text)
    collection: Mapped[str] = mapped_column(String(64))
    every_s: Mapped[int | None] = mapped_column(Integer)
    created_by: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    last_status: Mapped[str] = mapped_column(String(32), default=RUN_NEVER)
    last_started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_counts: Mapped[dict[str, int]] = mapped_column(JSON, default=dict)
    last_error: Mapped[str | None] = mapped_column(Text)
    next_run_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    lock_owner: Mapped[str | None] = mapped_column(String(255))
    lock_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class SourceEntry(Base):
    __tablename__ = "source_entries"
    __table_args__ = (UniqueConstraint("source_pk", "key", name="uq_source_entries_source_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    source_pk: Mapped[int] = mapped_column(ForeignKey("sources.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(Text)
    document_id: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str | None] = mapped_column(String(128))
    quick: Mapped[str | None] = mapped_column(String(128))
    access: Mapped[list[str] | None] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=ENTRY_SYNCED)
    reason: Mapped[str | None] = mapped_column(Text)
    pending_item: Mapped[int | None] = mapped_column(Integer)
    pending_fingerprint: Mapped[str | None] = mapped_column(String(128))
    pending_quick: Mapped[str | None] = mapped_column(String(128))
    pending_access: Mapped[list[str] | None] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, onupdate=_now)
