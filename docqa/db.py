"""SQL database access shared by the audit trail, ingestion jobs and server accounts.

PostgreSQL in production (`DOCQA_DATABASE_URL`), SQLite under the data directory by default. The schema only
changes through Alembic migrations in `migrations/`; `Base.metadata` is what autogenerate compares against.
"""

from __future__ import annotations

from functools import lru_cache

from sqlalchemy import Engine, MetaData, create_engine, event
from sqlalchemy.orm import DeclarativeBase, sessionmaker

from docqa.settings import Settings

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    # WAL lets readers and one writer work at once across processes; foreign keys are off by default in SQLite.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


@lru_cache(maxsize=8)
def _engine_for(url: str) -> Engine:
    return make_engine(url)


def engine_for_settings(settings: Settings) -> Engine:
    url = settings.resolved_database_url()
    if url.startswith("sqlite:///"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    return _engine_for(url)


def session_factory(settings: Settings) -> sessionmaker:
    return sessionmaker(bind=engine_for_settings(settings), expire_on_commit=False)
