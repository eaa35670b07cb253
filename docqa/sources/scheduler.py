"""Running syncs when they are due, and removing sources.

A source with `--every` is due once its `next_run_at` has passed; one without a schedule is synced by every
`docqa sources sync --all` (so a cron line alone can drive it). Three drivers call `sync_due`: cron through the
CLI, Celery beat (`docqa.sources.tasks`, when a broker is set) and `docqa serve` with `DOCQA_SOURCES_SCHEDULER`
(a daemon thread, `start_serve_scheduler`). Whichever runs, the source's lease keeps one sync per source at a time.

Usage:
    reports = sync_due(settings, actor="scheduler")
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from docqa.audit.timestamps import as_utc
from docqa.ingestion.database import job_sessions
from docqa.settings import Settings
from docqa.sources.definitions import audited_definition, get_source
from docqa.sources.locking import SourceBusyError, lock_owner_id, take_lease
from docqa.sources.models import SourceEntry, SyncSource
from docqa.sources.sync import SyncReport, remove_source_documents, sync_source

logger = logging.getLogger(__name__)


def due_sources(settings: Settings, *, force: bool = False, scheduled_only: bool = False) -> list[tuple[str, str]]:
    """(tenant, name) of every source due now; `scheduled_only` leaves out those without `--every`."""
    now = datetime.now(UTC)
    with job_sessions(settings)() as session:
        rows = session.scalars(select(SyncSource).order_by(SyncSource.tenant, SyncSource.name)).all()
        due = []
        for row in rows:
            if row.every_s is None:
                if force or not scheduled_only:
                    due.append((row.tenant, row.name))
            elif force or row.next_run_at is None or as_utc(row.next_run_at) <= now:
                due.append((row.tenant, row.name))
        return due


def sync_due(
    settings: Settings,
    *,
    actor: str = "scheduler",
    force: bool = False,
    scheduled_only: bool = False,
    runtime: Any | None = None,
    on_report: Callable[[SyncReport], None] | None = None,
) -> list[SyncReport]:
    """Sync every due source in turn; a source another process is syncing is passed over (its run counts)."""
    reports = []
    for tenant, name in due_sources(settings, force=force, scheduled_only=scheduled_only):
        try:
            report = sync_source(settings, tenant=tenant, name=name, actor=actor, runtime=runtime)
        except SourceBusyError as exc:
            logger.info("%s", exc.message)
            continue
        reports.append(report)
        if on_report is not None:
            on_report(report)
    return reports


def remove_source(settings: Settings, tenant: str, name: str, *, actor: str, keep_documents: bool = False,
                  runtime: Any | None = None) -> int:
    """Remove a source's definition and state, and its documents unless `keep_documents`; returns how many
    documents were deleted. Refused (`SourceBusyError`) while a sync of it runs."""
    sessions = job_sessions(settings)
    with sessions.begin() as session:
        row = get_source(session, tenant, name)
        take_lease(session, row, lock_owner_id())  # no sync may start or run meanwhile
        session.expunge(row)
    deleted = 0
    if not keep_documents:
        if runtime is None:
            from docqa.runtime import Runtime

            runtime = Runtime(settings)
        deleted = remove_source_documents(settings, row, actor, runtime)
    from docqa.audit.events import SOURCE_REMOVED, append_event
    from docqa.audit.recorder import audit_session

    # The removal and its event commit together; the documents' own deletions were audited one by one above.
    with audit_session(settings) as session:
        current = session.get(SyncSource, row.id)
        if current is not None:
            kept = session.scalar(select(func.count()).where(SourceEntry.source_pk == row.id,
                                                             SourceEntry.fingerprint.is_not(None))) or 0
            append_event(session, settings, tenant=tenant, actor=actor, action=SOURCE_REMOVED,
                         target=f"source:{name}", before=audited_definition(current),
                         after={"documents_deleted": deleted, "documents_kept": kept} if keep_documents else None)
            session.delete(current)
    if row.type == "git":
        shutil.rmtree(settings.data_dir / "sources" / "git" / tenant / name, ignore_errors=True)
    return deleted


def start_serve_scheduler(settings: Settings, stop: threading.Event, interval_s: float = 30.0,
                          runtime: Any | None = None) -> threading.Thread:
    """A daemon thread of `docqa serve` that runs the scheduled syncs that are due, until `stop` is set
    (`runtime`: the server's, so syncs write through the store it has open)."""

    def loop() -> None:
        while not stop.wait(interval_s):
            try:
                sync_due(settings, actor="scheduler", scheduled_only=True, runtime=runtime)
            except Exception:  # the next round tries again; the server keeps answering
                logger.exception("scheduled source sync failed")

    thread = threading.Thread(target=loop, name="docqa-sources-scheduler", daemon=True)
    thread.start()
    return thread
