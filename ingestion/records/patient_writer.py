"""Write one patient's records so that re-ingesting replaces the previous set instead of adding to it.

Ids are deterministic, so unchanged records overwrite themselves; records that disappeared from the source
(e.g. a corrected bundle) are deleted. Embedding and topic tagging are optional steps given as components.

Usage:
    write_patient_records(store, documents, tenant="acme", patient_id="44ec...", embedder=doc_embedder)
"""

from __future__ import annotations

from typing import Any

from haystack import Document
from haystack.document_stores.types import DuplicatePolicy


def patient_filters(tenant: str, patient_id: str) -> dict[str, Any]:
    return {
        "operator": "AND",
        "conditions": [
            {"field": "meta.tenant", "operator": "==", "value": tenant},
            {"field": "meta.patient_id", "operator": "==", "value": patient_id},
        ],
    }


def write_patient_records(store: Any, documents: list[Document], *, tenant: str, patient_id: str,
                          embedder: Any | None = None, topic_assigner: Any | None = None) -> dict[str, int]:
    """Replace the stored records of one patient with `documents`.

    :param store: A Haystack document store (`filter_documents`, `write_documents`, `delete_documents`).
    :param documents: The patient's complete current record set (all must belong to `tenant`/`patient_id`).
    :param embedder: Optional document embedder component (`run(documents) -> {"documents": ...}`).
    :param topic_assigner: Optional `TopicAssigner` that tags documents with the current topic model.
    :returns: Counts `written` and `deleted`.
    :raises ValueError: When a document belongs to another tenant or patient.
    """
    foreign = [d.id for d in documents
               if d.meta.get("tenant") != tenant or d.meta.get("patient_id") != patient_id]
    if foreign:
        raise ValueError(f"{len(foreign)} documents do not belong to patient {patient_id} of tenant {tenant}")
    # Embed first: topics of documents without a known record type come from their embeddings.
    if embedder is not None and documents:
        documents = embedder.run(documents=documents)["documents"]
    if topic_assigner is not None and documents:
        documents = topic_assigner.run(documents=documents)["documents"]
    new_ids = {d.id for d in documents}
    stale = [d.id for d in store.filter_documents(filters=patient_filters(tenant, patient_id)) if d.id not in new_ids]
    if stale:
        store.delete_documents(stale)
    written = store.write_documents(documents, policy=DuplicatePolicy.OVERWRITE) if documents else 0
    return {"written": int(written or 0), "deleted": len(stale)}


def group_by_patient(documents: list[Document]) -> dict[str, list[Document]]:
    groups: dict[str, list[Document]] = {}
    for document in documents:
        groups.setdefault(str(document.meta.get("patient_id")), []).append(document)
    return groups
