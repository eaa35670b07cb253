"""Query latency of the embedded store next to Haystack's InMemoryDocumentStore and bm25s, same corpus and queries.

Corpus (per retrieval_anchors.md): multi-hop passages, ODSum story pieces of 120 words and ASQA knowledge
snippets (~11k distinct texts), repeated with a " (copy k)" suffix and distinct ids to reach N. Queries: the 200
MuSiQue and HotpotQA questions. Top-10, one query at a time, one thread. Hybrid = BM25 + dense + RRF over 20
candidates each, with the query embedding computed beforehand (its cost is the same for every store and printed
once). Document vectors are random unit float32 vectors (384 dims, seeded per batch): exact search costs the same
whatever the values, and embedding ~11k passages on a shared 2-core machine takes longer than the whole benchmark.
Queries use real MiniLM embeddings.

The corpus is generated and written --batch Documents at a time, so at a million chunks neither Documents nor
their vectors ever exist all at once (InMemory, which needs them all, is skipped above --inmemory-max). When the
store offers a snapshot step (a `compact()` or `snapshot()` method: memory-mapped index segments), it runs after
the writes (and every --compact-every chunks, which bounds the writing process's memory: each step indexes only
what came after the previous snapshot), and every figure says whether it was taken with or without a snapshot.

This process is the first worker: it writes, catches up and times queries. Then a second worker is started as a
new process (`--worker`): the time from its start until it answers its first query, its query figures, and its
memory after the query set (VmRSS and RssAnon from /proc/<pid>/status, Pss from /proc/<pid>/smaps_rollup), to
judge what one more worker costs. Last, write visibility: the first process writes one chunk at a time while the
second polls a BM25 query for it; the figure is the time from the write's commit until the poll sees it.
Dense search is exact below --ann-min-chunks chunks per index block and HNSW above; the first worker waits for
its HNSW build before timing dense search, the second does not (it searches exactly while its graph builds).
Prints figures; asserts nothing.

    python bench/store_latency.py --sizes 10000 100000 --inmemory-queries 20
    nice -n 10 python bench/store_latency.py --sizes 1000000 --skip-bm25s --compact-every 200000
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from bench.child_process import JsonLineChild, memory_kb, percentiles
from docqa.access import AccessScope
from docqa.components.hybrid_retriever import reciprocal_rank_fusion
from docqa.stores.embedded import EmbeddedDocumentStore
from docqa.stores.tokenizer import STOP_WORDS

TOP_K = 10
CANDIDATES = 20
BATCH = 10_000
VISIBILITY_WRITES = 20
SNAPSHOT_METHODS = ("compact", "snapshot")


def base_texts(data: Path) -> list[str]:
    from docqa_eval.datasets import MULTIHOP_DATASETS, load_corpus

    texts = [d.content for ds in MULTIHOP_DATASETS for d in load_corpus(ds, data_dir=data)]
    for split in ("train", "dev", "test"):
        for line in (data / "longform" / "odsum_story" / f"{split}.jsonl").read_text().splitlines():
            words = " ".join(json.loads(line)["divided_document"]).split()
            texts += [" ".join(words[i : i + 120]) for i in range(0, len(words), 120)]
    asqa = json.loads((data / "longform" / "asqa" / "asqa_dev.json").read_text())
    texts += [k["content"] for q in asqa for a in q["annotations"] for k in a["knowledge"]]
    return list(dict.fromkeys(t for t in texts if t and t.strip()))


def random_unit_vectors(count: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def content(texts: list[str], i: int) -> str:
    base, copy = i % len(texts), i // len(texts)
    return texts[base] if copy == 0 else f"{texts[base]} (copy {copy})"


def corpus_batches(texts: list[str], n: int, batch: int = BATCH, first: int = 0) -> Iterator[list[Document]]:
    """The corpus of size n from Document `first` on, `batch` Documents at a time (each batch's vectors drawn from
    its own seed, so a batch is the same whichever run writes it)."""
    for start in range(first, n, batch):
        stop = min(start + batch, n)
        vectors = random_unit_vectors(stop - start, seed=start)
        docs = []
        for i in range(start, stop):
            # Half the corpus is open to everyone, the rest over ten groups: the access filter below keeps ~55%.
            access = ["everyone"] if i % 2 == 0 else [f"group-{i % 10}"]
            meta = {"tenant": "bench", "access": access}
            docs.append(
                Document(id=f"d{i}", content=content(texts, i), embedding=vectors[i - start].tolist(), meta=meta)
            )
        yield docs


def corpus(texts: list[str], n: int) -> list[Document]:
    return list(itertools.chain.from_iterable(corpus_batches(texts, n)))


def timed(fn: Callable[[int], object], count: int) -> list[float]:
    samples = []
    for i in range(count):
        started = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - started)
    return samples


def memory_line(pid: int) -> str:
    m = memory_kb(pid)
    mb = {k: v / 1024 for k, v in m.items()}
    return (
        f"RSS {mb['VmRSS']:7.0f} MB  RssAnon (private) {mb['RssAnon']:7.0f} MB  RssFile {mb['RssFile']:6.0f} MB  "
        f"PSS {mb['Pss']:7.0f} MB (anon {mb.get('Pss_Anon', 0):.0f}, file {mb.get('Pss_File', 0):.0f})"
    )


def snapshot_method(store: EmbeddedDocumentStore) -> Callable[[], object] | None:
    """The store's snapshot step (memory-mapped index segments), when this version of the store has one."""
    for name in SNAPSHOT_METHODS:
        method = getattr(store, name, None)
        if callable(method):
            return method
    return None


