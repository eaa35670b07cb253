"""Streaming a run's answer token by token to whoever asked for it (the server's SSE and chat streams).

The server sets a sink for the run (`stream_answer_tokens`); the LLM helpers (`docqa.llm.calls`) ask
`answer_streaming_callback(purpose, prompt)` for each call and, for calls that write an answer, hand the chat
generator that callback as Haystack's `streaming_callback`, then call its `finish()` once the reply is complete.
Strategies and their components stay unaware of it.

What reaches the sink is the reply as the final-text cleaning (`strip_prompt_echo`) will keep it: lines that repeat
the prompt, "Question: ..." continuations and "Answer:" labels never stream. A line is held back until enough of it
is known to tell it from an echo (`EchoHoldback`), so a model that starts by repeating the whole prompt streams
nothing until it moves past it. Tokens are still a preview: a strategy may write several answers (a retry after a
failed grade), and a later check or the extractive fallback may change or replace the model's, so the run's
result stays authoritative; `call` numbers the answer calls of the run (1, 2, ...) so a client can start over
when a new one begins.

Usage:
    with stream_answer_tokens(lambda text, call: print(text, end="")):
        pipeline.run(...)
"""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

# The purposes (see `docqa.llm.calls`) whose reply is a strategy's answer to the user, not an intermediate step.
ANSWER_PURPOSES = frozenset({"answer", "cot_answer", "resp_generate", "contregen_answer"})
# A line's opening is held back until its cleaned text is this long (and is no stretch of a prompt line):
# `strip_prompt_echo` recognises an instruction echo by its first 60 characters, so past them its verdict on the
# opening cannot change. A line that repeats a prompt line is held until it departs from it or ends.
HOLD_CHARS = 80
# A template placeholder ("<the final answer>") is at most this long (`strip_prompt_echo` drops those the prompt
# holds): text from an unclosed "<" closer to the end than this is held until it is known not to be one.
_PLACEHOLDER_CHARS = 122
_OPEN_PLACEHOLDER = re.compile(r"<[^<>\n]*$")

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


