from dataclasses import replace
from pathlib import Path

import pytest
from haystack import Document
from haystack.document_stores.in_memory import InMemoryDocumentStore

from docqa.conversion.chunking import chunk_id
from docqa.ingestion.pipeline import Source, ingest_documents, ingest_paths
from docqa.runtime import Runtime
from docqa.settings import Settings
from tests.support.ingestion_fakes import CountingEmbedder
from tests.support.sample_files import docx_bytes, html_bytes, pdf_bytes


def make_store(tmp_path: Path) -> object:
    try:
        from docqa.stores.factory import build_document_store
    except ImportError:
        return InMemoryDocumentStore()
    return build_document_store(Settings(data_dir=tmp_path))


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    settings = Settings(data_dir=tmp_path, chunk_words=20, chunk_overlap_words=5, max_file_bytes=100_000)
    return Runtime(settings, document_store=make_store(tmp_path))


@pytest.fixture
def embedder() -> CountingEmbedder:
    return CountingEmbedder()


def words(count: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(count))


def stored_for(runtime: Runtime, source_id: str) -> list[Document]:
    return [d for d in runtime.document_store.filter_documents() if d.meta["source_id"] == source_id]


class TestIngestPaths:
    def test_every_format_and_every_bad_input_in_one_run(self, runtime, embedder, tmp_path) -> None:
        files = {
            "a.txt": words(30).encode(),
            "b.md": b"# Travel\n\nBook economy class for flights under six hours.",
            "c.html": html_bytes("Expenses", ["Reports are due within 30 days of travel."]),
            "d.pdf": pdf_bytes(["Meals are reimbursed up to 60 euros per day."]),
            "e.docx": docx_bytes(["Hotels need a receipt."]),
            "corrupt.pdf": pdf_bytes(["cut short"])[:120],
            "empty.txt": b"",
            "sheet.xls": b"not supported",
            "big.txt": b"word " * 30_000,
        }
        for name, data in files.items():
            (tmp_path / name).write_bytes(data)
        explicit = [tmp_path / name for name in files]
        seen = []
        report = ingest_paths(runtime, explicit, "acme", ["group:hr"], embedder=embedder, progress=seen.append)

        status = {Path(item.source_id).name: item for item in report.items}
        assert {n for n, i in status.items() if i.status == "written"} == {"a.txt", "b.md", "c.html", "d.pdf",
                                                                           "e.docx"}
        assert status["corrupt.pdf"].code == "unreadable_file"
        assert status["empty.txt"].code == "unreadable_file"
        assert status["sheet.xls"].code == "unsupported_file"
        assert status["big.txt"].code == "file_too_large"
        assert all(i.reason and "\n" not in i.reason for i in report.failed)
        assert [i.source_id for i in seen] == [i.source_id for i in report.items]

        docs = runtime.document_store.filter_documents()
        assert {d.meta["source_id"] for d in docs} == {"a.txt", "b.md", "c.html", "d.pdf", "e.docx"}
        assert {d.meta["source_path"] for d in docs} == {str(tmp_path / n) for n in ("a.txt", "b.md", "c.html",
                                                                                     "d.pdf", "e.docx")}
        assert len(docs) == report.chunks_written == 6  # a.txt makes 2 chunks of 20 words with 5 overlapping
        assert all(d.meta["tenant"] == "acme" and d.meta["access"] == ["group:hr"] for d in docs)
        assert all(d.embedding is not None for d in docs)
        assert "Meals are reimbursed" in next(d.content for d in docs if d.meta["file_type"] == "pdf")

    def test_directory_expands_to_supported_files_only(self, runtime, embedder, tmp_path) -> None:
        folder = tmp_path / "docs"
        (folder / "sub").mkdir(parents=True)
        (folder / "one.txt").write_text("first document")
        (folder / "sub" / "two.md").write_text("second document")
        (folder / "archive.zip").write_bytes(b"PK\x05\x06")
        (folder / ".hidden.txt").write_text("hidden")
        report = ingest_paths(runtime, [folder], "acme", ["everyone"], embedder=embedder)
        assert sorted(Path(i.source_id).name for i in report.written) == ["one.txt", "two.md"]
        assert not report.failed


