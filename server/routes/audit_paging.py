"""Paging and export of the audit listings (traces and events): one set of bounds, one page shape, one way to
read a page of the auditor's tenant and one way to stream an export for both.

Usage:
    class ThingPage(AuditPage):
        things: list[dict[str, Any]]

    @router.get("/things", response_model=ThingPage)
    def get_things(listing: AuditListingDep, kind: str | None = None) -> ThingPage:
        total, things = listing.rows(list_things, ThingFilter(tenant=listing.tenant, kind=kind))
        return ThingPage(total=total, limit=listing.limit, offset=listing.offset, things=things)

    @router.get("/things/export", responses=EXPORT_RESPONSES)
    def export_things(context: ContextDep) -> StreamingResponse:
        return json_lines(context, lambda session: thing_lines(session))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session

from docqa.server.auth import AuditorCaller, ContextDep
from docqa.server.context import ServerContext

# An auditor pages through a tenant's whole history, but one page stays small enough to answer at once.
PageLimit = Annotated[int, Query(ge=1, le=500)]
PageOffset = Annotated[int, Query(ge=0, le=10_000_000)]


class AuditPage(BaseModel):
    """`total` rows match the filter; this page holds up to `limit` of them from `offset` on."""

    total: int
    limit: int
    offset: int


Where = TypeVar("Where")
# A listing query: (session, filter, limit, offset) -> (total matching, one page of rows).
ListQuery = Callable[[Session, Where, int, int], tuple[int, list[dict[str, Any]]]]


@dataclass(frozen=True)
class AuditListing:
    """One requested page of an auditor's listing, within the auditor's own tenant."""

    tenant: str
    context: ServerContext
    limit: int
    offset: int

    def rows(self, query: ListQuery[Where], where: Where) -> tuple[int, list[dict[str, Any]]]:
        """(total matching `where`, this page of them) from `query` in a session of its own."""
        with self.context.sessions() as session:
            return query(session, where, self.limit, self.offset)


def audit_listing(caller: AuditorCaller, context: ContextDep, limit: PageLimit = 50,
                  offset: PageOffset = 0) -> AuditListing:
    return AuditListing(tenant=caller.tenant, context=context, limit=limit, offset=offset)


# The auditor check and the page bounds of a listing route (its query parameters `limit` and `offset`).
AuditListingDep = Annotated[AuditListing, Depends(audit_listing)]


JSON_LINES = "application/x-ndjson"
# What an export answers, for the OpenAPI schema: one JSON document per line.
EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {JSON_LINES: {"schema": {"type": "string"}}}}}


def json_lines(context: ServerContext, lines: Callable[[Session], Iterable[bytes]]) -> StreamingResponse:
    """Stream `lines(session)` as JSON Lines; the session stays open until the last line is sent."""

    def stream() -> Iterator[bytes]:
        with context.sessions() as session:
            yield from lines(session)

    return StreamingResponse(stream(), media_type=JSON_LINES)
