"""API keys: `dq_<key id>_<secret>`; only the SHA-256 of the secret is stored.

Usage:
    key, row = create_key(session, tenant="acme", user_id="alice", name="laptop")   # show `key` once
    caller = verify_key(session, key)                                               # Caller or None
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from docqa.accounts.directory import AccountError, get_user
from docqa.accounts.identity import Caller
from docqa.accounts.models import ApiKey, User, utcnow

PREFIX = "dq"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(session: Session, tenant: str, user_id: str, name: str = "") -> tuple[str, ApiKey]:
    """A new key for an active user of `tenant`; returns the full key (never stored) and its row."""
    user = get_user(session, tenant, user_id)
    if user is None:
        raise AccountError("not_found", f"user {user_id!r} not found")
    if not user.active:
        raise AccountError("conflict", f"user {user_id!r} is deactivated")
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    row = ApiKey(id=key_id, tenant_id=user.tenant_id, user_id=user.id, name=name[:200], secret_sha256=_digest(secret))
    session.add(row)
    session.flush()
    return f"{PREFIX}_{key_id}_{secret}", row


def parse_key(key: str) -> tuple[str, str] | None:
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or len(parts[1]) != 16 or not parts[2]:
        return None
    return parts[1], parts[2]


def verify_key(session: Session, key: str) -> Caller | None:
    """The caller a key belongs to, or None when the key is malformed, unknown, revoked or its user inactive."""
    parsed = parse_key(key)
    if parsed is None:
        return None
    key_id, secret = parsed
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        return None
    if not hmac.compare_digest(row.secret_sha256, _digest(secret)):
        return None
    user: User = row.user
    if not user.active:
        return None
    return Caller.of_user(user, row.id)


def list_keys(session: Session, tenant: str) -> list[ApiKey]:
    query = select(ApiKey).where(ApiKey.tenant_id == tenant).order_by(ApiKey.created_at, ApiKey.id)
    return list(session.scalars(query))


def revoke_key(session: Session, tenant: str, key_id: str) -> ApiKey:
    row = session.get(ApiKey, key_id)
    if row is None or row.tenant_id != tenant:
        raise AccountError("not_found", f"key {key_id!r} not found")
    if row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return row
