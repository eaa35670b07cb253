"""Heartbeats of the items a worker is ingesting, so the stale-item sweep (`docqa.ingestion.sweep`) never
re-dispatches work that is still alive.

While a batch is converted, embedded and written, a daemon thread stamps `heartbeat_at` on its running items
every `heartbeat_interval_s` (a fifth of the broker's visibility timeout, 1 to 60 s): an item whose worker is
alive is never older than that, and the sweep waits a whole visibility timeout before it calls an item stale.

Usage:
    with beating(sessions, [item.id for item in claimed], heartbeat_interval_s(settings)):
        ...  # the long part of the work
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy import update
from sqlalchemy.orm import sessionmaker

from docqa.ingestion.models import ITEM_RUNNING, IngestItem
from docqa.settings import Settings

logger = logging.getLogger(__name__)


def heartbeat_interval_s(settings: Settings) -> float:
    return min(60.0, max(1.0, settings.broker_visibility_timeout_s / 5))


@contextmanager
def beating(sessions: sessionmaker, item_ids: Sequence[int], interval_s: float) -> Iterator[None]:
    """Stamp the running items among `item_ids` every `interval_s` seconds until the block ends."""
    ids = list(item_ids)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval_s):
            try:
                stamp(sessions, ids)
            except Exception as exc:  # a missed beat is harmless; the next one may get through
                logger.warning("heartbeat of ingestion items %s failed: %s", ids, exc)

    thread = threading.Thread(target=beat, name="docqa-ingest-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=interval_s + 30)


def stamp(sessions: sessionmaker, item_ids: Sequence[int]) -> None:
    with sessions.begin() as session:
        session.execute(
            update(IngestItem)
            .where(IngestItem.id.in_(list(item_ids)), IngestItem.status == ITEM_RUNNING)
            # updated_at stays the time of the last state change: a beat is not one.
            .values(heartbeat_at=datetime.now(UTC), updated_at=IngestItem.updated_at)
        )
