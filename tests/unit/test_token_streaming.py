"""The answer streams token by token: SSE `token` events on /v1/query and chat.completion.chunk deltas on the
chat endpoint, as the OpenAI-compatible LLM server sends them (a real HTTP server streaming 32-character
pieces), read through the official openai client too; the result stays authoritative."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.utils import Secret

from docqa.token_stream import answer_streaming_callback, stream_answer_tokens
from tests.support.scripted_openai_server import MODEL, scripted_openai_server
from tests.support.server_app import auth, build_test_app

ANSWER = "The headquarters of Halcyon are in Oslo, by the harbour, since the company moved there in 1998."
PIECES = [ANSWER[i : i + 32] for i in range(0, len(ANSWER), 32)]


@pytest.fixture(scope="module")
def llm_url():
    with scripted_openai_server(mode="fixed", answer=ANSWER) as base_url:
        yield base_url


@pytest.fixture
def server(tmp_path, llm_url):
    generator = OpenAIChatGenerator(api_key=Secret.from_token("test"), model=MODEL, api_base_url=llm_url)
    app, keys = build_test_app(tmp_path, generator)
    with TestClient(app) as client:
        yield client, keys


def _sse(lines: list[str]) -> list[tuple[str, dict]]:
    events, kind = [], None
    for line in lines:
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[6:])))
    return events


def test_query_streams_the_answer_as_token_events_before_the_result(server):
    client, keys = server
    with client.stream("POST", "/v1/query", headers=auth(keys["alice"]), json={
            "question": "Where is Halcyon headquartered?", "pipeline": "no_retrieval", "stream": True}) as response:
        events = _sse(list(response.iter_lines()))
    kinds = [kind for kind, _ in events]
    tokens = [data for kind, data in events if kind == "token"]
    assert [t["text"] for t in tokens] == PIECES
    assert {t["call"] for t in tokens} == {1}
    assert kinds[0] == "selection" and kinds[-1] == "result"
    assert kinds.index("token") < kinds.index("result")
    assert events[-1][1]["answer"] == ANSWER


def test_a_query_that_does_not_stream_gets_no_tokens_and_the_same_answer(server):
    client, keys = server
    body = client.post("/v1/query", headers=auth(keys["alice"]), json={
        "question": "Where is Halcyon headquartered?", "pipeline": "no_retrieval"}).json()
    assert body["answer"] == ANSWER


def test_the_official_openai_client_receives_the_answer_token_by_token(server):
    from openai import OpenAI

    client, keys = server
    openai = OpenAI(base_url="http://testserver/v1", api_key=keys["alice"], http_client=client)
    stream = openai.chat.completions.create(model="no_retrieval", stream=True, messages=[
        {"role": "user", "content": "Where is Halcyon headquartered?"}])
    chunks = list(stream)
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    # The LLM server's own pieces, not the answer re-cut after the fact.
    assert deltas == PIECES
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["docqa"]["trace_id"]


def test_only_answer_calls_stream_and_only_while_someone_listens():
    assert answer_streaming_callback("answer") is None
    received: list[tuple[str, int]] = []
    with stream_answer_tokens(lambda text, call: received.append((text, call))):
        assert answer_streaming_callback("resp_judge") is None
        first, second = answer_streaming_callback("answer"), answer_streaming_callback("resp_generate")
        assert first is not None and second is not None
        first(type("Chunk", (), {"content": "Oslo"})())
        second(type("Chunk", (), {"content": ""})())
        second(type("Chunk", (), {"content": "Bergen"})())
    assert received == [("Oslo", 1), ("Bergen", 2)]
    assert answer_streaming_callback("answer") is None


def test_a_draft_the_final_answer_replaces_is_followed_by_the_final_answer(tmp_path):
    from openai import OpenAI

    # An echoing model: the streamed draft repeats the prompt, which the answer generator strips.
    with scripted_openai_server(mode="echo", answer="Oslo.") as base_url:
        generator = OpenAIChatGenerator(api_key=Secret.from_token("test"), model=MODEL, api_base_url=base_url)
        app, keys = build_test_app(tmp_path, generator)
        with TestClient(app) as client:
            openai = OpenAI(base_url="http://testserver/v1", api_key=keys["alice"], http_client=client)
            chunks = list(openai.chat.completions.create(model="standard", stream=True, messages=[
                {"role": "user", "content": "Where is Halcyon headquartered?"}]))
            final = client.post("/v1/query", headers=auth(keys["alice"]), json={
                "question": "Where is Halcyon headquartered?", "pipeline": "standard"}).json()
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    draft, _, after = text.partition("\n\n---\n")
    assert draft.startswith("Oslo.\n") and "Where is Halcyon headquartered?" in draft
    assert after and after.endswith(final["answer"]) and "Where is Halcyon" not in after
