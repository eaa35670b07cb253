"""gunicorn configuration: uvicorn workers, address and worker count from `DOCQA_SERVER_*` settings.

    gunicorn -c python:docqa.server.gunicorn_conf 'docqa.server.app:create_app()'

Each worker builds its own app (no preload): models and clients are loaded after the fork, never shared.
"""

from __future__ import annotations

from typing import Any

from docqa.server.config import ServerSettings

_settings = ServerSettings()

bind = [f"{_settings.server_host}:{_settings.server_port}"]
workers = _settings.server_workers
worker_class = "uvicorn.workers.UvicornWorker"
timeout = _settings.server_worker_timeout_s
graceful_timeout = 30
keepalive = 5
# Recycle workers now and then so slow leaks in native libraries cannot grow without bound.
max_requests = 20_000
max_requests_jitter = 2_000
accesslog = "-"
errorlog = "-"
loglevel = "info"


def on_starting(_server: Any) -> None:
    """Bring the schema up to date once, in the master, before any worker serves (embedded default)."""
    if _settings.server_migrate_on_start:
        from docqa.schema import upgrade_database

        upgrade_database(_settings)
