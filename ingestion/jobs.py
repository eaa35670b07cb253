"""The ingestion jobs API the CLI and the HTTP server call: submit, watch, resume, delete.

With `DOCQA_BROKER_URL` set, `submit_job` stores the job and the files' bytes in the SQL database, enqueues
Celery tasks and returns the job id at once; workers on any machine that reaches the broker, the database and
the document store do the work. Without a broker (the embedded default) the same items are processed in the
calling process before `submit_job` returns: no broker or worker to run, and since job state and payloads
are in the database exactly as in the queued case, an interrupted job is finished by `resume_job`.

Usage:
    job_id = submit_job(settings, tenant="acme", access=["group:hr"], paths=[Path("docs/")])
    job_status(settings, job_id)["items_done"]
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from docqa.access import DEFAULT_COLLECTION, validate_access_meta
from docqa.audit.timestamps import as_utc
from docqa.conversion.converters import check_size, file_type_of
from docqa.errors import DocqaError, UnreadableFileError
from docqa.ingestion.database import job_sessions
from docqa.ingestion.models import (
    EVENT_RESUMED,
    EVENT_SUBMITTED,
    ITEM_FAILED,
    ITEM_FINAL,
    ITEM_QUEUED,
    ITEM_RUNNING,
    ITEM_SKIPPED,
    ITEM_WRITTEN,
    IngestItem,
    IngestJob,
    IngestJobEvent,
    IngestPayload,
)
from docqa.ingestion.pipeline import ItemResult, check_collection_name, expand_labelled_paths
from docqa.ingestion.processing import finish_job_if_done, process_items
from docqa.ingestion.record_bundles import is_record_bundle
from docqa.ingestion.sweep import batches
from docqa.settings import Settings

MAX_HISTORY_EVENTS = 100
MAX_ITEMS_IN_EVENT = 1000


class JobNotFoundError(DocqaError):
    code = "job_not_found"
    http_status = 404


@dataclass(frozen=True)
class Upload:
    """Bytes sent by a client; `source_id` defaults to the name and identifies the document in its tenant."""

    name: str
    data: bytes
    source_id: str | None = None


def submit_job(
    settings: Settings,
    *,
    tenant: str,
    access: Sequence[str],
    paths: Iterable[Path | str] = (),
    uploads: Iterable[Upload] = (),
    submitted_by: str | None = None,
    on_item: Callable[[ItemResult], None] | None = None,
    collection: str = DEFAULT_COLLECTION,
) -> str:
    """Record a job with one item per file and start it; returns the job id.

    :param tenant: tenant of every document in the job.
    :param access: principals allowed to read them; required (a job without them is refused).
    :param paths: files or directories read now, on the submitting machine; the source id is the absolute path.
    :param uploads: files sent as bytes.
    :param on_item: called per finished item when the job runs in-process (no broker).
    :param collection: the collection every chunk is written to (`docqa ingest --collection`'s naming rule).
    :raises DocqaError: without tenant or principals, or with an invalid collection name.
    """
    try:
        validate_access_meta({"tenant": tenant, "access": list(access)})
    except ValueError as exc:
        raise DocqaError(f"cannot ingest: {exc}") from exc
    collection = check_collection_name(collection)
    # An item's name is what citations show: the path below the folder given (or the file's or upload's name).
    files = [(str(path), label, path) for path, label in expand_labelled_paths(paths)]
    files += [(upload.source_id or upload.name, upload.name, upload) for upload in uploads]
    with job_sessions(settings).begin() as session:
        job = NewJob(session, tenant=tenant, access=sorted(set(access)), submitted_by=submitted_by,
                     collection=collection)
        for position, (source_id, name, origin) in enumerate(files):
            item = job.add_item(position, source_id, name)
            try:
                data = _read(origin, name, settings.max_file_bytes)
            except DocqaError as exc:
                reason = exc.message.removeprefix(f"{source_id}: ").removeprefix(f"{name}: ")
                item.move_to(ITEM_FAILED, reason=reason, code=exc.code)
                continue
            job.queue(item, data)
        queued = job.submitted(files=len(files), by=submitted_by)
    dispatch_items(settings, queued, on_item)
    return job.id


class NewJob:
    """A job recorded in the caller's transaction: its items are added in order, those queued with their bytes;
    `submitted` records the submission. `submit_job` and the sync engine (`docqa.sources.sync`) both queue jobs
    through it, so a job and its history read the same whoever queued it.

    Usage:
        job = NewJob(session, tenant="acme", access=["everyone"], submitted_by="alice", collection="main")
        job.queue(job.add_item(0, "a.txt", "a.txt"), data)
        item_ids = job.submitted(files=1, by="alice")
    """

    def __init__(self, session: Session, *, tenant: str, access: list[str], submitted_by: str | None,
                 collection: str, source_name: str | None = None) -> None:
        self.session = session
        self.id = str(uuid.uuid4())
        self.queued: list[int] = []
        session.add(IngestJob(id=self.id, tenant=tenant, access=access, submitted_by=submitted_by,
                              collection=collection, source_name=source_name))

    def add_item(self, position: int, source_id: str, name: str) -> IngestItem:
        """A queued item, staged without its bytes (an item that turns out unreadable is moved to failed)."""
        item = IngestItem(job_id=self.id, position=position, source_id=source_id, name=name, status=ITEM_QUEUED)
        self.session.add(item)
        return item

    def queue(self, item: IngestItem, data: bytes) -> int:
        """Store the item's bytes for the workers; returns its id."""
        self.session.flush()
        self.session.add(IngestPayload(item_id=item.id, data=data))
        self.queued.append(item.id)
        return item.id

    def submitted(self, *, files: int, by: str | None, **detail: Any) -> list[int]:
        """Record the submission (`detail` adds to the event); a job with nothing queued is finished at once.
        Returns the queued item ids, to dispatch once the transaction has committed."""
        self.session.add(IngestJobEvent(job_id=self.id, event=EVENT_SUBMITTED,
                                        detail={"files": files, "queued": len(self.queued), "by": by, **detail}))
        if not self.queued:
            finish_job_if_done(self.session, self.id)
        return self.queued


def resume_job(settings: Settings, job_id: str, on_item: Callable[[ItemResult], None] | None = None) -> int:
    """Dispatch a job's unfinished items again (expired tasks, or a broker-less run that was interrupted).

    Safe to call at any time: finished items are left alone and re-ingesting an item is idempotent. With a broker,
    workers do this by themselves for items whose message was lost (`docqa.ingestion.sweep`); by hand it sends
    every unfinished item at once, and the job's history records it (`resumed`).
    :returns: the number of items dispatched.
    """
    with job_sessions(settings).begin() as session:
        if session.get(IngestJob, job_id) is None:
            raise JobNotFoundError(f"no ingestion job {job_id}")
        pending = list(session.scalars(
            select(IngestItem.id)
            .where(IngestItem.job_id == job_id, IngestItem.status.not_in(ITEM_FINAL))
            .order_by(IngestItem.position)
        ).all())
        if pending:
            # A fresh dispatch time keeps the sweep from sending these items once more before they are picked up.
            session.execute(update(IngestItem)
                            .where(IngestItem.job_id == job_id, IngestItem.status.not_in(ITEM_FINAL))
                            .values(dispatched_at=datetime.now(UTC), updated_at=IngestItem.updated_at))
            session.add(IngestJobEvent(job_id=job_id, event=EVENT_RESUMED,
                                       detail={"count": len(pending), "items": pending[:MAX_ITEMS_IN_EVENT]}))
    dispatch_items(settings, pending, on_item)
    return len(pending)


def job_status(settings: Settings, job_id: str) -> dict[str, Any]:
    """Progress of a job: item counts by outcome and the reason of every failed item."""
    with job_sessions(settings)() as session:
        job = session.get(IngestJob, job_id)
        if job is None:
            raise JobNotFoundError(f"no ingestion job {job_id}")
        counts = dict(
            session.execute(
                select(IngestItem.status, func.count()).where(IngestItem.job_id == job_id).group_by(IngestItem.status)
            ).all()
        )
        chunks = session.scalar(
            select(func.coalesce(func.sum(IngestItem.chunks), 0)).where(
                IngestItem.job_id == job_id, IngestItem.status == ITEM_WRITTEN
            )
        )
        failures = session.execute(
            select(IngestItem.source_id, IngestItem.code, IngestItem.reason)
            .where(IngestItem.job_id == job_id, IngestItem.status == ITEM_FAILED)
            .order_by(IngestItem.position)
        ).all()
        events = session.scalars(
            select(IngestJobEvent).where(IngestJobEvent.job_id == job_id)
            .order_by(IngestJobEvent.id.desc()).limit(MAX_HISTORY_EVENTS)
        ).all()
        return {
            "job_id": job.id,
            "status": job.status,
            "tenant": job.tenant,
            "collection": job.collection,
            "items_total": sum(counts.values()),
            "items_done": sum(n for status, n in counts.items() if status in ITEM_FINAL),
            "items_queued": counts.get(ITEM_QUEUED, 0),
            "items_running": counts.get(ITEM_RUNNING, 0),
            "items_written": counts.get(ITEM_WRITTEN, 0),
            "items_skipped": counts.get(ITEM_SKIPPED, 0),
            "items_failed": counts.get(ITEM_FAILED, 0),
            "chunks_written": int(chunks or 0),
            "failures": [{"source_id": s, "code": c, "reason": r} for s, c, r in failures],
            # The job's most recent events, oldest first: submitted, resumed by hand, re-dispatched by the sweep.
            "history": [{"at": as_utc(e.at).isoformat(), "event": e.event, **e.detail} for e in reversed(events)],
            "created_at": job.created_at.isoformat() if job.created_at else None,
            "started_at": job.started_at.isoformat() if job.started_at else None,
            "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        }


def delete_document(
    runtime: Any, tenant: str, source_id: str, *, actor: str = "system", request_id: str | None = None
) -> int:
    """Remove every chunk of one document of a tenant from the store; returns how many were deleted.

    The deletion is audited (`document.deleted`, with the access list it had): the event is staged first and
    commits only when the store deleted the chunks.
    """
    from docqa.audit.events import DOCUMENT_DELETED, event_around

    filters = {
        "operator": "AND",
        "conditions": [
            {"field": "meta.tenant", "operator": "==", "value": tenant},
            {"field": "meta.source_id", "operator": "==", "value": source_id},
        ],
    }
    found = runtime.document_store.filter_documents(filters=filters)
    ids = [doc.id for doc in found]
    if ids:
        access = sorted({p for doc in found for p in (doc.meta or {}).get("access") or []})
        with event_around(runtime.settings, tenant=tenant, actor=actor, action=DOCUMENT_DELETED,
                          target=f"document:{source_id}", request_id=request_id,
                          before={"access": access, "chunks": len(ids), "chunk_ids": sorted(ids)}, after=None):
            runtime.document_store.delete_documents(ids)
    return len(ids)


def _read(origin: Path | Upload, name: str, max_bytes: int) -> bytes:
    # Type and size are checked before the bytes are stored, so nothing unusable reaches the database.
    if not is_record_bundle(name):
        file_type_of(name)
    if isinstance(origin, Upload):
        check_size(name, len(origin.data), max_bytes)
        return origin.data
    try:
        check_size(str(origin), origin.stat().st_size, max_bytes)
        return origin.read_bytes()
    except OSError as exc:
        raise UnreadableFileError(f"{origin}: cannot read file ({exc.strerror or exc})") from exc


def dispatch_items(settings: Settings, item_ids: list[int], on_item: Callable[[ItemResult], None] | None = None,
                   engines: Callable[[], tuple[Any, Any]] | None = None) -> None:
    """Hand queued items on in task-sized batches: to the workers with a broker, else processed here, with the
    runtime and document embedder `engines` returns (a runtime of their own when None).

    :param on_item: called per finished item when processed here.
    """
    tasks = batches(item_ids, settings.ingest_items_per_task)
    if not tasks:
        return
    if settings.broker_url:
        from docqa.ingestion.celery_app import enqueue

        for batch in tasks:
            enqueue(settings, batch)
        return
    runtime, embedder = engines() if engines is not None else _own_engines(settings)
    for batch in tasks:
        process_items(settings, batch, runtime=runtime, embedder=embedder, on_item=on_item)


def _own_engines(settings: Settings) -> tuple[Any, Any]:
    from docqa.runtime import Runtime

    runtime = Runtime(settings)
    embedder = runtime.document_embedder()
    embedder.warm_up()
    return runtime, embedder