def ann_state(store: EmbeddedDocumentStore) -> str:
    # Internals of this store version; a later layout may not expose them, which only drops the remark.
    try:
        blocks = [b for s in store._index.segments for b in s.dense.values()]
    except AttributeError:
        return "dense path unknown"
    if not blocks or all(b.ann is None and b.ann_builder is None for b in blocks):
        return "exact"
    if all(b.ann is not None for b in blocks if b.ann_builder is not None or b.ann is not None):
        return "HNSW"
    return "exact while its HNSW graph builds"


def query_set(store: EmbeddedDocumentStore, queries: list[str], query_vectors: np.ndarray) -> dict[str, list[float]]:
    def hybrid(i: int) -> None:
        keyword = store.bm25_retrieval(queries[i], top_k=CANDIDATES)
        dense = store.embedding_retrieval(query_vectors[i].tolist(), top_k=CANDIDATES)
        reciprocal_rank_fusion([keyword, dense], rrf_k=60, top_k=TOP_K)

    count = len(queries)
    return {
        "BM25": timed(lambda i: store.bm25_retrieval(queries[i], top_k=TOP_K), count),
        "dense": timed(lambda i: store.embedding_retrieval(query_vectors[i].tolist(), top_k=TOP_K), count),
        "hybrid": timed(hybrid, count),
    }


# ---- reader workers (new processes) -----------------------------------------------------------------------------


def worker(store_path: str, queries_file: str, ann_min_chunks: int | None, wait_ann: bool) -> None:
    """A reader process: open the store, answer one query, run the query set, then serve commands from stdin
    ("watch TOKEN": poll a BM25 query until the token is found; "exit")."""

    def say(**event: Any) -> None:
        print(json.dumps(event), flush=True)

    spec = json.loads(Path(queries_file).read_text())
    queries, query_vectors = spec["queries"], np.asarray(spec["vectors"], dtype=np.float32)
    before = memory_kb(os.getpid())
    started = time.perf_counter()
    store = EmbeddedDocumentStore(path=store_path, ann_min_chunks=ann_min_chunks)
    store.bm25_retrieval(queries[0], top_k=TOP_K)
    say(event="first_query", seconds=time.perf_counter() - started, memory_before=before)
    started = time.perf_counter()
    store.embedding_retrieval(query_vectors[0].tolist(), top_k=TOP_K)
    first_dense = time.perf_counter() - started
    # Large blocks build their graph in the background (exact search meanwhile): wait, to time HNSW itself.
    builders = [b.ann_builder for s in getattr(store._index, "segments", []) for b in s.dense.values() if b.ann_builder]
    if wait_ann:
        for builder in builders:
            builder.join()
    waited = time.perf_counter() - started if wait_ann and builders else None
    samples = query_set(store, queries, query_vectors)
    access = AccessScope(tenant="bench", principals=frozenset({"group-1"})).to_filters()
    store.bm25_retrieval("warm up", filters=access)
    samples["BM25 + tenant/access filter (cached mask)"] = timed(
        lambda i: store.bm25_retrieval(queries[i], top_k=TOP_K, filters=access), len(queries)
    )
    say(event="queries", samples=samples, dense_path=ann_state(store), first_dense=first_dense, ann_wait=waited)
    for line in sys.stdin:
        command, _, token = line.strip().partition(" ")
        if command != "watch":
            break
        say(event="ready")
        polls = 0
        while not store.bm25_retrieval(token, top_k=1):
            polls += 1
            time.sleep(0.001)
        say(event="seen", at=time.time(), polls=polls)
    store.close()


