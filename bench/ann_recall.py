"""Recall@10 of the embedded store's approximate (HNSW) dense search against its exact search, on the real
embeddings of the shared MuSiQue and HotpotQA samples, with and without filters. Each corpus is written to two
stores: one always exact, one approximate from the first chunk on (`ann_min_chunks=0`). Chunks alternate
between two tenants and carry a `bucket` 0..31, so a tenant filter keeps half the chunks and a bucket filter
about 3% (the selective case that falls back to exact search). Prints figures; asserts nothing.

    nice -n 10 python bench/ann_recall.py        # DOCQA_EMBEDDING_BACKEND picks the embedder (default: settings)
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from docqa.embedding import build_document_embedder, build_text_embedder
from docqa.settings import Settings
from docqa.stores.embedded import EmbeddedDocumentStore
from docqa_eval.datasets import MULTIHOP_DATASETS, load_corpus, load_questions, shared_data_dir

TOP_K = 10
FILTERS = {
    "none": None,
    "tenant (1/2)": {"field": "meta.tenant", "operator": "==", "value": "t0"},
    "tenant+access": {
        "operator": "AND",
        "conditions": [
            {"field": "meta.tenant", "operator": "==", "value": "t1"},
            {"field": "meta.access", "operator": "in", "value": ["group:a", "everyone"]},
        ],
    },
    "bucket (1/32)": {"field": "meta.bucket", "operator": "==", "value": 3},
}


def main() -> None:
    if not (shared_data_dir() / "multihop").is_dir():
        sys.exit(f"shared data not found at {shared_data_dir()}; nothing to measure")
    with tempfile.TemporaryDirectory() as workdir:
        settings = Settings(data_dir=Path(workdir))
        doc_embedder = build_document_embedder(settings)
        doc_embedder.warm_up()
        text_embedder = build_text_embedder(settings)
        text_embedder.warm_up()
        print(f"embedding backend: {settings.embedding_backend}; top-{TOP_K}; recall of HNSW results vs exact ones")
        print(f"{'sample':<10} {'filter':<14} {'q':>4} {'chunks':>6} | recall@10 | exact p50 ms | HNSW p50 ms")
        for dataset in MULTIHOP_DATASETS:
            corpus = load_corpus(dataset, tenant="t0", access=["everyone"])
            for i, doc in enumerate(corpus):
                doc.meta.update(tenant=f"t{i % 2}", bucket=i % 32, access=["group:a"] if i % 3 == 0 else ["group:b"])
            embedded = doc_embedder.run(documents=corpus)["documents"]
            exact = EmbeddedDocumentStore(path=str(Path(workdir) / f"{dataset}-exact.sqlite3"), ann_min_chunks=10**9)
            approx = EmbeddedDocumentStore(path=str(Path(workdir) / f"{dataset}-ann.sqlite3"), ann_min_chunks=0)
            for store in (exact, approx):
                store.write_documents(embedded)
            vectors = [text_embedder.run(text=q.question)["embedding"] for q in load_questions(dataset)]
            for name, filters in FILTERS.items():
                recalls, times = [], {"exact": [], "ann": []}
                for vector in vectors:
                    results = {}
                    for label, store in (("exact", exact), ("ann", approx)):
                        started = time.perf_counter()
                        results[label] = store.embedding_retrieval(vector, filters=filters, top_k=TOP_K)
                        times[label].append(1000 * (time.perf_counter() - started))
                    want = {d.id for d in results["exact"]}
                    recalls.append(len(want & {d.id for d in results["ann"]}) / max(len(want), 1))
                print(
                    f"{dataset:<10} {name:<14} {len(vectors):>4} {len(corpus):>6} | {statistics.mean(recalls):9.4f} |"
                    f" {statistics.median(times['exact']):12.2f} | {statistics.median(times['ann']):11.2f}",
                    flush=True,
                )
            exact.close()
            approx.close()


if __name__ == "__main__":
    main()
