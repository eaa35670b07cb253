"""docqa's Haystack tracer: the audit trail's steps are made from spans, and every span goes on to the host's tracer.

`DocqaTracer` is Haystack's global tracer, installed once per process by `enable_step_tracing` (server, CLI and
evaluation start). It wraps the tracer that was installed before it (a host application's) and, with
`DOCQA_OTEL_EXPORTER_OTLP_ENDPOINT` set, an OpenTelemetry tracer: every span is forwarded to them, whether or not
a run is recorded. Inside `record_steps(recorder, kinds)` (the strategy adapter opens it around `Pipeline.run`):
- each step span becomes a `Step` of `recorder`: a component run (`haystack.component.run`, named after the
  component in the graph, its kind from `kinds`) and each `docqa.<kind>` span of `docqa.spans.step_span` (tree
  nodes, summaries, the extractive fallback ...). Its inputs and outputs are the span's content tags (always
  recorded, converted with `to_jsonable`); its parent is the step of the parent span; opening it is a
  cancellation point (`check_run`). The forwarded span gets the step's kind, name, index and parent as tags, so
  OpenTelemetry sees one span per step, with the step's name.
- each model call (`docqa.llm.call`) is added to the step it runs in: prompt, response, model, purpose and token
  counts in the step's `llm_calls` output, the usage in the step's totals.
The recording and the current span live in context variables: runs on several threads keep their steps apart,
and work a run hands to threads (`run_concurrently`) stays in its run.

Usage:
    enable_step_tracing(settings)                  # once, at start
    recorder = StepRecorder()
    with record_steps(recorder, {"hybrid_retriever": "retrieval"}):
        outputs = pipeline.run(data)
    recorder.steps
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from haystack import tracing
from haystack.tracing import Span, Tracer
from haystack.tracing.tracer import NullTracer

from docqa import spans as names
from docqa.recording import StepRecorder, attach_llm_call, to_jsonable
from docqa.result import LLMUsage, Step

logger = logging.getLogger(__name__)

COMPONENT_SPAN = names.COMPONENT_SPAN
_NAME_TAG = "haystack.component.name"
_INPUT_TAG = "haystack.component.input"
_OUTPUT_TAG = "haystack.component.output"
DEFAULT_KIND = "component"


@dataclass(frozen=True)
class _Recording:
    recorder: StepRecorder
    kinds: Mapping[str, str]


_recording: contextvars.ContextVar[_Recording | None] = contextvars.ContextVar("docqa_step_tracing", default=None)


@contextmanager
def record_steps(recorder: StepRecorder, kinds: Mapping[str, str] | None = None) -> Iterator[StepRecorder]:
    """Record the step spans opened in this context as steps of `recorder`.

    :param recorder: the run's recorder.
    :param kinds: step kind per component name; other components' steps are of kind "component".
    """
    token = _recording.set(_Recording(recorder, dict(kinds or {})))
    try:
        yield recorder
    finally:
        _recording.reset(token)


_untraced: contextvars.ContextVar[bool] = contextvars.ContextVar("docqa_untraced", default=False)


@contextmanager
def untraced() -> Iterator[None]:
    """Neither record nor forward the spans opened in this context: work that is part of a run's trace only
    when it decides the answer (the strategy adapter then emits its step), so that what OpenTelemetry sees and
    the audit trail's steps stay one and the same."""
    token = _untraced.set(True)
    try:
        yield
    finally:
        _untraced.reset(token)


class _NullSpan(Span):
    def set_tag(self, key: str, value: Any) -> None:
        return None


class DocqaSpan(Span):
    """A span as docqa sees it: the forwarded span, and the step it opened or the model call it records."""

    def __init__(self, forwarded: Span | None, *, recorder: StepRecorder | None = None, step: Step | None = None,
                 enclosing: DocqaSpan | None = None, llm_call: bool = False) -> None:
        self.forwarded = forwarded
        self.recorder = recorder
        self.step = step
        # The step this span runs in: its own, else its parent's.
        self.in_step: Step | None = step if step is not None else (enclosing.in_step if enclosing else None)
        self.in_recorder = recorder if step is not None else (enclosing.in_recorder if enclosing else None)
        self.llm_call = llm_call
        self.tags: dict[str, Any] = {}

    def set_tag(self, key: str, value: Any) -> None:
        if self.llm_call:
            self.tags[key] = value
        if self.forwarded is not None:
            self.forwarded.set_tag(key, value)

    def set_content_tag(self, key: str, value: Any) -> None:
        # Recorded whatever HAYSTACK_CONTENT_TRACING_ENABLED says: the audit trail needs them. Forwarded spans
        # follow the flag.
        if self.step is not None:
            self._record_content(key, value)
        elif self.llm_call:
            self.tags[key] = value
        if self.forwarded is not None:
            self.forwarded.set_content_tag(key, value)

    def _record_content(self, key: str, value: Any) -> None:
        assert self.step is not None
        if key in (_INPUT_TAG, names.STEP_INPUT) and isinstance(value, Mapping):
            self.step.inputs = to_jsonable(dict(value))
        elif key in (_OUTPUT_TAG, names.STEP_OUTPUT) and isinstance(value, Mapping):
            # Model calls made during the step are already in `outputs`; keep them after the step's own outputs.
            calls = self.step.outputs.pop("llm_calls", None)
            self.step.outputs.update(to_jsonable(dict(value)))
            if calls is not None:
                self.step.outputs["llm_calls"] = calls

    def raw_span(self) -> Any:
        return self.forwarded.raw_span() if self.forwarded is not None else None

    def get_correlation_data_for_logs(self) -> dict[str, Any]:
        data = dict(self.forwarded.get_correlation_data_for_logs()) if self.forwarded is not None else {}
        if self.step is not None:
            data[names.STEP_INDEX] = self.step.index
        return data


