"""Authentication (`Authorization: Bearer <API key or OIDC token>`) and role checks, as FastAPI dependencies.

Usage in a route:
    @router.get("/v1/traces")
    def list_traces(caller: AuditorCaller, ...): ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from docqa.server.accounts.identity import Caller
from docqa.server.accounts.keys import verify_key
from docqa.server.accounts.oidc import looks_like_jwt, token_caller
from docqa.server.api_errors import ApiError
from docqa.server.context import ServerContext

_bearer = HTTPBearer(
    auto_error=False,
    description="An API key created with `docqa keys create`, or a JWT of the configured OIDC issuer.",
)


def get_context(request: Request) -> ServerContext:
    return request.app.state.context


ContextDep = Annotated[ServerContext, Depends(get_context)]


def authenticate(
    context: ContextDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    """The caller of a valid, unrevoked key of an active user; 401 otherwise, 429 above the key's rate."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(401, "unauthorized", "missing API key: send 'Authorization: Bearer <key>'",
                       headers={"WWW-Authenticate": "Bearer"})
    credential = credentials.credentials
    verifier = context.token_verifier
    if verifier is not None and looks_like_jwt(credential):
        identity = verifier.user_of(credential)
        caller = None
        if identity is not None:
            with context.sessions() as session:
                caller = token_caller(session, *identity)
        refused = "invalid or expired bearer token, or no active docqa user for it"
    else:
        with context.sessions() as session:
            caller = verify_key(session, credential)
        refused = "invalid or revoked API key"
    if caller is None:
        raise ApiError(401, "unauthorized", refused, headers={"WWW-Authenticate": "Bearer"})
    context.rate_limiter.check(caller.key_id)
    return caller


def require_roles(*roles: str) -> Callable[[Caller], Caller]:
    allowed = frozenset(roles)

    def check(caller: Annotated[Caller, Depends(authenticate)]) -> Caller:
        if caller.role not in allowed:
            raise ApiError(403, "forbidden", f"role {caller.role!r} may not use this endpoint")
        return caller

    return check


AnyCaller = Annotated[Caller, Depends(authenticate)]
# Admins may ask questions too; auditors only read traces, so they never act as another user.
AskingCaller = Annotated[Caller, Depends(require_roles("user", "admin"))]
AdminCaller = Annotated[Caller, Depends(require_roles("admin"))]
AuditorCaller = Annotated[Caller, Depends(require_roles("auditor"))]
