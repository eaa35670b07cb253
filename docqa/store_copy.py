"""Copy one tenant's chunks from the embedded store to another document store (Elasticsearch), resumably.

Beyond one machine, docqa runs on Elasticsearch; `docqa store copy --tenant T --to elasticsearch` moves a tenant's
chunks there with their embeddings and metadata. The copy reads the embedded store's SQLite table in sequence
order, `batch_size` chunks at a time, and writes each batch with `DuplicatePolicy.OVERWRITE`, so writing a chunk
twice leaves one identical copy (idempotent). After each written batch the last copied sequence number is saved
in a checkpoint file (per target and tenant): an interrupted copy resumes after the last completed batch, and a
rerun copies only what was written or changed since (an overwrite or metadata update re-inserts a chunk under a
new sequence number, so it is copied again). A crash between a batch's write and its checkpoint only means that
batch is written again. Deletions follow the copy: the embedded store logs the id and tenant of every deleted chunk
(`deleted_ids`), and after the chunks each run deletes from the target the tenant's ids logged since its last run
that the source no longer holds (an overwrite logs a deletion too, but its id is still in the source, so it stays).
Deletions made before the store had that log (docqa versions before it) are not known; `restart` re-applies every
logged deletion.

The target is any Haystack DocumentStore (tests copy into a second embedded store).

Usage:
    copier = TenantStoreCopier(source=embedded, target=elasticsearch, checkpoint_path=Path("copy.json"))
    copier.run(tenant="acme")  # -> {"copied": 1200, "batches": 3, "last_seq": 5310, ...}
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import import_class_by_name
from haystack.document_stores.types import DuplicatePolicy

from docqa.access import TENANT_FIELD
from docqa.errors import DocqaError
from docqa.settings import Settings
from docqa.store_commands import store_subcommands

# Row decoding must match the store's own (float32/float64 embeddings, blob and sparse embedding in `extra`).
from docqa.stores.embedded import _COLUMNS, EmbeddedDocumentStore, _document

CHECKPOINT_FILE = "store_copy_checkpoints.json"
DEFAULT_BATCH_SIZE = 500

# Called after each batch is written and checkpointed: (chunks in the batch, last sequence number copied).
BatchCallback = Callable[[int, int], None]


def target_key(store: Any) -> str:
    """A stable name for a target store, from its serialised settings (the checkpoint is kept per target)."""
    data = store.to_dict()
    digest = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{data.get('type', type(store).__name__)}:{digest}"


class Checkpoints:
    """The last copied sequence number per (target, tenant), in one small JSON file written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def get(self, target: str, tenant: str) -> dict[str, Any] | None:
        return self._read().get(target, {}).get(tenant)

    def set(
        self,
        target: str,
        tenant: str,
        last_seq: int,
        copied: int,
        last_deletion: int | None = None,
        deleted: int | None = None,
    ) -> None:
        """Save progress; `last_deletion`/`deleted` left as None keep their saved values."""
        with self._locked():
            data = self._read()
            saved = data.setdefault(target, {}).get(tenant) or {}
            data[target][tenant] = {
                "last_seq": last_seq,
                "copied": copied,
                "last_deletion": saved.get("last_deletion", 0) if last_deletion is None else last_deletion,
                "deleted": saved.get("deleted", 0) if deleted is None else deleted,
                "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            os.replace(tmp, self.path)

    def clear(self, target: str, tenant: str) -> None:
        with self._locked():
            data = self._read()
            if data.get(target, {}).pop(tenant, None) is not None:
                tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
                os.replace(tmp, self.path)

    def _read(self) -> dict[str, dict[str, dict[str, Any]]]:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # Copies of different tenants may run at once: serialise their read-modify-write of the file.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def tenant_batches(
    source: EmbeddedDocumentStore, tenant: str, after_seq: int, batch_size: int
) -> Iterator[tuple[int, list[Document]]]:
    """The tenant's chunks with sequence number above `after_seq`, in sequence order, as (last seq, documents)."""
    path = Path(source.path)
    if not path.is_file():
        raise DocqaError(f"no embedded document store at {path}")
    conn = sqlite3.connect(path, timeout=60)
    try:
        while True:
            # One short read transaction per batch: writers are never blocked for the length of the copy.
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM documents WHERE seq > ? AND json_extract(meta, ?) = ? ORDER BY seq LIMIT ?",
                (after_seq, f"$.{TENANT_FIELD}", tenant, batch_size),
            ).fetchall()
            if not rows:
                return
            after_seq = rows[-1][0]
            yield after_seq, [_document(row, return_embedding=True) for row in rows]
    finally:
        conn.close()


