"""The sync engine: bring docqa in step with one source, exactly and resumably.

One run (`sync_source`), holding the source's lease:
1. settle what the last run left on the ingestion queue: entries whose job item is finished take over its
   fingerprint and access (written), or are marked failed with the item's reason; without a broker, unfinished
   items of an interrupted run are processed now, in their own job (so the write an interrupted attempt made is
   recognised, audited once, and never duplicated);
2. list the source and compare each item with its entry: unchanged (same `quick` check or fingerprint), access
   changed only (the ACL map, the POSIX group: the stored chunks get the new access list, no re-embedding, one
   `document.access_changed` event with the list before and after), new or changed (queued for ingestion);
3. queue new and changed items as ingestion jobs (one per access list, `source_name` on every chunk) in the same
   transaction that marks their entries pending, then process them here (no broker) or leave them to the
   workers (the next run settles them);
4. delete the documents of entries the source no longer has, with their chunks (`document.deleted`, with the
   access list they had), unless the listing was incomplete.
Every step is committed as it completes and repeats harmlessly, so a run killed at any point and run again
ends as one uninterrupted run would. An unreachable source fails the run with its reason and changes nothing.

Usage:
    report = sync_source(settings, tenant="acme", name="handbook", actor="cli:alice")
    report.added, report.changed, report.deleted, report.failed
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from haystack.document_stores.types import DuplicatePolicy
from sqlalchemy import delete, select, update

from docqa.access import validate_access_meta
from docqa.conversion.converters import check_size, file_type_of
from docqa.errors import DocqaError
from docqa.ingestion.database import job_sessions
from docqa.ingestion.jobs import NewJob, dispatch_items
from docqa.ingestion.models import ITEM_FAILED, ITEM_FINAL, ITEM_SKIPPED, ITEM_WRITTEN, IngestItem
from docqa.settings import Settings
from docqa.sources.acl import AclMap, access_for
from docqa.sources.definitions import get_source, next_run
from docqa.sources.listing import ListedItem, open_listing
from docqa.sources.locking import lock_owner_id, release_lease, take_lease
from docqa.sources.models import (
    ENTRY_FAILED,
    ENTRY_SYNCED,
    RUN_COMPLETED_WITH_ERRORS,
    RUN_FAILED,
    RUN_RUNNING,
    RUN_SUCCEEDED,
    SourceEntry,
    SyncSource,
)

logger = logging.getLogger(__name__)
# Items queued per ingestion job (and committed per step): bounds what an interruption makes a rerun redo.
ITEMS_PER_JOB = 256


@dataclass
class SyncReport:
    """What one run did; `pending` items are on the queue (with a broker) and settled by the next run."""

    source: str
    status: str = RUN_RUNNING
    added: int = 0
    changed: int = 0
    deleted: int = 0
    access_changed: int = 0
    unchanged: int = 0
    failed: int = 0
    pending: int = 0
    chunks_written: int = 0
    error: str | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in
                ("added", "changed", "deleted", "access_changed", "unchanged", "failed", "pending")}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if self.status == RUN_FAILED:
            return f"{self.source}: failed: {self.error}"
        return (f"{self.source}: {self.added} added, {self.changed} changed, {self.deleted} deleted, "
                f"{self.access_changed} access changed, {self.unchanged} unchanged, {self.failed} failed"
                + (f", {self.pending} queued" if self.pending else "") + f" in {self.seconds:.1f} s")


@dataclass
class _Work:
    item: ListedItem
    access: list[str]
    fingerprint: str | None  # None for a new item: hashed when queued, so its bytes are read once, late
    entry: SourceEntry | None


class _Run:
    """State of one run: the settings, the source (detached copy), a runtime made on first need."""

    def __init__(self, settings: Settings, source: SyncSource, actor: str, runtime: Any | None,
                 embedder: Any | None, report: SyncReport) -> None:
        self.settings = settings
        self.sessions = job_sessions(settings)
        self.source = source
        self.actor = actor
        self._runtime = runtime
        self._embedder = embedder
        self.report = report
        # Items this run settled from an earlier run's queue: counted once, not again as unchanged.
        self.settled: set[str] = set()
        self.failed_keys: set[str] = set()

    @property
    def runtime(self) -> Any:
        if self._runtime is None:
            from docqa.runtime import Runtime

            self._runtime = Runtime(self.settings)
        return self._runtime

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            self._embedder = self.runtime.document_embedder()
            if hasattr(self._embedder, "warm_up"):
                self._embedder.warm_up()
        return self._embedder

    def document_id(self, key: str) -> str:
        return f"{self.source.name}:{key}"

    def fail(self, key: str, reason: str) -> None:
        """Count `key` as failed, once per run: an item a killed run left failed on the queue is settled as failed
        and then tried again by the listing, and a second failure only updates its reason."""
        if key in self.failed_keys:
            for failure in self.report.failures:
                if failure["key"] == key:
                    failure["reason"] = reason
            return
        self.failed_keys.add(key)
        self.report.failed += 1
        if len(self.report.failures) < 100:
            self.report.failures.append({"key": key, "reason": reason})


def sync_source(
    settings: Settings,
    *,
    tenant: str,
    name: str,
    actor: str = "system",
    runtime: Any | None = None,
    embedder: Any | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> SyncReport:
    """Run one sync of the source `name` of `tenant`; raises `SourceBusyError` while another run holds it.

    :param actor: who the audit events name (`cli:alice`, `user:bob`, `scheduler`).
    :param runtime: the document store and embedder to use (a `docqa.runtime.Runtime` by default).
    :param on_progress: called with one line per step, for the CLI.
    """
    started = time.perf_counter()
    owner = lock_owner_id()
    sessions = job_sessions(settings)
    with sessions.begin() as session:
        row = get_source(session, tenant, name)
        take_lease(session, row, owner)
        row.last_status, row.last_started_at, row.last_error = RUN_RUNNING, datetime.now(UTC), None
        session.flush()
        session.expunge(row)
    report = SyncReport(source=name)
    run = _Run(settings, row, actor, runtime, embedder, report)
    say = on_progress or (lambda _line: None)
    try:
        _settle_pending(run)
        _sync_listing(run, say)
        report.status = RUN_COMPLETED_WITH_ERRORS if report.failed else RUN_SUCCEEDED
    except DocqaError as exc:
        report.status, report.error = RUN_FAILED, exc.message
    except Exception as exc:
        # An unexpected error fails the run with its reason; the next run starts again from the entries.
        logger.exception("sync of source %s failed", name)
        report.status, report.error = RUN_FAILED, f"{type(exc).__name__}: {exc}"
    finally:
        report.seconds = time.perf_counter() - started
        with sessions.begin() as session:
            current = session.get(SyncSource, row.id)
            if current is not None:
                current.last_status, current.last_error = report.status, report.error
                current.last_finished_at = datetime.now(UTC)
                current.last_counts = report.counts()
                current.next_run_at = next_run(current, current.last_started_at or datetime.now(UTC))
            release_lease(session, row.id, owner)
    return report


def _sync_listing(run: _Run, say: Callable[[str], None]) -> None:
    source = run.source
    acl_map = AclMap.load(source.acl_map) if source.acl_map else None
    with run.sessions() as session:
        entries = {e.key: e for e in session.scalars(select(SourceEntry).where(SourceEntry.source_pk == source.id))}
        session.expunge_all()
    known = {key: (e.fingerprint, e.quick) for key, e in entries.items() if e.status == ENTRY_SYNCED}
    with open_listing(source.type, dict(source.config), known, settings=run.settings, tenant=source.tenant,
                      name=source.name) as listing:
        say(f"{source.name}: {len(listing.items)} items listed")
        run.report.notes.extend(listing.notes)
        to_ingest: list[_Work] = []
        access_only: list[_Work] = []
        for item in listing.items:
            entry = entries.get(item.key)
            if entry is not None and entry.pending_item is not None:
                run.report.pending += 1  # still on the queue (broker): the next run settles it
                continue
            access = access_for(item.acl_path, list(source.allow), acl_map, item.hints)
            try:
                validate_access_meta({"tenant": source.tenant, "access": access})
            except ValueError:
                reason = "no principal may read it: no ACL map rule matches and the source has no --allow"
                if entry is not None and entry.fingerprint is not None:
                    # Fail closed: a stored copy keeps no access list the source no longer grants.
                    delete_entry_document(run.settings, run.runtime, source, entry, actor=run.actor)
                    reason += "; its stored copy was deleted"
                run.fail(item.key, reason)
                continue
            try:
                work = _compare(run, item, entry, access)
            except (DocqaError, OSError) as exc:
                run.fail(item.key, f"cannot read: {getattr(exc, 'message', None) or exc}")
                continue
            if work is None:
                if item.key not in run.settled:
                    run.report.unchanged += 1
            elif entry is not None and entry.status == ENTRY_SYNCED and work.fingerprint == entry.fingerprint:
                access_only.append(work)
            else:
                to_ingest.append(work)
        _apply_access(run, access_only)
        _ingest(run, to_ingest, say)
        listed = {item.key for item in listing.items} | listing.keep
        gone = [e for key, e in entries.items() if key not in listed]
        if gone and not listing.complete:
            run.report.notes.append(f"listing incomplete: {len(gone)} missing items kept, none deleted")
        elif gone:
            _delete(run, gone, say)


def _compare(run: _Run, item: ListedItem, entry: SourceEntry | None, access: list[str]) -> _Work | None:
    """None when nothing changed; else the work for it (reading the item only when the cheap checks differ)."""
    if entry is None:
        return _Work(item, access, None, None)
    if entry is not None and entry.status == ENTRY_SYNCED and entry.fingerprint is not None:
        same_quick = item.quick is not None and item.quick == entry.quick
        if same_quick and item.fingerprint in (None, entry.fingerprint):
            item.fingerprint = entry.fingerprint
        if item.content_fingerprint() == entry.fingerprint:
            if not same_quick and item.quick is not None:
                _update_entry(run, entry.id, quick=item.quick)
            if sorted(entry.access or []) == access:
                return None
    return _Work(item, access, item.content_fingerprint(), entry)


def _update_entry(run: _Run, entry_id: int, **values: Any) -> None:
    with run.sessions.begin() as session:
        entry = session.get(SourceEntry, entry_id)
        if entry is not None:
            for key, value in values.items():
                setattr(entry, key, value)


def _apply_access(run: _Run, works: list[_Work]) -> None:
    """New access lists on stored chunks, without re-embedding; one audited change per document.

    The event and the entry's new access list commit in one transaction, after the store write: a run killed
    before the commit leaves the entry as it was, so the rerun writes (idempotently) and audits the change once.
    """
    from docqa.audit.events import DOCUMENT_ACCESS_CHANGED, event_around

    store = run.runtime.document_store if works else None
    for work in works:
        assert work.entry is not None
        document_id = run.document_id(work.item.key)
        stored = store.filter_documents(filters=_document_filter(run.source.tenant, document_id))
        if not stored:
            # The chunks went away behind the source's back (deleted by hand): ingest the item again.
            _ingest(run, [work], lambda _line: None)
            continue
        before = sorted(work.entry.access or [])
        updated = [replace(doc, meta={**doc.meta, "access": work.access}) for doc in stored]
        with event_around(run.settings, tenant=run.source.tenant, actor=run.actor, action=DOCUMENT_ACCESS_CHANGED,
                          target=f"document:{document_id}", request_id=f"source:{run.source.name}",
                          before={"access": before, "chunks": len(stored)},
                          after={"access": work.access, "chunks": len(stored), "source": run.source.name,
                                 "chunk_ids": sorted(doc.id for doc in stored)}) as session:
            store.write_documents(updated, policy=DuplicatePolicy.OVERWRITE)
            session.execute(update(SourceEntry).where(SourceEntry.id == work.entry.id).values(
                access=work.access, quick=work.item.quick or work.entry.quick))
        run.report.access_changed += 1


def _ingest(run: _Run, works: list[_Work], say: Callable[[str], None]) -> None:
    by_access: dict[tuple[str, ...], list[_Work]] = {}
    for work in works:
        by_access.setdefault(tuple(work.access), []).append(work)
    done = 0
    for access, group in by_access.items():
        for start in range(0, len(group), ITEMS_PER_JOB):
            batch = group[start : start + ITEMS_PER_JOB]
            item_ids = _queue_job(run, list(access), batch)
            _dispatch(run, item_ids)
            if not run.settings.broker_url:
                _settle(run, item_ids)
            else:
                run.report.pending += len(item_ids)
            done += len(batch)
            say(f"{run.source.name}: {done}/{len(works)} new or changed items queued")
            with run.sessions.begin() as session:  # a long run keeps its lease
                take_lease(session, session.get(SyncSource, run.source.id), lock_owner_id())


def _queue_job(run: _Run, access: list[str], works: list[_Work]) -> list[int]:
    """One ingestion job for `works`, committed with their entries marked pending; returns its item ids."""
    source = run.source
    with run.sessions.begin() as session:
        job = NewJob(session, tenant=source.tenant, access=access, submitted_by=run.actor,
                     collection=source.collection, source_name=source.name)
        session.flush()
        for position, work in enumerate(works):
            key = work.item.key
            entry = session.get(SourceEntry, work.entry.id) if work.entry is not None else None
            if entry is None:
                entry = SourceEntry(source_pk=source.id, key=key, document_id=run.document_id(key),
                                    status=ENTRY_SYNCED)
                session.add(entry)
            try:
                file_type_of(work.item.name)
                data = work.item.read()
                check_size(work.item.name, len(data), run.settings.max_file_bytes)
            except (DocqaError, OSError) as exc:
                reason = getattr(exc, "message", None) or str(exc)
                entry.status, entry.reason = ENTRY_FAILED, reason.removeprefix(f"{work.item.name}: ")
                run.fail(key, entry.reason)
                continue
            entry.pending_item = job.queue(job.add_item(position, run.document_id(key), work.item.name), data)
            work.item.data = None  # the bytes are in the database now; keep memory flat over a large sync
            entry.pending_fingerprint = work.fingerprint or work.item.content_fingerprint()
            entry.pending_quick, entry.pending_access = work.item.quick, list(access)
        queued = job.submitted(files=len(works), by=run.actor, source=source.name)
    return queued


def _dispatch(run: _Run, item_ids: list[int]) -> None:
    dispatch_items(run.settings, item_ids, engines=lambda: (run.runtime, run.embedder))


def _settle_pending(run: _Run) -> None:
    """Entries a previous run queued: settle those finished; without a broker, finish the others first."""
    with run.sessions() as session:
        pending = list(session.scalars(select(SourceEntry.pending_item).where(
            SourceEntry.source_pk == run.source.id, SourceEntry.pending_item.is_not(None))))
        unfinished = list(session.scalars(select(IngestItem.id).where(
            IngestItem.id.in_(pending), IngestItem.status.not_in(ITEM_FINAL)))) if pending else []
    if unfinished and not run.settings.broker_url:
        _dispatch(run, unfinished)
    if pending:
        _settle(run, pending)


def _settle(run: _Run, item_ids: list[int]) -> None:
    if not item_ids:
        return
    with run.sessions.begin() as session:
        items = {item.id: item for item in session.scalars(select(IngestItem).where(IngestItem.id.in_(item_ids)))}
        entries = session.scalars(select(SourceEntry).where(SourceEntry.source_pk == run.source.id,
                                                            SourceEntry.pending_item.in_(item_ids))).all()
        for entry in entries:
            item = items.get(entry.pending_item)
            if item is None:  # the job was deleted: forget it, the next run compares afresh
                entry.pending_item = None
                continue
            if item.status not in ITEM_FINAL:
                continue
            run.settled.add(entry.key)
            if item.status in (ITEM_WRITTEN, ITEM_SKIPPED):
                was_new = entry.fingerprint is None
                entry.fingerprint, entry.quick = entry.pending_fingerprint, entry.pending_quick
                entry.access, entry.status, entry.reason = entry.pending_access, ENTRY_SYNCED, None
                if item.status == ITEM_WRITTEN:
                    run.report.chunks_written += item.chunks
                    if was_new:
                        run.report.added += 1
                    else:
                        run.report.changed += 1
                else:
                    run.report.unchanged += 1
            elif item.status == ITEM_FAILED:
                entry.status, entry.reason = ENTRY_FAILED, f"{item.reason} ({item.code})"
                run.fail(entry.key, entry.reason)
            entry.pending_item = entry.pending_fingerprint = entry.pending_quick = None
            entry.pending_access = None


def _delete(run: _Run, gone: list[SourceEntry], say: Callable[[str], None]) -> None:
    for entry in gone:
        if entry.pending_item is not None:
            run.report.pending += 1
            continue
        delete_entry_document(run.settings, run.runtime, run.source, entry, actor=run.actor)
        run.report.deleted += 1
    say(f"{run.source.name}: {len(gone)} items gone from the source deleted")


def delete_entry_document(settings: Settings, runtime: Any, source: SyncSource, entry: SourceEntry, *,
                          actor: str) -> int:
    """Delete an entry's document (its chunks) and the entry, audited as `document.deleted` with the access
    list docqa recorded; returns the chunks deleted.

    The event and the entry's removal commit together after the store deletion: a run killed before the commit
    keeps the entry, and the rerun (finding fewer or no chunks) records the deletion once.
    """
    from docqa.audit.events import DOCUMENT_DELETED, event_around

    store = runtime.document_store
    found = store.filter_documents(filters=_document_filter(source.tenant, entry.document_id))
    ids = sorted(doc.id for doc in found)
    if not ids and entry.fingerprint is None:  # never stored (it failed each time): nothing to delete or audit
        with job_sessions(settings).begin() as session:
            session.execute(delete(SourceEntry).where(SourceEntry.id == entry.id))
        return 0
    access = sorted(set(entry.access or []) | {p for doc in found for p in (doc.meta or {}).get("access") or []})
    with event_around(settings, tenant=source.tenant, actor=actor, action=DOCUMENT_DELETED,
                      target=f"document:{entry.document_id}", request_id=f"source:{source.name}",
                      before={"access": access, "chunks": len(ids), "chunk_ids": ids, "source": source.name},
                      after=None) as session:
        if ids:
            store.delete_documents(ids)
        session.execute(delete(SourceEntry).where(SourceEntry.id == entry.id))
    return len(ids)


def remove_source_documents(settings: Settings, source: SyncSource, actor: str, runtime: Any) -> int:
    """Delete every document a source stored (audited like any deletion); returns how many were deleted."""
    with job_sessions(settings)() as session:
        entries = list(session.scalars(select(SourceEntry).where(SourceEntry.source_pk == source.id)))
        session.expunge_all()
    deleted = 0
    for entry in entries:
        if delete_entry_document(settings, runtime, source, entry, actor=actor):
            deleted += 1
    return deleted


def _document_filter(tenant: str, document_id: str) -> dict[str, Any]:
    return {"operator": "AND", "conditions": [
        {"field": "meta.tenant", "operator": "==", "value": tenant},
        {"field": "meta.source_id", "operator": "==", "value": document_id},
    ]}
