"""`POST /v1/query`: answer a question as the caller, as JSON or streamed step by step (server-sent events)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request

from docqa.questions import Asker, QuestionStream
from docqa.server.api_errors import QUERY_ERROR_RESPONSES, SSE_CONTENT, error_body
from docqa.server.auth import AskingCaller, ContextDep
from docqa.server.schemas import QueryRequest, QueryResponse, query_response
from docqa.server.streaming import STREAM_HEADERS, SlotStreamingResponse

router = APIRouter(prefix="/v1", tags=["query"], responses=QUERY_ERROR_RESPONSES)

_STREAM_DOC = {
    200: {
        "description": "The answer (JSON), or with `stream: true` server-sent events: `selection`, one `step` per "
        "finished step, `token` events ({text, call}) while the model writes an answer (a preview without the "
        "prompt echoes the answer drops; `call` counts the answer calls, so a new number starts a new draft), "
        "`answer_replaced` ({answer_source, answer_note}) when the answer shown is not the model's, then `result` "
        "(same body as the JSON answer, authoritative) or `error`.",
        "content": SSE_CONTENT,
    }
}


@router.post("/query", response_model=QueryResponse, responses=_STREAM_DOC, summary="Ask a question")
async def query(body: QueryRequest, caller: AskingCaller, context: ContextDep, request: Request) -> Any:
    if not body.stream:
        answer = await context.questions.ask(body.to_ask(), Asker.of(caller), disconnected=request.is_disconnected)
        return query_response(answer)
    stream = await context.questions.stream(body.to_ask(), Asker.of(caller))
    return SlotStreamingResponse(_events(stream), release=stream.release, media_type="text/event-stream",
                                 headers=STREAM_HEADERS)


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n"


async def _events(stream: QuestionStream) -> AsyncIterator[str]:
    async for kind, data in stream.events():
        if kind == "result":
            data = query_response(data)
        elif kind == "error":
            data = error_body(data.code, data.message)
        yield sse(kind, data)
