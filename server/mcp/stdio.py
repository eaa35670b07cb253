"""`docqa mcp --principal alice`: the MCP tools over stdio, for a desktop assistant that starts docqa itself.

The process runs on the operator's machine with the deployment's settings (its database and document store) and
acts as one docqa user of the accounts database: that user's tenant, groups and role, as if they had signed in
with a key. Runs are audited as theirs; tool calls count against a rate limit of their own (`local:` key id).
stdout carries the protocol; logs go to stderr.

Usage:
    caller = local_caller(config, "alice", tenant="acme")
    serve_stdio(config, caller)
"""

from __future__ import annotations

import argparse
import logging
import os
import signal

import anyio

from docqa.accounts.identity import Caller
from docqa.db import session_factory
from docqa.errors import DocqaError
from docqa.runtime import Runtime
from docqa.server.api_errors import ApiError
from docqa.server.config import ServerSettings, server_settings
from docqa.server.context import ServerContext
from docqa.server.limits import QuerySlots, build_rate_limiter
from docqa.server.mcp.app import build_mcp_server
from docqa.server.mcp.auth_bridge import check_role
from docqa.server.shutdown import WRITE_WAIT_S, stop_runs_now
from docqa.settings import Settings

logger = logging.getLogger(__name__)


def local_caller(config: Settings, principal: str, tenant: str) -> Caller:
    """The active docqa user `principal` names (`alice` or `user:alice`) in `tenant`.

    :raises DocqaError: a group or `everyone` (the audit trail needs one person), an unknown or deactivated user,
        or a role that may not ask (auditors).
    """
    from docqa.accounts import directory

    user_id = principal.removeprefix("user:")
    if not user_id or ":" in user_id or user_id == "everyone":
        raise DocqaError(f"--principal {principal!r}: name one docqa user (e.g. 'alice' or 'user:alice'); "
                         "the questions are asked, and audited, as that user")
    with session_factory(config)() as session:
        user = directory.get_user(session, tenant, user_id)
        if user is None or not user.active:
            raise DocqaError(f"no active docqa user {user_id!r} in tenant {tenant!r} "
                             "(create one with `docqa users create`)")
        caller = Caller.of_user(user, key_id=f"local:{tenant}:{user_id}")
    try:
        check_role(caller)
    except ApiError as exc:
        raise DocqaError(exc.message) from None
    return caller


def build_local_context(config: ServerSettings) -> ServerContext:
    """What a server worker holds (limits, query slots, pipelines), for this one process."""
    from docqa.audit.scrub import scrub_log_records
    from docqa.pipelines.yaml_strategies import load_pipelines_dir
    from docqa.step_tracer import enable_step_tracing

    scrub_log_records()
    enable_step_tracing(config)
    load_pipelines_dir(config)
    return ServerContext(
        settings=config, runtime=Runtime(config), sessions=session_factory(config),
        rate_limiter=build_rate_limiter(config.rate_limit_redis_url, config.rate_limit_per_minute,
                                        config.rate_limit_burst),
        slots=QuerySlots(config.max_concurrent_queries, config.queue_timeout_s, config.retry_after_s),
    )


def serve_stdio(config: ServerSettings, caller: Caller) -> None:
    """Serve MCP on stdin/stdout until the client closes it or sends SIGTERM; runs still going are then traced
    `cancelled`."""
    context = build_local_context(config)

    def caller_of(_ctx: object) -> Caller:
        # No HTTP request to count here: each tool call takes one token of the user's local rate limit.
        context.rate_limiter.check(caller.key_id)
        return caller

    server = build_mcp_server(context, caller_of)

    def exit_now(signum: int, _frame: object) -> None:
        # An assistant ends its server with SIGTERM, often with stdin still open (whose reader thread an orderly
        # exit would wait for): runs in progress are stopped and traced `cancelled`, then the process ends.
        stop_runs_now(context).join(WRITE_WAIT_S)
        os._exit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_now)
    try:
        anyio.run(server.run_stdio_async)
    finally:
        signal.signal(signal.SIGTERM, previous)
        context.close()


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    config = server_settings(settings)
    caller = local_caller(config, args.principal, args.tenant or config.tenant)
    logger.info("serving MCP on stdio as %s in tenant %s", caller.user_id, caller.tenant)
    serve_stdio(config, caller)
    return 0
