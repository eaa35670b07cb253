"""The steps of a run: what the audit trail persists as its trace.

A run's steps are made from its spans, and from nothing else: docqa's tracer (`docqa.step_tracer`) opens a step
of the run's `StepRecorder` for each step span (`open_step`) and adds each model call's span to its step
(`attach_llm_call`). The recorder's steps become `PipelineResult.steps`. Code that runs no pipeline (a custom
strategy, a test's or a bench's synthetic run) writes a step as a span too: `recorder.step(...)` opens a
`docqa.<kind>` step span recorded by this recorder, and `record_llm_call` is a model call's span.

Usage:
    recorder = StepRecorder()
    with record_steps(recorder):          # docqa.step_tracer
        pipeline.run(data)
    with recorder.step("retrieval", "my_retriever", inputs={"query": q}) as step:
        step.outputs["documents"] = [document_summary(d) for d in docs]
    recorder.steps, recorder.totals()
"""

from __future__ import annotations

import contextvars
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from docqa.result import LLMUsage, Step, Totals
from docqa.run_control import check_run
from docqa.spans import llm_call_span, step_span

T = TypeVar("T")

# Set by `capture_recorders` so a caller can still read the steps of a run that raised (for its audit trace).
_recorder_sink: contextvars.ContextVar[list[StepRecorder] | None] = contextvars.ContextVar(
    "docqa_recorder_sink", default=None
)
_step_listener: contextvars.ContextVar[Callable[[Step], None] | None] = contextvars.ContextVar(
    "docqa_step_listener", default=None
)

# Keys whose values are credentials: never copied into a step (and therefore never into a trace).
SECRET_KEYS = frozenset(
    {"api_key", "apikey", "authorization", "password", "secret", "token", "access_token", "llm_api_key"}
)
MAX_TEXT_CHARS = 20_000


