"""Every step a span: OpenTelemetry sees one span per step of the audit trail (same count, same names, same tree)
and one span per model call, for ReSP and ConTReGen with a scripted LLM; the tracer forwards to a host's tracer
instead of replacing it, and runs on several threads keep their steps apart."""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from haystack import Document, Pipeline, component, tracing
from haystack.dataclasses import ChatMessage
from haystack.tracing import Span, Tracer
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from docqa.access import AccessScope
from docqa.components.contre_tree_expander import ConTReTreeExpander
from docqa.components.contregen_synthesizer import ConTReGenSynthesizer
from docqa.llm.calls import generate_text
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines.contregen import ConTReGenPipeline
from docqa.pipelines.registry import build_pipeline
from docqa.recording import StepRecorder
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.spans import LLM_CALL_SPAN, STEP_INDEX, STEP_NAME, STEP_PARENT, OpenStep, step_span
from docqa.step_tracer import DocqaTracer, enable_step_tracing, installed_tracer, otel_tracer, record_steps
from docqa.stores.factory import build_document_store
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder
from tests.support.resp_fakes import GENERATE, GLOBAL, JUDGE, PLAN, KeywordRetriever, build, doc
from tests.support.scripted_chat import ScriptedChatGenerator

ALICE = AccessScope("acme", frozenset({"alice"}))


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    before = tracing.tracer.actual_tracer
    spans = InMemorySpanExporter()
    enable_step_tracing(forward_to=[otel_tracer("", exporter=spans)])
    yield spans
    tracing.enable_tracing(before)


def _resp() -> Any:
    retriever = KeywordRetriever([
        doc("tf", "Twisted Fortune is a 1997 film directed by Lena Hart.", "Twisted Fortune"),
        doc("lh", "Lena Hart is an American film director born in Ohio.", "Lena Hart"),
    ])
    llm = ScriptedChatGenerator(rules=[
        (JUDGE, ['{"answer": "No"}', '{"answer": "Yes"}']),
        (PLAN, "Where was Lena Hart born?"),
        (GLOBAL, "Twisted Fortune was directed by Lena Hart, an American director. [DONE]"),
        (GENERATE, "American"),
    ], default="Lena Hart is American.")
    return build(llm, retriever), "What nationality is the director of Twisted Fortune?"


def _contregen() -> Any:
    retriever = KeywordRetriever([
        doc("storm", "The storm hit the harbour town at night and flooded the docks.", "Storm"),
        doc("boats", "Fishing boats were wrecked when storm waves broke over the harbour wall.", "Boats"),
        doc("mayor", "The mayor opened shelters in the school after the storm flooded the town.", "Mayor"),
    ], top_k=1)

    def verify(prompt: str) -> str:
        sub_question = re.search(r"^Sub-question: (.*)$", prompt, re.MULTILINE)
        return json.dumps({"needed": "Yes", "query": sub_question.group(1) if sub_question else ""})

    def relevance(prompt: str) -> str:
        return json.dumps({"relevant": [int(n) for n in re.findall(r"^\[(\d+)\]", prompt, re.MULTILINE)]})

    llm = ScriptedChatGenerator(rules=[
        (r"You plan the research", ['{"sub_questions": ["How were the boats damaged?", "What did the mayor do?"]}',
                                    '{"sub_questions": []}']),
        (r"Decide whether a sub-question is needed", verify),
        (r"Which of the numbered passages", relevance),
        (r"Summarise what the numbered passages", "The storm wrecked boats [1]."),
        (r"Write a complete, detailed answer", "The storm flooded the town [1].\n\nThe mayor opened shelters [3]."),
    ])
    expander = ConTReTreeExpander(llm, max_depth=1, max_breadth=3, concurrency=2)
    strategy = ConTReGenPipeline(retriever, expander, ConTReGenSynthesizer(llm, concurrency=2), top_k=1,
                                 max_question_chars=500)
    return strategy, "What happened to the harbour town during the storm?"


def _step_spans(finished: list[Any]) -> list[Any]:
    return sorted((s for s in finished if STEP_NAME in s.attributes), key=lambda s: s.attributes[STEP_INDEX])


def _step_above(span: Any, finished: list[Any]) -> int | None:
    by_id = {s.context.span_id: s for s in finished}
    parent = by_id.get(span.parent.span_id) if span.parent is not None else None
    while parent is not None and STEP_NAME not in parent.attributes:
        parent = by_id.get(parent.parent.span_id) if parent.parent is not None else None
    return parent.attributes[STEP_INDEX] if parent is not None else None


