"""Queued ingestion figures with real `docqa worker` processes, Redis and PostgreSQL on loopback.

Prints (asserts nothing):
- chunks/s with 1 and with 2 worker processes (one torch thread each), timed from submit to job finished,
  with the workers already started and their model loaded;
- time from submit to searchable for one small document with idle workers;
- resident memory per worker (Celery parent plus its pool child);
- lost and duplicated chunks after N kill-restart cycles: a job runs while its worker is SIGKILLed mid-job
  and restarted, N times; then a last worker finishes it, and the stored chunk ids are compared with the ids
  a clean run produces. Nobody resumes the job by hand: a message a kill lost must come back through the
  workers' stale-item sweep. Also printed: whether the job stalled (no item finished for --stall-after seconds
  with a worker up; it is then resumed by hand so the chunk counts can still be checked), the time from the last
  kill to the job's completion, and the sweep's re-dispatches from the job's history.

Corpus: ODSum stories (throughput) and MuSiQue passages (kill cycles) from ../shared/data. A throwaway
PostgreSQL database and Redis database 12 are used; the embedded store lives in a temporary directory.

    nice python bench/ingest_workers.py --stories 8 --cycles 20
"""

from __future__ import annotations

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import argparse
import json
import random
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docqa.conversion.chunking import ChunkSpec, build_chunks
from docqa.embedding import resolve_backend
from docqa.ingestion.jobs import Upload, job_status, resume_job, submit_job
from docqa.runtime import Runtime
from docqa.schema import upgrade_database
from docqa.settings import Settings
from docqa_eval.datasets import load_corpus, shared_data_dir
from tests.support.celery_workers import WorkerProcess, wait_until
from tests.support.postgres import throwaway_database

TENANT = "bench"
ACCESS = ["everyone"]
TIMEOUT_S = 3600


def env_for(settings: Settings) -> dict[str, str]:
    return {
        "DOCQA_DATA_DIR": str(settings.data_dir),
        "DOCQA_DATABASE_URL": settings.database_url or "",
        "DOCQA_BROKER_URL": settings.broker_url or "",
        "DOCQA_INGEST_ITEMS_PER_TASK": str(settings.ingest_items_per_task),
        "DOCQA_BROKER_VISIBILITY_TIMEOUT_S": str(settings.broker_visibility_timeout_s),
        "HAYSTACK_TELEMETRY_ENABLED": "False",
    }


def start_ready(settings: Settings, log: Path) -> WorkerProcess:
    before = log.read_text(errors="replace").count(" ready.") if log.exists() else 0
    worker = WorkerProcess(env_for(settings), log).start()
    try:
        wait_until(lambda: worker.log().count(" ready.") > before, 600, "the worker to be ready", poll_s=0.2)
    except BaseException:
        worker.kill()
        raise
    return worker


def finished(settings: Settings, job_id: str) -> dict | None:
    status = job_status(settings, job_id)
    return status if status["finished_at"] else None


def stories(limit: int) -> list[Upload]:
    path = shared_data_dir() / "longform" / "odsum_story" / "dev.jsonl"
    if not path.is_file():
        sys.exit(f"skipped: ODSum data not found at {path}")
    lines = path.read_text(encoding="utf-8").splitlines()[:limit]
    return [
        Upload(f"story-{n:03d}.txt", (s["title"] + "\n\n" + "\n\n".join(s["divided_document"])).encode())
        for n, s in enumerate(map(json.loads, lines))
    ]


def throughput(settings: Settings, tmp: Path, uploads: list[Upload], workers: int) -> None:
    started_workers: list[WorkerProcess] = []
    try:
        for i in range(workers):
            started_workers.append(start_ready(settings, tmp / f"tp{workers}-{i}.log"))
        tenant = f"{TENANT}-{workers}"
        t0 = time.perf_counter()
        job_id = submit_job(settings, tenant=tenant, access=ACCESS, uploads=uploads)
        status = wait_until(lambda: finished(settings, job_id), TIMEOUT_S, "the throughput job", poll_s=0.2)
        elapsed = time.perf_counter() - t0
        print(
            f"{workers} worker(s): {status['chunks_written']} chunks from {status['items_written']} stories in "
            f"{elapsed:.1f} s = {status['chunks_written'] / elapsed:.2f} chunks/s"
        )
        for i, worker in enumerate(started_workers):
            print(f"  worker {i} resident memory: {worker.rss_bytes() / 2**20:.0f} MiB")
        probe = Upload("probe.txt", b"The zebra-striped lighthouse keeper counts ninety-seven gulls at dawn.")
        t0 = time.perf_counter()
        submit_job(settings, tenant=tenant, access=ACCESS, uploads=[probe])
        store = Runtime(settings).document_store
        scoped = {"field": "meta.tenant", "operator": "==", "value": tenant}
        wait_until(
            lambda: any(d.meta["source_id"] == "probe.txt" for d in store.bm25_retrieval("lighthouse gulls",
                                                                                        filters=scoped, top_k=3)),
            600, "the probe document to be searchable", poll_s=0.05,
        )
        print(f"  submit to searchable (one small document, idle workers): {time.perf_counter() - t0:.2f} s")
    finally:
        for worker in started_workers:
            worker.stop()


def expected_ids(uploads: list[Upload], settings: Settings) -> set[str]:
    ids: set[str] = set()
    for upload in uploads:
        spec = ChunkSpec(source_id=upload.name, source=upload.name, title=upload.name, tenant=TENANT, access=ACCESS)
        chunks = build_chunks(upload.data.decode(), spec, chunk_words=settings.chunk_words,
                              overlap_words=settings.chunk_overlap_words)
        ids |= {chunk.id for chunk in chunks}
    return ids


