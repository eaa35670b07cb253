"""The answer streams token by token as SSE `token` events on /v1/query, without the prompt echoes the final text
drops, from a real OpenAI-compatible HTTP server streaming 32-character pieces; the chat endpoint's deltas, read
through the official openai client, concatenate to exactly the final message; the result stays authoritative."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.utils import Secret

from docqa.llm.calls import strip_prompt_echo
from docqa.token_stream import HOLD_CHARS, EchoHoldback, answer_streaming_callback, stream_answer_tokens
from tests.support.scripted_openai_server import MODEL, scripted_openai_server
from tests.support.server_app import auth, build_test_app

QUESTION = "Where is Halcyon headquartered?"
ANSWER = ("The headquarters of Halcyon are in Oslo, by the harbour, since the company moved there from Bergen "
          "to be closer to its shipping customers and the ministries it works with every week.")


@pytest.fixture(scope="module")
def llm_url():
    with scripted_openai_server(mode="fixed", answer=ANSWER) as base_url:
        yield base_url


def _client(tmp_path, base_url):
    generator = OpenAIChatGenerator(api_key=Secret.from_token("test"), model=MODEL, api_base_url=base_url)
    app, keys = build_test_app(tmp_path, generator)
    return TestClient(app), keys


@pytest.fixture
def server(tmp_path, llm_url):
    client, keys = _client(tmp_path, llm_url)
    with client:
        yield client, keys


def _sse(lines: list[str]) -> list[tuple[str, dict]]:
    events, kind = [], None
    for line in lines:
        if line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            events.append((kind, json.loads(line[6:])))
    return events


def _stream_query(client: TestClient, key: str, question: str = QUESTION) -> list[tuple[str, dict]]:
    with client.stream("POST", "/v1/query", headers=auth(key), json={
            "question": question, "pipeline": "no_retrieval", "stream": True}) as response:
        return _sse(list(response.iter_lines()))


def _chat(client: TestClient, key: str, question: str = QUESTION) -> tuple[list, str]:
    """(chunks of the streamed completion, content of the same request unstreamed), both via the openai client."""
    from openai import OpenAI

    openai = OpenAI(base_url="http://testserver/v1", api_key=key, http_client=client)
    messages = [{"role": "user", "content": question}]
    chunks = list(openai.chat.completions.create(model="no_retrieval", stream=True, messages=messages))
    plain = openai.chat.completions.create(model="no_retrieval", messages=messages)
    return chunks, plain.choices[0].message.content or ""


def _deltas(chunks: list) -> list[str]:
    return [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]


def test_query_streams_the_answer_as_token_events_before_the_result(server):
    client, keys = server
    events = _stream_query(client, keys["alice"])
    kinds = [kind for kind, _ in events]
    tokens = [data for kind, data in events if kind == "token"]
    assert "".join(t["text"] for t in tokens) == ANSWER
    # The opening is held back until it cannot be an echo, then the server's pieces follow as they come.
    assert len(tokens[0]["text"]) >= HOLD_CHARS and len(tokens) > 2
    assert {t["call"] for t in tokens} == {1}
    assert kinds[0] == "selection" and kinds[-1] == "result"
    assert kinds.index("token") < kinds.index("result")


def test_a_query_that_does_not_stream_gets_no_tokens_and_the_same_answer(server):
    client, keys = server
    streamed = _stream_query(client, keys["alice"])[-1][1]
    body = client.post("/v1/query", headers=auth(keys["alice"]), json={
        "question": QUESTION, "pipeline": "no_retrieval"}).json()
    assert body["answer"] == streamed["answer"]
    assert body["answer_source"] == streamed["answer_source"]


def test_the_official_openai_client_gets_deltas_that_join_to_the_final_message(server):
    client, keys = server
    chunks, final = _chat(client, keys["alice"])
    deltas = _deltas(chunks)
    assert final and "".join(deltas) == final
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["docqa"]["trace_id"]


def test_a_reply_that_starts_by_echoing_the_whole_prompt_streams_none_of_the_echo(tmp_path):
    with scripted_openai_server(mode="prompt_first", answer=ANSWER) as base_url:
        client, keys = _client(tmp_path, base_url)
        with client:
            events = _stream_query(client, keys["alice"])
            chunks, final = _chat(client, keys["alice"])
    tokens = [data["text"] for kind, data in events if kind == "token"]
    # The model wrote the prompt (instructions, the question) first: the draft shown is only what followed it.
    assert "".join(tokens) == ANSWER
    assert not any(QUESTION in text or "Question" in text for text in tokens)
    deltas = _deltas(chunks)
    assert "".join(deltas) == final == events[-1][1]["answer"]
    assert QUESTION not in "".join(deltas)


def test_a_replaced_answer_is_announced_before_it_and_its_note_leads_the_message(tmp_path):
    # A model that only says the question back gives no answer: the result is not the model's.
    with scripted_openai_server(mode="fixed", answer=QUESTION) as base_url:
        client, keys = _client(tmp_path, base_url)
        with client:
            events = _stream_query(client, keys["alice"])
            chunks, final = _chat(client, keys["alice"])
    kinds = [kind for kind, _ in events]
    result = events[-1][1]
    assert result["answer_source"] != "model" and result["answer_note"]
    assert kinds[-2:] == ["answer_replaced", "result"]
    assert events[-2][1] == {"answer_source": result["answer_source"], "answer_note": result["answer_note"]}
    text = "".join(_deltas(chunks))
    assert text == final and text.startswith(result["answer_note"])
    assert chunks[-1].model_extra["docqa"]["answer_source"] == result["answer_source"]


def test_only_answer_calls_stream_and_only_while_someone_listens():
    assert answer_streaming_callback("answer") is None
    received: list[tuple[str, int]] = []
    with stream_answer_tokens(lambda text, call: received.append((text, call))):
        assert answer_streaming_callback("resp_judge") is None
        first, second = answer_streaming_callback("answer"), answer_streaming_callback("resp_generate")
        assert first is not None and second is not None
        first(type("Chunk", (), {"content": "Oslo"})())
        first.finish()
        second(type("Chunk", (), {"content": ""})())
        second(type("Chunk", (), {"content": "Bergen"})())
        second.finish()
    assert received == [("Oslo", 1), ("Bergen", 2)]
    assert answer_streaming_callback("answer") is None


PROMPT = (
    "Write a complete, detailed answer to the question using only the numbered passages below. End every "
    "paragraph with its citation.\n"
    "[1] Halcyon moved its headquarters from Bergen to Oslo in 1998 to be closer to its shipping customers.\n"
    "Format: <the final answer in one or two sentences>\n"
    f"Question: {QUESTION}\nAnswer:"
)
REPLIES = [
    f"{PROMPT}\n{ANSWER}",  # the whole prompt first
    f"{ANSWER}\n{PROMPT}",  # the answer, then the prompt
    f"Answer: {ANSWER}\nQuestion: Where else?",  # a label and a "Question:" continuation
    f"{PROMPT.splitlines()[0]} {ANSWER}",  # an instruction line run into the answer
    # a template placeholder copied from the prompt, then a passage line cut off by the token limit
    f"<the final answer in one or two sentences> {ANSWER}\n\n[1] Halcyon moved its headquarters",
    # placeholders and a bare "<" well into a line that is already being shown
    f"{ANSWER} <the final answer in one or two sentences> so 1 < 2, and <a placeholder the prompt lacks> stays.",
    "Oslo [1].",  # shorter than the hold: released when the reply ends
    "",
]


@pytest.mark.parametrize("reply", REPLIES)
@pytest.mark.parametrize("piece", [1, 7, 32])
def test_the_streamed_pieces_join_to_the_cleaned_final_text(reply, piece):
    holdback = EchoHoldback(PROMPT)
    pieces = [holdback.feed(reply[i : i + piece]) for i in range(0, len(reply), piece)] + [holdback.finish()]
    assert "".join(pieces) == strip_prompt_echo(reply, PROMPT)
    assert not any("Question" in p or "numbered passages" in p or "<the final" in p for p in pieces)


def test_a_line_repeating_a_prompt_line_is_held_until_it_departs_from_it():
    holdback = EchoHoldback(PROMPT)
    passage = PROMPT.splitlines()[1]
    # Longer than the hold, but still the passage line: it may yet be the whole line (an echo).
    assert holdback.feed(passage[:-5]) == ""
    assert holdback.feed(passage[-5:] + "\n") == ""
    shown = holdback.feed(ANSWER[:HOLD_CHARS + 10])
    assert shown and ANSWER.startswith(shown)
