"""Jobs API in the embedded mode (no broker: items run in-process), SQLite under tmp_path."""

from pathlib import Path

import pytest
from haystack.document_stores.in_memory import InMemoryDocumentStore
from sqlalchemy import select

from docqa.errors import DocqaError
from docqa.ingestion import jobs as jobs_module
from docqa.ingestion import processing
from docqa.ingestion.database import job_sessions
from docqa.ingestion.jobs import JobNotFoundError, Upload, delete_document, job_status, resume_job, submit_job
from docqa.ingestion.models import (
    ITEM_RUNNING,
    IngestItem,
    IngestPayload,
    InvalidTransitionError,
)
from docqa.ingestion.processing import process_items
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa_eval.datasets import shared_data_dir
from tests.support.ingestion_fakes import CountingEmbedder
from tests.support.sample_files import pdf_bytes


class WorkerKilled(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


class FakeRuntime(Runtime):
    """A runtime whose embedder is the hash embedder, over one store shared by every instance in a test."""

    store = None

    def document_embedder(self):
        return CountingEmbedder()

    @property
    def document_store(self):
        return FakeRuntime.store


@pytest.fixture
def settings(tmp_path: Path, monkeypatch) -> Settings:
    FakeRuntime.store = InMemoryDocumentStore()
    monkeypatch.setattr("docqa.runtime.Runtime", FakeRuntime)
    return Settings(data_dir=tmp_path, chunk_words=20, chunk_overlap_words=5, max_file_bytes=10_000,
                    ingest_items_per_task=2)


def uploads() -> list[Upload]:
    return [
        Upload("a.txt", b"alpha " * 30),
        Upload("b.md", b"# Beta\n\nbeta text"),
        Upload("c.pdf", pdf_bytes(["gamma in a pdf"])),
        Upload("corrupt.pdf", pdf_bytes(["cut"])[:100]),
        Upload("empty.txt", b""),
        Upload("sheet.xls", b"cells"),
        Upload("big.txt", b"x " * 6000),
    ]


class TestSubmitJob:
    def test_job_completes_with_per_item_reasons(self, settings) -> None:
        job_id = submit_job(settings, tenant="acme", access=["group:hr"], uploads=uploads())
        status = job_status(settings, job_id)
        assert status["status"] == "completed_with_errors"
        assert (status["items_total"], status["items_done"]) == (7, 7)
        assert (status["items_written"], status["items_failed"]) == (3, 4)
        assert status["chunks_written"] == 4
        assert {f["source_id"]: f["code"] for f in status["failures"]} == {
            "corrupt.pdf": "unreadable_file",
            "empty.txt": "unreadable_file",
            "sheet.xls": "unsupported_file",
            "big.txt": "file_too_large",
        }
        assert all(f["reason"] for f in status["failures"])
        with job_sessions(settings)() as session:
            assert session.scalars(select(IngestPayload)).all() == []
        docs = FakeRuntime.store.filter_documents()
        assert len(docs) == 4
        assert {d.meta["tenant"] for d in docs} == {"acme"}
        assert {d.meta["ingest_job"] for d in docs} == {job_id}

    def test_resubmit_unchanged_is_skipped_and_changed_is_updated(self, settings) -> None:
        submit_job(settings, tenant="acme", access=["everyone"], uploads=[Upload("a.txt", b"one " * 50)])
        again = submit_job(settings, tenant="acme", access=["everyone"], uploads=[Upload("a.txt", b"one " * 50)])
        assert job_status(settings, again)["items_skipped"] == 1
        changed = submit_job(settings, tenant="acme", access=["everyone"], uploads=[Upload("a.txt", b"two " * 10)])
        assert job_status(settings, changed)["items_written"] == 1
        docs = FakeRuntime.store.filter_documents()
        assert len(docs) == 1
        assert docs[0].content.startswith("two")

    def test_paths_are_read_at_submit(self, settings, tmp_path) -> None:
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "one.txt").write_text("from a file")
        job_id = submit_job(settings, tenant="acme", access=["everyone"], paths=[tmp_path / "docs"])
        assert job_status(settings, job_id)["items_written"] == 1
        assert FakeRuntime.store.filter_documents()[0].meta["source_id"] == str(tmp_path / "docs" / "one.txt")

    @pytest.mark.parametrize(("tenant", "access"), [("acme", []), ("", ["everyone"])])
    def test_job_without_access_metadata_is_refused(self, settings, tenant, access) -> None:
        with pytest.raises(DocqaError, match="access-control metadata"):
            submit_job(settings, tenant=tenant, access=access, uploads=[Upload("a.txt", b"text")])
        assert FakeRuntime.store.count_documents() == 0

    def test_unknown_job(self, settings) -> None:
        with pytest.raises(JobNotFoundError):
            job_status(settings, "no-such-job")

    def test_delete_document(self, settings) -> None:
        submit_job(settings, tenant="acme", access=["everyone"], uploads=[Upload("a.txt", b"w " * 50)])
        submit_job(settings, tenant="globex", access=["everyone"], uploads=[Upload("a.txt", b"w " * 50)])
        assert delete_document(FakeRuntime(settings), "acme", "a.txt") == 3
        assert [d.meta["tenant"] for d in FakeRuntime.store.filter_documents()] == ["globex"] * 3
        assert delete_document(FakeRuntime(settings), "acme", "a.txt") == 0


