"""Streaming a question's run: its steps as they finish, its answer's tokens as the model writes them, then its
result or error, inside a held query slot.

Both streaming endpoints take the slot before the response starts, so overload is still a 503 rather than an
error inside a stream, and hand it back when the response ends, even if the client left early.

Usage:
    await context.slots.take()
    return SlotStreamingResponse(render(run_events(context, caller, prepared)), release=context.slots.give_back,
                                 media_type="text/event-stream")
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse

from docqa.accounts.identity import Caller
from docqa.errors import DocqaError
from docqa.extractive_fallback import ANSWER_SOURCE_MODEL
from docqa.result import PipelineResult, Step
from docqa.server.answering import Prepared, answer_in_slot
from docqa.server.api_errors import ApiError, error_body
from docqa.server.context import ServerContext

logger = logging.getLogger(__name__)

STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


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


async def run_events(
    context: ServerContext, caller: Caller, prepared: Prepared
) -> AsyncIterator[tuple[str, Any]]:
    """("step", step dict) per finished step, ("token", {"text", "call"}) per piece of an answer the model
    writes (echo-free, see `docqa.token_stream`; a preview: the result's answer is authoritative), then
    ("result", PipelineResult) or ("error", body). An answer that is not the model's (extracted sentences, or
    none) is announced by ("answer_replaced", {"answer_source", "answer_note"}) just before its result, so a
    client drops the preview and says so before it shows the answer."""
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def on_step(step: Step) -> None:  # called in the pipeline's thread
        loop.call_soon_threadsafe(queue.put_nowait, ("step", step.to_dict()))

    def on_token(text: str, call: int) -> None:  # called in the pipeline's thread
        loop.call_soon_threadsafe(queue.put_nowait, ("token", {"text": text, "call": call}))

    if prepared.rewrite is not None:
        # A conversation's follow-up was rewritten before the run: that is its first step, shown at once.
        queue.put_nowait(("step", prepared.rewrite.to_step().to_dict()))
    task = asyncio.ensure_future(answer_in_slot(context, caller, prepared, on_step, on_token=on_token))
    task.add_done_callback(lambda _task: queue.put_nowait(("done", None)))
    try:
        while True:
            kind, data = await queue.get()
            if kind == "done":
                break
            yield kind, data
    finally:
        # The client left before the end: cancelling the task stops the run and records it as cancelled.
        if not task.done():
            task.cancel()
    try:
        result: PipelineResult = task.result()
    except (DocqaError, ApiError) as exc:
        if isinstance(exc, DocqaError) and exc.detail:
            logger.warning("%s: %s", exc.code, exc.detail)
        yield "error", error_body(exc.code, exc.message)
        return
    except Exception:
        logger.exception("streamed query failed")
        yield "error", error_body("internal_error", "the query failed; see the server log")
        return
    if result.answer_source != ANSWER_SOURCE_MODEL:
        yield "answer_replaced", {"answer_source": result.answer_source, "answer_note": result.answer_note}
    yield "result", result
