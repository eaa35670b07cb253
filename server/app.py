"""The FastAPI application factory, served by gunicorn with uvicorn workers.

    gunicorn -c python:docqa.server.gunicorn_conf 'docqa.server.app:create_app()'

or `docqa serve`. Tests build the app in-process: `create_app(settings, runtime=Runtime(settings, ...))`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from docqa.accounts.oidc import build_token_verifier
from docqa.audit.scrub import scrub_log_records
from docqa.db import session_factory
from docqa.errors import DocqaError
from docqa.runtime import Runtime
from docqa.server.api_errors import STATUS_CODES, ApiError, error_body
from docqa.server.config import server_settings
from docqa.server.context import ServerContext
from docqa.server.limits import BodySizeLimitMiddleware, QuerySlots, build_rate_limiter
from docqa.server.mcp.app import McpHttp
from docqa.server.routes import (
    accounts,
    audit_events,
    conversations,
    documents,
    feedback,
    health,
    me,
    openai_compat,
    passages,
    query,
    sources,
    traces,
    ui,
)
from docqa.server.shutdown import cancel_runs_on_signals
from docqa.server.url_guard import RejectNulMiddleware
from docqa.settings import Settings
from docqa.step_tracer import enable_step_tracing

logger = logging.getLogger(__name__)

UPLOAD_PREFIXES = ("/v1/documents", "/v1/records")


def create_app(settings: Settings | None = None, *, runtime: Runtime | None = None) -> FastAPI:
    """Build the app. `settings` defaults to the environment; `runtime` to one built from the settings."""
    config = server_settings(settings)
    scrub_log_records()
    enable_step_tracing(config)
    from docqa.pipelines.yaml_strategies import load_pipelines_dir

    # Invalid strategy files are logged (naming the file) and skipped; the server starts with the others.
    load_pipelines_dir(config)
    _record_answer_config(config)
    _close_interrupted_runs(config)
    context = ServerContext(
        settings=config,
        runtime=runtime or Runtime(config),
        sessions=session_factory(config),
        rate_limiter=build_rate_limiter(
            config.rate_limit_redis_url, config.rate_limit_per_minute, config.rate_limit_burst
        ),
        slots=QuerySlots(config.max_concurrent_queries, config.queue_timeout_s, config.retry_after_s),
        token_verifier=build_token_verifier(config),
    )

    mcp_http = McpHttp(context)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        stop_scheduler = _start_sources_scheduler(config, context.runtime)
        with cancel_runs_on_signals(context):
            async with mcp_http.running():
                yield
        stop_scheduler.set()
        context.close()

    app = FastAPI(
        title="docqa",
        version="0.1.0",
        description="Document question answering with cited answers, audit traces and document-level access "
        "control. Authenticate with `Authorization: Bearer <API key>`.",
        lifespan=lifespan,
    )
    app.state.context = context
    app.add_middleware(
        BodySizeLimitMiddleware,
        json_limit=config.max_json_bytes,
        upload_limit=config.max_upload_bytes,
        upload_prefixes=UPLOAD_PREFIXES,
    )
    app.add_middleware(RejectNulMiddleware)
    _add_error_handlers(app)
    for module in (health, query, openai_compat, accounts, me, documents, passages, traces, feedback,
                   conversations, audit_events, sources, ui):
        app.include_router(module.router)
    # MCP over streamable HTTP, authenticated like the API (docqa.server.mcp).
    app.add_route("/mcp", mcp_http.endpoint, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    return app


def _start_sources_scheduler(config: Settings, runtime: Runtime) -> threading.Event:
    # Due syncs run in every worker's thread; each source's lease in the database lets one of them run it.
    stop = threading.Event()
    if config.sources_scheduler:
        from docqa.sources.scheduler import start_serve_scheduler

        start_serve_scheduler(config, stop, runtime=runtime)
    return stop


def _record_answer_config(config: Settings) -> None:
    """A `config.loaded` audit event when the models or YAML strategies differ from the last recorded ones."""
    from sqlalchemy.exc import OperationalError, ProgrammingError

    from docqa.audit.config_events import record_config_if_changed

    try:
        record_config_if_changed(config)
    except (OperationalError, ProgrammingError) as exc:  # no audit tables yet: `docqa db upgrade` creates them
        logger.error("configuration not recorded in the audit trail (run `docqa db upgrade`): %s", exc)


def _close_interrupted_runs(config: Settings) -> None:
    """Runs left `started` by a worker or server that died (SIGKILL, OOM kill, power loss) get their
    `interrupted` trace now, at start; runs of live processes are left alone."""
    from sqlalchemy.exc import OperationalError, ProgrammingError

    from docqa.audit.recorder import close_interrupted_runs

    try:
        close_interrupted_runs(config)
    except (OperationalError, ProgrammingError) as exc:  # no audit tables yet: `docqa db upgrade` creates them
        logger.error("runs left started were not closed (run `docqa db upgrade`): %s", exc)


def _json_error(status: int, code: str, message: str, headers: dict[str, str] | None = None,
                **extra: Any) -> JSONResponse:
    body = error_body(code, message)
    body["error"].update(extra)
    return JSONResponse(body, status_code=status, headers=headers)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_request: Request, exc: ApiError) -> JSONResponse:
        return _json_error(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(DocqaError)
    async def docqa_error(_request: Request, exc: DocqaError) -> JSONResponse:
        if exc.http_status >= 500:
            logger.warning("%s: %s", exc.code, exc.detail or exc.message)
        headers = {"Retry-After": "5"} if exc.http_status == 503 else None
        return _json_error(exc.http_status, exc.code, exc.message, headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = STATUS_CODES.get(exc.status_code, "http_error")
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        return _json_error(exc.status_code, code, message, dict(exc.headers or {}))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        message = f"{where}: {first.get('msg', 'invalid value')}" if where else "invalid request"
        details = [{"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", ""))} for e in errors[:20]]
        return _json_error(422, "invalid_request", message, details=details)

    @app.exception_handler(Exception)
    async def internal_error(_request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unhandled error", exc_info=exc)
        return _json_error(500, "internal_error", "internal server error; see the server log")
