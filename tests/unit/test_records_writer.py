"""Re-ingesting a patient replaces the stored set in place: same ids overwrite, vanished records go."""

from __future__ import annotations

import pytest
from haystack import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore

from docqa.ingestion.records import group_by_patient, write_patient_records


def _record(key: str, patient: str = "p1", tenant: str = "t", text: str = "x") -> Document:
    return Document(id=f"{patient}-{key}", content=text,
                    meta={"tenant": tenant, "access": ["everyone"], "patient_id": patient, "record_type": "lab"})


class TestWritePatientRecords:
    def test_rewrite_updates_in_place_and_deletes_vanished(self) -> None:
        store = InMemoryDocumentStore()
        store.write_documents([_record("other", patient="p2")])
        first = write_patient_records(store, [_record("a"), _record("b")], tenant="t", patient_id="p1")
        assert first == {"written": 2, "deleted": 0}
        second = write_patient_records(store, [_record("a", text="corrected")], tenant="t", patient_id="p1")
        assert second == {"written": 1, "deleted": 1}
        stored = {d.id: d.content for d in store.filter_documents()}
        assert stored == {"p1-a": "corrected", "p2-other": "x"}

    def test_foreign_records_are_refused(self) -> None:
        with pytest.raises(ValueError, match="do not belong"):
            write_patient_records(InMemoryDocumentStore(), [_record("a", patient="p2")], tenant="t", patient_id="p1")

    def test_embedder_and_topic_assigner_are_applied(self) -> None:
        class Tag:
            def run(self, documents: list[Document]) -> dict:
                return {"documents": [Document(id=d.id, content=d.content, meta={**d.meta, "topic_id": 3})
                                      for d in documents]}

        store = InMemoryDocumentStore()
        write_patient_records(store, [_record("a")], tenant="t", patient_id="p1", topic_assigner=Tag())
        assert store.filter_documents()[0].meta["topic_id"] == 3

    def test_group_by_patient(self) -> None:
        groups = group_by_patient([_record("a"), _record("b", patient="p2"), _record("c")])
        assert {k: len(v) for k, v in groups.items()} == {"p1": 2, "p2": 1}
