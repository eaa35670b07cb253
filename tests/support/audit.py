"""Audit-trail test helpers: realistic pipeline results, raw tampering, and a subprocess writer (tests only)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session

from docqa.access import AccessScope
from docqa.audit.canonical import canonical_bytes, trace_payload
from docqa.audit.chain import link_mac
from docqa.audit.keys import hmac_key
from docqa.audit.models import AuditTrace
from docqa.audit.recorder import TraceRecord, record_answer
from docqa.db import Base, session_factory
from docqa.recording import StepRecorder, document_summary, record_llm_call
from docqa.result import Citation, LLMUsage, PipelineResult
from docqa.schema import import_models
from docqa.settings import Settings

SECRET = "unit-secret-7f3a9c2e"
SCOPE = AccessScope(tenant="acme", principals=frozenset({"user:alice", "group:finance"}))


class FakeDoc:
    def __init__(self, doc_id: str, score: float, content: str) -> None:
        self.id, self.score, self.content, self.meta = doc_id, score, content, {"source": f"{doc_id}.txt"}


def tree_result(question: str = "Who founded Acme and when?", answer: str = "Jane Roe in 1901 [1].") -> PipelineResult:
    """A tree-shaped run (plan -> two sub-questions each retrieving and summarising -> answer), as a
    multi-step strategy records it through `StepRecorder`, including LLM calls and retrieved documents."""
    recorder = StepRecorder()
    docs = [FakeDoc("doc-a", 0.8123456789, "Acme was founded by Jane Roe."), FakeDoc("doc-b", 0.1 + 0.2, "In 1901.")]
    with recorder.step("plan", "planner", inputs={"question": question}) as plan:
        record_llm_call(prompt=f"Split: {question}", response='["who", "when"]',
                        usage=LLMUsage(1, 12, 4), model="planner-model")
        plan.outputs["sub_questions"] = ["who founded Acme", "when"]
        for sub in ("who founded Acme", "when"):
            with recorder.step("retrieval", "hybrid_retriever", inputs={"query": sub, "top_k": 2}) as step:
                step.outputs["documents"] = [document_summary(d) for d in docs]
            with recorder.step("summary", "summarizer", inputs={"query": sub}) as step:
                record_llm_call(prompt=f"Summarise for {sub}", response="Jane Roe, 1901",
                                usage=LLMUsage(1, 40, 5), model="summarizer-model")
                step.outputs["summary"] = "Jane Roe, 1901"
    with recorder.step("generation", "generator", inputs={"question": question}) as step:
        record_llm_call(prompt="Answer with citations", response=answer, usage=LLMUsage(1, 60, 9), model="gen")
        step.outputs["answer"] = answer
    return PipelineResult(
        pipeline="tree_test", question=question, answer=answer,
        citations=[Citation("doc-a", "doc-a.txt", 0.8123456789, "Acme was founded")],
        steps=recorder.steps, totals=recorder.totals(), stop_reason="answered",
        config={"top_k": 2, "max_depth": 2, "config_hash": "f" * 64},
    )


def record(settings: Settings, result: PipelineResult | None = None, *, asked_at: datetime | None = None,
           error: str | None = None) -> str:
    result = result if result is not None or error is not None else tree_result()
    return record_answer(settings, TraceRecord(asked_by="alice", tenant="acme", question="Who founded Acme?",
                                               pipeline="tree_test",
                                               models={"generator": "gen", "summarizer": "summarizer-model"},
                                               result=result, config={"top_k": 2}, error=error, asked_at=asked_at))


def fill(settings: Settings, count: int) -> list[str]:
    return [record(settings) for _ in range(count)]


def traces(settings: Settings) -> list[AuditTrace]:
    with session_factory(settings)() as session:
        return list(session.scalars(select(AuditTrace).order_by(AuditTrace.seq)))


def tamper(settings: Settings, *statements: tuple[str, dict[str, Any]]) -> None:
    """Run raw SQL as a database administrator would: PostgreSQL triggers (append-only, foreign keys) off."""
    engine = create_engine(settings.resolved_database_url())
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SET LOCAL session_replication_role = replica"))
            for sql, params in statements:
                conn.execute(text(sql), params)
    finally:
        engine.dispose()


def relink(settings: Settings, key: bytes, from_seq: int) -> None:
    """Recompute every link from `from_seq` with `key`, as an attacker covering up an edit would."""
    with session_factory(settings)() as session:
        rows = list(session.scalars(select(AuditTrace).order_by(AuditTrace.seq)))
        updates = []
        prev = None
        for trace in rows:
            if trace.seq >= from_seq:
                prev_mac = prev if prev is not None else trace.prev_mac
                mac = link_mac(key, trace.seq, prev_mac, canonical_bytes(trace_payload(trace)))
                updates.append(("UPDATE audit_traces SET prev_mac = :p, mac = :m WHERE id = :id",
                                {"p": prev_mac, "m": mac, "id": trace.id}))
                prev = mac
            else:
                prev = trace.mac
    tamper(settings, *updates)


def write_traces_in_process(settings: Settings, count: int) -> None:
    """Subprocess entry point for concurrency tests (must be importable for multiprocessing spawn)."""
    for _ in range(count):
        record(settings, tree_result())


def crash_mid_write(settings: Settings, marker_path: str) -> None:
    """Subprocess entry point: stage a trace inside its transaction, then die before the commit."""
    import os
    from pathlib import Path

    from docqa.audit.recorder import TraceRecord, append_trace, audit_session, build_trace

    trace = build_trace(settings, TraceRecord(asked_by="alice", tenant="acme", question="q", pipeline="tree_test",
                                              models={}, result=tree_result()))
    with audit_session(settings) as session:
        append_trace(session, trace, hmac_key(settings))
        Path(marker_path).write_text(trace.id)
        os._exit(17)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def session_for(settings: Settings) -> Session:
    return session_factory(settings)()


def schema_differences(url: str) -> list:
    """What autogenerate would change: every model module (`MODEL_MODULES`) against the migrated database."""
    import_models()
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
