"""The default document store: one SQLite file on disk, searched through an in-memory index per process.

SQLite (WAL mode, busy timeout) is the source of truth and serialises writers across processes. Every process
keeps a `SearchIndex` that it brings up to date before each read: rows with a sequence number above the last
one seen become a new segment, and a trigger-maintained deletion log turns deletes and overwrites into
tombstones. `PRAGMA data_version` tells cheaply whether another connection committed since the last look, so
a quiet store costs one pragma per query. Overwrites and metadata updates re-insert the row under a new
sequence number, so catching up never needs to look at old rows.

The store records which embedding space (model, fingerprint, fp32 or int8; see `docqa.embedding.embedding_space`)
its embeddings belong to, on the first write of an embedded document, and refuses writes and dense queries of
another space with `EmbeddingSpaceMismatchError`: switching models or backends never mixes embeddings in one
index. `torch` and `onnx` share one space (the export is verified to agree within 1e-4); `onnx-int8` does not.
A store written before spaces were recorded takes the space of its next embedded write; emptying the store
(`delete_all_documents`) forgets it.

Index snapshots (`docqa.stores.snapshot`) let a new process skip rebuilding its index: the index is written
as an immutable, memory-mapped generation beside the SQLite file (`<file>.index/`), and a process opening the
store maps it and catches up from SQLite only for what came after it (a small in-memory delta). Every process
shares the mapped pages. A snapshot is written by one process at a time (file lock): automatically, in a
background thread, once a process's delta (rows indexed in memory plus rows deleted from the snapshot) reaches
`snapshot_rows`; explicitly with `compact()` (`docqa store compact`). Other processes switch to a new
generation within a second of its manifest appearing. BM25 scores of snapshot rows use the snapshot's
average document length (Lucene's per-segment statistics; see `search_index`).

Usage:
    store = EmbeddedDocumentStore(path="/var/lib/docqa/store/documents.sqlite3")
    store.write_documents([Document(content="Paris is the capital of France", meta={"tenant": "t"})])
    store.bm25_retrieval("capital of France", filters={"field": "meta.tenant", "operator": "==", "value": "t"})
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar

import numpy as np
from haystack import Document, default_from_dict, default_to_dict
from haystack.document_stores.errors import DocumentStoreError, DuplicateDocumentError
from haystack.document_stores.types import DuplicatePolicy
from haystack.utils import expit

from docqa.errors import DocqaError
from docqa.stores import metadata, snapshot
from docqa.stores.filters import compile_filters
from docqa.stores.search_index import IndexedRow, SearchIndex

# Same score scaling as Haystack's InMemoryDocumentStore, so `scale_score` means the same in both.
BM25_SCALING_FACTOR = 8
DOT_PRODUCT_SCALING_FACTOR = 100
_BATCH = 500
# Dense search is approximate (HNSW) in index blocks of at least this many embeddings, unless the store is given
# another threshold (the factory passes DOCQA_ANN_MIN_CHUNKS).
DEFAULT_ANN_MIN_CHUNKS = 100_000
# A process writes a new index snapshot once this many rows are indexed in its memory or deleted from the
# snapshot, unless the store is given another threshold (None: only `compact()` writes snapshots).
DEFAULT_SNAPSHOT_ROWS = 50_000
# How often a process looks for a newer snapshot generation written by another process.
MANIFEST_CHECK_SECONDS = 1.0

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS documents (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        content TEXT,
        meta TEXT NOT NULL,
        embedding BLOB,
        embedding_dtype TEXT,
        extra TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS deletions (
        log_seq INTEGER PRIMARY KEY AUTOINCREMENT,
        doc_seq INTEGER NOT NULL
    )""",
    """CREATE TRIGGER IF NOT EXISTS documents_deleted AFTER DELETE ON documents
    BEGIN
        INSERT INTO deletions (doc_seq) VALUES (old.seq);
    END""",
    # Which chunk ids were deleted, per tenant, so a copy to another store (`docqa store copy`) can delete them
    # there too; `deletions` holds only sequence numbers, which mean nothing outside this store.
    """CREATE TABLE IF NOT EXISTS deleted_ids (
        log_seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL,
        tenant TEXT
    )""",
    """CREATE TRIGGER IF NOT EXISTS documents_deleted_ids AFTER DELETE ON documents
    BEGIN
        INSERT INTO deleted_ids (id, tenant) VALUES (old.id, json_extract(old.meta, '$.tenant'));
    END""",
    "CREATE TABLE IF NOT EXISTS store_info (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO store_info (key, value) VALUES ('epoch', 0)",
    "CREATE TABLE IF NOT EXISTS store_text (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
