"""OIDC / JWT bearer tokens beside API keys: signature, issuer, audience, expiry, algorithm and user checks."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.testclient import TestClient

from docqa.accounts import directory
from docqa.db import session_factory
from docqa.errors import ConfigurationError
from docqa.server.app import create_app
from docqa.server.config import ServerSettings
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app

ISSUER = "https://idp.example.test/"
AUDIENCE = "docqa"


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def jwks_of(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {"keys": [{**public, "kid": kid, "use": "sig", "alg": "RS256"}]}


@pytest.fixture(scope="module")
def signing_key() -> rsa.RSAPrivateKey:
    return new_key()


def token(key: Any, *, kid: str = "k1", algorithm: str = "RS256", **overrides: Any) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 300, **overrides}
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": kid})


@pytest.fixture
def jwks_file(tmp_path: Path, signing_key) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks_of(signing_key, "k1")))
    return path


def client_for(tmp_path: Path, **oidc: Any) -> tuple[TestClient, dict[str, str]]:
    """Without a tenant claim, a token names a user of the server's tenant: acme unless `tenant` says otherwise."""
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="Paris"), oidc_issuer=ISSUER,
                               oidc_audience=AUDIENCE, **{"tenant": "acme", **oidc})
    return TestClient(app), keys


@pytest.fixture
def server(tmp_path, jwks_file) -> Iterator[tuple[TestClient, dict[str, str]]]:
    client, keys = client_for(tmp_path, oidc_jwks_file=str(jwks_file))
    with client:
        yield client, keys


def refused(response) -> bool:
    return response.status_code == 401 and response.json()["error"]["code"] == "unauthorized"


