"""Accounts as revision 0003 stored them, and checks that the tenant-scoped user migration kept them (tests only).

Usage:
    upgrade_database(settings, BEFORE); seed_old_accounts(url); upgrade_database(settings)
    assert account_rows(url) == OLD_ROWS_AFTER
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from docqa.accounts import directory, keys
from docqa.db import make_engine

BEFORE = "0003_ingestion_jobs"
NOW = datetime(2026, 11, 1, tzinfo=UTC)

# (tenant, user, role), (key id, user), (group id, tenant, name), (group id, user)
USERS = [("acme", "alice", "user"), ("globex", "zed", "admin")]
KEYS = [("a" * 16, "alice"), ("b" * 16, "zed")]
GROUPS = [(1, "acme", "finance"), (2, "globex", "ops")]
MEMBERS = [(1, "alice"), (2, "zed")]


def seed_old_accounts(url: str) -> None:
    """Rows in the 0003 schema, where a user id was unique across the server."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for tenant in sorted({t for t, _, _ in USERS}):
                conn.execute(text("INSERT INTO account_tenants (id, created_at) VALUES (:t, :now)"),
                             {"t": tenant, "now": NOW})
            for tenant, user, role in USERS:
                conn.execute(text("INSERT INTO account_users (id, tenant_id, role, display_name, active, created_at) "
                                  "VALUES (:u, :t, :r, '', :a, :now)"),
                             {"u": user, "t": tenant, "r": role, "a": True, "now": NOW})
            for group_id, tenant, name in GROUPS:
                conn.execute(text("INSERT INTO account_groups (id, tenant_id, name, created_at) "
                                  "VALUES (:g, :t, :n, :now)"), {"g": group_id, "t": tenant, "n": name, "now": NOW})
            for group_id, user in MEMBERS:
                conn.execute(text("INSERT INTO account_group_members (group_id, user_id) VALUES (:g, :u)"),
                             {"g": group_id, "u": user})
            for key_id, user in KEYS:
                conn.execute(text("INSERT INTO account_api_keys (id, user_id, name, secret_sha256, created_at) "
                                  "VALUES (:k, :u, 'old', :s, :now)"),
                             {"k": key_id, "u": user, "s": "0" * 64, "now": NOW})
    finally:
        engine.dispose()


def rows(url: str, sql: str) -> set[tuple]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {tuple(r) for r in conn.execute(text(sql))}
    finally:
        engine.dispose()


def assert_old_accounts_kept(url: str, *, scoped: bool) -> None:
    """Every seeded user, key and membership is still there; with `scoped`, keys and memberships carry the tenant."""
    tenant_of = {user: tenant for tenant, user, _ in USERS}
    assert rows(url, "SELECT tenant_id, id, role FROM account_users") == set(USERS)
    if scoped:
        assert rows(url, "SELECT id, tenant_id, user_id FROM account_api_keys") == {
            (k, tenant_of[u], u) for k, u in KEYS}
        assert rows(url, "SELECT group_id, tenant_id, user_id FROM account_group_members") == {
            (g, tenant_of[u], u) for g, u in MEMBERS}
    else:
        assert rows(url, "SELECT id, user_id FROM account_api_keys") == set(KEYS)
        assert rows(url, "SELECT group_id, user_id FROM account_group_members") == set(MEMBERS)


def assert_ids_are_per_tenant(url: str) -> None:
    """After the migration: a second `alice` in another tenant, and the database refuses cross-tenant references."""
    engine = make_engine(url)  # SQLite enforces foreign keys only with the pragma docqa's engines set
    try:
        with Session(engine) as session:
            directory.create_user(session, "globex", "alice", "user", ["ops"])
            _, row = keys.create_key(session, "globex", "alice")
            session.commit()
            assert (row.tenant_id, row.user_id) == ("globex", "alice")
            assert sorted(u.id for u in directory.get_group(session, "globex", "ops").members) == ["alice", "zed"]
            assert [g.name for g in directory.get_user(session, "acme", "alice").groups] == ["finance"]
        for sql in ("INSERT INTO account_api_keys (id, tenant_id, user_id, name, secret_sha256, created_at) "
                    "VALUES ('cccccccccccccccc', 'globex', 'bob', '', '', :now)",
                    "INSERT INTO account_group_members (group_id, tenant_id, user_id) VALUES (1, 'acme', 'zed')"):
            try:
                with engine.begin() as conn:
                    conn.execute(text(sql), {"now": NOW})
            except IntegrityError:
                continue
            raise AssertionError(f"the database accepted a reference to a user of another tenant: {sql}")
    finally:
        engine.dispose()
