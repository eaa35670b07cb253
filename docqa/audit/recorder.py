"""Writing traces: one per question, appended to the chain in the same transaction as everything it records.

Usage:
    open_run(settings, run_id=run_id, asked_by="alice", tenant="acme", question=q, pipeline="standard",
             config=config, models=models, asked_at=now)
    record = TraceRecord(asked_by="alice", tenant="acme", question=q, pipeline="standard", models=models,
                         result=result)
    trace_id = record_answer(settings, record, run_id=run_id)

A question's run and its trace are driven by the question service (`docqa.questions.audited_run.AuditedRun`),
which decides what is recorded; this module stores it. A run is written `started` (an `AuditRun` row, see
`runs.py`) before its pipeline runs; its one trace, with the run's id, replaces that row in one transaction.
A returned answer always has its committed trace; a run that raised leaves a trace with status `failed`, the
error and the steps taken so far; a run whose process died stays `started` until a later start closes it as
`interrupted` (`close_interrupted_runs`), never a partial trace.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

from docqa.audit.canonical import canonical_bytes, trace_payload
from docqa.audit.chain import IMMEDIATE_SESSION, append_link
from docqa.audit.keys import hmac_key
from docqa.audit.models import STATUS_COMPLETED, STATUS_FAILED, STATUS_INTERRUPTED, AuditRun, AuditStep, AuditTrace
from docqa.audit.runs import DEFAULT_GRACE_S, Owner, RunAlreadySettled, open_runs, owner_gone, settle_run
from docqa.audit.scrub import clean, clean_text, secret_values
from docqa.audit.tenant_numbering import TRACE
from docqa.db import make_engine
from docqa.result import Citation, LLMUsage, PipelineResult, Step
from docqa.run_control import OUTCOME_CANCELLED, OUTCOME_TIMED_OUT
from docqa.schema import ensure_embedded_schema
from docqa.settings import LLM_ROLES, Settings

logger = logging.getLogger(__name__)


@lru_cache(maxsize=8)
def _audit_engine(url: str) -> Engine:
    engine = make_engine(url)
    if engine.dialect.name == "sqlite":
        # Take SQLite's write lock when the transaction begins (not at its first write), so reading the chain
        # tail and appending to it happen under one lock across threads and processes.
        @event.listens_for(engine, "connect")
        def _no_implicit_transactions(dbapi_connection, _record):  # type: ignore[no-untyped-def]
            dbapi_connection.isolation_level = None

        @event.listens_for(engine, "begin")
        def _begin_immediate(connection):  # type: ignore[no-untyped-def]
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def audit_engine(settings: Settings) -> Engine:
    url = settings.resolved_database_url()
    if settings.database_url is None:
        ensure_embedded_schema(settings)
    return _audit_engine(url)


@contextmanager
def audit_session(settings: Settings) -> Iterator[Session]:
    """A session whose single transaction may append to the chain; commits on exit, rolls back on error."""
    with Session(audit_engine(settings), expire_on_commit=False) as session, session.begin():
        session.info[IMMEDIATE_SESSION] = True
        yield session


def models_from_settings(settings: Settings) -> dict[str, str | None]:
    return {role: settings.endpoint_for(role).model for role in LLM_ROLES}


@dataclass(frozen=True)
class TraceRecord:
    """What the trace of one run records, as the run left it (the trace scrubs secrets out of it).

    :param result: the pipeline's result; `None` for a run without one, which then needs `error`.
    :param config: the pipeline configuration when there is no result (a result carries its own).
    :param steps: the steps of a run without a result (a result carries its own).
    :param asked_at: when the question was asked; None: now.
    :param status: what the caller got when that is not simply completed/failed (`timed_out`, `cancelled`,
        `interrupted`).
    :param config_hash: the hash of the strategy's config, when `config` does not carry it (`config_hash`); a
        config with neither is hashed in the trace's canonical form.
    """

    asked_by: str
    tenant: str
    question: str
    pipeline: str
    models: dict[str, Any]
    result: PipelineResult | None = None
    config: dict[str, Any] | None = None
    error: str | None = None
    steps: Sequence[Step] | None = None
    asked_at: datetime | None = None
    status: str | None = None
    config_hash: str | None = None


def record_answer(settings: Settings, record: TraceRecord, *, session: Session | None = None,
                  run_id: str | None = None) -> str:
    """Append the trace of `record` to the chain and return its id.

    :param session: append inside the caller's transaction (from `audit_session`); the caller commits.
        Without it the trace is committed before this returns.
    :param run_id: the run's id (from `open_run`): the trace takes it and replaces the run's `started` row.
    :returns: the trace id.
    :raises ValueError: a record without a result that does not say what went wrong, or without who asked.
    :raises RunAlreadySettled: the run already has its trace (nothing is written).
    """
    if record.result is None and record.error is None:
        raise ValueError("a trace without a pipeline result must say what went wrong (error)")
    if not record.asked_by or not record.tenant:
        raise ValueError("a trace needs who asked (asked_by) and their tenant")
    trace = build_trace(settings, record)
    if run_id is not None:
        trace.id = run_id
    key = hmac_key(settings)
    if session is not None:
        _settle_and_append(session, trace, key, run_id)
    else:
        with audit_session(settings) as own:
            _settle_and_append(own, trace, key, run_id)
    logger.info("audit trace %s seq=%s status=%s pipeline=%s", trace.id, trace.seq, trace.status, record.pipeline)
    return trace.id


def _settle_and_append(session: Session, trace: AuditTrace, key: bytes, run_id: str | None) -> None:
    # The run's row is taken before the chain lock, by every writer, so two writers always lock in one order.
    if run_id is not None:
        settle_run(session, run_id)
    append_trace(session, trace, key)


def open_run(
    settings: Settings, *, run_id: str, asked_by: str, tenant: str, question: str, pipeline: str,
    config: dict[str, Any], models: dict[str, Any], asked_at: datetime, timeout_s: float | None = None,
) -> None:
    """Commit the run's `started` row (scrubbed like its trace will be) before any of its work begins."""
    secrets = secret_values(settings)
    deadline = None if timeout_s is None else datetime.now(UTC) + timedelta(seconds=max(0.0, timeout_s))
    row = AuditRun(
        id=run_id, tenant=clean_text(tenant, secrets), asked_by=clean_text(asked_by, secrets),
        asked_at=asked_at.astimezone(UTC), question=clean_text(question, secrets), pipeline=pipeline,
        config=clean(dict(config), secrets), models=clean(dict(models), secrets), deadline_at=deadline,
        **Owner.current().columns(),
    )
    with Session(audit_engine(settings), expire_on_commit=False) as session, session.begin():
        session.add(row)