class TestTokens:
    def test_valid_token_resolves_to_the_directory_user(self, server, signing_key):
        client, _ = server
        response = client.get("/v1/me", headers=auth(token(signing_key)))
        assert response.status_code == 200, response.text
        assert response.json() == {"user_id": "alice", "tenant": "acme", "role": "user", "groups": ["finance"]}

    def test_api_keys_still_work(self, server):
        client, keys = server
        assert client.get("/v1/me", headers=auth(keys["bob"])).json()["user_id"] == "bob"

    def test_role_comes_from_the_directory(self, server, signing_key):
        client, _ = server
        headers = auth(token(signing_key, sub="audrey", roles=["admin"]))
        assert client.get("/v1/me", headers=headers).json()["role"] == "auditor"
        denied = client.post("/v1/query", json={"question": "Capital of France?"}, headers=headers)
        assert denied.status_code == 403

    @pytest.mark.parametrize(
        "claims",
        [
            {"exp": int(time.time()) - 3600},
            {"aud": "another-service"},
            {"iss": "https://evil.example.test/"},
            {"sub": "nobody"},
            {"sub": None},
            {"exp": None},
            {"sub": 42},
        ],
        ids=["expired", "audience", "issuer", "unknown-user", "no-subject", "no-expiry", "subject-not-a-string"],
    )
    def test_invalid_claims_are_refused(self, server, signing_key, claims):
        client, _ = server
        assert refused(client.get("/v1/me", headers=auth(token(signing_key, **claims))))

    def test_a_token_signed_by_another_key_is_refused(self, server):
        client, _ = server
        assert refused(client.get("/v1/me", headers=auth(token(new_key()))))

    def test_unsigned_and_hmac_tokens_are_refused(self, server, signing_key):
        client, _ = server
        public_pem = signing_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": int(time.time()) + 300}
        unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": "k1"})
        # The classic confusion attack: HMAC keyed with the provider's public key.
        header = jwt.utils.base64url_encode(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
        body = jwt.utils.base64url_encode(json.dumps(claims).encode())
        signature = hmac.new(public_pem, header + b"." + body, hashlib.sha256).digest()
        confused = (header + b"." + body + b"." + jwt.utils.base64url_encode(signature)).decode()
        for forged in (unsigned, confused):
            assert refused(client.get("/v1/me", headers=auth(forged)))

    def test_a_deactivated_user_is_refused(self, server, signing_key, tmp_path):
        client, _ = server
        settings = ServerSettings(data_dir=tmp_path / "data")
        with session_factory(settings)() as session:
            directory.deactivate_user(session, "acme", "alice")
            session.commit()
        assert refused(client.get("/v1/me", headers=auth(token(signing_key))))


class TestTenantClaim:
    def test_token_tenant_must_match_the_users_tenant(self, tmp_path, jwks_file, signing_key):
        client, _ = client_for(tmp_path, oidc_jwks_file=str(jwks_file), oidc_tenant_claim="tenant")
        with client:
            assert client.get("/v1/me", headers=auth(token(signing_key, tenant="acme"))).status_code == 200
            assert refused(client.get("/v1/me", headers=auth(token(signing_key, sub="zed", tenant="acme"))))
            assert refused(client.get("/v1/me", headers=auth(token(signing_key))))


class TestTenantScopedUserIds:
    """User ids are per tenant, so a token's subject is looked up in one tenant, never in whichever has it."""

    @staticmethod
    def add_globex_alice(client: TestClient, keys: dict[str, str]) -> None:
        created = client.post("/v1/admin/users", json={"id": "alice", "role": "auditor"}, headers=auth(keys["zadmin"]))
        assert created.status_code == 201, created.text

    def test_without_a_tenant_claim_the_subject_is_a_user_of_the_servers_tenant(self, tmp_path, jwks_file,
                                                                                signing_key):
        client, keys = client_for(tmp_path, oidc_jwks_file=str(jwks_file), tenant="globex")
        with client:
            assert refused(client.get("/v1/me", headers=auth(token(signing_key))))  # acme's alice is not globex's
            assert client.get("/v1/me", headers=auth(token(signing_key, sub="zed"))).json()["tenant"] == "globex"
            self.add_globex_alice(client, keys)
            me = client.get("/v1/me", headers=auth(token(signing_key))).json()
            assert me == {"user_id": "alice", "tenant": "globex", "role": "auditor", "groups": []}

    def test_the_tenant_claim_picks_that_tenants_user(self, tmp_path, jwks_file, signing_key):
        client, keys = client_for(tmp_path, oidc_jwks_file=str(jwks_file), oidc_tenant_claim="tenant")
        with client:
            self.add_globex_alice(client, keys)
            globex = client.get("/v1/me", headers=auth(token(signing_key, tenant="globex"))).json()
            acme = client.get("/v1/me", headers=auth(token(signing_key, tenant="acme"))).json()
            assert (globex["tenant"], globex["role"]) == ("globex", "auditor")
            assert (acme["tenant"], acme["role"], acme["groups"]) == ("acme", "user", ["finance"])


class _JwksHandler(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_args: Any) -> None:
        pass


def test_keys_are_fetched_from_the_providers_jwks_url(tmp_path, signing_key):
    handler = type("Handler", (_JwksHandler,), {"body": json.dumps(jwks_of(signing_key, "k1")).encode()})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_port}/jwks.json"
        client, _ = client_for(tmp_path, oidc_jwks_url=url)
        with client:
            assert client.get("/v1/me", headers=auth(token(signing_key))).json()["user_id"] == "alice"
            assert refused(client.get("/v1/me", headers=auth(token(signing_key, kid="rotated-away"))))
    finally:
        httpd.shutdown()


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"oidc_issuer": ISSUER}, "DOCQA_OIDC_AUDIENCE"),
     ({"oidc_issuer": ISSUER, "oidc_audience": AUDIENCE}, "DOCQA_OIDC_JWKS_URL"),
     ({"oidc_issuer": ISSUER, "oidc_audience": AUDIENCE, "oidc_jwks_url": "https://idp.example.test/jwks",
       "oidc_jwks_file": "/etc/jwks.json"}, "one of"),
     ({"oidc_issuer": ISSUER, "oidc_audience": AUDIENCE, "oidc_jwks_file": "/nonexistent/jwks.json"}, "key set")],
)
def test_incomplete_configuration_fails_at_start(tmp_path, settings, message):
    with pytest.raises(ConfigurationError, match=message):
        create_app(ServerSettings(data_dir=tmp_path / "data", **settings))
