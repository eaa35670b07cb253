"""Paging of the audit listings (traces and events): one set of bounds and one page shape for both.

Usage:
    def get_things(limit: PageLimit = 50, offset: PageOffset = 0) -> ThingPage: ...
    class ThingPage(AuditPage):
        things: list[dict[str, Any]]
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import BaseModel

# An auditor pages through a tenant's whole history, but one page stays small enough to answer at once.
PageLimit = Annotated[int, Query(ge=1, le=500)]
PageOffset = Annotated[int, Query(ge=0, le=10_000_000)]


class AuditPage(BaseModel):
    """`total` rows match the filter; this page holds up to `limit` of them from `offset` on."""

    total: int
    limit: int
    offset: int
