"""Several real processes writing, deleting and searching one embedded store at the same time."""

from __future__ import annotations

import multiprocessing
import time

import pytest
from haystack import Document

from docqa.stores.embedded import EmbeddedDocumentStore

WRITERS = 3
DOCS_PER_WRITER = 120
BATCH = 10
DEADLINE_S = 120.0


def writer_doc(writer: int, i: int) -> Document:
    return Document(id=f"w{writer}-{i}", content=f"shared topic writer{writer} number{i}", meta={"writer": writer})


def expected_ids() -> set[str]:
    # Writer 0 deletes its even-numbered documents once everything is written.
    return {f"w{w}-{i}" for w in range(WRITERS) for i in range(DOCS_PER_WRITER) if not (w == 0 and i % 2 == 0)}


def run_writer(path: str, writer: int, start: multiprocessing.synchronize.Event) -> None:
    store = EmbeddedDocumentStore(path=path)
    start.wait()
    for first in range(0, DOCS_PER_WRITER, BATCH):
        store.write_documents([writer_doc(writer, i) for i in range(first, first + BATCH)])
        # Search between writes, so this process's index catches up while others write.
        store.bm25_retrieval("shared topic", top_k=5)
    if writer == 0:
        store.delete_documents([f"w0-{i}" for i in range(0, DOCS_PER_WRITER, 2)])


def run_reader(path: str, start: multiprocessing.synchronize.Event, results: multiprocessing.Queue) -> None:
    store = EmbeddedDocumentStore(path=path)
    # Build the index while the store is empty, then let the writers go: all later state arrives incrementally.
    seen_counts = [len(store.bm25_retrieval("shared topic", top_k=1000))]
    start.set()
    wanted = expected_ids()
    found: set[str] = set()
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        found = {d.id for d in store.bm25_retrieval("shared topic", top_k=1000)}
        seen_counts.append(len(found))
        if found == wanted:
            break
        time.sleep(0.02)
    results.put((sorted(found), seen_counts))


@pytest.mark.integration
def test_processes_write_and_read_concurrently(tmp_path):
    path = str(tmp_path / "documents.sqlite3")
    main_store = EmbeddedDocumentStore(path=path)
    assert main_store.bm25_retrieval("shared topic") == []  # index built before anyone writes

    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    results = ctx.Queue()
    reader = ctx.Process(target=run_reader, args=(path, start, results))
    writers = [ctx.Process(target=run_writer, args=(path, w, start)) for w in range(WRITERS)]
    for process in [reader, *writers]:
        process.start()
    found, seen_counts = results.get(timeout=DEADLINE_S + 60)
    for process in [reader, *writers]:
        process.join(timeout=60)
        assert process.exitcode == 0

    # The reader's incremental index converged on exactly the surviving documents, deletes included.
    assert set(found) == expected_ids()
    assert seen_counts[0] == 0
    # An instance whose index predates all the writes catches up incrementally to the same state.
    assert {d.id for d in main_store.bm25_retrieval("shared topic", top_k=1000)} == expected_ids()
    assert main_store.count_documents() == len(expected_ids())
    assert {d.meta["writer"] for d in main_store.filter_documents()} == set(range(WRITERS))
