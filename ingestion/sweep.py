"""The stale-item sweep: ingestion items whose message was lost are dispatched again, with an event in the job's
history (`redispatched`).

An item is stale when it is `queued` or `running`, nothing has shown it alive for longer than the broker's
visibility timeout (not its last dispatch, its last state change, nor its worker's heartbeat), and the broker
holds no message for it: none waiting in the queue, none delivered and unacknowledged. A killed worker's
unacknowledged message is left to Redis's own redelivery, and a running item whose worker still beats is left
alone, so work that is alive or about to come back is never dispatched twice. Re-dispatching is safe anyway:
chunk ids are deterministic and a delivery skips items another one finished.

Every `docqa worker` runs the sweep on a timer (a thread of its main process, `StaleItemSweep` in
`docqa.ingestion.celery_app`), so a deployment gets it with the workers it already runs; Celery beat would be one
more process to deploy and keep single. Several workers sweeping at once are safe: each re-checks and stamps the
items under row locks (`SKIP LOCKED`) before sending, so one of them re-dispatches a given item.

Usage:
    sweep_stale_items(settings)                      # what each worker's timer calls every sweep_interval_s
    choose_stale(items, live_item_ids, now=now, stale_after=timedelta(seconds=900))
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.orm import sessionmaker

from docqa.audit.timestamps import as_utc
from docqa.ingestion.models import EVENT_REDISPATCHED, ITEM_QUEUED, ITEM_RUNNING, IngestItem, IngestJobEvent
from docqa.settings import Settings

logger = logging.getLogger(__name__)

UNFINISHED = (ITEM_QUEUED, ITEM_RUNNING)
# One sweep looks at this many of the oldest unfinished items at most (a later sweep sees the next ones).
MAX_ITEMS_PER_SWEEP = 5000
# Items and sources named in one history event (its count has them all).
MAX_ITEMS_IN_EVENT = 1000
MAX_SOURCES_IN_EVENT = 20

Probe = Callable[[], "frozenset[int] | None"]
Send = Callable[[Settings, list[int]], None]


@dataclass(frozen=True)
class ItemLiveness:
    """What the sweep knows of one item: its state and every time it was last seen alive."""

    id: int
    job_id: str
    status: str
    dispatched_at: datetime | None = None
    heartbeat_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def last_seen(self) -> datetime | None:
        times = [as_utc(t) for t in (self.dispatched_at, self.heartbeat_at, self.updated_at) if t is not None]
        return max(times) if times else None

    @classmethod
    def of(cls, item: IngestItem) -> ItemLiveness:
        return cls(item.id, item.job_id, item.status, item.dispatched_at, item.heartbeat_at, item.updated_at)


@dataclass(frozen=True)
class Redispatch:
    job_id: str
    item_ids: list[int]


def stale_after(settings: Settings) -> timedelta:
    return timedelta(seconds=settings.broker_visibility_timeout_s)


def sweep_interval_s(settings: Settings) -> float:
    """A quarter of the visibility timeout, 5 to 60 s: a lost item waits at most a timeout and a quarter."""
    return min(60.0, max(5.0, settings.broker_visibility_timeout_s / 4))


def choose_stale(items: Iterable[ItemLiveness], live_item_ids: frozenset[int] | set[int], *, now: datetime,
                 stale_after: timedelta) -> list[ItemLiveness]:
    """The unfinished items with no live message and no sign of life for longer than `stale_after` before `now`."""
    cutoff = as_utc(now) - stale_after
    return [
        item for item in items
        if item.status in UNFINISHED
        and item.id not in live_item_ids
        and (item.last_seen is None or item.last_seen <= cutoff)
    ]


def sweep_stale_items(
    settings: Settings,
    sessions: sessionmaker,
    *,
    probe: Probe,
    send: Send,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    sleep: Callable[[float], None] = time.sleep,
    confirm_after_s: float = 2.0,
    by: str = "sweep",
) -> list[Redispatch]:
    """Dispatch the stale items again, one event per job; returns what was re-dispatched.

    :param probe: the item ids with a live broker message (`broker_messages.live_item_ids`); None = unknown,
        and then nothing is re-dispatched.
    :param send: sends one batch (`celery_app.enqueue`), after the items' new dispatch time is committed, so a
        send that fails leaves them to the next sweep.
    :param confirm_after_s: the broker is probed again after this pause and an item must be missing from both
        probes: a message a live worker has just popped is missing from one probe for an instant.
    """
    threshold = stale_after(settings)
    candidates = _candidates(sessions, as_utc(clock()) - threshold)
    if not candidates:
        return []
    first = probe()
    if first is None or not choose_stale(candidates, first, now=clock(), stale_after=threshold):
        return []
    sleep(confirm_after_s)
    second = probe()
    if second is None:
        return []
    live = first | second
    suspects = [item.id for item in choose_stale(candidates, live, now=clock(), stale_after=threshold)]
    redispatched: list[Redispatch] = []
    with sessions.begin() as session:
        # Re-read under row locks: an item claimed, finished or re-dispatched by another sweeper since is skipped.
        rows = session.scalars(
            select(IngestItem).where(IngestItem.id.in_(suspects)).order_by(IngestItem.job_id, IngestItem.position)
            .with_for_update(skip_locked=True)
        ).all()
        now = clock()
        stale_ids = {item.id for item in choose_stale(map(ItemLiveness.of, rows), live, now=now,
                                                      stale_after=threshold)}
        by_job: dict[str, list[IngestItem]] = {}
        for row in rows:
            if row.id in stale_ids:
                by_job.setdefault(row.job_id, []).append(row)
        if stale_ids:
            # A dispatch is no state change: updated_at keeps the time of the last one.
            session.execute(update(IngestItem).where(IngestItem.id.in_(stale_ids))
                            .values(dispatched_at=now, updated_at=IngestItem.updated_at))
        for job_id, items in by_job.items():
            session.add(IngestJobEvent(job_id=job_id, at=now, event=EVENT_REDISPATCHED, detail={
                "count": len(items),
                "items": [item.id for item in items[:MAX_ITEMS_IN_EVENT]],
                "sources": [item.source_id for item in items[:MAX_SOURCES_IN_EVENT]],
                "statuses": sorted({item.status for item in items}),
                "reason": f"no message in the broker and no sign of life for over "
                          f"{int(threshold.total_seconds())} s",
                "by": by,
            }))
            redispatched.append(Redispatch(job_id, [item.id for item in items]))
    for entry in redispatched:
        logger.warning("re-dispatching %d items of ingestion job %s: their message was lost (items %s)",
                       len(entry.item_ids), entry.job_id, entry.item_ids)
        for batch in batches(entry.item_ids, settings.ingest_items_per_task):
            send(settings, batch)
    return redispatched


def batches(item_ids: Sequence[int], size: int) -> list[list[int]]:
    return [list(item_ids[start : start + size]) for start in range(0, len(item_ids), size)]


def run_sweeps(settings: Settings, stop: threading.Event, name: str) -> None:
    """What a worker's sweep thread runs until `stop` is set: a sweep every `sweep_interval_s`."""
    from docqa.db import make_engine
    from docqa.ingestion.broker_messages import live_item_ids
    from docqa.ingestion.celery_app import create_celery_app, enqueue

    # Its own engine and Celery app: the prefork pool forks children from this process at any time, and none of
    # them must inherit a connection this thread uses.
    engine = make_engine(settings.resolved_database_url())
    sessions = sessionmaker(bind=engine, expire_on_commit=False)
    app = create_celery_app(settings.broker_url, settings.broker_visibility_timeout_s)
    interval = sweep_interval_s(settings)
    delay = random.uniform(0.5, 1.0) * interval  # workers started together do not sweep together
    try:
        while not stop.wait(delay):
            delay = interval
            try:
                sweep_stale_items(settings, sessions, probe=lambda: live_item_ids(app),
                                  send=lambda s, batch: enqueue(s, batch, app=app), sleep=stop.wait, by=name)
            except Exception:
                logger.exception("the stale-item sweep failed; the next one runs in %.0f s", interval)
            finally:
                engine.dispose()
    finally:
        app.close()
        engine.dispose()


def _candidates(sessions: sessionmaker, cutoff: datetime) -> list[ItemLiveness]:
    # Only items that look old in the database cost a broker probe; the choice itself is `choose_stale`'s.
    with sessions() as session:
        rows = session.scalars(
            select(IngestItem)
            .where(IngestItem.status.in_(UNFINISHED), _not_after(IngestItem.dispatched_at, cutoff),
                   _not_after(IngestItem.heartbeat_at, cutoff), _not_after(IngestItem.updated_at, cutoff))
            .order_by(IngestItem.id)
            .limit(MAX_ITEMS_PER_SWEEP)
        ).all()
        return [ItemLiveness.of(row) for row in rows]


def _not_after(column: Any, cutoff: datetime) -> Any:
    return or_(column.is_(None), column <= cutoff)
