"""The ingestion queue end to end: real Redis broker, real PostgreSQL, real `docqa worker` processes.

Documents are MuSiQue passages from ../shared/data/multihop submitted as uploads, plus one file of every
kind of bad input. The worker embeds with the packaged model into the embedded store under the test's
data directory, which this process reads to check ids and counts.
"""

from __future__ import annotations

import io
import os
import signal
import time
from pathlib import Path

import pytest
import redis
from sqlalchemy import select

from docqa.conversion.chunking import ChunkSpec, build_chunks
from docqa.ingestion.broker_messages import ingest_item_ids, live_item_ids
from docqa.ingestion.celery_app import celery_app_for
from docqa.ingestion.database import job_sessions
from docqa.ingestion.jobs import Upload, delete_document, job_status, submit_job
from docqa.ingestion.models import IngestItem
from docqa.runtime import Runtime
from docqa.schema import upgrade_database
from docqa.settings import Settings
from docqa_eval.datasets import load_corpus
from tests.support.celery_workers import WorkerProcess, redis_broker_url, wait_until
from tests.support.office_files import page_image
from tests.support.postgres import throwaway_database
from tests.support.sample_files import pdf_bytes

pytestmark = pytest.mark.integration
TENANT = "acme"
ACCESS = ["group:research"]
JOB_TIMEOUT_S = 600


@pytest.fixture
def passages() -> list[tuple[str, str]]:
    try:
        corpus = load_corpus("musique")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    return [(f"musique-{doc.id[:12]}.txt", doc.content or "") for doc in corpus[:60]]


@pytest.fixture
def settings(tmp_path: Path):
    with throwaway_database("ingest") as url:
        settings = Settings(
            data_dir=tmp_path / "data",
            database_url=url,
            broker_url=redis_broker_url(),
            max_file_bytes=20_000,
            ingest_items_per_task=3,
            broker_visibility_timeout_s=30,
        )
        upgrade_database(settings)
        yield settings


def worker_env(settings: Settings) -> dict[str, str]:
    return {
        "DOCQA_DATA_DIR": str(settings.data_dir),
        "DOCQA_DATABASE_URL": settings.database_url or "",
        "DOCQA_BROKER_URL": settings.broker_url or "",
        "DOCQA_MAX_FILE_BYTES": str(settings.max_file_bytes),
        "DOCQA_INGEST_ITEMS_PER_TASK": str(settings.ingest_items_per_task),
        "DOCQA_BROKER_VISIBILITY_TIMEOUT_S": str(settings.broker_visibility_timeout_s),
        "HAYSTACK_TELEMETRY_ENABLED": "False",
    }


@pytest.fixture
def workers(settings: Settings, tmp_path: Path):
    started: list[WorkerProcess] = []

    def start(using: Settings | None = None) -> WorkerProcess:
        worker = WorkerProcess(worker_env(using or settings), tmp_path / f"worker-{len(started)}.log").start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def finished(settings: Settings, job_id: str) -> dict | None:
    status = job_status(settings, job_id)
    return status if status["finished_at"] else None


def expected_ids(passages: list[tuple[str, str]], settings: Settings) -> set[str]:
    ids = set()
    for name, text in passages:
        spec = ChunkSpec(source_id=name, source=name, title=name, tenant=TENANT, access=ACCESS)
        chunks = build_chunks(text, spec, chunk_words=settings.chunk_words, overlap_words=settings.chunk_overlap_words)
        ids |= {chunk.id for chunk in chunks}
    return ids


def stored(settings: Settings) -> list:
    return Runtime(settings).document_store.filter_documents(
        filters={"field": "meta.tenant", "operator": "==", "value": TENANT}
    )