def _step_of(operation_name: str, tags: Mapping[str, Any], kinds: Mapping[str, str]) -> tuple[str, str] | None:
    """(kind, name) when the span is a step of a recorded run."""
    if operation_name == COMPONENT_SPAN:
        name = str(tags.get(_NAME_TAG) or "component")
        return kinds.get(name, DEFAULT_KIND), name
    if operation_name.startswith(names.STEP_SPAN_PREFIX) and names.STEP_NAME in tags:
        return str(tags.get(names.STEP_KIND) or DEFAULT_KIND), str(tags[names.STEP_NAME])
    return None


class DocqaTracer(Tracer):
    """Makes steps of a recorded run's spans (see the module docstring) and forwards every span to `delegate`.

    :param delegate: the tracer spans go on to (the host's, OpenTelemetry, or a `FanOutTracer` of several).
    :param host: the tracer that was Haystack's global tracer before this one (among those `delegate` reaches).
    """

    def __init__(self, delegate: Tracer | None = None, *, host: Tracer | None = None) -> None:
        self.delegate = delegate
        self.host = host
        self._current: contextvars.ContextVar[DocqaSpan | None] = contextvars.ContextVar(
            "docqa_current_span", default=None)

    @contextmanager
    def trace(
        self, operation_name: str, tags: dict[str, Any] | None = None, parent_span: Span | None = None
    ) -> Iterator[Span]:
        if _untraced.get():
            yield _NullSpan()
            return
        tags = dict(tags or {})
        enclosing = parent_span if isinstance(parent_span, DocqaSpan) else self._current.get()
        forwarded_parent = enclosing.forwarded if isinstance(parent_span, DocqaSpan) else parent_span
        with contextlib.ExitStack() as stack:
            forwarded = None
            if self.delegate is not None:
                forwarded = stack.enter_context(
                    self.delegate.trace(operation_name, tags=tags, parent_span=forwarded_parent))
            recording = _recording.get()
            step_of = _step_of(operation_name, tags, recording.kinds) if recording is not None else None
            if recording is not None and step_of is not None:
                kind, name = step_of
                parent = enclosing.in_step if enclosing and enclosing.in_recorder is recording.recorder else None
                step = stack.enter_context(recording.recorder.open_step(
                    kind, name, parent=parent.index if parent is not None else None))
                span = DocqaSpan(forwarded, recorder=recording.recorder, step=step, enclosing=enclosing)
                if forwarded is not None:
                    forwarded.set_tags({names.STEP_KIND: kind, names.STEP_NAME: name, names.STEP_INDEX: step.index,
                                        names.STEP_PARENT: step.parent if step.parent is not None else -1})
            else:
                span = DocqaSpan(forwarded, enclosing=enclosing, llm_call=operation_name == names.LLM_CALL_SPAN)
                if span.llm_call:
                    span.tags.update(tags)
            token = self._current.set(span)
            try:
                yield span
            finally:
                self._current.reset(token)
            # Reached only when the span's work succeeded: a failed model call adds nothing to its step.
            if span.llm_call and span.in_step is not None and names.LLM_RESPONSE in span.tags:
                _attach(span.in_step, span.tags)

    def current_span(self) -> Span | None:
        return self._current.get()


