"""Stored conversations through the API: /v1/query with conversation_id stores each turn with its trace id,
a follow-up is rewritten from the stored history, the owner lists, reopens and deletes them, nobody else can read
or continue one, and the retention setting purges old ones."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from docqa.cli import main
from docqa.conversations_store import Conversation
from docqa.db import session_factory
from docqa.schema import downgrade_database, upgrade_database
from docqa.settings import Settings
from tests.support.audit import schema_differences
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app


@pytest.fixture
def server(tmp_path):
    llm = ScriptedChatGenerator(rules=[(r"Halcyon founded", "In 1998."), (r"Halcyon", "In Oslo.")],
                                default="I do not know.")
    app, keys = build_test_app(tmp_path, llm, conversation_retention_days=30)
    with TestClient(app) as client:
        yield client, keys, llm, tmp_path / "data"


def _ask(client: TestClient, key: str, question: str, conversation_id: str | None = "new", **extra):
    body = {"question": question, "pipeline": "no_retrieval", "conversation_id": conversation_id, **extra}
    return client.post("/v1/query", headers=auth(key), json=body)


def test_a_stored_conversation_is_continued_with_a_rewritten_follow_up(server):
    client, keys, llm, _ = server
    first = _ask(client, keys["alice"], "Where is Halcyon headquartered?").json()
    conversation_id = first["conversation_id"]
    assert first["answer"] == "In Oslo." and conversation_id
    # The client sends only the follow-up: the history comes from the store.
    second = _ask(client, keys["alice"], "and when was it founded?", conversation_id).json()
    assert second["answer"] == "In 1998." and second["conversation_id"] == conversation_id
    assert "When was Halcyon founded?" in llm.calls[-1]["prompt"]
    # The rewrite opens the trace; the answer's node steps follow (its prompt, model call and parser are children).
    assert [s["kind"] for s in second["steps"] if s.get("parent") is None] == ["rewrite", "generation", "grounding"]

    reopened = client.get(f"/v1/conversations/{conversation_id}", headers=auth(keys["alice"])).json()
    assert reopened["title"] == "Where is Halcyon headquartered?"
    assert [(t["position"], t["question"], t["standalone_question"], t["answer"], t["trace_id"])
            for t in reopened["turns"]] == [
        (1, "Where is Halcyon headquartered?", "Where is Halcyon headquartered?", "In Oslo.", first["trace_id"]),
        (2, "and when was it founded?", "When was Halcyon founded?", "In 1998.", second["trace_id"]),
    ]
    trace = client.get(f"/v1/traces/{second['trace_id']}", headers=auth(keys["audrey"])).json()
    assert trace["question"] == "When was Halcyon founded?"


def test_a_query_without_conversation_id_stores_nothing(server):
    client, keys, _, _ = server
    body = _ask(client, keys["alice"], "Where is Halcyon headquartered?", None).json()
    assert body["conversation_id"] is None
    assert client.get("/v1/conversations", headers=auth(keys["alice"])).json() == {"conversations": []}


def test_owners_list_and_delete_their_conversations(server):
    client, keys, _, _ = server
    older = _ask(client, keys["alice"], "Where is Halcyon headquartered?").json()["conversation_id"]
    newer = _ask(client, keys["alice"], "Who founded Globex?").json()["conversation_id"]
    _ask(client, keys["bob"], "Where is Halcyon headquartered?")
    listed = client.get("/v1/conversations", headers=auth(keys["alice"])).json()["conversations"]
    assert [(c["id"], c["title"]) for c in listed] == [(newer, "Who founded Globex?"),
                                                       (older, "Where is Halcyon headquartered?")]
    assert client.delete(f"/v1/conversations/{older}", headers=auth(keys["alice"])).status_code == 204
    assert client.get(f"/v1/conversations/{older}", headers=auth(keys["alice"])).status_code == 404
    assert [c["id"] for c in client.get("/v1/conversations", headers=auth(keys["alice"])).json()
            ["conversations"]] == [newer]
    assert _ask(client, keys["alice"], "and when was it founded?", older).status_code == 404


@pytest.mark.parametrize("user,status", [("bob", 404), ("zed", 404), ("root", 404), ("audrey", 403)])
def test_nobody_else_reads_continues_or_deletes_a_conversation(server, user, status):
    client, keys, llm, _ = server
    conversation_id = _ask(client, keys["alice"], "Where is Halcyon headquartered?").json()["conversation_id"]
    calls = len(llm.calls)
    assert client.get(f"/v1/conversations/{conversation_id}", headers=auth(keys[user])).status_code == status
    assert _ask(client, keys[user], "and when was it founded?", conversation_id).status_code == status
    assert client.delete(f"/v1/conversations/{conversation_id}", headers=auth(keys[user])).status_code == status
    listed = client.get("/v1/conversations", headers=auth(keys[user]))
    assert listed.status_code == status or listed.json() == {"conversations": []}
    assert len(llm.calls) == calls  # the refused follow-up never reached the model
    turns = client.get(f"/v1/conversations/{conversation_id}", headers=auth(keys["alice"])).json()["turns"]
    assert len(turns) == 1


def test_a_streamed_answer_is_stored_too(server):
    client, keys, _, _ = server
    with client.stream("POST", "/v1/query", headers=auth(keys["alice"]), json={
            "question": "Where is Halcyon headquartered?", "pipeline": "no_retrieval", "conversation_id": "new",
            "stream": True}) as response:
        lines = list(response.iter_lines())
    result = next(json.loads(line[6:]) for i, line in enumerate(lines)
                  if line.startswith("data: ") and lines[i - 1] == "event: result")
    stored = client.get(f"/v1/conversations/{result['conversation_id']}", headers=auth(keys["alice"])).json()
    assert [t["trace_id"] for t in stored["turns"]] == [result["trace_id"]]


def _age(data_dir, conversation_id: str, days: int) -> None:
    with session_factory(Settings(data_dir=data_dir))() as session:
        session.execute(update(Conversation).where(Conversation.id == conversation_id)
                        .values(updated_at=datetime.now(UTC) - timedelta(days=days)))
        session.commit()


def test_conversations_past_the_retention_period_are_gone(server, monkeypatch, capsys):
    client, keys, _, data_dir = server
    old = _ask(client, keys["alice"], "Where is Halcyon headquartered?").json()["conversation_id"]
    kept = _ask(client, keys["alice"], "Who founded Globex?").json()["conversation_id"]
    _age(data_dir, old, 31)
    _age(data_dir, kept, 29)
    assert client.get(f"/v1/conversations/{old}", headers=auth(keys["alice"])).status_code == 404
    assert _ask(client, keys["alice"], "and when was it founded?", old).status_code == 404

    monkeypatch.setenv("DOCQA_DATA_DIR", str(data_dir))
    monkeypatch.setenv("DOCQA_CONVERSATION_RETENTION_DAYS", "30")
    assert main(["conversations", "purge"]) == 0
    assert "1 conversations untouched for more than 30 days deleted" in capsys.readouterr().out
    with session_factory(Settings(data_dir=data_dir))() as session:
        assert [c.id for c in session.query(Conversation)] == [kept]


def test_the_migration_matches_the_model_and_downgrades(tmp_path):
    settings = Settings(data_dir=tmp_path)
    url = settings.resolved_database_url()
    upgrade_database(settings)
    assert schema_differences(url) == []
    downgrade_database(settings, "0006_answer_feedback")
    assert schema_differences(url) != []
    upgrade_database(settings)
    assert schema_differences(url) == []


def test_a_streamed_follow_up_shows_its_rewrite_as_the_first_step_event(server):
    client, keys, _, _ = server
    conversation_id = _ask(client, keys["alice"], "Where is Halcyon headquartered?").json()["conversation_id"]
    with client.stream("POST", "/v1/query", headers=auth(keys["alice"]), json={
            "question": "and when was it founded?", "pipeline": "no_retrieval", "conversation_id": conversation_id,
            "stream": True}) as response:
        lines = list(response.iter_lines())
    steps = [json.loads(line[6:]) for i, line in enumerate(lines) if line.startswith("data: ")
             and lines[i - 1] == "event: step"]
    assert [s["kind"] for s in steps if s.get("parent") is None] == ["rewrite", "generation", "grounding"]
    assert steps[0]["outputs"]["question"] == "When was Halcyon founded?"


def test_a_reopened_turn_citing_a_document_the_owner_can_no_longer_read_is_withheld(server):
    from haystack import Document
    from haystack.document_stores.types import DuplicatePolicy

    from docqa.conversations_store import append_turn, load_conversation

    client, keys, _, data_dir = server
    store = client.app.state.context.runtime.document_store

    def doc(doc_id: str, access: list[str]) -> Document:
        return Document(id=doc_id, content=f"Secret {doc_id}.", meta={"tenant": "acme", "access": access})

    store.write_documents([doc("plan", ["group:finance"]), doc("memo", ["everyone"]), doc("gone", ["everyone"])])
    conversation_id = _ask(client, keys["alice"], "Where is Halcyon headquartered?").json()["conversation_id"]
    with session_factory(Settings(data_dir=data_dir))() as session:
        conversation = load_conversation(session, "acme", "alice", conversation_id)
        for answer, cited in [("Plan says X [1]; memo says Y [2].", ["plan", "memo"]), ("Memo: Y [1].", ["memo"]),
                              ("Gone says Z [1].", ["gone"]), ("The web says W [1].", ["web-1f2e"])]:
            append_turn(session, conversation, question="q", standalone="q", answer=answer,
                        citations=[{"document_id": d, "snippet": f"Secret {d}.",
                                    "source": "web" if d.startswith("web-") else f"{d}.md"} for d in cited])
        session.commit()

    def reopened() -> list[tuple[str, list[str], bool]]:
        body = client.get(f"/v1/conversations/{conversation_id}", headers=auth(keys["alice"])).json()
        return [(t["answer"], [c["document_id"] for c in t["citations"]], t["withheld"]) for t in body["turns"]]

    everything = [("In Oslo.", [], False), ("Plan says X [1]; memo says Y [2].", ["plan", "memo"], False),
                  ("Memo: Y [1].", ["memo"], False), ("Gone says Z [1].", ["gone"], False),
                  ("The web says W [1].", ["web-1f2e"], False)]
    assert reopened() == everything
    # The plan's access list no longer names alice's group, and one cited document is deleted; a public web page
    # an answer cited (never in the store) stays shown.
    store.write_documents([doc("plan", ["group:hr"])], policy=DuplicatePolicy.OVERWRITE)
    store.delete_documents(["gone"])
    assert reopened() == [("In Oslo.", [], False), ("", ["memo"], True), ("Memo: Y [1].", ["memo"], False),
                          ("", [], True), everything[4]]
    # Access given back: the stored answer shows again (nothing was deleted from the conversation).
    store.write_documents([doc("plan", ["user:alice"])], policy=DuplicatePolicy.OVERWRITE)
    assert reopened()[1] == everything[1]


def test_the_chat_endpoint_continues_a_stored_conversation_through_the_openai_client(server):
    import openai as openai_module
    from openai import OpenAI

    client, keys, llm, _ = server
    alice = OpenAI(base_url="http://testserver/v1", api_key=keys["alice"], http_client=client)
    first = alice.chat.completions.create(model="no_retrieval", extra_body={"conversation_id": "new"},
                                          messages=[{"role": "user", "content": "Where is Halcyon headquartered?"}])
    conversation_id = first.model_extra["docqa"]["conversation_id"]
    assert first.choices[0].message.content == "In Oslo." and conversation_id
    # Only the follow-up is sent: the history is the stored conversation's, as on /v1/query.
    chunks = list(alice.chat.completions.create(
        model="no_retrieval", stream=True, extra_body={"conversation_id": conversation_id},
        messages=[{"role": "user", "content": "and when was it founded?"}]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "In 1998."
    assert "When was Halcyon founded?" in llm.calls[-1]["prompt"]
    last = chunks[-1].model_extra["docqa"]
    assert (last["conversation_id"], last["question"]) == (conversation_id, "When was Halcyon founded?")
    # Stored like any turn: /v1/query continues the same conversation, and it reopens with both turns.
    third = _ask(client, keys["alice"], "Where is Halcyon headquartered?", conversation_id).json()
    assert third["conversation_id"] == conversation_id
    turns = client.get(f"/v1/conversations/{conversation_id}", headers=auth(keys["alice"])).json()["turns"]
    assert [(t["question"], t["answer"]) for t in turns] == [
        ("Where is Halcyon headquartered?", "In Oslo."), ("and when was it founded?", "In 1998."),
        ("Where is Halcyon headquartered?", "In Oslo.")]
    # A chat without conversation_id stores nothing and says so.
    plain = alice.chat.completions.create(model="no_retrieval", messages=[{"role": "user", "content": "Hi?"}])
    assert plain.model_extra["docqa"]["conversation_id"] is None

    calls = len(llm.calls)
    for user in ("bob", "zed"):
        other = OpenAI(base_url="http://testserver/v1", api_key=keys[user], http_client=client, max_retries=0)
        with pytest.raises(openai_module.NotFoundError):
            other.chat.completions.create(model="no_retrieval", extra_body={"conversation_id": conversation_id},
                                          messages=[{"role": "user", "content": "and when was it founded?"}])
    assert len(llm.calls) == calls
    assert len(client.get(f"/v1/conversations/{conversation_id}", headers=auth(keys["alice"])).json()["turns"]) == 3
