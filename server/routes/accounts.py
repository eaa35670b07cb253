"""Admin endpoints for users, groups and API keys of the admin's own tenant (others' are 404)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, status
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from docqa.accounts import directory, keys
from docqa.accounts.directory import AccountError
from docqa.accounts.identity import Caller
from docqa.accounts.models import ApiKey, Group, User
from docqa.audit import events
from docqa.audit.events import append_event
from docqa.audit.recorder import audit_session
from docqa.server.api_errors import COMMON_ERROR_RESPONSES, ApiError
from docqa.server.auth import AdminCaller, ContextDep, RequestId
from docqa.settings import Settings

router = APIRouter(prefix="/v1/admin", tags=["admin"], responses=COMMON_ERROR_RESPONSES)

Role = Literal["user", "admin", "auditor"]
Name = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._@-]*$")


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Name
    role: Role = "user"
    groups: list[str] = Field(default_factory=list, max_length=100)
    display_name: str = Field(default="", max_length=200)


class UserOut(BaseModel):
    id: str
    tenant: str
    role: str
    groups: list[str]
    display_name: str
    active: bool


class GroupIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Name


class GroupOut(BaseModel):
    name: str
    members: list[str]


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    user_id: str = Name
    name: str = Field(default="", max_length=200)


class KeyOut(BaseModel):
    id: str
    user_id: str
    name: str
    created_at: datetime
    revoked: bool


class CreatedKey(KeyOut):
    key: str = Field(description="The secret key; shown only in this response.")


_STATUS = {"not_found": 404, "conflict": 409}


def _fail(error: AccountError) -> ApiError:
    return ApiError(_STATUS.get(error.code, 422), error.code, error.message)


@dataclass(frozen=True)
class _AccountChange:
    session: Session
    settings: Settings
    caller: Caller
    request_id: str

    def record(self, action: str, target: str, **diff: Any) -> None:
        """Stage the change's audit event (`before`/`after`) in its transaction, as the calling admin."""
        append_event(self.session, self.settings, tenant=self.caller.tenant, actor=self.caller.user_id,
                     action=action, target=target, request_id=self.request_id, **diff)


@contextmanager
def _account_change(context: ContextDep, caller: AdminCaller, request_id: str) -> Iterator[_AccountChange]:
    """One account change and its audit event commit together (or neither does); a refused change is its 4xx."""
    try:
        with audit_session(context.settings) as session:
            yield _AccountChange(session, context.settings, caller, request_id)
    except AccountError as exc:
        raise _fail(exc) from exc


def _user_out(user: User) -> UserOut:
    return UserOut(id=user.id, tenant=user.tenant_id, role=user.role, groups=sorted(g.name for g in user.groups),
                   display_name=user.display_name, active=user.active)


def _group_out(group: Group) -> GroupOut:
    return GroupOut(name=group.name, members=sorted(u.id for u in group.members))


def _key_out(row: ApiKey) -> KeyOut:
    return KeyOut(id=row.id, user_id=row.user_id, name=row.name, created_at=row.created_at,
                  revoked=row.revoked_at is not None)


@router.get("/users", response_model=list[UserOut])
def list_users(caller: AdminCaller, context: ContextDep) -> list[UserOut]:
    with context.sessions() as session:
        return [_user_out(u) for u in directory.list_users(session, caller.tenant)]


@router.post("/users", response_model=UserOut, status_code=status.HTTP_201_CREATED,
             responses={409: COMMON_ERROR_RESPONSES[404] | {"description": "Already exists"}})
def create_user(body: UserIn, caller: AdminCaller, context: ContextDep, request_id: RequestId) -> UserOut:
    with _account_change(context, caller, request_id) as change:
        user = directory.create_user(change.session, caller.tenant, body.id, body.role, body.groups,
                                     body.display_name)
        out = _user_out(user)
        change.record(events.USER_CREATED, f"user:{out.id}",
                      after={"role": out.role, "groups": out.groups, "active": True, "display_name": out.display_name})
    return out


class UserChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Role | None = None
    groups: list[str] | None = Field(default=None, max_length=100)
    display_name: str | None = Field(default=None, max_length=200)
    active: bool | None = None


def _state(out: UserOut) -> dict[str, object]:
    return {"role": out.role, "groups": out.groups, "display_name": out.display_name, "active": out.active}


@router.patch("/users/{user_id}", response_model=UserOut, summary="Change a user's role, groups, name or state")
def change_user(user_id: str, body: UserChange, caller: AdminCaller, context: ContextDep,
                request_id: RequestId) -> UserOut:
    with _account_change(context, caller, request_id) as change:
        existing = directory.get_user(change.session, caller.tenant, user_id)
        before = None if existing is None else _state(_user_out(existing))
        user = directory.update_user(change.session, caller.tenant, user_id, role=body.role, groups=body.groups,
                                     display_name=body.display_name, active=body.active)
        out = _user_out(user)
        after = _state(out)
        if before != after:  # only what changed is an event; a no-op records nothing
            changed = sorted(k for k in after if before is None or before[k] != after[k])
            change.record(events.USER_CHANGED, f"user:{out.id}",
                          before={k: before[k] for k in changed} if before else None,
                          after={k: after[k] for k in changed})
    return out


