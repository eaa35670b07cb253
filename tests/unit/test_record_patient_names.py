"""A patient named in a record question: found among the patients the caller may read, never anyone else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from haystack import Document

from docqa.access import AccessScope, restrict
from docqa.components.record_query_resolver import RecordQueryResolver
from docqa.ingestion.records.clinical_record import patient_name_meta
from docqa.stores.embedded import EmbeddedDocumentStore

AS_OF = "2020-06-01T00:00:00Z"
CLINICIANS = AccessScope(tenant="t", principals=frozenset({"clinicians"}))


def _lab(record_id: str, patient: str, name: str, start: str, *, access: str = "clinicians",
         tenant: str = "t") -> Document:
    meta: dict[str, Any] = {"tenant": tenant, "access": [access], "patient_id": patient, "record_type": "lab_result",
                            "title": "Glucose [Mass/volume] in Blood", "code": "2339-0", "effective_start": start,
                            "effective_start_utc": start, **patient_name_meta(*name.split(" ", 1))}
    return Document(id=record_id, content=f"Glucose ({start})", meta=meta)


@pytest.fixture()
def store(tmp_path: Path) -> EmbeddedDocumentStore:
    store = EmbeddedDocumentStore(str(tmp_path / "store.sqlite3"))
    store.write_documents([
        _lab("max-1", "p-max", "Max917 Kris249", "2020-01-10T00:00:00Z"),
        _lab("max-old", "p-max", "Max917 Kris249", "2018-01-10T00:00:00Z"),
        _lab("ann-1", "p-ann", "Ann Lee", "2020-02-10T00:00:00Z"),
        _lab("ann-2", "p-ann2", "Ann Lee", "2020-03-10T00:00:00Z"),
        # Readable only by oncology, and another tenant's patient: no clinician's question may find them.
        _lab("bo-1", "p-bo", "Bo Diddley", "2020-01-10T00:00:00Z", access="oncology"),
        _lab("cy-1", "p-cy", "Cy Young", "2020-01-10T00:00:00Z", tenant="other"),
    ])
    return store


def _ids(store: EmbeddedDocumentStore, out: dict[str, Any], scope: AccessScope = CLINICIANS) -> list[str]:
    return sorted(d.id for d in store.filter_documents(filters=restrict(scope, out["filters"])))


def test_name_parts_lose_synthea_suffixes() -> None:
    assert patient_name_meta("Max917", "Kris249") == {"patient_name": "Max Kris", "patient_name_key": "max kris"}
    assert patient_name_meta(None, "") == {}


def test_a_readable_patient_by_name(store: EmbeddedDocumentStore) -> None:
    resolver = RecordQueryResolver(document_store=store)
    out = resolver.run("What were Max Kris's lab results in the last year?", as_of=AS_OF,
                       filters=restrict(CLINICIANS, None))
    assert out["query"].patient_id == "p-max" and out["query"].patient_name == "Max Kris"
    assert out["query"].record_types == ["lab_result"] and out["query"].unmatched_terms == []
    assert _ids(store, out) == ["max-1"]
    # Case and spacing as typed do not matter.
    out = resolver.run("glucose for  max KRIS since 2017", as_of=AS_OF, filters=restrict(CLINICIANS, None))
    assert _ids(store, out) == ["max-1", "max-old"]


def test_a_name_the_caller_may_not_read_finds_nobody(store: EmbeddedDocumentStore) -> None:
    resolver = RecordQueryResolver(document_store=store)
    for question in ("Lab results of Bo Diddley in the last year?", "Cy Young's lab results in the last year?"):
        out = resolver.run(question, as_of=AS_OF, filters=restrict(CLINICIANS, None))
        assert out["query"].patient_id is None and out["query"].patient_name is None
        assert "bo-1" not in _ids(store, out) and "cy-1" not in _ids(store, out)
    oncology = AccessScope(tenant="t", principals=frozenset({"oncology"}))
    out = resolver.run("Lab results of Bo Diddley in the last year?", as_of=AS_OF, filters=restrict(oncology, None))
    assert out["query"].patient_id == "p-bo" and _ids(store, out, oncology) == ["bo-1"]


def test_a_shared_name_shows_those_patients_and_says_so(store: EmbeddedDocumentStore) -> None:
    out = RecordQueryResolver(document_store=store).run("Ann Lee's lab results in 2020", as_of=AS_OF,
                                                        filters=restrict(CLINICIANS, None))
    assert out["query"].patient_id is None and out["query"].patient_name == "Ann Lee"
    assert _ids(store, out) == ["ann-1", "ann-2"]
    assert any("2 patients you may read are named Ann Lee" in note for note in out["query"].notes)


def test_a_given_patient_id_wins_over_a_name(store: EmbeddedDocumentStore) -> None:
    out = RecordQueryResolver(document_store=store).run("Max Kris's lab results in 2020", as_of=AS_OF,
                                                        patient_id="p-ann", filters=restrict(CLINICIANS, None))
    assert out["query"].patient_id == "p-ann" and _ids(store, out) == ["ann-1"]
