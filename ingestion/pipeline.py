"""Synchronous ingestion: convert, clean, chunk, embed and write sources into the document store.

Steps per source: convert, clean, chunk, embed, topic-tag (once the tenant has a fitted topic model), write.

Guarantees, per source:
- nothing half-written: all chunks of a source are embedded before any of them is written;
- idempotent: chunk ids are deterministic and written with `DuplicatePolicy.OVERWRITE`;
- unchanged sources are skipped (same chunk ids, content hash, title and access list already stored);
- a changed source leaves no stale chunks: ids it no longer produces are deleted after the write;
- no source is stored without access-control metadata (tenant and at least one principal);
- errors are reported per item (`failed` with a one-line reason), never raised for one bad file.

Usage:
    report = ingest_paths(runtime, [Path("docs/")], tenant="acme", access=["group:hr"])
    print(report.written, report.skipped, report.failed, report.chunks_written)
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from docqa.access import COLLECTION_FIELD, DEFAULT_COLLECTION
from docqa.conversion.chunking import ChunkSpec, build_section_chunks
from docqa.conversion.conversion_box import ConversionLimits
from docqa.conversion.converters import convert_bytes, convert_path, is_supported
from docqa.conversion.sections import Section
from docqa.errors import DocqaError, UnreadableFileError

ItemStatus = Literal["written", "skipped", "failed"]
# Sources whose chunks are embedded in one call, so the embedder's batches stay full when sources are small.
# Counted in sources because chunks exist only after conversion; a long file simply makes a larger call.
SOURCES_PER_BATCH = 64


@dataclass(frozen=True)
class Source:
    """One document to ingest: a file `path`, raw `data` named `name` (suffix picks the converter), or `text`.

    `source_id` identifies the document within its tenant; re-ingesting the same id updates it in place.
    """

    source_id: str
    name: str
    path: Path | None = None
    data: bytes | None = None
    text: str | None = None
    title: str | None = None
    source: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.source or self.source_id

    def __post_init__(self) -> None:
        if not self.source_id:
            raise ValueError("a source needs a source_id")
        if sum(x is not None for x in (self.path, self.data, self.text)) != 1:
            raise ValueError("a source needs exactly one of path, data or text")


@dataclass
class ItemResult:
    """One source's outcome; `source` is what a person recognises (path or source id), `code` a stable error code."""

    source_id: str
    source: str
    status: ItemStatus
    chunks: int = 0
    reason: str | None = None
    code: str | None = None
    # The written chunk ids, for the audit event of the write (not part of reports).
    chunk_ids: tuple[str, ...] = field(default=(), repr=False, compare=False)
    # What a re-ingestion replaced (access list and chunk count), None for a new document: the event's `before`.
    replaced: dict[str, Any] | None = field(default=None, repr=False, compare=False)


@dataclass
class IngestReport:
    """Outcome of one ingestion call. `seconds_embedding` is the share spent inside the embedder."""

    items: list[ItemResult] = field(default_factory=list)
    seconds_total: float = 0.0
    seconds_embedding: float = 0.0

    def _with(self, status: ItemStatus) -> list[ItemResult]:
        return [item for item in self.items if item.status == status]

    @property
    def written(self) -> list[ItemResult]:
        return self._with("written")

    @property
    def skipped(self) -> list[ItemResult]:
        return self._with("skipped")

    @property
    def failed(self) -> list[ItemResult]:
        return self._with("failed")

    @property
    def chunks_written(self) -> int:
        return sum(item.chunks for item in self.written)

    def summary(self) -> str:
        return (
            f"{len(self.written)} written ({self.chunks_written} chunks), {len(self.skipped)} unchanged, "
            f"{len(self.failed)} failed in {self.seconds_total:.1f} s"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "written": len(self.written),
            "skipped": len(self.skipped),
            "failed": len(self.failed),
            "chunks_written": self.chunks_written,
            "seconds_total": round(self.seconds_total, 3),
            "seconds_embedding": round(self.seconds_embedding, 3),
            "items": [{k: v for k, v in asdict(item).items() if k != "chunk_ids"} for item in self.items],
        }


@dataclass
class _Prepared:
    source: Source
    chunks: list[Document]


Progress = Callable[[ItemResult], None]


