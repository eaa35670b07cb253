"""docqa's MCP server through the official MCP client (streamable HTTP at /mcp) against the server as deployed:
gunicorn (one worker), PostgreSQL (else SQLite), the access-control corpus of `server_stack` and the scripted
LLM in echo mode, slowed so that a run can be cancelled between its model calls. Also `docqa mcp` over stdio."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from docqa.accounts.keys import create_key, revoke_key
from docqa.db import session_factory
from docqa.runtime import Runtime
from tests.support.scripted_openai_server import llm_calls_since
from tests.support.server_stack import ALL_MARKERS, QUESTION, Stack, readable_markers, server_stack

pytestmark = pytest.mark.integration

LLM_DELAY_S = 0.4
ISSUER = "https://idp.example.test/"
# Small enough that one key's burst is spent by the rate-limit test, large enough for every other test.
RATE_PER_MINUTE, RATE_BURST = 60, 40


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def calls_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llm") / "calls.jsonl"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, signing_key, calls_log) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("mcp")
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(signing_key.public_key()))
    jwks = workdir / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]}))
    env = {"DOCQA_OIDC_ISSUER": ISSUER, "DOCQA_OIDC_AUDIENCE": "docqa", "DOCQA_OIDC_JWKS_FILE": str(jwks),
           "DOCQA_TENANT": "acme", "DOCQA_RATE_LIMIT_PER_MINUTE": str(RATE_PER_MINUTE),
           "DOCQA_RATE_LIMIT_BURST": str(RATE_BURST), "DOCQA_AUDIT_PASSAGE_READS": "true"}
    # One worker: each worker loads the models once; requests stand alone either way (stateless MCP).
    with server_stack(workdir, workers=1, llm_delay_ms=int(LLM_DELAY_S * 1000), extra_env=env,
                      llm_calls_log=calls_log) as running:
        yield running


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.base_url, timeout=120) as client:
        yield client


@asynccontextmanager
async def mcp(stack: Stack, credential: str | None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {credential}"} if credential else {}
    http_client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120))
    async with http_client, Client(streamable_http_client(f"{stack.base_url}/mcp", http_client=http_client)) as client:
        yield client


def markers_in(value: Any) -> set[str]:
    text = value if isinstance(value, str) else json.dumps(value)
    return {m for m in ALL_MARKERS if m in text}


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return result.structured_content


def error_text(result: Any) -> str:
    """A tool error's message, without the SDK's `Error executing tool <name>: ` prefix."""
    assert result.is_error, result.structured_content
    return " ".join(part.text for part in result.content).split(": ", 1)[-1]


def trace(http: httpx.Client, stack: Stack, trace_id: str, auditor: str = "audrey") -> dict[str, Any]:
    response = http.get(f"/v1/traces/{trace_id}", headers=stack.auth(auditor))
    assert response.status_code == 200, response.text
    return response.json()


def marker_of_chunk(stack: Stack) -> dict[str, str]:
    """Every chunk id of the corpus and the marker word of its document."""
    documents = Runtime(stack.settings).document_store.filter_documents()
    return {doc.id: next(m for m in ALL_MARKERS if m in doc.content) for doc in documents
            if any(m in (doc.content or "") for m in ALL_MARKERS)}


class TestTools:
    async def test_lists_the_four_tools_with_schemas_and_descriptions(self, stack):
        async with mcp(stack, stack.keys["alice"]) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == {"ask", "search", "read_passage", "list_strategies"}
        assert all(len(tool.description or "") > 40 for tool in tools.values())
        ask = tools["ask"].input_schema
        assert ask["required"] == ["question"]
        assert {"question", "strategy", "options"} <= set(ask["properties"])
        assert tools["search"].input_schema["properties"]["top_k"]["maximum"] == 50
        assert tools["read_passage"].input_schema["required"] == ["chunk_id"]
        assert tools["search"].annotations.read_only_hint and not tools["ask"].annotations.read_only_hint
        assert {"answer", "citations", "trace_id", "stop_reason", "answer_source"} <= set(
            tools["ask"].output_schema["properties"])

    async def test_list_strategies_matches_the_api(self, stack, http):
        async with mcp(stack, stack.keys["alice"]) as client:
            listed = structured(await client.call_tool("list_strategies", {}))["strategies"]
        models = [m["id"] for m in http.get("/v1/models", headers=stack.auth("alice")).json()["data"]]
        assert [s["name"] for s in listed] == models
        standard = next(s for s in listed if s["name"] == "standard")
        assert standard["description"] and "top_k" in standard["options"]["properties"]

    async def test_ask_answers_with_citations_progress_and_an_audited_mcp_run(self, stack, http):
        progress: list[tuple[float, str | None]] = []

        async def on_progress(done: float, _total: float | None, message: str | None) -> None:
            progress.append((done, message))

        async with mcp(stack, stack.keys["alice"]) as client:
            result = await client.call_tool("ask", {"question": QUESTION, "strategy": "standard"},
                                            progress_callback=on_progress)
        body = structured(result)
        assert body["answer"].startswith("Scripted answer.") and body["answer_source"] == "model"
        assert body["strategy"] == "standard" and "stop_reason" in body
        cited = body["citations"]
        assert cited and all(c["chunk_id"] and c["source"] and c["snippet"] for c in cited)
        assert markers_in(cited) <= readable_markers("alice")
        # The text content carries the same answer for clients that read text only.
        assert json.loads(result.content[0].text)["trace_id"] == body["trace_id"]
        # One notification per finished step, as each finishes (a nested step before the one holding it): every
        # step of the trace is announced once.
        recorded = trace(http, stack, body["trace_id"])
        assert [done for done, _ in progress] == list(range(1, len(progress) + 1))
        announced = [message.rsplit(" (", 1)[0] for _, message in progress]
        for step in recorded["steps"]:
            assert f"{step['kind']}: {step['name']}" in announced, (step, progress)
        assert recorded["asked_by"] == "alice" and recorded["status"] == "completed"
        assert recorded["config"]["selection"]["channel"] == "mcp"

    async def test_an_oidc_token_is_the_directory_user(self, stack, http, signing_key):
        now = int(time.time())
        token = jwt.encode({"iss": ISSUER, "aud": "docqa", "sub": "bob", "iat": now, "exp": now + 300},
                           signing_key, algorithm="RS256", headers={"kid": "k1"})
        async with mcp(stack, token) as client:
            found = structured(await client.call_tool("search", {"query": QUESTION, "top_k": 20}))
            body = structured(await client.call_tool("ask", {"question": QUESTION, "strategy": "standard"}))
        assert markers_in(found) == readable_markers("bob")
        assert trace(http, stack, body["trace_id"])["asked_by"] == "bob"


class TestAccessControl:
    """The API's access sweep through MCP: every user, every tool, never a passage of a document they may not
    read (another user's, another group's, another tenant's)."""

    @pytest.mark.parametrize("user", ["alice", "bob", "carol", "dave", "root"])
    async def test_no_unreadable_passage_through_any_tool(self, stack, user):
        allowed = readable_markers(user)
        forbidden = ALL_MARKERS - allowed
        async with mcp(stack, stack.keys[user]) as client:
            found = structured(await client.call_tool("search", {"query": QUESTION, "top_k": 50}))
            # Everything readable is found (the corpus is small), and nothing else.
            assert markers_in(found) == allowed
            assert all(p["score"] is not None for p in found["passages"])
            for chunk_id, marker in marker_of_chunk(stack).items():
                result = await client.call_tool("read_passage", {"chunk_id": chunk_id})
                if marker in allowed:
                    passage = structured(result)
                    assert passage["passage"]["id"] == chunk_id and not markers_in(passage) & forbidden
                else:
                    # The same answer as the API's 404: a passage one may not read does not exist for them.
                    assert error_text(result) == "not_found: passage not found", (user, marker)
            answered = structured(await client.call_tool("ask", {"question": QUESTION, "strategy": "standard"}))
            # Echoed prompts carry what retrieval found: proof the check looks at real content.
            assert markers_in(answered) & allowed and not markers_in(answered) & forbidden

    async def test_searches_and_reads_are_access_events_of_the_callers_tenant(self, stack, http):
        chunks = marker_of_chunk(stack)
        unreadable = next(c for c, m in chunks.items() if m not in readable_markers("dave"))
        async with mcp(stack, stack.keys["dave"]) as client:
            found = structured(await client.call_tool("search", {"query": "frostpillar code word", "top_k": 3}))
            readable = found["passages"][0]["chunk_id"]
            assert not (await client.call_tool("read_passage", {"chunk_id": readable})).is_error
            assert (await client.call_tool("read_passage", {"chunk_id": unreadable})).is_error

        def events(action: str) -> list[dict[str, Any]]:
            response = http.get("/v1/audit/events", params={"action": action, "actor": "dave"},
                                headers=stack.auth("zaudit"))
            assert response.status_code == 200, response.text
            return response.json()["events"]

        [searched] = [e for e in events("passages.searched") if e["after"]["query"] == "frostpillar code word"]
        assert searched["after"]["channel"] == "mcp" and searched["result"] == "success"
        assert searched["after"]["chunk_ids"] == [p["chunk_id"] for p in found["passages"]]
        targets = {f"chunk:{readable}", f"chunk:{unreadable}"}
        read = {e["target"]: e["result"] for e in events("passage.read") if e["target"] in targets}
        assert read == {f"chunk:{readable}": "success", f"chunk:{unreadable}": "failure"}

    async def test_a_collection_narrows_the_search_and_never_widens_it(self, stack):
        async with mcp(stack, stack.keys["carol"]) as client:
            main = structured(await client.call_tool("search", {"query": QUESTION, "collection": "main"}))
            other = structured(await client.call_tool("search", {"query": QUESTION, "collection": "legal"}))
        assert markers_in(main) == readable_markers("carol") and other["passages"] == []


class TestAuthentication:
    async def refused(self, stack: Stack, credential: str | None) -> MCPError:
        try:
            async with mcp(stack, credential) as client:
                await client.call_tool("list_strategies", {})
        except BaseException as exc:  # the client's task groups wrap the error
            while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            assert isinstance(exc, MCPError), exc
            return exc
        raise AssertionError(f"not refused: {credential!r}")

    async def test_missing_unknown_and_revoked_keys_and_auditors_are_refused(self, stack):
        with session_factory(stack.settings)() as session:
            secret, row = create_key(session, "acme", "alice", name="to revoke")
            session.commit()
        async with mcp(stack, secret) as client:
            assert not (await client.call_tool("list_strategies", {})).is_error
        with session_factory(stack.settings)() as session:
            revoke_key(session, "acme", row.id)
            session.commit()
        assert "missing API key" in str(await self.refused(stack, None))
        assert "invalid or revoked API key" in str(await self.refused(stack, secret))
        assert "invalid or revoked API key" in str(await self.refused(stack, "dq_not_a_key"))
        assert "may not use this endpoint" in str(await self.refused(stack, stack.keys["audrey"]))

    def test_a_refused_request_gets_the_apis_status_and_challenge(self, stack, http):
        message = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}}
        response = http.post("/mcp", json=message, headers={"Accept": "application/json, text/event-stream"})
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        error = response.json()
        assert error["id"] == 7 and error["error"]["data"]["error"]["code"] == "unauthorized"

    async def test_tool_calls_count_in_the_keys_rate_limit(self, stack):
        # A key of its own, so the other tests' budget is untouched.
        with session_factory(stack.settings)() as session:
            secret, _ = create_key(session, "acme", "carol", name="rate")
            session.commit()
        refused = 0
        async with mcp(stack, secret) as client:
            for _ in range(RATE_BURST + 15):
                try:
                    await client.call_tool("read_passage", {"chunk_id": "no-such-chunk"})
                except MCPError as exc:
                    assert "rate_limited" in str(exc)
                    refused += 1
        assert refused >= 5


