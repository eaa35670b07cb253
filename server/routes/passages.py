"""A cited passage in context: `GET /v1/documents/{chunk_id}/context` returns the chunk with the previous and
next chunk of the same source, so a citation can be read where it stands in its document.

A chunk of a file with places says where it stands (`location`: "page 3", "slide 2", "sheet Q3, rows 2-41",
"attachment offer.pdf, page 1") and whether its text came from OCR; its neighbours are taken from the same part of
the file (the same sheet, the same mail attachment or the message itself), so the context shown is that place's.

Every chunk is read through the caller's access filters: a chunk the caller may not read (another tenant's, an
access list not naming them, deleted) is a 404 exactly like a missing one, and a neighbour they may not read is
left out (null), never shown.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from docqa.access import restrict
from docqa.server.api_errors import COMMON_ERROR_RESPONSES, NotFound
from docqa.server.auth import AskingCaller, ContextDep

router = APIRouter(prefix="/v1", tags=["documents"], responses=COMMON_ERROR_RESPONSES)


class Passage(BaseModel):
    id: str
    content: str
    source: str | None = Field(description="The document as ingested (file name or path below the folder).")
    title: str | None
    chunk_index: int | None = Field(description="Position of the chunk in its document, from 0.")
    location: str | None = Field(default=None, description=(
        "Where the chunk stands in its file: 'page 3', 'slide 2', 'sheet Q3, rows 2-41', 'attachment a.pdf, page 1'."))
    ocr: bool = Field(default=False, description="Its text was recognised from a scan (OCR): check the scan.")


class PassageContext(BaseModel):
    passage: Passage
    previous: Passage | None = Field(description="The chunk before it, when there is one the caller may read.")
    next: Passage | None = Field(description="The chunk after it, when there is one the caller may read.")


def _index(meta: dict[str, Any]) -> int | None:
    value = meta.get("chunk_index")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _passage(doc: Any) -> Passage:
    meta = doc.meta or {}
    location = meta.get("location")
    return Passage(id=doc.id, content=doc.content or "", source=meta.get("source") or meta.get("title"),
                   title=meta.get("title"), chunk_index=_index(meta),
                   location=location if isinstance(location, str) else None, ocr=meta.get("ocr") is True)


# A neighbour in another sheet or another part of a message is another place, not this one's context.
_PART_FIELDS = ("sheet", "attachment_index")


def _same_part(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return all(a.get(key) == b.get(key) for key in _PART_FIELDS)


@router.get("/documents/{chunk_id}/context", response_model=PassageContext,
            summary="A cited passage with its neighbouring chunks (those you may read)")
def passage_context(chunk_id: str, caller: AskingCaller, context: ContextDep) -> PassageContext:
    store, scope = context.runtime.document_store, caller.scope()
    found = store.filter_documents(filters=restrict(scope, {"field": "id", "operator": "==", "value": chunk_id}))
    if not found:
        raise NotFound("passage")
    chunk = found[0]
    meta = chunk.meta or {}
    source_id, index = meta.get("source_id"), _index(meta)
    previous = following = None
    # Chunks without a source position (patient records, imported corpora) are shown alone.
    if isinstance(source_id, str) and source_id and index is not None:
        around = {"operator": "AND", "conditions": [
            {"field": "meta.source_id", "operator": "==", "value": source_id},
            {"field": "meta.chunk_index", "operator": "in", "value": [index - 1, index + 1]},
        ]}
        by_index = {_index(d.meta or {}): d for d in store.filter_documents(filters=restrict(scope, around))
                    if _same_part(meta, d.meta or {})}
        previous, following = by_index.get(index - 1), by_index.get(index + 1)
    return PassageContext(passage=_passage(chunk), previous=_passage(previous) if previous else None,
                          next=_passage(following) if following else None)
