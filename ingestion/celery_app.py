"""The Celery application of the ingestion queue (`docqa worker` runs it; Redis via `DOCQA_BROKER_URL`).

Delivery settings, and why:
- `acks_late` + `task_reject_on_worker_lost`: a message is acknowledged only after its task ends, so a
  worker killed mid-batch loses nothing; Redis hands the message out again after the visibility timeout.
- the hard time limit stays below the visibility timeout, so a slow task is stopped before Redis would
  deliver its message to a second worker; the soft limit lets the task record its items as failed.
- prefetch 1: a worker holds at most one unstarted message besides the one it runs.
- every worker runs the stale-item sweep on a timer (`StaleItemSweep`): a message can still be lost outright (a
  worker SIGKILLed after Redis handed it a message and before kombu recorded it as unacknowledged), and the sweep
  dispatches such items again (`docqa.ingestion.sweep`).
Retries with backoff and the per-item attempt limit live in `docqa.ingestion.tasks` and
`docqa.ingestion.processing`.

Usage:
    enqueue(settings, [item_id, ...])          # what `submit_job` does per batch
    docqa worker --concurrency 1               # what consumes it
"""

from __future__ import annotations

import logging
import threading
from functools import lru_cache
from typing import Any, ClassVar

from celery import Celery, bootsteps

from docqa.settings import Settings, get_settings

INGEST_TASK = "docqa.ingestion.ingest_items"
logger = logging.getLogger(__name__)


class StaleItemSweep(bootsteps.StartStopStep):
    """Runs the stale-item sweep (`docqa.ingestion.sweep.run_sweeps`) on a daemon thread of the worker's main
    process while the worker runs: started after the pool, stopped at a warm shutdown."""

    requires: ClassVar[set[str]] = {"celery.worker.components:Pool"}

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, parent: Any) -> None:
        from docqa.ingestion.sweep import run_sweeps, sweep_interval_s

        settings = get_settings()
        if not settings.broker_url:
            return
        name = f"sweep by {getattr(parent, 'hostname', None) or 'a worker'}"
        self._thread = threading.Thread(target=run_sweeps, args=(settings, self._stop, name),
                                        name="docqa-stale-item-sweep", daemon=True)
        self._thread.start()
        logger.info("stale-item sweep every %.0f s (items idle for %d s with no message are re-dispatched)",
                    sweep_interval_s(settings), settings.broker_visibility_timeout_s)

    def stop(self, parent: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def create_celery_app(broker_url: str | None, visibility_timeout_s: int) -> Celery:
    app = Celery("docqa", broker=broker_url or "memory://", include=["docqa.ingestion.tasks", "docqa.sources.tasks"])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        worker_prefetch_multiplier=1,
        # A pool child loads the embedding model before it reports ready (see tasks.py).
        worker_proc_alive_timeout=300,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": visibility_timeout_s},
        task_time_limit=max(visibility_timeout_s - 2, int(visibility_timeout_s * 0.9)),
        task_soft_time_limit=max(visibility_timeout_s - 4, int(visibility_timeout_s * 0.8)),
        # `docqa sources beat` sends this every minute; the task syncs the sources whose schedule is due.
        beat_schedule={"sources-sync-due": {"task": "docqa.sources.sync_due", "schedule": 60.0,
                                            "options": {"expires": 55}}},
    )
    app.steps["worker"].add(StaleItemSweep)
    return app


@lru_cache(maxsize=4)
def _app(broker_url: str | None, visibility_timeout_s: int) -> Celery:
    return create_celery_app(broker_url, visibility_timeout_s)


def celery_app_for(settings: Settings) -> Celery:
    return _app(settings.broker_url, settings.broker_visibility_timeout_s)


def enqueue(settings: Settings, item_ids: list[int], app: Celery | None = None) -> None:
    """Send one batch of item ids to the workers; an expired message is dropped and the sweep resends it."""
    (app or celery_app_for(settings)).send_task(INGEST_TASK, args=[item_ids], expires=settings.ingest_task_expires_s)


# The app a worker runs, configured from this process's environment.
app = celery_app_for(get_settings())
