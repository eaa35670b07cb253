"""Admin endpoints for documents of the admin's tenant: upload (a job), follow jobs, list, delete, and
patient record bundles (FHIR R4).

Access principals name who may read what is uploaded: `everyone`, `user:<id>` or `group:<name>`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import APIRouter, BackgroundTasks, File, Form, Query, UploadFile, status
from pydantic import BaseModel, Field

from docqa.access import DEFAULT_COLLECTION, EVERYONE
from docqa.errors import DocqaError
from docqa.server.api_errors import COMMON_ERROR_RESPONSES, ApiError, NotFound
from docqa.server.auth import AdminCaller, ContextDep, RequestId

router = APIRouter(prefix="/v1", tags=["documents"], responses=COMMON_ERROR_RESPONSES)

_PRINCIPAL = re.compile(rf"^({EVERYONE}|(user|group):[A-Za-z0-9][A-Za-z0-9._@-]{{0,63}})$")
MAX_FILES = 100


class JobCreated(BaseModel):
    job_id: str


class DocumentOut(BaseModel):
    source_id: str
    title: str | None
    chunks: int
    access: list[str]


class DocumentPage(BaseModel):
    total: int
    documents: list[DocumentOut]


class RecordsWritten(BaseModel):
    patient_id: str
    written: int
    deleted: int
    topic_model: dict[str, Any] | None = Field(default=None, description=(
        "The tenant's AT-RAG topic model after the write: state missing, stale or current, version, and a message "
        "saying how to refit."))
    topic_refit: str | None = Field(default=None, description=(
        "An automatic topic model fit this write started (none yet, or the corpus grew enough since the last "
        "fit): queued for the workers, or running in this server's background."))


def check_principals(access: list[str]) -> list[str]:
    principals = [p.strip() for value in access for p in value.split(",") if p.strip()]
    if not principals:
        raise ApiError(422, "invalid_access", "give at least one access principal (e.g. 'group:hr' or 'everyone')")
    bad = [p for p in principals if not _PRINCIPAL.match(p)]
    if bad:
        raise ApiError(422, "invalid_access",
                       f"invalid principal {bad[0]!r}: use 'everyone', 'user:<id>' or 'group:<name>'")
    return sorted(set(principals))


@router.post("/documents", response_model=JobCreated, status_code=status.HTTP_202_ACCEPTED,
             summary="Upload files; returns the ingestion job id")
def upload_documents(
    caller: AdminCaller,
    context: ContextDep,
    files: Annotated[list[UploadFile], File(description=(
        "Text, Markdown, HTML, PDF (scanned pages by OCR), DOCX, PPTX, XLSX, CSV, ODT, ODS, ODP, RTF, EML or MSG "
        "mail (attachments included), or PNG, JPEG or TIFF images (by OCR)"))],
    access: Annotated[list[str], Form(description="Who may read them: everyone, user:<id>, group:<name>")],
    collection: Annotated[str, Form(description=(
        "The collection they belong to, a source mspr can search on its own (DOCQA_MSPR_SOURCES "
        "`collection:NAME`): 1-64 letters, digits, '_', '.' or '-'"))] = DEFAULT_COLLECTION,
) -> JobCreated:
    from docqa.ingestion.jobs import Upload, submit_job
    from docqa.ingestion.pipeline import check_collection_name

    if not files or len(files) > MAX_FILES:
        raise ApiError(422, "invalid_request", f"send between 1 and {MAX_FILES} files")
    principals = check_principals(access)
    try:
        collection = check_collection_name(collection)
    except DocqaError as exc:
        raise ApiError(422, "invalid_collection", exc.message) from None
    uploads = [Upload(name=f.filename or "upload", data=f.file.read()) for f in files]
    # Each written document's `document.ingested` event is committed with its item's outcome.
    job_id = submit_job(context.settings, tenant=caller.tenant, access=principals, uploads=uploads,
                        submitted_by=caller.user_id, collection=collection)
    return JobCreated(job_id=job_id)


@router.get("/jobs/{job_id}", summary="Progress of an ingestion job")
def get_job(job_id: str, caller: AdminCaller, context: ContextDep) -> dict[str, Any]:
    from docqa.ingestion.jobs import JobNotFoundError, job_status

    try:
        report = job_status(context.settings, job_id)
    except JobNotFoundError:
        raise NotFound("job") from None
    if report["tenant"] != caller.tenant:
        raise NotFound("job")
    return report


@router.get("/documents", response_model=DocumentPage, summary="Documents of the tenant, by source id")
def list_documents(
    caller: AdminCaller,
    context: ContextDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> DocumentPage:
    chunks = context.runtime.document_store.filter_documents(
        filters={"field": "meta.tenant", "operator": "==", "value": caller.tenant}
    )
    by_source: dict[str, DocumentOut] = {}
    for chunk in chunks:
        meta = chunk.meta or {}
        source_id = str(meta.get("source_id") or meta.get("patient_id") or chunk.id)
        entry = by_source.setdefault(source_id, DocumentOut(source_id=source_id, title=meta.get("title"), chunks=0,
                                                             access=sorted(meta.get("access") or [])))
        entry.chunks += 1
    ordered = [by_source[key] for key in sorted(by_source)]
    return DocumentPage(total=len(ordered), documents=ordered[offset : offset + limit])


@router.delete("/documents/{source_id:path}", summary="Delete every chunk of one document")
def delete_document(source_id: str, caller: AdminCaller, context: ContextDep,
                    request_id: RequestId) -> dict[str, int]:
    from docqa.ingestion.jobs import delete_document as delete

    deleted = delete(context.runtime, caller.tenant, source_id, actor=caller.user_id, request_id=request_id)
    if not deleted:
        raise NotFound("document")
    return {"deleted_chunks": deleted}


@router.post("/records", response_model=RecordsWritten, summary="Write one patient's FHIR R4 bundle",
             description="Replaces the stored records of the bundle's patient (synchronous); fits the tenant's "
                         "topic model in the background when it has none or its corpus grew enough.")
def upload_records(
    caller: AdminCaller,
    context: ContextDep,
    request_id: RequestId,
    background: BackgroundTasks,
    bundle: Annotated[UploadFile, File(description="A FHIR R4 Bundle (JSON) with one Patient")],
    access: Annotated[list[str], Form(description="Who may read them: everyone, user:<id>, group:<name>")],
) -> RecordsWritten:
    from docqa.conversion.conversion_box import ConversionLimits
    from docqa.ingestion.records import read_fhir_bundle_boxed, write_patient_records
    from docqa.topics import (
        refit_if_due,
        schedule_topic_refit,
        tenant_topic_assigner,
        topic_model_status,
        topic_refit_due,
    )

    principals = check_principals(access)
    # The same checks as queued bundles (`docqa.ingestion.record_bundles`): what fails an item there is a 422 here.
    documents = read_fhir_bundle_boxed(bundle.file.read(), name=bundle.filename or "bundle", tenant=caller.tenant,
                                       access=principals, limits=ConversionLimits.from_settings(context.settings))
    patient_id = str(documents[0].meta["patient_id"])
    embedder = context.runtime.document_embedder()
    embedder.warm_up()
    from docqa.audit.events import RECORDS_INGESTED, event_around

    # The event is staged first and commits only when the store write succeeded.
    with event_around(context.settings, tenant=caller.tenant, actor=caller.user_id, action=RECORDS_INGESTED,
                      target=f"patient:{patient_id}", request_id=request_id,
                      after={"access": principals, "chunks": len(documents),
                             "chunk_ids": sorted(d.id for d in documents)}):
        # New records get the tenant's current topic model's tags (by record type), so it stays current.
        counts = write_patient_records(context.runtime.document_store, documents, tenant=caller.tenant,
                                       patient_id=patient_id, embedder=embedder,
                                       topic_assigner=tenant_topic_assigner(context.runtime, caller.tenant))
    topics = topic_model_status(context.runtime, caller.tenant)
    refit = None
    if context.settings.topic_autofit and context.settings.broker_url:
        refit = schedule_topic_refit(context.runtime, caller.tenant)
    elif context.settings.topic_autofit:
        plan = topic_refit_due(context.runtime, caller.tenant)
        if plan.due:
            # After the response: the records are readable now, the topic filter follows when the fit is done.
            background.add_task(refit_if_due, context.runtime, caller.tenant)
            refit = f"topic model: fitting in the background ({plan.reason})"
    return RecordsWritten(patient_id=patient_id, **counts,
                          topic_model={**topics.to_dict(), "message": topics.message()}, topic_refit=refit)
