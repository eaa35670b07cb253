"""Queued ingestion of patient record bundles (FHIR R4 JSON): one item per bundle, one document per record.

A bundle replaces its patient's stored records in place (`write_patient_records`): records that disappeared
from the bundle are deleted, the rest overwrite themselves under deterministic ids.

Usage:
    result = ingest_record_bundle(runtime, Source("p1.json", "p1.json", data=raw), "acme", ["group:care"],
                                  embedder=embedder)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePath
from typing import Any

from docqa.conversion.conversion_box import ConversionLimits
from docqa.errors import DocqaError, UnreadableFileError
from docqa.ingestion.pipeline import ItemResult, Source, topic_assigner_for
from docqa.ingestion.records import read_fhir_bundle_boxed, write_patient_records

RECORD_BUNDLE_SUFFIX = ".json"


def is_record_bundle(name: str) -> bool:
    return PurePath(name).suffix.lower() == RECORD_BUNDLE_SUFFIX


def ingest_record_bundle(
    runtime: Any, source: Source, tenant: str, access: Sequence[str], *, embedder: Any
) -> ItemResult:
    """Parse, embed, topic-tag and write one bundle; failures come back as a failed item, never raised."""
    try:
        documents = _parse(source, tenant, access, ConversionLimits.from_settings(runtime.settings))
        patient_id = str(documents[0].meta.get("patient_id") or "")
        if not patient_id:
            raise UnreadableFileError("the bundle's records carry no patient id")
        counts = write_patient_records(
            runtime.document_store,
            documents,
            tenant=tenant,
            patient_id=patient_id,
            embedder=embedder,
            topic_assigner=topic_assigner_for(runtime, tenant),
        )
    except DocqaError as exc:
        return ItemResult(source.source_id, source.label, "failed", reason=exc.message, code=exc.code)
    except Exception as exc:  # a store or model error fails this bundle; the job goes on
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        return ItemResult(source.source_id, source.label, "failed", reason=reason, code="record_failed")
    return ItemResult(
        source.source_id,
        source.label,
        "written",
        chunks=counts["written"],
        chunk_ids=tuple(document.id for document in documents),
    )


def _parse(source: Source, tenant: str, access: Sequence[str], limits: ConversionLimits) -> list[Any]:
    # The same checks as the synchronous `POST /v1/records`, in the conversion box like a document's conversion.
    return read_fhir_bundle_boxed(
        source.data or b"", name=source.name, tenant=tenant, access=list(access), limits=limits
    )
