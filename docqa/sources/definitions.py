"""Source definitions: validated, stored and read back from the `sources` table.

A definition names its type and that type's settings; credentials are never stored, only the name of the
environment variable that holds them (`password_env`). Validation happens here, so the CLI, the admin API and
the web UI refuse the same bad input with the same reason.

Usage:
    define_source(settings, name="handbook", type="folder", tenant="acme", config={"path": "/srv/handbook"},
                  allow=["group:staff"], every="15m")
    [view["name"] for view in list_sources(settings, tenant="acme")]
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from docqa.access import DEFAULT_COLLECTION, validate_access_meta
from docqa.audit.timestamps import as_utc
from docqa.errors import DocqaError
from docqa.ingestion.database import job_sessions
from docqa.ingestion.pipeline import check_collection_name
from docqa.settings import Settings
from docqa.sources.models import SourceEntry, SyncSource

SOURCE_TYPES = ("folder", "git", "imap", "website")
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
_EVERY = re.compile(r"(\d+)\s*([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_BRANCH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,254}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Website bounds when the definition gives none: a sync reads at most this much of a site.
WEBSITE_DEFAULTS = {"max_pages": 500, "max_depth": 5, "max_page_bytes": 5_000_000, "max_seconds": 600}


class InvalidSourceError(DocqaError):
    code = "invalid_source"
    http_status = 422


class SourceNotFoundError(DocqaError):
    code = "source_not_found"
    http_status = 404


class SourceExistsError(DocqaError):
    code = "source_exists"
    http_status = 409


def parse_every(text: str | None) -> int | None:
    """`15m`, `2h`, `1d`, `90s` (or a sum such as `1h30m`) as seconds; None or empty for no schedule."""
    if not text:
        return None
    compact = text.strip().lower().replace(" ", "")
    parts = _EVERY.findall(compact)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != compact:
        raise InvalidSourceError(f"invalid schedule {text!r}: use a duration such as 90s, 15m, 2h or 1d")
    seconds = sum(int(n) * _UNIT_S[u] for n, u in parts)
    if seconds < 60:
        raise InvalidSourceError(f"invalid schedule {text!r}: a source is synced at most once a minute")
    return seconds


def check_config(source_type: str, config: dict[str, Any]) -> dict[str, Any]:
    """The type's settings, checked and normalised; raises `InvalidSourceError` naming what is wrong."""
    if source_type not in SOURCE_TYPES:
        raise InvalidSourceError(f"unknown source type {source_type!r}: use one of {', '.join(SOURCE_TYPES)}")
    given = {key: value for key, value in config.items() if value not in (None, "", [], ())}
    allowed = {
        "folder": {"path", "posix_groups"},
        "git": {"url", "branch"},
        "imap": {"host", "port", "user", "password_env", "folders", "tls"},
        "website": {"url", "public_only", *WEBSITE_DEFAULTS},
    }[source_type]
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise InvalidSourceError(f"a {source_type} source has no setting {', '.join(unknown)}")
    if source_type == "folder":
        if not given.get("path"):
            raise InvalidSourceError("a folder source needs --path")
        given["path"] = str(Path(given["path"]).expanduser().absolute())
        given["posix_groups"] = bool(given.get("posix_groups", False))
    elif source_type == "git":
        if not given.get("url"):
            raise InvalidSourceError("a git source needs --url (a repository URL or path)")
        given["branch"] = given.get("branch") or "main"
        if given["branch"].startswith("-") or given["url"].startswith("-"):
            raise InvalidSourceError("a git URL or branch cannot start with '-'")
        # The branch also goes into a refspec: nothing that could name another ref or side of it.
        if not _BRANCH.fullmatch(given["branch"]) or ".." in given["branch"]:
            raise InvalidSourceError(f"invalid branch name {given['branch']!r}")
    elif source_type == "website":
        parts = urlsplit(str(given.get("url") or ""))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidSourceError("a website source needs --url, an http(s) URL with a host")
        for key, default in WEBSITE_DEFAULTS.items():
            value = int(given.get(key, default))
            if value < 1:
                raise InvalidSourceError(f"{key} must be at least 1")
            given[key] = value
    elif source_type == "imap":
        for key in ("host", "user", "password_env"):
            if not given.get(key):
                raise InvalidSourceError(f"an imap source needs --{key.replace('_', '-')}")
        if not _ENV_NAME.fullmatch(given["password_env"]):
            raise InvalidSourceError("--password-env names an environment variable (letters, digits, '_')")
        given["folders"] = list(given.get("folders") or ["INBOX"])
        given["tls"] = bool(given.get("tls", True))
        given["port"] = int(given.get("port") or (993 if given["tls"] else 143))
    return given


