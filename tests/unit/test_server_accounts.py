"""Accounts: hashed API keys, tenant-scoped users and groups, the scope derived from a caller."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from docqa.access import AccessScope
from docqa.accounts import directory, keys
from docqa.accounts.directory import AccountError
from docqa.accounts.identity import Caller
from docqa.accounts.models import ApiKey
from docqa.accounts.oidc import token_caller
from docqa.db import Base


@pytest.fixture
def session():
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as s:
        yield s


class TestKeys:
    def test_only_the_digest_is_stored_and_the_key_verifies(self, session):
        directory.create_user(session, "acme", "alice", "user", ["finance", "hr"])
        key, row = keys.create_key(session, "acme", "alice", "laptop")
        stored = session.scalar(select(ApiKey))
        assert key.split("_", 2)[2] not in (stored.secret_sha256, stored.name, stored.id)
        caller = keys.verify_key(session, key)
        assert caller == Caller("alice", "acme", "user", frozenset({"finance", "hr"}), row.id)

    @pytest.mark.parametrize("mangle", [lambda k: k[:-1] + ("A" if k[-1] != "A" else "B"), lambda k: "x" + k,
                                        lambda k: k.replace("dq_", "xx_"), lambda k: "", lambda k: "dq__"])
    def test_wrong_keys_do_not_verify(self, session, mangle):
        directory.create_user(session, "acme", "alice", "user")
        key, _ = keys.create_key(session, "acme", "alice")
        assert keys.verify_key(session, mangle(key)) is None

    def test_revoked_keys_and_inactive_users_do_not_verify(self, session):
        directory.create_user(session, "acme", "alice", "user")
        key, row = keys.create_key(session, "acme", "alice")
        keys.revoke_key(session, "acme", row.id)
        assert keys.verify_key(session, key) is None
        other, _ = keys.create_key(session, "acme", "alice")
        directory.deactivate_user(session, "acme", "alice")
        assert keys.verify_key(session, other) is None
        with pytest.raises(AccountError):
            keys.create_key(session, "acme", "alice")

    def test_keys_of_another_tenant_are_not_found(self, session):
        directory.create_user(session, "acme", "alice", "user")
        _, row = keys.create_key(session, "acme", "alice")
        with pytest.raises(AccountError) as caught:
            keys.revoke_key(session, "globex", row.id)
        assert caught.value.code == "not_found"
        assert keys.list_keys(session, "globex") == []


class TestDirectory:
    def test_names_roles_and_duplicates_are_checked(self, session):
        with pytest.raises(AccountError):
            directory.create_user(session, "acme", "bad name", "user")
        with pytest.raises(AccountError):
            directory.create_user(session, "acme", "alice", "superuser")
        directory.create_user(session, "acme", "alice", "user")
        with pytest.raises(AccountError) as caught:
            directory.create_user(session, "acme", "alice", "admin")
        assert caught.value.code == "conflict"

    def test_groups_are_per_tenant(self, session):
        directory.create_user(session, "acme", "alice", "user", ["finance"])
        directory.create_user(session, "globex", "dave", "user", ["finance"])
        assert [g.name for g in directory.list_groups(session, "acme")] == ["finance"]
        assert [u.id for u in directory.get_group(session, "globex", "finance").members] == ["dave"]
        with pytest.raises(AccountError):
            directory.set_membership(session, "globex", "finance", "alice", True)


class TestTenantScopedUserIds:
    """The same user id in two tenants names two independent users: nothing done to one reaches the other."""

    def test_each_tenant_has_its_own_alice(self, session):
        acme = directory.create_user(session, "acme", "alice", "user", ["finance"])
        globex = directory.create_user(session, "globex", "alice", "admin", ["finance"], "Alice of Globex")
        assert directory.get_user(session, "globex", "alice") is globex
        assert directory.get_user(session, "acme", "alice") is acme
        assert [(u.tenant_id, u.role) for u in directory.list_users(session, "globex")] == [("globex", "admin")]
        directory.set_membership(session, "acme", "finance", "alice", False)
        assert [g.name for g in globex.groups] == ["finance"]
        assert [u.tenant_id for u in directory.get_group(session, "globex", "finance").members] == ["globex"]
        assert directory.get_group(session, "acme", "finance").members == []
        directory.deactivate_user(session, "acme", "alice")
        assert globex.active and not acme.active

    def test_keys_resolve_to_the_user_of_their_own_tenant(self, session):
        directory.create_user(session, "acme", "alice", "user", ["finance"])
        directory.create_user(session, "globex", "alice", "admin")
        acme_key, acme_row = keys.create_key(session, "acme", "alice")
        globex_key, globex_row = keys.create_key(session, "globex", "alice")
        finance = frozenset({"finance"})
        assert keys.verify_key(session, acme_key) == Caller("alice", "acme", "user", finance, acme_row.id)
        assert keys.verify_key(session, globex_key) == Caller("alice", "globex", "admin", frozenset(), globex_row.id)
        # `user:alice` reads documents of the caller's tenant only: the scope carries the tenant.
        assert keys.verify_key(session, globex_key).scope() == AccessScope("globex", frozenset({"user:alice"}))
        assert [k.id for k in keys.list_keys(session, "globex")] == [globex_row.id]
        with pytest.raises(AccountError):
            keys.revoke_key(session, "globex", acme_row.id)
        directory.deactivate_user(session, "globex", "alice")
        assert keys.verify_key(session, globex_key) is None
        assert keys.verify_key(session, acme_key) is not None

    def test_bearer_tokens_name_a_user_of_one_tenant_with_its_own_rate_limit_bucket(self, session):
        directory.create_user(session, "acme", "alice", "user", ["finance"])
        directory.create_user(session, "globex", "alice", "admin")
        acme, globex = token_caller(session, "alice", "acme"), token_caller(session, "alice", "globex")
        assert (acme.tenant, acme.role, acme.groups) == ("acme", "user", frozenset({"finance"}))
        assert (globex.tenant, globex.role, globex.groups) == ("globex", "admin", frozenset())
        assert acme.key_id != globex.key_id
        assert token_caller(session, "alice", "initech") is None


def test_caller_scope_holds_user_and_groups_only():
    scope = Caller("alice", "acme", "user", frozenset({"finance"})).scope()
    assert scope == AccessScope("acme", frozenset({"user:alice", "group:finance"}))
    assert scope.effective_principals == ["everyone", "group:finance", "user:alice"]