class WorkerProcess(JsonLineChild):
    """A reader worker of this script (`--worker`), timed from its start."""

    def __init__(self, store_path: str, queries_file: Path, ann_min_chunks: int | None, wait_ann: bool) -> None:
        command = [sys.executable, __file__, "--worker", store_path, "--queries-file", str(queries_file)]
        if ann_min_chunks is not None:
            command += ["--ann-min-chunks", str(ann_min_chunks)]
        if wait_ann:
            command.append("--wait-ann")
        self.started = time.perf_counter()
        super().__init__(command)


def run_worker(name: str, worker_process: WorkerProcess, label: str) -> None:
    """Print a worker's open time, query figures and memory (after the query set, and what the store added)."""
    first = worker_process.expect("first_query")
    spawn_s = time.perf_counter() - worker_process.started
    print(
        f"  {label} {name}: open + first BM25 query {first['seconds']:6.2f} s "
        f"({spawn_s:6.2f} s from process start, interpreter and imports included)",
        flush=True,
    )
    done = worker_process.expect("queries")
    print(f"  {label} {name}: first dense query {done['first_dense']:6.2f} s", end="")
    print(f", HNSW build waited for {done['ann_wait']:6.1f} s" if done["ann_wait"] is not None else "")
    for kind, samples in done["samples"].items():
        dense = f"[{done['dense_path']} dense]" if kind in ("dense", "hybrid") else ""
        print(f"  {label} {name}: {kind:6} top-{TOP_K}", percentiles(samples), dense)
    pid = worker_process.process.pid
    print(f"  {label} {name}: memory after the query set: {memory_line(pid)}")
    before, after = first["memory_before"], memory_kb(pid)
    print(
        f"  {label} {name}: added by the store (after the query set - before opening it; imports excluded): "
        f"RSS {(after['VmRSS'] - before['VmRSS']) / 1024:7.0f} MB  "
        f"RssAnon {(after['RssAnon'] - before['RssAnon']) / 1024:7.0f} MB  "
        f"PSS {(after['Pss'] - before['Pss']) / 1024:7.0f} MB",
        flush=True,
    )


def write_visibility(store: EmbeddedDocumentStore, reader: WorkerProcess, label: str) -> None:
    after_commit, after_start = [], []
    for k in range(VISIBILITY_WRITES):
        token = f"visibilityprobe{k}x{os.getpid()}"
        reader.send(f"watch {token}")
        reader.expect("ready")
        time.sleep(0.05)  # let the poller settle into its loop
        meta = {"tenant": "bench", "access": ["everyone"]}
        started = time.time()
        probe = Document(id=f"probe-{k}", content=f"{token} written by process A", meta=meta)
        store.write_documents([probe], policy=DuplicatePolicy.OVERWRITE)
        committed = time.time()
        seen = reader.expect("seen")["at"]
        after_commit.append(max(0.0, seen - committed))
        after_start.append(seen - started)
    print(f"  {label} write in A -> visible to B's polling BM25 query, from commit     ", percentiles(after_commit))
    print(f"  {label} write in A -> visible to B's polling BM25 query, from write start", percentiles(after_start))


def take_snapshot(store: EmbeddedDocumentStore, snapshot: Callable[[], object]) -> float:
    started = time.perf_counter()
    snapshot()
    # The snapshot step indexed the new rows in this process: drop that index, this process only writes.
    store.close()
    return time.perf_counter() - started


