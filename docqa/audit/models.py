"""SQL models of the audit trail: traces, their ordered steps, and retention anchors. All rows are append-only.

Each trace is one link of a hash chain: `seq` numbers links from 1 without gaps, `prev_mac` is the previous
link's `mac`, and `mac` is an HMAC over the link's canonical serialisation (see `chain.py`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from docqa.db import Base

STATUS_COMPLETED = "completed"
STATUS_FAILED = "failed"
# What the caller got when the run did not finish for them: a 504, or they went away (or the server stopped).
STATUS_TIMED_OUT = "timed_out"
STATUS_CANCELLED = "cancelled"
# Its process ended (SIGKILL, OOM kill, power loss) before the run settled: written at a later start.
STATUS_INTERRUPTED = "interrupted"


class AuditTrace(Base):
    """One question: who asked, where, what was answered and how (its steps), and its chain link."""

    __tablename__ = "audit_traces"
    __table_args__ = (Index("ix_audit_traces_tenant_seq", "tenant", "tenant_seq", unique=True),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, unique=True, index=True)
    # The trace's number among its tenant's traces (1, 2, ...): what the tenant's auditors see instead of `seq`,
    # whose gaps would count other tenants' links. Not part of the MAC: it is derived from the chain order.
    # Every appended link gets one (`tenant_numbering`); NULL only in a row written behind docqa's back.
    tenant_seq: Mapped[int | None] = mapped_column(BigInteger)
    asked_by: Mapped[str] = mapped_column(String(255))
    tenant: Mapped[str] = mapped_column(String(255), index=True)
    asked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    question: Mapped[str] = mapped_column(Text)
    pipeline: Mapped[str] = mapped_column(String(128))
    config_hash: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    models: Mapped[dict[str, Any]] = mapped_column(JSON)
    answer: Mapped[str | None] = mapped_column(Text)
    citations: Mapped[list[Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    stop_reason: Mapped[str | None] = mapped_column(String(128))
    totals: Mapped[dict[str, Any]] = mapped_column(JSON)
    prev_mac: Mapped[str] = mapped_column(String(64))
    mac: Mapped[str] = mapped_column(String(64))

    steps: Mapped[list[AuditStep]] = relationship(
        back_populates="trace", order_by="AuditStep.position", lazy="selectin"
    )


class AuditStep(Base):
    """One step of a trace, in run order; `parent` is the position of the enclosing step (tree strategies)."""

    __tablename__ = "audit_steps"

    trace_id: Mapped[str] = mapped_column(ForeignKey("audit_traces.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    parent: Mapped[int | None] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(128))
    inputs: Mapped[dict[str, Any]] = mapped_column(JSON)
    outputs: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Retrieved documents as [{"id", "score"}], lifted out of the outputs so auditors can query them.
    documents: Mapped[list[Any]] = mapped_column(JSON)
    started_at: Mapped[float] = mapped_column(Float)
    duration_s: Mapped[float] = mapped_column(Float)
    llm_calls: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)

    trace: Mapped[AuditTrace] = relationship(back_populates="steps")


class AuditAnchor(Base):
    """Where the live chain starts after retention archived a prefix: the last archived link, keyed."""

    __tablename__ = "audit_anchors"

    up_to_seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    mac: Mapped[str] = mapped_column(String(64))
    archived_count: Mapped[int] = mapped_column(BigInteger)
    archive_sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    anchor_mac: Mapped[str] = mapped_column(String(64))


class AuditEvent(Base):
    """One security-relevant change (keys, users, groups, documents and their access lists, failed sign-ins,
    topic refits, retention, checkpoints): a link of the same chain as the traces, sharing its `seq` numbers.

    `actor` is who did it (a user id, `cli:<os user>` or `system`), `target` what it was done to (e.g.
    `user:bob`, `group:finance`, `key:<id>`, `document:<source id>`); `before`/`after` the relevant state.
    """

    __tablename__ = "audit_events"
    __table_args__ = (Index("ix_audit_events_tenant_seq", "tenant", "tenant_seq", unique=True),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, unique=True, index=True)
    # The event's number among its tenant's events, as for traces.
    tenant_seq: Mapped[int | None] = mapped_column(BigInteger)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    tenant: Mapped[str] = mapped_column(String(255), index=True)
    actor: Mapped[str] = mapped_column(String(255))
    action: Mapped[str] = mapped_column(String(64), index=True)
    target: Mapped[str] = mapped_column(String(1024), index=True)
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    result: Mapped[str] = mapped_column(String(16))
    request_id: Mapped[str | None] = mapped_column(String(64))
    prev_mac: Mapped[str] = mapped_column(String(64))
    mac: Mapped[str] = mapped_column(String(64))


class AuditTenantCounter(Base):
    """The last per-tenant number given to a tenant's traces (`kind` "trace") or events ("event").

    Kept apart from the links so numbering continues after retention deleted a tenant's older links; advanced
    only under the chain lock, in the transaction that appends the link.
    """

    __tablename__ = "audit_tenant_counters"

    tenant: Mapped[str] = mapped_column(String(255), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8), primary_key=True)
    last: Mapped[int] = mapped_column(BigInteger)


class AuditRun(Base):
    """A question whose run has started and is not traced yet: the row of a run `started`.

    Not a chain link: the chain records each question's one outcome, a trace with the run's id, appended in
    the transaction that deletes this row. So the table holds only the runs in flight (bounded by the
    servers' concurrency), and a row left behind by a dead process is what `runs.close_interrupted_runs`
    turns into an `interrupted` trace. The owner columns identify the process running it (see `runs.Owner`).
    """

    __tablename__ = "audit_runs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(255))
    asked_by: Mapped[str] = mapped_column(String(255))
    asked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    question: Mapped[str] = mapped_column(Text)
    pipeline: Mapped[str] = mapped_column(String(128))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    models: Mapped[dict[str, Any]] = mapped_column(JSON)
    # When the run's own deadline passes (None: no deadline); only then may another machine close it.
    deadline_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    host: Mapped[str] = mapped_column(String(255))
    boot_id: Mapped[str] = mapped_column(String(64))
    pid_ns: Mapped[str] = mapped_column(String(64))
    pid: Mapped[int] = mapped_column(Integer)
    pid_start: Mapped[int] = mapped_column(BigInteger)


AUDIT_TABLES = ("audit_traces", "audit_steps", "audit_anchors", "audit_events")
