"""Record answers over HTTP: the record table's rows in `citations[].record`, paging with `record_offset`, and
only the caller's tenant and groups."""

from __future__ import annotations

from pathlib import Path
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

AS_OF = "2020-06-01T00:00:00Z"


def _lab(record_id: str, day: str, value: float, tenant: str = "acme", access: str = "group:finance") -> Document:
    return Document(id=record_id, content=f"HbA1c {value} %", meta={
        "tenant": tenant, "access": [access], "patient_id": "p1", "record_type": "lab_result",
        "title": "Hemoglobin A1c/Hemoglobin.total in Blood", "code": "4548-4", "value": value, "unit": "%",
        "effective_start": day, "effective_start_utc": day, "source": f"bundle.json#Observation/{record_id}"})


@pytest.fixture
def server(tmp_path: Path) -> Any:
    settings = ServerSettings(data_dir=tmp_path / "data")
    upgrade_database(settings)
    keys = seed_accounts(settings, ACCOUNTS)
    runtime = Runtime(settings, chat_generator_factory=lambda _role: ScriptedChatGenerator(default="Answer: n/a"))
    runtime.document_store.write_documents([
        _lab("a1c-1", "2018-01-01T00:00:00Z", 5.4), _lab("a1c-2", "2019-01-01T00:00:00Z", 6.1),
        _lab("a1c-3", "2020-01-01T00:00:00Z", 7.0),
        _lab("other-tenant", "2019-06-01T00:00:00Z", 9.9, tenant="globex"),
        _lab("other-group", "2019-06-01T00:00:00Z", 9.8, access="group:hr"),
    ])
    with TestClient(create_app(settings, runtime=runtime)) as client:
        yield client, keys


def _ask(client: TestClient, key: str, **fields: Any) -> dict[str, Any]:
    response = client.post("/v1/query", headers=auth(key), json={
        "question": "HbA1c over the last three years", "pipeline": "atrag", "as_of": AS_OF, "patient_id": "p1",
        "options": {"max_scoped_records": 2, "max_iterations": 1}, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def _table(body: dict[str, Any]) -> dict[str, Any]:
    [step] = [s for s in body["steps"] if s["kind"] == "record_table"]
    return step["outputs"]["table"]


def test_citations_carry_the_record_rows_and_pages_follow(server: Any) -> None:
    client, keys = server
    first = _ask(client, keys["alice"])
    assert [c["document_id"] for c in first["citations"]] == ["a1c-2", "a1c-3"]
    assert first["citations"][1]["record"]["value"] == 7.0 and first["citations"][1]["record"]["unit"] == "%"
    assert first["steps"][-1]["kind"] == "grounding"  # the record answer is checked like any other
    table = _table(first)
    assert (table["total"], table["shown"], table["complete"]) == (3, 2, False)
    assert first["answer"].startswith("3 matching records")  # the model said nothing usable
    rest = _ask(client, keys["alice"], record_offset=2)
    assert [c["document_id"] for c in rest["citations"]] == ["a1c-1"]


def test_other_tenants_and_groups_stay_out(server: Any) -> None:
    client, keys = server
    bob = _ask(client, keys["bob"])  # same tenant, not in group:finance: nothing he may read, so no model call
    assert bob["citations"] == [] and bob["answer_source"] == "none" and bob["stop_reason"] == "no_readable_passage"
    assert bob["totals"]["llm_calls"] == 0
    zed = _ask(client, keys["zed"])  # another tenant
    assert zed["citations"] == []


def test_negative_record_offset_is_422(server: Any) -> None:
    client, keys = server
    response = client.post("/v1/query", headers=auth(keys["alice"]), json={
        "question": "HbA1c since 2015", "pipeline": "atrag", "patient_id": "p1", "record_offset": -1})
    assert response.status_code == 422, response.text


FHIR_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "records" / "synthea_fhir_r4"


def test_records_upload_reports_the_topic_model(tmp_path: Path) -> None:
    from docqa.topics import refit_topic_model, topic_model_status

    bundles = sorted(FHIR_DIR.glob("*.json"), key=lambda p: p.stat().st_size)
    if not bundles:
        pytest.skip(f"shared Synthea data not found at {FHIR_DIR}")
    settings = ServerSettings(data_dir=tmp_path / "data")
    upgrade_database(settings)
    keys = seed_accounts(settings, ACCOUNTS)
    runtime = Runtime(settings, chat_generator_factory=lambda _role: ScriptedChatGenerator(default="x"))
    with TestClient(create_app(settings, runtime=runtime)) as client:
        def upload() -> dict[str, Any]:
            response = client.post("/v1/records", headers=auth(keys["root"]), data={"access": ["group:finance"]},
                                   files=[("bundle", (bundles[0].name, bundles[0].read_bytes(), "application/json"))])
            assert response.status_code == 200, response.text
            return response.json()

        response = upload()
        first = response["topic_model"]
        # Written before the fit: no model yet, and the fit runs after the response.
        assert first["state"] == "missing" and "docqa topics refit --tenant acme" in first["message"]
        assert response["topic_refit"].startswith("topic model: fitting in the background (no topic model yet")
        assert topic_model_status(runtime, "acme").version == 1
        again = upload()  # the rewritten records are tagged with version 1; the corpus did not grow
        assert again["topic_refit"] is None
        assert (again["topic_model"]["state"], again["topic_model"]["version"],
                again["topic_model"]["untagged"]) == ("current", 1, 0)
        assert refit_topic_model(runtime, "acme").version == 2
    # A document written without the tags (another path, an older version) makes the model stale.
    runtime.document_store.write_documents([Document(id="untagged", content="memo", meta={
        "tenant": "acme", "access": ["everyone"]})])
    stale = topic_model_status(runtime, "acme")
    assert (stale.state, stale.untagged) == ("stale", 1) and "docqa topics refit" in stale.message()
