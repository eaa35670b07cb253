"""Feedback on answers through the API: the asker rates their own answer, auditors see it in the trace and the
export (whose lines still match their chain links), and approved answers export as an evaluation dataset."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from docqa.audit.canonical import canonical_bytes
from docqa.audit.chain import link_mac
from docqa.audit.keys import hmac_key
from docqa.audit.models import AuditTrace
from docqa.cli import main
from docqa.db import session_factory
from docqa.schema import downgrade_database, upgrade_database
from docqa.settings import Settings
from tests.support.audit import schema_differences
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app


@pytest.fixture
def server(tmp_path):
    llm = ScriptedChatGenerator(rules=[(r"capital", "Paris [1]."), (r"river", "The Seine.")], default="No idea.")
    app, keys = build_test_app(tmp_path, llm)
    with TestClient(app) as client:
        yield client, keys, tmp_path / "data"


def _ask(client: TestClient, key: str, question: str = "What is the capital of France?") -> str:
    response = client.post("/v1/query", headers=auth(key), json={"question": question, "pipeline": "no_retrieval"})
    assert response.status_code == 200
    return response.json()["trace_id"]


def _rate(client: TestClient, key: str, trace_id: str, **body: Any) -> Any:
    return client.post(f"/v1/traces/{trace_id}/feedback", headers=auth(key), json=body)


def test_the_asker_rates_their_answer_and_may_change_the_rating(server):
    client, keys, _ = server
    trace_id = _ask(client, keys["alice"])
    first = _rate(client, keys["alice"], trace_id, rating="down", comment="too short")
    assert first.status_code == 200
    assert first.json() | {"updated_at": None} == {"trace_id": trace_id, "user_id": "alice", "rating": "down",
                                                   "comment": "too short", "updated_at": None}
    again = _rate(client, keys["alice"], trace_id, rating="up")
    assert (again.json()["rating"], again.json()["comment"]) == ("up", None)
    trace = client.get(f"/v1/traces/{trace_id}", headers=auth(keys["audrey"])).json()
    assert [(f["user_id"], f["rating"]) for f in trace["feedback"]] == [("alice", "up")]


@pytest.mark.parametrize("user,status", [("bob", 404), ("zed", 404), ("root", 404), ("audrey", 403)])
def test_nobody_else_may_rate_an_answer(server, user, status):
    client, keys, _ = server
    trace_id = _ask(client, keys["alice"])
    response = _rate(client, keys[user], trace_id, rating="up")
    assert response.status_code == status
    assert client.get(f"/v1/traces/{trace_id}", headers=auth(keys["audrey"])).json()["feedback"] == []


def test_invalid_feedback_is_422_and_unknown_traces_404(server):
    client, keys, _ = server
    trace_id = _ask(client, keys["alice"])
    assert _rate(client, keys["alice"], trace_id, rating="meh").status_code == 422
    assert _rate(client, keys["alice"], trace_id, rating="up", comment="x" * 2001).status_code == 422
    assert _rate(client, keys["alice"], trace_id, rating="up", stars=5).status_code == 422
    assert _rate(client, keys["alice"], "no-such-trace", rating="up").status_code == 404


def test_the_export_carries_feedback_and_its_lines_still_match_the_chain(server):
    client, keys, data_dir = server
    rated, unrated = _ask(client, keys["alice"]), _ask(client, keys["bob"])
    _rate(client, keys["alice"], rated, rating="up", comment="exactly")
    lines = [json.loads(line) for line in
             client.get("/v1/traces/export", headers=auth(keys["audrey"])).text.splitlines()]
    by_id = {line["trace"]["id"]: line for line in lines}
    assert by_id[rated]["feedback"][0]["comment"] == "exactly" and "feedback" not in by_id[unrated]
    settings = Settings(data_dir=data_dir)
    with session_factory(settings)() as session:
        for line in lines:
            link = session.get(AuditTrace, line["trace"]["id"])
            payload = canonical_bytes(line["trace"])
            assert link_mac(hmac_key(settings), link.seq, link.prev_mac, payload) == line["proof"]["mac"] == link.mac


def test_approved_answers_export_as_an_evaluation_dataset(server, tmp_path, monkeypatch, capsys):
    client, keys, data_dir = server
    for user in ("alice", "bob"):
        _rate(client, keys[user], _ask(client, keys[user]), rating="up")
    _rate(client, keys["alice"], _ask(client, keys["alice"], "Which river runs through Paris?"), rating="down")
    _ask(client, keys["alice"], "Which river runs through Paris?")  # not rated
    zed = _ask(client, keys["zed"], "What is the capital of Italy?")
    _rate(client, keys["zed"], zed, rating="up")  # another tenant's

    monkeypatch.setenv("DOCQA_DATA_DIR", str(data_dir))
    out = tmp_path / "eval.jsonl"
    assert main(["feedback", "export", "--tenant", "acme", "--all", "--out", str(out)]) == 0
    examples = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(e["question"], e["golden_answers"], len(e["trace_ids"])) for e in examples] == [
        ("What is the capital of France?", ["Paris."], 2)]
    assert "1 questions with approved answers exported" in capsys.readouterr().err


def test_the_migration_matches_the_model_and_downgrades(tmp_path):
    settings = Settings(data_dir=tmp_path)
    url = settings.resolved_database_url()
    upgrade_database(settings)
    assert schema_differences(url) == []
    downgrade_database(settings, "0005_audit_events")
    assert schema_differences(url) != []
    upgrade_database(settings)
    assert schema_differences(url) == []
