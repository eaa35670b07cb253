"""`docqa store copy --to elasticsearch` against a live Elasticsearch (DOCQA_ELASTICSEARCH_URL; skipped without).

The copied chunks keep content, metadata and embeddings, a rerun copies nothing and changes nothing, and an
interrupted copy resumes without loss or duplicate.
"""

from __future__ import annotations

import pytest
from haystack import Document
from haystack_integrations.components.retrievers.elasticsearch import ElasticsearchEmbeddingRetriever

from docqa import cli
from docqa.settings import Settings
from docqa.store_copy import CHECKPOINT_FILE, TenantStoreCopier
from docqa.stores.embedded import EmbeddedDocumentStore
from docqa.stores.factory import STORE_FILE, build_document_store

from .conftest import ES_URL, dispose, make_store

pytestmark = [
    pytest.mark.elasticsearch,
    pytest.mark.integration,
    pytest.mark.skipif(not ES_URL, reason="DOCQA_ELASTICSEARCH_URL is not set"),
]

TENANT_FILTER = {"field": "meta.tenant", "operator": "==", "value": "acme"}


def _documents() -> list[Document]:
    docs = []
    for i in range(9):
        for tenant in ("acme", "other"):
            meta = {"tenant": tenant, "access": ["everyone", f"group-{i % 3}"], "page": i, "source": f"f{i}.pdf"}
            docs.append(
                Document(
                    id=f"{tenant}-{i}",
                    content=f"chunk {i} about herons of {tenant}",
                    meta=meta,
                    embedding=[1.0, i / 8, -i / 16, 0.25],
                )
            )
    return docs


@pytest.fixture
def source(tmp_path):
    store = build_document_store(Settings(data_dir=tmp_path / "data", elasticsearch_url=None))
    assert isinstance(store, EmbeddedDocumentStore)
    store.write_documents(_documents())
    yield store
    store.close()


@pytest.fixture
def target(tmp_path, request):
    store = make_store("elasticsearch", tmp_path, request.node.name)
    yield store
    dispose(store)


def _assert_same(copied: list[Document], expected: list[Document]) -> None:
    assert sorted(d.id for d in copied) == sorted(d.id for d in expected)
    by_id = {d.id: d for d in copied}
    for doc in expected:
        got = by_id[doc.id]
        assert got.content == doc.content
        assert {k: got.meta.get(k) for k in doc.meta} == doc.meta
        assert got.embedding == pytest.approx(doc.embedding, abs=1e-6)


def test_copy_is_complete_idempotent_and_resumable(source, target, tmp_path):
    def copier() -> TenantStoreCopier:
        return TenantStoreCopier(source=source, target=target, checkpoint_path=tmp_path / CHECKPOINT_FILE, batch_size=4)

    def interrupt(count: int, last_seq: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        copier().run(tenant="acme", on_batch=interrupt)
    assert target.count_documents() == 4

    resumed = copier().run(tenant="acme")
    assert resumed["copied"] == 5
    expected = source.filter_documents(TENANT_FILTER)
    _assert_same(target.filter_documents(), expected)

    again = copier().run(tenant="acme")
    assert again["copied"] == 0
    assert target.count_documents() == 9
    _assert_same(target.filter_documents(), expected)
    # Searchable as docqa's Elasticsearch retrievers search it: by embedding, within the tenant.
    retriever = ElasticsearchEmbeddingRetriever(document_store=target, filters=TENANT_FILTER, top_k=1)
    hits = retriever.run(query_embedding=[1.0, 5 / 8, -5 / 16, 0.25])["documents"]
    assert hits[0].id == "acme-5"


def test_cli_copies_a_tenant_into_the_configured_index(source, target, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DOCQA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DOCQA_ELASTICSEARCH_URL", ES_URL)
    assert (tmp_path / "data" / "store" / STORE_FILE).is_file()

    argv = ["store", "copy", "--tenant", "acme", "--to", "elasticsearch", "--index", target._index, "-q"]
    assert cli.main(argv) == 0
    assert "copied 9 chunks" in capsys.readouterr().out
    assert cli.main(argv) == 0
    assert "copied 0 chunks" in capsys.readouterr().out
    _assert_same(target.filter_documents(), source.filter_documents(TENANT_FILTER))


def test_deletions_in_the_source_are_deleted_from_the_index(source, target, tmp_path):
    def copier() -> TenantStoreCopier:
        return TenantStoreCopier(source=source, target=target, checkpoint_path=tmp_path / CHECKPOINT_FILE, batch_size=4)

    copier().run(tenant="acme")
    source.delete_documents(["acme-1", "acme-6"])
    source.write_documents(
        [Document(id="acme-6", content="chunk 6, rewritten", meta={"tenant": "acme", "access": ["everyone"]})]
    )

    result = copier().run(tenant="acme")

    assert result["deleted"] == 1
    assert target.count_documents() == 8
    _assert_same(target.filter_documents(), source.filter_documents(TENANT_FILTER))
