"""A document's source id is the name citations show (its path below the ingested folder), its absolute path is
kept as metadata, and chunks stored under the absolute path (the id before) give way to the new id, audited."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from docqa.access import COLLECTION_FIELD
from docqa.audit import events as ev
from docqa.audit.models import AuditEvent
from docqa.db import session_factory
from docqa.ingestion.pipeline import Source, ingest_documents, ingest_paths
from docqa.runtime import Runtime
from docqa.schema import upgrade_database
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from tests.support.ingestion_fakes import CountingEmbedder


def test_source_ids_are_relative_and_absolute_ids_are_replaced(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", chunk_words=20, chunk_overlap_words=5)
    upgrade_database(settings)
    runtime = Runtime(settings, document_store=build_document_store(settings))
    folder = tmp_path / "handbook"
    (folder / "policies").mkdir(parents=True)
    policy = folder / "policies" / "travel-policy.md"
    policy.write_text("Employees submit expense reports within 30 days of the end of a trip.")
    embedder = CountingEmbedder()
    # What an earlier docqa stored: the same file under its absolute path.
    ingest_documents(runtime, [Source(source_id=str(policy), name=policy.name, path=policy,
                                      source="policies/travel-policy.md", meta={COLLECTION_FIELD: "default"})],
                     "acme", ["group:hr"], embedder=embedder)
    assert {d.meta["source_id"] for d in runtime.document_store.filter_documents()} == {str(policy)}

    report = ingest_paths(runtime, [folder], "acme", ["group:hr"], embedder=embedder)
    assert [i.source_id for i in report.written] == ["policies/travel-policy.md"]
    docs = runtime.document_store.filter_documents()
    assert {d.meta["source_id"] for d in docs} == {"policies/travel-policy.md"}
    assert {d.meta["source_path"] for d in docs} == {str(policy)}
    assert {d.meta["source"] for d in docs} == {"policies/travel-policy.md"}
    with session_factory(settings)() as session:
        deleted = list(session.scalars(select(AuditEvent).where(AuditEvent.action == ev.DOCUMENT_DELETED)))
    assert [(e.target, e.after) for e in deleted] == [
        (f"document:{policy}", {"replaced_by": "document:policies/travel-policy.md"})]

    again = ingest_paths(runtime, [folder], "acme", ["group:hr"], embedder=embedder)
    assert [i.status for i in again.items] == ["skipped"]  # unchanged under its new id: nothing rewritten