def define_source(
    settings: Settings,
    *,
    name: str,
    type: str,
    tenant: str,
    config: dict[str, Any],
    allow: list[str],
    acl_map: str | None = None,
    collection: str | None = None,
    every: str | None = None,
    created_by: str | None = None,
) -> dict[str, Any]:
    """Store a new source definition; returns its view (`source_view`)."""
    if not _NAME.fullmatch(name or ""):
        raise InvalidSourceError(f"invalid source name {name!r}: use 1-64 lower-case letters, digits, '_' or '-'")
    config = check_config(type, config)
    principals = sorted(set(allow))
    if type == "imap":
        principals = sorted(set(principals) | {f"user:{config['user']}"})
    if not principals and not acl_map:
        raise InvalidSourceError("a source needs --allow principals or an --acl-map")
    if principals:
        try:
            validate_access_meta({"tenant": tenant, "access": principals})
        except ValueError as exc:
            raise InvalidSourceError(str(exc)) from exc
    if acl_map:
        from docqa.sources.acl import AclMap

        acl_map = str(Path(acl_map).expanduser().absolute())
        AclMap.load(acl_map)  # refuses a missing or malformed map now rather than at the first sync
    try:
        collection = check_collection_name(collection or DEFAULT_COLLECTION)
    except DocqaError as exc:
        raise InvalidSourceError(exc.message) from exc
    every_s = parse_every(every)
    from docqa.audit.events import SOURCE_DEFINED, append_event
    from docqa.audit.recorder import audit_session

    # The definition and its audit event commit together: who may read what the source brings in starts here.
    with audit_session(settings) as session:
        if _find(session, tenant, name) is not None:
            raise SourceExistsError(f"a source named {name!r} already exists in tenant {tenant!r}")
        row = SyncSource(tenant=tenant, name=name, type=type, config=config, allow=principals, acl_map=acl_map,
                         collection=collection, every_s=every_s, created_by=created_by, last_counts={},
                         next_run_at=datetime.now(UTC) if every_s else None)
        session.add(row)
        session.flush()
        append_event(session, settings, tenant=tenant, actor=created_by or "system", action=SOURCE_DEFINED,
                     target=f"source:{name}", before=None, after=audited_definition(row))
        return source_view(row, entries=0)


def get_source(session: Session, tenant: str, name: str) -> SyncSource:
    row = _find(session, tenant, name)
    if row is None:
        raise SourceNotFoundError(f"no source named {name!r} in tenant {tenant!r}")
    return row


# The entries whose document docqa holds: a file that failed every time it was read (or is still on the queue
# for the first time) has no stored copy, and is not counted among the source's documents.
_HELD = SourceEntry.fingerprint.is_not(None)


def list_sources(settings: Settings, tenant: str | None = None) -> list[dict[str, Any]]:
    """Every source (of one tenant, or all), with its last run and its document count."""
    from sqlalchemy import func

    with job_sessions(settings)() as session:
        query = select(SyncSource).order_by(SyncSource.tenant, SyncSource.name)
        if tenant is not None:
            query = query.where(SyncSource.tenant == tenant)
        rows = session.scalars(query).all()
        counts = dict(session.execute(
            select(SourceEntry.source_pk, func.count()).where(_HELD).group_by(SourceEntry.source_pk)).all())
        return [source_view(row, entries=counts.get(row.id, 0)) for row in rows]


def source_status(settings: Settings, tenant: str, name: str) -> dict[str, Any]:
    from sqlalchemy import func

    with job_sessions(settings)() as session:
        row = get_source(session, tenant, name)
        entries = session.scalar(select(func.count()).where(SourceEntry.source_pk == row.id, _HELD)) or 0
        failed = session.execute(
            select(SourceEntry.key, SourceEntry.reason)
            .where(SourceEntry.source_pk == row.id, SourceEntry.status == "failed")
            .order_by(SourceEntry.key).limit(100)).all()
        view = source_view(row, entries=entries)
        view["failures"] = [{"key": key, "reason": reason} for key, reason in failed]
        return view


