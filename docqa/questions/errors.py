"""What a question's caller gets when its run did not complete: each a `DocqaError` with its HTTP status, so
every entry point (HTTP, chat, CLI, MCP) reports it the same way."""

from __future__ import annotations

from docqa.errors import DocqaError
from docqa.run_control import OUTCOME_TIMED_OUT


class QueryTimedOutError(DocqaError):
    code = "timeout"
    http_status = 504


class QueryCancelledError(DocqaError):
    """The run was cancelled: its client left, or the server is shutting down."""

    code = "cancelled"
    http_status = 503


class ConversationNotFoundError(DocqaError):
    """The conversation is not the asker's (or no longer exists): exactly like a missing one."""

    code = "not_found"
    http_status = 404

    def __init__(self) -> None:
        super().__init__("conversation not found")


def stopped_error(outcome: str, timeout_s: float | None) -> DocqaError:
    """The error for a run stopped as `outcome` (timed out or cancelled)."""
    if outcome == OUTCOME_TIMED_OUT:
        limit = f" {timeout_s:g} s" if timeout_s is not None else " its deadline"
        return QueryTimedOutError(f"the query took longer than{limit}")
    return QueryCancelledError("the query was cancelled")


class QueryFailedError(DocqaError):
    """A run failed on something the caller cannot act on; the server log has the details."""

    code = "internal_error"
    http_status = 500
