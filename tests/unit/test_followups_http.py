"""Chat history over HTTP with a scripted LLM: a follow-up naming what the last answer named is asked as a
standalone question, the rewrite is the trace's first step with its method, and with DOCQA_CONVERSATION_REWRITE=llm
the model's rewrite is used when it keeps the referent and refused when it drops it."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app

HISTORY = [
    {"role": "user", "content": "Who leads Project Halcyon?"},
    {"role": "assistant", "content": "Dana Whitlock leads it."},
    {"role": "user", "content": "Where did that person work before?"},
]
REWRITE_PROMPT = r"Rewrite the user's last question"


def ask(tmp_path, rules, **settings):
    llm = ScriptedChatGenerator(rules=[*rules, (r"Dana Whitlock", "At Orbital Systems.")], default="I do not know.")
    app, keys = build_test_app(tmp_path, llm, **settings)
    with TestClient(app) as client:
        body = client.post("/v1/chat/completions", headers=auth(keys["alice"]),
                           json={"model": "no_retrieval", "messages": HISTORY}).json()
        trace = client.get(f"/v1/traces/{body['docqa']['trace_id']}", headers=auth(keys["audrey"])).json()
    return body, trace, llm


def test_a_follow_up_about_the_answer_is_asked_standalone(tmp_path) -> None:
    body, trace, llm = ask(tmp_path, [])
    assert body["docqa"]["question"] == "Where did Dana Whitlock work before?"
    assert body["choices"][0]["message"]["content"] == "At Orbital Systems."
    assert not any(REWRITE_PROMPT in call["prompt"] for call in llm.calls)  # the default asks no model
    rewrite = trace["steps"][0]
    assert rewrite["kind"] == "rewrite"
    assert rewrite["outputs"]["method"] == "referent_replaced"
    assert rewrite["inputs"]["history"][1] == {"role": "assistant", "content": "Dana Whitlock leads it."}
    assert rewrite["started_at"] > 0


@pytest.mark.parametrize(("reply", "method", "question"), [
    ({"question": "Where did Dana Whitlock work before joining Halcyon?"}, "llm",
     "Where did Dana Whitlock work before joining Halcyon?"),
    ({"question": "Where did Project Halcyon work before?"}, "referent_replaced",
     "Where did Dana Whitlock work before?"),
])
def test_a_model_rewrite_is_checked_against_the_referents(tmp_path, reply, method, question) -> None:
    body, trace, llm = ask(tmp_path, [(REWRITE_PROMPT, json.dumps(reply))], conversation_rewrite="llm")
    assert any(REWRITE_PROMPT in call["prompt"] for call in llm.calls)
    assert body["docqa"]["question"] == question
    assert trace["steps"][0]["outputs"]["method"] == method
    assert ("rejected_llm_rewrite" in trace["steps"][0]["outputs"]) == (method != "llm")
