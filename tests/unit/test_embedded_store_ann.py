"""Approximate (HNSW) dense search of the embedded store against exact search: same answers on clustered data,
filters applied exactly, selective filters and tombstones handled, exact search below the threshold."""

from __future__ import annotations

import numpy as np
import pytest
from haystack import Document

from docqa.stores import search_index
from docqa.stores.embedded import EmbeddedDocumentStore

N, DIM, TENANTS = 3000, 32, 4


def corpus() -> list[Document]:
    rng = np.random.default_rng(7)
    centers = rng.standard_normal((40, DIM))
    vectors = centers[rng.integers(0, 40, N)] + 0.4 * rng.standard_normal((N, DIM))
    return [
        Document(
            id=f"d{i}",
            content=f"chunk {i}",
            embedding=vectors[i].tolist(),
            meta={"tenant": f"t{i % TENANTS}", "year": 2000 + i % 25, "rare": i % 100 == 0},
        )
        for i in range(N)
    ]


def queries(count: int = 40) -> list[list[float]]:
    """Near the corpus, as questions are near their passages: a chunk's vector plus as much noise again."""
    rng = np.random.default_rng(11)
    docs = corpus()
    picks = rng.integers(0, N, count)
    return [(np.asarray(docs[i].embedding) + 0.4 * rng.standard_normal(DIM)).tolist() for i in picks]


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    docs = corpus()
    exact = EmbeddedDocumentStore(path=str(tmp_path_factory.mktemp("exact") / "s.sqlite3"), ann_min_chunks=10**9)
    ann = EmbeddedDocumentStore(path=str(tmp_path_factory.mktemp("ann") / "s.sqlite3"), ann_min_chunks=1000)
    for store in (exact, ann):
        store.write_documents(docs)
    yield exact, ann
    exact.close()
    ann.close()


def recall(exact_docs, ann_docs) -> float:
    return len({d.id for d in exact_docs} & {d.id for d in ann_docs}) / max(len(exact_docs), 1)


def test_unfiltered_results_match_exact_search(stores):
    exact, ann = stores
    scores = []
    for q in queries():
        want, got = exact.embedding_retrieval(q, top_k=10), ann.embedding_retrieval(q, top_k=10)
        scores.append(recall(want, got))
        common = {d.id: d.score for d in want}
        # Candidates are re-scored exactly: a document found by both has the same score.
        assert all(d.score == pytest.approx(common[d.id], abs=1e-6) for d in got if d.id in common)
    assert np.mean(scores) >= 0.99 - 1e-9
    assert ann._index.segments[0].dense[DIM].ann is not None
    assert exact._index.segments[0].dense[DIM].ann is None


@pytest.mark.parametrize(
    "filters",
    [
        {"field": "meta.tenant", "operator": "==", "value": "t1"},
        {
            "operator": "AND",
            "conditions": [
                {"field": "meta.tenant", "operator": "in", "value": ["t0", "t2"]},
                {"field": "meta.year", "operator": ">=", "value": 2010},
            ],
        },
        {"field": "meta.rare", "operator": "==", "value": True},  # 1% of the chunks: exact fallback
    ],
)
def test_filters_are_applied_exactly(stores, filters):
    exact, ann = stores
    scores = []
    for q in queries(20):
        want = exact.embedding_retrieval(q, filters=filters, top_k=10)
        got = ann.embedding_retrieval(q, filters=filters, top_k=10)
        assert len(got) == len(want)
        assert {d.id for d in got} <= {d.id for d in exact.filter_documents(filters)}
        scores.append(recall(want, got))
    assert np.mean(scores) >= 0.99 - 1e-9


def test_deleted_documents_are_never_returned(tmp_path):
    docs = corpus()[:1500]
    store = EmbeddedDocumentStore(path=str(tmp_path / "s.sqlite3"), ann_min_chunks=1000)
    store.write_documents(docs)
    q = docs[0].embedding
    assert store.embedding_retrieval(q, top_k=1)[0].id == "d0"
    store.delete_documents(["d0"])
    assert "d0" not in {d.id for d in store.embedding_retrieval(q, top_k=10)}
    store.close()


def test_blocks_below_the_threshold_are_searched_exactly(tmp_path):
    store = EmbeddedDocumentStore(path=str(tmp_path / "s.sqlite3"), ann_min_chunks=5000)
    store.write_documents(corpus()[:200])
    store.embedding_retrieval(queries(1)[0], top_k=5)
    assert all(block.ann is None for s in store._index.segments for block in s.dense.values())
    assert EmbeddedDocumentStore.from_dict(store.to_dict()).ann_min_chunks == 5000
    store.close()


def test_negative_threshold_is_refused(tmp_path):
    with pytest.raises(ValueError, match="ann_min_chunks"):
        EmbeddedDocumentStore(path=str(tmp_path / "s.sqlite3"), ann_min_chunks=-1)


def test_large_blocks_are_searched_exactly_until_their_graph_is_built_in_the_background(tmp_path, monkeypatch):
    monkeypatch.setattr(search_index, "ANN_SYNC_BUILD_MAX", 100)
    docs = corpus()[:1500]
    exact = EmbeddedDocumentStore(path=str(tmp_path / "e.sqlite3"), ann_min_chunks=10**9)
    store = EmbeddedDocumentStore(path=str(tmp_path / "a.sqlite3"), ann_min_chunks=1000)
    for s in (exact, store):
        s.write_documents(docs)
    q = queries(1)[0]
    want = [d.id for d in exact.embedding_retrieval(q, top_k=10)]
    assert [d.id for d in store.embedding_retrieval(q, top_k=10)] == want  # exact while building
    block = store._index.segments[0].dense[DIM]
    assert block.ann_builder is not None
    block.ann_builder.join(timeout=60)
    assert block.ann is not None
    assert recall(exact.embedding_retrieval(q, top_k=10), store.embedding_retrieval(q, top_k=10)) >= 0.9
    for s in (exact, store):
        s.close()
