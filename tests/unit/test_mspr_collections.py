"""Collections: `docqa ingest --collection`, and the collection filter MSPR AND's with the access filter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from haystack import Document

from docqa.access import AccessScope, collection_filter, restrict
from docqa.errors import DocqaError
from docqa.ingestion.pipeline import ingest_paths
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from tests.support.ingestion_fakes import CountingEmbedder

ALICE = AccessScope("acme", frozenset({"alice"}))


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    settings = Settings(data_dir=tmp_path, chunk_words=20, chunk_overlap_words=5)
    return Runtime(settings, document_store=build_document_store(settings))


def _ids(runtime: Runtime, collection: str, scope: AccessScope = ALICE) -> set[str]:
    filters = restrict(scope, collection_filter(collection))
    return {d.meta["source_id"] for d in runtime.document_store.filter_documents(filters=filters)}


def test_ingest_tags_chunks_with_their_collection(runtime, tmp_path):
    (tmp_path / "policy.txt").write_text("Hotel costs are reimbursed up to 180 euros per night.")
    (tmp_path / "old.txt").write_text("In 2019 hotel costs were reimbursed up to 150 euros per night.")
    embedder = CountingEmbedder()
    ingest_paths(runtime, [tmp_path / "policy.txt"], "acme", ["everyone"], embedder=embedder)
    ingest_paths(runtime, [tmp_path / "old.txt"], "acme", ["everyone"], embedder=embedder, collection="archive")

    assert _ids(runtime, "main") == {"policy.txt"}
    assert _ids(runtime, "archive") == {"old.txt"}
    assert _ids(runtime, "other") == set()


def test_moving_a_file_to_another_collection_rewrites_it_and_unchanged_files_are_skipped(runtime, tmp_path):
    path = tmp_path / "policy.txt"
    path.write_text("Hotel costs are reimbursed up to 180 euros per night.")
    embedder = CountingEmbedder()
    ingest_paths(runtime, [path], "acme", ["everyone"], embedder=embedder)
    assert ingest_paths(runtime, [path], "acme", ["everyone"], embedder=embedder).skipped
    moved = ingest_paths(runtime, [path], "acme", ["everyone"], embedder=embedder, collection="archive")
    assert moved.written
    assert _ids(runtime, "main") == set() and _ids(runtime, "archive") == {path.name}


def test_documents_without_a_collection_belong_to_main(runtime):
    runtime.document_store.write_documents([
        Document(id="legacy", content="old", meta={"tenant": "acme", "access": ["everyone"], "source_id": "legacy"}),
    ])
    assert _ids(runtime, "main") == {"legacy"} and _ids(runtime, "archive") == set()


def test_the_collection_filter_never_widens_access(runtime, tmp_path):
    path = tmp_path / "board.txt"
    path.write_text("Board retreat budget: 900 euros per night.")
    ingest_paths(runtime, [path], "acme", ["board"], embedder=CountingEmbedder(), collection="archive")
    assert _ids(runtime, "archive") == set()
    assert _ids(runtime, "archive", AccessScope("acme", frozenset({"board"}))) == {path.name}
    assert _ids(runtime, "archive", AccessScope("globex", frozenset({"board"}))) == set()


@pytest.mark.parametrize("name", ["", "a,b", "collection:x", "x" * 65, "../etc", " main"])
def test_collection_names_must_fit_the_sources_setting(runtime, tmp_path, name):
    with pytest.raises(DocqaError, match="invalid collection name"):
        ingest_paths(runtime, [tmp_path], "acme", ["everyone"], embedder=CountingEmbedder(), collection=name)


def test_the_cli_refuses_a_collection_name_the_sources_setting_could_not_name(tmp_path):
    (tmp_path / "a.txt").write_text("text")
    env = {**os.environ, "DOCQA_DATA_DIR": str(tmp_path / "data")}
    proc = subprocess.run([sys.executable, "-m", "docqa.cli", "ingest", "-q", "--collection", "a,b",
                           str(tmp_path / "a.txt")], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        "error: invalid collection name 'a,b': use 1-64 letters, digits, '_', '.' or '-'"]
