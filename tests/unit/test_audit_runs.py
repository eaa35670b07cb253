"""Runs `started` and their one outcome: the recorder's state machine, closing runs of dead processes as
`interrupted`, and telling which owner processes are gone (SQLite; PostgreSQL in tests/integration)."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest.mock import ANY

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from docqa.access import AccessScope
from docqa.audit.keys import hmac_key
from docqa.audit.models import AuditRun, AuditTrace
from docqa.audit.recorder import TraceRecord, close_interrupted_runs, open_run, record_answer
from docqa.audit.runs import Owner, RunAlreadySettled, owner_gone, process_start
from docqa.audit.verify import verify_chain
from docqa.db import make_engine
from docqa.questions.audited_run import AuditedRun
from docqa.recording import StepRecorder
from docqa.result import PipelineResult, Totals
from docqa.run_control import RunControl, RunStopped
from docqa.schema import upgrade_database
from docqa.settings import Settings

SCOPE = AccessScope(tenant="acme", principals=frozenset({"user:alice"}))
SECRET = "runs-secret-5b1e7d"


@pytest.fixture
def settings(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", llm_api_key=SECRET)
    upgrade_database(settings)
    return settings


def session(settings: Settings) -> Session:
    return Session(make_engine(settings.resolved_database_url()))


def started(settings: Settings) -> list[AuditRun]:
    with session(settings) as s:
        return list(s.scalars(select(AuditRun)))


def traces(settings: Settings) -> list[AuditTrace]:
    with session(settings) as s:
        return list(s.scalars(select(AuditTrace).order_by(AuditTrace.seq)))


def chain_ok(settings: Settings) -> bool:
    with session(settings) as s:
        return verify_chain(s, hmac_key(settings)).ok


class GatedPipeline:
    """One step that reports what the audit database holds while it runs, then waits to be released."""

    name = "gated"

    def __init__(self, settings: Settings, fail: bool = False) -> None:
        self.settings = settings
        self.fail = fail
        self.inside = threading.Event()
        self.release = threading.Event()
        self.seen_started: list[str] = []
        self.seen_traces = -1

    def config(self) -> dict[str, Any]:
        return {"pipeline": self.name}

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None) -> PipelineResult:
        recorder = StepRecorder()
        with recorder.step("retrieval", "first"):
            self.seen_started = [run.id for run in started(self.settings)]
            self.seen_traces = len(traces(self.settings))
            self.inside.set()
            self.release.wait(10)
            if self.fail:
                raise RuntimeError("the store went away")
        with recorder.step("generation", "second"):
            pass
        return PipelineResult(pipeline=self.name, question=question, answer="an answer", citations=[],
                              steps=recorder.steps, totals=Totals())


def limits() -> RunControl:
    return RunControl(max_llm_calls=8, max_completion_tokens=64, max_prompt_chars=10_000, timeout_s=30)


def in_thread(run: AuditedRun) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = run.run()
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


class TestStartedThenOneOutcome:
    def test_a_run_is_started_while_it_runs_and_its_trace_replaces_the_row(self, settings):
        pipeline = GatedPipeline(settings)
        pipeline.release.set()
        run = AuditedRun(pipeline, f"Who? {SECRET}", SCOPE, "alice", settings, control=limits())
        result = run.run()
        assert pipeline.seen_started == [run.run_id] and pipeline.seen_traces == 0
        assert result.trace_id == run.run_id
        assert started(settings) == []
        [trace] = traces(settings)
        assert (trace.id, trace.status) == (run.run_id, "completed")
        assert chain_ok(settings)

    def test_the_started_row_is_scrubbed_and_carries_its_owner_and_deadline(self, settings):
        pipeline = GatedPipeline(settings)
        run = AuditedRun(pipeline, f"Who? {SECRET}", SCOPE, "alice", settings, control=limits())
        thread, _ = in_thread(run)
        assert pipeline.inside.wait(10)
        [row] = started(settings)
        pipeline.release.set()
        thread.join(10)
        assert SECRET not in row.question and row.tenant == "acme" and row.pipeline == "gated"
        assert Owner.of(row) == Owner.current()
        deadline = row.deadline_at.replace(tzinfo=UTC)
        assert timedelta(seconds=25) < deadline - datetime.now(UTC) < timedelta(seconds=31)

    def test_a_failed_run_ends_failed(self, settings):
        pipeline = GatedPipeline(settings, fail=True)
        pipeline.release.set()
        run = AuditedRun(pipeline, "Who?", SCOPE, "alice", settings, control=limits())
        with pytest.raises(RuntimeError):
            run.run()
        assert started(settings) == []
        assert [(t.id, t.status) for t in traces(settings)] == [(run.run_id, "failed")]

    @pytest.mark.parametrize("outcome", ["cancelled", "timed_out"])
    def test_a_stopped_run_ends_stopped_once_and_never_completes(self, settings, outcome):
        pipeline = GatedPipeline(settings)
        control = limits()
        run = AuditedRun(pipeline, "Who?", SCOPE, "alice", settings, control=control)
        thread, result = in_thread(run)
        assert pipeline.inside.wait(10)
        assert control.stop(outcome)
        assert started(settings) == []
        assert [(t.id, t.status) for t in traces(settings)] == [(run.run_id, outcome)]
        pipeline.release.set()
        thread.join(10)
        assert isinstance(result["error"], RunStopped)
        assert [t.status for t in traces(settings)] == [outcome]
        assert chain_ok(settings)

    def test_a_halted_run_stops_at_its_next_step_and_is_traced_by_the_stop(self, settings):
        pipeline = GatedPipeline(settings)
        control = limits()
        run = AuditedRun(pipeline, "Who?", SCOPE, "alice", settings, control=control)
        thread, result = in_thread(run)
        assert pipeline.inside.wait(10)
        control.halt("cancelled")  # what a signal handler does: nothing written yet
        assert len(started(settings)) == 1 and traces(settings) == []
        pipeline.release.set()
        thread.join(10)
        # The run noticed at its second step and settled the outcome itself; a later stop() changes nothing.
        assert isinstance(result["error"], RunStopped)
        assert not control.stop("cancelled")
        assert started(settings) == []
        assert [(t.status, [s.name for s in t.steps]) for t in traces(settings)] == [("cancelled", ["first"])]

    def test_a_run_stopped_before_it_began_never_writes_its_started_row(self, settings):
        pipeline = GatedPipeline(settings)
        pipeline.release.set()
        control = limits()
        run = AuditedRun(pipeline, "Who?", SCOPE, "alice", settings, control=control)
        assert control.stop("cancelled")
        with pytest.raises(RunStopped):
            run.run()
        assert not pipeline.inside.is_set()
        assert started(settings) == []
        assert [(t.id, t.status) for t in traces(settings)] == [(run.run_id, "cancelled")]


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def leave_started(settings: Settings, owner: Owner, *, timeout_s: float | None = None,
                  question: str = "Left behind?") -> str:
    run_id = str(uuid.uuid4())
    open_run(settings, run_id=run_id, asked_by="alice", tenant="acme", question=question, pipeline="gated",
             config={"pipeline": "gated"}, models={"generator": "m"}, asked_at=datetime.now(UTC),
             timeout_s=timeout_s)
    with session(settings) as s, s.begin():
        row = s.get(AuditRun, run_id)
        for name, value in owner.columns().items():
            setattr(row, name, value)
    return run_id


class TestClosingInterruptedRuns:
    def test_runs_of_dead_processes_are_closed_once_and_live_ones_are_left(self, settings):
        here = Owner.current()
        dead = leave_started(settings, replace(here, pid=dead_pid()), question=f"Dead? {SECRET}")
        rebooted = leave_started(settings, replace(here, boot_id="another-boot"))
        alive = leave_started(settings, here)
        elsewhere = leave_started(settings, replace(here, host="other-host", pid=dead_pid()), timeout_s=300)

        closed = close_interrupted_runs(settings)
        assert sorted(closed) == sorted([dead, rebooted])
        assert close_interrupted_runs(settings) == []
        assert sorted(run.id for run in started(settings)) == sorted([alive, elsewhere])
        by_id = {t.id: t for t in traces(settings)}
        assert set(by_id) == {dead, rebooted}
        trace = by_id[dead]
        assert trace.status == "interrupted" and trace.answer is None and trace.steps == []
        assert trace.question == "Dead? ***" and trace.pipeline == "gated" and trace.tenant == "acme"
        assert "ended before it finished" in trace.error
        assert chain_ok(settings)

    def test_a_run_of_another_machine_is_closed_only_past_its_deadline(self, settings):
        other = replace(Owner.current(), host="other-host")
        past = leave_started(settings, other, timeout_s=0)
        leave_started(settings, other, timeout_s=None)
        assert close_interrupted_runs(settings, grace_s=3600) == []
        assert close_interrupted_runs(settings, grace_s=0) == [past]

    def test_the_owner_that_finishes_after_its_run_was_closed_writes_nothing(self, settings):
        run_id = leave_started(settings, replace(Owner.current(), pid=dead_pid()))
        assert close_interrupted_runs(settings) == [run_id]
        with pytest.raises(RunAlreadySettled):
            record_answer(settings, TraceRecord(asked_by="alice", tenant="acme", question="Left behind?",
                                                pipeline="gated", models={}, config={}, error="late"), run_id=run_id)
        assert [t.status for t in traces(settings)] == ["interrupted"]
        assert chain_ok(settings)

    def test_a_new_run_closes_leftovers_first(self, settings):
        run_id = leave_started(settings, replace(Owner.current(), pid=dead_pid()))
        pipeline = GatedPipeline(settings)
        pipeline.release.set()
        AuditedRun(pipeline, "Now?", SCOPE, "alice", settings, control=limits()).run()
        assert [(t.id, t.status) for t in traces(settings)] == [(run_id, "interrupted"), (ANY, "completed")]


class TestOwnerGone:
    def row(self, owner: Owner, deadline: datetime | None = None) -> AuditRun:
        return AuditRun(deadline_at=deadline, **owner.columns())

    def test_this_process_is_alive_and_a_finished_one_is_gone(self):
        here = Owner.current()
        now = datetime.now(UTC)
        assert not owner_gone(self.row(here), here, now)
        assert owner_gone(self.row(replace(here, pid=dead_pid())), here, now)

    def test_a_reused_pid_is_another_process(self):
        here = Owner.current()
        assert owner_gone(self.row(replace(here, pid_start=here.pid_start - 1)), here, datetime.now(UTC))

    def test_a_zombie_is_gone(self):
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        try:
            for _ in range(200):
                if process_start(child.pid) is None:
                    break
                threading.Event().wait(0.02)
            assert process_start(child.pid) is None  # exited, not yet reaped
        finally:
            child.wait()

    def test_another_boot_of_this_host_is_gone(self):
        here = Owner.current()
        assert owner_gone(self.row(replace(here, boot_id="0" * 36)), here, datetime.now(UTC))

    @pytest.mark.parametrize("elsewhere", [{"host": "other-host"}, {"pid_ns": "pid:[1]"}])
    def test_pids_of_other_machines_or_namespaces_are_not_read(self, elsewhere):
        here = Owner.current()
        now = datetime.now(UTC)
        owner = replace(here, pid=dead_pid(), **elsewhere)
        assert not owner_gone(self.row(owner), here, now)
        assert not owner_gone(self.row(owner, now + timedelta(seconds=10)), here, now, grace_s=0)
        assert not owner_gone(self.row(owner, now - timedelta(seconds=10)), here, now, grace_s=60)
        assert owner_gone(self.row(owner, now - timedelta(seconds=10)), here, now, grace_s=5)