def ingest_documents(
    runtime: Any,
    sources: Iterable[Source],
    tenant: str,
    access: Sequence[str],
    *,
    progress: Progress | bool = False,
    embedder: Any | None = None,
    total: int | None = None,
    topic_assigner: Any | None = None,
) -> IngestReport:
    """Ingest sources into `runtime.document_store` for `tenant`, readable by the `access` principals.

    :param runtime: provides `settings`, `document_store` and `document_embedder()`.
    :param sources: documents to ingest; consumed lazily, a batch at a time.
    :param tenant: the tenant every chunk belongs to.
    :param access: principals allowed to read the chunks; empty means every item fails (never stored open).
    :param progress: `True` for a progress bar on stderr, or a callable given each item's result.
    :param embedder: a warmed-up document embedder to reuse; built from the runtime when omitted.
    :param total: number of sources, for the progress bar.
    :param topic_assigner: tags embedded chunks with the tenant's topic model; by default the tenant's
        `TopicAssigner`, which passes chunks through untagged while no topic model has been fitted.
    :returns: an `IngestReport` with one `ItemResult` per source.
    """
    started = time.perf_counter()
    report = IngestReport()
    store = runtime.document_store
    ingested_at = datetime.now(UTC).isoformat(timespec="seconds")
    bar = _progress_bar(total) if progress is True else None

    def record(item: ItemResult) -> None:
        report.items.append(item)
        if bar is not None:
            bar.update(1)
        elif callable(progress):
            progress(item)

    tagger = topic_assigner if topic_assigner is not None else topic_assigner_for(runtime, tenant)
    try:
        for batch in _batches(sources):
            embedder = _ingest_batch(
                batch, runtime, store, tenant, access, ingested_at, embedder, tagger, record, report
            )
    finally:
        if bar is not None:
            bar.close()
    report.seconds_total = time.perf_counter() - started
    return report


def ingest_paths(
    runtime: Any,
    paths: Iterable[Path | str],
    tenant: str,
    access: Sequence[str],
    *,
    progress: Progress | bool = False,
    embedder: Any | None = None,
    collection: str = DEFAULT_COLLECTION,
) -> IngestReport:
    """Ingest files and directories (recursively, supported types only).

    A file's source id is what citations show: its name, or its path below a folder that was given, so auditors
    can ask about the name they see; its absolute path is kept as `meta.source_path`. The same name ingested from
    two folders is one document (the later replaces it). Chunks stored under the absolute path (the source id
    before) are deleted once the file is stored under its new id, with an audit event.

    A file named explicitly is always attempted, so an unsupported or missing one fails with its reason.
    Every chunk is tagged with `collection` (`meta.collection`), which MSPR can search as a source of its own.
    """
    collection = check_collection_name(collection)
    files = list(expand_labelled_paths(paths))
    sources = (Source(source_id=label, name=path.name, path=path, source=label,
                      meta={COLLECTION_FIELD: collection, SOURCE_PATH_FIELD: str(path)})
               for path, label in files)
    report = ingest_documents(
        runtime, sources, tenant, access, progress=progress, embedder=embedder, total=len(files)
    )
    _audit_written(runtime.settings, report, tenant, access)
    stored = {item.source_id for item in report.items if item.status in ("written", "skipped")}
    _drop_absolute_ids(runtime, tenant, {str(path): label for path, label in files if label in stored})
    return report


SOURCE_PATH_FIELD = "source_path"


def _drop_absolute_ids(runtime: Any, tenant: str, renamed: dict[str, str]) -> None:
    """Delete the chunks stored under a file's absolute path (its source id before ids were relative)."""
    if not renamed:
        return
    store = runtime.document_store
    old = store.filter_documents({"operator": "AND", "conditions": [
        {"field": "meta.tenant", "operator": "==", "value": tenant},
        {"field": "meta.source_id", "operator": "in", "value": sorted(renamed)}]})
    if not old:
        return
    from docqa.audit.cli import cli_actor
    from docqa.audit.events import DOCUMENT_DELETED, append_event
    from docqa.audit.recorder import audit_session

    store.delete_documents([d.id for d in old])
    with audit_session(runtime.settings) as session:
        for source_id in sorted({d.meta["source_id"] for d in old}):
            chunks = [d for d in old if d.meta["source_id"] == source_id]
            append_event(session, runtime.settings, tenant=tenant, actor=cli_actor(), action=DOCUMENT_DELETED,
                         target=f"document:{source_id}",
                         before={"access": sorted(set(chunks[0].meta.get("access") or [])),
                                 "chunk_ids": sorted(d.id for d in chunks)},
                         after={"replaced_by": f"document:{renamed[source_id]}"})