class TestToolErrors:
    async def test_bad_arguments_are_tool_errors_with_the_apis_messages(self, stack, http, calls_log):
        before = time.time()
        cases = [
            ({"question": QUESTION, "strategy": "nope"}, {"question": QUESTION, "pipeline": "nope"}),
            ({"question": QUESTION, "strategy": "standard", "options": {"top_k": 10**9}},
             {"question": QUESTION, "pipeline": "standard", "options": {"top_k": 10**9}}),
            ({"question": QUESTION, "strategy": "standard", "options": {"bogus": 1}},
             {"question": QUESTION, "pipeline": "standard", "options": {"bogus": 1}}),
            ({"question": "   ", "strategy": "standard"}, {"question": "   ", "pipeline": "standard"}),
        ]
        async with mcp(stack, stack.keys["alice"]) as client:
            for arguments, body in cases:
                api = http.post("/v1/query", headers=stack.auth("alice"), json=body)
                assert 400 <= api.status_code < 500, api.text
                expected = f"{api.json()['error']['code']}: {api.json()['error']['message']}"
                assert error_text(await client.call_tool("ask", arguments)) == expected
            # Arguments outside the tools' schemas.
            for name, arguments in [("ask", {}), ("ask", {"question": 5}), ("search", {"query": "x", "top_k": 0}),
                                    ("search", {"query": "x", "collection": "no spaces"}),
                                    ("read_passage", {"chunk_id": ""}), ("nope", {})]:
                assert error_text(await client.call_tool(name, arguments)), (name, arguments)
            # The session is intact after every error.
            assert not (await client.call_tool("list_strategies", {})).is_error
        assert llm_calls_since(calls_log, before) == 0


