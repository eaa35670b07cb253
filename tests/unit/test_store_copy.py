"""`docqa store copy`: a tenant's chunks copied from the embedded store into a second, real embedded store
(any Haystack DocumentStore is a valid target), idempotently and resumably."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from haystack import Document
from haystack.core.serialization import allow_deserialization_module

from docqa import cli
from docqa.store_copy import CHECKPOINT_FILE, TenantStoreCopier, count_tenant
from docqa.stores.embedded import EmbeddedDocumentStore

TENANT_FILTER = {"field": "meta.tenant", "operator": "==", "value": "acme"}


def _doc(i: int, tenant: str) -> Document:
    # Embedding values exact in float32, so equality after the round trip is exact.
    embedding = [i / 8, -i / 16, 0.5, 1.0] if i % 4 else None
    meta = {"tenant": tenant, "access": ["everyone"] if i % 2 else [f"group-{i}"], "page": i, "source": f"f{i}.pdf"}
    return Document(id=f"{tenant}-{i}", content=f"chunk {i} of {tenant}", meta=meta, embedding=embedding)


@pytest.fixture
def source(tmp_path):
    store = EmbeddedDocumentStore(path=str(tmp_path / "source" / "documents.sqlite3"))
    # Tenants interleaved, so batches by sequence number have to skip the other tenant's rows.
    store.write_documents([_doc(i, tenant) for i in range(7) for tenant in ("acme", "other")])
    store.write_documents([_doc(7, "other")])
    yield store
    store.close()


@pytest.fixture
def target(tmp_path):
    store = EmbeddedDocumentStore(path=str(tmp_path / "target" / "documents.sqlite3"))
    yield store
    store.close()


def _copier(source, target, tmp_path, batch_size=3):
    return TenantStoreCopier(
        source=source, target=target, checkpoint_path=tmp_path / CHECKPOINT_FILE, batch_size=batch_size
    )


def _as_tuples(documents):
    return sorted((d.id, d.content, json.dumps(d.meta, sort_keys=True), d.embedding) for d in documents)


def test_copies_only_the_tenants_chunks_with_embeddings_and_meta(source, target, tmp_path):
    result = _copier(source, target, tmp_path).run(tenant="acme")

    expected = source.filter_documents(TENANT_FILTER)
    assert len(expected) == 7
    assert result["copied"] == 7
    assert result["batches"] == 3
    assert _as_tuples(target.filter_documents()) == _as_tuples(expected)
    assert sum(d.embedding is not None for d in target.filter_documents()) == 5
    # The copy is searchable in the target: its dense index holds the copied embeddings.
    hits = target.embedding_retrieval([3 / 8, -3 / 16, 0.5, 1.0], top_k=1)
    assert hits[0].id == "acme-3"


def test_rerun_copies_nothing_new_and_leaves_identical_content(source, target, tmp_path):
    _copier(source, target, tmp_path).run(tenant="acme")
    before = _as_tuples(target.filter_documents())

    again = _copier(source, target, tmp_path).run(tenant="acme")

    assert again["copied"] == 0
    assert again["batches"] == 0
    assert again["total_copied"] == 7
    assert _as_tuples(target.filter_documents()) == before


def test_rerun_copies_chunks_written_or_changed_since(source, target, tmp_path):
    _copier(source, target, tmp_path).run(tenant="acme")
    source.write_documents([_doc(20, "acme")])
    source.update_by_filter({"field": "id", "operator": "==", "value": "acme-1"}, {"page": 100})

    result = _copier(source, target, tmp_path).run(tenant="acme")

    assert result["copied"] == 2
    assert target.count_documents() == 8
    assert _as_tuples(target.filter_documents()) == _as_tuples(source.filter_documents(TENANT_FILTER))


def test_interrupted_copy_resumes_without_loss_or_duplicate(source, target, tmp_path):
    def interrupt(count, last_seq):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _copier(source, target, tmp_path).run(tenant="acme", on_batch=interrupt)
    assert target.count_documents() == 3

    resumed = _copier(source, target, tmp_path).run(tenant="acme")

    assert resumed["copied"] == 4
    assert resumed["resumed_after"] > 0
    assert resumed["total_copied"] == 7
    copied = target.filter_documents()
    assert len({d.id for d in copied}) == len(copied) == 7
    assert _as_tuples(copied) == _as_tuples(source.filter_documents(TENANT_FILTER))


def test_crash_between_write_and_checkpoint_rewrites_that_batch_only(source, tmp_path):
    class CrashingAfterSecondWrite(EmbeddedDocumentStore):
        writes = 0

        def write_documents(self, documents, policy=None):
            written = super().write_documents(documents, policy)
            type(self).writes += 1
            if type(self).writes == 2:
                raise RuntimeError("connection lost after the bulk request")
            return written

    target = CrashingAfterSecondWrite(path=str(tmp_path / "target" / "documents.sqlite3"))
    with pytest.raises(RuntimeError):
        _copier(source, target, tmp_path).run(tenant="acme")
    assert target.count_documents() == 6

    resumed = _copier(source, target, tmp_path).run(tenant="acme")

    assert resumed["copied"] == 4  # the unconfirmed second batch again, then the last
    assert target.count_documents() == 7
    assert _as_tuples(target.filter_documents()) == _as_tuples(source.filter_documents(TENANT_FILTER))
    target.close()


def test_chunks_deleted_from_the_source_are_deleted_from_the_target(source, target, tmp_path):
    _copier(source, target, tmp_path).run(tenant="acme")
    _copier(source, target, tmp_path).run(tenant="other")
    source.delete_documents(["acme-2"])
    source.delete_by_filter(
        {"operator": "AND", "conditions": [TENANT_FILTER, {"field": "meta.page", "operator": "==", "value": 5}]}
    )
    source.delete_documents(["other-3"])

    result = _copier(source, target, tmp_path).run(tenant="acme")

    assert result["copied"] == 0
    assert result["deleted"] == 2
    remaining = {d.id for d in target.filter_documents()}
    assert "acme-2" not in remaining and "acme-5" not in remaining
    assert "other-3" in remaining  # another tenant's deletion waits for that tenant's copy
    assert _as_tuples(target.filter_documents(TENANT_FILTER)) == _as_tuples(source.filter_documents(TENANT_FILTER))
    assert _copier(source, target, tmp_path).run(tenant="acme")["deleted"] == 0
    assert _copier(source, target, tmp_path).run(tenant="other")["deleted"] == 1
    assert "other-3" not in {d.id for d in target.filter_documents()}


def test_a_chunk_deleted_and_written_again_stays_in_the_target(source, target, tmp_path):
    _copier(source, target, tmp_path).run(tenant="acme")
    source.delete_documents(["acme-2"])
    rewritten = replace(_doc(2, "acme"), content="chunk 2 of acme, revised")
    source.write_documents([rewritten])

    result = _copier(source, target, tmp_path).run(tenant="acme")

    assert result["copied"] == 1
    assert result["deleted"] == 0
    assert target.filter_documents({"field": "id", "operator": "==", "value": "acme-2"})[0].content == (
        "chunk 2 of acme, revised"
    )


def test_restart_applies_every_logged_deletion_again(source, target, tmp_path):
    _copier(source, target, tmp_path).run(tenant="acme")
    source.delete_documents(["acme-4"])
    _copier(source, target, tmp_path).run(tenant="acme")
    target.write_documents([_doc(4, "acme")])  # put back in the target by hand

    result = _copier(source, target, tmp_path).run(tenant="acme", restart=True)

    assert result["deleted"] == 1
    assert _as_tuples(target.filter_documents(TENANT_FILTER)) == _as_tuples(source.filter_documents(TENANT_FILTER))


def test_restart_copies_everything_again_to_the_same_content(source, target, tmp_path):
    _copier(source, target, tmp_path).run(tenant="acme")
    before = _as_tuples(target.filter_documents())

    result = _copier(source, target, tmp_path).run(tenant="acme", restart=True)

    assert result["copied"] == 7
    assert result["resumed_after"] == 0
    assert result["total_copied"] == 7
    assert _as_tuples(target.filter_documents()) == before


def test_checkpoints_are_per_tenant_and_per_target(source, target, tmp_path):
    _copier(source, target, tmp_path).run(tenant="acme")
    other_tenant = _copier(source, target, tmp_path).run(tenant="other")
    assert other_tenant["copied"] == count_tenant(source, "other") == 8

    second_target = EmbeddedDocumentStore(path=str(tmp_path / "second" / "documents.sqlite3"))
    into_second = _copier(source, second_target, tmp_path).run(tenant="acme")
    assert into_second["copied"] == 7
    assert second_target.count_documents() == 7
    second_target.close()


def test_serialises_with_both_stores(source, target, tmp_path):
    copier = _copier(source, target, tmp_path, batch_size=2)
    # Haystack deserialises only trusted modules; a deployment's pipeline loader names docqa's the same way.
    allow_deserialization_module("docqa.*")
    restored = TenantStoreCopier.from_dict(copier.to_dict())

    assert restored.source.path == source.path
    assert restored.target.path == target.path
    assert restored.batch_size == 2
    assert restored.target_name == copier.target_name
    assert restored.run(tenant="acme")["copied"] == 7
    restored.target.close()


def test_rejects_a_zero_batch_size(source, target, tmp_path):
    with pytest.raises(ValueError):
        _copier(source, target, tmp_path, batch_size=0)


def test_cli_needs_an_elasticsearch_url(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("DOCQA_ELASTICSEARCH_URL", raising=False)
    monkeypatch.setenv("DOCQA_DATA_DIR", str(tmp_path))

    code = cli.main(["store", "copy", "--tenant", "acme", "--to", "elasticsearch"])

    assert code == 2
    assert "DOCQA_ELASTICSEARCH_URL" in capsys.readouterr().err
