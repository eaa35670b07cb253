"""The HTTP API in-process: authentication, roles, tenants, query (JSON and SSE), OpenAI endpoints, errors."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app


@pytest.fixture
def llm() -> ScriptedChatGenerator:
    return ScriptedChatGenerator(default="Paris is the capital.")


@pytest.fixture
def server(tmp_path, llm) -> tuple[TestClient, dict[str, str]]:
    app, keys = build_test_app(tmp_path, llm)
    with TestClient(app) as client:
        yield client, keys


def ask(client: TestClient, key: str, **body: Any) -> Any:
    payload = {"question": "What is the capital of France?", "pipeline": "no_retrieval", **body}
    return client.post("/v1/query", json=payload, headers=auth(key))


class TestHealth:
    def test_health_and_readiness_need_no_key(self, server):
        client, _ = server
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"] == {"database": "ok", "pipelines": "ok"}

    def test_openapi_schema_lists_the_endpoints(self, server):
        client, _ = server
        paths = client.get("/openapi.json").json()["paths"]
        for path in ("/v1/query", "/v1/chat/completions", "/v1/models", "/v1/admin/keys"):
            assert path in paths


class TestAuthentication:
    @pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"},
                                         {"Authorization": "Bearer dq_0123456789abcdef_wrongsecret"}])
    def test_missing_or_invalid_key_is_401_with_code(self, server, headers):
        client, _ = server
        response = client.post("/v1/query", json={"question": "q"}, headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"

    def test_revoked_key_stops_working(self, server):
        client, keys = server
        created = client.post("/v1/admin/keys", json={"user_id": "bob", "name": "tmp"}, headers=auth(keys["root"]))
        assert created.status_code == 201
        new_key = created.json()["key"]
        assert ask(client, new_key).status_code == 200
        revoked = client.delete(f"/v1/admin/keys/{created.json()['id']}", headers=auth(keys["root"]))
        assert revoked.json()["revoked"] is True
        assert ask(client, new_key).status_code == 401

    def test_deactivated_user_keys_stop_working(self, server):
        client, keys = server
        assert ask(client, keys["bob"]).status_code == 200
        assert client.delete("/v1/admin/users/bob", headers=auth(keys["root"])).json()["active"] is False
        assert ask(client, keys["bob"]).status_code == 401


class TestRoles:
    @pytest.mark.parametrize("user,allowed", [("alice", True), ("root", True), ("audrey", False)])
    def test_who_may_ask(self, server, user, allowed):
        client, keys = server
        response = ask(client, keys[user])
        assert response.status_code == (200 if allowed else 403)
        if not allowed:
            assert response.json()["error"]["code"] == "forbidden"

    @pytest.mark.parametrize("user,allowed", [("alice", False), ("root", True), ("audrey", False)])
    def test_who_may_manage_accounts(self, server, user, allowed):
        client, keys = server
        response = client.get("/v1/admin/users", headers=auth(keys[user]))
        assert response.status_code == (200 if allowed else 403)


class TestTenants:
    def test_admin_sees_only_own_tenant(self, server):
        client, keys = server
        users = {u["id"] for u in client.get("/v1/admin/users", headers=auth(keys["zadmin"])).json()}
        assert users == {"zed", "zadmin", "zaudit"}
        key_ids = {k["user_id"] for k in client.get("/v1/admin/keys", headers=auth(keys["zadmin"])).json()}
        assert key_ids == {"zed", "zadmin", "zaudit"}

    def test_other_tenants_accounts_are_404(self, server):
        client, keys = server
        acme_keys = client.get("/v1/admin/keys", headers=auth(keys["root"])).json()
        alice_key_id = next(k["id"] for k in acme_keys if k["user_id"] == "alice")
        assert client.delete(f"/v1/admin/keys/{alice_key_id}", headers=auth(keys["zadmin"])).status_code == 404
        assert client.delete("/v1/admin/users/alice", headers=auth(keys["zadmin"])).status_code == 404
        created = client.post("/v1/admin/keys", json={"user_id": "alice"}, headers=auth(keys["zadmin"]))
        assert created.status_code == 404
        assert created.json()["error"]["code"] == "not_found"
        assert ask(client, keys["alice"]).status_code == 200

    def test_groups_and_membership(self, server):
        client, keys = server
        admin = auth(keys["root"])
        assert client.post("/v1/admin/groups", json={"name": "legal"}, headers=admin).status_code == 201
        assert client.post("/v1/admin/groups", json={"name": "legal"}, headers=admin).status_code == 409
        added = client.put("/v1/admin/groups/legal/members/bob", headers=admin)
        assert added.json() == {"name": "legal", "members": ["bob"]}
        assert client.put("/v1/admin/groups/legal/members/zed", headers=admin).status_code == 404
        removed = client.delete("/v1/admin/groups/legal/members/bob", headers=admin)
        assert removed.json()["members"] == []


class TestQuery:
    def test_answer_with_trace_and_selection(self, server, llm):
        client, keys = server
        response = ask(client, keys["alice"])
        assert response.status_code == 200
        body = response.json()
        assert body["answer"] == "Paris is the capital."
        assert body["pipeline"] == "no_retrieval"
        assert body["trace_id"]
        assert body["selection"] == {"mode": "explicit", "pipeline": "no_retrieval"}
        assert [s["kind"] for s in body["steps"]] == ["generation", "prompt", "generation", "parse", "grounding"]
        assert "What is the capital of France?" in llm.calls[0]["prompt"]

    def test_question_too_long_is_422(self, server):
        client, keys = server
        response = ask(client, keys["alice"], question="x" * 2001)
        assert response.status_code == 422
        assert response.json()["error"]["code"] == "invalid_question"

    def test_unknown_pipeline_and_bad_options(self, server):
        client, keys = server
        unknown = ask(client, keys["alice"], pipeline="nope")
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_pipeline")
        bad = ask(client, keys["alice"], options={"no_such_option": 1})
        assert (bad.status_code, bad.json()["error"]["code"]) == (422, "invalid_options")

    def test_validation_errors_carry_code_and_message(self, server):
        client, keys = server
        response = client.post("/v1/query", json={"pipeline": "standard"}, headers=auth(keys["alice"]))
        assert response.status_code == 422
        error = response.json()["error"]
        assert error["code"] == "invalid_request"
        assert "question" in error["message"]

    def test_streamed_answer_sends_steps_then_result(self, server):
        client, keys = server
        with client.stream("POST", "/v1/query", headers=auth(keys["alice"]),
                           json={"question": "Capital of France?", "pipeline": "no_retrieval", "stream": True}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            events = parse_sse(r.iter_lines())
        # A step is sent when it finishes: the generator's prompt, model call and parser before the generator.
        assert [name for name, _ in events] == ["selection", "step", "step", "step", "step", "step", "result"]
        assert [event["kind"] for _, event in events[1:6]] == ["prompt", "generation", "parse", "generation",
                                                               "grounding"]
        assert events[6][1]["answer"] == "Paris is the capital."
        assert events[6][1]["trace_id"]

    def test_llm_failure_is_reported_as_a_stream_error_event(self, tmp_path):
        def fail(_prompt: str) -> str:
            raise RuntimeError("boom")

        app, keys = build_test_app(tmp_path, ScriptedChatGenerator(rules=[(".", fail)]))
        with TestClient(app, raise_server_exceptions=False) as client:
            plain = ask(client, keys["alice"])
            assert (plain.status_code, plain.json()["error"]["code"]) == (500, "internal_error")
            with client.stream("POST", "/v1/query", headers=auth(keys["alice"]),
                               json={"question": "q?", "pipeline": "no_retrieval", "stream": True}) as r:
                events = parse_sse(r.iter_lines())
        assert events[-1] == ("error", {"error": {"code": "internal_error", "type": "internal_error",
                                                  "message": "the query failed; see the server log"}})


class TestLimits:
    def test_body_too_large_is_413(self, server):
        client, keys = server
        response = client.post("/v1/query", content=b"x" * 300_000, headers={**auth(keys["alice"]),
                                                                             "Content-Type": "application/json"})
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"

    def test_rate_limit_per_key_is_429_with_retry_after(self, tmp_path, llm):
        app, keys = build_test_app(tmp_path, llm, rate_limit_burst=2, rate_limit_per_minute=1)
        with TestClient(app) as client:
            statuses = [ask(client, keys["alice"]).status_code for _ in range(3)]
            assert statuses == [200, 200, 429]
            limited = ask(client, keys["alice"])
            assert int(limited.headers["retry-after"]) >= 1
            assert ask(client, keys["bob"]).status_code == 200

    def test_overload_is_503_with_retry_after_not_a_hang(self, tmp_path):
        release = threading.Event()
        entered = threading.Event()

        def slow(_prompt: str) -> str:
            entered.set()
            release.wait(timeout=30)
            return "late"

        app, keys = build_test_app(tmp_path, ScriptedChatGenerator(rules=[(".", slow)]),
                                   max_concurrent_queries=1, queue_timeout_s=0.2)
        with TestClient(app) as client:
            first: dict[str, Any] = {}
            worker = threading.Thread(target=lambda: first.update(r=ask(client, keys["alice"])))
            worker.start()
            assert entered.wait(timeout=30)
            second = ask(client, keys["bob"])
            release.set()
            worker.join(timeout=30)
        assert second.status_code == 503
        assert second.json()["error"]["code"] == "overloaded"
        assert second.headers["retry-after"] == "2"
        assert first["r"].status_code == 200

    def test_query_timeout_is_504(self, tmp_path):
        release = threading.Event()
        app, keys = build_test_app(
            tmp_path, ScriptedChatGenerator(rules=[(".", lambda _p: str(release.wait(timeout=30)))]),
            query_timeout_s=0.2,
        )
        with TestClient(app) as client:
            response = ask(client, keys["alice"])
            release.set()
        # The abandoned run finishes (and writes its trace) in its thread; wait so it cannot outlive the test.
        app.state.context.executor.shutdown(wait=True)
        assert (response.status_code, response.json()["error"]["code"]) == (504, "timeout")


class TestDocuments:
    def upload(self, client, key, access, name="notes.exe"):
        return client.post("/v1/documents", headers=auth(key), files=[("files", (name, b"data"))],
                           data={"access": access})

    @pytest.mark.parametrize("user", ["alice", "audrey"])
    def test_only_admins_upload(self, server, user):
        client, keys = server
        assert self.upload(client, keys[user], ["everyone"]).status_code == 403

    def test_invalid_principal_is_422(self, server):
        client, keys = server
        response = self.upload(client, keys["root"], ["grp:x"])
        assert (response.status_code, response.json()["error"]["code"]) == (422, "invalid_access")

    def test_job_progress_is_visible_to_its_tenant_only(self, server):
        client, keys = server
        created = self.upload(client, keys["root"], ["group:finance", "user:bob"])
        assert created.status_code == 202
        job_id = created.json()["job_id"]
        job = client.get(f"/v1/jobs/{job_id}", headers=auth(keys["root"])).json()
        assert job["items_failed"] == 1
        assert job["failures"][0]["code"] == "unsupported_file"
        assert client.get(f"/v1/jobs/{job_id}", headers=auth(keys["zadmin"])).status_code == 404
        assert client.get("/v1/jobs/no-such-job", headers=auth(keys["root"])).status_code == 404


class TestTraces:
    def test_auditor_lists_filters_and_reads_own_tenant_traces(self, server):
        client, keys = server
        trace_id = ask(client, keys["alice"], question="Where is the Eiffel tower?").json()["trace_id"]
        ask(client, keys["bob"])
        auditor = auth(keys["audrey"])
        everything = client.get("/v1/traces", headers=auditor).json()
        assert everything["total"] == 2
        by_alice = client.get("/v1/traces", params={"user": "alice"}, headers=auditor).json()
        assert [t["id"] for t in by_alice["traces"]] == [trace_id]
        by_text = client.get("/v1/traces", params={"text": "eiffel"}, headers=auditor).json()
        assert [t["id"] for t in by_text["traces"]] == [trace_id]
        assert client.get("/v1/traces", params={"status": "failed"}, headers=auditor).json()["total"] == 0
        trace = client.get(f"/v1/traces/{trace_id}", headers=auditor).json()
        assert trace["asked_by"] == "alice"
        assert trace["config"]["selection"] == {"mode": "explicit", "pipeline": "no_retrieval"}
        assert [s["kind"] for s in trace["steps"]] == ["generation", "prompt", "generation", "parse", "grounding"]

    def test_other_tenant_trace_is_404_and_invisible(self, server):
        client, keys = server
        trace_id = ask(client, keys["alice"]).json()["trace_id"]
        other = auth(keys["zaudit"])
        response = client.get(f"/v1/traces/{trace_id}", headers=other)
        assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
        assert client.get("/v1/traces", headers=other).json()["total"] == 0
        assert client.get("/v1/traces/export", headers=other).text == ""

    @pytest.mark.parametrize("user", ["alice", "root"])
    def test_only_auditors_read_traces(self, server, user):
        client, keys = server
        assert client.get("/v1/traces", headers=auth(keys[user])).status_code == 403

    def test_export_and_verify(self, server):
        client, keys = server
        ids = [ask(client, keys["alice"]).json()["trace_id"] for _ in range(2)]
        lines = client.get("/v1/traces/export", headers=auth(keys["audrey"])).text.splitlines()
        assert [json.loads(line)["trace"]["id"] for line in lines] == ids
        report = client.post("/v1/traces/verify", headers=auth(keys["audrey"])).json()
        assert report["ok"] is True
        assert report["checked"] == 2


class TestOpenAICompatible:
    def test_models_lists_pipelines_and_auto(self, server):
        client, keys = server
        models = client.get("/v1/models", headers=auth(keys["alice"])).json()
        ids = [m["id"] for m in models["data"]]
        assert models["object"] == "list"
        assert ids[0] == "auto"
        assert "no_retrieval" in ids

    def test_chat_completion(self, server, llm):
        client, keys = server
        response = client.post("/v1/chat/completions", headers=auth(keys["alice"]), json={
            "model": "no_retrieval", "temperature": 0.2,
            "messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "Capital of France?"}]}],
        })
        assert response.status_code == 200
        body = response.json()
        assert body["choices"][0]["message"] == {"role": "assistant", "content": "Paris is the capital."}
        assert body["docqa"]["trace_id"]
        assert body["usage"]["total_tokens"] > 0
        assert "Capital of France?" in llm.calls[-1]["prompt"]

    def test_chat_completion_stream(self, server):
        client, keys = server
        with client.stream("POST", "/v1/chat/completions", headers=auth(keys["alice"]), json={
            "model": "no_retrieval", "stream": True, "messages": [{"role": "user", "content": "Capital?"}],
        }) as r:
            raw = list(r.iter_lines())
        # One SSE comment per finished step keeps the connection visibly alive; clients skip comments.
        assert [line for line in raw if line.startswith(":")] == [
            ": step 1 prompt", ": step 2 generation", ": step 3 parse", ": step 0 generation", ": step 4 grounding"]
        lines = [line for line in raw if line.startswith("data: ")]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line[6:]) for line in lines[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        assert text == "Paris is the capital."
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
        assert chunks[-1]["docqa"]["trace_id"]

    def test_failure_inside_a_stream_reaches_openai_clients_as_an_api_error(self, tmp_path):
        import openai

        def fail(_prompt: str) -> str:
            raise RuntimeError("boom")

        app, keys = build_test_app(tmp_path, ScriptedChatGenerator(rules=[(".", fail)]))
        with TestClient(app, raise_server_exceptions=False) as http:
            client = openai.OpenAI(base_url="http://testserver/v1", api_key=keys["alice"], http_client=http,
                                   max_retries=0)
            stream = client.chat.completions.create(
                model="no_retrieval", messages=[{"role": "user", "content": "Capital?"}], stream=True)
            with pytest.raises(openai.APIError, match="the query failed"):
                for _chunk in stream:
                    pass
            # The slot was given back: the next question is answered, not refused as overload.
            assert http.get("/v1/models", headers=auth(keys["alice"])).status_code == 200
            assert app.state.context.slots.in_use == 0

    def test_no_user_message_is_422(self, server):
        client, keys = server
        response = client.post("/v1/chat/completions", headers=auth(keys["alice"]),
                               json={"model": "auto", "messages": [{"role": "system", "content": "x"}]})
        assert (response.status_code, response.json()["error"]["code"]) == (422, "invalid_request")


def parse_sse(lines: Any) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    name = None
    for line in lines:
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: ") and name is not None:
            events.append((name, json.loads(line[6:])))
            name = None
    return events
