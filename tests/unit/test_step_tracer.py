"""docqa's Haystack tracer: step spans become steps, and every span goes on to the host's tracer and OpenTelemetry."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from haystack import Pipeline, component, tracing
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from docqa.access import AccessScope
from docqa.components.prompt_templates import load_prompt
from docqa.pipelines.baselines import NoRetrievalPipeline
from docqa.recording import StepRecorder
from docqa.settings import Settings
from docqa.step_tracer import DocqaTracer, enable_step_tracing, otel_tracer, record_steps
from tests.support.scripted_chat import ScriptedChatGenerator

ALICE = AccessScope("acme", frozenset({"alice"}))


@component
class Double:
    @component.output_types(value=int)
    def run(self, value: int) -> dict:
        return {"value": value * 2}


@pytest.fixture
def restore_tracer():
    yield
    enable_step_tracing(forward_to=[])


def _pipeline() -> Pipeline:
    pipeline = Pipeline()
    pipeline.add_component("first", Double())
    pipeline.add_component("second", Double())
    pipeline.connect("first.value", "second.value")
    return pipeline


class TestStepTracer:
    def test_component_runs_become_steps_only_inside_record_steps(self, restore_tracer):
        enable_step_tracing(forward_to=[])
        assert isinstance(tracing.tracer.actual_tracer, DocqaTracer)
        pipeline = _pipeline()
        recorder = StepRecorder()
        with record_steps(recorder, {"first": "arithmetic"}):
            assert pipeline.run({"first": {"value": 3}}) == {"second": {"value": 12}}
        assert [(s.kind, s.name, s.inputs, s.outputs) for s in recorder.steps] == [
            ("arithmetic", "first", {"value": 3}, {"value": 6}),
            ("component", "second", {"value": 6}, {"value": 12}),
        ]
        pipeline.run({"first": {"value": 1}})
        assert len(recorder.steps) == 2


class TestOpenTelemetry:
    def test_every_component_run_is_also_a_span(self, restore_tracer):
        exporter = InMemorySpanExporter()
        enable_step_tracing(forward_to=[otel_tracer("", exporter=exporter)])
        assert isinstance(tracing.tracer.actual_tracer, DocqaTracer)
        strategy = NoRetrievalPipeline(ScriptedChatGenerator(default="Paris"),
                                       prompt_template=load_prompt("no_retrieval_answer"), max_tokens=8,
                                       max_question_chars=100, model="scripted")
        result = strategy.run("Capital of France?", ALICE)

        assert result.steps[-1].name == "grounding"
        finished = exporter.get_finished_spans()
        assert {span.name for span in finished} == {"docqa.strategy.run", "haystack.pipeline.run",
                                                    "haystack.component.run", "docqa.llm.call"}
        component_spans = sorted((span for span in finished if span.name == "haystack.component.run"),
                                 key=lambda span: span.start_time)
        assert [s.attributes["haystack.component.name"] for s in component_spans] == [s.name for s in result.steps]
        run_span = next(span for span in finished if span.name == "docqa.strategy.run")
        graph_span = next(span for span in finished if span.name == "haystack.pipeline.run"
                          and span.parent.span_id == run_span.context.span_id)
        assert [s.attributes["haystack.component.name"] for s in component_spans
                if s.parent.span_id == graph_span.context.span_id] == [s.name for s in result.steps if s.parent is None]

    def test_spans_reach_an_otlp_http_receiver_on_loopback(self, restore_tracer):
        received: list[str] = []
        spans: list[tuple[str, dict[str, str]]] = []

        class Receiver(BaseHTTPRequestHandler):
            def do_POST(self):
                request = ExportTraceServiceRequest.FromString(self.rfile.read(int(self.headers["Content-Length"])))
                received.append(self.path)
                spans.extend((span.name, {a.key: a.value.string_value for a in span.attributes})
                             for resource in request.resource_spans for scope in resource.scope_spans
                             for span in scope.spans)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        server = HTTPServer(("127.0.0.1", 0), Receiver)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            settings = Settings(otel_exporter_otlp_endpoint=f"http://127.0.0.1:{server.server_port}")
            tracer = enable_step_tracing(settings, forward_to=[])
            assert isinstance(tracer, DocqaTracer)
            _pipeline().run({"first": {"value": 1}})
            tracer.delegate.provider.force_flush()
            assert received and set(received) == {"/v1/traces"}
            # The OTLP protobuf as exported: one span per component run, named after the component in the graph.
            assert sorted(attrs["haystack.component.name"] for name, attrs in spans
                          if name == "haystack.component.run") == ["first", "second"]
            assert [name for name, _ in spans].count("haystack.pipeline.run") == 1
        finally:
            tracer.delegate.provider.shutdown()
            server.shutdown()