class TestCrashRecovery:
    def test_interrupted_item_is_resumed_and_counted_once(self, settings, monkeypatch) -> None:
        monkeypatch.setattr(jobs_module, "dispatch_items", lambda *args: None)  # submit without running
        job_id = submit_job(settings, tenant="acme", access=["everyone"],
                            uploads=[Upload("a.txt", b"a " * 30), Upload("b.txt", b"b " * 30)])
        runtime = FakeRuntime(settings)
        real_ingest = processing.ingest_documents

        def write_then_die(*args, **kwargs):
            real_ingest(*args, **kwargs)
            raise WorkerKilled

        monkeypatch.setattr(processing, "ingest_documents", write_then_die)
        with pytest.raises(WorkerKilled):  # the chunks are written, the outcome never recorded
            process_items(settings, _item_ids(settings, job_id), runtime=runtime,
                          embedder=runtime.document_embedder())
        assert job_status(settings, job_id)["items_running"] == 2
        monkeypatch.undo()
        monkeypatch.setattr("docqa.runtime.Runtime", FakeRuntime)

        assert resume_job(settings, job_id) == 2

        status = job_status(settings, job_id)
        assert (status["status"], status["items_written"], status["chunks_written"]) == ("succeeded", 2, 4)
        assert FakeRuntime.store.count_documents() == 4

    def test_item_that_keeps_killing_the_worker_fails_after_max_attempts(self, settings, monkeypatch) -> None:
        monkeypatch.setattr(jobs_module, "dispatch_items", lambda *args: None)
        job_id = submit_job(settings, tenant="acme", access=["everyone"],
                            uploads=[Upload("ok.txt", b"fine " * 5), Upload("poison.txt", b"bad " * 5)])
        ids = _item_ids(settings, job_id)
        with job_sessions(settings).begin() as session:
            poison = session.scalars(select(IngestItem).where(IngestItem.name == "poison.txt")).one()
            poison.status, poison.attempts = ITEM_RUNNING, settings.ingest_max_attempts
        runtime = FakeRuntime(settings)
        process_items(settings, ids, runtime=runtime, embedder=runtime.document_embedder())
        status = job_status(settings, job_id)
        assert status["items_written"] == 1
        assert status["failures"][0]["code"] == "gave_up"
        assert status["status"] == "completed_with_errors"

    @pytest.mark.parametrize(("attempts", "crashes", "expected"), [
        (0, 0, None),
        (9, 0, None),  # nine deploys or node kills in a row say nothing about the file
        (9, 2, None),
        (3, 3, "gave_up"),  # its process died under it three times while the worker ran on
        (5, 3, "gave_up"),
        (10, 0, "interrupted"),  # but never an endless loop of whole-worker kills
        (12, 2, "interrupted"),
    ])
    def test_on_a_queue_only_deaths_of_the_items_own_process_count(self, settings, attempts, crashes,
                                                                     expected) -> None:
        queued = settings.model_copy(update={"broker_url": "redis://127.0.0.1:6379/0"})
        verdict = processing.give_up_reason(attempts, crashes, queued)
        assert (verdict[0] if verdict else None) == expected
        if verdict:
            assert f"after {attempts} attempts" in verdict[1]
            assert ("died 3 times" if expected == "gave_up" else f"stopped {attempts - crashes} times") in verdict[1]

    def test_in_process_every_unfinished_attempt_counts(self, settings) -> None:
        assert processing.give_up_reason(2, 0, settings) is None
        assert processing.give_up_reason(3, 0, settings)[0] == "gave_up"

    def test_crash_recorded_by_the_main_process_fails_the_item_and_worker_kills_do_not(self, settings,
                                                                                       monkeypatch) -> None:
        monkeypatch.setattr(jobs_module, "dispatch_items", lambda *args: None)
        queued = settings.model_copy(update={"broker_url": "redis://127.0.0.1:6379/0"})
        job_id = submit_job(queued, tenant="acme", access=["everyone"], uploads=[
            Upload("killed-with-its-worker.txt", b"fine " * 5), Upload("poison.txt", b"bad " * 5),
            Upload("other-worker.txt", b"other " * 5)])
        ids = _item_ids(settings, job_id)
        dead_child = processing.worker_name(424242)
        with job_sessions(settings).begin() as session:
            items = {item.name: item for item in session.scalars(select(IngestItem).where(IngestItem.job_id == job_id))}
            # Eight attempts cut short by kills of the whole worker: no main process was left to record anything.
            items["killed-with-its-worker.txt"].move_to(ITEM_RUNNING, attempts=8, worker=processing.worker_name(7))
            items["poison.txt"].move_to(ITEM_RUNNING, attempts=3, worker=dead_child)
            items["other-worker.txt"].move_to(ITEM_RUNNING, attempts=1, worker="elsewhere:424242")
        for _ in range(settings.ingest_max_attempts):  # what the surviving main process records per child death
            assert processing.record_child_death(queued, ids, dead_child) == [items["poison.txt"].id]
        runtime = FakeRuntime(settings)
        process_items(queued, ids, runtime=runtime, embedder=runtime.document_embedder())

        status = job_status(settings, job_id)
        assert (status["status"], status["items_written"]) == ("completed_with_errors", 2)
        assert [(f["source_id"], f["code"]) for f in status["failures"]] == [("poison.txt", "gave_up")]
        assert "died 3 times" in status["failures"][0]["reason"]

    def test_finished_items_cannot_change_state(self, settings) -> None:
        job_id = submit_job(settings, tenant="acme", access=["everyone"], uploads=[Upload("a.txt", b"a b")])
        with job_sessions(settings)() as session:
            item = session.scalars(select(IngestItem).where(IngestItem.job_id == job_id)).one()
            with pytest.raises(InvalidTransitionError):
                item.move_to(ITEM_RUNNING)


