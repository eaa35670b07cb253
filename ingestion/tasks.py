"""Thin Celery tasks: each calls `docqa.ingestion.processing` (or, for topic refits, `docqa.topics`) with this
worker's warm runtime.

Transient infrastructure errors (database, store or network unavailable) are retried with exponential backoff
a bounded number of times; anything else, or the last retry, marks the batch's unfinished items failed
with the reason, so a job always ends. When a task's pool process dies under it (segfault, OOM kill of the child,
hard time limit), the worker's main process counts the death on the items that process was running before the
message goes back to the queue (`IngestRequest`): that is how a file that crashes its worker is told from a
worker killed as a whole, which leaves no such record.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from billiard.einfo import ExceptionWithTraceback
from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery import Task
from celery.signals import worker_process_init
from celery.worker.request import Request
from haystack.document_stores.errors import DocumentStoreError
from sqlalchemy.exc import OperationalError

from docqa.ingestion.celery_app import INGEST_TASK, app
from docqa.ingestion.processing import fail_items, process_items, record_child_death, worker_name
from docqa.settings import Settings, get_settings
from docqa.topics import REFIT_TASK, refit_if_due

logger = logging.getLogger(__name__)
_TRANSIENT = (OperationalError, DocumentStoreError, ConnectionError, TimeoutError)
_worker_state: dict[str, Any] = {}
_state_lock = threading.Lock()


@worker_process_init.connect
def _prepare_worker_process(**_: Any) -> None:
    # Workers scale by process; several torch thread pools on a small machine only fight each other.
    import torch

    torch.set_num_threads(1)
    # Load the model before the first task, so no task's time limit pays for it.
    _warm_runtime(get_settings())


def _warm_runtime(settings: Settings) -> tuple[Any, Any]:
    with _state_lock:
        if "runtime" not in _worker_state:
            from docqa.runtime import Runtime

            runtime = Runtime(settings)
            embedder = runtime.document_embedder()
            embedder.warm_up()
            _worker_state.update(runtime=runtime, embedder=embedder)
        return _worker_state["runtime"], _worker_state["embedder"]


class IngestRequest(Request):
    """A delivery of the ingestion task, as the worker's main process sees it."""

    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> None:
        exc = exc_info.exception
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        # SystemExit is how billiard >= 4.3 may report a child gone; Celery treats it as a lost worker too.
        died = isinstance(exc, WorkerLostError | TimeLimitExceeded | SystemExit)
        if died and self.worker_pid is not None:
            item_ids = self.args[0] if self.args else self.kwargs.get("item_ids", [])
            try:
                counted = record_child_death(get_settings(), item_ids, worker_name(self.worker_pid))
            except Exception as error:  # unrecorded, the death counts only as an interruption
                logger.warning("could not record the death of pool process %s on items %s: %s",
                               self.worker_pid, item_ids, error)
            else:
                logger.warning("pool process %s died (%s) while ingesting items %s", self.worker_pid,
                               type(exc).__name__, counted)
        super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)


class _IngestTask(Task):
    Request = IngestRequest

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any) -> None:
        item_ids = args[0] if args else kwargs.get("item_ids", [])
        reason = (str(exc).splitlines() or [""])[0] or type(exc).__name__
        logger.error("ingestion task %s failed for items %s: %s", task_id, item_ids, reason)
        fail_items(get_settings(), item_ids, reason=f"task failed: {reason}", code="task_failed")


@app.task(
    name=INGEST_TASK,
    base=_IngestTask,
    autoretry_for=_TRANSIENT,
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=3,
)
def ingest_items(item_ids: list[int]) -> None:
    settings = get_settings()
    runtime, embedder = _warm_runtime(settings)
    process_items(settings, item_ids, runtime=runtime, embedder=embedder)


@app.task(name=REFIT_TASK, autoretry_for=_TRANSIENT, retry_backoff=2, retry_backoff_max=60, retry_jitter=True,
          max_retries=3)
def refit_topics(tenant: str) -> None:
    """Fit a tenant's topic model in the background if it is still due (`docqa.topics.schedule_topic_refit`)."""
    runtime, _ = _warm_runtime(get_settings())
    outcome = refit_if_due(runtime, tenant)
    if outcome:
        logger.info("%s", outcome)
