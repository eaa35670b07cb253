"""`POST /v1/query`: answer a question as the caller, as JSON or streamed step by step (server-sent events)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from docqa.errors import DocqaError
from docqa.result import Step
from docqa.server.accounts.identity import Caller
from docqa.server.answering import Prepared, answer, answer_in_slot, prepare
from docqa.server.api_errors import QUERY_ERROR_RESPONSES, SSE_CONTENT, ApiError, error_body
from docqa.server.auth import AskingCaller, ContextDep
from docqa.server.context import ServerContext
from docqa.server.schemas import QueryRequest, QueryResponse, query_response

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/v1", tags=["query"], responses=QUERY_ERROR_RESPONSES)

_STREAM_DOC = {
    200: {
        "description": "The answer (JSON), or with `stream: true` server-sent events: `selection`, one `step` per "
        "finished step, then `result` (same body as the JSON answer) or `error`.",
        "content": SSE_CONTENT,
    }
}


@router.post("/query", response_model=QueryResponse, responses=_STREAM_DOC, summary="Ask a question")
async def query(body: QueryRequest, caller: AskingCaller, context: ContextDep) -> Any:
    prepared = prepare(context, body.question, body.pipeline, dict(body.options))
    if not body.stream:
        result = await answer(context, caller, prepared)
        return query_response(result, prepared.selection)
    # The slot is taken before the response starts so overload is a 503, not an error inside a stream.
    await context.slots.take()
    return SlotStreamingResponse(
        _events(context, caller, prepared),
        release=context.slots.give_back,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


class SlotStreamingResponse(StreamingResponse):
    """Gives the query slot back when the response ends, even if the client left before the stream began."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._release = release
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._release()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n"


async def _events(context: ServerContext, caller: Caller, prepared: Prepared) -> AsyncIterator[str]:
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def on_step(step: Step) -> None:  # called in the pipeline's thread
        loop.call_soon_threadsafe(queue.put_nowait, ("step", step.to_dict()))

    yield sse("selection", prepared.selection)
    task = asyncio.ensure_future(answer_in_slot(context, caller, prepared, on_step))
    task.add_done_callback(lambda _task: queue.put_nowait(("done", None)))
    while True:
        kind, data = await queue.get()
        if kind == "done":
            break
        yield sse(kind, data)
    try:
        result = task.result()
    except (DocqaError, ApiError) as exc:
        yield sse("error", error_body(exc.code, exc.message))
        return
    except Exception:
        logger.exception("streamed query failed")
        yield sse("error", error_body("internal_error", "the query failed; see the server log"))
        return
    yield sse("result", query_response(result, prepared.selection))