class StepRecorder:
    """Collects the ordered steps of one pipeline run; safe to use from several threads."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self._finished: set[int] = set()
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        sink = _recorder_sink.get()
        if sink is not None:
            sink.append(self)

    @contextmanager
    def step(self, kind: str, name: str, inputs: dict[str, Any] | None = None) -> Iterator[Step]:
        """A step of this recorder written as a span (`docqa.spans.step_span`), under the step span open around it;
        for code that runs no pipeline. Yields the step (its `outputs` may be written)."""
        # The tracer builds on this module, hence the import here.
        from docqa.step_tracer import ensure_step_tracing, record_steps

        ensure_step_tracing()
        with record_steps(self), step_span(kind, name, inputs=inputs) as span:
            step = getattr(span, "step", None)
            yield step if step is not None else Step(index=-1, kind=kind, name=name)

    @contextmanager
    def open_step(self, kind: str, name: str, inputs: dict[str, Any] | None = None,
                  parent: int | None = None) -> Iterator[Step]:
        """Open a step under the step `parent` (docqa's tracer does, for a step span). Errors are recorded and
        re-raised."""
        # Every step boundary is a cancellation point: a stopped run starts no further work.
        check_run()
        with self._lock:
            step = Step(
                index=len(self.steps),
                kind=kind,
                name=name,
                inputs=to_jsonable(inputs or {}),
                started_at=time.time(),
                parent=parent,
            )
            self.steps.append(step)
        start = time.perf_counter()
        try:
            yield step
        except BaseException as exc:
            # Haystack wraps a component's error in PipelineRuntimeError: the step records the component's own.
            if type(exc).__name__ == "PipelineRuntimeError" and exc.__cause__ is not None:
                exc = exc.__cause__
            step.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            with self._lock:
                step.duration_s = time.perf_counter() - start
                step.outputs = to_jsonable(step.outputs)
                self._finished.add(step.index)
            listener = _step_listener.get()
            if listener is not None:
                listener(step)

    def snapshot(self, unfinished_error: str) -> list[Step]:
        """Copies of the steps so far, safe to read while the run goes on in another thread.

        A step still running keeps its inputs and LLM usage so far; its outputs are not read (its thread may be
        writing them) and its error says why it never finished.
        """
        with self._lock:
            return [
                dataclasses.replace(step, outputs=dict(step.outputs), llm=dataclasses.replace(step.llm))
                if step.index in self._finished
                else dataclasses.replace(step, outputs={}, llm=dataclasses.replace(step.llm), error=unfinished_error)
                for step in self.steps
            ]

    def totals(self) -> Totals:
        usage = LLMUsage()
        for step in self.steps:
            usage.add(step.llm)
        return Totals(
            llm_calls=usage.calls,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            wall_time_s=time.perf_counter() - self._started,
        )


@contextmanager
def listen_to_steps(callback: Callable[[Step], None]) -> Iterator[None]:
    """Call `callback(step)` whenever a step finishes in this context (e.g. to stream progress to a client)."""
    token = _step_listener.set(callback)
    try:
        yield
    finally:
        _step_listener.reset(token)


@contextmanager
def capture_recorders() -> Iterator[list[StepRecorder]]:
    """Collect every `StepRecorder` created in this context, e.g. to keep the steps of a failed run."""
    sink: list[StepRecorder] = []
    token = _recorder_sink.set(sink)
    try:
        yield sink
    finally:
        _recorder_sink.reset(token)


_llm_lock = threading.Lock()


def attach_llm_call(
    step: Step, *, prompt: str, response: str, usage: LLMUsage, model: str | None = None,
    extra: dict[str, Any] | None = None,
) -> None:
    """Add one model call (prompt, raw response, usage) to `step`'s `llm_calls` output and its usage."""
    entry = {"prompt": _clip(prompt), "response": _clip(response), "model": model, **(extra or {})}
    entry.update(usage.to_dict())
    with _llm_lock:
        step.llm.add(usage)
        step.outputs.setdefault("llm_calls", []).append(to_jsonable(entry))


def record_llm_call(
    *, prompt: str, response: str, usage: LLMUsage, model: str | None = None, extra: dict[str, Any] | None = None
) -> None:
    """One model call made without `docqa.llm.calls` (e.g. in a synthetic run), as a `docqa.llm.call` span: docqa's
    tracer adds it to the step it runs in, if any."""
    extra = dict(extra or {})
    with llm_call_span(prompt, purpose=extra.get("purpose"), constrained=extra.get("constrained")) as call:
        call.finish(response, model=model, prompt_tokens=usage.prompt_tokens,
                    completion_tokens=usage.completion_tokens)


def run_concurrently(*calls: Callable[[], T], max_workers: int | None = None) -> list[T]:
    """Run callables in threads, each in a copy of the caller's context, so their spans stay in the caller's run
    and step.

    :param max_workers: at most this many at once (default: all of them); results keep the calls' order.
    """
    if len(calls) <= 1 or max_workers == 1:
        return [call() for call in calls]
    workers = len(calls) if max_workers is None else max(1, min(max_workers, len(calls)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(contextvars.copy_context().run, call) for call in calls]
        return [f.result() for f in futures]


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + "…[truncated]"


def document_summary(doc: Any, snippet_chars: int = 300) -> dict[str, Any]:
    """How a retrieved document appears in a step: id, score, source and a snippet (never its embedding)."""
    meta = getattr(doc, "meta", {}) or {}
    content = getattr(doc, "content", None) or ""
    return {
        "id": doc.id,
        "score": getattr(doc, "score", None),
        "source": meta.get("source") or meta.get("title"),
        "snippet": content[:snippet_chars],
    }


def to_jsonable(value: Any, _depth: int = 0) -> Any:
    """Convert step payloads to JSON-safe data, dropping embeddings and credential-named keys."""
    if _depth > 12:
        return repr(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return _clip(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            key = str(k)
            if key.lower() in SECRET_KEYS:
                out[key] = "***"
            elif key in ("embedding", "sparse_embedding"):
                continue
            else:
                out[key] = to_jsonable(v, _depth + 1)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [to_jsonable(v, _depth + 1) for v in value]
    if type(value).__name__ == "Document" and hasattr(value, "id"):
        return document_summary(value)
    if type(value).__name__ == "ChatMessage":
        return {"role": str(value.role.value), "text": _clip(value.text or "")}
    if type(value).__name__ == "SecretStr" or type(value).__name__.endswith("Secret"):
        return "***"
    if hasattr(value, "to_dict"):
        return to_jsonable(value.to_dict(), _depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value), _depth + 1)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return repr(value)
