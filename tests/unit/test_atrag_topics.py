"""Topic models: fitting strategies, versioned persistence, tagging at ingestion and query, the fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from haystack import Document, component

from docqa.components.topic_assigner import TopicAssigner
from docqa.components.topic_filtered_retriever import TopicFilteredRetriever, TopicMode, topic_keywords
from docqa.stores.filters import StoredRecord, compile_filters
from docqa.topic_models import TopicModelStore, fit_bertopic
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder, hash_vector

LAB_WORDS = "glucose cholesterol hemoglobin creatinine lab result blood panel serum"
MED_WORDS = "tablet capsule prescribed dose medication oral daily pharmacy"
VISIT_WORDS = "visit encounter clinic checkup admission emergency reason doctor"


def _corpus(per_type: int = 12, labelled: bool = True) -> list[Document]:
    docs = []
    for record_type, words in (("lab_result", LAB_WORDS), ("medication", MED_WORDS), ("encounter", VISIT_WORDS)):
        vocabulary = words.split()
        for i in range(per_type):
            text = " ".join(vocabulary[(i + j) % len(vocabulary)] for j in range(5)) + f" item{i}"
            meta = {"tenant": "t", "access": ["everyone"]}
            if labelled:
                meta["record_type"] = record_type
            docs.append(Document(id=f"{record_type}-{i}", content=text, meta=meta))
    return HashDocumentEmbedder().run(documents=docs)["documents"]


@component
class ListRetriever:
    """Applies filters over a fixed list with the embedded store's semantics; records every call."""

    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.calls: list[dict[str, Any]] = []

    @component.output_types(documents=list[Document])
    def run(self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = 5) -> dict[str, Any]:
        self.calls.append({"query": query, "filters": filters, "top_k": top_k})
        predicate = compile_filters(filters) if filters else (lambda _: True)
        hits = [d for d in self.documents if predicate(StoredRecord(id=d.id, meta=d.meta))]
        return {"documents": hits[:top_k]}


@pytest.fixture(scope="module")
def guided_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("topics")
    TopicAssigner(root).fit(_corpus())
    return root


class TestFitBertopic:
    def test_supervised_when_every_document_has_a_label(self) -> None:
        docs = _corpus()
        _, mode, topics = fit_bertopic([d.content for d in docs], np.array([d.embedding for d in docs]),
                                       [d.meta["record_type"] for d in docs])
        assert mode == "supervised"
        assert len(set(topics)) == 3

    def test_small_unlabelled_corpus_falls_back_to_kmeans(self) -> None:
        docs = _corpus(labelled=False)
        _, mode, topics = fit_bertopic([d.content for d in docs], np.array([d.embedding for d in docs]))
        assert mode == "small_corpus"
        assert len(set(topics)) >= 2 and -1 not in topics

    def test_too_few_documents_is_an_error(self) -> None:
        with pytest.raises(ValueError, match="at least"):
            fit_bertopic(["a", "b"], np.zeros((2, 4)))


class TestTopicModelStore:
    def test_each_fit_is_a_new_version(self, tmp_path: Path) -> None:
        store = TopicModelStore(tmp_path)
        docs = _corpus()
        texts, vectors = [d.content for d in docs], np.array([d.embedding for d in docs])
        first, _ = store.fit_new_version(texts, vectors, [d.meta["record_type"] for d in docs])
        second, _ = store.fit_new_version(texts, vectors)
        assert (first.version, second.version) == (1, 2)
        assert store.versions() == [1, 2]
        assert store.load(1).info.mode == "supervised"
        assert store.load().version == 2
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".fitting-")]

    def test_nothing_fitted_loads_none(self, tmp_path: Path) -> None:
        assert TopicModelStore(tmp_path / "empty").load() is None


class TestTopicAssigner:
    def test_ingestion_tags_guided_documents_with_their_record_types_topic(self, guided_model_dir: Path) -> None:
        assigner = TopicAssigner(guided_model_dir)
        guides = assigner.model.info.label_to_topic
        new = Document(id="new-lab", content="glucose result", meta={"record_type": "lab_result"})
        tagged = assigner.run(documents=[new])["documents"][0]
        assert tagged.meta["topic_id"] == guides["lab_result"]
        assert tagged.meta["topic_probability"] == 1.0
        assert tagged.meta["topic_version"] == 1
        assert "topic_id" not in new.meta  # inputs are not modified

    def test_unlabelled_document_gets_nearest_topic_by_its_embedding(self, guided_model_dir: Path) -> None:
        assigner = TopicAssigner(guided_model_dir)
        guides = assigner.model.info.label_to_topic
        doc = Document(id="x", content="tablet prescribed oral dose daily")
        assert "topic_id" not in assigner.run(documents=[doc])["documents"][0].meta  # not embedded: untagged
        embedded = HashDocumentEmbedder().run(documents=[doc])["documents"]
        tagged = assigner.run(documents=embedded)["documents"][0]
        assert tagged.meta["topic_id"] == guides["medication"]
        assert 0.0 < tagged.meta["topic_probability"] <= 1.0

    def test_query_gets_topic_and_probability(self, guided_model_dir: Path) -> None:
        assigner = TopicAssigner(guided_model_dir)
        vector = hash_vector("lab result glucose cholesterol blood")
        topic = assigner.run(query_embedding=vector)["query_topic"]
        assert topic.topic_id == assigner.model.info.label_to_topic["lab_result"]
        assert topic.probability > 0.5
        assert topic.version == 1

    def test_without_a_model_documents_pass_untagged(self, tmp_path: Path) -> None:
        assigner = TopicAssigner(tmp_path)
        doc = Document(id="a", content="x")
        out = assigner.run(documents=[doc], query_embedding=hash_vector("anything"))
        assert out["documents"] == [doc]
        assert out["query_topic"] is None

    def test_serialization_round_trip(self, guided_model_dir: Path) -> None:
        assigner = TopicAssigner(guided_model_dir, version=1, temperature=0.1)
        again = TopicAssigner.from_dict(assigner.to_dict())
        assert (again.model_dir, again.version, again.temperature) == (str(guided_model_dir), 1, 0.1)

    def test_invalid_arguments(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError):
            TopicAssigner(tmp_path, temperature=0)
        with pytest.raises(ValueError):
            TopicAssigner(tmp_path, version=0)


