"""Collections on HTTP uploads and ingestion jobs: the job records its collection (default `main`), its chunks are
written with it, and a name `DOCQA_MSPR_SOURCES` could not hold is refused before anything is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from docqa.access import AccessScope, collection_filter, restrict
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from tests.support.ingestion_fakes import CountingEmbedder
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app

ROOT_SCOPE = AccessScope("acme", frozenset({"everyone"}))


class JobRuntime(Runtime):
    """What in-process jobs build: the hash embedder, over one store the test can read."""

    store: Any = None

    def document_embedder(self):
        return CountingEmbedder()

    @property
    def document_store(self):
        return JobRuntime.store


@pytest.fixture
def server(tmp_path: Path, monkeypatch) -> tuple[TestClient, dict[str, str]]:
    # The embedded store, whose access filter matches list-valued `access` like the production stores do.
    JobRuntime.store = build_document_store(Settings(data_dir=tmp_path / "store"))
    # Jobs without a broker run in the request, on a runtime of their own (`docqa.ingestion.jobs.dispatch_items`).
    monkeypatch.setattr("docqa.runtime.Runtime", JobRuntime)
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="unused"), chunk_words=20,
                               chunk_overlap_words=5)
    with TestClient(app) as client:
        yield client, keys


def upload(client: TestClient, key: str, name: str, text: str, **form: str):
    return client.post("/v1/documents", headers=auth(key), files=[("files", (name, text.encode()))],
                       data={"access": ["everyone"], **form})


def sources_in(collection: str) -> set[str]:
    filters = restrict(ROOT_SCOPE, collection_filter(collection))
    return {doc.meta["source_id"] for doc in JobRuntime.store.filter_documents(filters=filters)}


def test_an_upload_goes_to_main_by_default_and_to_the_collection_it_names(server):
    client, keys = server
    plain = upload(client, keys["root"], "policy.txt", "Hotel costs are reimbursed up to 180 euros per night.")
    archived = upload(client, keys["root"], "old.txt", "In 2019 hotel costs were reimbursed up to 150 euros.",
                      collection="archive")
    assert (plain.status_code, archived.status_code) == (202, 202)

    jobs = [client.get(f"/v1/jobs/{r.json()['job_id']}", headers=auth(keys["root"])).json() for r in (plain, archived)]
    assert [(job["collection"], job["items_written"]) for job in jobs] == [("main", 1), ("archive", 1)]
    assert sources_in("main") == {"policy.txt"}
    assert sources_in("archive") == {"old.txt"}
    assert {doc.meta["collection"] for doc in JobRuntime.store.filter_documents()} == {"main", "archive"}


def test_uploading_the_same_file_to_another_collection_moves_it(server):
    client, keys = server
    text = "Hotel costs are reimbursed up to 180 euros per night."
    upload(client, keys["root"], "policy.txt", text)
    moved = upload(client, keys["root"], "policy.txt", text, collection="archive")
    job = client.get(f"/v1/jobs/{moved.json()['job_id']}", headers=auth(keys["root"])).json()
    assert job["items_written"] == 1
    assert (sources_in("main"), sources_in("archive")) == (set(), {"policy.txt"})


@pytest.mark.parametrize("name", ["main,web", "a b", "-x", "x" * 65, "web:x"])
def test_an_invalid_collection_name_is_422_and_nothing_is_stored(server, name):
    client, keys = server
    response = upload(client, keys["root"], "policy.txt", "Hotel costs.", collection=name)
    assert (response.status_code, response.json()["error"]["code"]) == (422, "invalid_collection")
    assert JobRuntime.store.count_documents() == 0


def test_jobs_submit_takes_a_collection(server, tmp_path, monkeypatch, capsys):
    from docqa.cli import main

    monkeypatch.setenv("DOCQA_DATA_DIR", str(tmp_path / "data"))  # the server's migrated database
    docs = tmp_path / "archive"
    docs.mkdir()
    (docs / "old.txt").write_text("In 2019 hotel costs were reimbursed up to 150 euros per night.")
    assert main(["jobs", "submit", str(docs), "--collection", "a,b", "--tenant", "acme", "-q"]) == 2
    assert "invalid collection name" in capsys.readouterr().err
    assert JobRuntime.store.count_documents() == 0
    assert main(["jobs", "submit", str(docs), "--collection", "archive", "--tenant", "acme", "-q"]) == 0
    assert sources_in("archive") == {str(docs / "old.txt")}
    assert sources_in("main") == set()
