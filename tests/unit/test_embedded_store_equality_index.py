"""The embedded store's `meta.KEY == "text"` / `in [...]` fast path selects exactly what the plain filter
predicate selects."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from haystack import Document

from docqa.stores.embedded import EmbeddedDocumentStore
from docqa.stores.filters import StoredRecord, compile_filters

PATIENTS = ["p1", "p2", "p3", "2020-01-01", "2020-01-01T00:00:00Z"]


def _documents() -> list[Document]:
    rng = random.Random(7)
    documents = []
    for i in range(300):
        meta: dict[str, Any] = {"tenant": rng.choice(["t", "u"]), "access": rng.sample(["a", "b", "c"], 2),
                                "record_type": rng.choice(["lab_result", "medication"])}
        if i % 7:  # some records lack the key; some hold a list or a number instead of text
            meta["patient_id"] = rng.choice(PATIENTS)
        if i % 11 == 0:
            meta["patient_id"] = ["p1", "p2"]
        if i % 13 == 0:
            meta["patient_id"] = 3
        documents.append(Document(id=f"d{i}", content=f"record {i}", meta=meta))
    return documents


def test_equality_filters_match_the_plain_predicate(tmp_path: Path) -> None:
    documents = _documents()
    store = EmbeddedDocumentStore(str(tmp_path / "s.sqlite3"))
    # Several writes make several segments.
    for start in range(0, len(documents), 70):
        store.write_documents(documents[start:start + 70])
    store.delete_documents(["d5", "d77"])
    alive = [d for d in documents if d.id not in {"d5", "d77"}]
    filters_list: list[dict[str, Any]] = [
        {"field": "meta.patient_id", "operator": "==", "value": "p1"},
        {"field": "patient_id", "operator": "==", "value": "p2"},  # legacy bare meta key
        {"field": "meta.patient_id", "operator": "==", "value": "nobody"},
        {"field": "meta.patient_id", "operator": "==", "value": "2020-01-01"},  # dates compare as dates
        {"operator": "AND", "conditions": [
            {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "==", "value": "t"},
                                               {"field": "meta.access", "operator": "in", "value": ["a"]}]},
            {"operator": "AND", "conditions": [{"field": "meta.patient_id", "operator": "==", "value": "p3"},
                                               {"field": "meta.record_type", "operator": "==", "value": "lab_result"}]},
        ]},
        {"operator": "AND", "conditions": [{"field": "meta.access", "operator": "==", "value": "b"},
                                           {"field": "meta.patient_id", "operator": "!=", "value": "p1"}]},
        {"field": "meta.patient_id", "operator": "in", "value": ["p2", "p3", "nobody"]},
        {"field": "meta.patient_id", "operator": "in", "value": ["p1", "2020-01-01"]},  # a date: no fast path
        {"operator": "AND", "conditions": [{"field": "meta.record_type", "operator": "in", "value": ["medication"]},
                                           {"field": "meta.tenant", "operator": "==", "value": "u"}]},
        {"operator": "OR", "conditions": [{"field": "meta.patient_id", "operator": "==", "value": "p1"},
                                          {"field": "meta.tenant", "operator": "==", "value": "u"}]},
    ]
    for filters in filters_list:
        predicate = compile_filters(filters)
        expected = sorted(d.id for d in alive if predicate(StoredRecord(id=d.id, meta=d.meta)))
        assert sorted(d.id for d in store.filter_documents(filters=filters)) == expected, filters
        assert store.count_documents_by_filter(filters) == len(expected)
    assert any(store.filter_documents(filters=f) for f in filters_list[:2])  # not vacuous
