"""A strategy's runtime inputs over HTTP (AT-RAG's `as_of` and `patient_id`), validated by the strategy's own
typed inputs: top-level fields of `/v1/query`, extra body fields of `/v1/chat/completions`."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from haystack import Document

from docqa.runtime import Runtime
from docqa.schema import upgrade_database
from docqa.server.app import create_app
from docqa.server.config import ServerSettings
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import ACCOUNTS, auth, seed_accounts

AS_OF = "2013-12-01T00:00:00Z"


@pytest.fixture
def server(tmp_path) -> tuple[TestClient, dict[str, str]]:
    settings = ServerSettings(data_dir=tmp_path / "data")
    upgrade_database(settings)
    keys = seed_accounts(settings, ACCOUNTS)
    chat = ScriptedChatGenerator(default="Nothing recorded.")
    runtime = Runtime(settings, chat_generator_factory=lambda _role: chat)
    # One record alice may read: with nothing readable the question is answered before any strategy runs.
    runtime.document_store.write_documents([Document(id="lab-1", content="HbA1c 6.1 %", meta={
        "tenant": "acme", "access": ["group:finance"], "patient_id": "patient-7", "record_type": "lab_result",
        "effective_start": "2013-06-01T00:00:00Z", "effective_start_utc": "2013-06-01T00:00:00Z"})])
    with TestClient(create_app(settings, runtime=runtime)) as client:
        yield client, keys


def time_scope_inputs(body: dict[str, Any]) -> dict[str, Any]:
    [step] = [s for s in body["steps"] if s["kind"] == "time_scope"]
    return step["inputs"]


def test_atrag_receives_as_of_and_patient_through_query(server):
    client, keys = server
    response = client.post("/v1/query", headers=auth(keys["alice"]), json={
        "question": "Which lab results were abnormal in the last year?", "pipeline": "atrag",
        "as_of": AS_OF, "patient_id": "patient-7"})
    assert response.status_code == 200, response.text
    inputs = time_scope_inputs(response.json())
    # The resolver also records the access filters its lookups run under: the caller's tenant, never the request's.
    filters = inputs.pop("filters")
    assert inputs == {
        "question": "Which lab results were abnormal in the last year?", "as_of": AS_OF, "patient_id": "patient-7"}
    assert filters["conditions"][0] == {"field": "meta.tenant", "operator": "==", "value": "acme"}


def test_atrag_receives_as_of_through_chat_completions(server):
    client, keys = server
    response = client.post("/v1/chat/completions", headers=auth(keys["alice"]), json={
        "model": "atrag", "messages": [{"role": "user", "content": "Medications since 2012?"}],
        "as_of": AS_OF, "patient_id": "patient-7", "temperature": 0.2})
    assert response.status_code == 200, response.text
    assert response.json()["docqa"]["trace_id"]


@pytest.mark.parametrize(("pipeline", "fields", "fragment"), [
    ("standard", {"as_of": AS_OF}, "as_of: not taken by this pipeline"),
    ("no_retrieval", {"patient_id": "p"}, "patient_id: not taken by this pipeline"),
    ("atrag", {"as_of": "last tuesday"}, "as_of must be an ISO date"),
    ("atrag", {"patient_id": ""}, "patient_id"),
])
def test_inputs_a_strategy_does_not_take_or_cannot_read_are_422(server, pipeline, fields, fragment):
    client, keys = server
    response = client.post("/v1/query", headers=auth(keys["alice"]),
                           json={"question": "Labs?", "pipeline": pipeline, **fields})
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "invalid_options"
    assert fragment in response.json()["error"]["message"]