def close_interrupted_runs(settings: Settings, *, grace_s: float = DEFAULT_GRACE_S) -> list[str]:
    """Trace as `interrupted` every run left `started` by a process that is gone; returns their trace ids.

    Safe from any number of processes at once (each run is settled once, see `runs.settle_run`); runs of live
    processes, here or on other servers sharing the database, are left alone (`runs.owner_gone`).
    """
    here = Owner.current()
    with Session(audit_engine(settings)) as session:
        stale = [run for run in open_runs(session) if owner_gone(run, here, datetime.now(UTC), grace_s)]
    closed = []
    for run in stale:
        owner = Owner.of(run)
        try:
            record = TraceRecord(
                asked_by=run.asked_by, tenant=run.tenant, question=run.question, pipeline=run.pipeline,
                models=run.models, config=run.config, asked_at=run.asked_at, status=STATUS_INTERRUPTED,
                error=f"the run was interrupted: {owner.describe()} ended before it finished",
            )
            closed.append(record_answer(settings, record, run_id=run.id))
        except RunAlreadySettled:
            continue  # its owner, or another process closing leftovers, traced it meanwhile
    if closed:
        logger.warning("closed %d run(s) left started by ended processes as interrupted", len(closed))
    return closed


_SWEEP_EVERY_S = 60.0
_last_sweep: dict[str, float] = {}
_sweep_lock = threading.Lock()


def close_interrupted_runs_now_and_then(settings: Settings) -> None:
    """`close_interrupted_runs` at most once a minute per process and database: called as runs start, so the
    CLI and workers close leftovers too, and runs of another machine are closed soon after their deadline."""
    url = settings.resolved_database_url()
    now = time.monotonic()
    with _sweep_lock:
        if now - _last_sweep.get(url, -_SWEEP_EVERY_S) < _SWEEP_EVERY_S:
            return
        _last_sweep[url] = now
    try:
        close_interrupted_runs(settings)
    except Exception:  # the question must not fail because leftovers could not be closed now
        logger.exception("could not close interrupted runs")


