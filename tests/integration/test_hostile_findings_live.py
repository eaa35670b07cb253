"""The reliability review's smaller findings, re-tried as a hostile user would against the deployed server:
gunicorn, PostgreSQL, two tenants, the scripted LLM on loopback, and the generator role pointed at a closed
port (so its failures show what callers learn about the LLM endpoint)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server_stack import Stack, server_stack

pytestmark = pytest.mark.integration


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


DEAD_LLM = f"http://127.0.0.1:{closed_port()}/v1"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


@pytest.fixture(scope="module")
def stack(workdir: Path) -> Iterator[Stack]:
    env = {"DOCQA_LLM_ROLES__GENERATOR__BASE_URL": DEAD_LLM, "DOCQA_LLM_MAX_RETRIES": "0"}
    with server_stack(workdir, workers=1, extra_env=env) as running:
        yield running


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.base_url, timeout=120) as http:
        yield http


def test_a_pasted_docqa_key_is_not_stored_in_clear(client, stack):
    key = stack.keys["bob"]
    question = f"Is my key {key} still valid for the quarterly policy report?"
    # ReSP's summaries reach the LLM (and its prompts the trace) before its generator role fails.
    response = client.post("/v1/query", headers=stack.auth("alice"),
                           json={"question": question, "pipeline": "resp", "options": {"max_iterations": 1}})
    assert response.status_code == 503, response.text
    # `dq_<key id>_<secret>`: the secret itself may hold `_`, so split after the key id, not at the last `_`
    # (a short tail would match unrelated trace text by chance).
    secret = key.split("_", 2)[2]
    assert client.get("/v1/traces", params={"text": secret}, headers=stack.auth("audrey")).json()["traces"] == []
    [listed] = client.get("/v1/traces", params={"text": "still valid for the quarterly"},
                          headers=stack.auth("audrey")).json()["traces"]
    stored = client.get(f"/v1/traces/{listed['id']}", headers=stack.auth("audrey")).json()
    assert any(step["llm_calls"] for step in stored["steps"])
    assert secret not in json.dumps(stored)
    assert "***" in stored["question"]


def test_llm_endpoint_failures_do_not_reveal_the_endpoint(client, stack, workdir):
    response = client.post("/v1/query", headers=stack.auth("alice"),
                           json={"question": "Hello?", "pipeline": "no_retrieval"})
    assert response.status_code == 503, response.text
    assert response.json()["error"]["message"] == "the language model is unavailable (its endpoint unreachable)"
    traces = client.get("/v1/traces", params={"status": "failed"}, headers=stack.auth("audrey")).json()["traces"]
    assert traces and all(DEAD_LLM.split("//")[1] not in json.dumps(t) for t in traces)
    # Operators still see where it failed, in the server log.
    assert DEAD_LLM.split("//")[1] in (workdir / "gunicorn.log").read_text()


def test_user_ids_are_per_tenant(client, stack):
    # "alice" exists in acme; globex's admin neither learns that nor is stopped from having its own alice.
    created = client.post("/v1/admin/users", headers=stack.auth("zadmin"), json={"id": "alice"})
    assert created.status_code == 201, created.text
    again = client.post("/v1/admin/users", headers=stack.auth("zadmin"), json={"id": "alice"})
    assert again.status_code == 409
    acme_alice = client.get("/v1/me", headers=stack.auth("alice")).json()
    assert acme_alice["tenant"] == "acme"


def test_verify_reports_only_the_tenants_own_figures(client, stack):
    body = client.post("/v1/traces/verify", headers=stack.auth("zaudit")).json()
    assert set(body) == {"ok", "checked", "broken", "notes"}
    assert body["ok"] is True
    globex_traces = client.get("/v1/traces", headers=stack.auth("zaudit")).json()["total"]
    assert body["checked"] == globex_traces


@pytest.mark.parametrize("bundle", [
    {"resourceType": "Bundle", "entry": [
        {"resource": {"resourceType": "Patient", "id": "p1"}},
        {"resource": {"resourceType": "Observation", "id": "o1", "subject": {"reference": "Patient/p1"},
                      "code": {"coding": "8302-2"}, "effectiveDateTime": "2020-01-01T00:00:00Z"}}]},
    "deep",
])
def test_malformed_record_bundles_are_422(client, stack, bundle):
    raw = ("[" * 50_000 + "]" * 50_000).encode() if bundle == "deep" else json.dumps(bundle).encode()
    response = client.post("/v1/records", headers=stack.auth("root"), data={"access": ["everyone"]},
                           files=[("bundle", ("patient.json", raw, "application/json"))])
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"].startswith("patient.json")
