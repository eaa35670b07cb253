"""Retrieval contracts every store must honour: access control inside BM25, dense and hybrid retrieval,
sensible ranking, idempotent re-writes. Parametrized over the embedded store and Elasticsearch."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
from haystack import Document, component
from haystack.document_stores.types import DuplicatePolicy

from docqa.access import AccessScope, restrict
from docqa.components.hybrid_retriever import HybridRetriever
from docqa.components.store_retrievers import build_retrievers
from docqa.settings import Settings

DIM = 64


def hashed_embedding(text: str) -> list[float]:
    """Bag-of-words hashed into DIM buckets, unit length: texts sharing words are close."""
    vector = np.zeros(DIM, dtype=np.float32)
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    norm = float(np.linalg.norm(vector)) or 1.0
    return (vector / norm).astype(np.float64).tolist()


@component
class HashingTextEmbedder:
    @component.output_types(embedding=list[float])
    def run(self, text: str) -> dict[str, list[float]]:
        return {"embedding": hashed_embedding(text)}


def doc(content: str, tenant: str, access: list[str], **meta) -> Document:
    return Document(
        content=content,
        meta={"tenant": tenant, "access": access, **meta},
        embedding=hashed_embedding(content),
    )


CORPUS = [
    doc("Quarterly revenue report for the Zurich office", "acme", ["finance"]),
    doc("Zurich office revenue forecast and hiring plan", "acme", ["finance", "board"]),
    doc("Zurich office revenue shared with every employee", "acme", ["everyone"]),
    doc("Zurich office revenue of the competitor", "globex", ["everyone"]),
    doc("Private Zurich office revenue notes", "acme", ["alice"]),
]
QUERY = "Zurich office revenue"


@pytest.fixture
def store(contract_store):
    contract_store.write_documents(CORPUS)
    return contract_store


@pytest.fixture
def retrievers(store):
    return build_retrievers(store, Settings(retrieval_candidates=10))


def allowed(scope: AccessScope) -> set[str]:
    principals = set(scope.effective_principals)
    return {d.id for d in CORPUS if d.meta["tenant"] == scope.tenant and principals & set(d.meta["access"])}


SCOPES = [
    AccessScope(tenant="acme", principals=frozenset({"finance"})),
    AccessScope(tenant="acme", principals=frozenset({"bob"})),
    AccessScope(tenant="acme", principals=frozenset({"alice", "board"})),
    AccessScope(tenant="globex"),
    AccessScope(tenant="initech"),
]


@pytest.mark.parametrize("scope", SCOPES, ids=lambda s: f"{s.tenant}-{'-'.join(sorted(s.principals)) or 'none'}")
class TestAccessControl:
    def test_bm25_returns_exactly_the_allowed_documents(self, retrievers, scope):
        bm25, _ = retrievers
        found = bm25.run(query=QUERY, filters=scope.to_filters(), top_k=10)["documents"]
        assert {d.id for d in found} == allowed(scope)

    def test_dense_returns_exactly_the_allowed_documents(self, retrievers, scope):
        _, dense = retrievers
        found = dense.run(query_embedding=hashed_embedding(QUERY), filters=scope.to_filters(), top_k=10)["documents"]
        assert {d.id for d in found} == allowed(scope)

    def test_hybrid_returns_exactly_the_allowed_documents(self, retrievers, scope):
        bm25, dense = retrievers
        hybrid = HybridRetriever(bm25, dense, HashingTextEmbedder(), top_k=10, candidates=10)
        found = hybrid.run(query=QUERY, filters=restrict(scope, None))["documents"]
        assert {d.id for d in found} == allowed(scope)


def test_extra_filters_narrow_but_never_widen_access(retrievers):
    bm25, _ = retrievers
    scope = AccessScope(tenant="acme", principals=frozenset({"finance"}))
    widen = {"field": "meta.tenant", "operator": "==", "value": "globex"}
    assert bm25.run(query=QUERY, filters=restrict(scope, widen), top_k=10)["documents"] == []


def test_bm25_ranks_documents_with_more_query_terms_first(store, retrievers):
    store.write_documents(
        [
            doc("heron heron heron lakes and herons", "acme", ["everyone"]),
            doc("a lake without birds", "acme", ["everyone"]),
        ]
    )
    bm25, _ = retrievers
    found = bm25.run(query="heron lake", filters=AccessScope(tenant="acme").to_filters(), top_k=2)["documents"]
    assert found[0].content.startswith("heron")
    assert found[0].score >= found[1].score


def test_dense_ranks_the_nearest_document_first(retrievers):
    _, dense = retrievers
    target = CORPUS[1]
    found = dense.run(query_embedding=target.embedding, top_k=3)["documents"]
    assert found[0].id == target.id
    assert [d.score for d in found] == sorted((d.score for d in found), reverse=True)


def test_overwriting_the_same_documents_never_duplicates(store):
    before = store.count_documents()
    store.write_documents(CORPUS, policy=DuplicatePolicy.OVERWRITE)
    store.write_documents(CORPUS, policy=DuplicatePolicy.SKIP)
    assert store.count_documents() == before == len(CORPUS)
