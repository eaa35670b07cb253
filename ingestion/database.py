"""Sessions for the ingestion tables, creating the embedded SQLite schema on first use.

A configured database (`DOCQA_DATABASE_URL`) is migrated by `docqa db upgrade`; the embedded default needs no
setup step, so the first session runs the Alembic migrations under a file lock (several processes may race).
"""

from __future__ import annotations

from sqlalchemy.orm import sessionmaker

from docqa.db import session_factory
from docqa.schema import ensure_embedded_schema
from docqa.settings import Settings


def job_sessions(settings: Settings) -> sessionmaker:
    if settings.database_url is None:
        ensure_embedded_schema(settings)
    return session_factory(settings)

