"""Two promises of every question, re-tried against the deployed server (gunicorn, PostgreSQL when reachable, the
scripted LLM on loopback logging every prompt), with a budget of one LLM call per question:
- a secret pasted into a question is masked before anything stores, sends, shows or logs it;
- a run that exhausts its LLM budget after calls were made answers with what it gathered, never a 4xx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server_stack import ALL_MARKERS, QUESTION, Stack, readable_markers, server_stack

pytestmark = pytest.mark.integration

AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key id
MASK = "***"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("guarantees")


@pytest.fixture(scope="module")
def stack(workdir: Path) -> Iterator[Stack]:
    env = {"DOCQA_MAX_LLM_CALLS_PER_QUESTION": "1"}
    with server_stack(workdir, workers=1, extra_env=env, llm_calls_log=workdir / "llm_calls.jsonl") as running:
        yield running


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.base_url, timeout=120) as http:
        yield http


def test_a_pasted_key_reaches_no_model_conversation_step_trace_or_log(client, stack, workdir):
    key = stack.keys["bob"]
    secret = key.split("_", 2)[2]
    asked = client.post("/v1/query", headers=stack.auth("alice"), json={
        "question": f"{QUESTION} My key is {key} and {AWS_KEY_ID}.", "pipeline": "standard",
        "conversation_id": "new"})
    assert asked.status_code == 200, asked.text
    chat = client.post("/v1/chat/completions", headers=stack.auth("alice"), json={
        "model": "standard", "conversation_id": asked.json()["conversation_id"],
        "messages": [{"role": "user", "content": f"and what about {key}?"}]})
    assert chat.status_code == 200, chat.text

    sent = (workdir / "llm_calls.jsonl").read_text()
    assert QUESTION in sent and f"My key is {MASK} and {MASK}." in sent
    for text in (sent, asked.text, chat.text, (workdir / "gunicorn.log").read_text()):
        assert secret not in text and AWS_KEY_ID not in text
    assert f"My key is {MASK}" in json.dumps(asked.json()["steps"])

    stored = client.get(f"/v1/conversations/{asked.json()['conversation_id']}", headers=stack.auth("alice")).json()
    assert stored["title"] == f"{QUESTION} My key is {MASK} and {MASK}."
    assert [turn["question"] for turn in stored["turns"]] == [stored["title"], f"and what about {MASK}?"]
    assert secret not in json.dumps(stored)

    for trace_id in (asked.json()["trace_id"], chat.json()["docqa"]["trace_id"]):
        trace = client.get(f"/v1/traces/{trace_id}", headers=stack.auth("audrey")).json()
        assert MASK in trace["question"] and secret not in json.dumps(trace) and AWS_KEY_ID not in json.dumps(trace)
    assert client.get("/v1/traces", params={"text": secret}, headers=stack.auth("audrey")).json()["traces"] == []


@pytest.mark.parametrize("pipeline", ["resp", "mspr"])
def test_a_run_out_of_llm_budget_answers_with_what_it_found(client, stack, pipeline):
    response = client.post("/v1/query", headers=stack.auth("alice"), json={"question": QUESTION, "pipeline": pipeline})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["stop_reason"] == "llm_budget" and body["totals"]["llm_calls"] == 1
    assert body["answer_source"] == "extracted" and "budget" in body["answer_note"]
    assert body["citations"] and "code word" in body["answer"]
    assert {marker for marker in ALL_MARKERS if marker in body["answer"]} <= readable_markers("alice")
    trace = client.get(f"/v1/traces/{body['trace_id']}", headers=stack.auth("audrey")).json()
    assert (trace["status"], trace["stop_reason"]) == ("completed", "llm_budget")
    assert any(step["name"] == "llm_budget" for step in trace["steps"])


def test_one_call_is_all_standard_needs(client, stack):
    response = client.post("/v1/query", headers=stack.auth("alice"),
                           json={"question": QUESTION, "pipeline": "standard"})
    assert response.status_code == 200, response.text
    assert response.json()["stop_reason"] is None and response.json()["totals"]["llm_calls"] == 1