_COLUMNS = "seq, id, content, meta, embedding, embedding_dtype, extra"

_Store = TypeVar("_Store")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class EmbeddingSpaceMismatchError(DocumentStoreError, DocqaError):
    """The store holds embeddings of another model or backend than the one configured."""

    code = "embedding_space_mismatch"
    http_status = 409


def _check_search(top_k: int, filters: dict[str, Any] | None) -> None:
    """What both searches check before taking the lock: a positive `top_k`, and filters that compile."""
    if top_k < 1:
        raise ValueError("top_k must be at least 1")
    if filters:
        compile_filters(filters)


def _in_thread(method: Callable[Concatenate[_Store, _P], _R]) -> Callable[Concatenate[_Store, _P], Awaitable[_R]]:
    """The async variant of a store method: the same call (looked up on the store, like `self.method`) in a
    worker thread, with the method's signature and docstring."""
    name = method.__name__

    @functools.wraps(method)
    async def in_thread(self: _Store, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await asyncio.to_thread(getattr(self, name), *args, **kwargs)

    in_thread.__name__ = f"{name}_async"
    in_thread.__qualname__ = f"{method.__qualname__}_async"
    return in_thread


class EmbeddedDocumentStore:
    """Persistent, multi-process document store with BM25, dense search and Haystack filters.

    :param path: SQLite file; its directory is created if missing. Several processes may open the same file.
    :param embedding_similarity_function: "cosine" or "dot_product" (equal for normalised embeddings).
    :param bm25_k1: BM25 term-frequency saturation.
    :param bm25_b: BM25 length normalisation.
    :param ann_min_chunks: dense search goes through an HNSW index in index blocks of at least this many
        embeddings (filters still exact; see `search_index`); None means `DEFAULT_ANN_MIN_CHUNKS`.
    :param embedding_space: identity of the configured embedder (`docqa.embedding.embedding_space`); None
        records and checks nothing.
    :param snapshot_rows: write an index snapshot once this many rows are pending (indexed in memory, or
        deleted from the current snapshot); None writes snapshots only through `compact()`.
    :param snapshot_in_background: write automatic snapshots in a background thread (else before the query
        that found the threshold reached returns).
    """

    def __init__(
        self,
        path: str,
        embedding_similarity_function: Literal["cosine", "dot_product"] = "cosine",
        bm25_k1: float = 1.5,
        bm25_b: float = 0.75,
        embedding_space: str | None = None,
        ann_min_chunks: int | None = None,
        snapshot_rows: int | None = DEFAULT_SNAPSHOT_ROWS,
        snapshot_in_background: bool = True,
    ) -> None:
        if not path:
            raise ValueError("EmbeddedDocumentStore needs a file path")
        if embedding_similarity_function not in ("cosine", "dot_product"):
            raise ValueError("embedding_similarity_function must be 'cosine' or 'dot_product'")
        if bm25_k1 < 0 or not 0 <= bm25_b <= 1:
            raise ValueError("bm25_k1 must be >= 0 and bm25_b within [0, 1]")
        self.path = str(path)
        self.embedding_similarity_function = embedding_similarity_function
        self.bm25_k1 = bm25_k1
        self.bm25_b = bm25_b
        self.embedding_space = embedding_space
        self.ann_min_chunks = DEFAULT_ANN_MIN_CHUNKS if ann_min_chunks is None else ann_min_chunks
        if self.ann_min_chunks < 0:
            raise ValueError("ann_min_chunks must be >= 0")
        if snapshot_rows is not None and snapshot_rows < 1:
            raise ValueError("snapshot_rows must be at least 1 (or None)")
        self.snapshot_rows = snapshot_rows
        self.snapshot_in_background = snapshot_in_background
        self._snapshot_dir = snapshot.snapshot_dir(self.path)
        self._compactor: threading.Thread | None = None
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = -1
        self._reset_index()

    # ---- serialization -------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            path=self.path,
            embedding_similarity_function=self.embedding_similarity_function,
            bm25_k1=self.bm25_k1,
            bm25_b=self.bm25_b,
            embedding_space=self.embedding_space,
            ann_min_chunks=self.ann_min_chunks,
            snapshot_rows=self.snapshot_rows,
            snapshot_in_background=self.snapshot_in_background,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EmbeddedDocumentStore:
        return default_from_dict(cls, data)

    # ---- connection and catch-up ---------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        # A connection inherited through fork() must not be used: reopen, and rebuild the index from disk.
        if self._conn is None or self._pid != os.getpid():
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 60000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            self._conn, self._pid = conn, os.getpid()
            self._reset_index()
        return self._conn

    def _reset_index(self) -> None:
        self._index = self._new_index()
        self._epoch = -1
        self._max_seq = 0
        self._max_log = 0
        self._data_version = -1
        self._dirty = True
        self._generation: str | None = None
        self._manifest_checked = 0.0
        self._manifest_stamp: tuple[int, int] | None = None

    def _new_index(self, base: snapshot.LoadedSnapshot | None = None) -> SearchIndex:
        return SearchIndex(
            k1=self.bm25_k1,
            b=self.bm25_b,
            similarity=self.embedding_similarity_function,
            ann_min_chunks=self.ann_min_chunks,
            base=base.segment if base else None,
            base_terms=base.terms if base else None,
        )

    def _newer_generation(self) -> bool:
        """Whether another process has published a snapshot generation this index does not start from (checked
        at most once per `MANIFEST_CHECK_SECONDS`, by the manifest file's identity)."""
        now = time.monotonic()
        if now - self._manifest_checked < MANIFEST_CHECK_SECONDS:
            return False
        self._manifest_checked = now
        try:
            stat = os.stat(self._snapshot_dir / snapshot.MANIFEST)
        except FileNotFoundError:
            return False
        stamp = (stat.st_ino, stat.st_mtime_ns)
        if stamp == self._manifest_stamp:
            return False
        self._manifest_stamp = stamp
        manifest = snapshot.read_manifest(self._snapshot_dir)
        if not manifest or manifest.get("epoch") != self._epoch:
            return False
        return manifest.get("generation") != self._generation

    def _refresh(self) -> SearchIndex:
        """Bring the index up to date with everything committed so far (cheap when nothing changed)."""
        conn = self._connection()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if self._newer_generation():
            self._epoch = -1  # start again from the new generation (catch-up maps it)
            self._dirty = True
        if self._dirty or version != self._data_version:
            self._catch_up_consistently(conn)
            self._data_version = version
            self._dirty = False
            if self._maybe_snapshot():
                self._catch_up_consistently(conn)  # start from the snapshot just written
        return self._index

    def _catch_up_consistently(self, conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            self._catch_up(conn)
            return
        conn.execute("BEGIN")
        try:
            self._catch_up(conn)
        finally:
            conn.execute("COMMIT")

    def _catch_up(self, conn: sqlite3.Connection) -> None:
        epoch = conn.execute("SELECT value FROM store_info WHERE key = 'epoch'").fetchone()[0]
        loaded = None
        if epoch != self._epoch:
            loaded = snapshot.load_snapshot(
                self._snapshot_dir,
                epoch=epoch,
                k1=self.bm25_k1,
                b=self.bm25_b,
                similarity=self.embedding_similarity_function,
            )
        if epoch != self._epoch and loaded is None:
            self._index = self._new_index()
            self._epoch, self._max_seq, self._generation = epoch, 0, None
            self._max_log = conn.execute("SELECT COALESCE(MAX(log_seq), 0) FROM deletions").fetchone()[0]
            deleted: list[int] = []
        else:
            if loaded is not None:
                # Rows up to the snapshot's max_seq are in it; later rows and deletions come from SQLite.
                self._index = self._new_index(loaded)
                self._epoch, self._generation = epoch, loaded.generation
                self._max_seq, self._max_log = loaded.max_seq, loaded.max_log
            log = conn.execute(
                "SELECT log_seq, doc_seq FROM deletions WHERE log_seq > ? ORDER BY log_seq", (self._max_log,)
            ).fetchall()
            deleted = [doc_seq for _, doc_seq in log]
            if log:
                self._max_log = log[-1][0]
        cursor = conn.execute(
            "SELECT seq, id, content, meta, embedding, embedding_dtype FROM documents WHERE seq > ? ORDER BY seq",
            (self._max_seq,),
        )
        rows = [
            IndexedRow(seq=seq, id=doc_id, content=content, meta=json.loads(meta), embedding=_vector(blob, dtype))
            for seq, doc_id, content, meta, blob, dtype in cursor
        ]
        self._index.add(rows)
        self._index.delete(deleted)
        if rows:
            self._max_seq = rows[-1].seq

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; the immediate lock makes writers from all processes take turns."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            finally:
                # This connection's own commits do not change its data_version: force the next catch-up.
                self._dirty = True
            conn.execute("COMMIT")

    # ---- snapshots -----------------------------------------------------------------------------------------

    def _maybe_snapshot(self) -> bool:
        """Start (or, not in background, write) a snapshot when enough is pending. :returns: whether one was
        written in the foreground."""
        if self.snapshot_rows is None or self._index.pending_changes < self.snapshot_rows:
            return False
        if self._compactor is not None and self._compactor.is_alive():
            return False
        if not self.snapshot_in_background:
            return self.compact(wait=False) is not None
        self._compactor = threading.Thread(target=self._compact_quietly, name="docqa-index-snapshot", daemon=True)
        self._compactor.start()
        return False

    def _compact_quietly(self) -> None:
        try:
            self.compact(wait=False)
        except Exception:  # a failed snapshot costs only speed: SQLite holds every document
            logging.getLogger(__name__).warning("writing an index snapshot of %s failed", self.path, exc_info=True)

    def compact(self, wait: bool = True) -> str | None:
        """Write an index snapshot of everything committed so far, unless the current one is up to date.

        One process writes at a time: with `wait`, wait for another writer to finish (and then write only if
        its snapshot left something out); without, return None at once when another process is writing.

        :returns: the name of the generation now current, or None when none was written.
        """
        from filelock import FileLock, Timeout

        self._snapshot_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self._snapshot_dir / snapshot.LOCK))
        try:
            lock.acquire(timeout=-1 if wait else 0)
        except Timeout:
            return None
        try:
            with self._lock:
                # Another process may have written a generation meanwhile: start from it.
                self._manifest_checked = 0.0
                index = self._refresh_without_snapshot()
                if not index.pending_changes and self._generation is not None:
                    return self._generation
                state = snapshot.SnapshotState(
                    segments=list(index.segments),
                    alive=[s.alive.copy() for s in index.segments],
                    term=index.vocab.term,
                    vocab_size=index.vocab.size,
                    k1=self.bm25_k1,
                    b=self.bm25_b,
                    similarity=self.embedding_similarity_function,
                    epoch=self._epoch,
                    max_seq=self._max_seq,
                    max_log=self._max_log,
                    ann_min_chunks=self.ann_min_chunks,
                    base_generation=self._snapshot_dir / self._generation if self._generation else None,
                )
            name = snapshot.write_snapshot(self._snapshot_dir, state)
        finally:
            lock.release()
        with self._lock:
            if self._epoch == state.epoch:
                # Start from the new generation on the next query: the in-memory delta it holds is freed.
                self._epoch, self._dirty = -1, True
        return name

    def _refresh_without_snapshot(self) -> SearchIndex:
        rows, self.snapshot_rows = self.snapshot_rows, None
        try:
            return self._refresh()
        finally:
            self.snapshot_rows = rows

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
            self._reset_index()

    # ---- DocumentStore protocol ----------------------------------------------------------------------------

    def count_documents(self) -> int:
        with self._lock:
            return self._connection().execute("SELECT COUNT(*) FROM documents").fetchone()[0]

    def filter_documents(self, filters: dict[str, Any] | None = None) -> list[Document]:
        """Documents matching Haystack `filters` (all documents without), in write order."""
        if filters:
            compile_filters(filters)
        with self._lock:
            seqs = self._refresh().matching_seqs(filters or None, self._load_fields)
            return self._fetch(seqs.tolist())

    def write_documents(self, documents: list[Document], policy: DuplicatePolicy = DuplicatePolicy.NONE) -> int:
        """Write documents atomically. `NONE` means `FAIL`: nothing is written if any id already exists.

        :returns: the number of documents written.
        """
        if not isinstance(documents, list) or not all(isinstance(d, Document) for d in documents):
            raise ValueError("write_documents expects a list of Documents")
        policy = DuplicatePolicy.FAIL if policy == DuplicatePolicy.NONE else policy
        unique: dict[str, Document] = {}
        for doc in documents:
            if doc.id in unique and policy == DuplicatePolicy.FAIL:
                raise DuplicateDocumentError(f"ID '{doc.id}' appears twice in the batch")
            if doc.id not in unique or policy == DuplicatePolicy.OVERWRITE:
                unique[doc.id] = doc
        rows = [_row(doc) for doc in unique.values()]
        with self._write() as conn:
            if self.embedding_space and any(r[3] is not None for r in rows):
                self._check_space(conn, record=True)
            existing = self._existing_ids(conn, list(unique))
            if existing and policy == DuplicatePolicy.FAIL:
                raise DuplicateDocumentError(f"ID '{sorted(existing)[0]}' already exists in the document store")
            if policy == DuplicatePolicy.SKIP:
                rows = [r for r in rows if r[0] not in existing]
            elif existing:
                _delete_ids(conn, sorted(existing))
            conn.executemany(
                "INSERT INTO documents (id, content, meta, embedding, embedding_dtype, extra) VALUES (?,?,?,?,?,?)",
                rows,
            )
        return len(rows)

    def delete_documents(self, document_ids: list[str]) -> None:
        with self._write() as conn:
            _delete_ids(conn, list(document_ids))

    # ---- extended protocol ---------------------------------------------------------------------------------

    def delete_all_documents(self) -> None:
        """Empty the store. Other processes notice the new epoch and drop their index."""
        with self._write() as conn:
            conn.execute("DELETE FROM documents")
            conn.execute("DELETE FROM deletions")
            conn.execute("DELETE FROM store_text WHERE key = 'embedding_space'")
            conn.execute("UPDATE store_info SET value = value + 1 WHERE key = 'epoch'")

    def delete_by_filter(self, filters: dict[str, Any]) -> int:
        compile_filters(filters)
        with self._write() as conn:
            seqs = self._refresh().matching_seqs(filters, self._load_fields).tolist()
            for batch in _batches(seqs):
                conn.execute(f"DELETE FROM documents WHERE seq IN ({_marks(batch)})", batch)
        return len(seqs)

    def update_by_filter(self, filters: dict[str, Any], meta: dict[str, Any]) -> int:
        """Merge `meta` into the metadata of every matching document. :returns: how many were updated."""
        compile_filters(filters)
        if not isinstance(meta, dict):
            raise ValueError("meta must be a dictionary")
        with self._write() as conn:
            seqs = self._refresh().matching_seqs(filters, self._load_fields).tolist()
            for batch in _batches(seqs):
                old = conn.execute(
                    f"SELECT {_COLUMNS} FROM documents WHERE seq IN ({_marks(batch)}) ORDER BY seq", batch
                ).fetchall()
                conn.execute(f"DELETE FROM documents WHERE seq IN ({_marks(batch)})", batch)
                conn.executemany(
                    "INSERT INTO documents (id, content, meta, embedding, embedding_dtype, extra) VALUES (?,?,?,?,?,?)",
                    [(r[1], r[2], json.dumps({**json.loads(r[3]), **meta}), *r[4:]) for r in old],
                )
        return len(seqs)

    def count_documents_by_filter(self, filters: dict[str, Any]) -> int:
        return len(self._matching_metas(filters))

    def count_unique_metadata_by_filter(self, filters: dict[str, Any], metadata_fields: list[str]) -> dict[str, int]:
        return metadata.count_unique(self._matching_metas(filters), metadata_fields)

    def get_metadata_fields_info(self) -> dict[str, dict[str, str]]:
        return metadata.fields_info(self._matching_metas(None))

    def get_metadata_field_min_max(self, metadata_field: str) -> dict[str, Any]:
        return metadata.min_max(self._matching_metas(None), metadata_field)

    def get_metadata_field_unique_values(
        self,
        metadata_field: str,
        search_term: str | None = None,
        from_: int = 0,
        size: int = 10,
        filters: dict[str, Any] | None = None,
    ) -> tuple[list[Any], int]:
        """Distinct values of a meta field (optionally those containing `search_term`), one page of them.

        :returns: (values on the page, total number of distinct values).
        """
        values = metadata.unique_values(self._matching_metas(filters), metadata_field)
        if search_term:
            values = [v for v in values if search_term.lower() in str(v).lower()]
        return values[from_ : from_ + size], len(values)

    # ---- retrieval -----------------------------------------------------------------------------------------

    def bm25_retrieval(
        self, query: str, filters: dict[str, Any] | None = None, top_k: int = 10, scale_score: bool = False
    ) -> list[Document]:
        """Top `top_k` documents by BM25 among those matching `filters`, with `score` set."""
        if not isinstance(query, str):
            raise ValueError("query must be a string")
        _check_search(top_k, filters)
        with self._lock:
            hits = self._refresh().bm25(query, top_k=top_k, filters=filters or None, load_fields=self._load_fields)
            docs = self._scored(hits, return_embedding=False)
        if scale_score:
            docs = [replace(d, score=float(expit(d.score / BM25_SCALING_FACTOR))) for d in docs]
        return docs

    def embedding_retrieval(
        self,
        query_embedding: list[float],
        filters: dict[str, Any] | None = None,
        top_k: int = 10,
        scale_score: bool = False,
        return_embedding: bool = False,
    ) -> list[Document]:
        """Top `top_k` documents by embedding similarity among those matching `filters`, with `score` set."""
        if not query_embedding:
            raise ValueError("query_embedding must be a non-empty list of floats")
        _check_search(top_k, filters)
        with self._lock:
            if self.embedding_space:
                self._check_space(self._connection(), record=False)
            hits = self._refresh().dense(
                query_embedding, top_k=top_k, filters=filters or None, load_fields=self._load_fields
            )
            docs = self._scored(hits, return_embedding=return_embedding)
        if scale_score and self.embedding_similarity_function == "cosine":
            docs = [replace(d, score=(d.score + 1.0) / 2.0) for d in docs]
        elif scale_score:
            docs = [replace(d, score=float(expit(d.score / DOT_PRODUCT_SCALING_FACTOR))) for d in docs]
        return docs

    # ---- async variants (SQLite and numpy release the GIL; a thread is enough) -----------------------------

    count_documents_async = _in_thread(count_documents)
    filter_documents_async = _in_thread(filter_documents)
    write_documents_async = _in_thread(write_documents)
    delete_documents_async = _in_thread(delete_documents)
    delete_all_documents_async = _in_thread(delete_all_documents)
    bm25_retrieval_async = _in_thread(bm25_retrieval)
    embedding_retrieval_async = _in_thread(embedding_retrieval)

    # ---- helpers -------------------------------------------------------------------------------------------

    def recorded_embedding_space(self) -> str | None:
        """The embedding space of the stored embeddings, if recorded."""
        with self._lock:
            return _space_of(self._connection())

    def _check_space(self, conn: sqlite3.Connection, record: bool) -> None:
        recorded = _space_of(conn)
        if recorded is None:
            if record:
                conn.execute(
                    "INSERT INTO store_text (key, value) VALUES ('embedding_space', ?)", (self.embedding_space,)
                )
            return
        if recorded != self.embedding_space:
            raise EmbeddingSpaceMismatchError(
                f"the document store at {self.path} holds embeddings of {recorded}, but the configured embedder "
                f"produces {self.embedding_space}: set DOCQA_EMBEDDING_MODEL / DOCQA_EMBEDDING_BACKEND back, or "
                "re-ingest into an empty store (embeddings of different spaces are never mixed in one index)"
            )

    def _matching_metas(self, filters: dict[str, Any] | None) -> list[dict[str, Any]]:
        if filters:
            compile_filters(filters)
        with self._lock:
            pairs = self._refresh().matching(filters or None, self._load_fields)
            return [segment.metas[i] for segment, positions in pairs for i in positions]

    def _existing_ids(self, conn: sqlite3.Connection, ids: list[str]) -> set[str]:
        found: set[str] = set()
        for batch in _batches(ids):
            found.update(r[0] for r in conn.execute(f"SELECT id FROM documents WHERE id IN ({_marks(batch)})", batch))
        return found

    def _fetch_by_seq(
        self, seqs: Sequence[int], return_embedding: bool = True, scores: dict[int, float] | None = None
    ) -> dict[int, Document]:
        """Documents by sequence number; rows deleted by another process meanwhile are simply absent."""
        conn = self._connection()
        found: dict[int, Document] = {}
        for batch in _batches(list(seqs)):
            for row in conn.execute(f"SELECT {_COLUMNS} FROM documents WHERE seq IN ({_marks(batch)})", batch):
                found[row[0]] = _document(row, return_embedding, scores.get(row[0]) if scores else None)
        return found

    def _fetch(self, seqs: Sequence[int]) -> list[Document]:
        found = self._fetch_by_seq(seqs)
        return [found[s] for s in seqs if s in found]

    def _scored(self, hits: list[tuple[int, float]], return_embedding: bool) -> list[Document]:
        found = self._fetch_by_seq([seq for seq, _ in hits], return_embedding, scores=dict(hits))
        return [found[seq] for seq, _ in hits if seq in found]

    def _load_fields(self, seqs: Sequence[int], fields: set[str]) -> list[dict[str, Any]]:
        found = self._fetch_by_seq(seqs)
        return [{f: getattr(found[s], f, None) for f in fields} if s in found else {} for s in seqs]


