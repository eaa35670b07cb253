"""Ingestion job and item state in the SQL database, with explicit state transitions.

An item moves `queued -> running -> written | skipped | failed`; a worker that dies mid-item leaves it
`running`, and the redelivered task moves it `running -> running` again (counted in `attempts`; `crashes` counts
those whose pool process died while the worker's main process ran on, see `docqa.ingestion.processing`). An item whose
file cannot be stored at submit time starts `failed`. A job's own status follows from its items.
Uploaded bytes live in `ingest_payloads` (one row per item, deleted once the item is finished), so workers
on any machine that reaches the database can read them.
`dispatched_at` (last message sent for the item) and `heartbeat_at` (last beat of the worker running it) are what
the stale-item sweep (`docqa.ingestion.sweep`) reads; `ingest_job_events` is a job's history (submitted, resumed,
re-dispatched).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, LargeBinary, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from docqa.access import DEFAULT_COLLECTION
from docqa.db import Base

ITEM_QUEUED = "queued"
ITEM_RUNNING = "running"
ITEM_WRITTEN = "written"
ITEM_SKIPPED = "skipped"
ITEM_FAILED = "failed"
ITEM_FINAL = frozenset({ITEM_WRITTEN, ITEM_SKIPPED, ITEM_FAILED})
ITEM_TRANSITIONS: dict[str, frozenset[str]] = {
    ITEM_QUEUED: frozenset({ITEM_RUNNING, ITEM_FAILED}),
    # running -> running: a redelivered task takes over the item of a worker that died.
    ITEM_RUNNING: frozenset({ITEM_RUNNING, ITEM_WRITTEN, ITEM_SKIPPED, ITEM_FAILED}),
    ITEM_WRITTEN: frozenset(),
    ITEM_SKIPPED: frozenset(),
    ITEM_FAILED: frozenset(),
}

# What a job's history records.
EVENT_SUBMITTED = "submitted"
EVENT_RESUMED = "resumed"
EVENT_REDISPATCHED = "redispatched"

JOB_QUEUED = "queued"
JOB_RUNNING = "running"
JOB_SUCCEEDED = "succeeded"
JOB_COMPLETED_WITH_ERRORS = "completed_with_errors"
JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    JOB_QUEUED: frozenset({JOB_RUNNING, JOB_SUCCEEDED, JOB_COMPLETED_WITH_ERRORS}),
    JOB_RUNNING: frozenset({JOB_SUCCEEDED, JOB_COMPLETED_WITH_ERRORS}),
    JOB_SUCCEEDED: frozenset(),
    JOB_COMPLETED_WITH_ERRORS: frozenset(),
}


class InvalidTransitionError(RuntimeError):
    """A state change the state machine does not allow: a bug or a race lost, never silently applied."""


def _now() -> datetime:
    return datetime.now(UTC)


class IngestJob(Base):
    __tablename__ = "ingest_jobs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    access: Mapped[list[str]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(32), default=JOB_QUEUED)
    submitted_by: Mapped[str | None] = mapped_column(String(128))
    # The collection every chunk of the job is written to (a source mspr can search on its own).
    collection: Mapped[str] = mapped_column(String(64), default=DEFAULT_COLLECTION, server_default=DEFAULT_COLLECTION)
    # The synced source the job came from (`docqa.sources`), copied onto every chunk as `source_name`.
    source_name: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    items: Mapped[list[IngestItem]] = relationship(back_populates="job", order_by="IngestItem.position")

    def move_to(self, status: str) -> None:
        if status == self.status:
            return
        if status not in JOB_TRANSITIONS[self.status]:
            raise InvalidTransitionError(f"job {self.id}: {self.status} -> {status} is not allowed")
        self.status = status
        if status == JOB_RUNNING:
            self.started_at = _now()
        else:
            self.finished_at = _now()


class IngestItem(Base):
    __tablename__ = "ingest_items"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("ingest_jobs.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    source_id: Mapped[str] = mapped_column(Text)
    name: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default=ITEM_QUEUED, index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    crashes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    chunks: Mapped[int] = mapped_column(Integer, default=0)
    code: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str | None] = mapped_column(Text)
    worker: Mapped[str | None] = mapped_column(String(255))
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), default=_now)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, onupdate=_now)

    job: Mapped[IngestJob] = relationship(back_populates="items")

    def move_to(self, status: str, **fields: Any) -> None:
        if status not in ITEM_TRANSITIONS[self.status]:
            raise InvalidTransitionError(f"item {self.id}: {self.status} -> {status} is not allowed")
        self.status = status
        for key, value in fields.items():
            setattr(self, key, value)

    @property
    def finished(self) -> bool:
        return self.status in ITEM_FINAL


class IngestJobEvent(Base):
    """One entry of a job's history: `event` names what happened, `detail` holds its items and reason."""

    __tablename__ = "ingest_job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("ingest_jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    event: Mapped[str] = mapped_column(String(32))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class IngestPayload(Base):
    """The bytes of one submitted file, kept until its item is finished."""

    __tablename__ = "ingest_payloads"

    item_id: Mapped[int] = mapped_column(ForeignKey("ingest_items.id", ondelete="CASCADE"), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)