def tenant_deletions(
    source: EmbeddedDocumentStore, tenant: str, after_log: int, batch_size: int
) -> Iterator[tuple[int, list[str]]]:
    """Ids of the tenant's chunks deleted after log entry `after_log` and absent from the source now, in log order,
    as (last log entry, ids); a batch may be empty when every id in it was written again."""
    conn = sqlite3.connect(source.path, timeout=60)
    try:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'deleted_ids'").fetchone():
            return  # a store written by a version without the log: its deletions are unknown
        while True:
            # Reading the log and the ids still present in one transaction: a chunk re-written meanwhile is seen.
            conn.execute("BEGIN")
            try:
                rows = conn.execute(
                    "SELECT log_seq, id FROM deleted_ids WHERE log_seq > ? AND tenant = ? ORDER BY log_seq LIMIT ?",
                    (after_log, tenant, batch_size),
                ).fetchall()
                ids = list(dict.fromkeys(row[1] for row in rows))
                marks = ",".join("?" * len(ids))
                found = conn.execute(f"SELECT id FROM documents WHERE id IN ({marks})", ids).fetchall() if ids else []
                present = {row[0] for row in found}
            finally:
                conn.execute("COMMIT")
            if not rows:
                return
            after_log = rows[-1][0]
            yield after_log, [i for i in ids if i not in present]
    finally:
        conn.close()


def count_tenant(source: EmbeddedDocumentStore, tenant: str, after_seq: int = 0) -> int:
    """How many of the tenant's chunks the source holds above `after_seq`."""
    conn = sqlite3.connect(source.path, timeout=60)
    try:
        return conn.execute(
            "SELECT COUNT(*) FROM documents WHERE seq > ? AND json_extract(meta, ?) = ?",
            (after_seq, f"$.{TENANT_FIELD}", tenant),
        ).fetchone()[0]
    finally:
        conn.close()


