"""Steps from Haystack's tracer: every component run of a docqa pipeline becomes a `Step` of the current run.

`StepTracer` is a `haystack.tracing.Tracer`. Inside `record_steps(recorder, kinds)` (the strategy adapter opens
it around `Pipeline.run`), each `haystack.component.run` span opens `recorder.step(kind, name)`: the step is
named after the component in the graph, its inputs and outputs are the span's content tags (always recorded,
converted with `to_jsonable`, documents as summaries), and LLM calls made by the component attach to it
because the step is the current one while the span is open. Opening a step is a cancellation point
(`check_run`), exactly as for hand-written steps. Outside `record_steps` the tracer records nothing.

`enable_step_tracing(settings)` installs it once per process; with `DOCQA_OTEL_EXPORTER_OTLP_ENDPOINT` set the
same spans also go to OpenTelemetry (`opentelemetry-haystack`) through a fan-out tracer.

Usage:
    enable_step_tracing(settings)
    recorder = StepRecorder()
    with record_steps(recorder, {"hybrid_retriever": "retrieval"}):
        outputs = pipeline.run(data)
    recorder.steps
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from haystack import tracing
from haystack.tracing import Span, Tracer

from docqa.extractive_fallback import note_passages
from docqa.recording import StepRecorder, to_jsonable
from docqa.result import Step

logger = logging.getLogger(__name__)

COMPONENT_SPAN = "haystack.component.run"
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
    """Record the component runs of pipelines run in this context as steps of `recorder`.

    :param recorder: the run's recorder.
    :param kinds: step kind per component name; others get their component's `step_kind` or "component".
    """
    token = _recording.set(_Recording(recorder, dict(kinds or {})))
    try:
        yield recorder
    finally:
        _recording.reset(token)


class _NullSpan(Span):
    def set_tag(self, key: str, value: Any) -> None:
        return None


class _StepSpan(Span):
    """A component run's span: content tags become the step's inputs and outputs."""

    def __init__(self, step: Step, recorder: StepRecorder) -> None:
        self.step = step
        self.recorder = recorder

    def set_tag(self, key: str, value: Any) -> None:
        return None

    def set_content_tag(self, key: str, value: Any) -> None:
        # Always recorded, whatever HAYSTACK_CONTENT_TRACING_ENABLED says: the audit trail needs them.
        if key == _INPUT_TAG and isinstance(value, Mapping):
            self.step.inputs = to_jsonable(dict(value))
        elif key == _OUTPUT_TAG and isinstance(value, Mapping):
            # LLM calls recorded while the component ran are already in `outputs`; keep them after its outputs.
            # The raw documents, not their summaries: an answer extracted when the model gives none needs the text.
            note_passages(self.recorder, value)
            calls = self.step.outputs.pop("llm_calls", None)
            self.step.outputs.update(to_jsonable(dict(value)))
            if calls is not None:
                self.step.outputs["llm_calls"] = calls

    def raw_span(self) -> Any:
        return self.step


class StepTracer(Tracer):
    """Turns `haystack.component.run` spans into docqa steps of the recorder opened by `record_steps`."""

    def __init__(self) -> None:
        self._current: contextvars.ContextVar[Span | None] = contextvars.ContextVar("docqa_step_span", default=None)

    @contextmanager
    def trace(
        self, operation_name: str, tags: dict[str, Any] | None = None, parent_span: Span | None = None
    ) -> Iterator[Span]:
        recording = _recording.get()
        if recording is None or operation_name != COMPONENT_SPAN:
            yield _NullSpan()
            return
        name = str((tags or {}).get(_NAME_TAG) or "component")
        kind = recording.kinds.get(name, DEFAULT_KIND)
        with recording.recorder.step(kind, name) as step:
            span = _StepSpan(step, recording.recorder)
            token = self._current.set(span)
            try:
                yield span
            finally:
                self._current.reset(token)

    def current_span(self) -> Span | None:
        return self._current.get()


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
    """Sends every span to several tracers (Haystack has one global tracer): docqa's steps and OpenTelemetry."""

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
_installed: Tracer | None = None


def installed_tracer() -> Tracer | None:
    """The tracer `enable_step_tracing` installed in this process, if any."""
    return _installed


def enable_step_tracing(settings: Any = None, *, extra_tracers: list[Tracer] | None = None) -> Tracer:
    """Install docqa's tracer as Haystack's global tracer, once per process; returns it.

    :param settings: with `otel_exporter_otlp_endpoint` set, spans also go to that OTLP HTTP endpoint.
    :param extra_tracers: further tracers to fan out to (e.g. an OpenTelemetry tracer in tests).
    """
    global _installed
    with _enable_lock:
        if _installed is not None and extra_tracers is None:
            return _installed
        tracers: list[Tracer] = [StepTracer()]
        endpoint = getattr(settings, "otel_exporter_otlp_endpoint", None) if settings is not None else None
        if endpoint:
            tracers.append(otel_tracer(endpoint))
        tracers.extend(extra_tracers or [])
        tracer = tracers[0] if len(tracers) == 1 else FanOutTracer(tracers)
        tracing.enable_tracing(tracer)
        _installed = tracer
        return tracer


def otel_tracer(endpoint: str, *, exporter: Any = None, service_name: str = "docqa") -> Tracer:
    """An `opentelemetry-haystack` tracer exporting to an OTLP HTTP endpoint (or to `exporter`, in tests).

    :param endpoint: OTLP HTTP base URL, e.g. `http://otel-collector:4318`; spans go to `<endpoint>/v1/traces`.
    """
    from haystack_integrations.tracing.opentelemetry import OpenTelemetryTracer
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces")))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = OpenTelemetryTracer(provider.get_tracer("docqa"))
    tracer.provider = provider  # type: ignore[attr-defined]  # to flush or shut down
    return tracer