def _attach(step: Step, tags: Mapping[str, Any]) -> None:
    prompt_tokens = int(tags.get(names.LLM_PROMPT_TOKENS) or 0)
    completion_tokens = int(tags.get(names.LLM_COMPLETION_TOKENS) or 0)
    attach_llm_call(
        step,
        prompt=str(tags.get(names.LLM_PROMPT) or ""),
        response=str(tags.get(names.LLM_RESPONSE) or ""),
        usage=LLMUsage(calls=1, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
        model=tags.get(names.LLM_MODEL),
        extra={key: tags[tag] for key, tag in (("purpose", names.LLM_PURPOSE), ("constrained", names.LLM_CONSTRAINED))
               if tag in tags},
    )


class _FanOutSpan(Span):
    def __init__(self, spans: list[Span]) -> None:
        self.spans = spans

    def set_tag(self, key: str, value: Any) -> None:
        for span in self.spans:
            span.set_tag(key, value)

    def set_content_tag(self, key: str, value: Any) -> None:
        for span in self.spans:
            span.set_content_tag(key, value)

    def raw_span(self) -> Any:
        return self.spans[0].raw_span()

    def get_correlation_data_for_logs(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for span in self.spans:
            data.update(span.get_correlation_data_for_logs())
        return data


class FanOutTracer(Tracer):
    """Sends every span to several tracers (Haystack has one global tracer), e.g. a host's and OpenTelemetry."""

    def __init__(self, tracers: list[Tracer]) -> None:
        if not tracers:
            raise ValueError("FanOutTracer needs at least one tracer")
        self.tracers = tracers
        self._current: contextvars.ContextVar[Span | None] = contextvars.ContextVar("docqa_fanout_span", default=None)

    @contextmanager
    def trace(
        self, operation_name: str, tags: dict[str, Any] | None = None, parent_span: Span | None = None
    ) -> Iterator[Span]:
        parents = parent_span.spans if isinstance(parent_span, _FanOutSpan) else [None] * len(self.tracers)
        with contextlib.ExitStack() as stack:
            spans = [
                stack.enter_context(tracer.trace(operation_name, tags=tags, parent_span=parent))
                for tracer, parent in zip(self.tracers, parents, strict=True)
            ]
            span = _FanOutSpan(spans)
            token = self._current.set(span)
            try:
                yield span
            finally:
                self._current.reset(token)

    def current_span(self) -> Span | None:
        return self._current.get()


_enable_lock = threading.Lock()
_settings: Any = None  # those of the last install, for `ensure_step_tracing`


def installed_tracer() -> DocqaTracer | None:
    """docqa's tracer when it is Haystack's global tracer."""
    actual = tracing.tracer.actual_tracer
    return actual if isinstance(actual, DocqaTracer) else None


def enable_step_tracing(settings: Any = None, *, forward_to: list[Tracer] | None = None) -> DocqaTracer:
    """Install docqa's tracer as Haystack's global tracer, once per process; returns it.

    It forwards to the tracer installed before it (a host application's), to OpenTelemetry when `settings` has
    `otel_exporter_otlp_endpoint`, and to `forward_to`. Called again, it returns the installed tracer unchanged,
    unless `forward_to` is given (then it is built again, still forwarding to the host's tracer).
    """
    global _settings
    with _enable_lock:
        installed = installed_tracer()
        if installed is not None and forward_to is None:
            return installed
        _settings = settings
        host = installed.host if installed is not None else tracing.tracer.actual_tracer
        host = None if isinstance(host, NullTracer) else host
        tracers: list[Tracer] = [] if host is None else [host]
        endpoint = getattr(settings, "otel_exporter_otlp_endpoint", None) if settings is not None else None
        if endpoint:
            tracers.append(otel_tracer(endpoint))
        tracers.extend(forward_to or [])
        delegate = None if not tracers else tracers[0] if len(tracers) == 1 else FanOutTracer(tracers)
        tracer = DocqaTracer(delegate, host=host)
        tracing.enable_tracing(tracer)
        return tracer


def ensure_step_tracing() -> DocqaTracer:
    """docqa's tracer, installed now if something replaced it (or nothing installed it): then it forwards to what
    is there, so a host's tracer keeps every span and the run still has its steps."""
    installed = installed_tracer()
    if installed is not None:
        return installed
    if tracing.is_tracing_enabled():
        logger.warning("Haystack's tracer was replaced after docqa installed its own; docqa now forwards to it")
    return enable_step_tracing(_settings)


def otel_tracer(endpoint: str, *, exporter: Any = None, service_name: str = "docqa") -> Tracer:
    """An OpenTelemetry tracer exporting to an OTLP HTTP endpoint (or to `exporter`, e.g. in tests).

    :param endpoint: OTLP HTTP base URL, e.g. `http://otel-collector:4318`; spans go to `<endpoint>/v1/traces`.
    """
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = _parented_tracer_class()(provider.get_tracer("docqa"))
    tracer.provider = provider  # type: ignore[attr-defined]  # to flush or shut down
    return tracer


@functools.cache
def _parented_tracer_class() -> type[Tracer]:
    from haystack_integrations.tracing.opentelemetry import OpenTelemetryTracer
    from haystack_integrations.tracing.opentelemetry.tracer import OpenTelemetrySpan
    from opentelemetry import trace as otel_trace

    class ParentedOpenTelemetryTracer(OpenTelemetryTracer):
        """`opentelemetry-haystack`'s tracer, honouring `parent_span`: a tree node's span is its parent node's
        child, not the child of whatever span is current on the thread that expands it."""

        @contextmanager
        def trace(self, operation_name: str, tags: dict[str, Any] | None = None,
                  parent_span: Span | None = None) -> Iterator[Span]:
            raw = parent_span.raw_span() if parent_span is not None else None
            context = otel_trace.set_span_in_context(raw) if isinstance(raw, otel_trace.Span) else None
            with self._tracer.start_as_current_span(operation_name, context=context) as raw_span:
                span = OpenTelemetrySpan(raw_span)
                if tags:
                    span.set_tags(tags)
                yield span

    return ParentedOpenTelemetryTracer
