"""The web UI: static HTML, CSS and JavaScript modules under `/ui/`, and `/` redirecting there.

No build step and nothing fetched from elsewhere (air-gapped sites). The API key lives in the browser's
sessionStorage and travels only in the Authorization header of API calls, so these routes need no auth.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response
from starlette.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"

# Defence in depth behind rendering all data with textContent: no inline script, nothing from other origins.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # A redeployed server must not run next to stale modules cached from the previous version.
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)
_files = StaticFiles(directory=STATIC_DIR, html=True, check_dir=False)


@router.get("/")
def root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui")
def ui_without_slash() -> RedirectResponse:
    # Module imports resolve relative to the page; without the slash they would miss /ui/.
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui/{path:path}")
async def ui_file(path: str, request: Request) -> Response:
    """A file of the UI; StaticFiles refuses paths leaving the directory and answers 404 for unknown ones."""
    response = await _files.get_response(path, request.scope)
    response.headers.update(SECURITY_HEADERS)
    return response
