"""The web UI's routes in-process: `/v1/me`, the static files under `/ui/`, and what those files may not do."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from docqa.server.routes.ui import STATIC_DIR
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> tuple[TestClient, dict[str, str]]:
    app, keys = build_test_app(tmp_path_factory.mktemp("ui"), ScriptedChatGenerator(default="unused"))
    with TestClient(app, follow_redirects=False) as client:
        yield client, keys


class TestMe:
    @pytest.mark.parametrize("user,tenant,role,groups", [
        ("alice", "acme", "user", ["finance"]),
        ("root", "acme", "admin", []),
        ("zaudit", "globex", "auditor", []),
    ])
    def test_names_the_keys_owner(self, server, user, tenant, role, groups):
        client, keys = server
        response = client.get("/v1/me", headers=auth(keys[user]))
        assert response.status_code == 200
        assert response.json() == {"user_id": user, "tenant": tenant, "role": role, "groups": groups}

    def test_needs_a_valid_key(self, server):
        client, _ = server
        for headers in ({}, auth("dq_0123456789abcdef_wrongsecret")):
            response = client.get("/v1/me", headers=headers)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"


class TestStaticFiles:
    @pytest.mark.parametrize("path", ["/", "/ui"])
    def test_redirects_to_the_ui(self, server, path):
        client, _ = server
        response = client.get(path)
        assert response.status_code == 307
        assert response.headers["location"] == "/ui/"

    def test_index_is_served_with_a_strict_content_security_policy(self, server):
        client, _ = server
        response = client.get("/ui/")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        assert '<script type="module" src="app.js">' in response.text
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'self'" in policy and "unsafe" not in policy
        assert response.headers["x-content-type-options"] == "nosniff"

    @pytest.mark.parametrize("name,media_type", [("app.js", "javascript"), ("app.css", "text/css")])
    def test_assets_have_their_media_types(self, server, name, media_type):
        client, _ = server
        response = client.get(f"/ui/{name}")
        assert response.status_code == 200
        assert media_type in response.headers["content-type"]

    @pytest.mark.parametrize("path", ["/ui/nope.js", "/ui/%2e%2e/routes/ui.py", "/ui/..%2f..%2fpyproject.toml"])
    def test_unknown_or_escaping_paths_are_404(self, server, path):
        client, _ = server
        response = client.get(path)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"

    def test_ui_routes_stay_out_of_the_api_schema(self, server):
        client, _ = server
        paths = client.get("/openapi.json").json()["paths"]
        assert "/v1/me" in paths
        assert not [p for p in paths if p == "/" or p.startswith("/ui")]


class TestStaticSources:
    """Data is untrusted: the UI must never hand it to an HTML parser, and must load nothing from elsewhere."""

    SOURCES = sorted(STATIC_DIR.glob("*.*"))

    def test_the_ui_files_exist(self):
        assert {"index.html", "app.js", "api.js", "dom.js", "app.css"} <= {p.name for p in self.SOURCES}

    @pytest.mark.parametrize("path", [p for p in SOURCES if p.suffix == ".js"], ids=lambda p: p.name)
    def test_no_html_parsing_sinks_in_scripts(self, path):
        sinks = re.findall(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function\(",
                           path.read_text())
        assert not sinks, f"{path.name}: {sinks}"

    @pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
    def test_no_external_resources(self, path):
        # An XML namespace is a name, never fetched.
        text = re.sub(r'xmlns="[^"]*"', "", path.read_text())
        assert not re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, flags=re.IGNORECASE)
