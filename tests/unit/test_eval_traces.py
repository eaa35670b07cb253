"""Evaluation answers are tagged in the audit trail (asked_by `eval:<label>`) and the trace listing's user filter
finds one run's traces, apart from ordinary traffic (scripted LLM, the embedded audit database)."""

from __future__ import annotations

from docqa.access import AccessScope
from docqa.audit.recorder import audit_session
from docqa.evaluation.datasets import EvalQuestion
from docqa.evaluation.runner import run_evaluation
from docqa.pipelines.registry import build_pipeline
from docqa.questions.audited_run import AuditedRun
from docqa.runtime import Runtime
from docqa.server.trace_queries import TraceFilter, list_traces
from docqa.settings import Settings
from tests.support.scripted_chat import ScriptedChatGenerator

SCOPE = AccessScope("acme", frozenset({"alice"}))
QUESTIONS = [EvalQuestion("q1", "Who painted The Night Watch?", ("Rembrandt",)),
             EvalQuestion("q2", "Where is the Rijksmuseum?", ("Amsterdam",))]


def test_the_user_filter_lists_one_evaluation_run(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    llm = ScriptedChatGenerator(default="Rembrandt")
    runtime = Runtime(settings, chat_generator_factory=lambda role: llm)
    nightly = run_evaluation(runtime, QUESTIONS, ["no_retrieval"], tmp_path / "nightly", scope=SCOPE,
                             progress=False)
    other = run_evaluation(runtime, QUESTIONS[:1], ["no_retrieval"], tmp_path / "out", scope=SCOPE,
                           label="release-7", progress=False)
    asked = AuditedRun(build_pipeline("no_retrieval", runtime), "Who painted it?", SCOPE, asked_by="alice",
                       settings=settings).run()

    with audit_session(settings) as session:
        total, page = list_traces(session, TraceFilter(tenant="acme", asked_by="eval:nightly"), limit=50, offset=0)
        assert total == 2 and {t["id"] for t in page} == {r.trace_id for r in nightly}
        _, page = list_traces(session, TraceFilter(tenant="acme", asked_by="eval:release-7"), limit=50, offset=0)
        assert [t["id"] for t in page] == [other[0].trace_id]
        _, page = list_traces(session, TraceFilter(tenant="acme", asked_by="alice"), limit=50, offset=0)
        assert [t["id"] for t in page] == [asked.trace_id]
