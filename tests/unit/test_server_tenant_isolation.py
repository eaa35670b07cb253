"""Tenants through the HTTP API: user ids per tenant, and chain verification told per tenant."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from docqa.settings import Settings
from tests.support.audit import tamper
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app


@pytest.fixture
def server(tmp_path) -> tuple[TestClient, dict[str, str]]:
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="Paris is the capital."))
    with TestClient(app) as client:
        yield client, keys


def ask(client: TestClient, key: str) -> str:
    response = client.post("/v1/query", json={"question": "Capital of France?", "pipeline": "no_retrieval"},
                           headers=auth(key))
    assert response.status_code == 200, response.text
    return response.json()["trace_id"]


def post(client: TestClient, path: str, key: str, **body: Any) -> Any:
    return client.post(path, json=body, headers=auth(key))


class TestUserIdsPerTenant:
    def test_an_id_taken_in_another_tenant_is_free_and_a_duplicate_in_the_same_tenant_is_409(self, server):
        client, keys = server
        created = post(client, "/v1/admin/users", keys["zadmin"], id="alice")
        assert created.status_code == 201, created.text
        assert (created.json()["id"], created.json()["tenant"]) == ("alice", "globex")
        for admin in ("zadmin", "root"):
            again = post(client, "/v1/admin/users", keys[admin], id="alice")
            assert (again.status_code, again.json()["error"]["code"]) == (409, "conflict")

    def test_same_named_users_of_two_tenants_never_meet(self, server):
        client, keys = server
        zadmin = keys["zadmin"]
        assert post(client, "/v1/admin/users", zadmin, id="alice", groups=["finance"]).status_code == 201
        globex_key = post(client, "/v1/admin/keys", zadmin, user_id="alice").json()
        me = client.get("/v1/me", headers=auth(globex_key["key"])).json()
        assert me == {"user_id": "alice", "tenant": "globex", "role": "user", "groups": ["finance"]}
        listed = client.get("/v1/admin/keys", headers=auth(zadmin)).json()
        assert [k["id"] for k in listed if k["user_id"] == "alice"] == [globex_key["id"]]
        assert client.delete("/v1/admin/groups/finance/members/alice", headers=auth(zadmin)).json()["members"] == []
        acme_groups = client.get("/v1/admin/groups", headers=auth(keys["root"])).json()
        assert {"name": "finance", "members": ["alice"]} in acme_groups
        assert client.delete("/v1/admin/users/alice", headers=auth(zadmin)).json()["tenant"] == "globex"
        assert client.get("/v1/me", headers=auth(globex_key["key"])).status_code == 401
        assert client.get("/v1/me", headers=auth(keys["alice"])).json()["tenant"] == "acme"
        assert client.delete(f"/v1/admin/keys/{globex_key['id']}", headers=auth(keys["root"])).status_code == 404


class TestVerifyPerTenant:
    def test_the_report_counts_only_the_auditors_tenant(self, server):
        client, keys = server
        for _ in range(3):
            ask(client, keys["alice"])
        ask(client, keys["zed"])
        globex = post(client, "/v1/traces/verify", keys["zaudit"]).json()
        acme = post(client, "/v1/traces/verify", keys["audrey"]).json()
        assert globex == {"ok": True, "checked": 1, "broken": None, "notes": []}
        assert acme == {"ok": True, "checked": 3, "broken": None, "notes": []}

    def test_a_break_names_only_the_auditors_own_trace_and_no_link_numbers(self, server, tmp_path):
        client, keys = server
        ask(client, keys["alice"])
        edited = ask(client, keys["zed"])
        ask(client, keys["alice"])
        tamper(Settings(data_dir=tmp_path / "data"),
               ("UPDATE audit_traces SET answer = 'forged' WHERE id = :id", {"id": edited}))
        globex = post(client, "/v1/traces/verify", keys["zaudit"]).json()
        acme = post(client, "/v1/traces/verify", keys["audrey"]).json()
        assert (globex["ok"], globex["checked"], globex["broken"]["trace_id"]) == (False, 0, edited)
        assert (acme["ok"], acme["checked"], acme["broken"]["trace_id"]) == (False, 1, None)
        for report in (globex, acme):
            assert set(report) == {"ok", "checked", "broken", "notes"}
            assert not re.search(r"\d", report["broken"]["reason"] + " ".join(report["notes"]))
