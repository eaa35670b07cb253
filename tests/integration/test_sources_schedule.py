"""Scheduling sources: with a broker (Redis on loopback) a sync queues its items and the next run settles what the
workers wrote; Celery beat's schedule names the due-sync task; `docqa sources sync --all` for cron; the lease keeps
one sync per source; `docqa serve`'s scheduler thread and `docqa sources watch` sync on their own."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from sqlalchemy import select, update

from docqa.cli import main
from docqa.ingestion.celery_app import create_celery_app
from docqa.ingestion.database import job_sessions
from docqa.ingestion.processing import process_items
from docqa.settings import Settings
from docqa.sources.definitions import define_source, source_status
from docqa.sources.locking import SourceBusyError
from docqa.sources.models import SourceEntry, SyncSource
from docqa.sources.scheduler import start_serve_scheduler, sync_due
from docqa.sources.sync import sync_source
from docqa.sources.watch import watch_source
from tests.support.celery_workers import redis_broker_url
from tests.support.sources_fakes import SharedRuntime, sources_settings, stored_by_document


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    return sources_settings(tmp_path, monkeypatch)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "share"
    root.mkdir()
    for index in range(3):
        (root / f"memo{index}.txt").write_text(f"Memo {index}: the office moves to the fourth floor. " * 3)
    return root


def _define(settings: Settings, folder: Path, name: str = "share", every: str | None = None) -> None:
    define_source(settings, name=name, type="folder", tenant="default", config={"path": str(folder)},
                  allow=["group:staff"], every=every)


def test_with_a_broker_items_are_queued_and_settled_by_the_next_run(settings, folder) -> None:
    url = redis_broker_url(14)
    client = redis.Redis.from_url(url)
    client.flushdb()
    queued = settings.model_copy(update={"broker_url": url})
    _define(queued, folder, every="15m")
    assert create_celery_app(url, 900).conf.beat_schedule["sources-sync-due"]["task"] == "docqa.sources.sync_due"

    [report] = sync_due(queued, scheduled_only=True)
    assert (report.added, report.pending, report.status) == (0, 3, "succeeded")
    assert client.llen("celery") >= 1  # the batches are on the broker, for the workers
    assert sync_due(queued, scheduled_only=True) == []  # not due again before 15 minutes
    assert stored_by_document() == {}

    # A worker takes the items; until then a rerun leaves them pending, after it the run settles them.
    again = sync_source(queued, tenant="default", name="share")
    assert (again.pending, again.added) == (3, 0)
    with job_sessions(queued)() as session:
        items = list(session.scalars(select(SourceEntry.pending_item)))
    process_items(settings, items, runtime=SharedRuntime(settings), embedder=SharedRuntime.embedder)
    settled = sync_source(queued, tenant="default", name="share")
    assert (settled.added, settled.pending, settled.unchanged) == (3, 0, 0)
    assert {c.meta["source_name"] for chunks in stored_by_document().values() for c in chunks} == {"share"}
    assert sync_source(queued, tenant="default", name="share").unchanged == 3
    client.flushdb()


def test_the_lease_keeps_one_sync_per_source(settings, folder) -> None:
    _define(settings, folder)
    sessions = job_sessions(settings)

    def hold(owner: str, seconds: float) -> None:
        with sessions.begin() as session:
            session.execute(update(SyncSource).values(
                lock_owner=owner, lock_until=datetime.now(UTC) + timedelta(seconds=seconds)))

    hold("another-host:4242:1", 600)
    with pytest.raises(SourceBusyError, match="another-host"):
        sync_source(settings, tenant="default", name="share")
    assert sync_due(settings) == []  # passed over, not failed
    assert source_status(settings, "default", "share")["running"] is True
    hold("another-host:4242:1", -1)  # an expired lease is taken over
    assert sync_source(settings, tenant="default", name="share").added == 3
    import socket

    hold(f"{socket.gethostname()}:999999999:1", 600)  # held by a process of this host that is gone
    assert sync_source(settings, tenant="default", name="share").unchanged == 3


def test_cron_runs_every_due_source(settings, folder, tmp_path, capsys) -> None:
    _define(settings, folder, name="unscheduled")
    _define(settings, folder, name="hourly", every="1h")
    _define(settings, tmp_path / "missing", name="broken")
    assert main(["sources", "sync", "--all"]) == 1  # one source failed
    out = capsys.readouterr().out
    assert "unscheduled: 3 added" in out and "hourly: 3 added" in out and "broken: failed" in out
    main(["sources", "sync", "--all"])
    out = capsys.readouterr().out
    assert "unscheduled: 0 added" in out and "hourly" not in out  # not due for an hour
    main(["sources", "sync", "--all", "--force"])
    assert "hourly: 0 added" in capsys.readouterr().out


def _wait(predicate, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_serve_scheduler_and_watch_sync_by_themselves(settings, folder) -> None:
    _define(settings, folder, name="scheduled", every="1m")
    stop = threading.Event()
    start_serve_scheduler(settings, stop, interval_s=0.1, runtime=SharedRuntime(settings))
    try:
        assert _wait(lambda: any(k.startswith("scheduled:") for k in stored_by_document()))
    finally:
        stop.set()

    _define(settings, folder, name="watched")
    watcher = threading.Thread(target=watch_source, args=(settings, "default", "watched"),
                               kwargs={"actor": "cli:test", "interval_s": 0.1, "stop": stop}, daemon=True)
    stop.clear()
    watcher.start()
    try:
        assert _wait(lambda: "watched:memo0.txt" in stored_by_document())
        (folder / "memo9.txt").write_text("Memo 9: parking spaces are reassigned in May. " * 3)
        assert _wait(lambda: "watched:memo9.txt" in stored_by_document())
        (folder / "memo0.txt").unlink()
        assert _wait(lambda: "watched:memo0.txt" not in stored_by_document())
    finally:
        stop.set()
        watcher.join(timeout=10)


def test_on_postgresql_the_lease_and_the_entries_hold(settings, folder) -> None:
    from docqa.db import engine_for_settings
    from docqa.schema import upgrade_database
    from tests.support.postgres import throwaway_database

    with throwaway_database("sources") as url:
        pg = settings.model_copy(update={"database_url": url})
        upgrade_database(pg)
        _define(pg, folder)
        with job_sessions(pg).begin() as session:
            session.execute(update(SyncSource).values(lock_owner="another-host:1:1",
                                                      lock_until=datetime.now(UTC) + timedelta(minutes=5)))
        with pytest.raises(SourceBusyError):
            sync_source(pg, tenant="default", name="share")
        with job_sessions(pg).begin() as session:
            session.execute(update(SyncSource).values(lock_until=datetime.now(UTC) - timedelta(seconds=1)))
        assert sync_source(pg, tenant="default", name="share").added == 3
        (folder / "memo1.txt").unlink()
        report = sync_source(pg, tenant="default", name="share")
        assert (report.deleted, report.unchanged) == (1, 2)
        assert source_status(pg, "default", "share")["documents"] == 2
        engine_for_settings(pg).dispose()  # before the database is dropped
