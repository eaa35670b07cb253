"""The stale-item sweep's choice and its database side, with an injected clock, broker probe and sender (SQLite).

The real broker probe and a real worker's sweep run in tests/integration/test_ingestion_queue.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from docqa.ingestion import jobs as jobs_module
from docqa.ingestion.database import job_sessions
from docqa.ingestion.heartbeat import stamp
from docqa.ingestion.jobs import Upload, job_status, resume_job, submit_job
from docqa.ingestion.models import ITEM_FAILED, ITEM_QUEUED, ITEM_RUNNING, ITEM_WRITTEN, IngestItem
from docqa.ingestion.sweep import ItemLiveness, choose_stale, sweep_stale_items
from docqa.settings import Settings

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)  # in the past: one test runs on the real clock
TIMEOUT = timedelta(seconds=900)


def item(item_id: int, status: str = ITEM_QUEUED, *, dispatched: float | None = 0, heartbeat: float | None = None,
         updated: float | None = 0) -> ItemLiveness:
    """An item whose times are seconds after T0."""

    def at(seconds: float | None) -> datetime | None:
        return None if seconds is None else T0 + timedelta(seconds=seconds)

    return ItemLiveness(item_id, "job", status, at(dispatched), at(heartbeat), at(updated))


class TestChooseStale:
    def stale_ids(self, items: list[ItemLiveness], live: set[int], seconds_after_t0: float) -> list[int]:
        now = T0 + timedelta(seconds=seconds_after_t0)
        return [i.id for i in choose_stale(items, frozenset(live), now=now, stale_after=TIMEOUT)]

    def test_queued_with_no_message_is_stale_only_after_the_visibility_timeout(self) -> None:
        assert self.stale_ids([item(1)], set(), 899) == []
        assert self.stale_ids([item(1)], set(), 900) == [1]

    def test_a_live_message_keeps_any_item_off_however_old(self) -> None:
        items = [item(1), item(2, ITEM_RUNNING, heartbeat=10)]
        assert self.stale_ids(items, {1, 2}, 100_000) == []

    def test_a_recent_dispatch_state_change_or_heartbeat_keeps_an_item_off(self) -> None:
        items = [
            item(1, dispatched=500),                                # just re-dispatched (by hand or a sweep)
            item(2, ITEM_RUNNING, updated=500),                     # claimed recently (its started-at)
            item(3, ITEM_RUNNING, heartbeat=1000, updated=0),       # its worker still beats
            item(4, ITEM_RUNNING, heartbeat=10, updated=10),        # a worker that stopped beating
            item(5, dispatched=None, updated=None),                 # no time at all: a row from before the sweep
        ]
        assert self.stale_ids(items, set(), 1200) == [4, 5]

    def test_finished_items_are_never_stale(self) -> None:
        items = [item(1, ITEM_WRITTEN), item(2, ITEM_FAILED), item(3, "skipped")]
        assert self.stale_ids(items, set(), 100_000) == []

    def test_naive_database_times_are_utc(self) -> None:
        naive = ItemLiveness(1, "job", ITEM_QUEUED, T0.replace(tzinfo=None), None, T0.replace(tzinfo=None))
        assert choose_stale([naive], frozenset(), now=T0 + TIMEOUT, stale_after=TIMEOUT) == [naive]
        assert choose_stale([naive], frozenset(), now=T0 + TIMEOUT / 2, stale_after=TIMEOUT) == []


class Broker:
    """A scripted broker: each probe returns the next answer; sent batches are recorded."""

    def __init__(self, *answers: frozenset[int] | None) -> None:
        self.answers = list(answers)
        self.sent: list[list[int]] = []

    def probe(self) -> frozenset[int] | None:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def send(self, _settings: Settings, batch: list[int]) -> None:
        self.sent.append(batch)


@pytest.fixture
def settings(tmp_path: Path, monkeypatch) -> Settings:
    monkeypatch.setattr(jobs_module, "dispatch_items", lambda *args: None)  # submitted, never delivered
    return Settings(data_dir=tmp_path, ingest_items_per_task=2, broker_visibility_timeout_s=900)


def submitted(settings: Settings, files: int = 5) -> tuple[str, list[int]]:
    job_id = submit_job(settings, tenant="acme", access=["everyone"],
                        uploads=[Upload(f"f{n}.txt", b"text " * 20) for n in range(files)])
    with job_sessions(settings).begin() as session:
        session.execute(update(IngestItem).values(dispatched_at=T0, updated_at=T0))
        ids = list(session.scalars(select(IngestItem.id).where(IngestItem.job_id == job_id)
                                   .order_by(IngestItem.position)).all())
    return job_id, ids


def sweep(settings: Settings, broker: Broker, seconds_after_t0: float):  # type: ignore[no-untyped-def]
    return sweep_stale_items(settings, job_sessions(settings), probe=broker.probe, send=broker.send,
                             clock=lambda: T0 + timedelta(seconds=seconds_after_t0), sleep=lambda _: None)


def redispatch_events(settings: Settings, job_id: str) -> list[dict]:
    return [e for e in job_status(settings, job_id)["history"] if e["event"] == "redispatched"]


class TestSweep:
    def test_lost_items_are_sent_again_in_batches_with_one_event_per_job(self, settings) -> None:
        job_id, ids = submitted(settings)
        broker = Broker(frozenset(ids[:2]))  # the first batch's message is still waiting; the rest were lost

        assert sweep(settings, broker, 899) == [] and broker.sent == []
        done = sweep(settings, broker, 901)

        assert [(r.job_id, r.item_ids) for r in done] == [(job_id, ids[2:])]
        assert broker.sent == [ids[2:4], ids[4:]]  # ingest_items_per_task = 2
        (event,) = redispatch_events(settings, job_id)
        assert event["items"] == ids[2:] and event["count"] == 3
        assert event["sources"] == ["f2.txt", "f3.txt", "f4.txt"] and event["statuses"] == [ITEM_QUEUED]
        assert "no message in the broker" in event["reason"]
        # Sent once: the new dispatch time keeps them off until another visibility timeout has passed.
        assert sweep(settings, broker, 1000) == [] and len(broker.sent) == 2
        assert [r.item_ids for r in sweep(settings, broker, 901 + 900)] == [ids[2:]]

    def test_an_unreadable_broker_sends_nothing(self, settings) -> None:
        job_id, _ = submitted(settings)
        broker = Broker(None)
        assert sweep(settings, broker, 5000) == [] and broker.sent == []
        assert redispatch_events(settings, job_id) == []

    def test_an_item_missing_from_only_one_probe_is_not_sent(self, settings) -> None:
        # A worker had just popped the message of items 0-1 at the first probe and recorded it by the second.
        _, ids = submitted(settings, files=4)
        broker = Broker(frozenset(ids[2:]), frozenset(ids))
        assert sweep(settings, broker, 5000) == [] and broker.sent == []

    def test_running_items_are_left_to_a_worker_that_still_beats(self, settings) -> None:
        job_id, ids = submitted(settings, files=2)
        sessions = job_sessions(settings)
        with sessions.begin() as session:
            session.execute(update(IngestItem).values(status=ITEM_RUNNING, attempts=1, heartbeat_at=T0,
                                                      updated_at=T0))
        stamp(sessions, [ids[0]])  # its worker beats now; the other one's stopped at T0
        broker = Broker(frozenset())

        (done,) = sweep_stale_items(settings, sessions, probe=broker.probe, send=broker.send,
                                    clock=lambda: datetime.now(UTC), sleep=lambda _: None)

        assert done.item_ids == [ids[1]] and broker.sent == [[ids[1]]]
        assert redispatch_events(settings, job_id)[0]["statuses"] == [ITEM_RUNNING]

    def test_resume_by_hand_is_in_the_history_and_holds_the_sweep_off(self, settings) -> None:
        job_id, ids = submitted(settings, files=3)
        assert resume_job(settings, job_id) == 3
        history = job_status(settings, job_id)["history"]
        assert [e["event"] for e in history] == ["submitted", "resumed"]
        assert history[0]["files"] == 3 and history[1]["items"] == ids and history[1]["count"] == 3
        broker = Broker(frozenset())
        assert sweep_stale_items(settings, job_sessions(settings), probe=broker.probe, send=broker.send,
                                 sleep=lambda _: None) == []