class TestReingestion:
    def test_unchanged_is_skipped_without_embedding(self, runtime, embedder, tmp_path) -> None:
        path = tmp_path / "doc.txt"
        path.write_text(words(40))
        first = ingest_paths(runtime, [path], "acme", ["everyone"], embedder=embedder)
        before = {d.id: d.meta["ingested_at"] for d in runtime.document_store.filter_documents()}
        embedded = len(embedder.embedded)

        again = ingest_paths(runtime, [path], "acme", ["everyone"], embedder=embedder)

        assert len(first.written) == 1
        assert [i.status for i in again.items] == ["skipped"]
        assert len(embedder.embedded) == embedded
        assert {d.id: d.meta["ingested_at"] for d in runtime.document_store.filter_documents()} == before

    def test_changed_is_updated_in_place_without_stale_chunks(self, runtime, embedder, tmp_path) -> None:
        path = tmp_path / "doc.txt"
        path.write_text(words(80, "old"))
        ingest_paths(runtime, [path], "acme", ["everyone"], embedder=embedder)
        assert len(stored_for(runtime, path.name)) == 5

        path.write_text(words(30, "new"))
        report = ingest_paths(runtime, [path], "acme", ["everyone"], embedder=embedder)

        chunks = stored_for(runtime, path.name)
        assert [i.status for i in report.items] == ["written"]
        assert sorted(d.id for d in chunks) == sorted(chunk_id("acme", path.name, i) for i in range(2))
        assert not any("old" in (d.content or "") for d in chunks)
        assert runtime.document_store.count_documents() == 2

    def test_changed_access_is_rewritten(self, runtime, embedder) -> None:
        source = Source(source_id="memo", name="memo.txt", text="quarterly numbers")
        ingest_documents(runtime, [source], "acme", ["group:finance"], embedder=embedder)
        report = ingest_documents(runtime, [source], "acme", ["group:board"], embedder=embedder)
        assert [i.status for i in report.items] == ["written"]
        assert stored_for(runtime, "memo")[0].meta["access"] == ["group:board"]

    def test_same_source_in_two_tenants_is_two_documents(self, runtime, embedder) -> None:
        source = Source(source_id="memo", name="memo.txt", text="shared wording")
        ingest_documents(runtime, [source], "acme", ["everyone"], embedder=embedder)
        report = ingest_documents(runtime, [source], "globex", ["everyone"], embedder=embedder)
        assert [i.status for i in report.items] == ["written"]
        assert sorted(d.meta["tenant"] for d in stored_for(runtime, "memo")) == ["acme", "globex"]


class TestAccessAndFailures:
    @pytest.mark.parametrize("access", [[], [""]])
    def test_missing_access_metadata_is_rejected_and_nothing_stored(self, runtime, embedder, access) -> None:
        report = ingest_documents(runtime, [Source("memo", "memo.txt", text="secret")], "acme", access,
                                  embedder=embedder)
        assert [i.code for i in report.items] == ["invalid_document"]
        assert "access-control metadata" in report.failed[0].reason
        assert runtime.document_store.count_documents() == 0

    def test_embedding_failure_fails_the_batch_and_writes_nothing(self, runtime) -> None:
        class BrokenEmbedder:
            def run(self, documents):
                raise RuntimeError("model exploded")

        report = ingest_documents(runtime, [Source("a", "a.txt", text="alpha"), Source("b", "b.txt", text="beta")],
                                  "acme", ["everyone"], embedder=BrokenEmbedder())
        assert [i.reason for i in report.items] == ["embedding failed: model exploded"] * 2
        assert runtime.document_store.count_documents() == 0

    def test_report_summary_and_dict(self, runtime, embedder) -> None:
        report = ingest_documents(runtime, [Source("a", "a.txt", text="alpha"), Source("b", "b.bin", data=b"x")],
                                  "acme", ["everyone"], embedder=embedder)
        assert report.summary().startswith("1 written (1 chunks), 0 unchanged, 1 failed")
        as_dict = report.to_dict()
        assert (as_dict["written"], as_dict["failed"]) == (1, 1)
        assert {i["source_id"]: i["code"] for i in as_dict["items"]} == {"a": None, "b": "unsupported_file"}

    def test_source_needs_exactly_one_payload(self) -> None:
        with pytest.raises(ValueError, match="exactly one"):
            Source("a", "a.txt", text="x", data=b"x")


class TestTopicTagging:
    def test_chunks_are_tagged_before_they_are_written(self, runtime, embedder) -> None:
        class Tagger:
            def run(self, documents):
                assert all(d.embedding is not None for d in documents)  # tags come from embeddings
                return {"documents": [replace(d, meta={**d.meta, "topic_id": 3}) for d in documents]}

        ingest_documents(runtime, [Source("a", "a.txt", text=words(30))], "acme", ["everyone"],
                         embedder=embedder, topic_assigner=Tagger())
        assert [d.meta["topic_id"] for d in stored_for(runtime, "a")] == [3, 3]

    def test_without_a_fitted_topic_model_chunks_pass_untagged(self, runtime, embedder) -> None:
        ingest_documents(runtime, [Source("a", "a.txt", text="alpha")], "acme", ["everyone"], embedder=embedder)
        assert "topic_id" not in stored_for(runtime, "a")[0].meta

    def test_a_failing_topic_model_fails_the_items_and_writes_nothing(self, runtime, embedder) -> None:
        class BrokenTagger:
            def run(self, documents):
                raise RuntimeError("model file truncated")

        report = ingest_documents(runtime, [Source("a", "a.txt", text="alpha")], "acme", ["everyone"],
                                  embedder=embedder, topic_assigner=BrokenTagger())
        assert [(i.code, i.reason) for i in report.items] == [
            ("topic_failed", "topic tagging failed: model file truncated")
        ]
        assert runtime.document_store.count_documents() == 0