@pytest.mark.parametrize("make", [_resp, _contregen], ids=["resp", "contregen"])
def test_opentelemetry_sees_one_span_per_step_and_per_model_call(exporter, monkeypatch, make) -> None:
    monkeypatch.setattr(tracing.tracer, "is_content_tracing_enabled", True)
    strategy, question = make()
    result = strategy.run(question, ALICE)

    finished = exporter.get_finished_spans()
    steps = _step_spans(finished)
    assert [s.attributes[STEP_NAME] for s in steps] == [step.name for step in result.steps]
    assert [s.attributes[STEP_INDEX] for s in steps] == [step.index for step in result.steps]
    # The span tree is the step tree: the nearest step span above a step's span is its parent step's (between
    # them may be a nested graph's haystack.pipeline.run).
    span_of = {s.attributes[STEP_INDEX]: s for s in steps}
    for step in result.steps:
        assert _step_above(span_of[step.index], finished) == step.parent
        assert span_of[step.index].attributes[STEP_PARENT] == (-1 if step.parent is None else step.parent)
    # One trace per run, and no component run outside the steps (the readable-passages count is not one here).
    assert len({s.context.trace_id for s in finished}) == 1
    assert all(STEP_NAME in s.attributes for s in finished if s.name == "haystack.component.run")

    calls = [s for s in finished if s.name == LLM_CALL_SPAN]
    recorded = [call for step in result.steps for call in step.outputs.get("llm_calls", [])]
    assert len(calls) == len(recorded) == result.totals.llm_calls > 0
    assert sorted(s.attributes["docqa.llm.prompt"] for s in calls) == sorted(c["prompt"] for c in recorded)
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in calls) == result.totals.prompt_tokens
    assert sum(s.attributes["gen_ai.usage.output_tokens"] for s in calls) == result.totals.completion_tokens
    assert {s.attributes["gen_ai.response.model"] for s in calls} == {"scripted"}
    # A model call's span is a child of the span of the step it is recorded on.
    step_of_span = {s.context.span_id: s.attributes[STEP_INDEX] for s in steps}
    owners = [step_of_span[call.parent.span_id] for call in calls]
    assert Counter(owners) == Counter({step.index: len(step.outputs["llm_calls"]) for step in result.steps
                                       if step.outputs.get("llm_calls")})
    for call, owner in zip(calls, owners, strict=True):
        assert call.attributes["docqa.llm.prompt"] in [c["prompt"] for c in result.steps[owner].outputs["llm_calls"]]


def test_contregen_tree_nodes_and_summaries_are_spans(exporter) -> None:
    strategy, question = _contregen()
    result = strategy.run(question, ALICE)

    names = [s.name for s in _step_spans(exporter.get_finished_spans())]
    assert names.count("docqa.tree_node") == 3 and names.count("docqa.summary") == 2
    by_name = {step.name: step for step in result.steps}
    assert by_name["contre_node 0.1"].parent == by_name["contre_node 0"].index
    assert by_name["contre_node 0"].outputs["node"]["step"] == by_name["contre_node 0"].index


def test_a_step_held_open_across_runs_is_one_span_and_its_later_work_is_under_it(exporter) -> None:
    recorder = StepRecorder()
    with record_steps(recorder), tracing.tracer.trace("run"):
        held = OpenStep.open("tree_node", "held", inputs={"q": 1})
        with step_span("control", "between"):  # another step while it is open is not under it
            pass

        def later() -> str:
            with step_span("summary", "inner"):
                return "done"

        assert held.finish(later, lambda: {"done": True}) == "done"
        failing = OpenStep.open("tree_node", "failing", parent=held.span)

        def fail() -> None:
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            failing.finish(fail, lambda: {"done": False})

    steps = {step.name: step for step in recorder.steps}
    assert (steps["held"].parent, steps["between"].parent) == (None, None)
    assert steps["inner"].parent == steps["held"].index and steps["failing"].parent == steps["held"].index
    assert steps["held"].outputs == {"done": True} and steps["held"].duration_s is not None
    assert steps["failing"].error == "RuntimeError: boom" and steps["failing"].outputs == {"done": False}
    spans = _step_spans(exporter.get_finished_spans())
    assert [s.attributes[STEP_NAME] for s in spans] == [step.name for step in recorder.steps]
    assert [s.attributes[STEP_PARENT] for s in spans] == [-1, -1, 0, 0]


class _HashRuntime(Runtime):
    def text_embedder(self) -> Any:
        return HashTextEmbedder()


