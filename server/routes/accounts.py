"""Admin endpoints for users, groups and API keys of the admin's own tenant (others' are 404)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from fastapi import APIRouter, status
from pydantic import BaseModel, ConfigDict, Field

from docqa.server.accounts import directory, keys
from docqa.server.accounts.directory import AccountError
from docqa.server.accounts.models import ApiKey, Group, User
from docqa.server.api_errors import COMMON_ERROR_RESPONSES, ApiError
from docqa.server.auth import AdminCaller, ContextDep

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
def create_user(body: UserIn, caller: AdminCaller, context: ContextDep) -> UserOut:
    with context.sessions() as session:
        try:
            user = directory.create_user(session, caller.tenant, body.id, body.role, body.groups, body.display_name)
        except AccountError as exc:
            raise _fail(exc) from exc
        out = _user_out(user)
        session.commit()
        return out


@router.delete("/users/{user_id}", response_model=UserOut, summary="Deactivate a user (all their keys stop)")
def deactivate_user(user_id: str, caller: AdminCaller, context: ContextDep) -> UserOut:
    with context.sessions() as session:
        try:
            user = directory.deactivate_user(session, caller.tenant, user_id)
        except AccountError as exc:
            raise _fail(exc) from exc
        out = _user_out(user)
        session.commit()
        return out


@router.get("/groups", response_model=list[GroupOut])
def list_groups(caller: AdminCaller, context: ContextDep) -> list[GroupOut]:
    with context.sessions() as session:
        return [_group_out(g) for g in directory.list_groups(session, caller.tenant)]


@router.post("/groups", response_model=GroupOut, status_code=status.HTTP_201_CREATED,
             responses={409: COMMON_ERROR_RESPONSES[404] | {"description": "Already exists"}})
def create_group(body: GroupIn, caller: AdminCaller, context: ContextDep) -> GroupOut:
    with context.sessions() as session:
        try:
            group = directory.create_group(session, caller.tenant, body.name)
        except AccountError as exc:
            raise _fail(exc) from exc
        out = _group_out(group)
        session.commit()
        return out


@router.put("/groups/{group}/members/{user_id}", response_model=GroupOut, summary="Add a user to a group")
def add_member(group: str, user_id: str, caller: AdminCaller, context: ContextDep) -> GroupOut:
    return _membership(context, caller.tenant, group, user_id, member=True)


@router.delete("/groups/{group}/members/{user_id}", response_model=GroupOut, summary="Remove a user from a group")
def remove_member(group: str, user_id: str, caller: AdminCaller, context: ContextDep) -> GroupOut:
    return _membership(context, caller.tenant, group, user_id, member=False)


def _membership(context: ContextDep, tenant: str, group: str, user_id: str, member: bool) -> GroupOut:
    with context.sessions() as session:
        try:
            row = directory.set_membership(session, tenant, group, user_id, member)
        except AccountError as exc:
            raise _fail(exc) from exc
        out = _group_out(row)
        session.commit()
        return out


@router.get("/keys", response_model=list[KeyOut])
def list_keys(caller: AdminCaller, context: ContextDep) -> list[KeyOut]:
    with context.sessions() as session:
        return [_key_out(k) for k in keys.list_keys(session, caller.tenant)]


@router.post("/keys", response_model=CreatedKey, status_code=status.HTTP_201_CREATED,
             responses={409: COMMON_ERROR_RESPONSES[404] | {"description": "User deactivated"}})
def create_key(body: KeyIn, caller: AdminCaller, context: ContextDep) -> CreatedKey:
    with context.sessions() as session:
        try:
            secret, row = keys.create_key(session, caller.tenant, body.user_id, body.name)
        except AccountError as exc:
            raise _fail(exc) from exc
        out = CreatedKey(key=secret, **_key_out(row).model_dump())
        session.commit()
        return out


@router.delete("/keys/{key_id}", response_model=KeyOut, summary="Revoke a key")
def revoke_key(key_id: str, caller: AdminCaller, context: ContextDep) -> KeyOut:
    with context.sessions() as session:
        try:
            row = keys.revoke_key(session, caller.tenant, key_id)
        except AccountError as exc:
            raise _fail(exc) from exc
        out = _key_out(row)
        session.commit()
        return out
