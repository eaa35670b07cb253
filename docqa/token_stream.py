"""Streaming a run's answer token by token to whoever asked for it (the server's SSE and chat streams).

The server sets a sink for the run (`stream_answer_tokens`); the LLM helpers (`docqa.llm.calls`) ask
`answer_streaming_callback(purpose)` for each call and, for calls that write an answer, hand the chat generator
Haystack's `streaming_callback`. Strategies and their components stay unaware of it. Tokens are a preview: a
strategy may write several answers (a retry after a failed grade) and the extractive fallback may replace the
model's, so the run's result stays authoritative; `call` numbers the answer calls of the run (1, 2, ...) so a
client can start over when a new one begins.

Usage:
    with stream_answer_tokens(lambda text, call: print(text, end="")):
        pipeline.run(...)
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

# The purposes (see `docqa.llm.calls`) whose reply is a strategy's answer to the user, not an intermediate step.
ANSWER_PURPOSES = frozenset({"answer", "cot_answer", "resp_generate", "contregen_answer"})

TokenSink = Callable[[str, int], None]


@dataclass
class _Stream:
    sink: TokenSink
    calls: Iterator[int] = field(default_factory=lambda: itertools.count(1))


_current: ContextVar[_Stream | None] = ContextVar("docqa_answer_tokens", default=None)


@contextmanager
def stream_answer_tokens(sink: TokenSink) -> Iterator[None]:
    """Within the block, answer calls stream their tokens to `sink(text, call)` (from the calling thread)."""
    token = _current.set(_Stream(sink))
    try:
        yield
    finally:
        _current.reset(token)


def answer_streaming_callback(purpose: str) -> Callable[[Any], None] | None:
    """Haystack `streaming_callback` for one LLM call of `purpose`, or None when nobody listens or the call does
    not write the answer."""
    stream = _current.get()
    if stream is None or purpose not in ANSWER_PURPOSES:
        return None
    call = next(stream.calls)

    def callback(chunk: Any) -> None:
        text = getattr(chunk, "content", None)
        if text:
            stream.sink(text, call)

    return callback


def accepts_streaming_callback(generator: Any) -> bool:
    """Whether `generator.run` takes a `streaming_callback` (OpenAIChatGenerator and docqa's role generator do)."""
    try:
        return "streaming_callback" in inspect.signature(generator.run).parameters
    except (TypeError, ValueError):
        return False