def audited_definition(row: SyncSource) -> dict[str, Any]:
    """What a `source.defined` or `source.removed` event records of a definition: its type, settings (only the
    names of credential variables, never a secret), and the access its documents get (`access`, or the map)."""
    return {"type": row.type, "config": dict(row.config or {}), "access": sorted(row.allow or []),
            "acl_map": row.acl_map, "collection": row.collection, "every_s": row.every_s}


def source_view(row: SyncSource, *, entries: int) -> dict[str, Any]:
    """What the CLI, the admin API and the web UI show of a source (never a secret: only env var names)."""

    def when(value: datetime | None) -> str | None:
        return None if value is None else as_utc(value).isoformat().replace("+00:00", "Z")

    return {
        "name": row.name,
        "tenant": row.tenant,
        "type": row.type,
        "config": dict(row.config or {}),
        "allow": list(row.allow or []),
        "acl_map": row.acl_map,
        "collection": row.collection,
        "every_s": row.every_s,
        "documents": entries,
        "last_status": row.last_status,
        "last_started_at": when(row.last_started_at),
        "last_finished_at": when(row.last_finished_at),
        "last_counts": dict(row.last_counts or {}),
        "last_error": row.last_error,
        "next_run_at": when(row.next_run_at),
        "running": row.lock_owner is not None and row.lock_until is not None
        and as_utc(row.lock_until) > datetime.now(UTC),
    }


def next_run(row: SyncSource, started: datetime) -> datetime | None:
    return None if not row.every_s else started + timedelta(seconds=row.every_s)


def secret_from_env(variable: str) -> str:
    """A credential from the environment variable the definition names (never from the database)."""
    value = os.environ.get(variable)
    if not value:
        raise DocqaError(f"environment variable {variable} (the source's credential) is not set")
    return value


def _find(session: Session, tenant: str, name: str) -> SyncSource | None:
    return session.scalars(select(SyncSource).where(SyncSource.tenant == tenant, SyncSource.name == name)).first()


def check_remote_definition(settings: Settings, source_type: str, config: dict[str, Any],
                            acl_map: str | None) -> dict[str, Any]:
    """What an admin may name through the HTTP API, beyond what the CLI's operator may: local paths (folders,
    repositories, ACL maps) only under `DOCQA_SOURCES_ROOTS`, and hosts only on public addresses unless
    `DOCQA_WEB_FETCH_ALLOW_PRIVATE` (so a tenant's admin cannot make the server read its own files or network).
    Returns the checked settings; raises `InvalidSourceError` naming what is refused."""
    config = check_config(source_type, config)
    local: list[str] = [acl_map] if acl_map else []
    hosts: list[str] = []
    if source_type == "folder":
        local.append(config["path"])
    elif source_type == "git":
        url = config["url"]
        parts = urlsplit(url)
        if parts.scheme == "file":
            local.append(parts.path)
        elif parts.scheme in ("http", "https", "ssh", "git"):
            hosts.append(parts.hostname or "")
        elif re.fullmatch(r"[\w.-]+@[\w.-]+:.*", url):  # scp-like ssh
            hosts.append(url.split("@", 1)[1].split(":", 1)[0])
        else:
            local.append(url)
    elif source_type == "website":
        hosts.append(urlsplit(config["url"]).hostname or "")
    elif source_type == "imap":
        hosts.append(config["host"])
    roots = [Path(root).resolve() for root in settings.sources_roots.split(os.pathsep) if root.strip()]
    for path in local:
        resolved = Path(path).expanduser().resolve()
        if not any(resolved == root or root in resolved.parents for root in roots):
            raise InvalidSourceError(f"{path} is not under a directory the API may name (DOCQA_SOURCES_ROOTS)")
    if not settings.web_fetch_allow_private:
        for host in hosts:
            check_public_host(host)
        if source_type == "website":  # checked again at every request of every sync (names can move)
            config["public_only"] = True
    return config


def check_public_host(host: str) -> None:
    import ipaddress
    import socket

    from docqa.components.web_page_reader import is_public_address

    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidSourceError(f"cannot resolve {host}") from exc
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if not is_public_address(address):
            raise InvalidSourceError(f"{host} resolves to a non-public address ({address}); the API may name it "
                                     "only with DOCQA_WEB_FETCH_ALLOW_PRIVATE")
