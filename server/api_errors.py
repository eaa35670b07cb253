"""The one error shape of the API: `{"error": {"code": ..., "message": ..., "type": ...}}`.

`type` repeats the code so OpenAI clients, which read `error.type`, show something meaningful.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "request_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
    503: "overloaded",
    504: "timeout",
}


class ApiError(Exception):
    """An error answered to the client with its status, code, message and optional headers."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


class NotFound(ApiError):
    def __init__(self, what: str) -> None:
        super().__init__(404, "not_found", f"{what} not found")


class ErrorDetail(BaseModel):
    code: str
    message: str
    type: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


def error_body(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "type": code}}


async def send_asgi_error(send: Any, status: int, code: str, message: str) -> None:
    """The JSON error body as a raw ASGI response, for middleware that answers before any route runs."""
    body = json.dumps(error_body(code, message)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _documented(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


# Declared on every router so the OpenAPI schema lists the errors clients really get.
COMMON_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _documented("Malformed request"),
    401: _documented("Missing or invalid API key"),
    403: _documented("The caller's role may not use this endpoint"),
    404: _documented("Not found (also for resources of another tenant)"),
    413: _documented("Request body too large"),
    422: _documented("Invalid request"),
    429: _documented("Rate limit exceeded; see Retry-After"),
}
QUERY_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **COMMON_ERROR_RESPONSES,
    502: _documented("A YAML strategy's component failed (`strategy_failed`, naming the strategy; the run has a "
                     "`failed` trace)"),
    503: _documented("Overloaded or LLM unavailable; see Retry-After"),
    504: _documented("The query took longer than the server's query timeout"),
}

# Server-sent events, documented per event (OpenAPI `itemSchema`): an optional event name and its JSON data.
SSE_CONTENT: dict[str, Any] = {
    "text/event-stream": {
        "itemSchema": {
            "type": "object",
            "properties": {"event": {"type": "string"}, "data": {"type": "string"}, "id": {"type": "string"}},
            "required": ["data"],
        }
    }
}
