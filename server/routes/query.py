"""`POST /v1/query`: answer a question as the caller, as JSON or streamed step by step (server-sent events)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, Request

from docqa.accounts.identity import Caller
from docqa.audit.scrub import mask_secrets
from docqa.result import PipelineResult
from docqa.server.answering import Prepared, answer, prepare
from docqa.server.api_errors import QUERY_ERROR_RESPONSES, SSE_CONTENT
from docqa.server.auth import AskingCaller, ContextDep
from docqa.server.context import ServerContext
from docqa.server.routes.conversations import record_turn, rewrite_in_conversation
from docqa.server.schemas import QueryRequest, QueryResponse, query_response
from docqa.server.streaming import STREAM_HEADERS, SlotStreamingResponse, run_events

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
    # Masked once here: the conversation, the model, the steps and the logs only ever see this copy.
    asked = mask_secrets(body.question, context.settings)
    rewrite = None
    if body.conversation_id is not None:
        # 404 before any work for a conversation that is not the caller's: it can never be continued.
        rewrite = await asyncio.to_thread(rewrite_in_conversation, context, caller, body.conversation_id, asked)
    question = asked if rewrite is None else rewrite.question
    prepared = prepare(context, question, body.pipeline, dict(body.options), body.run_inputs())
    if rewrite is not None:
        prepared = replace(prepared, rewrite=rewrite)
    turn = _Turn(context, caller, body.conversation_id, asked)
    if not body.stream:
        result = await answer(context, caller, prepared, disconnected=request.is_disconnected)
        return {**query_response(result, prepared.selection), "conversation_id": await turn.store(result)}
    # The slot is taken before the response starts so overload is a 503, not an error inside a stream.
    await context.slots.take()
    return SlotStreamingResponse(
        _events(context, caller, prepared, turn),
        release=context.slots.give_back,
        media_type="text/event-stream",
        headers=STREAM_HEADERS,
    )


class _Turn:
    """Stores an answered question in its conversation, when one was named."""

    def __init__(self, context: ServerContext, caller: Caller, conversation_id: str | None, question: str) -> None:
        self.context, self.caller, self.conversation_id, self.question = context, caller, conversation_id, question

    async def store(self, result: PipelineResult) -> str | None:
        if self.conversation_id is None:
            return None
        return await asyncio.to_thread(record_turn, self.context, self.caller, self.conversation_id, self.question,
                                       result)


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n"


async def _events(context: ServerContext, caller: Caller, prepared: Prepared, turn: _Turn) -> AsyncIterator[str]:
    yield sse("selection", prepared.selection)
    async for kind, data in run_events(context, caller, prepared):
        if kind == "result":
            data = {**query_response(data, prepared.selection), "conversation_id": await turn.store(data)}
        yield sse(kind, data)