class TestTopicFilteredRetriever:
    def _tagged(self, model_dir: Path) -> list[Document]:
        return TopicAssigner(model_dir).run(documents=_corpus())["documents"]

    def test_filters_to_the_question_topic(self, guided_model_dir: Path) -> None:
        inner = ListRetriever(self._tagged(guided_model_dir))
        assigner = TopicAssigner(guided_model_dir)
        retriever = TopicFilteredRetriever(inner, HashTextEmbedder(), assigner, min_probability=0.5, top_k=5)
        access = {"field": "meta.tenant", "operator": "==", "value": "t"}
        out = retriever.run(query="glucose cholesterol lab result", filters=access)
        lab_topic = assigner.model.info.label_to_topic["lab_result"]
        assert out["topic"]["mode"] == TopicMode.TOPIC
        assert {d.meta["record_type"] for d in out["documents"]} == {"lab_result"}
        assert access in inner.calls[0]["filters"]["conditions"]  # the caller's filter is never dropped
        assert out["topic"]["topic_id"] == lab_topic
        assert out["topic"]["keywords"]

    def test_uncertain_topic_falls_back_without_filtering(self, guided_model_dir: Path) -> None:
        inner = ListRetriever(self._tagged(guided_model_dir))
        assigner = TopicAssigner(guided_model_dir)
        retriever = TopicFilteredRetriever(inner, HashTextEmbedder(), assigner, min_probability=1.0)
        out = retriever.run(query="zebra unrelated words")
        assert out["topic"]["mode"] == TopicMode.UNCERTAIN
        assert len(inner.calls) == 1 and inner.calls[0]["filters"] is None

    def test_too_few_filtered_results_fall_back(self, guided_model_dir: Path) -> None:
        documents = self._tagged(guided_model_dir)
        lab_only_two = [d for d in documents if d.meta["record_type"] != "lab_result"] + [
            d for d in documents if d.meta["record_type"] == "lab_result"][:2]
        inner = ListRetriever(lab_only_two)
        assigner = TopicAssigner(guided_model_dir)
        retriever = TopicFilteredRetriever(inner, HashTextEmbedder(), assigner, min_probability=0.0, top_k=5)
        out = retriever.run(query="glucose cholesterol lab result")
        assert out["topic"]["mode"] == TopicMode.TOO_FEW
        assert out["topic"]["filtered_count"] == 2
        assert len(out["documents"]) == 5 and len(inner.calls) == 2

    def test_no_model_means_plain_retrieval(self, tmp_path: Path) -> None:
        inner = ListRetriever(_corpus())
        embedder = HashTextEmbedder()
        retriever = TopicFilteredRetriever(inner, embedder, TopicAssigner(tmp_path))
        out = retriever.run(query="glucose")
        assert out["topic"]["mode"] == TopicMode.NO_MODEL and len(out["documents"]) == 5
        assert embedder.calls == 0  # without a model the question is not embedded

    def test_keywords_only_from_given_documents_of_that_topic(self) -> None:
        docs = [Document(content="secret glucose", meta={"topic_id": 1}),
                Document(content="glucose panel", meta={"topic_id": 1}),
                Document(content="other words", meta={"topic_id": 2})]
        assert topic_keywords(docs[1:], 1) == ["glucose", "panel"]
        assert "secret" not in topic_keywords(docs[1:], 1)

    def test_invalid_arguments(self, tmp_path: Path) -> None:
        assigner = TopicAssigner(tmp_path)
        with pytest.raises(ValueError):
            TopicFilteredRetriever(ListRetriever([]), HashTextEmbedder(), assigner, min_probability=1.5)
        with pytest.raises(ValueError):
            TopicFilteredRetriever(ListRetriever([]), HashTextEmbedder(), assigner, min_documents=0)


def test_hash_vector_is_deterministic() -> None:
    assert hash_vector("glucose lab") == hash_vector("lab glucose")


def test_unpinned_assigner_follows_a_refit(tmp_path: Path) -> None:
    running = TopicAssigner(tmp_path)
    glucose = hash_vector("glucose")
    assert running.run(query_embedding=glucose)["query_topic"] is None
    TopicAssigner(tmp_path).fit(_corpus())
    assert running.run(query_embedding=glucose)["query_topic"].version == 1
    TopicAssigner(tmp_path).fit(_corpus())
    assert running.run(query_embedding=glucose)["query_topic"].version == 2
    pinned = TopicAssigner(tmp_path, version=1)
    assert pinned.run(query_embedding=glucose)["query_topic"].version == 1
