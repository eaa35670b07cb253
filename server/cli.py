"""`docqa serve`, `docqa users ...` and `docqa keys ...`: registered by `docqa.cli` through
`add_server_commands(subparsers)`; each handler is `handler(args, settings) -> exit code`.

Bootstrap a deployment:
    docqa users create root --tenant acme --role admin --with-key   # prints the admin's API key once
    docqa serve --workers 2
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from docqa.accounts.models import ROLES
from docqa.errors import DocqaError
from docqa.settings import Settings


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    """Replace this process with gunicorn; address and workers pass through `DOCQA_SERVER_*` variables."""
    env = dict(os.environ)
    for name in ("host", "port", "workers"):
        value = getattr(args, name)
        if value is not None:
            env[f"DOCQA_SERVER_{name.upper()}"] = str(value)
    command = [sys.executable, "-m", "gunicorn", "-c", "python:docqa.server.gunicorn_conf",
               "docqa.server.app:create_app()"]
    os.execvpe(command[0], command, env)
    return 0  # pragma: no cover - execvpe does not return


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here: the MCP SDK loads only for this command.
    from docqa.server.mcp.stdio import cmd_mcp as serve

    return serve(args, settings)


def _session(settings: Settings):  # type: ignore[no-untyped-def]
    from docqa.db import session_factory
    from docqa.schema import upgrade_database

    upgrade_database(settings)
    return session_factory(settings)()


def _account_call(settings: Settings, action, *, audited: bool = False):  # type: ignore[no-untyped-def]
    """Run `action(session)` in one transaction; `audited` changes append their events in that transaction
    (`audit_session`), so a change that fails leaves no event and an event never commits without its change."""
    from docqa.accounts.directory import AccountError
    from docqa.audit.recorder import audit_session

    if not audited:
        with _session(settings) as session:
            try:
                result = action(session)
            except AccountError as exc:
                raise DocqaError(exc.message) from exc
            session.commit()
            return result
    _session(settings).close()  # applies migrations, as the unaudited path does
    try:
        with audit_session(settings) as session:
            return action(session)
    except AccountError as exc:
        raise DocqaError(exc.message) from exc


def _event(session, settings: Settings, tenant: str, action: str, target: str, **fields):  # type: ignore[no-untyped-def]
    from docqa.audit.cli import cli_actor
    from docqa.audit.events import append_event

    append_event(session, settings, tenant=tenant, actor=cli_actor(), action=action, target=target, **fields)


def cmd_users_create(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.accounts import directory
    from docqa.accounts.keys import create_key
    from docqa.audit import events

    tenant = args.tenant or settings.tenant

    def action(session):  # type: ignore[no-untyped-def]
        user = directory.create_user(session, tenant, args.user_id, args.role, args.group or [], args.name or "")
        _event(session, settings, tenant, events.USER_CREATED, f"user:{user.id}",
               after={"role": user.role, "groups": sorted(g.name for g in user.groups), "active": True,
                      "display_name": user.display_name})
        if not args.with_key:
            return user.id, None
        secret, row = create_key(session, tenant, user.id, name="initial")
        _event(session, settings, tenant, events.KEY_ISSUED, f"key:{row.id}", after={"user": user.id, "name": row.name})
        return user.id, secret

    user_id, key = _account_call(settings, action, audited=True)
    print(f"created {args.role} {user_id} in tenant {tenant}")
    if key:
        print(f"api key (shown once): {key}")
    return 0


def cmd_users_list(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.accounts import directory

    tenant = args.tenant or settings.tenant

    def action(session):  # type: ignore[no-untyped-def]
        return [(u.id, u.role, u.active, sorted(g.name for g in u.groups))
                for u in directory.list_users(session, tenant)]

    for user_id, role, active, groups in _account_call(settings, action):
        state = "active" if active else "deactivated"
        print(f"{user_id:24} {role:8} {state:11} {','.join(groups)}")
    return 0


def cmd_users_deactivate(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.accounts import directory
    from docqa.audit import events

    tenant = args.tenant or settings.tenant

    def action(session):  # type: ignore[no-untyped-def]
        existing = directory.get_user(session, tenant, args.user_id)
        was_active = existing.active if existing is not None else None
        user = directory.deactivate_user(session, tenant, args.user_id)
        _event(session, settings, tenant, events.USER_DEACTIVATED, f"user:{user.id}",
               before={"active": was_active}, after={"active": False})

    _account_call(settings, action, audited=True)
    print(f"deactivated {args.user_id}")
    return 0


def cmd_keys_create(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.accounts.keys import create_key
    from docqa.audit import events

    tenant = args.tenant or settings.tenant

    def action(session):  # type: ignore[no-untyped-def]
        secret, row = create_key(session, tenant, args.user_id, args.name or "")
        # The key id only: the secret is never part of an event.
        _event(session, settings, tenant, events.KEY_ISSUED, f"key:{row.id}",
               after={"user": row.user_id, "name": row.name})
        return secret

    print(_account_call(settings, action, audited=True))
    return 0


def cmd_keys_list(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.accounts.keys import list_keys

    tenant = args.tenant or settings.tenant

    def action(session):  # type: ignore[no-untyped-def]
        return [(k.id, k.user_id, k.name, k.revoked_at is not None) for k in list_keys(session, tenant)]

    for key_id, user_id, name, revoked in _account_call(settings, action):
        print(f"{key_id}  {user_id:24} {'revoked' if revoked else 'active':8} {name}")
    return 0


def cmd_keys_revoke(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.accounts.keys import revoke_key
    from docqa.accounts.models import ApiKey
    from docqa.audit import events

    tenant = args.tenant or settings.tenant

    def action(session):  # type: ignore[no-untyped-def]
        existing = session.get(ApiKey, args.key_id)
        was_revoked = None if existing is None else existing.revoked_at is not None
        row = revoke_key(session, tenant, args.key_id)
        if not was_revoked:  # revoking twice changes nothing and records nothing
            _event(session, settings, tenant, events.KEY_REVOKED, f"key:{row.id}",
                   before={"revoked": False}, after={"revoked": True, "user": row.user_id})

    _account_call(settings, action, audited=True)
    print(f"revoked {args.key_id}")
    return 0


def _command(group: argparse._SubParsersAction, name: str, handler: Callable[..., int],
             summary: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = group.add_parser(name, help=summary)
    parser.set_defaults(handler=handler)
    return parser


def add_server_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the HTTP API under gunicorn with uvicorn workers")
    p.add_argument("--host", help="listen address (default: DOCQA_SERVER_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default: DOCQA_SERVER_PORT or 8000)")
    p.add_argument("--workers", type=int, help="worker processes (default: DOCQA_SERVER_WORKERS or 2)")
    p.set_defaults(handler=cmd_serve)

    p = sub.add_parser("mcp", help="serve the MCP tools (ask, search, read_passage, list_strategies) on stdio as "
                       "one docqa user, for a desktop assistant")
    p.add_argument("--principal", required=True,
                   help="the docqa user to ask as ('alice' or 'user:alice'): their tenant, groups and audit trail")
    p.add_argument("--tenant", help="the user's tenant (default: DOCQA_TENANT)")
    p.set_defaults(handler=cmd_mcp)

    users = sub.add_parser("users", help="manage API users").add_subparsers(dest="users_command", required=True)
    p = _command(users, "create", cmd_users_create, "create a user (and its tenant and groups)")
    p.add_argument("user_id")
    p.add_argument("--role", choices=ROLES, default="user")
    p.add_argument("--group", action="append", help="group membership (repeatable)")
    p.add_argument("--name", help="display name")
    p.add_argument("--with-key", action="store_true", dest="with_key", help="also create and print an API key")
    _command(users, "list", cmd_users_list, "list the users of a tenant")
    _command(users, "deactivate", cmd_users_deactivate, "deactivate a user; their keys stop working").add_argument(
        "user_id")

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_command", required=True)
    p = _command(keys, "create", cmd_keys_create, "create an API key for a user and print it (shown once)")
    p.add_argument("user_id")
    p.add_argument("--name", help="what the key is for")
    _command(keys, "list", cmd_keys_list, "list the keys of a tenant (never their secrets)")
    _command(keys, "revoke", cmd_keys_revoke, "revoke a key").add_argument("key_id")

    for parser in (*users.choices.values(), *keys.choices.values()):
        parser.add_argument("--tenant", help="tenant (default: DOCQA_TENANT)")
