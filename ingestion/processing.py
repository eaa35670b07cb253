"""What a worker does with a batch of queued items: claim, ingest, record the outcome.

Files go through `ingest_documents`; FHIR R4 bundles (`.json`) through `ingest_record_bundle`.

Crash safety comes from three facts: chunk writes are idempotent (deterministic ids, overwrite, stale chunks
deleted); item state is committed before and after the work; and a killed worker's message is redelivered
(`acks_late`), while a batch whose message is lost altogether is re-dispatched by the workers' stale-item sweep
(`docqa.ingestion.sweep`; the heartbeat of running items keeps it off live work). A redelivered batch runs its
unfinished items one at a time, so one item that kills its process burns only its own attempts and ends `failed`
instead of looping.

Which attempts count (`give_up_reason`): on a queue, a file that crashes its pool process (segfault, OOM kill of
the child, hard time limit) leaves the worker's main process alive, and that process records the death on the
item (`record_child_death`, counted in `crashes`); `ingest_max_attempts` of those fail the item. An attempt ended
by the whole worker's death (a deploy, SIGKILL or OOM kill of the node) is nobody's record and says nothing
about the file, so it only counts against the larger `ingest_max_interruptions`. In-process (no broker) no
parent outlives a crash, and every unfinished attempt counts against `ingest_max_attempts`.

Usage:
    process_items(settings, [item_id, ...], runtime=Runtime(settings))
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from docqa.access import COLLECTION_FIELD
from docqa.audit.events import DOCUMENT_INGESTED, RECORDS_INGESTED, append_event
from docqa.audit.recorder import audit_session
from docqa.db import make_engine
from docqa.ingestion.database import job_sessions
from docqa.ingestion.heartbeat import beating, heartbeat_interval_s
from docqa.ingestion.models import (
    ITEM_FAILED,
    ITEM_FINAL,
    ITEM_RUNNING,
    ITEM_WRITTEN,
    JOB_COMPLETED_WITH_ERRORS,
    JOB_RUNNING,
    JOB_SUCCEEDED,
    IngestItem,
    IngestJob,
    IngestPayload,
)
from docqa.ingestion.pipeline import ItemResult, Source, ingest_documents
from docqa.ingestion.record_bundles import ingest_record_bundle, is_record_bundle
from docqa.settings import Settings

logger = logging.getLogger(__name__)
ItemDone = Callable[[ItemResult], None]


def worker_name(pid: int | None = None) -> str:
    """What an item's `worker` says of the process that runs it (`pid`: a pool child seen from its parent)."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


def give_up_reason(attempts: int, crashes: int, settings: Settings) -> tuple[str, str] | None:
    """The code and reason an unfinished item is failed with instead of another attempt, or None to go on.

    :param attempts: attempts made so far (none of them finished the item).
    :param crashes: those that ended with their pool process dead and the worker's main process alive.
    """
    if not settings.broker_url:
        if attempts >= settings.ingest_max_attempts:
            return "gave_up", f"gave up after {attempts} attempts: the process stopped each time while ingesting it"
        return None
    if crashes >= settings.ingest_max_attempts:
        return "gave_up", (f"gave up after {attempts} attempts: the worker process ingesting it died {crashes} "
                           "times (crash, out of memory or time limit) while the worker itself ran on")
    interrupted = attempts - crashes
    if interrupted >= settings.ingest_max_interruptions:
        return "interrupted", (f"gave up after {attempts} attempts: the whole worker was stopped {interrupted} "
                               "times while ingesting it (killed or restarted)")
    return None


def record_child_death(settings: Settings, item_ids: Sequence[int], worker: str) -> list[int]:
    """Count a crash on the items among `item_ids` that the dead pool process `worker` was running.

    Called by the worker's main process before the message is handed out again, with an engine of its own: the pool
    forks new children from this process, and none may inherit a pooled connection.
    :returns: the ids of the items counted.
    """
    engine = make_engine(settings.resolved_database_url())
    try:
        with sessionmaker(bind=engine).begin() as session:
            counted = list(session.scalars(
                update(IngestItem)
                .where(IngestItem.id.in_(list(item_ids)), IngestItem.status == ITEM_RUNNING,
                       IngestItem.worker == worker)
                .values(crashes=IngestItem.crashes + 1, updated_at=IngestItem.updated_at)
                .returning(IngestItem.id)
            ).all())
    finally:
        engine.dispose()
    return sorted(counted)