def append_trace(session: Session, trace: AuditTrace, key: bytes) -> None:
    """Link a built trace to the chain tail and stage it; the caller's transaction commits it."""
    # The payload does not depend on the chain position: serialise it before queueing for the lock.
    payload = canonical_bytes(trace_payload(trace))
    append_link(session, trace, TRACE, key, payload)


def build_trace(settings: Settings, record: TraceRecord) -> AuditTrace:
    """The trace row of `record`, scrubbed of the settings' secrets, not yet linked to the chain."""
    secrets = secret_values(settings)
    result = record.result
    config, steps = (result.config, result.steps) if result is not None else (record.config, record.steps)
    config = clean(dict(config or {}), secrets)
    trace = AuditTrace(
        id=str(uuid.uuid4()),
        asked_by=clean_text(record.asked_by, secrets),
        tenant=clean_text(record.tenant, secrets),
        asked_at=(record.asked_at or datetime.now(UTC)).astimezone(UTC),
        question=clean_text(record.question, secrets),
        pipeline=record.pipeline,
        config_hash=str(config.get("config_hash") or record.config_hash or _hash_of(config)),
        config=config,
        models=clean(dict(record.models), secrets),
        answer=None if result is None else clean_text(result.answer, secrets),
        citations=[] if result is None else clean([_citation(c) for c in result.citations], secrets),
        status=record.status or (STATUS_FAILED if record.error is not None else STATUS_COMPLETED),
        error=None if record.error is None else clean_text(record.error, secrets),
        stop_reason=None if result is None else result.stop_reason,
        totals=clean(_totals(result, steps), secrets),
    )
    trace.steps = [_step_row(step, secrets) for step in (steps or [])]
    return trace


def _hash_of(config: dict[str, Any]) -> str:
    # A config handed over without its hash (the strategy's config_hash): hashed in the trace's canonical form.
    return hashlib.sha256(canonical_bytes(config)).hexdigest()


def _totals(result: PipelineResult | None, steps: Sequence[Step] | None) -> dict[str, Any]:
    if result is not None:
        return result.totals.to_dict()
    # A run that did not complete still spent LLM calls: auditors see what it cost.
    usage = LLMUsage()
    for step in steps or []:
        usage.add(step.llm)
    return {"llm_calls": usage.calls, "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens} if usage.calls else {}


def _citation(citation: Citation) -> dict[str, Any]:
    return citation.to_dict()


def _step_row(step: Step, secrets: list[str]) -> AuditStep:
    outputs = clean(step.outputs, secrets)
    return AuditStep(
        position=step.index,
        parent=step.parent,
        kind=clean_text(step.kind, secrets),
        name=clean_text(step.name, secrets),
        inputs=clean(step.inputs, secrets),
        outputs=outputs,
        documents=_documents(outputs),
        started_at=float(step.started_at),
        duration_s=float(step.duration_s),
        llm_calls=step.llm.calls,
        prompt_tokens=step.llm.prompt_tokens,
        completion_tokens=step.llm.completion_tokens,
        error=None if step.error is None else clean_text(step.error, secrets),
    )


def _documents(outputs: dict[str, Any]) -> list[dict[str, Any]]:
    docs = outputs.get("documents") if isinstance(outputs, dict) else None
    if not isinstance(docs, list):
        return []
    return [{"id": d.get("id"), "score": d.get("score")} for d in docs if isinstance(d, dict) and "id" in d]


def record_stopped_before_start(
    settings: Settings, outcome: str, *, asked_by: str, tenant: str, question: str, pipeline: str,
    config: dict[str, Any],
) -> str:
    """The trace of a question stopped (timed out, cancelled) before its pipeline began to run."""
    return record_answer(settings, TraceRecord(
        asked_by=asked_by, tenant=tenant, question=question, pipeline=pipeline, models=models_from_settings(settings),
        config=config, status=outcome, error=f"the run {stopped_description(outcome)} before it started",
    ))


def stopped_description(outcome: str) -> str:
    """How a trace says the run stopped: "timed out", "was cancelled"."""
    return {OUTCOME_TIMED_OUT: "timed out", OUTCOME_CANCELLED: "was cancelled"}.get(outcome, outcome)