def _audit_written(settings: Any, report: IngestReport, tenant: str, access: Sequence[str]) -> None:
    # Synchronous ingestion (`docqa ingest`) has no job transaction: each written document's event is committed
    # right after the store write, by the operating-system user who ran it.
    if not report.written:
        return
    from docqa.audit.cli import cli_actor
    from docqa.audit.events import DOCUMENT_INGESTED, append_event
    from docqa.audit.recorder import audit_session

    with audit_session(settings) as session:
        for item in report.written:
            append_event(session, settings, tenant=tenant, actor=cli_actor(), action=DOCUMENT_INGESTED,
                         target=f"document:{item.source_id}", before=item.replaced,
                         after={"access": sorted(set(access)), "chunks": item.chunks,
                                "chunk_ids": list(item.chunk_ids)})


def _ingest_batch(
    batch: list[Source],
    runtime: Any,
    store: Any,
    tenant: str,
    access: Sequence[str],
    ingested_at: str,
    embedder: Any | None,
    tagger: Any,
    record: Progress,
    report: IngestReport,
) -> Any | None:
    """Ingest one batch of sources; returns the embedder (built on first need) for the next batch."""
    prepared: list[_Prepared] = []
    for source in batch:
        try:
            prepared.append(_Prepared(source, _chunk(source, tenant, access, runtime.settings, ingested_at)))
        except (DocqaError, ValueError) as exc:
            record(_failure(source, exc))
    stored = _stored_chunks(store, tenant, [item.source.source_id for item in prepared])
    pending = []
    for item in prepared:
        if _unchanged(stored.get(item.source.source_id, []), item.chunks):
            record(ItemResult(item.source.source_id, item.source.label, "skipped", chunks=len(item.chunks)))
        else:
            pending.append(item)
    if not pending:
        return embedder
    if embedder is None:
        embedder = _warm(runtime.document_embedder())
    embed_started = time.perf_counter()
    try:
        embedded = embedder.run(documents=[chunk for item in pending for chunk in item.chunks])["documents"]
    except Exception as exc:  # one failed batch must not abort the whole call
        for item in pending:
            record(_failure(item.source, exc, code="embed_failed", prefix="embedding failed: "))
        return embedder
    finally:
        report.seconds_embedding += time.perf_counter() - embed_started
    try:
        embedded = tagger.run(documents=embedded)["documents"]
    except Exception as exc:  # a broken topic model fails these items rather than storing them half-tagged
        for item in pending:
            record(_failure(item.source, exc, code="topic_failed", prefix="topic tagging failed: "))
        return embedder
    by_id = {doc.id: doc for doc in embedded}
    for item in pending:
        chunks = [by_id[chunk.id] for chunk in item.chunks]
        existing = stored.get(item.source.source_id, [])
        stale = {doc.id for doc in existing} - {chunk.id for chunk in chunks}
        record(_write(store, item.source, chunks, sorted(stale), _replaced(existing)))
    return embedder


def expand_paths(paths: Iterable[Path | str]) -> Iterator[Path]:
    """Files in the order given; directories expand to their supported, non-hidden files in sorted order."""
    for path, _ in expand_labelled_paths(paths):
        yield path


def expand_labelled_paths(paths: Iterable[Path | str]) -> Iterator[tuple[Path, str]]:
    """`expand_paths` with each file's readable name: the file name of a file given, the POSIX path below the
    folder given for a file found in it (what a user recognises; the server's absolute path says nothing)."""
    for raw in paths:
        path = Path(raw).expanduser().absolute()
        if path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith("."))
                # The tables of a Synthea CSV export are patient records (`docqa records`), not documents.
                records_export = "patients.csv" in files
                for name in sorted(files):
                    if records_export and name.lower().endswith(".csv"):
                        continue
                    if not name.startswith(".") and is_supported(name):
                        found = Path(root) / name
                        yield found, found.relative_to(path).as_posix()
        else:
            yield path, path.name


