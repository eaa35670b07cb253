"""Admin endpoints for the sources of the admin's own tenant: define, list, status, sync now, remove.

A sync started here runs after the response (202) on the server's runtime; its progress and outcome are the
source's status. Local paths and hosts an admin may name are narrower than the CLI's
(`docqa.sources.definitions.check_remote_definition`).
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any, Literal

from fastapi import APIRouter, BackgroundTasks, status
from pydantic import BaseModel, ConfigDict, Field

from docqa.server.api_errors import COMMON_ERROR_RESPONSES, ApiError
from docqa.server.auth import AdminCaller, ContextDep
from docqa.sources.definitions import check_remote_definition, define_source, list_sources, source_status
from docqa.sources.locking import SourceBusyError
from docqa.sources.scheduler import remove_source
from docqa.sources.sync import sync_source

router = APIRouter(prefix="/v1/admin/sources", tags=["sources"], responses=COMMON_ERROR_RESPONSES)


class SourceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9_-]*$")
    type: Literal["folder", "git", "imap", "website"]
    path: str | None = Field(default=None, max_length=4096)
    url: str | None = Field(default=None, max_length=4096)
    branch: str | None = Field(default=None, max_length=255)
    host: str | None = Field(default=None, max_length=255)
    port: int | None = Field(default=None, ge=1, le=65535)
    user: str | None = Field(default=None, max_length=255)
    password_env: str | None = Field(default=None, max_length=128)
    folders: list[str] | None = Field(default=None, max_length=100)
    tls: bool | None = None
    posix_groups: bool | None = None
    max_pages: int | None = Field(default=None, ge=1, le=100_000)
    max_depth: int | None = Field(default=None, ge=1, le=50)
    max_page_bytes: int | None = Field(default=None, ge=1000)
    max_seconds: int | None = Field(default=None, ge=1, le=86_400)
    allow: list[str] = Field(default_factory=list, max_length=100)
    acl_map: str | None = Field(default=None, max_length=4096)
    collection: str | None = Field(default=None, max_length=64)
    every: str | None = Field(default=None, max_length=32)


_CONFIG_FIELDS = ("path", "url", "branch", "host", "port", "user", "password_env", "folders", "tls",
                  "posix_groups", "max_pages", "max_depth", "max_page_bytes", "max_seconds")


@router.get("", summary="The tenant's sources with their last run, counts, next run and last error")
def get_sources(caller: AdminCaller, context: ContextDep) -> list[dict[str, Any]]:
    return list_sources(context.settings, tenant=caller.tenant)


@router.post("", status_code=status.HTTP_201_CREATED, summary="Define a source (synced at its first run)")
def create_source(body: SourceIn, caller: AdminCaller, context: ContextDep) -> dict[str, Any]:
    config = {key: getattr(body, key) for key in _CONFIG_FIELDS}
    config = check_remote_definition(context.settings, body.type, config, body.acl_map)
    return define_source(context.settings, name=body.name, type=body.type, tenant=caller.tenant, config=config,
                         allow=body.allow, acl_map=body.acl_map, collection=body.collection, every=body.every,
                         created_by=f"user:{caller.user_id}")


@router.get("/{name}", summary="One source's status, with the items that failed and why")
def get_source(name: str, caller: AdminCaller, context: ContextDep) -> dict[str, Any]:
    return source_status(context.settings, caller.tenant, name)


@router.post("/{name}/sync", status_code=status.HTTP_202_ACCEPTED, summary="Sync a source now")
def start_sync(name: str, caller: AdminCaller, context: ContextDep, background: BackgroundTasks) -> dict[str, Any]:
    view = source_status(context.settings, caller.tenant, name)
    if view["running"]:
        raise ApiError(409, SourceBusyError.code, f"source {name!r} is being synced")

    def run() -> None:
        # A scheduled run that started meanwhile is the sync asked for.
        with suppress(SourceBusyError):
            sync_source(context.settings, tenant=caller.tenant, name=name, actor=f"user:{caller.user_id}",
                        runtime=context.runtime)

    background.add_task(run)
    return {"name": name, "status": "started"}


@router.delete("/{name}", summary="Remove a source, and its documents unless keep_documents")
def delete_source(name: str, caller: AdminCaller, context: ContextDep, keep_documents: bool = False
                  ) -> dict[str, Any]:
    deleted = remove_source(context.settings, caller.tenant, name, actor=f"user:{caller.user_id}",
                            keep_documents=keep_documents, runtime=context.runtime)
    return {"name": name, "removed": True, "documents_deleted": deleted}
