"""`POST /v1/query`: answer a question as the caller, as JSON or streamed step by step (server-sent events)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request

from docqa.accounts.identity import Caller
from docqa.server.answering import Prepared, answer, prepare
from docqa.server.api_errors import QUERY_ERROR_RESPONSES, SSE_CONTENT
from docqa.server.auth import AskingCaller, ContextDep
from docqa.server.context import ServerContext
from docqa.server.schemas import QueryRequest, QueryResponse, query_response
from docqa.server.streaming import STREAM_HEADERS, SlotStreamingResponse, run_events

router = APIRouter(prefix="/v1", tags=["query"], responses=QUERY_ERROR_RESPONSES)

_STREAM_DOC = {
    200: {
        "description": "The answer (JSON), or with `stream: true` server-sent events: `selection`, one `step` per "
        "finished step, then `result` (same body as the JSON answer) or `error`.",
        "content": SSE_CONTENT,
    }
}


@router.post("/query", response_model=QueryResponse, responses=_STREAM_DOC, summary="Ask a question")
async def query(body: QueryRequest, caller: AskingCaller, context: ContextDep, request: Request) -> Any:
    prepared = prepare(context, body.question, body.pipeline, dict(body.options), body.run_inputs())
    if not body.stream:
        result = await answer(context, caller, prepared, disconnected=request.is_disconnected)
        return query_response(result, prepared.selection)
    # The slot is taken before the response starts so overload is a 503, not an error inside a stream.
    await context.slots.take()
    return SlotStreamingResponse(
        _events(context, caller, prepared),
        release=context.slots.give_back,
        media_type="text/event-stream",
        headers=STREAM_HEADERS,
    )


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n"


async def _events(context: ServerContext, caller: Caller, prepared: Prepared) -> AsyncIterator[str]:
    yield sse("selection", prepared.selection)
    async for kind, data in run_events(context, caller, prepared):
        yield sse(kind, query_response(data, prepared.selection) if kind == "result" else data)
