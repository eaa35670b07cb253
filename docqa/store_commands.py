"""`docqa store compact`: write an index snapshot of the embedded store, so new processes open it at once.

A snapshot (see `docqa.stores.snapshot`) is what worker processes memory-map instead of rebuilding their search
index from SQLite. Workers write one by themselves once enough has changed (`snapshot_rows`); this command writes
one now, e.g. after a bulk ingest or before starting many workers. It waits for a snapshot another process is
writing, and writes nothing when the current snapshot is already up to date.

Usage:
    docqa store compact
"""

from __future__ import annotations

import argparse
import time

from docqa.errors import DocqaError
from docqa.settings import Settings


def cmd_store_compact(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.stores.embedded import EmbeddedDocumentStore
    from docqa.stores.factory import build_document_store
    from docqa.stores.snapshot import read_manifest, snapshot_dir

    store = build_document_store(settings)
    if not isinstance(store, EmbeddedDocumentStore):
        raise DocqaError("docqa store compact applies to the embedded store (DOCQA_ELASTICSEARCH_URL is set)")
    started = time.perf_counter()
    try:
        generation = store.compact()
    finally:
        store.close()
    manifest = read_manifest(snapshot_dir(store.path)) or {}
    print(
        f"index snapshot {generation} of {store.path}: {manifest.get('rows', 0)} chunks up to sequence "
        f"{manifest.get('max_seq', 0)} ({time.perf_counter() - started:.1f} s)"
    )
    return 0


def store_subcommands(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """The subcommands of `docqa store`, creating the group unless another module's commands already did.

    `store compact` and `store copy` register from separate modules, in either order, into one group.
    """
    store = sub.choices.get("store") or sub.add_parser("store", help="document store administration")
    actions = [a for a in store._actions if isinstance(a, argparse._SubParsersAction)]
    return actions[0] if actions else store.add_subparsers(dest="store_command", required=True)


def add_snapshot_commands(sub: argparse._SubParsersAction) -> None:
    """`docqa store compact`, in the `docqa store` command group."""
    p = store_subcommands(sub).add_parser(
        "compact",
        help="write an index snapshot of the embedded store (memory-mapped by every worker: fast opening)",
    )
    p.set_defaults(handler=cmd_store_compact)
