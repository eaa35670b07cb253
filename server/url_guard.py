"""Rejects URLs carrying NUL characters with 400 before any route sees them.

No identifier or filter of ours may contain NUL, and PostgreSQL cannot store or compare it in text: letting it
through turns a malformed URL into a database error (a 500) in whichever route it reaches.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote_to_bytes

from docqa.server.api_errors import send_asgi_error

ASGIApp = Any


class RejectNulMiddleware:
    """400 `bad_request` for a path or query string holding NUL, raw or percent-encoded."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and _has_nul(scope):
            await send_asgi_error(send, 400, "bad_request", "the URL contains a NUL character")
            return
        await self.app(scope, receive, send)


def _has_nul(scope: dict[str, Any]) -> bool:
    path: str = scope.get("path", "")
    query: bytes = scope.get("query_string", b"")
    return "\x00" in path or b"\x00" in unquote_to_bytes(query)
