"""Paging and export of the audit listings (traces and events): one set of bounds, one page shape and one way
to stream an export for both.

Usage:
    def get_things(limit: PageLimit = 50, offset: PageOffset = 0) -> ThingPage: ...
    class ThingPage(AuditPage):
        things: list[dict[str, Any]]

    @router.get("/things/export", responses=EXPORT_RESPONSES)
    def export_things(context: ContextDep) -> StreamingResponse:
        return json_lines(context, lambda session: thing_lines(session))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, Any

from fastapi import Query
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session

from docqa.server.context import ServerContext

# An auditor pages through a tenant's whole history, but one page stays small enough to answer at once.
PageLimit = Annotated[int, Query(ge=1, le=500)]
PageOffset = Annotated[int, Query(ge=0, le=10_000_000)]


class AuditPage(BaseModel):
    """`total` rows match the filter; this page holds up to `limit` of them from `offset` on."""

    total: int
    limit: int
    offset: int


JSON_LINES = "application/x-ndjson"
# What an export answers, for the OpenAPI schema: one JSON document per line.
EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {200: {"content": {JSON_LINES: {"schema": {"type": "string"}}}}}


def json_lines(context: ServerContext, lines: Callable[[Session], Iterable[bytes]]) -> StreamingResponse:
    """Stream `lines(session)` as JSON Lines; the session stays open until the last line is sent."""

    def stream() -> Iterator[bytes]:
        with context.sessions() as session:
            yield from lines(session)

    return StreamingResponse(stream(), media_type=JSON_LINES)