def _batches(sources: Iterable[Source]) -> Iterator[list[Source]]:
    batch: list[Source] = []
    for source in sources:
        batch.append(source)
        if len(batch) >= SOURCES_PER_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _chunk(source: Source, tenant: str, access: Sequence[str], settings: Any, ingested_at: str) -> list[Document]:
    if source.text is not None:
        sections, title, file_type = [Section(source.text)], source.title or source.name, "text"
    else:
        if source.path is not None:
            if not source.path.exists():
                raise UnreadableFileError(f"{source.path}: no such file")
            converted = convert_path(source.path, settings.max_file_bytes, ConversionLimits.from_settings(settings))
        else:
            converted = convert_bytes(source.data or b"", source.name, settings.max_file_bytes,
                                      ConversionLimits.from_settings(settings))
        sections, title, file_type = converted.sections, source.title or converted.title, converted.file_type
    spec = ChunkSpec(
        source_id=source.source_id,
        source=source.source or source.source_id,
        title=title,
        tenant=tenant,
        access=list(access),
        extra_meta={**source.meta, "file_type": file_type},
    )
    return build_section_chunks(
        sections,
        spec,
        chunk_words=settings.chunk_words,
        overlap_words=settings.chunk_overlap_words,
        ingested_at=ingested_at,
    )


def _stored_chunks(store: Any, tenant: str, source_ids: list[str]) -> dict[str, list[Document]]:
    if not source_ids:
        return {}
    filters = {
        "operator": "AND",
        "conditions": [
            {"field": "meta.tenant", "operator": "==", "value": tenant},
            {"field": "meta.source_id", "operator": "in", "value": sorted(set(source_ids))},
        ],
    }
    grouped: dict[str, list[Document]] = {}
    for doc in store.filter_documents(filters=filters):
        grouped.setdefault(doc.meta.get("source_id", ""), []).append(doc)
    return grouped


_COMPARED_META = ("content_hash", "title", "access", "source", COLLECTION_FIELD)
_COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_collection_name(name: str) -> str:
    """A collection name usable in `DOCQA_MSPR_SOURCES` (`collection:NAME`, comma-separated)."""
    if not isinstance(name, str) or not _COLLECTION_NAME.fullmatch(name):
        raise DocqaError(f"invalid collection name {name!r}: use 1-64 letters, digits, '_', '.' or '-'")
    return name


def _compared(meta: dict[str, Any], key: str) -> Any:
    # Chunks stored before collections existed have none: they are the default collection, not a change.
    if key == COLLECTION_FIELD:
        return meta.get(key) or DEFAULT_COLLECTION
    return meta.get(key)


def _unchanged(existing: list[Document], chunks: list[Document]) -> bool:
    if not existing or {doc.id for doc in existing} != {chunk.id for chunk in chunks}:
        return False
    wanted = {key: _compared(chunks[0].meta, key) for key in _COMPARED_META}
    return all(_compared(doc.meta, key) == value for doc in existing for key, value in wanted.items())


def _replaced(existing: list[Document]) -> dict[str, Any] | None:
    if not existing:
        return None
    return {"access": sorted(set(existing[0].meta.get("access") or [])), "chunks": len(existing)}


def _write(store: Any, source: Source, chunks: list[Document], stale: list[str],
           replaced: dict[str, Any] | None = None) -> ItemResult:
    try:
        store.write_documents(chunks, policy=DuplicatePolicy.OVERWRITE)
        if stale:
            store.delete_documents(stale)
    except Exception as exc:  # a store error fails this item; the next one may still succeed
        return _failure(source, exc, code="write_failed", prefix="write failed: ")
    return ItemResult(source.source_id, source.label, "written", chunks=len(chunks),
                      chunk_ids=tuple(chunk.id for chunk in chunks), replaced=replaced)


def _failure(source: Source, exc: Exception, code: str = "invalid_document", prefix: str = "") -> ItemResult:
    if isinstance(exc, DocqaError):
        reason, code = exc.message, exc.code
    else:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
    # Converter messages start with the file name for one-file callers; the item already names its source.
    for name in (str(source.path), source.name):
        reason = reason.removeprefix(f"{name}: ")
    return ItemResult(source.source_id, source.label, "failed", reason=prefix + reason, code=code)


def topic_assigner_for(runtime: Any, tenant: str) -> Any:
    """The tenant's topic tagger; it passes documents through untagged until a topic model is fitted."""
    from docqa.components.topic_assigner import TopicAssigner
    from docqa.topics import topic_model_dir

    return TopicAssigner(topic_model_dir(runtime.settings.data_dir, tenant))


def _warm(embedder: Any) -> Any:
    if hasattr(embedder, "warm_up"):
        embedder.warm_up()
    return embedder


def _progress_bar(total: int | None) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="doc", desc="ingest", file=sys.stderr, dynamic_ncols=True)
