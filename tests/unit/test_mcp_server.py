"""The MCP server's parts without a live server: refusals at /mcp shaped like the API's, steps as ordered
progress notifications, API errors as tool errors, and the stdio mode's principal."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp.server.mcpserver.exceptions import ToolError

from docqa.accounts import directory
from docqa.db import session_factory
from docqa.errors import DocqaError, InvalidOptionsError, LLMUnavailableError
from docqa.result import LLMUsage, Step
from docqa.server.api_errors import ApiError
from docqa.server.config import ServerSettings
from docqa.server.mcp.errors import tool_errors
from docqa.server.mcp.progress import StepProgress, step_message
from docqa.server.mcp.stdio import local_caller
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientInfo":
        {"name": "test", "version": "1"}, "io.modelcontextprotocol/clientCapabilities": {}}
HEADERS = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}


def rpc(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 3, "method": method, "params": {**params, "_meta": META}}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, str], ServerSettings]:
    tmp_path = tmp_path_factory.mktemp("mcp")
    application, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="Paris"))
    return application, keys, ServerSettings(data_dir=tmp_path / "data")


@pytest.fixture(scope="module")
def app(built) -> Any:
    application, keys, _settings = built
    with TestClient(application) as client:
        yield client, keys


class TestEndpoint:
    def test_requests_without_a_valid_key_get_the_apis_401_as_a_jsonrpc_error(self, app):
        client, _keys = app
        for headers in ({}, auth("dq_unknown_key"), {"Authorization": "Basic YWxpY2U6cHc="}):
            response = client.post("/mcp", json=rpc("tools/list"), headers={**HEADERS, **headers})
            assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
            body = response.json()
            assert body["id"] == 3 and body["error"]["message"].startswith("unauthorized: ")
            assert body["error"]["data"]["error"]["code"] == "unauthorized"

    def test_a_request_that_is_not_jsonrpc_gets_the_apis_error_body(self, app):
        client, _keys = app
        response = client.post("/mcp", content=b"not json", headers=HEADERS)
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"

    def test_auditors_are_refused_and_users_list_the_tools(self, app):
        client, keys = app
        refused = client.post("/mcp", json=rpc("tools/list"), headers={**HEADERS, **auth(keys["audrey"])})
        assert refused.status_code == 403 and "may not use this endpoint" in refused.json()["error"]["message"]
        listed = client.post("/mcp", json=rpc("tools/list"), headers={**HEADERS, **auth(keys["alice"])})
        assert listed.status_code == 200, listed.text
        names = {tool["name"] for tool in listed.json()["result"]["tools"]}
        assert names == {"ask", "search", "read_passage", "list_strategies"}

    def test_a_tool_error_keeps_the_apis_code_and_message(self, app):
        client, keys = app
        call = rpc("tools/call", name="ask", arguments={"question": "Hello?", "strategy": "nope"})
        response = client.post("/mcp", json=call, headers={**HEADERS, **auth(keys["alice"]),
                                                            "Mcp-Method": "tools/call", "Mcp-Name": "ask"})
        result = response.json()["result"]
        assert result["isError"] is True
        assert "unknown_pipeline: unknown pipeline 'nope'; available: auto, " in result["content"][0]["text"]

    def test_the_endpoint_is_not_part_of_the_openapi_schema(self, app):
        client, _keys = app
        assert "/mcp" not in client.get("/openapi.json").json()["paths"]


class TestToolErrors:
    @pytest.mark.parametrize(("raised", "text"), [
        (ApiError(404, "not_found", "passage not found"), "not_found: passage not found"),
        (InvalidOptionsError("top_k must be at most 50"), "invalid_options: top_k must be at most 50"),
        (LLMUnavailableError("the model server is down"), "llm_unavailable: the model server is down"),
        (DocqaError("bad collection"), "docqa_error: bad collection"),
    ])
    def test_api_errors_become_tool_errors(self, raised, text):
        with pytest.raises(ToolError) as caught, tool_errors():
            raise raised
        assert str(caught.value) == text

    def test_server_faults_are_left_to_the_sdk(self):
        class Broken(DocqaError):
            http_status = 500

        with pytest.raises(Broken), tool_errors():
            raise Broken("configuration is broken")
        with pytest.raises(KeyError), tool_errors():
            raise KeyError("x")


def step(index: int, kind: str = "retrieval", calls: int = 0) -> Step:
    return Step(index=index, kind=kind, name=f"{kind}_{index}", duration_s=0.25, llm=LLMUsage(calls=calls))


class RecordingContext:
    def __init__(self, delay_s: float = 0.0) -> None:
        self.sent: list[tuple[float, float | None, str | None]] = []
        self.delay_s = delay_s

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        await asyncio.sleep(self.delay_s)
        self.sent.append((progress, total, message))


class TestProgress:
    async def test_steps_from_the_run_thread_arrive_in_order_before_the_result(self):
        ctx = RecordingContext(delay_s=0.001)
        async with StepProgress(ctx) as progress:
            worker = threading.Thread(target=lambda: [progress.on_step(step(i)) for i in range(50)])
            await asyncio.to_thread(lambda: (worker.start(), worker.join()))
        assert [sent[0] for sent in ctx.sent] == list(range(1, 51))
        assert [sent[2] for sent in ctx.sent] == [step_message(step(i)) for i in range(50)]

    async def test_a_failed_call_stops_announcing(self):
        ctx = RecordingContext(delay_s=0.05)
        with pytest.raises(RuntimeError):
            async with StepProgress(ctx) as progress:
                progress.on_step(step(0))
                await asyncio.sleep(0)
                raise RuntimeError("run failed")
        progress.on_step(step(1))
        await asyncio.sleep(0.2)
        assert len(ctx.sent) <= 1

    async def test_a_client_that_cannot_receive_progress_still_gets_its_answer(self):
        class Gone(RecordingContext):
            async def report_progress(self, *args: Any, **kwargs: Any) -> None:
                raise BrokenPipeError

        async with StepProgress(Gone()) as progress:
            progress.on_step(step(0))
        assert progress.sent == 1

    def test_a_step_line_names_kind_name_time_and_model_calls_only(self):
        line = step_message(Step(index=0, kind="generation", name="answer", inputs={"prompt": "SECRET"},
                                 duration_s=1.5, llm=LLMUsage(calls=2)))
        assert line == "generation: answer (1.50 s, 2 model calls)"


class TestStdioPrincipal:
    @pytest.fixture
    def settings(self, built) -> ServerSettings:
        return built[2]

    def test_a_user_principal_is_that_directory_user(self, settings):
        for principal in ("alice", "user:alice"):
            caller = local_caller(settings, principal, "acme")
            assert (caller.user_id, caller.tenant, caller.role, caller.groups) == (
                "alice", "acme", "user", frozenset({"finance"}))
            assert caller.key_id == "local:acme:alice"

    @pytest.mark.parametrize(("principal", "tenant", "reason"), [
        ("group:finance", "acme", "name one docqa user"),
        ("everyone", "acme", "name one docqa user"),
        ("nobody", "acme", "no active docqa user 'nobody'"),
        ("alice", "globex", "no active docqa user 'alice' in tenant 'globex'"),
        ("audrey", "acme", "role 'auditor' may not use this endpoint"),
    ])
    def test_other_principals_are_refused(self, settings, principal, tenant, reason):
        with pytest.raises(DocqaError, match=reason):
            local_caller(settings, principal, tenant)

    def test_a_deactivated_user_is_refused(self, settings):
        with session_factory(settings)() as session:
            directory.deactivate_user(session, "acme", "bob")
            session.commit()
        with pytest.raises(DocqaError, match="no active docqa user 'bob'"):
            local_caller(settings, "bob", "acme")