def scanned_receipt() -> bytes:
    """A strip of a scanned page (200 dpi, speckled) with one line of text and no text layer: read only by OCR."""
    image = page_image(["Taxi receipt: the fare to the airport was 64 euros."], noise=0.002).crop((0, 100, 1654, 280))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_job_through_a_real_worker(settings, workers, passages) -> None:
    passages = passages[:24]
    bad = [
        Upload("corrupt.pdf", pdf_bytes(["cut short"])[:120]),
        Upload("empty.txt", b""),
        Upload("table.xlsx", b"cells"),
        Upload("archive.zip", b"PK\x05\x06"),
        Upload("huge.txt", b"word " * 5000),
    ]
    uploads = [Upload(name, text.encode()) for name, text in passages]
    receipt = Upload("receipt.png", scanned_receipt())
    job_id = submit_job(settings, tenant=TENANT, access=ACCESS,
                        uploads=uploads[:12] + bad + [receipt] + uploads[12:])
    queued = job_status(settings, job_id)
    assert queued["items_total"] == 30 and queued["finished_at"] is None  # the job id comes back at once

    worker = workers()
    status = wait_until(lambda: finished(settings, job_id), JOB_TIMEOUT_S, "the job to finish")

    assert status["status"] == "completed_with_errors", worker.log()[-3000:]
    assert (status["items_written"], status["items_failed"], status["items_done"]) == (25, 5, 30), status["failures"]
    assert {f["source_id"]: f["code"] for f in status["failures"]} == {
        "corrupt.pdf": "unreadable_file",
        "empty.txt": "unreadable_file",
        "table.xlsx": "unreadable_file",
        "archive.zip": "unsupported_file",
        "huge.txt": "file_too_large",
    }
    # The scan was recognised by OCR in the worker, and its chunk says so.
    scans = [d for d in stored(settings) if d.meta["source_id"] == "receipt.png"]
    assert len(scans) == 1 and scans[0].meta["ocr"] is True, worker.log()[-3000:]
    assert "fare to the airport was 64 euros" in (scans[0].content or "")
    docs = [d for d in stored(settings) if d.meta["source_id"] != "receipt.png"]
    assert {d.id for d in docs} == expected_ids(passages, settings)
    assert status["chunks_written"] == len(docs) + len(scans)
    assert all(d.meta["access"] == ACCESS and d.embedding is not None for d in docs + scans)

    # Re-submitting unchanged documents skips them all.
    again = submit_job(settings, tenant=TENANT, access=ACCESS, uploads=uploads)
    status = wait_until(lambda: finished(settings, again), JOB_TIMEOUT_S, "the unchanged job")
    assert (status["items_skipped"], status["items_written"]) == (24, 0)

    # A changed document is rewritten in place; the chunks it no longer produces are gone.
    long_name = "long-memo.txt"
    first = submit_job(settings, tenant=TENANT, access=ACCESS, uploads=[Upload(long_name, b"alpha " * 600)])
    wait_until(lambda: finished(settings, first), JOB_TIMEOUT_S, "the long document")
    changed = submit_job(settings, tenant=TENANT, access=ACCESS, uploads=[Upload(long_name, b"omega " * 100)])
    status = wait_until(lambda: finished(settings, changed), JOB_TIMEOUT_S, "the changed document")
    assert status["items_written"] == 1
    memo = [d for d in stored(settings) if d.meta["source_id"] == long_name]
    assert len(memo) == 1 and memo[0].content.startswith("omega")

    # A deleted document is gone from retrieval.
    name, text = passages[0]
    title = text.splitlines()[0]
    store = Runtime(settings).document_store
    scoped = {"field": "meta.tenant", "operator": "==", "value": TENANT}
    assert name in {d.meta["source_id"] for d in store.bm25_retrieval(title, filters=scoped, top_k=5)}
    assert delete_document(Runtime(settings), TENANT, name) == 1
    assert name not in {d.meta["source_id"] for d in store.bm25_retrieval(title, filters=scoped, top_k=5)}


def test_worker_killed_mid_job_leaves_every_item_written_once(settings, workers, passages) -> None:
    uploads = [Upload(name, text.encode()) for name, text in passages]
    job_id = submit_job(settings, tenant=TENANT, access=ACCESS, uploads=uploads)

    first = workers()
    wait_until(lambda: job_status(settings, job_id)["items_written"] >= 3, JOB_TIMEOUT_S, "the first items")
    first.kill()
    interrupted = job_status(settings, job_id)
    assert interrupted["finished_at"] is None
    workers()
    status = wait_until(lambda: finished(settings, job_id), JOB_TIMEOUT_S, "the resumed job")

    assert status["status"] == "succeeded", status
    assert (status["items_written"], status["items_failed"]) == (60, 0)
    docs = stored(settings)
    assert sorted(d.id for d in docs) == sorted(expected_ids(passages, settings))
    assert status["chunks_written"] == len(docs)


