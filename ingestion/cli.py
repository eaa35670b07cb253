"""`docqa jobs ...` and `docqa worker`: registered by `docqa.cli` through `add_ingest_commands(subparsers)`.

Each handler is `handler(args, settings) -> exit code`.

    docqa jobs submit docs/ --tenant acme --allow group:hr --wait   # job id at once; --wait shows progress
    docqa jobs submit archive/ --collection archive                  # a collection mspr can search as a source
    docqa jobs status JOB_ID [--json]
    docqa jobs resume JOB_ID
    docqa jobs delete SOURCE_ID --tenant acme
    DOCQA_BROKER_URL=redis://127.0.0.1:6379/0 docqa worker
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from docqa.access import DEFAULT_COLLECTION, EVERYONE
from docqa.errors import DocqaError
from docqa.settings import Settings

POLL_SECONDS = 1.0


def cmd_jobs_submit(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.ingestion.jobs import job_status, submit_job

    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        raise DocqaError(f"no such file or directory: {', '.join(missing)}")
    bar = None if args.quiet or settings.broker_url else _bar(None)
    job_id = submit_job(
        settings,
        paths=[Path(p) for p in args.paths],
        submitted_by=args.submitted_by,
        on_item=(lambda _item: bar.update(1)) if bar is not None else None,
        **placement(args, settings),
    )
    if bar is not None:
        bar.close()
    print(job_id)
    if settings.broker_url and not args.wait:
        return 0
    status = _wait(settings, job_id, show_progress=not args.quiet) if settings.broker_url else job_status(
        settings, job_id
    )
    _print_status(status, as_json=False)
    return 1 if status["items_failed"] else 0


def cmd_jobs_status(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.ingestion.jobs import job_status

    status = _wait(settings, args.job_id, show_progress=True) if args.wait else job_status(settings, args.job_id)
    _print_status(status, as_json=args.json)
    return 0


def cmd_jobs_resume(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.ingestion.jobs import resume_job

    print(f"{resume_job(settings, args.job_id)} unfinished items dispatched again")
    return 0


def cmd_jobs_delete(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.ingestion.jobs import delete_document
    from docqa.runtime import Runtime

    deleted = delete_document(Runtime(settings), args.tenant or settings.tenant, args.source_id)
    if not deleted:
        raise DocqaError(f"no document {args.source_id} in tenant {args.tenant or settings.tenant}")
    print(f"deleted {deleted} chunks of {args.source_id}")
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """Run one Celery worker process (prefork with `--concurrency` children, one torch thread each)."""
    if not settings.broker_url:
        raise DocqaError(
            "docqa worker needs DOCQA_BROKER_URL (e.g. redis://127.0.0.1:6379/0); without a broker "
            "`docqa jobs submit` ingests in-process"
        )
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from docqa.ingestion.celery_app import app

    argv = [
        "worker",
        f"--concurrency={args.concurrency}",
        "--pool=prefork",
        f"--loglevel={args.loglevel}",
        f"--hostname=docqa-{os.getpid()}@%h",
        "--without-gossip",
        "--without-mingle",
    ]
    app.worker_main(argv)
    return 0


def add_placement_arguments(parser: argparse.ArgumentParser) -> None:
    """`--tenant`, `--allow` and `--collection`: where ingested files land and who may read them, the same for
    `docqa ingest` (synchronous) and `docqa jobs submit` (queued)."""
    parser.add_argument("--tenant", help="tenant the documents belong to (default: DOCQA_TENANT)")
    parser.add_argument("--allow", action="append", metavar="PRINCIPAL",
                        help=f"principal allowed to read the documents (repeatable; default: {EVERYONE})")
    parser.add_argument("--collection", default=DEFAULT_COLLECTION,
                        help=f"collection the documents belong to, a source for mspr (default: {DEFAULT_COLLECTION})")


def placement(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    """The `tenant`, `access` and `collection` keyword arguments the placement arguments stand for."""
    return {"tenant": args.tenant or settings.tenant, "access": args.allow or [EVERYONE], "collection": args.collection}


def add_ingest_commands(sub: argparse._SubParsersAction) -> None:
    jobs = sub.add_parser("jobs", help="queued ingestion: submit files, watch, resume, delete documents")
    jobs_sub = jobs.add_subparsers(dest="jobs_command", required=True)

    p = jobs_sub.add_parser("submit", help="submit files or directories; prints the job id")
    p.add_argument("paths", nargs="+", help="files or directories (read now, on this machine)")
    add_placement_arguments(p)
    p.add_argument("--submitted-by", dest="submitted_by", default="cli")
    p.add_argument("--wait", action="store_true", help="with a broker: wait for the job, showing progress")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_jobs_submit)

    p = jobs_sub.add_parser("status", help="a job's progress and the reasons of failed items")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true")
    p.add_argument("--wait", action="store_true", help="wait for the job to finish, showing progress")
    p.set_defaults(handler=cmd_jobs_status)

    p = jobs_sub.add_parser("resume", help="dispatch a job's unfinished items again")
    p.add_argument("job_id")
    p.set_defaults(handler=cmd_jobs_resume)

    p = jobs_sub.add_parser("delete", help="remove a document (all its chunks) from retrieval")
    p.add_argument("source_id", help="the document's source id (a submitted file's absolute path or name)")
    p.add_argument("--tenant")
    p.set_defaults(handler=cmd_jobs_delete)

    p = sub.add_parser("worker", help="run an ingestion worker (needs DOCQA_BROKER_URL)")
    p.add_argument("--concurrency", type=int, default=1, help="worker child processes (default 1)")
    p.add_argument("--loglevel", default="INFO")
    p.set_defaults(handler=cmd_worker)


def _wait(settings: Settings, job_id: str, show_progress: bool) -> dict[str, Any]:
    from docqa.ingestion.jobs import job_status

    status = job_status(settings, job_id)
    bar = _bar(status["items_total"]) if show_progress else None
    while True:
        if bar is not None:
            bar.n = status["items_done"]
            bar.set_postfix(failed=status["items_failed"], refresh=False)
            bar.refresh()
        if status["finished_at"] is not None:
            break
        time.sleep(POLL_SECONDS)
        status = job_status(settings, job_id)
    if bar is not None:
        bar.close()
    return status


def _bar(total: int | None) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="doc", desc="ingest", file=sys.stderr, dynamic_ncols=True)


def _print_status(status: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(status, indent=2))
        return
    print(
        f"job {status['job_id']}: {status['status']}; {status['items_done']}/{status['items_total']} done, "
        f"{status['items_written']} written ({status['chunks_written']} chunks), {status['items_skipped']} "
        f"unchanged, {status['items_failed']} failed"
    )
    for failure in status["failures"]:
        print(f"  failed: {failure['source_id']}: {failure['reason']}", file=sys.stderr)
    for event in status.get("history", []):
        if event["event"] == "redispatched":
            print(f"  {event['at']}: {event['count']} items re-dispatched ({event['reason']})", file=sys.stderr)
        elif event["event"] == "resumed":
            print(f"  {event['at']}: {event['count']} items dispatched again by hand", file=sys.stderr)