def bench_embedded(
    texts: list[str],
    n: int,
    batch_size: int,
    queries: list[str],
    query_vectors: np.ndarray,
    workdir: Path,
    ann_min_chunks: int | None,
    compact_every: int | None = None,
) -> None:
    # This process only writes (writes never build the search index); the readers are worker processes.
    store = EmbeddedDocumentStore(path=str(workdir / "documents.sqlite3"), ann_min_chunks=ann_min_chunks)
    snapshot = snapshot_method(store)
    write_s = snapshot_s = last_snapshot_s = 0.0
    written = since_snapshot = 0
    # A kept store (--store-dir) of an interrupted run is completed from its last whole batch.
    existing = store.count_documents()
    first = min(n, existing - existing % batch_size)
    if existing:
        print(f"  embedded     {existing} chunks already in {store.path}: writing from chunk {first} on", flush=True)
    for batch in corpus_batches(texts, n, batch_size, first):
        started = time.perf_counter()
        written += store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE)
        write_s += time.perf_counter() - started
        since_snapshot += len(batch)
        if snapshot and (since_snapshot >= (compact_every or 0) > 0):
            last_snapshot_s = take_snapshot(store, snapshot)
            snapshot_s += last_snapshot_s
            since_snapshot = 0
    print(f"  embedded     write {written} chunks {write_s:6.1f} s", flush=True)
    if snapshot and (since_snapshot or not written):  # a completed store may hold rows no snapshot has yet
        last_snapshot_s = take_snapshot(store, snapshot)
        snapshot_s += last_snapshot_s
    if snapshot:
        every = f"every {compact_every} chunks and at the end" if compact_every else "once, after the writes"
        print(
            f"  embedded     snapshot step store.{snapshot.__name__}() {every}: {snapshot_s:6.1f} s in all, "
            f"the last {last_snapshot_s:6.1f} s",
            flush=True,
        )
    label = f"embedded [{'snapshot: store.' + snapshot.__name__ + '()' if snapshot else 'no snapshot'}]"
    queries_file = workdir / "queries.json"
    queries_file.write_text(json.dumps({"queries": queries, "vectors": query_vectors.tolist()}))
    first = WorkerProcess(store.path, queries_file, ann_min_chunks, wait_ann=True)
    second = None
    try:
        run_worker("first worker", first, label)
        if not snapshot:
            # Without a snapshot nothing is shared between workers (each holds a private index), so the second
            # worker's figures do not depend on the first still running: stop it, to bound the machine's memory.
            first.stop()
            print(f"  {label} first worker stopped before the second starts (no shared pages to measure)")
        second = WorkerProcess(store.path, queries_file, ann_min_chunks, wait_ann=False)
        run_worker("second worker", second, label)
        write_visibility(store, second, label)
    finally:
        for worker_process in (first, second):
            if worker_process is not None:
                worker_process.stop()
    store.close()


def bench_inmemory(docs: list[Document], queries: list[str], query_vectors: np.ndarray, count: int) -> None:
    from haystack.document_stores.in_memory import InMemoryDocumentStore

    store = InMemoryDocumentStore(embedding_similarity_function="dot_product", shared=False)
    started = time.perf_counter()
    store.write_documents(docs)
    print(f"  InMemory     write {time.perf_counter() - started:6.1f} s")

    def hybrid(i: int) -> None:
        keyword = store.bm25_retrieval(queries[i], top_k=CANDIDATES)
        dense = store.embedding_retrieval(query_vectors[i].tolist(), top_k=CANDIDATES)
        reciprocal_rank_fusion([keyword, dense], rrf_k=60, top_k=TOP_K)

    print("  InMemory     BM25   ", percentiles(timed(lambda i: store.bm25_retrieval(queries[i], top_k=TOP_K), count)))
    print("  InMemory     hybrid ", percentiles(timed(hybrid, count)))