def wait_or_stall(settings: Settings, job_id: str, stall_after_s: float) -> tuple[dict, bool]:
    """Wait for the job; if no item finishes for `stall_after_s`, resume it by hand once and report the stall."""
    stalled = False
    last_done, last_change = -1, time.monotonic()
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        status = job_status(settings, job_id)
        if status["finished_at"]:
            return status, stalled
        if status["items_done"] != last_done:
            last_done, last_change = status["items_done"], time.monotonic()
        elif time.monotonic() - last_change > stall_after_s and not stalled:
            stalled = True
            print(f"  STALLED: {status['items_done']}/{status['items_total']} done, {status['items_queued']} "
                  f"queued, {status['items_running']} running, no progress for {stall_after_s:.0f} s; "
                  f"resumed by hand: {resume_job(settings, job_id)} items")
            last_change = time.monotonic()
        time.sleep(0.2)
    sys.exit(f"the job did not finish within {TIMEOUT_S} s")


def kill_cycles(settings: Settings, tmp: Path, cycles: int, passages: int, stall_after_s: float) -> None:
    uploads = [Upload(f"p{n:04d}.txt", (d.content or "").encode()) for n, d in
               enumerate(load_corpus("musique")[:passages])]
    job_id = submit_job(settings, tenant=TENANT, access=ACCESS, uploads=uploads)
    rng = random.Random(7)
    log = tmp / "kill.log"
    killed_mid_job = 0
    last_kill = time.time()
    for cycle in range(cycles):
        worker = start_ready(settings, log)
        try:
            done = job_status(settings, job_id)["items_done"]
            wait_until(lambda d=done: job_status(settings, job_id)["items_done"] > d or finished(settings, job_id),
                       600, "progress", poll_s=0.1)
            time.sleep(rng.uniform(0.0, 1.5))
            if finished(settings, job_id) is None:
                killed_mid_job += 1
        finally:
            worker.kill()
            last_kill = time.time()
        status = job_status(settings, job_id)
        print(f"  cycle {cycle + 1}: killed with {status['items_done']}/{status['items_total']} items done, "
              f"{status['items_running']} running")
    at_last_kill = job_status(settings, job_id)
    worker = start_ready(settings, log)
    ready_after = time.time() - last_kill
    try:
        status, stalled = wait_or_stall(settings, job_id, stall_after_s)
    finally:
        worker.stop()
    to_completion = datetime.fromisoformat(status["finished_at"]).timestamp() - last_kill
    stored = Runtime(settings).document_store.filter_documents(
        filters={"field": "meta.tenant", "operator": "==", "value": TENANT}
    )
    stored_ids = [d.id for d in stored]
    expected = expected_ids(uploads, settings)
    pairs = [(d.meta["source_id"], d.meta["chunk_index"]) for d in stored]
    lost = len(expected - set(stored_ids))
    # Extra ids, or two stored chunks for one (source, index): either would be a duplicate.
    duplicated = len(set(stored_ids) - expected) + len(pairs) - len(set(pairs))
    print(
        f"kill-restart: {cycles} cycles ({killed_mid_job} killed with the job unfinished); "
        f"job {status['status']}, {status['items_written']} written, {status['items_failed']} failed "
        f"of {status['items_total']}; {len(stored_ids)} chunks stored, {len(expected)} expected; "
        f"lost chunks {lost}, duplicated chunks {duplicated}"
    )
    for failure in status["failures"]:
        print(f"  failed: {failure['source_id']}: {failure['reason']}")
    redispatched = [e for e in status["history"] if e["event"] == "redispatched"]
    print(
        f"jobs stalled: {int(stalled)} of 1; last kill to job completion: {to_completion:.1f} s (the last worker "
        f"was ready {ready_after:.1f} s after the kill, with {at_last_kill['items_done']}/"
        f"{at_last_kill['items_total']} items done); re-dispatched by the sweep: "
        f"{sum(e['count'] for e in redispatched)} items in {len(redispatched)} events"
    )
    for event in redispatched:
        print(f"  {event['at']}: {event['statuses']} items {event['items']} ({event['by']})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stories", type=int, default=8, help="ODSum dev stories for the throughput runs")
    parser.add_argument("--cycles", type=int, default=20, help="kill-restart cycles")
    parser.add_argument("--passages", type=int, default=600, help="MuSiQue passages in the kill-restart job")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--stall-after", type=float, default=300.0,
                        help="seconds with no item finished (a worker up) that count the job as stalled")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp_name, throwaway_database("ingest_bench") as url:
        tmp = Path(tmp_name)
        base = Settings(data_dir=tmp / "data", database_url=url, broker_url=args.broker_url)
        upgrade_database(base)
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; "
              f"embedding backend {resolve_backend(base)}")
        if not args.skip_throughput:
            uploads = stories(args.stories)
            # One story (~30 chunks) per task, so two workers share a job of few, long documents.
            per_story = base.model_copy(update={"ingest_items_per_task": 1})
            for workers in (1, 2):
                throughput(per_story, tmp, uploads, workers)
        # A short visibility timeout so killed messages come back within the run; passages are small.
        quick = base.model_copy(update={"broker_visibility_timeout_s": 30, "ingest_items_per_task": 4})
        kill_cycles(quick, tmp, args.cycles, args.passages, args.stall_after)


if __name__ == "__main__":
    main()
