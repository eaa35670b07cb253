"""`GET /v1/me`: who the API key belongs to, so a client (the web UI) can show what the caller's role may use."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from docqa.server.api_errors import COMMON_ERROR_RESPONSES
from docqa.server.auth import AnyCaller

router = APIRouter(prefix="/v1", tags=["accounts"], responses=COMMON_ERROR_RESPONSES)


class Me(BaseModel):
    user_id: str
    tenant: str
    role: str
    groups: list[str]


@router.get("/me", response_model=Me, summary="The caller: user id, tenant, role and groups")
def me(caller: AnyCaller) -> Me:
    return Me(user_id=caller.user_id, tenant=caller.tenant, role=caller.role, groups=sorted(caller.groups))
