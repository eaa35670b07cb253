"""Citations name documents as they were given (file name, path below the folder, upload name), never by the
absolute path of the machine that read them; the source id (what re-ingestion and deletion key on) stays put."""

from __future__ import annotations

from pathlib import Path

import pytest
from haystack.document_stores.in_memory import InMemoryDocumentStore

from docqa.ingestion.jobs import Upload, job_status, submit_job
from docqa.ingestion.pipeline import expand_labelled_paths, ingest_paths
from docqa.pipelines.base import citations_from_documents
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from tests.support.ingestion_fakes import CountingEmbedder


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "srv" / "import" / "corpus"
    (root / "policies").mkdir(parents=True)
    (root / "halcyon.md").write_text("# Halcyon\n\nHalcyon is headquartered in Oslo.")
    (root / "policies" / "travel.txt").write_text("Book economy class for flights under six hours.")
    return root


def _sources(store) -> dict[str, str]:
    return {doc.meta["source_id"]: doc.meta["source"] for doc in store.filter_documents()}


def test_folder_files_are_named_below_the_folder_and_a_file_by_its_name(corpus, tmp_path):
    single = tmp_path / "elsewhere" / "memo.txt"
    single.parent.mkdir()
    single.write_text("The memo says the office closes at six.")
    assert [label for _, label in expand_labelled_paths([corpus, single])] == [
        "halcyon.md", "policies/travel.txt", "memo.txt"]

    settings = Settings(data_dir=tmp_path / "data")
    runtime = Runtime(settings, document_store=build_document_store(settings))
    report = ingest_paths(runtime, [corpus, single], "acme", ["everyone"], embedder=CountingEmbedder())
    assert not report.failed
    sources = _sources(runtime.document_store)
    # The source id is the name citations show, so auditors ask about what they read.
    assert sources == {"halcyon.md": "halcyon.md", "policies/travel.txt": "policies/travel.txt", "memo.txt": "memo.txt"}
    citations = citations_from_documents(runtime.document_store.filter_documents())
    assert {c.source for c in citations} == {"halcyon.md", "policies/travel.txt", "memo.txt"}
    assert not any(str(tmp_path) in (c.source or "") for c in citations)
    # Re-ingesting the same folder finds everything unchanged: the readable name is stable.
    again = ingest_paths(runtime, [corpus], "acme", ["everyone"], embedder=CountingEmbedder())
    assert len(again.skipped) == 2


class _JobRuntime(Runtime):
    store = None

    def document_embedder(self):
        return CountingEmbedder()

    @property
    def document_store(self):
        return _JobRuntime.store


def test_jobs_name_server_paths_below_their_folder_and_uploads_by_file_name(corpus, tmp_path, monkeypatch):
    _JobRuntime.store = InMemoryDocumentStore()
    monkeypatch.setattr("docqa.runtime.Runtime", _JobRuntime)
    settings = Settings(data_dir=tmp_path / "data", chunk_words=20, chunk_overlap_words=5)
    job_id = submit_job(settings, tenant="acme", access=["everyone"], paths=[corpus],
                        uploads=[Upload("notes.md", b"# Notes\n\nUploaded notes.")])
    assert job_status(settings, job_id)["items_written"] == 3
    assert _sources(_JobRuntime.store) == {
        str(corpus / "halcyon.md"): "halcyon.md",
        str(corpus / "policies" / "travel.txt"): "policies/travel.txt",
        "notes.md": "notes.md",
    }
