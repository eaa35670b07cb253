"""Bounded cost per question: typed strategy options, the LLM call budget, cancellation at step boundaries, and
one trace per question whose status says what the caller got."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from docqa.access import AccessScope
from docqa.audit.models import AuditTrace
from docqa.db import make_engine
from docqa.errors import InvalidOptionsError
from docqa.llm.calls import generate_text
from docqa.pipelines.options import (
    ATRAGOptions,
    ConTReGenOptions,
    ConTReOptions,
    MSPROptions,
    NoRetrievalOptions,
    ReSPOptions,
    StandardOptions,
    validate_options,
)
from docqa.pipelines.registry import available_pipelines
from docqa.questions.audited_run import AuditedRun
from docqa.recording import StepRecorder
from docqa.result import PipelineResult, Totals
from docqa.run_control import LLMBudgetExceededError, RunControl, RunStopped
from docqa.schema import upgrade_database
from docqa.settings import Settings
from tests.support.resp_fakes import JUDGE, PLAN, KeywordRetriever, build, doc
from tests.support.scripted_chat import ScriptedChatGenerator

SCOPE = AccessScope(tenant="acme", principals=frozenset({"user:alice"}))
MODELS = {"no_retrieval": NoRetrievalOptions, "standard": StandardOptions, "resp": ReSPOptions, "atrag": ATRAGOptions,
          "mspr": MSPROptions, "contre": ConTReOptions, "contregen": ConTReGenOptions}


def control(**limits: Any) -> RunControl:
    return RunControl(**{"max_llm_calls": 64, "max_completion_tokens": 2048, "max_prompt_chars": 100_000, **limits})


class TestStrategyOptions:
    def test_every_registered_strategy_has_an_options_model(self):
        assert {spec.name: spec.options for spec in available_pipelines()} == MODELS

    @pytest.mark.parametrize("name", sorted(MODELS))
    @pytest.mark.parametrize("value", [2.5, 1e308, "5", True, 0, -1, 10**9])
    def test_top_k_or_max_tokens_must_be_a_bounded_integer(self, name, value):
        option = "max_tokens" if name == "no_retrieval" else "top_k"
        with pytest.raises(InvalidOptionsError, match=option):
            validate_options(name, {option: value}, Settings(), MODELS[name])

    @pytest.mark.parametrize("options", [
        {"max_iterations": 1_000_000_000}, {"max_scoped_records": 10**7}, {"max_prompt_documents": 10**6},
        {"max_document_chars": 10**9}, {"max_tokens": 1_000_000_000}, {"max_tokens": -1}, {"max_tokens": "x"},
        {"min_topic_probability": -1}, {"min_topic_probability": 5}, {"min_topic_probability": float("nan")},
        {"top_k": 1e308}, {"unknown": 1},
    ])
    def test_atrag_refuses_what_it_used_to_run(self, options):
        with pytest.raises(InvalidOptionsError) as info:
            validate_options("atrag", options, Settings(), ATRAGOptions)
        assert next(iter(options)) in info.value.message
        assert info.value.http_status == 422

    def test_ceilings_come_from_the_settings(self):
        settings = Settings(max_iterations=2)
        with pytest.raises(InvalidOptionsError, match=r"at most 2 .*DOCQA_MAX_ITERATIONS"):
            validate_options("resp", {"max_iterations": 3}, settings, ReSPOptions)
        assert validate_options("resp", {"max_iterations": 2}, settings, ReSPOptions).build_kwargs() == {
            "max_iterations": 2}

    def test_valid_options_pass_through_unchanged(self):
        options = {"top_k": 7, "max_iterations": 2, "min_topic_probability": 0.3, "max_tokens": 64}
        assert validate_options("atrag", options, Settings(), ATRAGOptions).build_kwargs() == options


class TestLLMBudget:
    def test_calls_beyond_the_budget_are_refused_before_reaching_the_model(self):
        llm = ScriptedChatGenerator(default="ok")
        with control(max_llm_calls=2).active():
            generate_text(llm, "one")
            generate_text(llm, "two")
            with pytest.raises(LLMBudgetExceededError, match="more than 2 LLM calls"):
                generate_text(llm, "three")
        assert len(llm.calls) == 2

    def test_completion_tokens_are_capped_and_checked(self):
        llm = ScriptedChatGenerator(default="ok")
        with control(max_completion_tokens=100).active():
            generate_text(llm, "a", max_tokens=1_000_000_000)
            generate_text(llm, "b", max_tokens=40)
            for bad in (-1, "x", 2.5):
                with pytest.raises(ValueError, match="max_tokens"):
                    generate_text(llm, "c", max_tokens=bad)  # type: ignore[arg-type]
        assert [call["generation_kwargs"]["max_tokens"] for call in llm.calls] == [100, 40]

    def test_oversized_prompts_are_refused(self):
        llm = ScriptedChatGenerator(default="ok")
        with control(max_prompt_chars=10).active(), pytest.raises(LLMBudgetExceededError, match="10"):
            generate_text(llm, "x" * 11)
        assert llm.calls == []


class TestCancellation:
    def test_a_stopped_run_starts_no_step_and_no_llm_call(self):
        llm = ScriptedChatGenerator(default="ok")
        run = control()
        recorder = StepRecorder()
        with run.active():
            with recorder.step("retrieval", "r"):
                pass
            assert run.stop("timed_out")
            with pytest.raises(RunStopped) as info, recorder.step("generation", "g"):
                pass
            assert info.value.outcome == "timed_out"
            with pytest.raises(RunStopped):
                generate_text(llm, "late")
        assert [step.kind for step in recorder.steps] == ["retrieval"]
        assert llm.calls == []

    def test_the_deadline_stops_the_run_by_itself(self):
        now = [0.0]
        run = RunControl(max_llm_calls=5, max_completion_tokens=10, max_prompt_chars=100, timeout_s=5,
                         clock=lambda: now[0])
        run.check()
        now[0] = 5.0
        with pytest.raises(RunStopped, match="timed_out"):
            run.check()

    def test_the_outcome_is_decided_once(self):
        run = control()
        assert run.decide("completed")
        assert not run.stop("timed_out")
        assert run.outcome == "completed"


class BlockingPipeline:
    """Two steps with an LLM call each; blocks inside the second until released."""

    name = "blocking"

    def __init__(self, llm: ScriptedChatGenerator) -> None:
        self.llm = llm
        self.inside_second = threading.Event()
        self.release = threading.Event()
        self.finished_second = threading.Event()

    def config(self) -> dict[str, Any]:
        return {"pipeline": self.name}

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None) -> PipelineResult:
        recorder = StepRecorder()
        with recorder.step("retrieval", "first") as step:
            step.outputs["text"] = generate_text(self.llm, "first")
        with recorder.step("summary", "second"):
            self.inside_second.set()
            self.release.wait(10)
            self.finished_second.set()
        with recorder.step("generation", "third") as step:
            step.outputs["text"] = generate_text(self.llm, "third")
        return PipelineResult(pipeline=self.name, question=question, answer=step.outputs["text"], citations=[],
                              steps=recorder.steps, totals=Totals())


@pytest.fixture
def settings(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    upgrade_database(settings)
    return settings


def traces(settings: Settings) -> list[AuditTrace]:
    with Session(make_engine(settings.resolved_database_url())) as session:
        rows = list(session.scalars(select(AuditTrace)))
        for row in rows:
            _ = row.steps
        return rows


class TestOneTracePerQuestion:
    def run_in_thread(self, pipeline: BlockingPipeline, settings: Settings, run: RunControl) -> dict[str, Any]:
        outcome: dict[str, Any] = {}

        def target() -> None:
            try:
                outcome["result"] = AuditedRun(pipeline, "Q?", SCOPE, "alice", settings, control=run).run()
            except BaseException as exc:
                outcome["error"] = exc

        thread = threading.Thread(target=target)
        thread.start()
        outcome["thread"] = thread
        return outcome

    @pytest.mark.parametrize("status", ["timed_out", "cancelled"])
    def test_a_stopped_run_is_traced_at_once_and_never_completes(self, settings, status):
        llm = ScriptedChatGenerator(default="an answer")
        pipeline = BlockingPipeline(llm)
        run = control()
        outcome = self.run_in_thread(pipeline, settings, run)
        assert pipeline.inside_second.wait(10)
        assert run.stop(status)
        # Written when the outcome was decided, while the run is still inside its second step.
        [trace] = traces(settings)
        assert not pipeline.finished_second.is_set()
        assert trace.status == status and trace.answer is None
        assert [(s.name, s.error is None) for s in trace.steps] == [("first", True), ("second", False)]
        assert trace.totals["llm_calls"] == 1
        pipeline.release.set()
        outcome["thread"].join(10)
        assert isinstance(outcome["error"], RunStopped)
        assert len(llm.calls) == 1  # the third step never called the model
        assert [t.status for t in traces(settings)] == [status]

    def test_a_run_that_finishes_is_completed_and_cannot_be_stopped_afterwards(self, settings):
        pipeline = BlockingPipeline(ScriptedChatGenerator(default="an answer"))
        pipeline.release.set()
        run = control()
        result = AuditedRun(pipeline, "Q?", SCOPE, "alice", settings, control=run).run()
        assert not run.stop("timed_out")
        [trace] = traces(settings)
        assert (trace.id, trace.status, trace.answer) == (result.trace_id, "completed", "an answer")

    def test_a_run_over_budget_fails_with_its_steps(self, settings):
        # Outside the HaystackStrategy contract (a bare QAPipeline), the budget error is the run's outcome.
        pipeline = BlockingPipeline(ScriptedChatGenerator(default="an answer"))
        pipeline.release.set()
        with pytest.raises(LLMBudgetExceededError):
            AuditedRun(pipeline, "Q?", SCOPE, "alice", settings, control=control(max_llm_calls=1)).run()
        [trace] = traces(settings)
        assert trace.status == "failed" and "LLM calls" in trace.error
        assert [s.name for s in trace.steps] == ["first", "second", "third"]

    def test_a_strategy_out_of_budget_after_calls_is_completed_with_an_llm_budget_trace(self, settings):
        retriever = KeywordRetriever([doc("gh", "Glass Harbor is a film by the director Omar Vance.", "Glass Harbor")])
        llm = ScriptedChatGenerator(rules=[(JUDGE, "No"), (PLAN, "Where was Omar Vance born?")], default="x")
        result = AuditedRun(build(llm, retriever), "Where was the director of Glass Harbor born?", SCOPE,
                            "alice", settings, control=control(max_llm_calls=2)).run()
        assert len(llm.calls) == 2 and result.stop_reason == "llm_budget" and result.answer_source == "extracted"
        [trace] = traces(settings)
        assert (trace.id, trace.status, trace.stop_reason) == (result.trace_id, "completed", "llm_budget")
        assert trace.answer == result.answer and trace.totals["llm_calls"] == 2
        budget_step = next(s for s in trace.steps if s.name == "llm_budget")
        assert "more than 2 LLM calls" in budget_step.outputs["reason"]
