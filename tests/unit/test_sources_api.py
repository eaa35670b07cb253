"""The sources admin API and status page: admins of the tenant only, narrower paths and hosts than the CLI,
a sync started over HTTP (audited as the admin), status with counts and errors, removal with the documents."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from docqa.audit.events import DOCUMENT_DELETED, DOCUMENT_INGESTED, SOURCE_DEFINED, SOURCE_REMOVED
from docqa.schema import upgrade_database
from docqa.server.app import create_app
from docqa.server.config import ServerSettings
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import ACCOUNTS, auth, seed_accounts
from tests.support.sources_fakes import SharedRuntime, audit_events, stored_by_document


@pytest.fixture
def share(tmp_path: Path) -> Path:
    root = tmp_path / "shares" / "handbook"
    (root / "finance").mkdir(parents=True)
    (root / "finance" / "budget.txt").write_text("The 2026 travel budget is 40,000 euros. " * 4)
    (root / "welcome.md").write_text("# Welcome\n\nOffices open at nine every weekday. " * 3)
    return root


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    SharedRuntime.reset()
    monkeypatch.setattr("docqa.runtime.Runtime", SharedRuntime)
    settings = ServerSettings(data_dir=tmp_path / "data", chunk_words=20, chunk_overlap_words=5,
                              sources_roots=str(tmp_path / "shares"))
    upgrade_database(settings)
    keys = seed_accounts(settings, ACCOUNTS)
    runtime = SharedRuntime(settings, chat_generator_factory=lambda _role: ScriptedChatGenerator(default="x"))
    with TestClient(create_app(settings, runtime=runtime)) as client:
        yield client, keys, settings


def test_admin_defines_syncs_inspects_and_removes_a_source(server, share, tmp_path) -> None:
    client, keys, settings = server
    acl = tmp_path / "shares" / "handbook.acl"
    acl.write_text("finance/** group:finance\n")
    body = {"name": "handbook", "type": "folder", "path": str(share), "allow": ["group:staff"],
            "acl_map": str(acl), "every": "1h"}
    assert client.post("/v1/admin/sources", json=body, headers=auth(keys["alice"])).status_code == 403
    created = client.post("/v1/admin/sources", json=body, headers=auth(keys["root"]))
    assert created.status_code == 201, created.text
    assert created.json()["next_run_at"] is not None
    again = client.post("/v1/admin/sources", json=body, headers=auth(keys["root"]))
    assert (again.status_code, again.json()["error"]["code"]) == (409, "source_exists")
    [defined] = audit_events(settings, SOURCE_DEFINED)  # the refused second definition recorded nothing
    assert (defined.actor, defined.tenant, defined.target) == ("user:root", "acme", "source:handbook")
    assert (defined.after["access"], defined.after["acl_map"]) == (["group:staff"], str(acl))

    started = client.post("/v1/admin/sources/handbook/sync", headers=auth(keys["root"]))
    assert started.status_code == 202  # the test client runs the background sync before returning
    status = client.get("/v1/admin/sources/handbook", headers=auth(keys["root"])).json()
    assert status["last_status"] == "succeeded" and status["last_counts"]["added"] == 2
    assert status["documents"] == 2 and status["last_error"] is None
    assert {e.actor for e in audit_events(settings, DOCUMENT_INGESTED)} == {"user:root"}

    # Access follows the map: the budget only for group:finance, the rest for --allow.
    docs = stored_by_document("acme")
    assert {tuple(c.meta["access"]) for c in docs["handbook:finance/budget.txt"]} == {("group:finance",)}
    assert {tuple(c.meta["access"]) for c in docs["handbook:welcome.md"]} == {("group:staff",)}

    # Another tenant's admin sees none of it.
    other = client.get("/v1/admin/sources/handbook", headers=auth(keys["zadmin"]))
    assert (other.status_code, other.json()["error"]["code"]) == (404, "source_not_found")
    assert client.get("/v1/admin/sources", headers=auth(keys["zadmin"])).json() == []
    listed = client.get("/v1/admin/sources", headers=auth(keys["root"])).json()
    assert [s["name"] for s in listed] == ["handbook"]

    removed = client.delete("/v1/admin/sources/handbook", headers=auth(keys["root"]))
    assert removed.json() == {"name": "handbook", "removed": True, "documents_deleted": 2}
    assert stored_by_document("acme") == {}
    assert {e.actor for e in audit_events(settings, DOCUMENT_DELETED)} == {"user:root"}
    [removal] = audit_events(settings, SOURCE_REMOVED)
    assert (removal.actor, removal.before, removal.after) == ("user:root", defined.after, None)


REFUSED = [
    ({"type": "folder", "path": "/etc"}, "DOCQA_SOURCES_ROOTS"),
    ({"type": "git", "url": "file:///etc"}, "DOCQA_SOURCES_ROOTS"),
    ({"type": "git", "url": "/root/repo"}, "DOCQA_SOURCES_ROOTS"),
    ({"type": "website", "url": "http://127.0.0.1:8080/"}, "non-public address"),
    ({"type": "website", "url": "http://169.254.169.254/latest/"}, "non-public address"),
    ({"type": "imap", "host": "localhost", "user": "u", "password_env": "PW"}, "non-public address"),
    ({"type": "folder", "path": "/tmp", "acl_map": "/etc/shadow"}, "DOCQA_SOURCES_ROOTS"),
]


def test_paths_and_hosts_outside_what_the_api_may_name_are_refused(server) -> None:
    client, keys, _ = server
    for body, reason in REFUSED:
        answer = client.post("/v1/admin/sources", json={"name": "x", "allow": ["everyone"], **body},
                             headers=auth(keys["root"]))
        assert answer.status_code == 422 and answer.json()["error"]["code"] == "invalid_source", body
        assert reason in answer.json()["error"]["message"], body
    assert client.get("/v1/admin/sources", headers=auth(keys["root"])).json() == []


def test_a_failed_sync_shows_its_reason(server, share) -> None:
    client, keys, _ = server
    client.post("/v1/admin/sources", json={"name": "handbook", "type": "folder", "path": str(share),
                                           "allow": ["group:staff"]}, headers=auth(keys["root"]))
    share.rename(share.with_name("gone"))
    client.post("/v1/admin/sources/handbook/sync", headers=auth(keys["root"]))
    status = client.get("/v1/admin/sources/handbook", headers=auth(keys["root"])).json()
    assert status["last_status"] == "failed" and "does not exist" in status["last_error"]


def test_status_page_is_served_with_the_ui_headers(server) -> None:
    client, _, _ = server
    page = client.get("/ui/sources.html")
    assert page.status_code == 200 and 'id="sources-table"' in page.text and "sources.js" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    script = client.get("/ui/sources.js").text
    assert "/v1/admin/sources" in script and "innerHTML" not in script