def test_an_answer_without_readable_passages_is_one_step_and_one_span(exporter, tmp_path) -> None:
    settings = Settings(data_dir=tmp_path)
    store = build_document_store(settings)
    payroll = Document(id="pay", content="Payroll of the harbour town.", meta={"tenant": "acme", "access": ["finance"]})
    store.write_documents(HashDocumentEmbedder().run(documents=[payroll])["documents"])
    runtime = _HashRuntime(settings, document_store=store, chat_generator_factory=lambda _: ScriptedChatGenerator())
    result = build_pipeline("standard", runtime).run("What is the payroll of the harbour town?", ALICE)

    assert result.answer_source == "none"
    assert [(s.kind, s.name, s.outputs) for s in result.steps] == [
        ("access", "readable_passages", {"readable": False})]
    finished = exporter.get_finished_spans()
    assert [s.attributes[STEP_NAME] for s in _step_spans(finished)] == ["readable_passages"]
    assert "haystack.component.run" not in {s.name for s in finished}


class HostTracer(Tracer):
    """A host application's tracer: it only counts the spans it is given."""

    def __init__(self) -> None:
        self.operations: list[str] = []

    @contextmanager
    def trace(self, operation_name: str, tags: dict[str, Any] | None = None,
              parent_span: Span | None = None) -> Iterator[Span]:
        self.operations.append(operation_name)
        yield _HostSpan()

    def current_span(self) -> Span | None:
        return None


class _HostSpan(Span):
    def set_tag(self, key: str, value: Any) -> None:
        return None


def test_a_hosts_tracer_keeps_every_span_and_is_wrapped_once() -> None:
    before = tracing.tracer.actual_tracer
    host = HostTracer()
    try:
        tracing.enable_tracing(host)
        strategy, question = _resp()
        first = strategy.run(question, ALICE)
        docqa_tracer = installed_tracer()
        assert isinstance(docqa_tracer, DocqaTracer) and docqa_tracer.host is host
        second = strategy.run(question, ALICE)

        assert installed_tracer() is docqa_tracer  # installed once, not per run
        step_spans = [op for op in host.operations if op == "haystack.component.run" or (
            op.startswith("docqa.") and op not in ("docqa.strategy.run", LLM_CALL_SPAN))]
        assert len(step_spans) == len(first.steps) + len(second.steps) > 0
        assert host.operations.count(LLM_CALL_SPAN) == first.totals.llm_calls + second.totals.llm_calls
        assert host.operations.count("docqa.strategy.run") == 2
    finally:
        tracing.enable_tracing(before)


@component
class Wait:
    """Meets the other thread's run in the middle of its own, then makes one model call."""

    def __init__(self, barrier: threading.Barrier) -> None:
        self.barrier = barrier
        self.llm = ScriptedChatGenerator(default="ok")

    @component.output_types(value=str)
    def run(self, value: str) -> dict[str, Any]:
        self.barrier.wait(timeout=10)
        return {"value": generate_text(self.llm, f"echo {value}")}


def test_runs_on_several_threads_keep_their_steps_apart() -> None:
    enable_step_tracing()
    barrier = threading.Barrier(2)
    pipeline = Pipeline()
    pipeline.add_component("wait", Wait(barrier))
    recorders = {"a": StepRecorder(), "b": StepRecorder()}

    def run(name: str) -> None:
        with record_steps(recorders[name]):
            pipeline.run({"wait": {"value": name}})

    threads = [threading.Thread(target=run, args=(name,)) for name in recorders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    for name, recorder in recorders.items():
        (step,) = recorder.steps
        assert step.inputs == {"value": name}
        assert [c["prompt"] for c in step.outputs["llm_calls"]] == [f"echo {name}"]


def test_a_role_generator_node_traces_its_call_once(exporter) -> None:
    generator = RoleChatGenerator("generator", delegate=ScriptedChatGenerator(default="Paris"))
    pipeline = Pipeline()
    pipeline.add_component("llm", generator)
    recorder = StepRecorder()
    with record_steps(recorder, {"llm": "generation"}):
        pipeline.run({"llm": {"messages": [ChatMessage.from_user("Capital of France?")]}})
    with record_steps(recorder), tracing.tracer.trace("docqa.generation", tags={STEP_NAME: "helper"}):
        generate_text(generator, "Capital of Italy?", purpose="answer")

    node, helper = recorder.steps
    assert [(c["prompt"], c["response"], c["purpose"]) for c in node.outputs["llm_calls"]] == [
        ("Capital of France?", "Paris", "generator")]
    assert [(c["prompt"], c["purpose"]) for c in helper.outputs["llm_calls"]] == [("Capital of Italy?", "answer")]
    assert [s.name for s in exporter.get_finished_spans()].count(LLM_CALL_SPAN) == 2