def _item_ids(settings: Settings, job_id: str) -> list[int]:
    with job_sessions(settings)() as session:
        return list(session.scalars(select(IngestItem.id).where(IngestItem.job_id == job_id)).all())


class TestJobsCommands:
    def test_submit_status_delete(self, settings, tmp_path, monkeypatch, capsys) -> None:
        from docqa.cli import main

        monkeypatch.setenv("DOCQA_DATA_DIR", str(tmp_path))
        (tmp_path / "ok.txt").write_text("expense reports are due within 30 days")
        (tmp_path / "empty.txt").write_text("")

        assert main(["jobs", "submit", "-q", str(tmp_path / "ok.txt"), str(tmp_path / "empty.txt")]) == 1
        out, err = capsys.readouterr()
        job_id = out.splitlines()[0]
        assert "1 written (1 chunks)" in out
        assert f"failed: {tmp_path / 'empty.txt'}: file is empty" in err

        assert main(["jobs", "status", job_id, "--json"]) == 0
        assert '"status": "completed_with_errors"' in capsys.readouterr().out

        assert main(["jobs", "delete", str(tmp_path / "ok.txt"), "--tenant", "default"]) == 0
        assert FakeRuntime.store.count_documents() == 0
        assert main(["jobs", "delete", str(tmp_path / "ok.txt")]) == 2

    def test_worker_needs_a_broker(self, settings, tmp_path, monkeypatch, capsys) -> None:
        from docqa.cli import main

        monkeypatch.setenv("DOCQA_DATA_DIR", str(tmp_path))
        monkeypatch.delenv("DOCQA_BROKER_URL", raising=False)
        assert main(["worker"]) == 2
        assert "needs DOCQA_BROKER_URL" in capsys.readouterr().err


class TestRecordBundles:
    def test_fhir_bundle_is_one_item_with_one_document_per_record(self, settings) -> None:
        bundles = sorted((shared_data_dir() / "records" / "synthea_fhir_r4").glob("*.json"))
        if not bundles:
            pytest.skip("FHIR bundles not found in ../shared/data/records/synthea_fhir_r4")
        data = bundles[0].read_bytes()
        big_enough = settings.model_copy(update={"max_file_bytes": len(data) + 1})
        job_id = submit_job(big_enough, tenant="acme", access=["group:care"], uploads=[
            Upload("patient.json", data), Upload("broken.json", b"{not json"), Upload("other.json", b"[]"),
        ])
        status = job_status(big_enough, job_id)
        assert status["items_written"] == 1
        assert {f["source_id"]: f["code"] for f in status["failures"]} == {
            "broken.json": "unreadable_file", "other.json": "unreadable_file"}
        docs = FakeRuntime.store.filter_documents()
        assert len(docs) == status["chunks_written"] > 10
        assert len({d.meta["patient_id"] for d in docs}) == 1
        assert all(d.meta["access"] == ["group:care"] and d.embedding is not None for d in docs)
        # The tenant had no topic model: one was fitted once the job was done, and the records carry its tags.
        from docqa.topics import topic_model_status

        topics = topic_model_status(FakeRuntime(big_enough), "acme")
        assert (topics.state, topics.version, topics.fitted_on) == ("current", 1, len(docs))
