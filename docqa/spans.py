"""The spans docqa emits beside Haystack's own: steps of a run and model calls, on Haystack's global tracer.

Whatever tracer is installed sees them (docqa's, which makes the audit trail's steps of them, and through it a
host application's tracer or OpenTelemetry). Emitters depend on this vocabulary only, never on the tracer:

- a step that is not a component run (a tree node, a summary, the extractive fallback, the budget stop) is a
  span named `docqa.<kind>` tagged `docqa.step.kind` and `docqa.step.name`; its inputs and outputs are the
  content tags `docqa.step.input` and `docqa.step.output`. A component run (`haystack.component.run`) is a step
  too; docqa's tracer adds the same `docqa.step.*` tags to it, so every step is one span with its name.
- a model call is a `docqa.llm.call` span: the prompt and the response as content tags, the model, the token
  counts (OpenTelemetry's `gen_ai.usage.*` names), its purpose and its duration as tags. docqa's tracer adds it
  to the step it runs in (`llm_calls` of the step's outputs and the step's usage), not as a step of its own.

Usage:
    with step_span("tree_node", "contre_node 0.1", inputs={"sub_question": q}, parent=parent_span) as span:
        span.set_content_tag(STEP_OUTPUT, {"node": node.to_dict()})
    step_index(span)  # the audit trail's index of that step, or None outside a recorded run

    node = OpenStep.open("tree_node", "contre_node 0.1", inputs={"sub_question": q})  # open over later runs
    node.call(judge, passages)                        # work of the step, in a later component run
    node.close({"node": node_dict})

    with llm_call_span(prompt, purpose="answer") as call:
        reply = generator.run(messages=[ChatMessage.from_user(prompt)])["replies"][0]
        call.finish(reply.text, model=reply.meta.get("model"), prompt_tokens=12, completion_tokens=3)
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

from haystack import tracing
from haystack.tracing import Span

COMPONENT_SPAN = "haystack.component.run"
STEP_SPAN_PREFIX = "docqa."
STEP_KIND = "docqa.step.kind"
STEP_NAME = "docqa.step.name"
STEP_INDEX = "docqa.step.index"
STEP_PARENT = "docqa.step.parent"
STEP_INPUT = "docqa.step.input"
STEP_OUTPUT = "docqa.step.output"

LLM_CALL_SPAN = "docqa.llm.call"
LLM_PURPOSE = "docqa.llm.purpose"
LLM_CONSTRAINED = "docqa.llm.constrained"
LLM_MODEL = "gen_ai.response.model"
LLM_OPERATION = "gen_ai.operation.name"
LLM_PROMPT_TOKENS = "gen_ai.usage.input_tokens"
LLM_COMPLETION_TOKENS = "gen_ai.usage.output_tokens"
LLM_DURATION = "docqa.llm.duration_s"
LLM_PROMPT = "docqa.llm.prompt"
LLM_RESPONSE = "docqa.llm.response"

# Set while a `llm_call_span` is open in this context: a generator that traces its own calls (RoleChatGenerator)
# then leaves the span to the caller that opened it, so one call is one span.
_call_open: contextvars.ContextVar[bool] = contextvars.ContextVar("docqa_llm_call_open", default=False)


@contextmanager
def step_span(kind: str, name: str, inputs: Mapping[str, Any] | None = None,
              parent: Span | None = None) -> Iterator[Span]:
    """A step of the current run as a span (see the module docstring).

    :param kind: the step kind ("tree_node", "summary", "fallback", ...); the span is named `docqa.<kind>`.
    :param name: the step's name in the audit trail.
    :param inputs: the step's inputs (a content tag).
    :param parent: the parent step's span, when it is not the span open in this context (a tree's parent node).
    """
    with tracing.tracer.trace(f"{STEP_SPAN_PREFIX}{kind}", tags={STEP_KIND: kind, STEP_NAME: name},
                              parent_span=parent) as span:
        if inputs is not None:
            span.set_content_tag(STEP_INPUT, dict(inputs))
        yield span


T = TypeVar("T")


class OpenStep:
    """A step span held open across component runs: e.g. a tree node's, from its verification to its plan, over
    the graph's retrieval of its query in between. The tracer closes a span in the context it was opened in, so
    that context is kept with it, and the step's later work is called in it (its model calls are then spans
    under it, as in a `with step_span(...)` block).

    A handle, not data: a copy (Haystack copies what one component run hands the next) is the same step. A run
    that fails before `close` leaves the step unfinished, like any step a stopped run did not finish.
    """

    def __init__(self, context: contextvars.Context, stack: ExitStack, span: Span) -> None:
        self._context = context
        self._stack = stack
        self.span = span

    def __deepcopy__(self, memo: dict[int, Any]) -> OpenStep:
        return self

    @classmethod
    def open(cls, kind: str, name: str, inputs: Mapping[str, Any] | None = None,
             parent: Span | None = None) -> OpenStep:
        """Open a step span (see `step_span`) in a copy of the current context, and leave it open."""
        context = contextvars.copy_context()
        return context.run(cls._open, context, kind, name, inputs, parent)

    @classmethod
    def _open(cls, context: contextvars.Context, kind: str, name: str, inputs: Mapping[str, Any] | None,
              parent: Span | None) -> OpenStep:
        with ExitStack() as stack:
            span = stack.enter_context(step_span(kind, name, inputs=inputs, parent=parent))
            return cls(context, stack.pop_all(), span)

    def call(self, work: Callable[..., T], *args: Any) -> T:
        """Do work of the step, in its context (one thread at a time)."""
        return self._context.run(work, *args)

    def close(self, outputs: Mapping[str, Any], error: BaseException | None = None) -> None:
        """Set the step's outputs and close its span; `error` is what ended it, recorded on the step."""

        def close() -> None:
            self.span.set_content_tag(STEP_OUTPUT, dict(outputs))
            if error is None:
                self._stack.close()
            else:
                self._stack.__exit__(type(error), error, error.__traceback__)

        self._context.run(close)

    def finish(self, work: Callable[..., T], outputs: Callable[[], Mapping[str, Any]], *args: Any) -> T:
        """Do the step's last work in its context, then set its `outputs()` and close it (with the error of
        `work` when it raised)."""
        try:
            result = self.call(work, *args)
        except BaseException as exc:
            self.close(outputs(), error=exc)
            raise
        self.close(outputs())
        return result


