"""Streaming a question's run as server-sent events, inside the query slot the question service took for it.

Both streaming endpoints take the slot before the response starts (`QuestionService.stream`), so overload is
still a 503 rather than an error inside a stream, and hand it back when the response ends, even if the client
left early.

Usage:
    stream = await context.questions.stream(ask, Asker.of(caller))
    return SlotStreamingResponse(render(stream.events()), release=stream.release, media_type="text/event-stream")
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse

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
