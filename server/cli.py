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


def _session(settings: Settings):  # type: ignore[no-untyped-def]
    from docqa.db import session_factory
    from docqa.schema import upgrade_database

    upgrade_database(settings)
    return session_factory(settings)()


def _account_call(settings: Settings, action):  # type: ignore[no-untyped-def]
    from docqa.accounts.directory import AccountError

    with _session(settings) as session:
        try:
            result = action(session)
        except AccountError as exc:
            raise DocqaError(exc.message) from exc
        session.commit()
        return result


def cmd_users_create(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.accounts import directory
    from docqa.accounts.keys import create_key

    tenant = args.tenant or settings.tenant

    def action(session):  # type: ignore[no-untyped-def]
        user = directory.create_user(session, tenant, args.user_id, args.role, args.group or [], args.name or "")
        key = create_key(session, tenant, user.id, name="initial")[0] if args.with_key else None
        return user.id, key

    user_id, key = _account_call(settings, action)
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

    tenant = args.tenant or settings.tenant
    _account_call(settings, lambda session: directory.deactivate_user(session, tenant, args.user_id))
    print(f"deactivated {args.user_id}")
    return 0


def cmd_keys_create(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.accounts.keys import create_key

    tenant = args.tenant or settings.tenant
    key = _account_call(settings, lambda session: create_key(session, tenant, args.user_id, args.name or "")[0])
    print(key)
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

    tenant = args.tenant or settings.tenant
    _account_call(settings, lambda session: revoke_key(session, tenant, args.key_id))
    print(f"revoked {args.key_id}")
    return 0


def add_server_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="run the HTTP API under gunicorn with uvicorn workers")
    p.add_argument("--host", help="listen address (default: DOCQA_SERVER_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default: DOCQA_SERVER_PORT or 8000)")
    p.add_argument("--workers", type=int, help="worker processes (default: DOCQA_SERVER_WORKERS or 2)")
    p.set_defaults(handler=cmd_serve)

    users = sub.add_parser("users", help="manage API users").add_subparsers(dest="users_command", required=True)
    p = users.add_parser("create", help="create a user (and its tenant and groups)")
    p.add_argument("user_id")
    p.add_argument("--role", choices=ROLES, default="user")
    p.add_argument("--group", action="append", help="group membership (repeatable)")
    p.add_argument("--name", help="display name")
    p.add_argument("--with-key", action="store_true", dest="with_key", help="also create and print an API key")
    p.set_defaults(handler=cmd_users_create)
    p = users.add_parser("list", help="list the users of a tenant")
    p.set_defaults(handler=cmd_users_list)
    p = users.add_parser("deactivate", help="deactivate a user; their keys stop working")
    p.add_argument("user_id")
    p.set_defaults(handler=cmd_users_deactivate)

    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys_command", required=True)
    p = keys.add_parser("create", help="create an API key for a user and print it (shown once)")
    p.add_argument("user_id")
    p.add_argument("--name", help="what the key is for")
    p.set_defaults(handler=cmd_keys_create)
    p = keys.add_parser("list", help="list the keys of a tenant (never their secrets)")
    p.set_defaults(handler=cmd_keys_list)
    p = keys.add_parser("revoke", help="revoke a key")
    p.add_argument("key_id")
    p.set_defaults(handler=cmd_keys_revoke)

    for parser in (*users.choices.values(), *keys.choices.values()):
        parser.add_argument("--tenant", help="tenant (default: DOCQA_TENANT)")