def step_index(span: Span | None) -> int | None:
    """The audit trail's index of the step `span` opened (docqa's tracer says so in the span's log correlation
    data), or None when no run is recorded."""
    if span is None:
        return None
    index = span.get_correlation_data_for_logs().get(STEP_INDEX)
    return index if isinstance(index, int) else None


class LLMCall:
    """The open span of one model call; `finish` sets what the reply says."""

    def __init__(self, span: Span) -> None:
        self.span = span
        self._started = time.perf_counter()

    def finish(self, response: str, *, model: str | None, prompt_tokens: int, completion_tokens: int) -> None:
        tags: dict[str, Any] = {LLM_PROMPT_TOKENS: prompt_tokens, LLM_COMPLETION_TOKENS: completion_tokens,
                                LLM_DURATION: round(time.perf_counter() - self._started, 6)}
        if model is not None:
            tags[LLM_MODEL] = model
        self.span.set_tags(tags)
        self.span.set_content_tag(LLM_RESPONSE, response)


@contextmanager
def llm_call_span(prompt: str, *, purpose: str | None, constrained: bool | None = False) -> Iterator[LLMCall]:
    """One model call as a span (see the module docstring); call `finish` with the reply.

    :param purpose: what the call is for ("answer", "contre_plan[0]" ...); None leaves it out.
    :param constrained: whether its output was constrained by a schema; None leaves it out.
    """
    tags: dict[str, Any] = {LLM_OPERATION: "chat"}
    if purpose is not None:
        tags[LLM_PURPOSE] = purpose
    if constrained is not None:
        tags[LLM_CONSTRAINED] = constrained
    with tracing.tracer.trace(LLM_CALL_SPAN, tags=tags) as span:
        span.set_content_tag(LLM_PROMPT, prompt)
        token = _call_open.set(True)
        try:
            yield LLMCall(span)
        finally:
            _call_open.reset(token)


def llm_call_open() -> bool:
    """Whether a model call's span is open in this context (its caller traces it)."""
    return _call_open.get()
