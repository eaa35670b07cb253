"""Query latency of the embedded store next to Haystack's InMemoryDocumentStore and bm25s, same corpus and queries.

Corpus (per retrieval_anchors.md): multi-hop passages, ODSum story pieces of 120 words and ASQA knowledge
snippets (~11k distinct texts), repeated with a " (copy k)" suffix to reach N. Queries: the 200 MuSiQue and
HotpotQA questions. Top-10, one query at a time, one thread. Hybrid = BM25 + dense + RRF over 20 candidates
each, with the query embedding computed beforehand (its cost is the same for every store and printed once).
Document vectors are random unit vectors (384 dims, one per document, seeded per batch): exact search costs the
same whatever the values, and embedding ~11k passages on a shared 2-core machine takes longer than the whole
benchmark. Queries use real MiniLM embeddings. Documents are generated and written batch by batch, so a million
chunks never exist as Documents at once; InMemory (which needs them all) is skipped above --inmemory-max.
Dense search is exact below --ann-min-chunks chunks per index block and HNSW above; the first dense query pays
the HNSW build. Prints figures; asserts nothing.

    python bench/store_latency.py --sizes 10000 100000 --inmemory-queries 20
    nice -n 10 python bench/store_latency.py --sizes 1000000 --skip-bm25s
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from haystack import Document

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from docqa.access import AccessScope
from docqa.components.hybrid_retriever import reciprocal_rank_fusion
from docqa.settings import Settings
from docqa.stores.embedded import EmbeddedDocumentStore
from docqa.stores.tokenizer import STOP_WORDS
from docqa_eval.datasets import MULTIHOP_DATASETS, load_corpus, load_questions, shared_data_dir

TOP_K = 10
CANDIDATES = 20


def base_texts(data: Path) -> list[str]:
    texts = [d.content for ds in MULTIHOP_DATASETS for d in load_corpus(ds, data_dir=data)]
    for split in ("train", "dev", "test"):
        for line in (data / "longform" / "odsum_story" / f"{split}.jsonl").read_text().splitlines():
            words = " ".join(json.loads(line)["divided_document"]).split()
            texts += [" ".join(words[i : i + 120]) for i in range(0, len(words), 120)]
    asqa = json.loads((data / "longform" / "asqa" / "asqa_dev.json").read_text())
    texts += [k["content"] for q in asqa for a in q["annotations"] for k in a["knowledge"]]
    return list(dict.fromkeys(t for t in texts if t and t.strip()))


BATCH = 5000


def random_unit_vectors(count: int, dim: int = 384, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def content(texts: list[str], i: int) -> str:
    base, copy = i % len(texts), i // len(texts)
    return texts[base] if copy == 0 else f"{texts[base]} (copy {copy})"


def corpus_batches(texts: list[str], n: int, batch: int = BATCH) -> Iterator[list[Document]]:
    """The corpus of size n, `batch` Documents at a time (each batch's vectors drawn from its own seed)."""
    for start in range(0, n, batch):
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


def percentiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):8.2f} ms  p95 {p95:8.2f} ms  (n={len(ms)})"


def timed(fn: Callable[[int], object], count: int) -> list[float]:
    samples = []
    for i in range(count):
        started = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - started)
    return samples


