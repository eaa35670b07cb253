"""API errors as MCP tool errors: what the HTTP API answers with a 4xx (or 503/504) a tool call answers with
`isError: true` and the same code and message, so a bad argument never breaks the client's session.

Usage:
    with tool_errors():
        answer = await context.questions.ask(Ask(question, strategy=strategy), Asker.of(caller))
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError

from docqa.errors import DocqaError
from docqa.server.api_errors import ApiError


def tool_error(code: str, message: str) -> ToolError:
    """The error a tool call answers with: `<code>: <message>`, the code and message of the API's error body."""
    return ToolError(f"{code}: {message}")


@contextmanager
def tool_errors() -> Iterator[None]:
    """Turn the errors the API answers as JSON error bodies into tool errors carrying the same code and message.

    Server faults (500) are left to the SDK, which logs them and answers a generic tool error without details.
    """
    try:
        yield
    except ApiError as exc:
        raise tool_error(exc.code, exc.message) from exc
    except DocqaError as exc:
        if exc.http_status >= 500 and exc.http_status not in (503, 504):
            raise
        raise tool_error(exc.code, exc.message) from exc
