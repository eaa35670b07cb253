"""Retrieval time and supporting-passage recall with and without AT-RAG topic filtering on the shared
MuSiQue and HotpotQA samples. Per dataset: embed the corpus into a fresh embedded store, fit a topic model
(unsupervised: the passages carry no record type), tag and re-write the passages, then for every question run

- `plain`: hybrid retrieval (BM25 + dense, RRF) over the whole corpus;
- `topic, p>=X`: `TopicFilteredRetriever` with min_probability X (fallbacks on: an uncertain topic or fewer
  than top_k filtered hits retrieve unfiltered, as in the pipeline);
- `topic forced`: filtered to the question's topic whatever its probability, no fallback (what narrowing costs).

Time is per query, median and p90, of the retriever call (the topic variants include assigning the question's
topic, i.e. one extra query embedding); a last line times the store's BM25 + dense search alone, whole corpus
vs the question's topic, with a precomputed query embedding (the narrowing itself).
Recall@k = supporting passages found / supporting passages, averaged.
One torch thread. Prints figures; asserts nothing.

    nice python bench/topic_filtering.py
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
from typing import Any

from haystack.document_stores.types import DuplicatePolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

from docqa.components.hybrid_retriever import HybridRetriever
from docqa.components.store_retrievers import build_retrievers
from docqa.components.topic_assigner import TopicAssigner
from docqa.components.topic_filtered_retriever import TopicFilteredRetriever, TopicMode
from docqa.embedding import build_document_embedder, build_text_embedder
from docqa.evaluation.metrics import recall_at_k
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from docqa_eval.datasets import MULTIHOP_DATASETS, load_corpus, load_questions, shared_data_dir

TOP_K = 10
THRESHOLDS = (0.5, 0.8)


class ForcedTopicRetriever:
    """Always narrows to the question's topic (no fallback): the cost side of filtering."""

    def __init__(self, retriever: Any, assigner: TopicAssigner, text_embedder: Any) -> None:
        self.retriever = retriever
        self.assigner = assigner
        self.text_embedder = text_embedder

    def run(self, query: str, filters: dict[str, Any], top_k: int) -> dict[str, Any]:
        topic = self.assigner.assign(self.text_embedder.run(text=query)["embedding"])
        narrowed = {"operator": "AND", "conditions": [
            filters,
            {"field": "meta.topic_id", "operator": "==", "value": topic.topic_id},
            {"field": "meta.topic_version", "operator": "==", "value": topic.version},
        ]}
        return {"documents": self.retriever.run(query=query, filters=narrowed, top_k=top_k)["documents"],
                "topic": {"mode": TopicMode.TOPIC.value}}


def _ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _store_search_times(store: Any, assigner: TopicAssigner, text_embedder: Any, questions: list[Any],
                        filters: dict[str, Any]) -> None:
    """The narrowing itself: BM25 + dense search in the store with a precomputed query embedding, whole corpus
    vs the question's topic only (no embedding, fusion or topic-assignment time)."""
    plain, narrowed, sizes = [], [], []
    for q in questions:
        vector = text_embedder.run(text=q.question)["embedding"]
        topic = assigner.assign(vector)
        topic_filters = {"operator": "AND", "conditions": [
            filters, {"field": "meta.topic_id", "operator": "==", "value": topic.topic_id}]}
        for bucket, active in ((plain, filters), (narrowed, topic_filters)):
            start = time.perf_counter()
            store.bm25_retrieval(query=q.question, filters=active, top_k=20)
            store.embedding_retrieval(query_embedding=vector, filters=active, top_k=20)
            bucket.append(time.perf_counter() - start)
        sizes.append(store.count_documents_by_filter(topic_filters) if hasattr(store, "count_documents_by_filter")
                     else 0)
    print(f"{'store search':<16} whole corpus p50 {_ms(plain, 0.5):.1f} ms / p90 {_ms(plain, 0.9):.1f} ms; "
          f"topic only p50 {_ms(narrowed, 0.5):.1f} ms / p90 {_ms(narrowed, 0.9):.1f} ms "
          f"(median topic size {statistics.median(sizes):.0f} passages)", flush=True)