@router.delete("/users/{user_id}", response_model=UserOut, summary="Deactivate a user (all their keys stop)")
def deactivate_user(user_id: str, caller: AdminCaller, context: ContextDep, request_id: RequestId) -> UserOut:
    with _account_change(context, caller, request_id) as change:
        existing = directory.get_user(change.session, caller.tenant, user_id)
        was_active = existing.active if existing is not None else None
        out = _user_out(directory.deactivate_user(change.session, caller.tenant, user_id))
        change.record(events.USER_DEACTIVATED, f"user:{out.id}", before={"active": was_active},
                      after={"active": False})
    return out


@router.get("/groups", response_model=list[GroupOut])
def list_groups(caller: AdminCaller, context: ContextDep) -> list[GroupOut]:
    with context.sessions() as session:
        return [_group_out(g) for g in directory.list_groups(session, caller.tenant)]


@router.post("/groups", response_model=GroupOut, status_code=status.HTTP_201_CREATED,
             responses={409: COMMON_ERROR_RESPONSES[404] | {"description": "Already exists"}})
def create_group(body: GroupIn, caller: AdminCaller, context: ContextDep, request_id: RequestId) -> GroupOut:
    with _account_change(context, caller, request_id) as change:
        out = _group_out(directory.create_group(change.session, caller.tenant, body.name))
        change.record(events.GROUP_CREATED, f"group:{out.name}", after={"members": out.members})
    return out


@router.put("/groups/{group}/members/{user_id}", response_model=GroupOut, summary="Add a user to a group")
def add_member(group: str, user_id: str, caller: AdminCaller, context: ContextDep, request_id: RequestId) -> GroupOut:
    return _membership(context, caller, group, user_id, True, request_id)


@router.delete("/groups/{group}/members/{user_id}", response_model=GroupOut, summary="Remove a user from a group")
def remove_member(group: str, user_id: str, caller: AdminCaller, context: ContextDep,
                  request_id: RequestId) -> GroupOut:
    return _membership(context, caller, group, user_id, False, request_id)


def _membership(context: ContextDep, caller: AdminCaller, group: str, user_id: str, member: bool,
                request_id: str) -> GroupOut:
    with _account_change(context, caller, request_id) as change:
        existing = directory.get_group(change.session, caller.tenant, group)
        before = None if existing is None else sorted(u.id for u in existing.members)
        out = _group_out(directory.set_membership(change.session, caller.tenant, group, user_id, member))
        if before != out.members:  # adding a member twice changes nothing and records nothing
            change.record(events.GROUP_MEMBER_ADDED if member else events.GROUP_MEMBER_REMOVED, f"group:{out.name}",
                          before={"members": before}, after={"members": out.members, "user": user_id})
    return out


@router.get("/keys", response_model=list[KeyOut])
def list_keys(caller: AdminCaller, context: ContextDep) -> list[KeyOut]:
    with context.sessions() as session:
        return [_key_out(k) for k in keys.list_keys(session, caller.tenant)]


@router.post("/keys", response_model=CreatedKey, status_code=status.HTTP_201_CREATED,
             responses={409: COMMON_ERROR_RESPONSES[404] | {"description": "User deactivated"}})
def create_key(body: KeyIn, caller: AdminCaller, context: ContextDep, request_id: RequestId) -> CreatedKey:
    with _account_change(context, caller, request_id) as change:
        secret, row = keys.create_key(change.session, caller.tenant, body.user_id, body.name)
        out = CreatedKey(key=secret, **_key_out(row).model_dump())
        # The key id only: the secret is never part of an event.
        change.record(events.KEY_ISSUED, f"key:{out.id}", after={"user": out.user_id, "name": out.name})
    return out


@router.delete("/keys/{key_id}", response_model=KeyOut, summary="Revoke a key")
def revoke_key(key_id: str, caller: AdminCaller, context: ContextDep, request_id: RequestId) -> KeyOut:
    with _account_change(context, caller, request_id) as change:
        existing = change.session.get(ApiKey, key_id)
        was_revoked = None if existing is None else existing.revoked_at is not None
        out = _key_out(keys.revoke_key(change.session, caller.tenant, key_id))
        if not was_revoked:
            change.record(events.KEY_REVOKED, f"key:{out.id}", before={"revoked": False},
                          after={"revoked": True, "user": out.user_id})
    return out
