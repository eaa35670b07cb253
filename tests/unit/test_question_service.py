"""The question service (docqa.questions): one validation, a pipeline cache keyed by the validated options and
built outside any global lock, the selection and a conversation rewrite recorded as data of every outcome's
trace, and the run control's stops (timeout, disconnect, shutdown) each leaving their trace."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from docqa.access import AccessScope
from docqa.audit.models import AuditTrace
from docqa.db import make_engine
from docqa.errors import InvalidOptionsError, InvalidQuestionError, UnknownPipelineError
from docqa.pipelines.base import config_hash
from docqa.pipelines.registry import resolve_options
from docqa.questions import (
    Ask,
    Asker,
    QueryCancelledError,
    QueryTimedOutError,
    QuestionService,
)
from docqa.questions import pipeline_cache as cache_module
from docqa.questions.pipeline_cache import PipelineCache
from docqa.recording import StepRecorder
from docqa.result import PipelineResult, Totals
from docqa.runtime import Runtime
from docqa.schema import upgrade_database
from docqa.settings import Settings
from tests.support.scripted_chat import ScriptedChatGenerator

ASKER = Asker(AccessScope("acme", frozenset({"user:alice"})), asked_by="alice")
HALCYON = ["Where is Halcyon headquartered?"]


@pytest.fixture
def settings(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    upgrade_database(settings)
    return settings


def traces(settings: Settings) -> list[AuditTrace]:
    with Session(make_engine(settings.resolved_database_url())) as session:
        found = list(session.scalars(select(AuditTrace).order_by(AuditTrace.seq)))
        for trace in found:
            trace.steps.sort(key=lambda step: step.position)
        return found


class SteppedPipeline:
    """Two steps; waits in the first one until released (or fails there)."""

    name = "no_retrieval"

    def __init__(self, fail: bool = False, wait_s: float = 0.0) -> None:
        self.fail = fail
        self.wait_s = wait_s
        self.inside = threading.Event()

    def config(self) -> dict[str, Any]:
        return {"pipeline": self.name, "max_tokens": 7}

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None) -> PipelineResult:
        recorder = StepRecorder()
        with recorder.step("retrieval", "first"):
            self.inside.set()
            time.sleep(self.wait_s)
            if self.fail:
                raise RuntimeError("the store went away")
        with recorder.step("generation", "second"):
            pass
        config = self.config()
        return PipelineResult(pipeline=self.name, question=question, answer="an answer", steps=recorder.steps,
                              totals=Totals(), config={**config, "config_hash": config_hash(config)})


def service_with(monkeypatch, settings: Settings, pipeline: Any, **kwargs: Any) -> QuestionService:
    monkeypatch.setattr(cache_module, "build_from_options", lambda name, runtime, options: pipeline)
    return QuestionService(Runtime(settings), **kwargs)


class TestValidation:
    def test_equal_options_are_one_model_and_one_key(self, settings):
        default = resolve_options("standard", {}, settings)
        assert default == resolve_options("standard", {"top_k": settings.top_k}, settings)
        assert hash(default) == hash(resolve_options("standard", {"top_k": settings.top_k}, settings))
        assert default != resolve_options("standard", {"top_k": settings.top_k + 1}, settings)

    def test_a_list_option_still_gives_a_key(self, settings):
        options = resolve_options("mspr", {"sources": ["collection:main"]}, settings)
        assert {options: 1}[resolve_options("mspr", {"sources": ["collection:main"]}, settings)] == 1

    @pytest.mark.parametrize(("ask", "error"), [
        (Ask("   "), InvalidQuestionError),
        (Ask("Who?", strategy="nope"), UnknownPipelineError),
        (Ask("Who?", strategy="standard", options={"top_k": "5"}), InvalidOptionsError),
        (Ask("Who?", strategy="standard", inputs={"as_of": "2024-01-01"}), InvalidOptionsError),
    ])
    def test_bad_input_is_refused_before_any_work(self, settings, ask, error):
        with pytest.raises(error):
            QuestionService(Runtime(settings)).prepare(ask, ASKER)
        assert traces(settings) == []

    def test_prepare_masks_rewrites_and_selects_once(self, settings):
        key = "sk-" + "a1" * 20
        question = QuestionService(Runtime(settings)).prepare(
            Ask(f"and when was it founded? {key}", strategy="auto", history=HALCYON), ASKER)
        assert key not in question.asked and key not in question.text
        assert question.text.startswith("When was Halcyon founded?")
        assert question.rewrite is not None and question.rewrite.original.startswith("and when was it founded?")
        assert question.selection["mode"] == "auto" and question.selection["pipeline"] == question.strategy
        assert question.options == resolve_options(question.strategy, {}, settings)


class TestPipelineCache:
    def test_one_build_per_key_and_other_keys_build_meanwhile(self, settings, monkeypatch):
        release, building = threading.Event(), threading.Event()
        builds: list[Any] = []

        def build(name, runtime, options):  # type: ignore[no-untyped-def]
            builds.append(options)
            if options.top_k == 1:
                building.set()
                assert release.wait(10)
            return SteppedPipeline()

        monkeypatch.setattr(cache_module, "build_from_options", build)
        cache = PipelineCache(Runtime(settings))
        slow, fast = (resolve_options("standard", {"top_k": k}, settings) for k in (1, 2))
        got: list[Any] = []
        first = threading.Thread(target=lambda: got.append(cache.get("standard", slow)))
        second = threading.Thread(target=lambda: got.append(cache.get("standard", slow)))
        first.start()
        assert building.wait(10)
        second.start()
        # Another key builds while the slow one is still building: no lock is held during a build.
        assert cache.get("standard", fast).pipeline is not None
        release.set()
        first.join(10)
        second.join(10)
        assert len(got) == 2 and got[0] is got[1]
        assert builds == [slow, fast]

    def test_a_failed_build_is_raised_and_tried_again(self, settings, monkeypatch):
        outcomes = iter([RuntimeError("model not found"), SteppedPipeline()])

        def build(name, runtime, options):  # type: ignore[no-untyped-def]
            outcome = next(outcomes)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

        monkeypatch.setattr(cache_module, "build_from_options", build)
        cache = PipelineCache(Runtime(settings))
        options = resolve_options("standard", {}, settings)
        with pytest.raises(RuntimeError, match="model not found"):
            cache.get("standard", options)
        assert isinstance(cache.get("standard", options).pipeline, SteppedPipeline)

    def test_the_least_recently_used_key_goes_first(self, settings, monkeypatch):
        monkeypatch.setattr(cache_module, "build_from_options", lambda name, runtime, options: SteppedPipeline())
        cache = PipelineCache(Runtime(settings), size=2)
        one, two, three = (resolve_options("standard", {"top_k": k}, settings) for k in (1, 2, 3))
        kept = cache.get("standard", one)
        cache.get("standard", two)
        assert cache.get("standard", one) is kept  # used again: now the most recent
        cache.get("standard", three)
        assert cache.get("standard", one) is kept


class TestRecordedRun:
    def test_a_real_strategy_answers_with_its_selection_and_one_config_hash(self, settings):
        runtime = Runtime(settings, chat_generator_factory=lambda _role: ScriptedChatGenerator(default="Paris."))
        service = QuestionService(runtime)
        answer = service.answer(Ask("What is the capital of France?", strategy="no_retrieval"), ASKER)
        assert answer.result.answer == "Paris."
        assert answer.selection == {"mode": "explicit", "pipeline": "no_retrieval"}
        [trace] = traces(settings)
        assert (trace.id, trace.status, trace.asked_by) == (answer.result.trace_id, "completed", "alice")
        assert trace.config["selection"] == answer.selection
        built = service.pipelines.get("no_retrieval", answer.question.options)
        # The strategy's hash, computed when it was built, is the trace's: nothing hashed the config again.
        assert trace.config_hash == built.config_hash == answer.result.config["config_hash"]

    def test_a_follow_up_records_its_rewrite_as_the_first_step(self, settings, monkeypatch):
        service = service_with(monkeypatch, settings, SteppedPipeline())
        seen: list[str] = []
        answer = service.answer(Ask("and when was it founded?", strategy="no_retrieval", history=HALCYON), ASKER,
                                on_step=lambda step: seen.append(step.kind))
        assert answer.result.question == "When was Halcyon founded?"
        assert [(s.index, s.kind) for s in answer.result.steps] == [(0, "rewrite"), (1, "retrieval"),
                                                                    (2, "generation")]
        assert seen == ["rewrite", "retrieval", "generation"]
        [trace] = traces(settings)
        assert [(s.position, s.kind) for s in trace.steps] == [(0, "rewrite"), (1, "retrieval"), (2, "generation")]

    def test_a_failed_run_keeps_its_selection_rewrite_and_strategy_hash(self, settings, monkeypatch):
        pipeline = SteppedPipeline(fail=True)
        service = service_with(monkeypatch, settings, pipeline)
        with pytest.raises(RuntimeError, match="store went away"):
            service.answer(Ask("and when was it founded?", strategy="no_retrieval", history=HALCYON), ASKER)
        [trace] = traces(settings)
        assert trace.status == "failed" and "store went away" in trace.error
        assert trace.config["selection"] == {"mode": "explicit", "pipeline": "no_retrieval"}
        assert trace.config_hash == config_hash(pipeline.config())
        assert [s.kind for s in trace.steps] == ["rewrite", "retrieval"]


class TestStops:
    async def test_the_timeout_stops_the_run_and_traces_it(self, settings, monkeypatch):
        service = service_with(monkeypatch, settings, SteppedPipeline(wait_s=1.0), timeout_s=0.2)
        with pytest.raises(QueryTimedOutError):
            await service.ask(Ask("Who?", strategy="no_retrieval"), ASKER)
        await asyncio.sleep(1.2)  # the run's thread reaches its next step boundary and stops there
        [trace] = traces(settings)
        assert (trace.status, trace.config["selection"]["mode"]) == ("timed_out", "explicit")
        assert service.active_runs == set()

    async def test_a_client_gone_cancels_the_run(self, settings, monkeypatch):
        pipeline = SteppedPipeline(wait_s=1.0)
        service = service_with(monkeypatch, settings, pipeline)

        async def disconnected() -> bool:
            return pipeline.inside.is_set()

        with pytest.raises(QueryCancelledError):
            await service.ask(Ask("Who?", strategy="no_retrieval"), ASKER, disconnected=disconnected)
        [trace] = traces(settings)
        assert trace.status == "cancelled"

    async def test_a_stopping_service_starts_nothing_and_traces_it(self, settings, monkeypatch):
        pipeline = SteppedPipeline()
        service = service_with(monkeypatch, settings, pipeline)
        service.stopping = True
        with pytest.raises(QueryCancelledError):
            await service.ask(Ask("Who?", strategy="no_retrieval"), ASKER)
        assert not pipeline.inside.is_set()
        [trace] = traces(settings)
        assert (trace.status, trace.config["selection"]["pipeline"]) == ("cancelled", "no_retrieval")

    async def test_a_stream_yields_selection_steps_then_its_answer(self, settings, monkeypatch):
        service = service_with(monkeypatch, settings, SteppedPipeline())
        stream = await service.stream(Ask("and when was it founded?", strategy="no_retrieval", history=HALCYON),
                                      ASKER)
        events = [(kind, data) async for kind, data in stream.events()]
        stream.release()
        assert [kind for kind, _ in events] == ["selection", "step", "step", "step", "result"]
        assert [data["kind"] for kind, data in events if kind == "step"] == ["rewrite", "retrieval", "generation"]
        assert events[-1][1].result.trace_id == traces(settings)[0].id

    def test_an_answer_in_this_thread_is_refused_too_once_stopping(self, settings, monkeypatch):
        pipeline = SteppedPipeline()
        service = service_with(monkeypatch, settings, pipeline)
        service.close()
        with pytest.raises(QueryCancelledError):
            service.answer(Ask("Who?", strategy="no_retrieval"), ASKER)
        assert not pipeline.inside.is_set() and service.active_runs == set()
        [trace] = traces(settings)
        assert trace.status == "cancelled"
        assert trace.config["asked_as"] == ASKER.scope.effective_principals
