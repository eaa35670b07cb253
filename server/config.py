"""Server-only settings, read from the same `DOCQA_*` environment as the core settings.

Usage:
    settings = ServerSettings()            # DOCQA_MAX_CONCURRENT_QUERIES=16 ... from the environment
    settings = server_settings(Settings())  # extend core settings built elsewhere (tests, CLI)
"""

from __future__ import annotations

from pydantic import Field

from docqa.settings import Settings


class ServerSettings(Settings):
    """Limits and listening address of the HTTP server; every field has a `DOCQA_` variable."""

    server_host: str = "127.0.0.1"
    server_port: int = Field(default=8000, ge=1, le=65535)
    server_workers: int = Field(default=2, ge=1, le=64)
    # Worker timeout in gunicorn: a worker silent for longer is restarted. Above the query timeout.
    server_worker_timeout_s: int = Field(default=360, ge=10)
    # Run the Alembic migrations when gunicorn starts; turn off where a separate step migrates (compose).
    server_migrate_on_start: bool = True

    # Request body limits: JSON endpoints stay small; uploads may reach the ingestion file limit.
    max_json_bytes: int = Field(default=256 * 1024, ge=1024)
    max_upload_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)

    # Per API key (token bucket refilled continuously): shared by every worker through Redis when
    # `rate_limit_redis_url` is set, per worker process otherwise.
    rate_limit_per_minute: int = Field(default=600, ge=1)
    rate_limit_burst: int = Field(default=60, ge=1)
    rate_limit_redis_url: str | None = None

    # Failed sign-ins (bad keys or tokens) allowed per window before further failures get 429 with Retry-After:
    # per client address and per key id (0 turns one off), counted in Redis with the rate limit when it is set.
    # A credential that verifies is never refused by these counts (server/signin_throttle.py says why).
    signin_max_failures_per_address: int = Field(default=30, ge=0)
    signin_max_failures_per_key: int = Field(default=10, ge=0)
    signin_failure_window_s: int = Field(default=300, ge=1, le=86_400)

    # OIDC / JWT bearer tokens, accepted beside API keys when an issuer is set. The token's user claim names a
    # docqa user id of the tenant in its tenant claim, else of `tenant`; role and groups come from the directory.
    oidc_issuer: str | None = None
    oidc_audience: str | None = None
    oidc_jwks_url: str | None = None
    oidc_jwks_file: str | None = None
    oidc_user_claim: str = "sub"
    oidc_tenant_claim: str | None = None
    oidc_leeway_s: float = Field(default=30.0, ge=0, le=300)

    # Queries running at once per worker; further queries wait up to `queue_timeout_s`, then get 503.
    max_concurrent_queries: int = Field(default=8, ge=1)
    queue_timeout_s: float = Field(default=10.0, ge=0)
    query_timeout_s: float = Field(default=300.0, gt=0)
    retry_after_s: int = Field(default=2, ge=1)


def server_settings(settings: Settings | None = None) -> ServerSettings:
    """Server settings extending `settings` (its values win; server fields come from the environment)."""
    if settings is None:
        return ServerSettings()
    if isinstance(settings, ServerSettings):
        return settings
    return ServerSettings(**settings.model_dump())