def bench_bm25s(texts: list[str], n: int, queries: list[str]) -> None:
    import bm25s

    started = time.perf_counter()
    tokens = bm25s.tokenize([content(texts, i) for i in range(n)], stopwords=list(STOP_WORDS), show_progress=False)
    retriever = bm25s.BM25()
    retriever.index(tokens, show_progress=False)
    print(f"  bm25s        index {time.perf_counter() - started:6.1f} s")

    def query(i: int) -> None:
        q = bm25s.tokenize([queries[i]], stopwords=list(STOP_WORDS), show_progress=False, return_ids=False)
        retriever.retrieve(q, k=TOP_K, show_progress=False, n_threads=1)

    print("  bm25s        BM25   ", percentiles(timed(query, len(queries))))


def embed_queries(queries: list[str], out: Path) -> None:
    """MiniLM embeddings of the queries and the time of 50 single-query embeddings, written to `out` (JSON)."""
    import torch

    from docqa.embedding import build_text_embedder
    from docqa.settings import Settings

    torch.set_num_threads(1)
    text_embedder = build_text_embedder(Settings())
    text_embedder.warm_up()
    vectors = [text_embedder.run(text=q)["embedding"] for q in queries]
    samples = timed(lambda i: text_embedder.run(text=queries[i]), 50)
    out.write_text(json.dumps({"vectors": vectors, "samples": samples}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--batch", type=int, default=BATCH, help="Documents generated and written at a time")
    parser.add_argument("--inmemory-queries", type=int, default=20, help="InMemory is slow: fewer queries")
    parser.add_argument("--inmemory-max", type=int, default=200_000, help="skip InMemory above this size")
    parser.add_argument("--skip-bm25s", action="store_true")
    parser.add_argument(
        "--ann-min-chunks", type=int, default=None, help="HNSW from this block size (default: the store's)"
    )
    parser.add_argument(
        "--compact-every",
        type=int,
        default=None,
        help="also run the store's snapshot step after every this many written chunks (bounds the writer's memory)",
    )
    parser.add_argument(
        "--store-dir",
        type=Path,
        default=None,
        help="keep each size's store in DIR/N and complete an interrupted one on the next run (default: temp dirs)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="where the store is written (default: a temp dir)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--queries-file", help=argparse.SUPPRESS)
    parser.add_argument("--wait-ann", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--embed-queries", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.queries_file, args.ann_min_chunks, args.wait_ann)
        return
    if args.embed_queries:
        embed_queries(json.loads(sys.stdin.read()), Path(args.embed_queries))
        return
    from docqa_eval.datasets import MULTIHOP_DATASETS, load_questions, shared_data_dir

    data = shared_data_dir()
    if not (data / "multihop").is_dir():
        sys.exit(f"shared data not found at {data}; nothing to measure")
    texts = base_texts(data)
    queries = [q.question for ds in MULTIHOP_DATASETS for q in load_questions(ds, data)]
    # Queries are embedded in a child process: PyTorch and the model never take memory in the writing process.
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        out = Path(tmp) / "query_vectors.json"
        subprocess.run(
            [sys.executable, __file__, "--embed-queries", str(out)], input=json.dumps(queries), text=True, check=True
        )
        embedded = json.loads(out.read_text())
    query_vectors = np.asarray(embedded["vectors"], dtype=np.float32)
    print(f"{len(texts)} distinct base texts, {len(queries)} queries, top-{TOP_K}, torch threads 1")
    print("query embedding (MiniLM, one query)", percentiles(embedded["samples"]))
    for n in args.sizes:
        print(f"N = {n}  (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)", flush=True)
        arguments = (texts, n, args.batch, queries, query_vectors)
        if args.store_dir:
            workdir = args.store_dir / str(n)
            workdir.mkdir(parents=True, exist_ok=True)
            bench_embedded(*arguments, workdir, args.ann_min_chunks, args.compact_every)
            print(f"  the store is kept in {workdir}: delete it when done")
        else:
            with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
                bench_embedded(*arguments, Path(tmp), args.ann_min_chunks, args.compact_every)
        if not args.skip_bm25s:
            bench_bm25s(texts, n, queries)
        if n <= args.inmemory_max:
            bench_inmemory(corpus(texts, n), queries, query_vectors, min(args.inmemory_queries, len(queries)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
