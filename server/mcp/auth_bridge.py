"""Who calls the MCP endpoint: every HTTP request to `/mcp` is authenticated exactly as an API request is (a docqa
API key or an OIDC bearer token, `docqa.server.auth.authenticate`, which also takes one token of the key's rate
limit), and only the roles that may ask questions (user, admin) get through. The caller travels with the request
(its ASGI scope) to the tools.

Usage:
    endpoint = AuthenticatedEndpoint(context, session_manager.handle_request)
    caller = caller_of_request(ctx)  # inside a tool
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from fastapi.security import HTTPAuthorizationCredentials
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from docqa.accounts.identity import Caller
from docqa.server.api_errors import ApiError, error_body
from docqa.server.auth import authenticate
from docqa.server.context import ServerContext
from docqa.server.mcp.errors import tool_error

ASKING_ROLES = frozenset({"user", "admin"})
# JSON-RPC error code of a request the API's checks refused (implementation-defined server error range).
REFUSED = -32001
_CALLER_KEY = "docqa.caller"


def check_role(caller: Caller) -> None:
    """Auditors read traces only (as in the API, they never ask as anyone): 403 for any other role."""
    if caller.role not in ASKING_ROLES:
        raise ApiError(403, "forbidden", f"role {caller.role!r} may not use this endpoint")


def _credentials(request: Request) -> HTTPAuthorizationCredentials | None:
    scheme, _, credential = request.headers.get("authorization", "").partition(" ")
    if not scheme or not credential.strip():
        return None
    return HTTPAuthorizationCredentials(scheme=scheme, credentials=credential.strip())


class AuthenticatedEndpoint:
    """ASGI app: authenticates the request, then hands it to `inner` with the caller in its scope.

    A refused request is answered like the API's (401 with `WWW-Authenticate`, 403, 429 with `Retry-After`) in
    the API's error body, before the MCP layer reads it.
    """

    def __init__(self, context: ServerContext, inner: ASGIApp) -> None:
        self.context = context
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            # Key lookups and token checks are blocking database work: off the event loop, as FastAPI runs them.
            caller = await anyio.to_thread.run_sync(authenticate, request, self.context, _credentials(request))
            check_role(caller)
        except ApiError as exc:
            response = _refuse(await request.body() if request.method == "POST" else b"", exc)
            await response(scope, receive, send)
            return
        scope[_CALLER_KEY] = caller
        await self.inner(scope, receive, send)


def _refuse(body_sent: bytes, exc: ApiError) -> JSONResponse:
    """The API's status and headers; the body a JSON-RPC error when the request was one (MCP clients then show
    the API's message instead of a bare status), else the API's error body."""
    body: dict[str, Any] = error_body(exc.code, exc.message)
    request_id = _jsonrpc_id(body_sent)
    if request_id is not _NOT_JSONRPC:
        body = {"jsonrpc": "2.0", "id": request_id,
                "error": {"code": REFUSED, "message": f"{exc.code}: {exc.message}", "data": body}}
    return JSONResponse(body, status_code=exc.status, headers=exc.headers)


_NOT_JSONRPC = object()


def _jsonrpc_id(body: bytes) -> Any:
    # The API's body size limit bounds what is read here.
    try:
        message = json.loads(body) if body else None
    except ValueError:
        return _NOT_JSONRPC
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or "method" not in message:
        return _NOT_JSONRPC
    request_id = message.get("id")
    return request_id if isinstance(request_id, str | int) else None


def caller_of_request(ctx: Any) -> Caller:
    """The caller `AuthenticatedEndpoint` put in the scope of the HTTP request that carries this tool call."""
    request = ctx.request_context.request
    caller = request.scope.get(_CALLER_KEY) if request is not None else None
    if not isinstance(caller, Caller):  # only reachable if the endpoint were served without its authentication
        raise tool_error("unauthorized", "missing API key: send 'Authorization: Bearer <key>'")
    return caller
