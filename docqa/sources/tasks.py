"""The Celery task Celery beat sends every minute when a broker is set: sync the scheduled sources that are due.

A worker runs it like any task; each source's lease in the database keeps one sync per source at a time however
many workers and beats there are. With a broker the new and changed documents go to the ingestion queue as
items, so the task itself only lists, compares and deletes; the next run settles what the workers wrote.

    docqa sources beat        # the scheduler process (one per deployment), next to `docqa worker`
"""

from __future__ import annotations

import logging

from docqa.ingestion.celery_app import app
from docqa.settings import get_settings

SYNC_DUE_TASK = "docqa.sources.sync_due"
logger = logging.getLogger(__name__)


@app.task(name=SYNC_DUE_TASK, ignore_result=True, acks_late=False)
def sync_due_sources() -> int:
    """Run the due syncs; returns how many ran (each records its own outcome on its source)."""
    from docqa.sources.scheduler import sync_due

    reports = sync_due(get_settings(), actor="scheduler", scheduled_only=True)
    for report in reports:
        logger.info("%s", report.summary())
    return len(reports)
