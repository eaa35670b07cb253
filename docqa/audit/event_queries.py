"""Reading audit events for auditors, always within one tenant: list with filters, export.

Usage:
    with context.sessions() as session:
        total, page = list_events(session, EventFilter(tenant="acme", action="key.issued"), limit=50, offset=0)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from docqa.audit.access import event_dict
from docqa.audit.export import tenant_export_line
from docqa.audit.models import AuditEvent


@dataclass(frozen=True)
class EventFilter:
    tenant: str | None  # None: every tenant (the operator's CLI only)
    action: str | None = None
    actor: str | None = None
    target: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def apply(self, query: Select[Any]) -> Select[Any]:
        if self.tenant is not None:
            query = query.where(AuditEvent.tenant == self.tenant)
        if self.action:
            # `document.` selects every document action.
            query = query.where(AuditEvent.action.startswith(self.action) if self.action.endswith(".")
                                else AuditEvent.action == self.action)
        if self.actor:
            query = query.where(AuditEvent.actor == self.actor)
        if self.target:
            query = query.where(AuditEvent.target == self.target)
        if self.since:
            query = query.where(AuditEvent.at >= self.since)
        if self.until:
            query = query.where(AuditEvent.at < self.until)
        return query


def list_events(session: Session, where: EventFilter, limit: int, offset: int) -> tuple[int, list[dict[str, Any]]]:
    """(total matching, one page of events numbered within the tenant, newest first)."""
    total = session.scalar(where.apply(select(func.count()).select_from(AuditEvent))) or 0
    query = where.apply(select(AuditEvent)).order_by(AuditEvent.seq.desc()).limit(limit).offset(offset)
    return total, [event_dict(e, tenant_numbers=True) for e in session.scalars(query)]


def iter_events(session: Session, where: EventFilter, batch: int = 500) -> Iterator[AuditEvent]:
    """The tenant's matching events in chain order, a batch at a time."""
    last = 0
    while True:
        rows = list(session.scalars(where.apply(select(AuditEvent)).where(AuditEvent.seq > last)
                                    .order_by(AuditEvent.seq).limit(batch)))
        if not rows:
            return
        yield from rows
        last = rows[-1].seq
        session.expunge_all()


def export_event_lines(session: Session, where: EventFilter) -> Iterator[bytes]:
    """The tenant's matching events as JSON Lines in chain order, with per-tenant proofs (`tenant_export_line`)."""
    for row in iter_events(session, where):
        yield tenant_export_line(row)
