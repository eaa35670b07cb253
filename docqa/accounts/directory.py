"""Tenants, users and groups. Every function takes the tenant it acts in: nothing crosses tenants.

Usage:
    with session_factory(settings)() as session:
        create_user(session, tenant="acme", user_id="alice", role="user", groups=["finance"])
        session.commit()
"""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from docqa.accounts.models import ROLES, Group, Tenant, User

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


class AccountError(ValueError):
    """A request about accounts that cannot be carried out (bad name, unknown user, duplicate ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_name(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise AccountError(
            "invalid_name", f"{kind} must be 1-64 letters, digits or . _ @ - and start with a letter or digit"
        )
    return value


def ensure_tenant(session: Session, tenant: str) -> Tenant:
    check_name("tenant", tenant)
    row = session.get(Tenant, tenant)
    if row is None:
        row = Tenant(id=tenant)
        session.add(row)
        session.flush()
    return row


def get_user(session: Session, tenant: str, user_id: str) -> User | None:
    return session.get(User, {"tenant_id": tenant, "id": user_id})


def list_users(session: Session, tenant: str) -> list[User]:
    return list(session.scalars(select(User).where(User.tenant_id == tenant).order_by(User.id)))


def get_group(session: Session, tenant: str, name: str) -> Group | None:
    return session.scalar(select(Group).where(Group.tenant_id == tenant, Group.name == name))


def list_groups(session: Session, tenant: str) -> list[Group]:
    return list(session.scalars(select(Group).where(Group.tenant_id == tenant).order_by(Group.name)))


def create_group(session: Session, tenant: str, name: str) -> Group:
    check_name("group", name)
    ensure_tenant(session, tenant)
    if get_group(session, tenant, name) is not None:
        raise AccountError("conflict", f"group {name!r} already exists")
    group = Group(tenant_id=tenant, name=name)
    session.add(group)
    session.flush()
    return group


def _group_or_create(session: Session, tenant: str, name: str) -> Group:
    return get_group(session, tenant, name) or create_group(session, tenant, name)


def create_user(
    session: Session, tenant: str, user_id: str, role: str, groups: list[str] | None = None, display_name: str = ""
) -> User:
    """Create a user (and its tenant and groups when new). User ids are unique within their tenant only."""
    check_name("user id", user_id)
    if role not in ROLES:
        raise AccountError("invalid_role", f"role must be one of {', '.join(ROLES)}")
    ensure_tenant(session, tenant)
    if get_user(session, tenant, user_id) is not None:
        raise AccountError("conflict", f"user {user_id!r} already exists")
    user = User(id=user_id, tenant_id=tenant, role=role, display_name=display_name, active=True)
    user.groups = [_group_or_create(session, tenant, g) for g in sorted(set(groups or []))]
    session.add(user)
    session.flush()
    return user


def set_membership(session: Session, tenant: str, group_name: str, user_id: str, member: bool) -> Group:
    group = get_group(session, tenant, group_name)
    user = get_user(session, tenant, user_id)
    if group is None:
        raise AccountError("not_found", f"group {group_name!r} not found")
    if user is None:
        raise AccountError("not_found", f"user {user_id!r} not found")
    if member and group not in user.groups:
        user.groups.append(group)
    elif not member and group in user.groups:
        user.groups.remove(group)
    session.flush()
    return group


def update_user(
    session: Session, tenant: str, user_id: str, *, role: str | None = None, display_name: str | None = None,
    groups: list[str] | None = None, active: bool | None = None,
) -> User:
    """Change a user's role, display name, groups (replaced whole; new groups are created) or active state."""
    user = get_user(session, tenant, user_id)
    if user is None:
        raise AccountError("not_found", f"user {user_id!r} not found")
    if role is not None:
        if role not in ROLES:
            raise AccountError("invalid_role", f"role must be one of {', '.join(ROLES)}")
        user.role = role
    if display_name is not None:
        user.display_name = display_name
    if groups is not None:
        user.groups = [_group_or_create(session, tenant, check_name("group", g)) for g in sorted(set(groups))]
    if active is not None:
        user.active = active
    session.flush()
    return user


def deactivate_user(session: Session, tenant: str, user_id: str) -> User:
    """Deactivated users keep their history (traces name them) but every key of theirs stops working."""
    user = get_user(session, tenant, user_id)
    if user is None:
        raise AccountError("not_found", f"user {user_id!r} not found")
    user.active = False
    session.flush()
    return user