class EchoHoldback:
    """The reply's text as `strip_prompt_echo(reply, prompt)` keeps it, released piece by piece as it arrives.

    Complete lines are cleaned by `strip_prompt_echo` itself; the line being written is released once its
    cleaned text is `HOLD_CHARS` long and no stretch of a prompt line, after which its opening cannot turn into an
    echo. Fed a whole reply and finished, the pieces join to exactly `strip_prompt_echo(reply, prompt)`.

    Usage:
        holdback = EchoHoldback(prompt)
        shown = "".join([holdback.feed(piece) for piece in pieces]) + holdback.finish()
    """

    def __init__(self, prompt: str) -> None:
        self.prompt = prompt
        self._prompt_lines = [line.strip() for line in prompt.splitlines() if line.strip()]
        self._line = ""  # the raw text of the line being written
        self._shown = ""  # what has been released of that line
        self._started = False  # whether that line is known to be kept
        # Once a line is kept its opening is decided, and only what follows is read, once (linear, not quadratic
        # in the line's length): `_pending` is raw text not yet released, `_carry` cleaned spaces held back.
        self._pending = ""
        self._carry = ""
        self._any_line = False  # a kept line was released before (the next one starts with "\n")
        self._diverged = False

    def feed(self, text: str) -> str:
        """The text that can be shown now that `text` arrived (often "")."""
        out = []
        *complete, partial = text.split("\n")
        for piece in complete:
            self._line += piece
            out.append(self._end_line())
        self._line += partial
        if self._started:
            self._pending += partial
        out.append(self._release_partial())
        return "".join(out)

    def finish(self) -> str:
        """The rest once the reply is complete: the held line, cleaned as a whole."""
        return self._end_line()

    def _clean(self, line: str) -> str:
        # Imported here: docqa.llm.calls imports this module for its streaming callback.
        from docqa.llm.calls import strip_prompt_echo

        return strip_prompt_echo(line, self.prompt)

    def _end_line(self) -> str:
        cleaned = self._clean(self._line)
        out = ""
        if self._started:
            out = self._continue(cleaned)
        elif cleaned and not self._diverged:
            out = ("\n" if self._any_line else "") + cleaned
            self._any_line = True
        self._line, self._shown, self._started, self._pending, self._carry = "", "", False, "", ""
        return out

    def _release_partial(self) -> str:
        if self._diverged or not self._line.strip():
            return ""
        if self._started:
            return self._release_continuation()
        cleaned = self._clean(self._line)
        if not self._settled(cleaned):
            return ""
        self._started = True
        prefix = "\n" if self._any_line else ""
        self._any_line = True
        # Spaces at the end are kept back: they are dropped if the line ends there.
        self._carry = self._placeholders_dropped(self._line)
        self._carry = self._carry[len(self._carry.rstrip()):]
        return prefix + self._continue(cleaned)

    def _release_continuation(self) -> str:
        """The kept line's new text with prompt placeholders dropped; an unclosed "<" close to the end (it may
        become a placeholder) and trailing spaces stay back."""
        pending = self._pending
        opened = _OPEN_PLACEHOLDER.search(pending[-_PLACEHOLDER_CHARS:])
        cut = len(pending) - len(pending[-_PLACEHOLDER_CHARS:]) + opened.start() if opened else len(pending)
        # No placeholder spans the cut (none opens within reach of it), so the two sides are cleaned apart.
        out = self._carry + self._placeholders_dropped(pending[:cut])
        released = out.rstrip()
        self._carry, self._pending = out[len(released):], pending[cut:]
        self._shown += released
        return released

    def _placeholders_dropped(self, text: str) -> str:
        from docqa.llm.calls import drop_prompt_placeholders

        return drop_prompt_placeholders(text, self.prompt)

    def _settled(self, cleaned: str) -> bool:
        """Whether no continuation of the line can make its cleaned opening differ from `cleaned`'s."""
        if len(cleaned) < HOLD_CHARS or _OPEN_PLACEHOLDER.search(self._line[-_PLACEHOLDER_CHARS:]):
            return False
        # A stretch of a prompt line may still grow into that whole line (dropped) or a longer instruction echo.
        return not any(cleaned in line for line in self._prompt_lines)

    def _continue(self, cleaned: str) -> str:
        if self._diverged or not cleaned.startswith(self._shown):
            # Cannot happen by the settled rule; if it did, the preview stops rather than show wrong text.
            self._diverged = True
            return ""
        added, self._shown = cleaned[len(self._shown):], cleaned
        return added


class AnswerTokens:
    """Haystack `streaming_callback` of one answer call: chunks in, echo-free text out to the run's sink."""

    def __init__(self, sink: TokenSink, call: int, prompt: str) -> None:
        self.sink, self.call = sink, call
        self.holdback = EchoHoldback(prompt)

    def __call__(self, chunk: Any) -> None:
        text = getattr(chunk, "content", None)
        if text:
            self._send(self.holdback.feed(text))

    def finish(self) -> None:
        """Release what was held back once the reply is complete."""
        self._send(self.holdback.finish())

    def _send(self, text: str) -> None:
        if text:
            self.sink(text, self.call)


def answer_streaming_callback(purpose: str, prompt: str = "") -> AnswerTokens | None:
    """Haystack `streaming_callback` for one LLM call of `purpose` with `prompt`, or None when nobody listens or
    the call does not write the answer."""
    stream = _current.get()
    if stream is None or purpose not in ANSWER_PURPOSES:
        return None
    return AnswerTokens(stream.sink, next(stream.calls), prompt)


def accepts_streaming_callback(generator: Any) -> bool:
    """Whether `generator.run` takes a `streaming_callback` (OpenAIChatGenerator and docqa's role generator do)."""
    try:
        return "streaming_callback" in inspect.signature(generator.run).parameters
    except (TypeError, ValueError):
        return False
