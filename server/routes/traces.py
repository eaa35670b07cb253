"""Auditor endpoints: list and filter traces, read one with its steps, export, verify the chain.

Auditors see their own tenant only; a trace of another tenant is a 404.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from docqa.audit.keys import hmac_key
from docqa.audit.timestamps import UtcTime
from docqa.audit.verify import verify_for_tenant
from docqa.server.api_errors import COMMON_ERROR_RESPONSES, NotFound
from docqa.server.auth import AuditorCaller, ContextDep
from docqa.server.routes.audit_paging import EXPORT_RESPONSES, AuditListingDep, AuditPage, json_lines
from docqa.server.trace_queries import TraceFilter, export_lines, list_traces, read_trace

router = APIRouter(prefix="/v1/traces", tags=["audit"], responses=COMMON_ERROR_RESPONSES)


class TracePage(AuditPage):
    traces: list[dict[str, Any]]


class BrokenOut(BaseModel):
    trace_id: str | None = Field(description="The trace at the break, only when it is one of the tenant's own.")
    reason: str


class VerifyOut(BaseModel):
    ok: bool = Field(description="Whether the whole chain verified.")
    checked: int = Field(description="The tenant's traces whose links verified.")
    broken: BrokenOut | None
    notes: list[str]


Text = Annotated[str | None, Query(max_length=200)]


def _filter(caller_tenant: str, user: str | None, pipeline: str | None, status: str | None,
            since: datetime | None, until: datetime | None, text: str | None) -> TraceFilter:
    return TraceFilter(tenant=caller_tenant, asked_by=user, pipeline=pipeline, status=status, since=since,
                       until=until, text=text)


@router.get("", response_model=TracePage, summary="List traces of the auditor's tenant, newest first")
def get_traces(
    listing: AuditListingDep,
    user: Text = None,
    pipeline: Text = None,
    status: Literal["completed", "failed", "timed_out", "cancelled", "interrupted"] | None = None,
    since: UtcTime | None = None,
    until: UtcTime | None = None,
    text: Text = None,
) -> TracePage:
    where = _filter(listing.tenant, user, pipeline, status, since, until, text)
    total, traces = listing.rows(list_traces, where)
    return TracePage(total=total, limit=listing.limit, offset=listing.offset, traces=traces)


@router.get("/export", summary="Export traces with chain proofs as JSON Lines", responses=EXPORT_RESPONSES)
def export_traces(
    caller: AuditorCaller,
    context: ContextDep,
    since: UtcTime | None = None,
    until: UtcTime | None = None,
) -> StreamingResponse:
    where = _filter(caller.tenant, None, None, None, since, until, None)
    return json_lines(context, lambda session: export_lines(session, where))


@router.post("/verify", response_model=VerifyOut, summary="Recompute the hash chain; report on the tenant's traces")
def verify(caller: AuditorCaller, context: ContextDep) -> VerifyOut:
    # The chain spans tenants: the report leaves out link numbers and counts, which are server-wide figures.
    with context.sessions() as session:
        report = verify_for_tenant(session, hmac_key(context.settings), caller.tenant)
    return VerifyOut(**report.to_dict())


@router.get("/{trace_id}", summary="One trace with all its steps and its chain link")
def get_trace(trace_id: str, caller: AuditorCaller, context: ContextDep) -> dict[str, Any]:
    with context.sessions() as session:
        trace = read_trace(session, caller.tenant, trace_id)
    if trace is None:
        raise NotFound("trace")
    return trace