@component
class TenantStoreCopier:
    """Copies a tenant's chunks (content, embedding, metadata) from the embedded store to any DocumentStore.

    :param source: the embedded store to read.
    :param target: the store to write (ElasticsearchDocumentStore in production), with `DuplicatePolicy.OVERWRITE`.
    :param checkpoint_path: JSON file holding the last copied sequence number per target and tenant.
    :param batch_size: chunks read and written at a time.
    :param target_name: the target's key in the checkpoint file (default: derived from its settings).

    Usage:
        copier = TenantStoreCopier(source=embedded, target=es_store, checkpoint_path=Path("copy.json"))
        result = copier.run(tenant="acme")  # result["copied"] chunks written this run
    """

    def __init__(
        self,
        source: EmbeddedDocumentStore,
        target: Any,
        checkpoint_path: Path | str,
        batch_size: int = DEFAULT_BATCH_SIZE,
        target_name: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.source = source
        self.target = target
        self.checkpoint_path = Path(checkpoint_path)
        self.batch_size = batch_size
        self.target_name = target_name or target_key(target)
        self.checkpoints = Checkpoints(self.checkpoint_path)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            source=self.source.to_dict(),
            target=self.target.to_dict(),
            checkpoint_path=str(self.checkpoint_path),
            batch_size=self.batch_size,
            target_name=self.target_name,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TenantStoreCopier:
        params = dict(data["init_parameters"])
        params["source"] = EmbeddedDocumentStore.from_dict(params["source"])
        params["target"] = import_class_by_name(params["target"]["type"]).from_dict(params["target"])
        return default_from_dict(cls, {**data, "init_parameters": params})

    @component.output_types(
        copied=int, batches=int, resumed_after=int, last_seq=int, total_copied=int, deleted=int, last_deletion=int
    )
    def run(self, tenant: str, restart: bool = False, on_batch: BatchCallback | None = None) -> dict[str, int]:
        """Copy the tenant's chunks written since the last completed batch (all of them with `restart`).

        :param tenant: whose chunks to copy (`meta.tenant`).
        :param restart: forget the checkpoint and copy everything again (overwriting identical copies).
        :param on_batch: called after each batch is written and checkpointed, e.g. to print progress.
        :returns: copied (this run), batches (this run), resumed_after (the sequence number the run started
            after), last_seq (checkpointed now), total_copied (since the last restart), deleted (ids deleted from
            the target this run) and last_deletion (the deletion log entry checkpointed now).
        """
        if not tenant:
            raise ValueError("tenant must be a non-empty string")
        if restart:
            self.checkpoints.clear(self.target_name, tenant)
        saved = self.checkpoints.get(self.target_name, tenant) or {}
        resumed_after = last_seq = int(saved.get("last_seq", 0))
        total = int(saved.get("copied", 0))
        deleted_after = last_deletion = int(saved.get("last_deletion", 0))
        total_deleted = int(saved.get("deleted", 0))
        copied = batches = deleted = 0
        for last_seq, documents in tenant_batches(self.source, tenant, resumed_after, self.batch_size):
            self.target.write_documents(documents, policy=DuplicatePolicy.OVERWRITE)
            copied += len(documents)
            total += len(documents)
            batches += 1
            self.checkpoints.set(self.target_name, tenant, last_seq, total)
            if on_batch is not None:
                on_batch(len(documents), last_seq)
        # After the chunks, so an id deleted and written again since the last run is already back in the source
        # and is kept.
        for last_deletion, ids in tenant_deletions(self.source, tenant, deleted_after, self.batch_size):
            if ids:
                self.target.delete_documents(ids)
            deleted += len(ids)
            total_deleted += len(ids)
            self.checkpoints.set(self.target_name, tenant, last_seq, total, last_deletion, total_deleted)
        return {
            "copied": copied,
            "batches": batches,
            "resumed_after": resumed_after,
            "last_seq": last_seq,
            "total_copied": total,
            "deleted": deleted,
            "last_deletion": last_deletion,
        }


# ---- command line ------------------------------------------------------------------------------------------------


def cmd_store_copy(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.stores.factory import STORE_FILE, build_document_store

    if not settings.elasticsearch_url:
        raise DocqaError("set DOCQA_ELASTICSEARCH_URL to the Elasticsearch cluster to copy to")
    source_path = settings.store_dir() / STORE_FILE
    if not source_path.is_file():
        raise DocqaError(f"no embedded document store at {source_path}")
    index = args.index or settings.elasticsearch_index
    # Read as-is: copying never embeds, so no embedding space is checked or recorded on the source.
    source = EmbeddedDocumentStore(path=str(source_path))
    target = build_document_store(settings, index=index)
    copier = TenantStoreCopier(
        source=source,
        target=target,
        checkpoint_path=settings.store_dir() / CHECKPOINT_FILE,
        batch_size=args.batch_size,
        target_name=f"elasticsearch {settings.elasticsearch_url} index {index}",
    )
    tenant = args.tenant or settings.tenant
    saved = None if args.restart else copier.checkpoints.get(copier.target_name, tenant)
    after = int(saved["last_seq"]) if saved else 0
    pending = count_tenant(source, tenant, after)
    print(
        f"tenant {tenant}: {count_tenant(source, tenant)} chunks in {source_path}, {pending} to copy to "
        f"{settings.elasticsearch_url} index {index}" + (f" (resuming after sequence {after})" if after else "")
    )
    done = 0

    def progress(count: int, last_seq: int) -> None:
        nonlocal done
        done += count
        if not args.quiet:
            print(f"  {done}/{pending} copied (up to sequence {last_seq})", flush=True)

    from elastic_transport import TransportError
    from elasticsearch import ApiError

    try:
        result = copier.run(tenant=tenant, restart=args.restart, on_batch=progress)
    except (TransportError, ApiError) as error:
        # Completed batches stay checkpointed: the same command resumes once the cluster answers.
        raise DocqaError(
            f"Elasticsearch at {settings.elasticsearch_url} failed after {done} chunks were copied "
            f"(run the same command again to resume): {error}"
        ) from error
    finally:
        source.close()
    print(
        f"copied {result['copied']} chunks in {result['batches']} batches and removed {result['deleted']} chunks "
        f"that were deleted from the source; {result['total_copied']} copied for this tenant and target since "
        "the last restart"
    )
    return 0


def add_store_commands(sub: argparse._SubParsersAction) -> None:
    """`docqa store copy`, in the `docqa store` command group."""
    p = store_subcommands(sub).add_parser(
        "copy",
        help="copy a tenant's chunks with embeddings and metadata to Elasticsearch (idempotent, resumable)",
    )
    p.add_argument("--tenant", help="tenant whose chunks to copy (default: DOCQA_TENANT)")
    p.add_argument("--to", required=True, choices=["elasticsearch"], help="target: DOCQA_ELASTICSEARCH_URL")
    p.add_argument("--index", help="Elasticsearch index (default: DOCQA_ELASTICSEARCH_INDEX)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        dest="batch_size",
        help=f"chunks per read and write (default: {DEFAULT_BATCH_SIZE})",
    )
    p.add_argument("--restart", action="store_true", help="forget the checkpoint and copy every chunk again")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-batch progress")
    p.set_defaults(handler=cmd_store_copy)
