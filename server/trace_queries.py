"""Reading the audit trail for auditors, always within one tenant: list with filters, read one, export.

Usage:
    with context.sessions() as session:
        page = list_traces(session, TraceFilter(tenant="acme", asked_by="alice"), limit=50)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, or_, select
from sqlalchemy.orm import Session

from docqa.audit.canonical import canonical_bytes, format_timestamp, step_payload, trace_payload
from docqa.audit.export import tenant_export_line
from docqa.audit.models import AuditTrace
from docqa.audit.tenant_numbering import tenant_proof
from docqa.feedback import feedback_by_trace


@dataclass(frozen=True)
class TraceFilter:
    tenant: str
    asked_by: str | None = None
    pipeline: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    text: str | None = None

    def apply(self, query: Select[Any]) -> Select[Any]:
        query = query.where(AuditTrace.tenant == self.tenant)
        if self.asked_by:
            query = query.where(AuditTrace.asked_by == self.asked_by)
        if self.pipeline:
            query = query.where(AuditTrace.pipeline == self.pipeline)
        if self.status:
            query = query.where(AuditTrace.status == self.status)
        if self.since:
            query = query.where(AuditTrace.asked_at >= self.since)
        if self.until:
            query = query.where(AuditTrace.asked_at < self.until)
        if self.text:
            # Escape LIKE wildcards so the text is matched literally.
            pattern = "%" + self.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            query = query.where(or_(AuditTrace.question.ilike(pattern, escape="\\"),
                                    AuditTrace.answer.ilike(pattern, escape="\\")))
        return query


def summary(trace: AuditTrace) -> dict[str, Any]:
    return {
        "id": trace.id,
        # The trace's number among the tenant's traces: the chain's `seq` would count other tenants' links.
        "seq": trace.tenant_seq,
        "asked_by": trace.asked_by,
        "tenant": trace.tenant,
        "asked_at": format_timestamp(trace.asked_at),
        "pipeline": trace.pipeline,
        "status": trace.status,
        "question": trace.question,
        "answer": trace.answer,
        "stop_reason": trace.stop_reason,
        "error": trace.error,
        "totals": trace.totals,
    }


def list_traces(session: Session, where: TraceFilter, limit: int, offset: int) -> tuple[int, list[dict[str, Any]]]:
    """(total matching, one page of summaries, newest first)."""
    total = session.scalar(where.apply(select(func.count()).select_from(AuditTrace))) or 0
    query = where.apply(select(AuditTrace)).order_by(AuditTrace.seq.desc()).limit(limit).offset(offset)
    return total, [summary(t) for t in session.scalars(query)]


def read_trace(session: Session, tenant: str, trace_id: str) -> dict[str, Any] | None:
    """The full trace with its steps and chain link, or None (also when it belongs to another tenant)."""
    trace = session.get(AuditTrace, trace_id)
    if trace is None or trace.tenant != tenant:
        return None
    return {
        **trace_payload(trace),
        "steps": [step_payload(s) for s in trace.steps],
        "proof": tenant_proof(trace),
        # The askers' ratings: beside the chained payload, which they may change without breaking it.
        "feedback": feedback_by_trace(session, [trace.id]).get(trace.id, []),
    }


def export_lines(session: Session, where: TraceFilter, batch: int = 200) -> Iterator[bytes]:
    """JSON Lines of the tenant's traces in chain order, with per-tenant proofs (`tenant_export_line`)."""
    last = 0
    while True:
        query = where.apply(select(AuditTrace)).where(AuditTrace.seq > last).order_by(AuditTrace.seq).limit(batch)
        rows = list(session.scalars(query))
        if not rows:
            return
        ratings = feedback_by_trace(session, [trace.id for trace in rows])
        for trace in rows:
            yield _with_feedback(tenant_export_line(trace), ratings.get(trace.id))
        last = rows[-1].seq
        session.expunge_all()


def _with_feedback(line: bytes, feedback: list[dict[str, Any]] | None) -> bytes:
    """An export line with the trace's feedback as a sibling of its proof (outside what the MAC covers)."""
    if not feedback:
        return line
    record = json.loads(line)
    record["feedback"] = feedback
    return canonical_bytes(record) + b"\n"