def main() -> None:
    if not (shared_data_dir() / "multihop").is_dir():
        sys.exit(f"shared data not found at {shared_data_dir()}; nothing to measure")
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as workdir:
        settings = Settings(data_dir=Path(workdir), retrieval_candidates=20, top_k=TOP_K)
        doc_embedder = build_document_embedder(settings)
        doc_embedder.warm_up()
        text_embedder = build_text_embedder(settings)
        text_embedder.warm_up()
        print(f"top_k={TOP_K}; hybrid = RRF over {settings.retrieval_candidates} candidates per retriever; "
              f"topic probability = softmax(cosine/0.05) over topic centroids")
        for dataset in MULTIHOP_DATASETS:
            store = build_document_store(settings, index=f"docqa-topics-{dataset}")
            corpus = doc_embedder.run(documents=load_corpus(dataset, tenant="eval", access=["everyone"]))["documents"]
            assigner = TopicAssigner(Path(workdir) / "topics" / dataset)
            started = time.perf_counter()
            info = assigner.fit(corpus)
            fit_s = time.perf_counter() - started
            store.write_documents(assigner.run(documents=corpus)["documents"], policy=DuplicatePolicy.OVERWRITE)
            sizes = sorted(info.topic_sizes.items(), key=lambda kv: -kv[1])
            print(f"\n{dataset}: {len(corpus)} passages; topic model v{info.version} {info.mode}, "
                  f"{info.n_topics} topics (largest sizes {[s for _, s in sizes[:5]]}, outliers "
                  f"{info.topic_sizes.get('-1', 0)}), fitted in {fit_s:.1f} s")

            def hybrid(store: Any = store) -> HybridRetriever:  # a component belongs to one graph: one per variant
                return HybridRetriever(*build_retrievers(store, settings), build_text_embedder(settings), top_k=TOP_K,
                                       candidates=20)

            variants: dict[str, Any] = {"plain": hybrid()}
            for threshold in THRESHOLDS:
                variants[f"topic, p>={threshold}"] = TopicFilteredRetriever(
                    hybrid(), build_text_embedder(settings), assigner, min_probability=threshold, top_k=TOP_K)
            variants["topic forced"] = ForcedTopicRetriever(hybrid(), assigner, text_embedder)
            filters = {"field": "meta.tenant", "operator": "==", "value": "eval"}
            questions = load_questions(dataset)
            print(f"{'variant':<16} {'R@5':>6} {'R@10':>6} {'p50 ms':>7} {'p90 ms':>7}  filtered / fallbacks")
            for name, retriever in variants.items():
                times, r5, r10, modes = [], 0.0, 0.0, {}
                for q in questions:
                    start = time.perf_counter()
                    out = retriever.run(query=q.question, filters=filters, top_k=TOP_K)
                    times.append(time.perf_counter() - start)
                    ids = [d.id for d in out["documents"]]
                    r5 += recall_at_k(ids, q.supporting_ids, 5) or 0.0
                    r10 += recall_at_k(ids, q.supporting_ids, 10) or 0.0
                    mode = out.get("topic", {}).get("mode", "-")
                    modes[mode] = modes.get(mode, 0) + 1
                n = len(questions)
                mode_text = ", ".join(f"{k}={v}" for k, v in sorted(modes.items()))
                print(f"{name:<16} {100 * r5 / n:6.1f} {100 * r10 / n:6.1f} {_ms(times, 0.5):7.1f} "
                      f"{_ms(times, 0.9):7.1f}  {mode_text}", flush=True)
            print(f"{'':<16} median over {len(questions)} questions: "
                  f"{statistics.median(len(q.supporting_ids) for q in questions)} supporting passages each")
            _store_search_times(store, assigner, text_embedder, questions, filters)
            store.close()


if __name__ == "__main__":
    main()
