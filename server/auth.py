"""Authentication (`Authorization: Bearer <API key or OIDC token>`) and role checks, as FastAPI dependencies.

Usage in a route:
    @router.get("/v1/traces")
    def list_traces(caller: AuditorCaller, ...): ...
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from docqa.accounts.identity import Caller
from docqa.accounts.keys import parse_key, verify_key
from docqa.accounts.models import ApiKey
from docqa.accounts.oidc import looks_like_jwt, token_caller
from docqa.audit import events
from docqa.audit.events import FailureThrottle, record_event
from docqa.server.api_errors import ApiError
from docqa.server.context import ServerContext

logger = logging.getLogger(__name__)
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# Failed sign-ins become audit events at most once a minute per key id (else client address), and at most 60
# a minute per worker in all; the failures in between are counted into the next event (see FailureThrottle).
signin_failures = FailureThrottle()

_bearer = HTTPBearer(
    auto_error=False,
    description="An API key created with `docqa keys create`, or a JWT of the configured OIDC issuer.",
)


def get_context(request: Request) -> ServerContext:
    return request.app.state.context


ContextDep = Annotated[ServerContext, Depends(get_context)]


def request_id(request: Request) -> str:
    """The caller's `X-Request-ID` when it is a plain token, else a new one: it ties audit events to a request."""
    given = request.headers.get("x-request-id", "")
    return given if _REQUEST_ID.match(given) else uuid.uuid4().hex


RequestId = Annotated[str, Depends(request_id)]


def authenticate(
    request: Request,
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
        _record_failed_signin(request, context, credential)
        _throttle_failure(request, context, credential)
        raise ApiError(401, "unauthorized", refused, headers={"WWW-Authenticate": "Bearer"})
    context.rate_limiter.check(caller.key_id)
    return caller


def _throttle_failure(request: Request, context: ServerContext, credential: str) -> None:
    """Count a failed credential against its address and key id; 429 once either is past its threshold."""
    if context.signin_throttle is None:
        return
    parsed = parse_key(credential)
    address = request.client.host if request.client else "unknown"
    wait = context.signin_throttle.failed(address=address, key_id=parsed[0] if parsed else None)
    if wait is not None:
        raise ApiError(429, "rate_limited", "too many failed sign-ins from this address or for this key; "
                       "retry later", headers={"Retry-After": str(wait)})


def _record_failed_signin(request: Request, context: ServerContext, credential: str) -> None:
    parsed = parse_key(credential)
    address = request.client.host if request.client else "unknown"
    source = f"key:{parsed[0]}" if parsed else f"ip:{address}"
    suppressed = signin_failures.admit(source)
    if suppressed is None:
        return
    try:
        tenant = None
        if parsed:
            with context.sessions() as session:
                row = session.get(ApiKey, parsed[0])
                tenant = None if row is None else row.tenant_id
        # Only the key id is recorded, never the presented secret or token.
        record_event(context.settings, tenant=tenant or events.SYSTEM_TENANT, actor=source,
                     action=events.SIGNIN_FAILED, target=source, result=events.RESULT_FAILURE,
                     request_id=request_id(request),
                     after={"address": address, "kind": "api_key" if parsed else "token",
                            "suppressed_since_last": suppressed})
    except Exception:  # the 401 stands even when the audit database is unavailable; the log says why
        logger.exception("could not record a failed sign-in")


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
