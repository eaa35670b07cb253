"""An in-process server for unit tests: SQLite under a temp dir, accounts seeded, a scripted LLM (tests only).

Usage:
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="Paris"))
    client = TestClient(app)
    client.post("/v1/query", json={...}, headers=auth(keys["alice"]))
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import FastAPI

from docqa.accounts import directory
from docqa.accounts.keys import create_key
from docqa.runtime import Runtime
from docqa.schema import upgrade_database
from docqa.server.app import create_app
from docqa.server.config import ServerSettings

# user id -> (tenant, role, groups)
ACCOUNTS: dict[str, tuple[str, str, list[str]]] = {
    "alice": ("acme", "user", ["finance"]),
    "bob": ("acme", "user", []),
    "root": ("acme", "admin", []),
    "audrey": ("acme", "auditor", []),
    "zed": ("globex", "user", []),
    "zadmin": ("globex", "admin", []),
    "zaudit": ("globex", "auditor", []),
}


def seed_accounts(settings: ServerSettings, accounts: dict[str, tuple[str, str, list[str]]]) -> dict[str, str]:
    """Create the users and one API key each; returns user id -> key."""
    from docqa.db import session_factory

    keys: dict[str, str] = {}
    with session_factory(settings)() as session:
        for user_id, (tenant, role, groups) in accounts.items():
            directory.create_user(session, tenant, user_id, role, groups)
            keys[user_id], _ = create_key(session, tenant, user_id, name="test")
        session.commit()
    return keys


def build_test_app(tmp_path: Path, chat_generator: Any, **overrides: Any) -> tuple[FastAPI, dict[str, str]]:
    settings = ServerSettings(data_dir=tmp_path / "data", **overrides)
    upgrade_database(settings)
    keys = seed_accounts(settings, ACCOUNTS)
    runtime = Runtime(settings, chat_generator_factory=lambda _role: chat_generator)
    return create_app(settings, runtime=runtime), keys


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}
