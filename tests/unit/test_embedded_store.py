"""Behaviour of the embedded store beyond the shared conformance suite: persistence, catch-up between
instances, list-valued filters, exact embeddings, segment merging, serialization."""

from __future__ import annotations

import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy
from haystack.errors import FilterError

from docqa.stores import embedded, search_index
from docqa.stores.embedded import EmbeddedDocumentStore


@pytest.fixture(autouse=True, params=["exact", "ann"])
def dense_path(request, monkeypatch):
    """Every test runs with exact dense search and with HNSW from the first embedding on."""
    monkeypatch.setattr(embedded, "DEFAULT_ANN_MIN_CHUNKS", 0 if request.param == "ann" else 10**9)
    return request.param


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "store" / "documents.sqlite3")


@pytest.fixture
def store(path):
    store = EmbeddedDocumentStore(path=path)
    yield store
    store.close()


def ids(documents):
    return [d.id for d in documents]


class TestEmbeddedDocumentStore:
    def test_rejects_bad_arguments(self, path):
        with pytest.raises(ValueError):
            EmbeddedDocumentStore(path="")
        with pytest.raises(ValueError):
            EmbeddedDocumentStore(path=path, embedding_similarity_function="l2")
        with pytest.raises(ValueError):
            EmbeddedDocumentStore(path=path, bm25_b=2.0)

    def test_documents_survive_reopening(self, store, path):
        docs = [Document(content="the heron nests by the lake", meta={"n": 1}, embedding=[0.1, 0.2, 0.3])]
        store.write_documents(docs)
        store.close()
        reopened = EmbeddedDocumentStore(path=path)
        assert reopened.filter_documents() == docs
        assert ids(reopened.bm25_retrieval("heron")) == ids(docs)

    def test_second_instance_sees_writes_deletes_and_updates(self, store, path):
        other = EmbeddedDocumentStore(path=path)
        assert other.bm25_retrieval("heron") == []
        first, second = Document(content="heron one"), Document(content="heron two")
        store.write_documents([first, second])
        assert sorted(ids(other.bm25_retrieval("heron"))) == sorted([first.id, second.id])
        store.delete_documents([first.id])
        assert ids(other.bm25_retrieval("heron")) == [second.id]
        store.update_by_filter({"field": "id", "operator": "==", "value": second.id}, {"seen": True})
        assert other.filter_documents({"field": "meta.seen", "operator": "==", "value": True})[0].id == second.id
        store.delete_all_documents()
        assert other.bm25_retrieval("heron") == []
        other.close()

    def test_overwrite_replaces_the_searchable_text(self, store):
        store.write_documents([Document(id="x", content="old words here")])
        store.write_documents([Document(id="x", content="fresh text")], policy=DuplicatePolicy.OVERWRITE)
        assert store.bm25_retrieval("old words") == []
        assert ids(store.bm25_retrieval("fresh")) == ["x"]
        assert store.count_documents() == 1

    def test_fail_policy_writes_nothing_from_a_batch_with_a_known_id(self, store):
        store.write_documents([Document(id="a", content="one")])
        with pytest.raises(Exception, match="already exists"):
            store.write_documents([Document(id="b", content="two"), Document(id="a", content="again")])
        assert store.count_documents() == 1

    def test_list_values_match_any_element_like_elasticsearch_terms(self, store):
        store.write_documents(
            [
                Document(id="both", content="memo", meta={"access": ["alice", "bob"]}),
                Document(id="carol", content="memo", meta={"access": ["carol"]}),
            ]
        )

        def match(op, value):
            return sorted(ids(store.filter_documents({"field": "meta.access", "operator": op, "value": value})))

        assert match("in", ["bob", "dave"]) == ["both"]
        assert match("==", "alice") == ["both"]
        assert match("!=", "alice") == ["carol"]
        assert match("not in", ["carol"]) == ["both"]
        assert match("==", ["alice", "bob"]) == ["both"]

    def test_malformed_filters_raise_filter_error_even_when_empty(self, store):
        with pytest.raises(FilterError):
            store.filter_documents({"field": "meta.x", "operator": "in", "value": "not a list"})
        with pytest.raises(FilterError):
            store.bm25_retrieval("x", filters={"operator": "XOR", "conditions": []})

    def test_filters_on_content_work(self, store):
        store.write_documents([Document(id="a", content="alpha"), Document(id="b", content="beta")])
        assert ids(store.filter_documents({"field": "content", "operator": "==", "value": "beta"})) == ["b"]

    def test_embeddings_round_trip_exactly(self, store):
        float32_exact = [0.5, -0.25, 1.0]
        needs_float64 = [0.1, 0.2, 0.3]
        store.write_documents(
            [
                Document(id="a", content="a", embedding=float32_exact),
                Document(id="b", content="b", embedding=needs_float64),
            ]
        )
        by_id = {d.id: d.embedding for d in store.filter_documents()}
        assert by_id == {"a": float32_exact, "b": needs_float64}

    def test_dense_search_skips_documents_of_another_dimension(self, store):
        store.write_documents(
            [
                Document(id="2d", content="a", embedding=[1.0, 0.0]),
                Document(id="3d", content="b", embedding=[1.0, 0.0, 0.0]),
                Document(id="none", content="c"),
            ]
        )
        assert ids(store.embedding_retrieval([1.0, 0.0, 0.0], top_k=5)) == ["3d"]

    def test_scores_are_sorted_and_scaled_scores_are_probabilities(self, store):
        store.write_documents([Document(content=f"heron {'lake ' * i}") for i in range(5)])
        scores = [d.score for d in store.bm25_retrieval("heron lake", top_k=5)]
        assert scores == sorted(scores, reverse=True)
        assert all(0 < d.score < 1 for d in store.bm25_retrieval("heron lake", scale_score=True))

    def test_many_small_writes_and_deletes_merge_segments_without_losing_documents(self, store):
        written = []
        for batch in range(search_index.MAX_SEGMENTS * 2 + 3):
            docs = [Document(content=f"common batch{batch} item{i}") for i in range(3)]
            store.write_documents(docs)
            written += docs
            store.bm25_retrieval("common")  # catch up after every batch: one segment per batch
        deleted = [d.id for d in written[::2]]
        store.delete_documents(deleted)
        found = store.bm25_retrieval("common", top_k=1000)
        assert sorted(ids(found)) == sorted(d.id for d in written if d.id not in set(deleted))
        assert len(store._index.segments) <= search_index.MAX_SEGMENTS
        assert ids(store.bm25_retrieval("batch4 item1"))[0] == written[4 * 3 + 1].id

    def test_serialization_round_trip(self, store):
        data = store.to_dict()
        clone = EmbeddedDocumentStore.from_dict(data)
        assert clone.to_dict() == data
        assert clone.path == store.path