def process_items(
    settings: Settings,
    item_ids: Sequence[int],
    *,
    runtime: Any,
    embedder: Any | None = None,
    on_item: ItemDone | None = None,
) -> None:
    """Ingest the unfinished items among `item_ids` (all of one job); finished ones are left alone."""
    sessions = job_sessions(settings)
    with sessions() as session:
        items = session.scalars(
            select(IngestItem).where(IngestItem.id.in_(list(item_ids))).order_by(IngestItem.position)
        ).all()
        pending = [item.id for item in items if not item.finished]
        retried = any(item.attempts > 0 for item in items if not item.finished)
    groups = [[item_id] for item_id in pending] if retried else [pending] if pending else []
    for group in groups:
        _process_group(sessions, settings, group, runtime, embedder, on_item)


def fail_items(settings: Settings, item_ids: Sequence[int], reason: str, code: str) -> None:
    """Mark unfinished items failed (a task that exhausted its retries); finished ones keep their outcome."""
    with job_sessions(settings).begin() as session:
        items = _lock_items(session, item_ids)
        for item in items:
            if not item.finished:
                item.move_to(ITEM_FAILED, reason=reason, code=code)
        _finish_items(session, items)


def _process_group(
    sessions: sessionmaker,
    settings: Settings,
    item_ids: list[int],
    runtime: Any,
    embedder: Any | None,
    on_item: ItemDone | None,
) -> None:
    with sessions.begin() as session:
        claimed = _claim(session, settings, item_ids)
        if not claimed:
            return
        job = session.get(IngestJob, claimed[0].job_id)
        assert job is not None  # the foreign key guarantees it
        tenant, access, job_id, submitted_by = job.tenant, list(job.access), job.id, job.submitted_by
        collection = job.collection
        # Chunks of a synced source carry its name, so its documents can be told apart and removed with it.
        extra_meta = {"source_name": job.source_name} if job.source_name else {}
        payloads = dict(
            session.execute(
                select(IngestPayload.item_id, IngestPayload.data).where(
                    IngestPayload.item_id.in_([item.id for item in claimed])
                )
            ).all()
        )
        work = [(item.id, item.attempts, item.source_id, item.name) for item in claimed]
    sources = [
        Source(source_id=source_id, name=name, data=payloads.get(item_id, b""), source=name,
               meta={"ingest_job": job_id, COLLECTION_FIELD: collection, **extra_meta})
        for item_id, _, source_id, name in work
    ]
    documents = [source for source in sources if not is_record_bundle(source.name)]
    bundles = [source for source in sources if is_record_bundle(source.name)]
    # On a queue, the heartbeat tells the stale-item sweep this work is alive however long it takes.
    alive = (beating(sessions, [item_id for item_id, *_ in work], heartbeat_interval_s(settings))
             if settings.broker_url else nullcontext())
    with alive:
        results = ingest_documents(runtime, documents, tenant, access, embedder=embedder).items if documents else []
        if bundles:
            if embedder is None:
                embedder = runtime.document_embedder()
                embedder.warm_up()
            results += [ingest_record_bundle(runtime, s, tenant, access, embedder=embedder) for s in bundles]
    by_source = {result.source_id: result for result in results}
    # The items' outcomes and the audit events of what was written commit in one transaction.
    with audit_session(settings) as session:
        items = _lock_items(session, [item_id for item_id, *_ in work])
        for item in items:
            result = by_source[item.source_id]
            attempts = next(attempts for item_id, attempts, *_ in work if item_id == item.id)
            if result.status == "skipped" and attempts > 1:
                result = _own_earlier_write(runtime, tenant, job_id, result)
            if item.status == ITEM_RUNNING:  # another delivery may have finished it meanwhile
                item.move_to(result.status, chunks=result.chunks, reason=result.reason, code=result.code)
                if result.status == ITEM_WRITTEN:
                    append_event(
                        session, settings, tenant=tenant, actor=submitted_by or "system",
                        action=RECORDS_INGESTED if is_record_bundle(item.name) else DOCUMENT_INGESTED,
                        target=f"document:{item.source_id}", request_id=job_id, before=result.replaced,
                        after={"access": sorted(access), "chunks": result.chunks, "job": job_id,
                               "chunk_ids": list(result.chunk_ids)},
                    )
            if on_item is not None:
                on_item(result)
        _finish_items(session, items)
    _refit_topics_when_job_done(sessions, runtime, tenant, job_id)


