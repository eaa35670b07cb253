"""Opening an existing embedded store in new processes: time to the first answered query, memory per worker,
query latency, write visibility and HNSW recall, on a store that has an index snapshot (`docqa store compact`).

Two worker processes are started one after the other on the same store, as gunicorn/Celery workers would be.
Each reports: seconds from creating the store object to its first BM25 answer (and from process start, imports
included), its memory after the query set — RssAnon (private), RssFile, Pss from /proc — next to the same
figures taken after imports but before opening the store (what the store itself adds), and BM25 / dense /
hybrid (BM25 + dense + RRF over 20 candidates each) top-10 p50/p95 over the 200 MuSiQue and HotpotQA questions
with real MiniLM query embeddings. Then this process writes single chunks while the second worker polls for
them (write visibility), and the second worker measures recall@10 of its dense search against exact search,
with and without an access filter. Prints figures; asserts nothing. Build a store with
`bench/store_latency.py`'s corpus or any ingest, then:

    nice -n 10 python bench/store_open.py --path /data/store/documents.sqlite3
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

PROCESS_START = time.time()

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from bench.child_process import JsonLineChild, memory_kb, percentiles  # noqa: E402

TOP_K = 10
CANDIDATES = 20
VISIBILITY_WRITES = 20
RECALL_QUERIES = 50


def memory(pid: int) -> dict[str, float]:
    """memory_kb in MB."""
    return {key: value / 1024 for key, value in memory_kb(pid).items()}


def worker(path: str, queries_file: str, ann_min_chunks: int | None, dense_queries: int) -> None:
    from docqa.access import AccessScope
    from docqa.components.hybrid_retriever import reciprocal_rank_fusion
    from docqa.stores.embedded import EmbeddedDocumentStore

    def say(**event: Any) -> None:
        print(json.dumps(event), flush=True)

    spec = json.loads(Path(queries_file).read_text())
    queries, vectors = spec["queries"], spec["vectors"]
    imported = memory(os.getpid())
    started = time.perf_counter()
    store = EmbeddedDocumentStore(path=path, ann_min_chunks=ann_min_chunks)
    store.bm25_retrieval(queries[0], top_k=TOP_K)
    opened = time.perf_counter() - started
    say(event="first_query", seconds=opened, since_process_start=time.time() - PROCESS_START,
        frozen=sum(s.size for s in store._index.segments if s.frozen),
        delta=sum(s.size for s in store._index.segments if not s.frozen))

    cpu: dict[str, list[float]] = {}

    def timed(fn: Any, count: int = len(queries), label: str = "") -> list[float]:
        samples, cpu[label] = [], []
        for i in range(min(count, len(queries))):
            t, c = time.perf_counter(), time.process_time()
            fn(i)
            samples.append(time.perf_counter() - t)
            cpu[label].append(time.process_time() - c)
        return samples

    def hybrid(i: int) -> None:
        keyword = store.bm25_retrieval(queries[i], top_k=CANDIDATES)
        dense = store.embedding_retrieval(vectors[i], top_k=CANDIDATES)
        reciprocal_rank_fusion([keyword, dense], rrf_k=60, top_k=TOP_K)

    access = AccessScope(tenant="bench", principals=frozenset({"group-1"})).to_filters()
    first_dense = time.perf_counter()
    store.embedding_retrieval(vectors[0], top_k=TOP_K)
    first_dense = time.perf_counter() - first_dense
    samples = {
        "BM25": timed(lambda i: store.bm25_retrieval(queries[i], top_k=TOP_K), label="BM25"),
        "dense": timed(lambda i: store.embedding_retrieval(vectors[i], top_k=TOP_K), dense_queries),
        "hybrid": timed(hybrid, dense_queries, label="hybrid"),
        "BM25+access": timed(lambda i: store.bm25_retrieval(queries[i], top_k=TOP_K, filters=access)),
        "hybrid+access": timed(lambda i: (store.bm25_retrieval(queries[i], top_k=CANDIDATES, filters=access),
                                          store.embedding_retrieval(vectors[i], top_k=CANDIDATES, filters=access)),
                               dense_queries),
    }
    say(event="queries", samples=samples, cpu=cpu, first_dense=first_dense, imported=imported,
        after=memory(os.getpid()))
    for line in sys.stdin:
        command, _, token = line.strip().partition(" ")
        if command == "watch":
            say(event="ready")
            while not store.bm25_retrieval(token, top_k=1):
                time.sleep(0.001)
            say(event="seen", at=time.time())
        elif command == "recall":
            exact = EmbeddedDocumentStore(path=path, ann_min_chunks=10**12, snapshot_rows=None)
            result = {}
            for label, filters in (("none", None), ("access", access)):
                found = []
                for vector in vectors[: min(RECALL_QUERIES, dense_queries)]:
                    want = {d.id for d in exact.embedding_retrieval(vector, top_k=TOP_K, filters=filters)}
                    got = {d.id for d in store.embedding_retrieval(vector, top_k=TOP_K, filters=filters)}
                    found.append(len(want & got) / max(len(want), 1))
                result[label] = float(np.mean(found))
            say(event="recall", recall=result)
        else:
            break
    store.close()


def start_worker(path: str, queries_file: Path, ann_min_chunks: int | None, dense_queries: int) -> JsonLineChild:
    command = [sys.executable, __file__, "--worker", "--path", path, "--queries-file", str(queries_file),
               "--dense-queries", str(dense_queries)]
    if ann_min_chunks is not None:
        command += ["--ann-min-chunks", str(ann_min_chunks)]
    return JsonLineChild(command, exit_timeout_s=60)


def report(name: str, w: JsonLineChild) -> None:
    first = w.expect("first_query")
    print(f"{name}: open + first BM25 answer {first['seconds']:.3f} s ({first['since_process_start']:.2f} s from "
          f"process start, imports included); snapshot rows {first['frozen']}, in-memory delta {first['delta']}",
          flush=True)
    done = w.expect("queries")
    print(f"{name}: first dense query {done['first_dense']:.3f} s")
    for kind, samples in done["samples"].items():
        print(f"{name}: {kind:13} top-{TOP_K} {percentiles(samples)}")
    for kind in ("BM25", "hybrid"):
        # CPU time of this process: what a query costs when the machine is shared with other loads.
        print(f"{name}: {kind:13} CPU time {percentiles(done['cpu'][kind])}")
    before, after, now = done["imported"], done["after"], memory(w.process.pid)
    print(f"{name}: after imports   RssAnon {before['RssAnon']:7.0f} MB  RssFile {before['RssFile']:6.0f} MB  "
          f"Pss {before['Pss']:7.0f} MB")
    print(f"{name}: after queries   RssAnon {after['RssAnon']:7.0f} MB  RssFile {after['RssFile']:6.0f} MB  "
          f"Pss {after['Pss']:7.0f} MB  (store adds {after['RssAnon'] - before['RssAnon']:.0f} MB private)")
    print(f"{name}: now (2 workers) RssAnon {now['RssAnon']:7.0f} MB  RssFile {now['RssFile']:6.0f} MB  "
          f"Pss {now['Pss']:7.0f} MB", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True, help="the store's SQLite file")
    parser.add_argument("--ann-min-chunks", type=int, default=None,
                        help="workers search exactly below this block size (default: the store's); set it above "
                             "the corpus size for a snapshot written without an HNSW graph")
    parser.add_argument("--dense-queries", type=int, default=200,
                        help="dense and hybrid queries per set (exact dense search at 1M chunks is slow)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--queries-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.path, args.queries_file, args.ann_min_chunks, args.dense_queries)
        return

    from haystack import Document

    from docqa.embedding import build_text_embedder
    from docqa.settings import Settings
    from docqa.stores.embedded import EmbeddedDocumentStore
    from docqa_eval.datasets import MULTIHOP_DATASETS, load_questions, shared_data_dir

    queries = [q.question for ds in MULTIHOP_DATASETS for q in load_questions(ds, shared_data_dir())]
    queries_file = Path(f"{args.path}.bench-queries.json")
    if not queries_file.exists():
        embedder = build_text_embedder(Settings())
        embedder.warm_up()
        vectors = [embedder.run(text=q)["embedding"] for q in queries]
        queries_file.write_text(json.dumps({"queries": queries, "vectors": vectors}))
    print(f"store {args.path}, {len(queries)} queries, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores", flush=True)
    first = start_worker(args.path, queries_file, args.ann_min_chunks, args.dense_queries)
    second = None
    try:
        report("worker 1", first)
        second = start_worker(args.path, queries_file, args.ann_min_chunks, args.dense_queries)
        report("worker 2", second)
        now = memory(first.process.pid)
        print(f"worker 1: now (2 workers) RssAnon {now['RssAnon']:7.0f} MB  Pss {now['Pss']:7.0f} MB", flush=True)

        store = EmbeddedDocumentStore(path=args.path, snapshot_rows=None)
        delays = []
        for k in range(VISIBILITY_WRITES):
            token = f"visibilityprobe{k}x{os.getpid()}x{int(time.time())}"
            second.send(f"watch {token}")
            second.expect("ready")
            time.sleep(0.05)
            store.write_documents([Document(content=f"{token} written by the bench",
                                            meta={"tenant": "bench", "access": ["everyone"]})])
            committed = time.time()
            delays.append(max(0.0, second.expect("seen")["at"] - committed))
        print(f"write in this process -> visible to worker 2's polling BM25 query: {percentiles(delays)}")
        second.send("recall")
        recall = second.expect("recall")["recall"]
        print(f"worker 2: dense recall@{TOP_K} vs exact over {min(RECALL_QUERIES, args.dense_queries)} queries: "
              + ", ".join(f"{k} filter {v:.4f}" for k, v in recall.items()), flush=True)
        store.close()
    finally:
        first.stop()
        if second is not None:
            second.stop()


if __name__ == "__main__":
    main()
