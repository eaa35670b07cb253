"""Sessions for the ingestion tables, creating the embedded SQLite schema on first use.

A configured database (`DOCQA_DATABASE_URL`) is migrated by `docqa db upgrade`; the embedded default needs no
setup step, so the first session runs the Alembic migrations under a file lock (several processes may race).
"""

from __future__ import annotations

from sqlalchemy.orm import sessionmaker

from docqa.db import session_factory
from docqa.settings import Settings

_migrated: set[str] = set()


def job_sessions(settings: Settings) -> sessionmaker:
    if settings.database_url is None:
        _migrate_embedded(settings)
    return session_factory(settings)


def _migrate_embedded(settings: Settings) -> None:
    url = settings.resolved_database_url()
    if url in _migrated:
        return
    from filelock import FileLock

    from docqa.schema import upgrade_database

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(settings.data_dir / ".migrate.lock")):
        upgrade_database(settings)
    _migrated.add(url)
