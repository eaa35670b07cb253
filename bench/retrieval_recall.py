"""Supporting-passage recall@5 and @10 of BM25, dense and hybrid (RRF) single-shot retrieval on the shared
MuSiQue and HotpotQA samples: each question retrieves from its dataset's full corpus in the embedded store
(or Elasticsearch when DOCQA_ELASTICSEARCH_URL is set). Questions and passages are read by `docqa eval`'s
loaders (`docqa.evaluation`: the published HotpotQA/MuSiQue layouts, the same passage ids) and recall@k is its
`recall_at_k`: supporting passages among the first k / supporting passages, averaged over the questions that
have supporting passages. Prints figures; asserts nothing.

    python bench/retrieval_recall.py
    DOCQA_EMBEDDING_BACKEND=onnx-int8 python bench/retrieval_recall.py   # any embedding backend
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from docqa.components.hybrid_retriever import HybridRetriever
from docqa.components.store_retrievers import build_retrievers
from docqa.embedding import build_document_embedder, build_text_embedder
from docqa.evaluation.corpus import read_corpus
from docqa.evaluation.datasets import load_dataset
from docqa.evaluation.metrics import recall_at_k
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from docqa_eval.datasets import MULTIHOP_DATASETS, shared_data_dir

DEPTH = 10


def main() -> None:
    if not (shared_data_dir() / "multihop").is_dir():
        sys.exit(f"shared data not found at {shared_data_dir()}; nothing to measure")
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as workdir:
        settings = Settings(data_dir=Path(workdir), retrieval_candidates=20, top_k=DEPTH)
        doc_embedder = build_document_embedder(settings)
        doc_embedder.warm_up()
        text_embedder = build_text_embedder(settings)
        text_embedder.warm_up()
        backend = "elasticsearch" if settings.elasticsearch_url else "embedded"
        print(
            f"embedding backend: {settings.embedding_backend}; "
            f"store: {backend}; hybrid = RRF(k={settings.rrf_k}) over {settings.retrieval_candidates} candidates each"
        )
        print(f"{'sample':<10} {'q':>4} {'passages':>8} | BM25 R@5 / R@10 | dense R@5 / R@10 | hybrid R@5 / R@10")
        for dataset in MULTIHOP_DATASETS:
            store = build_document_store(settings, index=f"docqa-recall-{dataset}")
            if hasattr(store, "delete_all_documents"):
                store.delete_all_documents()
            started = time.perf_counter()
            folder = shared_data_dir() / "multihop"
            corpus = read_corpus(folder / f"{dataset}_train_corpus.json", tenant="eval", access=["everyone"])
            store.write_documents(doc_embedder.run(documents=corpus)["documents"])
            embed_s = time.perf_counter() - started
            bm25, dense = build_retrievers(store, Settings(data_dir=Path(workdir), retrieval_candidates=DEPTH))
            # Its own query embedder: a component belongs to one graph, and the hybrid retriever is one.
            hybrid = HybridRetriever(*build_retrievers(store, settings), build_text_embedder(settings), top_k=DEPTH,
                                     candidates=20)
            filters = {"field": "meta.tenant", "operator": "==", "value": "eval"}
            totals = {name: [0.0, 0.0] for name in ("bm25", "dense", "hybrid")}
            questions = [q for q in load_dataset(folder / f"{dataset}_train.json") if q.supporting_ids]
            for q in questions:
                vector = text_embedder.run(text=q.question)["embedding"]
                runs = {
                    "bm25": bm25.run(query=q.question, filters=filters, top_k=DEPTH)["documents"],
                    "dense": dense.run(query_embedding=vector, filters=filters, top_k=DEPTH)["documents"],
                    "hybrid": hybrid.run(query=q.question, filters=filters)["documents"],
                }
                for name, docs in runs.items():
                    ids = [d.id for d in docs]
                    totals[name][0] += recall_at_k(ids, q.supporting_ids, 5) or 0.0
                    totals[name][1] += recall_at_k(ids, q.supporting_ids, 10) or 0.0
            n = len(questions)
            cells = [f"{100 * r5 / n:5.1f} / {100 * r10 / n:5.1f}" for r5, r10 in totals.values()]
            print(f"{dataset:<10} {n:>4} {len(corpus):>8} | {cells[0]:>15} | {cells[1]:>16} | {cells[2]:>17}")
            print(f"{'':<10} (corpus embedded and written in {embed_s:.0f} s)", flush=True)
            store.close()


if __name__ == "__main__":
    main()
