"""Conversations on /v1/chat/completions: the whole history is read, a follow-up becomes a standalone question
(deterministically), the rewrite is the trace's first step, and the scripted LLM sees the rewritten question."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from docqa.conversation import standalone_question
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app


@pytest.mark.parametrize("turns,question,method", [
    (["Where is Halcyon headquartered?", "and when was it founded?"], "When was Halcyon founded?",
     "referent_replaced"),
    (["Who founded Acme Corp?", "What are its products?"], "What are Acme Corp's products?", "referent_replaced"),
    (["Where is Halcyon headquartered?", "what about Globex?"], "Where is Globex headquartered?", "subject_swapped"),
    # The subject carries through several turns.
    (["Where is Halcyon headquartered?", "what about Globex?", "and when was it founded?"],
     "When was Globex founded?", "referent_replaced"),
    (["What is the hotel limit in major cities?", "and for meals?"],
     "For meals? (regarding: What is the hotel limit in major cities)", "previous_question_as_context"),
    (["Where is Halcyon headquartered?", "What is the mileage rate per kilometre?"],
     "What is the mileage rate per kilometre?", "standalone"),
    (["Where is Halcyon headquartered?", "Who founded Globex?"], "Who founded Globex?", "standalone"),
])
def test_standalone_questions(turns, question, method):
    rewrite = standalone_question(turns)
    assert (rewrite.question, rewrite.method) == (question, method)
    assert rewrite.original == turns[-1]
    assert rewrite.to_step().inputs["previous_questions"] == turns[:-1]


def test_a_conversation_needs_a_question():
    with pytest.raises(ValueError):
        standalone_question(["  "])


@pytest.fixture
def server(tmp_path):
    llm = ScriptedChatGenerator(rules=[(r"Halcyon founded", "In 1998."), (r"Halcyon", "In Oslo.")],
                                default="I do not know.")
    app, keys = build_test_app(tmp_path, llm)
    with TestClient(app) as client:
        yield client, keys, llm


HISTORY = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "Where is Halcyon headquartered?"},
    {"role": "assistant", "content": "In Oslo."},
    {"role": "user", "content": [{"type": "text", "text": "and when was it founded?"}]},
]


def test_the_follow_up_is_answered_as_a_standalone_question_and_the_rewrite_is_traced(server):
    client, keys, llm = server
    body = client.post("/v1/chat/completions", headers=auth(keys["alice"]),
                       json={"model": "no_retrieval", "messages": HISTORY}).json()
    assert body["choices"][0]["message"]["content"] == "In 1998."
    assert "When was Halcyon founded?" in llm.calls[-1]["prompt"]
    assert "and when was it founded?" not in llm.calls[-1]["prompt"]
    assert body["docqa"]["question"] == "When was Halcyon founded?"

    trace = client.get(f"/v1/traces/{body['docqa']['trace_id']}", headers=auth(keys["audrey"])).json()
    assert trace["question"] == "When was Halcyon founded?"
    first = trace["steps"][0]
    assert (first["kind"], first["name"]) == ("rewrite", "conversation_rewrite")
    assert first["inputs"] == {"question": "and when was it founded?",
                               "previous_questions": ["Where is Halcyon headquartered?"],
                               "history": [{"role": "user", "content": "Where is Halcyon headquartered?"},
                                           {"role": "assistant", "content": "In Oslo."}]}
    assert first["outputs"]["question"] == "When was Halcyon founded?"
    assert [s["kind"] for s in trace["steps"]] == ["rewrite", "generation", "prompt", "generation", "parse",
                                                   "grounding"]


def test_a_streamed_follow_up_is_rewritten_too(server):
    client, keys, _ = server
    with client.stream("POST", "/v1/chat/completions", headers=auth(keys["alice"]),
                       json={"model": "no_retrieval", "messages": HISTORY, "stream": True}) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events)
    assert text == "In 1998."
    assert events[-1]["docqa"]["question"] == "When was Halcyon founded?"


def test_a_single_turn_is_asked_as_is_without_a_rewrite_step(server):
    client, keys, _ = server
    body = client.post("/v1/chat/completions", headers=auth(keys["alice"]), json={
        "model": "no_retrieval", "messages": [{"role": "user", "content": "Where is Halcyon headquartered?"}]}).json()
    assert body["docqa"]["question"] == "Where is Halcyon headquartered?"
    trace = client.get(f"/v1/traces/{body['docqa']['trace_id']}", headers=auth(keys["audrey"])).json()
    assert [s["kind"] for s in trace["steps"]] == ["generation", "prompt", "generation", "parse", "grounding"]


def test_the_official_openai_client_resolves_the_follow_up(server):
    from openai import OpenAI

    client, keys, llm = server
    # TestClient is an httpx.Client: the official client talks to the in-process app through it.
    openai = OpenAI(base_url="http://testserver/v1", api_key=keys["alice"], http_client=client)
    messages: list = [{"role": "user", "content": "Where is Halcyon headquartered?"}]
    first = openai.chat.completions.create(model="no_retrieval", messages=messages)
    assert first.choices[0].message.content == "In Oslo."
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "and when was it founded?"}]
    second = openai.chat.completions.create(model="no_retrieval", messages=messages)
    assert second.choices[0].message.content == "In 1998."
    assert "When was Halcyon founded?" in llm.calls[-1]["prompt"]
    assert second.model_extra["docqa"]["question"] == "When was Halcyon founded?"
