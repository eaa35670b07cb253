"""Audit trail figures: chain appends per second with concurrent writers, verification time per 10,000
traces, and the trace write overhead per question as a share of its wall time.

    python bench/audit_chain.py                       # everything (PostgreSQL on 127.0.0.1:5432 and SQLite)
    python bench/audit_chain.py --skip-overhead       # no model loads
    python bench/audit_chain.py --questions 8 --pipelines standard,resp

Appends and verification use throwaway PostgreSQL databases (created and dropped as the `postgres`
superuser) and a temporary SQLite file. The overhead part answers HotpotQA questions from ../shared/data with
the configured LLM (the packaged local model by default) and times `record_answer` against the whole question.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def sample_result() -> Any:
    """A trace the size of a real multi-step answer: 6 steps, 3 LLM calls with ~1.5 KB prompts, 5 documents."""
    from docqa.recording import StepRecorder, record_llm_call
    from docqa.result import Citation, LLMUsage, PipelineResult

    recorder = StepRecorder()
    context = "Passage text about the founding of the company and its early history. " * 20
    docs = [{"id": f"doc-{i}", "score": 1 / (60 + i), "source": f"source-{i}", "snippet": context[:300]}
            for i in range(5)]
    with recorder.step("retrieval", "hybrid_retriever", inputs={"query": "who founded acme", "top_k": 5}) as step:
        step.outputs["documents"] = docs
    for kind in ("summary", "judgement"):
        with recorder.step(kind, kind + "_component", inputs={"question": "who founded acme"}) as step:
            record_llm_call(prompt=context, response="Jane Roe founded Acme in 1901.", usage=LLMUsage(1, 380, 12))
            step.outputs["text"] = "Jane Roe founded Acme in 1901."
    with recorder.step("retrieval", "hybrid_retriever", inputs={"query": "when was acme founded"}) as step:
        step.outputs["documents"] = docs
    with recorder.step("generation", "generator", inputs={"question": "who founded acme"}) as step:
        record_llm_call(prompt=context, response="Jane Roe [1].", usage=LLMUsage(1, 400, 6))
        step.outputs["answer"] = "Jane Roe [1]."
    with recorder.step("citation", "citation_check"):
        pass
    return PipelineResult(pipeline="bench", question="Who founded Acme?", answer="Jane Roe [1].",
                          citations=[Citation("doc-0", "source-0", 0.016, context[:200])], steps=recorder.steps,
                          totals=recorder.totals(), config={"top_k": 5, "config_hash": "0" * 64})


def writer(settings: Any, count: int, barrier: Any) -> None:
    from docqa.audit.recorder import TraceRecord, record_answer

    result = sample_result()
    record = TraceRecord(asked_by="bench", tenant="acme", question=result.question, pipeline="bench",
                         models={"generator": "local"}, result=result)
    record_answer(settings, record)  # connections, keys and imports warm before the clock starts
    barrier.wait()
    for _ in range(count - 1):
        record_answer(settings, record)


def concurrent_appends(settings: Any, writers: int, total: int) -> float:
    """Appends per second with `writers` processes writing `total` traces between them."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(writers + 1)
    procs = [ctx.Process(target=writer, args=(settings, total // writers, barrier)) for _ in range(writers)]
    for p in procs:
        p.start()
    barrier.wait()
    started = time.perf_counter()
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - started
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit("a writer failed")
    return (total - writers) / elapsed


def verification_seconds(settings: Any, repeats: int = 3) -> tuple[float, Any]:
    from docqa.audit.keys import hmac_key
    from docqa.audit.verify import verify_chain
    from docqa.db import session_factory

    times, report = [], None
    for _ in range(repeats):
        with session_factory(settings)() as session:
            started = time.perf_counter()
            report = verify_chain(session, hmac_key(settings))
            times.append(time.perf_counter() - started)
    return statistics.median(times), report


def payload_bytes() -> int:
    from docqa.audit.canonical import canonical_bytes, trace_payload
    from docqa.audit.recorder import TraceRecord, build_trace
    from docqa.settings import Settings

    trace = build_trace(Settings(), TraceRecord(asked_by="bench", tenant="acme", question="q", pipeline="bench",
                                                models={}, result=sample_result()))
    return len(canonical_bytes(trace_payload(trace)))


def create_pg_database() -> str | None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import OperationalError

    name = f"docqa_bench_{uuid.uuid4().hex[:10]}"
    engine = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        print(f"PostgreSQL skipped: {exc.orig}")
        return None
    finally:
        engine.dispose()
    return name


def drop_pg_database(name: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


def chain_figures(args: argparse.Namespace, workdir: Path) -> None:
    from docqa.schema import upgrade_database
    from docqa.settings import Settings

    print(f"trace payload: {payload_bytes()} bytes canonical JSON, 6 steps, 3 LLM calls")
    backends: list[tuple[str, Any, str | None]] = []
    pg = create_pg_database() if "postgresql" in args.backends else None
    if pg is not None:
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{pg}"
        backends.append(("postgresql", Settings(data_dir=workdir / "pg", database_url=url), pg))
    if "sqlite" in args.backends:
        backends.append(("sqlite", Settings(data_dir=workdir / "sqlite", database_url=None), None))
    try:
        for label, settings, _ in backends:
            upgrade_database(settings)
            single = concurrent_appends(settings, 1, args.single_traces)
            rate = concurrent_appends(settings, args.writers, args.traces)
            print(f"{label}: appends/s with 1 writer {single:.0f}; with {args.writers} concurrent writer processes "
                  f"{rate:.0f} ({args.traces} traces)")
            seconds, report = verification_seconds(settings)
            assert report is not None
            per_10k = seconds * 10_000 / max(report.checked, 1)
            print(f"{label}: verify {report.checked} traces in {seconds:.2f} s (median of 3), ok={report.ok}; "
                  f"{per_10k:.2f} s per 10,000 traces")
    finally:
        for _, _, name in backends:
            if name:
                drop_pg_database(name)


def overhead_figures(args: argparse.Namespace, workdir: Path) -> None:
    import torch

    torch.set_num_threads(1)
    from haystack.document_stores.types import DuplicatePolicy

    from docqa.access import AccessScope
    from docqa.audit.recorder import TraceRecord, models_from_settings, record_answer
    from docqa.pipelines.registry import build_pipeline
    from docqa.runtime import Runtime
    from docqa.schema import upgrade_database
    from docqa.settings import Settings
    from docqa_eval.datasets import load_corpus, load_questions

    shared = ROOT.parent / "shared" / "data"
    if not (shared / "multihop").is_dir():
        print(f"overhead skipped: no multi-hop data under {shared}")
        return
    settings = Settings(data_dir=args.data_dir or workdir / "overhead")
    runtime = Runtime(settings)
    questions = load_questions("hotpotqa", shared)[: args.questions]
    wanted = {t for q in questions for t in q.supporting_titles}
    corpus = load_corpus("hotpotqa", tenant="bench", data_dir=shared)
    corpus = [d for i, d in enumerate(corpus) if d.meta["title"] in wanted or i < args.passages]
    store = runtime.document_store
    if store.count_documents() == 0:
        embedder = runtime.document_embedder()
        embedder.warm_up()
        store.write_documents(embedder.run(documents=corpus)["documents"], policy=DuplicatePolicy.OVERWRITE)
    scope = AccessScope("bench", frozenset({"user:bench"}))
    targets: list[tuple[str, Settings]] = [("sqlite", settings)]
    pg = create_pg_database()
    if pg is not None:
        targets.append(("postgresql", Settings(data_dir=settings.data_dir,
                                              database_url=f"postgresql+psycopg://postgres@127.0.0.1:5432/{pg}")))
    try:
        for _, target in targets:
            upgrade_database(target)
        models = models_from_settings(settings)
        for name in args.pipelines.split(","):
            pipeline = build_pipeline(name.strip(), runtime)
            pipeline.run(questions[0].question, scope)  # model loads and server start-up are not per question
            shares: dict[str, list[float]] = {label: [] for label, _ in targets}
            writes: dict[str, list[float]] = {label: [] for label, _ in targets}
            walls, steps = [], []
            for q in questions:
                started = time.perf_counter()
                result = pipeline.run(q.question, scope)
                answered = time.perf_counter() - started
                walls.append(answered)
                steps.append(len(result.steps))
                for label, target in targets:
                    t0 = time.perf_counter()
                    record_answer(target, TraceRecord(asked_by="bench", tenant="bench", question=q.question,
                                                      pipeline=name, models=models, result=result))
                    write = time.perf_counter() - t0
                    writes[label].append(write)
                    shares[label].append(write / (answered + write))
            for label, _ in targets:
                share = shares[label]
                print(f"overhead {name} on {label}: {len(walls)} questions, "
                      f"median wall {statistics.median(walls):.2f} s, "
                      f"median trace write {statistics.median(writes[label]) * 1000:.1f} ms, "
                      f"share median {statistics.median(share) * 100:.2f}% max {max(share) * 100:.2f}%; "
                      f"steps/question median {statistics.median(steps):.0f}")
    finally:
        if pg is not None:
            drop_pg_database(pg)
        if settings.llm_base_url is None and args.data_dir is None:
            from docqa.llm.local_server import stop_local_llm

            # The embedded server outlives its starter; in a fresh data dir this run started it.
            stop_local_llm(settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--traces", type=int, default=10_000, help="traces appended by the concurrent writers")
    parser.add_argument("--single-traces", type=int, default=1_000, help="traces appended by one writer")
    parser.add_argument("--backends", default="postgresql,sqlite", help="databases for the chain figures")
    parser.add_argument("--skip-chain", action="store_true")
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--passages", type=int, default=200, help="extra HotpotQA passages beyond the supporting ones")
    parser.add_argument("--pipelines", default="standard,resp")
    parser.add_argument("--data-dir", type=Path, default=None, help="reuse a store (and local LLM) directory")
    args = parser.parse_args(argv)
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="docqa-audit-bench-") as tmp:
        if not args.skip_chain:
            chain_figures(args, Path(tmp))
        if not args.skip_overhead:
            overhead_figures(args, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
