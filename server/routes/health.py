"""Liveness and readiness probes (no authentication: load balancers call them)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text

from docqa.server.auth import ContextDep

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The worker process answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="The worker can serve queries: database reachable, pipelines registered",
            responses={503: {"description": "Not ready"}})
def readyz(context: ContextDep) -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        with context.sessions() as session:
            session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        checks["pipelines"] = "ok" if context.pipelines.names() else "error: none registered"
    except Exception as exc:
        checks["pipelines"] = f"error: {type(exc).__name__}"
    ready = all(value == "ok" for value in checks.values())
    return JSONResponse({"status": "ready" if ready else "not_ready", "checks": checks},
                        status_code=200 if ready else 503)
