"""Auditor endpoints for audit events: list and filter, export (chain-proof JSON Lines, OCSF or ECS), and "could this
principal read this document then?". Auditors see their own tenant's events only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session

from docqa.audit.access import replay_access
from docqa.audit.event_queries import EventFilter, export_event_lines, iter_events, list_events
from docqa.audit.ocsf import ocsf_record
from docqa.audit.siem import ecs_record
from docqa.audit.tenant_numbering import tenant_proof
from docqa.audit.timestamps import UtcTime, ZonedUtcTime
from docqa.server.api_errors import COMMON_ERROR_RESPONSES
from docqa.server.auth import AuditorCaller, ContextDep
from docqa.server.routes.audit_paging import EXPORT_RESPONSES, AuditListingDep, AuditPage, json_lines

router = APIRouter(prefix="/v1/audit", tags=["audit"], responses=COMMON_ERROR_RESPONSES)

Text = Annotated[str | None, Query(max_length=1024)]


class EventPage(AuditPage):
    events: list[dict[str, Any]]


class AccessOut(BaseModel):
    allowed: bool
    tenant: str
    principal: str
    document: str
    at: str
    reasons: list[str]
    events: list[dict[str, Any]]
    resolved: str | None = None  # the source id a displayed name stood for
    candidates: list[str] = []  # the source ids an ambiguous name stands for (the answer is then "no")


@router.get("/events", response_model=EventPage, summary="List audit events of the auditor's tenant, newest first")
def get_events(listing: AuditListingDep, action: Text = None, actor: Text = None, target: Text = None,
               since: UtcTime | None = None, until: UtcTime | None = None) -> EventPage:
    where = EventFilter(tenant=listing.tenant, action=action, actor=actor, target=target, since=since, until=until)
    total, events = listing.rows(list_events, where)
    return EventPage(total=total, limit=listing.limit, offset=listing.offset, events=events)


@router.get("/events/export", summary="Export the tenant's events as JSON Lines (chain proofs, or OCSF/ECS for a SIEM)",
            responses=EXPORT_RESPONSES)
def export_events(
    caller: AuditorCaller,
    context: ContextDep,
    format: Literal["jsonl", "ocsf", "ecs"] = "jsonl",
    since: UtcTime | None = None,
    until: UtcTime | None = None,
) -> StreamingResponse:
    where = EventFilter(tenant=caller.tenant, since=since, until=until)
    if format == "jsonl":
        return json_lines(context, lambda session: export_event_lines(session, where))
    render = ocsf_record if format == "ocsf" else ecs_record
    return json_lines(context, lambda session: _siem_lines(session, where, render))


def _siem_lines(session: Session, where: EventFilter, render: Callable[..., dict[str, Any]]) -> Iterator[bytes]:
    for row in iter_events(session, where):
        record = render(row, proof=tenant_proof(row))
        yield json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n"


@router.get("/access", response_model=AccessOut,
            summary="Could a principal read a document (source id, displayed name or chunk id) at a time? Replays "
                    "the tenant's events; an ambiguous name lists its candidates")
def get_access(
    caller: AuditorCaller,
    context: ContextDep,
    principal: Annotated[str, Query(min_length=3, max_length=200, pattern=r"^(user|group):.+$")],
    document: Annotated[str, Query(min_length=1, max_length=1024)],
    at: ZonedUtcTime,
) -> AccessOut:
    with context.sessions() as session:
        answer = replay_access(session, tenant=caller.tenant, principal=principal, document=document, at=at,
                               tenant_numbers=True)
    return AccessOut(**answer.to_dict())