def _refit_topics_when_job_done(sessions: sessionmaker, runtime: Any, tenant: str, job_id: str) -> None:
    # Once per job that wrote patient records, when its last batch is done (whichever batch held the bundles): a
    # model fitted on the first batch would be refitted again and again as later batches grow the corpus. On a
    # worker the refit goes to the queue as its own task.
    with sessions() as session:
        job = session.get(IngestJob, job_id)
        if job is None or job.finished_at is None:
            return
        written = session.scalars(select(IngestItem.name).where(
            IngestItem.job_id == job_id, IngestItem.status == ITEM_WRITTEN)).all()
        if not any(is_record_bundle(name) for name in written):
            return
    from docqa.topics import schedule_topic_refit

    try:
        outcome = schedule_topic_refit(runtime, tenant)
    except Exception as exc:  # the records are written; a failed fit only leaves the topic filter as it was
        logger.warning("topic model refit for tenant %s failed: %s", tenant, exc)
        return
    if outcome:
        logger.info("%s", outcome)


def _claim(session: Session, settings: Settings, item_ids: list[int]) -> list[IngestItem]:
    items = _lock_items(session, item_ids)
    claimed = []
    for item in items:
        if item.finished:
            continue
        verdict = give_up_reason(item.attempts, item.crashes, settings)
        if verdict is not None:
            code, reason = verdict
            item.move_to(ITEM_FAILED, code=code, reason=reason)
            continue
        item.move_to(ITEM_RUNNING, attempts=item.attempts + 1, worker=worker_name(), heartbeat_at=datetime.now(UTC))
        claimed.append(item)
    if claimed:
        job = session.get(IngestJob, claimed[0].job_id)
        if job is not None and job.status != JOB_RUNNING and job.finished_at is None:
            job.move_to(JOB_RUNNING)
    _finish_items(session, items)
    return claimed


def _own_earlier_write(runtime: Any, tenant: str, job_id: str, result: ItemResult) -> ItemResult:
    # An earlier attempt of this very job wrote the chunks and died before recording it: that is a write.
    filters = {
        "operator": "AND",
        "conditions": [
            {"field": "meta.tenant", "operator": "==", "value": tenant},
            {"field": "meta.source_id", "operator": "==", "value": result.source_id},
        ],
    }
    stored = runtime.document_store.filter_documents(filters=filters)
    if stored and all(doc.meta.get("ingest_job") == job_id for doc in stored):
        return ItemResult(result.source_id, result.source, ITEM_WRITTEN, chunks=len(stored))
    return result


def _lock_items(session: Session, item_ids: Sequence[int]) -> list[IngestItem]:
    # Row locks on PostgreSQL keep two deliveries of one batch from claiming an item twice; SQLite
    # serialises writers anyway.
    query = select(IngestItem).where(IngestItem.id.in_(list(item_ids))).order_by(IngestItem.id).with_for_update()
    return list(session.scalars(query).all())


def _finish_items(session: Session, items: list[IngestItem]) -> None:
    done = [item.id for item in items if item.finished]
    if done:
        session.execute(delete(IngestPayload).where(IngestPayload.item_id.in_(done)))
    for job_id in {item.job_id for item in items}:
        finish_job_if_done(session, job_id)


def finish_job_if_done(session: Session, job_id: str) -> None:
    session.flush()
    counts = dict(
        session.execute(
            select(IngestItem.status, func.count()).where(IngestItem.job_id == job_id).group_by(IngestItem.status)
        ).all()
    )
    if any(status not in ITEM_FINAL for status in counts):
        return
    job = session.get(IngestJob, job_id, with_for_update=True)
    if job is None or job.finished_at is not None:
        return
    job.move_to(JOB_COMPLETED_WITH_ERRORS if counts.get(ITEM_FAILED) else JOB_SUCCEEDED)