def _row(doc: Document) -> tuple[Any, ...]:
    """A Document as a table row. Embeddings are float32 unless that would change a value (exact round trip)."""
    blob, dtype = None, None
    if doc.embedding is not None:
        as32 = np.asarray(doc.embedding, dtype=np.float32)
        exact = as32.astype(np.float64).tolist() == list(doc.embedding)
        blob = (as32 if exact else np.asarray(doc.embedding, dtype=np.float64)).tobytes()
        dtype = "f4" if exact else "f8"
    extra = {}
    if doc.blob is not None:
        extra["blob"] = doc.blob.to_dict()
    if doc.sparse_embedding is not None:
        extra["sparse_embedding"] = doc.sparse_embedding.to_dict()
    try:
        meta = json.dumps(doc.meta)
    except (TypeError, ValueError) as error:
        raise DocumentStoreError(f"Document {doc.id} has metadata that is not JSON: {error}") from error
    return doc.id, doc.content, meta, blob, dtype, json.dumps(extra) if extra else None


def _document(row: tuple[Any, ...], return_embedding: bool, score: float | None = None) -> Document:
    _, doc_id, content, meta, blob, dtype, extra = row
    embedding = None
    if return_embedding and blob is not None:
        embedding = np.frombuffer(blob, dtype=dtype).astype(np.float64).tolist()
    if not extra:
        return Document(id=doc_id, content=content, meta=json.loads(meta), embedding=embedding, score=score)
    data: dict[str, Any] = {"id": doc_id, "content": content, "meta": json.loads(meta), "embedding": embedding}
    data.update(json.loads(extra))
    return replace(Document.from_dict(data), score=score)


def _vector(blob: bytes | None, dtype: str | None) -> np.ndarray | None:
    if blob is None:
        return None
    return np.frombuffer(blob, dtype=dtype or "f4").astype(np.float32)


def recorded_space_at(path: str | Path) -> str | None:
    """The embedding space recorded by the store file at `path`, read without opening (or creating) a store;
    None when there is no such file, no embeddings yet, or it predates recorded spaces."""
    if not Path(path).is_file():
        return None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
        try:
            return _space_of(conn)
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def _space_of(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT value FROM store_text WHERE key = 'embedding_space'").fetchone()
    return row[0] if row else None


def _delete_ids(conn: sqlite3.Connection, ids: list[str]) -> None:
    for batch in _batches(ids):
        conn.execute(f"DELETE FROM documents WHERE id IN ({_marks(batch)})", batch)


def _batches(items: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(items), _BATCH):
        yield items[start : start + _BATCH]


def _marks(batch: list[Any]) -> str:
    return ",".join("?" * len(batch))