def bench_embedded(
    batches: Iterator[list[Document]], queries, query_vectors, workdir: Path, ann_min_chunks: int | None
) -> None:
    store = EmbeddedDocumentStore(path=str(workdir / "documents.sqlite3"), ann_min_chunks=ann_min_chunks)
    started = time.perf_counter()
    for batch in batches:
        store.write_documents(batch)
    write_s = time.perf_counter() - started
    started = time.perf_counter()
    store.bm25_retrieval("warm up")
    print(
        f"  embedded     write {write_s:6.1f} s, index catch-up on first query {time.perf_counter() - started:5.1f} s"
    )
    # A second instance on the same file shows the cost a freshly started worker pays.
    other = EmbeddedDocumentStore(path=store.path)
    started = time.perf_counter()
    other.bm25_retrieval("warm up")
    print(f"  embedded     index load by a second instance {time.perf_counter() - started:5.1f} s")
    other.close()
    started = time.perf_counter()
    store.embedding_retrieval(query_vectors[0].tolist(), top_k=TOP_K)
    print(
        f"  embedded     first dense query {time.perf_counter() - started:5.1f} s "
        f"(HNSW from {store.ann_min_chunks} chunks per block)"
    )
    # Large blocks build their graph in the background (exact search meanwhile): wait, to time HNSW itself.
    builders = [b.ann_builder for s in store._index.segments for b in s.dense.values() if b.ann_builder]
    for builder in builders:
        builder.join()
    if builders:
        print(f"  embedded     background HNSW build done {time.perf_counter() - started:5.1f} s after it")
    print(
        "  embedded     dense  ",
        percentiles(timed(lambda i: store.embedding_retrieval(query_vectors[i].tolist(), top_k=TOP_K), len(queries))),
    )

    def hybrid(i: int) -> None:
        keyword = store.bm25_retrieval(queries[i], top_k=CANDIDATES)
        dense = store.embedding_retrieval(query_vectors[i].tolist(), top_k=CANDIDATES)
        reciprocal_rank_fusion([keyword, dense], rrf_k=60, top_k=TOP_K)

    print(
        "  embedded     BM25   ",
        percentiles(timed(lambda i: store.bm25_retrieval(queries[i], top_k=TOP_K), len(queries))),
    )
    print("  embedded     hybrid ", percentiles(timed(hybrid, len(queries))))
    access = AccessScope(tenant="bench", principals=frozenset({"group-1"})).to_filters()
    store.bm25_retrieval("warm up", filters=access)
    print(
        "  embedded     BM25 + tenant/access filter (cached mask)",
        percentiles(timed(lambda i: store.bm25_retrieval(queries[i], top_k=TOP_K, filters=access), len(queries))),
    )
    store.close()


def bench_inmemory(docs, queries, query_vectors, count: int) -> None:
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


def bench_bm25s(texts: list[str], n: int, queries) -> None:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--inmemory-queries", type=int, default=20, help="InMemory is slow: fewer queries")
    parser.add_argument("--inmemory-max", type=int, default=200_000, help="skip InMemory above this size")
    parser.add_argument("--skip-bm25s", action="store_true")
    parser.add_argument(
        "--ann-min-chunks", type=int, default=None, help="HNSW from this block size (default: the store's)"
    )
    args = parser.parse_args()
    data = shared_data_dir()
    if not (data / "multihop").is_dir():
        sys.exit(f"shared data not found at {data}; nothing to measure")
    import torch

    torch.set_num_threads(1)
    texts = base_texts(data)
    queries = [q.question for ds in MULTIHOP_DATASETS for q in load_questions(ds, data)]
    from docqa.embedding import build_text_embedder

    text_embedder = build_text_embedder(Settings())
    text_embedder.warm_up()
    query_vectors = np.asarray([text_embedder.run(text=q)["embedding"] for q in queries], dtype=np.float32)
    print(f"{len(texts)} distinct base texts, {len(queries)} queries, top-{TOP_K}, torch threads 1")
    print("query embedding (MiniLM, one query)", percentiles(timed(lambda i: text_embedder.run(text=queries[i]), 50)))
    for n in args.sizes:
        print(f"N = {n}  (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)", flush=True)
        with tempfile.TemporaryDirectory() as workdir:
            bench_embedded(corpus_batches(texts, n), queries, query_vectors, Path(workdir), args.ann_min_chunks)
        if not args.skip_bm25s:
            bench_bm25s(texts, n, queries)
        if n <= args.inmemory_max:
            bench_inmemory(corpus(texts, n), queries, query_vectors, min(args.inmemory_queries, len(queries)))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