def test_lost_message_is_redispatched_by_the_sweep_and_nothing_else_is(settings, workers, passages) -> None:
    # A broker database of its own, and a short visibility timeout: an item is stale after 15 s with no message.
    quick = settings.model_copy(update={"broker_url": redis_broker_url(13), "broker_visibility_timeout_s": 15})
    broker = redis.Redis.from_url(quick.broker_url or "")
    broker.flushdb()
    uploads = [Upload(name, text.encode()) for name, text in passages]
    submitted_at = time.monotonic()
    job_id = submit_job(quick, tenant=TENANT, access=ACCESS, uploads=uploads)
    with job_sessions(quick)() as session:
        item_ids = set(session.scalars(select(IngestItem.id).where(IngestItem.job_id == job_id)).all())
    app = celery_app_for(quick)
    assert live_item_ids(app) == item_ids  # 20 waiting messages of 3 items

    # What a worker SIGKILLed after Redis handed it a message (BRPOP) and before kombu recorded it as unacknowledged
    # leaves behind: the message gone, its items queued. No resume by hand follows.
    lost = ingest_item_ids(broker.rpop("celery") or b"")
    assert len(lost) == 3 and live_item_ids(app) == item_ids - set(lost)
    # Every batch is older than the visibility timeout when the worker starts: only the probe tells them apart.
    time.sleep(max(0.0, submitted_at + 16 - time.monotonic()))
    worker = workers(quick)
    status = wait_until(lambda: finished(quick, job_id), JOB_TIMEOUT_S, "the job with a lost batch")

    assert status["status"] == "succeeded", worker.log()[-3000:]
    assert (status["items_written"], status["items_failed"]) == (60, 0)
    docs = stored(quick)
    ids = [d.id for d in docs]
    assert len(ids) == len(set(ids)) and set(ids) == expected_ids(passages, quick)  # nothing lost or doubled
    assert status["chunks_written"] == len(docs)
    redispatched = [e for e in status["history"] if e["event"] == "redispatched"]
    assert [sorted(e["items"]) for e in redispatched] == [sorted(lost)], status["history"]
    assert redispatched[0]["statuses"] == ["queued"] and "docqa-" in redispatched[0]["by"]
    assert "re-dispatching 3 items" in worker.log()


def test_file_whose_pool_process_keeps_dying_fails_after_the_limit(settings, workers, passages) -> None:
    # What an out-of-memory kill or a segfault of the pool process does to the worker: the child dies under the
    # file, the worker's main process lives on, records the death on the item and hands the message out again.
    # Kills of the whole worker never count here (the bench's kill cycles measure those).
    single = settings.model_copy(update={"max_file_bytes": 400_000, "ingest_items_per_task": 1})
    heavy = " ".join(text for _, text in passages)
    heavy = (heavy + " ") * (300_000 // len(heavy) + 1)
    uploads = [Upload(name, text.encode()) for name, text in passages[:4]]
    job_id = submit_job(single, tenant=TENANT, access=ACCESS, uploads=[Upload("heavy.txt", heavy.encode()), *uploads])
    with job_sessions(single)() as session:
        heavy_id = session.scalars(select(IngestItem.id).where(IngestItem.job_id == job_id,
                                                               IngestItem.name == "heavy.txt")).one()

    def running_attempt(n: int) -> IngestItem | None:
        with job_sessions(single)() as session:
            item = session.get(IngestItem, heavy_id)
            assert item is not None and item.status in ("queued", "running"), (item and item.reason, worker.log())
            return item if item.status == "running" and item.attempts == n and item.worker else None

    worker = workers(single)
    for attempt in range(1, single.ingest_max_attempts + 1):
        item = wait_until(lambda n=attempt: running_attempt(n), JOB_TIMEOUT_S, f"attempt {attempt}", poll_s=0.05)
        child = int((item.worker or "").rsplit(":", 1)[1])
        assert child != worker.process.pid  # the pool process, not the worker's main process
        os.kill(child, signal.SIGKILL)
    status = wait_until(lambda: finished(single, job_id), JOB_TIMEOUT_S, "the job with a crashing file")

    assert worker.process.poll() is None  # the main process survived every death
    assert (status["status"], status["items_written"]) == ("completed_with_errors", 4), worker.log()[-3000:]
    assert [(f["source_id"], f["code"]) for f in status["failures"]] == [("heavy.txt", "gave_up")]
    assert "died 3 times" in status["failures"][0]["reason"]
    with job_sessions(single)() as session:
        heavy_item = session.get(IngestItem, heavy_id)
        assert heavy_item is not None and (heavy_item.attempts, heavy_item.crashes) == (3, 3)
    assert worker.log().count(f"while ingesting items [{heavy_id}]") == 3
