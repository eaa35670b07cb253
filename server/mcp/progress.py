"""Progress notifications while an `ask` runs: each step, as it finishes in the run's worker thread, becomes one
MCP `notifications/progress` on the call's response stream, in order.

Usage:
    async with StepProgress(ctx) as progress:
        answer = await context.questions.ask(ask, Asker.of(caller), on_step=progress.on_step)
"""

from __future__ import annotations

import asyncio
import logging
from types import TracebackType
from typing import Any

from docqa.result import Step

logger = logging.getLogger(__name__)

# Steps waiting to be sent; a client reading slower than the run's steps only delays its own notifications.
_MAX_PENDING = 1000


def step_message(step: Step) -> str:
    """One line for a finished step: its kind, name, time and model calls (never its inputs or outputs)."""
    calls = f", {step.llm.calls} model call{'s' if step.llm.calls != 1 else ''}" if step.llm.calls else ""
    failed = " (failed)" if step.error else ""
    return f"{step.kind}: {step.name}{failed} ({step.duration_s:.2f} s{calls})"


class StepProgress:
    """Sends `progress=n` (the number of steps finished so far) with the step's line for each finished step.

    `on_step` is called in the run's thread; the notifications are sent from the event loop by one task, so they
    arrive in step order. Sending stops when the call ends: a step finishing after that is not announced.
    """

    def __init__(self, ctx: Any) -> None:
        self._ctx = ctx
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[Step | None] = asyncio.Queue()
        self._sender: asyncio.Task[None] | None = None
        self.sent = 0

    async def __aenter__(self) -> StepProgress:
        self._loop = asyncio.get_running_loop()
        self._sender = asyncio.ensure_future(self._send_all())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._sender is not None
        if exc_type is None:
            # Every step of a finished run is announced before its result: the end is queued behind the steps
            # the run's thread handed over (callbacks run in the order they were scheduled).
            assert self._loop is not None
            self._loop.call_soon_threadsafe(self._enqueue, None)
            await self._sender
        else:
            self._sender.cancel()

    def on_step(self, step: Step) -> None:
        """Called by the run's thread for each finished step."""
        if self._loop is None or self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._enqueue, step)

    def _enqueue(self, step: Step | None) -> None:
        if step is None:
            # The end always gets through: the queue is unbounded, its bound is checked here for steps only.
            self._queue.put_nowait(None)
        elif self._queue.qsize() < _MAX_PENDING:
            self._queue.put_nowait(step)
        else:
            logger.debug("progress queue full; step %s not announced", step.name)

    async def _send_all(self) -> None:
        while (step := await self._queue.get()) is not None:
            self.sent += 1
            try:
                await self._ctx.report_progress(self.sent, None, step_message(step))
            except Exception:  # a client that stopped reading loses its progress, never its answer
                logger.debug("progress notification not sent", exc_info=True)