class TestCancellation:
    async def test_a_cancelled_ask_stops_its_run_and_is_traced_cancelled(self, stack, http, calls_log):
        question = f"{QUESTION} {uuid.uuid4().hex}"
        first_step = anyio.Event()

        async def on_progress(_done: float, _total: float | None, _message: str | None) -> None:
            first_step.set()

        async with mcp(stack, stack.keys["alice"]) as client:
            with anyio.move_on_after(60):
                async with anyio.create_task_group() as group:
                    group.start_soon(lambda: client.call_tool(
                        "ask", {"question": question, "strategy": "resp", "options": {"max_iterations": 10}},
                        progress_callback=on_progress))
                    await first_step.wait()
                    group.cancel_scope.cancel()
            left_at = time.time()
            assert first_step.is_set()
            # The session goes on after a cancelled call.
            assert not (await client.call_tool("list_strategies", {})).is_error
        # A model call in flight when the client left may finish; none starts afterwards.
        time.sleep(3 * LLM_DELAY_S)
        assert llm_calls_since(calls_log, left_at + LLM_DELAY_S, question) == 0
        listed = http.get("/v1/traces", params={"text": question}, headers=stack.auth("audrey")).json()["traces"]
        assert [t["status"] for t in listed if t["question"] == question] == ["cancelled"]


class TestStdio:
    async def test_docqa_mcp_answers_as_its_principal(self, stack, http):
        env = {**os.environ, **stack.env, "DOCQA_TENANT": "acme"}
        server = StdioServerParameters(command=sys.executable, args=["-m", "docqa.cli", "mcp", "--principal", "bob"],
                                       env=env, cwd=str(Path(__file__).parents[2]))
        async with Client(server) as client:
            found = structured(await client.call_tool("search", {"query": QUESTION, "top_k": 20}))
            body = structured(await client.call_tool("ask", {"question": QUESTION, "strategy": "standard"}))
            passage = await client.call_tool("read_passage", {"chunk_id": body["citations"][0]["chunk_id"]})
        assert markers_in(found) == readable_markers("bob")
        assert body["answer"].startswith("Scripted answer.") and markers_in(body) <= readable_markers("bob")
        assert structured(passage)["passage"]["id"] == body["citations"][0]["chunk_id"]
        recorded = trace(http, stack, body["trace_id"])
        assert recorded["asked_by"] == "bob" and recorded["config"]["selection"]["channel"] == "mcp"

