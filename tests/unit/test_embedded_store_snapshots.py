"""Index snapshots of the embedded store: a new instance maps the snapshot and catches up only from the delta,
with the same answers as an index built from SQLite; crashes while writing one lose nothing; other instances and
processes move to a new generation; `delete_all_documents` voids older snapshots."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from haystack import Document

from docqa.stores import embedded, snapshot
from docqa.stores.embedded import EmbeddedDocumentStore
from docqa.stores.filters import StoredRecord, compile_filters

N, DIM = 400, 16
WORDS = ["heron", "lake", "river", "stone", "forest", "meadow", "harbour", "bridge", "tower", "garden"]


def corpus(count: int = N, start: int = 0) -> list[Document]:
    rng = np.random.default_rng(start)
    docs = []
    for i in range(start, start + count):
        words = " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 6 + i % 5))
        meta = {"tenant": f"t{i % 3}", "access": ["everyone"] if i % 2 else [f"group-{i % 4}", "auditors"],
                "year": 2000 + i % 20}
        if i % 7 == 0:
            meta["patient_id"] = ["p1", "p2"] if i % 2 else "p1"
        docs.append(Document(id=f"d{i}", content=f"{words} item{i}", meta=meta,
                             embedding=rng.standard_normal(DIM).tolist()))
    return docs


FILTERS = [
    None,
    {"field": "meta.tenant", "operator": "==", "value": "t1"},
    {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "==", "value": "t0"},
                                       {"field": "meta.access", "operator": "in", "value": ["group-2", "everyone"]}]},
    {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "in", "value": ["t0", "t2"]},
                                       {"field": "meta.year", "operator": ">=", "value": 2010}]},
    {"field": "meta.patient_id", "operator": "==", "value": "p2"},
    {"operator": "OR", "conditions": [{"field": "meta.patient_id", "operator": "==", "value": "p1"},
                                      {"field": "meta.year", "operator": "<", "value": 2002}]},
]
QUERIES = ["heron lake", "forest item7 bridge", "tower", "garden meadow stone river"]


def store_at(path: Path, **kwargs) -> EmbeddedDocumentStore:
    kwargs.setdefault("snapshot_rows", None)
    return EmbeddedDocumentStore(path=str(path), **kwargs)


def answers(store: EmbeddedDocumentStore, bm25_scores: bool = True, dense: bool = True) -> list:
    """BM25 and dense results (ids and scores) and filter matches for every query and filter. Without
    `bm25_scores`, BM25 gives the set of matching ids: its scores depend on the order rows were indexed in."""
    found: list = []
    vectors = [d.embedding for d in corpus(4, start=10_000)]
    for filters in FILTERS:
        for query in QUERIES:
            if not bm25_scores:
                found.append(sorted(d.id for d in store.bm25_retrieval(query, filters=filters, top_k=1000)))
                continue
            found.append(ranked(store.bm25_retrieval(query, filters=filters, top_k=7)))
        for vector in vectors if dense else ():
            found.append(ranked(store.embedding_retrieval(vector, filters=filters, top_k=7)))
        found.append(sorted(d.id for d in store.filter_documents(filters)))
    return found


def dense_recall(store: EmbeddedDocumentStore, exact: EmbeddedDocumentStore) -> float:
    """Share of the exact top-7 ids that `store` returns, over every filter and query vector."""
    hits = total = 0
    for filters in FILTERS:
        for vector in [d.embedding for d in corpus(4, start=10_000)]:
            want = {d.id for d in exact.embedding_retrieval(vector, filters=filters, top_k=7)}
            got = {d.id for d in store.embedding_retrieval(vector, filters=filters, top_k=7)}
            hits, total = hits + len(want & got), total + len(want)
    return hits / total


def ranked(documents: list[Document]) -> tuple[list[float], list[str]]:
    """Scores, and the ids of the documents scoring above the last one (equal scores may come in any order)."""
    scores = [round(d.score, 4) for d in documents]
    return scores, sorted(d.id for d in documents if round(d.score, 4) > scores[-1])


def frozen_rows(store: EmbeddedDocumentStore) -> int:
    return sum(s.size for s in store._index.segments if s.frozen)


@pytest.mark.parametrize("ann_min_chunks", [10**9, 100], ids=["exact", "ann"])
def test_a_new_instance_answers_from_the_snapshot_like_from_the_database(tmp_path, ann_min_chunks):
    path = tmp_path / "s.sqlite3"
    writer = store_at(path, ann_min_chunks=ann_min_chunks)
    writer.write_documents(corpus())
    writer.delete_documents(["d3", "d10"])
    # Separately built HNSW graphs propose different approximate candidates: on that path dense search is held to
    # recall against exact search, everything else to equality.
    exact_path = ann_min_chunks >= N
    built = answers(writer, dense=exact_path)
    assert writer.compact() == "gen-00000001"

    reopened = store_at(path, ann_min_chunks=ann_min_chunks)
    assert answers(reopened, dense=exact_path) == built
    assert exact_path or dense_recall(reopened, store_at(path, ann_min_chunks=10**9)) >= 0.9
    assert frozen_rows(reopened) == N - 2 and len(reopened._index.segments) == 1
    block = reopened._index.segments[0].dense[DIM]
    assert block.ann_by_seq == (ann_min_chunks < N)  # the graph came with the snapshot

    # Writes, overwrites and deletes after the snapshot: the delta and a private alive mask hold them.
    writer.write_documents(corpus(50, start=N))
    writer.delete_documents(["d0", "d1", f"d{N + 1}"])
    writer.update_by_filter({"field": "meta.tenant", "operator": "==", "value": "t2"}, {"year": 1990})
    fresh = store_at(path, ann_min_chunks=ann_min_chunks)
    assert answers(reopened, dense=exact_path) == answers(fresh, dense=exact_path)
    assert exact_path or dense_recall(reopened, store_at(path, ann_min_chunks=10**9)) >= 0.9
    assert answers(reopened, bm25_scores=False, dense=exact_path) == answers(writer, bm25_scores=False,
                                                                             dense=exact_path)
    assert len(reopened._index.segments) > 1
    assert fresh._index.segments[0].frozen

    # After the next snapshot, one frozen segment without tombstones: the answers of an index built from the
    # surviving documents alone (BM25 statistics no longer count deleted rows).
    writer.compact()
    after = store_at(path, ann_min_chunks=ann_min_chunks)
    rebuilt = store_at(tmp_path / "copy.sqlite3", ann_min_chunks=10**9)
    rebuilt.write_documents(writer.filter_documents())
    # The next snapshot updates the previous graph rather than rebuilding it, so approximate candidates may
    # differ from a fresh graph's: dense search is held to recall against exact search there, the rest to equality.
    assert answers(after, dense=False) == answers(rebuilt, dense=False)
    if ann_min_chunks < N:
        assert after._index.segments[0].dense[DIM].ann_by_seq
        assert dense_recall(after, rebuilt) >= 0.9
    else:
        assert answers(after) == answers(rebuilt)
    assert len(after._index.segments) == 1 and after.count_documents() == frozen_rows(after)
    for store in (writer, reopened, fresh, after, rebuilt):
        store.close()


def test_equality_filters_on_a_snapshot_match_the_plain_predicate(tmp_path):
    docs = corpus()
    writer = store_at(tmp_path / "s.sqlite3")
    writer.write_documents(docs)
    writer.compact()
    reader = store_at(tmp_path / "s.sqlite3")
    for filters in [
        {"field": "meta.patient_id", "operator": "==", "value": "p1"},
        {"field": "patient_id", "operator": "in", "value": ["p2", "nobody"]},
        {"field": "meta.access", "operator": "==", "value": "auditors"},
        {"field": "meta.missing", "operator": "==", "value": "x"},
        {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "==", "value": "t2"},
                                           {"field": "meta.access", "operator": "in", "value": ["group-2"]}]},
        {"operator": "AND", "conditions": [{"field": "meta.tenant", "operator": "==", "value": "t2"},
                                           {"field": "meta.year", "operator": "!=", "value": 2005}]},
    ]:
        predicate = compile_filters(filters)
        expected = sorted(d.id for d in docs if predicate(StoredRecord(id=d.id, meta=d.meta)))
        assert sorted(d.id for d in reader.filter_documents(filters)) == expected, filters
    assert any(reader.filter_documents({"field": "meta.patient_id", "operator": "==", "value": "p2"}))
    assert reader._index.segments[0].frozen


def test_delete_all_documents_voids_older_snapshots(tmp_path):
    writer = store_at(tmp_path / "s.sqlite3")
    writer.write_documents(corpus(30))
    writer.compact()
    writer.delete_all_documents()
    writer.write_documents([Document(id="only", content="heron alone")])
    reader = store_at(tmp_path / "s.sqlite3")
    assert [d.id for d in reader.bm25_retrieval("heron", top_k=50)] == ["only"]
    assert frozen_rows(reader) == 0
    assert writer.compact() == "gen-00000002"
    assert [d.id for d in store_at(tmp_path / "s.sqlite3").bm25_retrieval("heron", top_k=50)] == ["only"]


def test_other_instances_move_to_a_new_generation(tmp_path, monkeypatch):
    monkeypatch.setattr(embedded, "MANIFEST_CHECK_SECONDS", 0.0)
    writer = store_at(tmp_path / "s.sqlite3")
    reader = store_at(tmp_path / "s.sqlite3")
    writer.write_documents(corpus(100))
    assert len(reader.bm25_retrieval("heron", top_k=200)) > 0 and frozen_rows(reader) == 0
    writer.compact()
    writer.write_documents(corpus(10, start=100))
    hits = {d.id for d in reader.bm25_retrieval("item105", top_k=5)}
    assert hits == {"d105"}
    assert frozen_rows(reader) == 100 and reader._generation == "gen-00000001"


def test_an_instance_writes_a_snapshot_once_enough_is_pending(tmp_path):
    store = store_at(tmp_path / "s.sqlite3", snapshot_rows=60)
    store.write_documents(corpus(50))
    store.bm25_retrieval("heron")
    assert snapshot.read_manifest(snapshot.snapshot_dir(store.path)) is None
    store.write_documents(corpus(20, start=50))
    store.bm25_retrieval("heron")
    store._compactor.join(timeout=60)
    manifest = snapshot.read_manifest(snapshot.snapshot_dir(store.path))
    assert manifest is not None and manifest["rows"] == 70
    assert {d.id for d in store.bm25_retrieval("item64")} == {"d64"}
    assert frozen_rows(store) == 70


STEPS = ["seqs", "postings", "metas", f"dense-{DIM}", "generation", "manifest-temp", "manifest"]


@pytest.mark.parametrize("step", STEPS)
def test_a_failure_at_any_step_of_writing_a_snapshot_loses_nothing(tmp_path, monkeypatch, step):
    path = tmp_path / "s.sqlite3"
    writer = store_at(path, ann_min_chunks=100)
    writer.write_documents(corpus(200))
    writer.compact()
    writer.write_documents(corpus(150, start=200))
    writer.delete_documents(["d0", "d250"])
    # Graphs built separately propose different approximate candidates: dense search is held to recall
    # against exact search, the rest to equality.
    expected = answers(writer, bm25_scores=False, dense=False)

    def fail(name: str) -> None:
        if name == step:
            raise OSError(f"disk full after {name}")

    monkeypatch.setattr(snapshot, "_after_step", fail)
    with pytest.raises(OSError, match="disk full"):
        writer.compact()
    monkeypatch.undo()
    # Whatever the manifest names (the old generation, or the new one if only cleanup failed) opens and answers
    # like the database.
    reader = store_at(path, ann_min_chunks=100)
    assert answers(reader, bm25_scores=False, dense=False) == expected
    assert dense_recall(reader, store_at(path, ann_min_chunks=10**9)) >= 0.9
    assert reader.count_documents() == 348
    # The next snapshot clears the leftovers.
    writer.compact()
    directory = snapshot.snapshot_dir(str(path))
    assert not list(directory.glob(".tmp-*"))
    assert answers(store_at(path, ann_min_chunks=100), bm25_scores=False, dense=False) == expected


def _compact_and_die(path: str, step: str) -> None:
    def die(name: str) -> None:
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)

    snapshot._after_step = die
    EmbeddedDocumentStore(path=path, ann_min_chunks=100, snapshot_rows=None).compact()


@pytest.mark.integration
@pytest.mark.parametrize("step", ["postings", f"dense-{DIM}", "manifest-temp"])
def test_a_process_killed_while_writing_a_snapshot_leaves_a_store_every_process_can_open(tmp_path, step):
    path = tmp_path / "s.sqlite3"
    writer = store_at(path, ann_min_chunks=100)
    writer.write_documents(corpus(200))
    writer.compact()
    writer.write_documents(corpus(100, start=200))
    expected = answers(writer, bm25_scores=False, dense=False)
    process = multiprocessing.get_context("spawn").Process(target=_compact_and_die, args=(str(path), step))
    process.start()
    process.join(timeout=120)
    assert process.exitcode == -signal.SIGKILL
    directory = snapshot.snapshot_dir(str(path))
    assert snapshot.read_manifest(directory)["generation"] == "gen-00000001"
    assert list(directory.glob(".tmp-*"))  # the dead writer's partial generation
    assert answers(store_at(path, ann_min_chunks=100), bm25_scores=False, dense=False) == expected
    assert dense_recall(store_at(path, ann_min_chunks=100), store_at(path, ann_min_chunks=10**9)) >= 0.9
    # The lock died with its holder: the next writer is not blocked, and it cleans up.
    written = store_at(path, ann_min_chunks=100).compact()
    assert written not in (None, "gen-00000001") and snapshot.read_manifest(directory)["generation"] == written
    assert not list(directory.glob(".tmp-*"))
    assert answers(store_at(path, ann_min_chunks=100), bm25_scores=False, dense=False) == expected
    assert dense_recall(store_at(path, ann_min_chunks=100), store_at(path, ann_min_chunks=10**9)) >= 0.9


def _write_and_watch(path: str, writer: int, start, results) -> None:
    store = EmbeddedDocumentStore(path=path, snapshot_rows=40)
    start.wait()
    for first in range(0, 120, 10):
        store.write_documents([Document(id=f"w{writer}-{i}", content=f"shared topic writer{writer} number{i}")
                               for i in range(first, first + 10)])
        store.bm25_retrieval("shared topic", top_k=5)
    wanted = {f"w{w}-{i}" for w in range(2) for i in range(120)}
    deadline = time.monotonic() + 120
    found: set[str] = set()
    while time.monotonic() < deadline and found != wanted:
        found = {d.id for d in store.bm25_retrieval("shared topic", top_k=1000)}
        time.sleep(0.02)
    if store._compactor is not None:
        store._compactor.join(timeout=60)
    results.put((writer, sorted(found)))


@pytest.mark.integration
def test_two_processes_writing_with_snapshots_see_each_others_writes(tmp_path):
    path = str(tmp_path / "s.sqlite3")
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Event(), ctx.Queue()
    processes = [ctx.Process(target=_write_and_watch, args=(path, w, start, results)) for w in range(2)]
    for process in processes:
        process.start()
    start.set()
    outcomes = dict(results.get(timeout=240) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    wanted = sorted(f"w{w}-{i}" for w in range(2) for i in range(120))
    assert outcomes == {0: wanted, 1: wanted}
    assert snapshot.read_manifest(snapshot.snapshot_dir(path)) is not None  # snapshots were written meanwhile
    reader = EmbeddedDocumentStore(path=path, snapshot_rows=None)
    assert sorted(d.id for d in reader.bm25_retrieval("shared topic", top_k=1000)) == wanted
    assert frozen_rows(reader) > 0


def test_the_next_snapshot_updates_the_hnsw_graph_and_keeps_recall(tmp_path):
    from tests.unit.test_embedded_store_ann import corpus as clustered
    from tests.unit.test_embedded_store_ann import queries, recall

    docs = clustered()
    path = tmp_path / "s.sqlite3"
    writer = store_at(path, ann_min_chunks=1000)
    writer.write_documents(docs[:2500])
    writer.compact()
    writer.write_documents(docs[2500:])
    writer.delete_documents([f"d{i}" for i in range(0, 2500, 50)])
    writer.compact()
    reader = store_at(path, ann_min_chunks=1000)
    exact = store_at(tmp_path / "exact.sqlite3", ann_min_chunks=10**9)
    exact.write_documents(reader.filter_documents())
    block = reader._index.segments[0].dense[32]
    assert block.ann_by_seq and len(block.ann) == len(docs) - 50  # new keys added, deleted ones removed
    filters = {"field": "meta.tenant", "operator": "in", "value": ["t0", "t3"]}
    found = [recall(exact.embedding_retrieval(q, top_k=10, filters=f), reader.embedding_retrieval(q, top_k=10,
                                                                                                  filters=f))
             for q in queries() for f in (None, filters)]
    assert np.mean(found) >= 0.99


def test_the_snapshot_threshold_is_a_setting(tmp_path, monkeypatch):
    from docqa.settings import Settings
    from docqa.stores.factory import build_document_store

    monkeypatch.setenv("DOCQA_SNAPSHOT_ROWS", "120")
    store = build_document_store(Settings(data_dir=tmp_path))
    assert store.snapshot_rows == 120
    monkeypatch.setenv("DOCQA_SNAPSHOT_ROWS", "0")
    # 0 leaves snapshots to `docqa store compact`: writes never start one.
    store = build_document_store(Settings(data_dir=tmp_path))
    assert store.snapshot_rows is None
    store.snapshot_in_background = False
    store.write_documents(corpus(200))
    assert snapshot.read_manifest(snapshot.snapshot_dir(store.path)) is None
